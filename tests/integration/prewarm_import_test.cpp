// prewarm_import, end to end: the real gateway and real robot-test-worker processes. A prewarmed worker
// imports the library without arguments before any client connects; an import without arguments gets
// that instance (the worker imports nothing more), an import with arguments never does; what the worker
// logs during that import lands in the gateway's log and at no client; a failing import ahead stops the
// worker and backs off as a crash loop does; the pool refills and keeps its caps.
//
// The worker's own counter ('Import Count': robot/import_library requests the process handled) tells
// how many imports happened in it, so no test depends on timing. Deadlines only bound waits.
#include "tests/integration/gateway_test.hpp"

#include <fmt/format.h>

#include <cctype>
#include <regex>

namespace rjg::test {
namespace {

// A test-worker library that imports ahead: prewarm = 1 and prewarm_import = true, plus `toml`.
LibrarySpec ahead_library(const std::string& name, std::vector<std::string> extra_args = {}, std::string toml = {}) {
  LibrarySpec spec = test_library(name, std::move(extra_args));
  spec.extra_toml = "prewarm = 1\nprewarm_import = true\n" + toml;
  return spec;
}

// The log line of a worker that finished its import ahead of time.
std::string ahead_pattern(const std::string& library) {
  return fmt::format(R"(library {}: prewarmed worker pid (\d+) imported the library ahead of any session)", library);
}

class PrewarmImportTest : public GatewayTest {
 protected:
  json::value keyword(client::RpcClient& c, const std::string& token, std::string_view name, json::array args = {}) {
    auto reply = c.run_keyword(token, name, std::move(args));
    if (!reply.ok() || reply.keyword_error())
      throw std::runtime_error(fmt::format("{} failed: {}", name, describe(reply)));
    return keyword_value(reply);
  }
  std::int64_t int_keyword(client::RpcClient& c, const std::string& token, std::string_view name) {
    return as_int(keyword(c, token, name));
  }
  pid_t pid_of(client::RpcClient& c, const std::string& token) { return remember_pid(worker_pid(c, token)); }

  // Initializes `c` and imports `library`, collecting what arrives before the answer: the message of
  // each robot/log, or the whole text of any other notification.
  client::RpcReply import_collecting(client::RpcClient& c, const std::string& library, json::object params,
                             std::vector<std::string>& notes) {
    c.initialize();
    params["name"] = library;
    return c.request(protocol::kImportLibrary, std::move(params), [&](const protocol::Message& m) {
      const json::value p = m.params();  // a fresh copy: keep it
      if (m.method() == protocol::kLog && p.is_object() && p.get_object().contains("message") &&
          p.get_object().at("message").is_string())
        notes.emplace_back(p.get_object().at("message").get_string());
      else
        notes.push_back(m.text());
    });
  }
};

// Before any client connects, the prewarmed worker has imported the library. An import without
// arguments gets that worker with that instance: the answer is a definition under a gateway token, the
// worker handled exactly one import (the one ahead of time), keywords run, and finalize ends the worker.
// The pool then refills with another worker that imports ahead.
TEST_F(PrewarmImportTest, ImportWithoutArgumentsGetsTheInstanceImportedAhead) {
  start({ahead_library("Ahead")});
  auto ahead = pids_eventually(ahead_pattern("Ahead"));
  ASSERT_EQ(ahead.size(), 1u) << "the prewarmed worker did not import ahead of time";
  const pid_t prewarmed = ahead[0];

  client::RpcClient c = connect();
  c.initialize();
  auto reply = c.import_library("Ahead");  // args [] and kw_args {}: an import without arguments
  RJG_ASSERT_OK(reply);
  const std::string token = token_of(reply);
  EXPECT_TRUE(token.starts_with("Ahead-")) << "not a gateway token: " << token;
  const auto& definition = reply.result->as_object().at("definition").as_object();
  EXPECT_EQ(definition.at("name"), json::value("Ahead")) << describe(reply);
  EXPECT_FALSE(definition.at("keywords").as_array().empty()) << describe(reply);

  EXPECT_EQ(pid_of(c, token), prewarmed) << "the import was not served by the worker that imported ahead";
  EXPECT_EQ(int_keyword(c, token, "Import Count"), 1) << "the worker imported the library again";
  EXPECT_EQ(int_keyword(c, token, "Live Instances"), 1);
  EXPECT_EQ(keyword(c, token, "Get Import Args"), json::parse(R"({"args":[],"kw_args":{}})"));
  EXPECT_EQ(keyword(c, token, "Echo", json::array{json::array{"hello", 2}}), json::parse(R"(["hello",2])"));
  auto log = gateway().log();
  EXPECT_TRUE(contains(log, fmt::format("library Ahead: import served by prewarmed worker pid {} with the instance "
                                        "it imported ahead of time",
                                        prewarmed)))
      << log;
  EXPECT_TRUE(contains(log, fmt::format("imported library Ahead in worker pid {} (warm, imported ahead of time)",
                                        prewarmed)))
      << log;

  // The pool refills: another worker starts and imports ahead.
  ahead = pids_eventually(ahead_pattern("Ahead"), 2);
  ASSERT_EQ(ahead.size(), 2u) << "the pool did not replace the worker it handed out";
  EXPECT_NE(ahead[1], prewarmed);

  auto finalized = c.finalize_library(token);
  RJG_ASSERT_OK(finalized);
  EXPECT_TRUE(wait_pid_gone(prewarmed, 20s)) << "worker " << prewarmed << " outlived its import";
  EXPECT_FALSE(pid_gone(ahead[1])) << "the idle worker that imported ahead was stopped";

  // The next import without arguments gets the refill, again with no import of its own.
  auto [d, token_d] = session("Ahead");
  EXPECT_EQ(pid_of(d, token_d), ahead[1]);
  EXPECT_EQ(int_keyword(d, token_d, "Import Count"), 1);
}

// An import with arguments never gets the instance imported without them: it gets the warm worker all
// the same, whose instance imported ahead is finalized first, and a fresh import with exactly its
// arguments. The pool then refills, and an import without arguments gets the refill's instance.
TEST_F(PrewarmImportTest, ImportWithArgumentsImportsAfreshInTheWarmWorker) {
  start({ahead_library("Ahead")});
  auto ahead = pids_eventually(ahead_pattern("Ahead"));
  ASSERT_EQ(ahead.size(), 1u) << "the prewarmed worker did not import ahead of time";

  auto [a, token_a] = session("Ahead", json::array{"x", 1});
  EXPECT_EQ(pid_of(a, token_a), ahead[0]) << "an import with arguments did not get the warm worker";
  EXPECT_EQ(keyword(a, token_a, "Get Import Args"), json::parse(R"({"args":["x",1],"kw_args":{}})"));
  EXPECT_EQ(int_keyword(a, token_a, "Import Count"), 2) << "the import ahead, then this one";
  EXPECT_EQ(int_keyword(a, token_a, "Live Instances"), 1) << "the instance imported ahead was not finalized";
  EXPECT_TRUE(contains(gateway().log(), fmt::format("import served by prewarmed worker pid {} (its instance imported "
                                                    "ahead of time is finalized: this import has arguments)",
                                                    ahead[0])));

  // kw_args count as arguments too.
  ahead = pids_eventually(ahead_pattern("Ahead"), 2);
  ASSERT_EQ(ahead.size(), 2u) << "the pool did not refill";
  auto [b, token_b] = session("Ahead", json::array{}, json::object{{"mode", "fast"}});
  EXPECT_EQ(pid_of(b, token_b), ahead[1]);
  EXPECT_EQ(keyword(b, token_b, "Get Import Args"), json::parse(R"({"args":[],"kw_args":{"mode":"fast"}})"));
  EXPECT_EQ(int_keyword(b, token_b, "Live Instances"), 1);

  // Without arguments: the next refill's instance, with no import of its own.
  ahead = pids_eventually(ahead_pattern("Ahead"), 3);
  ASSERT_EQ(ahead.size(), 3u) << "the pool did not refill";
  auto [c, token_c] = session("Ahead");
  EXPECT_EQ(pid_of(c, token_c), ahead[2]);
  EXPECT_EQ(int_keyword(c, token_c, "Import Count"), 1);
  EXPECT_EQ(keyword(c, token_c, "Get Import Args"), json::parse(R"({"args":[],"kw_args":{}})"));
}

// What the worker logs during its import ahead of time belongs to no session: the gateway logs it (with
// library and pid), and the client that later gets the instance receives none of it. The same log sent
// during a session's own import reaches that client, as always.
TEST_F(PrewarmImportTest, LogsOfTheImportAheadGoToTheGatewayLogOnly) {
  start({ahead_library("Ahead", {"--log-on-import"})});
  auto ahead = pids_eventually(ahead_pattern("Ahead"));
  ASSERT_EQ(ahead.size(), 1u) << "the prewarmed worker did not import ahead of time";
  const pid_t prewarmed = ahead[0];
  const std::string logged = fmt::format("import log: import 1 of pid {} (args [], kw_args {{}})", prewarmed);
  auto log = gateway().log();
  EXPECT_TRUE(contains(log, fmt::format("worker Ahead[{}]: robot/log during the import ahead of any session (no client "
                                        "gets it): INFO: {}",
                                        prewarmed, logged)))
      << log;

  client::RpcClient a = connect();
  std::vector<std::string> notes;
  auto reply = import_collecting(a, "Ahead", json::object{}, notes);
  RJG_ASSERT_OK(reply);
  const std::string token_a = token_of(reply);
  EXPECT_EQ(pid_of(a, token_a), prewarmed);
  EXPECT_TRUE(notes.empty()) << "the client got notifications of the import ahead of time: "
                             << ::testing::PrintToString(notes);

  // A session's own import (with arguments: a fresh import, in a worker started for it or in the refill
  // after finalizing its instance imported ahead) relays its import log to that client.
  client::RpcClient b = connect();
  std::vector<std::string> notes_b;
  auto reply_b = import_collecting(b, "Ahead", json::object{{"args", json::array{"own"}}}, notes_b);
  RJG_ASSERT_OK(reply_b);
  const std::string token_b = token_of(reply_b);
  const pid_t pid_b = pid_of(b, token_b);
  const int count_b = int_keyword(b, token_b, "Import Count");
  EXPECT_EQ(notes_b, std::vector<std::string>{fmt::format(R"(import log: import {} of pid {} (args ["own"], kw_args {{}}))",
                                                          count_b, pid_b)});
  // b's worker may be the refill, which imported ahead of time too (its own log of that is fine): the
  // gateway logged none of b's import as its own.
  for (const auto& line : lines_with(gateway().log(), "during the import ahead"))
    EXPECT_FALSE(contains(line, R"(args ["own"])")) << line;
}

// An import ahead of time that fails is logged with library, pid and reason; that worker is stopped and
// never handed out; the failures count as a crash loop (the library backs off); a client's import gets
// a clear error that quotes the library's failure, whether it meets the backoff or a worker of its own.
TEST_F(PrewarmImportTest, FailingImportAheadStopsTheWorkerAndBacksOff) {
  start({ahead_library("Failing", {"--fail-import"})});
  auto failed = pids_eventually(
      R"(library Failing: the import ahead of any session failed in prewarmed worker pid (\d+): it answered with error)");
  ASSERT_FALSE(failed.empty()) << "no failed import ahead of time was logged";
  EXPECT_TRUE(contains(gateway().log(), "simulated import failure"));
  EXPECT_TRUE(wait_pid_gone(failed[0], 20s)) << "the worker whose import ahead failed was not stopped";
  ASSERT_TRUE(log_eventually("library Failing: 2 failures in a row; next worker start in 1.0s"))
      << "failed imports ahead of time did not back off";
  EXPECT_FALSE(contains(gateway().log(), "imported the library ahead of any session"));

  client::RpcClient c = connect();
  c.initialize();
  auto reply = c.import_library("Failing");
  ASSERT_FALSE(reply.ok()) << describe(reply);
  EXPECT_TRUE(contains(reply.error_message(), "simulated import failure")) << describe(reply);
  EXPECT_TRUE(contains(reply.error_message(), "Failing")) << describe(reply);
  // No worker that failed its import ahead served the client.
  EXPECT_FALSE(contains(gateway().log(), "import served by prewarmed worker"));
}

// Caps hold: with max_workers = 1 the worker that imported ahead is the only worker. An import with
// arguments gets it (finalizing the instance imported ahead); once that import is finalized the pool
// refills (one worker again, imported ahead), and an import without arguments gets it.
TEST_F(PrewarmImportTest, MaxWorkersOneKeepsOneWorker) {
  start({ahead_library("Capped", {}, "max_workers = 1\nqueue_timeout = \"60s\"\n")});
  auto ahead = pids_eventually(ahead_pattern("Capped"));
  ASSERT_EQ(ahead.size(), 1u) << "the prewarmed worker did not import ahead of time";
  const pid_t first = ahead[0];
  EXPECT_EQ(started_pids("Capped").size(), 1u);

  auto [a, token_a] = session("Capped", json::array{"with"});
  const pid_t pid_a = pid_of(a, token_a);
  EXPECT_EQ(pid_a, first);
  EXPECT_EQ(keyword(a, token_a, "Get Import Args"), json::parse(R"({"args":["with"],"kw_args":{}})"));
  EXPECT_EQ(int_keyword(a, token_a, "Live Instances"), 1);
  EXPECT_EQ(started_pids("Capped").size(), 1u) << "a worker started beyond max_workers = 1";

  // Finalized: the pool refills with one worker that imports ahead; an import without arguments gets it.
  RJG_ASSERT_OK(a.finalize_library(token_a));
  ahead = pids_eventually(ahead_pattern("Capped"), 2);
  ASSERT_EQ(ahead.size(), 2u) << "the pool did not refill";
  EXPECT_TRUE(pid_gone(pid_a)) << "the refill started while the import's worker still ran";
  auto [b, token_b] = session("Capped");
  EXPECT_EQ(pid_of(b, token_b), ahead[1]);
  EXPECT_EQ(int_keyword(b, token_b, "Import Count"), 1);
  // At the cap: the hand-out does not start another worker while this one runs.
  EXPECT_EQ(int_keyword(b, token_b, "Live Instances"), 1);
  EXPECT_EQ(started_pids("Capped").size(), 2u) << "a worker started beyond max_workers = 1";
}

}  // namespace
}  // namespace rjg::test
