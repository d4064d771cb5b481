// The classic remote API's methods, in a table: each entry names a method, the parameters it takes (checked
// before its handler runs; a call of the wrong shape gets a fault that says what the method takes) and its
// handler. ClassicFront::handle reads the request and finds its library; dispatch() does the rest. A method
// the table lacks gets the fault that lists the API's methods.
#pragma once

#include "common/xmlrpc/xmlrpc.hpp"
#include "config/config.hpp"
#include "gateway/fronts/classic_imports.hpp"
#include "gateway/fronts/http_server.hpp"

#include <boost/asio/awaitable.hpp>
#include <boost/json/value.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace rjg::gateway::fronts {

// A request's body read as an XML-RPC call, and for run_keyword its arguments as JSON texts: the work that
// grows with the body, done in one place, on the offload pool when the body is large.
struct ReadCall {
  xmlrpc::Call call;
  std::optional<std::string> refusal;          // a fault's text: not a call, or over a limit
  std::string args = "[]", kwargs = "{}";      // run_keyword's arguments
  std::optional<std::string> argument_error;   // run_keyword: an argument that cannot be passed (ValueError)
};

// Whether a call is run_keyword(name, args[, kwargs]) with parameters of the types it takes.
bool keyword_call(const xmlrpc::Call& call);

// One call on one library, as a method's handler sees it.
struct CallContext {
  session::GatewayContext& context;
  const ReadCall& read;
  const std::string& name;          // the library, as the path (or [classic] default_library) names it
  const config::Library& settings;  // its route's settings
  const config::Gateway& gw;        // of the configuration the call began with
  std::shared_ptr<Library> library;
  // Room for one more import, until `deadline` (ClassicFront::admit for the calling client). Throws Failure.
  std::function<asio::awaitable<Ticket>(std::chrono::steady_clock::time_point deadline)> admit;

  const xmlrpc::Call& call() const { return read.call; }
  // An instance of the library taken for this call, holding an import or room for one; given back when the
  // Held goes.
  asio::awaitable<Held> instance();
  // The library's definition, importing it first when no call has.
  asio::awaitable<const json::value*> definition();
};

struct Method {
  std::string_view name;
  std::string_view takes;                    // its parameters, as the fault for a wrong shape says them
  bool (*accepts)(const xmlrpc::Call& call);  // the parameters are of that shape
  asio::awaitable<HttpResponse> (*handle)(CallContext& c);
};

// The method of that name, or null.
const Method* find_method(std::string_view name);

// Answers the call through the table: a fault for an unknown method or parameters of the wrong shape.
// Throws what a handler throws (Failure, rjg::xmlrpc::ValueError); the caller turns it into a fault.
asio::awaitable<HttpResponse> dispatch(CallContext& c);

}  // namespace rjg::gateway::fronts
