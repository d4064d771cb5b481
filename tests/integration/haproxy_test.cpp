// The real HAProxy (/usr/sbin/haproxy, Debian's package) in front of two real gateways, configured as in
// deploy/haproxy/haproxy.cfg: TCP mode, leastconn, send-proxy-v2, health checks on each gateway's /readyz.
// - Sessions through the balancer are spread over both gateways and served whole; each gateway sees (logs,
//   applies allow_from to) the real client address from the PROXY v2 header, not the balancer's.
// - Draining one gateway (SIGTERM): its running keywords are answered, /readyz turns 503, HAProxy takes it out
//   of rotation, new sessions go to the other one, and it exits 0 once its own sessions end.
// Clients take distinct addresses by binding their sockets to 127.0.0.2, 127.0.0.3, ... (Linux routes all of
// 127.0.0.0/8 to the loopback interface) before connecting to HAProxy; HAProxy names that address in its
// PROXY header. RpcClient cannot bind a source address, so this file has a small blocking frame client.
#include "common/protocol/framing.hpp"
#include "common/protocol/message.hpp"
#include "common/protocol/protocol.hpp"
#include "tests/integration/harness.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

namespace rjg::test {
namespace {

namespace protocol = rjg::protocol;

constexpr const char* kHaproxy = "/usr/sbin/haproxy";

// The peer closed the connection (EOF or reset).
struct PeerClosed : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A blocking protocol client whose socket is bound to a source address of the test's choice before it
// connects. Every read is bounded by a deadline.
class SourcedClient {
 public:
  SourcedClient(std::string source, std::uint16_t port) : source_(std::move(source)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) throw std::runtime_error(fmt::format("socket: {}", std::strerror(errno)));
    auto fail = [&](const std::string& what) {
      const auto message = fmt::format("{}: {}", what, std::strerror(errno));
      close();
      throw std::runtime_error(message);
    };
    sockaddr_in local{};
    local.sin_family = AF_INET;
    if (::inet_pton(AF_INET, source_.c_str(), &local.sin_addr) != 1) {
      close();
      throw std::runtime_error("not an IPv4 address: " + source_);
    }
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&local), sizeof local) != 0) fail("bind to " + source_);
    sockaddr_in remote{};
    remote.sin_family = AF_INET;
    remote.sin_port = htons(port);
    remote.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&remote), sizeof remote) != 0)
      fail(fmt::format("connect from {} to 127.0.0.1:{}", source_, port));
    socklen_t len = sizeof local;
    if (::getsockname(fd_, reinterpret_cast<sockaddr*>(&local), &len) != 0) fail("getsockname");
    local_port_ = ntohs(local.sin_port);
  }
  ~SourcedClient() { close(); }
  SourcedClient(const SourcedClient&) = delete;
  SourcedClient& operator=(const SourcedClient&) = delete;

  const std::string& source() const { return source_; }
  std::uint16_t local_port() const { return local_port_; }
  // "127.0.0.2:41234": how the gateway names this client.
  std::string address() const { return fmt::format("{}:{}", source_, local_port_); }

  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  json::value send_request(std::string_view method, const json::value& params) {
    json::value id(std::to_string(next_id_++));
    send_body(protocol::make_request(id, method, params));
    return id;
  }
  void notify(std::string_view method, const json::value& params) { send_body(protocol::make_notification(method, params)); }

  // Reads until the answer to `id`; notifications that arrive meanwhile are kept in notifications().
  client::RpcReply wait_reply(const json::value& id, std::chrono::milliseconds timeout = 30s) {
    const auto id_text = json::serialize(id);
    const auto deadline = Clock::now() + timeout;
    for (;;) {
      auto message = read_message(deadline);
      if (message.kind == protocol::Message::Kind::notification) {
        notifications_.push_back(std::move(message));
        continue;
      }
      if (message.kind == protocol::Message::Kind::request)
        throw std::runtime_error(fmt::format("{}: unexpected request from the server: {}", address(), message.text()));
      if (message.id_text() != id_text)
        throw std::runtime_error(
            fmt::format("{}: an answer to another id while waiting for {}: {}", address(), id_text, message.text()));
      client::RpcReply reply;
      reply.id = message.id();
      reply.text = message.text();
      if (message.kind == protocol::Message::Kind::response)
        reply.result = message.result();
      else
        reply.error = message.error();
      return reply;
    }
  }
  client::RpcReply request(std::string_view method, const json::value& params, std::chrono::milliseconds timeout = 30s) {
    return wait_reply(send_request(method, params), timeout);
  }

  // robot/initialize, robot/initialized, robot/import_library: the token.
  std::string open_library(const std::string& library) {
    auto init = request(protocol::kInitialize,
                        json::object{{"capabilities", json::object{}},
                                     {"client_info", json::object{{"name", "rjg-haproxy-test"}, {"version", "0"}}}});
    if (!init.ok()) throw std::runtime_error(fmt::format("{}: initialize failed: {}", address(), describe(init)));
    notify(protocol::kInitialized, json::object{});
    auto import = request(protocol::kImportLibrary,
                          json::object{{"name", library}, {"args", json::array{}}, {"kw_args", json::object{}}});
    return token_of(import);
  }
  json::value run_keyword_request(const std::string& token, std::string_view name, json::array args = {}) {
    return send_request(protocol::kRunKeyword, json::object{{"library_token", token},
                                                             {"name", name},
                                                             {"args", std::move(args)},
                                                             {"kwargs", json::object{}}});
  }
  client::RpcReply run_keyword(const std::string& token, std::string_view name, json::array args = {}) {
    return wait_reply(run_keyword_request(token, name, std::move(args)));
  }
  void exit() { notify(protocol::kExit, json::object{}); }

  // Sends a request, then waits until the peer closes the connection. True when it closed within timeout
  // without sending a single byte back; otherwise what came is in `got`.
  bool closed_without_an_answer(std::chrono::milliseconds timeout, std::string& got) {
    try {
      send_request(protocol::kInitialize, json::object{{"capabilities", json::object{}}});
    } catch (const PeerClosed&) {
      return true;  // already closed: nothing was said
    }
    const auto deadline = Clock::now() + timeout;
    for (;;) {
      char buffer[4096];
      const auto n = receive(buffer, sizeof buffer, deadline);
      if (n == 0) return got.empty();
      if (n < 0) {
        got += "[no close within the timeout]";
        return false;
      }
      got.append(buffer, static_cast<std::size_t>(n));
    }
  }

  std::vector<protocol::Message>& notifications() { return notifications_; }

 private:
  void send_body(const std::string& body) {
    const auto frame = protocol::encode_frame(body);
    std::size_t sent = 0;
    while (sent < frame.size()) {
      const auto n = ::send(fd_, frame.data() + sent, frame.size() - sent, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw PeerClosed(fmt::format("{}: send: {}", address(), std::strerror(errno)));
      sent += static_cast<std::size_t>(n);
    }
  }

  // Bytes read (> 0), 0 when the peer closed (EOF or reset), -1 when the deadline passed.
  ssize_t receive(char* buffer, std::size_t size, Clock::time_point deadline) {
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) return -1;
      pollfd p{fd_, POLLIN, 0};
      const int ready = ::poll(&p, 1, static_cast<int>(left));
      if (ready < 0 && errno == EINTR) continue;
      if (ready < 0) throw std::runtime_error(fmt::format("poll: {}", std::strerror(errno)));
      if (ready == 0) continue;
      const auto n = ::recv(fd_, buffer, size, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == ECONNRESET || errno == EPIPE)) return 0;
      if (n < 0) throw std::runtime_error(fmt::format("{}: recv: {}", address(), std::strerror(errno)));
      return n;
    }
  }

  protocol::Message read_message(Clock::time_point deadline) {
    for (;;) {
      auto next = reader_.next();
      if (next.kind == protocol::FrameReader::Result::Kind::error)
        throw std::runtime_error(fmt::format("{}: bad framing from the server: {}", address(), next.error));
      if (next.kind == protocol::FrameReader::Result::Kind::frame) {
        auto classified = protocol::parse_message(next.body);
        if (auto* problem = std::get_if<protocol::ProtocolError>(&classified))
          throw std::runtime_error(fmt::format("{}: invalid message from the server ({}): {}", address(),
                                               problem->message, next.body));
        return std::get<protocol::Message>(std::move(classified));
      }
      char buffer[65536];
      const auto n = receive(buffer, sizeof buffer, deadline);
      if (n < 0) throw std::runtime_error(fmt::format("{}: no message from the server in time", address()));
      if (n == 0) throw PeerClosed(fmt::format("{}: the server closed the connection", address()));
      reader_.feed(std::string_view(buffer, static_cast<std::size_t>(n)));
    }
  }

  std::string source_;
  int fd_ = -1;
  std::uint16_t local_port_ = 0;
  std::uint64_t next_id_ = 1;
  protocol::FrameReader reader_;
  std::vector<protocol::Message> notifications_;
};

// A connection to a Unix socket, one line sent, everything read until the peer closes (HAProxy's stats socket
// answers one command and closes, outside interactive mode). Bounded by SO_RCVTIMEO.
std::string unix_command(const fs::path& path, const std::string& command) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error("socket");
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, path.c_str(), sizeof address.sun_path - 1);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    const int error = errno;
    ::close(fd);
    throw std::runtime_error(fmt::format("connect to {}: {}", path.string(), std::strerror(error)));
  }
  const auto line = command + "\n";
  if (::send(fd, line.data(), line.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(line.size())) {
    ::close(fd);
    throw std::runtime_error("send to the stats socket");
  }
  std::string text;
  char buffer[65536];
  for (ssize_t n; (n = ::recv(fd, buffer, sizeof buffer, 0)) > 0;) text.append(buffer, static_cast<std::size_t>(n));
  ::close(fd);
  return text;
}

// The status of one HTTP GET on a connection of its own; 0 when it cannot connect or no answer comes.
int http_status(std::uint16_t port, std::string_view path) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string text;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0) {
    const auto request = fmt::format("GET {} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n", path);
    if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(request.size())) {
      char buffer[4096];
      for (ssize_t n; (n = ::recv(fd, buffer, sizeof buffer, 0)) > 0;) text.append(buffer, static_cast<std::size_t>(n));
    }
  }
  ::close(fd);
  if (text.size() < 12 || !text.starts_with("HTTP/1.")) return 0;
  return std::atoi(text.substr(9, 3).c_str());
}

// One field of the CSV of "show stat", by column name, for each server of backend "gateways".
using ServerStats = std::map<std::string, std::map<std::string, std::string>>;
ServerStats parse_show_stat(const std::string& csv) {
  std::istringstream in(csv);
  std::string line;
  std::vector<std::string> columns;
  ServerStats out;
  auto split = [](const std::string& text) {
    std::vector<std::string> fields;
    std::string field;
    std::istringstream s(text);
    while (std::getline(s, field, ',')) fields.push_back(field);
    return fields;
  };
  while (std::getline(in, line)) {
    if (line.starts_with("# ")) {
      columns = split(line.substr(2));
      continue;
    }
    auto fields = split(line);
    if (columns.empty() || fields.size() < 2 || fields[0] != "gateways") continue;
    auto& server = out[fields[1]];
    for (std::size_t i = 0; i < columns.size() && i < fields.size(); ++i) server[columns[i]] = fields[i];
  }
  return out;
}

// The configuration under test, as deploy/haproxy/haproxy.cfg with this test's ports, a stats socket in the
// test's directory, and health checks five times as frequent (a gateway is out of rotation after two failed
// checks, back after one good one).
std::string haproxy_config(std::uint16_t front_port, const fs::path& stats_socket,
                           const std::vector<std::pair<std::uint16_t, std::uint16_t>>& gateways) {
  std::string servers;
  for (std::size_t i = 0; i < gateways.size(); ++i)
    servers += fmt::format("    server gw{} 127.0.0.1:{} send-proxy-v2 check port {} inter 200ms fall 2 rise 1\n", i + 1,
                           gateways[i].first, gateways[i].second);
  return fmt::format(R"(global
    log stdout format raw local0
    maxconn 1024
    stats socket {} mode 600 level admin

defaults
    mode tcp
    log global
    option tcplog
    option dontlognull
    timeout connect 5s
    timeout client 1m
    timeout server 1m
    timeout tunnel 1h
    timeout check 2s
    retries 2
    option redispatch 1
    option tcpka

frontend robot_jsonrpc
    bind 127.0.0.1:{}
    default_backend gateways

backend gateways
    balance leastconn
    option httpchk GET /readyz
    http-check expect status 200
{})",
                     stats_socket.string(), front_port, servers);
}

class HaProxyTest : public ::testing::Test {
 protected:
  struct Gateway {
    std::string name;  // gw1, gw2: also what "Get Env RJG_GATEWAY" answers on its workers
    std::uint16_t admin_port = 0;
    std::unique_ptr<GatewayProcess> process;
  };

  void SetUp() override { ::signal(SIGPIPE, SIG_IGN); }

  // Two gateways, each serving library Lab from the test worker, behind HAProxy; returns once HAProxy's own
  // health checks have found both ready.
  void start_cluster(const std::string& drain_timeout) {
    ASSERT_EQ(::access(kHaproxy, X_OK), 0)
        << kHaproxy << " is missing or not executable: install Debian's haproxy package (apt-get install haproxy)";
    std::vector<std::pair<std::uint16_t, std::uint16_t>> ports;
    for (int i = 1; i <= 2; ++i) {
      Gateway g;
      g.name = fmt::format("gw{}", i);
      g.admin_port = free_port();
      auto lab = test_library("Lab");
      lab.env["RJG_GATEWAY"] = g.name;
      GatewayOptions options;
      options.drain_timeout = drain_timeout;
      // HAProxy connects from 127.0.0.1 and names the client in a PROXY header; allow_from is applied to that
      // client. The balancer's own address is allowed too: a gateway that took the balancer's address for the
      // client's would let 127.0.0.4 in.
      options.extra_gateway_toml = fmt::format(
          "proxy_protocol_from = [\"127.0.0.1/32\"]\n"
          "allow_from = [\"127.0.0.1/32\", \"127.0.0.2/32\", \"127.0.0.3/32\"]\n"
          "\n[admin]\nlisten = [\"tcp://127.0.0.1:{}\"]\n",
          g.admin_port);
      g.process = std::make_unique<GatewayProcess>(std::vector<LibrarySpec>{lab}, options);
      g.process->start();
      ports.emplace_back(g.process->port(), g.admin_port);
      gateways_.push_back(std::move(g));
    }
    front_port_ = free_port();
    stats_socket_ = dir_.path() / "admin.sock";
    write_file(config_path(), haproxy_config(front_port_, stats_socket_, ports));
    auto check = run_process({kHaproxy, "-c", "-f", config_path().string()}, dir_.path(), 30s);
    ASSERT_TRUE(check.exited_with(0)) << "haproxy -c: " << check.describe() << "\n" << check.out << check.err;
    haproxy_.start({kHaproxy, "-db", "-f", config_path().string()}, dir_.path() / "haproxy.stdout",
                   dir_.path() / "haproxy.stderr");
    // Up once its stats socket answers (it binds its listeners before), and both gateways passed a health check
    // on /readyz (L7OK), not merely the initial state.
    ServerStats stats;
    const bool ready = eventually(
        [&] {
          if (!haproxy_.running()) return true;
          try {
            stats = parse_show_stat(unix_command(stats_socket_, "show stat"));
          } catch (const std::exception&) {
            return false;
          }
          return stats["gw1"]["status"] == "UP" && stats["gw1"]["check_status"] == "L7OK" &&
                 stats["gw2"]["status"] == "UP" && stats["gw2"]["check_status"] == "L7OK";
        },
        20s);
    ASSERT_TRUE(haproxy_.running()) << "haproxy exited: " << describe_status(haproxy_.status().value_or(0));
    ASSERT_TRUE(ready) << "HAProxy did not see both gateways ready: gw1 " << stats["gw1"]["status"] << " "
                       << stats["gw1"]["check_status"] << ", gw2 " << stats["gw2"]["status"] << " "
                       << stats["gw2"]["check_status"];
  }

  fs::path config_path() const { return dir_.path() / "haproxy.cfg"; }

  ServerStats haproxy_stats() { return parse_show_stat(unix_command(stats_socket_, "show stat")); }

  // A session through HAProxy from `source`: initialized, Lab imported.
  struct Session {
    std::unique_ptr<SourcedClient> client;
    std::string token;
    std::string gateway;  // gw1 / gw2, as its worker says
  };
  Session open_session(const std::string& source) {
    Session s;
    s.client = std::make_unique<SourcedClient>(source, front_port_);
    s.token = s.client->open_library("Lab");
    auto env = s.client->run_keyword(s.token, "Get Env", json::array{"RJG_GATEWAY"});
    if (!env.ok() || env.keyword_error() || !keyword_value(env).is_string())
      throw std::runtime_error(fmt::format("{}: Get Env failed: {}", s.client->address(), describe(env)));
    s.gateway = std::string(keyword_value(env).get_string());
    return s;
  }

  Gateway& gateway(const std::string& name) {
    for (auto& g : gateways_)
      if (g.name == name) return g;
    throw std::runtime_error("no gateway " + name);
  }

  // The session's line in its gateway's log: "session N (127.0.0.2:PORT via 127.0.0.1:PORT): connected".
  static std::string connected_marker(const SourcedClient& client) {
    return fmt::format("({} via 127.0.0.1:", client.address());
  }

  void TearDown() override {
    if (HasFailure()) {
      for (auto& g : gateways_) {
        if (!g.process) continue;
        std::cerr << "---- " << g.name << " config ----\n"
                  << read_file(g.process->config_path()) << "---- " << g.name << " stderr (last lines) ----\n"
                  << g.process->log_tail(150) << "---- end of " << g.name << " ----\n";
      }
      std::cerr << "---- haproxy.cfg ----\n"
                << read_file(config_path()) << "---- haproxy stdout ----\n"
                << read_file(dir_.path() / "haproxy.stdout") << "---- haproxy stderr ----\n"
                << read_file(dir_.path() / "haproxy.stderr") << "---- end of haproxy ----\n";
    }
    if (haproxy_.pid() > 0 && haproxy_.running()) {
      haproxy_.signal(SIGTERM);
      if (!haproxy_.wait(10s)) haproxy_.kill_and_reap();
    }
    gateways_.clear();  // each is stopped (SIGTERM, bounded wait)
  }

  TempDir dir_{"rjg-haproxy"};
  std::vector<Gateway> gateways_;
  std::uint16_t front_port_ = 0;
  fs::path stats_socket_;
  ChildProcess haproxy_;
};

// The example configuration itself is one HAProxy accepts.
TEST(HaProxyExample, DeployConfigurationPassesHaproxyCheck) {
  ASSERT_EQ(::access(kHaproxy, X_OK), 0)
      << kHaproxy << " is missing or not executable: install Debian's haproxy package (apt-get install haproxy)";
  const fs::path example = fs::path(RJG_TEST_DATA_DIR) / ".." / ".." / "deploy" / "haproxy" / "haproxy.cfg";
  ASSERT_TRUE(fs::exists(example)) << example;
  TempDir dir("rjg-haproxy-check");
  auto check = run_process({kHaproxy, "-c", "-f", example.string()}, dir.path(), 30s);
  EXPECT_TRUE(check.exited_with(0)) << "haproxy -c -f " << example.string() << ": " << check.describe() << "\n"
                                    << check.out << check.err;
}

// 40 sessions through the balancer: every one served whole by one gateway, both gateways used, each logging the
// real client address with the balancer's; a client outside allow_from is refused on its real address.
TEST_F(HaProxyTest, SessionsAreSpreadOverBothGatewaysWhichSeeTheRealClientAddress) {
  ASSERT_NO_FATAL_FAILURE(start_cluster("10s"));
  const std::vector<std::string> sources = {"127.0.0.2", "127.0.0.3"};
  std::vector<Session> sessions;
  std::map<std::string, int> served;
  for (int i = 0; i < 40; ++i) {
    // Two from each address in turn: with leastconn taking the gateways in turn, each gateway gets both.
    sessions.push_back(open_session(sources[(i / 2) % 2]));
    auto& s = sessions.back();
    ++served[s.gateway];
    // A keyword that logs: its robot/log notifications come through the tunnel before its answer.
    s.client->notifications().clear();
    auto logged = s.client->run_keyword(s.token, "Log Messages", json::array{3});
    ASSERT_TRUE(logged.ok() && !logged.keyword_error()) << s.client->address() << ": " << describe(logged);
    EXPECT_EQ(keyword_value(logged), json::value(3)) << describe(logged);
    std::size_t logs = 0;
    for (const auto& n : s.client->notifications()) logs += n.method() == protocol::kLog;
    EXPECT_EQ(logs, 3u) << s.client->address() << " on " << s.gateway;
  }
  EXPECT_GT(served["gw1"], 0) << "leastconn sent no session to gw1";
  EXPECT_GT(served["gw2"], 0) << "leastconn sent no session to gw2";
  EXPECT_EQ(served["gw1"] + served["gw2"], 40) << "a session was served by neither gw1 nor gw2";

  // Each session is in its own gateway's log (and only there) under the client's real address, via the balancer.
  for (const auto& s : sessions) {
    const auto marker = connected_marker(*s.client);
    auto& own = gateway(s.gateway);
    auto& other = gateway(s.gateway == "gw1" ? "gw2" : "gw1");
    EXPECT_TRUE(eventually([&] { return contains(own.process->log(), marker); }, 10s))
        << s.gateway << "'s log does not name " << marker;
    EXPECT_FALSE(contains(other.process->log(), marker)) << other.name << "'s log names " << marker;
  }
  for (auto& g : gateways_) {
    const auto log = g.process->log();
    EXPECT_TRUE(contains(log, "(127.0.0.2:")) << g.name << " logged no session from 127.0.0.2";
    EXPECT_TRUE(contains(log, "(127.0.0.3:")) << g.name << " logged no session from 127.0.0.3";
  }

  // Both gateways are in HAProxy's accounting as well: the sessions stand open on them.
  auto stats = haproxy_stats();
  EXPECT_EQ(stats["gw1"]["scur"], std::to_string(served["gw1"]));
  EXPECT_EQ(stats["gw2"]["scur"], std::to_string(served["gw2"]));

  // 127.0.0.4 is not in allow_from: the connection is closed unserved, though the balancer's own address is
  // allowed, and the gateway says who it refused.
  SourcedClient outsider("127.0.0.4", front_port_);
  std::string got;
  EXPECT_TRUE(outsider.closed_without_an_answer(20s, got)) << "127.0.0.4 got: " << got;
  const auto refused = fmt::format("refused a connection from {} via 127.0.0.1:", outsider.address());
  EXPECT_TRUE(eventually(
      [&] { return contains(gateways_[0].process->log(), refused) || contains(gateways_[1].process->log(), refused); },
      10s))
      << "no gateway logged: " << refused;
  for (auto& g : gateways_) EXPECT_FALSE(contains(g.process->log(), connected_marker(outsider))) << g.name;

  // The sessions still work after the refusal, and end cleanly.
  for (auto& s : sessions) {
    auto echo = s.client->run_keyword(s.token, "Echo", json::array{"after"});
    ASSERT_TRUE(echo.ok() && !echo.keyword_error()) << s.client->address() << ": " << describe(echo);
    s.client->exit();
  }
}

// SIGTERM to one gateway behind the balancer: its running keywords finish and are answered, /readyz turns 503 and
// HAProxy marks it down, new sessions all go to the other gateway and work, and it exits 0 once its sessions end.
TEST_F(HaProxyTest, DrainingGatewayLeavesRotationAndFinishesItsSessions) {
  ASSERT_NO_FATAL_FAILURE(start_cluster("60s"));
  const std::vector<std::string> sources = {"127.0.0.2", "127.0.0.3"};
  std::vector<Session> before;
  for (int i = 0; i < 4; ++i) before.push_back(open_session(sources[i % 2]));
  std::vector<Session*> on_gw1, on_gw2;
  for (auto& s : before) (s.gateway == "gw1" ? on_gw1 : on_gw2).push_back(&s);
  ASSERT_FALSE(on_gw1.empty()) << "leastconn sent none of 4 sessions to gw1";
  ASSERT_FALSE(on_gw2.empty()) << "leastconn sent none of 4 sessions to gw2";
  auto& gw1 = gateway("gw1");
  auto& gw2 = gateway("gw2");

  // Long keywords on gw1's sessions, in flight when the drain begins.
  std::vector<json::value> sleeping;
  for (auto* s : on_gw1) sleeping.push_back(s->client->run_keyword_request(s->token, "Sleep", json::array{2}));
  std::this_thread::sleep_for(200ms);  // let the calls reach the workers; nothing depends on it
  gw1.process->signal(SIGTERM);

  // gw1's /readyz says 503; HAProxy's checks see that and take it out of rotation.
  EXPECT_TRUE(eventually([&] { return http_status(gw1.admin_port, "/readyz") == 503; }, 20s))
      << "gw1's /readyz did not turn 503 after SIGTERM";
  ServerStats stats;
  ASSERT_TRUE(eventually(
      [&] {
        stats = haproxy_stats();
        return stats["gw1"]["status"].starts_with("DOWN");
      },
      20s))
      << "HAProxy did not mark gw1 down: " << stats["gw1"]["status"] << " " << stats["gw1"]["check_status"];
  EXPECT_EQ(stats["gw1"]["check_status"], "L7STS") << "gw1 went down for another reason than its /readyz";
  EXPECT_EQ(stats["gw1"]["check_code"], "503");
  EXPECT_EQ(stats["gw2"]["status"], "UP");

  // New sessions all go to gw2, and work.
  std::vector<Session> after;
  for (int i = 0; i < 6; ++i) {
    after.push_back(open_session(sources[i % 2]));
    auto& s = after.back();
    EXPECT_EQ(s.gateway, "gw2") << s.client->address() << " went to the draining gateway";
    auto logged = s.client->run_keyword(s.token, "Log Messages", json::array{2});
    ASSERT_TRUE(logged.ok() && !logged.keyword_error()) << s.client->address() << ": " << describe(logged);
    EXPECT_TRUE(eventually([&] { return contains(gw2.process->log(), connected_marker(*s.client)); }, 10s))
        << "gw2's log does not name " << connected_marker(*s.client);
  }

  // The keywords that were running on gw1 are answered, as they would have been without the drain.
  for (std::size_t i = 0; i < on_gw1.size(); ++i) {
    auto reply = on_gw1[i]->client->wait_reply(sleeping[i], 30s);
    ASSERT_TRUE(reply.ok() && !reply.keyword_error()) << on_gw1[i]->client->address() << ": " << describe(reply);
    const auto slept = keyword_value(reply);
    EXPECT_TRUE(slept.is_number() && slept.to_number<double>() == 2.0) << describe(reply);
  }
  // gw1's sessions go on working through the drain, and gw1 waits for them.
  for (auto* s : on_gw1) {
    auto echo = s->client->run_keyword(s->token, "Echo", json::array{"during the drain"});
    ASSERT_TRUE(echo.ok() && !echo.keyword_error()) << s->client->address() << ": " << describe(echo);
  }
  EXPECT_TRUE(gw1.process->running()) << "gw1 exited while its sessions were open";

  // Its sessions end: gw1 exits 0, without having waited for its drain_timeout.
  for (auto* s : on_gw1) {
    s->client->exit();
    s->client->close();
  }
  auto status = gw1.process->wait(30s);
  ASSERT_TRUE(status.has_value()) << "gw1 did not exit once its sessions ended";
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << "gw1 ended with " << describe_status(*status);
  const auto log1 = gw1.process->log();
  EXPECT_TRUE(contains(log1, "draining: no new connections")) << "gw1 did not log its drain";
  EXPECT_FALSE(contains(log1, "after drain_timeout")) << "gw1 closed sessions at its drain_timeout";

  // gw2 serves on, its sessions from before and after alike.
  for (auto* s : on_gw2) {
    auto echo = s->client->run_keyword(s->token, "Echo", json::array{"after gw1 left"});
    ASSERT_TRUE(echo.ok() && !echo.keyword_error()) << s->client->address() << ": " << describe(echo);
  }
  for (auto& s : after) {
    auto echo = s.client->run_keyword(s.token, "Echo", json::array{"after gw1 left"});
    ASSERT_TRUE(echo.ok() && !echo.keyword_error()) << s.client->address() << ": " << describe(echo);
  }
  auto late = open_session("127.0.0.3");
  EXPECT_EQ(late.gateway, "gw2");
  for (auto* s : on_gw2) s->client->exit();
  for (auto& s : after) s.client->exit();
  late.client->exit();
}

}  // namespace
}  // namespace rjg::test
