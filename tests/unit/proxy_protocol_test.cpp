// PROXY protocol headers (HAProxy's doc/proxy-protocol.txt). The parser on golden bytes: every good form of
// both versions, each of them cut at every length (need_more, with a `want` that never reaches past the
// header), and every kind of malformed header. The reader over real loopback TCP connections: a header and
// a payload in one segment, a header dribbled a byte at a time, silence, an early close, and garbage, small
// and large. No timing is asserted; every wait is bounded (kBound) so that a hang fails instead.
#include "gateway/fronts/proxy_protocol.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace {

using namespace std::chrono_literals;
using rjg::gateway::fronts::parse_proxy_header;
using rjg::gateway::fronts::proxy_header_text;
using rjg::gateway::fronts::ProxyParse;
using rjg::gateway::fronts::read_proxy_header;
using Status = ProxyParse::Status;
namespace asio = boost::asio;
using tcp = asio::ip::tcp;

constexpr auto kBound = 10s;  // every test's event loop ends by then

const std::string kSignature("\r\n\r\n\0\r\nQUIT\n", 12);

std::string bytes(std::initializer_list<int> values) {
  std::string out;
  for (int v : values) out += static_cast<char>(v);
  return out;
}

// A v2 header: signature, version/command, family/protocol, the length of `rest`, then `rest`.
std::string v2(int version_command, int family_protocol, const std::string& rest) {
  return kSignature + bytes({version_command, family_protocol, static_cast<int>(rest.size() >> 8),
                             static_cast<int>(rest.size() & 0xff)}) +
         rest;
}

// 192.0.2.1:51234 -> 10.0.0.1:8271, as v2 writes it.
const std::string kInetBlock = bytes({192, 0, 2, 1, 10, 0, 0, 1, 0xc8, 0x22, 0x20, 0x4f});
// [2001:db8::7]:443 -> [::1]:8271.
const std::string kInet6Block = bytes({0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7,  //
                                       0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1,           //
                                       0x01, 0xbb, 0x20, 0x4f});
// A NOOP TLV of 3 bytes and an ALPN TLV ("h2"), as HAProxy may append.
const std::string kTlvs = bytes({0x04, 0x00, 0x03, 0, 0, 0, 0x01, 0x00, 0x02, 'h', '2'});

tcp::endpoint endpoint(std::string_view address, unsigned short port) {
  return tcp::endpoint(asio::ip::make_address(std::string(address)), port);
}

ProxyParse parse_done(const std::string& header) {
  auto parse = parse_proxy_header(header);
  EXPECT_EQ(parse.status, Status::done) << parse.error;
  EXPECT_EQ(parse.header.length, header.size());
  return parse;
}

void expect_invalid(const std::string& input, std::string_view why) {
  const auto parse = parse_proxy_header(input);
  ASSERT_EQ(parse.status, Status::invalid) << "for " << ::testing::PrintToString(input);
  EXPECT_NE(parse.error.find(why), std::string::npos) << "error: " << parse.error << "\nexpected: " << why;
}

// Every strict prefix is need_more with a `want` beyond it and within the header; the whole header is done,
// and so is the header followed by a client's bytes, with the same length.
void expect_every_prefix(const std::string& header) {
  for (std::size_t cut = 0; cut < header.size(); ++cut) {
    const auto parse = parse_proxy_header(std::string_view(header).substr(0, cut));
    ASSERT_EQ(parse.status, Status::need_more) << "cut at " << cut << ": " << parse.error;
    EXPECT_GT(parse.want, cut) << "cut at " << cut;
    EXPECT_LE(parse.want, header.size()) << "cut at " << cut;
  }
  parse_done(header);
  const auto followed = parse_proxy_header(header + "{\"jsonrpc\":\"2.0\"}\r\n");
  ASSERT_EQ(followed.status, Status::done) << followed.error;
  EXPECT_EQ(followed.header.length, header.size());
}

// ---- v1 ----

TEST(ProxyV1, Tcp4) {
  const auto parse = parse_done("PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\r\n");
  EXPECT_EQ(parse.header.version, 1);
  EXPECT_FALSE(parse.header.local);
  EXPECT_EQ(parse.header.source, endpoint("192.168.0.1", 56324));
  EXPECT_EQ(parse.header.destination, endpoint("192.168.0.11", 443));
  EXPECT_EQ(proxy_header_text(parse.header), "PROXY v1 from 192.168.0.1:56324 to 192.168.0.11:443");
}

TEST(ProxyV1, Tcp4Extremes) {
  const auto parse = parse_done("PROXY TCP4 255.255.255.255 0.0.0.0 65535 0\r\n");
  EXPECT_EQ(parse.header.source, endpoint("255.255.255.255", 65535));
  EXPECT_EQ(parse.header.destination, endpoint("0.0.0.0", 0));
}

TEST(ProxyV1, Tcp6) {
  auto parse = parse_done("PROXY TCP6 2001:db8::7 ::1 443 8271\r\n");
  EXPECT_EQ(parse.header.source, endpoint("2001:db8::7", 443));
  EXPECT_EQ(parse.header.destination, endpoint("::1", 8271));
  EXPECT_EQ(proxy_header_text(parse.header), "PROXY v1 from [2001:db8::7]:443 to [::1]:8271");
  // The longest TCP6 line (104 bytes), upper case hex digits, and a mapped IPv4 address as HAProxy prints it.
  const std::string full = "PROXY TCP6 ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff FFFF:FFFF:FFFF:FFFF:FFFF:FFFF:FFFF:FFFF "
                           "65535 65535\r\n";
  EXPECT_EQ(full.size(), 104u);
  parse_done(full);
  parse = parse_done("PROXY TCP6 ::ffff:10.0.0.1 ::ffff:10.0.0.2 1 2\r\n");
  EXPECT_EQ(parse.header.source, endpoint("::ffff:10.0.0.1", 1));
}

TEST(ProxyV1, Unknown) {
  auto parse = parse_done("PROXY UNKNOWN\r\n");
  EXPECT_EQ(parse.header.version, 1);
  EXPECT_TRUE(parse.header.local);
  EXPECT_FALSE(parse.header.source);
  EXPECT_FALSE(parse.header.destination);
  EXPECT_EQ(proxy_header_text(parse.header), "PROXY v1 UNKNOWN");
  // Whatever follows UNKNOWN is ignored, up to the 107-byte worst case the spec gives.
  const std::string worst =
      "PROXY UNKNOWN ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff 65535 65535\r\n";
  EXPECT_EQ(worst.size(), 107u);
  parse = parse_done(worst);
  EXPECT_TRUE(parse.header.local);
  parse = parse_done("PROXY UNKNOWN whatever  it\tsays\r\n");
  EXPECT_TRUE(parse.header.local);
}

TEST(ProxyV1, EveryPrefixNeedsMore) {
  expect_every_prefix("PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\r\n");
  expect_every_prefix("PROXY TCP6 2001:db8::7 ::1 443 8271\r\n");
  expect_every_prefix("PROXY UNKNOWN\r\n");
  expect_every_prefix("PROXY UNKNOWN ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff "
                      "65535 65535\r\n");
  // A CR at the end: exactly one byte more (the LF) may finish the header.
  const auto parse = parse_proxy_header("PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r");
  ASSERT_EQ(parse.status, Status::need_more);
  EXPECT_EQ(parse.want, std::string("PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r\n").size());
}

TEST(ProxyV1, NotAProxyHeader) {
  expect_invalid("GET / HTTP/1.1\r\nHost: example\r\n\r\n",
                 "not a PROXY protocol header (it starts with 'GET / HTTP/1.1\\r\\n");
  expect_invalid("G", "not a PROXY protocol header (it starts with 'G')");
  expect_invalid("proxy TCP4 1.2.3.4 5.6.7.8 1 2\r\n", "not a PROXY protocol header");
  expect_invalid("PROXX", "not a PROXY protocol header");
  expect_invalid("PROXY\r\n", "not a PROXY protocol header");
  expect_invalid("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"run_keyword\"}", "it starts with '{\"jsonrpc\"");
  // A TLS ClientHello: non-printable bytes are escaped, and a long start is cut with "...".
  expect_invalid(bytes({0x16, 0x03, 0x01, 0x02, 0x00, 0x01}) + std::string(40, 'x'),
                 "it starts with '\\x16\\x03\\x01\\x02\\x00\\x01xxxxxxxxxxxxxxxxxx'...");
}

TEST(ProxyV1, BadProtocolWord) {
  expect_invalid("PROXY TCP5 1.2.3.4 5.6.7.8 1 2\r\n", "expected TCP4, TCP6 or UNKNOWN after 'PROXY ', not 'TCP5 ");
  expect_invalid("PROXY tcp4 1.2.3.4 5.6.7.8 1 2\r\n", "expected TCP4, TCP6 or UNKNOWN");
  expect_invalid("PROXY  TCP4 1.2.3.4 5.6.7.8 1 2\r\n", "expected TCP4, TCP6 or UNKNOWN");
  expect_invalid("PROXY \r\n", "expected TCP4, TCP6 or UNKNOWN");
  expect_invalid("PROXY UNKNOWNX\r\n", "expected TCP4, TCP6 or UNKNOWN");
  expect_invalid("PROXY TCP44", "expected TCP4, TCP6 or UNKNOWN");
  // Refused as soon as the wrong byte is there, before any CRLF.
  expect_invalid("PROXY TCX", "expected TCP4, TCP6 or UNKNOWN");
}

TEST(ProxyV1, LineEnd) {
  expect_invalid("PROXY TCP4 1.2.3.4 5.6.7.8 1 2\n", "a bare LF at byte 30");
  expect_invalid("PROXY TCP4 1.2.3.4 5.6.7.8 1 2\rX", "a CR not followed by LF at byte 30");
  expect_invalid("PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r\r\n", "a CR not followed by LF");
  expect_invalid("PROXY UNKNOWN a\nb\r\n", "a bare LF");
  // No CRLF within 107 bytes, with or without more bytes after them.
  const std::string long_unknown = "PROXY UNKNOWN " + std::string(93, 'f');
  EXPECT_EQ(long_unknown.size(), 107u);
  expect_invalid(long_unknown, "PROXY v1 header longer than 107 bytes");
  expect_invalid(long_unknown + "\r\n", "PROXY v1 header longer than 107 bytes");
  expect_invalid(long_unknown.substr(0, 106), "PROXY v1 header longer than 107 bytes");  // even a CRLF ends at 108
  expect_invalid(long_unknown.substr(0, 106) + "\r", "PROXY v1 header longer than 107 bytes");
  expect_invalid("PROXY TCP4 " + std::string(200, '1'), "PROXY v1 header longer than 107 bytes");
  // 105 bytes, then CRLF: 107, the most there can be.
  parse_done(long_unknown.substr(0, 105) + "\r\n");
}

TEST(ProxyV1, Fields) {
  expect_invalid("PROXY TCP4  1.2.3.4 5.6.7.8 1 2\r\n", "fields must be separated by exactly one space");
  expect_invalid("PROXY TCP4 1.2.3.4  5.6.7.8 1 2\r\n", "fields must be separated by exactly one space");
  expect_invalid("PROXY TCP4 1.2.3.4 5.6.7.8 1 2 \r\n", "fields must be separated by exactly one space");
  expect_invalid("PROXY TCP4 \r\n", "fields must be separated by exactly one space");
  expect_invalid("PROXY TCP4\r\n", "got 1 fields");
  expect_invalid("PROXY TCP4 1.2.3.4 5.6.7.8 1\r\n",
                 "expected 'TCP4 SOURCE DESTINATION SOURCE_PORT DESTINATION_PORT', got 4");
  expect_invalid("PROXY TCP6 ::1 ::1 1 2 3\r\n",
                 "expected 'TCP6 SOURCE DESTINATION SOURCE_PORT DESTINATION_PORT', got 6");
  expect_invalid("PROXY TCP4 1.2.3.4\t5.6.7.8 1 2\r\n", "unexpected byte 0x09 at byte 18");
  expect_invalid("PROXY TCP4 1.2.3.4 " + bytes({0}), "unexpected byte 0x00");
  expect_invalid("PROXY TCP4 1.2.3.4 " + bytes({0xc3, 0xa9}), "unexpected byte 0xc3");
}

TEST(ProxyV1, Addresses) {
  for (const char* bad : {"1.2.3", "1.2.3.4.5", "256.1.1.1", "01.2.3.4", "1.2.3.04", "1..2.3", ".1.2.3",
                          "1.2.3.", "a.b.c.d", "1.2.3.4a", "0x1.2.3.4", "1234.1.1.1", "::1", "::ffff:1.2.3.4"}) {
    expect_invalid(fmt::format("PROXY TCP4 {} 5.6.7.8 1 2\r\n", bad),
                   fmt::format("bad source address '{}' (not an IPv4 address, as TCP4 says)", bad));
    expect_invalid(fmt::format("PROXY TCP4 5.6.7.8 {} 1 2\r\n", bad),
                   fmt::format("bad destination address '{}' (not an IPv4 address, as TCP4 says)", bad));
  }
  for (const char* bad : {"1.2.3.4", "fe80::1%eth0", "1:2:3:4:5:6:7:8:9", "gggg::1", "1:::2", "12345::1",
                          "1::2::3", ":", "[::1]"}) {
    expect_invalid(fmt::format("PROXY TCP6 {} ::1 1 2\r\n", bad),
                   fmt::format("bad source address '{}' (not an IPv6 address, as TCP6 says)", bad));
  }
}

TEST(ProxyV1, Ports) {
  for (const char* bad : {"65536", "99999", "123456", "01", "00", "-1", "+1", "1a", "0x10", " 1"}) {
    const auto line = fmt::format("PROXY TCP4 1.2.3.4 5.6.7.8 {} 2\r\n", bad);
    const auto parse = parse_proxy_header(line);
    ASSERT_EQ(parse.status, Status::invalid) << line;
    // " 1" makes an empty field: the space is what is wrong there.
    if (std::string_view(bad) != " 1") {
      EXPECT_NE(parse.error.find("bad source port"), std::string::npos) << parse.error;
    }
  }
  expect_invalid("PROXY TCP4 1.2.3.4 5.6.7.8 1 65536\r\n", "bad destination port '65536' (0-65535 in decimal");
}

// ---- v2 ----

TEST(ProxyV2, Inet) {
  const auto header = v2(0x21, 0x11, kInetBlock);
  const auto parse = parse_done(header);
  EXPECT_EQ(parse.header.version, 2);
  EXPECT_FALSE(parse.header.local);
  EXPECT_EQ(parse.header.source, endpoint("192.0.2.1", 51234));
  EXPECT_EQ(parse.header.destination, endpoint("10.0.0.1", 8271));
  EXPECT_EQ(parse.header.length, 28u);
  EXPECT_EQ(proxy_header_text(parse.header), "PROXY v2 from 192.0.2.1:51234 to 10.0.0.1:8271");
}

TEST(ProxyV2, InetWithTlvs) {
  const auto parse = parse_done(v2(0x21, 0x11, kInetBlock + kTlvs));
  EXPECT_EQ(parse.header.length, 16 + 12 + kTlvs.size());
  EXPECT_EQ(parse.header.source, endpoint("192.0.2.1", 51234));
  EXPECT_EQ(parse.header.destination, endpoint("10.0.0.1", 8271));
}

TEST(ProxyV2, Inet6) {
  for (const auto& rest : {kInet6Block, kInet6Block + kTlvs}) {
    const auto parse = parse_done(v2(0x21, 0x21, rest));
    EXPECT_FALSE(parse.header.local);
    EXPECT_EQ(parse.header.source, endpoint("2001:db8::7", 443));
    EXPECT_EQ(parse.header.destination, endpoint("::1", 8271));
  }
}

TEST(ProxyV2, Local) {
  // HAProxy's health checks: LOCAL, AF_UNSPEC, no addresses.
  auto parse = parse_done(v2(0x20, 0x00, ""));
  EXPECT_TRUE(parse.header.local);
  EXPECT_FALSE(parse.header.source);
  EXPECT_EQ(proxy_header_text(parse.header), "PROXY v2 LOCAL");
  // LOCAL ignores the family and the addresses, even ones no PROXY header could have; its length still counts.
  parse = parse_done(v2(0x20, 0x11, kInetBlock));
  EXPECT_TRUE(parse.header.local);
  EXPECT_FALSE(parse.header.source);
  parse = parse_done(v2(0x20, 0xff, "xyz"));
  EXPECT_TRUE(parse.header.local);
  EXPECT_EQ(parse.header.length, 19u);
}

TEST(ProxyV2, UnspecifiedIsLocal) {
  // PROXY with AF_UNSPEC, AF_UNIX or transport UNSPEC: accepted with the real connection's addresses.
  for (const auto& header : {v2(0x21, 0x00, ""), v2(0x21, 0x00, "ignored"), v2(0x21, 0x31, std::string(216, 'u')),
                             v2(0x21, 0x10, kInetBlock), v2(0x21, 0x20, "")}) {
    const auto parse = parse_done(header);
    EXPECT_TRUE(parse.header.local);
    EXPECT_FALSE(parse.header.source);
    EXPECT_FALSE(parse.header.destination);
  }
}

// Recorded from HAProxy 2.6.12 (Debian 12) with deploy/haproxy/haproxy.cfg's server lines (ports moved): a
// client's connection with its first frame, and a health check with check-send-proxy added.
TEST(ProxyV2, FromHaproxy) {
  const std::string relayed = kSignature + bytes({0x21, 0x11, 0x00, 0x0c, 0x7f, 0x00, 0x00, 0x01, 0x7f, 0x00, 0x00,
                                                  0x01, 0x8a, 0x08, 0x47, 0x5f});
  auto parse = parse_proxy_header(relayed + "{\"a\":1}\n");
  ASSERT_EQ(parse.status, Status::done) << parse.error;
  EXPECT_EQ(parse.header.length, 28u);
  EXPECT_EQ(parse.header.source, endpoint("127.0.0.1", 35336));
  EXPECT_EQ(parse.header.destination, endpoint("127.0.0.1", 18271));
  const std::string check = kSignature + bytes({0x20, 0x00, 0x00, 0x00});
  parse = parse_proxy_header(check + "GET /readyz HTTP/1.0\r\n\r\n");
  ASSERT_EQ(parse.status, Status::done) << parse.error;
  EXPECT_EQ(parse.header.length, 16u);
  EXPECT_TRUE(parse.header.local);
}

TEST(ProxyV2, EveryPrefixNeedsMore) {
  expect_every_prefix(v2(0x21, 0x11, kInetBlock));
  expect_every_prefix(v2(0x21, 0x11, kInetBlock + kTlvs));
  expect_every_prefix(v2(0x21, 0x21, kInet6Block + kTlvs));
  expect_every_prefix(v2(0x20, 0x00, ""));
  // 16 until the length is there, then the whole header.
  const auto header = v2(0x21, 0x21, kInet6Block);
  for (std::size_t cut = 1; cut < header.size(); ++cut)
    EXPECT_EQ(parse_proxy_header(header.substr(0, cut)).want, cut < 16 ? 16u : header.size()) << cut;
}

TEST(ProxyV2, BadSignature) {
  auto header = v2(0x21, 0x11, kInetBlock);
  for (std::size_t at = 0; at < 12; ++at) {
    auto broken = header;
    broken[at] = static_cast<char>(broken[at] ^ 0x40);
    expect_invalid(broken, "not a PROXY protocol header");
    // Refused as soon as the wrong byte arrives.
    expect_invalid(broken.substr(0, at + 1), "not a PROXY protocol header");
  }
  expect_invalid(kSignature.substr(0, 4) + "GET", "it starts with '\\r\\n\\r\\nGET'");
  expect_invalid(std::string("\r\n\r\n\0\r\n", 7) + "QUIZ\n", "it starts with '\\r\\n\\r\\n\\x00\\r\\nQUIZ");
}

TEST(ProxyV2, BadVersionOrCommand) {
  expect_invalid(v2(0x11, 0x11, kInetBlock), "PROXY v2: unsupported version/command byte 0x11");
  expect_invalid(v2(0x31, 0x11, kInetBlock), "unsupported version/command byte 0x31");
  expect_invalid(v2(0x22, 0x11, kInetBlock), "unsupported version/command byte 0x22");
  expect_invalid(v2(0x2f, 0x11, kInetBlock), "unsupported version/command byte 0x2f");
  // Refused at byte 13, without waiting for 16.
  expect_invalid(kSignature + bytes({0x11}), "unsupported version/command byte 0x11");
}

TEST(ProxyV2, FamilyAndProtocol) {
  expect_invalid(v2(0x21, 0x12, kInetBlock), "PROXY v2: a datagram (UDP) connection (byte 0x12)");
  expect_invalid(v2(0x21, 0x22, kInet6Block), "a datagram (UDP) connection (byte 0x22)");
  expect_invalid(v2(0x21, 0x32, std::string(216, 'u')), "a datagram (UDP) connection (byte 0x32)");
  expect_invalid(v2(0x21, 0x41, kInetBlock), "unknown address family in byte 0x41");
  expect_invalid(v2(0x21, 0xf1, kInetBlock), "unknown address family in byte 0xf1");
  expect_invalid(v2(0x21, 0x13, kInetBlock), "unknown transport protocol in byte 0x13");
  // Refused at byte 14.
  expect_invalid(kSignature + bytes({0x21, 0x12}), "a datagram (UDP) connection");
}

TEST(ProxyV2, ShortAddressBlock) {
  expect_invalid(v2(0x21, 0x11, kInetBlock.substr(0, 8)),
                 "PROXY v2 address block too short for AF_INET (8 bytes, needs 12)");
  expect_invalid(v2(0x21, 0x11, ""), "PROXY v2 address block too short for AF_INET (0 bytes, needs 12)");
  expect_invalid(v2(0x21, 0x21, kInetBlock), "PROXY v2 address block too short for AF_INET6 (12 bytes, needs 36)");
  // Known from the length field alone: refused at 16 bytes.
  expect_invalid(kSignature + bytes({0x21, 0x21, 0x00, 0x0c}), "too short for AF_INET6");
}

TEST(ProxyV2, Length) {
  // The most accepted, and one more; the length field's maximum refused before any of its bytes arrive.
  const auto parse = parse_done(v2(0x21, 0x11, kInetBlock + std::string(4096 - 12, '\0')));
  EXPECT_EQ(parse.header.length, 16u + 4096u);
  expect_invalid(v2(0x21, 0x11, kInetBlock + std::string(4097 - 12, '\0')),
                 "PROXY v2: the header announces 4097 bytes after its first 16, more than the 4096 accepted");
  expect_invalid(kSignature + bytes({0x21, 0x11, 0xff, 0xff}), "announces 65535 bytes");
}

// ---- the reader, over loopback TCP ----

// A connected pair on 127.0.0.1: `client` writes as a balancer would, `server` is what the gateway accepted.
class ProxyReader : public ::testing::Test {
 protected:
  ProxyReader() {
    tcp::acceptor acceptor(io, tcp::endpoint(asio::ip::address_v4::loopback(), 0));
    client.connect(acceptor.local_endpoint());
    server = acceptor.accept();
    // Each small write its own segment, so that dribbled bytes arrive apart.
    client.set_option(tcp::no_delay(true));
  }

  // Runs read_proxy_header on `server`, and `peer` (the client's side) beside it, until both end.
  ProxyParse read(std::chrono::milliseconds timeout, std::function<asio::awaitable<void>()> peer = {}) {
    std::optional<ProxyParse> result;
    asio::co_spawn(
        io, [&]() -> asio::awaitable<void> { result = co_await read_proxy_header(server, timeout); },
        [](std::exception_ptr e) {
          if (e) std::rethrow_exception(e);
        });
    if (peer)
      asio::co_spawn(io, peer(), [](std::exception_ptr e) {
        if (e) std::rethrow_exception(e);
      });
    io.run_for(kBound);
    EXPECT_TRUE(result) << "read_proxy_header did not complete";
    return result.value_or(ProxyParse{});
  }

  // Sends each byte as a write of its own, a millisecond apart.
  std::function<asio::awaitable<void>()> dribble(std::string data) {
    return [this, data]() -> asio::awaitable<void> {
      asio::steady_timer pause(io);
      for (const char c : data) {
        co_await asio::async_write(client, asio::buffer(&c, 1), asio::use_awaitable);
        pause.expires_after(1ms);
        co_await pause.async_wait(asio::use_awaitable);
      }
    };
  }

  // What the session would read next: exactly `n` bytes, then nothing else waiting.
  std::string next_bytes(std::size_t n) {
    std::string out(n, '\0');
    asio::read(server, asio::buffer(out));
    return out;
  }

  asio::io_context io;
  tcp::socket client{io};
  tcp::socket server{io};
};

TEST_F(ProxyReader, HeaderAndPayloadInOneWrite) {
  for (const auto& header :
       {v2(0x21, 0x11, kInetBlock + kTlvs), std::string("PROXY TCP4 192.0.2.1 10.0.0.1 51234 8271\r\n")}) {
    asio::write(client, asio::buffer(header + "hello"));
    const auto parse = read(5s);
    ASSERT_EQ(parse.status, Status::done) << parse.error;
    EXPECT_EQ(parse.header.length, header.size());
    EXPECT_EQ(parse.header.source, endpoint("192.0.2.1", 51234));
    EXPECT_EQ(server.available(), 5u);
    EXPECT_EQ(next_bytes(5), "hello");
    io.restart();
  }
}

TEST_F(ProxyReader, LocalHealthCheckThenPayload) {
  asio::write(client, asio::buffer(v2(0x20, 0x00, "") + "{}\n"));
  const auto parse = read(5s);
  ASSERT_EQ(parse.status, Status::done) << parse.error;
  EXPECT_TRUE(parse.header.local);
  EXPECT_EQ(next_bytes(3), "{}\n");
}

TEST_F(ProxyReader, LargeTlvsThenPayload) {
  // More than one look at the socket takes in.
  const auto header = v2(0x21, 0x21, kInet6Block + bytes({0xe0, 0x0b, 0xb8}) + std::string(3000, 't'));
  asio::write(client, asio::buffer(header + "hello"));
  const auto parse = read(5s);
  ASSERT_EQ(parse.status, Status::done) << parse.error;
  EXPECT_EQ(parse.header.length, header.size());
  EXPECT_EQ(parse.header.destination, endpoint("::1", 8271));
  EXPECT_EQ(next_bytes(5), "hello");
}

TEST_F(ProxyReader, DribbledV2) {
  const auto parse = read(5s, dribble(v2(0x21, 0x11, kInetBlock + kTlvs) + "hello"));
  ASSERT_EQ(parse.status, Status::done) << parse.error;
  EXPECT_EQ(parse.header.source, endpoint("192.0.2.1", 51234));
  EXPECT_EQ(next_bytes(5), "hello");
}

TEST_F(ProxyReader, DribbledV1) {
  const auto parse = read(5s, dribble("PROXY TCP6 2001:db8::7 ::1 443 8271\r\nhello"));
  ASSERT_EQ(parse.status, Status::done) << parse.error;
  EXPECT_EQ(parse.header.source, endpoint("2001:db8::7", 443));
  EXPECT_EQ(next_bytes(5), "hello");
}

TEST_F(ProxyReader, Silence) {
  const auto parse = read(200ms);
  ASSERT_EQ(parse.status, Status::invalid);
  EXPECT_EQ(parse.error, "timed out after 0.2s waiting for the PROXY header");
}

TEST_F(ProxyReader, SilenceAfterPart) {
  asio::write(client, asio::buffer(std::string("PROXY TCP4 ")));
  const auto parse = read(200ms);
  ASSERT_EQ(parse.status, Status::invalid);
  EXPECT_EQ(parse.error, "timed out after 0.2s waiting for the PROXY header");
}

TEST_F(ProxyReader, ClosedEarly) {
  asio::write(client, asio::buffer(std::string("PROXY TCP4 1.2")));
  client.close();
  const auto parse = read(5s);
  ASSERT_EQ(parse.status, Status::invalid);
  EXPECT_NE(parse.error.find("the connection closed before its PROXY header was complete (14 bytes received: "
                             "'PROXY TCP4 1.2')"),
            std::string::npos)
      << parse.error;
}

TEST_F(ProxyReader, ClosedWithoutAWord) {
  client.close();
  const auto parse = read(5s);
  ASSERT_EQ(parse.status, Status::invalid);
  EXPECT_EQ(parse.error, "the connection closed before its PROXY header was complete (0 bytes received)");
}

TEST_F(ProxyReader, HttpRequest) {
  const std::string request = "GET / HTTP/1.1\r\nHost: gateway\r\n\r\n";
  asio::write(client, asio::buffer(request));
  const auto parse = read(5s);
  ASSERT_EQ(parse.status, Status::invalid);
  EXPECT_NE(parse.error.find("not a PROXY protocol header (it starts with 'GET / HTTP/1.1"), std::string::npos)
      << parse.error;
  EXPECT_EQ(next_bytes(request.size()), request);  // nothing was taken
}

TEST_F(ProxyReader, MegabytesOfGarbage) {
  // Written while the reader runs (more than the socket buffers hold); refused from its first bytes.
  for (const auto& garbage : {std::string(1 << 20, 'A'), "PROXY TCP4 " + std::string(1 << 20, '1'),
                              kSignature + bytes({0x21, 0x11, 0xff, 0xff}) + std::string(1 << 20, 'x')}) {
    tcp::socket writer = std::move(client);
    auto write_all = [&]() -> asio::awaitable<void> {
      co_await asio::async_write(writer, asio::buffer(garbage), asio::as_tuple(asio::use_awaitable));
    };
    std::optional<ProxyParse> result;
    asio::co_spawn(io, [&]() -> asio::awaitable<void> {
      result = co_await read_proxy_header(server, 5s);
      // What is left starts where the garbage did, or at most one look into it.
      std::string left(16, '\0');
      co_await asio::async_read(server, asio::buffer(left), asio::use_awaitable);
      EXPECT_TRUE(garbage.find(left) < 232) << left;
      server.close();  // the writer's pending write then fails, and the loop ends
    }, asio::detached);
    asio::co_spawn(io, write_all(), asio::detached);
    io.run_for(kBound);
    ASSERT_TRUE(result);
    EXPECT_EQ(result->status, Status::invalid);
    // The next round gets a fresh connection.
    io.restart();
    tcp::acceptor acceptor(io, tcp::endpoint(asio::ip::address_v4::loopback(), 0));
    client = tcp::socket(io);
    client.connect(acceptor.local_endpoint());
    server = acceptor.accept();
  }
}

}  // namespace
