// ClientSession when an import's worker is lost (it crashed, or keyword_timeout ended it): the keyword
// that was running fails as a keyword, and what the next keyword on the token gets is the library's
// on_worker_loss: the library imported again in a new worker (its answer goes to no client, only its
// token is kept), or a failure saying the instance is gone.
#include "gateway/session/client_session.hpp"

#include "common/log.hpp"
#include "common/protocol/json_text.hpp"
#include "common/protocol/protocol.hpp"

#include <fmt/format.h>

namespace rjg::gateway::session {
namespace protocol = rjg::protocol;

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

bool ClientSession::on_lost_worker(Reply& reply, protocol::RunKeyword& params, const Import& import) {
  // An import whose worker was lost (a keyword failed with it, or it died while idle) is imported again
  // first, or the keyword fails, as the library's on_worker_loss says.
  if (!worker_lost(import) && !import.reimporting) return false;
  if (import.config->on_worker_loss == config::WorkerLoss::fail) {
    reply.error(protocol::kWorkerFailed,
                fmt::format("Cannot run keyword '{}': the instance of library '{}' is gone ({}), and "
                            "on_worker_loss = \"fail\" for this library: import the library again.",
                            params.name, import.library, lost_reason(import)));
    return true;
  }
  if (!import.import_params) {
    reply.error(protocol::kWorkerFailed,
                fmt::format("Cannot run keyword '{}': the instance of library '{}' is gone ({}), and its import's "
                            "arguments are larger than the {} bytes the gateway keeps to import it again: import "
                            "the library again.",
                            params.name, import.library, lost_reason(import), kMaxKeptImportBytes));
    return true;
  }
  spawn(reimport_then_run(std::move(reply), std::move(params), import.config), "run_keyword");
  return true;
}

asio::awaitable<void> ClientSession::reimport_then_run(Reply reply, protocol::RunKeyword params,
                                                     std::shared_ptr<const config::Library> checked_under) {
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
    if (reimported || !worker_lost(*import)) {
      if (import->config == checked_under) break;
      // Imported again (by this keyword or the one it waited for) under the settings a reload gave the
      // library since this keyword was checked in: what those refuse must not reach the new worker.
      checked_under = import->config;
      if (auto refused = co_await pipeline_.check_in_again(params, *import)) {
        co_await room_for_answer();
        reply.error(refused->code, refused->message, refused->data_json);
        co_return;
      }
      continue;  // a large keyword was checked off the loop: the import may have changed meanwhile
    }

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
    const auto label = import->library;
    const auto again = RequestPipeline::Reimport::of(*import);  // import_params: never null (on_lost_worker checked)
    log::warn("{}: library {}: {}; importing it again for keyword '{}' (on_worker_loss = \"reimport\")", name_,
              label, why, params.name);
    std::shared_ptr<supervisor::Lease> lease;
    RequestPipeline::ReimportPass pass;
    try {
      lease = co_await leases_.acquire(*again.library);
    } catch (const supervisor::WorkerError& e) {
      pass.failure = Failure::of(e);
    }
    if (lease) pass = co_await pipeline_.reimport(again, *lease);
    if (pass.failure) {
      if (lease) co_await lease->release("its re-import failed");
      log::warn("{}: library {} could not be imported again: {}", name_, label, pass.failure->message);
      co_await room_for_answer();
      reply.error(pass.failure->code,
                  fmt::format("Cannot run keyword '{}': library '{}' lost its worker ({}) and could not be imported "
                              "again ({}). The next keyword tries again.",
                              params.name, label, why, pass.failure->message));
      co_return;
    }
    import = tokens_.find(token);
    if (!import || ending_) {
      co_await lease->end(fmt::format("{{\"token\":{}}}", protocol::quote(pass.worker_token)),
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
    import->worker_token = std::move(pass.worker_token);
    import->config = std::move(pass.settings);
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
  co_await run_keyword(std::move(reply), RequestPipeline::rewrite(params, *import));
}


void ClientSession::worker_lost_in(const RequestPipeline::KeywordCall& call, Failure& failure) {
  const Import& import = call.import;
  if (Import* live = tokens_.find(import.token); live && live->lease == import.lease && live->lost.empty())
    live->lost = failure.code == protocol::kWorkerTimeout
                     ? fmt::format("keyword '{}' overran keyword_timeout and its worker was stopped", call.keyword)
                     : fmt::format("its worker ({}) was lost while running keyword '{}'", import.lease->where(),
                                   call.keyword);
  // What the next keyword on the token gets is the library's on_worker_loss.
  const std::string_view next =
      import.config->on_worker_loss == config::WorkerLoss::reimport
          ? " The next keyword of this library imports it again, with the same arguments, in a new worker "
            "(on_worker_loss = \"reimport\"); the state the library held is gone."
          : " Later keywords of this import fail (on_worker_loss = \"fail\"): import the library again.";
  // Before the worker's stderr tail, which ends the message where there is one.
  const auto tail = failure.message.find(" Last lines of its stderr:");
  failure.message.insert(tail == std::string::npos ? failure.message.size() : tail, next);
}

}  // namespace rjg::gateway::session
