#include "common/pickle/opcodes.hpp"

#include "common/pickle/pickle_policy.hpp"
#include "common/pickle/reader.hpp"

#include <fmt/format.h>

#include <array>
#include <utility>

namespace rjg::pickle {
namespace {

// Only the opcodes a protocol 4 or 5 pickle of plain data needs are admitted: no GLOBAL (STACK_GLOBAL
// names classes from strings the machine has typed), no persistent ids, extensions or out-of-band buffers.
constexpr std::array<std::pair<unsigned char, OpInfo>, 68> kOps{{
    {MARK, {"MARK", Arg::none, 0, Text::none, true}},
    {STOP, {"STOP", Arg::none, 0, Text::none, true}},
    {POP, {"POP"}},
    {POP_MARK, {"POP_MARK"}},
    {DUP, {"DUP"}},
    {FLOAT, {"FLOAT", Arg::line}},
    {INT, {"INT", Arg::line}},
    {BININT, {"BININT", Arg::fixed, 4, Text::none, true}},
    {BININT1, {"BININT1", Arg::fixed, 1, Text::none, true}},
    {LONG, {"LONG", Arg::line}},
    {BININT2, {"BININT2", Arg::fixed, 2, Text::none, true}},
    {NONE, {"NONE", Arg::none, 0, Text::none, true}},
    {PERSID, {"PERSID", Arg::line}},
    {BINPERSID, {"BINPERSID"}},
    {REDUCE, {"REDUCE", Arg::none, 0, Text::none, true}},
    {STRING, {"STRING", Arg::line, 0, Text::str}},
    {BINSTRING, {"BINSTRING", Arg::counted, 4, Text::str}},
    {SHORT_BINSTRING, {"SHORT_BINSTRING", Arg::counted, 1, Text::str}},
    {UNICODE, {"UNICODE", Arg::line, 0, Text::str}},
    {BINUNICODE, {"BINUNICODE", Arg::counted, 4, Text::str, true}},
    {APPEND, {"APPEND", Arg::none, 0, Text::none, true}},
    {BUILD, {"BUILD", Arg::none, 0, Text::none, true}},
    {GLOBAL, {"GLOBAL", Arg::two_lines}},
    {DICT, {"DICT"}},
    {EMPTY_DICT, {"EMPTY_DICT", Arg::none, 0, Text::none, true}},
    {APPENDS, {"APPENDS", Arg::none, 0, Text::none, true}},
    {GET, {"GET", Arg::line, 0, Text::none, true}},
    {BINGET, {"BINGET", Arg::fixed, 1, Text::none, true}},
    {INST, {"INST", Arg::two_lines}},
    {LONG_BINGET, {"LONG_BINGET", Arg::fixed, 4, Text::none, true}},
    {LIST, {"LIST"}},
    {EMPTY_LIST, {"EMPTY_LIST", Arg::none, 0, Text::none, true}},
    {OBJ, {"OBJ"}},
    {PUT, {"PUT", Arg::line, 0, Text::none, true}},
    {BINPUT, {"BINPUT", Arg::fixed, 1, Text::none, true}},
    {LONG_BINPUT, {"LONG_BINPUT", Arg::fixed, 4, Text::none, true}},
    {SETITEM, {"SETITEM", Arg::none, 0, Text::none, true}},
    {TUPLE, {"TUPLE", Arg::none, 0, Text::none, true}},
    {EMPTY_TUPLE, {"EMPTY_TUPLE", Arg::none, 0, Text::none, true}},
    {SETITEMS, {"SETITEMS", Arg::none, 0, Text::none, true}},
    {BINFLOAT, {"BINFLOAT", Arg::fixed, 8, Text::none, true}},
    {PROTO, {"PROTO", Arg::fixed, 1, Text::none, true}},
    {NEWOBJ, {"NEWOBJ", Arg::none, 0, Text::none, true}},
    {EXT1, {"EXT1", Arg::fixed, 1}},
    {EXT2, {"EXT2", Arg::fixed, 2}},
    {EXT4, {"EXT4", Arg::fixed, 4}},
    {TUPLE1, {"TUPLE1", Arg::none, 0, Text::none, true}},
    {TUPLE2, {"TUPLE2", Arg::none, 0, Text::none, true}},
    {TUPLE3, {"TUPLE3", Arg::none, 0, Text::none, true}},
    {NEWTRUE, {"NEWTRUE", Arg::none, 0, Text::none, true}},
    {NEWFALSE, {"NEWFALSE", Arg::none, 0, Text::none, true}},
    {LONG1, {"LONG1", Arg::counted, 1, Text::none, true}},
    {LONG4, {"LONG4", Arg::counted, 4, Text::none, true}},
    {BINBYTES, {"BINBYTES", Arg::counted, 4, Text::bytes, true}},
    {SHORT_BINBYTES, {"SHORT_BINBYTES", Arg::counted, 1, Text::bytes, true}},
    {SHORT_BINUNICODE, {"SHORT_BINUNICODE", Arg::counted, 1, Text::str, true}},
    {BINUNICODE8, {"BINUNICODE8", Arg::counted, 8, Text::str, true}},
    {BINBYTES8, {"BINBYTES8", Arg::counted, 8, Text::bytes, true}},
    {EMPTY_SET, {"EMPTY_SET", Arg::none, 0, Text::none, true}},
    {ADDITEMS, {"ADDITEMS", Arg::none, 0, Text::none, true}},
    {FROZENSET, {"FROZENSET", Arg::none, 0, Text::none, true}},
    {NEWOBJ_EX, {"NEWOBJ_EX"}},
    {STACK_GLOBAL, {"STACK_GLOBAL", Arg::none, 0, Text::none, true}},
    {MEMOIZE, {"MEMOIZE", Arg::none, 0, Text::none, true}},
    {FRAME, {"FRAME", Arg::fixed, 8, Text::none, true}},  // a frame's contents are opcodes like any others
    {BYTEARRAY8, {"BYTEARRAY8", Arg::counted, 8, Text::bytearray, true}},
    {NEXT_BUFFER, {"NEXT_BUFFER"}},
    {READONLY_BUFFER, {"READONLY_BUFFER"}},
}};

// Indexed by the opcode byte; an empty name marks a byte that is no opcode.
constexpr std::array<OpInfo, 256> make_table() {
  std::array<OpInfo, 256> table{};
  for (const auto& [op, info] : kOps) table[op] = info;
  return table;
}
constexpr std::array<OpInfo, 256> kTable = make_table();

}  // namespace

const OpInfo* op_info(unsigned char op) { return kTable[op].name.empty() ? nullptr : &kTable[op]; }

std::string op_name(unsigned char op) {
  if (const OpInfo* info = op_info(op)) return std::string(info->name);
  return fmt::format("0x{:02x} (not a pickle opcode)", op);
}

}  // namespace rjg::pickle

namespace rjg::pickle {

std::optional<std::string> visit_pickle_strings(std::string_view in, PickleTextVisitor& visitor) {
  using namespace pickle;
  std::size_t pos = 0;
  const auto fixed = [&](std::size_t n) -> bool {
    if (in.size() - pos < n) return false;
    pos += n;
    return true;
  };
  const auto counted = [&](std::size_t width, std::string_view& out) -> bool {
    if (in.size() - pos < width) return false;
    const std::uint64_t n = read_le(in.substr(pos, width));
    pos += width;
    if (n > in.size() - pos) return false;
    out = in.substr(pos, static_cast<std::size_t>(n));
    pos += static_cast<std::size_t>(n);
    return true;
  };
  const auto line = [&](std::string_view& out) -> bool {
    const auto nl = in.find('\n', pos);
    if (nl == std::string_view::npos) return false;
    out = in.substr(pos, nl - pos);
    pos = nl + 1;
    return true;
  };
  while (pos < in.size()) {
    const std::size_t at = pos;
    const auto op = static_cast<unsigned char>(in[pos++]);
    visitor.opcode(op);
    const OpInfo* info = op_info(op);
    if (!info) return fmt::format("opcode {} at byte {} is not a pickle opcode", op_name(op), at);
    if (op == STOP) return std::nullopt;
    std::string_view text;
    bool ok = true;
    switch (info->arg) {
      case Arg::none: break;
      case Arg::fixed: ok = fixed(info->width); break;
      case Arg::counted: ok = counted(info->width, text); break;
      case Arg::line: ok = line(text); break;
      case Arg::two_lines: ok = line(text) && line(text); break;
    }
    if (!ok) return fmt::format("truncated pickle: opcode {} at byte {}", op_name(op), at);
    if (info->text != Text::none && !visitor.text(text, info->text != Text::str)) return std::nullopt;
  }
  return "pickle ends without STOP";
}

}  // namespace rjg::pickle
