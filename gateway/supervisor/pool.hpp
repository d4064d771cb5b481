// Worker pools: which worker serves an import, how many may run, who waits, when workers are
// prewarmed, recycled and backed off. One LibraryPool per configured library; WorkerPools holds them
// and the gateway-wide cap.
#pragma once

#include "common/runtime/async_event.hpp"
#include "config/config.hpp"
#include "gateway/supervisor/fork_server.hpp"
#include "gateway/supervisor/lease.hpp"
#include "gateway/supervisor/metrics.hpp"
#include "gateway/supervisor/reaper.hpp"
#include "gateway/supervisor/worker.hpp"

#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace rjg::gateway::supervisor {

class WorkerPools;
class LibraryPool;

// A worker handed to one import (held by its PoolLease). Returned with LibraryPool::release.
struct Grant {
  std::shared_ptr<Worker> worker;
  LibraryPool* pool = nullptr;
  bool prewarmed = false;  // served by a worker started before the import (a warm start)
  // prewarm_import: the worker's answer to the import without arguments it made ahead of time, which
  // answers this import (handed out only for an import without arguments).
  std::optional<protocol::Message> preimported{};
  // The settings the import is served with: the pool's library, or what a glob entry made of it for the
  // imported name (config::concrete).
  std::shared_ptr<const config::Library> serving{};
};

class LibraryPool {
 public:
  // library: shares ownership of the configuration it is part of (a reload replaces it).
  LibraryPool(WorkerPools& owner, std::shared_ptr<const config::Library> library, std::size_t index);

  // A worker for a new import: a prewarmed one, a shared one with room, or a new one; waits up to
  // queue_timeout for capacity. Throws WorkerError (kAtCapacity, start failures, crash backoff).
  // without_arguments: the import has no arguments, so a prewarmed worker that imported the library
  // ahead of time (prewarm_import) may serve it with that instance; any other import gets the warm
  // worker without the instance (the grant's preimported answer says which instance to finalize).
  // home: the event loop of the importing session, where a dedicated worker started for it lives (a
  // prewarmed one on that loop is preferred); none: the pools' own loop. Shared workers live there.
  // deadline: when the import gives up (default: queue_timeout from now); waited: time spent waiting for
  // capacity is added there (for the metrics). An empty grant: a reload retired this pool meanwhile.
  // serving: a glob entry's settings for the imported name; a worker started for the import runs with them.
  asio::awaitable<Grant> acquire(bool without_arguments = false, std::optional<asio::any_io_executor> home = {},
                                 std::optional<std::chrono::steady_clock::time_point> deadline = {},
                                 std::chrono::steady_clock::duration* waited = nullptr,
                                 std::shared_ptr<const config::Library> serving = nullptr);
  // The import ended (finalized, failed, or its session went away). A dedicated worker is stopped;
  // a shared one stays for the next import unless it is draining.
  asio::awaitable<void> release(Grant& grant, std::string reason);
  // After each keyword on a shared worker: recycle it (drain) once it reached max_keywords, max_age or
  // max_rss; it stops when its last import is released.
  void keyword_done(const std::shared_ptr<Worker>& worker);
  // A worker whose keyword overran keyword_timeout (`reason` says which): it takes no new imports, and it
  // is being stopped (SIGTERM, SIGKILL after shutdown_grace). It is hung, so while it still counts under a
  // cap that an import waits at, it gets SIGKILL at once instead (WorkerPools::hurry_hung).
  void retire(const std::shared_ptr<Worker>& worker, std::string reason);

  const config::Library& library() const { return *library_; }
  // Never replaced: any loop may read it.
  std::shared_ptr<const config::Library> library_ptr() const { return library_; }

  void start_prewarm();
  // Stops prewarming and asks every worker of this library to stop (without waiting).
  void shutdown();
  // A reload changed or removed the library: no new import comes here. Prewarming stops, prewarmed
  // workers nobody took stop now, shared workers drain (each stops after its last import), and a
  // dedicated worker stops when its import ends, as always.
  void retire(std::string reason);

 private:
  friend class WorkerPools;
  struct Slot {
    std::size_t imports = 0;
    std::uint64_t keywords = 0;
    std::chrono::steady_clock::time_point born;
    std::uint64_t max_keywords = 0;  // with jitter
    std::chrono::milliseconds max_age{0};
    std::uint64_t max_rss = 0;
    bool draining = false;
    // prewarm_import: the answer to the import made ahead of time, until an import takes the worker.
    std::optional<protocol::Message> preimported;
    // Its failure was already counted for the crash backoff (a failed import ahead of time): its stop
    // is not a clean end.
    bool failure_counted = false;
    // Retired because its keyword overran keyword_timeout (see retire), and whether it was hurried since.
    bool hung = false;
    bool hurried = false;
  };

  asio::awaitable<std::shared_ptr<Worker>> start_worker(bool for_prewarm, asio::any_io_executor home,
                                                        const config::Library* serving = nullptr);
  asio::awaitable<void> prewarm_loop();
  // prewarm_import: the prewarmed worker imports the library without arguments; false when that failed
  // (the worker is then being stopped, and the failure counts for the crash backoff).
  asio::awaitable<bool> import_ahead(std::shared_ptr<Worker> worker);
  asio::awaitable<void> watch(std::shared_ptr<Worker> worker);
  std::shared_ptr<Worker> pick_shared(bool idle_only);
  std::string backoff_message() const;
  bool in_backoff() const;
  void record_failure(const std::string& what);
  void drain(const std::shared_ptr<Worker>& worker, Slot& slot, std::string reason);

  WorkerPools& owner_;
  std::shared_ptr<const config::Library> library_;
  std::size_t index_;
  LibraryMetrics& metrics_;
  std::map<Worker*, Slot> slots_;                 // every live worker of this library
  std::vector<std::shared_ptr<Worker>> workers_;  // same set, owning
  std::deque<std::shared_ptr<Worker>> ready_;     // session isolation: prewarmed, never used
  std::size_t starting_ = 0;
  // Crash backoff: consecutive failed starts or unexpected deaths.
  std::size_t failures_ = 0;
  std::string last_failure_;
  std::string last_crash_;  // for the status page: see PoolView::last_crash
  std::chrono::steady_clock::time_point last_crash_at_{};
  std::chrono::steady_clock::time_point retry_at_{};
  runtime::AsyncEvent prewarm_wake_;
  bool stopping_ = false;
  bool retired_ = false;  // a reload replaced or removed the library (see retire)
  // fork_server = true: the template its workers are forked from; stopped when the pool is retired or shut
  // down (a new pool of new settings starts its own).
  std::shared_ptr<ForkServer> fork_server_;
  std::size_t waiting_ = 0;  // imports waiting for capacity
};

// One library's pool as /status and /metrics show it (on the pools' loop).
struct PoolView {
  std::string library;
  bool retired = false;  // of settings a reload replaced or removed
  std::size_t waiting = 0;
  std::size_t starting = 0;
  bool backing_off = false;  // starts keep failing: the next waits (crash backoff)
  struct WorkerView {
    pid_t pid = 0;
    const char* state = "idle";  // starting, idle, busy, draining
    double age_seconds = 0;
    std::uint64_t keywords = 0;
    std::size_t imports = 0;
    bool prewarmed_unused = false;
    std::string upstream;  // a connection to an upstream server (pid 0): its address
    std::string serves;    // the library it serves, when a glob entry's ("LabPower" under "Lab*")
  };
  std::vector<WorkerView> workers;
  std::size_t failures = 0;  // failed starts or unexpected deaths in a row (the crash backoff counts them)
  // The last worker that ended by itself (while idle or running a keyword), as its death was told:
  // "worker 123 (...) died with exit status 3"; "": none since start. And how long ago.
  std::string last_crash;
  double last_crash_seconds_ago = 0;
  // fork_server = true: its template's state ("starting", "ready", "down", "stopped"; "": none), pid (0
  // when none runs), why it is down, and how many templates started and workers were forked.
  struct ForkServerView {
    std::string state;
    pid_t pid = 0;
    std::string problem;
    std::uint64_t starts = 0, forks = 0;
  };
  std::optional<ForkServerView> fork_server;
};

class WorkerPools : public LeaseSource {
 public:
  // executor: the loop the pools run on (every pool decision is made there); loops: every event loop
  // of the gateway, over which prewarmed dedicated workers are spread (none: only `executor`).
  WorkerPools(asio::any_io_executor executor, std::shared_ptr<const config::Config> config, ChildReaper& reaper,
              WorkerOptions options, Metrics& metrics, std::vector<asio::any_io_executor> loops = {});

  // The current pool of the library of that name; throws WorkerError when a reload removed it. On the
  // pools' loop only.
  LibraryPool& pool(std::string_view name);

  // A reload (on the pools' loop): libraries added get a pool (and prewarm); a library removed or with
  // other settings keeps its old pool retired (see LibraryPool::retire) and, when changed, gets a new
  // one; an unchanged library keeps its pool and workers. Caps and the orphan policy follow the new
  // configuration.
  struct Changes {
    std::vector<std::string> added, removed, changed;
    std::size_t unchanged = 0;
  };
  Changes reload(std::shared_ptr<const config::Config> config);
  // LeaseSource: a lease on a worker of the library's pool.
  asio::awaitable<std::shared_ptr<Lease>> acquire(const config::Library& library) override;
  // An import without arguments: it may get a worker that imported the library ahead (prewarm_import).
  asio::awaitable<std::shared_ptr<Lease>> acquire_without_arguments(const config::Library& library) override;
  // Begins prewarming, spread out over time so a gateway start does not fork every worker at once.
  void start();
  // Stops every worker (politely) and waits until all are gone.
  asio::awaitable<void> shutdown();
  std::size_t live() const { return live_; }
  // Imports waiting for capacity (a worker cap), all libraries together.
  std::size_t waiting() const { return capacity_waiters_.size(); }
  // Every pool and its workers, retired ones with workers left included. On the pools' loop.
  std::vector<PoolView> view() const;
  // "Lib backs off after 3 failed starts, ..." for the libraries whose workers keep failing to start
  // (a prewarm that keeps failing included); empty when none does.
  std::string backoffs() const;
  // "the fork server of Lib is down (...): plain starts" for each library whose fork server is not ready
  // after it failed (for STATUS=); empty when none.
  std::string fork_servers_down() const;
  Metrics& metrics() { return metrics_; }
  // The pools' own loop: LibraryPool's members are called only there.
  const asio::any_io_executor& executor() const { return executor_; }

 private:
  friend class LibraryPool;
  bool has_capacity(const LibraryPool& pool) const;
  // The caps, each on its own: the library's max_workers (its workers of replaced settings included),
  // and [gateway] max_workers.
  bool library_full(const LibraryPool& pool) const;
  bool gateway_full() const;
  // An import of `waiter`'s library waits at a cap: every hung worker (LibraryPool::retire) that counts
  // under that cap and is still being stopped gets SIGKILL now, instead of holding its place for the rest
  // of its shutdown_grace. It still counts until it is gone (its pool's watch sees it reaped).
  void hurry_hung(const LibraryPool& waiter);
  // The same for every import that waits at a cap now (a worker was just retired as hung).
  void hurry_hung_for_waiters();
  void apply_orphan_policy(const config::Config& config);
  asio::awaitable<Grant> acquire_named(std::shared_ptr<const config::Library> library, bool without_arguments,
                                       asio::any_io_executor home);
  // Waits until capacity may have changed, or the deadline; false at the deadline.
  asio::awaitable<bool> wait_for_capacity(runtime::AsyncEvent::clock::time_point deadline);
  void capacity_changed();
  // Frees capacity for a waiting import by stopping an idle prewarmed worker of another library.
  bool evict_idle_prewarmed(const LibraryPool* except);
  // At most this many workers start at the same time, gateway-wide; an import waiting for a start
  // goes before prewarming, which can wait.
  asio::awaitable<void> begin_start(bool for_import);
  void end_start();

  // The loop for the next prewarmed dedicated worker of a library whose prewarmed workers are `ready`.
  asio::any_io_executor loop_for_prewarm(const std::deque<std::shared_ptr<Worker>>& ready);

  asio::any_io_executor executor_;
  std::shared_ptr<const config::Config> config_;  // the latest; each pool keeps its own library's
  ChildReaper& reaper_;
  WorkerOptions options_;
  Metrics& metrics_;
  std::vector<asio::any_io_executor> loops_;
  std::size_t next_loop_ = 0;
  std::vector<std::unique_ptr<LibraryPool>> pools_;
  // Replaced or removed by a reload; kept (they are small) because grants and waiters refer to them.
  std::vector<std::unique_ptr<LibraryPool>> retired_;
  bool started_ = false;
  std::size_t live_ = 0;
  std::deque<std::shared_ptr<runtime::AsyncEvent>> capacity_waiters_;
  std::size_t starts_in_progress_ = 0;
  std::deque<std::shared_ptr<runtime::AsyncEvent>> import_start_waiters_;
  std::deque<std::shared_ptr<runtime::AsyncEvent>> prewarm_start_waiters_;
};

}  // namespace rjg::gateway::supervisor
