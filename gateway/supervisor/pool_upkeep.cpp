// What keeps a library's pool in shape between imports: prewarming (with the import ahead of any
// session, prewarm_import), recycling shared workers (max_keywords, max_age, max_rss: drain, then stop
// after the last import), and the crash backoff (failed starts and early deaths in a row space out the
// next starts). The rest of LibraryPool: pool.cpp.
#include "gateway/supervisor/pool.hpp"

#include "common/log.hpp"
#include "common/protocol/json_text.hpp"
#include "common/protocol/protocol.hpp"
#include "common/runtime/loops.hpp"
#include "gateway/supervisor/durations.hpp"

#include <boost/asio/co_spawn.hpp>

#include <fmt/format.h>

#include <algorithm>

namespace rjg::gateway::supervisor {
using namespace std::chrono_literals;
using clock = std::chrono::steady_clock;

namespace {
// Between the first prewarm starts of successive libraries.
constexpr auto kPrewarmStagger = 200ms;
// Crash backoff: from the second failure in a row, 1s, 2s, 4s ... at most 60s between starts.
constexpr auto kBackoffBase = 1s;
constexpr auto kBackoffMax = 60s;

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
}  // namespace

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
  // The template first: prewarmed workers are forks too (a start waits for the template to be ready).
  if (fork_server_) fork_server_->start();
  asio::co_spawn(owner_.executor_, prewarm_loop(), runtime::log_exceptions("prewarm " + library_->name));
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

}  // namespace rjg::gateway::supervisor
