// The session table: starting sessions on their loops, forgetting them once closed, and the drain's
// waiting and closing.
#include "gateway/ops/session_table.hpp"

#include "gateway/session/stream_connection.hpp"

#include "common/runtime/loops.hpp"

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>

#include <fmt/format.h>

#include <functional>

namespace rjg::gateway::ops {

SessionTable::SessionTable(session::GatewayContext& context, std::vector<asio::any_io_executor> loops,
                           asio::any_io_executor offload)
    : context_(context), loops_(std::move(loops)), offload_(std::move(offload)), sessions_gone_(context.executor) {}

void SessionTable::adopt(int fd, std::string client, std::string peer, bool is_socket, int out_fd) {
  // The session reads and writes the descriptor itself (FdStream: no read known to find nothing), on
  // the next loop in turn: it, its dedicated workers and its relay stay there.
  const auto loop = loops_[next_loop_++ % loops_.size()];
  auto number = next_session_++;
  context_.metrics.sessions_total.fetch_add(1, std::memory_order_relaxed);
  auto name = fmt::format("session {} ({})", number, peer);
  std::shared_ptr<session::Connection> session;
  std::function<void()> start;
  if (is_socket) {
    // Made here, started on its loop: nothing of it runs on this one.
    auto s = std::make_shared<session::StreamConnection<runtime::FdStream>>(runtime::FdStream(loop, fd), context_, context_.pools,
                                                          std::move(name), offload_);
    start = [s] { s->start(); };
    session = s;
  } else {
    using Stdio = runtime::DuplexStream<runtime::FdStream, runtime::FdStream>;
    auto s = std::make_shared<session::StreamConnection<Stdio>>(Stdio(runtime::FdStream(loop, fd), runtime::FdStream(loop, out_fd)), context_,
                                                       context_.pools, std::move(name), offload_);
    start = [s] { s->start(); };
    session = s;
    stdio_ = s;
  }
  sessions_[number] =
      Live{loop, session, std::move(peer), std::chrono::steady_clock::now(), session->imports_open, session->activity};
  context_.clients->add(client);
  // Forget sessions once they are gone, so neither map grows with every connection: the session's loop
  // awaits its end, this loop forgets it.
  asio::co_spawn(
      loop,
      [session, start]() -> asio::awaitable<void> {
        start();
        co_await session->wait_closed();
      },
      asio::bind_executor(context_.executor, [this, number, client](std::exception_ptr e) {
        runtime::log_exceptions("session tracker")(e);
        sessions_.erase(number);
        context_.clients->remove(client);
        if (sessions_.empty()) sessions_gone_.set();
      }));
}

asio::awaitable<void> SessionTable::stdio_closed() const { co_await closed(stdio_); }

asio::awaitable<void> SessionTable::closed(std::weak_ptr<session::Connection> connection) {
  if (auto s = connection.lock()) co_await s->wait_closed();
}

asio::awaitable<bool> SessionTable::wait_empty_until(runtime::AsyncEvent::clock::time_point deadline) {
  // Not `if (!co_await ...) co_return false;` in the loop: GCC 12 compiled that into a trap (SIGILL).
  bool in_time = true;
  while (in_time && !sessions_.empty()) {
    sessions_gone_.reset();
    in_time = co_await sessions_gone_.wait_until(deadline);
  }
  co_return in_time;
}

asio::awaitable<void> SessionTable::close_all(std::string why) {
  // Each session is closed and awaited on its own loop. Only weak references are held here: a session
  // is always let go of on its own loop, even if this coroutine never resumes (a second signal).
  // Closing a session stops its workers, and what still runs there is answered with an error naming why.
  std::vector<Live> live;
  for (auto& [number, session] : sessions_) live.push_back(session);
  for (auto& session : live)
    asio::post(session.loop, [weak = session.connection, why] {
      if (auto s = weak.lock()) s->close(why);
    });
  for (auto& session : live) co_await runtime::run_on(session.loop, closed(session.connection));
}

std::vector<SessionTable::Entry> SessionTable::entries() const {
  std::vector<Entry> out;
  out.reserve(sessions_.size());
  for (const auto& [number, live] : sessions_) {
    Entry entry{number, live.peer, live.since, live.imports ? live.imports->load(std::memory_order_relaxed) : 0, {}};
    if (live.activity) entry.activity = live.activity->snapshot();
    out.push_back(std::move(entry));
  }
  return out;
}

}  // namespace rjg::gateway::ops
