// Starts one worker process: its own process group, only stdin/stdout/stderr inherited, a clean
// signal state, the gateway's environment minus service-manager variables plus the library's env.
#pragma once

#include "common/process/child.hpp"
#include "config/config.hpp"

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/readable_pipe.hpp>
#include <boost/asio/writable_pipe.hpp>

#include <sys/types.h>

#include <optional>
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
