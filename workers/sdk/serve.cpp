// Transports: one MessageStream per connection, read and written by one I/O thread; a connection's
// messages are handled one at a time, in order, on a thread of its own, because keyword bodies are
// blocking code (they sleep, wait for files, even _exit). stdio for workers that the gateway spawns,
// TCP for running a library on its own.
//
// While a keyword runs, its robot/log notifications go out live: Output::send hands the frame to the
// I/O thread and returns once it is written, so a log sent just before the process dies has reached
// the peer, and a chatty keyword waits for the peer instead of growing memory. Reading goes on
// meanwhile, up to a bound, so the next requests are ready when the keyword returns.
#include "workers/sdk/sdk.hpp"

#include "common/runtime/message_stream.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <future>
#include <mutex>
#include <thread>

namespace rjg::sdk {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using error_code = boost::system::error_code;
using Descriptor = asio::posix::stream_descriptor;
using FdPair = runtime::DuplexStream<Descriptor, Descriptor>;

// Read ahead of the running keyword: up to this many messages or bytes (one larger message is still
// taken when nothing else waits).
constexpr std::size_t kReadAheadMessages = 32;
constexpr std::size_t kReadAheadBytes = 8u << 20;
// Once the session has ended, what is still queued gets this long to be written.
constexpr auto kFlushTimeout = std::chrono::seconds(5);

// At the end of a connection: stop reading (without cancelling a write in progress: a library's own
// thread may be sending a log), or, when the peer does not take what is left, drop the stream (close).
void stop(tcp::socket& socket, bool close) {
  error_code ignored;
  close ? socket.close(ignored) : socket.shutdown(tcp::socket::shutdown_receive, ignored);
}
void stop(FdPair& fds, bool close) {
  error_code ignored;
  if (!close) return fds.in().cancel(ignored);
  fds.in().close(ignored);
  fds.out().close(ignored);
}

// One connection: its stream (on the I/O thread), its session (on a thread of its own) and the
// bounded queue of messages read ahead between them. It is the session's Output.
template <typename Stream>
class Connection final : public Output {
 public:
  Connection(const Library& library, std::string peer, Stream stream)
      : library_(library),
        peer_(std::move(peer)),
        // high_water 0: wait_for_room() returns once everything queued is written.
        stream_(runtime::StreamOptions{.high_water = 0}, std::move(stream)),
        executor_(stream_.get_executor()),
        room_(executor_),
        session_ended_(executor_),
        reader_done_(executor_),
        writer_done_(executor_) {}

  // On the I/O thread: serves the connection until the session ends; 0 when it ended normally
  // (robot/exit, end of input), 1 after a framing, read or write error.
  asio::awaitable<int> run() {
    asio::co_spawn(executor_, stream_.run_writer(), [this](std::exception_ptr e) {
      runtime::log_exceptions(peer_ + " writer")(e);
      writer_done_.set();
    });
    asio::co_spawn(executor_, read_loop(), [this](std::exception_ptr e) {
      runtime::log_exceptions(peer_ + " reader")(e);
      if (e) end_input(1);
      reader_done_.set();
    });
    std::thread session([this] { run_session(); });
    co_await session_ended_.wait();
    session.join();  // it has nothing left to do but return

    stopping_ = true;
    room_.set();
    stop(stream_.stream(), false);
    stream_.close_writer();
    if (!co_await stream_.wait_written(kFlushTimeout)) {
      log::warn("{}: the peer did not take the last {} bytes within {} s; dropped", peer_, stream_.queued_bytes(),
                std::chrono::seconds(kFlushTimeout).count());
      stop(stream_.stream(), true);
    }
    co_await writer_done_.wait();
    co_await reader_done_.wait();
    co_return exit_code_;
  }

  // True when run() returned the status a keyword asked the process to exit with.
  bool exit_requested() const { return exit_requested_; }

  // Output: from the session thread, or any thread of the library. Returns once written.
  void send(std::string_view json_text) override { transmit(std::string(json_text), true); }
  void write_raw(std::string_view bytes) override { transmit(std::string(bytes), false); }

 private:
  struct Item {
    protocol::Classified message;
    std::size_t bytes;
  };

  void transmit(std::string bytes, bool framed) {
    std::promise<bool> promise;
    std::future<bool> written = promise.get_future();
    asio::post(executor_, [this, bytes = std::move(bytes), framed, promise = std::move(promise)]() mutable {
      asio::co_spawn(executor_, write(std::move(bytes), framed, std::move(promise)), asio::detached);
    });
    if (!written.get() && !broken_.exchange(true)) log::warn("{}: cannot write to the peer", peer_);
  }

  // The promise is owned here, so the waiting thread never races its destruction.
  asio::awaitable<void> write(std::string bytes, bool framed, std::promise<bool> written) {
    if (framed) stream_.send(bytes);
    else stream_.send_raw(std::move(bytes));
    co_await stream_.wait_for_room();
    written.set_value(!stream_.write_failed());
  }

  // --- the I/O thread's reader

  asio::awaitable<void> read_loop() {
    while (!stopping_) {
      co_await wait_for_room();
      if (stopping_) break;
      runtime::Incoming in = co_await stream_.read();
      if (stopping_) break;
      switch (in.kind) {
        case runtime::Incoming::Kind::message: {
          const std::size_t bytes = in.message->text().size();
          deliver(Item{std::move(*in.message), bytes});
          break;
        }
        case runtime::Incoming::Kind::invalid:
          log::debug("{}: invalid message: {}", peer_, log::printable(in.body));
          deliver(Item{*in.problem, in.problem->message.size()});
          break;
        case runtime::Incoming::Kind::framing_error:
          // The stream cannot be resynchronized after a framing fault: the session ends.
          log::error("{}: framing error: {}", peer_, in.error);
          end_input(1);
          co_return;
        case runtime::Incoming::Kind::closed:
          if (!in.error.empty()) {
            log::error("{}: read failed: {}", peer_, in.error);
            end_input(1);
            co_return;
          }
          if (stream_.buffered() > 0)
            log::warn("{}: end of input inside a frame ({} bytes dropped)", peer_, stream_.buffered());
          log::debug("{}: end of input", peer_);
          end_input(0);
          co_return;
        case runtime::Incoming::Kind::cancelled:
          end_input(1);  // nothing but stopping cancels a read
          co_return;
      }
    }
  }

  // Until the read-ahead queue has room (or the connection is stopping).
  asio::awaitable<void> wait_for_room() {
    for (;;) {
      {
        std::lock_guard lock(mutex_);
        if (inbox_.empty() || (inbox_.size() < kReadAheadMessages && inbox_bytes_ < kReadAheadBytes)) co_return;
        reader_waiting_ = true;
      }
      // The session thread's room_.set() is posted to this thread, so it cannot come before reset().
      room_.reset();
      co_await room_.wait();
      if (stopping_) co_return;
    }
  }

  void deliver(Item item) {
    std::lock_guard lock(mutex_);
    inbox_bytes_ += item.bytes;
    inbox_.push_back(std::move(item));
    ready_.notify_one();
  }

  void end_input(int exit_code) {
    std::lock_guard lock(mutex_);
    if (!input_end_) input_end_ = exit_code;
    ready_.notify_one();
  }

  // --- the session thread

  void run_session() {
    int exit_code = 0;
    {
      Session session(library_, *this);
      for (;;) {
        std::optional<Item> item;
        {
          std::unique_lock lock(mutex_);
          ready_.wait(lock, [&] { return !inbox_.empty() || input_end_; });
          if (inbox_.empty()) {
            exit_code = *input_end_;
            break;
          }
          item.emplace(std::move(inbox_.front()));
          inbox_.pop_front();
          inbox_bytes_ -= item->bytes;
          if (std::exchange(reader_waiting_, false)) asio::post(executor_, [this] { room_.set(); });
        }
        session.handle(item->message);
        if (const auto& status = session.exit_status()) {
          // The answer is written (send() returns once it is): only now may the process go.
          log::info("{}: exiting with status {}, as the library asked after its last answer", peer_, *status);
          exit_code = *status;
          exit_requested_ = true;
          break;
        }
        if (session.done()) {
          log::debug("{}: robot/exit received", peer_);
          break;
        }
        if (broken_) {
          exit_code = 1;
          break;
        }
      }
    }  // library instances end here, on this thread
    asio::post(executor_, [this, exit_code] {
      exit_code_ = exit_code;
      session_ended_.set();
    });
  }

  const Library& library_;
  const std::string peer_;
  runtime::MessageStream<Stream> stream_;
  asio::any_io_executor executor_;

  // The read-ahead queue, between the I/O thread and the session thread.
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<Item> inbox_;
  std::size_t inbox_bytes_ = 0;
  std::optional<int> input_end_;  // the exit code the input's end calls for
  bool reader_waiting_ = false;

  std::atomic<bool> broken_{false};  // a write failed
  std::atomic<bool> exit_requested_{false};  // by a keyword (Call::exit_after_answer)
  // I/O thread only.
  runtime::AsyncEvent room_;
  runtime::AsyncEvent session_ended_;
  runtime::AsyncEvent reader_done_;
  runtime::AsyncEvent writer_done_;
  bool stopping_ = false;
  int exit_code_ = 1;
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

std::string describe(const tcp::endpoint& endpoint) {
  const auto address = endpoint.address();
  if (address.is_v6()) return fmt::format("[{}]:{}", address.to_string(), endpoint.port());
  return fmt::format("{}:{}", address.to_string(), endpoint.port());
}

bool listen_on(tcp::acceptor& acceptor, const std::string& host, std::uint16_t port) {
  error_code ec;
  tcp::resolver resolver(acceptor.get_executor());
  const auto found = resolver.resolve(host, std::to_string(port),
                                      tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec) {
    log::error("cannot resolve '{}': {}", host, ec.message());
    return false;
  }
  std::string last_error = "no address";
  for (const auto& entry : found) {
    const tcp::endpoint endpoint = entry.endpoint();
    acceptor.open(endpoint.protocol(), ec);
    // CLOEXEC set before any keyword runs, so no process the library spawns can inherit it.
    if (!ec && ::fcntl(acceptor.native_handle(), F_SETFD, FD_CLOEXEC) != 0) ec.assign(errno, boost::system::system_category());
    if (!ec) acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec) acceptor.bind(endpoint, ec);
    if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
    if (!ec) acceptor.non_blocking(true, ec);
    if (!ec) return true;
    last_error = ec.message();
    error_code ignored;
    acceptor.close(ignored);
  }
  log::error("cannot listen on {}:{}: {}", host, port, last_error);
  return false;
}

asio::awaitable<void> serve_connection(const Library& library, tcp::socket socket, std::string name) {
  log::info("{}: opened", name);
  Connection<tcp::socket> connection(library, name, std::move(socket));
  const int rc = co_await connection.run();
  log::info("{}: closed{}", name, rc == 0 ? "" : " after an error");
  if (connection.exit_requested()) {
    // This connection's instances are gone and its answer is written; the other connections are cut
    // off (their sessions' threads cannot be joined from here without waiting for their keywords).
    std::fflush(nullptr);
    std::_Exit(rc);
  }
}

asio::awaitable<void> accept_loop(const Library& library, tcp::acceptor& acceptor) {
  const auto executor = acceptor.get_executor();
  const auto protocol = acceptor.local_endpoint().protocol();
  asio::steady_timer backoff(executor);
  for (std::uint64_t connections = 0;;) {
    auto [ec] = co_await acceptor.async_wait(tcp::acceptor::wait_read, asio::as_tuple(asio::use_awaitable));
    // accept4 with SOCK_CLOEXEC: a keyword forking on another connection's thread at this very moment
    // cannot inherit the connection.
    const int fd = ec ? -1 : ::accept4(acceptor.native_handle(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (!ec && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED)) continue;
      // Out of descriptors or memory: back off instead of spinning.
      log::error("accept failed: {}", ec ? ec.message() : std::strerror(errno));
      backoff.expires_after(std::chrono::milliseconds(100));
      co_await backoff.async_wait(asio::as_tuple(asio::use_awaitable));
      continue;
    }
    tcp::socket socket(executor);
    socket.assign(protocol, fd, ec);
    if (ec) {
      log::error("accept failed: {}", ec.message());
      ::close(fd);
      continue;
    }
    socket.set_option(tcp::no_delay(true), ec);  // small frames, latency matters
    const std::string name = fmt::format("connection {} from {}", ++connections, describe(socket.remote_endpoint(ec)));
    asio::co_spawn(executor, serve_connection(library, std::move(socket), name), runtime::log_exceptions(name));
  }
}

int serve_tcp(const Library& library, const ServeOptions& options) {
  asio::io_context io;
  tcp::acceptor acceptor(io);
  if (!listen_on(acceptor, options.host, options.port)) return 1;
  // Printed whatever the log level: scripts wait for this line to learn the real port.
  log::write(log::Level::info, fmt::format("listening on {}", describe(acceptor.local_endpoint())));
  asio::co_spawn(io, accept_loop(library, acceptor), runtime::log_exceptions("accept loop"));
  io.run();
  return 1;
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
  // Asio owns and closes copies (CLOEXEC, like every descriptor of the SDK). It also makes them
  // non-blocking, which shows through to whoever shares them (stdin with a shell): restored below.
  const int in_flags = ::fcntl(in_fd, F_GETFL);
  const int out_flags = ::fcntl(out_fd, F_GETFL);
  const int in_copy = ::fcntl(in_fd, F_DUPFD_CLOEXEC, 3);
  const int out_copy = in_copy < 0 ? -1 : ::fcntl(out_fd, F_DUPFD_CLOEXEC, 3);
  if (in_copy < 0 || out_copy < 0) {
    log::error("{}: cannot use the descriptors: {}", peer, std::strerror(errno));
    if (in_copy >= 0) ::close(in_copy);
    return 1;
  }
  int rc = 1;
  {
    asio::io_context io;
    // Regular files and /dev/null cannot be watched, but never block: Asio reads and writes them at once.
    Connection<FdPair> connection(library, std::string(peer), FdPair(Descriptor(io, in_copy), Descriptor(io, out_copy)));
    asio::co_spawn(io, connection.run(), [&](std::exception_ptr e, int exit_code) {
      runtime::log_exceptions(std::string(peer))(e);
      if (!e) rc = exit_code;
    });
    io.run();
  }
  if (in_flags >= 0) ::fcntl(in_fd, F_SETFL, in_flags);
  if (out_flags >= 0) ::fcntl(out_fd, F_SETFL, out_flags);
  return rc;
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
