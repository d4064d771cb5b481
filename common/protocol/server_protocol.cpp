#include "common/protocol/server_protocol.hpp"

#include "common/protocol/protocol.hpp"

#include <fmt/format.h>

namespace rjg::protocol {
namespace {

// The reference server's words, then what to do about it.
std::string not_initialized(std::string_view method) {
  std::string_view what = method == protocol::kImportLibrary ? "ImportLibrary" : "RunKeyword";
  return fmt::format("Initialize and Initialized must be received before {}. Send robot/initialize, then the "
                     "robot/initialized notification, then import libraries ({} was sent too early).",
                     what, method);
}

// Binds the params and calls the handler, or answers -32602.
template <typename P, typename Bind, typename Handler>
void with_params(const Message& m, ServerMethods& methods, Bind bind, Handler handler) {
  auto bound = bind(m);
  if (auto* invalid = std::get_if<protocol::Invalid>(&bound)) {
    methods.refuse(m, protocol::kInvalidParams, std::move(invalid->message));
    return;
  }
  (methods.*handler)(m, std::move(std::get<P>(bound)));
}

}  // namespace

bool ServerProtocol::require_ready(const Message& request, ServerMethods& methods) const {
  if (ready()) return true;
  methods.refuse(request, protocol::kNotInitialized, not_initialized(request.method()));
  return false;
}

void ServerProtocol::dispatch(const Message& m, ServerMethods& methods) {
  if (m.kind == Message::Kind::response || m.kind == Message::Kind::error_response) {
    methods.ignore(m, fmt::format("a response from the client (id {}): this server sends no requests", m.id_text()));
    return;
  }
  if (auto problem = check_client_method(m)) {
    if (problem->answer) methods.refuse(m, problem->code, std::move(problem->message));
    else methods.ignore(m, std::move(problem->message));
    return;
  }
  const std::string& method = m.method();
  if (method == protocol::kInitialize) {
    initialize_received_ = true;
    with_params<protocol::Initialize>(m, methods, protocol::bind_initialize, &ServerMethods::on_initialize);
  } else if (method == protocol::kInitialized) {
    initialized_received_ = true;
    methods.on_initialized(m);
  } else if (method == protocol::kImportLibrary) {
    if (require_ready(m, methods))
      with_params<protocol::ImportLibrary>(m, methods, protocol::bind_import_library, &ServerMethods::on_import_library);
  } else if (method == protocol::kRunKeyword) {
    if (require_ready(m, methods))
      with_params<protocol::RunKeyword>(m, methods, protocol::bind_run_keyword, &ServerMethods::on_run_keyword);
  } else if (method == protocol::kFinalizeLibrary) {
    with_params<protocol::FinalizeLibrary>(m, methods, protocol::bind_finalize_library,
                                         &ServerMethods::on_finalize_library);
  } else if (method == protocol::kShutdown) {
    methods.on_shutdown(m);
  } else if (method == protocol::kExit) {
    methods.on_exit(m);
  }
}

}  // namespace rjg::protocol
