// What every session shares: configuration, routing, the reaper, and the gateway-wide drain state.
// Sessions run on several event loops ([gateway] threads); what they touch here from their own loop is
// read-only (config, router, version, options), thread-safe (reaper, draining, the request count), or
// reached through a hop to the pools' loop (pools: see WorkerPools::acquire).
#pragma once

#include "config/config.hpp"
#include "gateway/fronts/client_counts.hpp"
#include "gateway/session/router.hpp"
#include "gateway/supervisor/pool.hpp"
#include "gateway/supervisor/reaper.hpp"
#include "gateway/supervisor/worker.hpp"

#include <atomic>
#include <memory>
#include <mutex>
#include <cstdint>
#include <vector>

namespace rjg::gateway::session {

namespace asio = boost::asio;

inline constexpr std::string_view kServerName = "robot-jsonrpc-gateway";

struct GatewayContext {
  // offload: a thread pool for work on large frames, off the event loop (none: everything on the loop).
  // executor: loop 0, where the pools, the reaper and the drain run; loops: every event loop (none: only
  // loop 0), over which prewarmed dedicated workers are spread.
  GatewayContext(asio::any_io_executor executor, const config::Config& config, std::string version,
                 std::optional<asio::any_io_executor> offload = std::nullopt,
                 std::vector<asio::any_io_executor> loops = {})
      : GatewayContext(executor, std::make_shared<const config::Config>(config), std::move(version), offload,
                       std::move(loops)) {}
  GatewayContext(asio::any_io_executor executor, std::shared_ptr<const config::Config> config, std::string version,
                 std::optional<asio::any_io_executor> offload, std::vector<asio::any_io_executor> loops)
      : executor(executor), offload(offload), router(config), reaper(executor), version(std::move(version)),
        worker_options(make_worker_options(*config, this->version, offload)),
        pools(executor, config, reaper, worker_options, metrics, std::move(loops)), config_(std::move(config)) {}

  // The configuration now: loaded at start, replaced by each successful reload (on loop 0). A session
  // takes it once, when it connects, and keeps it: limits apply to new connections.
  std::shared_ptr<const config::Config> config() const {
    std::lock_guard lock(config_mutex_);
    return config_;
  }
  void set_config(std::shared_ptr<const config::Config> config) {
    std::lock_guard lock(config_mutex_);
    config_ = std::move(config);
  }

  static supervisor::WorkerOptions make_worker_options(const config::Config& config, const std::string& version,
                                                    std::optional<asio::any_io_executor> offload) {
    supervisor::WorkerOptions options;
    options.offload = offload;
    options.framing.max_message_bytes = config.gateway.max_message_bytes;
    options.framing.max_header_bytes = config.gateway.max_header_bytes;
    options.gateway_version = version;
    return options;
  }

  asio::any_io_executor executor;
  std::optional<asio::any_io_executor> offload;
  Router router;
  supervisor::ChildReaper reaper;
  std::string version;
  supervisor::WorkerOptions worker_options;
  supervisor::Metrics metrics;  // for /metrics: sessions, imports, keywords, workers (the pools count theirs)
  supervisor::WorkerPools pools;
  // Sessions and classic imports per client, against max_sessions_per_client. Loop 0 only.
  std::shared_ptr<fronts::ClientCounts> clients = std::make_shared<fronts::ClientCounts>();

  // Requests being answered right now, across all sessions and loops (for STATUS= and the metrics).
  std::atomic<std::size_t> requests_in_flight = 0;
  // SIGTERM received: no new connections, and the gateway is not ready (/readyz). Sessions already
  // open go on working (imports and keywords) until they end or drain_timeout passes.
  std::atomic<bool> draining = false;

  void request_started() { ++requests_in_flight; }
  void request_finished() { --requests_in_flight; }

 private:
  mutable std::mutex config_mutex_;
  std::shared_ptr<const config::Config> config_;
};

}  // namespace rjg::gateway::session
