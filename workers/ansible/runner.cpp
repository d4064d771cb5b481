#include "workers/ansible/runner.hpp"

#include "common/process/child.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
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

}  // namespace

std::string RunResult::describe() const { return process::describe_status(status); }

RunResult run(const std::vector<std::string>& argv, const std::vector<std::string>& env, const std::string& cwd,
              const std::optional<std::string>& stdout_file, const std::function<void(std::string_view)>& on_line) {
  Fd out_read, out_write, out_file;
  pipe_pair(out_read, out_write);
  if (stdout_file) {
    out_file.fd = ::open(stdout_file->c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (out_file.fd < 0) throw std::system_error(errno, std::generic_category(), "opening " + *stdout_file);
  }
  process::ChildOptions child;
  child.argv = argv;
  child.env = env;
  child.cwd = cwd;
  child.stdout_fd = stdout_file ? out_file.fd : out_write.fd;
  child.stderr_fd = out_write.fd;
  child.own_group = true;  // stdin: /dev/null; a killed worker takes ansible with it (die_with_parent)

  pid_t pid;
  {
    // Registered before anyone can signal it: end_all() either sees this group or stops it from starting.
    // (Held until the exec is done, a matter of milliseconds: this worker runs one program at a time,
    // and end_all waits no longer than that.)
    std::lock_guard lock(registry.mutex);
    if (registry.ending) throw std::system_error(ECANCELED, std::generic_category(), "the worker is stopping");
    pid = process::start_child(child);
    registry.groups.insert(pid);
  }
  out_write.reset();
  out_file.reset();

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
        const ssize_t n = ::read(out_read.fd, buffer, sizeof buffer);
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

}  // namespace rjg::ansible
