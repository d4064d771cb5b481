// WorkerPools, the registry of every library's pool: which pool is in force for a name (a reload adds,
// keeps, replaces or retires pools), the gateway-wide caps and the FIFO queue of imports waiting for
// capacity, the gate on concurrent starts, where prewarmed workers go among the loops, and what /status
// and /metrics show of the pools. One library's own pool: pool.cpp and pool_upkeep.cpp.
#include "gateway/supervisor/pool.hpp"

#include "common/log.hpp"
#include "common/protocol/protocol.hpp"
#include "common/runtime/loops.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>

#include <fmt/format.h>

#include <algorithm>

namespace rjg::gateway::supervisor {
using namespace std::chrono_literals;
using clock = std::chrono::steady_clock;

namespace {
// Forks at once, gateway-wide: a burst of imports or a gateway start does not fork every worker at once.
constexpr std::size_t kMaxConcurrentStarts = 4;
}  // namespace

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

bool WorkerPools::has_capacity(const LibraryPool& pool) const { return !library_full(pool) && !gateway_full(); }

bool WorkerPools::library_full(const LibraryPool& pool) const {
  const auto& lib = pool.library();
  if (!lib.max_workers) return false;
  // The library's workers of settings a reload replaced still count against its cap until they stop.
  std::size_t running = pool.workers_.size() + pool.starting_;
  for (const auto& old : retired_)
    if (old->library().name == lib.name) running += old->workers_.size() + old->starting_;
  return running >= lib.max_workers;
}

bool WorkerPools::gateway_full() const {
  return config_->gateway.max_workers != 0 && live_ >= config_->gateway.max_workers;
}

void WorkerPools::hurry_hung(const LibraryPool& waiter) {
  const bool gateway_cap = gateway_full();
  const bool library_cap = library_full(waiter);
  if (!gateway_cap && !library_cap) return;
  const auto& name = waiter.library().name;
  const std::string why =
      gateway_cap ? fmt::format("an import of library '{}' waits for its place under [gateway] max_workers = {}", name,
                                config_->gateway.max_workers)
                  : fmt::format("an import of library '{}' waits for its place under the library's max_workers = {}",
                                name, waiter.library().max_workers);
  for (const auto* pools : {&pools_, &retired_}) {
    for (const auto& p : *pools) {
      // Under the library's own cap only its own workers count (those of replaced settings included).
      if (!gateway_cap && p->library().name != name) continue;
      for (const auto& w : p->workers_) {
        auto& slot = p->slots_.at(w.get());
        if (!slot.hung || slot.hurried) continue;
        slot.hurried = true;
        asio::post(w->executor(), [w, why] { w->hurry(why); });
      }
    }
  }
}

void WorkerPools::hurry_hung_for_waiters() {
  if (capacity_waiters_.empty()) return;
  for (const auto* pools : {&pools_, &retired_})
    for (const auto& p : *pools)
      if (p->waiting_ > 0) hurry_hung(*p);
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

std::string WorkerPools::fork_servers_down() const {
  std::string text;
  for (const auto& p : pools_) {
    if (!p->fork_server_) continue;
    const auto v = p->fork_server_->view();
    if (v.state == ForkServer::State::down)
      text += fmt::format("{}the fork server of {} is down ({}): plain starts", text.empty() ? "" : ", ",
                          p->library().name, v.problem);
  }
  return text;
}

std::vector<PoolView> WorkerPools::view() const {
  std::vector<PoolView> out;
  const auto now = clock::now();
  auto add = [&](const LibraryPool& p, bool retired) {
    PoolView v{p.library().name, retired, p.waiting_, p.starting_, p.in_backoff(), {}, p.failures_, p.last_crash_,
               p.last_crash_.empty() ? 0.0 : std::chrono::duration<double>(now - p.last_crash_at_).count(), {}};
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
    if (p.fork_server_) {
      const auto f = p.fork_server_->view();
      v.fork_server = PoolView::ForkServerView{ForkServer::state_name(f.state), f.pid, f.problem, f.starts, f.forks};
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
  // Fork servers' templates: they exit when their control socket closes (SIGKILL after shutdown_grace).
  for (const auto* pools : {&pools_, &retired_})
    for (const auto& p : *pools)
      if (p->fork_server_) co_await p->fork_server_->wait_gone(deadline);
  // What the workers left behind goes with them (end_orphans), before the gateway exits and they
  // would be reparented out of its reach.
  co_await reaper_.end_orphans_now();
}

}  // namespace rjg::gateway::supervisor
