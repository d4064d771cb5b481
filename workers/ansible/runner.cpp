#include "workers/ansible/runner.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstdlib>
#include <mutex>
#include <set>
#include <system_error>
#include <thread>

namespace rjg::ansible {
namespace {

using namespace std::chrono_literals;

// The groups run() has running, and whether end_all() has begun. Never destroyed: the signal thread may be
// in end_all() while the main thread returns from main.
struct Registry {
  std::mutex mutex;
  std::set<pid_t> groups;
  bool ending = false;
};
Registry& registry = *new Registry;

struct Fd {
  int fd = -1;
  ~Fd() { reset(); }
  void reset() {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
};

void pipe_pair(Fd& read_end, Fd& write_end) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw std::system_error(errno, std::generic_category(), "pipe2");
  read_end.fd = fds[0];
  write_end.fd = fds[1];
}

std::vector<char*> c_strings(const std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (const auto& s : strings) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

}  // namespace

std::string RunResult::describe() const {
  if (WIFEXITED(status)) return fmt::format("exit code {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return fmt::format("signal {}", WTERMSIG(status));
  return fmt::format("wait status {}", status);
}

RunResult run(const std::vector<std::string>& argv, const std::vector<std::string>& env, const std::string& cwd,
              const std::optional<std::string>& stdout_file, const std::function<void(std::string_view)>& on_line) {
  Fd out_read, out_write, exec_read, exec_write;
  pipe_pair(out_read, out_write);
  pipe_pair(exec_read, exec_write);
  // Everything the child touches is prepared before fork: it may only make async-signal-safe calls.
  auto args = c_strings(argv);
  auto envp = c_strings(env);
  const char* out_path = stdout_file ? stdout_file->c_str() : nullptr;
  const pid_t parent = ::getpid();

  pid_t pid;
  {
    // Registered before anyone can signal it: end_all() either sees this group or stops it from starting.
    std::lock_guard lock(registry.mutex);
    if (registry.ending) throw std::system_error(ECANCELED, std::generic_category(), "the worker is stopping");
    pid = ::fork();
    if (pid < 0) throw std::system_error(errno, std::generic_category(), "fork");
    if (pid == 0) {
      ::setpgid(0, 0);
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(127);  // the worker died before prctl
      // The worker blocks its stop signals (its signal thread takes them) and ignores SIGPIPE: not so ansible.
      sigset_t none;
      sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);
      ::signal(SIGPIPE, SIG_DFL);
      int in = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
      int out = out_path ? ::open(out_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600) : out_write.fd;
      if (in < 0 || out < 0 || ::dup2(in, 0) < 0 || ::dup2(out, 1) < 0 || ::dup2(out_write.fd, 2) < 0 ||
          ::chdir(cwd.c_str()) != 0) {
        int e = errno;
        [[maybe_unused]] auto n = ::write(exec_write.fd, &e, sizeof e);
        ::_exit(127);
      }
      ::execve(args[0], args.data(), envp.data());
      int e = errno;
      [[maybe_unused]] auto n = ::write(exec_write.fd, &e, sizeof e);
      ::_exit(127);
    }
    ::setpgid(pid, pid);  // also here, so the group exists before anything signals it
    registry.groups.insert(pid);
  }
  out_write.reset();
  exec_write.reset();

  RunResult result;
  bool reaped = false;
  auto reap = [&](int flags) {
    if (reaped) return true;
    pid_t r;
    while ((r = ::waitpid(pid, &result.status, flags)) < 0 && errno == EINTR) {
    }
    reaped = r == pid;
    if (reaped) {
      std::lock_guard lock(registry.mutex);
      registry.groups.erase(pid);
    }
    return reaped;
  };

  int exec_errno = 0;
  ssize_t n;
  while ((n = ::read(exec_read.fd, &exec_errno, sizeof exec_errno)) < 0 && errno == EINTR) {
  }
  if (n == sizeof exec_errno) {
    reap(0);
    throw std::system_error(exec_errno, std::generic_category(), argv[0]);
  }

  // Read until end of output. Should something outside the group hold the pipe after ansible has ended, the
  // output is given up two seconds later. Whatever goes wrong here (a callback that throws), the group is
  // ended and reaped before the error goes on: nothing is left running.
  std::string partial;
  std::optional<std::chrono::steady_clock::time_point> give_up;
  char buffer[16384];
  try {
    for (;;) {
      pollfd p{out_read.fd, POLLIN, 0};
      const int ready = ::poll(&p, 1, 200);
      if (ready < 0 && errno != EINTR) break;
      if (ready > 0) {
        n = ::read(out_read.fd, buffer, sizeof buffer);
        if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (n <= 0) break;
        partial.append(buffer, static_cast<std::size_t>(n));
        std::size_t start = 0, eol;
        while ((eol = partial.find('\n', start)) != std::string::npos) {
          on_line(std::string_view(partial).substr(start, eol - start));
          start = eol + 1;
        }
        result.output.append(partial, 0, start);
        partial.erase(0, start);
        if (partial.size() > 1024 * 1024) {  // a line without end: given as it is, so far
          on_line(partial);
          result.output += partial;
          partial.clear();
        }
        if (result.output.size() > 512 * 1024) result.output.erase(0, result.output.size() - 256 * 1024);
        continue;
      }
      if (!give_up && reap(WNOHANG)) give_up = std::chrono::steady_clock::now() + 2s;
      if (give_up && std::chrono::steady_clock::now() > *give_up) break;
    }
    if (!partial.empty()) {
      on_line(partial);
      result.output += partial;
    }
  } catch (...) {
    if (!reaped) ::killpg(pid, SIGKILL);  // once reaped, the number may already be another process's
    reap(0);
    throw;
  }
  reap(0);
  return result;
}

void end_all(std::chrono::milliseconds grace) {
  std::set<pid_t> running;
  {
    std::lock_guard lock(registry.mutex);
    registry.ending = true;
    running = registry.groups;
  }
  for (pid_t group : running) ::killpg(group, SIGTERM);
  // A group is gone once run() has reaped its leader, or nothing in it is left to signal.
  auto left = [&] {
    std::lock_guard lock(registry.mutex);
    std::set<pid_t> still;
    for (pid_t group : running)
      if (registry.groups.count(group) && ::killpg(group, 0) == 0) still.insert(group);
    return still;
  };
  const auto deadline = std::chrono::steady_clock::now() + grace;
  while (!left().empty() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(20ms);
  for (pid_t group : left()) ::killpg(group, SIGKILL);
}

std::optional<std::string> find_on_path(std::string_view name) {
  const char* path = std::getenv("PATH");
  std::string_view dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
  for (std::size_t begin = 0; begin <= dirs.size();) {
    auto colon = dirs.find(':', begin);
    if (colon == std::string_view::npos) colon = dirs.size();
    std::string dir(dirs.substr(begin, colon - begin));
    begin = colon + 1;
    if (dir.empty()) continue;
    auto candidate = dir + "/" + std::string(name);
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return std::nullopt;
}

}  // namespace rjg::ansible
