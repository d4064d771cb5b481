// Handoff: the waiter resumes inside notify() (no posted wakeup), a wait after notify() completes at
// once, and a waiter still parked when its event loop shuts down is destroyed with it.
#include "common/runtime/handoff.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

namespace {

using namespace rjg::runtime;

TEST(Handoff, TheWaiterResumesInsideNotify) {
  asio::io_context io;
  Handoff handoff;
  std::vector<std::string> events;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        events.push_back("waiting");
        co_await handoff.wait();
        events.push_back("resumed");
      },
      asio::detached);
  asio::post(io, [&] {
    events.push_back("notifying");
    handoff.notify();
    events.push_back("notify returned");
  });
  io.run();
  EXPECT_EQ(events, (std::vector<std::string>{"waiting", "notifying", "resumed", "notify returned"}));
}

TEST(Handoff, AWaitAfterNotifyCompletesAtOnce) {
  asio::io_context io;
  Handoff handoff;
  handoff.notify();
  bool done = false;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        co_await handoff.wait();
        done = true;
      },
      asio::detached);
  io.run();
  EXPECT_TRUE(done);
  EXPECT_TRUE(handoff.notified());
}

// The waiter's frame owns the handoff (as a worker's call in flight does): the loop's shutdown destroys
// the frame, and what it holds is released.
TEST(Handoff, AWaiterParkedAtShutdownIsDestroyedWithItsLoop) {
  auto held = std::make_shared<int>(7);
  std::weak_ptr<int> watch = held;
  {
    asio::io_context io;
    auto handoff = std::make_shared<Handoff>();
    asio::co_spawn(
        io,
        [handoff, held = std::move(held)]() -> asio::awaitable<void> { co_await handoff->wait(); },
        asio::detached);
    io.run_for(std::chrono::milliseconds(50));  // parked: the loop keeps it as work
    EXPECT_FALSE(io.stopped());
    EXPECT_FALSE(watch.expired());
  }
  EXPECT_TRUE(watch.expired()) << "the parked coroutine outlived its event loop";
}

}  // namespace
