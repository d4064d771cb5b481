#include "gateway/session/client_session.hpp"

#include "common/log.hpp"
#include "common/protocol/json_text.hpp"
#include "common/protocol/protocol.hpp"
#include "gateway/session/pickle_guard.hpp"
#include "gateway/session/argument_guard.hpp"

#include <boost/asio/co_spawn.hpp>

#include <fmt/format.h>

namespace rjg::gateway::session {
using namespace std::chrono_literals;
namespace protocol = rjg::protocol;

namespace {
// A failure to answer an import with: code, message, data (a JSON text).
struct Failure {
  int code;
  std::string message;
  std::string data_json;
};
Failure from(const supervisor::WorkerError& e) {
  return {e.code, e.what(), e.data.empty() ? std::string() : json::serialize(e.data)};
}

// An import without arguments: args absent, null or an empty list, and kw_args absent, null or an empty
// object (white space inside the brackets allowed). Such an import may be answered by an instance the
// worker imported with no arguments ahead of time (prewarm_import): the two are the same import. Other
// members of the params do not make it one with arguments (a choice): the protocol defines no other
// member that shapes the instance, and the SDK ignores them; such members then never reach the worker.
// PASS or FAIL, from a RunKeywordResult: a keyword failed when the result has an "error" object. A
// failure's result usually holds little else, with "error" first: a large result is judged by its first
// member, so that the metrics never cost a pass over it.
supervisor::KeywordOutcome keyword_outcome(std::string_view result) {
  constexpr std::size_t kWalkAtMost = 4096;
  auto skip_space = [](std::string_view& s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\n' || s.front() == '\r')) s.remove_prefix(1);
  };
  std::string_view rest = result;
  skip_space(rest);
  if (rest.starts_with('{')) {
    rest.remove_prefix(1);
    skip_space(rest);
    if (rest.starts_with("\"error\"")) {
      rest.remove_prefix(7);
      skip_space(rest);
      if (rest.starts_with(':')) {
        rest.remove_prefix(1);
        skip_space(rest);
        return rest.starts_with('{') ? supervisor::KeywordOutcome::fail : supervisor::KeywordOutcome::pass;
      }
    }
  }
  if (result.size() > kWalkAtMost) return supervisor::KeywordOutcome::pass;
  const auto members = protocol::members(result);
  const auto* error = protocol::find(members, "error");
  return error && error->kind == protocol::Kind::object ? supervisor::KeywordOutcome::fail : supervisor::KeywordOutcome::pass;
}

bool without_arguments(const protocol::ImportLibrary& p) {
  auto empty = [&](const std::optional<protocol::Slice>& value) {
    if (!value) return true;
    const std::string_view text = value->of(p.text);  // "[...]" or "{...}", valid JSON
    return text.size() >= 2 && text.find_first_not_of(" \t\r\n", 1) == text.size() - 1;
  };
  return empty(p.args) && empty(p.kw_args);
}

// The observer of one import or keyword call: what the worker sends meanwhile (robot/log,
// robot/trace) passes the library's pickle policy on its way to the client, like every other value.
// A refused notification is dropped, logged, and replaced by a WARN log naming what was refused, so
// the Robot log shows that a message is missing and why.
class CallRelay final : public supervisor::CallObserver {
 public:
  CallRelay(std::weak_ptr<ClientSession> session, const config::Library& library, std::string session_name)
      : session_(std::move(session)), library_(library), session_name_(std::move(session_name)) {}

  void relay_notification(std::string_view json_text) override {
    auto session = session_.lock();
    if (!session) return;
    if (auto refused = refuse_pickles(library_, {{"", json_text}})) {
      log::warn("{}: a notification from library {} was dropped: {}", session_name_, library_.name, refused->message);
      json::object params{{"message", fmt::format("robot-jsonrpc-gateway dropped a message from library '{}': {}",
                                                  library_.name, refused->message)},
                          {"level", "WARN"},
                          {"html", false},
                          {"console", false}};
      session->relay_notification(protocol::make_notification_raw(protocol::kLog, json::serialize(params)));
      return;
    }
    session->relay_notification(json_text);
  }
  asio::awaitable<void> wait_for_room() override {
    if (auto session = session_.lock()) co_await session->wait_for_room();
  }

 private:
  std::weak_ptr<ClientSession> session_;
  const config::Library& library_;
  std::string session_name_;
};
}  // namespace

ClientSession::ClientSession(GatewayContext& context, std::shared_ptr<const config::Config> config,
                             supervisor::LeaseSource& leases, std::weak_ptr<Connection> connection, std::string name,
                             asio::any_io_executor executor)
    : context_(context),
      config_(std::move(config)),
      leases_(leases),
      connection_(std::move(connection)),
      name_(std::move(name)),
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

namespace {
// What precheck() needs of a large request: its token (run_keyword) or library name (import), and the
// values its handler checks for pickles, as views into the message.
struct PrecheckValues {
  std::string key;
  std::vector<std::pair<std::string, std::string_view>> values;
};

// Off the loop (coroutine functions, not capturing lambdas: their frames own their arguments).
asio::awaitable<std::optional<PrecheckValues>> bind_for_precheck(const protocol::Message* message, bool run) {
  auto collect = [&](auto& p, std::string key, std::initializer_list<std::pair<const char*, std::optional<protocol::Slice>>> at) {
    PrecheckValues f{std::move(key), {}};
    for (auto& [path, slice] : at)
      f.values.emplace_back(path, slice ? slice->of(message->params_text()) : std::string_view());
    return f;
  };
  if (run) {
    auto bound = protocol::bind_run_keyword(*message);
    if (auto* p = std::get_if<protocol::RunKeyword>(&bound))
      co_return collect(*p, p->library_token, {{"args", p->args}, {"kwargs", p->kwargs}});
  } else {
    auto bound = protocol::bind_import_library(*message);
    if (auto* p = std::get_if<protocol::ImportLibrary>(&bound))
      co_return collect(*p, p->name, {{"args", p->args}, {"kw_args", p->kw_args}});
  }
  co_return std::nullopt;
}

asio::awaitable<std::optional<PickleRefusal>> refuse_pickles_on_pool(const config::Library* library,
                                                                     const PrecheckValues* found) {
  const auto& v = found->values;
  co_return refuse_pickles(*library, {{v[0].first, v[0].second}, {v[1].first, v[1].second}});
}
}  // namespace

asio::awaitable<std::optional<PickleRefusal>> ClientSession::refuse_answer_pickles(
    const config::Library& library, std::pair<std::string_view, std::string_view> first,
    std::pair<std::string_view, std::string_view> second) {
  // A worker's large answer is checked off the loop, like a client's large request; the answer (and
  // so the views) lives in the caller's frame until this returns.
  if (context_.offload && library.pickle != config::PicklePolicy::allow &&
      first.second.size() + second.second.size() >= runtime::kOffloadFrameBytes) {
    PrecheckValues values{{}, {{std::string(first.first), first.second}, {std::string(second.first), second.second}}};
    auto check = refuse_pickles_on_pool(&library, &values);
    std::optional<PickleRefusal> verdict =
        co_await asio::co_spawn(*context_.offload, std::move(check), asio::use_awaitable);
    log::debug("{}: an answer of library {} with {} bytes of values: pickles checked off the event loop", name_,
               library.name, first.second.size() + second.second.size());
    if (verdict) supervisor::LibraryMetrics::add(context_.metrics.library(library.name).pickles_refused, supervisor::Direction::out);
    co_return verdict;
  }
  auto verdict = session::refuse_pickles(library, {{first.first, first.second}, {second.first, second.second}});
  if (verdict) supervisor::LibraryMetrics::add(context_.metrics.library(library.name).pickles_refused, supervisor::Direction::out);
  co_return verdict;
}

asio::awaitable<void> ClientSession::precheck(const protocol::Message& message, asio::any_io_executor pool) {
  prechecked_.reset();
  const bool run = message.method() == protocol::kRunKeyword;
  if (message.kind != protocol::Message::Kind::request || (!run && message.method() != protocol::kImportLibrary)) co_return;
  // Binding scans the params: off the loop. The message outlives handle(), so views into it stay valid.
  std::optional<PrecheckValues> found =
      co_await asio::co_spawn(pool, bind_for_precheck(&message, run), asio::use_awaitable);
  if (!found) co_return;
  std::shared_ptr<const config::Library> library;
  if (run) {
    if (const Import* import = tokens_.find(found->key)) library = import->config;
  } else {
    library = context_.router.resolve(found->key).library;
  }
  if (!library || library->pickle == config::PicklePolicy::allow) co_return;
  std::optional<PickleRefusal> verdict =
      co_await asio::co_spawn(pool, refuse_pickles_on_pool(library.get(), &*found), asio::use_awaitable);
  log::debug("{}: {} of {} bytes: params bound and pickles checked off the event loop", name_, message.method(),
             message.text().size());
  prechecked_.emplace(Prechecked{&message, library, std::move(found->values), std::move(verdict)});
}

std::optional<PickleRefusal> ClientSession::refuse_argument_pickles(
    const config::Library& library, std::initializer_list<std::pair<std::string_view, std::string_view>> values) {
  // The verdict computed off the loop applies when the handler asks about exactly the same values.
  if (prechecked_ && prechecked_->library.get() == &library && prechecked_->values.size() == values.size()) {
    bool same = true;
    std::size_t i = 0;
    for (const auto& [path, text] : values) {
      const auto& [p, t] = prechecked_->values[i++];
      same = same && p == path && t == text;
    }
    if (same) {
      if (prechecked_->verdict) supervisor::LibraryMetrics::add(context_.metrics.library(library.name).pickles_refused, supervisor::Direction::in);
      return prechecked_->verdict;
    }
  }
  auto verdict = session::refuse_pickles(library, values);
  if (verdict) supervisor::LibraryMetrics::add(context_.metrics.library(library.name).pickles_refused, supervisor::Direction::in);
  return verdict;
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
  // What precheck() found applies to this message only, and only while it is being handled: on every
  // way out (an early refusal included) it is forgotten, as its views point into this message.
  if (prechecked_ && prechecked_->message != &message) prechecked_.reset();
  struct ForgetPrecheck {
    std::optional<Prechecked>& prechecked;
    ~ForgetPrecheck() { prechecked.reset(); }
  } forget{prechecked_};
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
  if (auto refused = refuse_argument_pickles(*library, {{"args", params.of(params.args)}, {"kw_args", params.of(params.kw_args)}})) {
    log::warn("{}: import of {} refused: {}", name_, library->label(), refused->message);
    supervisor::LibraryMetrics::add(context_.metrics.library(library->name).imports, supervisor::ImportOutcome::error);
    reply.error(protocol::kPickleRefused, refused->message, refused->data_json);
    return;
  }
  spawn(import_library(std::move(reply), std::move(params), std::move(route.library)), "import_library");
}

asio::awaitable<void> ClientSession::import_library(Reply reply, protocol::ImportLibrary params,
                                                    std::shared_ptr<const config::Library> route) {
  // Kept alive: the route below may be replaced by the lease's settings, and a glob route's settings are
  // owned by nothing else.
  const std::shared_ptr<const config::Library> requested = route;
  const config::Library* settings = requested.get();
  log::info("{}: importing library {}", name_, settings->label());
  auto& metrics = context_.metrics.library(settings->name);
  struct Outcome {
    supervisor::LibraryMetrics& metrics;
    bool ok = false;
    ~Outcome() { supervisor::LibraryMetrics::add(metrics.imports, ok ? supervisor::ImportOutcome::ok : supervisor::ImportOutcome::error); }
  } outcome{metrics};
  std::shared_ptr<supervisor::Lease> lease;
  std::optional<Failure> acquire_failure;
  try {
    // Only an import without arguments may get an instance imported ahead of time (prewarm_import).
    auto acquiring =
        without_arguments(params) ? leases_.acquire_without_arguments(*settings) : leases_.acquire(*settings);
    lease = co_await std::move(acquiring);
  } catch (const supervisor::WorkerError& e) {
    log::warn("{}: import of {} failed: {}", name_, settings->label(), e.what());
    acquire_failure = from(e);
  }
  if (acquire_failure) {
    co_await room_for_answer();
    reply.error(acquire_failure->code, acquire_failure->message, acquire_failure->data_json);
    co_return;
  }

  // The worker's settings govern the import: a reload between the lookup and the grant changed them.
  if (auto granted = lease->settings()) route = std::move(granted);
  const config::Library& library = *route;
  if (library.pickle != settings->pickle) {
    if (auto refused = refuse_argument_pickles(library, {{"args", params.of(params.args)}, {"kw_args", params.of(params.kw_args)}})) {
      log::warn("{}: import of {} refused under the settings a reload gave it: {}", name_, library.name, refused->message);
      co_await room_for_answer();
      reply.error(protocol::kPickleRefused, refused->message, refused->data_json);
      co_await lease->release("its import arguments were refused");
      co_return;
    }
  }

  // A worker that imported the library ahead of time (prewarm_import) answers an import without
  // arguments with that import: the same checks apply to its answer below, and nothing is sent to the
  // worker again. (An import with arguments imports afresh: its lease finalizes that instance first.)
  const bool no_arguments = without_arguments(params);
  std::optional<protocol::Message> answer = no_arguments ? lease->take_preimported() : std::nullopt;
  const bool imported_ahead = answer.has_value();

  // A worker that evaluates argument strings gets them escaped; "auto" asks the worker just leased.
  if (!answer && escapes_arguments(library.arguments, lease->server_name())) {
    std::size_t escaped = 0;
    if (auto refused = escape_arguments(params, library, &escaped)) {
      log::warn("{}: import of {} refused: {}", name_, library.name, refused->log);
      supervisor::LibraryMetrics::add(metrics.pickles_refused, supervisor::Direction::in);
      co_await room_for_answer();
      reply.error(protocol::kPickleRefused, refused->message, refused->data_json);
      co_await lease->release("its import arguments were refused");
      co_return;
    }
    if (escaped)
      log::debug("{}: import of {}: escaped {} argument string(s) for worker {}", name_, library.label(), escaped,
                 lease->where());
  }

  std::optional<Failure> failure;
  // The worker's own command line names its library, so it is asked for its default one: the configured
  // name is the gateway's alias and need not match the worker's. An upstream, or a worker a glob entry
  // serves without naming the library on its command line, is asked for the name. Kept: a re-import after
  // the worker is lost sends the same.
  const std::string worker_params =
      params.with({{params.name_value, json::serialize(json::value(library.import_name()))}});
  if (!answer) {
    try {
      auto relay = std::make_shared<CallRelay>(weak_from_this(), library, name_);
      answer.emplace(co_await lease->import_library(worker_params, relay));
    } catch (const supervisor::WorkerError& e) {
      failure = from(e);
    }
  }
  if (!failure && answer->kind == protocol::Message::Kind::error_response) {
    log::warn("{}: library {} failed to import in worker {}: {}", name_, library.label(), lease->where(),
              answer->error_message());
    failure = Failure{answer->error_code(),
                      fmt::format("Library '{}' failed to import in its worker ({}): {}", library.label(),
                                  lease->where(), answer->error_message()),
                      std::string(answer->error_data_text())};
    // The worker's error data travels to the client: the policy applies to it too.
    if (auto refused = co_await refuse_answer_pickles(library, {"error.data", answer->error_data_text()}))
      failure = Failure{protocol::kPickleRefused, refused->message, refused->data_json};
  }
  std::optional<WorkerToken> worker_token;
  if (!failure && !(worker_token = worker_token_of(*answer))) {
    failure = Failure{protocol::kWorkerFailed,
                      fmt::format("The worker of library '{}' ({}) answered robot/import_library without a token",
                                  library.label(), lease->where()),
                      {}};
  }
  if (!failure) {
    // Every member of the result travels to the client (argument defaults in the definition, and any
    // member a worker adds): the same policy applies to all of it.
    if (auto refused = co_await refuse_answer_pickles(library, {"result", answer->result_text()}))
      failure = Failure{protocol::kPickleRefused, refused->message, refused->data_json};
  }
  if (failure) {
    log::warn("{}: import of {} failed: {}", name_, library.label(), failure->message);
    co_await room_for_answer();
    reply.error(failure->code, failure->message, failure->data_json);
    co_await lease->release("its import failed");
    co_return;
  }

  // Kept for a re-import unless large: every import of a connection would hold its arguments for good.
  auto kept = worker_params.size() <= kMaxKeptImportBytes ? std::make_shared<const std::string>(worker_params) : nullptr;
  Import import{TokenMap::new_token(library.label()), library.label(), worker_token->token, lease, route, &metrics,
                std::move(kept), {}, {}};
  // Before the ending_ check: nothing may suspend between it and adding the import.
  co_await room_for_answer();
  if (ending_) {
    reply.error(protocol::kShuttingDown, "The connection closed during the import.");
    co_await lease->end(finalize_params(import), "its session closed during the import");
    co_return;
  }
  log::info("{}: imported library {} in worker {}{}", name_, library.label(), lease->where(),
            imported_ahead ? " (warm, imported ahead of time)" : lease->prewarmed() ? " (warm)" : "");
  auto answer_text = to_client(*answer, *worker_token, reply.id_text(), import.token);
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
  if (auto refused = refuse_argument_pickles(*import->config, {{"args", params.of(params.args)}, {"kwargs", params.of(params.kwargs)}})) {
    log::warn("{}: keyword '{}' of {} refused: {}", name_, params.name, import->library, refused->message);
    if (import->metrics) supervisor::LibraryMetrics::add(import->metrics->keywords, supervisor::KeywordOutcome::error);
    reply.error(protocol::kPickleRefused, refused->message, refused->data_json);
    return;
  }
  // A worker that evaluates argument strings gets them escaped (after the pickle check, which reads the
  // values as sent).
  if (escapes_arguments(import->config->arguments, import->lease->server_name())) {
    if (auto refused = refuse_evaluated_pickles(params, *import->config, params.name)) {
      log::warn("{}: keyword '{}' of {} refused: {}", name_, params.name, import->library, refused->log);
      if (import->metrics) {
        supervisor::LibraryMetrics::add(import->metrics->keywords, supervisor::KeywordOutcome::error);
        supervisor::LibraryMetrics::add(import->metrics->pickles_refused, supervisor::Direction::in);
      }
      reply.error(protocol::kPickleRefused, refused->message, refused->data_json);
      return;
    }
    if (const auto escaped = escape_arguments(params))
      log::debug("{}: keyword '{}' of {}: escaped {} argument string(s) for worker {}", name_, params.name,
                 import->library, escaped, import->lease->where());
  }
  // An import whose worker was lost (a keyword failed with it, or it died while idle) is imported again
  // first, or the keyword fails, as the library's on_worker_loss says.
  if (worker_lost(*import) || import->reimporting) {
    if (import->config->on_worker_loss == config::WorkerLoss::fail) {
      reply.error(protocol::kWorkerFailed,
                  fmt::format("Cannot run keyword '{}': the instance of library '{}' is gone ({}), and "
                              "on_worker_loss = \"fail\" for this library: import the library again.",
                              params.name, import->library, lost_reason(*import)));
      return;
    }
    if (!import->import_params) {
      reply.error(protocol::kWorkerFailed,
                  fmt::format("Cannot run keyword '{}': the instance of library '{}' is gone ({}), and its import's "
                              "arguments are larger than the {} bytes the gateway keeps to import it again: import "
                              "the library again.",
                              params.name, import->library, lost_reason(*import), kMaxKeptImportBytes));
      return;
    }
    spawn(reimport_then_run(std::move(reply), std::move(params)), "run_keyword");
    return;
  }
  // The import is copied: a finalize that arrives meanwhile queues behind this call on the worker.
  spawn(run_keyword(std::move(reply), to_worker(params, *import), params.name, *import), "run_keyword");
}

std::string ClientSession::import_lost(std::string_view token) const {
  const Import* import = tokens_.find(token);
  if (!import || !worker_lost(*import)) return {};
  return lost_reason(*import);
}

bool ClientSession::worker_lost(const Import& import) { return !import.lost.empty() || import.lease->lost(); }

std::string ClientSession::lost_reason(const Import& import) {
  if (!import.lost.empty()) return import.lost;
  // Lost without a keyword of this session seeing it: the worker died while idle, or another session's
  // keyword overran keyword_timeout on a shared worker. The worker says why.
  if (auto why = import.lease->loss(); !why.empty()) {
    // "The worker of library ..." reads on after "because" as "the worker ...".
    if (why.starts_with("The ")) why[0] = 't';
    return why;
  }
  return fmt::format("its worker ({}) is gone", import.lease->where());
}

asio::awaitable<void> ClientSession::reimport_then_run(Reply reply, protocol::RunKeyword params) {
  const std::string token = params.library_token;
  for (bool reimported = false;;) {
    Import* import = tokens_.find(token);
    if (!import) {
      co_await room_for_answer();
      reply.error(protocol::kUnknownToken,
                  fmt::format("Cannot run keyword '{}': its library was finalized while it was being imported again.",
                              params.name));
      co_return;
    }
    if (import->reimporting) {  // another keyword on this token imports it: this one runs after
      const auto busy = import->reimporting;
      co_await busy->wait();
      continue;  // that one may have failed: then this keyword tries once itself
    }
    // Once: a new worker that is already gone fails this keyword as any lost worker does.
    if (reimported || !worker_lost(*import)) break;

    // This keyword imports the library again. Copies: the entry may move while this waits.
    const auto event = std::make_shared<runtime::AsyncEvent>(background_done_.executor());
    import->reimporting = event;
    // However this ends (an exception included), the keywords waiting for it go on.
    struct Release {
      ClientSession& session;
      const std::string& token;
      std::shared_ptr<runtime::AsyncEvent> event;
      ~Release() {
        if (Import* live = session.tokens_.find(token); live && live->reimporting == event) live->reimporting.reset();
        event->set();
      }
    } release{*this, token, event};
    const auto why = lost_reason(*import);
    const auto library = import->config;
    const auto label = import->library;
    const auto import_params = import->import_params;  // shared, never null here (on_run_keyword checked)
    const bool escaped_before = escapes_arguments(library->arguments, import->lease->server_name());
    log::warn("{}: library {}: {}; importing it again for keyword '{}' (on_worker_loss = \"reimport\")", name_,
              label, why, params.name);
    std::shared_ptr<supervisor::Lease> lease;
    std::shared_ptr<const config::Library> settings = library;
    std::optional<protocol::Message> answer;
    std::optional<Failure> failure;
    try {
      lease = co_await leases_.acquire(*library);
      // A reload since the first import may have changed how the library takes its arguments: the params
      // kept were escaped (or not) for the worker it had then.
      if (auto granted = lease->settings()) settings = std::move(granted);
      if (escapes_arguments(settings->arguments, lease->server_name()) != escaped_before) {
        failure = Failure{protocol::kWorkerFailed,
                          "a reload changed whether its worker gets argument strings escaped (arguments), so the "
                          "arguments of the first import cannot be sent again as they were: import the library again",
                          {}};
      } else {
        auto relay = std::make_shared<CallRelay>(weak_from_this(), *settings, name_);
        answer.emplace(co_await lease->import_library(*import_params, relay));
      }
    } catch (const supervisor::WorkerError& e) {
      failure = from(e);
    }
    std::optional<WorkerToken> worker_token;
    if (!failure && answer->kind == protocol::Message::Kind::error_response)
      failure = Failure{protocol::kWorkerFailed,
                        fmt::format("its worker ({}) refused the import: {}", lease->where(), answer->error_message()),
                        {}};
    else if (!failure && !(worker_token = worker_token_of(*answer)))
      failure = Failure{protocol::kWorkerFailed,
                        fmt::format("its worker ({}) answered robot/import_library without a token", lease->where()),
                        {}};
    if (failure) {
      if (lease) co_await lease->release("its re-import failed");
      log::warn("{}: library {} could not be imported again: {}", name_, label, failure->message);
      co_await room_for_answer();
      reply.error(failure->code,
                  fmt::format("Cannot run keyword '{}': library '{}' lost its worker ({}) and could not be imported "
                              "again ({}). The next keyword tries again.",
                              params.name, label, why, failure->message));
      co_return;
    }
    import = tokens_.find(token);
    if (!import || ending_) {
      co_await lease->end(fmt::format("{{\"token\":{}}}", protocol::quote(worker_token->token)),
                          "its import was finalized, or its session closed, during the re-import");
      co_await room_for_answer();
      reply.error(ending_ ? protocol::kShuttingDown : protocol::kUnknownToken,
                  fmt::format("Cannot run keyword '{}': its library was finalized, or the connection closed, while "
                              "it was being imported again.",
                              params.name));
      co_return;
    }
    auto old = std::exchange(import->lease, lease);
    const auto old_params = finalize_params(*import);
    import->worker_token = worker_token->token;
    import->config = settings;
    import->lost.clear();
    spawn(end_import(std::move(old), old_params, "its worker was lost"), "end lost import of " + label);
    log::info("{}: imported library {} again in worker {}", name_, label, lease->where());
    // In the keyword's log, before its answer: the instance it runs on is not the one the suite had.
    json::object log_params{
        {"message", fmt::format("robot-jsonrpc-gateway: library '{}' was imported again, with the same arguments, "
                                "in a new worker ({}), because {}. Whatever state the library held (connections, "
                                "sessions, variables set by earlier keywords) was lost with it.",
                                label, lease->where(), why)},
        {"level", "WARN"},
        {"html", false},
        {"console", false}};
    co_await room_for_answer();
    send(protocol::make_notification_raw(protocol::kLog, json::serialize(log_params)));
    reimported = true;  // the loop looks the import up again: it may have been finalized meanwhile
  }
  const Import* import = tokens_.find(token);  // found just now, with nothing suspended since
  co_await run_keyword(std::move(reply), to_worker(params, *import), params.name, *import);
}

asio::awaitable<void> ClientSession::run_keyword(Reply reply, std::string worker_params, std::string keyword,
                                                 Import import) {
  const auto began = std::chrono::steady_clock::now();
  const auto running = activity_->keyword_started(import.library, keyword);  // for /status, until answered
  std::optional<protocol::Message> answer;
  std::optional<Failure> failure;
  try {
    auto relay = std::make_shared<CallRelay>(weak_from_this(), *import.config, name_);
    answer.emplace(co_await import.lease->run_keyword(std::move(worker_params), keyword, relay));
  } catch (const supervisor::WorkerError& e) {
    log::warn("{}: keyword '{}' of library {} failed in the gateway: {}", name_, keyword, import.library, e.what());
    failure = from(e);
    // The worker is gone (it died, or keyword_timeout ended it): so is this import's instance. What the
    // next keyword on the token gets is the library's on_worker_loss.
    if (e.code == protocol::kWorkerFailed || e.code == protocol::kWorkerTimeout) {
      if (Import* live = tokens_.find(import.token); live && live->lease == import.lease && live->lost.empty())
        live->lost = e.code == protocol::kWorkerTimeout
                         ? fmt::format("keyword '{}' overran keyword_timeout and its worker was stopped", keyword)
                         : fmt::format("its worker ({}) was lost while running keyword '{}'", import.lease->where(),
                                       keyword);
      const std::string_view next =
          import.config->on_worker_loss == config::WorkerLoss::reimport
              ? " The next keyword of this library imports it again, with the same arguments, in a new worker "
                "(on_worker_loss = \"reimport\"); the state the library held is gone."
              : " Later keywords of this import fail (on_worker_loss = \"fail\"): import the library again.";
      // Before the worker's stderr tail, which ends the message where there is one.
      const auto tail = failure->message.find(" Last lines of its stderr:");
      failure->message.insert(tail == std::string::npos ? failure->message.size() : tail, next);
    }
  }
  std::optional<PickleRefusal> refused;
  if (!failure)
    refused = co_await refuse_answer_pickles(
        *import.config, {"result", answer->kind == protocol::Message::Kind::response ? answer->result_text() : ""},
        {"error.data", answer->error_data_text()});
  if (import.metrics) {
    import.metrics->keyword_seconds.observe(std::chrono::steady_clock::now() - began);
    const auto outcome = failure ? (failure->code == protocol::kWorkerTimeout ? supervisor::KeywordOutcome::timeout
                                                                              : supervisor::KeywordOutcome::error)
                         : refused || answer->kind != protocol::Message::Kind::response ? supervisor::KeywordOutcome::error
                                                                              : keyword_outcome(answer->result_text());
    supervisor::LibraryMetrics::add(import.metrics->keywords, outcome);
  }
  co_await room_for_answer();  // nothing suspends between here and the answer
  if (failure) {
    reply.error(failure->code, failure->message, failure->data_json);
  } else if (refused) {
    log::warn("{}: result of keyword '{}' of {} refused: {}", name_, keyword, import.library, refused->message);
    reply.error(protocol::kPickleRefused, refused->message, refused->data_json);
  } else if (answer->kind != protocol::Message::Kind::response) {
    // A worker that answers a keyword with a JSON-RPC error (a native worker's unknown keyword, say): still
    // the keyword's failure, not the session's.
    reply.error(answer->error_code(),
                fmt::format("Keyword '{}' of library '{}' failed in its worker ({}): {}", keyword, import.library,
                            import.lease->where(), answer->error_message()));
  } else {
    reply.send(answer->with_id(reply.id_text()));
  }
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
  auto relay = std::make_shared<CallRelay>(weak_from_this(), *import.config, name_);
  auto answer = co_await import.lease->finalize_library(finalize_params(import), relay);
  // What the worker answers travels to the client: the pickle policy applies to it as to any answer.
  std::optional<PickleRefusal> refused;
  if (answer)
    refused = co_await refuse_answer_pickles(
        *import.config, {"result", answer->kind == protocol::Message::Kind::response ? answer->result_text() : ""},
        {"error.data", answer->error_data_text()});
  co_await room_for_answer();  // nothing suspends between here and the answer
  if (refused) {
    log::warn("{}: finalize answer of {} refused: {}", name_, import.library, refused->message);
    reply.error(protocol::kPickleRefused, refused->message, refused->data_json);
  } else if (answer) {
    reply.send(answer->with_id(reply.id_text()));
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
