#include "common/pickle/reader.hpp"

#include "common/log.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

namespace rjg::pickle {
namespace {

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

}  // namespace

std::uint64_t read_le(std::string_view b) {
  std::uint64_t v = 0;
  for (std::size_t i = b.size(); i-- > 0;) v = (v << 8) | static_cast<unsigned char>(b[i]);
  return v;
}

std::optional<std::string> hex_to_bytes(std::string_view hex, const PickleLimits& limits, std::string& bytes) {
  if (hex.size() % 2 != 0) return "malformed pickled value: odd number of hex digits";
  if (hex.size() / 2 > limits.max_bytes)
    return fmt::format("pickle of {} bytes is larger than the limit of {}", hex.size() / 2, limits.max_bytes);
  bytes.resize(hex.size() / 2);
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    const int hi = hex_digit(hex[2 * i]), lo = hex_digit(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) {
      const std::size_t at = hi < 0 ? 2 * i : 2 * i + 1;
      return fmt::format("malformed pickled value: '{}' at hex digit {} is not lowercase hex",
                         log::printable(hex.substr(at, 1), 4), at);
    }
    bytes[i] = static_cast<char>(hi << 4 | lo);
  }
  return std::nullopt;
}

bool Reader::start() {
  if (in_.size() > limits_.max_bytes || in_.size() > std::numeric_limits<std::uint32_t>::max())
    return fail(fmt::format("pickle of {} bytes is larger than the limit of {}", in_.size(), limits_.max_bytes));
  if (in_.empty()) return fail("empty pickle");
  if (static_cast<unsigned char>(in_[0]) != PROTO)
    return fail(fmt::format("pickle starts with opcode {}, not PROTO 4 or 5", op_name(in_[0])));
  return true;
}

bool Reader::next(Instruction& ins) {
  if (pos_ == 0 && !start()) return false;
  while (pos_ < in_.size()) {
    op_start_ = pos_;
    op_ = static_cast<unsigned char>(in_[pos_++]);
    if (++opcodes_ > limits_.max_opcodes) return fail(fmt::format("more than {} opcodes", limits_.max_opcodes));
    const OpInfo* info = op_info(op_);
    if (!info || !info->admitted) return fail(fmt::format("opcode {} is not allowed", op_name(op_)));
    ins = Instruction{op_, 0, {}};
    if (op_ == PROTO && op_start_ != 0) return fail("second PROTO opcode");
    if (op_ == FRAME && op_start_ < frame_end_) return fail("FRAME inside an unfinished frame");
    switch (info->arg) {
      case Arg::none: break;
      case Arg::fixed:
        if (!take(info->width, ins.text)) return false;
        ins.n = read_le(ins.text);
        break;
      case Arg::counted:
        if (op_ != LONG1 && op_ != LONG4) {
          if (!take_counted(info->width, ins.text)) return false;
          break;
        }
        // A LONG's length is judged before its bytes are looked for.
        if (!take_le(info->width, ins.n)) return false;
        if (op_ == LONG4 && (ins.n & 0x80000000u)) return fail("LONG4 with a negative length");
        if (ins.n > limits_.max_long_bytes)
          return fail(
              fmt::format("integer of {} bytes is longer than the limit of {}", ins.n, limits_.max_long_bytes));
        if (!take(ins.n, ins.text)) return false;
        break;
      case Arg::line:  // PUT and GET, the only admitted ones
      case Arg::two_lines:
        if (!take_decimal_line(ins.n)) return false;
        break;
    }
    if (op_ == PROTO) {
      if (ins.n != 4 && ins.n != 5) return fail(fmt::format("protocol {} is not allowed (only 4 and 5)", ins.n));
      continue;
    }
    if (op_ == FRAME) {
      if (ins.n > in_.size() - pos_)
        return fail(fmt::format("FRAME of {} bytes, only {} remain", ins.n, in_.size() - pos_));
      frame_end_ = pos_ + static_cast<std::size_t>(ins.n);
      continue;
    }
    if (!admitted_ && info->text == Text::str && !valid_pickle_utf8(ins.text)) return fail("string is not valid UTF-8");
    return true;
  }
  op_start_ = in_.size();
  return fail("pickle ends without STOP");
}

// Takes the next n bytes of the current opcode: all there, and inside the frame the opcode began in.
bool Reader::take(std::uint64_t n, std::string_view& out) {
  std::uint64_t remaining = in_.size() - pos_;
  if (n > remaining)
    return fail(fmt::format("truncated pickle: opcode {} needs {} more bytes, {} remain", op_name(op_), n, remaining));
  if (op_start_ < frame_end_ && n > frame_end_ - pos_)
    return fail(fmt::format("opcode {} straddles the end of its frame at byte {}", op_name(op_), frame_end_));
  out = in_.substr(pos_, static_cast<std::size_t>(n));
  pos_ += static_cast<std::size_t>(n);
  return true;
}

bool Reader::take_le(std::size_t width, std::uint64_t& v) {
  std::string_view b;
  if (!take(width, b)) return false;
  v = read_le(b);
  return true;
}

// A length-prefixed argument: the length field is checked against what remains before anything else.
bool Reader::take_counted(std::size_t width, std::string_view& out) {
  std::uint64_t n;
  if (!take_le(width, n)) return false;
  if (n > in_.size() - pos_)
    return fail(fmt::format("opcode {} declares {} bytes, only {} remain", op_name(op_), n, in_.size() - pos_));
  return take(n, out);
}

// The decimal argument of PUT and GET: digits and a newline, nothing that int() reads differently.
bool Reader::take_decimal_line(std::uint64_t& v) {
  std::size_t end = op_start_ < frame_end_ ? frame_end_ : in_.size();
  auto nl = in_.find('\n', pos_);
  if (nl == std::string_view::npos || nl >= end) return fail(fmt::format("opcode {} has no end of line", op_name(op_)));
  auto digits = in_.substr(pos_, nl - pos_);
  if (digits.empty() || digits.size() > 9 ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return fail(fmt::format("opcode {} argument '{}' is not a plain decimal number", op_name(op_),
                            log::printable(digits, 20)));
  v = 0;
  for (char c : digits) v = v * 10 + static_cast<unsigned>(c - '0');
  pos_ = nl + 1;
  return true;
}

}  // namespace rjg::pickle

namespace rjg::pickle {

// UTF-8 as CPython decodes a pickle's str ("utf-8", "surrogatepass").
bool valid_pickle_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  std::size_t n = s.size(), i = 0;
  while (i < n) {
    unsigned c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    std::size_t more;
    unsigned lo = 0x80, hi = 0xbf;
    if (c >= 0xc2 && c <= 0xdf) more = 1;
    else if (c >= 0xe0 && c <= 0xef) more = 2, lo = (c == 0xe0 ? 0xa0 : 0x80);
    else if (c >= 0xf0 && c <= 0xf4) more = 3, lo = (c == 0xf0 ? 0x90 : 0x80), hi = (c == 0xf4 ? 0x8f : 0xbf);
    else return false;
    if (n - i <= more) return false;
    if (p[i + 1] < lo || p[i + 1] > hi) return false;
    for (std::size_t k = 2; k <= more; ++k)
      if (p[i + k] < 0x80 || p[i + k] > 0xbf) return false;
    i += more + 1;
  }
  return true;
}

}  // namespace rjg::pickle
