// One import's hold on a worker. A session reaches its worker only through its lease; the lifecycle
// rules live behind it, in the pool: which worker serves the import, keyword accounting for
// recycling, ending a worker whose keyword overran keyword_timeout, finalizing in a shared worker,
// stopping a dedicated one.
#pragma once

#include "common/protocol/message.hpp"
#include "config/config.hpp"
#include "gateway/supervisor/worker.hpp"

#include <boost/asio/awaitable.hpp>

#include <memory>
#include <optional>
#include <string>

namespace rjg::gateway::supervisor {

namespace asio = boost::asio;

class Lease {
 public:
  virtual ~Lease() = default;

  virtual pid_t pid() const = 0;
  // "pid 1234", or "upstream tcp://bench-7:8270": the worker as messages name it.
  virtual std::string where() const { return "pid " + std::to_string(pid()); }
  // Served by a worker started before the import (a warm start).
  virtual bool prewarmed() const = 0;
  // Why the worker behind it is gone ("The worker of library 'X' (pid 7) was stopped (keyword 'K' exceeded
  // keyword_timeout 1000ms) and ended with signal 15"), or "" while it serves: no call through a lost lease
  // can succeed, and the import it held is lost. Read from any loop.
  virtual std::string loss() const { return {}; }
  bool lost() const { return !loss().empty(); }
  // server_info.name from the worker's robot/initialize answer ("" when unknown): whether the worker
  // evaluates argument strings as Robot data follows from it (gateway/session/argument_guard.hpp).
  virtual std::string server_name() const { return {}; }
  // The settings the worker was started with (a reload may have changed the library since the session
  // resolved it); none: the session's own are right (fakes in tests).
  virtual std::shared_ptr<const config::Library> settings() const { return nullptr; }
  // prewarm_import: the worker's answer to the import without arguments it made ahead of time, given
  // once. The session answers its import with it and sends no import of its own. Nothing otherwise.
  virtual std::optional<protocol::Message> take_preimported() { return std::nullopt; }

  // robot/import_library with these params (a JSON text, passed on unchanged). Throws WorkerError.
  virtual asio::awaitable<protocol::Message> import_library(std::string params, std::weak_ptr<CallObserver> observer) = 0;
  // robot/run_keyword. A keyword that overruns the library's keyword_timeout ends its worker (and with
  // it every import it holds) and throws WorkerError(kWorkerTimeout) naming the keyword and setting.
  virtual asio::awaitable<protocol::Message> run_keyword(std::string params, std::string keyword,
                                               std::weak_ptr<CallObserver> observer) = 0;
  // robot/finalize_library, then the import ends (release). The worker's answer, or nothing when the
  // worker is already gone (there is nothing left to finalize).
  virtual asio::awaitable<std::optional<protocol::Message>> finalize_library(std::string params,
                                                                   std::weak_ptr<CallObserver> observer) = 0;
  // The import ends without the client asking (its session closed): a shared worker finalizes the
  // instance (params: the finalize params for the worker); a dedicated worker is stopped.
  virtual asio::awaitable<void> end(std::string finalize_params, std::string reason) = 0;
  // The import failed or ends: the worker goes back to its pool (a dedicated one is stopped).
  virtual asio::awaitable<void> release(std::string reason) = 0;
};

// Where sessions get leases: the worker pools, or a fake in tests.
class LeaseSource {
 public:
  virtual ~LeaseSource() = default;
  // A worker for a new import of `library`; waits for capacity up to queue_timeout. Throws
  // WorkerError (kAtCapacity, start failures, crash backoff, shutting down).
  virtual asio::awaitable<std::shared_ptr<Lease>> acquire(const config::Library& library) = 0;
  // The same for an import whose params carry no arguments: its lease may hold a worker that imported the
  // library without arguments ahead of time (Lease::take_preimported). acquire() never hands out one.
  virtual asio::awaitable<std::shared_ptr<Lease>> acquire_without_arguments(const config::Library& library) {
    return acquire(library);
  }
};

}  // namespace rjg::gateway::supervisor
