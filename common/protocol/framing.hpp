// Content-Length framing as in the Language Server Protocol (the protocol specification of
// robotframework-jsonrpcremote: "Framing").
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace rjg::protocol {

struct FramingLimits {
  std::size_t max_message_bytes = 64u * 1024 * 1024;
  std::size_t max_header_bytes = 8 * 1024;  // the whole header block, CRLFs included
  // Lenient mode: stray bytes allowed between two frames (or before the first) before the stream is given
  // up. Stray output is printed lines (a debug print, a banner, a traceback: kilobytes); a mebibyte with
  // no frame in it is a program writing something other than the protocol to stdout (a binary dump, a
  // child that inherited fd 1, a worker started in the wrong mode), which will not answer. The count
  // starts again at every frame, so a long-lived worker that prints a line per keyword is never ended.
  std::size_t max_stray_bytes = 1024 * 1024;
};

// Turns a byte stream into frame bodies. Feed it whatever a read returned (partial frames and
// several frames at once are normal), then call next() until it asks for more.
//
// Strict mode (client connections): any framing fault is an error, after which the stream cannot be
// trusted and the connection must end. Lenient mode (worker stdout): bytes that do not start a header
// are skipped and reported, so a library that prints to stdout does not break its session.
//
// Lenient resynchronization, in one pass (every byte is examined a bounded number of times, however
// the input is split; examined() counts it):
// - A header starts at "Content-Length:" anywhere, even inside a line (a stray partial line such as
//   "progress 10%" or "Content-Len" glued to the real header), when the rest of that line is exactly
//   ": N" (1 to 10 digits, N <= max_message_bytes) and CRLF. Right after a frame (or at the start) a
//   header may also begin with Content-Type.
// - Each further header line is read once. A bad line (bare LF, no colon, a second Content-Length,
//   a bad charset, another header line with "Content-Length" inside it, the block over
//   max_header_bytes) ends that attempt, and the search goes on at that line's first byte, so a real
//   header printed after a stray "Content-Length: 1\r\n" (even glued to a stray "x: ") is still found.
// - The body must begin, after JSON whitespace, with '{' or '['. A stray "Content-Length: 10\r\n\r\n"
//   would otherwise swallow the first bytes of the real frame behind it (and one with a huge N would
//   hold every later frame for ever); such a header is dropped with the blank line, and the search goes
//   on at what would have been its body. A Content-Length of 0 is dropped the same way.
// - More than max_stray_bytes dropped since the last frame is an error: the stream is given up.
// The frames, the dropped bytes and the error do not depend on how the input was split into feeds.
class FrameReader {
 public:
  enum class Mode { strict, lenient };

  struct Result {
    enum class Kind { frame, need_more, error };
    Kind kind = Kind::need_more;
    std::string body;     // the content, for Kind::frame
    std::string error;    // what is wrong, for Kind::error
    std::string skipped;  // lenient mode: stray bytes dropped before this result
  };

  explicit FrameReader(FramingLimits limits = {}, Mode mode = Mode::strict)
      : limits_(limits), mode_(mode), phase_(mode == Mode::lenient ? Phase::scan : Phase::headers) {}

  void feed(std::string_view bytes);
  Result next();

  // Bytes received but not yet returned as a frame (a partial frame, or nothing).
  std::size_t buffered() const { return buffer_.size() - start_; }
  bool failed() const { return failed_; }
  // Bytes looked at so far, each look counted (a byte looked at twice counts twice): the work done,
  // for tests that show it stays linear in the input.
  std::uint64_t examined() const { return examined_; }

 private:
  enum class Phase {
    scan,        // lenient: looking for the next "Content-Length"
    first_line,  // lenient: checking the rest of a candidate's first line (": N\r\n")
    headers,     // reading header lines up to the blank line
    body_check,  // lenient: the body must start like a JSON object or array
    body,        // waiting for the rest of the body
  };

  Result fail(std::string message, std::string skipped = {});
  // Lenient: drops [start_, to) as stray bytes into `skipped`; false when that passes max_stray_bytes.
  bool drop(std::size_t to, std::string& skipped);
  Result stray_error(std::string skipped);
  // A bad header block: strict fails; lenient drops up to the bad line and searches on from there.
  // Returns true when next() must return `out` (an error).
  bool header_fault(std::string message, std::string& skipped, Result& out);
  void restart_after_frame();

  FramingLimits limits_;
  Mode mode_;
  // An empty buffer keeps at most this much capacity between frames.
  static constexpr std::size_t kKeptCapacity = 64 * 1024;
  std::string buffer_;
  std::size_t start_ = 0;  // the first byte not yet returned or dropped
  bool failed_ = false;
  std::string error_;  // the first error, repeated by later calls

  Phase phase_ = Phase::headers;
  bool at_boundary_ = true;   // lenient: start_ is where the stream began or a frame ended
  std::size_t cursor_ = 0;    // how far the current phase has looked (an index into buffer_)
  std::size_t line_ = 0;      // headers: where the header line being read starts
  std::size_t body_ = 0;      // body_check, body: where the body starts
  int step_ = 0;              // first_line: which part of ": N\r\n" comes next
  std::size_t digits_ = 0;
  std::size_t length_ = 0;
  bool have_length_ = false;
  std::size_t stray_ = 0;     // lenient: bytes dropped since the last frame
  std::string stray_sample_;  // the first of them, for the error
  std::uint64_t examined_ = 0;
};

// "Content-Length: N\r\n\r\n" + body + "\r\n", counted: how both real peers write frames.
std::string encode_frame(std::string_view json_text);

}  // namespace rjg::protocol
