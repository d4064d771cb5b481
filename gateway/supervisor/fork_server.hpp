// Fork servers (fork_server = true): one template process per library pool that has imported the
// reference Python server, Robot Framework and the library once and forks a worker per request
// (workers/fork_server/robot_jsonrpc_fork_server.py, its wire format at the top of
// robot_jsonrpc_fork_control.py). A forked worker is then an ordinary Worker: the gateway's child (the
// template forks twice, the gateway is a child subreaper), in its own process group, with the
// library's rlimits, reaped and stopped like any other; nothing of one session reaches another.
//
// The template is supervised here: started with the pool, started again after a back-off when it dies
// (the workers it forked live on), stopped when a reload retires the pool or the gateway stops. While it
// is not ready, workers start the plain way: fork() answers nothing and the pool spawns.
#pragma once

#include "common/runtime/async_event.hpp"
#include "config/config.hpp"
#include "gateway/supervisor/metrics.hpp"
#include "gateway/supervisor/reaper.hpp"
#include "gateway/supervisor/spawn.hpp"

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/readable_pipe.hpp>
#include <boost/asio/steady_timer.hpp>

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

namespace rjg::gateway::supervisor {

namespace asio = boost::asio;

// Where the template program is: next to the gateway's binary (a build tree: bin/fork_server/), else
// where the package installs it (/usr/share/robot-jsonrpc-gateway/fork_server/). The problem when
// neither holds it.
struct TemplateProgram {
  std::optional<std::string> path;
  std::string problem;
};
TemplateProgram find_template_program();

class ForkServer : public std::enable_shared_from_this<ForkServer> {
 public:
  enum class State { starting, ready, down, stopped };

  // On `executor` (the pools' loop), where every member is called. Call start() once made.
  ForkServer(asio::any_io_executor executor, std::shared_ptr<const config::Library> library, ChildReaper& reaper,
             LibraryMetrics& metrics);
  ~ForkServer();
  ForkServer(const ForkServer&) = delete;
  ForkServer& operator=(const ForkServer&) = delete;

  // Starts the template (again after each death, once its back-off has passed).
  void start();
  // For good: closes the control socket (the template then exits), SIGKILL after shutdown_grace.
  // Workers it forked live on.
  void stop();
  // After stop(): until the template has ended and been reaped (or the deadline).
  asio::awaitable<void> wait_gone(std::chrono::steady_clock::time_point deadline);

  // Until a template that is starting is ready or down, at most the library's startup_timeout (a plain
  // start would take about as long). The pool calls it before it takes a turn among the starts.
  asio::awaitable<void> settle();
  // A worker forked for `settings` (the library, or a glob entry's view of it: its rlimits and
  // cpu_affinity), or nothing when the template cannot make one now (not ready, dead, or it refused:
  // logged): the caller then starts the worker the plain way. Waits only for the template's answer.
  asio::awaitable<std::optional<ForkedProcess>> fork(const config::Library& settings);

  struct View {
    State state = State::starting;
    pid_t pid = 0;            // the template's, while it runs
    std::string problem;      // why it is down: "ended with exit code 3", ...
    std::uint64_t starts = 0;  // templates started
    std::uint64_t forks = 0;   // workers forked
  };
  View view() const;
  static const char* state_name(State state);

 private:
  struct Pending;

  void launch();
  asio::awaitable<void> read_control(std::shared_ptr<asio::posix::stream_descriptor> control, pid_t pid);
  asio::awaitable<void> read_log(std::shared_ptr<asio::readable_pipe> log, pid_t pid);
  asio::awaitable<void> watch_ready(pid_t pid);
  void handle_packet(std::string_view packet, pid_t pid);
  void on_exit(pid_t pid, ExitStatus status);
  // The template is of no more use (it died, it broke the wire format, it stopped answering): forget it,
  // fail what waits for it, and try again after the back-off unless stopped.
  void lose(pid_t pid, std::string problem);
  void fail_pending(const std::string& why);
  asio::awaitable<bool> send_request(int control, const std::string& text, const int (&fds)[3]);

  asio::any_io_executor executor_;
  std::shared_ptr<const config::Library> library_;
  ChildReaper& reaper_;
  LibraryMetrics& metrics_;
  std::string tag_;  // "fork server of library 'X'"

  State state_ = State::down;
  pid_t pid_ = 0;
  std::shared_ptr<asio::posix::stream_descriptor> control_;
  std::shared_ptr<runtime::AsyncEvent> settled_;  // set when the template is ready or down
  runtime::AsyncEvent gone_;                      // set while no template of a stopped server runs
  std::string problem_;
  std::size_t failures_ = 0;  // in a row, since one was last ready for a while (kHealthyUptime)
  std::chrono::steady_clock::time_point ready_at_{};
  bool warned_ = false;       // the fallback to plain starts was said (once per run of failures)
  std::unique_ptr<asio::steady_timer> retry_;
  std::unique_ptr<asio::steady_timer> kill_timer_;
  std::uint64_t next_id_ = 1;
  std::map<std::uint64_t, std::shared_ptr<Pending>> pending_;
  std::uint64_t starts_ = 0;
  std::uint64_t forks_ = 0;
};

}  // namespace rjg::gateway::supervisor
