// A small HTTP/1.0 and 1.1 server on Beast, for two uses: the admin endpoint's read-only pages (GET and
// HEAD, answered at once) and the classic Remote front (POST, answered by a coroutine that may run as
// long as a keyword). Keep-alive; every request bounded in size and in time (its headers sooner), the
// connections at once and per client address too, with room kept for health probes beyond them. What an
// answer says comes from the handler; this only speaks HTTP.
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
#include <utility>
#include <vector>

namespace rjg::gateway::fronts {

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
  // More header fields, as name and value (the status page's Content-Security-Policy, say); the server's
  // own (Server, Cache-Control, Content-Length, Connection) are not to be given here.
  std::vector<std::pair<std::string, std::string>> headers = {};
};

// Answers GET/HEAD of `target`'s path (query string cut off and ignored); nullopt: 404. Runs on the
// server's io_context (the gateway's loop 0), so it may read loop-0 state directly. An exception is
// answered with 500 and its text.
using HttpHandler = std::function<std::optional<HttpResponse>(std::string_view path)>;

struct HttpRequest {
  std::string_view path;  // the target without its query string
  std::string body;
  std::string peer;       // "10.1.2.3:51234", for log lines
  std::string client;     // "10.1.2.3": the address as per-client limits count it (address_text)
};
// Answers a POST; nullopt: 404. Runs on the server's io_context, and may take as long as it needs (the
// request and answer timeouts do not run meanwhile). An exception is answered with 500 and its text.
using HttpService = std::function<asio::awaitable<std::optional<HttpResponse>>(HttpRequest)>;

struct HttpLimits {
  std::size_t max_request_bytes = 8 * 1024;           // the whole request (line + headers + body)
  // Instead of 413, the answer to a request over max_request_bytes (the classic front's: an XML-RPC fault
  // naming its key, whose text Robot shows, where of a 413 it would show the status only). Its declared
  // body is then read and dropped, within request_timeout, so that a client which sends the whole body
  // before it reads (Python's xmlrpc.client) gets to read the answer. None: 413, and no such wait.
  std::optional<HttpResponse> too_large_answer;
  std::chrono::milliseconds request_timeout{10'000};  // to receive one whole request, and to write its answer
  // The request line and headers within this, counted like request_timeout from when the connection starts
  // waiting for a request (accepted, or its last answer written; so an idle keep-alive connection waits this
  // long too): a client that trickles a header holds a connection this long, not request_timeout.
  // 0: none of its own (request_timeout alone); more than request_timeout counts as request_timeout.
  std::chrono::milliseconds header_timeout{0};
  std::size_t max_connections = 64;                   // at once; more are closed at accept (0: no limit)
  std::size_t max_connections_per_client = 0;         // at once from one address (0: no limit)
  std::size_t max_requests_per_connection = 100;      // keep-alive, then Connection: close (0: no limit)
  // Room kept for health probes, so that clients holding connections cannot make one fail. While
  // max_connections are open, up to this many more are taken, at most one per client address (whose
  // max_connections_per_client still counts it); each is served one request, received and answered
  // within header_timeout (request_timeout without one), then closed: a path of probe_paths as ever,
  // any other 503. When all of them are taken, the oldest is closed to make room for the next (a probe
  // is answered a moment after it connects, so only a flood from many addresses could close it). 0: none.
  std::size_t probe_connections = 0;
  std::vector<std::string> probe_paths;  // "/livez"; the target's path, without the query string
};

// Answers, on every connection it accepts:
//   GET, HEAD        pages: what the handler says (HEAD: the same headers, Content-Length included, no
//                    body); 404 naming the path when it says nothing; 500 with the text of what it threw
//   POST             a service: what it says, the same way
//   other methods    405 with "Allow: GET, HEAD" (pages) or "Allow: POST" (a service)
//   too large        413 (or too_large_answer), then closes (more than max_request_bytes, or a
//                    Content-Length that would be)
//   malformed        400, then closes
//   too slow         closes without an answer (header_timeout to receive the request line and headers,
//                    request_timeout the whole request or to write an answer; an idle keep-alive
//                    connection waits as long for its next request)
//   the limit full   on a connection kept for probes (probe_connections): 503 unless the path is one of
//                    probe_paths, and Connection: close after the one request either way
// Every answer carries Server: robot-jsonrpc-gateway and Cache-Control: no-store, and Connection: close
// when the connection closes after it. A peer not in allow_from, or over a connection limit (with no room
// kept for probes left to it), is closed at accept without a word.
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

}  // namespace rjg::gateway::fronts
