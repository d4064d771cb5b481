// Bounded memory, by configuration (issue 8): what one connection can make the gateway hold is
// counted and bounded by [gateway] settings, and doc/security.md's formula for it holds. Each case starts a
// fresh gateway, drives one hostile client, and compares the gateway's peak resident memory (VmHWM)
// with the formula computed from the settings the case uses. The exact behaviour is asserted too:
// which requests are refused and with what, and that write_timeout disconnects a client that does
// not read. Deadlines only bound waits; nothing here depends on how fast anything is.
#include "tests/integration/gateway_test.hpp"

#include "common/protocol/framing.hpp"

#include <fmt/format.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <thread>

namespace rjg::test {
namespace {

constexpr auto kBound = 60s;
constexpr std::uint64_t kKiB = 1024, kMiB = 1024 * 1024;

// A field of /proc/PID/status in bytes (VmHWM: the peak resident memory since the process started).
std::uint64_t proc_status_bytes(pid_t pid, std::string_view field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.starts_with(field) && line.size() > field.size() && line[field.size()] == ':')
      return std::stoull(line.substr(field.size() + 1)) * 1024;
  }
  return 0;
}

// The settings doc/security.md's formula takes, as a case configures them.
struct Settings {
  std::uint64_t max_message_bytes = 64 * kMiB;
  std::uint64_t max_header_bytes = 8 * kKiB;
  std::uint64_t max_pending_bytes = 16 * kMiB;
  std::uint64_t max_pending_requests = 64;
  std::uint64_t max_body_bytes = 8 * kMiB;  // [classic]
  std::string write_timeout = "30s";
  bool defaults = true;  // the [gateway] defaults, but for write_timeout

  std::string toml() const {
    std::string t = fmt::format("write_timeout = \"{}\"\n", write_timeout);
    if (!defaults)
      t += fmt::format("max_message_bytes = {}\nmax_header_bytes = {}\nmax_pending_bytes = {}\n"
                       "max_pending_requests = {}\n",
                       max_message_bytes, max_header_bytes, max_pending_bytes, max_pending_requests);
    return t;
  }
};

// doc/security.md's worst case (section "Bounded memory"), for `connections` client connections that each
// run at most C = `calls` keywords at once, served by `workers` workers. The write queue's high-water
// mark W is the gateway's fixed 4 MiB; E = 1: the test worker gets its strings as they are (no escaping).
std::uint64_t formula(const Settings& s, std::uint64_t connections, std::uint64_t calls, std::uint64_t workers) {
  const std::uint64_t H = s.max_header_bytes, M = s.max_message_bytes, B = s.max_pending_bytes, C = calls;
  const std::uint64_t W = 4 * kMiB, E = 1;
  const std::uint64_t reading = 2 * (H + M) + 3 * M + 64 * kKiB;
  const std::uint64_t pending = E * (std::max(B, M) + C * M);
  const std::uint64_t writing = W + (2 * C + 1) * (M + kKiB);
  const std::uint64_t per_worker = 2 * (H + M) + 2 * M + 64 * kKiB;
  return connections * (reading + pending + writing) + workers * per_worker;
}

// doc/security.md's worst case for one connection of the classic front (D = [classic] max_body_bytes), whose
// keyword's result has `values` values, served by `workers` workers.
std::uint64_t classic_formula(const Settings& s, std::uint64_t values, std::uint64_t workers) {
  const std::uint64_t H = s.max_header_bytes, M = s.max_message_bytes, D = s.max_body_bytes;
  const std::uint64_t reading = 12 * D;
  const std::uint64_t answering = 12 * M + 160 * values;
  const std::uint64_t per_worker = 2 * (H + M) + 2 * M + 64 * kKiB;
  return reading + answering + workers * per_worker;
}

// The issue's amplification body: run_keyword with an array of empty values, `bytes` long. Each <value/>
// is 8 bytes, so it has twice the values its size allows (one per 16 bytes).
std::string amplification_body(std::uint64_t bytes) {
  const std::string head = "<methodCall><methodName>run_keyword</methodName><params><param><value>Echo</value>"
                           "</param><param><value><array><data>";
  const std::string tail = "</data></array></value></param></params></methodCall>";
  std::string body = head;
  while (body.size() + 8 + tail.size() <= bytes) body += "<value/>";
  return body + tail;
}

// One POST to the classic front on a connection of its own, and the whole answer (it closes).
std::string classic_post(std::uint16_t port, const std::string& body, const std::string& path = "/TestLibrary") {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  timeval tv{60, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  std::string answer;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    const std::string request = fmt::format("POST {} HTTP/1.1\r\nHost: x\r\nContent-Type: text/xml\r\n"
                                            "Content-Length: {}\r\nConnection: close\r\n\r\n",
                                            path, body.size()) +
                                body;
    std::string_view left = request;
    while (!left.empty()) {
      const ssize_t n = ::send(fd, left.data(), left.size(), MSG_NOSIGNAL);
      if (n <= 0) break;
      left.remove_prefix(static_cast<std::size_t>(n));
    }
    char buf[4096];
    for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) answer.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return answer;
}

// A raw client socket that can send without ever reading. receive_buffer > 0 fixes the socket's
// receive buffer before connecting (loopback autotuning would otherwise let it grow to tcp_rmem's
// maximum, 32 MiB here, which a non-reading client's test would have to fill first).
class RawClient {
 public:
  explicit RawClient(std::uint16_t port, int receive_buffer = 0) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) throw std::runtime_error(fmt::format("socket: {}", std::strerror(errno)));
    if (receive_buffer > 0 &&
        ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &receive_buffer, sizeof receive_buffer) != 0)
      throw std::runtime_error(fmt::format("SO_RCVBUF: {}", std::strerror(errno)));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(port);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
      throw std::runtime_error(fmt::format("connect: {}", std::strerror(errno)));
  }
  ~RawClient() { ::close(fd_); }
  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;

  enum class Sent { all, closed, stuck };
  // Sends bytes without reading: `all` once written, `closed` when the gateway closed or reset the
  // connection, `stuck` when nothing more could be written until the deadline.
  Sent send(std::string_view bytes, Clock::time_point deadline) {
    while (!bytes.empty()) {
      ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        sent_ += static_cast<std::uint64_t>(n);
        bytes.remove_prefix(static_cast<std::size_t>(n));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        if (Clock::now() >= deadline) return Sent::stuck;
        pollfd p{fd_, POLLOUT, 0};
        ::poll(&p, 1, 100);
        continue;
      }
      return Sent::closed;
    }
    return Sent::all;
  }
  std::uint64_t sent() const { return sent_; }

  // Reads until what arrived so far contains `needle` followed by `terminator`; returns the text
  // between them, or nullopt at the deadline or when the peer closed first.
  std::optional<std::string> read_between(std::string_view needle, char terminator, Clock::time_point deadline) {
    char buf[4096];
    for (;;) {
      if (auto at = received_.find(needle); at != std::string::npos) {
        const auto from = at + needle.size();
        if (auto end = received_.find(terminator, from); end != std::string::npos)
          return received_.substr(from, end - from);
      }
      if (Clock::now() >= deadline) return std::nullopt;
      pollfd p{fd_, POLLIN, 0};
      ::poll(&p, 1, 100);
      ssize_t n = ::recv(fd_, buf, sizeof buf, MSG_DONTWAIT);
      if (n > 0) received_.append(buf, static_cast<std::size_t>(n));
      else if (n == 0) return std::nullopt;
      else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return std::nullopt;
    }
  }

  // Reads whatever arrived and whether the peer closed; never blocks.
  bool peer_closed() {
    char buf[64 * 1024];
    for (;;) {
      ssize_t n = ::recv(fd_, buf, sizeof buf, MSG_DONTWAIT);
      if (n > 0) continue;
      if (n == 0) return true;
      if (errno == EINTR) continue;
      return errno != EAGAIN && errno != EWOULDBLOCK;
    }
  }
  // The gateway's name for this client: "127.0.0.1:PORT", as its log lines say.
  std::string local_address() const {
    sockaddr_in addr{};
    socklen_t size = sizeof addr;
    if (::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &size) != 0)
      throw std::runtime_error(fmt::format("getsockname: {}", std::strerror(errno)));
    return fmt::format("127.0.0.1:{}", ntohs(addr.sin_port));
  }

 private:
  int fd_ = -1;
  std::uint64_t sent_ = 0;
  std::string received_;
};

std::string request_frame(std::string_view id_json, std::string_view method, std::string_view params_json) {
  return protocol::encode_frame(fmt::format(R"({{"jsonrpc":"2.0","id":{},"method":"{}","params":{}}})", id_json, method,
                                  params_json));
}

class MemoryTest : public GatewayTest, public ::testing::WithParamInterface<bool> {
 protected:
  // Tight settings make the formula a meaningful bound; the defaults show the measured peak is
  // well under 128 MiB.
  Settings settings() const {
    Settings s;
    s.write_timeout = "2s";
    if (!GetParam()) {
      s.defaults = false;
      s.max_message_bytes = 4 * kMiB;
      s.max_header_bytes = 8 * kKiB;
      s.max_pending_bytes = 16 * kMiB;
      s.max_pending_requests = 64;
    }
    return s;
  }

  void start_gateway(const Settings& s, bool classic = false) {
    GatewayOptions o;
    o.log_level = "info";
    o.extra_gateway_toml = s.toml();
    if (classic) {
      classic_port_ = free_port();
      o.extra_toml = fmt::format("[classic]\nlisten = [\"tcp://127.0.0.1:{}\"]\nmax_body_bytes = {}\n", classic_port_,
                                 s.max_body_bytes);
    }
    start({test_library("TestLibrary")}, o);
    if (classic) {
      ASSERT_TRUE(eventually([&] { return can_connect(classic_port_); }, kBound)) << gateway().log_tail();
    }
    baseline_ = proc_status_bytes(gateway().pid(), "VmRSS");
  }

  // bound: the formula's worst case; by default that of one JSON-RPC connection.
  void expect_peak_within(const Settings& s, std::uint64_t calls, std::uint64_t workers,
                          std::optional<std::uint64_t> formula_bound = std::nullopt) {
    const std::uint64_t peak = proc_status_bytes(gateway().pid(), "VmHWM");
    const std::uint64_t bound = formula_bound ? *formula_bound : formula(s, 1, calls, workers);
    ASSERT_GT(peak, 0u);
    if (const auto sanitizer = sanitizer_under_test(); !sanitizer.empty()) {
      // A sanitizer's allocator keeps what is freed (ASan's quarantine holds up to 256 MiB of freed blocks
      // so that a use after free is caught; TSan's allocator caches them) and adds its own per-block
      // memory: the peak would measure the sanitizer, not the formula. CI's ASan stage once went 300 KiB
      // over the tight bound this way. The behaviour is still checked here; the normal build compares
      // the peak.
      std::cerr << fmt::format("[ memory ] {}: baseline {} KiB, peak {} KiB (not compared under the {} sanitizer)\n",
                               s.defaults ? "defaults" : "tight settings", baseline_ / kKiB, peak / kKiB,
                               sanitizer);
      return;
    }
    EXPECT_LE(peak, baseline_ + bound) << "peak RSS " << peak / kKiB << " KiB; baseline " << baseline_ / kKiB
                                       << " KiB + formula " << bound / kKiB << " KiB";
    if (s.defaults) {
      // What the gateway took on top of what it had at start, not an absolute figure: the baseline
      // grows with the binary and the machine's libraries.
      EXPECT_LT(peak - std::min(peak, baseline_), 96 * kMiB)
          << "peak RSS " << peak / kKiB << " KiB with the defaults; baseline " << baseline_ / kKiB << " KiB";
    }
    std::cerr << fmt::format("[ memory ] {}: baseline {} KiB, peak {} KiB, formula allows {} KiB more\n",
                             s.defaults ? "defaults" : "tight settings", baseline_ / kKiB, peak / kKiB, bound / kKiB);
  }

  std::uint64_t baseline_ = 0;
  std::uint16_t classic_port_ = 0;
};

// The classic front's amplification body (issue 22): 8 MB of 1,000,000 empty values. The whole document
// used to be built into a tree first, about 100 bytes an element: 5 -> 213 MB for one such request.
// Parsed straight into values, at most one per 16 bytes, it is refused at the 500,011th with a fault
// naming the limits, and the peak stays within doc/security.md's formula for a classic connection.
TEST_P(MemoryTest, ClassicAmplificationBodyIsRefusedWithinTheFormula) {
  Settings s = settings();
  if (!s.defaults) s.max_body_bytes = kMiB;
  start_gateway(s, /*classic=*/true);
  const std::string body = amplification_body(s.max_body_bytes - 1024);  // room for the headers
  for (int i = 0; i < 4; ++i) {
    const std::string answer = classic_post(classic_port_, body);
    ASSERT_NE(answer.find("HTTP/1.1 200"), std::string::npos) << answer.substr(0, 300);
    EXPECT_NE(answer.find("<fault>"), std::string::npos) << answer.substr(0, 1000);
    EXPECT_NE(answer.find("more values than the limit: at most one value per 16 bytes of the document"),
              std::string::npos)
        << answer.substr(0, 1000);
    EXPECT_NE(answer.find(fmt::format("[classic] max_body_bytes = {}", s.max_body_bytes)), std::string::npos)
        << answer.substr(0, 1000);
  }
  expect_peak_within(s, 0, 0, classic_formula(s, 0, 0));
}

// A client that never reads while it sends 100 MiB of small requests that each get an answer: the
// gateway stops reading from it once its answers fill the write queue (back-pressure, not buffering),
// and write_timeout then disconnects it with a log line.
TEST_P(MemoryTest, NonReadingClientIsThrottledThenDisconnected) {
  const Settings s = settings();
  start_gateway(s);

  RawClient client(gateway().port());
  ASSERT_EQ(client.send(request_frame("0", protocol::kInitialize, R"({"capabilities":{}})") +
                            protocol::encode_frame(R"({"jsonrpc":"2.0","method":"robot/initialized","params":{}})"),
                        Clock::now() + kBound),
            RawClient::Sent::all);

  // 1 MiB of run_keyword requests with a token nobody issued: each is answered at once (the keyword fails,
  // UnknownLibraryToken).
  std::string chunk;
  for (int i = 0; chunk.size() < kMiB; ++i)
    chunk += request_frame(std::to_string(i), protocol::kRunKeyword,
                           R"({"library_token":"TestLibrary-00000000000000000000000000000000","name":"Echo","args":["x"]})");
  RawClient::Sent result = RawClient::Sent::all;
  const auto deadline = Clock::now() + kBound;
  while (client.sent() < 100 * kMiB && result == RawClient::Sent::all) result = client.send(chunk, deadline);

  EXPECT_EQ(result, RawClient::Sent::closed)
      << "the gateway should stop reading from a client that does not read (it took " << client.sent()
      << " bytes), then disconnect it after write_timeout";
  EXPECT_LT(client.sent(), 100 * kMiB) << "the gateway read everything a non-reading client sent";
  EXPECT_TRUE(eventually([&] { return client.peer_closed(); }, kBound));
  EXPECT_TRUE(eventually([&] { return gateway().log().find("(write_timeout)") != std::string::npos; }, kBound))
      << "no log line names write_timeout";
  expect_peak_within(s, 0, 0);

  // The gateway goes on serving.
  auto [c, token] = session();
  auto echo = c.run_keyword(token, "Echo", json::array{"still here"});
  RJG_ASSERT_KEYWORD_OK(echo);
}

// 30 requests of 2 MiB pipelined behind a keyword that waits: those that fit in max_pending_bytes wait
// for the worker as text and are answered; every one beyond it is refused at once with an error that
// says how many bytes wait, the setting, and what to do.
TEST_P(MemoryTest, PipelinedLargeRequestsBeyondMaxPendingBytesAreRefused) {
  const Settings s = settings();
  start_gateway(s);
  auto [c, token] = session();
  remember_pid(worker_pid(c, token));

  const fs::path gate = gateway().dir() / "go";
  const std::string waiting = request_frame(
      R"("wait")", protocol::kRunKeyword,
      fmt::format(R"({{"library_token":"{}","name":"Wait For File","args":[{}]}})", token,
                  json::serialize(json::value(gate.string()))));
  c.send_raw(waiting);
  std::uint64_t pending = waiting.size() - (waiting.find("\r\n\r\n") + 4);  // the body's size

  const std::string big(2 * kMiB, 'x');
  std::set<int> admitted, refused;
  for (int i = 1; i <= 30; ++i) {
    auto frame = request_frame(std::to_string(i), protocol::kRunKeyword,
                               fmt::format(R"({{"library_token":"{}","name":"Echo","args":["{}"]}})", token, big));
    const std::uint64_t body = frame.size() - (frame.find("\r\n\r\n") + 4);
    if (pending + body <= s.max_pending_bytes) {
      pending += body;
      admitted.insert(i);
    } else {
      refused.insert(i);
    }
    c.send_raw(std::move(frame));
  }
  ASSERT_FALSE(admitted.empty());
  ASSERT_FALSE(refused.empty());

  // The refusals come while the keyword still waits: each names the bytes waiting and the setting.
  std::set<int> got_refused;
  while (got_refused.size() < refused.size()) {
    auto m = c.read_message(kBound);
    ASSERT_TRUE(m) << "only " << got_refused.size() << " of " << refused.size() << " refusals arrived";
    if (m->kind == protocol::Message::Kind::notification) continue;
    // The keyword's failure (GatewayAtCapacity), as a result: the session goes on.
    ASSERT_EQ(m->kind, protocol::Message::Kind::response) << m->text().substr(0, 500);
    const auto failure = keyword_failure_of(*m);
    ASSERT_TRUE(failure) << m->text().substr(0, 500);
    EXPECT_EQ(failure->type, protocol::keyword_error_type(protocol::kAtCapacity));
    EXPECT_NE(failure->message.find("max_pending_bytes = " + std::to_string(s.max_pending_bytes)), std::string::npos)
        << failure->message;
    EXPECT_NE(failure->message.find("bytes of"), std::string::npos) << failure->message;
    EXPECT_NE(failure->message.find("Wait for answers"), std::string::npos) << failure->message;
    got_refused.insert(std::stoi(std::string(m->id_text())));
  }
  EXPECT_EQ(got_refused, refused);

  // Then the keyword ends, and every admitted request is answered with its 2 MiB echo.
  write_file(gate, "");
  std::set<int> answered;
  bool waited = false;
  while (!waited || answered.size() < admitted.size()) {
    auto m = c.read_message(kBound);
    ASSERT_TRUE(m) << "only " << answered.size() << " of " << admitted.size() << " answers arrived";
    if (m->kind == protocol::Message::Kind::notification) continue;
    ASSERT_EQ(m->kind, protocol::Message::Kind::response) << m->text().substr(0, 500);
    EXPECT_FALSE(keyword_failure_of(*m)) << m->text().substr(0, 500);
    if (m->id_text() == "\"wait\"") {
      waited = true;
      continue;
    }
    EXPECT_EQ(m->result().at("result"), json::value(big));
    answered.insert(std::stoi(std::string(m->id_text())));
  }
  EXPECT_EQ(answered, admitted);
  expect_peak_within(s, 1, 1);
}

// A client that stops reading while its keyword floods logs holds a shared worker (whose logs wait for
// that client) only until write_timeout cuts it off: then the other session's import, queued behind
// the flood on the same worker, goes through. The flooded client's receive buffer is fixed small, so
// 12 MB of logs are well beyond what the kernel (the client's 16 KiB, the gateway's send buffer: at most
// tcp_wmem's 4 MiB by default) and the gateway's write queue (4 MiB) can hold. (24 MB took ThreadSanitizer's
// gateway and worker more than the 60 s a call may wait.)
TEST(WriteTimeoutTest, NonReadingClientReleasesASharedWorker) {
  ::signal(SIGPIPE, SIG_IGN);
  auto library = test_library("TestLibrary");
  library.extra_toml = "isolation = \"shared\"\nmax_workers = 1\n";
  GatewayOptions o;
  o.log_level = "info";
  o.extra_gateway_toml = "write_timeout = \"2s\"\n";
  GatewayProcess gateway({library}, o);
  gateway.start();

  RawClient flooded(gateway.port(), 16 * 1024);
  ASSERT_EQ(flooded.send(request_frame("0", protocol::kInitialize, R"({"capabilities":{}})") +
                             protocol::encode_frame(R"({"jsonrpc":"2.0","method":"robot/initialized","params":{}})") +
                             request_frame("1", protocol::kImportLibrary, R"({"name":"TestLibrary","args":[]})"),
                         Clock::now() + kBound),
            RawClient::Sent::all);
  const auto token = flooded.read_between(R"("token":")", '"', Clock::now() + kBound);
  ASSERT_TRUE(token) << "no import answer\n" << gateway.log_tail();
  // About 12 MB of logs that this client never reads.
  ASSERT_EQ(flooded.send(request_frame("2", protocol::kRunKeyword,
                                       fmt::format(R"({{"library_token":"{}","name":"Log Messages",)"
                                                   R"("args":[12000,1000],"kwargs":{{}}}})",
                                                   *token)),
                         Clock::now() + kBound),
            RawClient::Sent::all);
  // The flood has begun once its first log arrives: only then is the other session's import sure to
  // queue behind it. (Connecting earlier let the import and the echo reach the worker first, under
  // ThreadSanitizer on a busy machine: nothing then waited for write_timeout.)
  ASSERT_TRUE(flooded.read_between(R"("robot/log")", '}', Clock::now() + kBound))
      << "no log from the flooding keyword\n" << gateway.log_tail();
  client::RpcClient other = gateway.connect(kBound);
  other.set_timeout(kBound);
  const std::string other_token = open_library(other, "TestLibrary");
  auto echo = other.run_keyword(other_token, "Echo", json::array{"after the flood"});
  EXPECT_TRUE(echo.ok() && echo.keyword_error() == nullptr) << describe(echo) << "\n" << gateway.log_tail();
  EXPECT_NE(gateway.log().find("(write_timeout)"), std::string::npos) << gateway.log_tail();
  // The gateway has closed that client's session. (Its side of the socket: the kernel still delivers
  // what it held for the client, up to the send buffer, before the end of the stream, and through a
  // 16 KiB window that took over a minute, so the client's view is not what this test waits for.)
  const std::string closed = fmt::format("({}): closed", flooded.local_address());
  EXPECT_TRUE(eventually([&] { return gateway.log().find(closed) != std::string::npos; }, kBound))
      << "the non-reading client's session was not closed\n" << gateway.log_tail();
}

// A large request checked off the loop and then refused (max_pending_bytes) leaves nothing behind that
// a later request could be judged by: the next request of the same shape is checked for itself. (Under
// AddressSanitizer a stale verdict read the refused request's freed text.)
TEST(OffloadTest, ARefusedLargeRequestLeavesNoVerdictBehind) {
  auto library = test_library("TestLibrary");
  GatewayOptions o;
  o.extra_gateway_toml = "max_pending_bytes = \"64KiB\"\n";
  GatewayProcess gateway({library}, o);
  gateway.start();
  client::RpcClient c = gateway.connect();
  c.set_timeout(kBound);
  const std::string token = open_library(c, "TestLibrary");
  const fs::path gate = gateway.dir() / "go";
  c.send_raw(request_frame(R"("wait")", protocol::kRunKeyword,
                           fmt::format(R"({{"library_token":"{}","name":"Wait For File","args":[{}]}})", token,
                                       json::serialize(json::value(gate.string())))));
  // 1 MiB, so it is bound and checked on the offload pool, then refused: 64 KiB of requests may wait.
  c.send_raw(request_frame("1", protocol::kRunKeyword,
                           fmt::format(R"({{"library_token":"{}","name":"Echo","args":["a"],"kwargs":{{}},"pad":"{}"}})",
                                       token, std::string(kMiB, 'p'))));
  c.send_raw(request_frame("2", protocol::kRunKeyword,
                           fmt::format(R"({{"library_token":"{}","name":"Echo","args":["b"],"kwargs":{{}}}})", token)));
  auto refused = c.read_message(kBound);
  while (refused && refused->kind == protocol::Message::Kind::notification) refused = c.read_message(kBound);  // its log
  ASSERT_TRUE(refused);
  ASSERT_EQ(refused->kind, protocol::Message::Kind::response) << refused->text().substr(0, 300);
  EXPECT_EQ(refused->id_text(), "1");
  const auto failure = keyword_failure_of(*refused);
  ASSERT_TRUE(failure) << refused->text().substr(0, 300);
  EXPECT_EQ(failure->type, protocol::keyword_error_type(protocol::kAtCapacity)) << refused->text().substr(0, 300);
  write_file(gate, "");
  bool echoed = false, waited = false;
  while (!echoed || !waited) {
    auto m = c.read_message(kBound);
    ASSERT_TRUE(m) << gateway.log_tail();
    if (m->kind == protocol::Message::Kind::notification) continue;
    ASSERT_EQ(m->kind, protocol::Message::Kind::response) << m->text().substr(0, 300);
    EXPECT_FALSE(keyword_failure_of(*m)) << m->text().substr(0, 300);
    if (m->id_text() == "2") {
      EXPECT_EQ(m->result().at("result"), json::value("b"));
      echoed = true;
    } else {
      waited = true;
    }
  }
  EXPECT_TRUE(gateway.running());
}

// A classic client's large bodies are read off the event loop, as large JSON frames are (issue 22: three
// clients sending the amplification body for 15 s raised the keyword latency of the JSON-RPC sessions on
// that loop from 4 ms to 1.9 s). With one loop, a JSON-RPC session runs keywords while such bodies arrive:
// each gets the fault naming the limits, the log says each was read off the loop, a small request is read
// on it, and the session's keywords all pass.
TEST(ClassicOffloadTest, LargeBodiesAreReadOffTheLoopWhileAJsonRpcSessionGoesOn) {
  ::signal(SIGPIPE, SIG_IGN);
  const std::uint16_t port = free_port();
  GatewayOptions o;
  o.extra_gateway_toml = "threads = 1\n";
  o.extra_toml = fmt::format("[classic]\nlisten = [\"tcp://127.0.0.1:{}\"]\n", port);
  GatewayProcess gateway({test_library("TestLibrary")}, o);
  gateway.start();
  ASSERT_TRUE(eventually([&] { return can_connect(port); }, kBound)) << gateway.log_tail();
  client::RpcClient c = gateway.connect(kBound);
  c.set_timeout(kBound);
  const std::string token = open_library(c, "TestLibrary");
  constexpr std::string_view kOffLoop = "was read off the event loop";

  const std::string body = amplification_body(8'000'000);
  // Three bodies one after another (one under a sanitizer, where each takes seconds to parse).
  std::vector<std::string> answers(sanitizer_under_test().empty() ? 3 : 1);
  std::atomic<bool> sent = false;
  std::thread sender([&] {
    for (auto& answer : answers) answer = classic_post(port, body);
    sent = true;
  });
  // The session is used for as long as the bodies arrive, however long that is.
  int keywords = 0;
  do {
    auto echo = c.run_keyword(token, "Echo", json::array{keywords});
    EXPECT_TRUE(echo.ok() && echo.keyword_error() == nullptr) << describe(echo);
    ++keywords;
  } while (!sent);
  sender.join();
  for (const auto& answer : answers) {
    EXPECT_NE(answer.find("more values than the limit: at most one value per 16 bytes of the document"),
              std::string::npos)
        << answer.substr(0, 1000);
    EXPECT_NE(answer.find("[classic] max_body_bytes = 8388608"), std::string::npos) << answer.substr(0, 1000);
  }
  EXPECT_EQ(count_of(gateway.log(), kOffLoop), answers.size()) << gateway.log_tail();

  // The issue's first body: 2,000,000 stray elements in 8 MB, refused where the first one stands.
  std::string stray = "<methodCall><methodName>run_keyword</methodName><params><param>";
  for (int i = 0; i < 2'000'000; ++i) stray += "<a/>";
  stray += "</param></params></methodCall>";
  const std::string refused = classic_post(port, stray);
  EXPECT_NE(refused.find("line 1: &lt;param&gt; must hold exactly one &lt;value&gt;"), std::string::npos)
      << refused.substr(0, 1000);
  EXPECT_EQ(count_of(gateway.log(), kOffLoop), answers.size() + 1) << gateway.log_tail();

  // A small request is read on the loop, and answered as ever.
  const std::string small = classic_post(
      port, "<?xml version='1.0'?><methodCall><methodName>run_keyword</methodName><params><param><value><string>Echo"
            "</string></value></param><param><value><array><data><value><string>small</string></value></data>"
            "</array></value></param></params></methodCall>");
  EXPECT_NE(small.find("<value><string>small</string></value>"), std::string::npos) << small.substr(0, 1000);
  EXPECT_EQ(count_of(gateway.log(), kOffLoop), answers.size() + 1) << gateway.log_tail();
  // A large result is turned into XML-RPC off the loop too.
  const std::string large = classic_post(
      port, "<?xml version='1.0'?><methodCall><methodName>run_keyword</methodName><params><param><value><string>Big "
            "Value</string></value></param><param><value><array><data><value><int>2000000</int></value></data>"
            "</array></value></param></params></methodCall>");
  EXPECT_NE(large.find("<value><string>" + std::string(2'000'000, 'x') + "</string></value>"), std::string::npos)
      << large.substr(0, 1000);
  EXPECT_EQ(count_of(gateway.log(), "was written off the event loop"), 1u) << gateway.log_tail();
  auto echo = c.run_keyword(token, "Echo", json::array{"after"});
  EXPECT_TRUE(echo.ok() && echo.keyword_error() == nullptr) << describe(echo);
  EXPECT_TRUE(gateway.running());
}

INSTANTIATE_TEST_SUITE_P(Settings, MemoryTest, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "Defaults" : "Tight"; });

}  // namespace
}  // namespace rjg::test
