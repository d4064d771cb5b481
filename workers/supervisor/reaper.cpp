#include "workers/supervisor/reaper.hpp"

#include <fmt/format.h>

#include <sys/wait.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <vector>

namespace rjg::workers {

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

ChildReaper::ChildReaper(boost::asio::any_io_executor executor) : signals_(executor, SIGCHLD) { arm(); }

ChildReaper::~ChildReaper() {
  boost::system::error_code ignored;
  signals_.cancel(ignored);
}

void ChildReaper::watch(pid_t pid, Callback on_exit) {
  children_[pid] = std::move(on_exit);
  // The child may already have ended before we started watching it.
  reap();
}

void ChildReaper::signal_all(int sig) {
  for (auto& [pid, callback] : children_) {
    if (::killpg(pid, sig) != 0) ::kill(pid, sig);
  }
}

void ChildReaper::arm() {
  signals_.async_wait([this](const boost::system::error_code& ec, int) {
    if (ec) return;  // cancelled: the reaper is going away
    reap();
    arm();
  });
}

void ChildReaper::reap() {
  // SIGCHLD coalesces, so every watched child is polled on each signal.
  std::vector<std::pair<Callback, ExitStatus>> ended;
  for (auto it = children_.begin(); it != children_.end();) {
    int status = 0;
    pid_t r = ::waitpid(it->first, &status, WNOHANG);
    if (r == it->first || (r < 0 && errno == ECHILD)) {
      ended.emplace_back(std::move(it->second), r < 0 ? ExitStatus{} : ExitStatus::from_wait_status(status));
      it = children_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto& [callback, status] : ended) callback(status);
}

}  // namespace rjg::workers
