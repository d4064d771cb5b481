// After a lost worker, the suite goes on (on_worker_loss): the keyword that was running fails as a
// keyword, and the next keyword on the same token gets the library imported again, with the same
// arguments, in a new worker, with a WARN in its log saying that the library's state was lost and why.
// With on_worker_loss = "fail" every later keyword on the token fails instead. Nothing is timed: every
// wait is a bound.
#include "tests/integration/gateway_test.hpp"

#include <fmt/format.h>

#include <signal.h>

namespace rjg::test {
namespace {

class WorkerLossTest : public GatewayTest {
 protected:
  // The type of a keyword's failure; "" when the reply is not one.
  static std::string failure_type(const client::RpcReply& reply) {
    const auto* error = reply.ok() ? reply.keyword_error() : nullptr;
    if (!error) return "";
    const auto* type = error->if_contains("type");
    return type && type->is_string() ? std::string(type->get_string()) : std::string("<no type>");
  }
  static std::string failure_text(const client::RpcReply& reply) {
    const auto* error = reply.ok() ? reply.keyword_error() : nullptr;
    if (!error) return describe(reply);
    const auto* message = error->if_contains("message");
    return message && message->is_string() ? std::string(message->get_string()) : describe(reply);
  }

  // A keyword with the WARN messages relayed before its answer.
  client::RpcReply run_collecting(client::RpcClient& c, const std::string& token, const std::string& keyword, json::array args,
                          std::vector<std::string>& warnings) {
    return c.run_keyword(token, keyword, std::move(args), {}, [&](const protocol::Message& m) {
      if (m.method() != protocol::kLog) return;
      const json::value params = m.params();  // a value of its own: params() is made for each call
      const auto* p = params.if_object();
      if (p && p->contains("level") && p->at("level") == "WARN") warnings.emplace_back(p->at("message").as_string());
    });
  }
};

TEST_F(WorkerLossTest, ACrashFailsItsKeywordAndTheNextOneRunsInANewWorkerWithTheSameArguments) {
  start();
  auto [c, token] = session("TestLibrary", json::array{"first", 2}, json::object{{"mode", "lab"}});
  const pid_t pid = remember_pid(worker_pid(c, token));
  auto crashed = c.run_keyword(token, "Crash", json::array{"exit"});
  EXPECT_EQ(failure_type(crashed), "WorkerFailed") << describe(crashed);
  EXPECT_TRUE(contains(failure_text(crashed), fmt::format("pid {}", pid))) << failure_text(crashed);
  EXPECT_TRUE(contains(failure_text(crashed), "imports it again")) << failure_text(crashed);
  EXPECT_TRUE(wait_pid_gone(pid, 20s));

  std::vector<std::string> warnings;
  auto args = run_collecting(c, token, "Get Import Args", {}, warnings);
  RJG_ASSERT_KEYWORD_OK(args);
  EXPECT_EQ(keyword_value(args),
            json::parse(R"({"args": ["first", 2], "kw_args": {"mode": "lab"}})"));
  ASSERT_EQ(warnings.size(), 1u) << "expected one WARN before the answer";
  EXPECT_TRUE(contains(warnings[0], "imported again")) << warnings[0];
  EXPECT_TRUE(contains(warnings[0], "'TestLibrary'")) << warnings[0];
  EXPECT_TRUE(contains(warnings[0], "keyword 'Crash'")) << warnings[0];
  const pid_t fresh = remember_pid(worker_pid(c, token));
  EXPECT_NE(fresh, pid);
  EXPECT_TRUE(contains(warnings[0], fmt::format("pid {}", fresh))) << warnings[0];

  // Said once: the keywords after it run as usual on the new worker.
  warnings.clear();
  auto echo = run_collecting(c, token, "Echo", json::array{"again"}, warnings);
  RJG_ASSERT_KEYWORD_OK(echo);
  EXPECT_TRUE(warnings.empty());
  EXPECT_EQ(started_pids("TestLibrary").size(), 2u) << gateway().log_tail();
  // Finalize ends the new worker; the token is gone.
  RJG_EXPECT_OK(c.finalize_library(token));
  EXPECT_TRUE(wait_pid_gone(fresh, 20s));
}

TEST_F(WorkerLossTest, AWorkerThatDiedWhileIdleIsReplacedBeforeTheKeywordRuns) {
  start();
  auto [c, token] = session();
  const pid_t pid = remember_pid(worker_pid(c, token));
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  ASSERT_TRUE(wait_pid_gone(pid, 20s));
  // Once the gateway has seen the death (it logs it), the keyword itself succeeds.
  ASSERT_TRUE(log_eventually(fmt::format("TestLibrary[{}]: exited unexpectedly", pid))) << gateway().log_tail();
  std::vector<std::string> warnings;
  auto echo = run_collecting(c, token, "Echo", json::array{"after"}, warnings);
  RJG_ASSERT_KEYWORD_OK(echo);
  EXPECT_EQ(keyword_value(echo), json::value("after"));
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_TRUE(contains(warnings[0], "imported again")) << warnings[0];
  EXPECT_NE(remember_pid(worker_pid(c, token)), pid);
}

TEST_F(WorkerLossTest, AKeywordTimeoutFailsItsKeywordAndTheSuiteGoesOn) {
  auto lib = test_library("TestLibrary");
  lib.extra_toml = "keyword_timeout = \"1s\"\n";
  start({lib});
  auto [c, token] = session();
  const pid_t pid = remember_pid(worker_pid(c, token));
  auto hung = c.run_keyword(token, "Hang");
  EXPECT_EQ(failure_type(hung), "KeywordTimeout") << describe(hung);
  EXPECT_TRUE(contains(failure_text(hung), "keyword_timeout")) << failure_text(hung);
  std::vector<std::string> warnings;
  auto echo = run_collecting(c, token, "Echo", json::array{1}, warnings);
  RJG_ASSERT_KEYWORD_OK(echo);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_TRUE(contains(warnings[0], "keyword_timeout")) << warnings[0];
  EXPECT_NE(remember_pid(worker_pid(c, token)), pid);
}

// A shared worker ended by another session's keyword_timeout: this session's next keyword imports the
// library again, and its WARN says why the instance was lost (the worker's own account).
TEST_F(WorkerLossTest, AnotherSessionsTimeoutOnASharedWorkerIsNamedInTheWarning) {
  auto lib = test_library("Shared");
  lib.extra_toml = "isolation = \"shared\"\nkeyword_timeout = \"1s\"\nshutdown_grace = \"1s\"\n";
  start({lib});
  auto [a, token_a] = session("Shared");
  auto [b, token_b] = session("Shared");
  const pid_t pid = remember_pid(worker_pid(a, token_a));
  ASSERT_EQ(worker_pid(b, token_b), pid);
  auto hung = a.run_keyword(token_a, "Hang");
  ASSERT_EQ(failure_type(hung), "KeywordTimeout") << describe(hung);
  ASSERT_TRUE(wait_pid_gone(pid, 20s));
  std::vector<std::string> warnings;
  auto echo = run_collecting(b, token_b, "Echo", json::array{"b"}, warnings);
  RJG_ASSERT_KEYWORD_OK(echo);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_TRUE(contains(warnings[0], "keyword_timeout")) << warnings[0];
  EXPECT_TRUE(contains(warnings[0], fmt::format("pid {}", pid))) << warnings[0];
  EXPECT_NE(remember_pid(worker_pid(b, token_b)), pid);
}

// Keywords sent together after a loss: one import again, every keyword answered once.
TEST_F(WorkerLossTest, KeywordsPipelinedAfterALossShareOneReimport) {
  start();
  auto [c, token] = session();
  const pid_t pid = remember_pid(worker_pid(c, token));
  auto crashed = c.run_keyword(token, "Crash", json::array{"exit"});
  ASSERT_EQ(failure_type(crashed), "WorkerFailed") << describe(crashed);
  std::vector<json::value> ids;
  for (int i = 0; i < 4; ++i)
    ids.push_back(c.send_request(protocol::kRunKeyword,
                                 json::object{{"library_token", token}, {"name", "Echo"}, {"args", json::array{i}},
                                              {"kwargs", json::object{}}}));
  for (int i = 0; i < 4; ++i) {
    auto reply = c.wait_reply(ids[i]);
    RJG_EXPECT_OK(reply);
    EXPECT_EQ(reply.keyword_error(), nullptr) << describe(reply);
  }
  EXPECT_EQ(started_pids("TestLibrary").size(), 2u) << gateway().log_tail();
  EXPECT_NE(remember_pid(worker_pid(c, token)), pid);
}

TEST_F(WorkerLossTest, FailModeAnswersEveryLaterKeywordThatTheInstanceIsGone) {
  auto lib = test_library("TestLibrary");
  lib.extra_toml = "on_worker_loss = \"fail\"\n";
  start({lib, test_library("SecondLibrary")});
  client::RpcClient c = connect();
  c.initialize();
  const std::string token = open_library(c, "TestLibrary");
  const std::string other = open_library(c, "SecondLibrary");
  remember_pid(worker_pid(c, other));
  const pid_t pid = remember_pid(worker_pid(c, token));
  auto crashed = c.run_keyword(token, "Crash", json::array{"exit"});
  EXPECT_EQ(failure_type(crashed), "WorkerFailed") << describe(crashed);
  EXPECT_TRUE(contains(failure_text(crashed), "on_worker_loss = \"fail\"")) << failure_text(crashed);
  for (int i = 0; i < 2; ++i) {
    auto later = c.run_keyword(token, "Echo", json::array{i});
    EXPECT_EQ(failure_type(later), "WorkerFailed") << describe(later);
    EXPECT_TRUE(contains(failure_text(later), "is gone")) << failure_text(later);
    EXPECT_TRUE(contains(failure_text(later), "import the library again")) << failure_text(later);
  }
  EXPECT_EQ(started_pids("TestLibrary").size(), 1u) << "a worker was started again under on_worker_loss = \"fail\"";
  // The session and its other library go on; a new import of the lost library works.
  RJG_ASSERT_KEYWORD_OK(c.run_keyword(other, "Echo", json::array{"fine"}));
  const std::string again = open_library(c, "TestLibrary");
  RJG_ASSERT_KEYWORD_OK(c.run_keyword(again, "Echo", json::array{"new"}));
  EXPECT_NE(remember_pid(worker_pid(c, again)), pid);
}

// A library that cannot be imported again (its import now fails): the keyword says so, and the next
// keyword tries again.
TEST_F(WorkerLossTest, AFailedReimportFailsThatKeywordOnly) {
  TempDir dir("rjg-loss");
  const auto flag = dir.path() / "broken";
  // The test worker fails every import while the flag file exists.
  start({test_library("TestLibrary", {"--fail-import-if-exists", flag.string()})});
  auto [c, token] = session();
  const pid_t pid = remember_pid(worker_pid(c, token));
  write_file(flag, "");
  auto crashed = c.run_keyword(token, "Crash", json::array{"exit"});
  ASSERT_EQ(failure_type(crashed), "WorkerFailed") << describe(crashed);
  auto refused = c.run_keyword(token, "Echo", json::array{1});
  EXPECT_EQ(failure_type(refused), "WorkerFailed") << describe(refused);
  EXPECT_TRUE(contains(failure_text(refused), "could not be imported again")) << failure_text(refused);
  EXPECT_TRUE(contains(failure_text(refused), "next keyword tries again")) << failure_text(refused);
  fs::remove(flag);
  auto ok = c.run_keyword(token, "Echo", json::array{2});
  RJG_ASSERT_KEYWORD_OK(ok);
  EXPECT_NE(remember_pid(worker_pid(c, token)), pid);
}

}  // namespace
}  // namespace rjg::test
