// Workers that crash, fail to start, hang, or lose their client: every request still gets one
// clear answer, and no worker process is left behind.
#include "tests/integration/gateway_test.hpp"

#include <fmt/format.h>

#include <regex>

namespace rjg::test {
namespace {

// ------------------------------------------------------------------------------------------------
// Crash mid-keyword

class CrashTest : public GatewayTest {
 protected:
  void crash_mid_keyword(const std::string& mode);
};

// The keyword fails (WorkerFailed, as a result: the session's own answer is untouched) naming library, pid
// and exit code or signal; the session goes on.
void CrashTest::crash_mid_keyword(const std::string& mode) {
  start();
  auto [c, token] = session();
  pid_t pid = remember_pid(worker_pid(c, token));

  std::vector<std::string> logs;
  auto reply = c.run_keyword(token, "Crash", json::array{json::string(mode)}, {}, [&](const protocol::Message& m) {
    if (m.method() == protocol::kLog && m.params().is_object())
      logs.emplace_back(m.params().get_object().at("message").as_string());
  });
  RJG_ASSERT_KEYWORD_FAILURE(reply, protocol::kWorkerFailed);
  const std::string msg = reply.failure_message();
  EXPECT_TRUE(contains(msg, "TestLibrary")) << msg;
  EXPECT_TRUE(contains(msg, fmt::format("pid {}", pid))) << msg;
  if (mode == "exit") {
    EXPECT_TRUE(contains(msg, "exit code 3")) << msg;
  } else {
    const char* sig = mode == "abort" ? "(SIGABRT|signal\\D{0,3}6\\b)"
                      : mode == "sigkill" ? "(SIGKILL|signal\\D{0,3}9\\b)"
                                          : "(SIGSEGV|signal\\D{0,3}11\\b)";
    EXPECT_TRUE(std::regex_search(msg, std::regex(sig))) << "message does not name the signal: " << msg;
  }
  bool announced = false;
  for (const auto& l : logs) announced = announced || contains(l, fmt::format("about to crash ({})", mode));
  EXPECT_TRUE(announced) << "the 'about to crash (" << mode << ")' log did not arrive before the error";

  EXPECT_TRUE(wait_pid_gone(pid, 20s)) << "crashed worker pid " << pid << " not reaped";

  // The token goes on, not a hang: the library is imported again in a new worker (on_worker_loss =
  // "reimport", the default; worker_loss_test.cpp has the rest of it).
  auto again = c.run_keyword(token, "Echo", json::array{1});
  RJG_ASSERT_KEYWORD_OK(again);
  EXPECT_EQ(keyword_value(again), json::value(1));
  EXPECT_NE(remember_pid(worker_pid(c, token)), pid);

  // The session is still usable: a fresh import works.
  auto fresh = c.import_library("TestLibrary");
  RJG_ASSERT_OK(fresh);
  std::string token2(fresh.result->as_object().at("token").as_string());
  auto echo = c.run_keyword(token2, "Echo", json::array{"alive"});
  RJG_ASSERT_KEYWORD_OK(echo);
  EXPECT_EQ(keyword_value(echo), json::value("alive"));
  pid_t pid2 = remember_pid(worker_pid(c, token2));
  EXPECT_NE(pid2, pid);
}

TEST_F(CrashTest, AbortMidKeyword) { crash_mid_keyword("abort"); }
TEST_F(CrashTest, SigkillMidKeyword) { crash_mid_keyword("sigkill"); }
TEST_F(CrashTest, ExitMidKeyword) { crash_mid_keyword("exit"); }
TEST_F(CrashTest, SegvMidKeyword) { crash_mid_keyword("segv"); }

// With on_worker_loss = "fail": under the default a call the gateway reads after it learned of the loss
// would run in a new worker, and which calls those are is a race.
TEST_F(CrashTest, QueuedCallsBehindACrashEachGetOneError) {
  auto library = test_library("TestLibrary");
  library.extra_toml = "on_worker_loss = \"fail\"\n";
  start({library});
  auto [c, token] = session();
  remember_pid(worker_pid(c, token));
  auto params = [&](std::string_view name, json::array args) {
    return json::object{{"library_token", token}, {"name", name}, {"args", std::move(args)}, {"kwargs", json::object{}}};
  };
  // Pipelined on one token: the gateway queues the Echo calls behind the Crash.
  auto crash_id = c.send_request(protocol::kRunKeyword, params("Crash", json::array{"exit"}));
  auto echo1 = c.send_request(protocol::kRunKeyword, params("Echo", json::array{1}));
  auto echo2 = c.send_request(protocol::kRunKeyword, params("Echo", json::array{2}));
  auto crashed = c.wait_reply(crash_id);
  RJG_EXPECT_KEYWORD_FAILURE(crashed, protocol::kWorkerFailed);
  for (const auto& id : {echo1, echo2}) {
    auto r = c.wait_reply(id);
    EXPECT_TRUE(r.ok()) << "a call queued behind a crash was not answered as a keyword: " << describe(r);
    EXPECT_NE(r.keyword_error(), nullptr) << "a call queued behind a crash succeeded: " << describe(r);
    EXPECT_EQ(r.keyword_error_type(), protocol::keyword_error_type(protocol::kWorkerFailed)) << describe(r);
  }
  // Exactly one answer each: nothing else arrives before the next call's answer.
  auto fresh = c.import_library("TestLibrary");
  RJG_ASSERT_OK(fresh);
  EXPECT_EQ(c.pending_messages(), 0u) << "stray extra answers after the crash";
}

// With on_worker_loss = "fail" (the default imports the library again, worker_loss_test.cpp).
TEST_F(CrashTest, WorkerKilledWhileIdleFailsTheNextCall) {
  auto library = test_library("TestLibrary");
  library.extra_toml = "on_worker_loss = \"fail\"\n";
  start({library});
  auto [c, token] = session();
  pid_t pid = remember_pid(worker_pid(c, token));
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  EXPECT_TRUE(wait_pid_gone(pid, 20s)) << "killed worker pid " << pid << " not reaped";
  auto reply = c.run_keyword(token, "Echo", json::array{1});
  ASSERT_TRUE(reply.ok()) << "a keyword on a killed worker was not answered as a keyword: " << describe(reply);
  ASSERT_NE(reply.keyword_error(), nullptr) << "a keyword on a killed worker succeeded: " << describe(reply);
  EXPECT_TRUE(protocol::keyword_error_ends_import(reply.keyword_error_type())) << describe(reply);
  EXPECT_TRUE(contains(reply.failure_message(), fmt::format("pid {}", pid))) << reply.failure_message();
  auto [c2, t2] = session();
  RJG_EXPECT_KEYWORD_OK(c2.run_keyword(t2, "Echo", json::array{1}));
}

// ------------------------------------------------------------------------------------------------
// Start failures

using StartFailureTest = GatewayTest;

TEST_F(StartFailureTest, WorkerExitingAtStartIsReportedWithExitCodeAndStderr) {
  start({test_library("TestLibrary"), test_library("ExitOnStart", {"--exit-on-start", "7"})});
  client::RpcClient c = connect();
  c.initialize();
  auto reply = c.import_library("ExitOnStart");
  RJG_ASSERT_ERROR(reply, protocol::kWorkerFailed);
  auto msg = reply.error_message();
  EXPECT_TRUE(contains(msg, "exit code 7")) << msg;
  EXPECT_TRUE(contains(msg, "simulated start failure")) << msg;
  // The session goes on.
  auto ok = c.import_library("TestLibrary");
  RJG_EXPECT_OK(ok);
}

TEST_F(StartFailureTest, WorkerThatNeverInitializesTimesOut) {
  auto no_init = test_library("NoInit", {"--no-initialize"});
  no_init.startup_timeout = "1s";
  start({test_library("TestLibrary"), no_init});
  client::RpcClient c = connect();
  c.initialize();
  auto reply = c.import_library("NoInit");
  RJG_ASSERT_ERROR(reply, protocol::kWorkerTimeout);
  EXPECT_TRUE(contains(reply.error_message(), "NoInit")) << reply.error_message();
  auto ok = c.import_library("TestLibrary");
  RJG_EXPECT_OK(ok);
}

TEST_F(StartFailureTest, MissingCommandIsReportedByName) {
  LibrarySpec missing;
  missing.name = "Missing";
  missing.command = {"/nonexistent/rjg-dir/robot-missing-worker", "--flag"};
  start({test_library("TestLibrary"), missing});
  client::RpcClient c = connect();
  c.initialize();
  auto reply = c.import_library("Missing");
  RJG_ASSERT_ERROR(reply, protocol::kWorkerFailed);
  EXPECT_TRUE(contains(reply.error_message(), "/nonexistent/rjg-dir/robot-missing-worker")) << reply.error_message();
  auto ok = c.import_library("TestLibrary");
  RJG_EXPECT_OK(ok);
}

TEST_F(StartFailureTest, SlowInitializeWithinTheStartupTimeoutWorks) {
  auto slow = test_library("SlowInit", {"--initialize-delay", "0.5"});
  slow.startup_timeout = "20s";
  start({slow});
  auto [c, token] = session("SlowInit");
  auto echo = c.run_keyword(token, "Echo", json::array{"late but fine"});
  RJG_ASSERT_KEYWORD_OK(echo);
}

TEST_F(StartFailureTest, WorkerFloodingStderrAtStartDoesNotStall) {
  // Far more than a pipe buffer: the gateway must keep draining the worker's stderr.
  auto chatty = test_library("Chatty", {"--stderr-lines", "20000"});
  chatty.startup_timeout = "30s";
  start({chatty});
  auto [c, token] = session("Chatty");
  auto echo = c.run_keyword(token, "Echo", json::array{"heard"});
  RJG_ASSERT_KEYWORD_OK(echo);
  EXPECT_EQ(keyword_value(echo), json::value("heard"));
}

TEST_F(StartFailureTest, FailingImportIsAnErrorAndTheSessionGoesOn) {
  start({test_library("TestLibrary"), test_library("FailImport", {"--fail-import"})});
  client::RpcClient c = connect();
  c.initialize();
  auto reply = c.import_library("FailImport");
  ASSERT_FALSE(reply.ok()) << describe(reply);
  EXPECT_FALSE(reply.error_message().empty()) << describe(reply);
  auto ok = c.import_library("TestLibrary");
  RJG_EXPECT_OK(ok);
}

// ------------------------------------------------------------------------------------------------
// Client goes away without finalize

using DisconnectTest = GatewayTest;

TEST_F(DisconnectTest, IdleSessionClosedWithoutFinalize) {
  start();
  auto [c, token] = session();
  pid_t pid = remember_pid(worker_pid(c, token));
  auto second = c.import_library("SecondLibrary");
  RJG_ASSERT_OK(second);
  pid_t pid2 = remember_pid(worker_pid(c, std::string(second.result->as_object().at("token").as_string())));
  c.close();
  EXPECT_TRUE(wait_pid_gone(pid, 20s)) << "worker pid " << pid << " outlived its session";
  EXPECT_TRUE(wait_pid_gone(pid2, 20s)) << "worker pid " << pid2 << " outlived its session";
  // Other sessions are unaffected.
  auto [c2, t2] = session();
  RJG_EXPECT_KEYWORD_OK(c2.run_keyword(t2, "Echo", json::array{1}));
}

// The client disconnects while `keyword` runs: the worker must be stopped, not left to finish.
class DisconnectMidKeywordTest : public GatewayTest {
 protected:
  void disconnect_mid_keyword(const std::string& keyword, const json::array& args);
};

void DisconnectMidKeywordTest::disconnect_mid_keyword(const std::string& keyword, const json::array& args) {
  start();
  auto [c, token] = session();
  pid_t pid = remember_pid(worker_pid(c, token));
  c.send_request(protocol::kRunKeyword,
                 json::object{{"library_token", token}, {"name", keyword}, {"args", args}, {"kwargs", json::object{}}});
  // Let the call reach the worker (not a timing assertion: the test holds either way).
  std::this_thread::sleep_for(200ms);
  c.close();
  // A deadline well under the 30 s sleep: the worker must be stopped, not left to finish.
  EXPECT_TRUE(wait_pid_gone(pid, 20s)) << "worker pid " << pid << " still running " << keyword
                                       << " after its client disconnected";
  auto [c2, t2] = session();
  RJG_EXPECT_KEYWORD_OK(c2.run_keyword(t2, "Echo", json::array{1}));
}

TEST_F(DisconnectMidKeywordTest, DuringSleep30) { disconnect_mid_keyword("Sleep", json::array{30}); }
TEST_F(DisconnectMidKeywordTest, DuringHang) { disconnect_mid_keyword("Hang", json::array{}); }

TEST_F(DisconnectTest, SessionClosedAfterShutdownWithoutExit) {
  start();
  auto [c, token] = session();
  pid_t pid = remember_pid(worker_pid(c, token));
  RJG_ASSERT_OK(c.shutdown());
  c.close();
  EXPECT_TRUE(wait_pid_gone(pid, 20s));
}

// ------------------------------------------------------------------------------------------------
// Stray output on a worker's stdout

using StrayOutputTest = GatewayTest;

// The sum of the "skipped N bytes on stdout" log lines of one worker.
std::size_t skipped_bytes_logged(const std::string& log, const std::string& library, pid_t pid) {
  const std::regex line(fmt::format(R"(worker {}\[{}\]: skipped (\d+) bytes on stdout)", library, pid));
  std::size_t total = 0;
  for (std::sregex_iterator it(log.begin(), log.end(), line), end; it != end; ++it) total += std::stoul((*it)[1].str());
  return total;
}

// 8 MiB of header-like garbage lines: the worker is ended once 1 MiB (the bound, max_stray_bytes)
// has been dropped since its last frame, and the keyword fails with a message naming library, pid,
// the count and a sample. The count in the log is exactly one byte past the bound.
TEST_F(StrayOutputTest, EightMiBOfGarbageLinesEndTheWorkerAfterABoundedCount) {
  start();
  auto [c, token] = session();
  const pid_t pid = remember_pid(worker_pid(c, token));
  constexpr std::size_t kGarbage = 8u << 20;
  constexpr std::size_t kBound = 1u << 20;
  auto reply = c.run_keyword(token, "Write Garbage Lines", json::array{"Content-Length: 1\r\n", kGarbage});
  RJG_ASSERT_KEYWORD_FAILURE(reply, protocol::kWorkerFailed);
  const std::string msg = reply.failure_message();
  EXPECT_TRUE(contains(msg, "TestLibrary")) << msg;
  EXPECT_TRUE(contains(msg, fmt::format("pid {}", pid))) << msg;
  EXPECT_TRUE(contains(msg, fmt::format("more than {} bytes of stray output", kBound))) << msg;
  EXPECT_TRUE(contains(msg, "began with 'Content-Length: 1\\r\\n")) << msg;
  EXPECT_TRUE(wait_pid_gone(pid, 20s)) << "the worker writing garbage was not ended";

  const std::string log = gateway().log();
  EXPECT_EQ(skipped_bytes_logged(log, "TestLibrary", pid), kBound + 1) << gateway().log_tail(40);
  // Ended while writing, long before the 8 MiB were out.
  EXPECT_FALSE(contains(log, "garbage written:")) << "the worker wrote all its garbage before it was ended";

  // The session goes on with a new worker.
  auto fresh = c.import_library("TestLibrary");
  RJG_ASSERT_OK(fresh);
  std::string token2(fresh.result->as_object().at("token").as_string());
  auto echo = c.run_keyword(token2, "Echo", json::array{"after"});
  RJG_ASSERT_KEYWORD_OK(echo);
  remember_pid(worker_pid(c, token2));
}

// Stray output up to the bound between two frames is skipped again and again: the count starts over
// at every frame, so a worker that prints is never ended for it.
TEST_F(StrayOutputTest, StrayOutputBelowTheBoundBetweenFramesIsSkippedForEver) {
  start();
  auto [c, token] = session();
  const pid_t pid = remember_pid(worker_pid(c, token));
  for (int i = 0; i < 3; ++i) {
    auto reply = c.run_keyword(token, "Write Garbage Lines", json::array{"hello world\n", 1000000});
    RJG_ASSERT_KEYWORD_OK(reply);
    EXPECT_EQ(keyword_value(reply), json::value("ok"));
  }
  EXPECT_EQ(worker_pid(c, token), pid);
  EXPECT_TRUE(eventually([&] { return skipped_bytes_logged(gateway().log(), "TestLibrary", pid) == 3000000; }, 10s))
      << skipped_bytes_logged(gateway().log(), "TestLibrary", pid);
}

// A stray partial line (or a stray header) written just before the real answer does not swallow it.
TEST_F(StrayOutputTest, RealAnswerAfterAPartialStrayLineIsDelivered) {
  start();
  auto [c, token] = session();
  const pid_t pid = remember_pid(worker_pid(c, token));
  for (std::string_view stray : {"Content-Len", "hello", "Content-Length: 1", "Content-Length: 1\r\n",
                                 "Content-Length: 12\r\n\r\n", "Content-Length: 60000000\r\n\r\n",
                                 "Content-Length: 1\r\nnote: "}) {
    auto reply = c.run_keyword(token, "Write Garbage", json::array{stray});
    RJG_ASSERT_KEYWORD_OK(reply);
    EXPECT_EQ(keyword_value(reply), json::value("ok")) << describe(reply);
    auto echo = c.run_keyword(token, "Echo", json::array{"next"});
    RJG_ASSERT_KEYWORD_OK(echo);
    EXPECT_EQ(keyword_value(echo), json::value("next"));
  }
  EXPECT_EQ(worker_pid(c, token), pid) << "the worker was replaced";
}

// ------------------------------------------------------------------------------------------------
// A command that cannot start says exactly why, at the import that needed it

TEST_F(StartFailureTest, CommandThatCannotRunIsReportedPrecisely) {
  TempDir dir("rjg-commands");
  const fs::path directory = dir.path() / "a-directory";
  fs::create_directory(directory);
  const fs::path not_executable = dir.path() / "not-executable";
  write_file(not_executable, "#!/bin/sh\nexit 0\n");
  fs::permissions(not_executable, fs::perms(0644));
  LibrarySpec as_directory = command_library("Directory", {directory.string()});
  LibrarySpec as_plain_file = command_library("PlainFile", {not_executable.string()});
  LibrarySpec not_in_path = command_library("NotInPath", {"robot-no-such-worker-anywhere"});
  start({test_library("TestLibrary"), as_directory, as_plain_file, not_in_path});
  client::RpcClient c = connect();
  c.initialize();
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases{
      {"Directory", {fmt::format("'{}' is a directory", directory.string())}},
      {"PlainFile", {fmt::format("'{}' is not executable (mode 0644)", not_executable.string())}},
      {"NotInPath", {"'robot-no-such-worker-anywhere' not found in PATH (", "nor next to the gateway ("}},
  };
  for (const auto& [library, expected] : cases) {
    auto reply = c.import_library(library);
    RJG_ASSERT_ERROR(reply, protocol::kWorkerFailed);
    for (const auto& part : expected) EXPECT_TRUE(contains(reply.error_message(), part)) << reply.error_message();
    EXPECT_FALSE(contains(reply.error_message(), "No such file or directory")) << reply.error_message();
  }
  RJG_EXPECT_OK(c.import_library("TestLibrary"));
}

}  // namespace
}  // namespace rjg::test
