// The pickle opcodes (CPython Lib/pickle.py) and the layout of each one's argument (Lib/pickletools.py),
// once for the data-only machine (checker and decoder), the encoder and the string lexer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace rjg::pickle {

enum Op : unsigned char {
  MARK = '(', STOP = '.', POP = '0', POP_MARK = '1', DUP = '2', FLOAT = 'F', INT = 'I', BININT = 'J',
  BININT1 = 'K', LONG = 'L', BININT2 = 'M', NONE = 'N', PERSID = 'P', BINPERSID = 'Q', REDUCE = 'R',
  STRING = 'S', BINSTRING = 'T', SHORT_BINSTRING = 'U', UNICODE = 'V', BINUNICODE = 'X', APPEND = 'a',
  BUILD = 'b', GLOBAL = 'c', DICT = 'd', EMPTY_DICT = '}', APPENDS = 'e', GET = 'g', BINGET = 'h', INST = 'i',
  LONG_BINGET = 'j', LIST = 'l', EMPTY_LIST = ']', OBJ = 'o', PUT = 'p', BINPUT = 'q', LONG_BINPUT = 'r',
  SETITEM = 's', TUPLE = 't', EMPTY_TUPLE = ')', SETITEMS = 'u', BINFLOAT = 'G',
  PROTO = 0x80, NEWOBJ = 0x81, EXT1 = 0x82, EXT2 = 0x83, EXT4 = 0x84, TUPLE1 = 0x85, TUPLE2 = 0x86,
  TUPLE3 = 0x87, NEWTRUE = 0x88, NEWFALSE = 0x89, LONG1 = 0x8a, LONG4 = 0x8b,
  BINBYTES = 'B', SHORT_BINBYTES = 'C',
  SHORT_BINUNICODE = 0x8c, BINUNICODE8 = 0x8d, BINBYTES8 = 0x8e, EMPTY_SET = 0x8f, ADDITEMS = 0x90,
  FROZENSET = 0x91, NEWOBJ_EX = 0x92, STACK_GLOBAL = 0x93, MEMOIZE = 0x94, FRAME = 0x95,
  BYTEARRAY8 = 0x96, NEXT_BUFFER = 0x97, READONLY_BUFFER = 0x98,
};

// How an opcode's argument is laid out in the stream.
enum class Arg : std::uint8_t {
  none,
  fixed,      // width bytes, little endian (BINFLOAT: big endian)
  counted,    // a width-byte little-endian length, then that many bytes
  line,       // up to a newline
  two_lines,  // GLOBAL, INST: module and name
};

// What a string, bytes or bytearray opcode's argument is.
enum class Text : std::uint8_t { none, str, bytes, bytearray };

struct OpInfo {
  std::string_view name;
  Arg arg = Arg::none;
  std::uint8_t width = 0;  // fixed, counted
  Text text = Text::none;  // the old STRING forms count as str: what they mean to the string lexer
  // Whether the data-only machine runs it at all; every other opcode is refused by name.
  bool admitted = false;
};

// nullptr when the byte is no pickle opcode.
const OpInfo* op_info(unsigned char op);

// "BUILD"; "0xff (not a pickle opcode)".
std::string op_name(unsigned char op);

}  // namespace rjg::pickle
