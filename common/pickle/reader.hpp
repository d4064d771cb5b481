// The byte reader of the data-only machine: one admitted opcode and its argument at a time, with every
// rule about the bytes themselves (PROTO first, frames, lengths, the size and count limits, UTF-8), so
// that the checker and the decoder read a stream alike. It also holds the machine's one error.
#pragma once

#include "common/pickle/opcodes.hpp"
#include "common/pickle/pickle_policy.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace rjg::pickle {

std::uint64_t read_le(std::string_view b);

// Lowercase hex of even length into bytes (reused buffer): why it is malformed or too large, or nullopt.
std::optional<std::string> hex_to_bytes(std::string_view hex, const PickleLimits& limits, std::string& bytes);

struct Instruction {
  unsigned char op = 0;
  std::uint64_t n = 0;    // fixed-width arguments (little endian), PUT and GET's decimal
  std::string_view text;  // counted arguments (a str is valid UTF-8), and the bytes of a fixed one
};

class Reader {
 public:
  // admitted: the stream already passed the checker (the decoder's second pass), so the UTF-8 of its
  // strings, checked there, is not checked again: that check is most of the work of reading text.
  Reader(std::string_view in, const PickleLimits& limits, bool admitted = false)
      : in_(in), limits_(limits), admitted_(admitted) {}

  // The next opcode to run (PROTO and FRAME are handled here); false when the stream is refused.
  bool next(Instruction& ins);
  std::size_t remaining() const { return in_.size() - pos_; }

  // A refusal of the current opcode (or of a value made at `at`); always false, to return at once.
  bool fail(std::string reason) { return fail_at(op_start_, std::move(reason)); }
  bool fail_at(std::size_t at, std::string reason) {
    error_at_ = at;
    error_ = std::move(reason);
    return false;
  }
  std::string& error() { return error_; }
  std::size_t error_at() const { return error_at_; }

  unsigned char op() const { return op_; }
  std::size_t op_start() const { return op_start_; }
  std::string_view input() const { return in_; }
  const PickleLimits& limits() const { return limits_; }

 private:
  bool start();
  bool take(std::uint64_t n, std::string_view& out);
  bool take_le(std::size_t width, std::uint64_t& v);
  bool take_counted(std::size_t width, std::string_view& out);
  bool take_decimal_line(std::uint64_t& v);

  std::string_view in_;
  const PickleLimits& limits_;
  bool admitted_ = false;
  std::size_t pos_ = 0;
  std::size_t op_start_ = 0;
  unsigned char op_ = 0;
  std::size_t opcodes_ = 0;
  std::size_t frame_end_ = 0;  // the current frame covers [.., frame_end_)
  std::string error_;
  std::size_t error_at_ = 0;
};

}  // namespace rjg::pickle
