// Golden-frame tests of the Content-Length codec: real traffic from tests/data/traces, split at every
// byte position, plus every framing fault we know of (clangd test/protocol.test, too_large.test).
#include "common/protocol/framing.hpp"

#include <boost/json.hpp>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace {

using rjg::protocol::FrameReader;
using rjg::protocol::FramingLimits;
using Kind = FrameReader::Result::Kind;
using Mode = FrameReader::Mode;
}  // namespace

namespace rjg::protocol {
// Readable test names in CTest ("GetParam() = strict").
void PrintTo(FrameReader::Mode mode, std::ostream* os) { *os << (mode == FrameReader::Mode::strict ? "strict" : "lenient"); }
}  // namespace rjg::protocol

namespace {

const char* const kTraceFiles[] = {"reference-suite-tcp.jsonl", "reference-edge-cases.jsonl"};

// The bodies of one trace file, in recorded order.
std::vector<std::string> load_bodies(const std::filesystem::path& file) {
  std::vector<std::string> bodies;
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    auto record = boost::json::parse(line).as_object();
    bodies.emplace_back(record.at("body").as_string());
  }
  return bodies;
}

// Control characters spelled out, for failure messages.
std::string printable_for_test(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '\r') out += "\\r";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return "'" + out + "'";
}

// How the real peers framed each body: the header counts bytes, the body is sent as is.
std::string frame(std::string_view body) { return "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + std::string(body); }

struct Drained {
  std::vector<std::string> bodies;
  std::string skipped;
  std::string error;
};

// Calls next() until the reader asks for more (or fails), collecting what came out.
void drain(FrameReader& reader, Drained& out) {
  for (;;) {
    auto r = reader.next();
    out.skipped += r.skipped;
    if (r.kind == Kind::need_more) return;
    if (r.kind == Kind::error) {
      out.error = r.error;
      return;
    }
    out.bodies.push_back(std::move(r.body));
  }
}

Drained feed_all(std::string_view bytes, Mode mode = Mode::strict, FramingLimits limits = {}) {
  FrameReader reader(limits, mode);
  Drained out;
  reader.feed(bytes);
  drain(reader, out);
  return out;
}

class GoldenFrames : public ::testing::TestWithParam<Mode> {
 protected:
  void SetUp() override {
    std::filesystem::path dir(RJG_TRACES_DIR);
    ASSERT_TRUE(std::filesystem::is_directory(dir)) << "fixture missing: trace folder " << dir;
    for (auto name : kTraceFiles) {
      auto file = dir / name;
      ASSERT_TRUE(std::filesystem::exists(file)) << "fixture missing: trace file " << file;
      auto bodies = load_bodies(file);
      ASSERT_FALSE(bodies.empty()) << file;
      bodies_.insert(bodies_.end(), bodies.begin(), bodies.end());
    }
    for (const auto& b : bodies_) stream_ += frame(b);
  }

  std::vector<std::string> bodies_;
  std::string stream_;
};

TEST_P(GoldenFrames, WholeStreamInOneRead) {
  FrameReader reader({}, GetParam());
  reader.feed(stream_);
  Drained out;
  drain(reader, out);
  EXPECT_EQ(out.error, "");
  EXPECT_EQ(out.skipped, "");
  ASSERT_EQ(out.bodies.size(), bodies_.size());
  for (std::size_t i = 0; i < bodies_.size(); ++i) EXPECT_EQ(out.bodies[i], bodies_[i]) << "frame " << i;
  EXPECT_EQ(reader.buffered(), 0u);
  EXPECT_FALSE(reader.failed());
}

TEST_P(GoldenFrames, ByteByByte) {
  FrameReader reader({}, GetParam());
  Drained out;
  for (char c : stream_) {
    reader.feed(std::string_view(&c, 1));
    drain(reader, out);
    ASSERT_EQ(out.error, "");
  }
  EXPECT_EQ(out.skipped, "");
  EXPECT_EQ(out.bodies, bodies_);
  EXPECT_EQ(reader.buffered(), 0u);
}

// Each frame together with its successor, split in two reads at every byte position: covers a cut
// inside the header name, the number, the CRLFs, the body, and the boundary between frames.
TEST_P(GoldenFrames, SplitAtEveryPosition) {
  for (std::size_t i = 0; i < bodies_.size(); ++i) {
    std::vector<std::string> expected{bodies_[i]};
    std::string pair = frame(bodies_[i]);
    if (i + 1 < bodies_.size()) {
      expected.push_back(bodies_[i + 1]);
      pair += frame(bodies_[i + 1]);
    }
    for (std::size_t cut = 0; cut <= pair.size(); ++cut) {
      FrameReader reader({}, GetParam());
      Drained out;
      reader.feed(std::string_view(pair).substr(0, cut));
      drain(reader, out);
      reader.feed(std::string_view(pair).substr(cut));
      drain(reader, out);
      ASSERT_EQ(out.error, "") << "frame " << i << " cut at " << cut;
      ASSERT_EQ(out.skipped, "") << "frame " << i << " cut at " << cut;
      ASSERT_EQ(out.bodies, expected) << "frame " << i << " cut at " << cut;
      ASSERT_EQ(reader.buffered(), 0u);
    }
  }
}

// The whole recorded stream split in two at every 101st position: catches state that leaks across
// many frames (buffer compaction) without the quadratic cost of every position.
TEST_P(GoldenFrames, WholeStreamSplitEveryHundredBytes) {
  for (std::size_t cut = 0; cut <= stream_.size(); cut += 101) {
    FrameReader reader({}, GetParam());
    Drained out;
    reader.feed(std::string_view(stream_).substr(0, cut));
    drain(reader, out);
    reader.feed(std::string_view(stream_).substr(cut));
    drain(reader, out);
    ASSERT_EQ(out.error, "") << "cut at " << cut;
    ASSERT_EQ(out.bodies.size(), bodies_.size()) << "cut at " << cut;
    ASSERT_EQ(out.bodies.back(), bodies_.back());
  }
}

INSTANTIATE_TEST_SUITE_P(BothModes, GoldenFrames, ::testing::Values(Mode::strict, Mode::lenient),
                         [](const auto& info) { return info.param == Mode::strict ? "strict" : "lenient"; });

TEST(FrameReader, ManyFramesInOneRead) {
  std::string stream;
  std::vector<std::string> expected;
  for (int i = 0; i < 500; ++i) {
    expected.push_back("{\"jsonrpc\":\"2.0\",\"method\":\"robot/log\",\"params\":{\"message\":\"" + std::to_string(i) + "\"}}\r\n");
    stream += frame(expected.back());
  }
  auto out = feed_all(stream);
  EXPECT_EQ(out.error, "");
  EXPECT_EQ(out.bodies, expected);
}

TEST(FrameReader, AcceptsUtf8ContentTypes) {
  for (std::string type : {"application/vscode-jsonrpc; charset=utf-8", "application/vscode-jsonrpc; charset=utf8",
                           "application/vscode-jsonrpc; charset=\"UTF-8\"", "application/vscode-jsonrpc",
                           "application/json; foo=bar; charset=UTF-8"}) {
    auto out = feed_all("Content-Type: " + type + "\r\nContent-Length: 2\r\n\r\n{}");
    EXPECT_EQ(out.error, "") << type;
    EXPECT_EQ(out.bodies, std::vector<std::string>{"{}"}) << type;
  }
}

TEST(FrameReader, RejectsOtherCharsets) {
  auto out = feed_all("Content-Length: 2\r\nContent-Type: application/vscode-jsonrpc; charset=latin-1\r\n\r\n{}");
  EXPECT_TRUE(out.bodies.empty());
  EXPECT_NE(out.error.find("latin-1"), std::string::npos) << out.error;
}

TEST(FrameReader, IgnoresOtherHeaders) {
  auto out = feed_all("X-Request-Origin: robot\r\nContent-Length: 2\r\nUser-Agent: JsonRpcRemote/0.2\r\n\r\n[]");
  EXPECT_EQ(out.error, "");
  EXPECT_EQ(out.bodies, std::vector<std::string>{"[]"});
}

TEST(FrameReader, HeaderNameIsCaseInsensitive) {
  auto out = feed_all("content-length: 2\r\n\r\n{}CONTENT-LENGTH:2\r\n\r\n[]cOnTeNt-LeNgTh:   3  \r\n\r\nabc");
  EXPECT_EQ(out.error, "");
  EXPECT_EQ(out.bodies, (std::vector<std::string>{"{}", "[]", "abc"}));
}

struct BadFrame {
  const char* name;
  std::string bytes;
  const char* error_mentions;  // a word the error message must contain
};
void PrintTo(const BadFrame& f, std::ostream* os) { *os << f.name; }

class StrictFramingErrors : public ::testing::TestWithParam<BadFrame> {};

TEST_P(StrictFramingErrors, FailsAndStaysFailed) {
  FramingLimits limits;
  limits.max_message_bytes = 1000;
  limits.max_header_bytes = 256;
  FrameReader reader(limits, Mode::strict);
  reader.feed(GetParam().bytes);
  auto r = reader.next();
  ASSERT_EQ(r.kind, Kind::error) << "body: " << r.body;
  EXPECT_NE(r.error.find(GetParam().error_mentions), std::string::npos) << r.error;
  EXPECT_TRUE(reader.failed());
  // A failed stream cannot be trusted: even a valid frame fed afterwards does not come out.
  reader.feed(frame("{}"));
  EXPECT_EQ(reader.next().kind, Kind::error);
}

INSTANTIATE_TEST_SUITE_P(
    Faults, StrictFramingErrors,
    ::testing::Values(
        BadFrame{"missing_content_length", "Content-Type: application/vscode-jsonrpc\r\n\r\n{}", "Content-Length"},
        BadFrame{"duplicate_content_length", "Content-Length: 2\r\nContent-Length: 2\r\n\r\n{}", "more than once"},
        BadFrame{"negative", "Content-Length: -1\r\n\r\n{}", "-1"},
        BadFrame{"signed", "Content-Length: +5\r\n\r\n{}", "+5"},
        BadFrame{"hex", "Content-Length: 0x10\r\n\r\n{}", "0x10"},
        BadFrame{"eleven_digits", "Content-Length: 00000000002\r\n\r\n{}", "digits"},
        BadFrame{"overflowing", "Content-Length: 99999999999\r\n\r\n{}", "99999999999"},
        BadFrame{"ten_digits_above_limit", "Content-Length: 9999999999\r\n\r\n{}", "limit"},
        BadFrame{"above_max_message_bytes", "Content-Length: 1001\r\n\r\n{}", "limit"},
        BadFrame{"empty_value", "Content-Length: \r\n\r\n{}", "Content-Length"},
        BadFrame{"bare_lf_headers", "Content-Length: 2\n\n{}", "LF"},
        BadFrame{"bare_lf_after_crlf_line", "Content-Length: 2\r\nX-Foo: bar\n\r\n\r\n{}", "LF"},
        BadFrame{"no_colon", "garbage\r\n\r\n{}", "malformed"},
        BadFrame{"latin1", "Content-Length: 2\r\nContent-Type: text/plain; charset=latin-1\r\n\r\n{}", "charset"},
        BadFrame{"header_over_limit_without_blank_line", "X-Padding: " + std::string(300, 'a'), "header block"},
        BadFrame{"header_over_limit_with_blank_line", "X-Padding: " + std::string(300, 'a') + "\r\nContent-Length: 2\r\n\r\n{}",
                 "header block"}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(FrameReader, AcceptsExactlyMaxMessageBytes) {
  FramingLimits limits;
  limits.max_message_bytes = 10;
  auto out = feed_all("Content-Length: 10\r\n\r\n0123456789", Mode::strict, limits);
  EXPECT_EQ(out.error, "");
  EXPECT_EQ(out.bodies, std::vector<std::string>{"0123456789"});
}

TEST(FrameReader, ShortBodyNeedsMore) {
  FrameReader reader;
  reader.feed("Content-Length: 10\r\n\r\n01234");
  auto r = reader.next();
  EXPECT_EQ(r.kind, Kind::need_more);
  EXPECT_EQ(r.body, "");
  EXPECT_FALSE(reader.failed());
  EXPECT_EQ(reader.buffered(), std::string("Content-Length: 10\r\n\r\n01234").size());
  reader.feed("56789");
  r = reader.next();
  ASSERT_EQ(r.kind, Kind::frame);
  EXPECT_EQ(r.body, "0123456789");
  EXPECT_EQ(reader.next().kind, Kind::need_more);
}

TEST(FrameReader, ZeroLengthBody) {
  auto out = feed_all("Content-Length: 0\r\n\r\nContent-Length: 2\r\n\r\n{}");
  EXPECT_EQ(out.error, "");
  EXPECT_EQ(out.bodies, (std::vector<std::string>{"", "{}"}));
}

TEST(FrameReader, EmptyInputNeedsMore) {
  FrameReader reader;
  EXPECT_EQ(reader.next().kind, Kind::need_more);
  reader.feed("");
  EXPECT_EQ(reader.next().kind, Kind::need_more);
}

TEST(LenientFrameReader, SkipsPrintedLineBeforeFrame) {
  auto out = feed_all("printed\n" + frame("{}"), Mode::lenient);
  EXPECT_EQ(out.error, "");
  EXPECT_EQ(out.skipped, "printed\n");
  EXPECT_EQ(out.bodies, std::vector<std::string>{"{}"});
}

TEST(LenientFrameReader, SkipsGarbageGluedToHeader) {
  auto out = feed_all("x" + frame("{}") + "debug: 1 2 3\r\n" + frame("[]"), Mode::lenient);
  EXPECT_EQ(out.error, "");
  EXPECT_EQ(out.skipped, "xdebug: 1 2 3\r\n");
  EXPECT_EQ(out.bodies, (std::vector<std::string>{"{}", "[]"}));
}

TEST(LenientFrameReader, GarbageSplitAcrossFeeds) {
  FrameReader reader({}, Mode::lenient);
  Drained out;
  for (std::string_view part : {"hello ", "wor", "ld\nCont", "ent-Len", "gth: 2\r\n\r", "\n{", "}"}) {
    reader.feed(part);
    drain(reader, out);
  }
  EXPECT_EQ(out.error, "");
  EXPECT_EQ(out.skipped, "hello world\n");
  EXPECT_EQ(out.bodies, std::vector<std::string>{"{}"});
  EXPECT_FALSE(reader.failed());
}

// Stray output whose end looks like the start of "Content-Length" ("...abc", "...C") must be kept
// only as long as it can still become a header, and must never stall the reader.
TEST(LenientFrameReader, GarbageEndingLikeAHeaderPrefix) {
  for (const std::string& noise : std::vector<std::string>{"abc", "C", "xC", "ab Co", "progress: 10% ... Content-Le", std::string(40, 'z') + "c"}) {
    FrameReader reader({}, Mode::lenient);
    Drained out;
    reader.feed(noise);
    drain(reader, out);
    EXPECT_TRUE(out.bodies.empty()) << noise;
    reader.feed("\n" + frame("{}"));
    drain(reader, out);
    EXPECT_EQ(out.error, "") << noise;
    EXPECT_EQ(out.skipped, noise + "\n");
    EXPECT_EQ(out.bodies, std::vector<std::string>{"{}"}) << noise;
  }
}

// Every split of noise + frame + noise + frame in lenient mode yields both frames and all the noise.
TEST(LenientFrameReader, NoiseSplitAtEveryPosition) {
  std::string noise1 = "Loading libraries... C", noise2 = "print('ok')\nContent is ready\n";
  std::string stream = noise1 + frame("{\"a\":1}\r\n") + noise2 + frame("{}\r\n");
  for (std::size_t cut = 0; cut <= stream.size(); ++cut) {
    FrameReader reader({}, Mode::lenient);
    Drained out;
    reader.feed(std::string_view(stream).substr(0, cut));
    drain(reader, out);
    reader.feed(std::string_view(stream).substr(cut));
    drain(reader, out);
    ASSERT_EQ(out.error, "") << cut;
    ASSERT_EQ(out.bodies, (std::vector<std::string>{"{\"a\":1}\r\n", "{}\r\n"})) << "cut at " << cut;
    ASSERT_EQ(out.skipped, noise1 + noise2) << "cut at " << cut;
  }
}

TEST(LenientFrameReader, ContentTypeFirstIsNotNoise) {
  auto out = feed_all("Content-Type: application/vscode-jsonrpc; charset=utf-8\r\nContent-Length: 2\r\n\r\n{}", Mode::lenient);
  EXPECT_EQ(out.skipped, "");
  EXPECT_EQ(out.bodies, std::vector<std::string>{"{}"});
}

// A broken header block is skipped, and a frame that follows it still comes out.
TEST(LenientFrameReader, RecoversAfterBadHeader) {
  auto out = feed_all("Content-Length: abc\r\n\r\n" + frame("{}"), Mode::lenient);
  EXPECT_EQ(out.error, "");
  EXPECT_FALSE(out.skipped.empty());
  EXPECT_EQ(out.bodies, std::vector<std::string>{"{}"});
}

// An oversized header block is dropped whole (every dropped byte reported), and the reader goes on.
TEST(LenientFrameReader, SkipsOversizedHeaderBlock) {
  FramingLimits limits;
  limits.max_header_bytes = 64;
  std::string bad = "Content-Length: 2\r\nX-Padding: " + std::string(100, 'a') + "\r\n\r\n{}";
  auto out = feed_all(bad + frame("[]"), Mode::lenient, limits);
  EXPECT_EQ(out.error, "");
  EXPECT_EQ(out.skipped, bad);
  EXPECT_EQ(out.bodies, std::vector<std::string>{"[]"});
}

// A printed line that happens to contain the header name must not swallow the real header after it.
TEST(LenientFrameReader, PrintedHeaderNameDoesNotEatNextFrame) {
  auto out = feed_all("Content-Length is unknown\n" + frame("{}"), Mode::lenient);
  EXPECT_EQ(out.error, "");
  EXPECT_EQ(out.bodies, std::vector<std::string>{"{}"});
  EXPECT_EQ(out.skipped, "Content-Length is unknown\n");
}

// ------------------------------------------------------------------------------------------------
// Lenient resynchronization: linear work, a bound on stray output, no real frame lost behind a stray
// partial line. Work is counted by FrameReader::examined(), never timed.

// Feeds `bytes` in chunks of `chunk` bytes (0: all at once), collecting everything.
Drained feed_chunked(FrameReader& reader, std::string_view bytes, std::size_t chunk) {
  Drained out;
  if (chunk == 0) chunk = bytes.size() ? bytes.size() : 1;
  for (std::size_t pos = 0; pos < bytes.size() && out.error.empty(); pos += chunk) {
    reader.feed(bytes.substr(pos, chunk));
    drain(reader, out);
  }
  if (bytes.empty()) drain(reader, out);
  return out;
}

std::string repeat(std::string_view unit, std::size_t total) {
  std::string out;
  out.reserve(total + unit.size());
  while (out.size() < total) out += unit;
  return out;
}

// Stray output shaped to make a resynchronizing reader work hard: header lines that are never
// completed, header names glued to each other, candidates hidden in header-like lines, stray headers
// with bodies that are not messages, and long runs of the letter that starts a header.
const std::vector<std::pair<std::string, std::string>>& hostile_units() {
  static const std::vector<std::pair<std::string, std::string>> units{
      {"content_length_lines", "Content-Length: 1\r\n"},
      {"stray_headers_with_blank_line", "Content-Length: 5\r\n\r\n"},
      {"glued_names", "Content-LengthContent-Length"},
      {"prefixes", "Content-LenContent-Lengt"},
      {"header_like_lines", "x: Content-Length: 1\r\n"},
      {"unfinished_header_block", "Content-Length: 1\r\nX-A: b\r\n"},
      {"letters_c", "cccccccccccccccccccc"},
      {"plain_lines", "hello world\n"},
      {"spaces_after_colon", "Content-Length:                                                  "},
      {"content_type_lines", "Content-Type: a\r\n"},
      {"zero_length_headers", "Content-Length: 0\r\n\r\n"},
  };
  return units;
}

// However stray output is shaped and however it is split, each byte is looked at a bounded number of
// times (the old reader searched the whole buffer for a blank line at every header-like line).
TEST(LenientFrameReader, WorkIsLinearInTheInput) {
  // 256 KiB per shape: a reader that searched the buffer again at each line would look at its bytes
  // thousands of times each, not six.
  constexpr std::size_t kBytes = 256u << 10;
  FramingLimits limits;
  limits.max_stray_bytes = 64u << 20;  // look at the work, not at the bound on stray output
  for (const auto& [name, unit] : hostile_units()) {
    const std::string stray = repeat(unit, kBytes);
    const std::string input = stray + "\n" + frame("{\"after\":1}");
    for (std::size_t chunk : {std::size_t{0}, std::size_t{65536}, std::size_t{4096}, std::size_t{7}}) {
      FrameReader reader(limits, Mode::lenient);
      auto out = feed_chunked(reader, input, chunk);
      EXPECT_EQ(out.error, "") << name;
      EXPECT_EQ(out.bodies, std::vector<std::string>{"{\"after\":1}"}) << name << ", chunks of " << chunk;
      EXPECT_EQ(out.skipped, stray + "\n") << name << ", chunks of " << chunk;
      EXPECT_LE(reader.examined(), 6 * input.size())
          << name << ", chunks of " << chunk << ": " << reader.examined() << " looks for " << input.size() << " bytes";
    }
  }
}

TEST(LenientFrameReader, WorkIsLinearByteByByte) {
  FramingLimits limits;
  limits.max_stray_bytes = 64u << 20;
  for (const auto& [name, unit] : hostile_units()) {
    const std::string input = repeat(unit, 16 * 1024) + "\n" + frame("{}");
    FrameReader reader(limits, Mode::lenient);
    auto out = feed_chunked(reader, input, 1);
    EXPECT_EQ(out.bodies, std::vector<std::string>{"{}"}) << name;
    EXPECT_LE(reader.examined(), 12 * input.size()) << name << ": " << reader.examined() << " looks";
  }
}

// Strict mode reads each header byte a bounded number of times too, even when a client trickles it.
TEST(FrameReader, StrictHeaderWorkIsLinear) {
  std::string header = "Content-Length: 2\r\n";
  for (int i = 0; i < 300; ++i) header += "X-Padding-" + std::to_string(i) + ": abc\r\n";
  const std::string input = header + "\r\n{}";
  FrameReader reader;
  auto out = feed_chunked(reader, input, 1);
  EXPECT_EQ(out.error, "");
  EXPECT_EQ(out.bodies, std::vector<std::string>{"{}"});
  EXPECT_LE(reader.examined(), 4 * input.size()) << reader.examined();
}

// More than max_stray_bytes without a frame ends the stream, with the count and a sample; exactly one
// byte past the bound is taken, however the input is split.
TEST(LenientFrameReader, GivesUpAfterTheStrayBound) {
  FramingLimits limits;
  limits.max_stray_bytes = 1000;
  const std::string stray = repeat("Content-Length: 1\r\n", 5000);
  for (std::size_t chunk : {std::size_t{0}, std::size_t{1}, std::size_t{13}, std::size_t{4096}}) {
    FrameReader reader(limits, Mode::lenient);
    auto out = feed_chunked(reader, frame("{\"first\":1}") + stray + frame("{}"), chunk);
    EXPECT_EQ(out.bodies, std::vector<std::string>{"{\"first\":1}"}) << chunk;
    EXPECT_EQ(out.skipped.size(), 1001u) << chunk;
    EXPECT_EQ(out.skipped, stray.substr(0, 1001)) << chunk;
    EXPECT_NE(out.error.find("more than 1000 bytes of stray output"), std::string::npos) << out.error;
    EXPECT_NE(out.error.find("began with 'Content-Length: 1\\r\\n"), std::string::npos) << out.error;
    EXPECT_TRUE(reader.failed());
    EXPECT_EQ(reader.next().kind, Kind::error);
  }
}

// The bound counts stray bytes since the last frame: a worker that prints between frames for ever
// is never given up.
TEST(LenientFrameReader, StrayBoundStartsAgainAtEveryFrame) {
  FramingLimits limits;
  limits.max_stray_bytes = 100;
  std::string input;
  std::vector<std::string> expected;
  for (int i = 0; i < 50; ++i) {
    input += std::string(100, 'p') + frame("{\"i\":" + std::to_string(i) + "}");
    expected.push_back("{\"i\":" + std::to_string(i) + "}");
  }
  auto out = feed_all(input, Mode::lenient, limits);
  EXPECT_EQ(out.error, "");
  EXPECT_EQ(out.bodies, expected);
  EXPECT_EQ(out.skipped.size(), 5000u);
}

// A stray line, complete or not, never swallows the real frame behind it. Every case is split at
// every position, and the frames and the skipped bytes are the same for every split.
TEST(LenientFrameReader, RealFrameAfterAStrayPartialLineIsDelivered) {
  const std::string real = frame("{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{\"result\":\"ok\"}}");
  // Each stray text, and what is skipped with it (right at the start of the stream a header may begin
  // with Content-Type, so a stray Content-Type line there is taken as the real frame's header).
  const std::vector<std::pair<std::string, std::string>> strays{
      {"Content-Len", ""},                          // a partial header name
      {"hello", ""},                                // a print without a newline
      {"Content-Length: 1", ""},                    // a partial header line
      {"Content-Length: 1\r\n", ""},                // a header line with no blank line
      {"Content-Length: 12\r\n\r\n", ""},           // a whole stray header: its "body" is the real header
      {"Content-Length: 60000000\r\n\r\n", ""},     // one that would hold everything behind it
      {"Content-Length: 99999999\r\n\r\n", ""},     // one over max_message_bytes
      {"Content-Length: 0\r\n\r\n", ""},            // an empty stray frame
      {"Content-Length: 3\r\n\r\n  x", ""},         // a body that is not a message
      {"Content-Length: 1\r\nx", ""},               // a stray line, then a partial one
      {"Content-Length: 1\r\nX-Note: ", ""},        // the real header glued to a header-like line
      {"Content-Type: text/plain\r\n", "none"},     // a stray Content-Type line at the start
      {"Content-Length: 5\r\nContent-Type: ", ""},  // the real header glued to a Content-Type line
      {"progress 50%\r", ""},                       // a bare CR
      {"Content-Length: \r\n\r\n", ""},             // no digits
  };
  const std::string body = "{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{\"result\":\"ok\"}}";
  for (const auto& [stray, how] : strays) {
    const std::string input = stray + real + "tail\n" + real;
    const std::string skipped = how == "none" ? "tail\n" : stray + "tail\n";
    for (std::size_t cut = 0; cut <= input.size(); ++cut) {
      FrameReader reader({}, Mode::lenient);
      Drained out;
      reader.feed(std::string_view(input).substr(0, cut));
      drain(reader, out);
      reader.feed(std::string_view(input).substr(cut));
      drain(reader, out);
      ASSERT_EQ(out.error, "") << printable_for_test(stray) << " cut at " << cut;
      ASSERT_EQ(out.bodies, (std::vector<std::string>{body, body})) << printable_for_test(stray) << " cut at " << cut;
      ASSERT_EQ(out.skipped, skipped) << printable_for_test(stray) << " cut at " << cut;
      ASSERT_EQ(reader.buffered(), 0u);
    }
  }
}

TEST(EncodeFrame, CountsTheTrailingCrlf) {
  EXPECT_EQ(rjg::protocol::encode_frame("{}"), "Content-Length: 4\r\n\r\n{}\r\n");
  std::string text = "{\"jsonrpc\":\"2.0\",\"id\":\"1\",\"result\":{\"result\":\"\xc3\xbc\xc3\xb1\xc3\xaf \xe2\x82\xac\"}}";
  auto encoded = rjg::protocol::encode_frame(text);
  auto out = feed_all(encoded + rjg::protocol::encode_frame(""));
  EXPECT_EQ(out.error, "");
  EXPECT_EQ(out.bodies, (std::vector<std::string>{text + "\r\n", "\r\n"}));
}

}  // namespace
