#include "gateway/session/request_pipeline.hpp"

#include "common/log.hpp"
#include "common/protocol/json_text.hpp"
#include "common/protocol/protocol.hpp"
#include "common/runtime/message_stream.hpp"
#include "gateway/session/argument_guard.hpp"
#include "gateway/session/client_session.hpp"
#include "gateway/session/context.hpp"

#include <boost/asio/co_spawn.hpp>

#include <fmt/format.h>

#include <chrono>

namespace rjg::gateway::session {
namespace json = boost::json;
namespace protocol = rjg::protocol;

namespace {

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

RequestPipeline::Failure refusal(PickleRefusal refused) {
  return RequestPipeline::Failure{protocol::kPickleRefused, std::move(refused.message), std::move(refused.data_json)};
}

}  // namespace

RequestPipeline::Failure RequestPipeline::Failure::of(const supervisor::WorkerError& e) {
  return {e.code, e.what(), e.data.empty() ? std::string() : json::serialize(e.data)};
}

bool without_arguments(const protocol::ImportLibrary& p) {
  auto empty = [&](const std::optional<protocol::Slice>& value) {
    if (!value) return true;
    const std::string_view text = value->of(p.text);  // "[...]" or "{...}", valid JSON
    return text.size() >= 2 && text.find_first_not_of(" \t\r\n", 1) == text.size() - 1;
  };
  return empty(p.args) && empty(p.kw_args);
}

RequestPipeline::RequestPipeline(GatewayContext& context, ClientSession& session, std::string name)
    : context_(context), session_(session), name_(std::move(name)) {}

std::shared_ptr<supervisor::CallObserver> RequestPipeline::relay(const config::Library& library) {
  return std::make_shared<CallRelay>(session_.weak_from_this(), library, name_);
}

// --- Check in

asio::awaitable<void> RequestPipeline::precheck(const protocol::Message& message, asio::any_io_executor pool,
                                                const TokenMap& tokens) {
  prechecked_.reset();
  const bool run = message.method() == protocol::kRunKeyword;
  if (message.kind != protocol::Message::Kind::request || (!run && message.method() != protocol::kImportLibrary)) co_return;
  // Binding scans the params: off the loop. The message outlives handle(), so views into it stay valid.
  std::optional<PrecheckValues> found =
      co_await asio::co_spawn(pool, bind_for_precheck(&message, run), asio::use_awaitable);
  if (!found) co_return;
  std::shared_ptr<const config::Library> library;
  if (run) {
    if (const Import* import = tokens.find(found->key)) library = import->config;
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

RequestPipeline::Handling RequestPipeline::handling(const protocol::Message& message) {
  if (prechecked_ && prechecked_->message != &message) prechecked_.reset();
  return Handling(*this);
}

std::optional<PickleRefusal> RequestPipeline::refuse_argument_pickles(
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

// --- Check out

asio::awaitable<std::optional<PickleRefusal>> RequestPipeline::refuse_answer_pickles(
    const config::Library& library, std::pair<std::string_view, std::string_view> first,
    std::pair<std::string_view, std::string_view> second) {
  return refuse_pickles_of(library, supervisor::Direction::out, "an answer", first, second);
}

asio::awaitable<std::optional<PickleRefusal>> RequestPipeline::refuse_pickles_of(
    const config::Library& library, supervisor::Direction direction, std::string_view what,
    std::pair<std::string_view, std::string_view> first, std::pair<std::string_view, std::string_view> second) {
  // Large values are checked off the loop, like a client's large request in precheck(); the values (and
  // so the views) live in the caller's frame until this returns.
  if (context_.offload && library.pickle != config::PicklePolicy::allow &&
      first.second.size() + second.second.size() >= runtime::kOffloadFrameBytes) {
    PrecheckValues values{{}, {{std::string(first.first), first.second}, {std::string(second.first), second.second}}};
    auto check = refuse_pickles_on_pool(&library, &values);
    std::optional<PickleRefusal> verdict =
        co_await asio::co_spawn(*context_.offload, std::move(check), asio::use_awaitable);
    log::debug("{}: {} of library {} with {} bytes of values: pickles checked off the event loop", name_, what,
               library.name, first.second.size() + second.second.size());
    if (verdict) supervisor::LibraryMetrics::add(context_.metrics.library(library.name).pickles_refused, direction);
    co_return verdict;
  }
  auto verdict = session::refuse_pickles(library, {{first.first, first.second}, {second.first, second.second}});
  if (verdict) supervisor::LibraryMetrics::add(context_.metrics.library(library.name).pickles_refused, direction);
  co_return verdict;
}

// --- Imports

std::optional<RequestPipeline::Failure> RequestPipeline::check_in(const config::Library& library, const protocol::ImportLibrary& params) {
  auto refused = refuse_argument_pickles(library, {{"args", params.of(params.args)}, {"kw_args", params.of(params.kw_args)}});
  if (!refused) return std::nullopt;
  log::warn("{}: import of {} refused: {}", name_, library.label(), refused->message);
  supervisor::LibraryMetrics::add(context_.metrics.library(library.name).imports, supervisor::ImportOutcome::error);
  return refusal(std::move(*refused));
}

asio::awaitable<RequestPipeline::ImportPass> RequestPipeline::import(protocol::ImportLibrary params,
                                                                     std::shared_ptr<const config::Library> route,
                                                                     supervisor::Lease& lease,
                                                                     supervisor::LibraryMetrics& metrics) {
  ImportPass pass;
  // The worker's settings govern the import: a reload between the lookup and the grant changed them.
  pass.settings = route;
  if (auto granted = lease.settings()) pass.settings = std::move(granted);
  const config::Library& library = *pass.settings;
  if (library.pickle != route->pickle) {
    if (auto refused = refuse_argument_pickles(library, {{"args", params.of(params.args)}, {"kw_args", params.of(params.kw_args)}})) {
      log::warn("{}: import of {} refused under the settings a reload gave it: {}", name_, library.name, refused->message);
      pass.failure = refusal(std::move(*refused));
      pass.release_reason = "its import arguments were refused";
      co_return pass;
    }
  }

  // A worker that imported the library ahead of time (prewarm_import) answers an import without
  // arguments with that import: the same checks apply to its answer below, and nothing is sent to the
  // worker again. (An import with arguments imports afresh: its lease finalizes that instance first.)
  std::optional<protocol::Message>& answer = pass.answer;
  if (without_arguments(params)) answer = lease.take_preimported();
  pass.imported_ahead = answer.has_value();

  // A worker that evaluates argument strings gets them escaped; "auto" asks the worker just leased.
  if (!answer && escapes_arguments(library.arguments, lease.server_name())) {
    std::size_t escaped = 0;
    if (auto refused = escape_arguments(params, library, &escaped)) {
      log::warn("{}: import of {} refused: {}", name_, library.name, refused->log);
      supervisor::LibraryMetrics::add(metrics.pickles_refused, supervisor::Direction::in);
      pass.failure = Failure{protocol::kPickleRefused, std::move(refused->message), std::move(refused->data_json)};
      pass.release_reason = "its import arguments were refused";
      co_return pass;
    }
    if (escaped)
      log::debug("{}: import of {}: escaped {} argument string(s) for worker {}", name_, library.label(), escaped,
                 lease.where());
  }

  // The worker's own command line names its library, so it is asked for its default one: the configured
  // name is the gateway's alias and need not match the worker's. An upstream, or a worker a glob entry
  // serves without naming the library on its command line, is asked for the name. Kept: a re-import after
  // the worker is lost sends the same.
  pass.worker_params = params.with({{params.name_value, json::serialize(json::value(library.import_name()))}});
  if (!answer) {
    try {
      auto observer = relay(library);
      answer.emplace(co_await lease.import_library(pass.worker_params, observer));
    } catch (const supervisor::WorkerError& e) {
      pass.failure = Failure::of(e);
    }
  }
  if (!pass.failure && answer->kind == protocol::Message::Kind::error_response) {
    log::warn("{}: library {} failed to import in worker {}: {}", name_, library.label(), lease.where(),
              answer->error_message());
    pass.failure = Failure{answer->error_code(),
                           fmt::format("Library '{}' failed to import in its worker ({}): {}", library.label(),
                                       lease.where(), answer->error_message()),
                           std::string(answer->error_data_text())};
    // The worker's error data travels to the client: the policy applies to it too.
    if (auto refused = co_await refuse_answer_pickles(library, {"error.data", answer->error_data_text()}))
      pass.failure = refusal(std::move(*refused));
  }
  // An answer without a token fails as such; its result then goes to no client and is not checked.
  if (!pass.failure && !(pass.worker_token = worker_token_of(*answer))) {
    pass.failure = Failure{protocol::kWorkerFailed,
                           fmt::format("The worker of library '{}' ({}) answered robot/import_library without a token",
                                       library.label(), lease.where()),
                           {}};
  }
  if (!pass.failure) {
    // Every member of the result travels to the client (argument defaults in the definition, and any
    // member a worker adds): the same policy applies to all of it.
    if (auto refused = co_await refuse_answer_pickles(library, {"result", answer->result_text()}))
      pass.failure = refusal(std::move(*refused));
  }
  if (pass.failure) {
    log::warn("{}: import of {} failed: {}", name_, library.label(), pass.failure->message);
    pass.release_reason = "its import failed";
  }
  co_return pass;
}

std::string RequestPipeline::answer_import(const ImportPass& pass, std::string_view client_id_text,
                                           std::string_view gateway_token) {
  return to_client(*pass.answer, *pass.worker_token, client_id_text, gateway_token);
}

// --- Keywords

std::optional<RequestPipeline::Failure> RequestPipeline::admit(protocol::RunKeyword& params, const Import& import) {
  if (auto refused = refuse_argument_pickles(*import.config, {{"args", params.of(params.args)}, {"kwargs", params.of(params.kwargs)}})) {
    log::warn("{}: keyword '{}' of {} refused: {}", name_, params.name, import.library, refused->message);
    if (import.metrics) supervisor::LibraryMetrics::add(import.metrics->keywords, supervisor::KeywordOutcome::error);
    return refusal(std::move(*refused));
  }
  // A worker that evaluates argument strings gets them escaped (after the pickle check, which reads the
  // values as sent).
  if (escapes_arguments(import.config->arguments, import.lease->server_name())) {
    if (auto refused = refuse_evaluated_pickles(params, *import.config, params.name)) {
      log::warn("{}: keyword '{}' of {} refused: {}", name_, params.name, import.library, refused->log);
      if (import.metrics) {
        supervisor::LibraryMetrics::add(import.metrics->keywords, supervisor::KeywordOutcome::error);
        supervisor::LibraryMetrics::add(import.metrics->pickles_refused, supervisor::Direction::in);
      }
      return Failure{protocol::kPickleRefused, std::move(refused->message), std::move(refused->data_json)};
    }
    if (const auto escaped = escape_arguments(params))
      log::debug("{}: keyword '{}' of {}: escaped {} argument string(s) for worker {}", name_, params.name,
                 import.library, escaped, import.lease->where());
  }
  return std::nullopt;
}

asio::awaitable<std::optional<RequestPipeline::Failure>> RequestPipeline::check_in_again(
    const protocol::RunKeyword& params, Import import) {
  // Escaping needs no second pass: a re-import under settings that escape differently fails.
  const config::Library& library = *import.config;
  auto refused = co_await refuse_pickles_of(library, supervisor::Direction::in, "a keyword's arguments",
                                            {"args", params.of(params.args)}, {"kwargs", params.of(params.kwargs)});
  if (!refused) co_return std::nullopt;
  log::warn("{}: keyword '{}' of {} refused under the settings its import was granted again: {}", name_, params.name,
            import.library, refused->message);
  if (import.metrics) supervisor::LibraryMetrics::add(import.metrics->keywords, supervisor::KeywordOutcome::error);
  co_return refusal(std::move(*refused));
}

RequestPipeline::KeywordCall RequestPipeline::rewrite(const protocol::RunKeyword& params, const Import& import) {
  return KeywordCall{to_worker(params, import), params.name, import};
}

asio::awaitable<RequestPipeline::KeywordPass> RequestPipeline::run(KeywordCall& call) {
  const auto began = std::chrono::steady_clock::now();
  const Import& import = call.import;
  KeywordPass pass;
  try {
    auto observer = relay(*import.config);
    pass.answer.emplace(co_await import.lease->run_keyword(std::move(call.worker_params), call.keyword, observer));
  } catch (const supervisor::WorkerError& e) {
    log::warn("{}: keyword '{}' of library {} failed in the gateway: {}", name_, call.keyword, import.library, e.what());
    pass.failure = Failure::of(e);
    pass.worker_lost = e.code == protocol::kWorkerFailed || e.code == protocol::kWorkerTimeout;
  }
  std::optional<PickleRefusal> refused;
  if (!pass.failure)
    refused = co_await refuse_answer_pickles(
        *import.config, {"result", pass.answer->kind == protocol::Message::Kind::response ? pass.answer->result_text() : ""},
        {"error.data", pass.answer->error_data_text()});
  if (import.metrics) {
    import.metrics->keyword_seconds.observe(std::chrono::steady_clock::now() - began);
    const auto outcome =
        pass.failure ? (pass.failure->code == protocol::kWorkerTimeout ? supervisor::KeywordOutcome::timeout
                                                                       : supervisor::KeywordOutcome::error)
        : refused || pass.answer->kind != protocol::Message::Kind::response ? supervisor::KeywordOutcome::error
                                                                  : keyword_outcome(pass.answer->result_text());
    supervisor::LibraryMetrics::add(import.metrics->keywords, outcome);
  }
  if (refused) {
    log::warn("{}: result of keyword '{}' of {} refused: {}", name_, call.keyword, import.library, refused->message);
    pass.failure = refusal(std::move(*refused));
  } else if (!pass.failure && pass.answer->kind != protocol::Message::Kind::response) {
    // A worker that answers a keyword with a JSON-RPC error (a native worker's unknown keyword, say): still
    // the keyword's failure, not the session's.
    pass.failure = Failure{pass.answer->error_code(),
                           fmt::format("Keyword '{}' of library '{}' failed in its worker ({}): {}", call.keyword,
                                       import.library, import.lease->where(), pass.answer->error_message()),
                           {}};
  }
  co_return pass;
}

// --- Re-imports

RequestPipeline::Reimport RequestPipeline::Reimport::of(const Import& import) {
  return Reimport{import.config, import.import_params,
                  escapes_arguments(import.config->arguments, import.lease->server_name())};
}

asio::awaitable<RequestPipeline::ReimportPass> RequestPipeline::reimport(const Reimport& again, supervisor::Lease& lease) {
  ReimportPass pass{{}, again.library, {}};
  // A reload since the first import may have changed how the library takes its arguments: the params kept
  // were escaped (or not) for the worker it had then.
  if (auto granted = lease.settings()) pass.settings = std::move(granted);
  if (escapes_arguments(pass.settings->arguments, lease.server_name()) != again.escaped) {
    pass.failure = Failure{protocol::kWorkerFailed,
                           "a reload changed whether its worker gets argument strings escaped (arguments), so the "
                           "arguments of the first import cannot be sent again as they were: import the library again",
                           {}};
    co_return pass;
  }
  std::optional<protocol::Message> answer;
  try {
    auto observer = relay(*pass.settings);
    answer.emplace(co_await lease.import_library(*again.import_params, observer));
  } catch (const supervisor::WorkerError& e) {
    pass.failure = Failure::of(e);
    co_return pass;
  }
  // The answer goes to no client: only its token is kept, so the pickle policy has nothing to check.
  std::optional<WorkerToken> worker_token;
  if (answer->kind == protocol::Message::Kind::error_response)
    pass.failure = Failure{protocol::kWorkerFailed,
                           fmt::format("its worker ({}) refused the import: {}", lease.where(), answer->error_message()),
                           {}};
  else if (!(worker_token = worker_token_of(*answer)))
    pass.failure = Failure{protocol::kWorkerFailed,
                           fmt::format("its worker ({}) answered robot/import_library without a token", lease.where()),
                           {}};
  else
    pass.worker_token = std::move(worker_token->token);
  co_return pass;
}

// --- Finalizes

asio::awaitable<RequestPipeline::FinalizePass> RequestPipeline::finalize(const Import& import) {
  FinalizePass pass;
  auto observer = relay(*import.config);
  pass.answer = co_await import.lease->finalize_library(finalize_params(import), observer);
  // What the worker answers travels to the client: the pickle policy applies to it as to any answer.
  if (pass.answer) {
    if (auto refused = co_await refuse_answer_pickles(
            *import.config, {"result", pass.answer->kind == protocol::Message::Kind::response ? pass.answer->result_text() : ""},
            {"error.data", pass.answer->error_data_text()})) {
      log::warn("{}: finalize answer of {} refused: {}", name_, import.library, refused->message);
      pass.failure = refusal(std::move(*refused));
    }
  }
  co_return pass;
}

}  // namespace rjg::gateway::session
