// Transports: blocking reads into a FrameReader, one framed write per message. stdio for workers
// that the gateway spawns, TCP (a thread per connection) for running a library on its own.
#include "workers/sdk/sdk.hpp"

#include "common/protocol/framing.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <thread>

namespace rjg::sdk {
namespace {

bool write_all(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    bytes.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

// The only writer of a protocol stream: each frame goes out in one write loop under a lock, so a
// log sent from a library's own thread can never interleave with a response.
class FdOutput final : public Output {
 public:
  FdOutput(int fd, std::string_view peer) : fd_(fd), peer_(peer) {}

  void send(std::string_view json_text) override { write(encode_frame(json_text)); }
  void write_raw(std::string_view bytes) override { write(bytes); }

  bool broken() const {
    std::lock_guard lock(mutex_);
    return broken_;
  }

 private:
  void write(std::string_view bytes) {
    std::lock_guard lock(mutex_);
    if (broken_) return;
    if (!write_all(fd_, bytes)) {
      broken_ = true;
      log::warn("{}: cannot write to the peer: {}", peer_, std::strerror(errno));
    }
  }

  int fd_;
  std::string peer_;
  mutable std::mutex mutex_;
  bool broken_ = false;
};

int serve_stdio(const Library& library) {
  // Frames get a private copy of stdout; fd 1 itself then points at stderr, so a stray printf or
  // std::cout in library code lands in the log instead of corrupting the protocol stream.
  // CLOEXEC: processes the library spawns must not hold the stream open.
  std::fflush(stdout);
  const int protocol_fd = ::fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 3);
  if (protocol_fd < 0 || ::dup2(STDERR_FILENO, STDOUT_FILENO) < 0) {
    log::error("cannot set up the protocol stream on stdout: {}", std::strerror(errno));
    return 1;
  }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // stray prints show up in the log promptly
  log::debug("serving on stdio");
  const int rc = serve_stream(library, STDIN_FILENO, protocol_fd, "stdio");
  ::close(protocol_fd);
  return rc;
}

std::string describe(const sockaddr_storage& addr) {
  char host[INET6_ADDRSTRLEN] = "?";
  unsigned port = 0;
  if (addr.ss_family == AF_INET) {
    const auto& a = reinterpret_cast<const sockaddr_in&>(addr);
    ::inet_ntop(AF_INET, &a.sin_addr, host, sizeof host);
    port = ntohs(a.sin_port);
    return fmt::format("{}:{}", host, port);
  }
  const auto& a = reinterpret_cast<const sockaddr_in6&>(addr);
  ::inet_ntop(AF_INET6, &a.sin6_addr, host, sizeof host);
  port = ntohs(a.sin6_port);
  return fmt::format("[{}]:{}", host, port);
}

int listen_on(const std::string& host, std::uint16_t port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &found); rc != 0) {
    log::error("cannot resolve '{}': {}", host, ::gai_strerror(rc));
    return -1;
  }
  int listener = -1;
  std::string last_error;
  for (addrinfo* ai = found; ai && listener < 0; ai = ai->ai_next) {
    int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && ::listen(fd, SOMAXCONN) == 0) {
      listener = fd;
    } else {
      last_error = std::strerror(errno);
      ::close(fd);
    }
  }
  ::freeaddrinfo(found);
  if (listener < 0) log::error("cannot listen on {}:{}: {}", host, port, last_error);
  return listener;
}

int serve_tcp(const Library& library, const ServeOptions& options) {
  const int listener = listen_on(options.host, options.port);
  if (listener < 0) return 1;
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  ::getsockname(listener, reinterpret_cast<sockaddr*>(&bound), &len);
  // Printed whatever the log level: scripts wait for this line to learn the real port.
  log::write(log::Level::info, fmt::format("listening on {}", describe(bound)));

  std::atomic<std::uint64_t> connections{0};
  for (;;) {
    sockaddr_storage peer{};
    socklen_t peer_len = sizeof peer;
    const int fd = ::accept4(listener, reinterpret_cast<sockaddr*>(&peer), &peer_len, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      // Out of descriptors or memory: back off instead of spinning.
      log::error("accept failed: {}", std::strerror(errno));
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      continue;
    }
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);  // small frames, latency matters
    const std::string name = fmt::format("connection {} from {}", ++connections, describe(peer));
    std::thread([&library, fd, name] {
      log::info("{}: opened", name);
      const int rc = serve_stream(library, fd, fd, name);
      ::close(fd);
      log::info("{}: closed{}", name, rc == 0 ? "" : " after an error");
    }).detach();
  }
}

std::optional<std::string> parse_endpoint(std::string_view text, ServeOptions& options) {
  const auto colon = text.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return fmt::format("--tcp expects HOST:PORT, got '{}'", text);
  std::string_view host = text.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  const std::string_view port = text.substr(colon + 1);
  unsigned value = 0;
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (ec != std::errc() || end != port.data() + port.size() || value > 65535)
    return fmt::format("--tcp: '{}' is not a port number (0 to 65535)", port);
  options.transport = ServeOptions::Transport::tcp;
  options.host = std::string(host);
  options.port = static_cast<std::uint16_t>(value);
  return std::nullopt;
}

}  // namespace

int serve_stream(const Library& library, int in_fd, int out_fd, std::string_view peer) {
  FdOutput out(out_fd, peer);
  Session session(library, out);
  FrameReader reader;
  std::string buffer(64 * 1024, '\0');
  for (;;) {
    const ssize_t n = ::read(in_fd, buffer.data(), buffer.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      log::error("{}: read failed: {}", peer, std::strerror(errno));
      return 1;
    }
    if (n == 0) {
      if (reader.buffered() > 0) log::warn("{}: end of input inside a frame ({} bytes dropped)", peer, reader.buffered());
      log::debug("{}: end of input", peer);
      return 0;
    }
    reader.feed(std::string_view(buffer.data(), static_cast<std::size_t>(n)));
    for (;;) {
      FrameReader::Result r = reader.next();
      if (r.kind == FrameReader::Result::Kind::need_more) break;
      if (r.kind == FrameReader::Result::Kind::error) {
        // The stream cannot be resynchronized after a framing fault: end the session.
        log::error("{}: framing error: {}", peer, r.error);
        return 1;
      }
      session.handle(r.body);
      if (session.done()) {
        log::debug("{}: robot/exit received", peer);
        return 0;
      }
      if (out.broken()) return 1;
    }
  }
}

std::optional<std::string> parse_serve_options(const std::vector<std::string>& args, ServeOptions& options) {
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string_view arg = args[i];
    std::optional<std::string_view> inline_value;
    if (auto eq = arg.find('='); arg.starts_with("--") && eq != std::string_view::npos) {
      inline_value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    }
    auto value = [&]() -> std::optional<std::string_view> {
      if (inline_value) return inline_value;
      if (i + 1 < args.size()) return std::string_view(args[++i]);
      return std::nullopt;
    };
    if (arg == "--stdio" && !inline_value) {
      options.transport = ServeOptions::Transport::stdio;
    } else if (arg == "--tcp") {
      auto v = value();
      if (!v) return std::string("--tcp needs HOST:PORT");
      if (auto error = parse_endpoint(*v, options)) return error;
    } else if (arg == "--log-level") {
      auto v = value();
      if (!v || !log::parse_level(*v, options.log_level))
        return std::string("--log-level needs one of debug, info, warn, error");
    } else {
      return fmt::format("unknown option '{}'", args[i]);
    }
  }
  return std::nullopt;
}

std::string serve_usage(std::string_view program) {
  return fmt::format(
      "usage: {} [--stdio | --tcp HOST:PORT] [--log-level debug|info|warn|error]\n"
      "  --stdio            speak the protocol on stdin/stdout (default; how the gateway runs workers)\n"
      "  --tcp HOST:PORT    listen for connections, one session each; port 0 picks a free port\n"
      "  --log-level LEVEL  diagnostics on stderr (default info)\n",
      program);
}

int serve(const Library& library, const ServeOptions& options) {
  log::set_program(library.name());
  log::set_level(options.log_level);
  // A vanished peer must show up as a failed write (EPIPE), not kill the process.
  std::signal(SIGPIPE, SIG_IGN);
  if (options.transport == ServeOptions::Transport::tcp) return serve_tcp(library, options);
  return serve_stdio(library);
}

int serve(const Library& library, int argc, char** argv) {
  const std::string_view program = argc > 0 ? argv[0] : "worker";
  std::vector<std::string> args(argv + (argc > 0 ? 1 : 0), argv + argc);
  for (const std::string& a : args) {
    if (a == "--help" || a == "-h") {
      std::fputs(serve_usage(program).c_str(), stdout);
      return 0;
    }
  }
  ServeOptions options;
  if (auto error = parse_serve_options(args, options)) {
    std::fprintf(stderr, "%s: %s\n%s", std::string(program).c_str(), error->c_str(), serve_usage(program).c_str());
    return 2;
  }
  return serve(library, options);
}

}  // namespace rjg::sdk
