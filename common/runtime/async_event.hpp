// An event for Asio coroutines on a single-threaded io_context: waiters suspend until set() or a
// deadline. Each waiter parks on a timer of its own that set() cancels, so no operation ever depends
// on Asio's cancellation slots (which a plain loop over async_wait would silently swallow).
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "common/log.hpp"

#include <chrono>
#include <exception>
#include <list>
#include <string>

namespace rjg::runtime {

namespace asio = boost::asio;

class AsyncEvent {
 public:
  using clock = std::chrono::steady_clock;

  explicit AsyncEvent(asio::any_io_executor executor) : executor_(std::move(executor)) {}
  AsyncEvent(const AsyncEvent&) = delete;
  AsyncEvent& operator=(const AsyncEvent&) = delete;

  bool is_set() const { return set_; }
  const asio::any_io_executor& executor() const { return executor_; }

  void set() {
    set_ = true;
    for (auto* timer : waiters_) timer->cancel();
  }

  // Re-arm for another round; waiters already parked keep waiting for the next set().
  void reset() { set_ = false; }

  asio::awaitable<void> wait() { co_await wait_until(clock::time_point::max()); }

  // True if the event was set, false if the timeout passed first.
  asio::awaitable<bool> wait_for(clock::duration timeout) { return wait_until(clock::now() + timeout); }

  asio::awaitable<bool> wait_until(clock::time_point deadline) {
    if (set_) co_return true;
    asio::steady_timer timer(executor_, deadline);
    auto self = waiters_.insert(waiters_.end(), &timer);
    while (!set_ && clock::now() < deadline) co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
    waiters_.erase(self);
    co_return set_;
  }

 private:
  asio::any_io_executor executor_;
  std::list<asio::steady_timer*> waiters_;
  bool set_ = false;
};

// Completion handler for detached coroutines: an exception is a bug, logged with where it happened,
// never silently dropped and never fatal to the other sessions.
inline auto log_exceptions(std::string where) {
  return [where = std::move(where)](std::exception_ptr e) {
    if (!e) return;
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      log::error("bug: unexpected exception in {}: {}", where, ex.what());
    } catch (...) {
      log::error("bug: unexpected exception in {}", where);
    }
  };
}

}  // namespace rjg::runtime
