// The one writer of a stream (a client socket or a worker's stdin): everything else enqueues whole
// frames, a single coroutine drains them in order, so writes never interleave and ordering
// guarantees (logs before the answer) hold by construction. Queued bytes are counted so producers
// can wait for room (back-pressure) instead of growing memory without bound.
#pragma once

#include "common/runtime/async_event.hpp"

#include <boost/asio/buffer.hpp>
#include <boost/asio/write.hpp>

#include <deque>
#include <string>
#include <vector>

namespace rjg {

template <typename Stream>
class WriteQueue {
 public:
  WriteQueue(Stream& stream, std::size_t high_water)
      : stream_(stream), high_water_(high_water), has_work_(stream.get_executor()), room_(stream.get_executor()),
        finished_(stream.get_executor()) {}

  // Drops the frame when the stream has failed or was closed: nobody can read it any more.
  void push(std::string frame) {
    if (closing_ || failed_) return;
    queued_bytes_ += frame.size();
    frames_.push_back(std::move(frame));
    has_work_.set();
  }

  std::size_t queued_bytes() const { return queued_bytes_; }
  bool failed() const { return failed_; }
  bool finished() const { return finished_.is_set(); }

  // Resumes once the queue is below its high-water mark (or the stream is gone).
  asio::awaitable<void> wait_for_room() {
    while (queued_bytes_ > high_water_ && !failed_ && !finished_.is_set()) {
      room_.reset();
      co_await room_.wait();
    }
  }

  // Write what is queued, then stop; run() returns after the last frame.
  void close() {
    closing_ = true;
    has_work_.set();
  }

  // Waits until run() has returned (everything written, or the stream failed), up to a deadline.
  asio::awaitable<bool> wait_finished(AsyncEvent::clock::duration timeout) { return finished_.wait_for(timeout); }

  // The writer loop. Batches whatever is queued into one gathered write.
  asio::awaitable<void> run() {
    std::vector<std::string> batch;
    std::vector<asio::const_buffer> buffers;
    while (!failed_) {
      if (frames_.empty()) {
        if (closing_) break;
        has_work_.reset();
        co_await has_work_.wait();
        continue;
      }
      batch.clear();
      buffers.clear();
      std::size_t bytes = 0;
      while (!frames_.empty() && batch.size() < 64 && bytes < (1u << 20)) {
        bytes += frames_.front().size();
        batch.push_back(std::move(frames_.front()));
        frames_.pop_front();
      }
      for (const auto& f : batch) buffers.emplace_back(asio::buffer(f));
      auto [ec, n] = co_await asio::async_write(stream_, buffers, asio::as_tuple(asio::use_awaitable));
      queued_bytes_ -= bytes;
      if (ec) {
        failed_ = true;
        frames_.clear();
        queued_bytes_ = 0;
      }
      if (queued_bytes_ <= high_water_ / 2 || failed_) room_.set();
    }
    finished_.set();
    room_.set();
  }

 private:
  Stream& stream_;
  std::size_t high_water_;
  std::deque<std::string> frames_;
  std::size_t queued_bytes_ = 0;
  bool closing_ = false;
  bool failed_ = false;
  AsyncEvent has_work_;
  AsyncEvent room_;
  AsyncEvent finished_;
};

}  // namespace rjg
