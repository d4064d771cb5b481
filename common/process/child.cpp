#include "common/process/child.hpp"

#include "common/process/exec_child.hpp"

#include <fmt/format.h>

#include <fcntl.h>
#include <sched.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <system_error>

extern char** environ;

namespace rjg::process {
namespace {

// Where a program is looked for when PATH is not set (Debian's default for users).
constexpr const char* kDefaultPath = "/usr/local/bin:/usr/bin:/bin";

std::vector<char*> c_strings(const std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (const auto& s : strings) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

}  // namespace

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

ResolvedCommand resolve_command(const std::string& command0, const std::string& next_to,
                                std::string_view next_to_name) {
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
  std::string_view rest(path ? path : kDefaultPath);
  while (true) {
    auto colon = rest.find(':');
    std::string dir(rest.substr(0, colon));
    if (dir.empty()) dir = ".";
    if (try_candidate(dir + "/" + command0)) {
      // Found through a relative entry ("." or an empty one): made absolute, so that a child that
      // changes its working directory before the exec still executes this file.
      if (!dir.starts_with('/')) {
        std::error_code ec;
        if (auto absolute = std::filesystem::absolute(*out.path, ec); !ec) out.path = absolute.lexically_normal().string();
      }
      return out;
    }
    if (colon == std::string_view::npos) break;
    rest.remove_prefix(colon + 1);
  }
  std::string where = path ? fmt::format("in PATH ({})", path) : fmt::format("in PATH (not set, so {})", kDefaultPath);
  if (!next_to_name.empty()) {
    if (!next_to.empty() && try_candidate(next_to + "/" + command0)) return out;
    where += fmt::format(" nor next to {} ({})", next_to_name, next_to.empty() ? "unknown" : next_to);
  }
  if (!passed_over.empty())
    out.problem = fmt::format("{}, and no other '{}' was found {}", passed_over, command0, where);
  else
    out.problem = fmt::format("'{}' not found {}", command0, where);
  return out;
}

std::string self_directory() {
  std::error_code ec;
  auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : self.parent_path().string();
}

pid_t start_child(const ChildOptions& options) {
  if (options.argv.empty()) throw std::system_error(EINVAL, std::generic_category(), "no program to start");
  // Everything the child touches is made here, before it exists (detail::clone_and_exec): it shares this
  // process's memory until it executes, and makes system calls only.
  auto args = c_strings(options.argv);
  // The environment's array is copied even when it is this process's: the child reads it until its exec,
  // and another thread's setenv could replace it meanwhile.
  std::vector<char*> envp;
  if (options.env) {
    envp = c_strings(*options.env);
  } else {
    for (char** e = environ; e && *e; ++e) envp.push_back(*e);
    envp.push_back(nullptr);
  }

  int null_fd = -1;
  if (options.stdin_fd < 0 || options.stdout_fd < 0 || options.stderr_fd < 0) {
    null_fd = ::open("/dev/null", O_RDWR | O_CLOEXEC);
    if (null_fd < 0) throw StartError(errno, StartError::Step::stdio, "opening /dev/null");
  }
  detail::ExecPlan plan;
  plan.program = options.path.empty() ? args[0] : options.path.c_str();
  plan.argv = args.data();
  plan.envp = envp.data();
  plan.cwd = options.cwd.empty() ? nullptr : options.cwd.c_str();
  plan.sources[0] = options.stdin_fd < 0 ? null_fd : options.stdin_fd;
  plan.sources[1] = options.stdout_fd < 0 ? null_fd : options.stdout_fd;
  plan.sources[2] = options.stderr_fd < 0 ? null_fd : options.stderr_fd;
  plan.own_group = options.own_group;
  plan.die_with_parent = options.die_with_parent;
  plan.parent = ::getpid();
  plan.limits = options.limits.data();
  plan.limit_count = options.limits.size();
  plan.cpu = options.cpu;
  if (options.cpu >= 0 && options.cpu < CPU_SETSIZE) CPU_SET(options.cpu, &plan.cpu_set);

  const pid_t pid = detail::clone_and_exec(plan);
  const int clone_errno = errno;
  if (null_fd >= 0) ::close(null_fd);
  if (pid < 0) throw StartError(clone_errno, StartError::Step::fork, "creating the process (clone)");
  if (plan.failed_step == detail::kNone) return pid;  // it has executed (CLONE_VFORK waited for that)
  while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
  }
  switch (plan.failed_step) {
    case detail::kChdir:
      throw StartError(plan.error, StartError::Step::chdir,
                       fmt::format("changing to the working directory '{}'", options.cwd));
    case detail::kStdio:
      throw StartError(plan.error, StartError::Step::stdio, "setting up its stdin, stdout and stderr");
    case detail::kAffinity:
      throw StartError(plan.error, StartError::Step::affinity, fmt::format("binding it to CPU {}", options.cpu));
    case detail::kLimits:
      throw StartError(plan.error, StartError::Step::limits, "setting its resource limits");
    case detail::kGroup:
      throw StartError(plan.error, StartError::Step::group, "placing it in a process group of its own");
    default:
      throw StartError(plan.error, StartError::Step::exec, fmt::format("executing '{}'", plan.program));
  }
}

std::vector<int> allowed_cpus() {
  std::vector<int> out;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0)
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
      if (CPU_ISSET(cpu, &set)) out.push_back(cpu);
  return out;
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return fmt::format("exited with status {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return fmt::format("was killed by signal {} ({})", WTERMSIG(status), ::strsignal(WTERMSIG(status)));
  return fmt::format("ended with wait status {}", status);
}

}  // namespace rjg::process
