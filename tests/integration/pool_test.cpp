// Worker pools, end to end: the real gateway, real robot-test-worker processes, real TCP. One test per
// rule of the pool design (prewarm, shared workers, caps and their queue, queue and keyword timeouts,
// recycling, crash backoff, disconnects, rlimits) and of process hygiene (process groups, inherited
// descriptors and environment, SIGTERM then SIGKILL to the whole group, state changes in the log).
//
// Nothing here asserts how long anything takes. Where an order matters, the test creates it: a keyword
// that waits for a file the test creates (Wait For File, --initialize-wait-file) holds a worker busy or
// starting for exactly as long as the test needs, and a request to an unknown method acts as a barrier
// on one connection (the gateway answers it only after it has dispatched everything sent before it).
// Deadlines exist only so that a broken gateway fails a test instead of hanging it.
#include "tests/integration/gateway_test.hpp"

#include <fmt/format.h>

#include <sys/resource.h>
#include <sys/wait.h>

#include <algorithm>
#include <regex>
#include <set>
#include <sstream>

namespace rjg::test {
namespace {

// A test-worker library with pool settings (TOML lines inside its [[library]] table).
LibrarySpec pool_library(const std::string& name, std::string toml, std::vector<std::string> extra_args = {}) {
  LibrarySpec spec = test_library(name, std::move(extra_args));
  spec.extra_toml = std::move(toml);
  return spec;
}

json::object keyword_params(const std::string& token, std::string_view keyword, json::array args = {}) {
  return json::object{{"library_token", token}, {"name", keyword}, {"args", std::move(args)}, {"kwargs", json::object{}}};
}

// The RJG_ASSERT_* macros evaluate their argument more than once; these take a call and evaluate it once.
#define POOL_OK(expr)                  \
  do {                                 \
    const auto pool_reply_ = (expr);   \
    RJG_ASSERT_OK(pool_reply_);        \
  } while (0)
#define POOL_KEYWORD_OK(expr)          \
  do {                                 \
    const auto pool_reply_ = (expr);   \
    RJG_ASSERT_KEYWORD_OK(pool_reply_); \
  } while (0)
#define POOL_KEYWORD_FAILURE(expr, code)              \
  do {                                               \
    const auto pool_reply_ = (expr);                 \
    RJG_ASSERT_KEYWORD_FAILURE(pool_reply_, (code)); \
  } while (0)

class PoolTest : public GatewayTest {
 protected:
  // A request the gateway answers itself at once (-32601). Requests are dispatched in the order they
  // are read from the connection, so once this is answered every request sent before it on the same
  // connection has reached its queue (the worker's call queue, or the pool's capacity queue).
  static void barrier(client::RpcClient& c) {
    auto reply = c.request("rjg/barrier", json::object{});
    ASSERT_EQ(reply.error_code(), protocol::kMethodNotFound) << describe(reply);
  }

  // Nothing has been answered on this connection yet.
  static void expect_no_answer(client::RpcClient& c, std::string_view who) {
    auto m = c.read_message(0ms);
    EXPECT_FALSE(m && (m->kind == protocol::Message::Kind::response || m->kind == protocol::Message::Kind::error_response))
        << who << " was answered too early: " << (m ? m->text() : std::string());
  }

  // Reads notifications until a robot/log whose message contains `needle` arrives (bounded).
  static bool wait_for_log(client::RpcClient& c, std::string_view needle, std::chrono::milliseconds timeout = 30s) {
    auto deadline = Clock::now() + timeout;
    while (Clock::now() < deadline) {
      auto m = c.read_message(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
      if (!m) return false;
      if (m->kind != protocol::Message::Kind::notification || m->method() != protocol::kLog) continue;
      if (const json::value p = m->params(); p.is_object()) {  // params() is a fresh copy: keep it
        const auto& params = p.get_object();
        if (params.contains("message") && params.at("message").is_string() &&
            contains(params.at("message").get_string(), needle))
          return true;
      }
    }
    return false;
  }

  std::int64_t int_keyword(client::RpcClient& c, const std::string& token, std::string_view keyword, json::array args = {}) {
    auto reply = c.run_keyword(token, keyword, std::move(args));
    if (!reply.ok() || reply.keyword_error())
      throw std::runtime_error(fmt::format("{} failed: {}", keyword, describe(reply)));
    return as_int(keyword_value(reply));
  }

  pid_t pid_of(client::RpcClient& c, const std::string& token) { return remember_pid(worker_pid(c, token)); }

  // A gate: a file that Wait For File / --initialize-wait-file wait for.
  TempDir gates_{"rjg-gates"};
  std::string gate(std::string_view name) { return (gates_.path() / name).string(); }
  void open_gate(std::string_view name) { write_file(gates_.path() / name, "open"); }
};

// ================================================================================================
// Prewarm

using PoolPrewarmTest = PoolTest;

// An import that arrives while the prewarmed worker is still starting is a cold start (a miss); once
// the prewarmed worker is ready, the next import takes it (a hit) and the pool starts a replacement.
TEST_F(PoolPrewarmTest, HitAndMiss) {
  auto warm = pool_library("Warm", "prewarm = 1\n", {"--initialize-wait-file", gate("init")});
  warm.startup_timeout = "60s";
  start({warm});

  // The prewarmed worker starts with no client at all, and waits at the gate in robot/initialize.
  auto started = pids_eventually(R"(worker Warm\[(\d+)\]: started)", 1);
  ASSERT_EQ(started.size(), 1u) << "no prewarmed worker was started";
  const pid_t prewarmed = started[0];

  // Miss: the import finds no ready worker and starts one of its own (the second "started").
  client::RpcClient a = connect();
  a.initialize();
  auto import_a = a.send_request(protocol::kImportLibrary, json::object{{"name", "Warm"}, {"args", json::array{}}});
  started = pids_eventually(R"(worker Warm\[(\d+)\]: started)", 2);
  ASSERT_EQ(started.size(), 2u) << "the import did not start a worker while the prewarmed one was starting";
  const pid_t cold = started[1];
  open_gate("init");
  auto reply_a = a.wait_reply(import_a);
  RJG_ASSERT_OK(reply_a);
  std::string token_a = token_of(reply_a);
  EXPECT_EQ(pid_of(a, token_a), cold) << "the import was not served by the worker it started";
  auto imported_cold = lines_with(gateway().log(), fmt::format("imported library Warm in worker pid {}", cold));
  ASSERT_EQ(imported_cold.size(), 1u);
  EXPECT_FALSE(contains(imported_cold[0], "(warm)")) << "a cold start was logged as warm: " << imported_cold[0];

  // Hit: once the prewarmed worker is ready, the next import gets it.
  ASSERT_TRUE(log_eventually(fmt::format("library Warm: worker pid {} ready (prewarm", prewarmed)))
      << "the prewarmed worker never became ready";
  auto [b, token_b] = session("Warm");
  EXPECT_EQ(pid_of(b, token_b), prewarmed);
  auto log = gateway().log();
  EXPECT_TRUE(contains(log, fmt::format("library Warm: import served by prewarmed worker pid {}", prewarmed))) << log;
  EXPECT_TRUE(contains(log, fmt::format("imported library Warm in worker pid {} (warm)", prewarmed))) << log;

  // The pool refills in the background: a third worker, started and ready as a prewarmed one.
  started = pids_eventually(R"(worker Warm\[(\d+)\]: started)", 3);
  ASSERT_EQ(started.size(), 3u) << "the pool did not replace the prewarmed worker it handed out";
  const pid_t refill = started[2];
  EXPECT_TRUE(log_eventually(fmt::format("library Warm: worker pid {} ready (prewarm", refill)));

  // Each import's worker ends with it (session isolation); the new prewarmed one stays.
  POOL_OK(a.finalize_library(token_a));
  POOL_OK(b.finalize_library(token_b));
  EXPECT_TRUE(wait_pid_gone(cold, 20s)) << "worker " << cold << " outlived its import";
  EXPECT_TRUE(wait_pid_gone(prewarmed, 20s)) << "worker " << prewarmed << " outlived its import";
  EXPECT_FALSE(pid_gone(refill)) << "the idle prewarmed worker " << refill << " was stopped";
}

// Prewarming runs in the background at start-up, for every library that asks for it, without a client.
TEST_F(PoolPrewarmTest, StartsInTheBackgroundForEveryLibrary) {
  start({pool_library("WarmA", "prewarm = 2\n"), pool_library("WarmB", "prewarm = 2\n"), test_library("Cold")});
  auto a = pids_eventually(R"(library WarmA: worker pid (\d+) ready \(prewarm)", 2);
  auto b = pids_eventually(R"(library WarmB: worker pid (\d+) ready \(prewarm)", 2);
  ASSERT_EQ(a.size(), 2u) << "WarmA did not get 2 prewarmed workers";
  ASSERT_EQ(b.size(), 2u) << "WarmB did not get 2 prewarmed workers";
  for (pid_t p : {a[0], a[1], b[0], b[1]}) {
    auto info = proc_info(p);
    ASSERT_TRUE(info) << "prewarmed worker " << p << " is not running";
    EXPECT_EQ(info->ppid, gateway().pid()) << "prewarmed worker " << p << " is not the gateway's child";
    EXPECT_NE(info->state, 'Z');
  }
  EXPECT_TRUE(started_pids("Cold").empty()) << "a library without prewarm got a worker without an import";
  // The prewarm stays at its size: no further starts while nobody imports.
  auto [c, token] = session("Cold");
  EXPECT_EQ(started_pids("WarmA").size(), 2u);
  EXPECT_EQ(started_pids("WarmB").size(), 2u);
}

// Starts are spread: at most 4 workers start at once, gateway-wide. Six imports that each need a new
// worker, while no start can finish (the workers wait at a gate in robot/initialize): four start, the
// other two wait for a start to finish, and all six are served once the gate opens.
TEST_F(PoolPrewarmTest, AtMostFourWorkersStartAtOnce) {
  auto gated = test_library("Gated", {"--initialize-wait-file", gate("init")});
  gated.startup_timeout = "60s";
  start({gated});
  std::vector<client::RpcClient> clients;
  std::vector<json::value> imports;
  for (int i = 0; i < 6; ++i) {
    clients.push_back(connect());
    clients.back().initialize();
    imports.push_back(clients.back().send_request(protocol::kImportLibrary, json::object{{"name", "Gated"}}));
    barrier(clients.back());
  }
  // Every import is on its way to the pool (with several loops, the hop there may lag the barrier's
  // answer); four starts fork, and no fifth can while the gate is shut.
  EXPECT_TRUE(eventually([&] { return started_pids("Gated").size() >= 4; }, 20s)) << "fewer than 4 workers starting";
  EXPECT_EQ(started_pids("Gated").size(), 4u) << "not 4 workers starting at once";
  open_gate("init");
  std::set<pid_t> pids;
  for (std::size_t i = 0; i < clients.size(); ++i) {
    auto reply = clients[i].wait_reply(imports[i]);
    RJG_ASSERT_OK(reply);
    pids.insert(pid_of(clients[i], token_of(reply)));
  }
  EXPECT_EQ(pids.size(), 6u);
  auto started = started_pids("Gated");
  ASSERT_EQ(started.size(), 6u);
  // The fifth start began only after one of the first four had finished its start-up.
  auto log = gateway().log();
  auto first_ready = log.find("library Gated: worker pid ");
  auto fifth_start = log.find(fmt::format("worker Gated[{}]: started", started[4]));
  ASSERT_NE(first_ready, std::string::npos);
  EXPECT_LT(first_ready, fifth_start) << "a fifth worker started while four were still starting";
}

// ================================================================================================
// Shared workers

using PoolSharedTest = PoolTest;

// Two sessions import a shared library and get the same worker; each session receives the logs of its
// own keywords only, in order, even when both run keywords at once; each import keeps its arguments.
TEST_F(PoolSharedTest, TwoSessionsShareOneWorkerWithTheirOwnLogs) {
  start({pool_library("Shared", "isolation = \"shared\"\nmax_workers = 1\n")});
  auto [a, token_a] = session("Shared", json::array{"from-a"});
  auto [b, token_b] = session("Shared", json::array{"from-b"});
  const pid_t pid = pid_of(a, token_a);
  EXPECT_EQ(pid_of(b, token_b), pid) << "the two imports of a shared library got different workers";
  EXPECT_EQ(started_pids("Shared").size(), 1u);
  EXPECT_TRUE(contains(gateway().log(), fmt::format("imported library Shared in worker pid {} (warm)", pid)))
      << "the second import of the running shared worker was not logged as warm";
  EXPECT_EQ(int_keyword(a, token_a, "Live Instances"), 2);

  // Both at once: the worker runs them one after the other; each log goes to its own session.
  constexpr int kLogs = 100;
  auto id_a = a.send_request(protocol::kRunKeyword, keyword_params(token_a, "Log Messages", json::array{kLogs, 3}));
  auto id_b = b.send_request(protocol::kRunKeyword, keyword_params(token_b, "Log Messages", json::array{kLogs, 7}));
  auto collect = [](std::vector<std::string>& into) {
    return [&into](const protocol::Message& m) {
      if (m.method() == protocol::kLog && m.params().is_object())
        into.emplace_back(m.params().get_object().at("message").as_string());
    };
  };
  std::vector<std::string> logs_a, logs_b;
  auto reply_a = a.wait_reply(id_a, collect(logs_a));
  auto reply_b = b.wait_reply(id_b, collect(logs_b));
  RJG_ASSERT_KEYWORD_OK(reply_a);
  RJG_ASSERT_KEYWORD_OK(reply_b);
  ASSERT_EQ(logs_a.size(), static_cast<std::size_t>(kLogs)) << "session A got another session's logs, or lost some";
  ASSERT_EQ(logs_b.size(), static_cast<std::size_t>(kLogs)) << "session B got another session's logs, or lost some";
  for (int i = 0; i < kLogs; ++i) {
    EXPECT_EQ(logs_a[i], fmt::format("{}:xxx", i)) << "session A, log " << i;
    EXPECT_EQ(logs_b[i], fmt::format("{}:xxxxxxx", i)) << "session B, log " << i;
  }

  // Each token still reaches its own library instance in the shared worker.
  auto args_a = a.run_keyword(token_a, "Get Import Args");
  auto args_b = b.run_keyword(token_b, "Get Import Args");
  RJG_ASSERT_KEYWORD_OK(args_a);
  RJG_ASSERT_KEYWORD_OK(args_b);
  EXPECT_EQ(keyword_value(args_a).as_object().at("args"), json::value(json::array{"from-a"}));
  EXPECT_EQ(keyword_value(args_b).as_object().at("args"), json::value(json::array{"from-b"}));

  // Finalizing one import ends that instance only; the worker serves the other one on.
  POOL_OK(a.finalize_library(token_a));
  EXPECT_EQ(int_keyword(b, token_b, "Live Instances"), 1);
  EXPECT_EQ(pid_of(b, token_b), pid);
  EXPECT_FALSE(pid_gone(pid)) << "the shared worker ended with one of its imports";
}

// While one session's keyword holds the shared worker, the calls of other sessions queue; they run one
// at a time, in the order they arrived, and no session is skipped.
TEST_F(PoolSharedTest, CallsOfSeveralSessionsRunOneAtATimeInArrivalOrder) {
  start({pool_library("Shared", "isolation = \"shared\"\nmax_workers = 1\n")});
  auto [a, token_a] = session("Shared");
  auto [b, token_b] = session("Shared");
  auto [c, token_c] = session("Shared");
  const pid_t pid = pid_of(a, token_a);
  ASSERT_EQ(pid_of(b, token_b), pid);
  ASSERT_EQ(pid_of(c, token_c), pid);

  // A holds the worker until the gate opens.
  auto hold = a.send_request(protocol::kRunKeyword, keyword_params(token_a, "Wait For File", json::array{gate("go")}));
  ASSERT_TRUE(wait_for_log(a, "waiting for")) << "A's keyword did not start";
  // Then, in this order: B, C, A, B. Each barrier makes sure its call is queued before the next is sent.
  auto b1 = b.send_request(protocol::kRunKeyword, keyword_params(token_b, "Count Call"));
  barrier(b);
  auto c1 = c.send_request(protocol::kRunKeyword, keyword_params(token_c, "Count Call"));
  barrier(c);
  auto a2 = a.send_request(protocol::kRunKeyword, keyword_params(token_a, "Count Call"));
  barrier(a);
  auto b2 = b.send_request(protocol::kRunKeyword, keyword_params(token_b, "Count Call"));
  barrier(b);
  // The worker runs one keyword at a time: nothing queued can have been answered.
  expect_no_answer(b, "B's queued call");
  expect_no_answer(c, "C's queued call");

  open_gate("go");
  POOL_KEYWORD_OK(a.wait_reply(hold));
  auto rb1 = b.wait_reply(b1), rc1 = c.wait_reply(c1), ra2 = a.wait_reply(a2), rb2 = b.wait_reply(b2);
  for (const auto* r : {&rb1, &rc1, &ra2, &rb2}) RJG_ASSERT_KEYWORD_OK(*r);
  const auto n_b1 = as_int(keyword_value(rb1)), n_c1 = as_int(keyword_value(rc1)),
             n_a2 = as_int(keyword_value(ra2)), n_b2 = as_int(keyword_value(rb2));
  EXPECT_EQ(n_b1, 1) << "B's call did not run first after A's";
  EXPECT_EQ(n_c1, 2) << "C's call did not run second";
  EXPECT_EQ(n_a2, 3) << "A's second call did not run third";
  EXPECT_EQ(n_b2, 4) << "B's second call did not run last";
  EXPECT_EQ(started_pids("Shared").size(), 1u);
}

// Imports that queue for capacity while the shared workers are still starting get room in them once
// they are up (each holds two imports): a worker that becomes ready wakes the queue.
TEST_F(PoolSharedTest, ImportsQueuedWhileSharedWorkersStartGetRoomInThem) {
  start({pool_library("Shared",
                      "isolation = \"shared\"\nmax_workers = 2\nmax_imports_per_worker = 2\nqueue_timeout = \"60s\"\n",
                      {"--initialize-wait-file", gate("init")})});
  std::vector<client::RpcClient> clients;
  std::vector<json::value> imports;
  for (int i = 0; i < 4; ++i) {
    clients.push_back(connect());
    clients.back().initialize();
    imports.push_back(clients.back().send_request(protocol::kImportLibrary,
                                                  json::object{{"name", "Shared"}, {"args", json::array{}}, {"kw_args", json::object{}}}));
    barrier(clients.back());  // this import waits: for its worker's start, or in the queue for capacity
  }
  EXPECT_EQ(started_pids("Shared").size(), 2u);
  open_gate("init");
  std::set<pid_t> pids;
  for (int i = 0; i < 4; ++i) {
    auto reply = clients[i].wait_reply(imports[i]);
    RJG_ASSERT_OK(reply);
    pids.insert(pid_of(clients[i], token_of(reply)));
  }
  EXPECT_EQ(pids.size(), 2u) << "four imports did not share the two workers";
  EXPECT_EQ(started_pids("Shared").size(), 2u);
}

// ================================================================================================
// Caps and the queue for capacity

using PoolCapTest = PoolTest;

// With max_workers = 1, further imports wait for the worker to go and are then served in the order
// they arrived; no import starts a worker beyond the cap.
TEST_F(PoolCapTest, LibraryCapQueuesImportsInArrivalOrder) {
  start({pool_library("Capped", "max_workers = 1\nqueue_timeout = \"60s\"\n"), test_library("Other")});
  auto [a, token_a] = session("Capped");
  const pid_t pid_a = pid_of(a, token_a);

  client::RpcClient b = connect();
  b.initialize();
  auto import_b = b.send_request(protocol::kImportLibrary, json::object{{"name", "Capped"}});
  barrier(b);
  client::RpcClient c = connect();
  c.initialize();
  auto import_c = c.send_request(protocol::kImportLibrary, json::object{{"name", "Capped"}});
  barrier(c);

  // The cap is the library's own: another library is not held up.
  auto [o, token_o] = session("Other");
  POOL_KEYWORD_OK(o.run_keyword(token_o, "Echo", json::array{1}));
  POOL_KEYWORD_OK(a.run_keyword(token_a, "Echo", json::array{1}));
  expect_no_answer(b, "B's import (at capacity)");
  expect_no_answer(c, "C's import (at capacity)");
  EXPECT_EQ(started_pids("Capped").size(), 1u) << "a worker was started beyond max_workers = 1";

  // A's worker goes: the first in line (B) gets the capacity; C waits on.
  POOL_OK(a.finalize_library(token_a));
  auto reply_b = b.wait_reply(import_b, {}, 30s);
  RJG_ASSERT_OK(reply_b);
  const std::string token_b = token_of(reply_b);
  const pid_t pid_b = pid_of(b, token_b);
  EXPECT_NE(pid_b, pid_a);
  EXPECT_TRUE(pid_gone(pid_a)) << "B got a worker while A's was still running";
  expect_no_answer(c, "C's import (behind B)");

  // B disconnects: C is served.
  b.close();
  auto reply_c = c.wait_reply(import_c, {}, 30s);
  RJG_ASSERT_OK(reply_c);
  const pid_t pid_c = pid_of(c, token_of(reply_c));
  EXPECT_NE(pid_c, pid_b);
  EXPECT_TRUE(pid_gone(pid_b)) << "C got a worker while B's was still running";
  EXPECT_EQ(started_pids("Capped").size(), 3u);
}

// [gateway] max_workers caps all libraries together: an import of another library waits as well.
TEST_F(PoolCapTest, GatewayCapQueuesImportsOfEveryLibrary) {
  GatewayOptions options;
  options.extra_gateway_toml = "max_workers = 1\n";
  start({pool_library("First", "queue_timeout = \"60s\"\n"), pool_library("Second", "queue_timeout = \"60s\"\n")},
        options);
  auto [a, token_a] = session("First");
  const pid_t pid_a = pid_of(a, token_a);
  client::RpcClient b = connect();
  b.initialize();
  auto import_b = b.send_request(protocol::kImportLibrary, json::object{{"name", "Second"}});
  barrier(b);
  POOL_KEYWORD_OK(a.run_keyword(token_a, "Echo", json::array{1}));
  expect_no_answer(b, "the import of Second (gateway at max_workers)");
  EXPECT_TRUE(started_pids("Second").empty()) << "a worker was started beyond [gateway] max_workers = 1";

  a.close();  // its worker ends with the session
  auto reply_b = b.wait_reply(import_b, {}, 30s);
  RJG_ASSERT_OK(reply_b);
  EXPECT_NE(pid_of(b, token_of(reply_b)), pid_a);
  EXPECT_TRUE(pid_gone(pid_a));
}

// An import that waits longer than queue_timeout fails with -32014, saying why and what to do; the
// session and the worker holding the capacity go on.
TEST_F(PoolCapTest, QueueTimeoutFailsTheImportClearly) {
  GatewayOptions options;
  options.extra_gateway_toml = "max_workers = 2\n";
  start({pool_library("Capped", "max_workers = 1\nqueue_timeout = \"1s\"\n"),
         pool_library("Other", "queue_timeout = \"1s\"\n"), pool_library("Third", "queue_timeout = \"1s\"\n")},
        options);
  auto [a, token_a] = session("Capped");
  client::RpcClient b = connect();
  b.initialize();

  auto reply = b.import_library("Capped");
  RJG_ASSERT_ERROR(reply, protocol::kAtCapacity);
  auto msg = reply.error_message();
  EXPECT_TRUE(contains(msg, "Capped")) << msg;
  EXPECT_TRUE(contains(msg, "at capacity")) << msg;
  EXPECT_TRUE(contains(msg, "queue_timeout")) << msg;
  EXPECT_TRUE(contains(msg, "max_workers")) << msg;

  // The gateway-wide cap (2: Capped's worker and Other's) times out the same way.
  auto [o, token_o] = session("Other");
  auto third = b.import_library("Third");
  RJG_ASSERT_ERROR(third, protocol::kAtCapacity);
  EXPECT_TRUE(contains(third.error_message(), "queue_timeout")) << third.error_message();

  // Nothing else broke: the holders work, and once A is done B gets the library.
  POOL_KEYWORD_OK(a.run_keyword(token_a, "Echo", json::array{"still here"}));
  POOL_KEYWORD_OK(o.run_keyword(token_o, "Echo", json::array{"still here"}));
  POOL_OK(a.finalize_library(token_a));
  bool imported = eventually(
      [&] {
        auto retry = b.import_library("Capped");
        if (retry.ok()) return true;
        EXPECT_EQ(retry.error_code(), protocol::kAtCapacity) << describe(retry);
        return false;
      },
      30s, 10ms);
  EXPECT_TRUE(imported) << "the import still failed after the capacity was freed";
}

// ================================================================================================
// Keyword timeout

using PoolTimeoutTest = PoolTest;

// A keyword that overruns keyword_timeout fails (KeywordTimeout) naming the setting; its worker is stopped (the
// process is gone), later calls on the token say why (on_worker_loss = "fail": the default imports the
// library again, worker_loss_test.cpp), and a new import gets a new worker.
TEST_F(PoolTimeoutTest, KeywordTimeoutEndsTheDedicatedWorker) {
  start({pool_library("Slow", "keyword_timeout = \"3s\"\nshutdown_grace = \"1s\"\non_worker_loss = \"fail\"\n")});
  auto [c, token] = session("Slow");
  const pid_t pid = pid_of(c, token);
  POOL_KEYWORD_OK(c.run_keyword(token, "Sleep", json::array{0.01}));  // well within the limit

  auto reply = c.run_keyword(token, "Sleep", json::array{30});
  RJG_ASSERT_KEYWORD_FAILURE(reply, protocol::kWorkerTimeout);
  auto msg = reply.failure_message();
  EXPECT_TRUE(contains(msg, "keyword_timeout")) << msg;
  EXPECT_TRUE(contains(msg, "Sleep")) << msg;
  EXPECT_TRUE(contains(msg, "Slow")) << msg;
  // At once (the worker is being stopped) and once it is gone, calls on the token say why.
  auto right_after = c.run_keyword(token, "Echo", json::array{1});
  RJG_ASSERT_KEYWORD_FAILURE(right_after, protocol::kWorkerFailed);
  EXPECT_TRUE(contains(right_after.failure_message(), "keyword_timeout")) << right_after.failure_message();
  EXPECT_TRUE(wait_pid_gone(pid, 20s)) << "worker " << pid << " still runs after its keyword timed out";

  auto later = c.run_keyword(token, "Echo", json::array{1});
  RJG_ASSERT_KEYWORD_FAILURE(later, protocol::kWorkerFailed);
  EXPECT_TRUE(contains(later.failure_message(), "keyword_timeout")) << later.failure_message();

  auto fresh = c.import_library("Slow");
  RJG_ASSERT_OK(fresh);
  auto token2 = token_of(fresh);
  EXPECT_NE(pid_of(c, token2), pid);
  POOL_KEYWORD_OK(c.run_keyword(token2, "Echo", json::array{"fine"}));
}

// On a shared worker the timeout ends the worker and with it every import it held: the other session's
// calls then fail with the reason (on_worker_loss = "fail"), and its next import gets a new worker.
TEST_F(PoolTimeoutTest, KeywordTimeoutOnASharedWorkerFailsItsOtherImports) {
  start({pool_library("Slow", "isolation = \"shared\"\nkeyword_timeout = \"3s\"\nshutdown_grace = \"1s\"\n"
                              "on_worker_loss = \"fail\"\n")});
  auto [a, token_a] = session("Slow");
  auto [b, token_b] = session("Slow");
  const pid_t pid = pid_of(a, token_a);
  ASSERT_EQ(pid_of(b, token_b), pid);

  auto reply = a.run_keyword(token_a, "Hang");
  RJG_ASSERT_KEYWORD_FAILURE(reply, protocol::kWorkerTimeout);
  EXPECT_TRUE(contains(reply.failure_message(), "keyword_timeout")) << reply.failure_message();
  EXPECT_TRUE(wait_pid_gone(pid, 20s)) << "shared worker " << pid << " still runs after a keyword timed out";

  auto other = b.run_keyword(token_b, "Echo", json::array{1});
  RJG_ASSERT_KEYWORD_FAILURE(other, protocol::kWorkerFailed);
  EXPECT_TRUE(contains(other.failure_message(), "keyword_timeout")) << other.failure_message();

  auto fresh = b.import_library("Slow");
  RJG_ASSERT_OK(fresh);
  EXPECT_NE(pid_of(b, token_of(fresh)), pid);
}

// The worker of a keyword that overran keyword_timeout is stopped in the background (SIGTERM, SIGKILL after
// shutdown_grace): with room under the caps, the session's next keyword is imported again in a new worker
// at once, while the old one (which ignores SIGTERM, as the reference server does in mid-keyword) still
// has its grace.
TEST_F(PoolTimeoutTest, TheStopOfAnOverrunWorkerDoesNotHoldUpTheSessionsNextKeyword) {
  start({pool_library("Slow", "keyword_timeout = \"1s\"\nshutdown_grace = \"60s\"\n")});
  auto [c, token] = session("Slow");
  const pid_t old = pid_of(c, token);
  POOL_KEYWORD_OK(c.run_keyword(token, "Ignore Sigterm"));
  POOL_KEYWORD_FAILURE(c.run_keyword(token, "Hang"), protocol::kWorkerTimeout);

  const pid_t fresh = remember_pid(static_cast<pid_t>(int_keyword(c, token, "Get Pid")));
  EXPECT_NE(fresh, old);
  EXPECT_FALSE(pid_gone(old)) << "the overrun worker did not get its shutdown_grace, though no import needed its place";
  EXPECT_EQ(count_of(gateway().log(), "instead of after its shutdown_grace"), 0u) << gateway().log_tail();
  ::kill(old, SIGKILL);  // rather than wait out its grace when the gateway stops
  EXPECT_TRUE(wait_pid_gone(old, 20s));
}

// The overrun worker did not run out its grace: the log has the one line that says it was killed at once,
// naming the worker and each of `named` (the keyword, the cap, the import that waited).
void expect_killed_at_once(const std::string& log, const std::string& worker, std::vector<std::string> named) {
  const auto tail = log.substr(log.size() > 4000 ? log.size() - 4000 : 0);
  EXPECT_EQ(count_of(log, "ignored SIGTERM for"), 0u) << "it ran out its grace:\n" << tail;
  const auto killed = lines_with(log, "instead of after its shutdown_grace");
  ASSERT_EQ(killed.size(), 1u) << tail;
  named.push_back(worker);
  for (const auto& text : named) EXPECT_TRUE(contains(killed[0], text)) << "no " << text << " in: " << killed[0];
}

// At max_workers, the session's next keyword needs the place that the overrun worker holds: that worker,
// hung by definition, is killed at once instead of running out its shutdown_grace. It counts under
// max_workers until it is gone, so the new worker starts only after its exit.
TEST_F(PoolTimeoutTest, AtMaxWorkersAnOverrunWorkerMakesRoomForItsSessionsNextKeyword) {
  start({pool_library("Capped", "max_workers = 1\nkeyword_timeout = \"1s\"\nshutdown_grace = \"60s\"\n")});
  auto [c, token] = session("Capped");
  const pid_t old = pid_of(c, token);
  POOL_KEYWORD_OK(c.run_keyword(token, "Ignore Sigterm"));
  POOL_KEYWORD_FAILURE(c.run_keyword(token, "Hang"), protocol::kWorkerTimeout);

  // (A bound past queue_timeout: a gateway that lets it wait for the grace answers that it is at capacity.)
  auto next = c.wait_reply(c.send_request(protocol::kRunKeyword, keyword_params(token, "Get Pid")), {}, 60s);
  RJG_ASSERT_KEYWORD_OK(next);
  const pid_t fresh = remember_pid(static_cast<pid_t>(as_int(keyword_value(next))));
  EXPECT_NE(fresh, old);
  EXPECT_TRUE(pid_gone(old)) << "two workers of a library with max_workers = 1 ran at once";
  const auto log = gateway().log();
  expect_killed_at_once(log, fmt::format("worker Capped[{}]", old), {"keyword 'Hang'", "max_workers"});
  const auto exited = log.find(fmt::format("worker Capped[{}]: exited with signal 9", old));
  const auto started = log.find(fmt::format("worker Capped[{}]: started", fresh));
  ASSERT_NE(exited, std::string::npos) << gateway().log_tail();
  ASSERT_NE(started, std::string::npos) << gateway().log_tail();
  EXPECT_LT(exited, started) << "the new worker started before the old one was gone";
}

// The same for [gateway] max_workers, with the import of another library already waiting when the keyword
// overruns: it gets the place of the overrun worker at once.
TEST_F(PoolTimeoutTest, AtTheGatewayCapAnOverrunWorkerMakesRoomForAWaitingImport) {
  GatewayOptions options;
  options.extra_gateway_toml = "max_workers = 1\n";
  start({pool_library("Slow", "keyword_timeout = \"1s\"\nshutdown_grace = \"60s\"\n"), pool_library("Other", "")},
        options);
  auto [a, token_a] = session("Slow");
  const pid_t old = pid_of(a, token_a);
  POOL_KEYWORD_OK(a.run_keyword(token_a, "Ignore Sigterm"));
  client::RpcClient b = connect();
  b.initialize();
  auto import_b = b.send_request(protocol::kImportLibrary, json::object{{"name", "Other"}});
  barrier(b);
  expect_no_answer(b, "the import of Other (gateway at max_workers)");

  POOL_KEYWORD_FAILURE(a.run_keyword(token_a, "Hang"), protocol::kWorkerTimeout);
  auto reply_b = b.wait_reply(import_b, {}, 60s);  // past queue_timeout, as above
  RJG_ASSERT_OK(reply_b);
  EXPECT_NE(pid_of(b, token_of(reply_b)), old);
  EXPECT_TRUE(pid_gone(old)) << "two workers ran under [gateway] max_workers = 1";
  expect_killed_at_once(gateway().log(), fmt::format("worker Slow[{}]", old), {"'Other'"});
}

// ================================================================================================
// Recycling

using PoolRecycleTest = PoolTest;

// A shared worker drains after max_keywords (10, jittered down to 9 at most): it takes no new imports,
// keeps serving the ones it has, and stops when the last of them is released.
TEST_F(PoolRecycleTest, SharedWorkerDrainsAfterMaxKeywordsAndStopsAfterItsLastImport) {
  start({pool_library("Shared", "isolation = \"shared\"\nmax_workers = 2\nmax_keywords = 10\n")});
  auto [a, token_a] = session("Shared");
  auto [b, token_b] = session("Shared");
  const pid_t pid = pid_of(a, token_a);     // keyword 1
  ASSERT_EQ(pid_of(b, token_b), pid);       // keyword 2
  for (int i = 0; i < 6; ++i)               // keywords 3-8
    POOL_KEYWORD_OK(a.run_keyword(token_a, "Echo", json::array{i}));
  const std::string draining = fmt::format("worker Shared[{}]: draining", pid);
  EXPECT_FALSE(contains(gateway().log(), draining)) << "the worker drained before 9 keywords (max_keywords 10)";
  for (int i = 0; i < 2; ++i)               // keywords 9-10
    POOL_KEYWORD_OK(b.run_keyword(token_b, "Echo", json::array{i}));
  ASSERT_TRUE(log_eventually(draining)) << "the worker did not drain after 10 keywords";

  // A draining worker takes no new import: C gets a new worker.
  auto [c, token_c] = session("Shared");
  const pid_t pid_c = pid_of(c, token_c);
  EXPECT_NE(pid_c, pid) << "a draining worker took a new import";

  // It still serves the imports it has, and lives until the last one is released.
  auto echo = a.run_keyword(token_a, "Echo", json::array{"still served"});
  RJG_ASSERT_KEYWORD_OK(echo);
  EXPECT_EQ(keyword_value(echo), json::value("still served"));
  EXPECT_EQ(pid_of(b, token_b), pid);
  POOL_OK(a.finalize_library(token_a));
  POOL_KEYWORD_OK(b.run_keyword(token_b, "Echo", json::array{"last import"}));
  EXPECT_FALSE(pid_gone(pid)) << "the draining worker stopped while it still held an import";
  b.close();
  EXPECT_TRUE(wait_pid_gone(pid, 20s)) << "the drained worker did not stop after its last import ended";

  // The replacement serves on.
  POOL_KEYWORD_OK(c.run_keyword(token_c, "Echo", json::array{1}));
  EXPECT_FALSE(pid_gone(pid_c));
}

// A shared worker above max_rss drains after the keyword that found it so (any worker is above 1 MiB).
TEST_F(PoolRecycleTest, SharedWorkerAboveMaxRssDrains) {
  start({pool_library("Shared", "isolation = \"shared\"\nmax_rss = \"1MiB\"\n")});
  auto [a, token_a] = session("Shared");
  const pid_t pid = pid_of(a, token_a);
  ASSERT_TRUE(log_eventually(fmt::format("worker Shared[{}]: draining: resident memory", pid)))
      << "the worker did not drain above max_rss";
  auto [b, token_b] = session("Shared");
  EXPECT_NE(pid_of(b, token_b), pid) << "a draining worker took a new import";
  POOL_KEYWORD_OK(a.run_keyword(token_a, "Echo", json::array{"still served"}));
  a.close();
  EXPECT_TRUE(wait_pid_gone(pid, 20s)) << "the drained worker did not stop after its last import ended";
}

// ================================================================================================
// Crash backoff

using PoolBackoffTest = PoolTest;

// Start failures in a row back off 1s, 2s, 4s ...; during a backoff an import that needs a new worker
// fails at once (no start) with -32012 saying so; other libraries are not affected.
TEST_F(PoolBackoffTest, RepeatedStartFailuresBackOffExponentially) {
  start({test_library("Broken", {"--exit-on-start", "1"}), test_library("TestLibrary")});
  client::RpcClient c = connect();
  c.initialize();

  auto first = c.import_library("Broken");
  RJG_ASSERT_ERROR(first, protocol::kWorkerFailed);
  EXPECT_TRUE(contains(first.error_message(), "simulated start failure")) << first.error_message();
  EXPECT_FALSE(contains(first.error_message(), "backs off") || contains(first.error_message(), "backing off"))
      << "a single failure already backs off: " << first.error_message();
  auto second = c.import_library("Broken");
  RJG_ASSERT_ERROR(second, protocol::kWorkerFailed);
  EXPECT_TRUE(contains(second.error_message(), "simulated start failure")) << second.error_message();
  EXPECT_TRUE(contains(second.error_message(), "backs off")) << "the second failure in a row does not say that "
                                                                "the library backs off: "
                                                             << second.error_message();

  // Try until an import lands inside a backoff (the windows double, so this takes a few tries at most).
  bool failed_fast = false;
  for (int attempt = 0; attempt < 8 && !failed_fast; ++attempt) {
    const auto starts_before = started_pids("Broken").size();
    auto reply = c.import_library("Broken");
    RJG_ASSERT_ERROR(reply, protocol::kWorkerFailed);
    if (contains(reply.error_message(), "backing off")) {
      failed_fast = true;
      EXPECT_TRUE(contains(reply.error_message(), "Broken")) << reply.error_message();
      EXPECT_EQ(started_pids("Broken").size(), starts_before) << "an import during the backoff started a worker";
      ASSERT_TRUE(reply.error->contains("data")) << describe(reply);
      EXPECT_EQ(reply.error->at("data").as_object().at("library"), json::value("Broken")) << describe(reply);
    }
  }
  EXPECT_TRUE(failed_fast) << "no import failed fast with 'backing off'";

  // Another library is not held back.
  auto ok = c.import_library("TestLibrary");
  RJG_ASSERT_OK(ok);
  POOL_KEYWORD_OK(c.run_keyword(token_of(ok), "Echo", json::array{1}));

  // The delays double from 1s with every failure in a row (bounded at 60s).
  std::regex delay_re(R"(library Broken: (\d+) failures in a row; next worker start in ([0-9.]+)(ms|s))");
  auto log = gateway().log();
  std::vector<std::pair<int, double>> delays;
  for (auto it = std::sregex_iterator(log.begin(), log.end(), delay_re); it != std::sregex_iterator(); ++it) {
    double seconds = std::stod((*it)[2].str()) / ((*it)[3].str() == "ms" ? 1000.0 : 1.0);
    delays.emplace_back(std::stoi((*it)[1].str()), seconds);
  }
  ASSERT_FALSE(delays.empty()) << "no backoff was logged";
  for (const auto& [failures, seconds] : delays) {
    EXPECT_GE(failures, 2);
    EXPECT_DOUBLE_EQ(seconds, std::min(60.0, static_cast<double>(1u << (failures - 2))))
        << "backoff after " << failures << " failures";
  }
}

// A library whose prewarmed worker cannot start does not retry in a tight loop: the retries back off.
TEST_F(PoolBackoffTest, PrewarmStartFailuresBackOff) {
  start({pool_library("Broken", "prewarm = 1\n", {"--exit-on-start", "1"})});
  ASSERT_TRUE(log_eventually("library Broken: 3 failures in a row; next worker start in 2.0s"))
      << "the prewarm retries did not back off 1s, then 2s";
  EXPECT_TRUE(contains(gateway().log(), "library Broken: 2 failures in a row; next worker start in 1.0s"));
  // Far fewer starts than a retry loop without backoff would have made by now.
  EXPECT_LE(started_pids("Broken").size(), 4u);
  // An import meanwhile is told about the backoff.
  client::RpcClient c = connect();
  c.initialize();
  auto reply = c.import_library("Broken");
  RJG_ASSERT_ERROR(reply, protocol::kWorkerFailed);
  EXPECT_TRUE(contains(reply.error_message(), "back")) << reply.error_message();
}

// Workers that die while idle count as a crash loop too.
TEST_F(PoolBackoffTest, IdleDeathsBackOff) {
  // "fail": a call on the dead worker's token only reports the death (the default would start a worker).
  start({pool_library("Fragile", "on_worker_loss = \"fail\"\n")});
  client::RpcClient c = connect();
  c.initialize();
  bool failed_fast = false;
  int deaths = 0;
  for (int round = 0; round < 8 && !failed_fast; ++round) {
    auto reply = c.import_library("Fragile");
    if (!reply.ok()) {
      ASSERT_EQ(reply.error_code(), protocol::kWorkerFailed) << describe(reply);
      ASSERT_TRUE(contains(reply.error_message(), "backing off")) << describe(reply);
      failed_fast = true;
      break;
    }
    const auto token = token_of(reply);
    const pid_t pid = pid_of(c, token);
    ASSERT_EQ(::kill(pid, SIGKILL), 0);
    ASSERT_TRUE(wait_pid_gone(pid, 20s));
    // The answer to a call on the dead worker comes after the gateway has established the death.
    auto dead = c.run_keyword(token, "Echo", json::array{1});
    RJG_ASSERT_KEYWORD_FAILURE(dead, protocol::kWorkerFailed);
    ++deaths;
  }
  EXPECT_TRUE(failed_fast) << "imports after " << deaths << " idle deaths in a row never failed fast";
  EXPECT_GE(deaths, 2) << "backing off before the second failure in a row";
  EXPECT_TRUE(contains(gateway().log(), "library Fragile: 2 failures in a row"));
}

// A keyword that kills its own worker is the caller's business: it does not slow down other imports.
TEST_F(PoolBackoffTest, CrashesDuringKeywordsDoNotBackOff) {
  start({test_library("TestLibrary")});
  client::RpcClient c = connect();
  c.initialize();
  for (const char* mode : {"exit", "abort", "sigkill", "segv"}) {
    auto reply = c.import_library("TestLibrary");
    RJG_ASSERT_OK(reply);
    auto crash = c.run_keyword(token_of(reply), "Crash", json::array{mode});
    RJG_ASSERT_KEYWORD_FAILURE(crash, protocol::kWorkerFailed);
  }
  auto reply = c.import_library("TestLibrary");
  RJG_ASSERT_OK(reply);
  POOL_KEYWORD_OK(c.run_keyword(token_of(reply), "Echo", json::array{1}));
  EXPECT_FALSE(contains(gateway().log(), "failures in a row")) << "crashes during keywords were counted";
}

// ================================================================================================
// A client that disconnects mid-keyword

using PoolDisconnectTest = PoolTest;

// The dedicated worker (here a prewarmed one) is ended, not left to finish its keyword.
TEST_F(PoolDisconnectTest, MidKeywordEndsTheDedicatedWorker) {
  start({pool_library("Warm", "prewarm = 1\n")});
  ASSERT_TRUE(log_eventually("library Warm: worker pid")) << "no prewarmed worker";
  auto [c, token] = session("Warm");
  const pid_t pid = pid_of(c, token);
  c.send_request(protocol::kRunKeyword, keyword_params(token, "Wait For File", json::array{gate("never"), 600}));
  ASSERT_TRUE(wait_for_log(c, "waiting for"));
  c.close();
  EXPECT_TRUE(wait_pid_gone(pid, 20s)) << "worker " << pid << " still runs after its client disconnected";
  auto [d, token_d] = session("Warm");
  POOL_KEYWORD_OK(d.run_keyword(token_d, "Echo", json::array{1}));
}

// On a shared worker the keyword runs to its end, its late answer goes nowhere, the departed session's
// library instance is finalized in the worker, and the other sessions are not disturbed.
TEST_F(PoolDisconnectTest, MidKeywordOnASharedWorkerDropsTheLateAnswerAndFinalizesTheToken) {
  start({pool_library("Shared", "isolation = \"shared\"\nmax_workers = 1\n")});
  auto [a, token_a] = session("Shared");
  auto [b, token_b] = session("Shared");
  const pid_t pid = pid_of(a, token_a);
  ASSERT_EQ(pid_of(b, token_b), pid);
  ASSERT_EQ(int_keyword(b, token_b, "Live Instances"), 2);

  a.send_request(protocol::kRunKeyword, keyword_params(token_a, "Wait For File", json::array{gate("go")}));
  ASSERT_TRUE(wait_for_log(a, "waiting for"));
  const auto closings = count_of(gateway().log(), ": closing: ");
  a.close();
  ASSERT_TRUE(log_eventually(": closing: ", closings + 1)) << "the gateway did not notice the disconnect";
  open_gate("go");  // only now can the keyword answer: its session is gone

  // B's calls queue behind the late keyword and A's finalize, then see one instance left.
  EXPECT_TRUE(eventually([&] { return int_keyword(b, token_b, "Live Instances") == 1; }, 30s))
      << "the departed session's library instance was not finalized in the shared worker";
  EXPECT_EQ(pid_of(b, token_b), pid);
  EXPECT_FALSE(pid_gone(pid)) << "the shared worker ended with one session";
  POOL_KEYWORD_OK(b.run_keyword(token_b, "Echo", json::array{"undisturbed"}));
  EXPECT_FALSE(contains(gateway().log(), "bug:")) << gateway().log_tail(50);
}

// ================================================================================================
// Resource limits

using PoolRlimitTest = PoolTest;

// rlimits apply to the library's worker (and only to it): an allocation past RLIMIT_AS fails (or kills
// that worker), descriptors stop at RLIMIT_NOFILE, and the gateway serves on.
TEST_F(PoolRlimitTest, LimitsApplyToTheWorkerOnly) {
  // An AddressSanitizer worker reserves terabytes of shadow address space at start: RLIMIT_AS kills it
  // before main(). So does a ThreadSanitizer worker (its shadow memory and its allocator's fixed region):
  // it dies in the runtime's start-up ("CHECK failed: sanitizer_allocator_primary64.h"). The normal
  // build runs this test.
  if (sanitizer_under_test() == "address")
    GTEST_SKIP() << "RLIMIT_AS cannot be tested with AddressSanitizer-built workers";
  if (sanitizer_under_test() == "thread")
    GTEST_SKIP() << "RLIMIT_AS cannot be tested with ThreadSanitizer-built workers";
  constexpr std::int64_t kAddressSpace = 512ll << 20;
  start({pool_library("Limited", "rlimits = { address_space = \"512MiB\", open_files = 64, cpu_seconds = 3600 }\n"),
         test_library("Free")});
  auto [c, token] = session("Limited");
  const pid_t pid = pid_of(c, token);
  EXPECT_EQ(int_keyword(c, token, "Get Rlimit", json::array{"as"}), kAddressSpace);
  EXPECT_EQ(int_keyword(c, token, "Get Rlimit", json::array{"nofile"}), 64);
  EXPECT_EQ(int_keyword(c, token, "Get Rlimit", json::array{"cpu"}), 3600);

  POOL_KEYWORD_OK(c.run_keyword(token, "Allocate", json::array{16 << 20}));  // well within
  const auto opened = int_keyword(c, token, "Open Files", json::array{200});
  EXPECT_GT(opened, 0);
  EXPECT_LT(opened, 64) << "more descriptors than RLIMIT_NOFILE = 64";

  // Either the worker refuses the allocation (MemoryError) and serves on, or it dies of it (the gateway's
  // WorkerFailed); both are that keyword's failure.
  auto big = c.run_keyword(token, "Allocate", json::array{std::int64_t{2} << 30});
  ASSERT_TRUE(big.ok()) << describe(big);
  ASSERT_NE(big.keyword_error(), nullptr) << "allocating 2 GiB under a 512 MiB RLIMIT_AS succeeded: "
                                          << describe(big);
  if (big.keyword_error_type() != protocol::keyword_error_type(protocol::kWorkerFailed)) {
    EXPECT_EQ(big.keyword_error()->at("type"), json::value("MemoryError")) << describe(big);
    POOL_KEYWORD_OK(c.run_keyword(token, "Echo", json::array{"survived"}));
  } else {
    EXPECT_TRUE(wait_pid_gone(pid, 20s));
  }

  // The gateway lives on, its own limits untouched, and other libraries' workers get none of these.
  ASSERT_TRUE(gateway().running());
  auto [f, token_f] = session("Free");
  rlimit own{};
  ::getrlimit(RLIMIT_AS, &own);
  const std::int64_t own_as = own.rlim_cur == RLIM_INFINITY ? -1 : static_cast<std::int64_t>(own.rlim_cur);
  EXPECT_EQ(int_keyword(f, token_f, "Get Rlimit", json::array{"as"}), own_as);
  auto limits = read_file(fmt::format("/proc/{}/limits", gateway().pid()));
  auto as_line = lines_with(limits, "Max address space");
  ASSERT_EQ(as_line.size(), 1u) << limits;
  if (own_as == -1) {
    EXPECT_TRUE(contains(as_line[0], "unlimited")) << as_line[0];
  }
}

// cpu_affinity = "one": each worker is bound to one of the gateway's CPUs, taken in turn, so that they
// spread over them; a library without the key leaves its workers on every CPU the gateway may use.
std::set<int> allowed_cpus(pid_t pid) {  // Cpus_allowed_list of /proc/PID/status: "0-3,6"
  std::set<int> cpus;
  const auto lines = lines_with(read_file(fmt::format("/proc/{}/status", pid)), "Cpus_allowed_list:");
  if (lines.size() != 1) return cpus;
  std::istringstream in(lines[0].substr(lines[0].find(':') + 1));
  for (std::string range; std::getline(in, range, ',');) {
    const auto dash = range.find('-');
    const int first = std::stoi(range), last = dash == std::string::npos ? first : std::stoi(range.substr(dash + 1));
    for (int cpu = first; cpu <= last; ++cpu) cpus.insert(cpu);
  }
  return cpus;
}

using PoolCpuAffinityTest = PoolTest;

TEST_F(PoolCpuAffinityTest, OneBindsEachWorkerToOneOfTheGatewaysCpusInTurn) {
  start({pool_library("Bound", "cpu_affinity = \"one\"\n"), test_library("Free")});
  const std::set<int> gateway_cpus = allowed_cpus(gateway().pid());
  ASSERT_FALSE(gateway_cpus.empty());
  std::vector<std::pair<client::RpcClient, std::string>> sessions;
  std::set<int> used;
  for (std::size_t i = 0; i < std::min<std::size_t>(4, 2 * gateway_cpus.size()); ++i) {
    sessions.push_back(session("Bound"));
    auto& [c, token] = sessions.back();
    const std::set<int> cpus = allowed_cpus(pid_of(c, token));
    ASSERT_EQ(cpus.size(), 1u) << "worker " << i << " may run on " << ::testing::PrintToString(cpus);
    EXPECT_TRUE(gateway_cpus.contains(*cpus.begin())) << "CPU " << *cpus.begin() << " is not the gateway's";
    used.insert(*cpus.begin());
    POOL_KEYWORD_OK(c.run_keyword(token, "Echo", json::array{"bound"}));
  }
  // In turn: with two CPUs or more, the workers are not all on one.
  if (gateway_cpus.size() > 1) {
    EXPECT_GT(used.size(), 1u);
  }
  auto [f, token_f] = session("Free");
  EXPECT_EQ(allowed_cpus(pid_of(f, token_f)), gateway_cpus);
}

// ================================================================================================
// Process hygiene

using PoolHygieneTest = PoolTest;

// Every worker - cold, prewarmed or shared - leads a process group of its own and is the gateway's child.
TEST_F(PoolHygieneTest, WorkerLeadsItsOwnProcessGroup) {
  start({test_library("Cold"), pool_library("Warm", "prewarm = 1\n"),
         pool_library("Shared", "isolation = \"shared\"\n")});
  ASSERT_TRUE(log_eventually("library Warm: worker pid")) << "no prewarmed worker";
  for (const char* library : {"Cold", "Warm", "Shared"}) {
    SCOPED_TRACE(library);
    auto [c, token] = session(library);
    const pid_t pid = pid_of(c, token);
    EXPECT_EQ(int_keyword(c, token, "Get Pgid"), pid) << "the worker does not lead its own process group";
    EXPECT_EQ(int_keyword(c, token, "Get Ppid"), gateway().pid());
    auto info = proc_info(pid);
    ASSERT_TRUE(info);
    EXPECT_EQ(info->pgid, pid);
    EXPECT_NE(info->pgid, proc_info(gateway().pid())->pgid);
  }
}

// A worker inherits stdin, stdout and stderr (pipes to the gateway) and nothing else: not the gateway's
// listening socket, not a client's connection, not another worker's pipes.
TEST_F(PoolHygieneTest, WorkerInheritsOnlyStdio) {
  start({test_library("Cold"), pool_library("Warm", "prewarm = 1\n"),
         pool_library("Shared", "isolation = \"shared\"\n")});
  ASSERT_TRUE(log_eventually("library Warm: worker pid")) << "no prewarmed worker";
  // Other sessions and workers exist while the workers under test start.
  auto [x, token_x] = session("Cold");
  for (const char* library : {"Cold", "Warm", "Shared"}) {
    SCOPED_TRACE(library);
    auto [c, token] = session(library);
    auto fds = c.run_keyword(token, "List Fds");
    RJG_ASSERT_KEYWORD_OK(fds);
    auto targets = c.run_keyword(token, "Describe Fds");
    const json::value described = keyword_value(targets);
    EXPECT_EQ(keyword_value(fds), json::value(json::array{0, 1, 2})) << json::serialize(described);
    const auto listening = listening_sockets();
    for (const auto& [fd, target] : described.as_object()) {
      EXPECT_TRUE(target.as_string().starts_with("pipe:")) << "fd " << fd << " is " << target.as_string();
      EXPECT_FALSE(listening.count(std::string(target.as_string())))
          << "fd " << fd << " of the worker is a listening socket (" << target.as_string() << ")";
    }
  }
}

// The gateway's service-manager variables never reach a worker; the rest of its environment does, and
// the library's env is added on top (replacing a variable of the same name).
TEST_F(PoolHygieneTest, ServiceManagerVariablesDoNotReachTheWorker) {
  GatewayOptions options;
  options.env = {{"LISTEN_FDS", "1"},           {"LISTEN_PID", "1"},
                 {"LISTEN_FDNAMES", "gateway"}, {"NOTIFY_SOCKET", "/run/systemd/notify"},
                 {"WATCHDOG_USEC", "30000000"}, {"WATCHDOG_PID", "1"},
                 {"RJG_FROM_GATEWAY", "inherited"}, {"RJG_OVERRIDDEN", "gateway value"}};
  auto cold = test_library("Cold");
  cold.env["RJG_OVERRIDDEN"] = "library value";
  cold.env["RJG_LIBRARY_ONLY"] = "library only";
  auto warm = pool_library("Warm", "prewarm = 1\n");
  warm.env["RJG_OVERRIDDEN"] = "warm value";
  start({cold, warm}, options);
  ASSERT_TRUE(log_eventually("library Warm: worker pid")) << "no prewarmed worker";

  for (const char* library : {"Cold", "Warm"}) {
    SCOPED_TRACE(library);
    auto [c, token] = session(library);
    auto env = [&](const char* name) {
      auto reply = c.run_keyword(token, "Get Env", json::array{name});
      if (!reply.ok() || reply.keyword_error()) throw std::runtime_error(describe(reply));
      return keyword_value(reply);
    };
    for (const char* name : {"LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES", "NOTIFY_SOCKET", "WATCHDOG_USEC",
                             "WATCHDOG_PID"})
      EXPECT_TRUE(env(name).is_null()) << name << " reached the worker: " << json::serialize(env(name));
    EXPECT_EQ(env("RJG_FROM_GATEWAY"), json::value("inherited"));
    EXPECT_EQ(env("RJG_TEST_LIBRARY"), json::value(library));
    if (std::string_view(library) == "Cold") {
      EXPECT_EQ(env("RJG_OVERRIDDEN"), json::value("library value"));
      EXPECT_EQ(env("RJG_LIBRARY_ONLY"), json::value("library only"));
    } else {
      EXPECT_EQ(env("RJG_OVERRIDDEN"), json::value("warm value"));
      EXPECT_TRUE(env("RJG_LIBRARY_ONLY").is_null());
    }
  }
}

// A worker that ignores SIGTERM and lingers after robot/exit is SIGKILLed after shutdown_grace, and so
// is the child it started in its process group (which ignores SIGTERM as well).
TEST_F(PoolHygieneTest, SigtermIgnoringWorkerAndItsChildAreKilledAfterFinalize) {
  auto stubborn = test_library("Stubborn");
  stubborn.shutdown_grace = "1s";
  start({stubborn});
  auto [c, token] = session("Stubborn");
  const pid_t pid = pid_of(c, token);
  POOL_KEYWORD_OK(c.run_keyword(token, "Ignore Sigterm"));
  const pid_t child = remember_pid(static_cast<pid_t>(int_keyword(c, token, "Spawn Child")));
  auto info = proc_info(child);
  ASSERT_TRUE(info);
  EXPECT_EQ(info->pgid, pid) << "the spawned child is not in the worker's group";

  POOL_OK(c.finalize_library(token));
  EXPECT_TRUE(wait_pid_gone(pid, 30s)) << "the worker ignoring SIGTERM was not killed";
  // The group kill ends the child; as an orphan it is reparented to the gateway (a child subreaper),
  // which reaps it and logs how it ended.
  EXPECT_TRUE(wait_pid_gone(child, 30s)) << "the worker's child " << child << " survived it";
  EXPECT_TRUE(log_eventually(
      fmt::format("reaped pid {}, a worker's descendant reparented to the gateway; it ended with signal 9", child)))
      << gateway().log();

  auto log = gateway().log();
  const std::string who = fmt::format("worker Stubborn[{}]: ", pid);
  auto sigterm = log.find(who + "still running");
  auto sigkill = log.find(who + "ignored SIGTERM");
  ASSERT_NE(sigterm, std::string::npos) << "no SIGTERM after the grace period was logged";
  ASSERT_NE(sigkill, std::string::npos) << "no SIGKILL after the second grace period was logged";
  EXPECT_LT(sigterm, sigkill);
  EXPECT_TRUE(contains(log, who + "exited with signal 9")) << log;
}

// A busy worker whose client goes away gets SIGTERM at once; one that ignores it, SIGKILL after the grace.
TEST_F(PoolHygieneTest, SigtermIgnoringWorkerIsKilledAfterADisconnectMidKeyword) {
  auto stubborn = test_library("Stubborn");
  stubborn.shutdown_grace = "1s";
  start({stubborn});
  auto [c, token] = session("Stubborn");
  const pid_t pid = pid_of(c, token);
  POOL_KEYWORD_OK(c.run_keyword(token, "Ignore Sigterm"));
  c.send_request(protocol::kRunKeyword, keyword_params(token, "Wait For File", json::array{gate("never"), 600}));
  ASSERT_TRUE(wait_for_log(c, "waiting for"));
  c.close();
  EXPECT_TRUE(wait_pid_gone(pid, 30s)) << "the busy worker ignoring SIGTERM outlived its client";
  EXPECT_TRUE(contains(gateway().log(), fmt::format("worker Stubborn[{}]: ignored SIGTERM", pid)));
}

// Each state change of a worker is logged with its library and pid, in order.
TEST_F(PoolHygieneTest, EveryStateChangeIsLoggedWithLibraryAndPid) {
  start({test_library("TestLibrary")});
  auto [c, token] = session("TestLibrary");
  const pid_t pid = pid_of(c, token);
  POOL_OK(c.finalize_library(token));
  ASSERT_TRUE(wait_pid_gone(pid, 20s));
  ASSERT_TRUE(log_eventually(fmt::format("library TestLibrary: worker pid {} gone", pid)));

  auto [d, token_d] = session("TestLibrary");
  const pid_t crashed = pid_of(d, token_d);
  POOL_KEYWORD_FAILURE(d.run_keyword(token_d, "Crash", json::array{"exit"}), protocol::kWorkerFailed);

  auto log = gateway().log();
  const std::string who = fmt::format("worker TestLibrary[{}]: ", pid);
  std::size_t at = 0;
  for (std::string step : {who + "started", who + "starting -> idle", who + "idle -> busy", who + "busy -> idle",
                           who + "idle -> stopping", who + "exited with exit code 0",
                           fmt::format("library TestLibrary: worker pid {} gone", pid)}) {
    auto found = log.find(step, at);
    ASSERT_NE(found, std::string::npos) << "missing, or out of order: '" << step << "'\n" << log;
    at = found + step.size();
  }
  EXPECT_TRUE(contains(log, fmt::format("worker TestLibrary[{}]: exited unexpectedly", crashed))) << log;
}

}  // namespace
}  // namespace rjg::test
