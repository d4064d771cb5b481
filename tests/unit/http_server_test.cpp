// The admin HTTP server over real loopback sockets: the server runs on an io_context in a thread of its
// own, the test speaks HTTP through blocking POSIX sockets (every read bounded: 10 s). Pages, HEAD, the
// query string, 404/405/500, the size limit (413, then closed), malformed requests (400, then closed),
// keep-alive and its limit, HTTP/1.0, allow_from (closed without a word), the request and header timeouts,
// the limits on connections (at once and per address), the room kept for health probes, and stop().
#include "gateway/fronts/http_server.hpp"

#include "config/network.hpp"

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ip/v6_only.hpp>
#include <boost/asio/post.hpp>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <chrono>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace {

using namespace rjg;
using namespace std::chrono_literals;
using rjg::gateway::fronts::HttpLimits;
using rjg::gateway::fronts::HttpServer;
using rjg::gateway::fronts::HttpResponse;
namespace asio = boost::asio;
using tcp = asio::ip::tcp;

constexpr auto kBound = 10s;  // every wait in this file ends by then

// A blocking client socket: connected to 127.0.0.1:port (or -1), every read and write bounded by kBound.
// `source`: the client's own address, another loopback one ("127.0.0.2") to be another client (Linux routes
// all of 127.0.0.0/8 to the loopback interface).
class Client {
 public:
  explicit Client(unsigned short port, const char* source = nullptr) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) throw std::runtime_error("socket failed");
    timeval tv{static_cast<time_t>(kBound.count()), 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (source) {
      sockaddr_in own{};
      own.sin_family = AF_INET;
      if (::inet_pton(AF_INET, source, &own.sin_addr) != 1 ||
          ::bind(fd_, reinterpret_cast<sockaddr*>(&own), sizeof own) != 0)
        throw std::runtime_error(fmt::format("cannot bind a client socket to {}: {}", source, std::strerror(errno)));
    }
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(port);
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
      connect_errno_ = errno;
      ::close(fd_);
      fd_ = -1;
    }
  }
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;
  ~Client() { close(); }

  bool connected() const { return fd_ >= 0; }
  int connect_errno() const { return connect_errno_; }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  void send(std::string_view bytes) {
    while (!bytes.empty()) {
      const ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n <= 0) throw std::runtime_error("send failed: " + std::string(std::strerror(errno)));
      bytes.remove_prefix(static_cast<std::size_t>(n));
    }
  }

  // How reading ended.
  enum class End { open, eof, reset, timeout };

  // Reads once into pending; false at the end (end_ says which).
  bool read_more() {
    char chunk[4096];
    const ssize_t n = ::recv(fd_, chunk, sizeof chunk, 0);
    if (n > 0) {
      pending_.append(chunk, static_cast<std::size_t>(n));
      return true;
    }
    if (n == 0) end_ = End::eof;
    else if (errno == EAGAIN || errno == EWOULDBLOCK) end_ = End::timeout;
    else end_ = End::reset;
    return false;
  }

  // Everything until the server closes (or kBound passes: End::timeout).
  std::string read_to_end() {
    while (read_more()) {
    }
    return std::exchange(pending_, {});
  }
  End end() const { return end_; }

  struct Response {
    std::string status_line;
    unsigned status = 0;
    std::multimap<std::string, std::string> headers;  // names in lower case
    std::string body;

    // The value of a header sent exactly once; "<none>" or "<N times>" otherwise.
    std::string header(const std::string& name) const {
      const auto n = headers.count(name);
      if (n != 1) return n == 0 ? "<none>" : "<" + std::to_string(n) + " times>";
      return headers.find(name)->second;
    }
  };

  // One response: its headers, and Content-Length bytes of body unless it answers HEAD. Nullopt when the
  // connection ended first.
  std::optional<Response> read_response(bool head = false) {
    std::size_t end_of_headers;
    while ((end_of_headers = pending_.find("\r\n\r\n")) == std::string::npos)
      if (!read_more()) return std::nullopt;
    Response r;
    const std::string headers = pending_.substr(0, end_of_headers);
    pending_.erase(0, end_of_headers + 4);
    std::size_t line_end = headers.find("\r\n");
    r.status_line = headers.substr(0, line_end);
    if (r.status_line.size() < 12) return std::nullopt;
    r.status = static_cast<unsigned>(std::stoul(r.status_line.substr(9, 3)));
    while (line_end != std::string::npos) {
      const auto from = line_end + 2;
      line_end = headers.find("\r\n", from);
      const auto line = headers.substr(from, line_end == std::string::npos ? std::string::npos : line_end - from);
      const auto colon = line.find(':');
      if (colon == std::string::npos) continue;
      std::string name = line.substr(0, colon);
      std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
      auto value = line.substr(colon + 1);
      value.erase(0, value.find_first_not_of(' '));
      r.headers.emplace(std::move(name), std::move(value));
    }
    if (head) return r;
    const auto length = r.header("content-length");
    const std::size_t size = length.front() == '<' ? 0 : std::stoul(length);
    while (pending_.size() < size)
      if (!read_more()) return std::nullopt;
    r.body = pending_.substr(0, size);
    pending_.erase(0, size);
    return r;
  }

  // Bytes received and not yet taken by read_response.
  const std::string& pending() const { return pending_; }

  // Without waiting: whether the server has ended the connection (an end of stream or a reset).
  bool closed_by_server() const {
    char byte;
    const ssize_t n = ::recv(fd_, &byte, 1, MSG_DONTWAIT | MSG_PEEK);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
  }

 private:
  int fd_ = -1;
  int connect_errno_ = 0;
  std::string pending_;
  End end_ = End::open;
};

std::string get(std::string_view target, std::string_view version = "HTTP/1.1", std::string_view method = "GET") {
  return fmt::format("{} {} {}\r\nHost: admin\r\nUser-Agent: admin_http_test\r\n\r\n", method, target, version);
}

config::Network network(std::string_view text) {
  auto net = config::parse_network(text);
  if (!net) throw std::runtime_error("bad network in the test: " + std::string(text));
  return *net;
}

class AdminHttp : public ::testing::Test {
 protected:
  // Starts a server on 127.0.0.1 (a free port) and the loop's thread.
  void start(HttpLimits limits = {}, std::vector<config::Network> allow_from = {}) {
    server_.emplace(io_, [this](std::string_view path) { return page(path); }, std::move(allow_from), limits);
    auto acceptor = std::make_shared<tcp::acceptor>(io_, tcp::endpoint(asio::ip::address_v4::loopback(), 0));
    port_ = acceptor->local_endpoint().port();
    server_->serve(acceptor, "tcp://127.0.0.1:0");
    thread_ = std::thread([this] { io_.run(); });
  }

  // Runs f on the loop's thread and returns what it returns (bounded: kBound).
  template <typename F>
  auto on_loop(F f) {
    std::packaged_task<decltype(f())()> task(std::move(f));
    auto result = task.get_future();
    asio::post(io_, std::move(task));
    if (result.wait_for(kBound) != std::future_status::ready) throw std::runtime_error("the loop did not answer");
    return result.get();
  }

  void TearDown() override {
    if (!thread_.joinable()) return;
    on_loop([this] { server_.reset(); });
    work_.reset();
    io_.stop();
    thread_.join();
  }

  // Waits (bounded) until the server has `n` connections open; false if it never does.
  bool wait_for_connections(std::size_t n) {
    const auto deadline = std::chrono::steady_clock::now() + kBound;
    while (std::chrono::steady_clock::now() < deadline) {
      if (on_loop([this] { return server_->connections(); }) == n) return true;
      std::this_thread::sleep_for(5ms);
    }
    return false;
  }

  std::vector<std::string> paths_seen() {
    return on_loop([this] { return paths_; });
  }

  // The pages of this test; runs on the loop.
  std::optional<HttpResponse> page(std::string_view path) {
    paths_.emplace_back(path);
    if (path == "/livez") return HttpResponse{200, "text/plain; charset=utf-8", "ok\n"};
    if (path == "/metrics")
      return HttpResponse{200, "text/plain; version=0.0.4; charset=utf-8", "rjg_sessions 3\nrjg_workers 5\n"};
    if (path == "/readyz") return HttpResponse{503, "application/json", "{\"ready\":false}"};
    if (path == "/boom") throw std::runtime_error("the page broke");
    return std::nullopt;
  }

  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_ = asio::make_work_guard(io_);
  std::optional<HttpServer> server_;
  std::thread thread_;
  unsigned short port_ = 0;
  std::vector<std::string> paths_;  // on the loop
};

// The headers every answer has.
void expect_common_headers(const Client::Response& r) {
  EXPECT_EQ(r.header("server"), "robot-jsonrpc-gateway");
  EXPECT_EQ(r.header("cache-control"), "no-store");
  EXPECT_EQ(r.header("content-length"), std::to_string(r.body.size()));
}

TEST_F(AdminHttp, GetAnswersWithThePage) {
  start();
  Client c(port_);
  ASSERT_TRUE(c.connected());
  c.send(get("/livez"));
  auto r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status_line, "HTTP/1.1 200 OK");
  EXPECT_EQ(r->body, "ok\n");
  EXPECT_EQ(r->header("content-type"), "text/plain; charset=utf-8");
  EXPECT_EQ(r->header("connection"), "<none>");  // HTTP/1.1 keeps the connection
  expect_common_headers(*r);
}

TEST_F(AdminHttp, StatusAndContentTypeComeFromTheHandler) {
  start();
  Client c(port_);
  c.send(get("/readyz"));
  auto r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status_line, "HTTP/1.1 503 Service Unavailable");
  EXPECT_EQ(r->header("content-type"), "application/json");
  EXPECT_EQ(r->body, "{\"ready\":false}");
  expect_common_headers(*r);
}

TEST_F(AdminHttp, HeadSendsTheHeadersOfGetWithoutTheBody) {
  start();
  Client c(port_);
  c.send(get("/metrics", "HTTP/1.1", "HEAD"));
  auto head = c.read_response(/*head=*/true);
  ASSERT_TRUE(head);
  EXPECT_EQ(head->status, 200u);
  EXPECT_EQ(head->header("content-length"), std::to_string(std::string("rjg_sessions 3\nrjg_workers 5\n").size()));
  EXPECT_EQ(head->header("content-type"), "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_EQ(head->header("server"), "robot-jsonrpc-gateway");
  EXPECT_EQ(head->header("cache-control"), "no-store");
  // No body followed: the next bytes on the connection are the next answer's status line.
  c.send(get("/livez"));
  auto next = c.read_response();
  ASSERT_TRUE(next) << "pending: " << c.pending();
  EXPECT_EQ(next->status_line, "HTTP/1.1 200 OK");
  EXPECT_EQ(next->body, "ok\n");
}

TEST_F(AdminHttp, TheQueryStringIsCutOff) {
  start();
  Client c(port_);
  c.send(get("/metrics?x=1&name[]=%2F"));
  auto r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200u);
  EXPECT_EQ(r->body, "rjg_sessions 3\nrjg_workers 5\n");
  EXPECT_EQ(paths_seen(), std::vector<std::string>{"/metrics"});
}

TEST_F(AdminHttp, AnUnknownPathIs404NamingIt) {
  start();
  Client c(port_);
  c.send(get("/nope?q=1"));
  auto r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status_line, "HTTP/1.1 404 Not Found");
  EXPECT_EQ(r->header("content-type"), "text/plain; charset=utf-8");
  EXPECT_NE(r->body.find("/nope"), std::string::npos) << r->body;
  EXPECT_EQ(r->body.find("q=1"), std::string::npos) << r->body;
  expect_common_headers(*r);
}

TEST_F(AdminHttp, A404EscapesAndBoundsThePath) {
  start();
  Client c(port_);
  c.send(get("/caf\xc3\xa9"));
  auto r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404u);
  EXPECT_NE(r->body.find("/caf\\xc3\\xa9"), std::string::npos) << r->body;
  EXPECT_TRUE(std::all_of(r->body.begin(), r->body.end(),
                          [](char ch) { return ch == '\n' || (ch >= 0x20 && ch < 0x7f); }))
      << r->body;
  const std::string long_path = "/" + std::string(299, 'p');
  c.send(get(long_path));
  auto l = c.read_response();
  ASSERT_TRUE(l);
  EXPECT_EQ(l->status, 404u);
  EXPECT_EQ(l->body.find(long_path), std::string::npos) << "the whole 300-byte path was echoed";
  EXPECT_NE(l->body.find(std::string(199, 'p')), std::string::npos) << l->body;
  EXPECT_LT(l->body.size(), 300u) << l->body;
}

TEST_F(AdminHttp, OtherMethodsAre405WithAllow) {
  start();
  Client c(port_);
  // A body with it, then a GET on the same connection: the body was read past, not taken for a request.
  c.send("POST /livez HTTP/1.1\r\nHost: admin\r\nContent-Length: 5\r\n\r\nhello" + get("/livez"));
  auto r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status_line, "HTTP/1.1 405 Method Not Allowed");
  EXPECT_EQ(r->header("allow"), "GET, HEAD");
  EXPECT_EQ(r->header("content-type"), "text/plain; charset=utf-8");
  EXPECT_NE(r->body.find("POST"), std::string::npos) << r->body;
  expect_common_headers(*r);
  auto next = c.read_response();
  ASSERT_TRUE(next);
  EXPECT_EQ(next->status, 200u);
  EXPECT_EQ(next->body, "ok\n");
  // The handler never saw the POST.
  EXPECT_EQ(paths_seen(), std::vector<std::string>{"/livez"});
}

TEST_F(AdminHttp, UnknownMethodsAre405Too) {
  start();
  Client c(port_);
  c.send(get("/livez", "HTTP/1.1", "BREW"));
  auto r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 405u);
  EXPECT_EQ(r->header("allow"), "GET, HEAD");
}

// Implemented behaviour: 413 with Connection: close, then the server closes (after reading and dropping
// what the client still sends, so that the answer is not lost to a reset).
TEST_F(AdminHttp, AnOversizedHeaderIs413ThenClosed) {
  start();
  Client c(port_);
  c.send("GET /livez HTTP/1.1\r\nHost: admin\r\nX-Big: " + std::string(20 * 1024, 'a') + "\r\n\r\n");
  auto r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status_line, "HTTP/1.1 413 Payload Too Large");
  EXPECT_EQ(r->header("connection"), "close");
  EXPECT_NE(r->body.find("8192"), std::string::npos) << r->body;
  expect_common_headers(*r);
  EXPECT_EQ(c.read_to_end(), "");
  EXPECT_EQ(c.end(), Client::End::eof);
  EXPECT_TRUE(paths_seen().empty());
}

// The limit is the whole request: line and headers, and the body.
TEST_F(AdminHttp, TheSizeLimitCoversTheWholeRequest) {
  HttpLimits limits;
  limits.max_request_bytes = 1024;
  start(limits);
  auto padded = [](std::size_t size, std::string_view extra_headers) {
    std::string head = fmt::format("GET /livez HTTP/1.1\r\nHost: admin\r\n{}X-Pad: ", extra_headers);
    return head + std::string(size - head.size() - 4, 'p') + "\r\n\r\n";
  };
  {
    Client c(port_);
    const auto request = padded(1024, "");
    ASSERT_EQ(request.size(), 1024u);
    c.send(request);
    auto r = c.read_response();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200u) << "a request of exactly max_request_bytes was refused";
  }
  {
    Client c(port_);
    c.send(padded(1025, ""));
    auto r = c.read_response();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 413u);
    EXPECT_EQ(r->header("connection"), "close");
  }
  // Headers and body together: 1000 bytes of header leave 24 for the body.
  const auto body_header = [&](std::size_t body) {
    return padded(1000, fmt::format("Content-Length: {:04}\r\n", body));
  };
  {
    Client c(port_);
    c.send(body_header(24) + std::string(24, 'b'));
    auto r = c.read_response();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200u) << "header and body of exactly max_request_bytes were refused";
  }
  {
    Client c(port_);
    c.send(body_header(25));  // refused on its Content-Length alone: the body is never sent
    auto r = c.read_response();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 413u);
    EXPECT_EQ(r->header("connection"), "close");
  }
  {
    // A chunked body has no length up front: it is counted as it comes.
    Client c(port_);
    c.send("GET /livez HTTP/1.1\r\nHost: admin\r\nTransfer-Encoding: chunked\r\n\r\n400\r\n" + std::string(1024, 'c') +
           "\r\n0\r\n\r\n");
    auto r = c.read_response();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 413u);
  }
}

TEST_F(AdminHttp, GarbageIs400ThenClosed) {
  start();
  Client c(port_);
  // The start of a TLS ClientHello: someone speaking https:// to the admin port.
  c.send(std::string("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 11));
  auto r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status_line, "HTTP/1.1 400 Bad Request");
  EXPECT_EQ(r->header("connection"), "close");
  expect_common_headers(*r);
  EXPECT_EQ(c.read_to_end(), "");
  EXPECT_EQ(c.end(), Client::End::eof);
}

TEST_F(AdminHttp, AMalformedHeaderIs400) {
  start();
  Client c(port_);
  c.send("GET /livez HTTP/1.1\r\nHost: admin\r\nthis is no header\r\n\r\n");
  auto r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400u);
  EXPECT_EQ(r->header("connection"), "close");
  EXPECT_TRUE(paths_seen().empty());
}

TEST_F(AdminHttp, KeepAliveAnswersEveryRequestOnOneConnection) {
  start();
  Client c(port_);
  c.send(get("/livez"));
  auto first = c.read_response();
  ASSERT_TRUE(first);
  EXPECT_EQ(first->body, "ok\n");
  c.send(get("/metrics"));
  auto second = c.read_response();
  ASSERT_TRUE(second);
  EXPECT_EQ(second->status, 200u);
  EXPECT_EQ(second->body, "rjg_sessions 3\nrjg_workers 5\n");
  // Pipelined: both in one write, both answered in order.
  c.send(get("/metrics") + get("/livez"));
  auto third = c.read_response();
  auto fourth = c.read_response();
  ASSERT_TRUE(third && fourth);
  EXPECT_EQ(third->body, "rjg_sessions 3\nrjg_workers 5\n");
  EXPECT_EQ(fourth->body, "ok\n");
  EXPECT_EQ(on_loop([this] { return server_->connections(); }), 1u);
}

TEST_F(AdminHttp, TheLastRequestAllowedOnAConnectionIsAnsweredWithClose) {
  HttpLimits limits;
  limits.max_requests_per_connection = 2;
  start(limits);
  Client c(port_);
  c.send(get("/livez") + get("/livez") + get("/livez"));
  auto first = c.read_response();
  auto second = c.read_response();
  ASSERT_TRUE(first && second);
  EXPECT_EQ(first->header("connection"), "<none>");
  EXPECT_EQ(second->header("connection"), "close");
  EXPECT_EQ(c.read_to_end(), "");
  EXPECT_NE(c.end(), Client::End::timeout);
  EXPECT_EQ(paths_seen().size(), 2u);
}

TEST_F(AdminHttp, Http10ClosesUnlessAskedToKeepAlive) {
  start();
  {
    Client c(port_);
    c.send("GET /livez HTTP/1.0\r\n\r\n");
    auto r = c.read_response();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status_line, "HTTP/1.0 200 OK");
    EXPECT_EQ(r->header("connection"), "close");
    EXPECT_EQ(r->body, "ok\n");
    EXPECT_EQ(c.read_to_end(), "");
    EXPECT_EQ(c.end(), Client::End::eof);
  }
  {
    Client c(port_);
    c.send("GET /livez HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    auto r = c.read_response();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status_line, "HTTP/1.0 200 OK");
    EXPECT_EQ(r->header("connection"), "keep-alive");
    c.send("GET /metrics HTTP/1.0\r\n\r\n");
    auto second = c.read_response();
    ASSERT_TRUE(second);
    EXPECT_EQ(second->status, 200u);
    EXPECT_EQ(second->header("connection"), "close");
  }
}

TEST_F(AdminHttp, Http11ConnectionCloseIsHonoured) {
  start();
  Client c(port_);
  c.send("GET /livez HTTP/1.1\r\nHost: admin\r\nConnection: close\r\n\r\n");
  auto r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200u);
  EXPECT_EQ(r->header("connection"), "close");
  EXPECT_EQ(c.read_to_end(), "");
  EXPECT_EQ(c.end(), Client::End::eof);
}

TEST_F(AdminHttp, AHandlerThatThrowsIs500WithItsText) {
  start();
  Client c(port_);
  c.send(get("/boom"));
  auto r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status_line, "HTTP/1.1 500 Internal Server Error");
  EXPECT_EQ(r->header("content-type"), "text/plain; charset=utf-8");
  EXPECT_NE(r->body.find("the page broke"), std::string::npos) << r->body;
  expect_common_headers(*r);
  // The connection, and the server, go on.
  c.send(get("/livez"));
  auto next = c.read_response();
  ASSERT_TRUE(next);
  EXPECT_EQ(next->status, 200u);
  Client other(port_);
  other.send(get("/livez"));
  auto fresh = other.read_response();
  ASSERT_TRUE(fresh);
  EXPECT_EQ(fresh->status, 200u);
}

TEST_F(AdminHttp, APeerNotInAllowFromIsClosedWithoutAWord) {
  start({}, {network("10.0.0.0/8"), network("::1/128")});
  {
    Client c(port_);
    ASSERT_TRUE(c.connected());
    EXPECT_EQ(c.read_to_end(), "");
    EXPECT_EQ(c.end(), Client::End::eof);
  }
  {
    Client c(port_);
    c.send(get("/livez"));
    EXPECT_EQ(c.read_to_end(), "");
    // Closed with the request unread: an end of stream or a reset, never an answer and never a wait.
    EXPECT_NE(c.end(), Client::End::timeout);
  }
  EXPECT_TRUE(paths_seen().empty());
  EXPECT_EQ(on_loop([this] { return server_->connections(); }), 0u);
  // A reload that lets loopback in applies to the next connection.
  on_loop([this] { server_->set_allow_from({network("127.0.0.0/8")}); });
  Client c(port_);
  c.send(get("/livez"));
  auto r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200u);
}

// A dual-stack listener sees 127.0.0.1 as ::ffff:127.0.0.1, which an IPv4 network contains.
TEST_F(AdminHttp, AnIpv4MappedPeerCountsAsIpv4) {
  auto acceptor = std::make_shared<tcp::acceptor>(io_);
  boost::system::error_code ec;
  acceptor->open(tcp::v6(), ec);
  if (!ec) acceptor->set_option(asio::ip::v6_only(false), ec);
  if (!ec) acceptor->bind(tcp::endpoint(asio::ip::address_v6::any(), 0), ec);
  if (!ec) acceptor->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) GTEST_SKIP() << "no dual-stack IPv6 socket here: " << ec.message();
  start({}, {network("127.0.0.0/8")});
  const auto port = acceptor->local_endpoint().port();
  on_loop([&] { server_->serve(acceptor, "tcp://[::]:0"); });
  Client c(port);
  ASSERT_TRUE(c.connected());
  c.send(get("/livez"));
  auto r = c.read_response();
  ASSERT_TRUE(r) << "the mapped address was refused";
  EXPECT_EQ(r->status, 200u);
}

TEST_F(AdminHttp, HalfARequestIsClosedAfterTheTimeout) {
  HttpLimits limits;
  limits.request_timeout = 200ms;
  start(limits);
  Client c(port_);
  c.send("GET /livez HTTP/1.1\r\nHost: adm");
  EXPECT_EQ(c.read_to_end(), "");
  EXPECT_EQ(c.end(), Client::End::eof) << "not closed within " << kBound.count() << " s";
  // An idle keep-alive connection waits as long for its next request.
  Client idle(port_);
  idle.send(get("/livez"));
  auto r = idle.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200u);
  EXPECT_EQ(idle.read_to_end(), "");
  EXPECT_EQ(idle.end(), Client::End::eof);
  EXPECT_TRUE(wait_for_connections(0));
}

TEST_F(AdminHttp, ConnectionsOverTheLimitAreClosedAtAccept) {
  HttpLimits limits;
  limits.max_connections = 2;
  start(limits);
  auto a = std::make_unique<Client>(port_);
  Client b(port_);
  ASSERT_TRUE(a->connected() && b.connected());
  ASSERT_TRUE(wait_for_connections(2));
  {
    Client third(port_);
    ASSERT_TRUE(third.connected());  // the kernel completes the handshake; the server closes it
    EXPECT_EQ(third.read_to_end(), "");
    EXPECT_EQ(third.end(), Client::End::eof);
  }
  EXPECT_EQ(on_loop([this] { return server_->connections(); }), 2u);
  // Once one of the two ends, there is room again.
  a.reset();
  ASSERT_TRUE(wait_for_connections(1));
  Client fourth(port_);
  fourth.send(get("/livez"));
  auto r = fourth.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200u);
  // The idle one was never disturbed.
  b.send(get("/livez"));
  auto rb = b.read_response();
  ASSERT_TRUE(rb);
  EXPECT_EQ(rb->status, 200u);
}

TEST_F(AdminHttp, StopClosesTheListenerAndEveryConnection) {
  start();
  Client idle(port_);
  Client used(port_);
  used.send(get("/livez"));
  ASSERT_TRUE(used.read_response());
  ASSERT_TRUE(wait_for_connections(2));
  on_loop([this] { server_->stop(); });
  EXPECT_EQ(on_loop([this] { return server_->connections(); }), 0u);
  EXPECT_EQ(idle.read_to_end(), "");
  EXPECT_EQ(idle.end(), Client::End::eof);
  EXPECT_EQ(used.read_to_end(), "");
  EXPECT_EQ(used.end(), Client::End::eof);
  Client late(port_);
  EXPECT_FALSE(late.connected());
  EXPECT_EQ(late.connect_errno(), ECONNREFUSED);
}

TEST_F(AdminHttp, DestroyingTheServerClosesEverything) {
  start();
  Client idle(port_);
  ASSERT_TRUE(wait_for_connections(1));
  on_loop([this] { server_.reset(); });
  EXPECT_EQ(idle.read_to_end(), "");
  EXPECT_EQ(idle.end(), Client::End::eof);
  Client late(port_);
  EXPECT_FALSE(late.connected());
}

// ---- What keeps a health probe answered whatever other clients do ----

// The start of a request that is never finished: what a slowloris client holds connections with.
constexpr std::string_view kHalfARequest = "GET /livez HTTP/1.1\r\nHost: adm";

// One address holds at most max_connections_per_client connections; another is served meanwhile, and the
// first gets room again once one of its own ends.
TEST_F(AdminHttp, OneAddressHoldsAtMostMaxConnectionsPerClient) {
  HttpLimits limits;
  limits.max_connections_per_client = 2;
  start(limits);
  auto a = std::make_unique<Client>(port_);
  Client b(port_);
  a->send(kHalfARequest);
  b.send(kHalfARequest);
  ASSERT_TRUE(wait_for_connections(2));
  {
    Client third(port_);
    ASSERT_TRUE(third.connected());  // the kernel completes the handshake; the server closes it
    EXPECT_EQ(third.read_to_end(), "");
    EXPECT_EQ(third.end(), Client::End::eof);
  }
  Client other(port_, "127.0.0.2");
  other.send(get("/livez"));
  auto r = other.read_response();
  ASSERT_TRUE(r) << "another address was refused";
  EXPECT_EQ(r->status, 200u);
  EXPECT_EQ(r->header("connection"), "<none>");  // an ordinary connection: kept alive
  a.reset();
  ASSERT_TRUE(wait_for_connections(2));
  Client again(port_);
  again.send(get("/livez"));
  auto ra = again.read_response();
  ASSERT_TRUE(ra) << "no room again for the address once one of its connections ended";
  EXPECT_EQ(ra->status, 200u);
}

// Through a dual-stack listener 127.0.0.1 is ::ffff:127.0.0.1: the same client as on an IPv4 listener.
TEST_F(AdminHttp, AnIpv4MappedPeerCountsAsItsIpv4AddressForThePerClientLimit) {
  auto dual = std::make_shared<tcp::acceptor>(io_);
  boost::system::error_code ec;
  dual->open(tcp::v6(), ec);
  if (!ec) dual->set_option(asio::ip::v6_only(false), ec);
  if (!ec) dual->bind(tcp::endpoint(asio::ip::address_v6::any(), 0), ec);
  if (!ec) dual->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) GTEST_SKIP() << "no dual-stack IPv6 socket here: " << ec.message();
  HttpLimits limits;
  limits.max_connections_per_client = 1;
  start(limits);
  const auto dual_port = dual->local_endpoint().port();
  on_loop([&] { server_->serve(dual, "tcp://[::]:0"); });
  Client v4(port_);
  v4.send(kHalfARequest);
  ASSERT_TRUE(wait_for_connections(1));
  {
    Client mapped(dual_port);
    ASSERT_TRUE(mapped.connected());
    EXPECT_EQ(mapped.read_to_end(), "") << "::ffff:127.0.0.1 was counted apart from 127.0.0.1";
    EXPECT_EQ(mapped.end(), Client::End::eof);
  }
  Client other(dual_port, "127.0.0.2");
  other.send(get("/livez"));
  auto r = other.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200u);
}

// The request line and headers must all be in within header_timeout, however the bytes trickle; the body,
// once they are, has request_timeout; and an idle keep-alive connection waits header_timeout.
TEST_F(AdminHttp, TheRequestLineAndHeadersMustArriveWithinTheHeaderTimeout) {
  HttpLimits limits;
  limits.header_timeout = 200ms;
  limits.request_timeout = 60s;  // beyond every wait of this test (kBound): only header_timeout can close
  start(limits);
  {
    Client c(port_);
    c.send(kHalfARequest);
    EXPECT_EQ(c.read_to_end(), "");
    EXPECT_EQ(c.end(), Client::End::eof) << "half a header was not closed within " << kBound.count() << " s";
  }
  {
    // A byte every 20 ms: each in time for a timer that restarted on every read, the whole never.
    Client c(port_);
    c.send("GET /livez HTTP/1.1\r\nHost: admin\r\nX-Slow: ");
    std::size_t sent = 0;
    for (; sent < 500; ++sent) {  // 500 x 20 ms: kBound
      std::this_thread::sleep_for(20ms);
      if (c.closed_by_server()) break;
      try {
        c.send("a");
      } catch (const std::runtime_error&) {
        break;  // closed between the look and the send
      }
    }
    EXPECT_LT(sent, 500u) << "a header trickled for " << kBound.count() << " s was still being read";
  }
  EXPECT_TRUE(paths_seen().empty());
  {
    Client c(port_);
    c.send("GET /livez HTTP/1.1\r\nHost: admin\r\nContent-Length: 4\r\n\r\n");
    std::this_thread::sleep_for(600ms);  // three header timeouts: the body is not a header
    c.send("body");
    auto r = c.read_response();
    ASSERT_TRUE(r) << "the body was held to header_timeout";
    EXPECT_EQ(r->status, 200u);
    EXPECT_EQ(r->header("connection"), "<none>");
    EXPECT_EQ(c.read_to_end(), "");
    EXPECT_EQ(c.end(), Client::End::eof) << "an idle keep-alive connection waited longer than header_timeout";
  }
}

// The finding, in small: one address holds every connection with half-sent requests and tries for
// more; a probe from another address is still answered, on room kept for probes, and nothing else is.
TEST_F(AdminHttp, ProbesGetThroughWhenOneAddressHoldsEveryConnection) {
  HttpLimits limits;
  limits.max_connections = 3;  // and no per-client limit: one address may take them all
  limits.probe_connections = 2;
  limits.probe_paths = {"/livez", "/readyz"};
  start(limits);
  std::vector<std::unique_ptr<Client>> held;
  for (std::size_t i = 1; i <= 4; ++i) {
    held.push_back(std::make_unique<Client>(port_));
    held.back()->send(kHalfARequest);
    ASSERT_TRUE(wait_for_connections(i));  // the fourth: one of the two kept for probes
  }
  for (int i = 0; i < 3; ++i) {
    Client more(port_);
    EXPECT_EQ(more.read_to_end(), "") << "the address got a second connection kept for probes";
    EXPECT_EQ(more.end(), Client::End::eof);
  }
  {
    Client probe(port_, "127.0.0.2");
    probe.send(get("/livez"));
    auto r = probe.read_response();
    ASSERT_TRUE(r) << "the probe was refused";
    EXPECT_EQ(r->status, 200u);
    EXPECT_EQ(r->body, "ok\n");
    EXPECT_EQ(r->header("connection"), "close");  // one request on room kept for probes
    expect_common_headers(*r);
    EXPECT_EQ(probe.read_to_end(), "");
    EXPECT_EQ(probe.end(), Client::End::eof);
  }
  ASSERT_TRUE(wait_for_connections(4));
  {
    // What the page says, as ever (here 503 with its JSON), and HEAD too.
    Client probe(port_, "127.0.0.2");
    probe.send(get("/readyz?verbose", "HTTP/1.1", "HEAD"));
    auto r = probe.read_response(/*head=*/true);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 503u);
    EXPECT_EQ(r->header("content-type"), "application/json");
    EXPECT_EQ(r->header("connection"), "close");
  }
  ASSERT_TRUE(wait_for_connections(4));
  {
    Client other(port_, "127.0.0.3");
    other.send(get("/metrics"));
    auto r = other.read_response();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status_line, "HTTP/1.1 503 Service Unavailable");
    EXPECT_EQ(r->header("connection"), "close");
    EXPECT_NE(r->body.find("3 connections are open"), std::string::npos) << r->body;
    EXPECT_NE(r->body.find("max_connections"), std::string::npos) << r->body;
    EXPECT_NE(r->body.find("/livez and /readyz"), std::string::npos) << r->body;
    expect_common_headers(*r);
  }
  EXPECT_EQ(paths_seen(), (std::vector<std::string>{"/livez", "/readyz"}));
  // Once the holder lets go, every page is served again, on ordinary connections.
  held.clear();
  ASSERT_TRUE(wait_for_connections(0));
  Client after(port_, "127.0.0.3");
  after.send(get("/metrics"));
  auto r = after.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200u);
  EXPECT_EQ(r->header("connection"), "<none>");
}

// Addresses enough to take the room kept for probes too: each newcomer closes the oldest of it, so a
// probe is answered as it comes, while the connection it replaced had its chance.
TEST_F(AdminHttp, WhenTheRoomKeptForProbesIsTakenItsOldestMakesWay) {
  HttpLimits limits;
  limits.max_connections = 1;
  limits.probe_connections = 2;
  limits.probe_paths = {"/livez"};
  start(limits);
  Client holder(port_);
  holder.send(kHalfARequest);
  ASSERT_TRUE(wait_for_connections(1));
  Client oldest(port_, "127.0.0.2");
  oldest.send(kHalfARequest);
  ASSERT_TRUE(wait_for_connections(2));
  Client newer(port_, "127.0.0.3");
  newer.send(kHalfARequest);
  ASSERT_TRUE(wait_for_connections(3));
  Client probe(port_, "127.0.0.4");
  probe.send(get("/livez"));
  auto r = probe.read_response();
  ASSERT_TRUE(r) << "the probe was refused";
  EXPECT_EQ(r->status, 200u);
  EXPECT_EQ(oldest.read_to_end(), "");
  EXPECT_NE(oldest.end(), Client::End::timeout) << "the oldest connection kept for probes was not closed";
  newer.send("in\r\n\r\n");  // Host: admin
  auto rn = newer.read_response();
  ASSERT_TRUE(rn) << "the newer connection kept for probes was closed too";
  EXPECT_EQ(rn->status, 200u);
  EXPECT_EQ(rn->header("connection"), "close");
  // The ordinary connection was never disturbed.
  holder.send("in\r\n\r\n");
  auto rh = holder.read_response();
  ASSERT_TRUE(rh);
  EXPECT_EQ(rh->status, 200u);
  EXPECT_EQ(rh->header("connection"), "<none>");
}

}  // namespace
