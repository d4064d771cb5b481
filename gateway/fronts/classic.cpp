#include "gateway/fronts/classic.hpp"

#include "common/log.hpp"
#include "common/runtime/message_stream.hpp"
#include "common/xmlrpc/xmlrpc.hpp"
#include "common/xmlrpc/classic_values.hpp"
#include "gateway/fronts/classic_answers.hpp"
#include "gateway/fronts/classic_imports.hpp"
#include "gateway/fronts/classic_methods.hpp"
#include "gateway/fronts/client_counts.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <fmt/format.h>

namespace rjg::gateway::fronts {
using namespace std::chrono_literals;

// The front's HTTP side: the path names the library, the body is read as a call (off the loop when large),
// and the method table (classic_methods.cpp) answers it; the imports it makes are counted here (admit).
namespace {
// "/SeleniumLibrary" -> "SeleniumLibrary" (percent-escapes decoded, one trailing slash dropped); "/" and
// "/RPC2" -> "" (the default library).
std::optional<std::string> library_in_path(std::string_view path) {
  if (path.starts_with('/')) path.remove_prefix(1);
  if (path.ends_with('/')) path.remove_suffix(1);
  if (path.empty() || path == "RPC2") return std::string();
  std::string out;
  for (std::size_t i = 0; i < path.size(); ++i) {
    if (path[i] != '%') {
      out += path[i];
      continue;
    }
    auto hex = [](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      return -1;
    };
    if (i + 2 >= path.size()) return std::nullopt;
    const int hi = hex(path[i + 1]), lo = hex(path[i + 2]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return out;
}

std::string default_library(const config::Config& config) {
  if (!config.classic.default_library.empty()) return config.classic.default_library;
  for (const auto& library : config.libraries)
    if (!library.is_glob()) return library.name;
  return {};
}

// The body as a call (ReadCall says what comes out).
ReadCall read_call(std::string body, const xmlrpc::Limits& limits, const std::string& limits_text) {
  ReadCall out;
  try {
    out.call = xmlrpc::parse_call(body, limits);
  } catch (const xmlrpc::LimitError& e) {
    out.refusal = fmt::format("The request is over a limit of the classic front: {}. {}", e.what(), limits_text);
    return out;
  } catch (const xmlrpc::ParseError& e) {
    out.refusal = fmt::format("The request is not an XML-RPC call: {}", e.what());
    return out;
  }
  std::string().swap(body);  // not held while the keyword runs
  if (!keyword_call(out.call)) return out;
  auto& params = out.call.params;
  try {
    std::string args = "[";
    for (const auto& a : params[1].as<xmlrpc::Array>())
      args += (args.size() > 1 ? ", " : "") + rjg::xmlrpc::to_json_argument(rjg::xmlrpc::to_python(a));
    args += "]";
    std::string kwargs = "{";
    if (params.size() == 3)
      for (const auto& [key, value] : params[2].as<xmlrpc::Struct>())
        kwargs += (kwargs.size() > 1 ? ", " : "") + json_string(key) + ": " +
                  rjg::xmlrpc::to_json_argument(rjg::xmlrpc::to_python(value));
    kwargs += "}";
    out.args = std::move(args);
    out.kwargs = std::move(kwargs);
  } catch (const rjg::xmlrpc::ValueError& e) {
    out.argument_error = e.what();
  }
  // The texts carry the arguments now: the values are not held twice while the keyword runs (emptied,
  // of the same types, so the call keeps its shape).
  params[1] = xmlrpc::Value(xmlrpc::Array{});
  if (params.size() == 3) params[2] = xmlrpc::Value(xmlrpc::Struct{});
  return out;
}

// On the offload pool (a coroutine function, not a capturing lambda: its frame owns the body).
asio::awaitable<ReadCall> read_call_on_pool(std::string body, xmlrpc::Limits limits, std::string limits_text) {
  co_return read_call(std::move(body), limits, limits_text);
}

HttpLimits http_limits(const config::Config& config) {
  const auto& gw = config.gateway;
  HttpLimits limits;
  // A body of its own limit, far below max_message_bytes: parsed and converted, each byte costs several.
  limits.max_request_bytes = config.classic.max_body_bytes + gw.max_header_bytes;
  // A fault, which Robot shows (of a 413 it would show the status only).
  limits.too_large_answer =
      fault(fmt::format("The request is too large for the classic front: its body may have at most [classic] "
                        "max_body_bytes = {} bytes (and its headers [gateway] max_header_bytes = {}). Pass smaller "
                        "arguments, or raise max_body_bytes.",
                        config.classic.max_body_bytes, gw.max_header_bytes));
  limits.request_timeout = std::chrono::duration_cast<std::chrono::milliseconds>(gw.handshake_timeout);
  limits.max_connections = gw.max_sessions;
  limits.max_connections_per_client = gw.max_sessions_per_client;
  limits.max_requests_per_connection = 0;
  return limits;
}
}  // namespace

ClassicFront::ClassicFront(asio::io_context& io, session::GatewayContext& context, const config::Config& config)
    : io_(io),
      context_(context),
      http_(io, "classic", [this](HttpRequest request) { return handle(std::move(request)); }, config.gateway.allow_from,
            fronts::http_limits(config)),
      idle_(io.get_executor()),
      imports_(std::make_shared<fronts::Imports>(io.get_executor(), context.clients)) {
  idle_.set();
}

ClassicFront::~ClassicFront() {
  http_.stop();
  // Coroutine frames destroyed after this (at exit) may still hold a library or a ticket: neither calls
  // back here, nor wakes anything, any more.
  for (auto& [name, library] : libraries_) library->detach();
  imports_->close();
}

void ClassicFront::serve(std::shared_ptr<asio::ip::tcp::acceptor> acceptor, std::string entry) {
  http_.serve(std::move(acceptor), std::move(entry));
}

void ClassicFront::reconfigure(const config::Config& config) {
  http_.set_allow_from(config.gateway.allow_from);
  http_.set_limits(fronts::http_limits(config));
}

asio::awaitable<bool> ClassicFront::drain(std::chrono::steady_clock::time_point deadline) {
  stopping_ = true;
  co_return co_await idle_.wait_until(deadline);
}

asio::awaitable<void> ClassicFront::shutdown() {
  stopping_ = true;
  http_.stop();
  imports_->close();  // calls waiting for room fail
  for (auto& [name, library] : libraries_) library->stop();
  co_return;
}

json::object ClassicFront::status() const {
  json::array libraries;
  for (const auto& [name, library] : libraries_) libraries.push_back(library->status());
  return json::object{{"connections", http_.connections()},
                      {"calls_running", calls_},
                      {"imports", imports_->held()},
                      {"libraries", std::move(libraries)}};
}

std::shared_ptr<fronts::Library> ClassicFront::library(const std::string& name) {
  auto& slot = libraries_[name];
  if (!slot)
    slot = std::make_shared<fronts::Library>(context_, io_.get_executor(), name, imports_,
                                            [this](fronts::Library& library) { forget(library); });
  return slot;
}

void ClassicFront::forget(const fronts::Library& library) {
  auto it = libraries_.find(library.name());
  if (it == libraries_.end() || it->second.get() != &library) return;
  it->second->detach();
  libraries_.erase(it);  // the caller holds it still
}

bool ClassicFront::retire_idle_import(const fronts::Library* except) {
  std::shared_ptr<fronts::Library> owner;
  std::shared_ptr<fronts::Instance> oldest;
  for (const auto& [name, library] : libraries_) {
    if (library.get() == except) continue;
    auto candidate = library->least_recently_used();
    if (candidate && (!oldest || candidate->last_used() < oldest->last_used())) oldest = std::move(candidate), owner = library;
  }
  if (!oldest) return false;
  owner->retire(oldest, "making room for an import of another library ([classic] max_imports)");
  return true;
}

asio::awaitable<fronts::Ticket> ClassicFront::admit(const std::string& client, const fronts::Library& library,
                                                   std::chrono::milliseconds queue_timeout,
                                                   std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    if (stopping_) throw fronts::Failure("the gateway is stopping");
    const auto config = context_.config();
    const auto per_client = config->gateway.max_sessions_per_client;
    if (per_client && context_.clients->held(client) >= per_client)
      throw fronts::Failure(fmt::format(
          "this client address ({}) already holds {} sessions and imports, the most allowed ([gateway] "
          "max_sessions_per_client = {}; each import the classic front made for its calls counts, until it ends "
          "after [classic] idle_timeout unused). Close JSON-RPC sessions, call the libraries imported already, "
          "retry later, or raise max_sessions_per_client.",
          client, context_.clients->held(client), per_client));
    const auto most = config->classic.max_imports;
    if (imports_->held() < most) co_return imports_->take(client);
    // At the cap. The imports ending already make room for as many calls; for the others, the least
    // recently used idle import of another library ends (this library's idle ones would have been taken).
    // Room that is coming is waited for whatever queue_timeout says (0 too): an idle import's end is bounded
    // by its worker's grace periods, and only a call that finds every import busy waits queue_timeout.
    const bool coming = imports_->ending() > imports_->waiting() || retire_idle_import(&library);
    const auto until = coming ? std::max(deadline, std::chrono::steady_clock::now() + fronts::kRoomComing) : deadline;
    const bool woken = co_await imports_->wait_until(until);  // not in the condition: GCC 12
    if (!woken && imports_->held() >= most) {
      if (stopping_) throw fronts::Failure("the gateway is stopping");
      throw fronts::Failure(fmt::format(
          "the classic front holds {} imports for classic clients, the most allowed ([classic] max_imports = {}), "
          "and every one served a call for the {} this call may wait (the library's queue_timeout). Retry later, "
          "or raise [classic] max_imports (below [gateway] max_workers).",
          imports_->held(), most, fronts::seconds_text(queue_timeout)));
    }
  }
}

asio::awaitable<std::optional<HttpResponse>> ClassicFront::handle(HttpRequest request) {
  using fronts::fault;
  const auto config = context_.config();
  const auto& gw = config->gateway;
  if (stopping_ || context_.draining) co_return fault("The gateway is stopping; no new calls are taken.");
  ++calls_;
  idle_.reset();
  struct Count {
    ClassicFront& front;
    ~Count() {
      if (--front.calls_ == 0) front.idle_.set();
    }
  } count{*this};

  auto requested = fronts::library_in_path(request.path);
  if (!requested)
    co_return fault(fmt::format("The path {} is not a library name: a '%' escape in it is malformed.",
                                log::printable(request.path, 200)));
  const std::string name = requested->empty() ? fronts::default_library(*config) : *requested;
  auto route = context_.router.resolve(name);
  if (!route.library) {
    std::string names;
    for (const auto& n : context_.router.names()) names += (names.empty() ? "" : ", ") + n;
    co_return fault(fmt::format("No library '{}' is served here{}{}. The URL's path names the library: "
                                "http://HOST:PORT/LIBRARY; \"/\" and \"/RPC2\" serve '{}'. Libraries: {}.",
                                log::printable(name, 200), route.refused.empty() ? "" : ": ", route.refused,
                                fronts::default_library(*config), names));
  }
  const auto& settings = *route.library;
  if (settings.classic_instances == 0)
    co_return fault(fmt::format("Library '{}' is not served to classic clients (its classic_instances = 0); JSON-RPC "
                                "clients import it on the gateway's protocol port.",
                                log::printable(name, 200)));

  xmlrpc::Limits limits;
  limits.max_bytes = config->classic.max_body_bytes;
  limits.max_depth = gw.max_json_depth;
  std::string limits_text = fmt::format(
      "A body holds at most [classic] max_body_bytes = {} bytes, at most one value per {} bytes of it, and arrays "
      "and structs nested at most [gateway] max_json_depth = {} deep.",
      limits.max_bytes, limits.bytes_per_value, limits.max_depth);
  // A large body is read off this loop, as large JSON frames are, so that the sessions on it go on meanwhile.
  const std::size_t body_bytes = request.body.size();
  fronts::ReadCall read;
  if (context_.offload && body_bytes >= runtime::kOffloadFrameBytes) {
    auto reading = fronts::read_call_on_pool(std::move(request.body), limits, std::move(limits_text));
    read = co_await asio::co_spawn(*context_.offload, std::move(reading), asio::use_awaitable);
    log::debug("classic: the request of {} bytes from {} was read off the event loop", body_bytes, request.peer);
  } else {
    read = fronts::read_call(std::move(request.body), limits, limits_text);
  }
  if (read.refusal) {
    log::info("classic: {} sent a request that is refused: {}", request.peer, *read.refusal);
    co_return fault(*read.refusal);
  }
  auto library = this->library(name);
  const fronts::Library::Use use{library};  // in the table while this call holds it

  // The method table answers; what a handler throws becomes a fault here, which names the library.
  fronts::CallContext c{context_,
                       read,
                       name,
                       settings,
                       gw,
                       library,
                       [&](std::chrono::steady_clock::time_point deadline) {
                         return admit(request.client, *library, settings.queue_timeout, deadline);
                       }};
  const auto& call = read.call;
  try {
    co_return co_await fronts::dispatch(c);
  } catch (const rjg::xmlrpc::ValueError& e) {
    log::info("classic: {} on library {} from {}: an argument cannot be passed on: {}", call.method, name,
              request.peer, e.what());
    co_return fault(fmt::format("Library '{}': an argument cannot be passed to the library: {}", name, e.what()));
  } catch (const fronts::Failure& e) {
    log::warn("classic: {} on library {} from {} failed: {}", call.method, name, request.peer, e.what());
    co_return fault(fmt::format("Library '{}': {}", name, e.what()));
  } catch (const std::exception& e) {
    // A bug (or bad_alloc): still an XML-RPC answer, never an HTTP error the client cannot read.
    log::error("bug: classic: {} on library {} from {}: {}", call.method, name, request.peer, e.what());
    co_return fault(fmt::format("Library '{}': internal error in the gateway: {}", name, e.what()));
  }
}

}  // namespace rjg::gateway::fronts
