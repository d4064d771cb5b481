// The admin endpoint's pages: Prometheus metrics, liveness, readiness, a JSON status and the status page
// (its HTML in status_page.cpp). /metrics, /status and the page render from one snapshot, taken at once
// on loop 0 (Server::admin_snapshot); the probes read only what they need, so a probe costs no /proc read.
#pragma once

#include "config/config.hpp"
#include "gateway/ops/heartbeat.hpp"
#include "gateway/fronts/http_server.hpp"
#include "gateway/ops/session_table.hpp"
#include "gateway/supervisor/metrics.hpp"
#include "gateway/supervisor/pool.hpp"

#include <boost/json/object.hpp>

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rjg::gateway::ops {

struct AdminSnapshot {
  std::chrono::steady_clock::time_point now;
  std::shared_ptr<const config::Config> config;
  std::string version;
  std::chrono::system_clock::time_point started_at;
  double uptime_seconds = 0;
  bool serving = false;  // listening and serving (set_ready); /readyz also needs !draining
  bool draining = false;
  std::size_t requests_in_flight = 0;
  std::string status;          // the STATUS= line
  std::string reload_problem;  // the last reload failed: why
  std::vector<SessionTable::Entry> sessions;
  std::vector<supervisor::PoolView> pools;
  std::vector<std::vector<std::uint64_t>> worker_rss;  // per pool, per worker: resident bytes (0: an upstream)
  std::optional<boost::json::object> classic;          // the classic front's, when it runs
  const supervisor::Metrics* metrics = nullptr;            // counters: atomics, read as the page renders
};

// The resident memory of a process, in bytes (/proc/PID/statm: pages); 0 if gone.
std::uint64_t resident_bytes(pid_t pid);

// /metrics in Prometheus' text exposition format, and /status, from the same snapshot.
std::string metrics_text(const AdminSnapshot& snapshot);
boost::json::object status_json(const AdminSnapshot& snapshot);

// What the admin endpoint takes (connections, sizes, timeouts): no client can make a health probe fail.
fronts::HttpLimits admin_limits();

class AdminPages {
 public:
  struct Readiness {
    bool serving = false;
    bool draining = false;
  };
  AdminPages(const LoopHeartbeat& heartbeat, std::function<Readiness()> readiness,
             std::function<AdminSnapshot()> snapshot);
  // /metrics, /livez, /readyz, /status, the status page (/) and its stylesheet and icon; nullopt: 404.
  std::optional<fronts::HttpResponse> page(std::string_view path) const;

 private:
  const LoopHeartbeat& heartbeat_;
  std::function<Readiness()> readiness_;
  std::function<AdminSnapshot()> snapshot_;
};

}  // namespace rjg::gateway::ops
