// Library tokens are the gateway's: unguessable, issued per import, valid only on the connection that
// imported the library, and mapped here to the worker and the worker's own token.
#pragma once

#include "workers/supervisor/pool.hpp"

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace rjg::gateway {

struct Import {
  std::string token;         // what the client holds
  std::string library;       // configured library name
  std::string worker_token;  // what the worker issued
  std::shared_ptr<workers::Worker> worker;
  workers::Lease lease;      // how the worker was obtained; returned to its pool when the import ends
  const config::Library* config = nullptr;
};

class TokenMap {
 public:
  // "<library>-<32 hex digits from the kernel's CSPRNG>": readable in logs, impossible to guess.
  static std::string new_token(std::string_view library);

  void add(Import import);
  const Import* find(std::string_view token) const;
  std::optional<Import> remove(std::string_view token);
  std::vector<Import> take_all();
  std::size_t size() const { return imports_.size(); }

 private:
  std::unordered_map<std::string, Import> imports_;
};

}  // namespace rjg::gateway
