// The allowlist of the data-only policy: the classes a pickle may name, what each makes, and the one
// shape of arguments or state each is admitted with. The checker types every value against it; the
// decoder builds each class from it; the encoder names classes through it, so it writes no other.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace rjg::pickle {

// The types the checker gives the values of a pickle.
enum class Kind : std::uint8_t {
  none, boolean, integer, floating, str, bytes, bytearray, tuple, frozenset,
  list, dict, set, ordered_dict, dot_dict,  // mutable containers
  datetime, date, time, timedelta, timezone, decimal,
  complex, path,    // built by REDUCE, like the datetime kinds
  element, secret,  // objects: NEWOBJ makes one, BUILD gives it its state (an entry in the container table)
  cls,  // an allowlisted class, only good as the callable of REDUCE or NEWOBJ
};

constexpr std::uint32_t bit(Kind k) { return std::uint32_t{1} << static_cast<unsigned>(k); }
std::string_view kind_name(Kind k);

inline bool is_container(Kind k) {
  return k == Kind::list || k == Kind::dict || k == Kind::set || k == Kind::ordered_dict || k == Kind::dot_dict;
}
inline bool is_mapping(Kind k) { return k == Kind::dict || k == Kind::ordered_dict || k == Kind::dot_dict; }
inline bool is_object(Kind k) { return k == Kind::element || k == Kind::secret; }

// Each class the decoder and the encoder tell apart (both paths are PosixPath to the checker).
enum class Class : std::uint8_t {
  dot_dict, ordered_dict, datetime, date, time, timedelta, timezone, decimal, bytearray, complex, posix_path,
  pure_posix_path, element, secret,
};

struct AllowedClass {
  std::string_view module;
  std::string_view name;
  Class cls;
  Kind makes;
};

// Exact (module, name) pairs: a dotted name walks attributes in Python ("DotDict.__init__.__globals__"),
// so nothing but these very strings is accepted. nullptr: not allowed.
const AllowedClass* find_class(std::string_view module, std::string_view name);
const AllowedClass& allowed_class(std::uint8_t index);
std::uint8_t class_index(const AllowedClass& c);
// The name the encoder writes for c (the module every supported CPython reads: pathlib, not pathlib._local).
const AllowedClass& class_for_writing(Class c);
std::string class_name(const AllowedClass& c);  // "datetime.date"

// The argument tuple of a REDUCE, as the checker knows it.
struct ArgsShape {
  std::uint8_t arity = 0;        // kManyItems above 3
  std::array<Kind, 3> item{};    // the first three items' kinds
  std::uint32_t item_kinds = 0;  // bit(kind) of every item
  std::uint32_t first_length = 0;  // the first item's length when it is str or bytes
};
constexpr std::uint8_t kManyItems = 0xff;

// Whether REDUCE on a class that makes `makes` is admitted with these arguments; `expected` names the
// admitted shape for the message.
bool reduce_shape_ok(Kind makes, const ArgsShape& args, std::string_view& expected);

// The keys BUILD reads in a state dict: an Element's (the first five) and a Secret's.
enum StateKey : std::uint8_t { kTag, kAttrib, kText, kTail, kChildren, kValue, kStateKeyCount };
constexpr std::array<std::string_view, kStateKeyCount> kStateKeys{"tag", "attrib", "text", "tail", "_children", "value"};

}  // namespace rjg::pickle
