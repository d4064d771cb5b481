// Addresses in the configuration: where the gateway listens ([gateway] listen) and which clients it serves
// ([gateway] allow_from).
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>

namespace rjg::config {

// One address to listen on: "tcp://HOST:PORT" (HOST may be an IPv6 literal in brackets), a Unix socket
// "unix:/ABSOLUTE/PATH", or sockets systemd passed (socket activation): "systemd:NAME" those named NAME
// (FileDescriptorName=), a bare "systemd" every passed socket that no other entry names.
struct ListenAddress {
  enum class Kind { tcp, systemd, unix_socket };
  std::string host;  // tcp: "127.0.0.1", "localhost" or an IPv6 address without its brackets ("::1")
  unsigned short port = 0;
  std::string text;  // as written, for log lines
  Kind kind = Kind::tcp;
  std::string fd_name;  // systemd: the name; empty for a bare "systemd"
  std::string path;     // unix_socket: the socket file's absolute path

  bool operator==(const ListenAddress&) const = default;
};

// One network of [gateway] allow_from, from "10.0.0.0/8", "192.168.1.7" (= /32), "::1/128" or "fd00::/8".
// Host bits below the prefix are allowed in the text and cleared in bytes. An IPv4-mapped IPv6 network
// with a prefix of at least 96 ("::ffff:10.0.0.0/104") is stored as the IPv4 network (10.0.0.0/8).
struct Network {
  std::string text;  // as written, for log lines
  bool v6 = false;
  std::array<unsigned char, 16> bytes{};  // network address in network byte order; IPv4 uses the first 4
  int prefix = 0;                         // 0-32 (IPv4) or 0-128 (IPv6)

  // Whether the address (textual, as from a socket: "10.1.2.3", "::1", "::ffff:10.1.2.3", "fe80::1%eth0")
  // is in this network. IPv4-mapped IPv6 addresses count as their IPv4 address, and an IPv4 address
  // counts as its mapped form for an IPv6 network (so "::/0" contains every address). Invalid text: false.
  bool contains(std::string_view ip_text) const;
  // Same, from raw bytes in network byte order: 16 bytes when v6, else 4.
  bool contains_bytes(bool v6, const unsigned char* bytes) const;
  // The same network (the text aside): "10.1.2.3/8" and "10.0.0.0/8" are.
  bool same_network(const Network& other) const {
    return v6 == other.v6 && prefix == other.prefix && bytes == other.bytes;
  }
  bool operator==(const Network&) const = default;  // the same network, written the same way
};

// Parses "tcp://HOST:PORT" (HOST: IPv4 literal, localhost, or [IPv6]; PORT 0-65535, 0 picks a free port),
// "unix:/PATH" (absolute, at most 107 bytes: sun_path), "systemd" or "systemd:NAME" (NAME: 1 to 255 printable
// ASCII characters, no ':').
// Returns nullopt if invalid, and says why in *why when given.
std::optional<ListenAddress> parse_listen_address(std::string_view text, std::string* why = nullptr);

// Where an upstream library server listens: "tcp://HOST:PORT" (a server of the protocol) or
// "http://HOST:PORT[/PATH]" (a classic remote server, XML-RPC over HTTP), with HOST a name (resolved at
// each connect), an IPv4 address or [IPv6]; PORT 1-65535; PATH printable ASCII without spaces.
struct UpstreamAddress {
  std::string host;  // without brackets
  unsigned short port = 0;
  std::string text;  // as written
  bool http = false;
  std::string path;  // http: "/PATH" as written, or "" when the URL has none
};
std::optional<UpstreamAddress> parse_upstream_address(std::string_view text, std::string* why = nullptr);

// Parses "ADDRESS" or "ADDRESS/PREFIX" (IPv4 or IPv6 literal, no brackets). Returns nullopt if invalid, and
// says why in *why when given.
std::optional<Network> parse_network(std::string_view text, std::string* why = nullptr);

}  // namespace rjg::config
