#include "gateway/fronts/proxy_protocol.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <exception>
#include <utility>
#include <variant>
#include <vector>

namespace rjg::gateway::fronts {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

namespace {

using Status = ProxyParse::Status;

// The v2 signature has a NUL in its fifth byte: a string_view with an explicit length, never a C string.
constexpr std::string_view kV2Signature{"\r\n\r\n\0\r\nQUIT\n", 12};
constexpr std::string_view kV1Prefix = "PROXY ";

// How much of a header an error message shows.
constexpr std::size_t kShownBytes = 24;

// Bytes from the wire as text a log line can carry: printable ASCII as is, the rest as C escapes.
std::string escaped(std::string_view bytes) {
  std::string text;
  for (const char c : bytes.substr(0, kShownBytes)) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '\r') text += "\\r";
    else if (c == '\n') text += "\\n";
    else if (c == '\t') text += "\\t";
    else if (c == '\\' || c == '\'') text += {'\\', c};
    else if (byte >= 0x20 && byte < 0x7f) text += c;
    else text += fmt::format("\\x{:02x}", byte);
  }
  return text;
}

// 'GET / HTTP/1.1\r\n'... : quoted, and "..." after the quote when cut short.
std::string quoted(std::string_view bytes) {
  return fmt::format("'{}'{}", escaped(bytes), bytes.size() > kShownBytes ? "..." : "");
}

ProxyParse need_more(std::size_t want) {
  ProxyParse parse;
  parse.status = Status::need_more;
  parse.want = want;
  return parse;
}

ProxyParse invalid(std::string error) {
  ProxyParse parse;
  parse.status = Status::invalid;
  parse.error = std::move(error);
  return parse;
}

ProxyParse done(ProxyHeader header) {
  ProxyParse parse;
  parse.status = Status::done;
  parse.header = std::move(header);
  return parse;
}

// v1 addresses as the spec writes them. IPv4: exactly four decimal numbers 0-255 with single dots and no
// leading zeros (which some parsers read as octal). Written here rather than left to inet_pton, whose
// leniency differs between C libraries.
std::optional<asio::ip::address_v4> parse_v1_ipv4(std::string_view text) {
  asio::ip::address_v4::bytes_type bytes{};
  std::size_t at = 0;
  for (std::size_t part = 0; part < 4; ++part) {
    if (part > 0) {
      if (at >= text.size() || text[at] != '.') return std::nullopt;
      ++at;
    }
    const std::size_t start = at;
    unsigned value = 0;
    while (at < text.size() && at - start < 3 && text[at] >= '0' && text[at] <= '9')
      value = value * 10 + static_cast<unsigned>(text[at++] - '0');
    const std::size_t digits = at - start;
    if (digits == 0 || value > 255 || (digits > 1 && text[start] == '0')) return std::nullopt;
    bytes[part] = static_cast<unsigned char>(value);
  }
  if (at != text.size()) return std::nullopt;
  return asio::ip::address_v4(bytes);
}

// IPv6: the text forms inet_pton takes (groups of hex digits, one "::", an embedded IPv4 tail as in
// "::ffff:10.0.0.1", which is what HAProxy prints for a mapped address). No scope ("%eth0"): Asio would take
// it, the spec has none.
std::optional<asio::ip::address_v6> parse_v1_ipv6(std::string_view text) {
  if (text.empty() || text.size() > 45) return std::nullopt;  // 45: INET6_ADDRSTRLEN without its NUL
  const bool allowed = std::all_of(text.begin(), text.end(), [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') || c == ':' || c == '.';
  });
  if (!allowed) return std::nullopt;
  boost::system::error_code ec;
  const auto address = asio::ip::make_address_v6(std::string(text), ec);
  if (ec) return std::nullopt;
  return address;
}

// 0-65535 in decimal, without leading zeros ("0" itself is fine).
std::optional<unsigned short> parse_v1_port(std::string_view text) {
  if (text.empty() || text.size() > 5 || (text.size() > 1 && text[0] == '0')) return std::nullopt;
  unsigned value = 0;
  for (const char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + static_cast<unsigned>(c - '0');
  }
  if (value > 65535) return std::nullopt;
  return static_cast<unsigned short>(value);
}

// "PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\r\n", "PROXY TCP6 ...", "PROXY UNKNOWN[ anything]\r\n";
// `bytes` starts with "PROXY ".
ProxyParse parse_v1(std::string_view bytes) {
  // The protocol word is checked as soon as it arrives, so a wrong one is refused without waiting for a CRLF.
  const std::string_view after = bytes.substr(kV1Prefix.size());
  const std::size_t word_end = after.find_first_of(" \r\n");
  const std::string_view word = after.substr(0, word_end);
  const bool word_complete = word_end != std::string_view::npos;
  constexpr std::array<std::string_view, 3> kWords{"TCP4", "TCP6", "UNKNOWN"};
  const bool known = std::any_of(kWords.begin(), kWords.end(), [&](std::string_view candidate) {
    return word_complete ? word == candidate : candidate.starts_with(word);
  });
  if (!known)
    return invalid(fmt::format("PROXY v1: expected TCP4, TCP6 or UNKNOWN after 'PROXY ', not {}", quoted(after)));
  const bool unknown = word == "UNKNOWN";

  // The line ends at the first CRLF, within 107 bytes; a CR or an LF alone does not end it (the spec says
  // not to tolerate either). After UNKNOWN anything goes until the CRLF; after TCP4/TCP6 only printable
  // ASCII can make a valid line, so anything else is refused at once.
  const std::size_t scan = std::min(bytes.size(), kProxyV1MaxBytes);
  std::size_t end = 0;  // of the header, CRLF included; 0 while not seen
  for (std::size_t i = 0; i < scan && end == 0; ++i) {
    const auto byte = static_cast<unsigned char>(bytes[i]);
    if (byte == '\n') return invalid(fmt::format("PROXY v1: a bare LF at byte {} (the line must end with CRLF)", i));
    if (byte == '\r') {
      if (i + 2 > kProxyV1MaxBytes)
        return invalid(fmt::format("PROXY v1 header longer than {} bytes", kProxyV1MaxBytes));
      if (i + 1 == bytes.size()) return need_more(std::max(kProxyMinBytes, i + 2));
      if (bytes[i + 1] != '\n')
        return invalid(fmt::format("PROXY v1: a CR not followed by LF at byte {} (the line must end with CRLF)", i));
      end = i + 2;
    } else if (!unknown && (byte < 0x20 || byte > 0x7e)) {
      return invalid(fmt::format("PROXY v1: unexpected byte 0x{:02x} at byte {} of {}", byte, i, quoted(bytes)));
    }
  }
  if (end == 0) {
    // No CR yet: the header needs at least a CR and an LF more.
    const std::size_t want = std::max(kProxyMinBytes, bytes.size() + 2);
    if (want > kProxyV1MaxBytes)
      return invalid(fmt::format("PROXY v1 header longer than {} bytes (no CRLF in {})", kProxyV1MaxBytes,
                                 quoted(bytes)));
    return need_more(want);
  }

  ProxyHeader header;
  header.version = 1;
  header.length = end;
  if (unknown) {
    // The balancer could not say (or chose not to): the rest of the line is to be ignored.
    header.local = true;
    return done(std::move(header));
  }

  const std::string_view line = bytes.substr(kV1Prefix.size(), end - 2 - kV1Prefix.size());
  std::vector<std::string_view> fields;
  for (std::size_t start = 0;;) {
    const std::size_t space = line.find(' ', start);
    fields.push_back(line.substr(start, space == std::string_view::npos ? std::string_view::npos : space - start));
    if (space == std::string_view::npos) break;
    start = space + 1;
  }
  if (std::any_of(fields.begin(), fields.end(), [](std::string_view field) { return field.empty(); }))
    return invalid(fmt::format("PROXY v1: fields must be separated by exactly one space: {}", quoted(line)));
  if (fields.size() != 5)
    return invalid(fmt::format("PROXY v1: expected '{} SOURCE DESTINATION SOURCE_PORT DESTINATION_PORT', got {} "
                               "fields: {}",
                               word, fields.size(), quoted(line)));

  const bool v6 = word == "TCP6";
  auto address = [&](std::string_view text) -> std::optional<asio::ip::address> {
    if (v6) {
      if (auto a = parse_v1_ipv6(text)) return asio::ip::address(*a);
    } else if (auto a = parse_v1_ipv4(text)) {
      return asio::ip::address(*a);
    }
    return std::nullopt;
  };
  const char* family = v6 ? "an IPv6" : "an IPv4";
  const auto source = address(fields[1]);
  if (!source)
    return invalid(fmt::format("PROXY v1: bad source address {} (not {} address, as {} says)", quoted(fields[1]),
                               family, word));
  const auto destination = address(fields[2]);
  if (!destination)
    return invalid(fmt::format("PROXY v1: bad destination address {} (not {} address, as {} says)",
                               quoted(fields[2]), family, word));
  const auto source_port = parse_v1_port(fields[3]);
  if (!source_port)
    return invalid(fmt::format("PROXY v1: bad source port {} (0-65535 in decimal, no leading zeros)",
                               quoted(fields[3])));
  const auto destination_port = parse_v1_port(fields[4]);
  if (!destination_port)
    return invalid(fmt::format("PROXY v1: bad destination port {} (0-65535 in decimal, no leading zeros)",
                               quoted(fields[4])));
  header.source = tcp::endpoint(*source, *source_port);
  header.destination = tcp::endpoint(*destination, *destination_port);
  return done(std::move(header));
}

std::uint8_t byte_at(std::string_view bytes, std::size_t i) { return static_cast<std::uint8_t>(bytes[i]); }

unsigned short port_at(std::string_view bytes, std::size_t i) {
  return static_cast<unsigned short>(byte_at(bytes, i) << 8 | byte_at(bytes, i + 1));
}

// The binary header: signature (12), version and command (1), family and protocol (1), length (2, big
// endian), then `length` bytes: addresses, then TLVs (skipped). `bytes` starts with (a prefix of) the
// signature.
ProxyParse parse_v2(std::string_view bytes) {
  constexpr std::size_t kVersionCommand = 12, kFamilyProtocol = 13, kLength = 14;
  // Each byte is checked as soon as it is there: a wrong one need not wait for the rest.
  bool local_command = false;
  if (bytes.size() > kVersionCommand) {
    const auto version_command = byte_at(bytes, kVersionCommand);
    if ((version_command & 0xf0) != 0x20 || (version_command & 0x0f) > 1)
      return invalid(fmt::format("PROXY v2: unsupported version/command byte 0x{:02x} (0x20 LOCAL or 0x21 PROXY)",
                                 version_command));
    local_command = (version_command & 0x0f) == 0;
  }
  // LOCAL: the family is to be ignored, whatever it says (the spec: "discard the protocol block including the
  // family"). PROXY: a family or a protocol the spec does not define is refused.
  const std::uint8_t family_protocol = bytes.size() > kFamilyProtocol ? byte_at(bytes, kFamilyProtocol) : 0;
  const unsigned family = family_protocol >> 4, protocol = family_protocol & 0x0f;
  if (bytes.size() > kFamilyProtocol && !local_command) {
    if (family > 3) return invalid(fmt::format("PROXY v2: unknown address family in byte 0x{:02x}", family_protocol));
    if (protocol > 2)
      return invalid(fmt::format("PROXY v2: unknown transport protocol in byte 0x{:02x}", family_protocol));
    // The gateway serves TCP: a datagram header means a balancer set up for something else.
    if (protocol == 2)
      return invalid(fmt::format("PROXY v2: a datagram (UDP) connection (byte 0x{:02x}); only TCP is served",
                                 family_protocol));
  }
  if (bytes.size() < kProxyV2FixedBytes) return need_more(kProxyV2FixedBytes);

  const std::size_t length = port_at(bytes, kLength);
  if (length > kProxyV2MaxLength)
    return invalid(fmt::format("PROXY v2: the header announces {} bytes after its first 16, more than the {} "
                               "accepted",
                               length, kProxyV2MaxLength));
  // TCP addresses are a fixed size; a length below it cannot hold them. (AF_UNIX addresses are not read, so
  // their length is not checked: the spec says to skip `length` bytes whatever they hold.)
  const bool inet = !local_command && family_protocol == 0x11, inet6 = !local_command && family_protocol == 0x21;
  if (inet && length < 12)
    return invalid(fmt::format("PROXY v2 address block too short for AF_INET ({} bytes, needs 12)", length));
  if (inet6 && length < 36)
    return invalid(fmt::format("PROXY v2 address block too short for AF_INET6 ({} bytes, needs 36)", length));
  const std::size_t total = kProxyV2FixedBytes + length;
  if (bytes.size() < total) return need_more(total);

  ProxyHeader header;
  header.version = 2;
  header.length = total;
  const std::string_view block = bytes.substr(kProxyV2FixedBytes, length);
  if (inet) {
    auto v4 = [&](std::size_t at) {
      return asio::ip::address_v4({byte_at(block, at), byte_at(block, at + 1), byte_at(block, at + 2),
                                   byte_at(block, at + 3)});
    };
    header.source = tcp::endpoint(v4(0), port_at(block, 8));
    header.destination = tcp::endpoint(v4(4), port_at(block, 10));
  } else if (inet6) {
    auto v6 = [&](std::size_t at) {
      asio::ip::address_v6::bytes_type address{};
      std::copy_n(reinterpret_cast<const unsigned char*>(block.data()) + at, address.size(), address.begin());
      return asio::ip::address_v6(address);
    };
    header.source = tcp::endpoint(v6(0), port_at(block, 32));
    header.destination = tcp::endpoint(v6(16), port_at(block, 34));
  } else {
    // LOCAL (the balancer's health checks), or PROXY with AF_UNSPEC, AF_UNIX or an unspecified transport: the
    // spec lets a receiver accept these with the real connection's addresses, and so does the gateway.
    header.local = true;
  }
  return done(std::move(header));
}

std::string decimal_seconds(std::chrono::milliseconds duration) {  // "0.2s"
  return fmt::format("{:g}s", static_cast<double>(duration.count()) / 1000.0);
}

// How much one look at the socket takes in: the largest v2 header without TLVs (16 + 2 * 108, AF_UNIX), so
// every v1 header too. Garbage is refused within these bytes, whatever the client sends after them.
constexpr std::size_t kLookBytes = 232;

// The header, without a timeout. Each round peeks at what has arrived (MSG_PEEK: nothing is taken), parses
// the header bytes taken so far plus those, and then takes exactly the bytes that belong to the header: all
// of them while it is incomplete (each one is a header byte then), only up to its end once it is complete.
// So no byte after the header is ever taken. And no round spins: a peek completes at once only while
// untaken bytes wait, and every round takes what it saw, so the next peek waits for new bytes (Asio tries
// it, then waits for epoll to report new data). A header that arrives in one segment costs a peek and a
// read; one that arrives a byte at a time, a peek and a read per byte.
asio::awaitable<ProxyParse> take_header(tcp::socket& socket) {
  std::string bytes;      // [0, taken): the header bytes taken so far
  std::size_t taken = 0;  // at most 16 + kProxyV2MaxLength: the parser refuses any longer header
  std::size_t want = 0;
  for (;;) {
    // Once a v2 length is known, one look can take in the whole rest of the header.
    const std::size_t look = std::max(kLookBytes, want > taken ? want - taken : 0);
    bytes.resize(taken + look);
    auto [ec, seen] = co_await socket.async_receive(asio::buffer(bytes.data() + taken, look),
                                                    tcp::socket::message_peek, asio::as_tuple(asio::use_awaitable));
    if (ec == asio::error::eof)
      co_return invalid(fmt::format("the connection closed before its PROXY header was complete ({} bytes "
                                    "received{}{})",
                                    taken, taken > 0 ? ": " : "", taken > 0 ? quoted({bytes.data(), taken}) : ""));
    if (ec) co_return invalid(fmt::format("reading the PROXY header failed: {}", ec.message()));

    auto parse = parse_proxy_header({bytes.data(), taken + seen});
    if (parse.status == Status::invalid) co_return parse;
    // Done: the header ends within what was seen (and not before `taken`, or the last round would have said).
    const std::size_t take = parse.status == Status::done ? parse.header.length - taken : seen;
    auto [read_ec, read] = co_await asio::async_read(socket, asio::buffer(bytes.data() + taken, take),
                                                     asio::as_tuple(asio::use_awaitable));
    if (read_ec == asio::error::eof)
      co_return invalid("the connection closed before its PROXY header was complete");
    if (read_ec) co_return invalid(fmt::format("reading the PROXY header failed: {}", read_ec.message()));
    taken += take;
    if (parse.status == Status::done) co_return parse;
    want = parse.want;
  }
}

}  // namespace

ProxyParse parse_proxy_header(std::string_view bytes) {
  if (bytes.empty()) return need_more(kProxyMinBytes);
  // The first byte tells the versions apart: 'P' for v1, CR for v2.
  const bool v2 = bytes[0] == kV2Signature[0];
  const std::string_view start = v2 ? kV2Signature : kV1Prefix;
  const std::size_t compared = std::min(bytes.size(), start.size());
  if (bytes.substr(0, compared) != start.substr(0, compared))
    return invalid(fmt::format("not a PROXY protocol header (it starts with {})", quoted(bytes)));
  if (v2) return parse_v2(bytes);
  if (bytes.size() < kV1Prefix.size()) return need_more(kProxyMinBytes);
  return parse_v1(bytes);
}

std::string proxy_header_text(const ProxyHeader& header) {
  auto endpoint = [](const tcp::endpoint& e) {
    const auto address = e.address().to_string();
    return fmt::format("{}:{}", e.address().is_v6() ? "[" + address + "]" : address, e.port());
  };
  if (header.local || !header.source || !header.destination)
    return fmt::format("PROXY v{} {}", header.version, header.version == 1 ? "UNKNOWN" : "LOCAL");
  return fmt::format("PROXY v{} from {} to {}", header.version, endpoint(*header.source),
                     endpoint(*header.destination));
}

asio::awaitable<ProxyParse> read_proxy_header(tcp::socket& socket, std::chrono::milliseconds timeout) {
  using namespace asio::experimental::awaitable_operators;
  try {
    // The read and a timer race; the loser is cancelled (the read's pending operation ends with
    // operation_aborted, and the connection is the caller's to close).
    asio::steady_timer timer(socket.get_executor(), timeout);
    auto winner = co_await (take_header(socket) || timer.async_wait(asio::as_tuple(asio::use_awaitable)));
    if (winner.index() == 0) co_return std::get<0>(std::move(winner));
    // The timer's wait ends with an error only when the caller's cancellation reached it first.
    if (auto [ec] = std::get<1>(winner); ec)
      co_return invalid(fmt::format("waiting for the PROXY header was cancelled: {}", ec.message()));
    co_return invalid(fmt::format("timed out after {} waiting for the PROXY header", decimal_seconds(timeout)));
  } catch (const std::exception& e) {
    // A cancellation that came before the first wait, or memory: still a result, as promised.
    co_return invalid(fmt::format("reading the PROXY header failed: {}", e.what()));
  }
}

}  // namespace rjg::gateway::fronts
