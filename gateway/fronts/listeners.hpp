// Opening what the gateway listens on: TCP addresses, Unix socket files and the sockets systemd passed.
// Kept apart from accepting (admission.hpp) because the admin endpoint and the classic front open their
// listeners the same way and accept on their own.
#pragma once

#include "config/config.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

namespace rjg::gateway::ops {
class PassedSockets;
}  // namespace rjg::gateway::ops

namespace rjg::gateway::fronts {

namespace asio = boost::asio;

struct Listener {
  using unix_socket = asio::local::stream_protocol;
  std::string entry;  // the listen entry it serves, as written
  std::shared_ptr<asio::ip::tcp::acceptor> acceptor;     // tcp and systemd entries
  std::shared_ptr<unix_socket::acceptor> unix_acceptor;  // unix: entries
  std::string path;   // unix: the socket file, removed when the listener closes
  ino_t inode = 0;    // ... if it is still the one bound here
  std::string text() const;
  void close() const;
};

// The listeners of one entry, bound (tcp, unix: with gw's unix_mode and unix_group) or taken from what
// systemd passed (passed: none outside start, where a systemd entry cannot be served); a bare "systemd"
// leaves the names in `named` to other entries. Throws std::runtime_error naming the entry on failure.
std::vector<Listener> open_listen_entry(asio::io_context& io, const config::Gateway& gw,
                                        const config::ListenAddress& address, ops::PassedSockets* passed,
                                        const std::vector<std::string>& named);

// The names "systemd:NAME" entries take, in every section: a bare "systemd" leaves those sockets to them.
std::vector<std::string> named_sockets(const config::Config& config);

}  // namespace rjg::gateway::fronts
