#include "gateway/fronts/classic_methods.hpp"

#include "common/log.hpp"
#include "common/runtime/message_stream.hpp"
#include "common/xmlrpc/classic_values.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <iterator>

namespace rjg::gateway::fronts {

bool keyword_call(const xmlrpc::Call& call) {
  const auto& params = call.params;
  return call.method == "run_keyword" && params.size() >= 2 && params.size() <= 3 && params[0].is<std::string>() &&
         params[1].is<xmlrpc::Array>() && (params.size() == 2 || params[2].is<xmlrpc::Struct>());
}

asio::awaitable<Held> CallContext::instance() {
  Held held{library, co_await library->take(settings.classic_instances, gw.max_pending_requests)};
  // One that holds no import gets room for one first.
  if (!held.instance->imported()) {
    const auto deadline = std::chrono::steady_clock::now() + settings.queue_timeout;
    auto ticket = co_await admit(deadline);
    co_await held.instance->previous_ended(deadline);
    held.instance->charge(std::move(ticket));
  }
  co_return std::move(held);
}

asio::awaitable<const json::value*> CallContext::definition() {
  if (const auto* d = library->definition()) co_return d;
  auto held = co_await instance();
  co_await held.instance->ensure_imported();
  library->remember(held.instance->definition());
  co_return library->definition();
}

namespace {
// ---- Parameter shapes ----

bool no_parameters(const xmlrpc::Call& call) { return call.params.empty(); }
bool keyword_name(const xmlrpc::Call& call) { return call.params.size() == 1 && call.params[0].is<std::string>(); }
bool anything(const xmlrpc::Call&) { return true; }

// ---- Handlers ----

// A keyword's answer as the document the classic client gets, on the offload pool: a large result is
// converted twice over (to Python's values, then to XML-RPC's), which would hold up the loop as long as
// parsing a large body.
asio::awaitable<std::string> write_result_on_pool(KeywordAnswer answer, std::string library, std::string keyword,
                                                  std::size_t max_depth) {
  co_return xmlrpc::write_response(keyword_result(answer, library, keyword, max_depth));
}

asio::awaitable<HttpResponse> run_keyword(CallContext& c) {
  const std::string& keyword = c.call().params[0].as<std::string>();
  if (c.read.argument_error) throw rjg::xmlrpc::ValueError(*c.read.argument_error);
  // The arguments were converted with the parse (read_call in classic.cpp).
  auto held = co_await c.instance();
  auto& instance = held.instance;
  auto answer = co_await instance->run(keyword, c.read.args, c.read.kwargs, c.gw.max_message_bytes);
  if (instance->imported()) c.library->remember(instance->definition());
  if (c.context.offload && answer.result_text.size() + answer.output.size() >= runtime::kOffloadFrameBytes) {
    const std::size_t result_bytes = answer.result_text.size() + answer.output.size();
    auto writing = write_result_on_pool(std::move(answer), c.name, keyword, c.gw.max_json_depth);
    std::string written = co_await asio::co_spawn(*c.context.offload, std::move(writing), asio::use_awaitable);
    log::debug("classic: the result of {} from library {} ({} bytes) was written off the event loop",
               log::printable(keyword, 200), c.name, result_bytes);
    co_return xml(std::move(written));
  }
  co_return xml(xmlrpc::write_response(keyword_result(answer, c.name, keyword, c.gw.max_json_depth)));
}

asio::awaitable<HttpResponse> get_library_information(CallContext& c) {
  co_return xml(xmlrpc::write_response(library_information(*co_await c.definition())));
}

asio::awaitable<HttpResponse> get_keyword_names(CallContext& c) {
  xmlrpc::Array names;
  each_object((co_await c.definition())->if_object(), "keywords", [&](const json::object& k) {
    names.emplace_back(string_member(k, "name"));
    return true;
  });
  co_return xml(xmlrpc::write_response(names));
}

// The methods that describe one keyword. Of a keyword the library lacks, Robot takes an empty answer
// (documentation, tags, types) except for its arguments, where the fault names the keyword.
enum class Described { arguments, types, tags, documentation };

asio::awaitable<HttpResponse> describe_keyword(CallContext& c, Described what) {
  const std::string& keyword = c.call().params[0].as<std::string>();
  const auto& d = *co_await c.definition();
  if (what == Described::documentation && (keyword == "__intro__" || keyword == "__init__"))
    co_return xml(xmlrpc::write_response(keyword == "__intro__" ? library_doc(d) : std::string()));
  const auto* kw = keyword_of(d, keyword);
  if (!kw) {
    switch (what) {
      case Described::documentation: co_return xml(xmlrpc::write_response(xmlrpc::Value("")));
      case Described::tags: co_return xml(xmlrpc::write_response(xmlrpc::Value(xmlrpc::Array{})));
      case Described::types: co_return xml(xmlrpc::write_response(xmlrpc::Value(xmlrpc::Struct{})));
      case Described::arguments: break;
    }
    co_return fault(fmt::format("Library '{}' has no keyword '{}'.", c.name, log::printable(keyword, 200)));
  }
  xmlrpc::Value answer = what == Described::arguments ? argument_spec(*kw)
                         : what == Described::types   ? argument_types(*kw)
                         : what == Described::tags    ? keyword_tags(*kw)
                                                      : xmlrpc::Value(string_member(*kw, "doc"));
  co_return xml(xmlrpc::write_response(answer));
}

asio::awaitable<HttpResponse> get_keyword_arguments(CallContext& c) { return describe_keyword(c, Described::arguments); }
asio::awaitable<HttpResponse> get_keyword_types(CallContext& c) { return describe_keyword(c, Described::types); }
asio::awaitable<HttpResponse> get_keyword_tags(CallContext& c) { return describe_keyword(c, Described::tags); }
asio::awaitable<HttpResponse> get_keyword_documentation(CallContext& c) {
  return describe_keyword(c, Described::documentation);
}

asio::awaitable<HttpResponse> stop_remote_server(CallContext&) {
  co_return fault("The gateway is not stopped by its clients: stop_remote_server is refused. Operators stop it "
                  "with SIGTERM (systemctl stop).");
}

constexpr Method kMethods[] = {
    {"run_keyword", "a keyword name, a list of arguments and optionally a struct of named arguments", keyword_call,
     run_keyword},
    {"get_library_information", "no parameters", no_parameters, get_library_information},
    {"get_keyword_names", "no parameters", no_parameters, get_keyword_names},
    {"get_keyword_arguments", "a keyword name", keyword_name, get_keyword_arguments},
    {"get_keyword_types", "a keyword name", keyword_name, get_keyword_types},
    {"get_keyword_tags", "a keyword name", keyword_name, get_keyword_tags},
    {"get_keyword_documentation", "a keyword name", keyword_name, get_keyword_documentation},
    // Refused whatever its parameters: a classic server stops on it, the gateway serves other clients.
    {"stop_remote_server", "", anything, stop_remote_server},
};
}  // namespace

const Method* find_method(std::string_view name) {
  const auto it = std::find_if(std::begin(kMethods), std::end(kMethods), [&](const Method& m) { return m.name == name; });
  return it == std::end(kMethods) ? nullptr : it;
}

asio::awaitable<HttpResponse> dispatch(CallContext& c) {
  const auto& call = c.call();
  const Method* method = find_method(call.method);
  if (!method)
    co_return fault(fmt::format("Unknown method '{}'. The classic remote API has get_library_information, "
                                "get_keyword_names, get_keyword_arguments, get_keyword_types, get_keyword_tags, "
                                "get_keyword_documentation and run_keyword.",
                                log::printable(call.method, 200)));
  if (!method->accepts(call))
    co_return fault(fmt::format("{} takes {}; got {} parameter(s).", call.method, method->takes, call.params.size()));
  co_return co_await method->handle(c);
}

}  // namespace rjg::gateway::fronts
