#include "workers/supervisor/spawn.hpp"

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
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <system_error>
#include <vector>

extern char** environ;

namespace rjg::workers {
namespace bp = boost::process::v2;

namespace {

// Why path cannot be executed by this process ("is a directory", "is not executable (mode 0644)"), or
// nothing when it can.
std::optional<std::string> exec_problem(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return "does not exist";
    if (errno == ENOTDIR) return "does not exist (a part of its path is not a directory)";
    if (errno == EACCES) return "cannot be reached (no search permission on a directory of its path)";
    return fmt::format("cannot be examined ({})", std::strerror(errno));
  }
  if (S_ISDIR(st.st_mode)) return "is a directory";
  if (!S_ISREG(st.st_mode)) return fmt::format("is not a regular file (mode {:o})", st.st_mode);
  if (::access(path.c_str(), X_OK) != 0) {
    const unsigned mode = st.st_mode & 07777;
    if (mode & 0111)
      return fmt::format("is not executable by user {} (mode {:04o}, owner uid {})", ::geteuid(), mode, st.st_uid);
    return fmt::format("is not executable (mode {:04o})", mode);
  }
  return std::nullopt;
}

bool is_executable_file(const std::string& path) { return !exec_problem(path); }

std::string self_directory() {
  std::error_code ec;
  auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : self.parent_path().string();
}

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

// Closes [low, high] in the child (async-signal-safe: no allocation).
void close_fds(unsigned low, unsigned high) {
  if (low > high) return;
  if (::syscall(SYS_close_range, low, high, 0) == 0) return;
  // Kernels before 5.9: one by one, up to the descriptor limit.
  struct rlimit rl {};
  unsigned max = ::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY
                     ? static_cast<unsigned>(std::min<rlim_t>(rl.rlim_cur, 1u << 20))
                     : 65536u;
  for (unsigned fd = low; fd <= high && fd < max; ++fd) ::close(static_cast<int>(fd));
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
    for (int sig = 1; sig < NSIG; ++sig) {
      if (sig != SIGKILL && sig != SIGSTOP) ::signal(sig, SIG_DFL);
    }
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    // Only stdin, stdout and stderr go to the worker (and the launcher's exec-error pipe, close-on-exec).
    // Boost 1.81's own close_all skips every descriptor below the highest one it keeps, so another
    // worker's pipes or a client's socket would leak into this worker; close them here instead.
    int kept = 2;
    for (;;) {
      int next = INT_MAX;
      for (int fd : launcher.fd_whitelist)
        if (fd > kept && fd < next) next = fd;
      close_fds(static_cast<unsigned>(kept) + 1, next == INT_MAX ? ~0u : static_cast<unsigned>(next) - 1);
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
  ResolvedCommand out;
  if (command0.empty()) {
    out.problem = "'' is empty";
    return out;
  }
  if (command0.find('/') != std::string::npos) {
    if (auto problem = exec_problem(command0)) out.problem = fmt::format("'{}' {}", command0, *problem);
    else out.path = command0;
    return out;
  }
  // The first candidate that exists but cannot be run is named if no other one can.
  std::string passed_over;
  auto try_candidate = [&](const std::string& candidate) {
    auto problem = exec_problem(candidate);
    if (!problem) {
      out.path = candidate;
      return true;
    }
    if (passed_over.empty() && *problem != "does not exist") passed_over = fmt::format("'{}' {}", candidate, *problem);
    return false;
  };
  const char* path = std::getenv("PATH");
  if (path) {
    std::string_view rest(path);
    while (true) {
      auto colon = rest.find(':');
      std::string dir(rest.substr(0, colon));
      if (dir.empty()) dir = ".";
      if (try_candidate(dir + "/" + command0)) return out;
      if (colon == std::string_view::npos) break;
      rest.remove_prefix(colon + 1);
    }
  }
  const std::string self = self_directory();
  if (!self.empty() && try_candidate(self + "/" + command0)) return out;
  const std::string where = fmt::format("in PATH ({}) nor next to the gateway ({})", path ? path : "not set",
                                        self.empty() ? "unknown" : self);
  if (!passed_over.empty())
    out.problem = fmt::format("{}, and no other '{}' was found {}", passed_over, command0, where);
  else
    out.problem = fmt::format("'{}' not found {}", command0, where);
  return out;
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
    std::string what = setup.cwd && ec.value() == ENOENT && is_executable_file(*executable)
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
