#include "gateway/supervisor/pool.hpp"

#include "common/log.hpp"
#include "common/protocol/json_text.hpp"
#include "common/protocol/protocol.hpp"
#include "common/runtime/loops.hpp"

#include <boost/asio/co_spawn.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <random>

namespace rjg::gateway::supervisor {
using namespace std::chrono_literals;
using clock = std::chrono::steady_clock;

namespace {
// Forks at once, gateway-wide: a burst of imports or a gateway start does not fork every worker at once.
constexpr std::size_t kMaxConcurrentStarts = 4;
// Between the first prewarm starts of successive libraries.
constexpr auto kPrewarmStagger = 200ms;
// Crash backoff: from the second failure in a row, 1s, 2s, 4s ... at most 60s between starts.
constexpr auto kBackoffBase = 1s;
constexpr auto kBackoffMax = 60s;
// A worker that dies by itself after living this long is a single crash, not a crash loop.
constexpr auto kHealthyUptime = 30s;

// Recycling limits get up to 10% jitter downwards, so workers started together do not restart together.
template <typename T>
T jittered(T limit) {
  if (limit <= T{}) return limit;
  static std::mt19937_64 rng{std::random_device{}()};
  std::uniform_real_distribution<double> factor(0.9, 1.0);
  if constexpr (std::is_integral_v<T>) return std::max<T>(1, static_cast<T>(static_cast<double>(limit) * factor(rng)));
  else return T(std::max<typename T::rep>(1, static_cast<typename T::rep>(static_cast<double>(limit.count()) * factor(rng))));
}

std::string duration_text(clock::duration d) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
  if (ms < 1000) return fmt::format("{}ms", ms);
  return fmt::format("{:.1f}s", static_cast<double>(ms) / 1000.0);
}

// prewarm_import: the worker is asked for its default library (name ""), as a session's import is, with
// no arguments.
constexpr std::string_view kImportWithoutArguments = R"({"name":"","args":[],"kw_args":{}})";

// What a worker sends while it imports ahead of time belongs to no session: the gateway logs it itself.
class AheadImportLog final : public CallObserver {
 public:
  AheadImportLog(std::string library, pid_t pid) : library_(std::move(library)), pid_(pid) {}

  void relay_notification(std::string_view json_text) override {
    std::string method = "a notification", level, message;
    const auto members = protocol::members(json_text);
    if (const auto* m = protocol::find(members, "method"); m && m->kind == protocol::Kind::string)
      method = protocol::decode_string(m->value.of(json_text));
    if (const auto* p = protocol::find(members, "params"); p && p->kind == protocol::Kind::object) {
      const auto params = p->value.of(json_text);
      const auto fields = protocol::members(params);
      if (const auto* l = protocol::find(fields, "level"); l && l->kind == protocol::Kind::string)
        level = protocol::decode_string(l->value.of(params));
      if (const auto* t = protocol::find(fields, "message"))
        message = t->kind == protocol::Kind::string ? protocol::decode_string(t->value.of(params))
                                                    : std::string(t->value.of(params));
    }
    log::info("worker {}[{}]: {} during the import ahead of any session (no client gets it): {}{}", library_, pid_,
              method, level.empty() ? "" : level + ": ", log::printable(message, 4096));
  }
  // Nobody reads these: the worker need not wait.
  asio::awaitable<void> wait_for_room() override { co_return; }

 private:
  std::string library_;
  pid_t pid_;
};
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
      prewarm_wake_(owner.executor_) {}

bool LibraryPool::in_backoff() const { return failures_ >= 2 && clock::now() < retry_at_; }

std::string LibraryPool::backoff_message() const {
  if (library_->is_upstream())
    return fmt::format("Library '{}' is backing off: {} connections to its upstream {} failed or dropped in a row "
                       "(last: {}). The next connection is tried in {}; imports fail until then. Check that the "
                       "server runs there and is reachable from the gateway.",
                       library_->name, failures_, library_->upstream, last_failure_,
                       duration_text(retry_at_ - clock::now()));
  return fmt::format("Library '{}' is backing off: {} worker starts or crashes failed in a row (last: {}). The next "
                     "worker start is allowed in {}; imports that need a new worker fail until then. Check the "
                     "library's command and its log lines in the gateway's log.",
                     library_->name, failures_, last_failure_, duration_text(retry_at_ - clock::now()));
}

void LibraryPool::record_failure(const std::string& what) {
  ++failures_;
  last_failure_ = what.size() > 300 ? what.substr(0, 300) + "..." : what;
  if (failures_ >= 2) {
    auto delay = std::min<clock::duration>(kBackoffBase * (1u << std::min<std::size_t>(failures_ - 2, 16)), kBackoffMax);
    retry_at_ = clock::now() + delay;
    log::warn("library {}: {} failures in a row; next worker start in {}", library_->name, failures_,
              duration_text(delay));
  }
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
    // At capacity. Make room by ending an idle worker another library keeps warm, then wait.
    owner_.evict_idle_prewarmed(this);
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
  if (forks) co_await owner_.begin_start(!for_prewarm);
  std::shared_ptr<Worker> worker;
  std::optional<WorkerError> failure;
  try {
    // Started on its own loop, where it lives from now on.
    worker = co_await runtime::run_on(home, Worker::start(home, settings, owner_.reaper_, owner_.options_));
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

asio::awaitable<void> LibraryPool::prewarm_loop() {
  if (library_->prewarm == 0) co_return;
  asio::steady_timer stagger(owner_.executor_, kPrewarmStagger * index_);
  co_await stagger.async_wait(asio::as_tuple(asio::use_awaitable));
  const bool shared = library_->isolation == config::Isolation::shared;
  while (!stopping_ && !retired_) {
    std::size_t have = (shared ? workers_.size() : ready_.size()) + starting_;
    if (have < library_->prewarm && owner_.has_capacity(*this) && !in_backoff()) {
      try {
        auto worker = co_await start_worker(true, shared ? owner_.executor_ : owner_.loop_for_prewarm(ready_));
        if (retired_ && !stopping_) {
          // A reload retired the pool while this one started: nobody will ask for it (shared ones too).
          co_await runtime::run_on(worker->executor(), worker->stop("prewarmed for settings a reload replaced or removed"));
          continue;
        }
        bool ready = !shared && !stopping_;
        // A worker counts as started (it holds capacity) while it imports ahead, but is handed out only after.
        if (ready && library_->prewarm_import) ready = co_await import_ahead(worker);
        if (ready && retired_) {
          co_await runtime::run_on(worker->executor(), worker->stop("prewarmed for settings a reload replaced or removed"));
          ready = false;
        }
        if (ready && !stopping_) {
          ready_.push_back(worker);
          // An import waiting for capacity may take it now (or, with arguments, make room by ending it).
          owner_.capacity_changed();
        }
      } catch (const WorkerError& e) {
        log::warn("library {}: prewarm start failed: {}", library_->name, e.what());
      }
      continue;
    }
    prewarm_wake_.reset();
    co_await prewarm_wake_.wait_until(in_backoff() ? retry_at_ : clock::time_point::max());
  }
}

asio::awaitable<bool> LibraryPool::import_ahead(std::shared_ptr<Worker> worker) {
  const pid_t pid = worker->pid();
  auto logs = std::make_shared<AheadImportLog>(library_->name, pid);
  std::optional<protocol::Message> answer;
  std::string why;
  bool timed_out = false;
  try {
    // Bounded like a start: a library whose import hangs must not hold a prewarmed worker for ever.
    answer.emplace(co_await runtime::run_on(
        worker->executor(),
        worker->call(protocol::kImportLibrary, std::string(kImportWithoutArguments), logs,
                     fmt::format("the import of library '{}' ahead of any session", library_->name),
                     library_->startup_timeout)));
  } catch (const WorkerError& e) {
    why = e.what();
    timed_out = e.code == protocol::kWorkerTimeout;
    if (timed_out) why += " (startup_timeout, which bounds an import ahead of time too)";
  }
  if (stopping_) co_return false;
  if (answer && answer->kind == protocol::Message::Kind::error_response)
    why = fmt::format("it answered with error {}: {}", answer->error_code(), answer->error_message());
  auto slot = slots_.find(worker.get());
  if (why.empty()) {
    // Gone meanwhile (its death is counted by watch()) or being stopped: nothing to hand out.
    if (slot == slots_.end() || !worker->alive() || worker->state() != Worker::State::idle) co_return false;
    slot->second.preimported = std::move(answer);
    log::info("library {}: prewarmed worker pid {} imported the library ahead of any session; an import without "
              "arguments gets this instance",
              library_->name, pid);
    co_return true;
  }
  log::warn("library {}: the import ahead of any session failed in prewarmed worker pid {}: {}; stopping the worker",
            library_->name, pid, why);
  if (slot != slots_.end()) slot->second.failure_counted = true;
  record_failure(fmt::format("the import ahead of any session failed in worker pid {}: {}", pid, why));
  // A worker still busy with the import cannot hear robot/shutdown: it is terminated instead.
  asio::co_spawn(worker->executor(), worker->stop("its import ahead of any session failed", !timed_out),
                 runtime::log_exceptions("import ahead stop " + library_->name));
  co_return false;
}

void LibraryPool::start_prewarm() {
  asio::co_spawn(owner_.executor_, prewarm_loop(), runtime::log_exceptions("prewarm " + library_->name));
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

void LibraryPool::drain(const std::shared_ptr<Worker>& worker, Slot& slot, std::string reason) {
  if (slot.draining) return;
  slot.draining = true;
  log::info("worker {}[{}]: draining: {}; it takes no new imports and stops after its last one ({} left)",
            library_->name, worker->pid(), reason, slot.imports);
  if (slot.imports == 0) {
    asio::co_spawn(worker->executor(), worker->stop((retired_ ? "retired: " : "recycled: ") + reason),
                   runtime::log_exceptions("recycle"));
  }
  prewarm_wake_.set();
}

void LibraryPool::keyword_done(const std::shared_ptr<Worker>& worker) {
  if (library_->isolation != config::Isolation::shared) return;
  auto it = slots_.find(worker.get());
  if (it == slots_.end()) return;
  auto& slot = it->second;
  ++slot.keywords;
  if (slot.max_keywords && slot.keywords >= slot.max_keywords)
    drain(worker, slot, fmt::format("served {} keywords (max_keywords {})", slot.keywords, library_->max_keywords));
  else if (slot.max_age.count() && clock::now() - slot.born >= slot.max_age)
    drain(worker, slot, fmt::format("older than max_age {}", duration_text(library_->max_age)));
  else if (slot.max_rss) {
    auto rss = worker->resident_bytes();
    if (rss > slot.max_rss)
      drain(worker, slot, fmt::format("resident memory {} MiB above max_rss {} MiB", rss >> 20, library_->max_rss >> 20));
  }
}

void LibraryPool::retire(const std::shared_ptr<Worker>& worker, std::string reason) {
  auto it = slots_.find(worker.get());
  if (it != slots_.end()) it->second.draining = true;
  log::info("worker {}[{}]: retired: {}", library_->name, worker->pid(), reason);
}

void LibraryPool::retire(std::string reason) {
  retired_ = true;
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
  prewarm_wake_.set();
  ready_.clear();
  auto workers = workers_;
  for (auto& w : workers)
    asio::co_spawn(w->executor(), w->stop("the gateway is shutting down"), runtime::log_exceptions("pool shutdown"));
}

// --- WorkerPools -----------------------------------------------------------------------------

WorkerPools::WorkerPools(asio::any_io_executor executor, std::shared_ptr<const config::Config> config_ptr,
                         ChildReaper& reaper, WorkerOptions options, Metrics& metrics,
                         std::vector<asio::any_io_executor> loops)
    : executor_(executor), config_(std::move(config_ptr)), reaper_(reaper), options_(std::move(options)),
      metrics_(metrics), loops_(std::move(loops)) {
  const config::Config& config = *config_;
  if (loops_.empty()) loops_.push_back(executor_);
  apply_orphan_policy(config);
  std::size_t index = 0;
  for (const auto& library : config.libraries)
    pools_.push_back(std::make_unique<LibraryPool>(*this, std::shared_ptr<const config::Library>(config_, &library), index++));
}

void WorkerPools::apply_orphan_policy(const config::Config& config) {
  // An orphan cannot be traced to its library, so it gets the longest shutdown_grace of them all: no
  // library's descendant is killed sooner than that library's own worker would be.
  OrphanPolicy orphans;
  orphans.end = config.gateway.end_orphans;
  if (!config.libraries.empty()) {
    orphans.grace = config.libraries.front().shutdown_grace;
    for (const auto& library : config.libraries) orphans.grace = std::max(orphans.grace, library.shutdown_grace);
  }
  // Workers of settings a reload replaced may still leave descendants behind.
  for (const auto& old : retired_)
    if (!old->workers_.empty()) orphans.grace = std::max(orphans.grace, old->library().shutdown_grace);
  reaper_.set_orphan_policy(orphans);
}

LibraryPool& WorkerPools::pool(std::string_view name) {
  for (auto& p : pools_)
    if (p->library().name == name) return *p;
  throw WorkerError(protocol::kUnknownLibrary,
                    fmt::format("Library '{}' was removed from the gateway's configuration by a reload while this "
                                "import was on its way; it takes no new imports.",
                                name),
                    json::object{{"library", name}, {"removed", true}});
}

WorkerPools::Changes WorkerPools::reload(std::shared_ptr<const config::Config> config) {
  Changes changes;
  std::vector<std::unique_ptr<LibraryPool>> next;
  std::size_t index = 0;
  for (const auto& library : config->libraries) {
    auto old = std::find_if(pools_.begin(), pools_.end(), [&](auto& p) { return p && p->library().name == library.name; });
    if (old != pools_.end() && config::same_settings((*old)->library(), library)) {
      ++changes.unchanged;
      next.push_back(std::move(*old));
      ++index;
      continue;
    }
    if (old != pools_.end()) {
      changes.changed.push_back(library.name);
      (*old)->retire("its settings changed by a reload");
      retired_.push_back(std::move(*old));
    } else {
      changes.added.push_back(library.name);
    }
    next.push_back(std::make_unique<LibraryPool>(*this, std::shared_ptr<const config::Library>(config, &library), index++));
    if (started_) next.back()->start_prewarm();
  }
  for (auto& p : pools_) {
    if (!p) continue;
    changes.removed.push_back(p->library().name);
    p->retire("removed from the configuration by a reload");
    retired_.push_back(std::move(p));
  }
  pools_ = std::move(next);
  config_ = std::move(config);
  apply_orphan_policy(*config_);
  capacity_changed();  // a cap may have grown
  return changes;
}

asio::any_io_executor WorkerPools::loop_for_prewarm(const std::deque<std::shared_ptr<Worker>>& ready) {
  // The loop holding the fewest of the library's prewarmed workers (ties in turn), so that each loop
  // keeps one for the imports of its sessions: a worker taken from another loop costs its session a
  // hand-over between the two loops' threads on every call (two more thread wake-ups per keyword,
  // twice the gateway's CPU per keyword). A round robin shared by every library's starts could leave
  // all of one library's prewarmed workers on one loop.
  std::size_t best = next_loop_ % loops_.size();
  std::ptrdiff_t fewest = -1;
  for (std::size_t i = 0; i < loops_.size(); ++i) {
    const std::size_t at = (next_loop_ + i) % loops_.size();
    const auto here = std::count_if(ready.begin(), ready.end(), [&](const std::shared_ptr<Worker>& w) {
      return w->alive() && w->executor() == loops_[at];
    });
    if (fewest < 0 || here < fewest) {
      best = at;
      fewest = here;
    }
  }
  next_loop_ = best + 1;
  return loops_[best];
}

void WorkerPools::start() {
  started_ = true;
  for (auto& p : pools_) p->start_prewarm();
}

bool WorkerPools::has_capacity(const LibraryPool& pool) const {
  const auto& lib = pool.library();
  if (lib.max_workers) {
    // The library's workers of settings a reload replaced still count against its cap until they stop.
    std::size_t running = pool.workers_.size() + pool.starting_;
    for (const auto& old : retired_)
      if (old->library().name == lib.name) running += old->workers_.size() + old->starting_;
    if (running >= lib.max_workers) return false;
  }
  return config_->gateway.max_workers == 0 || live_ < config_->gateway.max_workers;
}

asio::awaitable<bool> WorkerPools::wait_for_capacity(runtime::AsyncEvent::clock::time_point deadline) {
  auto turn = std::make_shared<runtime::AsyncEvent>(executor_);
  capacity_waiters_.push_back(turn);
  bool woken = co_await turn->wait_until(deadline);
  if (!woken) std::erase(capacity_waiters_, turn);
  co_return woken;
}

void WorkerPools::capacity_changed() {
  // Woken in arrival order; each re-checks, so the first in line gets the first free slot.
  auto waiters = std::move(capacity_waiters_);
  capacity_waiters_.clear();
  for (auto& w : waiters) w->set();
  for (auto& p : pools_) p->prewarm_wake_.set();
}

bool WorkerPools::evict_idle_prewarmed(const LibraryPool* except) {
  for (auto& p : pools_) {
    if (p.get() == except) continue;
    if (!p->ready_.empty()) {
      auto w = std::move(p->ready_.back());
      p->ready_.pop_back();
      asio::co_spawn(w->executor(), w->stop("making room for an import of another library"), runtime::log_exceptions("evict"));
      return true;
    }
    for (auto& w : p->workers_) {
      auto& slot = p->slots_.at(w.get());
      if (p->library().isolation == config::Isolation::shared && slot.imports == 0 && !slot.draining &&
          w->state() == Worker::State::idle) {
        slot.draining = true;
        asio::co_spawn(w->executor(), w->stop("making room for an import of another library"), runtime::log_exceptions("evict"));
        return true;
      }
    }
  }
  return false;
}

asio::awaitable<void> WorkerPools::begin_start(bool for_import) {
  if (starts_in_progress_ < kMaxConcurrentStarts) {
    ++starts_in_progress_;
    co_return;
  }
  auto turn = std::make_shared<runtime::AsyncEvent>(executor_);
  (for_import ? import_start_waiters_ : prewarm_start_waiters_).push_back(turn);
  co_await turn->wait();  // end_start() hands its turn over
}

void WorkerPools::end_start() {
  auto& queue = !import_start_waiters_.empty() ? import_start_waiters_ : prewarm_start_waiters_;
  if (queue.empty()) {
    --starts_in_progress_;
    return;
  }
  auto next = std::move(queue.front());
  queue.pop_front();
  next->set();
}

std::string WorkerPools::backoffs() const {
  std::string text;
  for (const auto& p : pools_)
    if (p->in_backoff())
      text += fmt::format("{}{} backs off after {} failed starts", text.empty() ? "" : ", ", p->library().name,
                          p->failures_);
  return text;
}

std::vector<PoolView> WorkerPools::view() const {
  std::vector<PoolView> out;
  const auto now = clock::now();
  auto add = [&](const LibraryPool& p, bool retired) {
    PoolView v{p.library().name, retired, p.waiting_, p.starting_, p.in_backoff(), {}, p.failures_, p.last_crash_,
               p.last_crash_.empty() ? 0.0 : std::chrono::duration<double>(now - p.last_crash_at_).count()};
    for (const auto& w : p.workers_) {
      const auto slot = p.slots_.find(w.get());
      const bool draining = slot != p.slots_.end() && slot->second.draining;
      const auto state = w->state();
      const char* name = draining || state == Worker::State::stopping ? "draining"
                         : state == Worker::State::busy              ? "busy"
                         : state == Worker::State::starting          ? "starting"
                                                                     : "idle";
      v.workers.push_back({w->pid(), name,
                           slot != p.slots_.end() ? std::chrono::duration<double>(now - slot->second.born).count() : 0.0,
                           w->keywords_run(), slot != p.slots_.end() ? slot->second.imports : 0,
                           std::find(p.ready_.begin(), p.ready_.end(), w) != p.ready_.end(),
                           w->is_upstream() ? w->where().substr(9) : std::string(),
                           w->library() != p.library().name ? w->library() : std::string()});
    }
    out.push_back(std::move(v));
  };
  for (const auto& p : pools_) add(*p, false);
  for (const auto& p : retired_)
    if (!p->workers_.empty() || p->starting_ || p->waiting_) add(*p, true);
  return out;
}

asio::awaitable<void> WorkerPools::shutdown() {
  for (auto& p : pools_) p->shutdown();
  for (auto& p : retired_) p->shutdown();
  // Every stop is bounded by its grace periods; this bound only guards against a bug.
  const auto deadline = clock::now() + 5min;
  while (live_ > 0 && clock::now() < deadline) co_await wait_for_capacity(deadline);
  if (live_ > 0) log::error("{} workers still not gone after shutdown", live_);
  // What the workers left behind goes with them (end_orphans), before the gateway exits and they
  // would be reparented out of its reach.
  co_await reaper_.end_orphans_now();
}

}  // namespace rjg::gateway::supervisor
