#include "tests/bench/loadgen.hpp"

#include "common/protocol/framing.hpp"
#include "common/protocol/json_text.hpp"
#include "common/protocol/message.hpp"
#include "common/protocol/protocol.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <future>
#include <mutex>
#include <cstdlib>
#include <stdexcept>
#include <thread>

namespace rjg::bench {
namespace {

namespace asio = boost::asio;
namespace json = boost::json;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using asio::use_awaitable;

struct Session {
  explicit Session(asio::io_context& io) : socket(io) {}
  tcp::socket socket;
  protocol::FrameReader reader{protocol::FramingLimits{}, protocol::FrameReader::Mode::strict};
  std::string token;
  std::uint64_t next_id = 1;
  std::vector<char> buffer = std::vector<char>(64 * 1024);
  std::vector<double> latencies_us;
};

// What one run() shares between its sessions.
struct RunState {
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> answered{0};
  std::atomic<std::uint64_t> calls{0};
  std::atomic<std::uint64_t> failures{0};
  std::uint64_t max_calls = 0;
  Clock::time_point deadline = Clock::time_point::max();
  std::string payload_text;  // the payload as a JSON string literal
  bool record = false;
};

// Reads until the answer to id_text arrives; notifications (robot/log) and stray answers are skipped.
asio::awaitable<protocol::Message> answer(Session& s, std::string_view id_text) {
  for (;;) {
    auto r = s.reader.next();
    if (r.kind == protocol::FrameReader::Result::Kind::frame) {
      auto classified = protocol::parse_message(r.body);
      const auto* m = std::get_if<protocol::Message>(&classified);
      if (!m)
        throw std::runtime_error(fmt::format("unreadable answer: {}", std::get<protocol::ProtocolError>(classified).message));
      if (m->kind == protocol::Message::Kind::response || m->kind == protocol::Message::Kind::error_response) {
        if (m->id_text() == id_text) co_return *m;
        if (m->id_text() == "null") throw std::runtime_error(fmt::format("error answer without id: {}", m->text()));
      }
      continue;
    }
    if (r.kind == protocol::FrameReader::Result::Kind::error) throw std::runtime_error("framing error: " + r.error);
    const std::size_t n = co_await s.socket.async_read_some(asio::buffer(s.buffer), use_awaitable);
    s.reader.feed(std::string_view(s.buffer.data(), n));
  }
}

asio::awaitable<protocol::Message> call(Session& s, std::string_view method, std::string_view params_text) {
  const std::string id = std::to_string(s.next_id++);
  const std::string frame = protocol::encode_frame(protocol::make_request_raw(id, method, params_text));
  co_await asio::async_write(s.socket, asio::buffer(frame), use_awaitable);
  co_return co_await answer(s, id);
}

asio::awaitable<void> open_session(Session& s, tcp::endpoint endpoint, std::string library) {
  co_await s.socket.async_connect(endpoint, use_awaitable);
  s.socket.set_option(tcp::no_delay(true));  // as every peer of the protocol sets it
  protocol::Message init = co_await call(s, protocol::kInitialize,
                               R"({"capabilities":{},"client_info":{"name":"rjg-bench","version":"0"}})");
  if (init.kind != protocol::Message::Kind::response) throw std::runtime_error("robot/initialize failed: " + init.text());
  const std::string initialized = protocol::encode_frame(protocol::make_notification_raw(protocol::kInitialized, "{}"));
  co_await asio::async_write(s.socket, asio::buffer(initialized), use_awaitable);
  if (library.empty()) co_return;
  protocol::Message imported = co_await call(s, protocol::kImportLibrary,
                                   fmt::format(R"({{"name":{},"args":[],"kw_args":{{}}}})", protocol::quote(library)));
  if (imported.kind != protocol::Message::Kind::response)
    throw std::runtime_error(fmt::format("import of '{}' failed: {}", library, imported.text()));
  const json::value result = protocol::parse_value(imported.result_text());
  const auto* token = result.is_object() ? result.get_object().if_contains("token") : nullptr;
  if (!token || !token->is_string())
    throw std::runtime_error(fmt::format("import of '{}' answered without a token: {}", library, imported.text()));
  s.token = std::string(token->get_string());
}

asio::awaitable<void> echo_loop(Session& s, RunState& state) {
  const std::string token_text = protocol::quote(s.token);
  while (!state.stop.load(std::memory_order_relaxed)) {
    const std::string id = std::to_string(s.next_id++);
    const std::string frame = protocol::encode_frame(
        fmt::format(R"({{"jsonrpc":"2.0","id":{},"method":"robot/run_keyword","params":{{"library_token":{},)"
                    R"("name":"Echo","args":[{}],"kwargs":{{}}}}}})",
                    id, token_text, state.payload_text));
    const auto t0 = Clock::now();
    co_await asio::async_write(s.socket, asio::buffer(frame), use_awaitable);
    protocol::Message m = co_await answer(s, id);
    const auto t1 = Clock::now();
    // Echo answers {"result": PAYLOAD}; anything else (an error answer, a keyword failure) failed.
    const bool ok = m.kind == protocol::Message::Kind::response &&
                    m.result_text().find(state.payload_text) != std::string::npos &&
                    m.result_text().find("\"error\"") == std::string::npos;
    (ok ? state.calls : state.failures).fetch_add(1, std::memory_order_relaxed);
    if (state.record) s.latencies_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    const auto answered = state.answered.fetch_add(1, std::memory_order_relaxed) + 1;
    if ((state.max_calls && answered >= state.max_calls) || t1 >= state.deadline)
      state.stop.store(true, std::memory_order_relaxed);
  }
}

asio::awaitable<void> keyword_call(Session& s, std::string name, std::shared_ptr<std::string> result) {
  protocol::Message m = co_await call(s, protocol::kRunKeyword,
                            fmt::format(R"({{"library_token":{},"name":{},"args":[],"kwargs":{{}}}})",
                                        protocol::quote(s.token), protocol::quote(name)));
  if (m.kind != protocol::Message::Kind::response || m.result_text().find("\"error\"") != std::string::npos)
    throw std::runtime_error(fmt::format("keyword '{}' failed: {}", name, m.text()));
  *result = std::string(m.result_text());
}

}  // namespace

struct LoadGenerator::Impl {
  asio::io_context io;
  asio::executor_work_guard<asio::io_context::executor_type> work = asio::make_work_guard(io);
  std::vector<std::thread> threads;
  std::vector<tcp::endpoint> endpoints;  // session i connects to endpoints[i % size]
  std::vector<std::unique_ptr<Session>> sessions;

  // The coroutines of the phase in progress.
  std::mutex mutex;
  std::condition_variable finished;
  std::size_t running = 0;
  std::string first_error;

  template <typename Awaitable>
  void spawn(Awaitable coroutine) {
    {
      std::lock_guard lock(mutex);
      ++running;
    }
    asio::co_spawn(io, std::move(coroutine), [this](std::exception_ptr e) {
      std::lock_guard lock(mutex);
      if (e && first_error.empty()) {
        try {
          std::rethrow_exception(e);
        } catch (const std::exception& ex) {
          first_error = ex.what();
        } catch (...) {
          first_error = "unknown exception";
        }
      }
      if (--running == 0) finished.notify_all();
    });
  }

  // Waits until the phase's coroutines are done; false at the deadline.
  bool wait(Clock::time_point deadline) {
    std::unique_lock lock(mutex);
    return finished.wait_until(lock, deadline, [&] { return running == 0; });
  }

  std::string take_error() {
    std::lock_guard lock(mutex);
    return std::exchange(first_error, {});
  }

  // Runs f on the io_context and waits for it.
  template <typename F>
  void on_io(F f) {
    std::promise<void> done;
    asio::post(io, [&] {
      f();
      done.set_value();
    });
    done.get_future().wait();
  }

  void close_sockets() {
    on_io([&] {
      for (auto& s : sessions) {
        boost::system::error_code ignored;
        s->socket.close(ignored);
      }
    });
  }

  // After a failure or a timeout: close every connection so the coroutines end, and wait for them.
  void abandon_phase() {
    close_sockets();
    wait(Clock::now() + std::chrono::seconds(30));
  }

  // Opens the sessions from *next up to end, one after the other; several of these run at once.
  asio::awaitable<void> open_some(std::shared_ptr<std::atomic<std::size_t>> next, std::size_t end,
                                  std::string library) {
    for (;;) {
      const std::size_t i = next->fetch_add(1);
      if (i >= end) co_return;
      co_await open_session(*sessions[i], endpoints[i % endpoints.size()], library);
    }
  }
};

LoadGenerator::LoadGenerator(std::string host, std::uint16_t port, unsigned io_threads)
    : LoadGenerator(std::move(host), std::vector<std::uint16_t>{port}, io_threads) {}

LoadGenerator::LoadGenerator(std::string host, const std::vector<std::uint16_t>& ports, unsigned io_threads)
    : impl_(new Impl) {
  if (ports.empty()) throw std::invalid_argument("a load generator needs at least one port");
  for (auto port : ports) impl_->endpoints.emplace_back(asio::ip::make_address(host), port);
  for (unsigned i = 0; i < std::max(1u, io_threads); ++i) impl_->threads.emplace_back([this] { impl_->io.run(); });
}

LoadGenerator::~LoadGenerator() {
  close();
  impl_->work.reset();
  impl_->io.stop();
  for (auto& t : impl_->threads) t.join();
}

void LoadGenerator::open(std::size_t n, const std::string& library, std::chrono::milliseconds timeout,
                         std::size_t parallel) {
  const std::size_t first = impl_->sessions.size();
  for (std::size_t i = 0; i < n; ++i) impl_->sessions.push_back(std::make_unique<Session>(impl_->io));
  auto next = std::make_shared<std::atomic<std::size_t>>(first);
  for (std::size_t k = 0; k < std::min(n, std::max<std::size_t>(1, parallel)); ++k)
    impl_->spawn(impl_->open_some(next, impl_->sessions.size(), library));
  if (!impl_->wait(Clock::now() + timeout)) {
    impl_->abandon_phase();
    throw std::runtime_error(fmt::format("opening {} sessions{} took over {} s", n,
                                         library.empty() ? "" : " importing " + library, timeout.count() / 1000));
  }
  if (auto error = impl_->take_error(); !error.empty()) {
    impl_->abandon_phase();
    throw std::runtime_error(
        fmt::format("opening {} sessions{}: {}", n, library.empty() ? "" : " importing " + library, error));
  }
}

CallStats LoadGenerator::run(const std::string& payload, std::uint64_t max_calls, double max_seconds,
                             bool record_latency) {
  if (impl_->sessions.empty()) throw std::runtime_error("no session is open");
  RunState state;
  state.max_calls = max_calls;
  state.payload_text = protocol::quote(payload);
  state.record = record_latency;
  const auto start = Clock::now();
  if (max_seconds > 0)
    state.deadline = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(max_seconds));
  for (auto& s : impl_->sessions) {
    s->latencies_us.clear();
    impl_->spawn(echo_loop(*s, state));
  }
  // A keyword through a loaded machine may take a while, but never minutes.
  const auto bound = (max_seconds > 0 ? state.deadline : start + std::chrono::hours(1)) + std::chrono::seconds(120);
  if (!impl_->wait(bound)) {
    state.stop = true;
    impl_->abandon_phase();
    throw std::runtime_error("the Echo calls did not finish within 120 s of their end");
  }
  CallStats stats;
  stats.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (auto error = impl_->take_error(); !error.empty()) throw std::runtime_error("Echo calls: " + error);
  stats.calls = state.calls;
  stats.failures = state.failures;
  if (record_latency)
    for (auto& s : impl_->sessions)
      stats.latencies_us.insert(stats.latencies_us.end(), s->latencies_us.begin(), s->latencies_us.end());
  return stats;
}

std::string LoadGenerator::call_keyword(std::size_t index, const std::string& name) {
  if (index >= impl_->sessions.size()) throw std::runtime_error(fmt::format("no session {}", index));
  auto result = std::make_shared<std::string>();
  impl_->spawn(keyword_call(*impl_->sessions[index], name, result));
  if (!impl_->wait(Clock::now() + std::chrono::seconds(60))) {
    impl_->abandon_phase();
    throw std::runtime_error(fmt::format("keyword '{}' did not answer within 60 s", name));
  }
  if (auto error = impl_->take_error(); !error.empty()) throw std::runtime_error(error);
  return *result;
}

std::size_t LoadGenerator::sessions() const { return impl_->sessions.size(); }

void LoadGenerator::close() {
  if (impl_->sessions.empty()) return;
  // Sockets are closed and destroyed on the io thread, which owns them.
  impl_->on_io([&] {
    for (auto& s : impl_->sessions) {
      boost::system::error_code ignored;
      s->socket.close(ignored);
    }
    impl_->sessions.clear();
  });
}

// ---------------------------------------------------------------------------------------------
// The floor

namespace {

void write_all(int fd, const char* data, std::size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, data, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) throw std::runtime_error(fmt::format("ping-pong write: {}", std::strerror(errno)));
    data += w;
    n -= static_cast<std::size_t>(w);
  }
}

// False at end of stream.
bool read_all(int fd, char* data, std::size_t n) {
  while (n > 0) {
    const ssize_t r = ::read(fd, data, n);
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) return false;
    if (r < 0) throw std::runtime_error(fmt::format("ping-pong read: {}", std::strerror(errno)));
    data += r;
    n -= static_cast<std::size_t>(r);
  }
  return true;
}

// The main thread sends on `out` and reads the echo on `in`; a second thread echoes from echo_in to echo_out.
std::vector<double> ping_pong(int out, int in, int echo_in, int echo_out, std::size_t bytes, std::size_t round_trips) {
  std::thread echo([=] {
    std::string buffer(bytes, '\0');
    try {
      while (read_all(echo_in, buffer.data(), bytes)) write_all(echo_out, buffer.data(), bytes);
    } catch (const std::exception&) {
    }
  });
  std::string message(bytes, 'p'), reply(bytes, '\0');
  std::vector<double> us;
  us.reserve(round_trips);
  std::string error;
  try {
    for (std::size_t i = 0; i < round_trips; ++i) {
      const auto t0 = Clock::now();
      write_all(out, message.data(), bytes);
      if (!read_all(in, reply.data(), bytes)) throw std::runtime_error("ping-pong: the echo side closed");
      us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    }
  } catch (const std::exception& e) {
    error = e.what();
  }
  // The echo thread sees the end and returns (shutdown: `out` may be a socket that `in` shares).
  ::shutdown(out, SHUT_WR);
  ::close(out);
  echo.join();
  if (!error.empty()) throw std::runtime_error(error);
  return us;
}

}  // namespace

std::vector<double> tcp_ping_pong_us(std::size_t bytes, std::size_t round_trips) {
  const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (listener < 0 || ::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(listener, 1) != 0 || ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    if (listener >= 0) ::close(listener);
    throw std::runtime_error(fmt::format("ping-pong listener: {}", std::strerror(errno)));
  }
  const int client = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (client < 0 || ::connect(client, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(listener);
    if (client >= 0) ::close(client);
    throw std::runtime_error(fmt::format("ping-pong connect: {}", std::strerror(errno)));
  }
  const int server = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
  ::close(listener);
  if (server < 0) {
    ::close(client);
    throw std::runtime_error(fmt::format("ping-pong accept: {}", std::strerror(errno)));
  }
  const int one = 1;
  ::setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  ::setsockopt(server, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  std::vector<double> us;
  try {
    us = ping_pong(client, client, server, server, bytes, round_trips);  // closes client
  } catch (...) {
    ::close(server);
    throw;
  }
  ::close(server);
  return us;
}

std::vector<double> pipe_ping_pong_us(std::size_t bytes, std::size_t round_trips) {
  int there[2], back[2];
  if (::pipe2(there, O_CLOEXEC) != 0) throw std::runtime_error(fmt::format("pipe: {}", std::strerror(errno)));
  if (::pipe2(back, O_CLOEXEC) != 0) {
    ::close(there[0]);
    ::close(there[1]);
    throw std::runtime_error(fmt::format("pipe: {}", std::strerror(errno)));
  }
  std::vector<double> us;
  try {
    us = ping_pong(there[1], back[0], there[0], back[1], bytes, round_trips);  // closes there[1]
  } catch (...) {
    ::close(there[0]);
    ::close(back[0]);
    ::close(back[1]);
    throw;
  }
  ::close(there[0]);
  ::close(back[0]);
  ::close(back[1]);
  return us;
}

std::string echo_frame(std::string_view token, std::uint64_t id, std::string_view payload) {
  return protocol::encode_frame(
      fmt::format(R"({{"jsonrpc":"2.0","id":{},"method":"robot/run_keyword","params":{{"library_token":{},)"
                  R"("name":"Echo","args":[{}],"kwargs":{{}}}}}})",
                  id, protocol::quote(token), protocol::quote(payload)));
}

pid_t LoadGenerator::worker_pid(std::size_t index) {
  const std::string text = call_keyword(index, "Get Pid");  // {"result":PID}
  const auto colon = text.find(':');
  const auto pid = static_cast<pid_t>(std::strtol(text.c_str() + (colon == std::string::npos ? 0 : colon + 1), nullptr, 10));
  if (pid <= 0) throw std::runtime_error("Get Pid answered " + text);
  return pid;
}

PairedLatencies paired_latencies(LoadGenerator& a, LoadGenerator& b, const std::string& payload, int rounds,
                                 int calls) {
  PairedLatencies out;
  for (int round = 0; round < rounds; ++round) {
    for (int k = 0; k < 2; ++k) {
      const bool a_turn = (k == 0) == (round % 2 == 0);
      auto stats = (a_turn ? a : b).run(payload, static_cast<std::uint64_t>(calls), 0, true);
      auto& into = a_turn ? out.a_us : out.b_us;
      into.insert(into.end(), stats.latencies_us.begin(), stats.latencies_us.end());
      out.failures += stats.failures;
    }
  }
  return out;
}

}  // namespace rjg::bench
