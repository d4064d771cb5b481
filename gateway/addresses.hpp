// Peer and listener addresses, as the client listeners and the admin endpoint both use them.
#pragma once

#include "config/network.hpp"

#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <fmt/format.h>

#include <string>
#include <vector>

namespace rjg::gateway {

// "tcp://127.0.0.1:8271", "tcp://[::1]:8271": a listener as the log names it.
inline std::string endpoint_text(const boost::asio::ip::tcp::endpoint& bound) {
  const auto address = bound.address().to_string();
  return fmt::format("tcp://{}:{}", bound.address().is_v6() ? "[" + address + "]" : address, bound.port());
}

// Whether a peer may connect: `networks` empty allows every address; an IPv4-mapped IPv6 peer counts as
// its IPv4 address (config::Network::contains_bytes).
inline bool allowed(const std::vector<config::Network>& networks, const boost::asio::ip::address& address) {
  if (networks.empty()) return true;
  for (const auto& net : networks) {
    if (address.is_v4()) {
      const auto bytes = address.to_v4().to_bytes();
      if (net.contains_bytes(false, bytes.data())) return true;
    } else {
      const auto bytes = address.to_v6().to_bytes();
      if (net.contains_bytes(true, bytes.data())) return true;
    }
  }
  return false;
}

}  // namespace rjg::gateway
