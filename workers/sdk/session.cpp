// Session: the protocol state machine of one connection, as the reference server behaves
// (shared/traces), with the fixes the traces call for (errors before initialization carry the id,
// an unknown keyword gets a helpful message).
#include "workers/sdk/sdk.hpp"

#include "common/protocol/protocol.hpp"

#include <cxxabi.h>
#include <fmt/format.h>

#include <cstdlib>
#include <random>
#include <typeinfo>

namespace rjg::sdk {

struct Session::Instance {
  ImportArgs import;
  std::any state;
};

namespace {

std::string demangle(const char* mangled) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> name(abi::__cxa_demangle(mangled, nullptr, nullptr, &status), std::free);
  return status == 0 && name ? std::string(name.get()) : std::string(mangled);
}

std::string_view to_string(ErrorMode mode) {
  switch (mode) {
    case ErrorMode::continuable: return "CONTINUABLE";
    case ErrorMode::fatal: return "FATAL";
    case ErrorMode::skip: return "SKIP";
    case ErrorMode::unset: break;
  }
  return {};
}

// A RunKeywordResult with `error` set. Optional fields are left out when empty, as the reference does.
json::object error_result(std::string_view message, std::string_view type, std::string_view traceback = {},
                          ErrorMode mode = ErrorMode::unset) {
  json::object error;
  error["message"] = message;
  if (!type.empty()) error["type"] = type;
  if (!traceback.empty()) error["traceback"] = traceback;
  if (mode != ErrorMode::unset) error["mode"] = to_string(mode);
  json::object result;
  result["error"] = std::move(error);
  return result;
}

// params fields: absent and null both mean "not given", as the real client sometimes leaves them out.
const json::value* field(const json::value& params, std::string_view name) {
  if (!params.is_object()) return nullptr;
  const json::value* v = params.get_object().if_contains(name);
  return v && !v->is_null() ? v : nullptr;
}

std::optional<std::string> string_field(const json::value& params, std::string_view name) {
  const json::value* v = field(params, name);
  if (!v || !v->is_string()) return std::nullopt;
  return std::string(v->get_string());
}

// Optional list/dict fields: absent or null read as empty; nullptr when present with another type.
// Pointers, not copies: keyword arguments can be large.
const json::array* array_field(const json::value& params, std::string_view name) {
  static const json::array empty;
  const json::value* v = field(params, name);
  return v ? v->if_array() : &empty;
}

const json::object* object_field(const json::value& params, std::string_view name) {
  static const json::object empty;
  const json::value* v = field(params, name);
  return v ? v->if_object() : &empty;
}

std::string keyword_names(const Library& library) {
  std::string names;
  for (const Keyword& k : library.keywords()) {
    if (!names.empty()) names += ", ";
    names += k.name;
  }
  return names;
}

}  // namespace

Session::Session(const Library& library, Output& out) : library_(library), out_(out) {}
Session::~Session() = default;

void Session::handle(std::string_view body) {
  Classified classified = parse_message(body);
  if (auto* bad = std::get_if<ProtocolError>(&classified)) {
    log::warn("bad message ({}): {}", bad->code, bad->message);
    out_.send(make_error(bad->id, bad->code, bad->message));
    return;
  }
  const Message& message = std::get<Message>(classified);
  if (message.kind == Message::Kind::response || message.kind == Message::Kind::error_response) {
    // This server never sends requests, so no answer can be expected; drop it.
    log::warn("ignoring a response with id {}: this server sends no requests", id_to_string(message.id()));
    return;
  }
  dispatch(message);
}

void Session::dispatch(const Message& message) {
  static const std::map<std::string_view, Handler> handlers = {
      {protocol::kInitialize, &Session::on_initialize},
      {protocol::kInitialized, &Session::on_initialized},
      {protocol::kImportLibrary, &Session::on_import_library},
      {protocol::kRunKeyword, &Session::on_run_keyword},
      {protocol::kFinalizeLibrary, &Session::on_finalize_library},
      {protocol::kShutdown, &Session::on_shutdown},
      {protocol::kExit, &Session::on_exit},
  };
  const bool is_request = message.kind == Message::Kind::request;
  if (auto problem = check_client_method(message)) {
    if (problem->answer) reply_error(message.id(), problem->code, problem->message);
    else log::debug("ignoring: {}", problem->message);
    return;
  }
  try {
    (this->*handlers.at(message.method()))(message);
  } catch (const std::exception& e) {
    // Handlers answer before anything can throw; this is for bugs (or bad_alloc), and must not end
    // the session.
    log::error("{} failed: {}", message.method(), e.what());
    if (is_request) reply_error(message.id(), protocol::kInternalError, e.what());
  }
}

void Session::reply(const json::value& id, json::value result) { out_.send(make_result(id, std::move(result))); }

void Session::reply_error(const json::value& id, int code, std::string_view message) {
  out_.send(make_error(id, code, message));
}

bool Session::require_initialized(const Message& request, std::string_view what) {
  if (initialize_received_ && initialized_received_) return true;
  reply_error(request.id(), protocol::kNotInitialized,
              fmt::format("Initialize and Initialized must be received before {}.", what));
  return false;
}

void Session::on_initialize(const Message& m) {
  if (const auto& hook = library_.initialize_hook(); hook && !hook(m.params())) {
    log::warn("robot/initialize left unanswered on purpose");
    return;
  }
  initialize_received_ = true;
  json::object capabilities;
  capabilities["support_exit"] = true;
  capabilities["libraries"] = json::array{json::string(library_.name())};
  json::object server_info;
  server_info["name"] = library_.name();
  server_info["version"] = library_.version();
  json::object result;
  result["capabilities"] = std::move(capabilities);
  result["server_info"] = std::move(server_info);
  reply(m.id(), std::move(result));
}

void Session::on_initialized(const Message&) { initialized_received_ = true; }

void Session::on_import_library(const Message& m) {
  if (!require_initialized(m, "ImportLibrary")) return;
  const json::value& params = m.params();
  auto name = string_field(params, "name");
  auto args = array_field(params, "args");
  auto kw_args = object_field(params, "kw_args");
  if (!name || !args || !kw_args) {
    reply_error(m.id(), protocol::kInvalidParams,
                "robot/import_library needs params {name: string, args?: list, kw_args?: object}");
    return;
  }
  if (!name->empty() && *name != library_.name()) {
    reply_error(m.id(), protocol::kInvalidParams,
                fmt::format("Library '{}' is not available; this server serves '{}'.", *name, library_.name()));
    return;
  }

  auto instance = std::make_unique<Instance>();
  instance->import = ImportArgs{*args, *kw_args};
  if (const auto& hook = library_.import_hook()) {
    ImportContext context{library_.name(), instance->import, instance->state};
    try {
      hook(context);
    } catch (const std::exception& e) {
      log::warn("import of '{}' failed: {}", library_.name(), e.what());
      reply_error(m.id(), protocol::kInternalError, e.what());
      return;
    }
  }

  std::string token = new_token();
  log::info("imported '{}' as {} (args {}, kw_args {})", library_.name(), token,
            json::serialize(instance->import.args), json::serialize(instance->import.kw_args));
  instances_.emplace(token, std::move(instance));
  json::object result;
  result["token"] = token;
  result["definition"] = library_.definition();
  reply(m.id(), std::move(result));
}

void Session::on_run_keyword(const Message& m) {
  if (!require_initialized(m, "RunKeyword")) return;
  const json::value& params = m.params();
  auto token = string_field(params, "library_token");
  auto name = string_field(params, "name");
  const json::array* args = array_field(params, "args");
  const json::object* kwargs = object_field(params, "kwargs");
  if (!token || !name || !args || !kwargs) {
    reply_error(m.id(), protocol::kInvalidParams,
                "robot/run_keyword needs params {library_token: string, name: string, args?: list, kwargs?: object}");
    return;
  }
  reply(m.id(), run_keyword(*token, *name, *args, *kwargs));
}

json::value Session::run_keyword(const std::string& token, const std::string& name, const json::array& args,
                                 const json::object& kwargs) {
  auto instance = instances_.find(token);
  if (instance == instances_.end())
    return error_result(fmt::format("No library '{}' found.", token), "LibraryNotFoundError");
  const Keyword* keyword = library_.find(name);
  if (!keyword)
    return error_result(fmt::format("No keyword named '{}' in library '{}'. Available: {}.", name, library_.name(),
                                    keyword_names(library_)),
                        "KeywordNotFoundError");

  Instance& inst = *instance->second;
  try {
    json::object bound = bind_arguments(library_.name(), *keyword, args, kwargs);
    Call call(library_.name(), keyword->name, std::move(bound), inst.import, inst.state, out_);
    json::value value = keyword->body(call);
    json::object result;
    // The reference leaves `result` out for None; Robot reads a missing result as None.
    if (!value.is_null()) result["result"] = std::move(value);
    return result;
  } catch (const KeywordError& e) {
    log::debug("keyword '{}' failed: {}: {}", keyword->name, e.type(), e.what());
    return error_result(e.what(), e.type(), e.traceback(), e.mode());
  } catch (const std::exception& e) {
    const std::string type = demangle(typeid(e).name());
    log::debug("keyword '{}' threw {}: {}", keyword->name, type, e.what());
    return error_result(e.what(), type);
  } catch (...) {
    log::debug("keyword '{}' threw a non-standard exception", keyword->name);
    return error_result(fmt::format("Keyword '{}' threw an exception that is not a std::exception", keyword->name),
                        "UnknownException");
  }
}

void Session::on_finalize_library(const Message& m) {
  // Finalizing an unknown or already finalized token is not an error (the reference answers {}).
  if (auto token = string_field(m.params(), "token")) {
    if (instances_.erase(*token) > 0) log::info("finalized {}", *token);
  }
  reply(m.id(), json::object());
}

void Session::on_shutdown(const Message& m) { reply(m.id(), json::object()); }

void Session::on_exit(const Message&) { done_ = true; }

std::string Session::new_token() {
  // Random part: tokens of different sessions (and of a restarted worker) never collide.
  thread_local std::mt19937 rng{std::random_device{}()};
  return fmt::format("{}_{:08x}_{}", library_.name(), static_cast<std::uint32_t>(rng()), imports_++);
}

}  // namespace rjg::sdk
