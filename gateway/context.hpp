// What every session shares: configuration, routing, the reaper, and the gateway-wide drain state.
#pragma once

#include "common/runtime/async_event.hpp"
#include "config/config.hpp"
#include "gateway/router.hpp"
#include "workers/supervisor/pool.hpp"
#include "workers/supervisor/reaper.hpp"
#include "workers/supervisor/worker.hpp"

#include <cstdint>

namespace rjg::gateway {

inline constexpr std::string_view kServerName = "robot-jsonrpc-gateway";

struct GatewayContext {
  // offload: a thread pool for work on large frames, off the event loop (none: everything on the loop).
  GatewayContext(asio::any_io_executor executor, const config::Config& config, std::string version,
                 std::optional<asio::any_io_executor> offload = std::nullopt)
      : executor(executor), config(config), offload(offload), router(config), reaper(executor),
        version(std::move(version)), worker_options(make_worker_options(config, this->version, offload)),
        pools(executor, config, reaper, worker_options), idle(executor) {
    idle.set();
  }

  static workers::WorkerOptions make_worker_options(const config::Config& config, const std::string& version,
                                                    std::optional<asio::any_io_executor> offload) {
    workers::WorkerOptions options;
    options.offload = offload;
    options.framing.max_message_bytes = config.gateway.max_message_bytes;
    options.framing.max_header_bytes = config.gateway.max_header_bytes;
    options.gateway_version = version;
    return options;
  }

  asio::any_io_executor executor;
  const config::Config& config;
  std::optional<asio::any_io_executor> offload;
  Router router;
  workers::ChildReaper reaper;
  std::string version;
  workers::WorkerOptions worker_options;
  workers::WorkerPools pools;

  // Requests being answered right now, across all sessions; `idle` is set while there are none.
  std::size_t requests_in_flight = 0;
  AsyncEvent idle;
  bool draining = false;  // SIGTERM received: no new imports or keywords

  void request_started() {
    if (requests_in_flight++ == 0) idle.reset();
  }
  void request_finished() {
    if (--requests_in_flight == 0) idle.set();
  }
};

}  // namespace rjg::gateway
