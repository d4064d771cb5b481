// A client connection over any Asio stream (TCP today; a Unix socket, stdin/stdout or an in-memory
// test stream the same way): the message stream's one reader and one writer, the watchdog with the
// session's timeouts, and the order of teardown. The protocol logic is the ClientSession's.
#pragma once

#include "common/log.hpp"
#include "common/protocol/protocol.hpp"
#include "common/runtime/fd_stream.hpp"
#include "common/runtime/message_stream.hpp"
#include "gateway/session/client_session.hpp"
#include "gateway/session/connection.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <fmt/format.h>

#include <memory>
#include <optional>
#include <string>

namespace rjg::gateway::session {

// How a transport stops reading without cancelling queued writes, and closes. Sockets by default;
// other streams specialize it.
template <typename Stream>
struct Transport {
  static void stop_reading(Stream& s) {
    boost::system::error_code ignored;
    s.shutdown(asio::socket_base::shutdown_receive, ignored);
  }
  static void close(Stream& s) {
    boost::system::error_code ignored;
    s.close(ignored);
  }
};

// stdin/stdout (--stdio): pipes, not a socket; reading stops by closing stdin.
template <>
struct Transport<runtime::DuplexStream<runtime::FdStream, runtime::FdStream>> {
  static void stop_reading(runtime::DuplexStream<runtime::FdStream, runtime::FdStream>& s) {
    boost::system::error_code ignored;
    s.in().close(ignored);
  }
  static void close(runtime::DuplexStream<runtime::FdStream, runtime::FdStream>& s) {
    boost::system::error_code ignored;
    s.in().close(ignored);
    s.out().close(ignored);
  }
};

template <typename Stream>
class StreamConnection final : public Connection, public std::enable_shared_from_this<StreamConnection<Stream>> {
 public:
  using clock = runtime::AsyncEvent::clock;

  // offload: a thread pool where large frames are classified and pickle-checked, off the event loop.
  StreamConnection(Stream stream, GatewayContext& context, supervisor::LeaseSource& leases, std::string name,
                   std::optional<asio::any_io_executor> offload = std::nullopt)
      : context_(context),
        config_(context.config()),
        leases_(leases),
        name_(std::move(name)),
        // Never more than workers accept (their limits are fixed at start): a message a worker could not
        // take would end it, and every import it holds.
        stream_(runtime::StreamOptions{protocol::FramingLimits{std::min(config_->gateway.max_message_bytes,
                                                     context.worker_options.framing.max_message_bytes),
                                            std::min(config_->gateway.max_header_bytes,
                                                     context.worker_options.framing.max_header_bytes)},
                              protocol::FrameReader::Mode::strict,
                              protocol::JsonLimits{config_->gateway.max_json_depth, config_->gateway.max_object_members},
                              kClientHighWater},
                std::move(stream)),
        closed_(stream_.get_executor()),
        connected_at_(clock::now()),
        last_activity_(connected_at_),
        watchdog_wake_(stream_.get_executor()),
        offload_(std::move(offload)) {
    if (offload_) stream_.classify_large_frames_on(*offload_, runtime::kOffloadFrameBytes);
  }

  ~StreamConnection() override { log::debug("{}: connection released", name_); }

  void start() {
    log::info("{}: connected", name_);
    auto self = this->shared_from_this();
    session_ = std::make_shared<ClientSession>(context_, config_, leases_, this->weak_from_this(), name_, stream_.get_executor());
    stream_.on_partial_frame = [this] { watchdog_wake_.set(); };
    stream_.on_write_queue_full([this] { watchdog_wake_.set(); });
    auto ex = stream_.get_executor();
    asio::co_spawn(ex, [self] { return self->stream_.run_writer(); }, runtime::log_exceptions(name_ + " writer"));
    asio::co_spawn(ex, [self] { return self->read_loop(); }, runtime::log_exceptions(name_ + " reader"));
    asio::co_spawn(ex, [self] { return self->watchdog(); }, runtime::log_exceptions(name_ + " watchdog"));
  }

  Stream& stream() { return stream_.stream(); }

  // Connection
  const std::string& name() const override { return name_; }
  void send(std::string json_text) override {
    context_.metrics.bytes_out.fetch_add(json_text.size(), std::memory_order_relaxed);
    stream_.send(json_text);
  }
  asio::awaitable<void> wait_for_room() override { co_await stream_.wait_for_room(); }
  bool closing() const override { return closing_; }
  void session_idle() override {
    last_activity_ = clock::now();
    // The watchdog is woken only if it would sleep past the new idle deadline: after most keywords it
    // already wakes earlier (and then plans anew), so an answer costs no extra pass of the loop.
    const auto idle = config_->gateway.idle_timeout;
    if (idle.count() > 0 && watchdog_until_ > last_activity_ + idle) watchdog_wake_.set();
  }
  asio::awaitable<void> wait_closed() override { co_await closed_.wait(); }
  void close(std::string why) override {
    if (closing_) return;
    closing_ = true;
    watchdog_wake_.set();
    auto self = this->shared_from_this();
    asio::co_spawn(stream_.get_executor(), [self, why] { return self->teardown(why); },
                   runtime::log_exceptions(name_ + " teardown"));
  }

 private:
  // The client's write queue may hold this much before the gateway stops reading from the client, and
  // answers and relayed logs wait for room (so a client that does not read stops its own worker).
  static constexpr std::size_t kClientHighWater = 4u << 20;
  // How long closing a connection waits for its queued answers to be written.
  static constexpr auto kFlushTimeout = std::chrono::seconds(5);

  // Back-pressure: while the client's write queue is above its high-water mark (the client does not
  // read its answers), the gateway reads nothing more from it, so what it holds for the client stays
  // bounded; the client's own sends then block in TCP. write_timeout ends a client that stays so.
  asio::awaitable<void> wait_until_writable() {
    if (!stream_.write_queue_full()) co_return;
    reading_paused_ = true;
    co_await stream_.wait_for_room();
    reading_paused_ = false;
    stream_.restart_read_clock();  // read_timeout does not count the pause
    watchdog_wake_.set();
  }

  asio::awaitable<void> read_loop() {
    std::string why = "the client closed the connection";
    while (!closing_) {
      co_await wait_until_writable();
      if (closing_) break;
      runtime::Incoming in = co_await stream_.read();
      if (in.kind == runtime::Incoming::Kind::message && offload_ && in.message->text().size() >= runtime::kOffloadFrameBytes)
        co_await session_->precheck(*in.message, *offload_);
      // Whatever handling this message sends (one answer at most, at once) finds room.
      if (in.kind == runtime::Incoming::Kind::message || in.kind == runtime::Incoming::Kind::invalid) {
        co_await wait_until_writable();
        if (closing_) {
          session_->clear_precheck();
          break;
        }
      }
      if (in.kind == runtime::Incoming::Kind::message) {
        last_activity_ = clock::now();
        context_.metrics.bytes_in.fetch_add(in.message->text().size(), std::memory_order_relaxed);
        session_->handle(*in.message);
      } else if (in.kind == runtime::Incoming::Kind::invalid) {
        last_activity_ = clock::now();
        session_->handle_invalid(*in.problem);
      } else if (in.kind == runtime::Incoming::Kind::framing_error) {
        // After a framing fault no later byte can be trusted to start a frame: say why, then hang up.
        // A PROXY header from an address that is not a configured balancer is refused this way.
        if (in.error.find("'PROXY ") != std::string::npos)
          in.error += " (a PROXY protocol header: the gateway reads one only on TCP connections from [gateway] "
                      "proxy_protocol_from, and only once)";
        log::warn("{}: framing error: {}; closing the connection", name_, in.error);
        send(protocol::make_error_raw("null", protocol::kParseError,
                            fmt::format("Framing error: {}. The gateway closes the connection.", in.error)));
        why = "framing error";
        break;
      } else {
        if (!in.error.empty()) why = "read error: " + in.error;
        break;
      }
    }
    close(std::move(why));
  }

  // Closes the connection when handshake_timeout, read_timeout, idle_timeout or write_timeout passes.
  // write_timeout is watched until the connection is closed, teardown included (answers then still
  // wait for room): a client that stopped reading is cut off, and nothing waits for it any longer.
  asio::awaitable<void> watchdog() {
    const auto& gw = config_->gateway;
    auto seconds = [](config::Duration d) { return fmt::format("{:g}s", static_cast<double>(d.count()) / 1000.0); };
    while (!closed_.is_set()) {
      if (auto since = stream_.write_stalled_since(); since && !abandoned_) {
        if (clock::now() >= *since + gw.write_timeout) {
          // Saying why would only queue behind what the client does not read: log it, drop the queue.
          log::warn("{}: closing: the client read nothing of its answers for {} while {} bytes waited for it "
                    "(write_timeout); the queued messages are dropped",
                    name_, seconds(gw.write_timeout), stream_.queued_bytes());
          abandon_writes();
          close("the client stopped reading (write_timeout)");
          co_return;
        }
      }
      if (closing_) {
        watchdog_wake_.reset();
        if (auto since = stream_.write_stalled_since(); since && !abandoned_)
          co_await watchdog_wake_.wait_until(*since + gw.write_timeout);
        else
          co_await watchdog_wake_.wait();
        continue;
      }
      const auto now = clock::now();
      auto next = clock::time_point::max();
      std::string expired;
      auto check = [&](clock::time_point deadline, std::string what) {
        if (now >= deadline) {
          if (expired.empty()) expired = std::move(what);
        } else {
          next = std::min(next, deadline);
        }
      };
      if (!session_->handshake_started())
        check(connected_at_ + gw.handshake_timeout,
              fmt::format("no robot/initialize within {} of connecting (handshake_timeout)",
                          seconds(gw.handshake_timeout)));
      if (auto since = stream_.write_stalled_since()) next = std::min(next, *since + gw.write_timeout);
      if (auto since = stream_.partial_since(); since && !reading_paused_)
        check(*since + gw.read_timeout,
              fmt::format("a message stayed half-read for {} (read_timeout)", seconds(gw.read_timeout)));
      if (gw.idle_timeout.count() > 0 && !session_->busy())
        check(last_activity_ + gw.idle_timeout,
              fmt::format("no message for {} (idle_timeout)", seconds(gw.idle_timeout)));
      else if (gw.idle_timeout.count() > 0 && last_activity_ + gw.idle_timeout > now)
        next = std::min(next, last_activity_ + gw.idle_timeout);  // busy: only a look again then
      if (!expired.empty()) {
        log::warn("{}: closing: {}", name_, expired);
        send(protocol::make_error_raw("null", protocol::kSessionTimeout,
                            "The gateway closes this connection: " + expired + "."));
        close(expired);
        continue;  // write_timeout is still watched while the connection closes
      }
      watchdog_wake_.reset();
      watchdog_until_ = next;
      co_await watchdog_wake_.wait_until(next);
      watchdog_until_ = clock::time_point::min();  // awake: planning
    }
  }

  // Closes the transport now: the write in progress fails, the queue is dropped, and every producer
  // waiting for room (answers, a worker relaying logs) goes on at once.
  void abandon_writes() {
    if (abandoned_) return;
    abandoned_ = true;
    Transport<Stream>::close(stream_.stream());
  }

  asio::awaitable<void> teardown(std::string why) {
    log::info("{}: closing: {}", name_, why);
    // Wakes the reader (end of stream) without cancelling writes still queued.
    Transport<Stream>::stop_reading(stream_.stream());
    co_await session_->end(why);
    stream_.close_writer();
    co_await stream_.wait_written(kFlushTimeout);
    Transport<Stream>::close(stream_.stream());
    log::info("{}: closed", name_);
    closed_.set();
    watchdog_wake_.set();
  }

  GatewayContext& context_;
  std::shared_ptr<const config::Config> config_;  // as when the client connected: its limits
  supervisor::LeaseSource& leases_;
  std::string name_;
  runtime::MessageStream<Stream> stream_;
  std::shared_ptr<ClientSession> session_;
  bool closing_ = false;
  runtime::AsyncEvent closed_;
  // When the connection opened, and when the last message arrived.
  clock::time_point connected_at_;
  clock::time_point last_activity_;
  // Until when the watchdog sleeps (min while it is awake or watches a closing connection).
  clock::time_point watchdog_until_ = clock::time_point::min();
  runtime::AsyncEvent watchdog_wake_;
  std::optional<asio::any_io_executor> offload_;
  bool reading_paused_ = false;  // back-pressure: the client's write queue is full
  bool abandoned_ = false;       // the transport was closed with writes still queued
};

extern template class StreamConnection<runtime::FdStream>;
extern template class StreamConnection<runtime::DuplexStream<runtime::FdStream, runtime::FdStream>>;

}  // namespace rjg::gateway::session
