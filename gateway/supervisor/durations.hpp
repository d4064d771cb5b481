// How the supervisor's messages write a duration, for the files of this folder that share a message's
// wording: pool.cpp and pool_upkeep.cpp (duration_text), worker.cpp and worker_end.cpp (seconds_text).
#pragma once

#include "config/config.hpp"

#include <fmt/format.h>

#include <chrono>
#include <string>

namespace rjg::gateway::supervisor {

inline std::string seconds_text(config::Duration d) {
  if (d.count() % 1000 == 0) return fmt::format("{}s", d.count() / 1000);
  return fmt::format("{}ms", d.count());
}

inline std::string duration_text(std::chrono::steady_clock::duration d) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
  if (ms < 1000) return fmt::format("{}ms", ms);
  return fmt::format("{:.1f}s", static_cast<double>(ms) / 1000.0);
}

}  // namespace rjg::gateway::supervisor
