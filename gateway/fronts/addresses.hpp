// Peer and listener addresses, as the client listeners and the admin endpoint both use them.
#pragma once

#include "config/network.hpp"

#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <fmt/format.h>

#include <string>
#include <vector>

namespace rjg::gateway::fronts {

// "tcp://127.0.0.1:8271", "tcp://[::1]:8271": a listener as the log names it.
inline std::string endpoint_text(const boost::asio::ip::tcp::endpoint& bound) {
  const auto address = bound.address().to_string();
  return fmt::format("tcp://{}:{}", bound.address().is_v6() ? "[" + address + "]" : address, bound.port());
}

// A client address as it is counted and shown: an IPv4-mapped IPv6 address (a dual-stack listener, or a
// PROXY header's TCP6 ::ffff:10.1.2.3) is its IPv4 address, so that one client is one key for every
// per-client limit, as it is one address for allow_from.
inline std::string address_text(const boost::asio::ip::address& address) {
  if (address.is_v6() && address.to_v6().is_v4_mapped())
    return boost::asio::ip::make_address_v4(boost::asio::ip::v4_mapped, address.to_v6()).to_string();
  return address.to_string();
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

}  // namespace rjg::gateway::fronts
