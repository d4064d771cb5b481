#include "gateway/systemd.hpp"

#include "common/log.hpp"

#include <boost/asio/post.hpp>

#include <fmt/format.h>

#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <utility>

namespace rjg::gateway {
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
}  // namespace

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

}  // namespace rjg::gateway
