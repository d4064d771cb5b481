// Crossing between event loops. The gateway runs several event loops, one thread each ([gateway]
// threads); an object belongs to one loop and is touched only there. Work for another loop's object
// is run on that loop and the caller resumes on its own; an object whose last owner may be on another
// loop is deleted on its own loop.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <memory>
#include <type_traits>
#include <utility>

namespace rjg::runtime {

namespace asio = boost::asio;

// Runs `work` on `executor`, then resumes the caller on its own executor. On the caller's own
// executor it is simply awaited: no pass of either loop is added when nothing crosses.
// (GCC 12: no co_await inside a condition; it miscompiles the frame.)
template <typename T>
asio::awaitable<T> run_on(asio::any_io_executor executor, asio::awaitable<T> work) {
  const asio::any_io_executor here = co_await asio::this_coro::executor;
  if (executor == here) co_return co_await std::move(work);
  co_return co_await asio::co_spawn(executor, std::move(work), asio::use_awaitable);
}

inline asio::awaitable<void> run_on(asio::any_io_executor executor, asio::awaitable<void> work) {
  const asio::any_io_executor here = co_await asio::this_coro::executor;
  if (executor == here) {
    co_await std::move(work);
    co_return;
  }
  co_await asio::co_spawn(executor, std::move(work), asio::use_awaitable);
  co_return;
}

// Makes a shared object whose deletion happens on `executor`'s loop, whichever thread drops the last
// reference: for objects that own descriptors or timers of that loop and are shared across loops.
template <typename T, typename... Args>
std::shared_ptr<T> make_shared_on(asio::any_io_executor executor, Args&&... args) {
  return std::shared_ptr<T>(new T(std::forward<Args>(args)...), [executor](T* object) {
    std::unique_ptr<T> owned(object);
    // Here and now on its own loop, or once that loop has stopped (the gateway is exiting: no thread
    // runs it any more, and a handler posted to it would only be destroyed with it).
    const auto* loop = executor.target<asio::io_context::executor_type>();
    if (loop && (loop->running_in_this_thread() || loop->context().stopped())) return;
    asio::post(executor, [owned = std::move(owned)]() mutable { owned.reset(); });
  });
}

}  // namespace rjg::runtime
