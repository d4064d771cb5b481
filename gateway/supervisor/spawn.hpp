// Starts one worker process: its own process group, only stdin/stdout/stderr inherited, a clean
// signal state, the gateway's environment minus service-manager variables plus the library's env.
#pragma once

#include "common/process/child.hpp"
#include "config/config.hpp"
#include "gateway/supervisor/reaper.hpp"

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/readable_pipe.hpp>
#include <boost/asio/writable_pipe.hpp>

#include <sys/types.h>

#include <functional>
#include <optional>
#include <string_view>
#include <utility>
#include <string>
#include <system_error>
#include <vector>

namespace rjg::gateway::supervisor {

struct SpawnedProcess {
  pid_t pid = -1;
  std::string executable;  // the resolved path that was executed
  boost::asio::writable_pipe stdin_pipe;
  boost::asio::readable_pipe stdout_pipe;
  boost::asio::readable_pipe stderr_pipe;
};

using process::ResolvedCommand;

// A descriptor closed when its owner goes.
class OwnedFd {
 public:
  OwnedFd() = default;
  explicit OwnedFd(int fd) : fd_(fd) {}
  OwnedFd(OwnedFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  OwnedFd& operator=(OwnedFd&& other) noexcept {
    if (this != &other) reset(std::exchange(other.fd_, -1));
    return *this;
  }
  ~OwnedFd() { reset(); }
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

// A worker a fork server made (fork_server.hpp): its pid, the gateway's ends of its pipes, and the fork
// window that keeps the reaper from losing it until Worker::start watches it.
struct ForkedProcess {
  pid_t pid = -1;
  std::string executable;  // what the logs call it: the template's program and pid
  OwnedFd stdin_write, stdout_read, stderr_read;
  ChildReaper::ForkWindow window;
};

// The forked process's pipes on `executor`'s loop, as spawn_worker returns a started one's. Throws
// SpawnError when a pipe cannot join the loop.
struct SpawnedProcess;
SpawnedProcess adopt_forked(boost::asio::any_io_executor executor, ForkedProcess& forked);

// Reads a child's output pipe to its end, handing each line (without its '\n') to emit; a line longer than
// max_line is handed over in pieces of that size, so a program that never writes '\n' cannot make the
// gateway hold more. A worker's stderr and a fork server's log go through it.
boost::asio::awaitable<void> read_lines(boost::asio::readable_pipe& pipe, std::size_t max_line,
                                        const std::function<void(std::string_view)>& emit);

// What a worker of `library` starts with, shared by plain starts and fork servers: the gateway's
// environment minus service-manager variables plus the library's env; the library's rlimits as
// start_child applies them; for cpu_affinity = "one", the next CPU in turn (-1: unbound).
std::vector<std::string> worker_environment(const config::Library& library);
std::vector<std::pair<int, std::uint64_t>> worker_limits(const config::ResourceLimits& limits);
int worker_cpu(const config::Library& library);

// Finds command[0] as a worker start does, and as --check-config does (one function for both, so the
// check and the start agree): process::resolve_command in the gateway's own PATH (not the library's
// env), then next to the gateway binary.
ResolvedCommand resolve_command(const std::string& command0);

// A worker that cannot be started: what() is the whole message, without the error code's own text
// appended (which would say "No such file or directory" of a directory).
class SpawnError : public std::system_error {
 public:
  SpawnError(std::error_code code, std::string message) : std::system_error(code), message_(std::move(message)) {}
  const char* what() const noexcept override { return message_.c_str(); }

 private:
  std::string message_;
};

// Throws SpawnError naming the command when it cannot be started (missing, not executable, bad cwd).
// The caller owns the pid from then on: it must watch it with the ChildReaper.
SpawnedProcess spawn_worker(boost::asio::any_io_executor executor, const config::Library& library);

// --check-config: each library whose command cannot be resolved, as "FILE:LINE: library 'NAME': command
// ... what is wrong". Empty when all can.
std::vector<std::string> check_libraries(const config::Config& config);

}  // namespace rjg::gateway::supervisor
