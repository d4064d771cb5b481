#include "gateway/cli/client.hpp"

#include "common/protocol/framing.hpp"
#include "common/protocol/protocol.hpp"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <fmt/format.h>
#include <poll.h>

#include <cerrno>
#include <cstring>
#include <charconv>
#include <deque>

namespace rjg {

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
  asio::io_context io;
  tcp::socket socket{io};
  std::string peer;  // "host:port", for messages
  std::chrono::milliseconds timeout;
  FrameReader reader;
  std::deque<Message> pending;  // received, not yet handed out
  bool eof = false;
  std::uint64_t next_id = 1;
  std::string client_name = "robot-jsonrpc-gateway client";
  std::string client_version = "0.1.0";

  explicit Impl(std::chrono::milliseconds t) : timeout(t) {}

  void require_open() const {
    if (!socket.is_open()) throw RpcError(RpcError::Kind::closed, "not connected");
  }

  // Waits until fd is ready for events or the deadline passes; false on timeout.
  bool wait_fd(short events, Clock::time_point deadline) {
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      int ms = left.count() <= 0 ? 0 : static_cast<int>(std::min<long long>(left.count(), 1 << 30));
      pollfd pfd{socket.native_handle(), events, 0};
      int n = ::poll(&pfd, 1, ms);
      if (n > 0) return true;
      if (n == 0) return false;
      if (errno != EINTR) throw RpcError(RpcError::Kind::io, fmt::format("poll on {}: {}", peer, std::strerror(errno)));
    }
  }

  void write_all(std::string_view bytes) {
    require_open();
    auto deadline = Clock::now() + timeout;
    while (!bytes.empty()) {
      boost::system::error_code ec;
      std::size_t n = socket.write_some(asio::buffer(bytes.data(), bytes.size()), ec);
      if (ec == asio::error::would_block || ec == asio::error::try_again) {
        if (!wait_fd(POLLOUT, deadline))
          throw RpcError(RpcError::Kind::timeout,
                         fmt::format("timed out after {} ms writing to {} (the server does not read)",
                                     timeout.count(), peer));
        continue;
      }
      if (ec == asio::error::interrupted) continue;
      if (ec) throw RpcError(RpcError::Kind::io, fmt::format("write to {} failed: {}", peer, ec.message()));
      bytes.remove_prefix(n);
    }
  }

  // Moves every complete frame in the reader into `pending`.
  void drain_frames() {
    for (;;) {
      auto r = reader.next();
      if (r.kind == FrameReader::Result::Kind::need_more) return;
      if (r.kind == FrameReader::Result::Kind::error)
        throw RpcError(RpcError::Kind::framing, fmt::format("bad frame from {}: {}", peer, r.error));
      auto classified = parse_message(r.body);
      if (auto* err = std::get_if<ProtocolError>(&classified)) {
        std::string shown = r.body.size() > 200 ? r.body.substr(0, 200) + "..." : r.body;
        throw RpcError(RpcError::Kind::protocol,
                       fmt::format("invalid message from {}: {} (body: {})", peer, err->message, shown));
      }
      pending.push_back(std::move(std::get<Message>(classified)));
    }
  }

  // Reads once (waiting until deadline); false on timeout. Sets eof when the peer closed.
  bool read_some(Clock::time_point deadline) {
    require_open();
    if (eof) return false;
    if (!wait_fd(POLLIN, deadline)) return false;
    char buf[64 * 1024];
    boost::system::error_code ec;
    std::size_t n = socket.read_some(asio::buffer(buf), ec);
    if (ec == asio::error::would_block || ec == asio::error::try_again || ec == asio::error::interrupted)
      return true;
    if (ec == asio::error::eof || ec == asio::error::connection_reset || ec == asio::error::broken_pipe) {
      eof = true;
      return true;
    }
    if (ec) throw RpcError(RpcError::Kind::io, fmt::format("read from {} failed: {}", peer, ec.message()));
    reader.feed(std::string_view(buf, n));
    drain_frames();
    return true;
  }

  std::optional<Message> next_message(std::chrono::milliseconds t) {
    auto deadline = Clock::now() + t;
    for (;;) {
      if (!pending.empty()) {
        Message m = std::move(pending.front());
        pending.pop_front();
        return m;
      }
      if (eof) {
        if (reader.buffered() > 0)
          throw RpcError(RpcError::Kind::closed,
                         fmt::format("{} closed the connection in the middle of a frame ({} bytes pending)", peer,
                                     reader.buffered()));
        throw RpcError(RpcError::Kind::closed, fmt::format("{} closed the connection", peer));
      }
      if (!read_some(deadline) && Clock::now() >= deadline) return std::nullopt;
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
  if (s.socket.is_open()) s.socket.close(ec);
  s.reader = FrameReader{};
  s.pending.clear();
  s.eof = false;
  // A loopback or LAN connect is quick; a blocking connect is bounded by the kernel's SYN retries.
  asio::connect(s.socket, endpoints, ec);
  if (ec) throw RpcError(RpcError::Kind::connect, fmt::format("cannot connect to {}: {}", s.peer, ec.message()));
  s.socket.set_option(tcp::no_delay(true), ec);
  s.socket.non_blocking(true, ec);
  if (ec) throw RpcError(RpcError::Kind::connect, fmt::format("cannot configure socket to {}: {}", s.peer, ec.message()));
}

void RpcClient::connect(std::string_view uri) {
  std::string host;
  std::uint16_t port = 0;
  if (!parse_tcp_uri(uri, host, port))
    throw RpcError(RpcError::Kind::connect, fmt::format("not a tcp://HOST:PORT address: '{}'", uri));
  connect(host, port);
}

bool RpcClient::connected() const { return impl_->socket.is_open() && !impl_->eof; }

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
  impl_->write_all(encode_frame(make_request(id, method, std::move(params))));
}

RpcReply RpcClient::wait_reply(const json::value& id, const NotificationHandler& on_notification,
                               std::chrono::milliseconds timeout) {
  auto& s = *impl_;
  if (timeout.count() <= 0) timeout = s.timeout;
  auto deadline = Clock::now() + timeout;
  // Stray messages kept earlier may include the answer.
  std::deque<Message> kept;
  auto restore = [&] {
    for (auto it = kept.rbegin(); it != kept.rend(); ++it) s.pending.push_front(std::move(*it));
  };
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    std::optional<Message> m;
    try {
      m = s.next_message(std::max(left, 0ms));
    } catch (...) {
      restore();
      throw;
    }
    if (!m) {
      restore();
      throw RpcError(RpcError::Kind::timeout,
                     fmt::format("no answer to request id {} from {} within {} ms", id_to_string(id), s.peer,
                                 timeout.count()));
    }
    switch (m->kind) {
      case Message::Kind::notification:
        if (on_notification) on_notification(*m);
        break;
      case Message::Kind::response:
      case Message::Kind::error_response: {
        const bool is_error = m->kind == Message::Kind::error_response;
        if (m->id() == id || (is_error && m->id().is_null())) {
          restore();
          RpcReply reply;
          reply.id = m->id();
          if (is_error) reply.error = m->error();
          else reply.result = m->result();
          return reply;
        }
        kept.push_back(std::move(*m));
        break;
      }
      case Message::Kind::request:
        kept.push_back(std::move(*m));
        break;
    }
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
  impl_->write_all(encode_frame(make_notification(method, std::move(params))));
}

void RpcClient::send_raw(std::string_view bytes) { impl_->write_all(bytes); }

std::optional<Message> RpcClient::read_message(std::chrono::milliseconds timeout) {
  if (timeout.count() < 0) timeout = impl_->timeout;
  return impl_->next_message(timeout);
}

bool RpcClient::wait_closed(std::chrono::milliseconds timeout) {
  auto& s = *impl_;
  if (!s.socket.is_open()) return true;
  auto deadline = Clock::now() + timeout;
  while (!s.eof) {
    if (!s.read_some(deadline) && Clock::now() >= deadline) return false;
  }
  return true;
}

void RpcClient::close() {
  boost::system::error_code ec;
  if (impl_->socket.is_open()) {
    impl_->socket.shutdown(tcp::socket::shutdown_both, ec);
    impl_->socket.close(ec);
  }
}

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

}  // namespace rjg
