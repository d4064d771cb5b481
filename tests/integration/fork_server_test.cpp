// fork_server = true, end to end: the real gateway starts a library's template process, forks its
// workers through it over the control socket, supervises it (restart after a death, plain starts while
// it is down, a new one on reload, none left after a stop). The template here is rjg-fake-python, a
// stand-in that speaks the template's wire format and runs the test worker. ReferenceForkServerTest, at
// the end, runs a crash, a keyword timeout, a reload and a dead template again with the real template and
// the real reference server: where RJG_REFERENCE_PYTHON names an interpreter that imports it (the
// conformance stage sets it), and skipped elsewhere. The reference server's suites run forked there too.
//
// Nothing here asserts how long anything takes; deadlines only keep a broken gateway from hanging a test.
#include "tests/integration/gateway_test.hpp"

#include <fmt/format.h>

#include <signal.h>
#include <sys/wait.h>

#include <cstdlib>
#include <optional>
#include <regex>

#ifndef RJG_FAKE_PYTHON_BIN
#define RJG_FAKE_PYTHON_BIN "rjg-fake-python"
#endif

namespace rjg::test {
namespace {

// A library "served by the reference server" through the stand-in interpreter, with fork_server = true.
LibrarySpec forked_library(const std::string& name, std::string toml = {}, std::map<std::string, std::string> env = {}) {
  LibrarySpec spec = command_library(name, {RJG_FAKE_PYTHON_BIN, "-m", "robot_jsonrpcremote_server", "--stdio",
                                            "--name", name});
  spec.env = std::move(env);
  spec.env["RJG_FAKE_PYTHON_WORKER"] = test_worker_binary();
  spec.extra_toml = "fork_server = true\n" + toml;
  return spec;
}

class ForkServerTest : public GatewayTest {
 protected:
  json::value keyword(client::RpcClient& c, const std::string& token, std::string_view name, json::array args = {}) {
    auto reply = c.run_keyword(token, name, std::move(args));
    if (!reply.ok() || reply.keyword_error()) throw std::runtime_error(fmt::format("{} failed: {}", name, describe(reply)));
    return keyword_value(reply);
  }
  // The template pids the gateway started for `library`, in order.
  std::vector<pid_t> templates(const std::string& library) {
    auto pids = captured_pids(gateway().log(), fmt::format(R"(fork server of library '{}': started pid (\d+))", library));
    for (pid_t p : pids) remember_pid(p);
    return pids;
  }
  bool ready_eventually(const std::string& library, std::size_t times = 1) {
    return log_eventually(fmt::format("fork server of library '{}': ready", library), times);
  }
  // Who forked the worker behind `token`: the template's pid, or 0 for a plain start.
  pid_t forked_by(client::RpcClient& c, const std::string& token) {
    const auto v = keyword(c, token, "Get Env", json::array{"RJG_FORKED_BY"});
    return v.is_string() ? std::stoi(std::string(v.as_string())) : 0;
  }
};

TEST_F(ForkServerTest, WorkersAreForkedFromTheTemplateAndAreOrdinaryWorkers) {
  start({forked_library("Forked", "preload = [\"extra.module\"]\nrlimits = { open_files = 200 }\n")});
  ASSERT_TRUE(ready_eventually("Forked"));
  const auto started = templates("Forked");
  ASSERT_EQ(started.size(), 1u);
  const pid_t template_pid = started.front();
  EXPECT_TRUE(contains(gateway().log(), "--preload extra.module")) << "preload did not reach the template";

  std::vector<pid_t> workers;
  for (int i = 0; i < 2; ++i) {
    auto [c, token] = session("Forked");
    const pid_t pid = remember_pid(static_cast<pid_t>(as_int(keyword(c, token, "Get Pid"))));
    workers.push_back(pid);
    EXPECT_EQ(forked_by(c, token), template_pid) << "worker " << pid << " was not forked by the template";
    // An ordinary worker: the gateway's child (reparented), leading its own group, with the library's limits.
    EXPECT_EQ(as_int(keyword(c, token, "Get Ppid")), gateway().pid());
    EXPECT_EQ(as_int(keyword(c, token, "Get Pgid")), pid);
    EXPECT_EQ(as_int(keyword(c, token, "Get Rlimit", json::array{"nofile"})), 200);
    EXPECT_EQ(keyword(c, token, "Echo", json::array{"hello"}), json::value("hello"));
  }
  EXPECT_NE(workers[0], workers[1]) << "each session is its own process";
  EXPECT_TRUE(log_eventually(fmt::format("forked by the fork server pid {}", template_pid), 2));
  // Its end is seen like a plain worker's: a crash fails the keyword naming the pid and the exit status.
  {
    auto [c, token] = session("Forked");
    const pid_t pid = remember_pid(static_cast<pid_t>(as_int(keyword(c, token, "Get Pid"))));
    auto reply = c.run_keyword(token, "Crash", json::array{"exit", 7});
    ASSERT_TRUE(reply.ok()) << describe(reply);
    ASSERT_NE(reply.keyword_error(), nullptr) << describe(reply);
    EXPECT_TRUE(contains(reply.failure_message(), fmt::format("pid {}", pid))) << reply.failure_message();
    EXPECT_TRUE(contains(reply.failure_message(), "exit code 7")) << reply.failure_message();
    EXPECT_TRUE(wait_pid_gone(pid, 10s)) << "the crashed worker was not reaped";
  }
  EXPECT_FALSE(contains(gateway().log(), "orphan pid")) << "a forked worker was taken for an orphan";

  // A stop leaves neither the template nor a worker behind.
  const auto status = gateway().stop(30s);
  ASSERT_TRUE(status.has_value()) << "the gateway did not exit within 30 s of SIGTERM";
  EXPECT_TRUE(WIFEXITED(*status)) << "the gateway ended with " << describe_status(*status);
  EXPECT_TRUE(wait_pid_gone(template_pid, 10s)) << "the template outlived the gateway";
  for (pid_t pid : workers) EXPECT_TRUE(wait_pid_gone(pid, 10s)) << "worker " << pid << " outlived the gateway";
}

TEST_F(ForkServerTest, PrewarmedWorkersAreForks) {
  start({forked_library("Warm", "prewarm = 2\n")});
  ASSERT_TRUE(ready_eventually("Warm"));
  ASSERT_TRUE(log_eventually("forked by the fork server pid", 2)) << "no prewarmed worker was forked";
  const pid_t template_pid = templates("Warm").at(0);
  auto [c, token] = session("Warm");
  EXPECT_EQ(forked_by(c, token), template_pid);
  EXPECT_TRUE(log_eventually("import served by prewarmed worker"));
}

TEST_F(ForkServerTest, ATemplateThatDiesIsStartedAgainAndTheWorkersItForkedLiveOn) {
  start({forked_library("Phoenix")});
  ASSERT_TRUE(ready_eventually("Phoenix"));
  const pid_t first = templates("Phoenix").at(0);
  auto [a, token_a] = session("Phoenix");
  ASSERT_EQ(forked_by(a, token_a), first);

  ASSERT_EQ(::kill(first, SIGKILL), 0);
  ASSERT_TRUE(log_eventually("fork server of library 'Phoenix': pid")) << "the death was not told";
  EXPECT_TRUE(contains(gateway().log(), "ended with signal 9"));
  EXPECT_TRUE(contains(gateway().log(), "workers it forked live on"));
  // The worker it forked still serves its session.
  EXPECT_EQ(keyword(a, token_a, "Echo", json::array{"still here"}), json::value("still here"));

  // Back after the back-off, and forking again.
  ASSERT_TRUE(ready_eventually("Phoenix", 2)) << "the template was not started again";
  const auto started = templates("Phoenix");
  ASSERT_EQ(started.size(), 2u);
  auto [b, token_b] = session("Phoenix");
  EXPECT_EQ(forked_by(b, token_b), started[1]);
  EXPECT_TRUE(log_eventually("back: workers of library 'Phoenix' are forked again"));
}

TEST_F(ForkServerTest, ATemplateThatCannotGetReadyLeavesPlainStartsAndSaysSoOnce) {
  start({forked_library("Lame", "", {{"RJG_FAKE_TEMPLATE", "not-ready"}})});
  // The template's own line, then the gateway's: once as a WARN, the retries that fail again as INFO.
  ASSERT_TRUE(log_eventually("could not get ready (exit code 3", 2)) << "no retry after the back-off";
  EXPECT_TRUE(contains(gateway().log(), "cannot import robot"));
  EXPECT_GE(lines_with(gateway().log(), "start the plain way").size(), 2u);
  std::size_t warnings = 0;
  for (const auto& line : lines_with(gateway().log(), "could not get ready")) warnings += contains(line, "WARN");
  EXPECT_EQ(warnings, 1u) << "the fallback was not said exactly once as a WARN";
  // Workers start the plain way meanwhile.
  auto [c, token] = session("Lame");
  EXPECT_EQ(forked_by(c, token), 0);
  EXPECT_EQ(keyword(c, token, "Echo", json::array{1}), json::value(1));
}

TEST_F(ForkServerTest, ARefusedForkStartsThatWorkerThePlainWay) {
  start({forked_library("Picky", "", {{"RJG_FAKE_TEMPLATE", "refuse"}})});
  ASSERT_TRUE(ready_eventually("Picky"));
  auto [c, token] = session("Picky");
  EXPECT_EQ(forked_by(c, token), 0);
  EXPECT_TRUE(log_eventually("no worker forked: refused (fake fault); this one starts the plain way"));
  EXPECT_EQ(keyword(c, token, "Echo", json::array{2}), json::value(2));
}

TEST_F(ForkServerTest, ATemplateThatStopsAnsweringIsReplacedAndTheImportStillSucceeds) {
  LibrarySpec spec = forked_library("Mute", "", {{"RJG_FAKE_TEMPLATE", "silent"}});
  spec.startup_timeout = "2s";
  start({spec});
  ASSERT_TRUE(ready_eventually("Mute"));
  auto [c, token] = session("Mute");
  EXPECT_EQ(forked_by(c, token), 0);
  EXPECT_TRUE(log_eventually("did not answer a fork request within startup_timeout (2s); killed"));
  ASSERT_TRUE(ready_eventually("Mute", 2)) << "no new template after the silent one was killed";
}

TEST_F(ForkServerTest, ATemplateThatDiesRightAfterAnsweringLeavesThatWorkerServing) {
  start({forked_library("Brittle", "", {{"RJG_FAKE_TEMPLATE", "exit-after-fork"}})});
  ASSERT_TRUE(ready_eventually("Brittle"));
  const pid_t first = templates("Brittle").at(0);
  auto [a, token_a] = session("Brittle");
  EXPECT_EQ(forked_by(a, token_a), first) << "the answered fork was undone by the template's exit";
  ASSERT_TRUE(log_eventually(fmt::format("pid {} ended with exit code 1", first)));
  EXPECT_EQ(keyword(a, token_a, "Echo", json::array{"alive"}), json::value("alive"));
  ASSERT_TRUE(ready_eventually("Brittle", 2));
  auto [b, token_b] = session("Brittle");
  EXPECT_EQ(forked_by(b, token_b), templates("Brittle").at(1));
}

TEST_F(ForkServerTest, AForkedWorkerThatEndsBeforeItIsWatchedIsReportedWithItsExitStatus) {
  start({forked_library("Doomed", "", {{"RJG_FAKE_TEMPLATE", "worker-dies"}})});
  ASSERT_TRUE(ready_eventually("Doomed"));
  for (int i = 0; i < 2; ++i) {  // (a third failed start in a row would meet the crash back-off)
    auto c = connect();
    c.initialize();
    auto reply = c.import_library("Doomed");
    ASSERT_FALSE(reply.ok()) << describe(reply);
    EXPECT_TRUE(contains(describe(reply), "exit code 5")) << describe(reply);
  }
  // Its status was kept for it: not lost, and the worker never taken for an orphan.
  EXPECT_FALSE(contains(gateway().log(), "its exit status is unknown"));
  EXPECT_FALSE(contains(gateway().log(), "orphan pid"));
  EXPECT_FALSE(contains(gateway().log(), "a worker's descendant reparented"));
}

TEST_F(ForkServerTest, AReloadThatChangesTheLibraryReplacesItsTemplate) {
  GatewayOptions options;
  start({forked_library("Reloaded", "preload = [\"first\"]\n")}, options);
  ASSERT_TRUE(ready_eventually("Reloaded"));
  const pid_t old_template = templates("Reloaded").at(0);
  auto [a, token_a] = session("Reloaded");

  write_file(gateway().config_path(),
             make_config(gateway().port(), {forked_library("Reloaded", "preload = [\"second\"]\n")}, options));
  gateway().signal(SIGHUP);
  ASSERT_TRUE(ready_eventually("Reloaded", 2)) << "the changed library got no template of its own";
  EXPECT_TRUE(contains(gateway().log(), "--preload second"));
  EXPECT_TRUE(wait_pid_gone(old_template, 10s)) << "the retired pool's template still runs";
  // The session of the old settings keeps its worker; a new import gets one of the new template.
  EXPECT_EQ(keyword(a, token_a, "Echo", json::array{"old"}), json::value("old"));
  auto [b, token_b] = session("Reloaded");
  EXPECT_EQ(forked_by(b, token_b), templates("Reloaded").at(1));
}

// A library of the real reference server's, written next to the test's gateway: what the cases below ask
// of a worker, from its own process.
constexpr const char* kProbeLibrary = R"(import os
import signal
import time


class ForkProbe:
    def __init__(self):
        self.calls = 0

    def get_pid(self):
        return os.getpid()

    def get_ppid(self):
        return os.getppid()

    def count_calls(self):
        self.calls += 1
        return self.calls

    def echo(self, value):
        return value

    def crash(self):
        os.kill(os.getpid(), signal.SIGKILL)

    def sleep_for(self, seconds):
        time.sleep(float(seconds))
)";

class ReferenceForkServerTest : public ForkServerTest {
 protected:
  void SetUp() override {
    ForkServerTest::SetUp();
    const char* python = std::getenv("RJG_REFERENCE_PYTHON");
    if (python == nullptr || *python == '\0')
      GTEST_SKIP() << "RJG_REFERENCE_PYTHON is not set: it names a Python that imports robot_jsonrpcremote_server "
                      "(deploy/conformance.sh sets it)";
    python_ = python;
    write_file(dir_.path() / "ForkProbe.py", kProbeLibrary);
  }

  // ForkProbe served by the real reference server on stdio, its workers forked from the real template.
  LibrarySpec reference_library(const std::string& name, const std::string& toml = {}) {
    LibrarySpec spec = command_library(
        name, {python_, "-m", "robot_jsonrpcremote_server", "--stdio", "--pythonpath", dir_.path().string(), "ForkProbe"});
    if (const char* path = std::getenv("PYTHONPATH")) spec.env["PYTHONPATH"] = path;
    spec.env["PYTHONDONTWRITEBYTECODE"] = "1";
    spec.extra_toml = "fork_server = true\n" + toml;
    return spec;
  }

  // Connect, initialize and import ForkProbe through `library`; the worker's pid, remembered.
  struct ProbeSession {
    client::RpcClient client;
    std::string token;
    pid_t pid;
  };
  ProbeSession probe(const std::string& library) {
    auto [c, token] = session(library);
    const pid_t pid = remember_pid(static_cast<pid_t>(as_int(keyword(c, token, "Get Pid"))));
    return {std::move(c), std::move(token), pid};
  }

  // The template that forked `worker`, from the gateway's line for its start; 0 for a plain start.
  pid_t forked_by_log(const std::string& library, pid_t worker) {
    const auto pids = captured_pids(
        gateway().log(),
        fmt::format(R"(worker {}\[{}\]: started: robot_jsonrpcremote_server forked by the fork server pid (\d+))",
                    library, worker));
    return pids.empty() ? 0 : pids.front();
  }

  void TearDown() override {
    first_.reset();  // its client closes first: the gateway's stop need not wait for the session to drain
    ForkServerTest::TearDown();
  }

  // Starts the gateway on `spec`, waits for its template and opens a first session, whose worker the
  // template must have forked: template_pid_ and first_.
  void start_forked(LibrarySpec spec, GatewayOptions options = {}) {
    const std::string library = spec.name;
    start({std::move(spec)}, std::move(options));
    ASSERT_TRUE(ready_eventually(library)) << "the template did not get ready";
    template_pid_ = templates(library).at(0);
    first_ = probe(library);
    ASSERT_EQ(forked_by_log(library, first_->pid), template_pid_) << "the first worker is not the template's fork";
  }

  std::string python_;
  TempDir dir_{"rjg-fork-probe"};
  pid_t template_pid_ = 0;
  std::optional<ProbeSession> first_;
};

TEST_F(ReferenceForkServerTest, ACrashedWorkerFailsItsKeywordAndTheNextImportIsForkedAgain) {
  ASSERT_NO_FATAL_FAILURE(start_forked(reference_library("Probe")));
  const pid_t template_pid = template_pid_;
  auto& a = *first_;
  EXPECT_EQ(as_int(keyword(a.client, a.token, "Get Ppid")), gateway().pid()) << "not the gateway's child";

  auto reply = a.client.run_keyword(a.token, "Crash");
  ASSERT_TRUE(reply.ok()) << describe(reply);
  ASSERT_NE(reply.keyword_error(), nullptr) << describe(reply);
  EXPECT_TRUE(contains(reply.failure_message(), fmt::format("pid {}", a.pid))) << reply.failure_message();
  EXPECT_TRUE(contains(reply.failure_message(), "signal 9")) << reply.failure_message();
  EXPECT_TRUE(wait_pid_gone(a.pid, 10s)) << "the crashed worker was not reaped";
  EXPECT_FALSE(pid_gone(template_pid)) << "a worker's crash took its template along";

  auto b = probe("Probe");
  EXPECT_NE(b.pid, a.pid);
  EXPECT_EQ(forked_by_log("Probe", b.pid), template_pid);
  EXPECT_EQ(keyword(b.client, b.token, "Echo", json::array{"after the crash"}), json::value("after the crash"));
}

TEST_F(ReferenceForkServerTest, AKeywordOverKeywordTimeoutFailsAndItsWorkerIsStopped) {
  // The reference server leaves SIGTERM for after the running keyword: the stop ends in SIGKILL after the
  // grace. The session's next keyword need not wait for that (PoolTimeoutTest in pool_test.cpp); this test
  // does, to see the worker gone, hence the short grace.
  LibrarySpec spec = reference_library("Slow", "keyword_timeout = \"1s\"\n");
  spec.shutdown_grace = "1s";
  ASSERT_NO_FATAL_FAILURE(start_forked(spec));
  const pid_t template_pid = template_pid_;
  auto& a = *first_;

  auto reply = a.client.run_keyword(a.token, "Sleep For", json::array{60});
  ASSERT_TRUE(reply.ok()) << describe(reply);
  ASSERT_NE(reply.keyword_error(), nullptr) << describe(reply);
  const auto message = reply.failure_message();
  EXPECT_TRUE(contains(message, "Sleep For")) << message;
  EXPECT_TRUE(contains(message, "keyword_timeout")) << message;
  EXPECT_TRUE(contains(message, fmt::format("{}", a.pid))) << message;
  EXPECT_TRUE(wait_pid_gone(a.pid, 10s)) << "the worker that overran keyword_timeout still runs";

  // The same session goes on with a fresh instance, in a worker forked again.
  EXPECT_EQ(as_int(keyword(a.client, a.token, "Count Calls")), 1) << "not a fresh instance";
  const pid_t next = remember_pid(static_cast<pid_t>(as_int(keyword(a.client, a.token, "Get Pid"))));
  EXPECT_NE(next, a.pid);
  EXPECT_EQ(forked_by_log("Slow", next), template_pid);
}

TEST_F(ReferenceForkServerTest, AReloadThatChangesTheLibraryReplacesItsTemplate) {
  GatewayOptions options;
  ASSERT_NO_FATAL_FAILURE(start_forked(reference_library("Reloaded", "preload = [\"json\"]\n"), options));
  const pid_t old_template = template_pid_;
  auto& a = *first_;

  write_file(gateway().config_path(),
             make_config(gateway().port(), {reference_library("Reloaded", "preload = [\"csv\"]\n")}, options));
  gateway().signal(SIGHUP);
  ASSERT_TRUE(ready_eventually("Reloaded", 2)) << "the changed library got no template of its own";
  const pid_t new_template = templates("Reloaded").at(1);
  EXPECT_TRUE(wait_pid_gone(old_template, 10s)) << "the retired pool's template still runs";
  // The session of the old settings keeps its worker; a new import gets one of the new template.
  EXPECT_EQ(keyword(a.client, a.token, "Echo", json::array{"old"}), json::value("old"));
  EXPECT_EQ(as_int(keyword(a.client, a.token, "Get Pid")), a.pid);
  auto b = probe("Reloaded");
  EXPECT_EQ(forked_by_log("Reloaded", b.pid), new_template);
}

TEST_F(ReferenceForkServerTest, ATemplateThatDiesIsStartedAgainAndTheWorkersItForkedLiveOn) {
  ASSERT_NO_FATAL_FAILURE(start_forked(reference_library("Phoenix")));
  const pid_t first = template_pid_;
  auto& a = *first_;

  ASSERT_EQ(::kill(first, SIGKILL), 0);
  ASSERT_TRUE(log_eventually("fork server of library 'Phoenix': pid")) << "the death was not told";
  EXPECT_TRUE(contains(gateway().log(), "workers it forked live on"));
  EXPECT_EQ(keyword(a.client, a.token, "Echo", json::array{"still here"}), json::value("still here"));
  EXPECT_EQ(as_int(keyword(a.client, a.token, "Count Calls")), 1) << "the session's instance was lost";

  ASSERT_TRUE(ready_eventually("Phoenix", 2)) << "the template was not started again";
  auto b = probe("Phoenix");
  EXPECT_EQ(forked_by_log("Phoenix", b.pid), templates("Phoenix").at(1));
  EXPECT_EQ(keyword(b.client, b.token, "Echo", json::array{"new"}), json::value("new"));
}

}  // namespace
}  // namespace rjg::test
