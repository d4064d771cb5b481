#include "gateway/admin_http.hpp"

#include "gateway/addresses.hpp"

#include "common/log.hpp"
#include "common/runtime/async_event.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/status.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <exception>
#include <limits>
#include <unordered_map>
#include <utility>

namespace rjg::gateway {
using namespace std::chrono_literals;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;

namespace detail {
struct AdminHttpState {
  AdminHttpState(asio::io_context& io, HttpHandler handler, std::vector<config::Network> allow_from, AdminHttpLimits limits)
      : io(io), handler(std::move(handler)), allow_from(std::move(allow_from)), limits(limits) {}

  asio::io_context& io;
  HttpHandler handler;
  std::vector<config::Network> allow_from;
  AdminHttpLimits limits;
  bool stopped = false;
  std::vector<std::shared_ptr<tcp::acceptor>> acceptors;
  // Every open connection, by number: stop() closes them.
  std::unordered_map<std::uint64_t, std::shared_ptr<beast::tcp_stream>> open;
  std::uint64_t next_connection = 0;
  // max_connections was reached and said so; said again only once it was below it in between.
  bool said_full = false;
};
}  // namespace detail

namespace {
using State = detail::AdminHttpState;

constexpr std::string_view kServer = "robot-jsonrpc-gateway";
constexpr std::string_view kText = "text/plain; charset=utf-8";
// After the last answer, what the client still sends is read and dropped (so that closing does not reset
// the connection before it has read the answer), at most this much and this long.
constexpr std::size_t kLingerBytes = 64 * 1024;
constexpr auto kLingerAtMost = std::chrono::milliseconds(2s);
// Paths in pages and log lines: escaped, and cut after this many bytes.
constexpr std::size_t kPathShown = 200;


// An IPv4-mapped IPv6 peer (a dual-stack listener) shows as its IPv4 address.
std::string client_text(const asio::ip::address& address) {
  if (address.is_v6() && address.to_v6().is_v4_mapped())
    return asio::ip::make_address_v4(asio::ip::v4_mapped, address.to_v6()).to_string();
  return address.to_string();
}


bool too_large(const boost::system::error_code& ec) {
  return ec == http::error::header_limit || ec == http::error::body_limit || ec == http::error::buffer_overflow;
}

// The answer as sent: the handler's status, type and body, and the headers every answer has.
http::response<http::string_body> make_response(const HttpResponse& answer, unsigned version, bool close) {
  http::response<http::string_body> res;
  res.version(version == 10 ? 10 : 11);
  res.result(answer.status);
  if (http::int_to_status(answer.status) == http::status::unknown) res.reason("");  // not "<unknown-status>"
  res.set(http::field::server, kServer);
  res.set(http::field::cache_control, "no-store");
  if (!answer.content_type.empty()) res.set(http::field::content_type, answer.content_type);
  if (answer.status == 405) res.set(http::field::allow, "GET, HEAD");
  res.body() = answer.body;
  res.content_length(answer.body.size());
  if (close)
    res.set(http::field::connection, "close");
  else
    res.keep_alive(true);  // HTTP/1.0: Connection: keep-alive; 1.1: nothing to say
  return res;
}

HttpResponse text(unsigned status, std::string body) { return HttpResponse{status, std::string(kText), std::move(body)}; }

// Writes one answer within the request timeout (HEAD: its headers only). False when it could not.
asio::awaitable<bool> write_response(beast::tcp_stream& stream, http::response<http::string_body> res, bool head,
                                     std::chrono::milliseconds timeout) {
  stream.expires_after(timeout);
  boost::system::error_code ec;
  if (head) {
    // Content-Length stays that of the body a GET gets.
    http::response<http::empty_body> headers(std::move(res.base()));
    std::tie(ec, std::ignore) = co_await http::async_write(stream, headers, asio::as_tuple(asio::use_awaitable));
  } else {
    std::tie(ec, std::ignore) = co_await http::async_write(stream, res, asio::as_tuple(asio::use_awaitable));
  }
  co_return !ec;
}

// Ends our side, reads and drops what the client still sends (bounded), then closes.
asio::awaitable<void> close_gracefully(beast::tcp_stream& stream, std::chrono::milliseconds timeout) {
  boost::system::error_code ec;
  stream.socket().shutdown(tcp::socket::shutdown_send, ec);
  if (!ec) {
    stream.expires_after(std::min<std::chrono::milliseconds>(timeout, kLingerAtMost));
    std::array<char, 4096> scratch;
    for (std::size_t drained = 0; drained < kLingerBytes;) {
      auto [read_ec, n] = co_await stream.async_read_some(asio::buffer(scratch), asio::as_tuple(asio::use_awaitable));
      if (read_ec) break;
      drained += n;
    }
  }
  stream.close();
}

// One connection: requests read, answered and written in turn, until the client ends it, a limit or an
// error does, or stop().
asio::awaitable<void> serve_connection(std::shared_ptr<State> state, std::uint64_t number,
                                       std::shared_ptr<beast::tcp_stream> stream, std::string peer) {
  struct Forget {
    State& state;
    std::uint64_t number;
    ~Forget() { state.open.erase(number); }
  } forget{*state, number};
  const auto limits = state->limits;
  const std::size_t max = limits.max_request_bytes;
  beast::flat_buffer buffer(max);
  for (std::size_t served = 0;;) {
    http::request_parser<http::string_body> parser;
    parser.header_limit(static_cast<std::uint32_t>(std::min<std::size_t>(max, std::numeric_limits<std::uint32_t>::max())));
    parser.body_limit(max);
    stream->expires_after(limits.request_timeout);
    auto [ec, header_bytes] =
        co_await http::async_read_header(*stream, buffer, parser, asio::as_tuple(asio::use_awaitable));
    // The whole request within max_request_bytes: the body gets what the header left. (Beast applies
    // header_limit to the request line and to the fields each, so the header is counted here too.)
    std::size_t total = header_bytes;
    if (!ec && header_bytes > max) ec = http::error::header_limit;
    if (!ec && !parser.is_done()) {
      const std::size_t left = max - std::min(max, header_bytes);
      if (auto length = parser.content_length(); length && *length > left) {
        ec = http::error::body_limit;
      } else {
        parser.body_limit(left);
        while (!ec && !parser.is_done()) {
          auto [read_ec, n] = co_await http::async_read_some(*stream, buffer, parser, asio::as_tuple(asio::use_awaitable));
          ec = read_ec;
          total += n;
          if (!ec && total > max) ec = http::error::body_limit;
        }
      }
    }
    if (state->stopped) co_return;
    if (ec) {
      if (ec == beast::error::timeout) {
        log::debug("admin: closed the connection from {}: no whole request within {} ms", peer,
                   limits.request_timeout.count());
      } else if (ec == http::error::end_of_stream) {
        // The client closed between requests: the usual end.
      } else if (ec == http::error::partial_message) {
        log::debug("admin: the connection from {} ended in the middle of a request", peer);
      } else if (too_large(ec) || ec.category() == http::make_error_code(http::error::bad_method).category()) {
        // Said once, then closed: what follows cannot be told apart from the rest of this request.
        const bool large = too_large(ec);
        log::debug("admin: {} from {}: {}", large ? "413 request too large" : "400 bad request", peer, ec.message());
        auto answer = large ? text(413, fmt::format("Request too large: at most {} bytes (request line, headers and "
                                                    "body).\n",
                                                    max))
                            : text(400, fmt::format("Bad request: {}.\n", ec.message()));
        if (co_await write_response(*stream, make_response(answer, 11, true), false, limits.request_timeout) &&
            !state->stopped)
          co_await close_gracefully(*stream, limits.request_timeout);
      } else {
        log::debug("admin: the connection from {} failed: {}", peer, ec.message());
      }
      stream->close();
      co_return;
    }

    const auto& req = parser.get();
    ++served;
    const bool last = !req.keep_alive() ||
                      (limits.max_requests_per_connection && served >= limits.max_requests_per_connection);
    const std::string_view target(req.target().data(), req.target().size());
    const std::string_view path = target.substr(0, target.find('?'));
    const bool head = req.method() == http::verb::head;
    HttpResponse answer;
    if (req.method() != http::verb::get && !head) {
      answer = text(405, fmt::format("Method {} is not allowed here; use GET or HEAD.\n",
                                     log::printable(std::string_view(req.method_string().data(), req.method_string().size()), 20)));
    } else {
      try {
        if (auto page = state->handler(path))
          answer = std::move(*page);
        else
          answer = text(404, fmt::format("No page at {}.\n", log::printable(path, kPathShown)));
        if (answer.status < 100 || answer.status > 999) {
          log::error("admin: the page {} answered with status {}, which is not an HTTP status",
                     log::printable(path, kPathShown), answer.status);
          answer = text(500, fmt::format("Internal error: the page answered with status {}.\n", answer.status));
        }
      } catch (const std::exception& e) {
        log::error("admin: the page {} failed: {}", log::printable(path, kPathShown), e.what());
        answer = text(500, fmt::format("Internal error: {}\n", e.what()));
      } catch (...) {
        log::error("admin: the page {} failed with an unknown exception", log::printable(path, kPathShown));
        answer = text(500, "Internal error.\n");
      }
    }
    log::debug("admin: {} {} {} from {}: {}", std::string_view(req.method_string().data(), req.method_string().size()),
               log::printable(path, kPathShown), req.version() == 10 ? "HTTP/1.0" : "HTTP/1.1", peer, answer.status);
    if (!co_await write_response(*stream, make_response(answer, req.version(), last), head, limits.request_timeout) ||
        state->stopped) {
      stream->close();
      co_return;
    }
    if (last) {
      co_await close_gracefully(*stream, limits.request_timeout);
      co_return;
    }
  }
}

asio::awaitable<void> accept_loop(std::shared_ptr<State> state,
                                  std::shared_ptr<tcp::acceptor> acceptor, std::string address) {
  while (!state->stopped && acceptor->is_open()) {
    auto [ec, socket] = co_await acceptor->async_accept(asio::as_tuple(asio::use_awaitable));
    if (state->stopped || ec == asio::error::operation_aborted || !acceptor->is_open()) break;
    if (ec) {
      // Typically out of file descriptors: back off instead of spinning on the same error.
      log::error("admin: listener {}: accept failed: {}; retrying in 100ms", address, ec.message());
      asio::steady_timer pause(state->io, 100ms);
      co_await pause.async_wait(asio::as_tuple(asio::use_awaitable));
      continue;
    }
    auto peer = socket.remote_endpoint(ec);
    if (ec) continue;  // already gone
    const auto client = client_text(peer.address());
    if (!allowed(state->allow_from, peer.address())) {
      // Nothing is said to an address that may not connect at all.
      log::warn("admin: refused a connection from {}: not in [admin] allow_from", client);
      socket.close(ec);
      continue;
    }
    const auto most = state->limits.max_connections;
    if (most && state->open.size() >= most) {
      if (!state->said_full)
        log::warn("admin: refused a connection from {}: {} admin connections are open, the most allowed; closing "
                  "new ones until one ends",
                  client, most);
      else
        log::debug("admin: refused a connection from {}: {} admin connections are open", client, most);
      state->said_full = true;
      socket.close(ec);
      continue;
    }
    state->said_full = false;
    const auto number = state->next_connection++;
    auto stream = std::make_shared<beast::tcp_stream>(std::move(socket));
    state->open.emplace(number, stream);
    auto name = fmt::format("{}:{}", client, peer.port());
    asio::co_spawn(state->io, serve_connection(state, number, std::move(stream), name),
                   log_exceptions("admin connection " + name));
  }
  std::erase(state->acceptors, acceptor);
}
}  // namespace

AdminHttpServer::AdminHttpServer(asio::io_context& io, HttpHandler handler, std::vector<config::Network> allow_from,
                                 AdminHttpLimits limits)
    : state_(std::make_shared<detail::AdminHttpState>(io, std::move(handler), std::move(allow_from), limits)) {}

AdminHttpServer::~AdminHttpServer() { stop(); }

void AdminHttpServer::serve(std::shared_ptr<tcp::acceptor> acceptor, std::string entry) {
  boost::system::error_code ec;
  const auto bound = acceptor->local_endpoint(ec);
  if (state_->stopped) {
    log::warn("admin: not serving {} ({}): the admin server has stopped", endpoint_text(bound), entry);
    acceptor->close(ec);
    return;
  }
  log::info("admin: serving HTTP on {} ({})", endpoint_text(bound), entry);
  state_->acceptors.push_back(acceptor);
  asio::co_spawn(state_->io, accept_loop(state_, std::move(acceptor), fmt::format("{} ({})", endpoint_text(bound), entry)),
                 log_exceptions("admin listener " + entry));
}

void AdminHttpServer::stop() {
  if (!state_) return;
  state_->stopped = true;
  boost::system::error_code ignored;
  for (auto& acceptor : state_->acceptors) acceptor->close(ignored);
  state_->acceptors.clear();
  // Each connection's coroutine ends on its own once its operation is aborted; none calls the handler again.
  auto open = std::move(state_->open);
  state_->open.clear();
  for (auto& [number, stream] : open) stream->close();
}

std::size_t AdminHttpServer::connections() const { return state_->open.size(); }

void AdminHttpServer::set_allow_from(std::vector<config::Network> allow_from) {
  state_->allow_from = std::move(allow_from);
}

}  // namespace rjg::gateway
