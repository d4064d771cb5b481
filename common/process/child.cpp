#include "common/process/child.hpp"

#include <fmt/format.h>

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
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

// What the child reports through its close-on-exec pipe when it cannot execute: the step and its errno.
enum Step : int { kStdio = 1, kChdir = 2, kLimits = 3, kExec = 4, kAffinity = 5 };
struct Report {
  int step = 0;
  int error = 0;
};

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

void default_signals() {
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig != SIGKILL && sig != SIGSTOP) ::signal(sig, SIG_DFL);
  }
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
}

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

pid_t start_child(const ChildOptions& options) {
  if (options.argv.empty()) throw std::system_error(EINVAL, std::generic_category(), "no program to start");
  // Everything the child touches is made before fork: it may make async-signal-safe calls only (another
  // thread may hold the allocator's lock).
  auto args = c_strings(options.argv);
  std::vector<char*> envp;
  if (options.env) envp = c_strings(*options.env);
  char** env = options.env ? envp.data() : environ;
  const char* cwd = options.cwd.empty() ? nullptr : options.cwd.c_str();
  const char* program = options.path.empty() ? args[0] : options.path.c_str();

  int null_fd = -1;
  if (options.stdin_fd < 0 || options.stdout_fd < 0 || options.stderr_fd < 0) {
    null_fd = ::open("/dev/null", O_RDWR | O_CLOEXEC);
    if (null_fd < 0) throw StartError(errno, StartError::Step::stdio, "opening /dev/null");
  }
  int report[2];
  if (::pipe2(report, O_CLOEXEC) != 0) {
    const int e = errno;
    if (null_fd >= 0) ::close(null_fd);
    throw StartError(e, StartError::Step::stdio, "making a pipe");
  }
  const int sources[3] = {options.stdin_fd < 0 ? null_fd : options.stdin_fd,
                          options.stdout_fd < 0 ? null_fd : options.stdout_fd,
                          options.stderr_fd < 0 ? null_fd : options.stderr_fd};

  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    int out = report[1];
    auto fail = [&](Step step) {
      const Report r{step, errno};
      [[maybe_unused]] auto n = ::write(out, &r, sizeof r);
      ::_exit(127);
    };
    if (options.die_with_parent) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(127);  // the parent ended before prctl
    }
    if (options.own_group) ::setpgid(0, 0);
    default_signals();
    // Descriptors below 3 that are to move would be overwritten by an earlier dup2: above 2 with them first.
    int from[3] = {sources[0], sources[1], sources[2]};
    if (out < 3) {
      const int moved = ::fcntl(out, F_DUPFD_CLOEXEC, 3);
      if (moved < 0) fail(kStdio);
      out = moved;
    }
    for (int i = 0; i < 3; ++i)
      if (from[i] < 3 && from[i] != i && (from[i] = ::fcntl(from[i], F_DUPFD_CLOEXEC, 3)) < 0) fail(kStdio);
    for (int i = 0; i < 3; ++i) {
      // dup2 onto itself would leave close-on-exec set.
      if (from[i] == i ? ::fcntl(i, F_SETFD, 0) < 0 : ::dup2(from[i], i) < 0) fail(kStdio);
    }
    // Nothing else of this process's (a client's socket, the gateway's pipes) reaches the child; the
    // report pipe closes itself at exec.
    close_fds(3, static_cast<unsigned>(out) - 1);
    close_fds(static_cast<unsigned>(out) + 1, ~0u);
    if (cwd && ::chdir(cwd) != 0) fail(kChdir);
    for (const auto& [resource, value] : options.limits) {
      struct rlimit rl {};
      rl.rlim_cur = rl.rlim_max = static_cast<rlim_t>(value);
      if (::setrlimit(resource, &rl) != 0) fail(kLimits);
    }
    if (options.cpu >= CPU_SETSIZE) {  // beyond any set: refused as the kernel refuses a CPU it lacks
      errno = EINVAL;
      fail(kAffinity);
    }
    if (options.cpu >= 0) {
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(options.cpu, &one);
      if (::sched_setaffinity(0, sizeof one, &one) != 0) fail(kAffinity);
    }
    ::execve(program, args.data(), env);
    fail(kExec);
  }
  const int fork_errno = errno;
  ::close(report[1]);
  if (null_fd >= 0) ::close(null_fd);
  if (pid < 0) {
    ::close(report[0]);
    throw StartError(fork_errno, StartError::Step::fork, "fork");
  }
  if (options.own_group) ::setpgid(pid, pid);  // also here: the group exists before anyone signals it
  Report r;
  ssize_t n;
  while ((n = ::read(report[0], &r, sizeof r)) < 0 && errno == EINTR) {
  }
  ::close(report[0]);
  if (n != sizeof r) return pid;  // end of file: the exec succeeded
  while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
  }
  switch (r.step) {
    case kChdir:
      throw StartError(r.error, StartError::Step::chdir,
                       fmt::format("changing to the working directory '{}'", options.cwd));
    case kStdio:
      throw StartError(r.error, StartError::Step::stdio, "setting up its stdin, stdout and stderr");
    case kAffinity:
      throw StartError(r.error, StartError::Step::affinity, fmt::format("binding it to CPU {}", options.cpu));
    case kLimits:
      throw StartError(r.error, StartError::Step::limits, "setting its resource limits");
    default:
      throw StartError(r.error, StartError::Step::exec, fmt::format("executing '{}'", program));
  }
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return fmt::format("exited with status {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return fmt::format("was killed by signal {} ({})", WTERMSIG(status), ::strsignal(WTERMSIG(status)));
  return fmt::format("ended with wait status {}", status);
}

}  // namespace rjg::process
