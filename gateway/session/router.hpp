// Library name -> configured route: an exact entry of that name, else the first glob entry that matches
// (in file order) when the entry serves the name (config::glob_refusal: a valid library name, nothing of it in
// the entry's deny list, no dotted part unless the entry is `dotted = true`). An empty name means the first
// exact entry (never a glob). JSON-RPC and classic clients alike resolve names here. A reload
// replaces the table while sessions on every loop resolve names: each lookup takes the table under a
// lock and keeps the configuration it came from alive as long as the route is held.
#pragma once

#include "config/config.hpp"

#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace rjg::gateway::session {

class Router {
 public:
  struct Route {
    std::shared_ptr<const config::Library> library;  // none: not served
    bool removed = false;  // not served, but it was before a reload removed it from the configuration
    // Not served: a glob entry matched, but refused the name (why, for the client's error).
    std::string refused;
  };

  explicit Router(std::shared_ptr<const config::Config> config);
  // A reload: the new configuration; a name served before and not now is "removed" from now on.
  void update(std::shared_ptr<const config::Config> config);

  Route resolve(std::string_view name) const;
  // "A, B, Lab*": exact names and globs as written.
  std::string available() const;
  std::vector<std::string> names() const;

 private:
  struct Table {
    std::shared_ptr<const config::Config> config;
    std::set<std::string, std::less<>> removed;
  };
  std::shared_ptr<const Table> table() const;

  mutable std::mutex mutex_;
  std::shared_ptr<const Table> table_;
};

}  // namespace rjg::gateway::session
