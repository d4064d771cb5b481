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

namespace rjg::gateway {

namespace asio = boost::asio;
class LoopHeartbeat {
 public:
  static constexpr auto kEvery = std::chrono::seconds(1);

  LoopHeartbeat(asio::io_context& io, std::vector<asio::any_io_executor> loops)
      : state_(std::make_shared<State>(io, std::move(loops))) {
    tick(state_);
  }
  ~LoopHeartbeat() { state_->timer.cancel(); }

  // The loops that ran no handler within `bound`.
  std::size_t stuck(std::chrono::steady_clock::duration bound) const {
    const auto now = std::chrono::steady_clock::now().time_since_epoch().count();
    std::size_t n = 0;
    for (std::size_t i = 0; i < state_->loops.size(); ++i)
      if (now - state_->beats[i].load(std::memory_order_relaxed) > bound.count()) ++n;
    return n;
  }
  std::size_t loops() const { return state_->loops.size(); }

 private:
  struct State {
    State(asio::io_context& io, std::vector<asio::any_io_executor> l)
        : timer(io), loops(std::move(l)), beats(std::make_unique<std::atomic<std::int64_t>[]>(loops.size())) {
      const auto now = std::chrono::steady_clock::now().time_since_epoch().count();
      for (std::size_t i = 0; i < loops.size(); ++i) beats[i] = now;
    }
    asio::steady_timer timer;
    std::vector<asio::any_io_executor> loops;
    std::unique_ptr<std::atomic<std::int64_t>[]> beats;
  };

  static void tick(std::shared_ptr<State> state) {
    for (std::size_t i = 0; i < state->loops.size(); ++i)
      asio::post(state->loops[i], [state, i] {
        state->beats[i].store(std::chrono::steady_clock::now().time_since_epoch().count(), std::memory_order_relaxed);
      });
    state->timer.expires_after(kEvery);
    state->timer.async_wait([state](const boost::system::error_code& ec) {
      if (!ec) tick(state);
    });
  }

  std::shared_ptr<State> state_;
};

}  // namespace rjg::gateway
