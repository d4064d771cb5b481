// Library tokens are the gateway's: unguessable, issued per import, valid only on the connection that
// imported the library, and mapped here to the worker's own token. Translation both ways happens
// here and nowhere else.
#pragma once

#include "common/protocol/message.hpp"
#include "common/protocol/params.hpp"
#include "common/runtime/async_event.hpp"
#include "config/config.hpp"
#include "gateway/supervisor/metrics.hpp"
#include "gateway/supervisor/lease.hpp"

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace rjg::gateway::session {

// The largest import params kept for a re-import: a connection's imports hold them for as long as they
// live, beyond max_pending_bytes.
inline constexpr std::size_t kMaxKeptImportBytes = 1024 * 1024;

struct Import {
  std::string token;         // what the client holds
  std::string library;       // configured library name
  std::string worker_token;  // what the worker issued
  std::shared_ptr<supervisor::Lease> lease;  // the only way to the worker; ended when the import ends
  std::shared_ptr<const config::Library> config;  // its settings (the configuration at its import)
  supervisor::LibraryMetrics* metrics = nullptr;     // its library's counters (none in unit tests' fakes)
  // The robot/import_library params the worker got (escaped as sent): what a re-import sends again when the
  // worker is lost (on_worker_loss = "reimport"). Shared: every keyword's copy of the import holds the same.
  // None when larger than kMaxKeptImportBytes (such an import is not imported again).
  std::shared_ptr<const std::string> import_params;
  // Why its worker was lost, once a keyword failed with it; "" while it serves.
  std::string lost;
  // Set while a keyword imports the library again: later keywords on the token wait for it.
  std::shared_ptr<runtime::AsyncEvent> reimporting;
};

class TokenMap {
 public:
  // "<library>-<32 hex digits from the kernel's CSPRNG>": readable in logs, impossible to guess.
  static std::string new_token(std::string_view library);

  void add(Import import);
  const Import* find(std::string_view token) const;
  Import* find(std::string_view token);
  std::optional<Import> remove(std::string_view token);
  std::vector<Import> take_all();
  std::size_t size() const { return imports_.size(); }

 private:
  std::unordered_map<std::string, Import> imports_;
};

// Client -> worker: run_keyword params with the worker's token in place of the gateway's; every
// other byte as the client sent it.
std::string to_worker(const protocol::RunKeyword& params, const Import& import);
// Client -> worker: the finalize params the worker expects for this import.
std::string finalize_params(const Import& import);

// The worker's token in its robot/import_library answer, and where it is in the answer's text;
// nullopt when the answer has none.
struct WorkerToken {
  std::string token;
  protocol::Slice where;
};
std::optional<WorkerToken> worker_token_of(const protocol::Message& import_answer);
// Worker -> client: the import answer with the client's id and the gateway's token; every other byte
// (the definition, unknown fields) as the worker sent it.
std::string to_client(const protocol::Message& import_answer, const WorkerToken& worker_token, std::string_view client_id_text,
                      std::string_view gateway_token);

}  // namespace rjg::gateway::session
