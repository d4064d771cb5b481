// systemd's service notifications (sd_notify(3)) without libsystemd: one datagram per state change
// to the AF_UNIX socket named by NOTIFY_SOCKET ("@name": an abstract socket). READY=1 once the
// gateway serves, STATUS= refreshed while it runs, STOPPING=1 when a drain begins, and WATCHDOG=1
// every WATCHDOG_USEC/2 while every event loop answers. And socket activation (sd_listen_fds(3)): the
// listening sockets systemd passes.
#pragma once

#include "config/network.hpp"

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/steady_timer.hpp>

#include <sys/socket.h>
#include <sys/un.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rjg::gateway::ops {

namespace asio = boost::asio;

// Sockets systemd passed (socket activation): LISTEN_FDS descriptors from 3 on, named by LISTEN_FDNAMES
// (FileDescriptorName=; "unknown" when unnamed), meant for the process LISTEN_PID names.
class PassedSockets {
 public:
  struct Socket {
    int fd = -1;
    std::string name;
    bool taken = false;
  };

  // Takes LISTEN_PID, LISTEN_FDS and LISTEN_FDNAMES from the environment and removes them, and marks
  // every passed descriptor close-on-exec, so that no worker inherits one. Empty when nothing was
  // passed to this process.
  static PassedSockets from_environment();

  PassedSockets() = default;
  PassedSockets(PassedSockets&& other) noexcept : sockets_(std::move(other.sockets_)), why_none_(std::move(other.why_none_)) {
    other.sockets_.clear();
  }
  PassedSockets(const PassedSockets&) = delete;
  PassedSockets& operator=(const PassedSockets&) = delete;
  ~PassedSockets() { close_untaken(); }

  // The descriptors for one listen entry ("systemd:NAME": those named NAME; "systemd": every one whose
  // name no entry in `named` lists), each handed to one entry only. Throws std::runtime_error naming the
  // entry and what was passed when there is none, or when one is not a listening TCP socket.
  std::vector<int> take(const config::ListenAddress& entry, const std::vector<std::string>& named);
  // Closes those no entry took, with a warning naming each.
  void close_untaken();
  // "gateway (fd 3), admin (fd 4)", or why there are none.
  std::string describe() const;

 private:
  std::vector<Socket> sockets_;
  std::string why_none_ = "no sockets were passed";
};

class SystemdNotifier {
 public:
  // Takes NOTIFY_SOCKET, WATCHDOG_USEC and WATCHDOG_PID from the environment and removes them, so no
  // process started later sees them. Inactive (every call does nothing) without NOTIFY_SOCKET.
  static SystemdNotifier from_environment();

  SystemdNotifier() = default;
  SystemdNotifier(SystemdNotifier&& other) noexcept;
  SystemdNotifier& operator=(SystemdNotifier&& other) noexcept;
  SystemdNotifier(const SystemdNotifier&) = delete;
  SystemdNotifier& operator=(const SystemdNotifier&) = delete;
  ~SystemdNotifier();

  bool active() const { return fd_ >= 0; }
  // Sends one notification ("READY=1\nSTATUS=..."); a failure is logged once, never fatal.
  void send(std::string_view state);
  // How often systemd wants WATCHDOG=1 (half its WATCHDOG_USEC); none when it does not.
  std::optional<std::chrono::microseconds> watchdog_every() const { return watchdog_every_; }

 private:
  int fd_ = -1;
  sockaddr_un address_{};
  socklen_t address_size_ = 0;
  std::string where_;  // NOTIFY_SOCKET as given, for the log
  bool failed_ = false;
  std::optional<std::chrono::microseconds> watchdog_every_;
};

// The notifications over the gateway's life, on loop 0: STATUS= refreshed every few seconds when it
// changed, and the watchdog, which pings only while every loop has run a posted handler since the
// previous ping (a loop stuck in a handler stops the pings, and systemd restarts the service).
class ServiceNotifications {
 public:
  using Status = std::function<std::string()>;

  // loops: every event loop, loop 0 (the one running this) first.
  ServiceNotifications(SystemdNotifier notifier, std::vector<asio::any_io_executor> loops, Status status);

  // Every listener is bound and prewarming has begun.
  void ready();
  // A reload (SIGHUP) begins: RELOADING=1 with MONOTONIC_USEC=.
  void reloading();
  // It ended, applied or not: READY=1 again, with the status (which says when it failed).
  void reloaded();
  // The drain begins.
  void stopping();

 private:
  void refresh_status();
  void watchdog_tick();

  SystemdNotifier notifier_;
  std::vector<asio::any_io_executor> loops_;
  Status status_;
  std::string last_status_;
  bool stopping_ = false;
  asio::steady_timer status_timer_;
  asio::steady_timer watchdog_timer_;
  // Per loop: the last watchdog round it answered.
  std::unique_ptr<std::atomic<std::uint64_t>[]> answered_;
  std::uint64_t round_ = 0;
};

}  // namespace rjg::gateway::ops
