#include "config/network.hpp"

#include <fmt/format.h>

#include <arpa/inet.h>

#include <algorithm>
#include <cctype>
#include <cstring>

namespace rjg::config {

std::optional<ListenAddress> parse_listen_address(std::string_view text, std::string* why) {
  auto fail = [&](std::string reason) -> std::optional<ListenAddress> {
    if (why) *why = std::move(reason);
    return std::nullopt;
  };
  if (text == "systemd" || text.starts_with("systemd:")) {
    ListenAddress passed;
    passed.text = std::string(text);
    passed.kind = ListenAddress::Kind::systemd;
    if (text == "systemd") return passed;
    // The names sd_listen_fds_with_names(3) gives: FileDescriptorName= allows at most 255 printable ASCII
    // characters without ':' (the separator in LISTEN_FDNAMES).
    std::string_view name = text.substr(8);
    if (name.empty()) return fail("the socket name after \"systemd:\" is missing");
    if (name.size() > 255) return fail("the socket name is longer than 255 characters");
    for (char c : name)
      if (c <= ' ' || c > '~' || c == ':')
        return fail("a socket name is printable ASCII without spaces or ':', as FileDescriptorName= allows");
    passed.fd_name = std::string(name);
    return passed;
  }
  if (text.starts_with("unix:")) {
    std::string_view path = text.substr(5);
    if (path.starts_with("//")) return fail("a Unix socket is written \"unix:/PATH\", with one slash before the path");
    if (path.empty() || path.front() != '/') return fail("the socket path after \"unix:\" must be absolute");
    // sun_path holds 108 bytes, the terminating NUL included.
    if (path.size() > 107) return fail("the socket path is longer than 107 bytes, the most a Unix socket address holds");
    if (path.back() == '/') return fail("the socket path names a directory");
    for (char c : path)
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return fail("the socket path has a control character");
    ListenAddress address;
    address.kind = ListenAddress::Kind::unix_socket;
    address.path = std::string(path);
    address.text = std::string(text);
    return address;
  }
  constexpr std::string_view kScheme = "tcp://";
  if (text.substr(0, kScheme.size()) != kScheme) return fail("it does not start with tcp:// (or unix: or systemd)");
  std::string_view rest = text.substr(kScheme.size());

  std::string host;
  std::string_view port_text;
  if (!rest.empty() && rest.front() == '[') {
    auto close = rest.find(']');
    if (close == std::string_view::npos) return fail("the IPv6 address has no closing ']'");
    host = std::string(rest.substr(1, close - 1));
    in6_addr addr6{};
    if (inet_pton(AF_INET6, host.c_str(), &addr6) != 1)
      return fail(fmt::format("'{}' is not an IPv6 address", host));
    rest.remove_prefix(close + 1);
    if (rest.empty() || rest.front() != ':') return fail("the port is missing after the address");
    port_text = rest.substr(1);
  } else {
    auto colon = rest.rfind(':');
    if (colon == std::string_view::npos) return fail("the port is missing (\":PORT\")");
    host = std::string(rest.substr(0, colon));
    port_text = rest.substr(colon + 1);
    if (host.empty()) return fail("the host is missing");
    in_addr addr4{};
    if (host != "localhost" && inet_pton(AF_INET, host.c_str(), &addr4) != 1) {
      if (host.find(':') != std::string::npos) return fail("an IPv6 address must be written in brackets");
      return fail(fmt::format("'{}' is neither an IPv4 address nor localhost", host));
    }
  }
  if (port_text.empty()) return fail("the port is missing");
  if (port_text.size() > 5 || !std::all_of(port_text.begin(), port_text.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return fail(fmt::format("port '{}' is not a number from 1 to 65535", port_text));
  unsigned long port = std::stoul(std::string(port_text));
  if (port > 65535) return fail(fmt::format("port {} is not from 1 to 65535", port));
  ListenAddress address;
  address.host = std::move(host);
  address.port = static_cast<unsigned short>(port);
  address.text = std::string(text);
  return address;
}

std::optional<UpstreamAddress> parse_upstream_address(std::string_view text, std::string* why) {
  auto fail = [&](std::string reason) -> std::optional<UpstreamAddress> {
    if (why) *why = std::move(reason);
    return std::nullopt;
  };
  UpstreamAddress address;
  address.text = std::string(text);
  std::string_view rest;
  if (text.starts_with("tcp://")) {
    rest = text.substr(6);
  } else if (text.starts_with("http://")) {
    address.http = true;
    rest = text.substr(7);
    if (auto slash = rest.find('/'); slash != std::string_view::npos) {
      address.path = std::string(rest.substr(slash));
      rest = rest.substr(0, slash);
      for (char c : address.path)
        if (c <= ' ' || c > '~') return fail("the path has a space or a character that is not printable ASCII");
    }
  } else {
    return fail("it does not start with tcp:// or http://");
  }
  std::string_view port_text;
  if (!rest.empty() && rest.front() == '[') {
    auto close = rest.find(']');
    if (close == std::string_view::npos) return fail("the IPv6 address has no closing ']'");
    address.host = std::string(rest.substr(1, close - 1));
    in6_addr addr6{};
    if (inet_pton(AF_INET6, address.host.c_str(), &addr6) != 1)
      return fail(fmt::format("'{}' is not an IPv6 address", address.host));
    rest.remove_prefix(close + 1);
    if (!rest.starts_with(':')) return fail("the port is missing after the address");
    port_text = rest.substr(1);
  } else {
    auto colon = rest.rfind(':');
    if (colon == std::string_view::npos) return fail("the port is missing (\":PORT\")");
    address.host = std::string(rest.substr(0, colon));
    port_text = rest.substr(colon + 1);
    if (address.host.empty()) return fail("the host is missing");
    if (address.host.find(':') != std::string::npos) return fail("an IPv6 address must be written in brackets");
    // A DNS name or an address: letters, digits, '-', '.' and '_' (names of containers and hosts in labs).
    for (char c : address.host)
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '.' && c != '_')
        return fail(fmt::format("'{}' is not a host name or address", address.host));
  }
  if (port_text.empty() || port_text.size() > 5 ||
      !std::all_of(port_text.begin(), port_text.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return fail(fmt::format("port '{}' is not a number from 1 to 65535", port_text));
  unsigned long port = std::stoul(std::string(port_text));
  if (port == 0 || port > 65535) return fail(fmt::format("port {} is not from 1 to 65535", port));
  address.port = static_cast<unsigned short>(port);
  return address;
}

namespace {

constexpr unsigned char kMappedPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

bool is_v4_mapped(const unsigned char* bytes16) { return std::memcmp(bytes16, kMappedPrefix, 12) == 0; }

// Whether the first `prefix` bits of a and b are equal.
bool same_prefix(const unsigned char* a, const unsigned char* b, int prefix) {
  int whole = prefix / 8;
  if (std::memcmp(a, b, static_cast<std::size_t>(whole)) != 0) return false;
  int rest = prefix % 8;
  if (rest == 0) return true;
  auto mask = static_cast<unsigned char>(0xff << (8 - rest));
  return (a[whole] & mask) == (b[whole] & mask);
}

}  // namespace

bool Network::contains_bytes(bool address_v6, const unsigned char* address) const {
  if (!v6) {
    if (!address_v6) return same_prefix(bytes.data(), address, prefix);
    return is_v4_mapped(address) && same_prefix(bytes.data(), address + 12, prefix);
  }
  if (address_v6) return same_prefix(bytes.data(), address, prefix);
  unsigned char mapped[16];
  std::memcpy(mapped, kMappedPrefix, 12);
  std::memcpy(mapped + 12, address, 4);
  return same_prefix(bytes.data(), mapped, prefix);
}

bool Network::contains(std::string_view ip_text) const {
  // A scope ("fe80::1%eth0") does not change which network an address is in.
  std::string text(ip_text.substr(0, ip_text.find('%')));
  unsigned char address[16];
  if (text.find(':') != std::string::npos) {
    if (inet_pton(AF_INET6, text.c_str(), address) != 1) return false;
    return contains_bytes(true, address);
  }
  if (inet_pton(AF_INET, text.c_str(), address) != 1) return false;
  return contains_bytes(false, address);
}

std::optional<Network> parse_network(std::string_view text, std::string* why) {
  auto fail = [&](std::string reason) -> std::optional<Network> {
    if (why) *why = std::move(reason);
    return std::nullopt;
  };
  if (text.empty()) return fail("it is empty");
  Network network;
  network.text = std::string(text);
  auto slash = text.find('/');
  std::string address(text.substr(0, slash));
  if (address.empty()) return fail("the address is missing");
  network.v6 = address.find(':') != std::string::npos;
  if (network.v6) {
    if (address.front() == '[') return fail("an IPv6 network is written without brackets");
    if (inet_pton(AF_INET6, address.c_str(), network.bytes.data()) != 1)
      return fail(fmt::format("'{}' is not an IPv6 address", address));
  } else if (inet_pton(AF_INET, address.c_str(), network.bytes.data()) != 1) {
    return fail(fmt::format("'{}' is not an IPv4 address", address));
  }
  const int bits = network.v6 ? 128 : 32;
  network.prefix = bits;
  if (slash != std::string_view::npos) {
    std::string_view prefix = text.substr(slash + 1);
    bool digits = !prefix.empty() && prefix.size() <= 3 &&
                  std::all_of(prefix.begin(), prefix.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (!digits || (prefix.size() > 1 && prefix[0] == '0'))
      return fail(fmt::format("prefix '/{}' is not a number from 0 to {}", prefix, bits));
    network.prefix = std::stoi(std::string(prefix));
    if (network.prefix > bits) return fail(fmt::format("prefix /{} is more than {}", network.prefix, bits));
  }
  // Host bits are allowed ("10.1.2.3/8" is 10.0.0.0/8): clear them, so that equal networks compare equal.
  for (int bit = network.prefix; bit < bits; ++bit)
    network.bytes[static_cast<std::size_t>(bit / 8)] &= static_cast<unsigned char>(~(0x80u >> (bit % 8)));
  if (network.v6 && network.prefix >= 96 && is_v4_mapped(network.bytes.data())) {
    std::memmove(network.bytes.data(), network.bytes.data() + 12, 4);
    std::fill(network.bytes.begin() + 4, network.bytes.end(), 0);
    network.v6 = false;
    network.prefix -= 96;
  }
  return network;
}

}  // namespace rjg::config
