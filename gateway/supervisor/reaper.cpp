#include "gateway/supervisor/reaper.hpp"

#include "common/log.hpp"
#include "gateway/supervisor/durations.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include <fmt/format.h>

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <vector>

namespace rjg::gateway::supervisor {
namespace {

// A small file under /proc, read with plain system calls: a process may end while it is read, and then
// read() fails with ESRCH (std::ifstream turns that into an exception from deep inside the stream).
// Empty when it cannot be read.
std::string read_proc_file(const std::string& path) {
  std::string text;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return text;
  char buffer[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buffer, static_cast<std::size_t>(n));
    if (text.size() > 64 * 1024) break;  // a command line longer than this is shortened anyway
  }
  ::close(fd);
  return text;
}

// One line of /proc/PID/stat: "pid (comm) state ppid pgrp ...". comm may hold spaces and parentheses.
struct ProcStat {
  pid_t pid = 0;
  char state = '?';
  pid_t ppid = 0;
  pid_t pgrp = 0;
  unsigned long long start_time = 0;  // clock ticks after boot
};

bool read_stat(pid_t pid, ProcStat& out) {
  const std::string text = read_proc_file(fmt::format("/proc/{}/stat", pid));
  auto close = text.rfind(')');
  if (close == std::string::npos) return false;
  int ppid = 0, pgrp = 0;
  char state = '?';
  unsigned long long start_time = 0;
  // Fields 3 to 22: state ppid pgrp, 16 that are skipped, then starttime.
  if (std::sscanf(text.c_str() + close + 1,
                  " %c %d %d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu", &state, &ppid,
                  &pgrp, &start_time) != 4)
    return false;
  out = {pid, state, ppid, pgrp, start_time};
  return true;
}

// The command line, arguments joined by spaces, shortened for a log line.
std::string command_line(pid_t pid) {
  std::string text = read_proc_file(fmt::format("/proc/{}/cmdline", pid));
  while (!text.empty() && text.back() == '\0') text.pop_back();
  for (char& c : text)
    if (c == '\0') c = ' ';
  if (text.empty()) return "?";
  return log::printable(text, 200);
}

// The children of this process: every process whose parent it is. (/proc/self/task/*/children would
// be cheaper, but kernels built without CONFIG_PROC_CHILDREN do not have it.)
std::vector<ProcStat> own_children() {
  std::vector<ProcStat> children;
  const pid_t self = ::getpid();
  DIR* proc = ::opendir("/proc");
  if (!proc) return children;
  while (const dirent* entry = ::readdir(proc)) {
    if (entry->d_name[0] < '1' || entry->d_name[0] > '9') continue;
    ProcStat stat;
    if (read_stat(static_cast<pid_t>(std::atoi(entry->d_name)), stat) && stat.ppid == self) children.push_back(stat);
  }
  ::closedir(proc);
  return children;
}

}  // namespace

ExitStatus ExitStatus::from_wait_status(int status) {
  ExitStatus s;
  if (WIFSIGNALED(status)) {
    s.signaled = true;
    s.signal = WTERMSIG(status);
  } else if (WIFEXITED(status)) {
    s.code = WEXITSTATUS(status);
  }
  return s;
}

std::string ExitStatus::describe() const {
  if (!signaled) return fmt::format("exit code {}", code);
  const char* abbrev = sigabbrev_np(signal);
  return fmt::format("signal {} (SIG{})", signal, abbrev ? abbrev : "?");
}

ChildReaper::ChildReaper(boost::asio::any_io_executor executor)
    : executor_(executor), signals_(executor, SIGCHLD), no_orphans_ending_(executor) {
  no_orphans_ending_.set();
  ProcStat self;
  if (read_stat(::getpid(), self)) started_at_ = self.start_time;
  arm();
}

ChildReaper::~ChildReaper() {
  boost::system::error_code ignored;
  signals_.cancel(ignored);
}

namespace {
bool runs_here(const boost::asio::any_io_executor& executor) {
  const auto* loop = executor.target<boost::asio::io_context::executor_type>();
  return loop && loop->running_in_this_thread();
}
}  // namespace

ChildReaper::ForkWindow::ForkWindow(ChildReaper& reaper) : reaper_(&reaper) {
  std::lock_guard lock(reaper.mutex_);
  ++reaper.forks_in_flight_;
}

void ChildReaper::ForkWindow::expect(pid_t pid) {
  if (!reaper_ || pid_ || pid <= 0) return;
  std::lock_guard lock(reaper_->mutex_);
  --reaper_->forks_in_flight_;
  reaper_->forks_expected_.insert(pid);
  pid_ = pid;
  reaper_->after_fork_window_change();
}

void ChildReaper::ForkWindow::watch(boost::asio::any_io_executor where, Callback on_exit) {
  ChildReaper* reaper = reaper_;
  if (!reaper || !pid_) return;
  bool claimed = false;
  {
    // One lock for both: the reaper must not reap the pid between the look and the watch.
    std::lock_guard lock(reaper->mutex_);
    if (auto it = reaper->unclaimed_.find(pid_); it != reaper->unclaimed_.end()) {
      // A forked worker that ended before it was watched: it hears of that at once, as if reaped now.
      boost::asio::post(where, [callback = std::move(on_exit), status = it->second] { callback(status); });
      reaper->unclaimed_.erase(it);
      reaper->dead_groups_.insert(pid_);
      claimed = true;
    } else {
      reaper->children_[pid_] = Child{std::move(where), std::move(on_exit)};
    }
  }
  close();
  if (claimed) return;
  // It may have ended meanwhile, still the intermediate's child: reaped once reparented (SIGCHLD).
  if (runs_here(reaper->executor_)) reaper->reap();
  else boost::asio::post(reaper->executor_, [reaper] { reaper->reap(); });
}

void ChildReaper::ForkWindow::close() {
  ChildReaper* reaper = std::exchange(reaper_, nullptr);
  if (!reaper) return;
  std::lock_guard lock(reaper->mutex_);
  if (const pid_t pid = std::exchange(pid_, 0)) {
    if (auto it = reaper->forks_expected_.find(pid); it != reaper->forks_expected_.end()) reaper->forks_expected_.erase(it);
    if (!reaper->forks_expected_.count(pid)) reaper->unclaimed_.erase(pid);  // a fork given up: not a status to keep
  } else {
    --reaper->forks_in_flight_;
  }
  reaper->after_fork_window_change();
}

void ChildReaper::after_fork_window_change() {
  if (forks_in_flight_ > 0) return;
  // No request in flight: a status kept for no expected pid was a worker's descendant after all (reap()).
  for (auto it = unclaimed_.begin(); it != unclaimed_.end();) {
    if (forks_expected_.count(it->first)) {
      ++it;
      continue;
    }
    log::info("reaped pid {}, a worker's descendant reparented to the gateway; it ended with {}", it->first,
              it->second.describe());
    it = unclaimed_.erase(it);
  }
  if (std::exchange(scan_deferred_, false)) boost::asio::post(executor_, [this] { scan_orphans(); });
}

void ChildReaper::watch(pid_t pid, boost::asio::any_io_executor where, Callback on_exit) {
  {
    std::lock_guard lock(mutex_);
    children_[pid] = Child{std::move(where), std::move(on_exit)};
  }
  // The child may already have ended before we started watching it.
  if (runs_here(executor_)) reap();
  else boost::asio::post(executor_, [this] { reap(); });
}

void ChildReaper::signal_all(int sig) {
  std::lock_guard lock(mutex_);
  for (auto& [pid, child] : children_) {
    if (::killpg(pid, sig) != 0) ::kill(pid, sig);
  }
  for (auto& [pid, orphan] : orphans_)
    if (orphan.ending) signal_orphan(pid, orphan, sig);
}

void ChildReaper::arm() {
  signals_.async_wait([this](const boost::system::error_code& ec, int) {
    if (ec) return;  // cancelled: the reaper is going away
    reap();
    arm();
  });
}

void ChildReaper::reap() {
  // Any child, not only the watched ones: orphans reparented to the gateway are its children too, and
  // an unknown pid left unreaped would stay a zombie. SIGCHLD coalesces, so reap until none is left.
  std::vector<std::pair<Child, ExitStatus>> ended;
  bool any = false;
  std::unique_lock lock(mutex_);
  for (;;) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid < 0 && errno == EINTR) continue;
    if (pid <= 0) break;  // 0: children left, none ended; ECHILD: no children at all
    any = true;
    const auto how = ExitStatus::from_wait_status(status);
    if (auto it = children_.find(pid); it != children_.end()) {
      ended.emplace_back(std::move(it->second), how);
      children_.erase(it);
      dead_groups_.insert(pid);
    } else if (auto o = orphans_.find(pid); o != orphans_.end()) {
      log::info("orphan pid {} ({}): reaped; it ended with {}", pid, o->second.command, how.describe());
      orphans_.erase(o);
    } else if (forks_in_flight_ > 0 || forks_expected_.count(pid)) {
      unclaimed_.insert_or_assign(pid, how);  // maybe a forked worker not yet watched: see ForkWindow
    } else {
      // A worker's descendant in the worker's group, killed with it (or one that ended before a scan
      // saw it).
      log::info("reaped pid {}, a worker's descendant reparented to the gateway; it ended with {}", pid,
                how.describe());
    }
  }
  // A watched pid that no longer exists was reaped by someone else (it cannot be: every waitpid of the
  // gateway is here); its owner must still hear of it rather than wait for ever.
  for (auto it = children_.begin(); it != children_.end();) {
    if (::kill(it->first, 0) != 0 && errno == ESRCH) {
      log::error("pid {} ended without being reaped here; its exit status is unknown", it->first);
      ended.emplace_back(std::move(it->second), ExitStatus{});
      it = children_.erase(it);
    } else {
      ++it;
    }
  }
  lock.unlock();
  // Each worker hears of its end on its own loop (at once when that is this one).
  for (auto& [child, status] : ended) {
    if (runs_here(child.where)) child.on_exit(status);
    else boost::asio::post(child.where, [callback = std::move(child.on_exit), status = status] { callback(status); });
  }
  // Orphans appear when a process of a worker's tree dies: look for them now, after each worker's own
  // callback has killed its group.
  if (any) scan_orphans();
  bool ending = false;
  for (auto& [pid, orphan] : orphans_) ending = ending || orphan.ending;
  if (!ending) no_orphans_ending_.set();
}

void ChildReaper::signal_orphan(pid_t pid, const Orphan& orphan, int sig) {
  // One that leads its own group (after setsid) takes its group along: what it started is no more
  // traceable than itself.
  if (orphan.group_leader && ::killpg(pid, sig) == 0) return;
  ::kill(pid, sig);
}

void ChildReaper::scan_orphans() {
  std::lock_guard lock(mutex_);  // children_
  if (forks_in_flight_ > 0) {  // a child not yet watched may be a forked worker: scan once its pid is known
    scan_deferred_ = true;
    return;
  }
  std::unordered_set<pid_t> groups_seen;
  for (const auto& child : own_children()) {
    if (children_.count(child.pid)) continue;           // a worker
    if (forks_expected_.count(child.pid)) continue;     // a forked worker about to be watched
    // Not from a worker: what started before the gateway (its own shell's children, or every process
    // of a container whose PID 1 it is), and what is in the gateway's own process group (workers lead
    // groups of their own, and their descendants stay there unless they make new ones).
    if (child.start_time < started_at_ || child.pgrp == ::getpgrp()) continue;
    if (child.state == 'Z' || child.state == 'X') continue;  // ended: reaped on its SIGCHLD
    if (children_.count(child.pgrp)) continue;          // still in a live worker's group: ends with that group
    if (dead_groups_.count(child.pgrp)) {               // in an ended worker's group: killed with it
      groups_seen.insert(child.pgrp);
      continue;
    }
    if (orphans_.count(child.pid)) continue;
    Orphan orphan;
    orphan.command = command_line(child.pid);
    orphan.group_leader = child.pgrp == child.pid;
    if (!policy_.end) {
      log::info("orphan pid {} ({}): a worker's descendant that left the worker's process group was reparented to "
                "the gateway; it is left running (end_orphans = false) and reaped when it exits",
                child.pid, orphan.command);
      orphans_.emplace(child.pid, std::move(orphan));
      continue;
    }
    log::warn("orphan pid {} ({}): a worker's descendant that left the worker's process group was reparented to "
              "the gateway and cannot be traced to a worker; ending it: SIGTERM now, SIGKILL after {} (end_orphans "
              "= false keeps such processes running)",
              child.pid, orphan.command, seconds_text(policy_.grace));
    orphan.ending = true;
    signal_orphan(child.pid, orphan, SIGTERM);
    orphan.kill_timer = std::make_unique<boost::asio::steady_timer>(executor_, policy_.grace);
    const pid_t pid = child.pid;
    orphan.kill_timer->async_wait([this, pid](const boost::system::error_code& ec) {
      if (ec) return;
      auto it = orphans_.find(pid);
      if (it == orphans_.end()) return;
      log::warn("orphan pid {} ({}): still running {} after SIGTERM; sending SIGKILL", pid, it->second.command,
                seconds_text(policy_.grace));
      signal_orphan(pid, it->second, SIGKILL);
    });
    no_orphans_ending_.reset();
    orphans_.emplace(pid, std::move(orphan));
  }
  std::erase_if(dead_groups_, [&](pid_t group) { return !groups_seen.count(group); });
}

boost::asio::awaitable<void> ChildReaper::end_orphans_now() {
  scan_orphans();
  // SIGTERM, the grace, SIGKILL: a killed process is reaped at once; the margin only guards a bug.
  const bool gone = co_await no_orphans_ending_.wait_for(policy_.grace + std::chrono::seconds(5));
  if (!gone) log::error("{} orphans still not reaped after SIGKILL", orphans_.size());
  co_return;
}

}  // namespace rjg::gateway::supervisor
