#include "workers/supervisor/spawn.hpp"

#include "common/process/child.hpp"

// Boost 1.81 relies on Boost.Filesystem to pull these in; with BOOST_PROCESS_USE_STD_FS they are missing.
#include <boost/optional.hpp>
#include <boost/type_traits.hpp>

#include <boost/asio/io_context.hpp>
#include <boost/process/v2/process.hpp>
#include <boost/process/v2/stdio.hpp>

#include <fmt/format.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <mutex>
#include <system_error>
#include <vector>

extern char** environ;

namespace rjg::workers {
namespace bp = boost::process::v2;

namespace {

// Variables that describe the gateway's own service-manager handshake must not leak into workers:
// a worker that saw LISTEN_FDS or NOTIFY_SOCKET could act on sockets that are not its own.
bool inherited(std::string_view entry) {
  for (std::string_view name : {"LISTEN_FDS=", "LISTEN_PID=", "LISTEN_FDNAMES=", "NOTIFY_SOCKET=", "WATCHDOG_USEC=",
                                "WATCHDOG_PID="}) {
    if (entry.substr(0, name.size()) == name) return false;
  }
  return true;
}

std::vector<std::string> build_environment(const config::Library& library) {
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) {
    std::string_view entry(*e);
    if (!inherited(entry)) continue;
    auto eq = entry.find('=');
    if (eq != std::string_view::npos && library.env.count(std::string(entry.substr(0, eq)))) continue;
    env.emplace_back(entry);
  }
  for (const auto& [key, value] : library.env) env.push_back(key + "=" + value);
  return env;
}

// Runs in the child between fork and exec: new process group, default signal state, working directory.
struct WorkerSetup {
  std::vector<const char*> envp;
  const char* cwd = nullptr;
  config::ResourceLimits limits;

  static int set_limit(int resource, std::uint64_t value, bool set = true) {
    if (!set) return 0;
    struct rlimit rl {};
    rl.rlim_cur = rl.rlim_max = static_cast<rlim_t>(value);
    return ::setrlimit(resource, &rl);
  }

  bp::error_code on_setup(bp::posix::default_launcher& launcher, const bp::filesystem::path&, const char* const*) {
    launcher.env = envp.data();
    return {};
  }

  bp::error_code on_exec_setup(bp::posix::default_launcher& launcher, const bp::filesystem::path&,
                               const char* const*) {
    // Its own group, so the gateway can signal the worker and everything it started at once, and a
    // Ctrl-C on the gateway's terminal is not delivered to workers behind the gateway's back.
    if (::setpgid(0, 0) != 0) return {errno, bp::system_category()};
    // Ignored signals (the gateway ignores SIGPIPE) and the mask survive exec; give the worker defaults.
    process::default_signals();
    // Only stdin, stdout and stderr go to the worker (and the launcher's exec-error pipe, close-on-exec).
    // Boost 1.81's own close_all skips every descriptor below the highest one it keeps, so another
    // worker's pipes or a client's socket would leak into this worker; close them here instead.
    int kept = 2;
    for (;;) {
      int next = INT_MAX;
      for (int fd : launcher.fd_whitelist)
        if (fd > kept && fd < next) next = fd;
      process::close_fds(static_cast<unsigned>(kept) + 1, next == INT_MAX ? ~0u : static_cast<unsigned>(next) - 1);
      if (next == INT_MAX) break;
      kept = next;
    }
    if (cwd && ::chdir(cwd) != 0) return {errno, bp::system_category()};
    // Limits apply to the worker and what it starts; a failure here fails the start, not the gateway.
    // 0 means "not set", except for core_size, where 0 (no core dumps) is the usual wish.
    if (set_limit(RLIMIT_AS, limits.address_space, limits.address_space != 0) ||
        set_limit(RLIMIT_NOFILE, limits.open_files, limits.open_files != 0) ||
        set_limit(RLIMIT_CPU, limits.cpu_seconds, limits.cpu_seconds != 0) ||
        set_limit(RLIMIT_NPROC, limits.processes, limits.processes != 0) ||
        set_limit(RLIMIT_CORE, limits.core_size, limits.core_size_set))
      return {errno, bp::system_category()};
    return {};
  }
};

}  // namespace

ResolvedCommand resolve_command(const std::string& command0) {
  static const std::string self = process::self_directory();
  return process::resolve_command(command0, self, "the gateway");
}

std::vector<std::string> check_libraries(const config::Config& config) {
  std::vector<std::string> problems;
  for (const auto& library : config.libraries) {
    const std::string where = fmt::format("{}:{}: library '{}'", config.path, library.source_line, library.name);
    // The loader has already refused an empty command and a cwd that is not a directory.
    // An upstream has no command; a program that depends on the imported name is resolved at each start.
    if (library.command.empty() || library.command.front().find("{library}") != std::string::npos) continue;
    auto resolved = resolve_command(library.command.front());
    if (!resolved.path) problems.push_back(fmt::format("{}: command {}", where, resolved.problem));
  }
  return problems;
}

SpawnedProcess spawn_worker(boost::asio::any_io_executor executor, const config::Library& library) {
  const std::string& command0 = library.command.at(0);
  auto resolved = resolve_command(command0);
  if (!resolved.path)
    throw SpawnError(std::make_error_code(std::errc::no_such_file_or_directory), "command " + resolved.problem);
  const std::optional<std::string>& executable = resolved.path;

  SpawnedProcess child{-1, *executable, boost::asio::writable_pipe(executor), boost::asio::readable_pipe(executor),
                       boost::asio::readable_pipe(executor)};
  std::vector<std::string> args(library.command.begin() + 1, library.command.end());
  std::vector<std::string> env = build_environment(library);

  WorkerSetup setup;
  for (const auto& e : env) setup.envp.push_back(e.c_str());
  setup.envp.push_back(nullptr);
  if (library.cwd) setup.cwd = library.cwd->c_str();
  setup.limits = library.rlimits;

  // The launcher tells the context of the executor it is given about the fork, in the child too, and
  // that takes the context's locks there. The loops' own contexts are touched by other threads (an
  // accept on loop 0 for another loop registers the connection with that loop's reactor): a child that
  // forked while such a lock was held would wait for it for ever. So the launcher gets a context of its
  // own, used by one start at a time and by nothing else; the pipes are the loop's.
  static boost::asio::io_context fork_context(1);
  static std::mutex fork_mutex;
  std::lock_guard forking(fork_mutex);
  bp::posix::default_launcher launcher;
  bp::error_code ec;
  auto process = launcher(fork_context.get_executor(), ec, bp::filesystem::path(*executable), args,
                          bp::process_stdio{child.stdin_pipe, child.stdout_pipe, child.stderr_pipe}, setup);
  if (ec) {
    // The launcher's child ended before exec; collect it so it does not linger as a zombie.
    if (launcher.pid > 0) ::waitpid(launcher.pid, nullptr, 0);
    std::string what = setup.cwd && ec.value() == ENOENT && !process::exec_problem(*executable)
                           ? fmt::format("cannot start '{}' in working directory '{}': {}", *executable, setup.cwd,
                                         ec.message())
                           : fmt::format("cannot start '{}': {}", *executable, ec.message());
    throw SpawnError(std::error_code(ec.value(), std::system_category()), what);
  }
  child.pid = process.id();
  // From here the pid is supervised by the Worker and the ChildReaper, not by the process object.
  process.detach();
  return child;
}

}  // namespace rjg::workers
