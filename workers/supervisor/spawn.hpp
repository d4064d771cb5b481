// Starts one worker process: its own process group, only stdin/stdout/stderr inherited, a clean
// signal state, the gateway's environment minus service-manager variables plus the library's env.
#pragma once

#include "config/config.hpp"

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/readable_pipe.hpp>
#include <boost/asio/writable_pipe.hpp>

#include <sys/types.h>

#include <optional>
#include <string>

namespace rjg::workers {

struct SpawnedProcess {
  pid_t pid = -1;
  std::string executable;  // the resolved path that was executed
  boost::asio::writable_pipe stdin_pipe;
  boost::asio::readable_pipe stdout_pipe;
  boost::asio::readable_pipe stderr_pipe;
};

// Finds command[0]: as given when it holds a slash, else in PATH, else next to the gateway binary.
std::optional<std::string> resolve_executable(const std::string& command0);

// Throws std::system_error naming the command when it cannot be started (missing, not executable,
// bad cwd). The caller owns the pid from then on: it must watch it with the ChildReaper.
SpawnedProcess spawn_worker(boost::asio::any_io_executor executor, const config::Library& library);

}  // namespace rjg::workers
