#include "gateway/client_session.hpp"

#include "common/log.hpp"
#include "common/protocol/protocol.hpp"
#include "gateway/pickle_guard.hpp"

#include <boost/asio/co_spawn.hpp>

#include <fmt/format.h>

namespace rjg::gateway {
using namespace std::chrono_literals;
namespace protocol = rjg::protocol;

namespace {
// Requests one connection may have unanswered at once. The real client sends one at a time; the cap
// bounds what a pipelining client can make the gateway hold (each up to max_message_bytes).
constexpr std::size_t kMaxRequestsInFlight = 64;

// A failure to answer an import with: code, message, data (a JSON text).
struct Failure {
  int code;
  std::string message;
  std::string data_json;
};
Failure from(const workers::WorkerError& e) {
  return {e.code, e.what(), e.data.empty() ? std::string() : json::serialize(e.data)};
}
}  // namespace

ClientSession::ClientSession(GatewayContext& context, workers::LeaseSource& leases,
                             std::weak_ptr<Connection> connection, std::string name, asio::any_io_executor executor)
    : context_(context),
      leases_(leases),
      connection_(std::move(connection)),
      name_(std::move(name)),
      background_done_(std::move(executor)) {
  background_done_.set();
}

ClientSession::~ClientSession() { log::debug("{}: released", name_); }

void ClientSession::send(std::string json_text) {
  if (auto c = connection_.lock()) c->send(std::move(json_text));
}

void ClientSession::relay_notification(std::string_view json_text) {
  if (!ending_) send(std::string(json_text));
}

asio::awaitable<void> ClientSession::wait_for_room() {
  if (auto c = connection_.lock()) co_await c->wait_for_room();
}

void ClientSession::spawn(asio::awaitable<void> task, std::string what) {
  ++background_;
  background_done_.reset();
  auto self = shared_from_this();
  asio::co_spawn(background_done_.executor(), std::move(task),
                 [self, where = name_ + " " + what](std::exception_ptr e) {
                   log_exceptions(where)(e);
                   if (--self->background_ == 0) {
                     self->background_done_.set();
                     if (auto c = self->connection_.lock()) c->session_idle();
                   }
                 });
}

void ClientSession::handle(const Message& message) {
  if (message.kind == Message::Kind::request && requests_in_flight_ >= kMaxRequestsInFlight) {
    send(make_error_raw(message.id_text(), protocol::kAtCapacity,
                        fmt::format("Too many requests in flight on this connection ({} unanswered); wait for "
                                    "answers before sending more.",
                                    kMaxRequestsInFlight)));
    return;
  }
  try {
    protocol_.dispatch(message, *this);
  } catch (const std::exception& e) {
    // A bug (or bad_alloc), never something a client can cause on purpose: the session goes on, and a
    // request's Reply has already answered it with an internal error.
    log::error("bug: {}: {} failed: {}", name_, message.method(), e.what());
  }
}

void ClientSession::handle_invalid(const ProtocolError& problem) {
  log::info("{}: answered an invalid message with {}: {}", name_, problem.code, problem.message);
  send(make_error_raw(problem.id_text, problem.code, problem.message));
}

void ClientSession::refuse(const Message& request, int code, std::string message) {
  send(make_error_raw(request.id_text(), code, message));
}

void ClientSession::ignore(const Message& message, std::string why) {
  if (message.kind == Message::Kind::notification && !protocol::client_method_is_request(message.method()))
    log::debug("{}: ignored notification {}", name_, message.method());
  else
    log::warn("{}: ignored: {}", name_, why);
}

void ClientSession::on_initialize(const Message& request, params::Initialize) {
  Reply reply(shared_from_this(), request);
  json::array libraries;
  for (auto& name : context_.router.names()) libraries.emplace_back(name);
  reply.result(json::object{
      {"capabilities", json::object{{"support_exit", true}, {"libraries", std::move(libraries)}}},
      {"server_info", json::object{{"name", kServerName}, {"version", context_.version}}},
  });
}

void ClientSession::on_initialized(const Message&) {}

void ClientSession::on_import_library(const Message& request, params::ImportLibrary params) {
  Reply reply(shared_from_this(), request);
  if (context_.draining) {
    reply.error(protocol::kShuttingDown, "The gateway is shutting down and accepts no new imports; retry shortly.");
    return;
  }
  const config::Library* library = context_.router.resolve(params.name);
  if (!library) {
    json::array available;
    for (auto& name : context_.router.names()) available.emplace_back(name);
    reply.error(protocol::kUnknownLibrary,
                fmt::format("Library '{}' is not served by this gateway. Available libraries: {}.", params.name,
                            context_.router.available()),
                json::serialize(json::object{{"library", params.name}, {"available", std::move(available)}}));
    return;
  }
  if (auto refused = refuse_pickles(*library, {{"args", params.of(params.args)}, {"kw_args", params.of(params.kw_args)}})) {
    log::warn("{}: import of {} refused: {}", name_, library->name, refused->message);
    reply.error(protocol::kPickleRefused, refused->message, refused->data_json);
    return;
  }
  spawn(import_library(std::move(reply), std::move(params), *library), "import_library");
}

asio::awaitable<void> ClientSession::import_library(Reply reply, params::ImportLibrary params,
                                                    const config::Library& library) {
  log::info("{}: importing library {}", name_, library.name);
  std::shared_ptr<workers::Lease> lease;
  try {
    lease = co_await leases_.acquire(library);
  } catch (const workers::WorkerError& e) {
    log::warn("{}: import of {} failed: {}", name_, library.name, e.what());
    auto f = from(e);
    reply.error(f.code, f.message, f.data_json);
    co_return;
  }

  // The worker's own command line names its library, so it is asked for its default one: the
  // configured name is the gateway's alias and need not match the worker's.
  std::string worker_params = params.with({{params.name_value, "\"\""}});
  std::optional<Message> answer;
  std::optional<Failure> failure;
  try {
    answer.emplace(co_await lease->import_library(std::move(worker_params), weak_from_this()));
  } catch (const workers::WorkerError& e) {
    failure = from(e);
  }
  if (!failure && answer->kind == Message::Kind::error_response) {
    log::warn("{}: library {} failed to import in worker pid {}: {}", name_, library.name, lease->pid(),
              answer->error_message());
    failure = Failure{answer->error_code(),
                      fmt::format("Library '{}' failed to import in its worker (pid {}): {}", library.name,
                                  lease->pid(), answer->error_message()),
                      std::string(answer->error_data_text())};
  }
  std::optional<WorkerToken> worker_token;
  if (!failure && !(worker_token = worker_token_of(*answer))) {
    failure = Failure{protocol::kWorkerFailed,
                      fmt::format("The worker of library '{}' (pid {}) answered robot/import_library without a token",
                                  library.name, lease->pid()),
                      {}};
  }
  if (!failure) {
    // Argument defaults in the definition travel to the client: the same policy applies to them.
    const auto result = answer->result_text();
    const auto members = jsontext::members(result);
    const auto* definition = jsontext::find(members, "definition");
    if (auto refused = refuse_pickles(library, {{"definition", definition ? definition->value.of(result) : ""}}))
      failure = Failure{protocol::kPickleRefused, refused->message, refused->data_json};
  }
  if (failure) {
    log::warn("{}: import of {} failed: {}", name_, library.name, failure->message);
    reply.error(failure->code, failure->message, failure->data_json);
    co_await lease->release("its import failed");
    co_return;
  }

  Import import{TokenMap::new_token(library.name), library.name, worker_token->token, lease, &library};
  if (ending_) {
    reply.error(protocol::kShuttingDown, "The connection closed during the import.");
    co_await lease->end(finalize_params(import), "its session closed during the import");
    co_return;
  }
  log::info("{}: imported library {} in worker pid {}{}", name_, library.name, lease->pid(),
            lease->prewarmed() ? " (warm)" : "");
  auto answer_text = to_client(*answer, *worker_token, reply.id_text(), import.token);
  tokens_.add(std::move(import));
  reply.send(std::move(answer_text));
}

void ClientSession::on_run_keyword(const Message& request, params::RunKeyword params) {
  Reply reply(shared_from_this(), request);
  if (context_.draining) {
    reply.error(protocol::kShuttingDown, "The gateway is shutting down and accepts no new keywords.");
    return;
  }
  const Import* import = tokens_.find(params.library_token);
  if (!import) {
    reply.error(protocol::kUnknownToken,
                fmt::format("Unknown library token '{}': it was not issued on this connection, or its library was "
                            "finalized. Tokens are valid only on the connection that imported the library.",
                            log::printable(params.library_token, 80)));
    return;
  }
  if (auto refused = refuse_pickles(*import->config, {{"args", params.of(params.args)}, {"kwargs", params.of(params.kwargs)}})) {
    log::warn("{}: keyword '{}' of {} refused: {}", name_, params.name, import->library, refused->message);
    reply.error(protocol::kPickleRefused, refused->message, refused->data_json);
    return;
  }
  // The import is copied: a finalize that arrives meanwhile queues behind this call on the worker.
  spawn(run_keyword(std::move(reply), to_worker(params, *import), params.name, *import), "run_keyword");
}

asio::awaitable<void> ClientSession::run_keyword(Reply reply, std::string worker_params, std::string keyword,
                                                 Import import) {
  try {
    auto answer = co_await import.lease->run_keyword(std::move(worker_params), keyword, weak_from_this());
    if (auto refused = refuse_pickles(*import.config, {{"result", answer.result_text()}})) {
      log::warn("{}: result of keyword '{}' of {} refused: {}", name_, keyword, import.library, refused->message);
      reply.error(protocol::kPickleRefused, refused->message, refused->data_json);
    } else {
      reply.send(answer.with_id(reply.id_text()));
    }
  } catch (const workers::WorkerError& e) {
    log::warn("{}: keyword '{}' of library {} failed in the gateway: {}", name_, keyword, import.library, e.what());
    auto f = from(e);
    reply.error(f.code, f.message, f.data_json);
  }
}

void ClientSession::on_finalize_library(const Message& request, params::FinalizeLibrary params) {
  Reply reply(shared_from_this(), request);
  auto import = tokens_.remove(params.token);
  if (!import) {
    reply.error(protocol::kUnknownToken,
                fmt::format("Unknown library token '{}': it was not issued on this connection, or it was already "
                            "finalized.",
                            log::printable(params.token, 80)));
    return;
  }
  spawn(finalize_library(std::move(reply), std::move(*import)), "finalize_library");
}

asio::awaitable<void> ClientSession::finalize_library(Reply reply, Import import) {
  auto answer = co_await import.lease->finalize_library(finalize_params(import), weak_from_this());
  // A worker that is already gone has nothing left to finalize.
  if (answer) reply.send(answer->with_id(reply.id_text()));
  else reply.result(json::object{});
}

void ClientSession::on_shutdown(const Message& request) {
  Reply reply(shared_from_this(), request);
  reply.result(json::object{});
}

void ClientSession::on_exit(const Message&) {
  if (auto c = connection_.lock()) c->close("the client sent robot/exit");
}

asio::awaitable<void> ClientSession::end_import(std::shared_ptr<workers::Lease> lease, std::string finalize_params) {
  // The lease is held here: the import it belonged to is gone.
  co_await lease->end(std::move(finalize_params), "its session closed");
}

asio::awaitable<void> ClientSession::end(std::string why) {
  ending_ = true;
  // Every import ends in the background, all at once (each may take its grace period): dedicated
  // workers are stopped, which fails their calls in flight; shared ones finalize the instance.
  for (auto& import : tokens_.take_all()) {
    auto what = "end import of " + import.library;
    spawn(end_import(import.lease, finalize_params(import)), std::move(what));
  }
  // Imports still starting end their own worker when they see the session ending. Each of these tasks
  // is bounded by its own timeouts, except a keyword still running on a shared worker.
  if (!co_await background_done_.wait_for(120s))
    log::error("{}: {} tasks still running 120s after close ({})", name_, background_, why);
}

}  // namespace rjg::gateway
