#include "gateway/ops/systemd.hpp"

#include "common/log.hpp"

#include <boost/asio/post.hpp>

#include <fmt/format.h>

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <stdexcept>

#include <cerrno>
#include <ctime>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <utility>

namespace rjg::gateway::ops {
using namespace std::chrono_literals;

namespace {
// STATUS= is sent again at most this often, and only when it changed.
constexpr auto kStatusEvery = 5s;

std::string take_env(const char* name) {
  const char* value = std::getenv(name);
  std::string text = value ? value : "";
  ::unsetenv(name);
  return text;
}

// Why a passed descriptor cannot serve as a TCP listener; empty when it can.
std::string unfit_listener(int fd) {
  int type = 0, listening = 0;
  socklen_t size = sizeof type;
  if (::getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &size) != 0)
    return fmt::format("it is not a socket ({})", std::strerror(errno));
  size = sizeof listening;
  if (type != SOCK_STREAM) return "it is not a stream socket (use ListenStream=, not ListenDatagram= or ListenSequentialPacket=)";
  if (::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &size) != 0 || !listening)
    return "it is not listening (Accept=yes passes connections, not the listening socket: use Accept=no)";
  sockaddr_storage address{};
  size = sizeof address;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &size) != 0)
    return fmt::format("its address cannot be read ({})", std::strerror(errno));
  if (address.ss_family != AF_INET && address.ss_family != AF_INET6)
    return "it is not a TCP socket (ListenStream= must be an IP address and port, or a port)";
  return "";
}
}  // namespace

PassedSockets PassedSockets::from_environment() {
  PassedSockets passed;
  const std::string pid = take_env("LISTEN_PID");
  const std::string fds = take_env("LISTEN_FDS");
  const std::string names = take_env("LISTEN_FDNAMES");
  if (fds.empty()) {
    passed.why_none_ = "no sockets were passed: LISTEN_FDS is not set (start the gateway from its .socket unit)";
    return passed;
  }
  if (pid != std::to_string(::getpid())) {
    passed.why_none_ = fmt::format("the sockets in LISTEN_FDS were passed to pid {}, not to this process ({})",
                                   log::printable(pid, 20), ::getpid());
    return passed;
  }
  char* end = nullptr;
  const unsigned long count = std::strtoul(fds.c_str(), &end, 10);
  if (!end || *end != '\0' || count == 0 || count > 4096) {
    passed.why_none_ = fmt::format("LISTEN_FDS='{}' is not a count of sockets", log::printable(fds, 20));
    return passed;
  }
  // sd_listen_fds_with_names(3): names in order, separated by ':'; without LISTEN_FDNAMES (or with a
  // different count) every socket is "unknown".
  std::vector<std::string> split;
  for (std::size_t from = 0; !names.empty();) {
    const auto colon = names.find(':', from);
    split.push_back(names.substr(from, colon == std::string::npos ? std::string::npos : colon - from));
    if (colon == std::string::npos) break;
    from = colon + 1;
  }
  if (split.size() != count) split.assign(count, "unknown");
  for (unsigned long i = 0; i < count; ++i) {
    const int fd = 3 + static_cast<int>(i);
    ::fcntl(fd, F_SETFD, FD_CLOEXEC);  // a worker never inherits a listening socket
    passed.sockets_.push_back({fd, split[i]});
  }
  return passed;
}

std::vector<int> PassedSockets::take(const config::ListenAddress& entry, const std::vector<std::string>& named) {
  std::vector<int> fds;
  for (auto& socket : sockets_) {
    if (socket.taken) continue;
    const bool wanted = entry.fd_name.empty()
                            ? std::find(named.begin(), named.end(), socket.name) == named.end()
                            : socket.name == entry.fd_name;
    if (!wanted) continue;
    if (auto why = unfit_listener(socket.fd); !why.empty())
      throw std::runtime_error(fmt::format("listen entry \"{}\": the socket systemd passed as {} (fd {}) cannot "
                                           "be listened on: {}",
                                           entry.text, socket.name, socket.fd, why));
    socket.taken = true;
    fds.push_back(socket.fd);
  }
  if (fds.empty()) {
    const auto wanted = entry.fd_name.empty() ? std::string("socket that no other listen entry names")
                                              : fmt::format("socket named '{}' (FileDescriptorName=)", entry.fd_name);
    throw std::runtime_error(fmt::format("listen entry \"{}\": systemd passed no {}; passed: {}. Give the socket "
                                         "that name in the .socket unit, or change the entry.",
                                         entry.text, wanted, describe()));
  }
  return fds;
}

void PassedSockets::close_untaken() {
  for (auto& socket : sockets_) {
    if (socket.taken || socket.fd < 0) continue;
    log::warn("systemd passed a socket named '{}' (fd {}) that no listen entry takes; closing it", socket.name,
              socket.fd);
    ::close(socket.fd);
    socket.fd = -1;
  }
}

std::string PassedSockets::describe() const {
  if (sockets_.empty()) return why_none_;
  std::string text;
  for (const auto& socket : sockets_)
    text += fmt::format("{}{} (fd {}{})", text.empty() ? "" : ", ", socket.name, socket.fd, socket.taken ? ", taken" : "");
  return text;
}

SystemdNotifier SystemdNotifier::from_environment() {
  SystemdNotifier n;
  const std::string socket = take_env("NOTIFY_SOCKET");
  const std::string usec = take_env("WATCHDOG_USEC");
  const std::string pid = take_env("WATCHDOG_PID");
  if (socket.empty()) return n;
  n.where_ = socket;
  if ((socket[0] != '/' && socket[0] != '@') || socket.size() >= sizeof(n.address_.sun_path)) {
    log::warn("systemd: NOTIFY_SOCKET '{}' is neither an absolute path nor an abstract socket ('@name') that fits "
              "in {} bytes; no notifications are sent",
              log::printable(socket, 200), sizeof(n.address_.sun_path) - 1);
    return n;
  }
  n.address_.sun_family = AF_UNIX;
  std::memcpy(n.address_.sun_path, socket.data(), socket.size());
  if (socket[0] == '@') n.address_.sun_path[0] = '\0';  // abstract: the name is exactly these bytes
  n.address_size_ = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + socket.size());
  n.fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (n.fd_ < 0) {
    log::warn("systemd: cannot create a socket for NOTIFY_SOCKET {}: {}; no notifications are sent", socket,
              std::strerror(errno));
    return n;
  }
  // WATCHDOG_PID names the process that is to ping (when a wrapper started the gateway, not this one).
  const bool ours = pid.empty() || pid == std::to_string(::getpid());
  char* end = nullptr;
  const unsigned long long us = usec.empty() ? 0 : std::strtoull(usec.c_str(), &end, 10);
  if (ours && us > 0 && end && *end == '\0') n.watchdog_every_ = std::chrono::microseconds(us / 2);
  return n;
}

SystemdNotifier::SystemdNotifier(SystemdNotifier&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      address_(other.address_),
      address_size_(other.address_size_),
      where_(std::move(other.where_)),
      failed_(other.failed_),
      watchdog_every_(other.watchdog_every_) {}

SystemdNotifier& SystemdNotifier::operator=(SystemdNotifier&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    address_ = other.address_;
    address_size_ = other.address_size_;
    where_ = std::move(other.where_);
    failed_ = other.failed_;
    watchdog_every_ = other.watchdog_every_;
  }
  return *this;
}

SystemdNotifier::~SystemdNotifier() {
  if (fd_ >= 0) ::close(fd_);
}

void SystemdNotifier::send(std::string_view state) {
  if (fd_ < 0) return;
  const auto sent = ::sendto(fd_, state.data(), state.size(), MSG_NOSIGNAL,
                             reinterpret_cast<const sockaddr*>(&address_), address_size_);
  if (sent < 0 && !failed_) {
    failed_ = true;  // said once: a service manager that went away would fill the log otherwise
    log::warn("systemd: cannot notify {}: {} (further failures are not logged)", where_, std::strerror(errno));
  } else if (sent >= 0) {
    failed_ = false;
  }
}

ServiceNotifications::ServiceNotifications(SystemdNotifier notifier, std::vector<asio::any_io_executor> loops,
                                           Status status)
    : notifier_(std::move(notifier)),
      loops_(std::move(loops)),
      status_(std::move(status)),
      status_timer_(loops_.at(0)),
      watchdog_timer_(loops_.at(0)),
      answered_(std::make_unique<std::atomic<std::uint64_t>[]>(loops_.size())) {}

void ServiceNotifications::ready() {
  if (!notifier_.active()) return;
  last_status_ = status_();
  notifier_.send("READY=1\nSTATUS=" + last_status_);
  log::info("systemd: told the service manager the gateway is ready{}",
            notifier_.watchdog_every()
                ? fmt::format("; watchdog pings every {} ms", notifier_.watchdog_every()->count() / 1000)
                : "");
  refresh_status();
  if (notifier_.watchdog_every()) watchdog_tick();
}

void ServiceNotifications::reloading() {
  if (!notifier_.active() || stopping_) return;
  // systemd (253 and later) matches RELOADING=1 to the reload it started by this monotonic time stamp.
  timespec now{};
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  const auto usec = static_cast<unsigned long long>(now.tv_sec) * 1000000ull + static_cast<unsigned long long>(now.tv_nsec) / 1000;
  notifier_.send(fmt::format("RELOADING=1\nMONOTONIC_USEC={}", usec));
}

void ServiceNotifications::reloaded() {
  if (!notifier_.active() || stopping_) return;
  last_status_ = status_();
  notifier_.send("READY=1\nSTATUS=" + last_status_);
}

void ServiceNotifications::stopping() {
  if (!notifier_.active() || stopping_) return;
  stopping_ = true;
  last_status_ = status_();
  notifier_.send("STOPPING=1\nSTATUS=" + last_status_);
}

void ServiceNotifications::refresh_status() {
  if (auto now = status_(); now != last_status_) {
    last_status_ = std::move(now);
    notifier_.send("STATUS=" + last_status_);
  }
  status_timer_.expires_after(kStatusEvery);
  status_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec) refresh_status();
  });
}

void ServiceNotifications::watchdog_tick() {
  // Every loop ran the handler of the previous round (loop 0 is running this one). A loop stuck in one
  // handler stops the pings, and systemd restarts the service (WatchdogSec=).
  std::size_t silent = 0;
  for (std::size_t i = 0; i < loops_.size(); ++i)
    if (answered_[i].load(std::memory_order_acquire) < round_) ++silent;
  if (silent == 0) {
    notifier_.send("WATCHDOG=1");
  } else {
    log::warn("systemd: {} of {} event loops did not answer within {} ms; no watchdog ping", silent, loops_.size(),
              notifier_.watchdog_every()->count() / 1000);
  }
  ++round_;
  for (std::size_t i = 0; i < loops_.size(); ++i)
    asio::post(loops_[i], [this, i, round = round_] { answered_[i].store(round, std::memory_order_release); });
  watchdog_timer_.expires_after(*notifier_.watchdog_every());
  watchdog_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec) watchdog_tick();
  });
}

}  // namespace rjg::gateway::ops
