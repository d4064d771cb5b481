// Library name -> configured route. An empty name means the first configured library.
#pragma once

#include "config/config.hpp"

#include <string>
#include <string_view>
#include <vector>

namespace rjg::gateway {

class Router {
 public:
  explicit Router(const config::Config& config) : config_(config) {}

  // nullptr when the configuration does not serve this library.
  const config::Library* resolve(std::string_view name) const;
  // "A, B, C"
  std::string available() const;
  std::vector<std::string> names() const;

 private:
  const config::Config& config_;
};

}  // namespace rjg::gateway
