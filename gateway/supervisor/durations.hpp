// How the gateway's messages write a duration: a configured one as "90s" or "1500ms" (seconds_text: the
// supervisor, the reaper, the classic front's imports), a measured one as "850ms" or "2.5s" (duration_text).
#pragma once

#include "config/config.hpp"

#include <fmt/format.h>

#include <chrono>
#include <string>

namespace rjg::gateway::supervisor {

// A process that dies after living this long was healthy: a single crash, not a crash loop. A worker's
// death then does not count towards the pool's back-off, a fork server's template's starts its own afresh.
inline constexpr std::chrono::seconds kHealthyUptime{30};

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
