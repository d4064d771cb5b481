// systemd's service notifications, end to end: the test owns the datagram socket that NOTIFY_SOCKET
// names (as systemd would) and reads what the real gateway sends: READY=1 once it serves, STATUS=
// as sessions come and go, STOPPING=1 when SIGTERM begins the drain, WATCHDOG=1 while every event loop
// answers. Nothing is timed: each wait is a bound for a broken gateway, and the watchdog test counts.
#include "tests/integration/gateway_test.hpp"

#include <fmt/format.h>

#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstddef>
#include <cstring>
#include <ctime>
#include <random>
#include <regex>
#include <sstream>

namespace rjg::test {
namespace {

// A datagram socket bound to a path in a temporary directory, or to an abstract name ("@...").
class NotifySocket {
 public:
  explicit NotifySocket(std::string name) : name_(std::move(name)) {
    fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) throw std::runtime_error("socket: " + std::string(std::strerror(errno)));
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::memcpy(address.sun_path, name_.data(), name_.size());
    if (name_[0] == '@') address.sun_path[0] = '\0';
    const auto size = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name_.size());
    if (::bind(fd_, reinterpret_cast<const sockaddr*>(&address), size) != 0)
      throw std::runtime_error("bind " + name_ + ": " + std::strerror(errno));
  }
  ~NotifySocket() {
    ::close(fd_);
    if (name_[0] == '/') ::unlink(name_.c_str());
  }
  const std::string& name() const { return name_; }

  // The next datagram, or nothing within `timeout`.
  std::optional<std::string> next(std::chrono::milliseconds timeout) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(timeout.count())) <= 0) return std::nullopt;
    char buffer[4096];
    const auto n = ::recv(fd_, buffer, sizeof buffer, 0);
    if (n < 0) return std::nullopt;
    return std::string(buffer, static_cast<std::size_t>(n));
  }

  // Datagrams until one starts with `prefix` (returned), skipping others into `skipped`; bounded.
  std::optional<std::string> until(std::string_view prefix, std::vector<std::string>* skipped = nullptr,
                                   std::chrono::milliseconds bound = 20s) {
    const auto deadline = Clock::now() + bound;
    while (Clock::now() < deadline) {
      auto m = next(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
      if (!m) return std::nullopt;
      if (m->starts_with(prefix)) return m;
      if (skipped) skipped->push_back(std::move(*m));
    }
    return std::nullopt;
  }

 private:
  std::string name_;
  int fd_ = -1;
};

// Each thread of a process with its signal masks (hex, as in /proc/PID/task/TID/status): which thread
// blocks, catches or has pending which signal. SIGHUP is bit 0 (0x1), SIGCHLD bit 16 (0x10000).
// ShdPnd is the process's queue, the one kill() fills while every thread blocks the signal.
std::string signal_state(pid_t pid) {
  std::string out;
  std::error_code ec;
  for (const auto& task : fs::directory_iterator(fmt::format("/proc/{}/task", pid), ec)) {
    std::istringstream status(read_file(task.path() / "status"));
    out += fmt::format("  thread {}:", task.path().filename().string());
    for (std::string line; std::getline(status, line);) {
      for (const char* key : {"Name:", "SigPnd:", "ShdPnd:", "SigBlk:", "SigIgn:", "SigCgt:"})
        if (line.starts_with(key)) out += " " + line;
    }
    out += "\n";
  }
  return out.empty() ? fmt::format("  (no /proc/{}/task: the process has ended)\n", pid) : out;
}

class SystemdTest : public GatewayTest {
 protected:
  void start_notifying(const std::string& socket, std::map<std::string, std::string> env = {},
                       std::string gateway_toml = "") {
    GatewayOptions options;
    options.log_level = "info";
    options.env = std::move(env);
    options.env["NOTIFY_SOCKET"] = socket;
    options.extra_gateway_toml = std::move(gateway_toml);
    start(default_libraries(), options);
  }

  TempDir dir_{"rjg-notify"};
};

TEST_F(SystemdTest, ReadyOnceServingStatusAsSessionsComeAndStoppingWhenTheDrainBegins) {
  NotifySocket socket((dir_.path() / "notify").string());
  start_notifying(socket.name());

  // The first notification: ready, with a status line. It is sent after every listener is bound (the
  // log says so in this order: one thread writes both lines).
  auto first = socket.next(20s);
  ASSERT_TRUE(first) << "no notification at all";
  EXPECT_EQ(*first, "READY=1\nSTATUS=0 sessions, 0 workers, 0 imports waiting");
  // The gateway logs the notification after sending it: the datagram may arrive first.
  ASSERT_TRUE(log_eventually("systemd: told the service manager the gateway is ready")) << gateway().log();
  const auto log = gateway().log();
  const auto listening = log.find("listening on tcp://");
  const auto ready = log.find("systemd: told the service manager the gateway is ready");
  ASSERT_NE(ready, std::string::npos) << log;
  EXPECT_LT(listening, ready) << log;

  // A session with an import shows in the next status.
  auto [client, token] = session();
  auto status = socket.until("STATUS=1 session, 1 worker");
  ASSERT_TRUE(status) << "no STATUS= with the session and its worker";
  EXPECT_EQ(*status, "STATUS=1 session, 1 worker, 0 imports waiting");

  // SIGTERM: STOPPING=1 at the start of the drain, while the session is still there.
  gateway().signal(SIGTERM);
  auto stopping = socket.until("STOPPING=1");
  ASSERT_TRUE(stopping) << "no STOPPING=1 after SIGTERM";
  EXPECT_EQ(*stopping, "STOPPING=1\nSTATUS=draining: 0 requests in flight; 1 session, 1 worker, 0 imports waiting");
  client.exit();  // the drain ends with the last session
  EXPECT_TRUE(gateway().wait(30s).has_value()) << "the gateway did not exit after SIGTERM";
}

// SIGHUP: RELOADING=1 with the monotonic time, then READY=1 once the reload is done; a file with a
// problem also ends with READY=1 (the gateway serves on), and its STATUS= says the reload failed.
TEST_F(SystemdTest, ReloadingThenReadyOnSighup) {
  NotifySocket socket((dir_.path() / "notify").string());
  start_notifying(socket.name());
  ASSERT_TRUE(socket.until("READY=1"));

  timespec before{};
  ::clock_gettime(CLOCK_MONOTONIC, &before);
  gateway().signal(SIGHUP);
  auto reloading = socket.until("RELOADING=1");
  // Once seen under TSan and never again (stop 34): what the threads' masks say tells a signal the
  // gateway left blocked (ShdPnd or SigPnd with bit 0 set) from one lost on its way to the handler.
  ASSERT_TRUE(reloading) << "no RELOADING=1 after SIGHUP; the gateway's threads:\n"
                         << signal_state(gateway().pid());
  std::smatch m;
  ASSERT_TRUE(std::regex_match(*reloading, m, std::regex("RELOADING=1\nMONOTONIC_USEC=([0-9]+)"))) << *reloading;
  const auto usec = std::stoull(m[1].str());
  EXPECT_GE(usec, static_cast<unsigned long long>(before.tv_sec) * 1000000ull) << "not CLOCK_MONOTONIC";
  auto ready = socket.until("READY=1");
  ASSERT_TRUE(ready) << "no READY=1 after the reload";
  EXPECT_TRUE(ready->starts_with("READY=1\nSTATUS=") && !contains(*ready, "reload failed")) << *ready;

  write_file(gateway().config_path(), "[gateway\n");
  gateway().signal(SIGHUP);
  ASSERT_TRUE(socket.until("RELOADING=1"));
  ready = socket.until("READY=1");
  ASSERT_TRUE(ready) << "no READY=1 after a failed reload";
  EXPECT_TRUE(contains(*ready, "reload failed: 1 problem in " + gateway().config_path().string() +
                                   "; serving the previous configuration"))
      << *ready;
  auto [client, token] = session();
  auto echo = client.run_keyword(token, "Echo", json::array{"still served"});
  RJG_ASSERT_KEYWORD_OK(echo);
}

TEST_F(SystemdTest, AnAbstractSocketIsNamedWithAnAt) {
  std::random_device random;
  NotifySocket socket(fmt::format("@rjg-test-notify-{}-{}", ::getpid(), random()));
  start_notifying(socket.name());
  auto first = socket.next(20s);
  ASSERT_TRUE(first);
  EXPECT_TRUE(first->starts_with("READY=1\n")) << *first;
}

// WATCHDOG_USEC = 100 ms: a ping every 50 ms, each once every loop (four here) ran a handler since the
// previous one. Counted, not timed: ten pings arrive (within a bound meant for a broken gateway).
TEST_F(SystemdTest, WatchdogPingsWhileEveryLoopAnswers) {
  NotifySocket socket((dir_.path() / "notify").string());
  start_notifying(socket.name(), {{"WATCHDOG_USEC", "100000"}}, "threads = 4\n");
  ASSERT_TRUE(socket.until("READY=1"));
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(socket.until("WATCHDOG=1")) << "ping " << i << " never came";
  EXPECT_TRUE(contains(gateway().log(), "watchdog pings every 50 ms")) << gateway().log();
  EXPECT_FALSE(contains(gateway().log(), "did not answer")) << gateway().log();
}

// WATCHDOG_PID names another process (a wrapper that pings itself): the gateway does not ping.
TEST_F(SystemdTest, NoWatchdogPingsForAnotherProcess) {
  NotifySocket socket((dir_.path() / "notify").string());
  start_notifying(socket.name(), {{"WATCHDOG_USEC", "100000"}, {"WATCHDOG_PID", "1"}});
  ASSERT_TRUE(socket.until("READY=1"));
  EXPECT_TRUE(log_eventually("told the service manager the gateway is ready"));
  EXPECT_FALSE(contains(gateway().log(), "watchdog pings")) << gateway().log();
}

// A NOTIFY_SOCKET that is neither a path nor an abstract name is said in the log, and the gateway
// serves as without systemd.
TEST_F(SystemdTest, AnUnusableNotifySocketIsLoggedAndIgnored) {
  start_notifying("relative/notify");
  EXPECT_TRUE(contains(gateway().log(), "systemd: NOTIFY_SOCKET 'relative/notify' is neither an absolute path"))
      << gateway().log();
  auto [client, token] = session();
  auto echo = client.run_keyword(token, "Echo", json::array{"served"});
  RJG_ASSERT_KEYWORD_OK(echo);
}


// ------------------------------------------------------------------------------------------------
// Socket activation, with systemd's own tool: systemd-socket-activate binds the sockets, waits for the
// first connection, and executes the gateway with LISTEN_FDS, LISTEN_PID and LISTEN_FDNAMES set.

class SocketActivationTest : public GatewayTest {
 protected:
  void start_activated(std::vector<std::string> listen, std::vector<std::string> sockets, std::string names = "") {
    GatewayOptions options;
    options.listen = std::move(listen);
    options.launcher = {"/usr/bin/systemd-socket-activate"};  // Debian's systemd package
    for (auto& socket : sockets) options.launcher.push_back("--listen=" + socket);
    if (!names.empty()) options.launcher.push_back("--fdname=" + names);
    start(default_libraries(), options);
  }

  // A session served on `port`: one keyword runs, and the worker inherited stdin, stdout and stderr only.
  void expect_served(std::uint16_t port) {
    client::RpcClient client(20s);
    client.connect("127.0.0.1", port);
    auto token = open_library(client, "TestLibrary");
    auto echo = client.run_keyword(token, "Echo", json::array{"served"});
    RJG_ASSERT_KEYWORD_OK(echo);
    auto fds = client.run_keyword(token, "List Fds");
    RJG_ASSERT_KEYWORD_OK(fds);
    EXPECT_EQ(keyword_value(fds), (json::array{0, 1, 2})) << "a worker inherited more than stdio: " << describe(fds);
    for (const char* name : {"LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES"}) {
      auto value = client.run_keyword(token, "Get Env", json::array{name});
      EXPECT_EQ(keyword_value(value), json::value(nullptr)) << name << " reached the worker: " << describe(value);
    }
  }
};

TEST_F(SocketActivationTest, AnUnnamedPassedSocketIsServed) {
  start_activated({"systemd"}, {"127.0.0.1:{port}"});
  expect_served(gateway().port());
  EXPECT_TRUE(log_eventually(fmt::format("listening on tcp://127.0.0.1:{} (socket passed by systemd, fd 3, for "
                                         "\"systemd\")",
                                         gateway().port())))
      << gateway().log();
}

// "systemd:NAME" takes the socket of that name; a bare "systemd" takes the others.
TEST_F(SocketActivationTest, NamedSocketsGoToTheirEntriesAndTheRestToABareOne) {
  const auto other = free_port();
  start_activated({"systemd:gateway", "systemd"}, {"127.0.0.1:{port}", fmt::format("127.0.0.1:{}", other)},
                  "gateway:lab");
  expect_served(gateway().port());
  expect_served(other);
  const auto log = gateway().log();
  EXPECT_TRUE(contains(log, fmt::format("127.0.0.1:{} (socket passed by systemd, fd 3, for \"systemd:gateway\")",
                                        gateway().port())))
      << log;
  EXPECT_TRUE(contains(log, fmt::format("127.0.0.1:{} (socket passed by systemd, fd 4, for \"systemd\")", other)))
      << log;
}

// An entry that no passed socket matches is a start-up error that says what was passed.
TEST_F(SocketActivationTest, AnEntryNamingNoPassedSocketStopsTheStart) {
  start_activated({"systemd:admin"}, {"127.0.0.1:{port}"}, "gateway");
  auto status = gateway().wait(20s);
  ASSERT_TRUE(status.has_value()) << "the gateway did not exit";
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 1) << describe_status(*status);
  EXPECT_TRUE(contains(gateway().log(), "listen entry \"systemd:admin\": systemd passed no socket named 'admin' "
                                        "(FileDescriptorName=); passed: gateway (fd 3)"))
      << gateway().log();
}

// Without socket activation a "systemd" entry cannot be served, and the log says how to start it.
TEST_F(SocketActivationTest, WithoutPassedSocketsASystemdEntryStopsTheStart) {
  GatewayOptions options;
  options.listen = {"systemd"};
  EXPECT_THROW(start(default_libraries(), options), std::runtime_error);
  EXPECT_TRUE(contains(gateway().log(), "LISTEN_FDS is not set (start the gateway from its .socket unit)"))
      << gateway().log();
}


// ------------------------------------------------------------------------------------------------
// Logs for journald: JOURNAL_STREAM names stderr's device and inode when systemd connected stderr to
// the journal. The test makes the gateway's stderr file that "journal".

// Creates `file` (the harness truncates, never replaces it) and returns "DEVICE:INODE".
std::string journal_stream_of(const fs::path& file) {
  write_file(file, "");
  struct stat st {};
  if (::stat(file.c_str(), &st) != 0) throw std::runtime_error("stat " + file.string());
  return fmt::format("{}:{}", st.st_dev, st.st_ino);
}

TEST(JournalTest, LinesCarryAPriorityAndNoTimestampOnlyWhenStderrIsTheJournal) {
  GatewayProcess journal({test_library("TestLibrary")});
  journal.options().env["JOURNAL_STREAM"] = journal_stream_of(journal.stderr_path());
  journal.start();
  {
    client::RpcClient client = journal.connect();
    open_library(client, "TestLibrary");
  }
  const auto log = journal.log();
  EXPECT_TRUE(std::regex_search(log, std::regex(R"((^|\n)<6>gateway INFO  robot-jsonrpc-gateway \S+ started)"))) << log;
  EXPECT_TRUE(std::regex_search(log, std::regex(R"(\n<7>gateway DEBUG )"))) << log;
  EXPECT_FALSE(std::regex_search(log, std::regex(R"((^|\n)[^<])"))) << "a line without its priority: " << log;

  // Another file's device and inode: stderr is not the journal, and lines keep their timestamps.
  GatewayProcess plain({test_library("TestLibrary")});
  plain.options().env["JOURNAL_STREAM"] = journal_stream_of(journal.dir() / "elsewhere");
  plain.start();
  // start() returns once the port accepts connections, which the kernel does from listen() on: the first
  // line may still be on its way (ThreadSanitizer's gateway once had written nothing yet).
  EXPECT_TRUE(eventually([&] { return contains(plain.log(), " gateway INFO  "); }, 10s)) << plain.log();
  EXPECT_TRUE(std::regex_search(plain.log(), std::regex(R"(^\d{4}-\d\d-\d\dT[0-9:.]+Z gateway INFO  )"))) << plain.log();
}

// log_format = "json": every line the gateway writes is one JSON object.
TEST(JournalTest, JsonLogsAreOneObjectPerLine) {
  GatewayOptions options;
  options.extra_gateway_toml = "log_format = \"json\"\n";
  GatewayProcess gateway({test_library("TestLibrary")}, options);
  gateway.start();
  {
    client::RpcClient client = gateway.connect();
    auto token = open_library(client, "TestLibrary");
    auto printed = client.run_keyword(token, "Print Stderr", json::array{"quote \" and tab \t"});
    RJG_ASSERT_KEYWORD_OK(printed);
  }
  ASSERT_EQ(gateway.stop(30s).value_or(-1), 0);
  std::size_t lines = 0, worker_lines = 0;
  for (const auto& line : lines_with(gateway.log(), "")) {
    if (line.empty()) continue;
    ++lines;
    boost::system::error_code ec;
    auto value = json::parse(line, ec);
    ASSERT_FALSE(ec) << "not JSON: " << line;
    ASSERT_TRUE(value.is_object()) << line;
    for (const char* key : {"time", "level", "program", "message"})
      EXPECT_TRUE(value.as_object().contains(key)) << key << " missing: " << line;
    if (contains(value.as_object().at("message").as_string(), "stderr: quote")) ++worker_lines;
  }
  EXPECT_GT(lines, 5u);
  EXPECT_EQ(worker_lines, 1u) << gateway.log();
}

}  // namespace
}  // namespace rjg::test
