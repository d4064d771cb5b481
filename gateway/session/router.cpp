#include "gateway/session/router.hpp"

#include "common/log.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace rjg::gateway::session {

Router::Router(std::shared_ptr<const config::Config> config)
    : table_(std::make_shared<const Table>(Table{std::move(config), {}})) {}

void Router::update(std::shared_ptr<const config::Config> config) {
  auto before = table();
  Table next{std::move(config), before->removed};
  for (const auto& lib : before->config->libraries) next.removed.insert(lib.name);
  for (const auto& lib : next.config->libraries) next.removed.erase(lib.name);
  auto shared = std::make_shared<const Table>(std::move(next));
  std::lock_guard lock(mutex_);
  table_ = std::move(shared);
}

std::shared_ptr<const Router::Table> Router::table() const {
  std::lock_guard lock(mutex_);
  return table_;
}

Router::Route Router::resolve(std::string_view name) const {
  auto t = table();
  const auto& libraries = t->config->libraries;
  const config::Library* found = nullptr;
  if (name.empty()) {
    auto first = std::find_if(libraries.begin(), libraries.end(), [](const auto& lib) { return !lib.is_glob(); });
    if (first != libraries.end()) found = &*first;
  } else {
    found = t->config->find_library(name);
    if (found && found->is_glob()) found = nullptr;  // a glob's own text is not a name it serves
  }
  // The route shares ownership of the whole configuration it points into.
  if (found) return {std::shared_ptr<const config::Library>(t->config, found), false, {}};
  if (!name.empty()) {
    for (const auto& entry : libraries) {
      if (!entry.is_glob() || !config::glob_match(entry.name, name)) continue;
      // The name is chosen by the client and reaches a command line, an environment or an upstream: only
      // what the entry serves passes (config::glob_refusal is the rule). Client text in a message and a log
      // line: printable, bounded.
      const auto shown = log::printable(name, 100);
      switch (config::glob_refusal(entry, name)) {
        case config::GlobRefusal::none:
          break;
        case config::GlobRefusal::not_a_name:
          return {nullptr, false,
                  fmt::format("'{}' matches the route \"{}\" but is not a library name a route may import (at most "
                              "{} letters, digits, '_' and '.'; each dotted part starts with a letter)",
                              shown, entry.name, config::kMaxImportName)};
        case config::GlobRefusal::denied:
          return {nullptr, false,
                  fmt::format("'{}' matches the route \"{}\" but it, or one of its dotted parts, is in the entry's "
                              "deny list (Robot Framework's standard libraries and Python's standard modules, unless "
                              "the entry's 'deny' says otherwise)",
                              shown, entry.name)};
        case config::GlobRefusal::dotted:
          return {nullptr, false,
                  fmt::format("'{}' matches the route \"{}\" but is a dotted name, and the route serves plain names "
                              "only: a dotted name imports a part of a library (an attribute or a module it "
                              "imports), not a library of its own. Import the library by its plain name; an "
                              "operator who wants dotted names served sets 'dotted = true' on the entry",
                              shown, entry.name)};
        case config::GlobRefusal::chooses_host:
          return {nullptr, false,
                  fmt::format("'{}' matches the route \"{}\", whose upstream host is the imported name, but a "
                              "dotted name would choose the host's domain",
                              shown, entry.name)};
      }
      return {std::make_shared<const config::Library>(config::concrete(entry, name)), false, {}};
    }
  }
  return {nullptr, t->removed.contains(name), {}};
}

std::vector<std::string> Router::names() const {
  auto t = table();
  std::vector<std::string> out;
  for (const auto& lib : t->config->libraries) out.push_back(lib.name);
  return out;
}

std::string Router::available() const {
  std::string out;
  for (const auto& name : names()) out += (out.empty() ? "" : ", ") + name;
  return out;
}

}  // namespace rjg::gateway::session
