// The pool's lease: every lifecycle rule that follows from what a session does with its import.
#include "gateway/supervisor/lease.hpp"

#include "common/protocol/json_text.hpp"

#include "common/log.hpp"
#include "common/protocol/protocol.hpp"
#include "common/runtime/loops.hpp"
#include "gateway/supervisor/pool.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>

#include <fmt/format.h>

#include <utility>

namespace rjg::gateway::supervisor {
namespace {

// How long a worker may take to answer robot/finalize_library (its cleanup) before it is stopped anyway.
constexpr auto kFinalizeTimeout = std::chrono::seconds(30);

// A call's observer on another loop than its worker: what the worker sends during the call is posted
// to the caller's loop, in order and ahead of the answer (which reaches the caller the same way), and
// the worker waits for room in the caller's write queue there.
class CrossLoopObserver final : public CallObserver {
 public:
  CrossLoopObserver(std::weak_ptr<CallObserver> target, asio::any_io_executor home)
      : target_(std::move(target)), home_(std::move(home)) {}

  void relay_notification(std::string_view json_text) override {
    asio::post(home_, [target = target_, text = std::string(json_text)] {
      if (auto observer = target.lock()) observer->relay_notification(text);
    });
  }
  asio::awaitable<void> wait_for_room() override { co_await runtime::run_on(home_, room(target_)); }

 private:
  static asio::awaitable<void> room(std::weak_ptr<CallObserver> target) {
    if (auto observer = target.lock()) co_await observer->wait_for_room();
  }

  std::weak_ptr<CallObserver> target_;
  asio::any_io_executor home_;
};

// On the worker's loop; its parameters keep the worker and the relay alive until the answer.
asio::awaitable<protocol::Message> call_there(std::shared_ptr<Worker> worker, std::string_view method, std::string params,
                                    std::shared_ptr<CallObserver> relay, std::string what,
                                    std::optional<config::Duration> timeout) {
  co_return co_await worker->call(method, std::move(params), relay, std::move(what), timeout);
}

// A worker call made from any loop: run on the worker's loop (directly when that is the caller's).
asio::awaitable<protocol::Message> call_worker(std::shared_ptr<Worker> worker, std::string_view method, std::string params,
                                     std::weak_ptr<CallObserver> observer, std::string what,
                                     std::optional<config::Duration> timeout = std::nullopt) {
  const auto here = co_await asio::this_coro::executor;
  if (worker->executor() == here)
    co_return co_await worker->call(method, std::move(params), std::move(observer), std::move(what), timeout);
  std::shared_ptr<CallObserver> relay;
  if (!observer.expired()) relay = std::make_shared<CrossLoopObserver>(std::move(observer), here);
  co_return co_await runtime::run_on(worker->executor(), call_there(worker, method, std::move(params), relay, std::move(what),
                                                           timeout));
}

class PoolLease final : public Lease {
 public:
  // executor: the pools' loop, where the grant is released.
  PoolLease(Grant grant, asio::any_io_executor executor) : grant_(std::move(grant)), executor_(std::move(executor)) {}

  ~PoolLease() override {
    // An import that was never released (a bug elsewhere) must not keep its worker forever. The grant
    // moves into the coroutine: this lease is gone by the time it runs.
    if (grant_.worker && grant_.pool) {
      log::error("bug: library {}: lease on worker pid {} dropped without release", library_name_, pid_);
      asio::co_spawn(executor_, release_owned(std::move(grant_), "its lease was dropped"), runtime::log_exceptions("lease drop"));
    }
  }

  asio::awaitable<void> finalize_ahead(const protocol::Message& answer) {
    const auto result = answer.result_text();
    const auto members = protocol::members(result);
    const auto* token = protocol::find(members, "token");
    if (!token || token->kind != protocol::Kind::string) co_return;
    const std::string params = "{\"token\":" + std::string(token->value.of(result)) + "}";
    const auto reply = co_await call_worker(
        held(), protocol::kFinalizeLibrary, params, {},
        fmt::format("the finalize of the instance of library '{}' imported ahead of time", library().label()),
        library().startup_timeout);
    if (reply.kind == protocol::Message::Kind::error_response)
      log::warn("library {}: worker {} refused to finalize the instance it imported ahead of time ({}); the "
                "import with arguments goes on",
                library().label(), held()->where(), reply.error_message());
  }

  pid_t pid() const override { return pid_; }
  std::string where() const override { return where_; }
  bool prewarmed() const override { return grant_.prewarmed; }
  std::string loss() const override {
    if (!had_worker_) return {};
    const auto worker = watched_.lock();
    if (!worker) return fmt::format("its worker ({}) is gone", where_);
    // death() is written before alive turns false (release/acquire), so it is complete here.
    if (!worker->alive()) return worker->death();
    // Exited counts at once: the worker stays "alive" while it reads the dead process's last output.
    // Stopped by the gateway (another session's keyword overran keyword_timeout on a shared worker, a
    // reload retired it), the reason is known already and is what the user needs.
    if (worker->state() == Worker::State::exited) {
      if (const auto why = worker->stopped_because(); !why.empty())
        return fmt::format("its worker ({}) was stopped ({})", where_, why);
      return fmt::format("its worker ({}) exited", where_);
    }
    return {};
  }
  std::string server_name() const override { return grant_.worker ? grant_.worker->server_name() : std::string(); }
  std::optional<protocol::Message> take_preimported() override { return std::exchange(grant_.preimported, std::nullopt); }

  asio::awaitable<protocol::Message> import_library(std::string params, std::weak_ptr<CallObserver> observer) override {
    // An import with arguments in a worker that imported the library ahead of time: that instance is
    // finalized first, and this import is a fresh one in the same (warm) process.
    if (auto ahead = take_preimported()) co_await finalize_ahead(*ahead);
    co_return co_await call_worker(held(), protocol::kImportLibrary, std::move(params), std::move(observer),
                                   fmt::format("the import of library '{}'", library().label()));
  }

  asio::awaitable<protocol::Message> run_keyword(std::string params, std::string keyword,
                                       std::weak_ptr<CallObserver> observer) override {
    auto worker = grant_.worker;  // this call keeps it, even if the import is finalized meanwhile
    const auto timeout = library().keyword_timeout;
    std::optional<WorkerError> overran;
    try {
      auto response = co_await call_worker(worker, protocol::kRunKeyword, std::move(params), std::move(observer),
                                           fmt::format("keyword '{}' of library '{}'", keyword, library().label()),
                                           timeout.count() ? std::optional(timeout) : std::nullopt);
      // Recycling counts keywords of shared workers only, on the pools' loop.
      if (library().isolation == config::Isolation::shared)
        asio::dispatch(executor_, [pool = grant_.pool, worker] { pool->keyword_done(worker); });
      co_return response;
    } catch (const WorkerError& e) {
      if (e.code != protocol::kWorkerTimeout) throw;
      overran = e;
    }
    // A keyword that overran cannot be interrupted inside the worker: end the worker, and with it every
    // import it holds (they then fail with this reason). The caller is answered at once.
    auto reason = fmt::format("keyword '{}' exceeded keyword_timeout {}ms", keyword, timeout.count());
    asio::dispatch(executor_, [pool = grant_.pool, worker, reason] { pool->retire(worker, reason); });
    asio::co_spawn(worker->executor(), stop(worker, reason), runtime::log_exceptions("keyword timeout stop"));
    throw WorkerError(protocol::kWorkerTimeout,
                      fmt::format("Keyword '{}' of library '{}' did not finish within {}ms (keyword_timeout). {}, "
                                  "and the library instance with it.",
                                  keyword, library().label(), timeout.count(),
                                  worker->is_upstream()
                                      ? fmt::format("Its connection to the {} is closed (the server goes on)",
                                                    worker->where())
                                      : fmt::format("Its worker ({}) is stopped", worker->where())),
                      overran->data);
  }

  asio::awaitable<std::optional<protocol::Message>> finalize_library(std::string params,
                                                           std::weak_ptr<CallObserver> observer) override {
    std::optional<protocol::Message> answer;
    if (grant_.worker && grant_.worker->alive()) {
      try {
        answer.emplace(co_await finalize(std::move(params), std::move(observer)));
      } catch (const WorkerError& e) {
        log::warn("library {}: finalize in worker {}: {}", library().label(), where(), e.what());
      }
    }
    co_await release("its library was finalized");
    co_return answer;
  }

  asio::awaitable<void> end(std::string finalize_params, std::string reason) override {
    // A shared worker lives on: finalize this import's instance in it (after any keyword still running
    // there, whose late answer is dropped). A dedicated worker is simply ended.
    // An upstream connection is a worker of its own, but the server behind it lives on: its instance is
    // finalized there before the connection closes.
    // (Not while a keyword still runs on an upstream connection: the finalize would wait for it, holding
    // the connection and a worker slot; closing the connection ends that instance there as well.)
    const bool upstream_idle = library().is_upstream() && grant_.worker &&
                               grant_.worker->state() == Worker::State::idle;
    if ((library().isolation == config::Isolation::shared || upstream_idle) && grant_.worker &&
        grant_.worker->alive()) {
      try {
        co_await finalize(std::move(finalize_params), {});
      } catch (const WorkerError& e) {
        log::info("library {}: finalize after the session ended: {}", library().label(), e.what());
      }
    }
    co_await release(std::move(reason));
  }

  asio::awaitable<void> release(std::string reason) override {
    co_await runtime::run_on(executor_, release_grant(grant_, std::move(reason)));
  }

 private:
  const config::Library& library() const { return grant_.serving ? *grant_.serving : grant_.pool->library(); }
  std::shared_ptr<const config::Library> settings() const override {
    return grant_.serving ? grant_.serving : grant_.pool->library_ptr();
  }
  const std::shared_ptr<Worker>& held() const {
    if (!grant_.worker) throw WorkerError(protocol::kWorkerFailed, "bug: a call through a released lease");
    return grant_.worker;
  }

  asio::awaitable<protocol::Message> finalize(std::string params, std::weak_ptr<CallObserver> observer) {
    co_return co_await call_worker(held(), protocol::kFinalizeLibrary, std::move(params), std::move(observer),
                                   fmt::format("robot/finalize_library of '{}'", library().label()), kFinalizeTimeout);
  }

  static asio::awaitable<void> stop(std::shared_ptr<Worker> worker, std::string reason) {
    co_await worker->stop(std::move(reason), false);
  }

  static asio::awaitable<void> release_grant(Grant& grant, std::string reason) {
    if (!grant.worker || !grant.pool) co_return;
    co_await grant.pool->release(grant, std::move(reason));
  }
  static asio::awaitable<void> release_owned(Grant grant, std::string reason) {
    co_await release_grant(grant, std::move(reason));
  }

  Grant grant_;
  asio::any_io_executor executor_;
  pid_t pid_ = grant_.worker ? grant_.worker->pid() : 0;
  // Read from the session's loop while the pools' loop may move grant_.worker out (a release): copies.
  std::string where_ = grant_.worker ? grant_.worker->where() : std::string("no worker");
  std::weak_ptr<Worker> watched_ = grant_.worker;  // not kept alive by the lease
  bool had_worker_ = grant_.worker != nullptr;
  std::string library_name_ = grant_.pool ? grant_.pool->library().label() : std::string();
};

}  // namespace

// The pool decides on its own loop; a dedicated worker it starts for the import lives on the session's.
// The pool is looked up there too: a reload replaces pools on that loop.
asio::awaitable<Grant> WorkerPools::acquire_named(std::shared_ptr<const config::Library> library,
                                                  bool without_arguments, asio::any_io_executor home) {
  const std::string& name = library->name;
  // A glob entry's import carries settings of its own (the imported name in its command, say), made again
  // from the pool in force each time round: a reload between two rounds changes them.
  const std::string imported = library->imported;
  // Time spent queued for capacity (not starting a worker), observed once whatever the outcome: a
  // queue_timeout is the case that matters most.
  struct Waited {
    LibraryMetrics& metrics;
    std::chrono::steady_clock::duration time{};
    ~Waited() { metrics.queue_wait_seconds.observe(time); }
  } waited{metrics_.library(name)};
  std::optional<std::chrono::steady_clock::time_point> deadline;  // set by the first pool: a reload does not restart it
  for (;;) {
    // pool() throws when a reload removed the library; an empty grant: a reload retired that pool while
    // the import waited, so it goes to the one in force now, with the time it has left.
    auto& p = pool(name);
    std::shared_ptr<const config::Library> serving;
    if (!imported.empty()) serving = std::make_shared<const config::Library>(config::concrete(p.library(), imported));
    if (!deadline) deadline = std::chrono::steady_clock::now() + p.library().queue_timeout;
    auto grant = co_await p.acquire(without_arguments, home, deadline, &waited.time, serving);
    if (grant.worker) {
      grant.serving = serving ? serving : p.library_ptr();
      co_return grant;
    }
  }
}

asio::awaitable<std::shared_ptr<Lease>> WorkerPools::acquire(const config::Library& library) {
  const auto home = co_await asio::this_coro::executor;
  auto grant = co_await runtime::run_on(executor_, acquire_named(std::make_shared<const config::Library>(library), false, home));
  co_return std::make_shared<PoolLease>(std::move(grant), executor_);
}

asio::awaitable<std::shared_ptr<Lease>> WorkerPools::acquire_without_arguments(const config::Library& library) {
  const auto home = co_await asio::this_coro::executor;
  auto grant = co_await runtime::run_on(executor_, acquire_named(std::make_shared<const config::Library>(library), true, home));
  co_return std::make_shared<PoolLease>(std::move(grant), executor_);
}

}  // namespace rjg::gateway::supervisor
