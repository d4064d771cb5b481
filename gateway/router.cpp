#include "gateway/router.hpp"

namespace rjg::gateway {

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
  if (!libraries.empty()) found = name.empty() ? &libraries.front() : t->config->find_library(name);
  // The route shares ownership of the whole configuration it points into.
  if (found) return {std::shared_ptr<const config::Library>(t->config, found), false};
  return {nullptr, t->removed.contains(name)};
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

}  // namespace rjg::gateway
