// Pickled values as plain data: {"__pickled__": "<hex>"} read into a tree and written back.
//
// Python peers send lists, dicts, bytes, datetimes, ... as pickles. The gateway reads them to turn them
// into XML-RPC values for Robot's classic Remote clients, and writes them to give Python JSON-RPC
// clients bytes and containers the way the real Python server does. Nothing is ever executed: a pickle
// is first admitted by check_pickle_data_only() (pickle_policy.hpp), then a small interpreter of the
// same opcodes builds plain values, with Python's own rules for what they mean (dict keys 1, 1.0 and
// True are one key; timedelta(0, 90000) is 1 day, 1:00:00).
#pragma once

#include "common/pickle/pickle_policy.hpp"

#include <concepts>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

namespace rjg::pickle {

struct PyValue;

struct PyNone {
  bool operator==(const PyNone&) const = default;
};

// An int outside int64 (the decoder gives every int64 value as std::int64_t): "-123456789012345678901234".
struct PyBigInt {
  std::string decimal;
  bool operator==(const PyBigInt&) const = default;
};

struct PyBytes {
  std::string bytes;
  bool bytearray = false;
  bool operator==(const PyBytes&) const = default;
};

struct PyList {
  std::vector<PyValue> items;
  bool operator==(const PyList&) const = default;
};

struct PyTuple {
  std::vector<PyValue> items;
  bool operator==(const PyTuple&) const = default;
};

// In the pickle's order (the sender's iteration order), without duplicates (Python's equality).
struct PySet {
  std::vector<PyValue> items;
  bool frozen = false;
  bool operator==(const PySet&) const = default;
};

// Insertion order; each key once (a repeated key keeps its first place and takes the last value, as in
// Python).
struct PyDict {
  enum class Kind { dict, ordered_dict, dot_dict };  // dot_dict: robot.utils.dotdict.DotDict
  std::vector<std::pair<PyValue, PyValue>> items;
  Kind kind = Kind::dict;
  friend bool operator==(const PyDict& a, const PyDict& b);  // defined below PyValue (pair needs it complete)
};

// datetime.datetime. Aware when utc_offset_seconds is set: a datetime.timezone of that offset, named
// tz_name when not empty (timezone(timedelta(hours=2), 'EET')); unnamed at offset 0 is timezone.utc.
// Offsets are whole seconds, strictly within a day. fold (0 or 1, PEP 495) picks the second of two
// equal wall times.
struct PyDateTime {
  int year = 1, month = 1, day = 1, hour = 0, minute = 0, second = 0, microsecond = 0;
  std::optional<int> utc_offset_seconds;
  std::string tz_name;
  int fold = 0;
  bool operator==(const PyDateTime&) const = default;
};

struct PyDate {
  int year = 1, month = 1, day = 1;
  bool operator==(const PyDate&) const = default;
};

// datetime.time; the time zone as in PyDateTime.
struct PyTime {
  int hour = 0, minute = 0, second = 0, microsecond = 0;
  std::optional<int> utc_offset_seconds;
  std::string tz_name;
  int fold = 0;
  bool operator==(const PyTime&) const = default;
};

// Normalized as Python keeps it: 0 <= seconds < 86400, 0 <= microseconds < 1000000, |days| <= 999999999.
struct PyTimedelta {
  int days = 0, seconds = 0, microseconds = 0;
  bool operator==(const PyTimedelta&) const = default;
};

// decimal.Decimal as str() prints it ("1.10", "1E+3", "-0", "NaN", "sNaN", "-Infinity"); the decoder
// gives that canonical form.
struct PyDecimal {
  std::string text;
  bool operator==(const PyDecimal&) const = default;
};

// complex: two doubles, as Python keeps it.
struct PyComplex {
  double real = 0, imag = 0;
  bool operator==(const PyComplex&) const = default;  // a NaN part is unequal to itself, as in Python
};

// pathlib.PosixPath (pure: PurePosixPath), as str() gives it: the parts joined and normalized as pathlib
// does ("/tmp/a b", "a/b", "//x", "."). Equal to Python when the text is (the two classes compare equal).
struct PyPath {
  std::string path = ".";
  bool pure = false;
  bool operator==(const PyPath&) const = default;
};

// xml.etree.ElementTree.Element: what its pickled state holds (tag, attrib in order, text, tail, child
// elements). Python's str() and repr() of an Element carry its memory address, which no copy has:
// py_repr() prints "<Element 'tag'>", and the classic visitors refuse to make text of one.
struct PyElement {
  std::string tag;
  std::vector<std::pair<std::string, std::string>> attrib;
  std::optional<std::string> text, tail;
  std::vector<PyElement> children;
  bool operator==(const PyElement&) const = default;
};

// robot.utils.secret.Secret: its str() is "<secret>", its repr() "Secret(value=<secret>)".
struct PySecret {
  std::string value;
  bool operator==(const PySecret&) const = default;
};

// A tree of plain Python data. std::string is a Python str, as UTF-8; lone surrogates (which Python
// strings can hold) appear as their 3-byte encodings, as CPython's pickle writes them.
struct PyValue {
  using Variant = std::variant<PyNone, bool, std::int64_t, PyBigInt, double, std::string, PyBytes, PyList, PyTuple,
                               PySet, PyDict, PyDateTime, PyDate, PyTime, PyTimedelta, PyDecimal, PyComplex, PyPath,
                               PyElement, PySecret>;
  Variant v;

  PyValue() = default;  // None
  // Anything one alternative takes without narrowing: PyValue(1) is an int, PyValue("a") a str,
  // PyValue(1.5) a float, PyValue(true) a bool.
  template <class T>
    requires(!std::same_as<std::remove_cvref_t<T>, PyValue> && std::is_constructible_v<Variant, T &&>)
  PyValue(T&& x) : v(std::forward<T>(x)) {}

  template <class T>
  const T* get() const {
    return std::get_if<T>(&v);
  }
  bool operator==(const PyValue&) const = default;  // structural; a NaN float is unequal to itself
};

// For std::visit over PyValue::v (and other variants): Overloaded{[](const PyList&) {...}, ...}.
template <class... F>
struct Overloaded : F... {
  using F::operator()...;
};
template <class... F>
Overloaded(F...) -> Overloaded<F...>;  // clang 14 (the fuzz build) does not deduce it for aggregates

inline bool operator==(const PyDict& a, const PyDict& b) { return a.kind == b.kind && a.items == b.items; }

// Decodes a raw pickle: the data-only check first (same limits), then the value. Errors say what and
// where: "byte 17: opcode BUILD is not allowed". Beyond the check, refuses what Python would fail to
// unpickle (an impossible date, a malformed Decimal, a signaling NaN as a key), what the tree cannot
// hold (a datetime.timezone on its own, a time zone offset with microseconds), and integers too long in
// total to print in decimal (the square of their lengths is bounded). Shared references become copies,
// so the tree takes about sizeof(PyValue) (88 bytes) per element of limits.max_expanded: pass a smaller
// one than the checker's default (2^26) where memory matters.
std::variant<PyValue, std::string> decode_pickle(std::string_view bytes, const PickleLimits& limits = {});
// The text of a {"__pickled__": ...} value: lowercase hex of even length, then decode_pickle().
std::variant<PyValue, std::string> decode_pickle_hex(std::string_view hex, const PickleLimits& limits = {});

// Encodes as CPython's C pickler does pickle.dumps(value, protocol=4): same opcodes, batches, memo and
// frames, so the same bytes except where CPython shares one object (the tree has copies). Whatever it
// returns decode_pickle() admits under the default limits, within their sizes (max_bytes, max_opcodes,
// max_stack, max_memo: CPython memoizes every str, so a million strings are too many for it as for
// CPython's own pickles, and max_expanded). Throws std::invalid_argument for what Python cannot hold
// either: an unhashable dict key or set element, a date that does not exist, a malformed PyBigInt or
// Decimal, invalid UTF-8 in a str, an int longer than the checker's max_long_bytes, nesting deeper than
// its max_depth. Repeated dict keys and set elements are written as they are (Python keeps one).
std::string encode_pickle(const PyValue& value);
std::string encode_pickle_hex(const PyValue& value);  // lowercase

// Python's str() and repr() of the value (CPython 3.8 to 3.11; OrderedDict in the OrderedDict([...])
// form, DotDict in its dict form, unicode printability of CPython 3.13; an Element without the address
// Python prints, see PyElement). Nesting deeper than 1000 levels prints as "...".
std::string py_str(const PyValue& value);
std::string py_repr(const PyValue& value);

}  // namespace rjg::pickle
