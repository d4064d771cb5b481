// Hardening (issue #4): every bad input a client can send, the limits of [gateway], and the pickle
// policy. Each test shows the gateway answering or closing as specified, and then still serving the
// next normal session. Deadlines only bound waits; nothing here depends on how fast anything is.
#include "tests/integration/gateway_test.hpp"

#include "common/protocol/framing.hpp"
#include "common/log.hpp"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <fstream>
#include <iostream>
#include <map>
#include <regex>
#include <set>

namespace rjg::test {
namespace {

// Bounds every wait for something the gateway must do "at once" (answer, close, reap): generous, so a
// loaded machine never trips it; a gateway that does not do it at all still fails the test.
constexpr auto kBound = 20s;

bool icontains(std::string haystack, std::string needle) {
  auto lower = [](std::string& s) {
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  };
  lower(haystack);
  lower(needle);
  return contains(haystack, needle);
}

std::string run_keyword_body(std::string_view id_json, std::string_view token, std::string_view keyword,
                             std::string_view args_json) {
  return fmt::format(R"({{"jsonrpc":"2.0","id":{},"method":"robot/run_keyword","params":{{"library_token":"{}","name":"{}","args":{},"kwargs":{{}}}}}})",
                     id_json, token, keyword, args_json);
}

std::string describe_message(const protocol::Message& m) {
  std::string text = m.text();
  return text.size() > 2000 ? text.substr(0, 2000) + "..." : text;
}

std::string error_message_of(const protocol::Message& m) {
  const auto& err = m.error();
  auto it = err.find("message");
  return it != err.end() && it->value().is_string() ? std::string(it->value().get_string()) : std::string();
}

int error_code_of(const protocol::Message& m) {
  const auto& err = m.error();
  auto it = err.find("code");
  return it != err.end() && it->value().is_int64() ? static_cast<int>(it->value().get_int64()) : 0;
}

// ------------------------------------------------------------------------------------------------
// A raw TCP connection from a chosen local address, for bytes and behaviours RpcClient never shows:
// the exact bytes received (or none at all), half-closing, trickling.

class RawConn {
 public:
  explicit RawConn(std::uint16_t port, const std::string& local_ip = "127.0.0.1") {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) throw std::runtime_error(fmt::format("socket: {}", std::strerror(errno)));
    sockaddr_in local{};
    local.sin_family = AF_INET;
    ::inet_pton(AF_INET, local_ip.c_str(), &local.sin_addr);
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&local), sizeof local) != 0)
      throw std::runtime_error(fmt::format("bind {}: {}", local_ip, std::strerror(errno)));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(port);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
      throw std::runtime_error(fmt::format("connect from {}: {}", local_ip, std::strerror(errno)));
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  ~RawConn() {
    if (fd_ >= 0) ::close(fd_);
  }
  RawConn(const RawConn&) = delete;
  RawConn& operator=(const RawConn&) = delete;

  // Writes all of bytes; false once the peer has closed or reset the connection.
  bool send(std::string_view bytes) {
    auto deadline = Clock::now() + kBound;
    while (!bytes.empty()) {
      ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        bytes.remove_prefix(static_cast<std::size_t>(n));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        if (Clock::now() >= deadline) throw std::runtime_error("the gateway does not read (send timed out)");
        pollfd p{fd_, POLLOUT, 0};
        ::poll(&p, 1, 50);
        continue;
      }
      return false;
    }
    return true;
  }

  void shutdown_write() { ::shutdown(fd_, SHUT_WR); }

  // Reads until the peer closes (true) or the deadline passes (false).
  bool wait_closed(std::chrono::milliseconds timeout) {
    auto deadline = Clock::now() + timeout;
    while (!eof_) {
      if (!read_some(deadline) && Clock::now() >= deadline) return false;
    }
    return true;
  }

  // The next message; nullopt when the peer closed or nothing complete arrived within timeout.
  std::optional<protocol::Message> next_message(std::chrono::milliseconds timeout) {
    auto deadline = Clock::now() + timeout;
    for (;;) {
      if (!messages_.empty()) {
        protocol::Message m = std::move(messages_.front());
        messages_.pop_front();
        return m;
      }
      if (eof_) return std::nullopt;
      if (!read_some(deadline) && Clock::now() >= deadline) return std::nullopt;
    }
  }

  // Sends a request and returns its answer (notifications are skipped); throws if none arrives.
  protocol::Message call(const json::value& id, std::string_view method, json::value params) {
    if (!send(protocol::encode_frame(protocol::make_request(id, method, std::move(params)))))
      throw std::runtime_error(fmt::format("{}: connection closed by the gateway", method));
    for (;;) {
      auto m = next_message(kBound);
      if (!m) throw std::runtime_error(fmt::format("no answer to {} (id {})", method, json::serialize(id)));
      if (m->kind == protocol::Message::Kind::notification) continue;
      return std::move(*m);
    }
  }

  // robot/initialize + robot/initialized; true if the gateway answered initialize with a result.
  bool initialize() {
    auto m = call("init", protocol::kInitialize,
                  json::object{{"capabilities", json::object{}},
                               {"client_info", json::object{{"name", "hardening-test"}, {"version", "0"}}}});
    if (m.kind != protocol::Message::Kind::response) return false;
    return send(protocol::encode_frame(protocol::make_notification(protocol::kInitialized, json::object{})));
  }

  const std::string& received() const { return received_; }
  bool closed() const { return eof_; }

 private:
  // One read; false on timeout. Sets eof_ on close or reset.
  bool read_some(Clock::time_point deadline) {
    if (eof_) return false;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    pollfd p{fd_, POLLIN, 0};
    int r = ::poll(&p, 1, static_cast<int>(std::max<long long>(0, left)));
    if (r == 0) return false;
    if (r < 0) return errno == EINTR;
    char buf[64 * 1024];
    ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) return true;
    if (n <= 0) {
      eof_ = true;
      return true;
    }
    received_.append(buf, static_cast<std::size_t>(n));
    reader_.feed({buf, static_cast<std::size_t>(n)});
    for (;;) {
      auto f = reader_.next();
      if (f.kind == protocol::FrameReader::Result::Kind::need_more) break;
      if (f.kind == protocol::FrameReader::Result::Kind::error)
        throw std::runtime_error("the gateway sent a bad frame: " + f.error);
      auto c = protocol::parse_message(f.body);
      if (auto* bad = std::get_if<protocol::ProtocolError>(&c))
        throw std::runtime_error("the gateway sent an invalid message: " + bad->message + ": " + f.body);
      messages_.push_back(std::move(std::get<protocol::Message>(c)));
    }
    return true;
  }

  int fd_ = -1;
  std::string received_;
  protocol::FrameReader reader_;
  std::deque<protocol::Message> messages_;
  bool eof_ = false;
};

// ------------------------------------------------------------------------------------------------
// Shared checks

class HardeningTest : public GatewayTest {
 protected:
  // A config that keeps read_timeout out of the way, so that a framing fault the gateway fails to
  // see cannot be hidden by the stall it causes.
  static GatewayOptions options(std::string extra = "read_timeout = \"60s\"\n") {
    GatewayOptions o;
    o.extra_gateway_toml = std::move(extra);
    return o;
  }

  // The next message must be an error with a null id, `code`, a message starting with `prefix` and
  // containing `needle` (case-insensitive); then the gateway must close the connection.
  void expect_error_then_close(client::RpcClient& c, int code, std::string_view prefix, std::string_view needle) {
    std::optional<protocol::Message> m;
    try {
      m = c.read_message(kBound);
    } catch (const client::RpcError& e) {
      FAIL() << "expected a " << code << " error frame before the close, got: " << e.what();
    }
    ASSERT_TRUE(m) << "no answer within " << kBound.count() << " s (expected error " << code << ": " << needle << ")";
    ASSERT_EQ(m->kind, protocol::Message::Kind::error_response) << describe_message(*m);
    EXPECT_TRUE(m->id().is_null()) << describe_message(*m);
    EXPECT_EQ(error_code_of(*m), code) << describe_message(*m);
    const auto msg = error_message_of(*m);
    EXPECT_TRUE(msg.rfind(prefix, 0) == 0) << "message does not start with '" << prefix << "': " << msg;
    EXPECT_TRUE(icontains(msg, std::string(needle))) << "message does not mention '" << needle << "': " << msg;
    EXPECT_TRUE(c.wait_closed(kBound)) << "the gateway did not close the connection after: " << msg;
    EXPECT_EQ(c.pending_messages(), 0u) << "messages after the closing error";
  }

  // Some line of the gateway's log contains every one of `needles`.
  bool log_has_line(std::initializer_list<std::string_view> needles) {
    return eventually(
        [&] {
          std::string log = gateway().log();
          std::size_t pos = 0;
          while (pos < log.size()) {
            auto nl = log.find('\n', pos);
            std::string_view line(log.data() + pos, (nl == std::string::npos ? log.size() : nl) - pos);
            bool all = true;
            for (auto n : needles) all = all && icontains(std::string(line), std::string(n));
            if (all) return true;
            if (nl == std::string::npos) break;
            pos = nl + 1;
          }
          return false;
        },
        kBound);
  }

  // A fresh session imports TestLibrary and runs a keyword: the gateway still serves.
  void expect_next_session_works() {
    auto [c, token] = session();
    auto echo = c.run_keyword(token, "Echo", json::array{"still serving"});
    RJG_ASSERT_KEYWORD_OK(echo);
    EXPECT_EQ(keyword_value(echo), json::value("still serving"));
  }
};

// ------------------------------------------------------------------------------------------------
// Framing: every fault gets one error frame (id null, -32700, "Framing error: ..."), a log line naming
// the peer and the reason, and the end of that connection (and of its workers).

struct BadFrame {
  std::string name;
  std::string bytes;
  std::string reason;  // what the error message must mention (case-insensitive)
};

std::vector<BadFrame> bad_frames() {
  const std::string body = R"({"jsonrpc":"2.0","id":"x","method":"robot/shutdown","params":{}})";
  auto with_length = [&](std::string value) { return "Content-Length: " + value + "\r\n\r\n" + body; };
  std::string many_lines;
  while (many_lines.size() < 12000) many_lines += "X-Padding: 0123456789abcdef\r\n";
  return {
      {"MissingContentLength", "Content-Type: application/vscode-jsonrpc; charset=utf-8\r\n\r\n" + body,
       "Content-Length"},
      {"EmptyHeaderBlock", "\r\n\r\n" + body, "header"},
      {"DuplicatedContentLength",
       fmt::format("Content-Length: {0}\r\nContent-Length: {0}\r\n\r\n{1}", body.size(), body), "Content-Length"},
      {"DuplicatedContentLengthOtherCase",
       fmt::format("Content-Length: {0}\r\ncontent-length: {0}\r\n\r\n{1}", body.size(), body), "Content-Length"},
      {"ConflictingContentLengths", fmt::format("Content-Length: 2\r\nContent-Length: {}\r\n\r\n{}", body.size(), body),
       "Content-Length"},
      {"NegativeContentLength", with_length("-5"), "Content-Length"},
      {"PlusSignedContentLength", with_length(fmt::format("+{}", body.size())), "Content-Length"},
      {"HexContentLength", with_length(fmt::format("0x{:x}", body.size())), "Content-Length"},
      {"FractionalContentLength", with_length(fmt::format("{}.0", body.size())), "Content-Length"},
      {"ExponentContentLength", with_length("6e1"), "Content-Length"},
      {"EmptyContentLength", with_length(""), "Content-Length"},
      {"SpaceInsideContentLength", with_length("6 5"), "Content-Length"},
      {"ElevenDigitContentLength", with_length(fmt::format("{:011}", body.size())), "Content-Length"},
      {"HugeContentLength", with_length("99999999999999999999"), "Content-Length"},
      // 2^64 + 65: wraps around to a plausible 65 in 64-bit arithmetic.
      {"OverflowingContentLength", with_length("18446744073709551681"), "Content-Length"},
      // 2^32 + 65: wraps around to 65 in 32-bit arithmetic; ten digits, so only the limit refuses it.
      {"TenDigitsOverTheLimit", with_length("4294967361"), "Content-Length"},
      {"OneByteOverTheDefaultLimit", with_length("67108865"), "67108864"},
      {"BareLfOnly", fmt::format("Content-Length: {}\n\n{}", body.size(), body), "LF"},
      {"BareLfEndingTheHeaderBlock", fmt::format("Content-Length: {}\r\n\n{}", body.size(), body), "LF"},
      {"BareLfOnTheSecondHeaderLine",
       fmt::format("Content-Type: application/vscode-jsonrpc\r\nContent-Length: {}\n\n{}", body.size(), body), "LF"},
      {"BareCr", fmt::format("Content-Length: {}\r\r\n\r\n{}", body.size(), body), "CR"},
      {"EndlessHeaderLine", "X-Endless: " + std::string(20000, 'a'), "header"},
      {"EndlessContentLengthValue", "Content-Length: " + std::string(20000, '9'), "header"},
      {"TooManyHeaderLines", many_lines, "header"},
      {"HeaderBlockOverTheLimit", many_lines + with_length(std::to_string(body.size())), "header"},
      {"HeaderLineWithoutColon", "NoColonHere\r\n" + with_length(std::to_string(body.size())), "header"},
      {"HttpRequest", "GET / HTTP/1.1\r\nHost: gateway\r\n\r\n", "header"},
      {"UnsupportedCharset",
       fmt::format("Content-Length: {}\r\nContent-Type: application/vscode-jsonrpc; charset=latin-1\r\n\r\n{}",
                   body.size(), body),
       "charset"},
  };
}

void PrintTo(const BadFrame& bad, std::ostream* os) { *os << bad.name; }

class FramingTest : public HardeningTest, public ::testing::WithParamInterface<BadFrame> {};

TEST_P(FramingTest, AnsweredWithOneErrorThenClosed) {
  const BadFrame& bad = GetParam();
  start(default_libraries(), options());
  auto [c, token] = session();
  pid_t pid = remember_pid(worker_pid(c, token));
  c.send_raw(bad.bytes);
  expect_error_then_close(c, protocol::kParseError, "Framing error: ", bad.reason);
  EXPECT_TRUE(log_has_line({"framing error", "127.0.0.1:", bad.reason}))
      << "no log line naming the peer and the reason (" << bad.reason << ")";
  EXPECT_TRUE(wait_pid_gone(pid, kBound)) << "worker pid " << pid << " outlived its connection's framing error";
  expect_next_session_works();
}

// The same faults before robot/initialize: the first bytes a stranger sends.
TEST_P(FramingTest, BeforeInitializeAnsweredWithOneErrorThenClosed) {
  const BadFrame& bad = GetParam();
  start(default_libraries(), options());
  client::RpcClient c = connect();
  c.send_raw(bad.bytes);
  expect_error_then_close(c, protocol::kParseError, "Framing error: ", bad.reason);
  expect_next_session_works();
}

INSTANTIATE_TEST_SUITE_P(BadInputs, FramingTest, ::testing::ValuesIn(bad_frames()),
                         [](const ::testing::TestParamInfo<BadFrame>& info) { return info.param.name; });

class FramingLimitTest : public HardeningTest {};

// max_message_bytes: a body of exactly the limit is served; one byte more ends the connection.
TEST_F(FramingLimitTest, MaxMessageBytesIsInclusiveAndConfigurable) {
  start(default_libraries(), options("read_timeout = \"60s\"\nmax_message_bytes = 65536\n"));
  auto [c, token] = session();
  std::string body = run_keyword_body(R"("exact")", token, "Echo", R"(["at the limit"])");
  body += std::string(65536 - body.size(), ' ');  // JSON allows trailing whitespace
  ASSERT_EQ(body.size(), 65536u);
  c.send_raw(frame(body));
  auto reply = c.wait_reply("exact");
  RJG_ASSERT_KEYWORD_OK(reply);
  EXPECT_EQ(keyword_value(reply), json::value("at the limit"));

  c.send_raw(frame(body + " "));
  expect_error_then_close(c, protocol::kParseError, "Framing error: ", "65536");
  expect_next_session_works();
}

// max_header_bytes counts the whole header block, CRLFs included: exactly the limit is served.
TEST_F(FramingLimitTest, MaxHeaderBytesIsInclusiveAndConfigurable) {
  start(default_libraries(), options("read_timeout = \"60s\"\nmax_header_bytes = 1024\n"));
  auto [c, token] = session();
  auto padded = [&](std::size_t block_size, std::string_view id) {
    std::string body = run_keyword_body(fmt::format("\"{}\"", id), token, "Echo", "[1]");
    std::string head = fmt::format("Content-Length: {}\r\n", body.size());
    const std::string pad_name = "X-Pad: ";
    std::size_t pad = block_size - head.size() - pad_name.size() - 4;  // "\r\n" after the pad, "\r\n" ending the block
    return head + pad_name + std::string(pad, 'p') + "\r\n\r\n" + body;
  };
  c.send_raw(padded(1024, "fits"));
  auto reply = c.wait_reply("fits");
  RJG_ASSERT_KEYWORD_OK(reply);
  c.send_raw(padded(1025, "too-big"));
  expect_error_then_close(c, protocol::kParseError, "Framing error: ", "1024");
  expect_next_session_works();
}

// A peer that announces more than it sends, then closes its side: the connection (and its worker) end.
TEST_F(FramingLimitTest, BodyShorterThanAnnouncedThenEof) {
  start(default_libraries(), options());
  RawConn raw(gateway().port());
  ASSERT_TRUE(raw.initialize());
  auto imported = raw.call("imp", protocol::kImportLibrary, json::object{{"name", "TestLibrary"}});
  ASSERT_EQ(imported.kind, protocol::Message::Kind::response) << describe_message(imported);
  std::string token(imported.result().at("token").as_string());
  auto pid_reply = raw.call("pid", protocol::kRunKeyword,
                            json::object{{"library_token", token}, {"name", "Get Pid"}, {"args", json::array{}}});
  ASSERT_EQ(pid_reply.kind, protocol::Message::Kind::response) << describe_message(pid_reply);
  pid_t pid = remember_pid(static_cast<pid_t>(pid_reply.result().at("result").to_number<std::int64_t>()));

  ASSERT_TRUE(raw.send(R"(Content-Length: 200)" "\r\n\r\n" R"({"jsonrpc":"2.0","id":"cut","method":)"));
  raw.shutdown_write();
  EXPECT_TRUE(raw.wait_closed(kBound)) << "the gateway kept a connection whose peer closed mid-frame";
  EXPECT_TRUE(wait_pid_gone(pid, kBound)) << "worker pid " << pid << " outlived its connection";
  expect_next_session_works();
}

// ------------------------------------------------------------------------------------------------
// JSON: a broken body with sound framing gets -32700 and the connection goes on.

class JsonTest : public HardeningTest {
 protected:
  // Sends `body` framed; expects one -32700 error mentioning `needle`, carrying the id found at the top
  // level of the broken body (null when there is none), then shows that the same connection still works.
  void expect_parse_error_and_go_on(client::RpcClient& c, const std::string& token, std::string_view body,
                                    std::string_view needle = "") {
    c.send_raw(frame(body));
    std::optional<protocol::Message> m;
    try {
      m = c.read_message(kBound);
    } catch (const client::RpcError& e) {
      FAIL() << "body " << log::printable(body, 120) << ": " << e.what();
    }
    ASSERT_TRUE(m) << "no answer to the body " << log::printable(body, 120);
    ASSERT_EQ(m->kind, protocol::Message::Kind::error_response) << describe_message(*m);
    EXPECT_EQ(m->id_text(), rjg::protocol::top_level_id(body)) << describe_message(*m);
    EXPECT_EQ(error_code_of(*m), protocol::kParseError)
        << "body " << log::printable(body, 120) << ": " << describe_message(*m);
    if (!needle.empty()) {
      EXPECT_TRUE(icontains(error_message_of(*m), std::string(needle))) << describe_message(*m);
    }
    auto echo = c.run_keyword(token, "Echo", json::array{"goes on"});
    RJG_ASSERT_KEYWORD_OK(echo);
    EXPECT_EQ(keyword_value(echo), json::value("goes on"));
  }
};

// A keyword whose arguments are over a limit fails as that keyword (a result, type ArgumentsOverLimit, with
// the request's id): the stock client would end its session on an error answer.
void expect_argument_limit_and_go_on(client::RpcClient& c, const std::string& token, std::string_view body,
                                     std::string_view needle) {
  c.send_raw(frame(body));
  auto m = c.read_message(kBound);
  ASSERT_TRUE(m) << "no answer to the body " << log::printable(body, 120);
  ASSERT_EQ(m->kind, protocol::Message::Kind::response) << describe_message(*m);
  EXPECT_EQ(m->id_text(), rjg::protocol::top_level_id(body)) << describe_message(*m);
  const auto failure = keyword_failure_of(*m);
  ASSERT_TRUE(failure) << describe_message(*m);
  EXPECT_EQ(failure->type, "ArgumentsOverLimit") << describe_message(*m);
  EXPECT_TRUE(icontains(failure->message, std::string(needle))) << failure->message;
  auto echo = c.run_keyword(token, "Echo", json::array{"goes on"});
  RJG_ASSERT_KEYWORD_OK(echo);
  EXPECT_EQ(keyword_value(echo), json::value("goes on"));
}

TEST_F(JsonTest, BrokenBodiesAreAnsweredAndTheConnectionGoesOn) {
  start(default_libraries(), options());
  auto [c, token] = session();
  for (std::string_view body : {
           std::string_view(""),
           std::string_view("{"),
           std::string_view(R"({"jsonrpc":"2.0","id":"7","method":)"),
           std::string_view(R"({"jsonrpc":"2.0","id":"7","method":"robot/shutdown",})"),
           std::string_view(R"({'jsonrpc': '2.0'})"),
           std::string_view(R"({"jsonrpc":"2.0" /* comment */})"),
           std::string_view(R"({"jsonrpc":"2.0","id":"7","method":"robot/shutdown"} trailing)"),
           std::string_view(R"([1, 2)"),
           std::string_view("nul"),
           std::string_view("\x00\x01\x02", 3),
       }) {
    SCOPED_TRACE(log::printable(body, 80));
    expect_parse_error_and_go_on(c, token, body);
  }
}

std::string nested_arrays(std::size_t depth, std::string_view inner = "1") {
  return std::string(depth, '[') + std::string(inner) + std::string(depth, ']');
}

std::string nested_objects(std::size_t depth) {
  std::string out;
  for (std::size_t i = 0; i < depth; ++i) out += R"({"a":)";
  out += "1";
  out += std::string(depth, '}');
  return out;
}

TEST_F(JsonTest, DeepNestingIsRefusedAndTheConnectionGoesOn) {
  start(default_libraries(), options());
  auto [c, token] = session();
  // Default max_json_depth = 64; the request itself takes 3 levels (message, params, args).
  expect_argument_limit_and_go_on(c, token, run_keyword_body(R"("d1")", token, "Echo", "[" + nested_arrays(70) + "]"),
                                  "max_json_depth");
  expect_argument_limit_and_go_on(c, token, run_keyword_body(R"("d2")", token, "Echo", "[" + nested_objects(70) + "]"),
                                  "max_json_depth");
  // Far deeper than any stack would like: refused without harm.
  expect_parse_error_and_go_on(c, token, std::string(1 << 20, '['), "nest");
  expect_parse_error_and_go_on(c, token, nested_objects(200000), "nest");
}

TEST_F(JsonTest, MaxJsonDepthIsInclusiveAndConfigurable) {
  start(default_libraries(), options("read_timeout = \"60s\"\nmax_json_depth = 16\n"));
  auto [c, token] = session();
  // message (1) + params (2) + args (3) + 13 nested arrays = 16 levels.
  c.send_raw(frame(run_keyword_body(R"("at-limit")", token, "Echo", "[" + nested_arrays(13) + "]")));
  auto reply = c.wait_reply("at-limit");
  RJG_ASSERT_KEYWORD_OK(reply);
  EXPECT_EQ(keyword_value(reply), json::parse(nested_arrays(13)));
  expect_argument_limit_and_go_on(c, token,
                                  run_keyword_body(R"("over")", token, "Echo", "[" + nested_arrays(14) + "]"), "16");
}

TEST_F(JsonTest, InvalidUtf8IsRefusedAndTheConnectionGoesOn) {
  start(default_libraries(), options());
  auto [c, token] = session();
  for (std::string_view bad : {
           std::string_view("\xff"),                  // never valid
           std::string_view("\xc0\xaf"),              // overlong '/'
           std::string_view("\xe0\x80\xaf"),          // overlong, 3 bytes
           std::string_view("\xed\xa0\x80"),          // UTF-16 surrogate encoded in UTF-8
           std::string_view("\xf4\x90\x80\x80"),      // above U+10FFFF
           std::string_view("\xf8\x88\x80\x80\x80"),  // 5-byte form
           std::string_view("\xe2\x82"),              // truncated sequence
           std::string_view("\x80"),                  // lone continuation byte
       }) {
    SCOPED_TRACE(log::printable(bad, 40));
    std::string value = "\"ok ";
    value += bad;
    value += " ok\"";
    expect_parse_error_and_go_on(c, token, run_keyword_body(R"("utf8")", token, "Echo", "[" + value + "]"));
    // The same bytes in a member name.
    std::string key_body = R"({"jsonrpc":"2.0","id":"k","method":"robot/shutdown","params":{")";
    key_body += bad;
    key_body += R"(":1}})";
    expect_parse_error_and_go_on(c, token, key_body);
  }
  // Valid non-ASCII text travels unchanged.
  const std::string text = "na\xc3\xafve \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80";
  auto echo = c.run_keyword(token, "Echo", json::array{json::string(text)});
  RJG_ASSERT_KEYWORD_OK(echo);
  EXPECT_EQ(keyword_value(echo), json::value(text));
}

// Duplicate member names: the last one wins (as in Python's json), and the worker receives the
// gateway's own serialization, so the gateway and the worker can never read one message two ways.
TEST_F(JsonTest, DuplicateKeysLastOneWins) {
  start(default_libraries(), options());
  auto [c, token] = session();

  // Bogus token first, valid one last: runs.
  c.send_raw(frame(fmt::format(
      R"({{"jsonrpc":"2.0","id":"dup-ok","method":"robot/run_keyword","params":{{"library_token":"bogus","library_token":"{}","name":"Echo","args":["last wins"],"kwargs":{{}}}}}})",
      token)));
  auto ok = c.wait_reply("dup-ok");
  RJG_ASSERT_KEYWORD_OK(ok);
  EXPECT_EQ(keyword_value(ok), json::value("last wins"));

  // Valid token first, bogus one last: unknown token.
  c.send_raw(frame(fmt::format(
      R"({{"jsonrpc":"2.0","id":"dup-bad","method":"robot/run_keyword","params":{{"library_token":"{}","library_token":"bogus","name":"Echo","args":["no"],"kwargs":{{}}}}}})",
      token)));
  auto bad = c.wait_reply("dup-bad");
  RJG_ASSERT_KEYWORD_FAILURE(bad, protocol::kUnknownToken);

  // A duplicated member inside an argument reaches the worker once, with the last value.
  c.send_raw(frame(run_keyword_body(R"("dup-arg")", token, "Echo", R"([{"a":1,"b":2,"a":3}])")));
  auto arg = c.wait_reply("dup-arg");
  RJG_ASSERT_KEYWORD_OK(arg);
  EXPECT_EQ(keyword_value(arg), json::parse(R"({"a":3,"b":2})"));

  // Duplicated method and id: the last ones count.
  c.send_raw(frame(fmt::format(
      R"({{"jsonrpc":"2.0","id":"first","method":"robot/frobnicate","params":{{"library_token":"{}","name":"Echo","args":[5],"kwargs":{{}}}},"method":"robot/run_keyword","id":"second"}})",
      token)));
  auto second = c.wait_reply("second");
  RJG_ASSERT_KEYWORD_OK(second);
  EXPECT_EQ(second.id, json::value("second"));
  EXPECT_EQ(keyword_value(second), json::value(5));
  // Nothing was answered under the first id.
  auto after = c.run_keyword(token, "Echo", json::array{"after"});
  RJG_ASSERT_KEYWORD_OK(after);
  EXPECT_EQ(c.pending_messages(), 0u) << "an extra answer arrived for a duplicated id";
}

// ------------------------------------------------------------------------------------------------
// Time: handshake_timeout, read_timeout, idle_timeout each end the connection with -32016 naming the key.

class TimeoutTest : public HardeningTest {};

TEST_F(TimeoutTest, HandshakeTimeoutClosesASilentConnection) {
  start(default_libraries(), options("handshake_timeout = \"2s\"\nread_timeout = \"60s\"\n"));
  client::RpcClient c = connect();
  expect_error_then_close(c, protocol::kSessionTimeout, "", "handshake_timeout");
  EXPECT_TRUE(log_has_line({"127.0.0.1:", "handshake_timeout"}));
  expect_next_session_works();
}

TEST_F(TimeoutTest, HandshakeTimeoutIsNotResetByOtherMessages) {
  start(default_libraries(), options("handshake_timeout = \"2s\"\nread_timeout = \"60s\"\n"));
  client::RpcClient c = connect();
  // Anything but robot/initialize keeps the handshake clock running.
  c.notify(protocol::kInitialized, json::object{});
  auto id = c.send_request(protocol::kImportLibrary, json::object{{"name", "TestLibrary"}});
  std::vector<protocol::Message> got;
  try {
    while (auto m = c.read_message(kBound)) got.push_back(std::move(*m));
  } catch (const client::RpcError&) {
    // closed: what arrived before is in `got`
  }
  bool timed_out = false;
  for (const auto& m : got) {
    if (m.kind == protocol::Message::Kind::error_response && m.id().is_null()) {
      EXPECT_EQ(error_code_of(m), protocol::kSessionTimeout) << describe_message(m);
      EXPECT_TRUE(icontains(error_message_of(m), "handshake_timeout")) << describe_message(m);
      timed_out = true;
    } else {
      // The early import, if the gateway read it, was refused: the session was not initialized.
      EXPECT_EQ(m.id(), id) << describe_message(m);
      EXPECT_EQ(error_code_of(m), protocol::kNotInitialized) << describe_message(m);
    }
  }
  EXPECT_TRUE(timed_out) << "no handshake_timeout error before the close";
  EXPECT_TRUE(c.wait_closed(kBound));
}

TEST_F(TimeoutTest, HandshakeTimeoutEndsOnceInitialized) {
  start(default_libraries(), options("handshake_timeout = \"2s\"\nread_timeout = \"60s\"\n"));
  client::RpcClient c = connect();
  c.initialize();
  std::this_thread::sleep_for(3500ms);  // well past handshake_timeout
  auto imported = c.import_library("TestLibrary");
  RJG_ASSERT_OK(imported);
  auto echo = c.run_keyword(imported.result->as_object().at("token").as_string(), "Echo", json::array{1});
  RJG_ASSERT_KEYWORD_OK(echo);
}

// A message that stalls half-read is dropped with its connection, and the connection's workers end.
class ReadTimeoutTest : public TimeoutTest, public ::testing::WithParamInterface<std::pair<std::string, std::string>> {};

TEST_P(ReadTimeoutTest, StalledMessageEndsTheConnection) {
  start(default_libraries(), options("read_timeout = \"1s\"\nhandshake_timeout = \"60s\"\n"));
  auto [c, token] = session();
  pid_t pid = remember_pid(worker_pid(c, token));
  c.send_raw(GetParam().second);
  expect_error_then_close(c, protocol::kSessionTimeout, "", "read_timeout");
  EXPECT_TRUE(log_has_line({"127.0.0.1:", "read_timeout"}));
  EXPECT_TRUE(wait_pid_gone(pid, kBound)) << "worker pid " << pid << " outlived its stalled connection";
  expect_next_session_works();
}

INSTANTIATE_TEST_SUITE_P(
    Stalls, ReadTimeoutTest,
    ::testing::Values(std::pair<std::string, std::string>{"HalfHeader", "Content-Len"},
                      std::pair<std::string, std::string>{"HeaderWithoutBlankLine", "Content-Length: 50\r\n"},
                      std::pair<std::string, std::string>{"BodyShorterThanAnnounced",
                                                          "Content-Length: 200\r\n\r\n{\"jsonrpc\":\"2.0\",\"id\":"},
                      std::pair<std::string, std::string>{"EmptyBodyAnnounced", "Content-Length: 10\r\n\r\n"}),
    [](const auto& info) { return info.param.first; });

// A client that trickles a frame a byte at a time is dropped: read_timeout runs from the frame's first
// byte, not from the last one.
TEST_F(TimeoutTest, TricklingClientIsDropped) {
  start(default_libraries(), options("read_timeout = \"1s\"\nhandshake_timeout = \"60s\"\n"));
  RawConn raw(gateway().port());
  ASSERT_TRUE(raw.initialize());
  // A frame that takes minutes to trickle out; the gateway must drop it long before it is complete.
  std::string body = R"({"jsonrpc":"2.0","id":"slow","method":"robot/shutdown","params":{}})";
  body += std::string(4000, ' ');
  const std::string bytes = frame(body);
  std::optional<protocol::Message> answer;
  auto deadline = Clock::now() + 30s;
  for (std::size_t i = 0; i < bytes.size() && Clock::now() < deadline; ++i) {
    if (!raw.send(std::string_view(bytes).substr(i, 1))) break;
    answer = raw.next_message(50ms);
    if (answer || raw.closed()) break;
  }
  if (!answer) answer = raw.next_message(kBound);
  ASSERT_TRUE(answer) << "the trickling client was neither answered nor dropped";
  ASSERT_EQ(answer->kind, protocol::Message::Kind::error_response) << describe_message(*answer);
  EXPECT_EQ(error_code_of(*answer), protocol::kSessionTimeout) << describe_message(*answer);
  EXPECT_TRUE(icontains(error_message_of(*answer), "read_timeout")) << describe_message(*answer);
  EXPECT_TRUE(raw.wait_closed(kBound));
  expect_next_session_works();
}

// Bytes that never form a header line (a TLS ClientHello to a plain-TCP port) end the connection at
// read_timeout at the latest, with an error frame.
TEST_F(TimeoutTest, BinaryGarbageWithoutLineEndsIsDropped) {
  start(default_libraries(), options("read_timeout = \"1s\"\nhandshake_timeout = \"60s\"\n"));
  client::RpcClient c = connect();
  c.send_raw(std::string_view("\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03\x00\x01\x02\x03", 15));
  auto m = c.read_message(kBound);
  ASSERT_TRUE(m);
  ASSERT_EQ(m->kind, protocol::Message::Kind::error_response) << describe_message(*m);
  EXPECT_TRUE(error_code_of(*m) == protocol::kParseError || error_code_of(*m) == protocol::kSessionTimeout)
      << describe_message(*m);
  EXPECT_TRUE(c.wait_closed(kBound));
  expect_next_session_works();
}

TEST_F(TimeoutTest, ReadTimeoutDoesNotCountBetweenMessages) {
  start(default_libraries(), options("read_timeout = \"1s\"\n"));
  auto [c, token] = session();
  std::this_thread::sleep_for(2500ms);  // no frame half-read: nothing to time out
  auto echo = c.run_keyword(token, "Echo", json::array{"quiet is fine"});
  RJG_ASSERT_KEYWORD_OK(echo);
  // Nor while a keyword runs longer than read_timeout.
  auto slept = c.run_keyword(token, "Sleep", json::array{2.5});
  RJG_ASSERT_KEYWORD_OK(slept);
}

TEST_F(TimeoutTest, IdleTimeoutClosesAQuietSession) {
  start(default_libraries(), options("idle_timeout = \"2s\"\nread_timeout = \"60s\"\n"));
  auto [c, token] = session();
  pid_t pid = remember_pid(worker_pid(c, token));
  expect_error_then_close(c, protocol::kSessionTimeout, "", "idle_timeout");
  EXPECT_TRUE(log_has_line({"127.0.0.1:", "idle_timeout"}));
  EXPECT_TRUE(wait_pid_gone(pid, kBound)) << "worker pid " << pid << " outlived its idle connection";
  expect_next_session_works();
}

TEST_F(TimeoutTest, IdleTimeoutDoesNotCountARunningKeyword) {
  start(default_libraries(), options("idle_timeout = \"2s\"\nread_timeout = \"60s\"\n"));
  auto [c, token] = session();
  auto slept = c.run_keyword(token, "Sleep", json::array{5});
  RJG_ASSERT_KEYWORD_OK(slept);
  EXPECT_EQ(keyword_value(slept), json::value(5.0));
  // Idle from the answer on (the watchdog, which slept through the keyword, is woken for it).
  expect_error_then_close(c, protocol::kSessionTimeout, "", "idle_timeout");
}

// ------------------------------------------------------------------------------------------------
// Load: max_sessions, max_sessions_per_client, allow_from.

class AdmissionTest : public HardeningTest {
 protected:
  // A served session, retrying while the gateway still counts a connection that just closed (the
  // harness's own readiness probe, for one): what a client does with "retry later".
  std::pair<client::RpcClient, std::string> session_when_free() {
    auto deadline = Clock::now() + kBound;
    for (;;) {
      try {
        return session();
      } catch (const client::RpcCallError& e) {
        if (e.code() != protocol::kAtCapacity || Clock::now() >= deadline) throw;
      }
      std::this_thread::sleep_for(100ms);
    }
  }

  // Connects until a session is served (a closed session is forgotten asynchronously); bounded.
  bool eventually_served() {
    return eventually(
        [&] {
          try {
            auto [c, token] = session();
            auto echo = c.run_keyword(token, "Echo", json::array{1});
            return echo.ok() && !echo.keyword_error();
          } catch (const std::exception&) {
            return false;
          }
        },
        kBound, 200ms);
  }
};

TEST_F(AdmissionTest, MaxSessionsRefusesWithAnErrorNamingTheLimit) {
  start(default_libraries(), options("read_timeout = \"60s\"\nmax_sessions = 2\n"));
  auto [c1, t1] = session_when_free();
  auto [c2, t2] = session_when_free();
  {
    client::RpcClient c3 = connect();
    expect_error_then_close(c3, protocol::kAtCapacity, "", "max_sessions");
  }
  {
    // A client that sends robot/initialize at once (as the real one does) gets the same answer.
    client::RpcClient c4 = connect();
    try {
      c4.initialize();
      FAIL() << "a third session was served with max_sessions = 2";
    } catch (const client::RpcCallError& e) {
      EXPECT_EQ(e.code(), protocol::kAtCapacity) << e.what();
      EXPECT_TRUE(contains(e.server_message(), "max_sessions")) << e.what();
    } catch (const client::RpcError& e) {
      FAIL() << "refused without the error frame: " << e.what();
    }
  }
  EXPECT_TRUE(log_has_line({"refused", "127.0.0.1", "max_sessions"}));
  // The served sessions are unaffected, and a freed slot serves again.
  RJG_ASSERT_KEYWORD_OK(c1.run_keyword(t1, "Echo", json::array{1}));
  c2.close();
  EXPECT_TRUE(eventually_served()) << "no session served after one of the two closed";
}

TEST_F(AdmissionTest, MaxSessionsPerClientCountsEachSourceAddress) {
  start(default_libraries(), options("read_timeout = \"60s\"\nmax_sessions_per_client = 1\n"));
  auto [c1, t1] = session_when_free();
  {
    client::RpcClient c2 = connect();
    expect_error_then_close(c2, protocol::kAtCapacity, "", "max_sessions_per_client");
  }
  // Another source address has its own allowance.
  RawConn other(gateway().port(), "127.0.0.2");
  EXPECT_TRUE(other.initialize()) << "127.0.0.2 was refused although it had no session";
  auto imported = other.call("imp", protocol::kImportLibrary, json::object{{"name", "TestLibrary"}});
  EXPECT_EQ(imported.kind, protocol::Message::Kind::response) << describe_message(imported);
  RJG_ASSERT_KEYWORD_OK(c1.run_keyword(t1, "Echo", json::array{1}));
  c1.close();
  EXPECT_TRUE(eventually_served()) << "127.0.0.1 not served again after its session closed";
}

TEST_F(AdmissionTest, AddressOutsideAllowFromIsClosedWithoutAWord) {
  start(default_libraries(), options("read_timeout = \"60s\"\nallow_from = [\"10.0.0.0/8\"]\n"));
  for (int i = 0; i < 3; ++i) {
    RawConn raw(gateway().port());
    raw.send(protocol::encode_frame(protocol::make_request("1", protocol::kInitialize, json::object{})));
    EXPECT_TRUE(raw.wait_closed(kBound)) << "a connection from outside allow_from was kept open";
    EXPECT_EQ(raw.received(), "") << "a refused address was told something";
  }
  EXPECT_TRUE(log_has_line({"127.0.0.1", "allow_from"}));
  EXPECT_TRUE(gateway().running());
}

TEST_F(AdmissionTest, AddressInsideAllowFromIsServed) {
  start(default_libraries(), options("read_timeout = \"60s\"\nallow_from = [\"127.0.0.0/8\"]\n"));
  expect_next_session_works();
}

TEST_F(AdmissionTest, AllowFromSingleAddress) {
  start(default_libraries(), options("read_timeout = \"60s\"\nallow_from = [\"10.0.0.0/8\", \"127.0.0.2/32\"]\n"));
  RawConn refused(gateway().port(), "127.0.0.1");
  EXPECT_TRUE(refused.wait_closed(kBound));
  EXPECT_EQ(refused.received(), "");
  RawConn allowed(gateway().port(), "127.0.0.2");
  EXPECT_TRUE(allowed.initialize()) << "127.0.0.2 is in allow_from but was not served";
}

// ------------------------------------------------------------------------------------------------
// Isolation of descriptors: a worker runs library code, so it must hold nothing of the gateway but its
// own stdin, stdout and stderr: no client connection (it could read or write another session's
// traffic, and the gateway's close of that connection would not reach the client while the worker
// lives), no listening socket, no pipe of another worker.

std::string describe_targets(const std::map<int, std::string>& fds) {
  std::string out;
  for (const auto& [fd, target] : fds) out += fmt::format(" {}->{}", fd, target);
  return out;
}

class DescriptorTest : public HardeningTest {};

TEST_F(DescriptorTest, WorkersHoldNoSocketAndNoPipeOfAnotherWorker) {
  start(default_libraries(), options());
  // A connection that is open while the workers start, and a first worker.
  client::RpcClient bystander = connect();
  auto [a, token_a] = session("TestLibrary");
  pid_t pid_a = remember_pid(worker_pid(a, token_a));
  auto [b, token_b] = session("SecondLibrary");
  pid_t pid_b = remember_pid(worker_pid(b, token_b));

  std::set<std::string> pipes_of_a;
  for (const auto& [fd, target] : fd_targets(pid_a))
    if (target.rfind("pipe:", 0) == 0) pipes_of_a.insert(target);
  for (pid_t pid : {pid_a, pid_b}) {
    auto fds = fd_targets(pid);
    for (const auto& [fd, target] : fds) {
      EXPECT_TRUE(target.rfind("socket:", 0) != 0)
          << "worker pid " << pid << " holds a socket of the gateway (fd " << fd << "):" << describe_targets(fds);
      if (pid == pid_b) {
        EXPECT_EQ(pipes_of_a.count(target), 0u)
            << "worker pid " << pid_b << " holds a pipe of worker " << pid_a << " (fd " << fd
            << "):" << describe_targets(fds);
      }
    }
  }
}

// The visible effect: a connection the gateway closes must close for the client, whatever workers
// started while it was open are still running.
TEST_F(DescriptorTest, GatewayClosesReachTheClientWhileOtherWorkersLive) {
  start(default_libraries(), options());
  client::RpcClient doomed = connect();
  doomed.initialize();
  // Another session's worker starts while `doomed` is open, and stays alive throughout.
  auto [other, token] = session();
  pid_t pid = remember_pid(worker_pid(other, token));
  doomed.send_raw("Content-Length: -1\r\n\r\n");
  expect_error_then_close(doomed, protocol::kParseError, "Framing error: ", "Content-Length");
  EXPECT_FALSE(pid_gone(pid));
  RJG_EXPECT_KEYWORD_OK(other.run_keyword(token, "Echo", json::array{1}));
}

TEST_F(DescriptorTest, HandshakeTimeoutReachesTheClientWhileOtherWorkersLive) {
  start(default_libraries(), options("handshake_timeout = \"2s\"\nread_timeout = \"60s\"\n"));
  client::RpcClient silent = connect();
  auto [other, token] = session();
  remember_pid(worker_pid(other, token));
  expect_error_then_close(silent, protocol::kSessionTimeout, "", "handshake_timeout");
  RJG_EXPECT_KEYWORD_OK(other.run_keyword(token, "Echo", json::array{1}));
}

TEST_F(DescriptorTest, ExitReachesTheClientWhileOtherWorkersLive) {
  start(default_libraries(), options());
  client::RpcClient leaving = connect();
  leaving.initialize();
  auto [other, token] = session();
  remember_pid(worker_pid(other, token));
  RJG_ASSERT_OK(leaving.shutdown());
  leaving.exit();
  EXPECT_TRUE(leaving.wait_closed(kBound)) << "robot/exit did not close the connection while another worker lived";
}

// ------------------------------------------------------------------------------------------------
// Back-pressure: a client that does not read stalls only its own worker; memory stays bounded.

class BackPressureTest : public HardeningTest {};

TEST_F(BackPressureTest, NonReadingClientStallsOnlyItsOwnWorker) {
  GatewayOptions o = options();
  o.log_level = "info";
  start(default_libraries(), o);
  const std::uint64_t baseline = rss_bytes(gateway().pid());
  auto [flooded, token] = session();
  remember_pid(worker_pid(flooded, token));
  // About 100 MB of logs that this client does not read for a while (25 MB under a sanitizer).
  const std::int64_t kLogs = volume_under_test(100000);
  auto id = flooded.send_request(protocol::kRunKeyword,
                                 json::object{{"library_token", token},
                                              {"name", "Log Messages"},
                                              {"args", json::array{kLogs, 1000}},
                                              {"kwargs", json::object{}}});
  std::uint64_t peak = 0;
  for (int round = 0; round < 5; ++round) {
    auto [c, t] = session(round % 2 ? "SecondLibrary" : "TestLibrary");
    for (int i = 0; i < 10; ++i) {
      auto echo = c.run_keyword(t, "Echo", json::array{i});
      RJG_ASSERT_KEYWORD_OK(echo);
    }
    peak = std::max(peak, rss_bytes(gateway().pid()));
  }
  EXPECT_LT(peak, baseline + (256u << 20)) << "gateway RSS grew from " << baseline << " to " << peak
                                           << " bytes while a client did not read";
  // Now it reads: every log arrives, in order, before the one answer.
  std::int64_t next = 0;
  bool in_order = true;
  auto reply = flooded.wait_reply(
      id,
      [&](const protocol::Message& m) {
        if (m.method() != protocol::kLog) return;
        auto text = m.params().as_object().at("message").as_string();
        if (!text.starts_with(fmt::format("{}:", next))) in_order = false;
        ++next;
        if (next % 1000 == 0) peak = std::max(peak, rss_bytes(gateway().pid()));
      },
      // A deadline, not a measure: ThreadSanitizer's gateway and worker, with three other tests on two
      // cores, once took more than 120 s for the 100 MB.
      300s);
  RJG_ASSERT_KEYWORD_OK(reply);
  EXPECT_EQ(keyword_value(reply), json::value(kLogs));
  EXPECT_EQ(next, kLogs);
  EXPECT_TRUE(in_order);
  EXPECT_LT(peak, baseline + (256u << 20)) << "peak RSS " << peak;
  RecordProperty("baseline_rss", std::to_string(baseline));
  RecordProperty("peak_rss", std::to_string(peak));
  std::cout << fmt::format("back-pressure: gateway RSS baseline {} KiB, peak {} KiB while {} logs of {} bytes waited",
                           baseline / 1024, peak / 1024, kLogs, 1000)
            << std::endl;
}

// ------------------------------------------------------------------------------------------------
// Pickles: per-library pickle = "allow" | "data-only" (default) | "deny". A refused value answers the
// call with -32017 naming the class or opcode, the offset and the configuration key; nothing of it
// reaches the other side.

struct Pickle {
  std::string name;
  std::string hex;
  std::vector<std::string> names;  // the message names at least one of these (class or opcode)
  std::size_t offset;              // byte offset of the first opcode that imports or calls (pickletools.genops)
};

// Each of these runs `touch /tmp/rjg-pwned` when unpickled by CPython 3.11 (checked when crafted),
// except EXT1 (needs a registered extension) and NEWOBJ (builds a Popen without running it).
std::vector<Pickle> malicious_pickles() {
  return {
      // pickle.dumps(R(os.system, (cmd,)), protocol=4): STACK_GLOBAL posix system + REDUCE.
      {"StackGlobalPosixSystem",
       "8004952f000000000000008c05706f736978948c0673797374656d9493948c14746f756368202f746d702f726a672d70776e656494859452"
       "942e",
       {"posix.system"}, 28},
      {"StackGlobalPosixSystemProtocol5",
       "8005952f000000000000008c05706f736978948c0673797374656d9493948c14746f756368202f746d702f726a672d70776e656494859452"
       "942e",
       {"posix.system"}, 28},
      // builtins.eval("__import__('os').system(cmd)") via REDUCE.
      {"BuiltinsEvalReduce",
       "8004954b000000000000008c086275696c74696e73948c046576616c9493948c2f5f5f696d706f72745f5f28276f7327292e7379737465"
       "6d2827746f756368202f746d702f726a672d70776e6564272994859452942e",
       {"builtins.eval"}, 29},
      // GLOBAL 'os system' (the text opcode) inside a protocol 4 pickle.
      {"GlobalOsSystem", "8004636f730a73797374656d0a8c14746f756368202f746d702f726a672d70776e656485522e",
       {"os.system", "GLOBAL"}, 2},
      // A protocol 0 pickle: cos\nsystem\n(V...\ntR.
      {"Protocol0OsSystem", "636f730a73797374656d0a2856746f756368202f746d702f726a672d70776e65640a74522e",
       {"GLOBAL", "PROTO", "os.system"}, 0},
      // getattr(__import__('os'), 'system')(cmd).
      {"GetattrChain",
       "80048c086275696c74696e738c076765746174747293288c086275696c74696e738c0a5f5f696d706f72745f5f938c026f7385528c0673"
       "797374656d74528c14746f756368202f746d702f726a672d70776e656485522e",
       {"builtins.getattr"}, 21},
      // getattr(datetime's sys.modules.get('os'), 'system')(cmd): a dotted name behind an allowed module.
      {"DottedNameBehindAnAllowedModule",
       "80048c086275696c74696e738c076765746174747293288c086461746574696d658c0f7379732e6d6f64756c65732e676574938c026f73"
       "85528c0673797374656d74528c14746f756368202f746d702f726a672d70776e656485522e",
       {"builtins.getattr", "datetime.sys"}, 21},
      // The same with GLOBAL opcodes and collections._sys.
      {"DottedGlobalBehindCollections",
       "8004636275696c74696e730a676574617474720a2863636f6c6c656374696f6e730a5f7379732e6d6f64756c65732e6765740a8c026f73"
       "85528c0673797374656d74528c14746f756368202f746d702f726a672d70776e656485522e",
       {"builtins.getattr", "GLOBAL", "collections._sys"}, 2},
      // INST 'os system' with MARKed arguments.
      {"InstOsSystem", "8004288c14746f756368202f746d702f726a672d70776e6564696f730a73797374656d0a2e",
       {"INST", "os.system"}, 25},
      // OBJ on STACK_GLOBAL posix system.
      {"ObjPosixSystem", "8004288c05706f7369788c0673797374656d938c14746f756368202f746d702f726a672d70776e65646f2e",
       {"posix.system", "OBJ"}, 18},
      // The callable stored in the memo and fetched back before REDUCE.
      {"MemoizedCallable",
       "80048c05706f7369788c0673797374656d93943068008c14746f756368202f746d702f726a672d70776e656485522e",
       {"posix.system"}, 17},
      // Hidden as the second element of a list.
      {"NestedInAList",
       "80049535000000000000005d94284b018c05706f736978948c0673797374656d9493948c14746f756368202f746d702f726a672d70776e"
       "65649485945294652e",
       {"posix.system"}, 33},
      {"NewobjSubprocessPopen", "80048c0a73756270726f636573738c05506f70656e938c047472756585812e",
       {"subprocess.Popen", "NEWOBJ"}, 21},
      {"Ext1Registry", "8004820129522e", {"EXT1"}, 2},
  };
}

// Benign Robot values as the reference client sent them (tests/data/traces/reference-edge-cases.jsonl).
std::vector<std::pair<std::string, std::string>> benign_pickles() {
  return {
      {"DotDict",
       "80049544000000000000008c13726f626f742e7574696c732e646f7464696374948c07446f7444696374949394295294288c0161944b01"
       "8c01629468022952948c0163945d94284b014b026573752e"},
      {"list", "8004950b000000000000005d94284b014b024b03652e"},
      {"dict", "8004950a000000000000007d948c0161944b01732e"},
      {"tuple", "80049509000000000000004b018c01789486942e"},
      {"set", "80049509000000000000008f94284b014b02902e"},
      {"bytes", "800495060000000000000043020001942e"},
      {"datetime",
       "8004952a000000000000008c086461746574696d65948c086461746574696d65949394430a07e9010203040500000094859452942e"},
      {"Decimal",
       "80049522000000000000008c07646563696d616c948c07446563696d616c9493948c04312e353094859452942e"},
  };
}

json::value pickled(std::string_view hex) { return json::object{{"__pickled__", hex}}; }

std::string upper(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  return s;
}

// Real pickles of Robot values kept in the repository (tests/data/pickles/benign, see tests/data/README.md).
fs::path benign_pickle_dir() { return fs::path(RJG_TEST_DATA_DIR) / "pickles" / "benign"; }

std::string file_hex(const fs::path& path) {
  std::string bytes = read_file(path), hex;
  for (unsigned char b : bytes) hex += fmt::format("{:02x}", b);
  return hex;
}

class PickleTest : public HardeningTest {
 protected:
  // TestLibrary gets `policy`; SecondLibrary keeps the default.
  void start_with_policy(std::string_view policy) {
    auto libraries = default_libraries();
    libraries[0].extra_toml = fmt::format("pickle = \"{}\"\n", policy);
    start(libraries, options());
  }

  std::int64_t echo_count(client::RpcClient& c, const std::string& token) {
    auto r = c.run_keyword(token, "Echo Count");
    if (!r.ok() || r.keyword_error()) throw std::runtime_error("Echo Count failed: " + describe(r));
    return keyword_value(r).to_number<std::int64_t>();
  }

  // The call is refused (PickleRefused, the keyword's failure); the message names one of `names`, a byte offset (when
  // with_offset), the pickle key and the library; the worker never ran Echo.
  void expect_refused(client::RpcClient& c, const std::string& token, json::array args, const std::vector<std::string>& names,
                      bool with_offset = true, std::optional<std::size_t> offset = std::nullopt) {
    auto before = echo_count(c, token);
    auto reply = c.run_keyword(token, "Echo", std::move(args));
    RJG_ASSERT_KEYWORD_FAILURE(reply, protocol::kPickleRefused);
    const auto msg = reply.failure_message();
    bool named = names.empty();
    for (const auto& n : names) named = named || contains(msg, n);
    EXPECT_TRUE(named) << "the refusal names none of the expected classes or opcodes: " << msg;
    if (with_offset) {
      EXPECT_TRUE(std::regex_search(msg, std::regex(R"(byte \d+)"))) << "no offset: " << msg;
    }
    if (offset) {
      EXPECT_TRUE(std::regex_search(msg, std::regex(fmt::format(R"(\b{}\b)", *offset))))
          << "the offset " << *offset << " of the refused opcode is not named: " << msg;
    }
    EXPECT_TRUE(std::regex_search(msg, std::regex(R"(pickle\s*=)"))) << "no configuration key: " << msg;
    EXPECT_TRUE(contains(msg, "TestLibrary")) << "no library name: " << msg;
    EXPECT_EQ(echo_count(c, token), before) << "the refused call reached the worker";
  }

  void expect_echoed(client::RpcClient& c, const std::string& token, const json::value& value) {
    auto reply = c.run_keyword(token, "Echo", json::array{value});
    RJG_ASSERT_KEYWORD_OK(reply);
    EXPECT_EQ(keyword_value(reply), value);
  }
};

TEST_F(PickleTest, DataOnlyRefusesEveryRouteToCode) {
  start_with_policy("data-only");
  auto [c, token] = session();
  for (const auto& p : malicious_pickles()) {
    SCOPED_TRACE(p.name);
    expect_refused(c, token, json::array{pickled(p.hex)}, p.names, true, p.offset);
    // Nested anywhere: in a list, in a dict, as a keyword argument.
    expect_refused(c, token, json::array{json::array{1, json::object{{"deep", pickled(p.hex)}}}}, p.names);
  }
  // As a named argument.
  auto before = echo_count(c, token);
  auto kw = c.run_keyword(token, "Echo", {}, json::object{{"value", pickled(malicious_pickles()[0].hex)}});
  RJG_EXPECT_KEYWORD_FAILURE(kw, protocol::kPickleRefused);
  EXPECT_EQ(echo_count(c, token), before);
  expect_next_session_works();
}

TEST_F(PickleTest, DataOnlyIsTheDefault) {
  start(default_libraries(), options());
  auto [c, token] = session();
  expect_refused(c, token, json::array{pickled(malicious_pickles()[0].hex)}, {"posix.system"});
  expect_echoed(c, token, pickled(benign_pickles()[0].second));
}

// The policy is per library; [defaults] sets it for libraries that do not set their own.
TEST_F(PickleTest, PolicyIsPerLibraryWithDefaults) {
  auto libraries = default_libraries();
  libraries[0].extra_toml = "pickle = \"allow\"\n";
  start(libraries, options("read_timeout = \"60s\"\n\n[defaults]\npickle = \"deny\"\n"));
  auto [allowing, t1] = session("TestLibrary");
  expect_echoed(allowing, t1, pickled(malicious_pickles()[0].hex));
  auto [denying, t2] = session("SecondLibrary");
  auto reply = denying.run_keyword(t2, "Echo", json::array{pickled(benign_pickles()[1].second)});
  RJG_ASSERT_KEYWORD_FAILURE(reply, protocol::kPickleRefused);
  EXPECT_TRUE(contains(reply.failure_message(), "SecondLibrary")) << reply.failure_message();
  EXPECT_TRUE(contains(reply.failure_message(), "deny")) << reply.failure_message();
}

TEST_F(PickleTest, DataOnlyRefusesMalformedPickledObjects) {
  start_with_policy("data-only");
  auto [c, token] = session();
  const std::string benign = benign_pickles()[1].second;
  // Extra members next to "__pickled__" (a Python peer may unpickle it anyway).
  expect_refused(c, token, json::array{json::object{{"__pickled__", benign}, {"extra", 1}}}, {"__pickled__"}, false);
  // Uppercase hex, odd length, not a string.
  expect_refused(c, token, json::array{pickled(upper(benign))}, {"hex"}, false);
  expect_refused(c, token, json::array{pickled(benign + "0")}, {"hex"}, false);
  expect_refused(c, token, json::array{json::object{{"__pickled__", 42}}}, {"string"}, false);
  // A benign pickle with bytes after STOP, or cut short.
  expect_refused(c, token, json::array{pickled(benign + "00")}, {"STOP"});
  expect_refused(c, token, json::array{pickled(benign.substr(0, benign.size() - 4))}, {});
}

// Two "__pickled__" members in one object: the last wins for the check and for what the worker gets.
TEST_F(PickleTest, SecondPickledKeyCannotSmuggleAPickle) {
  start_with_policy("data-only");
  auto [c, token] = session();
  const std::string evil = malicious_pickles()[0].hex;
  const std::string good = benign_pickles()[1].second;

  auto before = echo_count(c, token);
  c.send_raw(frame(run_keyword_body(R"("good-last")", token, "Echo",
                                    fmt::format(R"([{{"__pickled__":"{}","__pickled__":"{}"}}])", evil, good))));
  auto admitted = c.wait_reply("good-last");
  RJG_ASSERT_KEYWORD_OK(admitted);
  EXPECT_EQ(keyword_value(admitted), pickled(good)) << "the worker did not get exactly the checked value";
  EXPECT_EQ(echo_count(c, token), before + 1);

  c.send_raw(frame(run_keyword_body(R"("evil-last")", token, "Echo",
                                    fmt::format(R"([{{"__pickled__":"{}","__pickled__":"{}"}}])", good, evil))));
  auto refused = c.wait_reply("evil-last");
  RJG_ASSERT_KEYWORD_FAILURE(refused, protocol::kPickleRefused);
  EXPECT_TRUE(contains(refused.failure_message(), "posix.system")) << refused.failure_message();
  EXPECT_EQ(echo_count(c, token), before + 1) << "the smuggled pickle reached the worker";
}

TEST_F(PickleTest, DataOnlyAdmitsBenignRobotValues) {
  start_with_policy("data-only");
  auto [c, token] = session();
  for (const auto& [name, hex] : benign_pickles()) {
    SCOPED_TRACE(name);
    expect_echoed(c, token, pickled(hex));
  }
  // Every benign pickle in tests/data/pickles/benign (Python 3.8, 3.12, 3.13; protocols 4 and 5).
  auto dir = benign_pickle_dir();
  ASSERT_TRUE(fs::is_directory(dir)) << "fixture missing: benign pickles folder " << dir.string();
  std::size_t files = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".pkl") continue;
    SCOPED_TRACE(entry.path().filename().string());
    expect_echoed(c, token, pickled(file_hex(entry.path())));
    ++files;
  }
  EXPECT_GT(files, 0u) << "fixture missing: no .pkl file in " << dir.string();
  RecordProperty("benign_pickle_files", std::to_string(files));
}

TEST_F(PickleTest, DenyRefusesEvenBenignValues) {
  start_with_policy("deny");
  auto [c, token] = session();
  for (const auto& [name, hex] : benign_pickles()) {
    SCOPED_TRACE(name);
    expect_refused(c, token, json::array{pickled(hex)}, {"deny"}, false);
  }
  // Plain JSON is still fine.
  expect_echoed(c, token, json::parse(R"({"a":[1,"two",null]})"));
}

TEST_F(PickleTest, AllowPassesMaliciousBytesThroughUntouched) {
  start_with_policy("allow");
  auto [c, token] = session();
  for (const auto& p : malicious_pickles()) {
    SCOPED_TRACE(p.name);
    expect_echoed(c, token, pickled(p.hex));
  }
  // Even malformed look-alikes travel unchanged.
  expect_echoed(c, token, pickled(upper(malicious_pickles()[0].hex)));
  expect_echoed(c, token, json::object{{"__pickled__", "zz"}, {"extra", true}});
}

// Worker to client: a keyword that returns a malicious pickle (the client only ever sent a string).
TEST_F(PickleTest, DataOnlyRefusesAMaliciousResult) {
  start_with_policy("data-only");
  auto [c, token] = session();
  for (const auto& p : malicious_pickles()) {
    SCOPED_TRACE(p.name);
    const std::string text = json::serialize(json::array{1, pickled(p.hex)});
    auto reply = c.run_keyword(token, "Return Json", json::array{json::string(text)});
    RJG_ASSERT_KEYWORD_FAILURE(reply, protocol::kPickleRefused);
    const auto msg = reply.failure_message();
    bool named = false;
    for (const auto& n : p.names) named = named || contains(msg, n);
    EXPECT_TRUE(named) << msg;
    EXPECT_TRUE(contains(msg, "result")) << "the refusal does not say it was the result: " << msg;
    EXPECT_TRUE(std::regex_search(msg, std::regex(R"(pickle\s*=)"))) << msg;
  }
  // A benign result passes, and the worker is still in service.
  const std::string good = json::serialize(pickled(benign_pickles()[0].second));
  auto ok = c.run_keyword(token, "Return Json", json::array{json::string(good)});
  RJG_ASSERT_KEYWORD_OK(ok);
  EXPECT_EQ(keyword_value(ok), json::parse(good));
}

TEST_F(PickleTest, DenyRefusesAPickledResult) {
  start_with_policy("deny");
  auto [c, token] = session();
  const std::string good = json::serialize(pickled(benign_pickles()[1].second));
  auto reply = c.run_keyword(token, "Return Json", json::array{json::string(good)});
  RJG_ASSERT_KEYWORD_FAILURE(reply, protocol::kPickleRefused);
  EXPECT_TRUE(contains(reply.failure_message(), "deny")) << reply.failure_message();
}

TEST_F(PickleTest, AllowPassesAMaliciousResultThrough) {
  start_with_policy("allow");
  auto [c, token] = session();
  const std::string text = json::serialize(pickled(malicious_pickles()[0].hex));
  auto reply = c.run_keyword(token, "Return Json", json::array{json::string(text)});
  RJG_ASSERT_KEYWORD_OK(reply);
  EXPECT_EQ(keyword_value(reply), json::parse(text));
}

// Import arguments are values sent to the library too.
TEST_F(PickleTest, DataOnlyRefusesAMaliciousImportArgument) {
  start_with_policy("data-only");
  client::RpcClient c = connect();
  c.initialize();
  auto reply = c.import_library("TestLibrary", json::array{pickled(malicious_pickles()[0].hex)});
  RJG_ASSERT_ERROR(reply, protocol::kPickleRefused);
  EXPECT_TRUE(contains(reply.error_message(), "posix.system")) << reply.error_message();
  auto kw = c.import_library("TestLibrary", {}, json::object{{"x", pickled(malicious_pickles()[2].hex)}});
  RJG_ASSERT_ERROR(kw, protocol::kPickleRefused);
  // The session goes on.
  auto ok = c.import_library("TestLibrary", json::array{pickled(benign_pickles()[1].second)});
  RJG_ASSERT_OK(ok);
}

// One client behind a balancer is one client, whichever family its PROXY header names: TCP6 ::ffff:10.20.9.9
// is 10.20.9.9 for max_sessions_per_client, as it already was for allow_from. (Before, the key was the
// address's text, and one client held 4 sessions of a cap of 2.)
TEST(ProxyClientKeyTest, AnIpv4MappedSourceCountsAsItsIpv4Address) {
  ::signal(SIGPIPE, SIG_IGN);
  GatewayOptions options;
  options.extra_gateway_toml = "proxy_protocol_from = [\"127.0.0.1/32\"]\nmax_sessions_per_client = 2\n";
  GatewayProcess gateway({test_library("TestLibrary")}, options);
  gateway.start();
  auto proxied = [&](std::string_view header) {
    client::RpcClient c = gateway.connect();
    c.send_raw(header);
    return c;
  };
  std::vector<client::RpcClient> open;
  open.push_back(proxied("PROXY TCP4 10.20.9.9 127.0.0.1 40001 8271\r\n"));
  open.push_back(proxied("PROXY TCP6 ::ffff:10.20.9.9 ::1 40002 8271\r\n"));
  for (auto& c : open) EXPECT_FALSE(c.initialize().empty());
  for (std::string_view header : {"PROXY TCP6 ::ffff:10.20.9.9 ::1 40003 8271\r\n",
                                  "PROXY TCP4 10.20.9.9 127.0.0.1 40004 8271\r\n"}) {
    SCOPED_TRACE(header);
    client::RpcClient extra = proxied(header);
    auto refused = extra.read_message(10s);
    ASSERT_TRUE(refused.has_value()) << gateway.log_tail();
    EXPECT_EQ(refused->error_code(), protocol::kAtCapacity);
    EXPECT_TRUE(contains(refused->error_message(), "10.20.9.9")) << refused->error_message();
    EXPECT_TRUE(contains(refused->error_message(), "max_sessions_per_client")) << refused->error_message();
    EXPECT_TRUE(extra.wait_closed(10s));
  }
  // Another client behind the same balancer is not affected.
  client::RpcClient other = proxied("PROXY TCP6 ::ffff:10.20.9.10 ::1 40005 8271\r\n");
  EXPECT_FALSE(other.initialize().empty());
  EXPECT_EQ(count_of(gateway.log(), "refused a connection from 10.20.9.9:"), 2u) << gateway.log_tail();
}

}  // namespace
}  // namespace rjg::test
