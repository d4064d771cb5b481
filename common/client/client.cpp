#include "common/client/client.hpp"

#include "common/protocol/protocol.hpp"
#include "common/runtime/message_stream.hpp"

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <fmt/format.h>

#include <charconv>
#include <deque>

namespace rjg::client {

namespace asio = boost::asio;
using asio::ip::tcp;
using namespace std::chrono_literals;

int RpcReply::error_code() const {
  if (!error) return 0;
  auto it = error->find("code");
  if (it == error->end()) return 0;
  if (it->value().is_int64()) return static_cast<int>(it->value().get_int64());
  if (it->value().is_uint64()) return static_cast<int>(it->value().get_uint64());
  if (it->value().is_double()) return static_cast<int>(it->value().get_double());
  return 0;
}

std::string RpcReply::error_message() const {
  if (!error) return {};
  auto it = error->find("message");
  if (it == error->end()) return {};
  if (it->value().is_string()) return std::string(it->value().get_string());
  return json::serialize(it->value());
}

const json::object* RpcReply::keyword_error() const {
  if (!result || !result->is_object()) return nullptr;
  auto it = result->get_object().find("error");
  if (it == result->get_object().end() || !it->value().is_object()) return nullptr;
  return &it->value().get_object();
}

namespace {
// A member of an error object as text: a string as it is, anything else as JSON; "" when absent.
std::string member_text(const json::object& object, std::string_view name) {
  auto it = object.find(name);
  if (it == object.end() || it->value().is_null()) return {};
  if (it->value().is_string()) return std::string(it->value().get_string());
  return json::serialize(it->value());
}
}  // namespace

std::string RpcReply::keyword_error_type() const {
  const json::object* failed = keyword_error();
  return failed ? member_text(*failed, "type") : std::string();
}

std::string RpcReply::failure_message() const {
  if (const json::object* failed = keyword_error()) return member_text(*failed, "message");
  return error_message();
}

bool parse_tcp_uri(std::string_view uri, std::string& host, std::uint16_t& port) {
  if (uri.starts_with("tcp://")) uri.remove_prefix(6);
  if (uri.ends_with("/")) uri.remove_suffix(1);
  auto colon = uri.rfind(':');
  if (colon == std::string_view::npos || colon == 0 || colon + 1 == uri.size()) return false;
  auto h = uri.substr(0, colon);
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  auto p = uri.substr(colon + 1);
  unsigned value = 0;
  auto [ptr, ec] = std::from_chars(p.data(), p.data() + p.size(), value);
  if (ec != std::errc{} || ptr != p.data() + p.size() || value == 0 || value > 65535) return false;
  host.assign(h);
  port = static_cast<std::uint16_t>(value);
  return true;
}

struct RpcClient::Impl {
  using Stream = runtime::MessageStream<tcp::socket>;

  asio::io_context io{1};
  std::optional<Stream> stream;  // while connected (until close())
  bool writer_running = false;
  std::string peer;  // "host:port", for messages
  std::chrono::milliseconds timeout;
  std::deque<protocol::Message> pending;  // received, not yet handed out
  bool eof = false;
  std::uint64_t next_id = 1;
  std::string client_name = "robot-jsonrpc-gateway client";
  std::string client_version = "0.1.0";

  explicit Impl(std::chrono::milliseconds t) : timeout(t) {}
  ~Impl() { disconnect(); }

  bool open() { return stream && stream->stream().is_open(); }

  void require_open() {
    if (!open()) throw RpcError(RpcError::Kind::closed, "not connected");
  }

  // Runs the io_context until done() holds or the deadline passes. A deadline already past still
  // runs what is ready (a poll). Returns done().
  template <typename Done>
  bool run_until(Done done, Clock::time_point deadline) {
    if (io.stopped()) io.restart();
    if (Clock::now() >= deadline) io.poll();
    while (!done() && Clock::now() < deadline) {
      // Stopped: nothing is left that could make done() true.
      if (io.run_one_until(deadline) == 0 && io.stopped()) break;
    }
    return done();
  }

  void connected(tcp::socket socket) {
    stream.emplace(runtime::StreamOptions{}, std::move(socket));
    writer_running = true;
    asio::co_spawn(io, stream->run_writer(), [this](std::exception_ptr) { writer_running = false; });
  }

  // Ends the connection: the writer stops (what it could not write is dropped), the socket closes.
  void disconnect() {
    if (!stream) return;
    boost::system::error_code ec;
    stream->close_writer();
    if (stream->stream().is_open()) {
      stream->stream().shutdown(tcp::socket::shutdown_both, ec);
      stream->stream().close(ec);
    }
    run_until([&] { return !writer_running; }, Clock::now() + 5s);
    stream.reset();
  }

  // A frame (send) or bytes as they are (send_raw), written before returning.
  void send(std::string_view json_text) {
    require_writable();
    stream->send(json_text);
    flush();
  }
  void send_raw(std::string bytes) {
    require_writable();
    stream->send_raw(std::move(bytes));
    flush();
  }

  void require_writable() {
    require_open();
    if (stream->write_failed())
      throw RpcError(RpcError::Kind::io, fmt::format("write to {} failed: the connection is broken", peer));
  }

  // Runs the writer until the queue is empty. After a timeout the rest stays queued (and goes out
  // while the client next waits for something).
  void flush() {
    auto written = [&] { return stream->queued_bytes() == 0 || stream->write_failed(); };
    if (!run_until(written, Clock::now() + timeout))
      throw RpcError(RpcError::Kind::timeout,
                     fmt::format("timed out after {} ms writing to {} (the server does not read)", timeout.count(),
                                 peer));
    if (stream->write_failed())
      throw RpcError(RpcError::Kind::io, fmt::format("write to {} failed: the connection is broken", peer));
  }

  // One read() of the stream, up to the deadline. At the deadline the read is cancelled
  // (Incoming::Kind::cancelled): bytes already received stay in the stream's buffer.
  runtime::Incoming read_one(Clock::time_point deadline) {
    std::optional<runtime::Incoming> result;
    std::exception_ptr failure;
    asio::cancellation_signal cancel;
    asio::co_spawn(io, stream->read(),
                   asio::bind_cancellation_slot(cancel.slot(), [&](std::exception_ptr e, runtime::Incoming in) {
                     if (e) failure = e;
                     else result = std::move(in);
                   }));
    auto finished = [&] { return result || failure; };
    if (!run_until(finished, deadline)) {
      cancel.emit(asio::cancellation_type::terminal);
      if (!run_until(finished, Clock::now() + 5s)) {
        // Not expected: a cancelled read completes at once. Closing the socket ends it for sure.
        boost::system::error_code ec;
        stream->stream().close(ec);
        run_until(finished, Clock::time_point::max());
      }
    }
    if (failure) {
      // Cancelled between two reads of the socket: the coroutine throws instead of reading again.
      try {
        std::rethrow_exception(failure);
      } catch (const boost::system::system_error& e) {
        if (e.code() != asio::error::operation_aborted)
          throw RpcError(RpcError::Kind::io, fmt::format("read from {} failed: {}", peer, e.what()));
      }
      runtime::Incoming in;
      in.kind = runtime::Incoming::Kind::cancelled;
      return in;
    }
    return std::move(*result);
  }

  // Reads until a message arrives or the peer closes (false: the deadline passed first). The
  // message goes to `pending`, with every further complete frame already received.
  bool receive(Clock::time_point deadline) {
    require_open();
    if (eof) return false;
    bool received = false;
    for (;;) {
      runtime::Incoming in = read_one(received ? Clock::now() : deadline);
      switch (in.kind) {
        case runtime::Incoming::Kind::message:
          pending.push_back(std::move(*in.message));
          received = true;
          if (stream->buffered() == 0) return true;
          break;
        case runtime::Incoming::Kind::invalid:
          throw RpcError(RpcError::Kind::protocol, fmt::format("invalid message from {}: {} (body: {})", peer,
                                                               in.problem->message, shorten(in.body)));
        case runtime::Incoming::Kind::framing_error:
          throw RpcError(RpcError::Kind::framing, fmt::format("bad frame from {}: {}", peer, in.error));
        case runtime::Incoming::Kind::closed:
          if (!peer_gone(in.read_error))
            throw RpcError(RpcError::Kind::io, fmt::format("read from {} failed: {}", peer, in.error));
          eof = true;
          return true;
        case runtime::Incoming::Kind::cancelled:
          return received;
      }
    }
  }

  // A tree view of a received message. Classification refuses what Boost.JSON would refuse; should
  // the two ever disagree, the message is a protocol error here like any other the client cannot read,
  // not a Boost exception out of a blocking call.
  template <typename View>
  auto tree(const protocol::Message& m, View view) -> decltype(view(m)) {
    try {
      return view(m);
    } catch (const boost::system::system_error& e) {
      throw RpcError(RpcError::Kind::protocol, fmt::format("message from {} cannot be read as a JSON tree: {} (body: {})",
                                                           peer, e.code().message(), shorten(m.text())));
    }
  }

  static std::string shorten(const std::string& body) {
    return body.size() > 200 ? body.substr(0, 200) + "..." : body;
  }

  // End of stream, or a reset: the peer has closed the connection.
  static bool peer_gone(const boost::system::error_code& ec) {
    return ec == asio::error::eof || ec == asio::error::connection_reset || ec == asio::error::broken_pipe;
  }

  std::optional<protocol::Message> next_message(std::chrono::milliseconds t) {
    auto deadline = Clock::now() + t;
    for (;;) {
      if (!pending.empty()) {
        protocol::Message m = std::move(pending.front());
        pending.pop_front();
        return m;
      }
      if (eof) {
        if (stream && stream->buffered() > 0)
          throw RpcError(RpcError::Kind::closed,
                         fmt::format("{} closed the connection in the middle of a frame ({} bytes pending)", peer,
                                     stream->buffered()));
        throw RpcError(RpcError::Kind::closed, fmt::format("{} closed the connection", peer));
      }
      if (!receive(deadline) && Clock::now() >= deadline) return std::nullopt;
    }
  }
};

RpcClient::RpcClient(std::chrono::milliseconds read_timeout) : impl_(std::make_unique<Impl>(read_timeout)) {}
RpcClient::~RpcClient() = default;
RpcClient::RpcClient(RpcClient&&) noexcept = default;
RpcClient& RpcClient::operator=(RpcClient&&) noexcept = default;

void RpcClient::connect(const std::string& host, std::uint16_t port) {
  auto& s = *impl_;
  s.peer = fmt::format("{}:{}", host, port);
  boost::system::error_code ec;
  tcp::resolver resolver(s.io);
  auto endpoints = resolver.resolve(host, std::to_string(port), ec);
  if (ec) throw RpcError(RpcError::Kind::connect, fmt::format("cannot resolve {}: {}", host, ec.message()));
  s.disconnect();
  s.pending.clear();
  s.eof = false;
  // A loopback or LAN connect is quick; a blocking connect is bounded by the kernel's SYN retries.
  tcp::socket socket(s.io);
  asio::connect(socket, endpoints, ec);
  if (ec) throw RpcError(RpcError::Kind::connect, fmt::format("cannot connect to {}: {}", s.peer, ec.message()));
  socket.set_option(tcp::no_delay(true), ec);
  if (ec) throw RpcError(RpcError::Kind::connect, fmt::format("cannot configure socket to {}: {}", s.peer, ec.message()));
  s.connected(std::move(socket));
}

void RpcClient::connect(std::string_view uri) {
  std::string host;
  std::uint16_t port = 0;
  if (!parse_tcp_uri(uri, host, port))
    throw RpcError(RpcError::Kind::connect, fmt::format("not a tcp://HOST:PORT address: '{}'", uri));
  connect(host, port);
}

bool RpcClient::connected() const { return impl_->open() && !impl_->eof; }

void RpcClient::set_timeout(std::chrono::milliseconds timeout) { impl_->timeout = timeout; }
std::chrono::milliseconds RpcClient::timeout() const { return impl_->timeout; }

void RpcClient::set_client_info(std::string name, std::string version) {
  impl_->client_name = std::move(name);
  impl_->client_version = std::move(version);
}

json::value RpcClient::send_request(std::string_view method, json::value params) {
  json::value id = json::string(std::to_string(impl_->next_id++));
  send_request_with_id(id, method, std::move(params));
  return id;
}

void RpcClient::send_request_with_id(const json::value& id, std::string_view method, json::value params) {
  impl_->send(protocol::make_request(id, method, params));
}

RpcReply RpcClient::wait_reply(const json::value& id, const NotificationHandler& on_notification,
                               std::chrono::milliseconds timeout) {
  auto& s = *impl_;
  if (timeout.count() <= 0) timeout = s.timeout;
  auto deadline = Clock::now() + timeout;
  // Stray messages kept earlier may include the answer.
  std::deque<protocol::Message> kept;
  auto restore = [&] {
    for (auto it = kept.rbegin(); it != kept.rend(); ++it) s.pending.push_front(std::move(*it));
    kept.clear();
  };
  try {
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      std::optional<protocol::Message> m = s.next_message(std::max(left, 0ms));
      if (!m)
        throw RpcError(RpcError::Kind::timeout,
                       fmt::format("no answer to request id {} from {} within {} ms", protocol::id_to_string(id), s.peer,
                                   timeout.count()));
      switch (m->kind) {
        case protocol::Message::Kind::notification:
          if (on_notification) on_notification(*m);
          break;
        case protocol::Message::Kind::response:
        case protocol::Message::Kind::error_response: {
          const bool is_error = m->kind == protocol::Message::Kind::error_response;
          json::value answered = s.tree(*m, [](const protocol::Message& x) { return x.id(); });
          if (answered == id || (is_error && answered.is_null())) {
            RpcReply reply;
            reply.id = std::move(answered);
            if (is_error) reply.error = s.tree(*m, [](const protocol::Message& x) { return x.error(); });
            else reply.result = s.tree(*m, [](const protocol::Message& x) { return x.result(); });
            reply.text = m->text();
            restore();
            return reply;
          }
          kept.push_back(std::move(*m));
          break;
        }
        case protocol::Message::Kind::request:
          kept.push_back(std::move(*m));
          break;
      }
    }
  } catch (...) {
    restore();
    throw;
  }
}

RpcReply RpcClient::request(std::string_view method, json::value params, const NotificationHandler& on_notification) {
  auto id = send_request(method, std::move(params));
  return wait_reply(id, on_notification);
}

RpcReply RpcClient::request_with_id(const json::value& id, std::string_view method, json::value params,
                                    const NotificationHandler& on_notification) {
  send_request_with_id(id, method, std::move(params));
  return wait_reply(id, on_notification);
}

void RpcClient::notify(std::string_view method, json::value params) {
  impl_->send(protocol::make_notification(method, params));
}

void RpcClient::send_raw(std::string_view bytes) { impl_->send_raw(std::string(bytes)); }

std::optional<protocol::Message> RpcClient::read_message(std::chrono::milliseconds timeout) {
  if (timeout.count() < 0) timeout = impl_->timeout;
  return impl_->next_message(timeout);
}

bool RpcClient::wait_closed(std::chrono::milliseconds timeout) {
  auto& s = *impl_;
  if (!s.open()) return true;
  auto deadline = Clock::now() + timeout;
  while (!s.eof) {
    if (!s.receive(deadline) && Clock::now() >= deadline) return false;
  }
  return true;
}

void RpcClient::close() { impl_->disconnect(); }

std::size_t RpcClient::pending_messages() const { return impl_->pending.size(); }

json::object RpcClient::initialize() {
  json::object params;
  params["capabilities"] = json::object{};
  params["client_info"] = json::object{{"name", impl_->client_name}, {"version", impl_->client_version}};
  auto reply = request(protocol::kInitialize, std::move(params));
  if (!reply.ok()) throw RpcCallError(reply.error_code(), reply.error_message());
  notify(protocol::kInitialized, json::object{});
  if (!reply.result->is_object())
    throw RpcError(RpcError::Kind::protocol,
                   fmt::format("robot/initialize result is not an object: {}", json::serialize(*reply.result)));
  return reply.result->get_object();
}

RpcReply RpcClient::import_library(std::string_view name, json::array args, json::object kw_args) {
  json::object params;
  params["name"] = name;
  params["args"] = std::move(args);
  params["kw_args"] = std::move(kw_args);
  return request(protocol::kImportLibrary, std::move(params));
}

RpcReply RpcClient::run_keyword(std::string_view token, std::string_view name, json::array args, json::object kwargs,
                                const NotificationHandler& on_log) {
  json::object params;
  params["library_token"] = token;
  params["name"] = name;
  params["args"] = std::move(args);
  params["kwargs"] = std::move(kwargs);
  return request(protocol::kRunKeyword, std::move(params), on_log);
}

RpcReply RpcClient::finalize_library(std::string_view token) {
  return request(protocol::kFinalizeLibrary, json::object{{"token", token}});
}

RpcReply RpcClient::shutdown() { return request(protocol::kShutdown, json::object{}); }

void RpcClient::exit() { notify(protocol::kExit, json::object{}); }

}  // namespace rjg::client
