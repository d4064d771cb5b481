// What every session shares: configuration, routing, the reaper, and the gateway-wide drain state.
// Sessions run on several event loops ([gateway] threads); what they touch here from their own loop is
// read-only (config, router, version, options), thread-safe (reaper, draining, the request count), or
// reached through a hop to the pools' loop (pools: see WorkerPools::acquire).
#pragma once

#include "common/runtime/async_event.hpp"
#include "config/config.hpp"
#include "gateway/router.hpp"
#include "workers/supervisor/pool.hpp"
#include "workers/supervisor/reaper.hpp"
#include "workers/supervisor/worker.hpp"

#include <boost/asio/dispatch.hpp>

#include <atomic>
#include <cstdint>
#include <vector>

namespace rjg::gateway {

inline constexpr std::string_view kServerName = "robot-jsonrpc-gateway";

struct GatewayContext {
  // offload: a thread pool for work on large frames, off the event loop (none: everything on the loop).
  // executor: loop 0, where the pools, the reaper and the drain run; loops: every event loop (none: only
  // loop 0), over which prewarmed dedicated workers are spread.
  GatewayContext(asio::any_io_executor executor, const config::Config& config, std::string version,
                 std::optional<asio::any_io_executor> offload = std::nullopt,
                 std::vector<asio::any_io_executor> loops = {})
      : executor(executor), config(config), offload(offload), router(config), reaper(executor),
        version(std::move(version)), worker_options(make_worker_options(config, this->version, offload)),
        pools(executor, config, reaper, worker_options, std::move(loops)), idle(executor) {
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

  // Requests being answered right now, across all sessions and loops. While draining, `idle` (loop 0's)
  // is set once there are none. Counted without a lock; loop 0 hears of zero only while draining.
  std::atomic<std::size_t> requests_in_flight = 0;
  AsyncEvent idle;
  std::atomic<bool> draining = false;  // SIGTERM received: no new imports or keywords

  void request_started() { ++requests_in_flight; }
  void request_finished() {
    // Both atomics are sequentially consistent: either this sees draining, or begin_drain() sees zero.
    if (--requests_in_flight == 0 && draining)
      asio::dispatch(executor, [this] {
        if (requests_in_flight == 0) idle.set();
      });
  }
  // On loop 0: no new imports or keywords from now on; `idle` is set once none is in flight.
  void begin_drain() {
    idle.reset();
    draining = true;
    if (requests_in_flight == 0) idle.set();
  }
};

}  // namespace rjg::gateway
