#include "gateway/router.hpp"

namespace rjg::gateway {

const config::Library* Router::resolve(std::string_view name) const {
  if (config_.libraries.empty()) return nullptr;
  if (name.empty()) return &config_.libraries.front();
  return config_.find_library(name);
}

std::vector<std::string> Router::names() const {
  std::vector<std::string> out;
  for (const auto& lib : config_.libraries) out.push_back(lib.name);
  return out;
}

std::string Router::available() const {
  std::string out;
  for (const auto& lib : config_.libraries) {
    if (!out.empty()) out += ", ";
    out += lib.name;
  }
  return out;
}

}  // namespace rjg::gateway
