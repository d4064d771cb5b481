// How a Worker ends, and what it sends besides answers: the stdout reader (answers go to the call in
// flight, robot/log and robot/trace are relayed to that call's observer, stray bytes are skipped), the
// stderr reader (logged, its tail kept for error messages), death detection (the end of stdout and the
// reaper's exit status together make a death, and every waiting call fails with its reason), and the
// graceful-then-forceful stop. Starting a worker and the call path: worker.cpp.
#include "gateway/supervisor/worker.hpp"

#include "common/log.hpp"
#include "common/protocol/protocol.hpp"
#include "common/runtime/loops.hpp"
#include "gateway/supervisor/durations.hpp"

#include <boost/asio/co_spawn.hpp>

#include <fmt/format.h>

#include <signal.h>
#include <unistd.h>

#include <cstdio>

#include <chrono>
#include <vector>

namespace rjg::gateway::supervisor {
using namespace std::chrono_literals;

namespace {
constexpr std::size_t kStderrTailLines = 20;
constexpr std::size_t kStderrLineMax = 4096;

std::string_view state_name(Worker::State s) {
  switch (s) {
    case Worker::State::starting: return "starting";
    case Worker::State::idle: return "idle";
    case Worker::State::busy: return "busy";
    case Worker::State::stopping: return "stopping";
    case Worker::State::exited: return "exited";
  }
  return "?";
}
}  // namespace

asio::awaitable<void> Worker::read_stdout() {
  channel_.on_stray_bytes = [this](std::string_view skipped) {
    log::warn("{}: skipped {} bytes on stdout that are not a protocol frame: '{}'", tag_,
              skipped.size(), log::printable(skipped));
  };
  std::string broken;
  for (;;) {
    runtime::Incoming in = co_await channel_.read();
    if (in.kind == runtime::Incoming::Kind::message) {
      co_await handle(std::move(*in.message));
    } else if (in.kind == runtime::Incoming::Kind::invalid) {
      log::warn("{}: skipped an invalid message ({}): '{}'", tag_, in.problem->message,
                log::printable(in.body));
    } else if (in.kind == runtime::Incoming::Kind::framing_error) {
      broken = std::move(in.error);
      break;
    } else {
      break;  // end of stream, read error, or the pipe was closed
    }
  }
  stdout_closed_ = true;
  if (is_upstream()) {
    // No process: the connection's end is the upstream's end, for this import.
    broke_protocol_ = !broken.empty();
    if (broke_protocol_) log::error("{}: unrecoverable framing error ({}); closing the connection", tag_, broken);
    else if (!stopping_) log::warn("{}: the upstream closed the connection (state {})", tag_, state_name(state_.load()));
    died_busy_ = !stopping_ && state_ == State::busy;
    stopped_before_exit_ = stopping_;
    boost::system::error_code ignored;
    channel_.stream().in().close(ignored);
    if (!broken.empty())
      death_ = fmt::format("{} broke the protocol ({}); the connection was closed", subject(), broken);
    else if (stopping_)
      death_ = fmt::format("{} was disconnected ({})", subject(), stop_reason_);
    else
      death_ = fmt::format("{} closed the connection", subject());
    state_ = State::exited;
    exit_status_ = ExitStatus{};
    alive_.store(false, std::memory_order_release);
    exited_.set();
    fail_everything();
    stdout_done_.set();
    co_return;
  }
  if (!broken.empty()) {
    broke_protocol_ = true;
    log::error("{}: unrecoverable framing error on stdout ({}); killing it", tag_, broken);
    signal_group(SIGKILL);
  }
  // The process normally ends with its stdout; make sure, then report why it is gone.
  if (!co_await exited_.wait_for(2s)) {
    log::warn("{}: closed stdout but is still running; killing it", tag_);
    if (!stopping_) broke_protocol_ = true;  // the SIGKILL below is the gateway's, for a fault of the worker
    signal_group(SIGKILL);
    co_await exited_.wait_for(10s);
  }
  co_await stderr_done_.wait_for(500ms);
  std::string how = exit_status_ ? exit_status_->describe() : std::string("an unknown status");
  if (!broken.empty())
    death_ = fmt::format("{} broke the protocol ({}) and was killed", subject(), broken);
  else if (stopping_)
    death_ = fmt::format("{} was stopped ({}) and ended with {}", subject(), stop_reason_, how);
  else
    death_ = fmt::format("{} died with {}", subject(), how);
  alive_.store(false, std::memory_order_release);
  fail_everything();
  stdout_done_.set();
}

void Worker::fail_everything() {
  channel_.close_writer();
  // No call will need it again: a pending deadline wait would keep the loop busy until it passed.
  deadline_timer_.cancel();
  deadline_armed_.reset();
  // The call in flight gets its error answer now (its caller runs before this returns); queued calls
  // each fail fast when their turn comes.
  if (in_flight_ && !in_flight_->reply) in_flight_->done.notify();
}

asio::awaitable<void> Worker::handle(protocol::Message message) {
  switch (message.kind) {
    case protocol::Message::Kind::notification: {
      auto method = message.method();
      if (method != protocol::kLog && method != protocol::kTrace) {
        log::debug("{}: ignored notification {}", tag_, method);
        co_return;
      }
      std::shared_ptr<CallObserver> observer;
      if (in_flight_) observer = in_flight_->observer.lock();
      if (!observer) {
        log::info("{}: log outside any call: {}", tag_,
                  log::printable(message.params_text()));
        co_return;
      }
      observer->relay_notification(message.text());
      co_await observer->wait_for_room();
      co_return;
    }
    case protocol::Message::Kind::request:
      // Workers have nothing to ask the gateway; answer so the worker does not wait forever.
      channel_.send(protocol::make_error_raw(message.id_text(), protocol::kMethodNotFound,
                                                fmt::format("The gateway does not handle '{}'", message.method())));
      co_return;
    case protocol::Message::Kind::response:
    case protocol::Message::Kind::error_response: {
      const auto id = message.id_text();
      // An error with a null id is a worker that could not read our request at all: it belongs to the
      // call in flight (one at a time), which must not wait forever for another answer.
      const bool ours = (in_flight_ && id == std::to_string(in_flight_->id)) ||
                        (id == "null" && message.kind == protocol::Message::Kind::error_response);
      if (in_flight_ && ours && !in_flight_->reply && !in_flight_->done.notified()) {
        in_flight_->reply = std::move(message);
        // Last: the caller resumes inside notify() and carries the answer on to its client.
        in_flight_->done.notify();
      } else {
        log::warn("{}: dropped a response with unexpected id {} (late answer to a call that timed out?)",
                  tag_, id);
      }
      co_return;
    }
  }
}

asio::awaitable<void> Worker::read_stderr() {
  co_await read_lines(stderr_, kStderrLineMax, [this](std::string_view line) {
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    log::info("{} stderr: {}", tag_, log::printable(line, kStderrLineMax));
    stderr_tail_.emplace_back(line.substr(0, 500));
    if (stderr_tail_.size() > kStderrTailLines) stderr_tail_.pop_front();
  });
  stderr_done_.set();
}

std::string Worker::stderr_tail() const {
  std::string out;
  for (const auto& line : stderr_tail_) {
    if (!out.empty()) out += '\n';
    out += "  " + line;
  }
  return out;
}

void Worker::on_exit(ExitStatus status) {
  exit_status_ = status;
  died_busy_ = !stopping_ && state_ == State::busy;
  stopped_before_exit_ = stopping_;
  if (stopping_) log::info("{}: exited with {}", tag_, status.describe());
  else log::warn("{}: exited unexpectedly with {} (state {})", tag_, status.describe(),
                 state_name(state_.load()));
  state_ = State::exited;
  exited_.set();
  // Anything it started in its group goes with it: no orphans hold our pipes open.
  signal_group(SIGKILL);
  if (!stdout_closed_) {
    // Normally EOF follows at once. If something outside the group still holds the pipe, stop waiting.
    asio::co_spawn(
        executor_,
        [self = shared_from_this()]() -> asio::awaitable<void> {
          if (co_await self->stdout_done_.wait_for(2s)) co_return;
          log::warn("{}: stdout still open after exit; closing it", self->tag_);
          boost::system::error_code ignored;
          self->channel_.stream().in().close(ignored);
          self->stderr_.close(ignored);
        },
        runtime::log_exceptions("worker exit watch"));
  }
}

asio::awaitable<void> Worker::stop(std::string reason, bool polite) {
  auto self = shared_from_this();
  if (stopping_) {
    // An upstream's end is its reader's, which may be parked on a slow client: bounded, as the first stop is.
    if (is_upstream()) co_await exited_.wait_for(library_.shutdown_grace + 3s);
    else co_await exited_.wait();
    co_return;
  }
  stopping_ = true;
  stop_reason_ = reason;
  stop_published_.store(true, std::memory_order_release);
  if (state_ != State::exited) set_state(State::stopping, reason);
  const auto grace = library_.shutdown_grace;
  if (is_upstream()) {
    // robot/shutdown would end the upstream server for all its clients: only this connection ends (the
    // lease has finalized the import already where that was possible).
    channel_.close_writer();
    boost::system::error_code ignored;
    channel_.stream().in().shutdown(asio::socket_base::shutdown_both, ignored);
    co_await stdout_done_.wait_for(grace);
    if (!stdout_done_.is_set()) channel_.stream().in().close(ignored);
    co_await stdout_done_.wait_for(3s);
    co_return;
  }

  if (polite && alive() && !busy_) {
    try {
      co_await request(protocol::kShutdown, "{}", {}, "robot/shutdown", grace);
    } catch (const WorkerError& e) {
      log::info("{}: no answer to robot/shutdown: {}", tag_, e.what());
    }
    if (alive()) channel_.send(protocol::make_notification_raw(protocol::kExit, "{}"));
  }
  channel_.close_writer();
  // A busy worker cannot hear robot/shutdown before its keyword ends: ask the process instead.
  const bool terminated = !polite || busy_;
  if (!hurried_.empty()) kill_hurried();  // an import already waits for its place: no grace
  else if (terminated) signal_group(SIGTERM);

  if (!co_await exited_.wait_for(grace)) {
    bool gone = false;
    if (!terminated) {
      log::warn("{}: still running {} after stop; sending SIGTERM", tag_,
                seconds_text(grace));
      signal_group(SIGTERM);
      gone = co_await exited_.wait_for(grace);
    }
    if (!gone) {
      log::warn("{}: ignored SIGTERM for {}; sending SIGKILL", tag_, seconds_text(grace));
      signal_group(SIGKILL);
      if (!co_await exited_.wait_for(10s)) log::error("{}: survived SIGKILL?", tag_);
    }
  }
  co_await stdout_done_.wait_for(3s);
}

std::uint64_t Worker::resident_bytes() const {
  if (is_upstream()) return 0;
  // /proc/PID/statm: size resident shared text lib data dt, in pages.
  std::FILE* f = std::fopen(fmt::format("/proc/{}/statm", pid_).c_str(), "r");
  if (!f) return 0;
  unsigned long long size = 0, resident = 0;
  int n = std::fscanf(f, "%llu %llu", &size, &resident);
  std::fclose(f);
  return n == 2 ? resident * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE)) : 0;
}

void Worker::kill_now() {
  if (!exit_status_) signal_group(SIGKILL);
}

void Worker::hurry(std::string why) {
  if (is_upstream() || exit_status_ || !hurried_.empty()) return;
  hurried_ = std::move(why);
  if (stopping_) kill_hurried();  // else stop() does it when it begins
}

void Worker::kill_hurried() {
  log::warn("{}: SIGKILL now, instead of after its shutdown_grace of {}: it was stopped because {}, and {}", tag_,
            seconds_text(library_.shutdown_grace), stop_reason_, hurried_);
  signal_group(SIGKILL);
}

void Worker::signal_group(int sig) {
  if (pid_ <= 0) return;
  // The worker leads its own group (setpgid in the child); the group also holds what it started.
  if (::killpg(pid_, sig) != 0 && !exit_status_) ::kill(pid_, sig);
}

void Worker::set_state(State s, std::string_view why) {
  if (s == state_) return;
  log::debug("{}: {} -> {} ({})", tag_, state_name(state_.load()), state_name(s), why);
  if (state_ == State::exited) return;
  state_ = s;
}

}  // namespace rjg::gateway::supervisor
