// The gateway's other fronts, end to end: --stdio (JsonRpcRemote's stdio:COMMAND: one session on the
// gateway's own stdin/stdout, spoken here by hand over pipes) and unix: listeners (a local stream socket,
// its file's mode, peer credentials, stale and foreign files, per-uid session limits).
// Nothing is timed: every wait is a bound for a broken gateway.
#include "tests/integration/gateway_test.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <fcntl.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

extern char** environ;

namespace rjg::test {
namespace {

bool exited_zero(int status) { return WIFEXITED(status) && WEXITSTATUS(status) == 0; }

// ---------------------------------------------------------------------------------------------
// Frames, parsed strictly: "Header: value\r\n"... "\r\n", Content-Length bytes of body, each body one
// JSON-RPC 2.0 object. Returns how many bytes form complete frames; `error` is set on anything else.

std::size_t parse_frames(std::string_view bytes, std::vector<json::value>& out, std::string& error) {
  std::size_t pos = 0;
  while (pos < bytes.size()) {
    const auto end = bytes.find("\r\n\r\n", pos);
    if (end == std::string_view::npos) {
      if (bytes.size() - pos > 4096) error = fmt::format("at byte {}: no end of headers within 4096 bytes", pos);
      return pos;  // an incomplete header block
    }
    std::optional<std::size_t> length;
    std::string_view headers = bytes.substr(pos, end - pos);
    while (!headers.empty()) {
      const auto nl = headers.find("\r\n");
      const std::string_view line = headers.substr(0, nl);
      headers = nl == std::string_view::npos ? std::string_view() : headers.substr(nl + 2);
      const auto colon = line.find(": ");
      if (colon == std::string_view::npos || colon == 0) {
        error = fmt::format("at byte {}: not a header line: '{}'", pos, line);
        return pos;
      }
      if (line.substr(0, colon) == "Content-Length") {
        const auto value = line.substr(colon + 2);
        if (value.empty() || value.size() > 9 || value.find_first_not_of("0123456789") != std::string_view::npos) {
          error = fmt::format("at byte {}: bad Content-Length '{}'", pos, value);
          return pos;
        }
        length = std::stoul(std::string(value));
      }
    }
    if (!length) {
      error = fmt::format("at byte {}: a header block without Content-Length", pos);
      return pos;
    }
    const std::size_t body_at = end + 4;
    if (bytes.size() - body_at < *length) return pos;  // an incomplete body
    const std::string_view body = bytes.substr(body_at, *length);
    boost::system::error_code ec;
    json::value value = json::parse(body, ec);
    if (ec || !value.is_object()) {
      error = fmt::format("at byte {}: the body is not a JSON object ({}): '{}'", body_at, ec ? ec.message() : "",
                          body);
      return pos;
    }
    const auto* version = value.as_object().if_contains("jsonrpc");
    if (!version || !version->is_string() || version->get_string() != "2.0") {
      error = fmt::format("at byte {}: not a JSON-RPC 2.0 message: '{}'", body_at, body);
      return pos;
    }
    out.push_back(std::move(value));
    pos = body_at + *length;
  }
  return pos;
}

// The whole of a stream must be complete frames: not a byte more.
::testing::AssertionResult only_frames(std::string_view bytes, std::size_t* count = nullptr) {
  std::vector<json::value> frames;
  std::string error;
  const auto consumed = parse_frames(bytes, frames, error);
  if (count) *count = frames.size();
  if (!error.empty()) return ::testing::AssertionFailure() << error << "\nstream:\n" << bytes;
  if (consumed != bytes.size())
    return ::testing::AssertionFailure() << (bytes.size() - consumed) << " bytes after the last complete frame: '"
                                         << bytes.substr(consumed) << "'";
  return ::testing::AssertionSuccess();
}

std::string frame_json(const json::value& message) {
  const std::string body = json::serialize(message);
  return fmt::format("Content-Length: {}\r\n\r\n{}", body.size(), body);
}

bool is_method(const json::value& message, std::string_view method) {
  const auto* m = message.as_object().if_contains("method");
  return m && m->is_string() && m->get_string() == method;
}

// ---------------------------------------------------------------------------------------------
// A protocol peer over descriptors: the test writes to `out`, reads from `in` (the same socket, or the
// two pipes of a child). Every byte read is kept, so that the whole stream can be checked at the end.

class FramedPeer {
 public:
  FramedPeer(int out, int in) : out_(out), in_(in), shared_(out == in) {}
  ~FramedPeer() {
    if (!shared_ && out_ >= 0) ::close(out_);
    ::close(in_);
  }
  FramedPeer(const FramedPeer&) = delete;
  FramedPeer& operator=(const FramedPeer&) = delete;

  void send_raw(std::string_view bytes) {
    while (!bytes.empty()) {
      const auto n = ::write(out_, bytes.data(), bytes.size());
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) throw std::runtime_error(fmt::format("write: {}", std::strerror(errno)));
      bytes.remove_prefix(static_cast<std::size_t>(n));
    }
  }
  void send(const json::value& message) { send_raw(frame_json(message)); }
  void notify(std::string_view method, json::object params = {}) {
    send(json::object{{"jsonrpc", "2.0"}, {"method", method}, {"params", std::move(params)}});
  }

  // Sends a request and reads until its answer; the robot/log notifications that arrive before it go to
  // `logs`, in order. Throws if no answer comes within the bound or the stream ends or breaks.
  json::object request(std::string_view method, json::object params, std::vector<json::object>* logs = nullptr,
                       std::chrono::milliseconds bound = 30s) {
    const std::int64_t id = next_id_++;
    send(json::object{{"jsonrpc", "2.0"}, {"id", id}, {"method", method}, {"params", std::move(params)}});
    const auto deadline = Clock::now() + bound;
    for (;;) {
      auto message = next(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
      if (!message)
        throw std::runtime_error(fmt::format("no answer to {} (id {}): {}", method, id, eof_ ? "end of stream" : "timed out"));
      const auto& object = message->as_object();
      if (object.contains("method")) {
        if (is_method(*message, protocol::kLog) && logs) logs->push_back(object.at("params").as_object());
        else strays_.push_back(*message);
        continue;
      }
      const auto* got = object.if_contains("id");
      if (got && got->is_int64() && got->get_int64() == id) return object;
      strays_.push_back(*message);
    }
  }

  // robot/initialize (as JsonRpcRemote sends it) and robot/initialized; returns the InitializeResult.
  json::object initialize() {
    auto reply = request(protocol::kInitialize,
                         json::object{{"capabilities", json::object{}},
                                      {"client_info", json::object{{"name", "fronts-test"}, {"version", "0"}}}});
    notify(protocol::kInitialized);
    return result_of(reply);
  }
  std::string import_library(const std::string& name) {
    auto reply = request(protocol::kImportLibrary,
                         json::object{{"name", name}, {"args", json::array{}}, {"kw_args", json::object{}}});
    return std::string(result_of(reply).at("token").as_string());
  }
  // The keyword's RunKeywordResult (throws on a JSON-RPC error).
  json::object run_keyword(const std::string& token, const std::string& name, json::array args = {},
                           std::vector<json::object>* logs = nullptr) {
    auto reply = request(protocol::kRunKeyword, json::object{{"library_token", token},
                                                             {"name", name},
                                                             {"args", std::move(args)},
                                                             {"kwargs", json::object{}}},
                         logs);
    return result_of(reply);
  }

  // The next message, or nullopt on timeout or end of stream (eof() tells which).
  std::optional<json::value> next(std::chrono::milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    for (;;) {
      if (!parsed_.empty()) {
        auto m = std::move(parsed_.front());
        parsed_.pop_front();
        return m;
      }
      if (eof_) return std::nullopt;
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) return std::nullopt;
      read_some(left);
    }
  }

  // Reads until the other end closes (bounded): true on end of stream. What arrives is kept.
  bool read_to_eof(std::chrono::milliseconds bound) {
    const auto deadline = Clock::now() + bound;
    while (!eof_) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) return false;
      read_some(left);
    }
    return true;
  }

  // Closes what the test writes to (stdin of a child; the write half of a socket).
  void close_output() {
    if (out_ < 0) return;
    if (shared_) {
      ::shutdown(out_, SHUT_WR);
    } else {
      ::close(out_);
    }
    out_ = -1;
  }

  bool eof() const { return eof_; }
  const std::string& all_bytes() const { return all_; }
  const std::vector<json::value>& strays() const { return strays_; }

  static json::object result_of(const json::object& reply) {
    const auto* result = reply.if_contains("result");
    if (!result || !result->is_object()) throw std::runtime_error("not a successful answer: " + json::serialize(reply));
    return result->as_object();
  }

 private:
  void read_some(std::chrono::milliseconds timeout) {
    pollfd p{in_, POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(std::max<long long>(1, timeout.count())));
    if (ready < 0 && errno != EINTR) throw std::runtime_error(fmt::format("poll: {}", std::strerror(errno)));
    if (ready <= 0) return;
    char buffer[65536];
    const auto n = ::read(in_, buffer, sizeof buffer);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) return;
      if (errno == ECONNRESET) {
        eof_ = true;
        return;
      }
      throw std::runtime_error(fmt::format("read: {}", std::strerror(errno)));
    }
    if (n == 0) {
      eof_ = true;
      return;
    }
    all_.append(buffer, static_cast<std::size_t>(n));
    pending_.append(buffer, static_cast<std::size_t>(n));
    std::vector<json::value> frames;
    std::string error;
    const auto consumed = parse_frames(pending_, frames, error);
    if (!error.empty()) throw std::runtime_error("bad bytes from the gateway: " + error);
    pending_.erase(0, consumed);
    for (auto& f : frames) parsed_.push_back(std::move(f));
  }

  int out_ = -1;
  int in_ = -1;
  bool shared_ = false;  // one socket: closing the output shuts its write half down
  bool eof_ = false;
  std::int64_t next_id_ = 1;
  std::string all_, pending_;
  std::deque<json::value> parsed_;
  std::vector<json::value> strays_;
};

// ---------------------------------------------------------------------------------------------
// The gateway as JsonRpcRemote's stdio:COMMAND runs it: stdin, stdout and stderr are pipes. stderr is
// drained by a thread (a full pipe must not stop the gateway) and kept for the checks.

class StdioGateway {
 public:
  explicit StdioGateway(std::vector<std::string> argv) {
    int in[2], out[2], err[2];
    if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0)
      throw std::runtime_error(fmt::format("pipe2: {}", std::strerror(errno)));
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error(fmt::format("fork: {}", std::strerror(errno)));
    if (pid_ == 0) {
      // dup2 clears close-on-exec on 0, 1 and 2; every other pipe end closes at exec.
      ::dup2(in[0], 0);
      ::dup2(out[1], 1);
      ::dup2(err[1], 2);
      rlimit no_core{0, 0};
      ::setrlimit(RLIMIT_CORE, &no_core);
      ::signal(SIGPIPE, SIG_DFL);
      ::execve(args[0], args.data(), environ);
      static const char msg[] = "exec failed\n";
      (void)!::write(2, msg, sizeof msg - 1);
      ::_exit(127);
    }
    // The gateway's end of stdin stays open here too, so that its file flags can be seen.
    gateway_stdin_ = in[0];
    ::close(out[1]);
    ::close(err[1]);
    peer_ = std::make_unique<FramedPeer>(in[1], out[0]);
    err_fd_ = err[0];
    drain_ = std::thread([this] { drain_stderr(); });
  }

  ~StdioGateway() {
    if (!status_) {
      ::kill(pid_, SIGKILL);
      int st = 0;
      while (::waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
      }
    }
    stop_ = true;
    drain_.join();
    ::close(err_fd_);
    ::close(gateway_stdin_);
  }

  // Whether the open file that is the gateway's stdin is non-blocking (a flag it shares with its client).
  bool stdin_nonblocking() const { return (::fcntl(gateway_stdin_, F_GETFL) & O_NONBLOCK) != 0; }

  FramedPeer& peer() { return *peer_; }
  pid_t pid() const { return pid_; }

  // The raw wait status once it has exited within the bound; nullopt otherwise.
  std::optional<int> wait(std::chrono::milliseconds bound) {
    eventually(
        [&] {
          if (status_) return true;
          int st = 0;
          if (::waitpid(pid_, &st, WNOHANG) == pid_) status_ = st;
          return status_.has_value();
        },
        bound, 10ms);
    return status_;
  }

  std::string err() {
    std::lock_guard lock(mutex_);
    return err_;
  }
  // stderr up to its end (bounded): everything the gateway wrote there.
  std::string err_to_eof(std::chrono::milliseconds bound) {
    eventually([&] { return err_eof_.load(); }, bound, 10ms);
    return err();
  }

 private:
  void drain_stderr() {
    while (!stop_) {
      pollfd p{err_fd_, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      char buffer[65536];
      const auto n = ::read(err_fd_, buffer, sizeof buffer);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      std::lock_guard lock(mutex_);
      err_.append(buffer, static_cast<std::size_t>(n));
    }
    err_eof_ = true;
  }

  pid_t pid_ = -1;
  std::optional<int> status_;
  std::unique_ptr<FramedPeer> peer_;
  int err_fd_ = -1;
  int gateway_stdin_ = -1;
  std::thread drain_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> err_eof_{false};
  std::mutex mutex_;
  std::string err_;
};

// A connected AF_UNIX stream socket (throws naming the path otherwise).
int connect_unix(const fs::path& path) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error(fmt::format("socket: {}", std::strerror(errno)));
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, path.c_str(), sizeof address.sun_path - 1);
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
    const int e = errno;
    ::close(fd);
    throw std::runtime_error(fmt::format("connect {}: {}", path.string(), std::strerror(e)));
  }
  return fd;
}

// An AF_UNIX stream socket bound to `path`; listening if asked.
int bind_unix(const fs::path& path, bool listen) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error(fmt::format("socket: {}", std::strerror(errno)));
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, path.c_str(), sizeof address.sun_path - 1);
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0 || (listen && ::listen(fd, 8) != 0)) {
    const int e = errno;
    ::close(fd);
    throw std::runtime_error(fmt::format("bind/listen {}: {}", path.string(), std::strerror(e)));
  }
  return fd;
}

std::string log_messages_of(const std::vector<json::object>& logs) {
  std::string out;
  for (const auto& l : logs) out += json::serialize(l) + "\n";
  return out;
}

// The robot/log notifications of "Log Messages" (count, default size 10): '<i>:xxxxxxxxxx', in order.
void expect_numbered_logs(const std::vector<json::object>& logs, int count) {
  ASSERT_EQ(logs.size(), static_cast<std::size_t>(count)) << log_messages_of(logs);
  for (int i = 0; i < count; ++i) {
    const auto* message = logs[static_cast<std::size_t>(i)].if_contains("message");
    ASSERT_TRUE(message && message->is_string()) << log_messages_of(logs);
    EXPECT_EQ(message->get_string(), fmt::format("{}:xxxxxxxxxx", i)) << log_messages_of(logs);
  }
}

// ---------------------------------------------------------------------------------------------

class StdioTest : public ::testing::Test {
 protected:
  void SetUp() override { ::signal(SIGPIPE, SIG_IGN); }

  void TearDown() override {
    if (gateway_ && HasFailure())
      std::cerr << "---- gateway config ----\n" << read_file(config_path()) << "---- gateway stderr ----\n"
                << gateway_->err() << "---- end of gateway stderr ----\n";
    gateway_.reset();
    for (pid_t pid : pids_)
      if (!pid_gone(pid)) ::kill(pid, SIGKILL);
  }

  fs::path config_path() const { return dir_.path() / "gateway.toml"; }

  // --stdio with LibA and LibB served by the test worker; `listen` as given (else one TCP port).
  StdioGateway& start(GatewayOptions options = {}, std::uint16_t port = 0) {
    write_file(config_path(),
               make_config(port ? port : free_port(), {test_library("LibA"), test_library("LibB")}, options));
    gateway_ = std::make_unique<StdioGateway>(
        std::vector<std::string>{gateway_binary(), "--stdio", "--config", config_path().string()});
    return *gateway_;
  }

  pid_t remember(pid_t pid) {
    pids_.push_back(pid);
    return pid;
  }

  // A session on both libraries, a keyword with logs on each; returns both workers' pids.
  std::pair<pid_t, pid_t> session_on_both(FramedPeer& peer) {
    auto init = peer.initialize();
    EXPECT_TRUE(init.contains("capabilities")) << json::serialize(init);
    const auto a = peer.import_library("LibA");
    const auto b = peer.import_library("LibB");
    EXPECT_NE(a, b);

    EXPECT_EQ(peer.run_keyword(a, "Echo", json::array{"to A"}).at("result"), json::value("to A"));
    EXPECT_EQ(peer.run_keyword(b, "Echo", json::array{json::object{{"to", "B"}}}).at("result"),
              json::value(json::object{{"to", "B"}}));
    EXPECT_EQ(peer.run_keyword(a, "Get Env", json::array{"RJG_TEST_LIBRARY"}).at("result"), json::value("LibA"));
    EXPECT_EQ(peer.run_keyword(b, "Get Env", json::array{"RJG_TEST_LIBRARY"}).at("result"), json::value("LibB"));

    // Logs arrive before the answer, in the order the worker sent them.
    std::vector<json::object> logs_a, logs_b;
    EXPECT_EQ(peer.run_keyword(a, "Log Messages", json::array{5}, &logs_a).at("result"), json::value(5));
    expect_numbered_logs(logs_a, 5);
    EXPECT_EQ(peer.run_keyword(b, "Log Messages", json::array{3}, &logs_b).at("result"), json::value(3));
    expect_numbered_logs(logs_b, 3);

    const pid_t pa = remember(static_cast<pid_t>(as_int(peer.run_keyword(a, "Get Pid").at("result"))));
    const pid_t pb = remember(static_cast<pid_t>(as_int(peer.run_keyword(b, "Get Pid").at("result"))));
    EXPECT_NE(pa, pb);
    EXPECT_FALSE(pid_gone(pa));
    EXPECT_FALSE(pid_gone(pb));
    EXPECT_TRUE(peer.strays().empty()) << "messages nobody asked for: " << json::serialize(json::value_from(peer.strays()));
    return {pa, pb};
  }

  // The gateway exits 0, its workers are gone, and its stdout held nothing but frames, exactly
  // `expected_frames` of them.
  void expect_clean_end(StdioGateway& gw, std::initializer_list<pid_t> workers, std::size_t expected_frames) {
    auto status = gw.wait(30s);
    ASSERT_TRUE(status.has_value()) << "the gateway did not exit";
    EXPECT_TRUE(exited_zero(*status)) << "the gateway ended with " << describe_status(*status);
    for (pid_t pid : workers) EXPECT_TRUE(wait_pid_gone(pid, 20s)) << "worker pid " << pid << " outlived the gateway";
    ASSERT_TRUE(gw.peer().read_to_eof(10s)) << "stdout did not reach its end after the gateway exited";
    std::size_t frames = 0;
    EXPECT_TRUE(only_frames(gw.peer().all_bytes(), &frames));
    EXPECT_EQ(frames, expected_frames) << gw.peer().all_bytes();
  }

  TempDir dir_{"rjg-stdio"};
  std::unique_ptr<StdioGateway> gateway_;
  std::vector<pid_t> pids_;
};

// initialize, 2 imports, 4 Echo/Get Env, 2 Log Messages, 2 Get Pid: 11 answers; 5 + 3 logs.
constexpr std::size_t kSessionFrames = 11 + 8;

TEST_F(StdioTest, ServesTwoLibrariesAndStopsEverythingWhenStdinCloses) {
  auto& gw = start();
  auto [pa, pb] = session_on_both(gw.peer());
  ASSERT_FALSE(HasFailure());
  EXPECT_TRUE(gw.stdin_nonblocking()) << "the session reads stdin without blocking";

  gw.peer().close_output();  // the client ends: stdin closes
  expect_clean_end(gw, {pa, pb}, kSessionFrames);
  // A flag of the file the client shares (a terminal, when run by hand): put back as it was.
  EXPECT_FALSE(gw.stdin_nonblocking()) << "the gateway left its stdin non-blocking";
  const auto err = gw.err_to_eof(10s);
  EXPECT_TRUE(contains(err, "serving one session on stdin/stdout")) << err;
  EXPECT_TRUE(contains(err, "the stdio session ended: shutting down")) << err;
}

TEST_F(StdioTest, RobotExitEndsTheGatewayWithStdinStillOpen) {
  auto& gw = start();
  auto [pa, pb] = session_on_both(gw.peer());
  ASSERT_FALSE(HasFailure());

  gw.peer().notify(protocol::kExit);  // stdin stays open
  expect_clean_end(gw, {pa, pb}, kSessionFrames);
  const auto err = gw.err_to_eof(10s);
  EXPECT_TRUE(contains(err, "robot/exit")) << err;
}

// [gateway] listen is ignored with --stdio: neither its TCP port nor its Unix socket is opened.
TEST_F(StdioTest, OpensNoListener) {
  const std::uint16_t port = free_port();
  const fs::path socket_path = dir_.path() / "gw.sock";
  GatewayOptions options;
  options.listen = {"tcp://127.0.0.1:{port}", "unix:" + socket_path.string()};
  auto& gw = start(options, port);
  auto& peer = gw.peer();
  // Once initialize is answered, start-up (where listeners are opened) is long over.
  peer.initialize();
  const auto token = peer.import_library("LibA");
  const pid_t worker = remember(static_cast<pid_t>(as_int(peer.run_keyword(token, "Get Pid").at("result"))));

  EXPECT_FALSE(can_connect(port)) << "something listens on port " << port << ", which only the config file names";
  std::error_code ec;
  EXPECT_FALSE(fs::exists(fs::symlink_status(socket_path, ec))) << socket_path << " was created";
  EXPECT_FALSE(contains(gw.err(), "listening on")) << gw.err();

  peer.close_output();
  expect_clean_end(gw, {worker}, 3);
  EXPECT_FALSE(can_connect(port));
}

TEST_F(StdioTest, BadConfigurationExitsNonZeroWithTheProblemOnStderrAndNothingOnStdout) {
  // A value the loader refuses.
  GatewayOptions options;
  options.extra_gateway_toml = "unix_mode = \"0400\"\n";
  {
    auto& gw = start(options);
    auto status = gw.wait(30s);
    ASSERT_TRUE(status.has_value()) << "the gateway did not exit";
    EXPECT_FALSE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << describe_status(*status);
    EXPECT_TRUE(WIFEXITED(*status)) << describe_status(*status);
    ASSERT_TRUE(gw.peer().read_to_eof(10s));
    EXPECT_EQ(gw.peer().all_bytes(), "");
    const auto err = gw.err_to_eof(10s);
    EXPECT_TRUE(contains(err, "unix_mode")) << err;
    EXPECT_TRUE(contains(err, "refusing to start")) << err;
  }
  // No file at all.
  {
    const std::string missing = (dir_.path() / "missing.toml").string();
    StdioGateway gw({gateway_binary(), "--stdio", "--config", missing});
    auto status = gw.wait(30s);
    ASSERT_TRUE(status.has_value()) << "the gateway did not exit";
    EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) != 0) << describe_status(*status);
    ASSERT_TRUE(gw.peer().read_to_eof(10s));
    EXPECT_EQ(gw.peer().all_bytes(), "");
    const auto err = gw.err_to_eof(10s);
    EXPECT_TRUE(contains(err, missing)) << err;
  }
}

// ---------------------------------------------------------------------------------------------

class UnixSocketTest : public GatewayTest {
 protected:
  // Listens on dir/gw.sock and (for start()'s readiness check) on a TCP port.
  GatewayOptions unix_options(std::string extra_toml = "") const {
    GatewayOptions options;
    options.listen = {"unix:" + socket_path().string(), "tcp://127.0.0.1:{port}"};
    options.extra_gateway_toml = std::move(extra_toml);
    return options;
  }
  fs::path socket_path() const { return dir_.path() / "gw.sock"; }

  std::unique_ptr<FramedPeer> connect_peer() {
    const int fd = connect_unix(socket_path());
    return std::make_unique<FramedPeer>(fd, fd);
  }

  TempDir dir_{"rjg-unix"};
};

TEST_F(UnixSocketTest, ServesASessionOnAFileOfTheConfiguredModeAndRemovesItAtExit) {
  start(default_libraries(), unix_options("unix_mode = \"0600\""));
  struct stat st{};
  ASSERT_EQ(::lstat(socket_path().c_str(), &st), 0) << socket_path() << ": " << std::strerror(errno);
  EXPECT_TRUE(S_ISSOCK(st.st_mode)) << std::oct << st.st_mode;
  EXPECT_EQ(st.st_mode & 07777, 0600u) << std::oct << (st.st_mode & 07777);
  EXPECT_EQ(st.st_uid, ::getuid());

  {
    auto peer = connect_peer();
    peer->initialize();
    const auto token = peer->import_library("TestLibrary");
    std::vector<json::object> logs;
    EXPECT_EQ(peer->run_keyword(token, "Log Messages", json::array{4}, &logs).at("result"), json::value(4));
    expect_numbered_logs(logs, 4);
    EXPECT_EQ(peer->run_keyword(token, "Echo", json::array{"over unix"}).at("result"), json::value("over unix"));
    remember_pid(static_cast<pid_t>(as_int(peer->run_keyword(token, "Get Pid").at("result"))));

    // Who connected, from the kernel's peer credentials: this process.
    const auto who = fmt::format("(unix:{} uid {} pid {}): connected", socket_path().string(), ::getuid(), ::getpid());
    EXPECT_TRUE(log_eventually(who)) << "no line with '" << who << "'";
    peer->notify(protocol::kExit);
    EXPECT_TRUE(peer->read_to_eof(20s)) << "the session did not end after robot/exit";
    EXPECT_TRUE(only_frames(peer->all_bytes()));
  }

  auto status = gateway().stop(30s);
  ASSERT_TRUE(status.has_value()) << "the gateway did not exit after SIGTERM";
  EXPECT_TRUE(exited_zero(*status)) << describe_status(*status);
  std::error_code ec;
  EXPECT_FALSE(fs::exists(fs::symlink_status(socket_path(), ec))) << socket_path() << " is still there";
  for (pid_t pid : pids_) EXPECT_TRUE(wait_pid_gone(pid, 20s)) << "worker pid " << pid << " outlived the gateway";
}

// The socket file appears at its path with its final mode: it is bound and chmod'ed in a private directory and
// linked into place, so at the path nothing changes after it appears (no IN_ATTRIB: a chmod there would be a
// window in which a writer of the directory could swap the file), and the private directory is gone.
TEST_F(UnixSocketTest, TheSocketFileAppearsWithItsModeAndNothingIsLeftBeside) {
  const int watch = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  ASSERT_GE(watch, 0) << std::strerror(errno);
  ASSERT_GE(::inotify_add_watch(watch, dir_.path().c_str(), IN_CREATE | IN_ATTRIB | IN_MOVED_TO), 0) << std::strerror(errno);
  start(default_libraries(), unix_options("unix_mode = \"0660\""));
  struct stat st{};
  ASSERT_EQ(::lstat(socket_path().c_str(), &st), 0) << socket_path() << ": " << std::strerror(errno);
  EXPECT_EQ(st.st_mode & 07777, 0660u) << std::oct << (st.st_mode & 07777);
  std::vector<std::string> events;  // "CREATE gw.sock", "ATTRIB gw.sock", ...
  alignas(inotify_event) char buffer[16 * 1024];
  for (ssize_t n; (n = ::read(watch, buffer, sizeof buffer)) > 0;)
    for (char* p = buffer; p < buffer + n;) {
      const auto* e = reinterpret_cast<const inotify_event*>(p);
      const std::string name = e->len ? e->name : "";
      if (e->mask & IN_CREATE) events.push_back("CREATE " + name);
      if (e->mask & IN_ATTRIB) events.push_back("ATTRIB " + name);
      if (e->mask & IN_MOVED_TO) events.push_back("MOVED_TO " + name);
      p += sizeof(inotify_event) + e->len;
    }
  ::close(watch);
  const auto ours = std::count_if(events.begin(), events.end(), [](const std::string& e) { return e.ends_with(" gw.sock"); });
  EXPECT_EQ(ours, 1) << fmt::format("{}", fmt::join(events, ", "));
  EXPECT_NE(std::find(events.begin(), events.end(), "CREATE gw.sock"), events.end()) << fmt::format("{}", fmt::join(events, ", "));
  for (const auto& entry : fs::directory_iterator(dir_.path()))
    EXPECT_EQ(entry.path().filename(), "gw.sock") << "left beside the socket: " << entry.path();
  auto peer = connect_peer();
  EXPECT_TRUE(peer->initialize().contains("capabilities"));
}

// A socket file that nothing listens on (a gateway that did not exit cleanly) is replaced.
TEST_F(UnixSocketTest, ReplacesAStaleSocketFile) {
  ::close(bind_unix(socket_path(), false));
  struct stat before{};
  ASSERT_EQ(::lstat(socket_path().c_str(), &before), 0);
  ASSERT_TRUE(S_ISSOCK(before.st_mode));

  start(default_libraries(), unix_options());
  EXPECT_TRUE(log_eventually("replacing a stale socket file")) << "no word of the stale file";
  auto peer = connect_peer();
  const auto init = peer->initialize();
  EXPECT_TRUE(init.contains("capabilities")) << json::serialize(init);
  const auto token = peer->import_library("SecondLibrary");
  EXPECT_EQ(peer->run_keyword(token, "Echo", json::array{1}).at("result"), json::value(1));
  remember_pid(static_cast<pid_t>(as_int(peer->run_keyword(token, "Get Pid").at("result"))));
}

TEST_F(UnixSocketTest, RefusesToStartOnAPathThatIsARegularFile) {
  write_file(socket_path(), "not a socket\n");
  GatewayProcess gw(default_libraries(), unix_options());
  try {
    gw.start();
    ADD_FAILURE() << "the gateway started on a path that is a regular file\n" << gw.log();
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_TRUE(contains(what, "exited during start-up")) << what;
    EXPECT_TRUE(contains(what, "cannot listen on unix:" + socket_path().string())) << what;
    EXPECT_TRUE(contains(what, "is not a socket")) << what;
  }
  auto status = gw.wait(1s);
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) != 0) << describe_status(*status);
  EXPECT_EQ(read_file(socket_path()), "not a socket\n") << "the file was changed";
}

TEST_F(UnixSocketTest, RefusesToStartOnAPathAnotherProcessListensOn) {
  const int listener = bind_unix(socket_path(), true);
  struct stat before{};
  ASSERT_EQ(::lstat(socket_path().c_str(), &before), 0);
  GatewayProcess gw(default_libraries(), unix_options());
  try {
    gw.start();
    ADD_FAILURE() << "the gateway started on a path another process listens on\n" << gw.log();
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_TRUE(contains(what, "cannot listen on unix:" + socket_path().string())) << what;
    EXPECT_TRUE(contains(what, "another process listens")) << what;
  }
  auto status = gw.wait(1s);
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) != 0) << describe_status(*status);
  // The other process's socket is untouched: the same file, still taking connections.
  struct stat after{};
  ASSERT_EQ(::lstat(socket_path().c_str(), &after), 0) << "the socket file was removed";
  EXPECT_EQ(after.st_ino, before.st_ino) << "the socket file was replaced";
  EXPECT_NO_THROW(::close(connect_unix(socket_path())));
  ::close(listener);
}

// max_sessions_per_client counts a Unix socket's clients by uid: a third connection is closed unserved,
// and the first two go on working.
TEST_F(UnixSocketTest, MaxSessionsPerClientCountsByUid) {
  start(default_libraries(), unix_options("max_sessions_per_client = 2"));
  auto first = connect_peer();
  auto second = connect_peer();
  // Both sessions are counted once their initialize is answered.
  first->initialize();
  second->initialize();
  const auto t1 = first->import_library("TestLibrary");
  const auto t2 = second->import_library("TestLibrary");

  auto third = connect_peer();
  EXPECT_TRUE(third->read_to_eof(20s)) << "the third connection of the same uid was not closed";
  EXPECT_TRUE(only_frames(third->all_bytes()));
  EXPECT_TRUE(log_eventually(fmt::format("uid {} pid {}: This user (uid {}) already has 2 sessions", ::getuid(),
                                         ::getpid(), ::getuid())));
  EXPECT_TRUE(contains(gateway().log(), "max_sessions_per_client")) << gateway().log();

  EXPECT_EQ(first->run_keyword(t1, "Echo", json::array{"first"}).at("result"), json::value("first"));
  EXPECT_EQ(second->run_keyword(t2, "Echo", json::array{"second"}).at("result"), json::value("second"));
  remember_pid(static_cast<pid_t>(as_int(first->run_keyword(t1, "Get Pid").at("result"))));
  remember_pid(static_cast<pid_t>(as_int(second->run_keyword(t2, "Get Pid").at("result"))));

  // Once one ends, the uid may connect again.
  first->notify(protocol::kExit);
  ASSERT_TRUE(first->read_to_eof(20s));
  bool served = eventually(
      [&] {
        auto again = connect_peer();
        try {
          again->initialize();
          return true;
        } catch (const std::exception&) {
          return false;
        }
      },
      20s, 50ms);
  EXPECT_TRUE(served) << "no new session after one of the two ended";
}

}  // namespace
}  // namespace rjg::test
