// LibraryPool, one library's pool: which worker serves an import (a prewarmed one, a shared one with
// room, or a new one within the caps, else a wait in the queue), how a worker is started and counted,
// what its end means for the crash backoff, and what happens when an import lets go of it or a reload
// retires the pool. Prewarming, recycling and the backoff's arithmetic: pool_upkeep.cpp; the registry of
// pools and the gateway-wide caps: worker_pools.cpp.
#include "gateway/supervisor/pool.hpp"

#include "common/log.hpp"
#include "common/protocol/protocol.hpp"
#include "common/runtime/loops.hpp"
#include "gateway/supervisor/durations.hpp"

#include <boost/asio/co_spawn.hpp>

#include <fmt/format.h>

#include <signal.h>

#include <algorithm>
#include <random>

namespace rjg::gateway::supervisor {
using namespace std::chrono_literals;
using clock = std::chrono::steady_clock;

namespace {

// Recycling limits get up to 10% jitter downwards, so workers started together do not restart together.
template <typename T>
T jittered(T limit) {
  if (limit <= T{}) return limit;
  static std::mt19937_64 rng{std::random_device{}()};
  std::uniform_real_distribution<double> factor(0.9, 1.0);
  if constexpr (std::is_integral_v<T>) return std::max<T>(1, static_cast<T>(static_cast<double>(limit) * factor(rng)));
  else return T(std::max<typename T::rep>(1, static_cast<typename T::rep>(static_cast<double>(limit.count()) * factor(rng))));
}

// How a worker ended, read on the worker's own loop once its death is established (a stop() that
// reaches the worker later changes nothing here).
struct Ending {
  bool on_purpose = false;
  bool died_busy = false;
  std::string death;
  ExitReason reason = ExitReason::normal;  // for the metrics
};

asio::awaitable<Ending> ending_of(std::shared_ptr<Worker> worker) {
  co_await worker->wait_gone();
  Ending ending{worker->stopped_on_purpose(), worker->died_busy(), worker->death()};
  const auto& why = worker->stop_reason();
  const auto status = worker->exit_status();
  // SIGKILL or SIGTERM from elsewhere (the OOM killer, an operator): killed. Any other end of its own
  // (an exit, SIGSEGV, SIGABRT, a protocol break the gateway killed it for): a crash.
  if (worker->broke_protocol() || !worker->stopped_before_exit())
    ending.reason = !worker->broke_protocol() && status && status->signaled &&
                            (status->signal == SIGKILL || status->signal == SIGTERM)
                        ? ExitReason::killed
                        : ExitReason::crash;
  else if (why.starts_with("recycled")) ending.reason = ExitReason::recycled;
  else if (why.find("keyword_timeout") != std::string::npos) ending.reason = ExitReason::timeout;
  co_return ending;
}
}  // namespace

// --- LibraryPool -----------------------------------------------------------------------------

LibraryPool::LibraryPool(WorkerPools& owner, std::shared_ptr<const config::Library> library, std::size_t index)
    : owner_(owner), library_(std::move(library)), index_(index), metrics_(owner.metrics_.library(library_->name)),
      prewarm_wake_(owner.executor_) {
  if (library_->fork_server && !library_->is_upstream())
    fork_server_ = std::make_shared<ForkServer>(owner.executor_, library_, owner.reaper_, metrics_);
}

std::shared_ptr<Worker> LibraryPool::pick_shared(bool idle_only) {
  std::shared_ptr<Worker> best;
  std::size_t best_imports = 0;
  for (auto& w : workers_) {
    auto& slot = slots_.at(w.get());
    if (slot.draining || !w->alive() || w->state() == Worker::State::stopping) continue;
    if (slot.imports >= library_->max_imports_per_worker) continue;
    if (idle_only && w->state() != Worker::State::idle) continue;
    if (!best || slot.imports < best_imports) {
      best = w;
      best_imports = slot.imports;
    }
  }
  return best;
}

asio::awaitable<Grant> LibraryPool::acquire(bool without_arguments, std::optional<asio::any_io_executor> home,
                                            std::optional<clock::time_point> given_deadline, clock::duration* waited,
                                            std::shared_ptr<const config::Library> serving) {
  const auto deadline = given_deadline ? *given_deadline : clock::now() + library_->queue_timeout;
  const bool shared = library_->isolation == config::Isolation::shared;
  // A shared worker serves sessions of every loop: it lives on the pools' loop.
  const asio::any_io_executor where = shared || !home ? owner_.executor_ : *home;
  for (;;) {
    if (stopping_)
      throw WorkerError(protocol::kShuttingDown, "The gateway is shutting down and starts no new workers.");
    // A reload replaced or removed the library while this import waited: it goes to the pool in force
    // (WorkerPools::acquire_named), never to a worker of the old settings.
    if (retired_) co_return Grant{};
    if (shared) {
      if (auto w = pick_shared(true)) {
        ++slots_.at(w.get()).imports;
        co_return Grant{w, this, true};
      }
    } else {
      std::erase_if(ready_, [&](const std::shared_ptr<Worker>& w) {
        const bool gone = !w->alive() || w->state() != Worker::State::idle;
        if (gone) prewarm_wake_.set();
        return gone;
      });
      // One on the session's own loop if there is one (its calls then never cross loops), else the oldest.
      auto it = std::find_if(ready_.begin(), ready_.end(),
                             [&](const std::shared_ptr<Worker>& w) { return w->executor() == where; });
      if (it == ready_.end()) it = ready_.begin();
      if (it != ready_.end()) {
        auto w = *it;
        auto& slot = slots_.at(w.get());
        // A worker that imported ahead holds an instance made without arguments: an import without
        // arguments is answered with it; an import with arguments never gets that instance (its lease
        // finalizes it and imports afresh in the same warm process).
        ready_.erase(it);
        prewarm_wake_.set();
        ++slot.imports;
        Grant grant{w, this, true, std::move(slot.preimported)};
        slot.preimported.reset();
        log::info("library {}: import served by prewarmed worker pid {}{}", library_->name, w->pid(),
                  !grant.preimported      ? ""
                  : without_arguments ? " with the instance it imported ahead of time"
                                      : " (its instance imported ahead of time is finalized: this import has "
                                        "arguments)");
        co_return grant;
      }
    }
    if (owner_.has_capacity(*this)) {
      if (in_backoff())
        throw WorkerError(protocol::kWorkerFailed, backoff_message(), json::object{{"library", library_->name}});
      auto w = co_await start_worker(false, where, serving.get());
      ++slots_.at(w.get()).imports;
      prewarm_wake_.set();
      co_return Grant{w, this, false};
    }
    if (shared) {
      // Every worker is busy and no new one may start: queue behind the least loaded one.
      if (auto w = pick_shared(false)) {
        ++slots_.at(w.get()).imports;
        co_return Grant{w, this, true};
      }
    }
    // At capacity. Make room by ending an idle worker another library keeps warm, and by ending at once
    // a hung worker that is being stopped (a keyword overran keyword_timeout), then wait.
    owner_.evict_idle_prewarmed(this);
    owner_.hurry_hung(*this);
    ++waiting_;
    const auto began = clock::now();
    const bool room = co_await owner_.wait_for_capacity(deadline);
    if (waited) *waited += clock::now() - began;
    --waiting_;
    if (!room) {
      std::string cap = library_->max_workers
                            ? fmt::format("{} of its max_workers {} run", workers_.size() + starting_,
                                          library_->max_workers)
                            : fmt::format("{} of its workers run", workers_.size() + starting_);
      throw WorkerError(protocol::kAtCapacity,
                        fmt::format("Library '{}' is at capacity: {}, and the gateway runs {} workers (max_workers "
                                    "{}). The import waited {} (queue_timeout). Retry later, finalize unused "
                                    "imports, or raise max_workers.",
                                    library_->name, cap, owner_.live_, owner_.config_->gateway.max_workers,
                                    duration_text(library_->queue_timeout)),
                        json::object{{"library", library_->name}});
    }
  }
}

asio::awaitable<std::shared_ptr<Worker>> LibraryPool::start_worker(bool for_prewarm, asio::any_io_executor home,
                                                                   const config::Library* serving) {
  ++starting_;
  ++owner_.live_;  // reserve the capacity now, so concurrent imports cannot overshoot the caps
  const config::Library& settings = serving ? *serving : *library_;
  // The gate on concurrent starts is for forks: an upstream connection waits for no one (and a slow one
  // does not hold up the starts of other libraries).
  const bool forks = !settings.is_upstream();
  // A fork server still starting is waited for before the turn among starts is taken (not holding it).
  if (fork_server_ && forks) co_await fork_server_->settle();
  if (forks) co_await owner_.begin_start(!for_prewarm);
  std::shared_ptr<Worker> worker;
  std::optional<WorkerError> failure;
  try {
    // Forked from the library's template when it is ready; else (or when it cannot) started the plain way.
    std::optional<ForkedProcess> forked;
    if (fork_server_ && forks) forked = co_await fork_server_->fork(settings);
    // Started on its own loop, where it lives from now on.
    worker = co_await runtime::run_on(home, Worker::start(home, settings, owner_.reaper_, owner_.options_, std::move(forked)));
  } catch (const WorkerError& e) {
    failure = e;
  }
  if (forks) owner_.end_start();
  --starting_;
  if (failure) {
    --owner_.live_;
    // A start that failed for one imported name (a glob entry's {library} in the command, the env or the
    // upstream) says nothing about the entry's other names: one client's typo must not back off everyone.
    if (settings.name_dependent) {
      metrics_.start_failures.fetch_add(1, std::memory_order_relaxed);
      owner_.capacity_changed();
      throw *failure;
    }
    record_failure(failure->what());
    metrics_.start_failures.fetch_add(1, std::memory_order_relaxed);
    owner_.capacity_changed();
    if (in_backoff()) {
      std::string message = failure->what();
      message += fmt::format(" (Library '{}' now backs off: further starts wait {}.)", library_->name,
                             duration_text(retry_at_ - clock::now()));
      throw WorkerError(failure->code, std::move(message), failure->data);
    }
    throw *failure;
  }
  Slot slot;
  slot.born = clock::now();
  slot.max_keywords = jittered(library_->max_keywords);
  slot.max_age = jittered(library_->max_age);
  slot.max_rss = jittered(library_->max_rss);
  slots_[worker.get()] = slot;
  workers_.push_back(worker);
  LibraryMetrics::add(metrics_.starts, for_prewarm ? StartKind::prewarmed : StartKind::cold);
  log::info("library {}: worker {} ready ({}; {} live)", library_->name, worker->where(),
            for_prewarm ? "prewarm" : "cold start for an import", workers_.size());
  asio::co_spawn(owner_.executor_, watch(worker), runtime::log_exceptions("pool watch " + library_->name));
  // A shared worker has room for more than the import that started it: imports that queued for
  // capacity meanwhile look again (after this one, which takes its place before they run).
  if (library_->isolation == config::Isolation::shared) owner_.capacity_changed();
  if (stopping_) co_await runtime::run_on(worker->executor(), worker->stop("the gateway is shutting down"));
  // Started for a retired pool (an import that queued before the reload): it serves that import, then goes.
  if (retired_ && !stopping_) {
    if (auto it = slots_.find(worker.get()); it != slots_.end()) it->second.draining = true;
  }
  co_return worker;
}

asio::awaitable<void> LibraryPool::watch(std::shared_ptr<Worker> worker) {
  const Ending ending = co_await runtime::run_on(worker->executor(), ending_of(worker));
  auto slot = slots_.find(worker.get());
  auto uptime = slot != slots_.end() ? clock::now() - slot->second.born : clock::duration{};
  const bool counted = slot != slots_.end() && slot->second.failure_counted;
  if (slot != slots_.end()) slots_.erase(slot);
  std::erase(workers_, worker);
  std::erase(ready_, worker);
  --owner_.live_;
  LibraryMetrics::add(metrics_.exits, ending.reason);
  if (!ending.on_purpose) last_crash_ = ending.death, last_crash_at_ = clock::now();
  if (counted) {
    // Already counted as a failed start (its import ahead of time failed).
  } else if (ending.on_purpose) {
    failures_ = 0;
  } else if (!ending.died_busy) {
    // Deaths while idle or starting are what crash loops are made of; a keyword that kills its own
    // worker is the caller's business and does not slow down other imports.
    if (uptime < kHealthyUptime) record_failure(ending.death);
    else failures_ = 1, last_failure_ = ending.death;
  }
  log::debug("library {}: worker {} gone ({} live)", library_->name, worker->where(), workers_.size());
  owner_.capacity_changed();
}

asio::awaitable<void> LibraryPool::release(Grant& grant, std::string reason) {
  auto worker = std::move(grant.worker);
  if (!worker) co_return;
  auto slot = slots_.find(worker.get());
  if (slot != slots_.end() && slot->second.imports > 0) --slot->second.imports;
  if (library_->isolation == config::Isolation::session) {
    const bool polite = worker->state() != Worker::State::busy;
    co_await runtime::run_on(worker->executor(), worker->stop(std::move(reason), polite));
    co_return;
  }
  if (slot != slots_.end() && slot->second.draining && slot->second.imports == 0)
    co_await runtime::run_on(worker->executor(), worker->stop(retired_ ? "retired by a reload after its last import ended"
                                                              : "recycled after its last import ended"));
}

void LibraryPool::retire(const std::shared_ptr<Worker>& worker, std::string reason) {
  auto it = slots_.find(worker.get());
  if (it != slots_.end()) it->second.draining = it->second.hung = true;
  log::info("worker {}[{}]: retired: {}", library_->name, worker->pid(), reason);
  // An import may already wait for the place it holds (another session's, at a cap).
  owner_.hurry_hung_for_waiters();
}

void LibraryPool::retire(std::string reason) {
  retired_ = true;
  if (fork_server_) fork_server_->stop();
  prewarm_wake_.set();
  for (auto& w : ready_)
    asio::co_spawn(w->executor(), w->stop("prewarmed, never used: " + reason), runtime::log_exceptions("retire"));
  ready_.clear();
  for (auto& w : workers_) {
    auto it = slots_.find(w.get());
    if (it == slots_.end()) continue;
    if (library_->isolation == config::Isolation::shared) drain(w, it->second, reason);
    else it->second.draining = true;  // stopped when its import ends, as every dedicated worker
  }
  log::info("library {}: {}; its {} worker(s) finish the imports they hold, then stop", library_->name, reason,
            workers_.size());
}

void LibraryPool::shutdown() {
  stopping_ = true;
  if (fork_server_) fork_server_->stop();
  prewarm_wake_.set();
  ready_.clear();
  auto workers = workers_;
  for (auto& w : workers)
    asio::co_spawn(w->executor(), w->stop("the gateway is shutting down"), runtime::log_exceptions("pool shutdown"));
}

}  // namespace rjg::gateway::supervisor
