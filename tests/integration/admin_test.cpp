// The admin endpoint with the real gateway: /metrics in Prometheus' own checker and counting exactly
// what the test did; /readyz turning 503 at the start of a drain while sessions still finish; /status;
// what is not a page.
#include "tests/integration/gateway_test.hpp"

#include <boost/json/parse.hpp>

#include <fmt/format.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <regex>

namespace rjg::test {
namespace {

struct HttpAnswer {
  int status = 0;
  std::string headers;
  std::string body;
};

// One request on a connection of its own (Connection: close), read to the end; bounded by SO_RCVTIMEO.
HttpAnswer http(std::uint16_t port, std::string_view method, std::string_view path) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error("socket");
  timeval tv{20, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    ::close(fd);
    throw std::runtime_error(fmt::format("connect to the admin port {}: {}", port, std::strerror(errno)));
  }
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
  start_with_admin({test_library("TestLibrary"), failing, slow});

  {
    auto [c, token] = session();
    for (int i = 0; i < 3; ++i) RJG_ASSERT_KEYWORD_OK(c.run_keyword(token, "Echo", json::array{i}));
    auto failed = c.run_keyword(token, "Fail", json::array{"on purpose"});
    ASSERT_NE(failed.keyword_error(), nullptr) << describe(failed);
    auto crashed = c.run_keyword(token, "Crash");  // abort(): a crash of its own
    ASSERT_FALSE(crashed.ok() && !crashed.keyword_error()) << describe(crashed);
    const auto again = open_library(c, "TestLibrary");
    auto killed = c.run_keyword(again, "Crash", json::array{"sigkill"});  // as the OOM killer would
    ASSERT_FALSE(killed.ok() && !killed.keyword_error()) << describe(killed);
    EXPECT_FALSE(c.import_library("Failing").ok());
    const auto s = open_library(c, "Slow");
    auto overran = c.run_keyword(s, "Sleep", json::array{5});
    ASSERT_EQ(overran.error_code(), protocol::kWorkerTimeout) << describe(overran);
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

  // A reload is counted, and stamped.
  gateway().signal(SIGHUP);
  ASSERT_TRUE(log_eventually("reload: applied"));
  const auto after = metrics();
  EXPECT_EQ(sample(after, R"(robot_jsonrpc_gateway_reloads_total{outcome="applied"})"), 1) << after;
  EXPECT_GT(sample(after, "robot_jsonrpc_gateway_last_reload_success_timestamp_seconds"), 1.7e9) << after;
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

  EXPECT_EQ(http(admin_port_, "GET", "/nothing").status, 404);
  auto post = http(admin_port_, "POST", "/metrics");
  EXPECT_EQ(post.status, 405);
  EXPECT_TRUE(contains(post.headers, "Allow: GET, HEAD")) << post.headers;
  auto head = http(admin_port_, "HEAD", "/status");
  EXPECT_EQ(head.status, 200);
  EXPECT_EQ(head.body, "");
}

}  // namespace
}  // namespace rjg::test
