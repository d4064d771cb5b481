// One worker process and the protocol channel to it: spawn, handshake, calls one at a time with log
// relay to the caller, stray-output tolerance, death detection, and a graceful-then-forceful stop.
#pragma once

#include "common/runtime/async_event.hpp"
#include "common/protocol/message.hpp"
#include "common/runtime/fd_stream.hpp"
#include "common/runtime/handoff.hpp"
#include "common/runtime/message_stream.hpp"
#include "config/config.hpp"
#include "gateway/supervisor/reaper.hpp"
#include "gateway/supervisor/spawn.hpp"

#include <boost/asio/awaitable.hpp>
#include <boost/asio/readable_pipe.hpp>
#include <boost/asio/writable_pipe.hpp>

#include <atomic>
#include <deque>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

namespace rjg::gateway::supervisor {

namespace asio = boost::asio;
namespace json = boost::json;

// Receives the notifications a worker sends while one of this observer's calls is in flight
// (robot/log carries no id: a worker runs one call at a time, so the call in flight owns it).
class CallObserver {
 public:
  virtual ~CallObserver() = default;
  // The notification's text, unchanged.
  virtual void relay_notification(std::string_view json_text) = 0;
  // Awaited after each relayed notification: reading from the worker pauses while the client is slow.
  virtual asio::awaitable<void> wait_for_room() = 0;
};

// A failure of the worker rather than of the keyword: becomes a JSON-RPC error answer.
class WorkerError : public std::runtime_error {
 public:
  WorkerError(int code, std::string message, json::object data = {})
      : std::runtime_error(std::move(message)), code(code), data(std::move(data)) {}
  int code;
  json::object data;
};

struct WorkerOptions {
  protocol::FramingLimits framing;
  std::string gateway_version;
  // Where a worker's large answers (kOffloadFrameBytes and more) are classified, off the event loop.
  std::optional<asio::any_io_executor> offload;
};

class Worker : public std::enable_shared_from_this<Worker> {
 public:
  enum class State { starting, idle, busy, stopping, exited };

  // Spawns the library's worker and completes the initialize/initialized handshake; for an upstream
  // library, connects to the upstream server instead (connect_timeout) and does the same handshake there:
  // the connection then behaves as a worker does, with no process behind it.
  // forked: a worker a fork server already made (fork_server.hpp), adopted instead of spawning one.
  // Throws WorkerError naming the library, the pid (or upstream address) and the reason (with its stderr tail).
  static asio::awaitable<std::shared_ptr<Worker>> start(asio::any_io_executor executor,
                                                        const config::Library& library, ChildReaper& reaper,
                                                        const WorkerOptions& options,
                                                        std::optional<ForkedProcess> forked = std::nullopt);

  ~Worker();

  // Sends a request (params as a JSON text, passed on unchanged) and waits for its answer, one call
  // at a time (others queue in order). `what` names the call in error messages ("keyword 'Sleep'").
  // Returns the worker's response or error response; throws WorkerError if the worker dies, is
  // stopped, or exceeds the timeout.
  asio::awaitable<protocol::Message> call(std::string_view method, std::string params, std::weak_ptr<CallObserver> observer,
                                std::string what, std::optional<config::Duration> timeout = std::nullopt);

  // Ends the worker: robot/shutdown and robot/exit when it is idle and `polite`, then closing stdin;
  // SIGTERM to its process group after the grace period, SIGKILL after another. Completes once the
  // process has been reaped. Safe to call more than once.
  asio::awaitable<void> stop(std::string reason, bool polite = true);
  // Last resort (gateway teardown): SIGKILL to the whole group now.
  void kill_now();
  // A worker being stopped because it is hung (its keyword overran keyword_timeout) whose place under a
  // cap an import waits for: SIGKILL to its group now rather than after its shutdown_grace, logged with
  // `why` (who waits). Called before stop(), it makes stop() send SIGKILL instead of SIGTERM. Not for an
  // upstream connection, whose stop does not wait for a process.
  void hurry(std::string why);

  // Completes once the worker's death is established (see alive()).
  asio::awaitable<void> wait_gone() { co_await stdout_done_.wait(); }
  // True when the gateway ended it (stop()); false when it died by itself or broke the protocol.
  bool stopped_on_purpose() const { return stopping_; }
  // True when it died by itself while running a call (a keyword that crashed it).
  bool died_busy() const { return died_busy_; }
  // After wait_gone(): the gateway had begun stopping it before it exited (a stop() that came after
  // its death does not count), and it broke the protocol (the gateway killed it for that: a framing
  // fault, or stdout closed while the process went on).
  bool stopped_before_exit() const { return stopped_before_exit_; }
  bool broke_protocol() const { return broke_protocol_; }
  // Resident memory of the worker process (not its children); 0 if unknown.
  std::uint64_t resident_bytes() const;

  // 0 for an upstream connection.
  pid_t pid() const { return pid_; }
  // "pid 1234", or "upstream tcp://bench-7:8270" for a connection to an upstream server: for messages.
  const std::string& where() const { return where_; }
  bool is_upstream() const { return pid_ == 0; }
  // The event loop it belongs to: every call, stop and wait is made there (see common/runtime/loops.hpp).
  // The state queries below may be read from any loop; the rest only on this one.
  const asio::any_io_executor& executor() const { return executor_; }
  // The library it serves: the imported name when a glob entry started it.
  const std::string& library() const { return library_.label(); }
  // server_info.name of its robot/initialize answer ("" when absent): the reference server calls itself
  // "RobotJsonRpcRemoteServer", and it evaluates argument strings (see gateway/session/argument_guard.hpp).
  const std::string& server_name() const { return server_name_; }
  State state() const { return state_.load(std::memory_order_relaxed); }
  // Until its death has been established (stdout closed and exit status collected): a call made
  // meanwhile is failed by that same step, with the full reason.
  bool alive() const { return alive_.load(std::memory_order_acquire); }
  // Why the worker is gone, for the answers to later calls; empty while it lives. On another loop: only
  // after wait_gone() completed.
  const std::string& death() const { return death_; }
  // After wait_gone(), on its loop: why the gateway stopped it ("" if it did not), and how it ended.
  const std::string& stop_reason() const { return stop_reason_; }
  // The same from any loop, at once: "" until stop() was called. (A worker the gateway stopped has
  // exited before its death is established: a call in that window says why it was stopped.)
  std::string_view stopped_because() const {
    return stop_published_.load(std::memory_order_acquire) ? std::string_view(stop_reason_) : std::string_view();
  }
  std::optional<ExitStatus> exit_status() const { return exit_status_; }
  // robot/run_keyword calls sent to it so far (any loop).
  std::uint64_t keywords_run() const { return keywords_run_.load(std::memory_order_relaxed); }
  std::string stderr_tail() const;

  Worker(asio::any_io_executor executor, const config::Library& library, SpawnedProcess process,
         const WorkerOptions& options);
  // An upstream: a connected socket (taken over) to `address`.
  Worker(asio::any_io_executor executor, const config::Library& library, int socket, std::string address,
         const WorkerOptions& options);

 private:
  struct InFlight {
    InFlight(std::int64_t id, std::weak_ptr<CallObserver> observer) : id(id), observer(std::move(observer)) {}
    std::int64_t id;
    std::weak_ptr<CallObserver> observer;
    std::optional<runtime::AsyncEvent::clock::time_point> deadline;  // the call's timeout, if it has one
    std::optional<protocol::Message> reply;
    bool timed_out = false;
    // Notified once: the answer arrived, the deadline passed, or the worker is gone. The caller then
    // resumes inside the notifier (see handoff.hpp), so the answer costs no extra pass of the loop.
    runtime::Handoff done;
  };

  static asio::awaitable<std::shared_ptr<Worker>> connect(asio::any_io_executor executor,
                                                          const config::Library& library, const WorkerOptions& options);
  // Starts the readers and the writer, then the initialize/initialized handshake.
  static asio::awaitable<void> begin(std::shared_ptr<Worker> worker);
  // The worker (or upstream) of library 'X' (pid N): the subject of most messages.
  std::string subject() const;
  std::string subject_lower() const;
  asio::awaitable<protocol::Message> request(std::string_view method, std::string params, std::weak_ptr<CallObserver> observer,
                                   std::string what, std::optional<config::Duration> timeout);
  std::string unavailable(const std::string& what) const;
  asio::awaitable<void> read_stdout();
  asio::awaitable<void> read_stderr();
  asio::awaitable<void> handle(protocol::Message message);
  asio::awaitable<void> acquire();
  void release();
  void on_exit(ExitStatus status);
  void fail_everything();
  void set_state(State s, std::string_view why);
  // Calls with a timeout share one timer that is never cancelled: when it fires it times out the call
  // in flight if that call's deadline has passed, and otherwise waits again for that call's deadline.
  // An answer in time so costs nothing (a cancelled timer is a posted handler, one more loop pass).
  void watch_deadline(runtime::AsyncEvent::clock::time_point deadline);
  void on_deadline_timer();
  json::object error_data() const;
  void signal_group(int sig);
  void kill_hurried();

  asio::any_io_executor executor_;
  config::Library library_;
  WorkerOptions options_;
  pid_t pid_;
  std::string executable_;  // the program, or the upstream's address
  std::string where_;
  std::string tag_;  // "worker Calc[1234]", "upstream Calc[tcp://bench:8270]": starts its log lines
  std::string server_name_;
  // The protocol channel: the worker's stdout (read) and stdin (written) as one message stream.
  runtime::MessageStream<runtime::DuplexStream<runtime::FdStream, runtime::FdStream>> channel_;
  asio::readable_pipe stderr_;

  std::atomic<State> state_ = State::starting;
  std::atomic<bool> alive_ = true;  // death_ is empty
  std::atomic<std::uint64_t> keywords_run_ = 0;
  bool stopped_before_exit_ = false;
  bool broke_protocol_ = false;
  std::int64_t next_id_ = 1;
  std::shared_ptr<InFlight> in_flight_;
  asio::steady_timer deadline_timer_;
  std::optional<runtime::AsyncEvent::clock::time_point> deadline_armed_;  // when the timer fires, while it runs
  std::string current_call_;  // "keyword 'Sleep'", for messages about a death mid-call
  bool busy_ = false;
  std::deque<std::shared_ptr<runtime::AsyncEvent>> waiting_;
  bool stopping_ = false;
  std::string stop_reason_;  // written once, before stop_published_
  std::atomic<bool> stop_published_ = false;
  std::string hurried_;  // why hurry() was called; "" if it was not
  bool died_busy_ = false;
  bool stdout_closed_ = false;
  std::optional<ExitStatus> exit_status_;
  std::string death_;
  runtime::AsyncEvent exited_;
  runtime::AsyncEvent stdout_done_;
  runtime::AsyncEvent stderr_done_;
  std::deque<std::string> stderr_tail_;
};

}  // namespace rjg::gateway::supervisor
