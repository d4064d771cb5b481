// The PROXY protocol (HAProxy's doc/proxy-protocol.txt), versions 1 (text) and 2 (binary): the header a load
// balancer in TCP mode puts before a client's bytes, to say who the client really is. A listener that expects
// it reads it first, then serves the rest of the connection as usual; one that does not expect it never looks
// for it (the spec forbids guessing, or any client could claim any address).
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace rjg::gateway::fronts {

// A v1 line is at most 107 bytes with its CRLF ("PROXY UNKNOWN" and two full IPv6 addresses); the shortest
// header of either version is "PROXY UNKNOWN\r\n".
inline constexpr std::size_t kProxyV1MaxBytes = 107;
inline constexpr std::size_t kProxyMinBytes = 15;
// A v2 header is 16 bytes, then as many as its length field says (addresses, then TLVs). The field allows
// 65535; a balancer sends 12 or 36 bytes of addresses and a few TLVs, so more than this is refused rather
// than buffered.
inline constexpr std::size_t kProxyV2FixedBytes = 16;
inline constexpr std::size_t kProxyV2MaxLength = 4096;

struct ProxyHeader {
  int version = 0;  // 1 or 2
  // The balancer's own connection, not a relayed one: v2 LOCAL (its health checks), v1 "PROXY UNKNOWN", and
  // v2 PROXY with an address family or protocol the spec lets a receiver treat as unspecified (AF_UNSPEC,
  // AF_UNIX, or transport UNSPEC). No addresses: use the real connection's, as the spec says.
  bool local = false;
  std::optional<boost::asio::ip::tcp::endpoint> source;       // the real client (when not local)
  std::optional<boost::asio::ip::tcp::endpoint> destination;  // the address the client connected to
  std::size_t length = 0;  // bytes of the header, TLVs included: consume exactly these
};

struct ProxyParse {
  enum class Status { need_more, done, invalid };
  Status status = Status::need_more;
  ProxyHeader header;  // done
  std::string error;   // invalid: why, for a log line (bytes from the wire escaped)
  // need_more: the header is at least this many bytes long in total (it is a lower bound, never beyond the
  // header's end: reading up to `want` bytes never takes a byte that follows the header). v2: 16 until the
  // length field has arrived, then 16 + length; v1: the line so far plus its CRLF.
  std::size_t want = 0;
};

// Parses the header at the start of `bytes`, which may go on past it (the client's first bytes): done says
// how long the header is. Pure: the same bytes, the same answer. Strict, as the spec asks: a byte that no
// valid header could have there makes it invalid as soon as it is seen, so garbage is refused within its
// first bytes and never waited on.
ProxyParse parse_proxy_header(std::string_view bytes);

// "PROXY v2 from 203.0.113.7:51234 to 10.0.0.1:8271", "PROXY v2 LOCAL", "PROXY v1 UNKNOWN": for log lines.
std::string proxy_header_text(const ProxyHeader& header);

// Reads and consumes the PROXY header at the start of `socket`, within `timeout`. Throws nothing: the
// result says what happened (done with the header, or invalid with the reason, including "timed out after
// Ns waiting for the PROXY header" and "the connection closed before its PROXY header was complete").
// Never consumes a byte past the header: whatever the client sent after it is still unread in the socket.
// Looks at no more than a few hundred bytes of garbage before it refuses it, whatever the client sends.
boost::asio::awaitable<ProxyParse> read_proxy_header(boost::asio::ip::tcp::socket& socket,
                                                     std::chrono::milliseconds timeout);

}  // namespace rjg::gateway::fronts
