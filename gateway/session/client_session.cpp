#include "gateway/session/client_session.hpp"

#include "common/log.hpp"
#include "common/protocol/protocol.hpp"

#include <boost/asio/co_spawn.hpp>

#include <fmt/format.h>

namespace rjg::gateway::session {
using namespace std::chrono_literals;
namespace protocol = rjg::protocol;

ClientSession::ClientSession(GatewayContext& context, std::shared_ptr<const config::Config> config,
                             supervisor::LeaseSource& leases, std::weak_ptr<Connection> connection, std::string name,
                             asio::any_io_executor executor)
    : context_(context),
      config_(std::move(config)),
      leases_(leases),
      connection_(std::move(connection)),
      name_(std::move(name)),
      pipeline_(context_, *this, name_),
      background_done_(std::move(executor)) {
  background_done_.set();
  // The connection's, which the server reads for /status; a connection already gone gets one nobody reads.
  if (auto c = connection_.lock()) activity_ = c->activity;
  else activity_ = std::make_shared<SessionActivity>();
}

ClientSession::~ClientSession() { log::debug("{}: released", name_); }

void ClientSession::send(std::string json_text) {
  if (auto c = connection_.lock()) c->send(std::move(json_text));
}

void ClientSession::relay_notification(std::string_view json_text) {
  if (!ending_) send(std::string(json_text));
}

asio::awaitable<void> ClientSession::wait_for_room() {
  // An ending session drops relayed logs: its worker need not wait for the client.
  if (ending_) co_return;
  if (auto c = connection_.lock()) co_await c->wait_for_room();
}

asio::awaitable<void> ClientSession::room_for_answer() {
  if (auto c = connection_.lock()) co_await c->wait_for_room();
}

void ClientSession::spawn(asio::awaitable<void> task, std::string what) {
  ++background_;
  background_done_.reset();
  auto self = shared_from_this();
  asio::co_spawn(background_done_.executor(), std::move(task),
                 [self, where = name_ + " " + what](std::exception_ptr e) {
                   runtime::log_exceptions(where)(e);
                   if (--self->background_ == 0) {
                     self->background_done_.set();
                     if (auto c = self->connection_.lock()) c->session_idle();
                   }
                 });
}

void ClientSession::handle(const protocol::Message& message) {
  const auto handling = pipeline_.handling(message);
  // What one connection can make the gateway hold is bounded: its unanswered requests in number, and
  // the text of those requests in bytes (each Reply counts its request's text until it is answered).
  // A request beyond either limit is answered at once. One request is always admitted when nothing
  // else waits: its size is bounded by max_message_bytes.
  if (message.kind == protocol::Message::Kind::request) {
    const auto& gw = config_->gateway;
    if (requests_in_flight_ >= gw.max_pending_requests) {
      log::warn("{}: refused request {} ({}): {} requests unanswered (max_pending_requests)", name_,
                log::printable(message.id_text(), 40), message.method(), requests_in_flight_);
      send(failure_answer(message.id_text(), message.method(), protocol::kAtCapacity,
                          fmt::format("Too many requests waiting on this connection: {} are unanswered, the most "
                                      "allowed ([gateway] max_pending_requests = {}). Wait for answers before "
                                      "sending more, or raise max_pending_requests.",
                                      requests_in_flight_, gw.max_pending_requests)));
      return;
    }
    const std::size_t size = message.text().size();
    if (pending_bytes_ > 0 && pending_bytes_ + size > gw.max_pending_bytes) {
      log::warn("{}: refused request {} ({}) of {} bytes: {} bytes of requests wait (max_pending_bytes)", name_,
                log::printable(message.id_text(), 40), message.method(), size, pending_bytes_);
      send(failure_answer(message.id_text(), message.method(), protocol::kAtCapacity,
                          fmt::format("Too much request text waiting on this connection: {} bytes of {} unanswered "
                                      "requests wait for a worker, and this request of {} bytes would take them past "
                                      "[gateway] max_pending_bytes = {}. Wait for answers before sending more, send "
                                      "smaller requests, or raise max_pending_bytes.",
                                      pending_bytes_, requests_in_flight_, size, gw.max_pending_bytes)));
      return;
    }
  }
  try {
    protocol_.dispatch(message, *this);
  } catch (const std::exception& e) {
    // A bug (or bad_alloc), never something a client can cause on purpose: the session goes on, and a
    // request's Reply has already answered it with an internal error.
    log::error("bug: {}: {} failed: {}", name_, message.method(), e.what());
  }
}

void ClientSession::handle_invalid(const protocol::ProtocolError& problem) {
  log::info("{}: answered an invalid message with {}: {}", name_, problem.code, problem.message);
  // A keyword whose arguments are over a limit (nesting, members) fails as a keyword: the stock client
  // would end its session on an error answer. Only with an id the client can match.
  if (!problem.method.empty() && problem.id_text != "null") {
    send(failure_answer(problem.id_text, problem.method, problem.code,
                        problem.method == protocol::kRunKeyword
                            ? problem.message + ". The keyword's arguments are over the gateway's limit: pass a "
                                                "smaller value, or raise the [gateway] key named."
                            : problem.message,
                        {}, "ArgumentsOverLimit"));
    return;
  }
  send(protocol::make_error_raw(problem.id_text, problem.code, problem.message));
}

void ClientSession::refuse(const protocol::Message& request, int code, std::string message) {
  send(protocol::make_error_raw(request.id_text(), code, message));
}

void ClientSession::ignore(const protocol::Message& message, std::string why) {
  if (message.kind == protocol::Message::Kind::notification && !protocol::client_method_is_request(message.method()))
    log::debug("{}: ignored notification {}", name_, message.method());
  else
    log::warn("{}: ignored: {}", name_, why);
}

void ClientSession::on_initialize(const protocol::Message& request, protocol::Initialize) {
  Reply reply(shared_from_this(), request);
  json::array libraries;
  for (auto& name : context_.router.names()) libraries.emplace_back(name);
  reply.result(json::object{
      {"capabilities", json::object{{"support_exit", true}, {"libraries", std::move(libraries)}}},
      {"server_info", json::object{{"name", kServerName}, {"version", context_.version}}},
  });
}

void ClientSession::on_initialized(const protocol::Message&) {}

void ClientSession::count_imports() {
  if (auto c = connection_.lock()) c->imports_open->store(tokens_.size(), std::memory_order_relaxed);
}

void ClientSession::on_import_library(const protocol::Message& request, protocol::ImportLibrary params) {
  Reply reply(shared_from_this(), request);
  auto route = context_.router.resolve(params.name);
  const config::Library* library = route.library.get();
  if (!library && route.removed) {
    // A name the configuration had: bounded like every library label.
    supervisor::LibraryMetrics::add(context_.metrics.library(params.name).imports, supervisor::ImportOutcome::error);
    json::array available;
    for (auto& name : context_.router.names()) available.emplace_back(name);
    reply.error(protocol::kUnknownLibrary,
                fmt::format("Library '{}' was removed from the gateway's configuration by a reload: it takes no new "
                            "imports (imports made before the reload run until finalized). Available libraries: {}.",
                            params.name, context_.router.available()),
                json::serialize(json::object{{"library", params.name}, {"removed", true}, {"available", std::move(available)}}));
    return;
  }
  if (!library && !route.refused.empty()) {
    log::warn("{}: import of '{}' refused: {}", name_, log::printable(params.name, 200), route.refused);
    reply.error(protocol::kUnknownLibrary, fmt::format("Library '{}' is not served: {}.", params.name, route.refused),
                json::serialize(json::object{{"library", params.name}, {"refused", route.refused}}));
    return;
  }
  if (!library) {
    json::array available;
    for (auto& name : context_.router.names()) available.emplace_back(name);
    reply.error(protocol::kUnknownLibrary,
                fmt::format("Library '{}' is not served by this gateway. Available libraries: {}.", params.name,
                            context_.router.available()),
                json::serialize(json::object{{"library", params.name}, {"available", std::move(available)}}));
    return;
  }
  if (auto refused = pipeline_.check_in(*library, params)) {
    reply.error(refused->code, refused->message, refused->data_json);
    return;
  }
  spawn(import_library(std::move(reply), std::move(params), std::move(route.library)), "import_library");
}

asio::awaitable<void> ClientSession::import_library(Reply reply, protocol::ImportLibrary params,
                                                    std::shared_ptr<const config::Library> route) {
  log::info("{}: importing library {}", name_, route->label());
  auto& metrics = context_.metrics.library(route->name);
  struct Outcome {
    supervisor::LibraryMetrics& metrics;
    bool ok = false;
    ~Outcome() { supervisor::LibraryMetrics::add(metrics.imports, ok ? supervisor::ImportOutcome::ok : supervisor::ImportOutcome::error); }
  } outcome{metrics};
  std::shared_ptr<supervisor::Lease> lease;
  std::optional<Failure> acquire_failure;
  try {
    // Only an import without arguments may get an instance imported ahead of time (prewarm_import).
    auto acquiring = without_arguments(params) ? leases_.acquire_without_arguments(*route) : leases_.acquire(*route);
    lease = co_await std::move(acquiring);
  } catch (const supervisor::WorkerError& e) {
    log::warn("{}: import of {} failed: {}", name_, route->label(), e.what());
    acquire_failure = Failure::of(e);
  }
  if (acquire_failure) {
    co_await room_for_answer();
    reply.error(acquire_failure->code, acquire_failure->message, acquire_failure->data_json);
    co_return;
  }

  auto pass = co_await pipeline_.import(std::move(params), route, *lease, metrics);
  if (pass.failure) {
    co_await room_for_answer();
    reply.error(pass.failure->code, pass.failure->message, pass.failure->data_json);
    co_await lease->release(pass.release_reason);
    co_return;
  }
  const config::Library& library = *pass.settings;
  // Kept for a re-import unless large: every import of a connection would hold its arguments for good.
  auto kept = pass.worker_params.size() <= kMaxKeptImportBytes
                  ? std::make_shared<const std::string>(std::move(pass.worker_params))
                  : nullptr;
  Import import{TokenMap::new_token(library.label()), library.label(), pass.worker_token->token, lease, pass.settings,
                &metrics, std::move(kept), {}, {}};
  // Before the ending_ check: nothing may suspend between it and adding the import.
  co_await room_for_answer();
  if (ending_) {
    reply.error(protocol::kShuttingDown, "The connection closed during the import.");
    co_await lease->end(finalize_params(import), "its session closed during the import");
    co_return;
  }
  log::info("{}: imported library {} in worker {}{}", name_, library.label(), lease->where(),
            pass.imported_ahead ? " (warm, imported ahead of time)" : lease->prewarmed() ? " (warm)" : "");
  auto answer_text = RequestPipeline::answer_import(pass, reply.id_text(), import.token);
  activity_->library_imported(import.library);
  tokens_.add(std::move(import));
  count_imports();
  outcome.ok = true;
  reply.send(std::move(answer_text));
}

void ClientSession::on_run_keyword(const protocol::Message& request, protocol::RunKeyword params) {
  Reply reply(shared_from_this(), request);
  const Import* import = tokens_.find(params.library_token);
  if (!import) {
    reply.error(protocol::kUnknownToken,
                fmt::format("Unknown library token '{}': it was not issued on this connection, or its library was "
                            "finalized. Tokens are valid only on the connection that imported the library.",
                            log::printable(params.library_token, 80)));
    return;
  }
  if (auto refused = pipeline_.admit(params, *import)) {
    reply.error(refused->code, refused->message, refused->data_json);
    return;
  }
  if (on_lost_worker(reply, params, *import)) return;
  spawn(run_keyword(std::move(reply), RequestPipeline::rewrite(params, *import)), "run_keyword");
}

asio::awaitable<void> ClientSession::run_keyword(Reply reply, RequestPipeline::KeywordCall call) {
  const auto running = activity_->keyword_started(call.import.library, call.keyword);  // for /status, until answered
  auto pass = co_await pipeline_.run(call);
  if (pass.worker_lost) worker_lost_in(call, *pass.failure);
  co_await room_for_answer();  // nothing suspends between here and the answer
  if (pass.failure)
    reply.error(pass.failure->code, pass.failure->message, pass.failure->data_json);
  else
    reply.send(pass.answer->with_id(reply.id_text()));
}

void ClientSession::on_finalize_library(const protocol::Message& request, protocol::FinalizeLibrary params) {
  Reply reply(shared_from_this(), request);
  auto import = tokens_.remove(params.token);
  count_imports();
  if (!import) {
    reply.error(protocol::kUnknownToken,
                fmt::format("Unknown library token '{}': it was not issued on this connection, or it was already "
                            "finalized.",
                            log::printable(params.token, 80)));
    return;
  }
  activity_->library_finalized(import->library);
  spawn(finalize_library(std::move(reply), std::move(*import)), "finalize_library");
}

asio::awaitable<void> ClientSession::finalize_library(Reply reply, Import import) {
  auto pass = co_await pipeline_.finalize(import);
  co_await room_for_answer();  // nothing suspends between here and the answer
  if (pass.failure) {
    reply.error(pass.failure->code, pass.failure->message, pass.failure->data_json);
  } else if (pass.answer) {
    reply.send(pass.answer->with_id(reply.id_text()));
  } else {
    // A worker that is already gone has nothing left to finalize.
    reply.result(json::object{});
  }
}

void ClientSession::on_shutdown(const protocol::Message& request) {
  Reply reply(shared_from_this(), request);
  reply.result(json::object{});
}

void ClientSession::on_exit(const protocol::Message&) {
  if (auto c = connection_.lock()) c->close("the client sent robot/exit");
}

asio::awaitable<void> ClientSession::end_import(std::shared_ptr<supervisor::Lease> lease, std::string finalize_params,
                                               std::string why) {
  // The lease is held here: the import it belonged to is gone.
  co_await lease->end(std::move(finalize_params), std::move(why));
}

asio::awaitable<void> ClientSession::end(std::string why) {
  ending_ = true;
  // Every import ends in the background, all at once (each may take its grace period): dedicated
  // workers are stopped, which fails their calls in flight; shared ones finalize the instance.
  auto all = tokens_.take_all();
  count_imports();
  for (auto& import : all) {
    auto what = "end import of " + import.library;
    spawn(end_import(import.lease, finalize_params(import), "its session closed: " + why), std::move(what));
  }
  // Imports still starting end their own worker when they see the session ending. Each of these tasks
  // is bounded by its own timeouts, except a keyword still running on a shared worker.
  if (!co_await background_done_.wait_for(120s))
    log::error("{}: {} tasks still running 120s after close ({})", name_, background_, why);
  co_return;  // explicit: GCC 12 miscompiles an awaitable<void> that falls off the end after `if (co_await ...)`
}

}  // namespace rjg::gateway::session
