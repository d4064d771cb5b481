// The admin endpoint with the real gateway: /metrics in Prometheus' own checker and counting exactly
// what the test did; /readyz turning 503 at the start of a drain while sessions still finish; /status;
// what is not a page; probes answered while other addresses hold the endpoint with half-sent requests.
// Clients take distinct addresses by binding their sockets to 127.0.0.2, 127.0.1.1, ... (Linux routes all of
// 127.0.0.0/8 to the loopback interface).
#include "tests/integration/gateway_test.hpp"

#include <boost/json/parse.hpp>

#include <fmt/format.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <regex>
#include <thread>

namespace rjg::test {
namespace {

struct HttpAnswer {
  int status = 0;
  std::string headers;
  std::string body;
};

// A TCP socket connected to 127.0.0.1:port from `source` (a loopback address; nullptr: the kernel's
// choice, 127.0.0.1); -1 when connecting failed.
int connect_from(std::uint16_t port, const char* source) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error("socket");
  timeval tv{20, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (source) {
    // The port is chosen at connect(), so thousands of connections from one address do not run out of
    // ports that bind() alone would have to keep apart.
    const int on = 1;
    ::setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &on, sizeof on);
    sockaddr_in own{};
    own.sin_family = AF_INET;
    if (::inet_pton(AF_INET, source, &own.sin_addr) != 1 || ::bind(fd, reinterpret_cast<sockaddr*>(&own), sizeof own) != 0) {
      ::close(fd);
      throw std::runtime_error(fmt::format("cannot bind a client socket to {}: {}", source, std::strerror(errno)));
    }
  }
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    const int failed = errno;
    ::close(fd);
    errno = failed;
    return -1;
  }
  return fd;
}

// One request on a connection of its own (Connection: close), read to the end; bounded by SO_RCVTIMEO.
HttpAnswer http(std::uint16_t port, std::string_view method, std::string_view path, const char* source = nullptr) {
  const int fd = connect_from(port, source);
  if (fd < 0) throw std::runtime_error(fmt::format("connect to the admin port {}: {}", port, std::strerror(errno)));
  const auto request = fmt::format("{} {} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n", method, path);
  if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(request.size())) {
    ::close(fd);
    throw std::runtime_error("send");
  }
  std::string text;
  char buffer[65536];
  for (ssize_t n; (n = ::recv(fd, buffer, sizeof buffer, 0)) > 0;) text.append(buffer, static_cast<std::size_t>(n));
  ::close(fd);
  HttpAnswer answer;
  const auto end = text.find("\r\n\r\n");
  if (text.size() < 12 || end == std::string::npos) throw std::runtime_error("no HTTP answer: " + text);
  answer.status = std::stoi(text.substr(9, 3));
  answer.headers = text.substr(0, end);
  answer.body = text.substr(end + 4);
  return answer;
}

// Requests from `source` that got an answer with one of `statuses`; a connection closed without one, or
// refused, counts as a failure.
bool answered(std::uint16_t port, std::string_view path, const char* source, std::initializer_list<int> statuses) {
  try {
    const auto status = http(port, "GET", path, source).status;
    return std::find(statuses.begin(), statuses.end(), status) != statuses.end();
  } catch (const std::runtime_error&) {
    return false;
  }
}

// The red-team round's reproducer: connections to the admin port from each of `sources`, `per_source` of
// them, each holding half a request and never finishing it; a thread opens a new one whenever the gateway
// closes one (at a timeout, or at once when it refuses it). The first round is open when the constructor
// returns, so the gateway accepts all of it before any later connection.
class HalfSentFlood {
 public:
  HalfSentFlood(std::uint16_t port, std::vector<std::string> sources, std::size_t per_source) : port_(port) {
    for (const auto& source : sources)
      for (std::size_t i = 0; i < per_source; ++i) slots_.push_back({open(source), source});
    thread_ = std::thread([this] { run(); });
  }
  HalfSentFlood(const HalfSentFlood&) = delete;
  HalfSentFlood& operator=(const HalfSentFlood&) = delete;
  ~HalfSentFlood() {
    stop_ = true;
    thread_.join();
    for (auto& slot : slots_)
      if (slot.fd >= 0) ::close(slot.fd);
  }
  // Connections opened so far, the first round included.
  std::size_t opened() const { return opened_.load(); }

 private:
  struct Slot {
    int fd;
    std::string source;
  };

  int open(const std::string& source) {
    const int fd = connect_from(port_, source.c_str());
    if (fd < 0) return -1;
    ++opened_;
    constexpr std::string_view half = "GET /readyz HTTP/1.1\r\nHost: gateway\r\nX-Never-Ends: ";
    ::send(fd, half.data(), half.size(), MSG_NOSIGNAL);
    return fd;
  }

  void run() {
    while (!stop_) {
      std::vector<pollfd> polled;
      for (const auto& slot : slots_) polled.push_back({slot.fd, POLLIN, 0});  // fd -1: ignored by poll
      ::poll(polled.data(), polled.size(), 50);
      bool reopened = false;
      for (std::size_t i = 0; i < slots_.size(); ++i) {
        auto& slot = slots_[i];
        if (slot.fd >= 0 && (polled[i].revents & (POLLIN | POLLHUP | POLLERR))) {
          char scratch[512];
          if (::recv(slot.fd, scratch, sizeof scratch, MSG_DONTWAIT) > 0) continue;  // never expected
          ::close(slot.fd);
          slot.fd = -1;
        }
        if (slot.fd < 0) {
          slot.fd = open(slot.source);
          reopened = true;
        }
      }
      // A refused connection comes back at once: a pause keeps the flood from taking the test machine's
      // cores from the gateway (it still opens hundreds of connections a second).
      if (reopened) std::this_thread::sleep_for(50ms);
    }
  }

  std::uint16_t port_;
  std::vector<Slot> slots_;
  std::atomic<bool> stop_{false};
  std::atomic<std::size_t> opened_{0};
  std::thread thread_;
};

// The value of one sample, by its name and labels exactly as written; -1 when absent.
double sample(const std::string& metrics, const std::string& series) {
  for (const auto& line : lines_with(metrics, series))
    if (line.starts_with(series + " ")) return std::stod(line.substr(series.size() + 1));
  return -1;
}

class AdminTest : public GatewayTest {
 protected:
  void start_with_admin(std::vector<LibrarySpec> libraries, GatewayOptions options = {}) {
    admin_port_ = free_port();
    options.extra_gateway_toml += "\n[admin]\n" + fmt::format("listen = [\"tcp://127.0.0.1:{}\"]\n", admin_port_);
    start(std::move(libraries), options);
    // The gateway opens its admin listeners before its client ones: this holds at once.
    ASSERT_TRUE(can_connect(admin_port_)) << "the admin port does not accept once the client port does";
  }
  std::uint16_t admin_port_ = 0;
};

TEST_F(AdminTest, MetricsPassPromtoolAndCountWhatHappened) {
  auto failing = test_library("Failing", {"--fail-import"});
  auto slow = test_library("Slow");
  slow.extra_toml = "keyword_timeout = \"300ms\"\n";
  GatewayOptions options;
  options.extra_gateway_toml = "max_sessions = 321\n";
  start_with_admin({test_library("TestLibrary"), failing, slow}, options);

  {
    auto [c, token] = session();
    for (int i = 0; i < 3; ++i) RJG_ASSERT_KEYWORD_OK(c.run_keyword(token, "Echo", json::array{i}));
    auto failed = c.run_keyword(token, "Fail", json::array{"on purpose"});
    ASSERT_NE(failed.keyword_error(), nullptr) << describe(failed);
    auto crashed = c.run_keyword(token, "Crash");  // abort(): a crash of its own
    RJG_ASSERT_KEYWORD_FAILURE(crashed, protocol::kWorkerFailed);
    const auto again = open_library(c, "TestLibrary");
    auto killed = c.run_keyword(again, "Crash", json::array{"sigkill"});  // as the OOM killer would
    RJG_ASSERT_KEYWORD_FAILURE(killed, protocol::kWorkerFailed);
    EXPECT_FALSE(c.import_library("Failing").ok());
    const auto s = open_library(c, "Slow");
    auto overran = c.run_keyword(s, "Sleep", json::array{5});
    RJG_ASSERT_KEYWORD_FAILURE(overran, protocol::kWorkerTimeout);
    c.exit();
  }
  // Counted once the sessions are gone and their workers have exited.
  auto metrics = [&] { return http(admin_port_, "GET", "/metrics").body; };
  ASSERT_TRUE(eventually(
      [&] {
        auto m = metrics();
        return sample(m, "robot_jsonrpc_gateway_sessions_open") == 0 &&
               sample(m, R"(robot_jsonrpc_gateway_workers{library="TestLibrary",state="idle"})") == 0 &&
               sample(m, R"(robot_jsonrpc_gateway_worker_exits_total{library="Slow",reason="timeout"})") == 1 &&
               sample(m, R"(robot_jsonrpc_gateway_worker_exits_total{library="TestLibrary",reason="crash"})") == 1 &&
               sample(m, R"(robot_jsonrpc_gateway_worker_exits_total{library="TestLibrary",reason="killed"})") == 1 &&
               sample(m, R"(robot_jsonrpc_gateway_worker_exits_total{library="Failing",reason="normal"})") == 1;
      },
      30s))
      << metrics();
  const auto m = metrics();

  // Prometheus' own checker (Debian's prometheus package): the format, and its naming rules.
  const auto file = gateway().dir() / "metrics.txt";
  write_file(file, m);
  const auto check = run_process({"/bin/sh", "-c", "promtool check metrics < " + file.string()}, gateway().dir(), 30s);
  EXPECT_TRUE(check.exited_with(0)) << check.describe() << "\n" << m;

  auto at = [&](const std::string& series) { return sample(m, "robot_jsonrpc_gateway_" + series); };
  EXPECT_EQ(at("build_info{version=\"0.1.0\"}"), 1) << m;
  EXPECT_GE(at("sessions_total"), 1);
  EXPECT_EQ(at(R"(imports_total{library="TestLibrary",outcome="ok"})"), 2) << m;
  EXPECT_EQ(at(R"(imports_total{library="Failing",outcome="error"})"), 1) << m;
  EXPECT_EQ(at(R"(imports_total{library="Slow",outcome="ok"})"), 1) << m;
  EXPECT_EQ(at(R"(keywords_total{library="TestLibrary",outcome="pass"})"), 3) << m;
  EXPECT_EQ(at(R"(keywords_total{library="TestLibrary",outcome="fail"})"), 1) << m;
  EXPECT_EQ(at(R"(keywords_total{library="TestLibrary",outcome="error"})"), 2) << m;
  EXPECT_EQ(at(R"(keywords_total{library="Slow",outcome="timeout"})"), 1) << m;
  EXPECT_EQ(at(R"(keyword_duration_seconds_count{library="TestLibrary"})"), 6) << m;
  EXPECT_EQ(at(R"(keyword_duration_seconds_bucket{library="TestLibrary",le="+Inf"})"), 6) << m;
  EXPECT_EQ(at(R"(worker_starts_total{library="TestLibrary",kind="cold"})"), 2) << m;
  EXPECT_EQ(at(R"(worker_exits_total{library="TestLibrary",reason="crash"})"), 1) << m;
  EXPECT_EQ(at(R"(worker_exits_total{library="TestLibrary",reason="killed"})"), 1) << m;
  EXPECT_EQ(at(R"(worker_exits_total{library="Slow",reason="timeout"})"), 1) << m;
  EXPECT_EQ(at(R"(import_queue_wait_seconds_count{library="TestLibrary"})"), 2) << m;
  EXPECT_GT(at(R"(client_bytes_total{direction="received"})"), 0) << m;
  EXPECT_GT(at(R"(client_bytes_total{direction="sent"})"), 0) << m;
  EXPECT_EQ(at(R"(reloads_total{outcome="applied"})"), 0) << m;
  EXPECT_EQ(at("max_sessions"), 321) << m;
  EXPECT_EQ(at("last_reload_successful"), 1) << m;  // none yet: nothing failed
  // Every worker is gone: their memory with them. The gateway's own is there, unprefixed as every
  // exporter's (the dashboard's memory panel reads it).
  EXPECT_EQ(at(R"(worker_resident_bytes{library="TestLibrary"})"), 0) << m;
  EXPECT_GT(sample(m, "process_resident_memory_bytes"), 0) << m;
  // The status page's "last crash": the last worker that ended by itself, the SIGKILL one.
  const auto status = boost::json::parse(http(admin_port_, "GET", "/status").body).as_object();
  for (const auto& l : status.at("libraries").as_array()) {
    if (l.at("name") == "TestLibrary") {  // braces: EXPECT_TRUE is an if/else of its own
      EXPECT_TRUE(contains(l.at("last_crash").at("what").as_string(), "SIGKILL")) << status;
    }
  }

  // A reload is counted, and stamped.
  gateway().signal(SIGHUP);
  ASSERT_TRUE(log_eventually("reload: applied"));
  const auto after = metrics();
  EXPECT_EQ(sample(after, R"(robot_jsonrpc_gateway_reloads_total{outcome="applied"})"), 1) << after;
  EXPECT_GT(sample(after, "robot_jsonrpc_gateway_last_reload_success_timestamp_seconds"), 1.7e9) << after;
  EXPECT_EQ(sample(after, "robot_jsonrpc_gateway_last_reload_successful"), 1) << after;
}

// A reload that fails says so until one applies: the metric the alert reads, /status and the status page.
TEST_F(AdminTest, AFailedReloadShowsUntilOneApplies) {
  start_with_admin(default_libraries());
  const auto good = read_file(gateway().config_path());
  write_file(gateway().config_path(), good + "\n[[library]]\nname = 42\n");  // no command, and a number
  gateway().signal(SIGHUP);
  ASSERT_TRUE(log_eventually("reload failed"));
  auto m = http(admin_port_, "GET", "/metrics").body;
  EXPECT_EQ(sample(m, "robot_jsonrpc_gateway_last_reload_successful"), 0) << m;
  EXPECT_EQ(sample(m, R"(robot_jsonrpc_gateway_reloads_total{outcome="failed"})"), 1) << m;
  auto status = boost::json::parse(http(admin_port_, "GET", "/status").body).as_object();
  EXPECT_EQ(status.at("reload").at("last"), "failed") << status;
  EXPECT_EQ(status.at("config_generation"), 1) << status;
  EXPECT_TRUE(contains(http(admin_port_, "GET", "/").body, "reload failed: 2 problems in")) << status;

  write_file(gateway().config_path(), good);
  gateway().signal(SIGHUP);
  ASSERT_TRUE(log_eventually("reload: applied"));
  m = http(admin_port_, "GET", "/metrics").body;
  EXPECT_EQ(sample(m, "robot_jsonrpc_gateway_last_reload_successful"), 1) << m;
  status = boost::json::parse(http(admin_port_, "GET", "/status").body).as_object();
  EXPECT_EQ(status.at("reload").at("last"), "applied") << status;
  EXPECT_EQ(status.at("config_generation"), 2) << status;
}

// The status page (GET /): HTML under a policy that lets nothing but its own stylesheet and icon load, the
// session with the keyword it runs, and a client's keyword name as text. tests/browser loads it in chromium.
TEST_F(AdminTest, StatusPageShowsTheRunningKeywordEscapedUnderAStrictPolicy) {
  start_with_admin(default_libraries());
  auto [c, token] = session();
  c.send_request("robot/run_keyword", json::object{{"library_token", token}, {"name", "Sleep"}, {"args", json::array{30}},
                                                   {"kwargs", json::object{}}});
  // Waits behind the Sleep in the same worker: running, as the gateway sees it, meanwhile.
  c.send_request("robot/run_keyword", json::object{{"library_token", token}, {"name", "<b onclick='x()'>Bold</b>"},
                                                   {"args", json::array{}}, {"kwargs", json::object{}}});
  ASSERT_TRUE(eventually(
      [&] {
        auto status = boost::json::parse(http(admin_port_, "GET", "/status").body).as_object();
        const auto& sessions = status.at("sessions").as_array();
        return sessions.size() == 1 && sessions[0].at("keywords_running").as_array().size() == 2;
      },
      20s))
      << http(admin_port_, "GET", "/status").body;
  const auto status = boost::json::parse(http(admin_port_, "GET", "/status").body).as_object();
  const auto& session = status.at("sessions").at(0).as_object();
  EXPECT_EQ(session.at("libraries"), json::array{"TestLibrary"}) << status;
  EXPECT_EQ(session.at("keywords_running").at(0).at("keyword"), "Sleep") << status;
  EXPECT_EQ(session.at("keywords_running").at(0).at("library"), "TestLibrary") << status;

  auto page = http(admin_port_, "GET", "/");
  ASSERT_EQ(page.status, 200) << page.body;
  EXPECT_TRUE(contains(page.headers, "Content-Type: text/html; charset=utf-8")) << page.headers;
  EXPECT_TRUE(contains(page.headers, "Content-Security-Policy: default-src 'none'; style-src 'self'; img-src 'self';"))
      << page.headers;
  EXPECT_TRUE(contains(page.headers, "X-Content-Type-Options: nosniff")) << page.headers;
  EXPECT_TRUE(page.body.starts_with("<!DOCTYPE html>")) << page.body;
  EXPECT_TRUE(contains(page.body, "<code>Sleep</code>")) << page.body;
  EXPECT_TRUE(contains(page.body, "&lt;b onclick=&#39;x()&#39;&gt;Bold&lt;/b&gt;")) << page.body;
  EXPECT_FALSE(contains(page.body, "<b onclick")) << page.body;
  EXPECT_FALSE(contains(page.body, "<script")) << page.body;  // nothing to run: the policy allows no script
  auto css = http(admin_port_, "GET", "/status.css");
  EXPECT_EQ(css.status, 200);
  EXPECT_TRUE(contains(css.headers, "Content-Type: text/css")) << css.headers;
  EXPECT_EQ(http(admin_port_, "GET", "/status.svg").status, 200);
  auto head = http(admin_port_, "HEAD", "/");
  EXPECT_EQ(head.status, 200);
  EXPECT_EQ(head.body, "");
}

// /readyz turns 503 at the first moment of a drain, so a load balancer sends no new session, while the
// sessions already open go on; /livez stays 200.
TEST_F(AdminTest, ReadyzTurnsUnreadyAtTheDrainWhileSessionsFinish) {
  GatewayOptions options;
  options.drain_timeout = "60s";
  start_with_admin(default_libraries(), options);
  EXPECT_EQ(http(admin_port_, "GET", "/readyz").status, 200);
  EXPECT_EQ(http(admin_port_, "GET", "/livez").status, 200);
  auto [c, token] = session();
  gateway().signal(SIGTERM);
  ASSERT_TRUE(eventually([&] { return http(admin_port_, "GET", "/readyz").status == 503; }, 20s));
  EXPECT_EQ(http(admin_port_, "GET", "/livez").status, 200);
  auto m = http(admin_port_, "GET", "/metrics").body;
  EXPECT_EQ(sample(m, "robot_jsonrpc_gateway_ready"), 0) << m;
  RJG_ASSERT_KEYWORD_OK(c.run_keyword(token, "Echo", json::array{"served while draining"}));
  c.exit();
  auto status = gateway().wait(30s);
  ASSERT_TRUE(status.has_value()) << "the gateway did not exit once its last session ended";
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << describe_status(*status);
}

// A prewarm that keeps failing never makes the gateway unready: it shows in the metrics and the status.
TEST_F(AdminTest, APrewarmThatKeepsFailingShowsWithoutMakingTheGatewayUnready) {
  LibrarySpec broken;
  broken.name = "Broken";
  broken.command = {"/bin/false"};  // exits before the handshake, every time
  broken.extra_toml = "prewarm = 1\n";
  start_with_admin({test_library("TestLibrary"), broken});
  auto metrics = [&] { return http(admin_port_, "GET", "/metrics").body; };
  ASSERT_TRUE(eventually(
      [&] {
        auto m = metrics();
        return sample(m, R"(robot_jsonrpc_gateway_worker_start_failures_total{library="Broken"})") >= 2 &&
               sample(m, R"(robot_jsonrpc_gateway_library_backoff{library="Broken"})") == 1;
      },
      30s))
      << metrics();
  EXPECT_EQ(http(admin_port_, "GET", "/readyz").status, 200);
  const auto status = boost::json::parse(http(admin_port_, "GET", "/status").body).as_object();
  EXPECT_TRUE(contains(status.at("status").as_string(), "Broken backs off after")) << status;
  auto [c, token] = session();  // the other library is served as ever
  RJG_ASSERT_KEYWORD_OK(c.run_keyword(token, "Echo", json::array{1}));
}

TEST_F(AdminTest, StatusShowsSessionsAndWorkersAndOtherPathsAre404Or405) {
  start_with_admin(default_libraries());
  auto [c, token] = session();
  const pid_t pid = remember_pid(worker_pid(c, token));
  auto answer = http(admin_port_, "GET", "/status");
  ASSERT_EQ(answer.status, 200) << answer.body;
  EXPECT_TRUE(contains(answer.headers, "Content-Type: application/json")) << answer.headers;
  auto status = boost::json::parse(answer.body).as_object();
  EXPECT_EQ(status.at("ready"), true);
  bool seen_session = false;
  for (const auto& s : status.at("sessions").as_array())
    if (s.as_object().at("imports").as_int64() == 1) {
      seen_session = true;
      EXPECT_TRUE(contains(s.as_object().at("peer").as_string(), "127.0.0.1:")) << answer.body;
    }
  EXPECT_TRUE(seen_session) << answer.body;
  bool seen_worker = false;
  for (const auto& l : status.at("libraries").as_array())
    for (const auto& w : l.as_object().at("workers").as_array())
      if (w.as_object().at("pid").as_int64() == pid) {
        seen_worker = true;
        EXPECT_EQ(l.as_object().at("name"), "TestLibrary");
        EXPECT_EQ(w.as_object().at("state"), "idle");
        EXPECT_EQ(w.as_object().at("keywords").as_int64(), 1);  // Get Pid
        EXPECT_GT(w.as_object().at("rss_bytes").as_int64(), 0);
      }
  EXPECT_TRUE(seen_worker) << answer.body;
  // The worker's memory in the metrics too, summed per library.
  const auto m = http(admin_port_, "GET", "/metrics").body;
  EXPECT_GT(sample(m, R"(robot_jsonrpc_gateway_worker_resident_bytes{library="TestLibrary"})"), 0) << m;

  EXPECT_EQ(http(admin_port_, "GET", "/nothing").status, 404);
  auto post = http(admin_port_, "POST", "/metrics");
  EXPECT_EQ(post.status, 405);
  EXPECT_TRUE(contains(post.headers, "Allow: GET, HEAD")) << post.headers;
  auto head = http(admin_port_, "HEAD", "/status");
  EXPECT_EQ(head.status, 200);
  EXPECT_EQ(head.body, "");
}

// The red-team finding: one address held the endpoint's 64 connections with half-sent requests (opening
// new ones as they timed out) and every /readyz probe from another address failed. Now one address holds
// at most 8, and the probes from elsewhere all get through.
TEST_F(AdminTest, OneAddressHoldingHalfSentRequestsCannotFailAProbe) {
  GatewayOptions options;
  options.log_level = "info";  // not a line for each of the flood's connections
  start_with_admin(default_libraries(), options);
  HalfSentFlood flood(admin_port_, {"127.0.0.1"}, 64);
  // The flood keeps coming back while the probes run, for longer than a header timeout (2 s).
  int ok = 0;
  constexpr int kProbes = 32;
  for (int i = 0; i < kProbes; ++i) {
    ok += answered(admin_port_, i % 2 ? "/livez" : "/readyz", "127.0.0.2", {200}) ? 1 : 0;
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_EQ(ok, kProbes) << "probes from 127.0.0.2 failed while 127.0.0.1 held half-sent requests";
  EXPECT_GT(flood.opened(), 64u) << "the flood never had a connection closed or refused";
  EXPECT_TRUE(log_eventually(
      "admin: refused a connection from 127.0.0.1: 8 connections from this address are open, the most allowed"));
}

// The same from many addresses: eight of them, eight connections each, hold every one of the 64 ordinary
// connections, and keep them with a new half-sent request whenever one times out. Probes from another
// address are answered on the room kept for them, and any other page there is told to wait (503), never
// left without an answer.
TEST_F(AdminTest, ManyAddressesHoldingEveryConnectionCannotFailAProbe) {
  GatewayOptions options;
  options.log_level = "info";
  start_with_admin(default_libraries(), options);
  std::vector<std::string> sources;
  for (int i = 1; i <= 8; ++i) sources.push_back(fmt::format("127.0.1.{}", i));
  HalfSentFlood flood(admin_port_, sources, 8);
  int probes_ok = 0, others_answered = 0;
  constexpr int kProbes = 32;
  for (int i = 0; i < kProbes; ++i) {
    probes_ok += answered(admin_port_, i % 2 ? "/livez" : "/readyz", "127.0.0.2", {200}) ? 1 : 0;
    others_answered += answered(admin_port_, "/metrics", "127.0.0.3", {200, 503}) ? 1 : 0;
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_EQ(probes_ok, kProbes) << "probes from 127.0.0.2 failed while 8 addresses held every connection";
  EXPECT_EQ(others_answered, kProbes) << "a page from 127.0.0.3 was left without an answer";
  EXPECT_TRUE(log_eventually("admin: 64 connections are open, the most allowed; new ones are served one request "
                             "of /livez or /readyz only"));
}

}  // namespace
}  // namespace rjg::test
