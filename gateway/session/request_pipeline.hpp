// One request's way between a client and a worker, through the gateway's policies in one order:
//   check in   the library's pickle policy on what the client sent (pickle_guard); a large request's
//              verdict is computed off the event loop before it is handled (precheck);
//   escape     argument strings escaped for a worker that evaluates them (argument_guard);
//   forward    the call through the import's lease, with a relay that puts what the worker sends
//              meanwhile (robot/log) through the pickle policy on its way to the client;
//   check out  the pickle policy on what the worker answers;
//   rewrite    the gateway's library token for the worker's, and back (token_map).
// Imports, keywords, re-imports and finalizes each take the stages that apply to them, here and nowhere
// else. ClientSession keeps the protocol (handshake, dispatch, the import table, leases and their
// lifetimes) and the answers: a pass ends in an answer to send or a failure to answer with.
#pragma once

#include "common/protocol/message.hpp"
#include "common/protocol/params.hpp"
#include "config/config.hpp"
#include "gateway/session/pickle_guard.hpp"
#include "gateway/session/token_map.hpp"
#include "gateway/supervisor/lease.hpp"
#include "gateway/supervisor/metrics.hpp"

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>

#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace rjg::gateway::session {

namespace asio = boost::asio;

class ClientSession;
struct GatewayContext;

// An import without arguments: args absent, null or an empty list, and kw_args absent, null or an empty
// object (white space inside the brackets allowed). Such an import may be answered by an instance the
// worker imported with no arguments ahead of time (prewarm_import): the two are the same import. Other
// members of the params do not make it one with arguments (a choice): the protocol defines no other
// member that shapes the instance, and the SDK ignores them; such members then never reach the worker.
bool without_arguments(const protocol::ImportLibrary& params);

class RequestPipeline {
 public:
  // How a request failed, to answer with: a JSON-RPC error code, its message, its data (a JSON text, ""
  // for none).
  struct Failure {
    int code;
    std::string message;
    std::string data_json;
    static Failure of(const supervisor::WorkerError& e);
  };

  // session: whose requests pass here (what workers send meanwhile goes to it); name: for log lines.
  RequestPipeline(GatewayContext& context, ClientSession& session, std::string name);

  // --- Check in, ahead of time
  // For a large request, before it is handled: binds its params and runs its pickle check on `pool`
  // (off the event loop); the check in while it is handled then uses that verdict instead of checking
  // on the loop. The caller awaits it before handling the message and before reading the next, so
  // order is kept. A keyword is checked under its import's settings, found in `tokens`.
  asio::awaitable<void> precheck(const protocol::Message& message, asio::any_io_executor pool, const TokenMap& tokens);
  // Forgets what precheck() found, when the message will not be handled after all.
  void clear_precheck() { prechecked_.reset(); }
  // While a message is handled: what precheck() found applies to that message only, and only until the
  // scope ends, on every way out (an early refusal included), as its views point into the message.
  class Handling {
   public:
    explicit Handling(RequestPipeline& pipeline) : pipeline_(pipeline) {}
    Handling(const Handling&) = delete;
    Handling& operator=(const Handling&) = delete;
    ~Handling() { pipeline_.prechecked_.reset(); }

   private:
    RequestPipeline& pipeline_;
  };
  [[nodiscard]] Handling handling(const protocol::Message& message);

  // --- Imports
  // Check in: the import's arguments under its route's settings.
  std::optional<Failure> check_in(const config::Library& library, const protocol::ImportLibrary& params);
  struct ImportPass {
    std::optional<Failure> failure;  // answer with it; the lease goes back (release) with release_reason
    std::string release_reason;
    std::shared_ptr<const config::Library> settings;  // what governs the import: the grant's
    std::optional<protocol::Message> answer;                    // the worker's, checked out
    std::optional<WorkerToken> worker_token;
    // What the worker got (imported ahead: what it would have got): a re-import sends it again.
    std::string worker_params;
    bool imported_ahead = false;
  };
  // On the worker leased for the import: check in again when the grant's pickle policy is not the
  // route's, escape, forward (or take the answer of the import made ahead of time), check out, and the
  // worker's token. `metrics`: the counters of the library as the client named it.
  asio::awaitable<ImportPass> import(protocol::ImportLibrary params, std::shared_ptr<const config::Library> route,
                                     supervisor::Lease& lease, supervisor::LibraryMetrics& metrics);
  // Rewrite: the import's answer for the client, with its id and the gateway's token.
  static std::string answer_import(const ImportPass& pass, std::string_view client_id_text,
                                   std::string_view gateway_token);

  // --- Keywords
  // Check in and escape, before the keyword waits for anything: params are escaped in place.
  std::optional<Failure> admit(protocol::RunKeyword& params, const Import& import);
  // An admitted keyword, rewritten for the import's worker as it is now (its token), with a copy of the
  // import: a finalize that arrives meanwhile queues behind the call on the worker.
  struct KeywordCall {
    std::string worker_params;
    std::string keyword;
    Import import;
  };
  // Check in again, under the settings of `import` as it is now: for a keyword admitted under the
  // settings its import had before it was imported again (a reload can change them in between), so that
  // its worker never gets what those settings refuse. A refusal fails it as admit() fails any keyword.
  // Off the loop when the arguments are large; `params` lives in the caller's frame until this returns.
  asio::awaitable<std::optional<Failure>> check_in_again(const protocol::RunKeyword& params, Import import);
  static KeywordCall rewrite(const protocol::RunKeyword& params, const Import& import);
  struct KeywordPass {
    std::optional<Failure> failure;  // none: answer with `answer` (its id made the client's)
    std::optional<protocol::Message> answer;
    // The call failed because the worker is gone (it died, or keyword_timeout ended it): so is the
    // import's instance.
    bool worker_lost = false;
  };
  // Forward and check out; counts the keyword in its library's metrics.
  asio::awaitable<KeywordPass> run(KeywordCall& call);

  // --- Re-imports (a keyword on an import whose worker was lost, on_worker_loss = "reimport")
  // What a re-import needs of the lost import, copied before anything suspends: the entry may move.
  struct Reimport {
    std::shared_ptr<const config::Library> library;
    std::shared_ptr<const std::string> import_params;  // never null: a re-import needs them
    bool escaped;  // whether the first worker got its argument strings escaped
    static Reimport of(const Import& import);
  };
  struct ReimportPass {
    std::optional<Failure> failure;  // the lease goes back; the keyword fails
    std::shared_ptr<const config::Library> settings;
    std::string worker_token;
  };
  // On a new lease: the first import's params forwarded again as they were (so a grant that escapes
  // differently fails), and the worker's token.
  asio::awaitable<ReimportPass> reimport(const Reimport& again, supervisor::Lease& lease);

  // --- Finalizes
  struct FinalizePass {
    std::optional<Failure> failure;
    std::optional<protocol::Message> answer;  // none, and no failure: the worker was already gone
  };
  // Rewrite (the worker's token), forward, check out.
  asio::awaitable<FinalizePass> finalize(const Import& import);

 private:
  // The relay of one call: what the worker sends meanwhile, through the library's pickle policy.
  std::shared_ptr<supervisor::CallObserver> relay(const config::Library& library);
  // session::refuse_pickles for the arguments of the request being handled, except that a verdict
  // precheck() computed off the loop for exactly these values is used as it is.
  std::optional<PickleRefusal> refuse_argument_pickles(
      const config::Library& library, std::initializer_list<std::pair<std::string_view, std::string_view>> values);
  // session::refuse_pickles for the values of a worker's answer (a second one may be empty); off the
  // loop when they are large.
  asio::awaitable<std::optional<PickleRefusal>> refuse_answer_pickles(
      const config::Library& library, std::pair<std::string_view, std::string_view> first,
      std::pair<std::string_view, std::string_view> second = {});
  // session::refuse_pickles for two values (the second may be empty), off the loop when they are large;
  // a refusal counts in `direction`. what: the values, for the log ("an answer").
  asio::awaitable<std::optional<PickleRefusal>> refuse_pickles_of(const config::Library& library,
                                                                  supervisor::Direction direction,
                                                                  std::string_view what,
                                                                  std::pair<std::string_view, std::string_view> first,
                                                                  std::pair<std::string_view, std::string_view> second);

  GatewayContext& context_;
  ClientSession& session_;
  std::string name_;
  struct Prechecked {
    const protocol::Message* message;  // the message it was computed for: it applies to that one only
    std::shared_ptr<const config::Library> library;
    std::vector<std::pair<std::string, std::string_view>> values;  // views into the message being handled
    std::optional<PickleRefusal> verdict;
  };
  std::optional<Prechecked> prechecked_;  // set by precheck() for the message handle() is about to see
};

}  // namespace rjg::gateway::session
