// Content-Length framing as in the Language Server Protocol (the protocol specification of
// robotframework-jsonrpcremote: "Framing").
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace rjg {

struct FramingLimits {
  std::size_t max_message_bytes = 64u * 1024 * 1024;
  std::size_t max_header_bytes = 8 * 1024;  // the whole header block, CRLFs included
};

// Turns a byte stream into frame bodies. Feed it whatever a read returned (partial frames and
// several frames at once are normal), then call next() until it asks for more.
//
// Strict mode (client connections): any framing fault is an error, after which the stream cannot be
// trusted and the connection must end. Lenient mode (worker stdout): bytes that do not start a header
// are skipped and reported, so a library that prints to stdout does not break its session.
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

  explicit FrameReader(FramingLimits limits = {}, Mode mode = Mode::strict) : limits_(limits), mode_(mode) {}

  void feed(std::string_view bytes);
  Result next();

  // Bytes received but not yet returned as a frame (a partial frame, or nothing).
  std::size_t buffered() const { return buffer_.size() - start_; }
  bool failed() const { return failed_; }

 private:
  Result fail(std::string message);
  // Lenient mode: drop bytes up to the next plausible header; returns what was dropped.
  std::string skip_to_header();

  FramingLimits limits_;
  Mode mode_;
  std::string buffer_;
  std::size_t start_ = 0;
  bool failed_ = false;
};

// "Content-Length: N\r\n\r\n" + body + "\r\n", counted: how both real peers write frames.
std::string encode_frame(std::string_view json_text);

}  // namespace rjg
