// Fuzzes FrameReader in both modes, fed in chunks whose sizes the input chooses.
//
// Input layout (fuzz_make_corpus writes seeds in it):
//   byte 0        bit 0: lenient mode; bits 1-2: limits preset (see kPresets); bits 3-7: K, 0..31
//   bytes 1..K    chunk sizes, used in a cycle (0 feeds an empty chunk); none: everything at once
//   the rest      the byte stream
//
// Invariants: no crash or sanitizer report; once next() returned an error, failed() stays true and
// every later next() is an error; every frame body fits the limit; encode_frame(body) read back by a
// fresh reader gives body + "\r\n" (the frame writer appends the CRLF the real peers send; lenient mode
// takes it only when the body starts like a JSON object or array); and the result does not depend on
// how the stream was split: the frames, error or not, the skipped bytes, and (strict mode)
// what stays buffered are the same as when the whole stream is fed at once. No byte comes out twice:
// skipped bytes, bodies, the headers of the frames (20 bytes at least) and what is buffered add up
// to at most what was fed.
//
// Lenient mode's skipped bytes are the same for every split too (the reader decides from the bytes,
// never from where a read ended), and its work stays linear: examined() is at most a small multiple of
// the bytes fed (plus a constant per feed, for the few bytes at the end of a read that may still
// become a header name and are looked at again when the next read arrives).
#include "common/protocol/framing.hpp"

#include "fuzz_common.hpp"

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace {

using rjg::protocol::FrameReader;
using rjg::protocol::FramingLimits;
using Kind = FrameReader::Result::Kind;

// Small limits reach the too-large and header-too-long paths with short inputs.
constexpr FramingLimits kPresets[] = {
    {},                                    // the defaults: 64 MiB bodies, 8 KiB headers
    {.max_message_bytes = 64, .max_header_bytes = 8 * 1024},
    {.max_message_bytes = 1024 * 1024, .max_header_bytes = 40},
    {.max_message_bytes = 16, .max_header_bytes = 24, .max_stray_bytes = 64},
};

struct Outcome {
  std::vector<std::string> bodies;
  std::string skipped;
  bool failed = false;
};

// Calls next() until the reader wants more bytes or has failed, checking each result.
void drain(FrameReader& reader, const FramingLimits& limits, Outcome& out) {
  for (;;) {
    if (out.failed) {
      auto r = reader.next();
      RJG_FUZZ_CHECK(r.kind == Kind::error, "next() after an error must be an error again");
      RJG_FUZZ_CHECK(reader.failed(), "failed() must stay true after an error");
      return;
    }
    auto r = reader.next();
    out.skipped += r.skipped;
    switch (r.kind) {
      case Kind::need_more:
        RJG_FUZZ_CHECK(!reader.failed(), "need_more from a failed reader");
        return;
      case Kind::error:
        RJG_FUZZ_CHECK(reader.failed(), "an error result must set failed()");
        RJG_FUZZ_CHECK(!r.error.empty(), "an error result must say what is wrong");
        out.failed = true;
        break;  // loop once more: the next call must repeat the error
      case Kind::frame:
        RJG_FUZZ_CHECK(r.body.size() <= limits.max_message_bytes, "frame body longer than max_message_bytes");
        out.bodies.push_back(std::move(r.body));
        break;
    }
  }
}

// Lenient mode takes a frame only when its body starts (after JSON whitespace) like an object or array.
bool starts_like_a_message(std::string_view body) {
  auto first = body.find_first_not_of(" \t\r\n");
  return first != std::string_view::npos && (body[first] == '{' || body[first] == '[');
}

void check_round_trip(const std::string& body, FrameReader::Mode mode) {
  // Lenient mode drops such a header and searches on inside the body, where it may find a frame.
  if (mode == FrameReader::Mode::lenient && !starts_like_a_message(body)) return;
  FrameReader reader({}, mode);
  reader.feed(rjg::protocol::encode_frame(body));
  auto r = reader.next();
  RJG_FUZZ_CHECK(r.kind == Kind::frame, "encode_frame(body) is not read back as a frame: " + r.error);
  RJG_FUZZ_CHECK(r.skipped.empty(), "encode_frame(body) read back with skipped bytes");
  RJG_FUZZ_CHECK(r.body.size() == body.size() + 2 && r.body.compare(0, body.size(), body) == 0 &&
                     r.body.ends_with("\r\n"),
                 "encode_frame(body) read back is not body + CRLF");
  RJG_FUZZ_CHECK(reader.next().kind == Kind::need_more && reader.buffered() == 0,
                 "bytes left over after reading encode_frame(body)");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::uint8_t options = data[0];
  const auto mode = (options & 1) ? FrameReader::Mode::lenient : FrameReader::Mode::strict;
  const FramingLimits limits = kPresets[(options >> 1) & 3];
  std::size_t k = options >> 3;
  if (k > size - 1) k = size - 1;
  std::vector<std::size_t> chunks(data + 1, data + 1 + k);
  std::string_view stream(reinterpret_cast<const char*>(data) + 1 + k, size - 1 - k);

  bool any_progress = false;
  for (auto c : chunks) any_progress = any_progress || c > 0;
  if (!any_progress) chunks.assign(1, stream.size() ? stream.size() : 1);

  // In chunks.
  FrameReader chunked(limits, mode);
  Outcome split;
  std::size_t pos = 0, feeds = 0;
  for (std::size_t i = 0; pos < stream.size(); ++i, ++feeds) {
    auto n = std::min(chunks[i % chunks.size()], stream.size() - pos);
    chunked.feed(stream.substr(pos, n));
    pos += n;
    drain(chunked, limits, split);
    RJG_FUZZ_CHECK(chunked.buffered() <= pos, "buffered() exceeds the bytes fed");
  }
  drain(chunked, limits, split);  // an empty stream still gets one call

  // All at once.
  FrameReader whole(limits, mode);
  Outcome once;
  whole.feed(stream);
  drain(whole, limits, once);

  RJG_FUZZ_CHECK(split.failed == once.failed, "an error depends on how the stream was split");
  RJG_FUZZ_CHECK(split.bodies == once.bodies, "the frames depend on how the stream was split");
  RJG_FUZZ_CHECK(split.skipped == once.skipped, "the skipped bytes depend on how the stream was split");
  RJG_FUZZ_CHECK(whole.examined() <= 8 * stream.size() + 64, "work is not linear in the input (one read)");
  // An empty feed adds no bytes but next() looks again at the tail that may still become a header
  // name ("Content-Length", "Content-Type": under 16 bytes), so each feed may cost that much.
  RJG_FUZZ_CHECK(chunked.examined() <= 24 * stream.size() + 32 * feeds + 64,
                 "work is not linear in the input (split reads)");
  if (mode == FrameReader::Mode::strict) {
    RJG_FUZZ_CHECK(split.skipped.empty() && once.skipped.empty(), "strict mode skipped bytes");
    if (!once.failed)
      RJG_FUZZ_CHECK(chunked.buffered() == whole.buffered(), "buffered() depends on how the stream was split");
  }
  if (!once.failed) {
    std::size_t bodies = 0;
    for (const auto& body : once.bodies) bodies += body.size();
    for (const auto* r : {&chunked, &whole}) {
      const auto& skipped = r == &chunked ? split.skipped : once.skipped;
      constexpr std::size_t kMinHeader = sizeof("Content-Length:0\r\n\r\n") - 1;
      RJG_FUZZ_CHECK(skipped.size() + bodies + kMinHeader * once.bodies.size() + r->buffered() <= stream.size(),
                     "more bytes came out than went in");
    }
  }

  for (const auto& body : once.bodies) {
    if (body.size() + 2 > FramingLimits{}.max_message_bytes) continue;
    check_round_trip(body, FrameReader::Mode::strict);
    check_round_trip(body, FrameReader::Mode::lenient);
  }
  return 0;
}
