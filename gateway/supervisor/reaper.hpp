// Collects the exit status of the gateway's children as they end (SIGCHLD), so none stays a zombie:
// the workers, and the orphans a worker leaves behind (the gateway is a child subreaper, so a
// worker's descendant whose parent dies is reparented to it).
#pragma once

#include "common/runtime/async_event.hpp"

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>

namespace rjg::gateway::supervisor {

// How a process ended, from waitpid's status.
struct ExitStatus {
  bool signaled = false;
  int code = 0;    // exit code when !signaled
  int signal = 0;  // signal number when signaled

  static ExitStatus from_wait_status(int status);
  // "exit code 3", "signal 9 (SIGKILL)"
  std::string describe() const;
};

// What the gateway does with orphans: processes reparented to it that are not workers and not in the
// process group of a worker (a worker's descendant that called setsid or setpgid, whose parent died).
struct OrphanPolicy {
  bool end = true;                                         // [gateway] end_orphans
  std::chrono::milliseconds grace{std::chrono::seconds(5)};  // SIGTERM until SIGKILL
};

class ChildReaper {
 public:
  using Callback = std::function<void(ExitStatus)>;

  explicit ChildReaper(boost::asio::any_io_executor executor);
  ~ChildReaper();

  // Calls back once, on `where` (the loop of the watched worker), when pid has ended and been reaped.
  // Callable from any loop; the reaping itself happens on the reaper's loop.
  void watch(pid_t pid, boost::asio::any_io_executor where, Callback on_exit);
  // Held while a child is started and watched on another loop, so the reaper cannot collect the new
  // child before it is known as a worker (it would then be logged as an orphan, its status lost).
  std::unique_lock<std::recursive_mutex> hold() { return std::unique_lock(mutex_); }
  // Open from asking a fork server for a worker until that worker is watched (or the fork failed): its
  // pid is learnt from the server's answer, and by then it may already be the gateway's child, or even
  // have ended. While a request is in flight (its pid not yet known), a child reaped that nobody watches
  // keeps its status, and the orphan scan waits (it would take the new worker for an orphan and end it);
  // once the pid is known (expect), only that pid is kept and passed over by the scan. watch() claims
  // the status of a worker that ended meanwhile and closes the window. Movable; closes when destroyed.
  class ForkWindow {
   public:
    ForkWindow() = default;
    explicit ForkWindow(ChildReaper& reaper);
    ForkWindow(ForkWindow&& other) noexcept
        : reaper_(std::exchange(other.reaper_, nullptr)), pid_(std::exchange(other.pid_, 0)) {}
    ForkWindow& operator=(ForkWindow&& other) noexcept {
      if (this != &other) close(), reaper_ = std::exchange(other.reaper_, nullptr), pid_ = std::exchange(other.pid_, 0);
      return *this;
    }
    ~ForkWindow() { close(); }
    // The fork server answered: the new worker is `pid`.
    void expect(pid_t pid);
    // Watches the expected pid (see ChildReaper::watch), claiming its status if it ended already; closes.
    void watch(boost::asio::any_io_executor where, Callback on_exit);
    void close();

   private:
    ChildReaper* reaper_ = nullptr;
    pid_t pid_ = 0;
  };
  ForkWindow open_fork_window() { return ForkWindow(*this); }
  std::size_t watched() const {
    std::lock_guard lock(mutex_);
    return children_.size();
  }
  // Sends sig to the process group of every child still watched (each worker leads its own group),
  // and to every orphan being ended.
  void signal_all(int sig);

  void set_orphan_policy(OrphanPolicy policy) { policy_ = policy; }
  // Looks for orphans now (they are also looked for after every child that ends), and with
  // end = true waits until each one being ended is gone: SIGTERM, SIGKILL after the grace. Bounded.
  boost::asio::awaitable<void> end_orphans_now();
  // Orphans known and not yet reaped (being ended, or left running with end = false).
  std::size_t orphans() const { return orphans_.size(); }

 private:
  struct Orphan {
    std::string command;  // from /proc/PID/cmdline, for the log
    bool group_leader = false;
    bool ending = false;
    std::unique_ptr<boost::asio::steady_timer> kill_timer;
  };

  void arm();
  void reap();
  void scan_orphans();
  void signal_orphan(pid_t pid, const Orphan& orphan, int sig);

  struct Child {
    boost::asio::any_io_executor where;
    Callback on_exit;
  };

  boost::asio::any_io_executor executor_;
  boost::asio::signal_set signals_;
  // Guards children_, the only state other loops touch (watch, signal_all, watched). The rest is the
  // reaper's loop's own.
  mutable std::recursive_mutex mutex_;
  std::unordered_map<pid_t, Child> children_;
  OrphanPolicy policy_;
  std::unordered_map<pid_t, Orphan> orphans_;
  // Groups of workers that ended: the Worker killed each whole group, so a member still seen is dying
  // with it, not an orphan. Forgotten once a scan finds no member left.
  std::unordered_set<pid_t> dead_groups_;
  // When the gateway started (clock ticks after boot): an older child of the gateway cannot be a
  // worker's descendant.
  unsigned long long started_at_ = 0;
  runtime::AsyncEvent no_orphans_ending_;
  // Fork windows (under mutex_): requests in flight (no pid yet), the pids answered and not yet watched,
  // the statuses kept for them, and whether a scan for orphans waits for the requests in flight.
  void after_fork_window_change();  // with mutex_ held
  std::size_t forks_in_flight_ = 0;
  std::unordered_multiset<pid_t> forks_expected_;
  std::unordered_map<pid_t, ExitStatus> unclaimed_;
  bool scan_deferred_ = false;
};

}  // namespace rjg::gateway::supervisor
