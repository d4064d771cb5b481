// The gateway process: graceful stop, worker environment, worker stderr relay, --check-config.
#include "tests/integration/gateway_test.hpp"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <regex>

namespace rjg::test {
namespace {

using LifecycleTest = GatewayTest;

TEST_F(LifecycleTest, SigtermDrainsTheKeywordInFlightAndExitsCleanly) {
  start();
  auto [c, token] = session();
  pid_t pid = remember_pid(worker_pid(c, token));
  json::value id = c.send_request(
      protocol::kRunKeyword,
      json::object{{"library_token", token}, {"name", "Sleep"}, {"args", json::array{2}}, {"kwargs", json::object{}}});
  std::this_thread::sleep_for(100ms);  // let the call reach the worker; nothing depends on it
  gateway().signal(SIGTERM);

  // New connections are refused once the gateway is stopping (bounded poll).
  bool refused = eventually([&] { return !can_connect(gateway().port()); }, 20s, 20ms);
  EXPECT_TRUE(refused) << "the gateway still accepts connections after SIGTERM";

  // The keyword in flight still gets its answer.
  auto reply = c.wait_reply(id, {}, 30s);
  RJG_EXPECT_OK(reply);
  EXPECT_EQ(reply.keyword_error(), nullptr) << describe(reply);
  c.exit();  // the last session ends: the drain is over

  auto status = gateway().wait(30s);
  ASSERT_TRUE(status.has_value()) << "the gateway did not exit after SIGTERM";
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0)
      << "the gateway ended with " << describe_status(*status);
  EXPECT_TRUE(wait_pid_gone(pid, 20s)) << "worker pid " << pid << " outlived the gateway";
}

// A drain cuts no suite: the sessions already open go on importing and running keywords after SIGTERM,
// while new connections are refused; the gateway exits once the last one ends, without waiting for
// drain_timeout.
// The harness waits for the gateway's own listening socket, not for any connect to its port to succeed:
// on a busy CI machine another test's listener, or a connect that met itself, once passed for a gateway
// that had not started yet. listens_on tells whose socket it is.
TEST_F(LifecycleTest, TheHarnessTellsTheGatewaysListeningSocketFromAnotherProcesss) {
  int own = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(own, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  ASSERT_EQ(::bind(own, reinterpret_cast<sockaddr*>(&addr), len), 0);
  ASSERT_EQ(::getsockname(own, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const std::uint16_t own_port = ntohs(addr.sin_port);
  EXPECT_FALSE(listens_on(::getpid(), own_port)) << "a bound socket that does not listen";
  ASSERT_EQ(::listen(own, 1), 0);
  start();

  EXPECT_TRUE(listens_on(::getpid(), own_port));
  EXPECT_FALSE(listens_on(gateway().pid(), own_port));
  EXPECT_TRUE(listens_on(gateway().pid(), gateway().port()));
  EXPECT_TRUE(can_connect(gateway().port()));
  EXPECT_FALSE(listens_on(::getpid(), gateway().port())) << "the port accepts, but not on this process's socket";
  ::close(own);
  EXPECT_FALSE(listens_on(::getpid(), own_port)) << "a closed socket";
}

TEST_F(LifecycleTest, SessionsKeepWorkingThroughTheDrainAndItEndsWithTheLastOne) {
  GatewayOptions options;
  options.drain_timeout = "120s";
  start(default_libraries(), options);
  auto [a, ta] = session();
  auto [b, tb] = session("SecondLibrary");
  pid_t pa = remember_pid(worker_pid(a, ta));
  gateway().signal(SIGTERM);
  ASSERT_TRUE(eventually([&] { return !can_connect(gateway().port()); }, 20s, 20ms))
      << "the gateway still accepts connections after SIGTERM";

  // Keywords and a new import of a session that was there before the drain are served as ever.
  for (int i = 0; i < 3; ++i) RJG_ASSERT_KEYWORD_OK(a.run_keyword(ta, "Echo", json::array{i}));
  std::string t2 = open_library(a, "SecondLibrary");
  RJG_ASSERT_KEYWORD_OK(a.run_keyword(t2, "Echo", json::array{"after SIGTERM"}));
  RJG_ASSERT_KEYWORD_OK(b.run_keyword(tb, "Echo", json::array{"b"}));

  b.exit();
  EXPECT_FALSE(gateway().wait(300ms).has_value()) << "the gateway exited while a session was still open";
  a.exit();
  auto status = gateway().wait(60s);
  ASSERT_TRUE(status.has_value()) << "the gateway did not exit once its last session ended";
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << "the gateway ended with " << describe_status(*status);
  EXPECT_TRUE(wait_pid_gone(pa, 20s)) << "worker pid " << pa << " outlived the gateway";
  const auto log = gateway().log();
  EXPECT_FALSE(contains(log, "after drain_timeout")) << log;
  // Two sessions at least: the harness's connection probes may still be closing.
  EXPECT_TRUE(std::regex_search(log, std::regex("draining: no new connections; ([2-9]|[1-9][0-9]+) sessions"))) << log;
}

// When drain_timeout passes, the sessions left are closed: a keyword still running is answered with an
// error that says why, and its worker is stopped.
TEST_F(LifecycleTest, DrainTimeoutAnswersWhatStillRunsAndSaysWhy) {
  GatewayOptions options;
  options.drain_timeout = "1s";
  start(default_libraries(), options);
  auto [c, token] = session();
  pid_t pid = remember_pid(worker_pid(c, token));
  json::value id = c.send_request(
      protocol::kRunKeyword,
      json::object{{"library_token", token}, {"name", "Sleep"}, {"args", json::array{60}}, {"kwargs", json::object{}}});
  std::this_thread::sleep_for(100ms);  // the call reaches the worker now or during the drain: either way
  gateway().signal(SIGTERM);
  auto reply = c.wait_reply(id, {}, 30s);
  ASSERT_FALSE(reply.ok() && reply.keyword_error() == nullptr) << "the keyword did not fail: " << describe(reply);
  EXPECT_TRUE(contains(describe(reply), "drain_timeout")) << describe(reply);
  EXPECT_TRUE(contains(describe(reply), fmt::format("pid {}", pid))) << describe(reply);
  auto status = gateway().wait(30s);
  ASSERT_TRUE(status.has_value()) << "the gateway did not exit after its drain_timeout";
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << "the gateway ended with " << describe_status(*status);
  EXPECT_TRUE(wait_pid_gone(pid, 20s)) << "worker pid " << pid << " outlived the gateway";
  EXPECT_TRUE(contains(gateway().log(), "1 sessions still open (1 requests in flight) after drain_timeout")) << gateway().log_tail();
}

TEST_F(LifecycleTest, SigtermWithIdleSessionsStopsEveryWorker) {
  GatewayOptions options;
  options.drain_timeout = "2s";
  start(default_libraries(), options);
  auto [a, ta] = session();
  auto [b, tb] = session("SecondLibrary");
  pid_t pa = remember_pid(worker_pid(a, ta));
  pid_t pb = remember_pid(worker_pid(b, tb));
  auto status = gateway().stop(30s);
  ASSERT_TRUE(status.has_value()) << "the gateway did not exit within 30 s of SIGTERM";
  EXPECT_TRUE(WIFEXITED(*status)) << "the gateway ended with " << describe_status(*status);
  EXPECT_TRUE(wait_pid_gone(pa, 20s)) << "worker pid " << pa << " outlived the gateway";
  EXPECT_TRUE(wait_pid_gone(pb, 20s)) << "worker pid " << pb << " outlived the gateway";
  // The sessions see their connections end.
  EXPECT_TRUE(a.wait_closed(20s));
  EXPECT_TRUE(b.wait_closed(20s));
}

TEST_F(LifecycleTest, EnvAndCwdReachTheWorker) {
  TempDir cwd_dir("rjg-cwd");
  auto lib = test_library("TestLibrary");
  lib.env["FOO"] = "bar";
  lib.env["WITH_SPACES"] = "a b \"c\"";
  lib.cwd = cwd_dir.path().string();
  start({lib});
  auto [c, token] = session();
  auto foo = c.run_keyword(token, "Get Env", json::array{"FOO"});
  RJG_ASSERT_KEYWORD_OK(foo);
  EXPECT_EQ(keyword_value(foo), json::value("bar")) << describe(foo);
  auto spaces = c.run_keyword(token, "Get Env", json::array{"WITH_SPACES"});
  RJG_ASSERT_KEYWORD_OK(spaces);
  EXPECT_EQ(keyword_value(spaces), json::value("a b \"c\"")) << describe(spaces);
  auto cwd = c.run_keyword(token, "Get Cwd");
  RJG_ASSERT_KEYWORD_OK(cwd);
  ASSERT_TRUE(keyword_value(cwd).is_string()) << describe(cwd);
  EXPECT_EQ(fs::canonical(std::string(keyword_value(cwd).get_string())), fs::canonical(cwd_dir.path()))
      << describe(cwd);
}

TEST_F(LifecycleTest, WorkerStderrIsLoggedWithLibraryAndPid) {
  start();
  auto [c, token] = session();
  pid_t pid = remember_pid(worker_pid(c, token));
  auto printed = c.run_keyword(token, "Print Stderr", json::array{"marker-123"});
  RJG_ASSERT_KEYWORD_OK(printed);
  const std::string pid_text = std::to_string(pid);
  auto has_line = [&] {
    std::string log = gateway().log();
    std::size_t pos = 0;
    while ((pos = log.find("marker-123", pos)) != std::string::npos) {
      auto begin = log.rfind('\n', pos);
      begin = begin == std::string::npos ? 0 : begin + 1;
      auto end = log.find('\n', pos);
      std::string line = log.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
      if (contains(line, "TestLibrary") && contains(line, pid_text)) return true;
      pos += 1;
    }
    return false;
  };
  EXPECT_TRUE(eventually(has_line, 10s))
      << "no gateway log line with 'TestLibrary', pid " << pid << " and 'marker-123'";
}

// ------------------------------------------------------------------------------------------------
// --check-config

class CheckConfigTest : public ::testing::Test {
 protected:
  ProcessResult check(const fs::path& file) {
    return run_process({gateway_binary(), "--check-config", file.string()}, dir_.path(), 30s);
  }
  TempDir dir_{"rjg-check"};
};

TEST_F(CheckConfigTest, GoodFileExitsZero) {
  auto file = dir_.path() / "good.toml";
  write_file(file, make_config(free_port(), {test_library("TestLibrary"), test_library("SecondLibrary")}, {}));
  auto r = check(file);
  EXPECT_TRUE(r.exited_with(0)) << r.describe();
}

TEST_F(CheckConfigTest, SyntaxErrorNamesFileAndLine) {
  auto file = dir_.path() / "broken-syntax.toml";
  write_file(file,
             "[gateway]\n"
             "listen = [\"tcp://127.0.0.1:8271\"]\n"
             "log_level = \"debug\"\n"
             "drain_timeout = \"10s\n"  // line 4: unterminated string
             "[[library]]\n"
             "name = \"TestLibrary\"\n"
             "command = [\"/bin/true\"]\n");
  auto r = check(file);
  EXPECT_TRUE(r.exited_with(1)) << r.describe();
  std::string out = r.out + r.err;
  EXPECT_TRUE(contains(out, file.string()) || contains(out, "broken-syntax.toml")) << r.describe();
  EXPECT_TRUE(std::regex_search(out, std::regex(R"((:4\b|line 4\b))"))) << "line 4 not named:\n" << r.describe();
}

TEST_F(CheckConfigTest, InvalidContentNamesTheFile) {
  auto file = dir_.path() / "broken-content.toml";
  write_file(file,
             "[gateway]\n"
             "listen = [\"tcp://127.0.0.1:8271\"]\n"
             "\n"
             "[[library]]\n"
             "name = \"NoCommand\"\n");
  auto r = check(file);
  EXPECT_TRUE(r.exited_with(1)) << r.describe();
  std::string out = r.out + r.err;
  EXPECT_TRUE(contains(out, "broken-content.toml")) << r.describe();
}

TEST_F(CheckConfigTest, GatewayRefusesToStartWithABrokenFile) {
  auto file = dir_.path() / "refused.toml";
  write_file(file, "[gateway\nlisten = 3\n");
  auto r = run_process({gateway_binary(), "--config", file.string()}, dir_.path(), 30s);
  EXPECT_FALSE(r.timed_out) << "the gateway started with a broken configuration";
  EXPECT_FALSE(r.exited_with(0)) << r.describe();
  EXPECT_TRUE(contains(r.out + r.err, "refused.toml")) << r.describe();
}

// ------------------------------------------------------------------------------------------------
// No survivors: a worker's descendant that calls setsid and loses its parent

class OrphanTest : public GatewayTest {
 protected:
  // Runs 'Spawn Detached Grandchild' on a fresh session; returns the client, token, worker pid and the
  // grandchild's pid (remembered, so the fixture kills it if a test fails).
  struct Spawned {
    client::RpcClient client;
    std::string token;
    pid_t worker = 0;
    pid_t grandchild = 0;
  };
  Spawned spawn_grandchild(bool ignore_sigterm = false) {
    auto [c, token] = session();
    const pid_t worker = remember_pid(worker_pid(c, token));
    const fs::path pid_file = gateway().dir() / fmt::format("grandchild-{}.pid", worker);
    auto reply = c.run_keyword(token, "Spawn Detached Grandchild", json::array{pid_file.string(), ignore_sigterm});
    EXPECT_TRUE(reply.ok() && reply.keyword_error() == nullptr) << describe(reply);
    const pid_t grandchild = reply.ok() && keyword_value(reply).is_int64()
                                 ? static_cast<pid_t>(keyword_value(reply).as_int64())
                                 : 0;
    if (grandchild > 0) remember_pid(grandchild);
    return {std::move(c), std::move(token), worker, grandchild};
  }

  // The grandchild left the worker's group and its parent is gone: it is the gateway's child now.
  void expect_reparented_to_the_gateway(const Spawned& s) {
    auto info = proc_info(s.grandchild);
    ASSERT_TRUE(info) << "grandchild " << s.grandchild << " not found";
    EXPECT_EQ(info->ppid, gateway().pid()) << "the grandchild was not reparented to the gateway (subreaper)";
    EXPECT_NE(info->pgid, s.worker) << "the grandchild is still in the worker's process group";
    EXPECT_EQ(info->pgid, s.grandchild) << "the grandchild does not lead a session of its own";
  }
};

// end_orphans = true (the default): when its worker ends, the grandchild is ended and reaped, with log
// lines naming its pid and command.
TEST_F(OrphanTest, GrandchildThatCalledSetsidIsGoneWhenItsWorkerEnds) {
  start({test_library("TestLibrary")});
  auto s = spawn_grandchild();
  ASSERT_GT(s.grandchild, 0);
  expect_reparented_to_the_gateway(s);
  s.client.close();  // the session ends: its worker is stopped
  EXPECT_TRUE(wait_pid_gone(s.worker, 20s)) << "worker " << s.worker << " outlived its session";
  EXPECT_TRUE(wait_pid_gone(s.grandchild, 20s)) << "grandchild " << s.grandchild << " outlived its worker ("
                                                << proc_cmdline(s.grandchild) << ")";
  // The pid is gone once reaped; the line saying so is written just after.
  EXPECT_TRUE(eventually([&] { return contains(gateway().log(), "reaped; it ended with signal 15"); }, 20s));
  const std::string log = gateway().log();
  const std::string who = fmt::format("orphan pid {} ({}", s.grandchild, test_worker_binary());
  EXPECT_TRUE(contains(log, who + " --name TestLibrary")) << "no log line naming the orphan's pid and command";
  EXPECT_TRUE(contains(log, "ending it: SIGTERM now")) << log;
  EXPECT_TRUE(contains(log, "reaped; it ended with signal 15")) << log;
}

// One that ignores SIGTERM gets SIGKILL after the grace (the longest shutdown_grace of all libraries).
TEST_F(OrphanTest, GrandchildIgnoringSigtermIsKilledAfterTheGrace) {
  auto lib = test_library("TestLibrary");
  lib.shutdown_grace = "1s";
  start({lib});
  auto s = spawn_grandchild(true);
  ASSERT_GT(s.grandchild, 0);
  s.client.close();
  EXPECT_TRUE(wait_pid_gone(s.grandchild, 30s)) << "grandchild " << s.grandchild << " ignoring SIGTERM survived";
  EXPECT_TRUE(eventually([&] { return contains(gateway().log(), "reaped; it ended with signal 9"); }, 20s));
  const std::string log = gateway().log();
  EXPECT_TRUE(contains(log, fmt::format("orphan pid {} (", s.grandchild))) << log;
  EXPECT_TRUE(contains(log, "still running 1s after SIGTERM; sending SIGKILL")) << log;
  EXPECT_TRUE(contains(log, "reaped; it ended with signal 9")) << log;
}

// A SIGTERM to the gateway ends what the workers left behind before it exits.
TEST_F(OrphanTest, GatewayStopEndsOrphansBeforeExiting) {
  GatewayOptions options;
  options.drain_timeout = "1s";  // the session stays open: it is closed when the drain ends
  start({test_library("TestLibrary")}, options);
  auto s = spawn_grandchild();
  ASSERT_GT(s.grandchild, 0);
  auto status = gateway().stop(60s);
  ASSERT_TRUE(status.has_value()) << "the gateway did not exit after SIGTERM";
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << describe_status(*status);
  // The gateway reaped it before exiting: not even a zombie is left (its parent would be this test).
  EXPECT_TRUE(pid_gone(s.grandchild)) << "grandchild " << s.grandchild << " outlived the gateway";
}

// end_orphans = false: the grandchild keeps running after its worker ends, and is reaped (no zombie)
// when it exits.
TEST_F(OrphanTest, WithEndOrphansFalseTheGrandchildRunsOnAndIsReapedWhenItExits) {
  GatewayOptions options;
  options.extra_gateway_toml = "end_orphans = false\n";
  start({test_library("TestLibrary")}, options);
  auto s = spawn_grandchild();
  ASSERT_GT(s.grandchild, 0);
  expect_reparented_to_the_gateway(s);
  s.client.close();
  EXPECT_TRUE(wait_pid_gone(s.worker, 20s)) << "worker " << s.worker << " outlived its session";
  const std::string left_running = fmt::format("orphan pid {} (", s.grandchild);
  ASSERT_TRUE(eventually([&] { return contains(gateway().log(), "left running (end_orphans = false)"); }, 20s))
      << gateway().log_tail(60);
  EXPECT_TRUE(contains(gateway().log(), left_running)) << gateway().log_tail(60);
  auto info = proc_info(s.grandchild);
  ASSERT_TRUE(info) << "the grandchild was ended although end_orphans = false";
  EXPECT_NE(info->state, 'Z');
  EXPECT_EQ(info->ppid, gateway().pid());

  ASSERT_EQ(::kill(s.grandchild, SIGTERM), 0);
  EXPECT_TRUE(wait_pid_gone(s.grandchild, 20s)) << "the gateway did not reap the orphan when it exited (state "
                                                << (proc_info(s.grandchild) ? proc_info(s.grandchild)->state : '-')
                                                << ")";
  EXPECT_TRUE(eventually([&] { return contains(gateway().log(), "reaped; it ended with signal 15"); }, 10s));
  // The gateway goes on serving.
  auto [c2, t2] = session();
  RJG_EXPECT_KEYWORD_OK(c2.run_keyword(t2, "Echo", json::array{1}));
}

// ------------------------------------------------------------------------------------------------
// --check-config resolves every command as a worker start would

TEST_F(CheckConfigTest, CommandsAreResolvedAndProblemsNamedPrecisely) {
  const fs::path directory = dir_.path() / "a-directory";
  fs::create_directory(directory);
  const fs::path not_executable = dir_.path() / "not-executable";
  write_file(not_executable, "#!/bin/sh\nexit 0\n");
  fs::permissions(not_executable, fs::perms(0644));
  LibrarySpec as_directory = command_library("Directory", {directory.string()});
  LibrarySpec as_plain_file = command_library("PlainFile", {not_executable.string()});
  LibrarySpec missing = command_library("Missing", {(dir_.path() / "missing").string()});
  LibrarySpec not_in_path = command_library("NotInPath", {"robot-no-such-worker-anywhere"});
  auto file = dir_.path() / "commands.toml";
  write_file(file, make_config(free_port(), {test_library("TestLibrary"), as_directory, as_plain_file, missing, not_in_path}, {}));
  auto r = check(file);
  EXPECT_TRUE(r.exited_with(1)) << r.describe();
  const std::string out = r.out + r.err;
  EXPECT_TRUE(std::regex_search(out, std::regex("commands\\.toml:\\d+: library 'Directory': command '" +
                                                directory.string() + "' is a directory")))
      << r.describe();
  EXPECT_TRUE(contains(out, "library 'PlainFile': command '" + not_executable.string() +
                                "' is not executable (mode 0644)"))
      << r.describe();
  EXPECT_TRUE(contains(out, "library 'Missing': command '" + (dir_.path() / "missing").string() + "' does not exist"))
      << r.describe();
  const char* path = std::getenv("PATH");
  EXPECT_TRUE(contains(out, fmt::format("library 'NotInPath': command 'robot-no-such-worker-anywhere' not found in "
                                        "PATH ({}) nor next to the gateway (",
                                        path ? path : "not set")))
      << r.describe();
  EXPECT_FALSE(contains(out, "library 'TestLibrary'")) << r.describe();
  EXPECT_TRUE(contains(out, "4 problem(s)")) << r.describe();
}

// A bare name is found in PATH, as a worker start would find it, and the OK line says where.
TEST_F(CheckConfigTest, BareNameIsFoundInPath) {
  const fs::path bin = dir_.path() / "bin";
  fs::create_directory(bin);
  fs::copy_file(test_worker_binary(), bin / "robot-h4-path-worker");
  LibrarySpec lib = command_library("FromPath", {"robot-h4-path-worker"});
  auto file = dir_.path() / "path.toml";
  write_file(file, make_config(free_port(), {lib}, {}));
  const std::string path = bin.string() + ":" + (std::getenv("PATH") ? std::getenv("PATH") : "/usr/bin:/bin");
  auto r = run_process({"/usr/bin/env", "PATH=" + path, gateway_binary(), "--check-config", file.string()},
                       dir_.path(), 30s);
  EXPECT_TRUE(r.exited_with(0)) << r.describe();
  EXPECT_TRUE(contains(r.err, "FromPath: " + (bin / "robot-h4-path-worker").string())) << r.describe();
  // Without that directory in PATH the same file is refused.
  auto refused = check(file);
  EXPECT_TRUE(refused.exited_with(1)) << refused.describe();
  EXPECT_TRUE(contains(refused.err, "'robot-h4-path-worker' not found in PATH")) << refused.describe();
}

}  // namespace
}  // namespace rjg::test
