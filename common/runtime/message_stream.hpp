// One protocol stream over any Asio byte stream (a TCP or Unix socket, stdin/stdout, a child's pipes,
// an in-memory test stream): the framing, the single reader and the single writer in one place.
// Bytes stop here: the reader yields classified messages; everything else enqueues JSON texts.
//
//   MessageStream<tcp::socket> stream(options, std::move(socket));
//   co_spawn(ex, stream.run_writer(), ...);        // the one writer
//   for (;;) { auto in = co_await stream.read(); ... }   // the one reader
#pragma once

#include "common/protocol/framing.hpp"
#include "common/protocol/message.hpp"
#include "common/runtime/async_event.hpp"
#include "common/runtime/write_queue.hpp"

#include <boost/asio/buffer.hpp>
#include <boost/asio/co_spawn.hpp>

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace rjg::runtime {

// Frames with a body at least this large are classified (and, on a client connection, bound and
// pickle-checked) on an offload pool rather than the event loop: below it the work (about a millisecond
// per MiB of scanning) is cheaper than the two thread hops.
inline constexpr std::size_t kOffloadFrameBytes = 1u << 20;

struct StreamOptions {
  protocol::FramingLimits framing{};
  protocol::FrameReader::Mode mode = protocol::FrameReader::Mode::strict;
  protocol::JsonLimits json{};
  // The write queue may hold this much before wait_for_room() makes producers wait.
  std::size_t high_water = 4u << 20;
};

// What one read() returns.
struct Incoming {
  enum class Kind {
    message,        // a classified message
    invalid,        // a frame whose body is not a valid message: answer `problem` (the stream goes on)
    framing_error,  // the byte stream cannot be trusted any more: `error` says why
    closed,         // end of stream (`error` empty) or a read error (`error` says which)
    cancelled,      // the read was cancelled (stream.cancel()); read() may be called again
  };
  Kind kind = Kind::closed;
  std::optional<protocol::Message> message;
  std::optional<protocol::ProtocolError> problem;
  std::string body;   // kind invalid: the body, for the log
  std::string error;  // kind framing_error and closed
  boost::system::error_code read_error;  // kind closed: the read's error (eof at a clean end of stream)
};

template <typename Stream>
class MessageStream {
 public:
  using clock = AsyncEvent::clock;

  template <typename... StreamArgs>
  explicit MessageStream(StreamOptions options, StreamArgs&&... stream_args)
      : stream_(std::forward<StreamArgs>(stream_args)...),
        options_(options),
        reader_(options.framing, options.mode),
        writer_(stream_, options.high_water),
        buffer_(kReadMin) {}

  MessageStream(const MessageStream&) = delete;
  MessageStream& operator=(const MessageStream&) = delete;

  Stream& stream() { return stream_; }
  auto get_executor() { return stream_.get_executor(); }

  // --- reading (one reader at a time)

  // Lenient mode: stray bytes that are not a frame are handed here (for the log) as they are skipped.
  std::function<void(std::string_view)> on_stray_bytes;
  // Called when the first bytes of a frame arrive and the frame is not complete yet.
  std::function<void()> on_partial_frame;

  // Frames whose body is at least `threshold` bytes are classified on `pool` (a thread pool), so that
  // one huge frame does not hold up every other stream on this stream's thread. The reader waits for
  // the result before it looks at the next frame, so messages keep their order.
  void classify_large_frames_on(asio::any_io_executor pool, std::size_t threshold) {
    offload_ = std::move(pool);
    offload_threshold_ = threshold;
  }

  asio::awaitable<Incoming> read() {
    for (;;) {
      auto r = reader_.next();
      if (!r.skipped.empty() && on_stray_bytes) on_stray_bytes(r.skipped);
      if (r.kind == protocol::FrameReader::Result::Kind::frame) {
        mark_partial(reader_.buffered() > 0, true);
        if (offload_ && r.body.size() >= offload_threshold_) {
          // A coroutine function, not a lambda with captures: its frame owns the body.
          Incoming in = co_await asio::co_spawn(*offload_, classify_on_pool(std::move(r.body), options_.json),
                                                asio::use_awaitable);
          co_return in;
        }
        co_return classify(std::move(r.body), options_.json);
      }
      if (r.kind == protocol::FrameReader::Result::Kind::error) {
        Incoming in;
        in.kind = Incoming::Kind::framing_error;
        in.error = std::move(r.error);
        co_return in;
      }
      mark_partial(reader_.buffered() > 0, false);
      auto [ec, n] = co_await stream_.async_read_some(asio::buffer(buffer_), asio::as_tuple(asio::use_awaitable));
      if (ec) {
        Incoming in;
        if (ec == asio::error::operation_aborted) {
          in.kind = Incoming::Kind::cancelled;
        } else {
          in.kind = Incoming::Kind::closed;
          in.read_error = ec;
          if (ec != asio::error::eof) in.error = ec.message();
        }
        co_return in;
      }
      reader_.feed({buffer_.data(), n});
      resize_read_buffer(n);
    }
  }

  // Bytes received and not yet returned by read(): a partial frame, or whole frames not read yet.
  std::size_t buffered() const { return reader_.buffered(); }
  // Since when a frame has been arriving and is not complete; none between frames.
  std::optional<clock::time_point> partial_since() const { return partial_since_; }
  // The reader paused on purpose (back-pressure): a frame's read time starts again from now.
  void restart_read_clock() {
    if (partial_since_) partial_since_ = clock::now();
  }

  // --- writing (everything enqueues; run_writer() is the one writer)

  void send(std::string_view json_text) { writer_.push(protocol::encode_frame(json_text)); }
  // Bytes as they are, without framing (test peers that corrupt their own stream on purpose).
  void send_raw(std::string bytes) { writer_.push(std::move(bytes)); }
  // Resumes once the write queue is at most its high-water mark (or the stream is gone). A producer
  // that awaits it right before each send keeps the queue within high water + one frame.
  asio::awaitable<void> wait_for_room() { return writer_.wait_for_room(); }
  std::size_t queued_bytes() const { return writer_.queued_bytes(); }
  std::size_t high_water() const { return writer_.high_water(); }
  // Above the high-water mark: readers of this stream pause (back-pressure to the peer).
  bool write_queue_full() const { return writer_.full(); }
  // While above the high-water mark: since when the peer has taken no bytes (see WriteQueue).
  std::optional<clock::time_point> write_stalled_since() const { return writer_.stalled_since(); }
  // Called when the write queue rises above its high-water mark.
  void on_write_queue_full(std::function<void()> f) { writer_.on_full = std::move(f); }
  bool write_failed() const { return writer_.failed(); }

  asio::awaitable<void> run_writer() { return writer_.run(); }
  // Writes what is queued, then run_writer() returns.
  void close_writer() { writer_.close(); }
  // Until run_writer() has returned, up to a deadline; false at the deadline.
  asio::awaitable<bool> wait_written(clock::duration timeout) { return writer_.wait_finished(timeout); }

 private:
  static asio::awaitable<Incoming> classify_on_pool(std::string body, protocol::JsonLimits limits) {
    co_return classify(std::move(body), limits);
  }

  static Incoming classify(std::string body, protocol::JsonLimits limits) {
    Incoming in;
    auto classified = protocol::parse_message(body, limits);
    if (auto* bad = std::get_if<protocol::ProtocolError>(&classified)) {
      in.kind = Incoming::Kind::invalid;
      in.problem = std::move(*bad);
      in.body = std::move(body);
    } else {
      in.kind = Incoming::Kind::message;
      in.message.emplace(std::move(std::get<protocol::Message>(classified)));
    }
    return in;
  }

  // The read buffer starts small (an idle connection holds 4 KiB, not 64), doubles up to 64 KiB while
  // reads fill it, and goes back to 4 KiB after a run of small reads.
  void resize_read_buffer(std::size_t n) {
    if (n == buffer_.size() && buffer_.size() < kReadMax) {
      buffer_.resize(buffer_.size() * 2);
      small_reads_ = 0;
    } else if (n > kReadMin / 4) {
      small_reads_ = 0;
    } else if (buffer_.size() > kReadMin && ++small_reads_ >= 64) {
      std::vector<char>(kReadMin).swap(buffer_);
      small_reads_ = 0;
    }
  }

  // A frame's read time runs from its first byte until it is complete.
  void mark_partial(bool partial, bool frame_done) {
    if (!partial) {
      partial_since_.reset();
    } else if (!partial_since_ || frame_done) {
      partial_since_ = clock::now();
      if (on_partial_frame) on_partial_frame();
    }
  }

  Stream stream_;
  StreamOptions options_;
  protocol::FrameReader reader_;
  WriteQueue<Stream> writer_;
  static constexpr std::size_t kReadMin = 4 * 1024;
  static constexpr std::size_t kReadMax = 64 * 1024;
  std::vector<char> buffer_;
  std::size_t small_reads_ = 0;
  std::optional<clock::time_point> partial_since_;
  std::optional<asio::any_io_executor> offload_;
  std::size_t offload_threshold_ = 0;
};

// Two one-way streams as one duplex stream: a child's stdout and stdin, or a program's own stdin
// and stdout.
template <typename ReadStream, typename WriteStream>
class DuplexStream {
 public:
  using executor_type = typename ReadStream::executor_type;

  DuplexStream(ReadStream in, WriteStream out) : in_(std::move(in)), out_(std::move(out)) {}

  executor_type get_executor() { return in_.get_executor(); }
  ReadStream& in() { return in_; }
  WriteStream& out() { return out_; }

  template <typename Buffers, typename Token>
  auto async_read_some(const Buffers& buffers, Token&& token) {
    return in_.async_read_some(buffers, std::forward<Token>(token));
  }
  template <typename Buffers, typename Token>
  auto async_write_some(const Buffers& buffers, Token&& token) {
    return out_.async_write_some(buffers, std::forward<Token>(token));
  }
  template <typename Buffers>
    requires WritesNow<WriteStream>
  std::size_t write_some_now(const Buffers& buffers, boost::system::error_code& ec) {
    return out_.write_some_now(buffers, ec);
  }

 private:
  ReadStream in_;
  WriteStream out_;
};

}  // namespace rjg::runtime
