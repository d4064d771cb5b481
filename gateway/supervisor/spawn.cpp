#include "gateway/supervisor/spawn.hpp"

#include "common/process/child.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <fmt/format.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <utility>
#include <system_error>
#include <vector>

extern char** environ;

namespace rjg::gateway::supervisor {
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

}  // namespace

std::vector<std::string> worker_environment(const config::Library& library) {
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

namespace {

// A pipe whose ends close on exec (start_child gives the child its own end as 0, 1 or 2).
struct Pipe {
  int read = -1, write = -1;
  Pipe() {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0)
      throw SpawnError(std::error_code(errno, std::system_category()),
                       fmt::format("cannot start a worker: no pipe: {}", std::strerror(errno)));
    read = fds[0];
    write = fds[1];
  }
  ~Pipe() {
    for (int fd : {read, write})
      if (fd >= 0) ::close(fd);
  }
  Pipe(const Pipe&) = delete;
  Pipe& operator=(const Pipe&) = delete;
};

}  // namespace

// The library's rlimits as start_child applies them: 0 means "not set", except for core_size, where 0
// (no core dumps) is the usual wish.
std::vector<std::pair<int, std::uint64_t>> worker_limits(const config::ResourceLimits& limits) {
  std::vector<std::pair<int, std::uint64_t>> out;
  if (limits.address_space) out.emplace_back(RLIMIT_AS, limits.address_space);
  if (limits.open_files) out.emplace_back(RLIMIT_NOFILE, limits.open_files);
  if (limits.cpu_seconds) out.emplace_back(RLIMIT_CPU, limits.cpu_seconds);
  if (limits.processes) out.emplace_back(RLIMIT_NPROC, limits.processes);
  if (limits.core_size_set) out.emplace_back(RLIMIT_CORE, limits.core_size);
  return out;
}

namespace {

// cpu_affinity = "one": the CPUs the gateway may use (read once), handed out in turn, so that the
// workers spread over them. Empty when the mask cannot be read: the workers are then left unbound.
int next_cpu() {
  static const std::vector<int> cpus = process::allowed_cpus();
  static std::atomic<std::size_t> turn{0};
  return cpus.empty() ? -1 : cpus[turn.fetch_add(1, std::memory_order_relaxed) % cpus.size()];
}

}  // namespace

int worker_cpu(const config::Library& library) {
  return library.cpu_affinity == config::CpuAffinity::one ? next_cpu() : -1;
}

void OwnedFd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

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

  Pipe in, out, err;
  process::ChildOptions options;
  // argv[0] is the file executed, as the worker was always started (Python derives sys.executable from it).
  options.argv.push_back(*executable);
  options.argv.insert(options.argv.end(), library.command.begin() + 1, library.command.end());
  options.env = worker_environment(library);
  if (library.cwd) options.cwd = *library.cwd;
  options.stdin_fd = in.read;
  options.stdout_fd = out.write;
  options.stderr_fd = err.write;
  // Its own group, so the gateway can signal the worker and everything it started at once, and a Ctrl-C
  // on the gateway's terminal is not delivered to workers behind the gateway's back. No PDEATHSIG: the
  // gateway stops its workers itself (and may hand them over on a drain).
  options.own_group = true;
  options.die_with_parent = false;
  // Limits apply to the worker and what it starts; a failure here fails the start, not the gateway.
  options.limits = worker_limits(library.rlimits);
  options.cpu = worker_cpu(library);

  // The loop's pipes take the parent's ends first: once a child runs, nothing is left that could fail.
  SpawnedProcess child{-1, *executable, boost::asio::writable_pipe(executor), boost::asio::readable_pipe(executor),
                       boost::asio::readable_pipe(executor)};
  boost::system::error_code ec;
  auto adopt = [&](auto& pipe, int& fd) {  // the pipe owns fd once assigned; until then the Pipe does
    if (ec) return;
    pipe.assign(fd, ec);
    if (!ec) fd = -1;
  };
  adopt(child.stdin_pipe, in.write);
  adopt(child.stdout_pipe, out.read);
  adopt(child.stderr_pipe, err.read);
  if (ec)
    throw SpawnError(std::error_code(ec.value(), std::system_category()),
                     fmt::format("cannot start '{}': its pipes cannot join the event loop: {}", *executable,
                                 ec.message()));
  // start_child's child makes only system calls before its exec. (Boost.Process's launcher, used before,
  // told an io_context about the fork in the child, which allocates: under ASan, whose allocator is not
  // reset at fork, a child could wait for ever for a lock another loop's thread held.) It shares the
  // gateway's memory until then, so a start costs the same however many sessions the gateway holds.
  try {
    child.pid = process::start_child(options);
  } catch (const process::StartError& e) {
    using Step = process::StartError::Step;
    const int error = e.code().value();
    const std::string what =
        e.step == Step::chdir  ? fmt::format("cannot start '{}' in working directory '{}': {}", *executable,
                                             options.cwd, std::strerror(error))
        : e.step == Step::exec ? fmt::format("cannot start '{}': {}", *executable, std::strerror(error))
        : e.step == Step::affinity
            ? fmt::format("cannot start '{}': binding it to CPU {} (cpu_affinity = \"one\") failed: {}", *executable,
                          options.cpu, std::strerror(error))
            : fmt::format("cannot start '{}': {}", *executable, e.what());
    throw SpawnError(std::error_code(error, std::system_category()), what);
  }
  // From here the pid is supervised by the Worker and the ChildReaper.
  return child;
}

boost::asio::awaitable<void> read_lines(boost::asio::readable_pipe& pipe, std::size_t max_line,
                                        const std::function<void(std::string_view)>& emit) {
  std::vector<char> buffer(8192);
  std::string partial;
  for (;;) {
    auto [ec, n] = co_await pipe.async_read_some(boost::asio::buffer(buffer),
                                                 boost::asio::as_tuple(boost::asio::use_awaitable));
    if (ec) break;
    partial.append(buffer.data(), n);
    std::size_t start = 0, eol;
    while ((eol = partial.find('\n', start)) != std::string::npos) {
      emit(std::string_view(partial).substr(start, eol - start));
      start = eol + 1;
    }
    partial.erase(0, start);
    if (partial.size() > max_line) {
      emit(partial);
      partial.clear();
    }
  }
  if (!partial.empty()) emit(partial);
}

SpawnedProcess adopt_forked(boost::asio::any_io_executor executor, ForkedProcess& forked) {
  SpawnedProcess child{forked.pid, forked.executable, boost::asio::writable_pipe(executor),
                       boost::asio::readable_pipe(executor), boost::asio::readable_pipe(executor)};
  boost::system::error_code ec;
  auto adopt = [&](auto& pipe, OwnedFd& fd) {
    if (ec) return;
    pipe.assign(fd.get(), ec);
    if (!ec) fd.release();
  };
  adopt(child.stdin_pipe, forked.stdin_write);
  adopt(child.stdout_pipe, forked.stdout_read);
  adopt(child.stderr_pipe, forked.stderr_read);
  if (ec)
    throw SpawnError(std::error_code(ec.value(), std::system_category()),
                     fmt::format("the forked worker pid {}: its pipes cannot join the event loop: {}", forked.pid,
                                 ec.message()));
  return child;
}

}  // namespace rjg::gateway::supervisor
