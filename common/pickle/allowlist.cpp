#include "common/pickle/allowlist.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace rjg::pickle {
namespace {

// Each class is only callable through REDUCE with the argument shape its own __reduce__ produces (see
// reduce_shape_ok), or, for the objects, created by NEWOBJ with no arguments and given a state by BUILD
// (see the checker's build()).
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
constexpr std::array<AllowedClass, 16> kAllowed{{
    {"robot.utils.dotdict", "DotDict", Class::dot_dict, Kind::dot_dict},
    {"collections", "OrderedDict", Class::ordered_dict, Kind::ordered_dict},
    {"datetime", "datetime", Class::datetime, Kind::datetime},
    {"datetime", "date", Class::date, Kind::date},
    {"datetime", "time", Class::time, Kind::time},
    {"datetime", "timedelta", Class::timedelta, Kind::timedelta},
    {"datetime", "timezone", Class::timezone, Kind::timezone},
    {"decimal", "Decimal", Class::decimal, Kind::decimal},
    {"builtins", "bytearray", Class::bytearray, Kind::bytearray},
    {"builtins", "complex", Class::complex, Kind::complex},
    {"pathlib", "PosixPath", Class::posix_path, Kind::path},
    {"pathlib", "PurePosixPath", Class::pure_posix_path, Kind::path},
    {"pathlib._local", "PosixPath", Class::posix_path, Kind::path},
    {"pathlib._local", "PurePosixPath", Class::pure_posix_path, Kind::path},
    {"xml.etree.ElementTree", "Element", Class::element, Kind::element},
    {"robot.utils.secret", "Secret", Class::secret, Kind::secret},
}};

}  // namespace

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

const AllowedClass* find_class(std::string_view module, std::string_view name) {
  auto it = std::find_if(kAllowed.begin(), kAllowed.end(),
                         [&](const AllowedClass& c) { return c.module == module && c.name == name; });
  return it == kAllowed.end() ? nullptr : &*it;
}

const AllowedClass& allowed_class(std::uint8_t index) { return kAllowed[index]; }
std::uint8_t class_index(const AllowedClass& c) { return static_cast<std::uint8_t>(&c - kAllowed.data()); }

const AllowedClass& class_for_writing(Class c) {
  return *std::find_if(kAllowed.begin(), kAllowed.end(), [&](const AllowedClass& a) { return a.cls == c; });
}

std::string class_name(const AllowedClass& c) { return fmt::format("{}.{}", c.module, c.name); }

// The argument tuples the allowlisted classes' own __reduce__ produce, and nothing else.
bool reduce_shape_ok(Kind makes, const ArgsShape& args, std::string_view& expected) {
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
      return (n == 1 || (n == 2 && k[1] == Kind::timezone)) && k[0] == Kind::bytes && args.first_length == 10;
    case Kind::date:
      expected = "(bytes[4],)";
      return n == 1 && k[0] == Kind::bytes && args.first_length == 4;
    case Kind::time:
      expected = "(bytes[6],) or (bytes[6], timezone)";
      return (n == 1 || (n == 2 && k[1] == Kind::timezone)) && k[0] == Kind::bytes && args.first_length == 6;
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

}  // namespace rjg::pickle
