// What every session shares: configuration, routing, the reaper, and the gateway-wide drain state.
#pragma once

#include "common/async_event.hpp"
#include "config/config.hpp"
#include "gateway/router.hpp"
#include "workers/supervisor/reaper.hpp"
#include "workers/supervisor/worker.hpp"

#include <cstdint>

namespace rjg::gateway {

inline constexpr std::string_view kServerName = "robot-jsonrpc-gateway";

struct GatewayContext {
  GatewayContext(asio::any_io_executor executor, const config::Config& config, std::string version)
      : executor(executor), config(config), router(config), reaper(executor), version(std::move(version)),
        idle(executor) {
    worker_options.framing.max_message_bytes = config.gateway.max_message_bytes;
    worker_options.gateway_version = this->version;
    idle.set();
  }

  asio::any_io_executor executor;
  const config::Config& config;
  Router router;
  workers::ChildReaper reaper;
  workers::WorkerOptions worker_options;
  std::string version;

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
