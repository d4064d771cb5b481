// The one writer of a stream (a client socket or a worker's stdin): everything else enqueues whole
// frames, a single coroutine drains them in order, so writes never interleave and ordering
// guarantees (logs before the answer) hold by construction. Queued bytes are counted so producers
// can wait for room (back-pressure) instead of growing memory without bound: a producer that awaits
// wait_for_room() right before each push keeps the queue at most high water + one frame.
//
// The queue is full from the moment it rises above its high-water mark until it has drained to half
// of it (so producers are not woken for every few bytes written); producers wait while it is full.
//
// Write-through: a frame pushed while nothing is queued or being written goes to the stream at once,
// when the stream can write without waiting (write_some_now, see fd_stream.hpp). On the steady path
// of a relay that is one write per message and no wakeup of the writer; only what does not fit now
// is queued for the writer.
#pragma once

#include "common/runtime/async_event.hpp"

#include <boost/asio/buffer.hpp>

#include <concepts>

#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace rjg::runtime {

// A stream that can write what fits right now, without waiting (FdStream).
template <typename Stream>
concept WritesNow = requires(Stream& s, asio::const_buffer b, boost::system::error_code& ec) {
  { s.write_some_now(b, ec) } -> std::convertible_to<std::size_t>;
};

template <typename Stream>
class WriteQueue {
 public:
  using clock = AsyncEvent::clock;

  WriteQueue(Stream& stream, std::size_t high_water)
      : stream_(stream), high_water_(high_water), has_work_(stream.get_executor()), room_(stream.get_executor()),
        finished_(stream.get_executor()) {}

  // Called when the queue rises above its high-water mark (a watchdog starts counting write_timeout).
  std::function<void()> on_full;

  // Drops the frame when the stream has failed or was closed: nobody can read it any more.
  void push(std::string frame) {
    if (closing_ || failed_) return;
    if constexpr (WritesNow<Stream>) {
      if (!writing_ && frames_.empty() && !frame.empty()) {
        boost::system::error_code ec;
        const std::size_t n = stream_.write_some_now(asio::buffer(frame), ec);
        if (ec && ec != asio::error::would_block) {
          // The writer sees it and ends, as after a failed write of its own.
          failed_ = true;
          has_work_.set();
          room_.set();
          return;
        }
        if (n == frame.size()) return;
        frame.erase(0, n);
      }
    }
    queued_bytes_ += frame.size();
    frames_.push_back(std::move(frame));
    has_work_.set();
    if (queued_bytes_ > high_water_ && !full_since_) {
      full_since_ = clock::now();
      if (on_full) on_full();
    }
  }

  std::size_t queued_bytes() const { return queued_bytes_; }
  std::size_t high_water() const { return high_water_; }
  bool full() const { return full_since_.has_value(); }
  bool failed() const { return failed_; }
  bool finished() const { return finished_.is_set(); }
  // While the queue is full: since when the writer has made no progress (the later of the moment it
  // became full and the last bytes the peer took). None otherwise.
  std::optional<clock::time_point> stalled_since() const { return full_since_; }

  // Resumes once the queue is not full (or the stream is gone).
  asio::awaitable<void> wait_for_room() {
    while (full_since_ && !failed_ && !finished_.is_set()) {
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

  // The writer loop. Batches whatever is queued into gathered writes; every write that completes is
  // progress (so a peer that reads slowly but steadily is told apart from one that stopped reading).
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
      writing_ = true;
      std::size_t bytes = 0;
      while (!frames_.empty() && batch.size() < 64 && bytes < (1u << 20)) {
        bytes += frames_.front().size();
        batch.push_back(std::move(frames_.front()));
        frames_.pop_front();
      }
      for (const auto& f : batch) buffers.emplace_back(asio::buffer(f));
      // Write the batch piece by piece: each piece written frees its bytes and counts as progress.
      std::size_t first = 0;
      while (first < buffers.size() && !failed_) {
        auto [ec, n] = co_await stream_.async_write_some(
            std::vector<asio::const_buffer>(buffers.begin() + static_cast<std::ptrdiff_t>(first), buffers.end()),
            asio::as_tuple(asio::use_awaitable));
        if (ec) {
          failed_ = true;
          break;
        }
        queued_bytes_ -= n;
        while (n > 0) {
          auto& b = buffers[first];
          if (n >= b.size()) {
            n -= b.size();
            ++first;
          } else {
            b += n;
            n = 0;
          }
        }
        while (first < buffers.size() && buffers[first].size() == 0) ++first;
        progressed();
      }
      writing_ = false;
      if (failed_) {
        frames_.clear();
        queued_bytes_ = 0;
        full_since_.reset();
      }
      if (!full_since_ || failed_) room_.set();
    }
    finished_.set();
    room_.set();
  }

 private:
  void progressed() {
    if (!full_since_) return;
    if (queued_bytes_ <= high_water_ / 2) {
      full_since_.reset();
      room_.set();
    } else {
      full_since_ = clock::now();
    }
  }

  Stream& stream_;
  std::size_t high_water_;
  std::deque<std::string> frames_;
  std::size_t queued_bytes_ = 0;
  std::optional<clock::time_point> full_since_;
  bool closing_ = false;
  bool failed_ = false;
  bool writing_ = false;  // run() holds a batch: a push may not write past it
  AsyncEvent has_work_;
  AsyncEvent room_;
  AsyncEvent finished_;
};

}  // namespace rjg::runtime
