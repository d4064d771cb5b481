// The sessions that are open: each started on the next event loop in turn, tracked on loop 0 until it
// has closed, and closed by the drain. What /status shows of a session is read from here too.
#pragma once

#include "common/runtime/async_event.hpp"
#include "gateway/session/connection.hpp"
#include "gateway/session/context.hpp"
#include "gateway/session/session_activity.hpp"

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace rjg::gateway::ops {

namespace asio = boost::asio;

class SessionTable {
 public:
  // loops: every event loop sessions are spread over (loop 0 included); offload: the threads that take
  // large frames off the loops. The table itself lives on context.executor (loop 0).
  SessionTable(session::GatewayContext& context, std::vector<asio::any_io_executor> loops, asio::any_io_executor offload);

  // Starts a session over a descriptor it takes over, on the next loop; `client` counts its sessions
  // against max_sessions_per_client until it ends. out_fd: a second descriptor it writes to (--stdio).
  void adopt(int fd, std::string client, std::string peer, bool is_socket = true, int out_fd = -1);
  // --stdio: completes once the one session adopted with is_socket = false has closed.
  asio::awaitable<void> stdio_closed() const;

  std::size_t size() const { return sessions_.size(); }
  bool empty() const { return sessions_.empty(); }

  // The drain, in two steps: wait for the sessions to end by themselves (false: some are open at the
  // deadline), then close those left, each on its own loop, answering what still runs with `why`.
  asio::awaitable<bool> wait_empty_until(runtime::AsyncEvent::clock::time_point deadline);
  asio::awaitable<void> close_all(std::string why);

  // One open session as /status shows it.
  struct Entry {
    std::uint64_t id;
    std::string peer;  // "10.1.2.3:51234"
    std::chrono::steady_clock::time_point since;
    std::size_t imports = 0;
    std::optional<session::SessionActivity::Snapshot> activity;
  };
  std::vector<Entry> entries() const;

 private:
  struct Live {
    asio::any_io_executor loop;  // where the session runs: it is closed and awaited there
    std::weak_ptr<session::Connection> connection;
    std::string peer;
    std::chrono::steady_clock::time_point since;
    std::shared_ptr<std::atomic<std::size_t>> imports;  // the connection's imports_open
    std::shared_ptr<session::SessionActivity> activity;          // the connection's activity
  };
  // On the session's loop: completes once it is closed (at once if it is gone).
  static asio::awaitable<void> closed(std::weak_ptr<session::Connection> connection);

  session::GatewayContext& context_;
  std::vector<asio::any_io_executor> loops_;
  asio::any_io_executor offload_;
  std::size_t next_loop_ = 0;
  std::uint64_t next_session_ = 1;
  std::unordered_map<std::uint64_t, Live> sessions_;  // loop 0's
  std::weak_ptr<session::Connection> stdio_;                   // --stdio: the one session
  runtime::AsyncEvent sessions_gone_;  // set whenever the last session is forgotten (the drain waits for it)
};

}  // namespace rjg::gateway::ops
