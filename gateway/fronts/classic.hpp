// The classic Remote front: Robot Framework's built-in `Remote` library (XML-RPC over HTTP) served from
// the gateway's worker pools (`[classic] listen`).
//
// A classic remote server hosts one library instance for all its clients, and runs one keyword at a time.
// The front does the same, through the gateway's own protocol logic: each library it serves has
// `classic_instances` imports (one by default), each held by a ClientSession of its own that is fed
// JSON-RPC messages in-process instead of from a socket. So everything a JSON-RPC client gets applies
// unchanged: the routes and their refusals, pools and caps, queue_timeout for the import, keyword_timeout
// (which ends a hung keyword's worker), recycling, the pickle policy, argument escaping for workers that
// evaluate argument strings, and the metrics. Calls queue for a free import, in arrival order. An import
// whose worker was lost (died, timed out) is imported again for the next call.
//
// What classic clients hold is bounded, since anyone who can connect may name libraries: at most
// `[classic] max_imports` imports at once (the least recently used idle one makes room for another; the
// configuration keeps that below every max_workers, so JSON-RPC clients always find room), each charged to
// the client address whose call made it against `max_sessions_per_client`, and each ended once no call used
// it for `[classic] idle_timeout`. A library with no import, no call running and none waiting leaves the
// table (and /status): a failed import at once.
//
// Methods: get_library_information, get_keyword_names, get_keyword_arguments, get_keyword_types,
// get_keyword_tags, get_keyword_documentation (with __intro__ and __init__), run_keyword(name, args[,
// kwargs]). Values are mapped as common/xmlrpc/classic_values.hpp says; the logs a worker sends while a keyword
// runs come back in `output` with Robot's *LEVEL* markers, in order.
#pragma once

#include "common/runtime/async_event.hpp"
#include "gateway/session/context.hpp"
#include "gateway/fronts/http_server.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/json/object.hpp>

#include <chrono>
#include <map>
#include <memory>
#include <string>

namespace rjg::gateway::fronts {

namespace asio = boost::asio;

class Library;  // classic.cpp
class Imports;
class Ticket;

class ClassicFront {
 public:
  // Runs on `io` (loop 0), where the pools are.
  ClassicFront(asio::io_context& io, session::GatewayContext& context, const config::Config& config);
  ClassicFront(const ClassicFront&) = delete;
  ClassicFront& operator=(const ClassicFront&) = delete;
  ~ClassicFront();

  // A bound, listening acceptor of a [classic] listen entry.
  void serve(std::shared_ptr<asio::ip::tcp::acceptor> acceptor, std::string entry);
  // A reload: allow_from and the limits of [gateway] apply to new connections; default_library and the
  // routes to new calls.
  void reconfigure(const config::Config& config);
  // The drain: new calls are refused from now on (a fault says the gateway is stopping); completes once
  // the calls running have been answered, or at the deadline (false then).
  asio::awaitable<bool> drain(std::chrono::steady_clock::time_point deadline);
  // Stops accepting and answering; every import ends (a shared worker finalizes it, a dedicated one stops,
  // and a keyword still running there fails).
  asio::awaitable<void> shutdown();
  std::size_t calls_running() const { return calls_; }
  std::size_t connections() const { return http_.connections(); }
  // For /status: connections, calls running, the imports held (those still ending included), and each
  // library classic clients hold an import of or call now.
  boost::json::object status() const;

  // One XML-RPC request: always 200 with a methodResponse, a fault for every error (a path that names no
  // library included: a fault can say which libraries there are, and Robot shows its text).
  asio::awaitable<std::optional<HttpResponse>> handle(HttpRequest request);

 private:
  // The library's entry in the table, made on first use.
  std::shared_ptr<fronts::Library> library(const std::string& name);
  // Room for one more import, charged to `client`: under [classic] max_imports (making room by ending the
  // least recently used idle import of another library, else waiting up to queue_timeout) and under
  // max_sessions_per_client. Throws Failure naming the limit. queue_timeout: the library's, which the
  // deadline comes from.
  asio::awaitable<fronts::Ticket> admit(const std::string& client, const fronts::Library& library,
                                       std::chrono::milliseconds queue_timeout,
                                       std::chrono::steady_clock::time_point deadline);
  // Ends the least recently used import that serves no call, of a library other than `except`; false: none.
  bool retire_idle_import(const fronts::Library* except);
  // A library that holds nothing and serves no call leaves the table.
  void forget(const fronts::Library& library);

  asio::io_context& io_;
  session::GatewayContext& context_;
  HttpServer http_;
  bool stopping_ = false;
  std::size_t calls_ = 0;  // requests being handled
  runtime::AsyncEvent idle_;        // set while calls_ is 0
  std::map<std::string, std::shared_ptr<fronts::Library>> libraries_;  // by the name imported; only those in use
  std::shared_ptr<fronts::Imports> imports_;                            // shared: tickets may outlive the front
};

}  // namespace rjg::gateway::fronts
