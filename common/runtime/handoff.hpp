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

#include <boost/asio/execution/context.hpp>
#include <boost/asio/execution_context.hpp>
#include <boost/asio/query.hpp>

#include <list>
#include <optional>
#include <utility>

namespace rjg::runtime {

namespace asio = boost::asio;

class Handoff;

namespace handoff_detail {
// The handoffs with a waiter parked, per event loop. A parked waiter is no Asio operation, so the
// loop's shutdown would not find it; this service gives it up then (its coroutine is destroyed, as
// those waiting on Asio operations are), so nothing it holds outlives the loop.
class Parked : public asio::execution_context::service {
 public:
  static inline asio::execution_context::id id;
  explicit Parked(asio::execution_context& context) : service(context) {}
  std::list<Handoff*> handoffs;

 private:
  void shutdown() override;
};
}  // namespace handoff_detail

class Handoff {
 public:
  Handoff() = default;
  Handoff(const Handoff&) = delete;
  Handoff& operator=(const Handoff&) = delete;
  ~Handoff() {
    if (parked_) parked_->handoffs.erase(self_);
  }

  bool notified() const { return notified_; }

  // Completes once notify() has been called (at once if it already was). One waiter at a time.
  asio::awaitable<void> wait() {
    if (notified_) co_return;
    co_await asio::async_initiate<const asio::use_awaitable_t<>, void()>(
        [this](auto handler) {
          // The waiter counts as work of its event loop (as a pending operation does), so the loop
          // does not stop while a coroutine waits here.
          auto executor = asio::get_associated_executor(handler);
          parked_ = &asio::use_service<handoff_detail::Parked>(asio::query(executor, asio::execution::context));
          self_ = parked_->handoffs.insert(parked_->handoffs.end(), this);
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
    unpark();
    auto handler = std::move(*waiter_);
    waiter_.reset();
    auto work = std::move(*work_);
    work_.reset();
    std::move(handler)();
  }

 private:
  friend class handoff_detail::Parked;

  void unpark() {
    if (parked_) parked_->handoffs.erase(self_);
    parked_ = nullptr;
  }

  // The loop shuts down: the waiter is destroyed without being resumed. Its coroutine frame may own
  // this handoff, so nothing of *this is touched once the handler is gone.
  void abandon() {
    unpark();
    auto handler = std::move(*waiter_);
    waiter_.reset();
    auto work = std::move(*work_);
    work_.reset();
  }

  bool notified_ = false;
  std::optional<asio::any_completion_handler<void()>> waiter_;
  std::optional<asio::executor_work_guard<asio::any_io_executor>> work_;
  handoff_detail::Parked* parked_ = nullptr;
  std::list<Handoff*>::iterator self_;
};

inline void handoff_detail::Parked::shutdown() {
  while (!handoffs.empty()) handoffs.front()->abandon();
}

}  // namespace rjg::runtime
