#include "gateway/fronts/http_server.hpp"

#include "gateway/fronts/addresses.hpp"
#include "gateway/fronts/client_counts.hpp"

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
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <exception>
#include <limits>
#include <map>
#include <unordered_map>
#include <utility>

namespace rjg::gateway::fronts {
using namespace std::chrono_literals;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;

namespace detail {
struct HttpState {
  HttpState(asio::io_context& io, std::string name, HttpHandler pages, HttpService service,
            std::vector<config::Network> allow_from, HttpLimits limits)
      : io(io),
        name(std::move(name)),
        pages(std::move(pages)),
        service(std::move(service)),
        allow_from(std::move(allow_from)),
        limits(limits) {}

  asio::io_context& io;
  std::string name;     // log lines: "admin: ...", "classic: ..."
  HttpHandler pages;    // GET and HEAD; or
  HttpService service;  // POST
  std::vector<config::Network> allow_from;
  HttpLimits limits;
  bool stopped = false;
  std::vector<std::shared_ptr<tcp::acceptor>> acceptors;
  // Every open connection, by number: stop() closes them.
  std::unordered_map<std::uint64_t, std::shared_ptr<beast::tcp_stream>> open;
  ClientCounts per_client;  // open connections per client address
  // The connections of `open` taken beyond max_connections for probes (probe_connections): their client
  // address, by number, so the oldest comes first.
  std::map<std::uint64_t, std::string> probe_room;
  std::uint64_t next_connection = 0;
  // max_connections was reached and said so; said again only once it was below it in between.
  bool said_full = false;
};
}  // namespace detail

namespace {
using State = detail::HttpState;

constexpr std::string_view kServer = "robot-jsonrpc-gateway";
constexpr std::string_view kText = "text/plain; charset=utf-8";
// After the last answer, what the client still sends is read and dropped (so that closing does not reset
// the connection before it has read the answer), at most this much and this long.
constexpr std::size_t kLingerBytes = 64 * 1024;
constexpr auto kLingerAtMost = std::chrono::milliseconds(2s);
// Paths in pages and log lines: escaped, and cut after this many bytes.
constexpr std::size_t kPathShown = 200;



bool too_large(const boost::system::error_code& ec) {
  return ec == http::error::header_limit || ec == http::error::body_limit || ec == http::error::buffer_overflow;
}

// The answer as sent: the handler's status, type and body, and the headers every answer has.
http::response<http::string_body> make_response(const HttpResponse& answer, unsigned version, bool close,
                                                std::string_view allow) {
  http::response<http::string_body> res;
  res.version(version == 10 ? 10 : 11);
  res.result(answer.status);
  if (http::int_to_status(answer.status) == http::status::unknown) res.reason("");  // not "<unknown-status>"
  res.set(http::field::server, kServer);
  res.set(http::field::cache_control, "no-store");
  if (!answer.content_type.empty()) res.set(http::field::content_type, answer.content_type);
  if (answer.status == 405) res.set(http::field::allow, allow);
  for (const auto& [name, value] : answer.headers) res.set(name, value);
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

// Ends our side, reads and drops what the client still sends (bounded), then closes. More than
// kLingerBytes (a declared body: HttpLimits::too_large_answer) is waited for as long as a request may take.
asio::awaitable<void> close_gracefully(beast::tcp_stream& stream, std::chrono::milliseconds timeout,
                                       std::uint64_t linger_bytes = kLingerBytes) {
  boost::system::error_code ec;
  stream.socket().shutdown(tcp::socket::shutdown_send, ec);
  if (!ec) {
    stream.expires_after(linger_bytes > kLingerBytes ? timeout
                                                     : std::min<std::chrono::milliseconds>(timeout, kLingerAtMost));
    std::array<char, 4096> scratch;
    for (std::uint64_t drained = 0; drained < linger_bytes;) {
      auto [read_ec, n] = co_await stream.async_read_some(asio::buffer(scratch), asio::as_tuple(asio::use_awaitable));
      if (read_ec) break;
      drained += n;
    }
  }
  stream.close();
}

// One connection: requests read, answered and written in turn, until the client ends it, a limit or an
// error does, or stop().
// probe_only: a connection kept for probes (HttpLimits::probe_connections): one request, a probe path or 503.
asio::awaitable<void> serve_connection(std::shared_ptr<State> state, std::uint64_t number,
                                       std::shared_ptr<beast::tcp_stream> stream, std::string client, std::string peer,
                                       bool probe_only) {
  struct Forget {
    State& state;
    std::uint64_t number;
    std::string client;
    ~Forget() {
      state.open.erase(number);
      state.probe_room.erase(number);
      state.per_client.remove(client);
    }
  } forget{*state, number, client};
  const std::string_view name = state->name;
  const bool post = static_cast<bool>(state->service);
  const std::string_view allow = post ? "POST" : "GET, HEAD";
  const auto limits = state->limits;
  const std::size_t max = limits.max_request_bytes;
  const auto header_timeout = limits.header_timeout.count() > 0 ? std::min(limits.header_timeout, limits.request_timeout)
                                                                : limits.request_timeout;
  // A probe's connection is done in a moment; it gets no longer than a header for anything.
  const auto request_timeout = probe_only ? header_timeout : limits.request_timeout;
  beast::flat_buffer buffer(max);
  for (std::size_t served = 0;;) {
    http::request_parser<http::string_body> parser;
    parser.header_limit(static_cast<std::uint32_t>(std::min<std::size_t>(max, std::numeric_limits<std::uint32_t>::max())));
    // No body limit of Beast's while the header is read: it would refuse a Content-Length over it before the
    // header is done, and then the length is unknown (a too_large_answer drains the declared body). The
    // body's limit is set below, from what the header left of max.
    parser.body_limit(boost::none);
    // Both deadlines count from here: trickling bytes does not move them.
    const auto waiting_since = std::chrono::steady_clock::now();
    stream->expires_at(waiting_since + header_timeout);
    auto [ec, header_bytes] =
        co_await http::async_read_header(*stream, buffer, parser, asio::as_tuple(asio::use_awaitable));
    const bool header_late = ec == beast::error::timeout;
    // The whole request within max_request_bytes: the body gets what the header left. (Beast applies
    // header_limit to the request line and to the fields each, so the header is counted here too.)
    std::size_t total = header_bytes;
    if (!ec && header_bytes > max) ec = http::error::header_limit;
    if (!ec && !parser.is_done()) {
      stream->expires_at(waiting_since + request_timeout);
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
      if (header_late) {
        log::debug("{}: closed the connection from {}: no request line and headers within {} ms", name, peer,
                   header_timeout.count());
      } else if (ec == beast::error::timeout) {
        log::debug("{}: closed the connection from {}: no whole request within {} ms", name, peer,
                   request_timeout.count());
      } else if (ec == http::error::end_of_stream) {
        // The client closed between requests: the usual end.
      } else if (ec == http::error::partial_message) {
        log::debug("{}: the connection from {} ended in the middle of a request", name, peer);
      } else if (too_large(ec) || ec.category() == http::make_error_code(http::error::bad_method).category()) {
        // Said once, then closed: what follows cannot be told apart from the rest of this request.
        const bool large = too_large(ec);
        log::debug("{}: {} from {}: {}", name, large ? "413 request too large" : "400 bad request", peer, ec.message());
        auto answer = large && limits.too_large_answer ? *limits.too_large_answer
                      : large ? text(413, fmt::format("Request too large: at most {} bytes (request line, headers and "
                                                      "body).\n",
                                                      max))
                              : text(400, fmt::format("Bad request: {}.\n", ec.message()));
        // Only a complete header has a length (Beast asserts it): a header over the limit, or garbage, has none.
        const auto declared = parser.is_header_done() ? parser.content_length() : boost::optional<std::uint64_t>();
        const std::uint64_t linger = large && limits.too_large_answer && declared ? *declared : kLingerBytes;
        if (co_await write_response(*stream, make_response(answer, 11, true, allow), false, request_timeout) &&
            !state->stopped)
          co_await close_gracefully(*stream, request_timeout, linger);
      } else {
        log::debug("{}: the connection from {} failed: {}", name, peer, ec.message());
      }
      stream->close();
      co_return;
    }

    auto& req = parser.get();
    ++served;
    const bool last = probe_only || !req.keep_alive() ||
                      (limits.max_requests_per_connection && served >= limits.max_requests_per_connection);
    const std::string_view target(req.target().data(), req.target().size());
    const std::string_view path = target.substr(0, target.find('?'));
    const std::string_view method(req.method_string().data(), req.method_string().size());
    const bool head = !post && req.method() == http::verb::head;
    HttpResponse answer;
    if (probe_only && std::find(limits.probe_paths.begin(), limits.probe_paths.end(), path) == limits.probe_paths.end()) {
      answer = text(503, fmt::format("Service unavailable: {} connections are open, the most this endpoint takes "
                                     "(max_connections); only {} are answered until one of them closes. Try "
                                     "again in a moment.\n",
                                     limits.max_connections, fmt::join(limits.probe_paths, " and ")));
    } else if (post ? req.method() != http::verb::post : req.method() != http::verb::get && !head) {
      answer = text(405, fmt::format("Method {} is not allowed here; use {}.\n", log::printable(method, 20),
                                     post ? "POST" : "GET or HEAD"));
    } else {
      std::optional<HttpResponse> found;
      std::string failure;
      try {
        if (post) {
          // A named request, not a temporary in the co_await expression: GCC 12 destroys such temporaries
          // twice when the coroutine suspends inside the expression.
          HttpRequest request{path, std::move(req.body()), peer, client};
          auto answering = state->service(std::move(request));
          found = co_await std::move(answering);
        } else
          found = state->pages(path);
      } catch (const std::exception& e) {
        failure = e.what();
      } catch (...) {
        failure = "an unknown exception";
      }
      if (!failure.empty()) {
        log::error("{}: {} {} failed: {}", name, method, log::printable(path, kPathShown), failure);
        answer = text(500, fmt::format("Internal error: {}\n", failure));
      } else if (!found) {
        answer = text(404, fmt::format("{} {}.\n", post ? "Nothing is served at" : "No page at",
                                       log::printable(path, kPathShown)));
      } else if (found->status < 100 || found->status > 999) {
        log::error("{}: {} {} answered with status {}, which is not an HTTP status", name, method,
                   log::printable(path, kPathShown), found->status);
        answer = text(500, fmt::format("Internal error: the answer has status {}.\n", found->status));
      } else {
        answer = std::move(*found);
      }
    }
    log::debug("{}: {} {} {} from {}{}: {}", name, method, log::printable(path, kPathShown),
               req.version() == 10 ? "HTTP/1.0" : "HTTP/1.1", peer, probe_only ? " (kept for probes)" : "",
               answer.status);
    if (state->stopped ||
        !co_await write_response(*stream, make_response(answer, req.version(), last, allow), head, request_timeout) ||
        state->stopped) {
      stream->close();
      co_return;
    }
    if (last) {
      co_await close_gracefully(*stream, request_timeout);
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
      log::error("{}: listener {}: accept failed: {}; retrying in 100ms", state->name, address, ec.message());
      asio::steady_timer pause(state->io, 100ms);
      co_await pause.async_wait(asio::as_tuple(asio::use_awaitable));
      continue;
    }
    auto peer = socket.remote_endpoint(ec);
    if (ec) continue;  // already gone
    const auto client = address_text(peer.address());
    if (!allowed(state->allow_from, peer.address())) {
      // Nothing is said to an address that may not connect at all.
      log::warn("{}: refused a connection from {}: not in allow_from", state->name, client);
      socket.close(ec);
      continue;
    }
    const auto& limits = state->limits;
    const auto most = limits.max_connections;
    const auto most_per_client = limits.max_connections_per_client;
    const bool full = most && state->open.size() - state->probe_room.size() >= most;
    const std::size_t from_client = state->per_client.held(client);
    // Over max_connections, a client may take room kept for probes, one connection per address: a probe
    // then gets through whoever holds the rest, unless as many other addresses hold that room too.
    const bool has_probe_room =
        std::any_of(state->probe_room.begin(), state->probe_room.end(), [&](const auto& kept) { return kept.second == client; });
    const bool for_probes = full && limits.probe_connections > 0 && !has_probe_room;
    std::string why;
    if (most_per_client && from_client >= most_per_client)
      why = fmt::format("{} connections from this address are open, the most allowed", most_per_client);
    else if (full && !for_probes)
      why = limits.probe_connections > 0
                ? fmt::format("{} connections are open, the most allowed, and this address already holds one of those "
                              "kept for health probes",
                              most)
                : fmt::format("{} connections are open, the most allowed", most);
    if (!why.empty()) {
      if (!state->said_full)
        log::warn("{}: refused a connection from {}: {}; closing new ones until one ends", state->name, client, why);
      else
        log::debug("{}: refused a connection from {}: {}", state->name, client, why);
      state->said_full = true;
      socket.close(ec);
      continue;
    }
    if (for_probes) {
      if (!state->said_full)
        log::warn("{}: {} connections are open, the most allowed; new ones are served one request of {} only, until "
                  "one ends",
                  state->name, most, fmt::join(limits.probe_paths, " or "));
      state->said_full = true;
      // All taken: the oldest has had its moment (a probe is answered right after it connects); the newest
      // may be the probe that counts.
      while (state->probe_room.size() >= limits.probe_connections) {
        const auto [oldest, oldest_client] = *state->probe_room.begin();
        log::debug("{}: closed the oldest connection kept for probes, from {}, to make room for one from {}",
                   state->name, oldest_client, client);
        if (auto held = state->open.find(oldest); held != state->open.end()) {
          held->second->close();
          state->open.erase(held);
        }
        state->probe_room.erase(state->probe_room.begin());
      }
    } else {
      state->said_full = false;
    }
    const auto number = state->next_connection++;
    auto stream = std::make_shared<beast::tcp_stream>(std::move(socket));
    state->open.emplace(number, stream);
    if (for_probes) state->probe_room.emplace(number, client);
    state->per_client.add(client);
    auto name = fmt::format("{}:{}", client, peer.port());
    asio::co_spawn(state->io, serve_connection(state, number, std::move(stream), client, name, for_probes),
                   runtime::log_exceptions(state->name + " connection " + name));
  }
  std::erase(state->acceptors, acceptor);
}
}  // namespace

HttpServer::HttpServer(asio::io_context& io, HttpHandler handler, std::vector<config::Network> allow_from,
                       HttpLimits limits)
    : state_(std::make_shared<detail::HttpState>(io, "admin", std::move(handler), nullptr, std::move(allow_from),
                                                 limits)) {}

HttpServer::HttpServer(asio::io_context& io, std::string name, HttpService service,
                       std::vector<config::Network> allow_from, HttpLimits limits)
    : state_(std::make_shared<detail::HttpState>(io, std::move(name), nullptr, std::move(service),
                                                 std::move(allow_from), limits)) {}

HttpServer::~HttpServer() { stop(); }

void HttpServer::serve(std::shared_ptr<tcp::acceptor> acceptor, std::string entry) {
  boost::system::error_code ec;
  const auto bound = acceptor->local_endpoint(ec);
  if (state_->stopped) {
    log::warn("{}: not serving {} ({}): the server has stopped", state_->name, endpoint_text(bound), entry);
    acceptor->close(ec);
    return;
  }
  log::info("{}: serving HTTP on {} ({})", state_->name, endpoint_text(bound), entry);
  state_->acceptors.push_back(acceptor);
  asio::co_spawn(state_->io, accept_loop(state_, std::move(acceptor), fmt::format("{} ({})", endpoint_text(bound), entry)),
                 runtime::log_exceptions(state_->name + " listener " + entry));
}

void HttpServer::stop() {
  if (!state_) return;
  state_->stopped = true;
  boost::system::error_code ignored;
  for (auto& acceptor : state_->acceptors) acceptor->close(ignored);
  state_->acceptors.clear();
  // Each connection's coroutine ends on its own once its operation is aborted; none calls the handler again.
  auto open = std::move(state_->open);
  state_->open.clear();
  state_->probe_room.clear();
  for (auto& [number, stream] : open) stream->close();
}

std::size_t HttpServer::connections() const { return state_->open.size(); }

void HttpServer::set_allow_from(std::vector<config::Network> allow_from) {
  state_->allow_from = std::move(allow_from);
}

void HttpServer::set_limits(HttpLimits limits) { state_->limits = limits; }

}  // namespace rjg::gateway::fronts
