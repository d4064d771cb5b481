// Collects the exit status of worker processes as they end (SIGCHLD), so none stays a zombie.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/signal_set.hpp>

#include <sys/types.h>

#include <functional>
#include <string>
#include <unordered_map>

namespace rjg::workers {

// How a process ended, from waitpid's status.
struct ExitStatus {
  bool signaled = false;
  int code = 0;    // exit code when !signaled
  int signal = 0;  // signal number when signaled

  static ExitStatus from_wait_status(int status);
  // "exit code 3", "signal 9 (SIGKILL)"
  std::string describe() const;
};

class ChildReaper {
 public:
  using Callback = std::function<void(ExitStatus)>;

  explicit ChildReaper(boost::asio::any_io_executor executor);
  ~ChildReaper();

  // Calls back once, on the io_context, when pid has ended and been reaped.
  void watch(pid_t pid, Callback on_exit);
  std::size_t watched() const { return children_.size(); }
  // Sends sig to the process group of every child still watched (each worker leads its own group).
  void signal_all(int sig);

 private:
  void arm();
  void reap();

  boost::asio::signal_set signals_;
  std::unordered_map<pid_t, Callback> children_;
};

}  // namespace rjg::workers
