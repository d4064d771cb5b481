// Liveness of the event loops, for /livez: every loop runs a posted handler once a second; a loop that
// has not for a while is stuck in one handler (a bug, or a blocking call).
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

namespace rjg::gateway::ops {

namespace asio = boost::asio;
class LoopHeartbeat {
 public:
  static constexpr auto kEvery = std::chrono::seconds(1);

  LoopHeartbeat(asio::io_context& io, std::vector<asio::any_io_executor> loops)
      : state_(std::make_shared<State>(io, std::move(loops))) {
    tick(state_);
  }
  ~LoopHeartbeat() { state_->timer.cancel(); }

  // The loops that have not run a beat posted to them at least `bound` ago. (Only one beat per loop is
  // outstanding at a time, so a stuck loop does not pile them up, and a loop 0 that stalled does not
  // make the others look stuck: their beats are posted late, not left unrun.)
  std::size_t stuck(std::chrono::steady_clock::duration bound) const {
    const auto now = std::chrono::steady_clock::now().time_since_epoch().count();
    std::size_t n = 0;
    for (std::size_t i = 0; i < state_->loops.size(); ++i) {
      const auto posted = state_->posted[i].load(std::memory_order_acquire);
      if (posted != 0 && now - posted > bound.count()) ++n;
    }
    return n;
  }
  std::size_t loops() const { return state_->loops.size(); }

 private:
  struct State {
    State(asio::io_context& io, std::vector<asio::any_io_executor> l)
        : timer(io), loops(std::move(l)), posted(std::make_unique<std::atomic<std::int64_t>[]>(loops.size())) {}
    asio::steady_timer timer;
    std::vector<asio::any_io_executor> loops;
    std::unique_ptr<std::atomic<std::int64_t>[]> posted;  // when the beat in flight was posted; 0: none
  };

  static void tick(std::shared_ptr<State> state) {
    const auto now = std::chrono::steady_clock::now().time_since_epoch().count();
    for (std::size_t i = 0; i < state->loops.size(); ++i) {
      if (state->posted[i].load(std::memory_order_acquire) != 0) continue;  // the last one has not run yet
      state->posted[i].store(now, std::memory_order_release);
      asio::post(state->loops[i], [state, i] { state->posted[i].store(0, std::memory_order_release); });
    }
    state->timer.expires_after(kEvery);
    state->timer.async_wait([state](const boost::system::error_code& ec) {
      if (!ec) tick(state);
    });
  }

  std::shared_ptr<State> state_;
};

}  // namespace rjg::gateway::ops
