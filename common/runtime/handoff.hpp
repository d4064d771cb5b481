// A one-time hand-off between two coroutines of one event loop: one waits, the other notifies, and
// the waiter resumes right inside notify(), as a completion handler would be called, instead of
// being posted to the loop. A posted wakeup costs the event loop an extra pass (a non-blocking
// epoll_wait) per hand-off; on the relay's hot path (a worker's answer to the caller waiting for
// it) that is one system call per keyword.
//
// The notifier must expect the waiter to run before notify() returns: call it last, with nothing
// of the notifier's own state touched afterwards that the waiter could change.
#pragma once

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <optional>
#include <utility>

namespace rjg {

namespace asio = boost::asio;

class Handoff {
 public:
  Handoff() = default;
  Handoff(const Handoff&) = delete;
  Handoff& operator=(const Handoff&) = delete;

  bool notified() const { return notified_; }

  // Completes once notify() has been called (at once if it already was). One waiter at a time.
  asio::awaitable<void> wait() {
    if (notified_) co_return;
    co_await asio::async_initiate<const asio::use_awaitable_t<>, void()>(
        [this](auto handler) {
          // The waiter counts as work of its event loop (as a pending operation does), so the loop
          // does not stop while a coroutine waits here.
          auto executor = asio::get_associated_executor(handler);
          work_.emplace(asio::make_work_guard(executor));
          waiter_.emplace(std::move(handler));
        },
        asio::use_awaitable);
  }

  // Resumes the waiter now, if one waits; later waits complete at once.
  void notify() {
    if (notified_) return;
    notified_ = true;
    if (!waiter_) return;
    auto handler = std::move(*waiter_);
    waiter_.reset();
    auto work = std::move(*work_);
    work_.reset();
    std::move(handler)();
  }

 private:
  bool notified_ = false;
  std::optional<asio::any_completion_handler<void()>> waiter_;
  std::optional<asio::executor_work_guard<asio::any_io_executor>> work_;
};

}  // namespace rjg
