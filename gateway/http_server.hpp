// A small HTTP/1.0 and 1.1 server on Beast, for two uses: the admin endpoint's read-only pages (GET and
// HEAD, answered at once) and the classic Remote front (POST, answered by a coroutine that may run as
// long as a keyword). Keep-alive; every request bounded in size and in time, the connections at once
// and per client address too. What an answer says comes from the handler; this only speaks HTTP.
// Everything runs on one io_context (the gateway's loop 0).
#pragma once

#include "config/network.hpp"

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rjg::gateway {

namespace asio = boost::asio;

namespace detail {
// What the accept loops and connections share; they hold it, so it outlives the server until the last of
// them has ended (http_server.cpp).
struct HttpState;
}  // namespace detail

struct HttpResponse {
  unsigned status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

// Answers GET/HEAD of `target`'s path (query string cut off and ignored); nullopt: 404. Runs on the
// server's io_context (the gateway's loop 0), so it may read loop-0 state directly. An exception is
// answered with 500 and its text.
using HttpHandler = std::function<std::optional<HttpResponse>(std::string_view path)>;

struct HttpRequest {
  std::string_view path;  // the target without its query string
  std::string body;
  std::string peer;       // "10.1.2.3:51234", for log lines
};
// Answers a POST; nullopt: 404. Runs on the server's io_context, and may take as long as it needs (the
// request and answer timeouts do not run meanwhile). An exception is answered with 500 and its text.
using HttpService = std::function<asio::awaitable<std::optional<HttpResponse>>(HttpRequest)>;

struct HttpLimits {
  std::size_t max_request_bytes = 8 * 1024;           // the whole request (line + headers + body)
  std::chrono::milliseconds request_timeout{10'000};  // to receive one whole request, and to write its answer
  std::size_t max_connections = 64;                   // at once; more are closed at accept (0: no limit)
  std::size_t max_connections_per_client = 0;         // at once from one address (0: no limit)
  std::size_t max_requests_per_connection = 100;      // keep-alive, then Connection: close (0: no limit)
};

// Answers, on every connection it accepts:
//   GET, HEAD        pages: what the handler says (HEAD: the same headers, Content-Length included, no
//                    body); 404 naming the path when it says nothing; 500 with the text of what it threw
//   POST             a service: what it says, the same way
//   other methods    405 with "Allow: GET, HEAD" (pages) or "Allow: POST" (a service)
//   too large        413, then closes (more than max_request_bytes, or a Content-Length that would be)
//   malformed        400, then closes
//   too slow         closes without an answer (request_timeout to receive a request or write an answer;
//                    an idle keep-alive connection waits as long for its next request)
// Every answer carries Server: robot-jsonrpc-gateway and Cache-Control: no-store, and Connection: close
// when the connection closes after it. A peer not in allow_from, or over a connection limit, is closed at
// accept without a word.
class HttpServer {
 public:
  // Pages (the admin endpoint). allow_from: the networks that may connect (empty: every address; an
  // IPv4-mapped IPv6 peer counts as its IPv4 address).
  HttpServer(asio::io_context& io, HttpHandler handler, std::vector<config::Network> allow_from = {},
             HttpLimits limits = {});
  // A POST service; `name` starts its log lines ("classic").
  HttpServer(asio::io_context& io, std::string name, HttpService service, std::vector<config::Network> allow_from,
             HttpLimits limits);
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;
  ~HttpServer();  // closes everything

  // Takes a bound, listening acceptor (the gateway opens tcp:// and systemd: entries itself) and accepts
  // on it; `entry` names it in log lines.
  void serve(std::shared_ptr<asio::ip::tcp::acceptor> acceptor, std::string entry);
  // Closes every acceptor and every open connection (at shutdown). Final: the handler is not called
  // again (a service call already running goes on, but its answer is not sent), and a later serve()
  // closes its acceptor.
  void stop();
  // Connections open now. Read it on the io_context's thread only.
  std::size_t connections() const;
  // A reload; applies to new connections.
  void set_allow_from(std::vector<config::Network> allow_from);
  void set_limits(HttpLimits limits);

 private:
  std::shared_ptr<detail::HttpState> state_;
};

}  // namespace rjg::gateway
