// Session: the protocol state machine of one connection, as the reference server behaves
// (tests/data/traces), with the fixes the traces call for (errors before initialization carry the id,
// an unknown keyword gets a helpful message).
#include "workers/sdk/sdk.hpp"

#include "common/pickle/python_json.hpp"
#include "common/protocol/protocol.hpp"

#include <cxxabi.h>
#include <fmt/format.h>

#include <cmath>
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
// Texts are made valid UTF-8: a message that quotes what a process printed may hold any bytes, and a
// peer drops an answer with invalid UTF-8 (the keyword would never end).
json::object error_result(std::string_view message, std::string_view type, std::string_view traceback = {},
                          ErrorMode mode = ErrorMode::unset) {
  json::object error;
  error["message"] = log::valid_utf8(message);
  if (!type.empty()) error["type"] = log::valid_utf8(type);
  if (!traceback.empty()) error["traceback"] = log::valid_utf8(traceback);
  if (mode != ErrorMode::unset) error["mode"] = to_string(mode);
  json::object result;
  result["error"] = std::move(error);
  return result;
}

// Optional list/dict params as trees; absent or null read as empty. A tree cannot hold NaN, Infinity
// or a number beyond a double: such values fail the call with a message that says so.
json::value tree_of(std::string_view text) {
  try {
    json::value v = protocol::parse_value(text);
    // Boost.JSON reads 1e400 as infinity rather than failing.
    bool finite = true;
    std::vector<const json::value*> todo{&v};
    while (!todo.empty() && finite) {
      const json::value* x = todo.back();
      todo.pop_back();
      if (x->is_double()) finite = std::isfinite(x->get_double());
      else if (x->is_array()) for (const auto& e : x->get_array()) todo.push_back(&e);
      else if (x->is_object()) for (const auto& m : x->get_object()) todo.push_back(&m.value());
    }
    if (finite) return v;
  } catch (const std::exception&) {
  }
  throw KeywordError("the arguments hold a value this library cannot take as a JSON tree (NaN, Infinity, or a "
                     "number beyond a double); a keyword declared with raw_keyword gets them as text",
                     "ValueError");
}

json::array array_of(const protocol::Object& p, const std::optional<protocol::Slice>& slice) {
  return slice ? std::move(tree_of(p.of(slice)).as_array()) : json::array();
}

json::object object_of(const protocol::Object& p, const std::optional<protocol::Slice>& slice) {
  return slice ? std::move(tree_of(p.of(slice)).as_object()) : json::object();
}

// A keyword's value as the keyword's ResultForm says (Python's dialect unless the keyword opted out).
json::value result_on_wire(const Keyword& keyword, json::value value) {
  if (keyword.result_form == ResultForm::as_is) return value;
  try {
    return pickle::python_dialect(value, "result");
  } catch (const pickle::ValueError& e) {
    throw KeywordError(fmt::format("Keyword '{}' returned a value that cannot be sent: {}", keyword.name, e.what()),
                       "ValueError");
  }
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

void Session::handle(std::string_view body) { handle(protocol::parse_message(body)); }

void Session::handle(const protocol::Classified& classified) {
  if (const auto* bad = std::get_if<protocol::ProtocolError>(&classified)) {
    log::warn("bad message ({}): {}", bad->code, bad->message);
    reply_error(bad->id_text, bad->code, bad->message);
    return;
  }
  const protocol::Message& message = std::get<protocol::Message>(classified);
  try {
    protocol_.dispatch(message, *this);
  } catch (const std::exception& e) {
    // Handlers answer once nothing can throw any more; this is for bugs (or bad_alloc), and must not
    // end the session.
    log::error("{} failed: {}", message.method(), e.what());
    if (message.kind == protocol::Message::Kind::request) reply_error(message.id_text(), protocol::kInternalError, e.what());
  }
}

void Session::reply(const protocol::Message& request, const json::value& result) {
  out_.send(protocol::make_result_raw(request.id_text(), json::serialize(result)));
}

void Session::reply_error(std::string_view id_text, int code, std::string_view message) {
  out_.send(protocol::make_error_raw(id_text, code, log::valid_utf8(message)));
}

void Session::refuse(const protocol::Message& request, int code, std::string message) {
  reply_error(request.id_text(), code, message);
}

void Session::ignore(const protocol::Message& message, std::string why) {
  if (message.kind == protocol::Message::Kind::response || message.kind == protocol::Message::Kind::error_response)
    log::warn("ignoring {}", why);
  else
    log::debug("ignoring: {}", why);
}

void Session::on_initialize(const protocol::Message& m, protocol::Initialize p) {
  if (const auto& hook = library_.initialize_hook(); hook && !hook(protocol::parse_value(p.text))) {
    log::warn("robot/initialize left unanswered on purpose");
    return;
  }
  json::object capabilities;
  capabilities["support_exit"] = true;
  capabilities["libraries"] = json::array{json::string(library_.name())};
  json::object server_info;
  server_info["name"] = library_.server_name();
  server_info["version"] = library_.version();
  json::object result;
  result["capabilities"] = std::move(capabilities);
  result["server_info"] = std::move(server_info);
  reply(m, result);
}

void Session::on_initialized(const protocol::Message&) {}

void Session::on_import_library(const protocol::Message& m, protocol::ImportLibrary p) {
  if (!p.name.empty() && p.name != library_.name()) {
    reply_error(m.id_text(), protocol::kInvalidParams,
                fmt::format("Library '{}' is not available; this server serves '{}'.", p.name, library_.name()));
    return;
  }

  auto instance = std::make_unique<Instance>();
  instance->import.args_text = p.of(p.args);
  instance->import.kw_args_text = p.of(p.kw_args);
  try {
    instance->import.args = array_of(p, p.args);
    instance->import.kw_args = object_of(p, p.kw_args);
  } catch (const KeywordError& e) {
    // The texts are still there for the library to read.
    log::warn("import of '{}': {}", library_.name(), e.what());
  }
  json::object extra_result;
  if (const auto& hook = library_.import_hook()) {
    ImportContext context{library_.name(), instance->import, instance->state, {}, &out_};
    try {
      hook(context);
      extra_result = std::move(context.extra_result);
    } catch (const RpcError& e) {
      log::warn("import of '{}' failed: {}", library_.name(), e.what());
      out_.send(protocol::make_error_raw(m.id_text(), e.code, log::valid_utf8(e.what()), e.data_text));
      return;
    } catch (const std::exception& e) {
      log::warn("import of '{}' failed: {}", library_.name(), e.what());
      reply_error(m.id_text(), protocol::kInternalError, e.what());
      return;
    }
  }

  std::string token = new_token();
  log::info("imported '{}' as {} (args {}, kw_args {})", library_.name(), token, p.of(p.args, "[]"),
            p.of(p.kw_args, "{}"));
  instances_.emplace(token, std::move(instance));
  json::object result;
  result["token"] = token;
  result["definition"] = library_.definition();
  for (auto& member : extra_result) result[member.key()] = std::move(member.value());
  if (auto* definition = result.if_contains("definition"); definition && definition->is_object())
    add_argument_markers(definition->get_object());
  reply(m, result);
}

void Session::on_run_keyword(const protocol::Message& m, protocol::RunKeyword p) { out_.send(run_keyword(m, p)); }

std::string Session::run_keyword(const protocol::Message& m, const protocol::RunKeyword& p) {
  auto answer = [&](const json::value& result) { return protocol::make_result_raw(m.id_text(), json::serialize(result)); };
  auto error_result = [&](auto&&... args) { return answer(sdk::error_result(args...)); };
  auto instance = instances_.find(p.library_token);
  if (instance == instances_.end())
    return error_result(fmt::format("No library '{}' found.", p.library_token), "LibraryNotFoundError");
  const Keyword* keyword = library_.find(p.name);
  Keyword dynamic;
  if (!keyword && library_.dynamic_body()) {
    dynamic.name = p.name;
    dynamic.body = library_.dynamic_body();
    dynamic.raw = true;
    keyword = &dynamic;
  }
  if (!keyword)
    return error_result(fmt::format("No keyword named '{}' in library '{}'. Available: {}.", p.name, library_.name(),
                                    keyword_names(library_)),
                        "KeywordNotFoundError");

  Instance& inst = *instance->second;
  std::optional<Call> call;
  std::string answered = [&]() -> std::string {
    try {
      // A raw keyword reads the texts; nothing is parsed into a tree for it.
      json::object bound = keyword->raw ? json::object()
                                        : bind_arguments(library_.name(), *keyword, array_of(p, p.args),
                                                         object_of(p, p.kwargs));
      call.emplace(library_.name(), keyword->name, std::move(bound), inst.import, inst.state, out_);
      call->set_texts(p.of(p.args), p.of(p.kwargs));
      json::value value = keyword->body(*call);
      if (const auto& raw = call->raw_result()) {
        auto [scanned, error] = protocol::scan(*raw);
        if (!scanned)
          throw KeywordError(fmt::format("the raw result is not JSON: {} (at byte {})", error->message, error->offset),
                             "ValueError");
        return protocol::make_result_raw(m.id_text(), R"({"result":)" + *raw + "}");
      }
      json::object result;
      // The reference leaves `result` out for None; Robot reads a missing result as None.
      if (!value.is_null()) result["result"] = result_on_wire(*keyword, std::move(value));
      return answer(result);
    } catch (const RpcError& e) {
      log::debug("keyword '{}' answered with error {}: {}", keyword->name, e.code, e.what());
      return protocol::make_error_raw(m.id_text(), e.code, log::valid_utf8(e.what()), e.data_text);
    } catch (const KeywordError& e) {
      log::debug("keyword '{}' failed: {}: {}", keyword->name, e.type(), e.what());
      return error_result(e.message(), e.type(), e.traceback(), e.mode());
    } catch (const std::exception& e) {
      const std::string type = demangle(typeid(e).name());
      log::debug("keyword '{}' threw {}: {}", keyword->name, type, e.what());
      return error_result(e.what(), type);
    } catch (...) {
      log::debug("keyword '{}' threw a non-standard exception", keyword->name);
      return error_result(fmt::format("Keyword '{}' threw an exception that is not a std::exception", keyword->name),
                          "UnknownException");
    }
  }();
  // Whether the body returned or failed, an exit it asked for comes once this answer is out.
  if (call && call->exit_status()) exit_status_ = call->exit_status();
  return answered;
}

void Session::on_finalize_library(const protocol::Message& m, protocol::FinalizeLibrary p) {
  // Finalizing an unknown or already finalized token is not an error (the reference answers {}).
  if (instances_.erase(p.token) > 0) log::info("finalized {}", p.token);
  reply(m, json::object());
}

void Session::on_shutdown(const protocol::Message& m) { reply(m, json::object()); }

void Session::on_exit(const protocol::Message&) { done_ = true; }

std::string Session::new_token() {
  // Random part: tokens of different sessions (and of a restarted worker) never collide.
  thread_local std::mt19937 rng{std::random_device{}()};
  return fmt::format("{}_{:08x}_{}", library_.name(), static_cast<std::uint32_t>(rng()), imports_++);
}

}  // namespace rjg::sdk
