#include "common/pickle/pickle_policy.hpp"

#include "common/log.hpp"
#include "common/protocol/json_text.hpp"

#include <boost/json.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <vector>

namespace rjg {
namespace {

namespace json = boost::json;

// ---------------------------------------------------------------------------------------------------
// Opcodes (CPython Lib/pickle.py). Only the ones named in run() are admitted; the rest are named for
// messages.

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

std::string op_name(unsigned char op) {
  switch (op) {
    case MARK: return "MARK";
    case STOP: return "STOP";
    case POP: return "POP";
    case POP_MARK: return "POP_MARK";
    case DUP: return "DUP";
    case FLOAT: return "FLOAT";
    case INT: return "INT";
    case BININT: return "BININT";
    case BININT1: return "BININT1";
    case LONG: return "LONG";
    case BININT2: return "BININT2";
    case NONE: return "NONE";
    case PERSID: return "PERSID";
    case BINPERSID: return "BINPERSID";
    case REDUCE: return "REDUCE";
    case STRING: return "STRING";
    case BINSTRING: return "BINSTRING";
    case SHORT_BINSTRING: return "SHORT_BINSTRING";
    case UNICODE: return "UNICODE";
    case BINUNICODE: return "BINUNICODE";
    case APPEND: return "APPEND";
    case BUILD: return "BUILD";
    case GLOBAL: return "GLOBAL";
    case DICT: return "DICT";
    case EMPTY_DICT: return "EMPTY_DICT";
    case APPENDS: return "APPENDS";
    case GET: return "GET";
    case BINGET: return "BINGET";
    case INST: return "INST";
    case LONG_BINGET: return "LONG_BINGET";
    case LIST: return "LIST";
    case EMPTY_LIST: return "EMPTY_LIST";
    case OBJ: return "OBJ";
    case PUT: return "PUT";
    case BINPUT: return "BINPUT";
    case LONG_BINPUT: return "LONG_BINPUT";
    case SETITEM: return "SETITEM";
    case TUPLE: return "TUPLE";
    case EMPTY_TUPLE: return "EMPTY_TUPLE";
    case SETITEMS: return "SETITEMS";
    case BINFLOAT: return "BINFLOAT";
    case PROTO: return "PROTO";
    case NEWOBJ: return "NEWOBJ";
    case EXT1: return "EXT1";
    case EXT2: return "EXT2";
    case EXT4: return "EXT4";
    case TUPLE1: return "TUPLE1";
    case TUPLE2: return "TUPLE2";
    case TUPLE3: return "TUPLE3";
    case NEWTRUE: return "NEWTRUE";
    case NEWFALSE: return "NEWFALSE";
    case LONG1: return "LONG1";
    case LONG4: return "LONG4";
    case BINBYTES: return "BINBYTES";
    case SHORT_BINBYTES: return "SHORT_BINBYTES";
    case SHORT_BINUNICODE: return "SHORT_BINUNICODE";
    case BINUNICODE8: return "BINUNICODE8";
    case BINBYTES8: return "BINBYTES8";
    case EMPTY_SET: return "EMPTY_SET";
    case ADDITEMS: return "ADDITEMS";
    case FROZENSET: return "FROZENSET";
    case NEWOBJ_EX: return "NEWOBJ_EX";
    case STACK_GLOBAL: return "STACK_GLOBAL";
    case MEMOIZE: return "MEMOIZE";
    case FRAME: return "FRAME";
    case BYTEARRAY8: return "BYTEARRAY8";
    case NEXT_BUFFER: return "NEXT_BUFFER";
    case READONLY_BUFFER: return "READONLY_BUFFER";
    default: return fmt::format("0x{:02x} (not a pickle opcode)", op);
  }
}

// ---------------------------------------------------------------------------------------------------
// The types a value on the symbolic stack can have.

enum class Kind : std::uint8_t {
  none, boolean, integer, floating, str, bytes, bytearray, tuple, frozenset,
  list, dict, set, ordered_dict, dot_dict,  // mutable containers
  datetime, date, time, timedelta, timezone, decimal,
  complex, path,    // built by REDUCE, like the datetime kinds
  element, secret,  // objects: NEWOBJ makes one, BUILD gives it its state (an entry in the container table)
  cls,  // an allowlisted class, only good as the callable of REDUCE or NEWOBJ
};

constexpr std::uint32_t bit(Kind k) { return std::uint32_t{1} << static_cast<unsigned>(k); }

std::string_view kind_name(Kind k) {
  switch (k) {
    case Kind::none: return "None";
    case Kind::boolean: return "bool";
    case Kind::integer: return "int";
    case Kind::floating: return "float";
    case Kind::str: return "str";
    case Kind::bytes: return "bytes";
    case Kind::bytearray: return "bytearray";
    case Kind::tuple: return "tuple";
    case Kind::frozenset: return "frozenset";
    case Kind::list: return "list";
    case Kind::dict: return "dict";
    case Kind::set: return "set";
    case Kind::ordered_dict: return "collections.OrderedDict";
    case Kind::dot_dict: return "robot.utils.dotdict.DotDict";
    case Kind::datetime: return "datetime.datetime";
    case Kind::date: return "datetime.date";
    case Kind::time: return "datetime.time";
    case Kind::timedelta: return "datetime.timedelta";
    case Kind::timezone: return "datetime.timezone";
    case Kind::decimal: return "decimal.Decimal";
    case Kind::complex: return "complex";
    case Kind::path: return "pathlib.PosixPath";
    case Kind::element: return "xml.etree.ElementTree.Element";
    case Kind::secret: return "robot.utils.secret.Secret";
    case Kind::cls: return "class";
  }
  return "?";
}

bool is_container(Kind k) {
  return k == Kind::list || k == Kind::dict || k == Kind::set || k == Kind::ordered_dict || k == Kind::dot_dict;
}
bool is_mapping(Kind k) { return k == Kind::dict || k == Kind::ordered_dict || k == Kind::dot_dict; }
bool is_object(Kind k) { return k == Kind::element || k == Kind::secret; }
// Values that refer to an entry of the container table (shared by every reference to them).
bool has_entry(Kind k) { return is_container(k) || is_object(k); }

// The classes STACK_GLOBAL may name, as exact (module, name) pairs: a dotted name walks attributes in
// Python ("DotDict.__init__.__globals__"), so nothing but these very strings is accepted. Each is only
// callable through REDUCE with the argument shape its own __reduce__ produces (see reduce_shape_ok),
// or, for the objects, created by NEWOBJ with no arguments and given a state by BUILD (see build()).
//
// The review of each class added for Robot Framework's standard libraries (issue #23 item 6): what the
// peer's unpickler runs for the admitted shape, in CPython 3.8 to 3.13, C and pure-Python picklers.
//   builtins.complex: REDUCE complex(real, imag), as complex.__getnewargs__ gives it (two floats; ints
//     are admitted too). The builtin constructor only stores two doubles.
//   pathlib.PosixPath, PurePosixPath: REDUCE cls(*parts) with str parts (3.8-3.12: self.parts, 3.13:
//     the raw segments, under the module name pathlib._local, which 3.14 keeps as an alias). The
//     constructor only parses the text (os.fspath of a str is the str); nothing touches the file
//     system. Path itself never appears (it makes PosixPath); Windows paths are not admitted. As a
//     dict key or set element, a path makes the peer run pathlib's own __hash__ and __eq__, which
//     compare the parsed parts: data work on the path's text, nothing beyond it.
//   xml.etree.ElementTree.Element: NEWOBJ with () (element_new: tag, text, tail None, no children),
//     then BUILD with the dict its C __getstate__ writes: the C __setstate__ only stores tag, attrib,
//     text, tail and the children (which it checks are Elements); the pure-Python class (no
//     __setstate__) only updates __dict__. Admitted: tag str, attrib a dict of str to str, text and
//     tail str or None, _children a list of Elements already built, no other key (the pure-Python
//     pickler leaves text and tail out when unset). An Element is refused as a dict key or set element.
//   robot.utils.secret.Secret: NEWOBJ with () (object.__new__, no __init__), then BUILD with exactly
//     {"value": str}: Secret has no __setstate__, so BUILD only sets the instance's __dict__.
// The same rules, in the same shape, are in pickle_value.cpp's decoder (kClasses); one pickle core for
// both is issue #24.
struct AllowedClass {
  std::string_view module;
  std::string_view name;
  Kind makes;
};
constexpr std::array<AllowedClass, 16> kAllowed{{
    {"robot.utils.dotdict", "DotDict", Kind::dot_dict},
    {"collections", "OrderedDict", Kind::ordered_dict},
    {"datetime", "datetime", Kind::datetime},
    {"datetime", "date", Kind::date},
    {"datetime", "time", Kind::time},
    {"datetime", "timedelta", Kind::timedelta},
    {"datetime", "timezone", Kind::timezone},
    {"decimal", "Decimal", Kind::decimal},
    {"builtins", "bytearray", Kind::bytearray},
    {"builtins", "complex", Kind::complex},
    {"pathlib", "PosixPath", Kind::path},
    {"pathlib", "PurePosixPath", Kind::path},
    {"pathlib._local", "PosixPath", Kind::path},
    {"pathlib._local", "PurePosixPath", Kind::path},
    {"xml.etree.ElementTree", "Element", Kind::element},
    {"robot.utils.secret", "Secret", Kind::secret},
}};

// The keys BUILD reads in a state dict: an Element's (the first five) and a Secret's.
enum StateKey : std::uint8_t { kTag, kAttrib, kText, kTail, kChildren, kValue, kStateKeyCount };
constexpr std::array<std::string_view, kStateKeyCount> kStateKeys{"tag", "attrib", "text", "tail", "_children", "value"};

std::string class_name(const AllowedClass& c) { return fmt::format("{}.{}", c.module, c.name); }

constexpr std::uint8_t kManyItems = 0xff;  // Value::arity of a tuple with more than 3 items

// One value on the stack or in the memo. Immutable values carry their own depth and expanded size;
// mutable containers refer to an entry of the container table, shared by every reference to them.
struct Value {
  Kind kind = Kind::none;
  std::uint8_t cls = 0;    // Kind::cls: index in kAllowed
  std::uint8_t arity = 0;  // Kind::tuple: item count, kManyItems above 3
  bool hashable = true;
  std::array<Kind, 3> item{};  // Kind::tuple of up to 3: the item kinds
  std::uint32_t item_kinds = 0;  // Kind::tuple: bit(kind) of every item
  std::uint32_t depth = 0;     // nesting: 0 for scalars, 1 for an empty tuple
  std::uint32_t a = 0;         // str, bytes: offset of the text in the pickle; containers: table index
  std::uint32_t b = 0;         // str, bytes: length; tuple: length of the first item when str or bytes
  std::uint64_t size = 1;      // expanded size
};

struct Container {
  std::uint64_t size = 1;
  std::uint32_t depth = 1;
  bool nested = false;  // placed inside another value: its contents are final from then on
  bool built = false;   // element, secret: BUILD has given it its state
  // What a container holds, for BUILD's checks of a state dict and what it refers to.
  bool other_keys = false;        // dict: a key that is not one of kStateKeys
  std::uint8_t state_keys = 0;    // dict: which of kStateKeys it has (bit i)
  std::uint32_t key_kinds = 0;    // dict: bit(kind) of its keys; list, set: of its items
  std::uint32_t value_kinds = 0;  // dict: of its values
  std::array<Kind, kStateKeyCount> state_kind{};  // dict: the kind of the value under each of kStateKeys
  std::uint32_t attrib = 0, children = 0;        // dict: the entries of the "attrib" and "_children" values
};

std::uint64_t saturating_add(std::uint64_t x, std::uint64_t y) {
  return x > std::numeric_limits<std::uint64_t>::max() - y ? std::numeric_limits<std::uint64_t>::max() : x + y;
}


std::uint64_t read_le(std::string_view b) {
  std::uint64_t v = 0;
  for (std::size_t i = b.size(); i-- > 0;) v = (v << 8) | static_cast<unsigned char>(b[i]);
  return v;
}

// ---------------------------------------------------------------------------------------------------
// The symbolic unpickler. Every rule is at least as strict as both CPython unpicklers (C and pure
// Python), so an admitted pickle means the same thing to either of them as it does here.

class Machine {
 public:
  Machine(std::string_view in, const PickleLimits& limits) : in_(in), limits_(limits) {}

  // nullopt: admitted.
  std::optional<std::string> run(std::size_t* offset) {
    bool ok = execute();
    if (offset) *offset = ok ? 0 : op_start_;
    if (ok) return std::nullopt;
    return std::move(error_);
  }

 private:
  bool fail(std::string reason) {
    error_ = std::move(reason);
    return false;
  }
  bool refuse_op(unsigned char op) { return fail(fmt::format("opcode {} is not allowed", op_name(op))); }

  // Takes the next n bytes of the current opcode: all there, and inside the frame the opcode began in.
  bool take(std::uint64_t n, std::string_view& out) {
    std::uint64_t remaining = in_.size() - pos_;
    if (n > remaining)
      return fail(fmt::format("truncated pickle: opcode {} needs {} more bytes, {} remain", op_name(op_), n, remaining));
    if (op_start_ < frame_end_ && n > frame_end_ - pos_)
      return fail(fmt::format("opcode {} straddles the end of its frame at byte {}", op_name(op_), frame_end_));
    out = in_.substr(pos_, static_cast<std::size_t>(n));
    pos_ += static_cast<std::size_t>(n);
    return true;
  }
  bool take_le(std::size_t width, std::uint64_t& v) {
    std::string_view b;
    if (!take(width, b)) return false;
    v = read_le(b);
    return true;
  }
  // A length-prefixed argument: the length field is checked against what remains before anything else.
  bool take_counted(std::size_t width, std::string_view& out) {
    std::uint64_t n;
    if (!take_le(width, n)) return false;
    if (n > in_.size() - pos_)
      return fail(fmt::format("opcode {} declares {} bytes, only {} remain", op_name(op_), n, in_.size() - pos_));
    return take(n, out);
  }
  // The decimal argument of PUT and GET: digits and a newline, nothing that int() reads differently.
  bool take_decimal_line(std::uint64_t& v) {
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

  // Values above the innermost MARK: nothing below it may be popped or used.
  std::size_t available() const { return stack_.size() - (marks_.empty() ? 0 : marks_.back()); }
  bool need(std::size_t n) {
    if (available() < n) return fail(fmt::format("stack underflow at opcode {}", op_name(op_)));
    return true;
  }
  bool push(const Value& v) {
    if (stack_.size() >= limits_.max_stack)
      return fail(fmt::format("more than {} values on the stack", limits_.max_stack));
    stack_.push_back(v);
    return true;
  }
  // Pops the innermost MARK; its items are stack_[begin, end).
  bool pop_mark(std::size_t& begin) {
    if (marks_.empty()) return fail(fmt::format("opcode {} without a MARK", op_name(op_)));
    begin = marks_.back();
    marks_.pop_back();
    return true;
  }

  std::uint32_t depth_of(const Value& v) const { return has_entry(v.kind) ? containers_[v.a].depth : v.depth; }
  std::uint64_t size_of(const Value& v) const { return has_entry(v.kind) ? containers_[v.a].size : v.size; }

  bool check_bounds(std::uint64_t depth, std::uint64_t size) {
    if (depth > limits_.max_depth) return fail(fmt::format("nesting deeper than {} levels", limits_.max_depth));
    if (size > limits_.max_expanded)
      return fail(fmt::format("value larger than {} elements and bytes when expanded", limits_.max_expanded));
    return true;
  }

  // v becomes part of another value. A class is not data; a mutable container is final from now on,
  // which makes depths and sizes exact and refuses every cycle; an object must have its state already
  // (so it cannot be inside its own state).
  bool nest(const Value& v) {
    if (v.kind == Kind::cls) return fail(fmt::format("class {} used as a value", class_name(kAllowed[v.cls])));
    if (is_object(v.kind) && !containers_[v.a].built)
      return fail(fmt::format("{} used as a value before BUILD gave it its state", kind_name(v.kind)));
    if (has_entry(v.kind)) containers_[v.a].nested = true;
    return true;
  }

  // A dict's member key = value, as far as BUILD's checks need it.
  void note_member(Container& c, const Value& key, const Value& value) {
    const auto name = key.kind == Kind::str ? text_of(key) : std::string_view();
    const auto it = key.kind == Kind::str ? std::find(kStateKeys.begin(), kStateKeys.end(), name) : kStateKeys.end();
    if (it == kStateKeys.end()) {
      c.other_keys = true;
      return;
    }
    const auto i = static_cast<std::size_t>(it - kStateKeys.begin());
    c.state_keys = static_cast<std::uint8_t>(c.state_keys | (1u << i));
    c.state_kind[i] = value.kind;
    if (i == kAttrib) c.attrib = value.a;
    if (i == kChildren) c.children = value.a;
  }

  // Adds stack_[first, last) to the container `target` (APPEND(S), SETITEM(S), ADDITEMS).
  bool fill(const Value& target, std::size_t first, std::size_t last, Kind wanted) {
    bool ok_target = wanted == Kind::dict ? is_mapping(target.kind) : target.kind == wanted;
    if (!ok_target)
      return fail(fmt::format("opcode {} on a {} (only {})", op_name(op_), kind_name(target.kind),
                              wanted == Kind::dict ? "dict, OrderedDict or DotDict" : kind_name(wanted)));
    std::uint64_t depth = 0, size = 0;
    std::uint32_t key_kinds = 0, value_kinds = 0;
    for (std::size_t i = first; i < last; ++i) {
      const Value& item = stack_[i];
      bool is_key = wanted == Kind::dict && (i - first) % 2 == 0;
      if ((is_key || wanted == Kind::set) && !item.hashable)
        return fail(fmt::format("unhashable {} as a {}", kind_name(item.kind), is_key ? "dict key" : "set element"));
      if (!nest(item)) return false;
      depth = std::max<std::uint64_t>(depth, depth_of(item));
      size = saturating_add(size, size_of(item));
      (wanted != Kind::dict || is_key ? key_kinds : value_kinds) |= bit(item.kind);
    }
    Container& c = containers_[target.a];
    if (c.nested)
      return fail(fmt::format("{} changed after it was placed in another value (cycles are not plain data)",
                              kind_name(target.kind)));
    c.depth = static_cast<std::uint32_t>(std::max<std::uint64_t>(c.depth, depth + 1));
    c.size = saturating_add(c.size, size);
    c.key_kinds |= key_kinds;
    c.value_kinds |= value_kinds;
    if (wanted == Kind::dict)
      for (std::size_t i = first; i + 1 < last; i += 2) note_member(c, stack_[i], stack_[i + 1]);
    if (!check_bounds(c.depth, c.size)) return false;
    stack_.resize(first);
    return true;
  }

  // Replaces stack_[first, end) by the tuple (or frozenset) of those items.
  bool make_tuple(std::size_t first, Kind kind) {
    Value t;
    t.kind = kind;
    std::size_t n = stack_.size() - first;
    t.arity = n <= 3 ? static_cast<std::uint8_t>(n) : kManyItems;
    std::uint64_t depth = 0, size = 1;
    for (std::size_t i = first; i < stack_.size(); ++i) {
      const Value& item = stack_[i];
      if (kind == Kind::frozenset && !item.hashable)
        return fail(fmt::format("unhashable {} as a frozenset element", kind_name(item.kind)));
      if (!nest(item)) return false;
      t.hashable = t.hashable && item.hashable;
      t.item_kinds |= bit(item.kind);
      if (i - first < 3) t.item[i - first] = item.kind;
      if (i == first && (item.kind == Kind::bytes || item.kind == Kind::str)) t.b = item.b;
      depth = std::max<std::uint64_t>(depth, depth_of(item));
      size = saturating_add(size, size_of(item));
    }
    if (!check_bounds(depth + 1, size)) return false;
    t.depth = static_cast<std::uint32_t>(depth + 1);
    t.size = size;
    stack_.resize(first);
    return push(t);
  }

  // A mutable container, or an object (element, secret: NEWOBJ) whose BUILD is still to come.
  bool new_container(Kind kind) {
    if (containers_.size() >= limits_.max_containers)
      return fail(fmt::format("more than {} lists, dicts, sets and objects", limits_.max_containers));
    Value v;
    v.kind = kind;
    v.hashable = false;
    v.a = static_cast<std::uint32_t>(containers_.size());
    containers_.push_back({});
    return push(v);
  }

  bool push_scalar(Kind kind, std::uint64_t extra_size = 0) {
    Value v;
    v.kind = kind;
    v.size = 1 + extra_size;
    v.hashable = kind != Kind::bytearray;
    return push(v);
  }

  bool push_text(Kind kind, std::string_view text) {
    if (kind == Kind::str && !valid_pickle_utf8(text)) return fail("string is not valid UTF-8");
    Value v;
    v.kind = kind;
    v.hashable = kind != Kind::bytearray;
    v.a = static_cast<std::uint32_t>(text.data() - in_.data());
    v.b = static_cast<std::uint32_t>(text.size());
    v.size = 1 + text.size();
    return push(v);
  }

  std::string_view text_of(const Value& v) const { return in_.substr(v.a, v.b); }

  bool stack_global() {
    if (!need(2)) return false;
    const Value& module = stack_[stack_.size() - 2];
    const Value& name = stack_.back();
    if (module.kind != Kind::str || name.kind != Kind::str)
      return fail(fmt::format("STACK_GLOBAL needs two string constants, got {} and {}", kind_name(module.kind),
                              kind_name(name.kind)));
    auto m = text_of(module), n = text_of(name);
    auto it = std::find_if(kAllowed.begin(), kAllowed.end(),
                           [&](const AllowedClass& c) { return c.module == m && c.name == n; });
    if (it == kAllowed.end())
      return fail(fmt::format("class {}.{} is not allowed", log::printable(m, 80), log::printable(n, 80)));
    stack_.resize(stack_.size() - 2);
    Value c;
    c.kind = Kind::cls;
    c.cls = static_cast<std::uint8_t>(it - kAllowed.begin());
    return push(c);
  }

  // The argument tuples the allowlisted classes' own __reduce__ produce, and nothing else.
  static bool reduce_shape_ok(Kind makes, const Value& args, std::string_view& expected) {
    auto n = args.arity;
    auto k = args.item;
    switch (makes) {
      case Kind::dot_dict:
      case Kind::ordered_dict:
        expected = "()";
        return n == 0;
      case Kind::bytearray:
        expected = "() or (bytes,)";
        return n == 0 || (n == 1 && k[0] == Kind::bytes);
      case Kind::datetime:
        expected = "(bytes[10],) or (bytes[10], timezone)";
        return (n == 1 || (n == 2 && k[1] == Kind::timezone)) && k[0] == Kind::bytes && args.b == 10;
      case Kind::date:
        expected = "(bytes[4],)";
        return n == 1 && k[0] == Kind::bytes && args.b == 4;
      case Kind::time:
        expected = "(bytes[6],) or (bytes[6], timezone)";
        return (n == 1 || (n == 2 && k[1] == Kind::timezone)) && k[0] == Kind::bytes && args.b == 6;
      case Kind::timedelta:
        expected = "(int, int, int)";
        return n == 3 && k[0] == Kind::integer && k[1] == Kind::integer && k[2] == Kind::integer;
      case Kind::timezone:
        expected = "(timedelta,) or (timedelta, str)";
        return (n == 1 || (n == 2 && k[1] == Kind::str)) && k[0] == Kind::timedelta;
      case Kind::decimal:
        expected = "(str,)";
        return n == 1 && k[0] == Kind::str;
      case Kind::complex: {
        const auto number = [](Kind x) { return x == Kind::floating || x == Kind::integer; };
        expected = "(float, float)";
        return n == 2 && number(k[0]) && number(k[1]);
      }
      case Kind::path:
        expected = "a tuple of str";
        return (args.item_kinds & ~bit(Kind::str)) == 0;
      default:
        expected = "nothing";
        return false;
    }
  }

  static std::string describe_args(const Value& args) {
    if (args.kind != Kind::tuple) return std::string(kind_name(args.kind));
    if (args.arity == kManyItems) return "a tuple of more than 3 items";
    std::string s = "(";
    for (std::uint8_t i = 0; i < args.arity; ++i) {
      if (i) s += ", ";
      s += kind_name(args.item[i]);
      if (i == 0 && (args.item[0] == Kind::bytes)) s += fmt::format("[{}]", args.b);
    }
    return s + (args.arity == 1 ? ",)" : ")");
  }

  bool reduce() {
    if (!need(2)) return false;
    const Value& callable = stack_[stack_.size() - 2];
    const Value& args = stack_.back();
    if (callable.kind != Kind::cls)
      return fail(fmt::format("REDUCE calls a {} (only allowed classes may be called)", kind_name(callable.kind)));
    const AllowedClass& cls = kAllowed[callable.cls];
    std::string_view expected;
    if (args.kind != Kind::tuple || !reduce_shape_ok(cls.makes, args, expected))
      return fail(fmt::format("REDUCE on {} with arguments {} is not allowed (expected {})", class_name(cls),
                              describe_args(args), expected));
    std::uint64_t size = args.size;
    stack_.resize(stack_.size() - 2);
    if (is_container(cls.makes)) return new_container(cls.makes);
    return push_scalar(cls.makes, size);
  }

  // NEWOBJ: cls.__new__(cls, *args), for the objects of kAllowed only, with no arguments. The object
  // is no value until BUILD gives it its state.
  bool newobj() {
    if (!need(2)) return false;
    const Value& callable = stack_[stack_.size() - 2];
    const Value& args = stack_.back();
    if (callable.kind != Kind::cls)
      return fail(fmt::format("NEWOBJ creates a {} (only allowed classes may be instantiated)", kind_name(callable.kind)));
    const AllowedClass& cls = kAllowed[callable.cls];
    if (!is_object(cls.makes)) return fail(fmt::format("NEWOBJ on {} is not allowed (only REDUCE builds it)", class_name(cls)));
    if (args.kind != Kind::tuple || args.arity != 0)
      return fail(fmt::format("NEWOBJ on {} with arguments {} is not allowed (expected ())", class_name(cls),
                              describe_args(args)));
    stack_.resize(stack_.size() - 2);
    return new_container(cls.makes);
  }

  // Why a state dict is not what an Element's __getstate__ writes, or "".
  std::string element_state_problem(const Container& s) const {
    if (s.other_keys || (s.state_keys & (1u << kValue)))
      return "a key other than tag, attrib, text, tail and _children";
    const auto has = [&](StateKey k) { return (s.state_keys & (1u << k)) != 0; };
    if (!has(kTag) || s.state_kind[kTag] != Kind::str) return "tag must be a str";
    if (has(kAttrib)) {
      const Container* a = s.state_kind[kAttrib] == Kind::dict ? &containers_[s.attrib] : nullptr;
      if (!a || (a->key_kinds & ~bit(Kind::str)) || (a->value_kinds & ~bit(Kind::str)))
        return "attrib must be a dict of str to str";
    }
    for (StateKey k : {kText, kTail})
      if (has(k) && s.state_kind[k] != Kind::str && s.state_kind[k] != Kind::none)
        return fmt::format("{} must be a str or None", kStateKeys[k]);
    if (has(kChildren)) {
      const Container* c = s.state_kind[kChildren] == Kind::list ? &containers_[s.children] : nullptr;
      if (!c || (c->key_kinds & ~bit(Kind::element))) return "_children must be a list of Elements";
    }
    return "";
  }

  // BUILD: inst.__setstate__(state), or its __dict__ updated, on an object NEWOBJ made, once.
  bool build() {
    if (!need(2)) return false;
    const Value& target = stack_[stack_.size() - 2];
    const Value& state = stack_.back();
    if (!is_object(target.kind))
      return fail(fmt::format("BUILD on a {} (only on a new {} or {})", kind_name(target.kind),
                              kind_name(Kind::element), kind_name(Kind::secret)));
    if (containers_[target.a].built) return fail(fmt::format("second BUILD on one {}", kind_name(target.kind)));
    if (state.kind != Kind::dict)
      return fail(fmt::format("BUILD on {} with a {} as its state (expected a dict)", kind_name(target.kind),
                              kind_name(state.kind)));
    const Container& s = containers_[state.a];
    std::string problem;
    if (target.kind == Kind::element) problem = element_state_problem(s);
    else if (s.other_keys || s.state_keys != (1u << kValue) || s.state_kind[kValue] != Kind::str)
      problem = "the state must be exactly {\"value\": str}";
    if (!problem.empty())
      return fail(fmt::format("BUILD on {} with this state is not allowed: {}", kind_name(target.kind), problem));
    if (!nest(state)) return false;
    Container& object = containers_[target.a];
    object.built = true;
    object.depth = std::max<std::uint32_t>(1, s.depth);  // an Element's children are two levels down
    object.size = saturating_add(1, s.size);
    if (!check_bounds(object.depth, object.size)) return false;
    stack_.pop_back();
    return true;
  }

  bool memo_put(std::uint64_t index) {
    if (!need(1)) return false;
    // A pickler numbers memo entries 0, 1, 2, ... in order; anything else (overwriting an entry, gaps)
    // only serves to make a reader lose track of what an index holds.
    if (index != memo_.size())
      return fail(fmt::format("memo index {} is not the next free one ({})", index, memo_.size()));
    if (memo_.size() >= limits_.max_memo) return fail(fmt::format("more than {} memo entries", limits_.max_memo));
    memo_.push_back(stack_.back());
    return true;
  }
  bool memo_get(std::uint64_t index) {
    if (index >= memo_.size()) return fail(fmt::format("memo index {} was never set", index));
    return push(memo_[static_cast<std::size_t>(index)]);
  }

  bool execute() {
    if (in_.size() > limits_.max_bytes || in_.size() > std::numeric_limits<std::uint32_t>::max())
      return fail(fmt::format("pickle of {} bytes is larger than the limit of {}", in_.size(), limits_.max_bytes));
    if (in_.empty()) return fail("empty pickle");
    if (static_cast<unsigned char>(in_[0]) != PROTO)
      return fail(fmt::format("pickle starts with opcode {}, not PROTO 4 or 5", op_name(in_[0])));

    std::size_t opcodes = 0;
    while (pos_ < in_.size()) {
      op_start_ = pos_;
      op_ = static_cast<unsigned char>(in_[pos_++]);
      if (++opcodes > limits_.max_opcodes) return fail(fmt::format("more than {} opcodes", limits_.max_opcodes));
      std::uint64_t n = 0;
      std::string_view text;
      switch (op_) {
        case PROTO: {
          if (op_start_ != 0) return fail("second PROTO opcode");
          if (!take_le(1, n)) return false;
          if (n != 4 && n != 5) return fail(fmt::format("protocol {} is not allowed (only 4 and 5)", n));
          break;
        }
        case FRAME: {
          if (op_start_ < frame_end_) return fail("FRAME inside an unfinished frame");
          if (!take_le(8, n)) return false;
          if (n > in_.size() - pos_)
            return fail(fmt::format("FRAME of {} bytes, only {} remain", n, in_.size() - pos_));
          frame_end_ = pos_ + static_cast<std::size_t>(n);
          break;
        }
        case STOP: {
          if (!marks_.empty()) return fail("STOP with an open MARK");
          if (stack_.size() != 1) return fail(fmt::format("STOP with {} values on the stack, not 1", stack_.size()));
          if (pos_ != in_.size()) return fail(fmt::format("{} bytes after STOP", in_.size() - pos_));
          if (!nest(stack_.back())) return false;
          return check_bounds(depth_of(stack_.back()), size_of(stack_.back()));
        }

        case MARK:
          if (marks_.size() >= limits_.max_depth) return fail(fmt::format("more than {} open MARKs", limits_.max_depth));
          marks_.push_back(stack_.size());
          break;

        case NONE:
          if (!push_scalar(Kind::none)) return false;
          break;
        case NEWTRUE:
        case NEWFALSE:
          if (!push_scalar(Kind::boolean)) return false;
          break;
        case BININT1:
        case BININT2:
        case BININT:
          if (!take(op_ == BININT1 ? 1 : op_ == BININT2 ? 2 : 4, text) || !push_scalar(Kind::integer)) return false;
          break;
        case LONG1:
        case LONG4: {
          if (!take_le(op_ == LONG1 ? 1 : 4, n)) return false;
          if (op_ == LONG4 && (n & 0x80000000u)) return fail("LONG4 with a negative length");
          if (n > limits_.max_long_bytes)
            return fail(fmt::format("integer of {} bytes is longer than the limit of {}", n, limits_.max_long_bytes));
          if (!take(n, text) || !push_scalar(Kind::integer, n)) return false;
          break;
        }
        case BINFLOAT:
          if (!take(8, text) || !push_scalar(Kind::floating)) return false;
          break;

        case SHORT_BINUNICODE:
        case BINUNICODE:
        case BINUNICODE8:
          if (!take_counted(op_ == SHORT_BINUNICODE ? 1 : op_ == BINUNICODE ? 4 : 8, text)) return false;
          if (!push_text(Kind::str, text)) return false;
          break;
        case SHORT_BINBYTES:
        case BINBYTES:
        case BINBYTES8:
          if (!take_counted(op_ == SHORT_BINBYTES ? 1 : op_ == BINBYTES ? 4 : 8, text)) return false;
          if (!push_text(Kind::bytes, text)) return false;
          break;
        case BYTEARRAY8:
          if (!take_counted(8, text) || !push_text(Kind::bytearray, text)) return false;
          break;

        case EMPTY_TUPLE: {
          Value t;
          t.kind = Kind::tuple;
          t.depth = 1;
          if (!push(t)) return false;
          break;
        }
        case TUPLE1:
        case TUPLE2:
        case TUPLE3: {
          std::size_t k = op_ - TUPLE1 + 1u;
          if (!need(k) || !make_tuple(stack_.size() - k, Kind::tuple)) return false;
          break;
        }
        case TUPLE:
        case FROZENSET: {
          std::size_t begin;
          if (!pop_mark(begin) || !make_tuple(begin, op_ == TUPLE ? Kind::tuple : Kind::frozenset)) return false;
          break;
        }

        case EMPTY_LIST:
          if (!new_container(Kind::list)) return false;
          break;
        case EMPTY_DICT:
          if (!new_container(Kind::dict)) return false;
          break;
        case EMPTY_SET:
          if (!new_container(Kind::set)) return false;
          break;
        case APPEND:
          if (!need(2) || !fill(stack_[stack_.size() - 2], stack_.size() - 1, stack_.size(), Kind::list)) return false;
          break;
        case SETITEM:
          if (!need(3) || !fill(stack_[stack_.size() - 3], stack_.size() - 2, stack_.size(), Kind::dict)) return false;
          break;
        case APPENDS:
        case SETITEMS:
        case ADDITEMS: {
          std::size_t begin;
          if (!pop_mark(begin)) return false;
          // the target sits just below the popped MARK, and above the next one
          if (begin <= (marks_.empty() ? 0 : marks_.back()))
            return fail(fmt::format("stack underflow at opcode {}", op_name(op_)));
          if (op_ == SETITEMS && (stack_.size() - begin) % 2 != 0) return fail("SETITEMS with an odd number of items");
          Kind wanted = op_ == APPENDS ? Kind::list : op_ == SETITEMS ? Kind::dict : Kind::set;
          if (!fill(stack_[begin - 1], begin, stack_.size(), wanted)) return false;
          break;
        }

        case STACK_GLOBAL:
          if (!stack_global()) return false;
          break;
        case REDUCE:
          if (!reduce()) return false;
          break;
        case NEWOBJ:
          if (!newobj()) return false;
          break;
        case BUILD:
          if (!build()) return false;
          break;

        case MEMOIZE:
          if (!memo_put(memo_.size())) return false;
          break;
        case BINPUT:
        case LONG_BINPUT:
          if (!take_le(op_ == BINPUT ? 1 : 4, n) || !memo_put(n)) return false;
          break;
        case PUT:
          if (!take_decimal_line(n) || !memo_put(n)) return false;
          break;
        case BINGET:
        case LONG_BINGET:
          if (!take_le(op_ == BINGET ? 1 : 4, n) || !memo_get(n)) return false;
          break;
        case GET:
          if (!take_decimal_line(n) || !memo_get(n)) return false;
          break;

        default:
          return refuse_op(op_);
      }
    }
    op_start_ = in_.size();
    return fail("pickle ends without STOP");
  }

  std::string_view in_;
  const PickleLimits& limits_;
  std::size_t pos_ = 0;
  std::size_t op_start_ = 0;
  unsigned char op_ = 0;
  std::size_t frame_end_ = 0;  // the current frame covers [.., frame_end_)
  std::vector<Value> stack_;
  std::vector<std::size_t> marks_;  // stack sizes at each open MARK
  std::vector<Value> memo_;
  std::vector<Container> containers_;
  std::string error_;
};

// ---------------------------------------------------------------------------------------------------
// The JSON side.

constexpr std::string_view kPickledKey = "__pickled__";

bool is_identifier(std::string_view key) {
  if (key.empty() || (key[0] >= '0' && key[0] <= '9')) return false;
  return std::all_of(key.begin(), key.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  });
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// The data-only check of one "__pickled__" value's hex text, once its object has the exact form: why it
// is refused, or nullopt. Decodes into `bytes` (reused across values); sets `offset` to the byte of
// the pickle a refusal is about, when it is about one.
std::optional<std::string> check_pickled_hex(std::string_view hex, const PickleLimits& limits, std::string& bytes,
                                             std::optional<std::size_t>& offset) {
  if (hex.size() % 2 != 0) return "malformed pickled value: odd number of hex digits";
  if (hex.size() / 2 > limits.max_bytes)
    return fmt::format("pickle of {} bytes is larger than the limit of {}", hex.size() / 2, limits.max_bytes);
  bytes.resize(hex.size() / 2);
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    int hi = hex_digit(hex[2 * i]), lo = hex_digit(hex[2 * i + 1]);
    if (hi < 0 || lo < 0)
      return fmt::format("malformed pickled value: '{}' at hex digit {} is not lowercase hex",
                         log::printable(hex.substr(hi < 0 ? 2 * i : 2 * i + 1, 1), 4), hi < 0 ? 2 * i : 2 * i + 1);
    bytes[i] = static_cast<char>(hi << 4 | lo);
  }
  std::size_t at = 0;
  if (auto why = check_pickle_data_only(bytes, &at, limits)) {
    offset = at;
    return why;
  }
  return std::nullopt;
}

class PickleWalker {
 public:
  PickleWalker(PickleMode mode, std::string_view base, const PickleLimits& limits)
      : mode_(mode), base_(base), limits_(limits) {}

  std::optional<PickleRefusal> walk(const json::value& v) {
    if (visit(v)) return std::nullopt;
    return PickleRefusal{path(), std::move(reason_), offset_, mode_};
  }

 private:
  struct Step {
    std::string_view key;  // object member, when index is npos
    std::size_t index;
  };
  static constexpr std::size_t kKey = static_cast<std::size_t>(-1);

  bool visit(const json::value& v) {
    if (const auto* o = v.if_object()) {
      if (const auto* p = o->if_contains(kPickledKey)) return check(*o, *p);
      for (const auto& member : *o) {
        steps_.push_back({member.key(), kKey});
        if (!visit(member.value())) return false;
        steps_.pop_back();
      }
    } else if (const auto* a = v.if_array()) {
      for (std::size_t i = 0; i < a->size(); ++i) {
        steps_.push_back({{}, i});
        if (!visit((*a)[i])) return false;
        steps_.pop_back();
      }
    }
    return true;
  }

  bool refuse(std::string reason) {
    reason_ = std::move(reason);
    return false;
  }

  // An object with a "__pickled__" member: a Python peer would likely unpickle it whatever else it holds,
  // so only the exact form is checked as a pickle, and every other form is refused.
  bool check(const json::object& o, const json::value& pickled) {
    if (mode_ == PickleMode::deny) return refuse("pickle = \"deny\" refuses every pickled value");
    if (o.size() != 1) {
      std::string others;
      for (const auto& member : o)
        if (member.key() != kPickledKey) others += fmt::format("{}\"{}\"", others.empty() ? "" : ", ",
                                                               log::printable(member.key(), 40));
      return refuse(fmt::format("malformed pickled value: \"__pickled__\" comes with other members ({})", others));
    }
    const auto* hex = pickled.if_string();
    if (!hex) return refuse("malformed pickled value: \"__pickled__\" is not a string");
    if (auto why = check_pickled_hex(*hex, limits_, bytes_, offset_)) return refuse(std::move(*why));
    return true;
  }

  std::string path() const {
    std::string out(base_);
    for (const auto& s : steps_) {
      if (s.index != kKey) out += fmt::format("[{}]", s.index);
      else if (!is_identifier(s.key)) out += fmt::format("[{}]", json::serialize(json::string_view(s.key)));
      else {
        if (!out.empty()) out += '.';
        out += s.key;
      }
    }
    return out;
  }

  PickleMode mode_;
  std::string_view base_;
  const PickleLimits& limits_;
  std::vector<Step> steps_;
  std::string bytes_;  // the decoded pickle, reused across values
  std::string reason_;
  std::optional<std::size_t> offset_;
};

// The same check over a JSON text, driven by the scanner's events. An object's members are only all
// known when it closes, so that is where an object with "__pickled__" is judged.
class TextPickleWalker final : public jsontext::Visitor {
 public:
  TextPickleWalker(std::string_view text, PickleMode mode, std::string_view base, const PickleLimits& limits)
      : text_(text), mode_(mode), base_(base), limits_(limits) {}

  std::optional<PickleRefusal> walk() {
    if (auto error = jsontext::walk(text_, *this, jsontext::Limits{std::numeric_limits<std::size_t>::max()}))
      return PickleRefusal{std::string(base_),
                           fmt::format("the value is not valid JSON: {} (at byte {})", error->message, error->offset),
                           std::nullopt, mode_};
    return std::move(refusal_);
  }

  bool begin(jsontext::Kind kind, std::size_t) override {
    if (!frames_.empty()) {
      Frame& parent = frames_.back();
      steps_.push_back(parent.object ? Step{parent.key, 0, true} : Step{{}, parent.index, false});
      if (parent.object && parent.key_is_pickled) parent.pickled_kind = kind;
    }
    Frame frame;
    frame.object = kind == jsontext::Kind::object;
    frames_.push_back(std::move(frame));
    return true;
  }

  bool key(jsontext::Slice literal) override {
    Frame& f = frames_.back();
    f.key = literal;
    f.key_is_pickled = is_pickled_key(literal.of(text_));
    if (f.key_is_pickled) ++f.pickled;
    else if (f.others.size() < 8) f.others.push_back(literal);
    else ++f.more_others;
    return true;
  }

  bool scalar(jsontext::Kind kind, jsontext::Slice value) override {
    if (frames_.empty()) return true;
    Frame& parent = frames_.back();
    if (parent.object && parent.key_is_pickled) {
      parent.pickled_kind = kind;
      parent.pickled_value = value;
    }
    ++parent.index;
    return true;
  }

  // A pickled object is judged as a whole, as the tree walker does: its verdict replaces whatever was
  // found inside it. Otherwise the first refusal found inside a container is the container's. The walk
  // goes on to the end (an enclosing object may yet turn out to be pickled).
  bool end(jsontext::Kind, jsontext::Slice) override {
    Frame& f = frames_.back();
    std::optional<PickleRefusal> refusal = std::move(f.refusal);
    const bool wanted = frames_.size() == 1 ? !refusal_ : !frames_[frames_.size() - 2].refusal;
    if (f.object && f.pickled > 0) {
      refusal.reset();
      // (A refusal is kept only when none was found before it at its level: later ones are not checked.)
      if (wanted && !check(f)) refusal = PickleRefusal{path(), std::move(reason_), offset_, mode_};
      offset_.reset();
    }
    frames_.pop_back();
    if (!steps_.empty()) steps_.pop_back();
    if (frames_.empty()) {
      if (!refusal_) refusal_ = std::move(refusal);
    } else {
      Frame& parent = frames_.back();
      if (!parent.refusal) parent.refusal = std::move(refusal);
      ++parent.index;
    }
    return true;
  }

 private:
  struct Frame {
    bool object = false;
    std::size_t index = 0;  // arrays: the element being read
    jsontext::Slice key;    // objects: the member being read
    bool key_is_pickled = false;
    std::size_t pickled = 0;                // "__pickled__" members
    jsontext::Kind pickled_kind = jsontext::Kind::null;  // of the last one
    jsontext::Slice pickled_value;          // of the last one, when a string
    std::vector<jsontext::Slice> others;    // the first few other keys, for the message
    std::size_t more_others = 0;
    std::optional<PickleRefusal> refusal;   // the first one found inside
  };
  struct Step {
    jsontext::Slice key;
    std::size_t index;
    bool is_key;
  };

  // Only a key whose literal could spell __pickled__ (13 bytes, or up to 6 per character when
  // escaped) is decoded.
  static bool is_pickled_key(std::string_view literal) {
    if (literal == "\"__pickled__\"") return true;
    if (literal.size() <= 13 || literal.size() > 2 + 6 * kPickledKey.size() ||
        literal.find('\\') == std::string_view::npos)
      return false;
    return jsontext::decode_string(literal) == kPickledKey;
  }

  bool refuse(std::string reason) {
    reason_ = std::move(reason);
    return false;
  }

  bool check(const Frame& f) {
    if (mode_ == PickleMode::deny) return refuse("pickle = \"deny\" refuses every pickled value");
    if (!f.others.empty()) {
      std::string others;
      for (const auto& key : f.others)
        others += fmt::format("{}\"{}\"", others.empty() ? "" : ", ",
                              log::printable(jsontext::decode_string(key.of(text_)), 40));
      if (f.more_others) others += fmt::format(" and {} more", f.more_others);
      return refuse(fmt::format("malformed pickled value: \"__pickled__\" comes with other members ({})", others));
    }
    if (f.pickled_kind != jsontext::Kind::string)
      return refuse("malformed pickled value: \"__pickled__\" is not a string");
    const std::string hex = jsontext::decode_string(f.pickled_value.of(text_));
    std::string bytes;
    if (auto why = check_pickled_hex(hex, limits_, bytes, offset_)) return refuse(std::move(*why));
    return true;
  }

  // Where the walk stopped: the object being judged (its steps are still on the stack).
  std::string path() const {
    std::string out(base_);
    for (const auto& s : steps_) {
      if (!s.is_key) {
        out += fmt::format("[{}]", s.index);
        continue;
      }
      const std::string key = jsontext::decode_string(s.key.of(text_));
      if (!is_identifier(key)) {
        out += fmt::format("[{}]", jsontext::quote(key));
      } else {
        if (!out.empty()) out += '.';
        out += key;
      }
    }
    return out;
  }

  std::string_view text_;
  PickleMode mode_;
  std::string_view base_;
  const PickleLimits& limits_;
  std::vector<Frame> frames_;
  std::vector<Step> steps_;
  std::string reason_;
  std::optional<std::size_t> offset_;
  std::optional<PickleRefusal> refusal_;  // the root's
};

}  // namespace

std::optional<std::string> check_pickle_data_only(std::string_view bytes, std::size_t* offset,
                                                  const PickleLimits& limits) {
  return Machine(bytes, limits).run(offset);
}

std::optional<PickleRefusal> inspect_pickles(const boost::json::value& v, PickleMode mode, std::string_view path,
                                             const PickleLimits& limits) {
  if (mode == PickleMode::allow) return std::nullopt;
  return PickleWalker(mode, path, limits).walk(v);
}

std::optional<PickleRefusal> inspect_pickles_text(std::string_view json_text, PickleMode mode, std::string_view path,
                                                  const PickleLimits& limits) {
  if (mode == PickleMode::allow) return std::nullopt;
  return TextPickleWalker(json_text, mode, path, limits).walk();
}

std::string describe(const PickleRefusal& r, std::string_view library) {
  std::string where = r.path.empty() ? "a pickled value" : fmt::format("the pickled value at {}", r.path);
  std::string at = r.offset ? fmt::format(" (pickle byte {})", *r.offset) : "";
  std::string hint =
      r.mode == PickleMode::deny
          ? fmt::format("set pickle = \"data-only\" (plain data) or \"allow\" (unchecked) for library '{}' to let "
                        "pickled values through",
                        library)
          : fmt::format("set pickle = \"allow\" for library '{}' to pass it unchecked", library);
  return fmt::format("{} was refused: {}{}; {}", where, r.reason, at, hint);
}

std::optional<std::string> visit_pickle_strings(std::string_view in, PickleTextVisitor& visitor) {
  // Argument layouts from CPython's Lib/pickletools.py.
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
    const auto truncated = [&] { return fmt::format("truncated pickle: opcode {} at byte {}", op_name(op), at); };
    std::string_view text;
    bool is_text = false, is_bytes = false;
    switch (op) {
      case STOP: return std::nullopt;
      case MARK: case POP: case POP_MARK: case DUP: case NONE: case REDUCE: case APPEND: case BUILD: case DICT:
      case EMPTY_DICT: case APPENDS: case LIST: case EMPTY_LIST: case OBJ: case SETITEM: case TUPLE:
      case EMPTY_TUPLE: case SETITEMS: case BINPERSID: case TUPLE1: case TUPLE2: case TUPLE3: case NEWTRUE:
      case NEWFALSE: case NEWOBJ: case EMPTY_SET: case ADDITEMS: case FROZENSET: case NEWOBJ_EX:
      case STACK_GLOBAL: case MEMOIZE: case NEXT_BUFFER: case READONLY_BUFFER:
        break;
      case PROTO: case BININT1: case BINGET: case BINPUT: case EXT1:
        if (!fixed(1)) return truncated();
        break;
      case BININT2: case EXT2:
        if (!fixed(2)) return truncated();
        break;
      case BININT: case LONG_BINGET: case LONG_BINPUT: case EXT4:
        if (!fixed(4)) return truncated();
        break;
      case BINFLOAT: case FRAME:  // a frame's contents are opcodes like any others
        if (!fixed(8)) return truncated();
        break;
      case INT: case LONG: case FLOAT: case PERSID: case PUT: case GET:
        if (!line(text)) return truncated();
        break;
      case GLOBAL: case INST:
        if (!line(text) || !line(text)) return truncated();
        break;
      case LONG1: case LONG4:
        if (!counted(op == LONG1 ? 1 : 4, text)) return truncated();
        break;
      case STRING: case UNICODE:
        if (!line(text)) return truncated();
        is_text = true;
        break;
      case SHORT_BINSTRING: case SHORT_BINUNICODE:
        if (!counted(1, text)) return truncated();
        is_text = true;
        break;
      case BINSTRING: case BINUNICODE:
        if (!counted(4, text)) return truncated();
        is_text = true;
        break;
      case BINUNICODE8:
        if (!counted(8, text)) return truncated();
        is_text = true;
        break;
      case SHORT_BINBYTES:
        if (!counted(1, text)) return truncated();
        is_text = is_bytes = true;
        break;
      case BINBYTES:
        if (!counted(4, text)) return truncated();
        is_text = is_bytes = true;
        break;
      case BINBYTES8: case BYTEARRAY8:
        if (!counted(8, text)) return truncated();
        is_text = is_bytes = true;
        break;
      default:
        return fmt::format("opcode {} at byte {} is not a pickle opcode", op_name(op), at);
    }
    if (is_text && !visitor.text(text, is_bytes)) return std::nullopt;
  }
  return "pickle ends without STOP";
}

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

}  // namespace rjg
