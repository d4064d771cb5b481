// Python's str() and repr() of plain values (CPython 3.8 to 3.11, unicode printability of 3.13).
#include "common/pickle/pickle_value.hpp"
#include "common/pickle/python_semantics.hpp"

#include <fmt/format.h>

#include <charconv>
#include <cmath>

namespace rjg::pickle {
namespace {

// The next code point of (generalized, surrogates allowed) UTF-8; a byte that starts none comes back
// as -1 - byte.
std::int64_t next_code_point(std::string_view s, std::size_t& i) {
  const auto c = static_cast<unsigned char>(s[i]);
  std::size_t more = c >= 0xf0 && c <= 0xf4 ? 3 : c >= 0xe0 ? 2 : c >= 0xc2 ? 1 : 0;
  if (more > 0 && i + more < s.size() && valid_pickle_utf8(s.substr(i, more + 1))) {
    std::uint32_t cp = c & (0x3fu >> more);
    for (std::size_t k = 1; k <= more; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3fu);
    i += more + 1;
    return cp;
  }
  ++i;
  return c < 0x80 ? std::int64_t{c} : -1 - std::int64_t{c};
}

void repr_str(std::string_view s, std::string& out) {
  const bool single = s.find('\'') != std::string_view::npos, dbl = s.find('"') != std::string_view::npos;
  const char quote = single && !dbl ? '"' : '\'';
  out += quote;
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t start = i;
    const std::int64_t cp = next_code_point(s, i);
    if (cp < 0) out += fmt::format("\\x{:02x}", -1 - cp);  // not UTF-8: no Python str holds it
    else if (cp == quote || cp == '\\') out += {'\\', static_cast<char>(cp)};
    else if (cp == '\t') out += "\\t";
    else if (cp == '\n') out += "\\n";
    else if (cp == '\r') out += "\\r";
    else if (printable(static_cast<std::uint32_t>(cp))) out += s.substr(start, i - start);
    else if (cp <= 0xff) out += fmt::format("\\x{:02x}", cp);
    else if (cp <= 0xffff) out += fmt::format("\\u{:04x}", cp);
    else out += fmt::format("\\U{:08x}", cp);
  }
  out += quote;
}

void repr_bytes(std::string_view b, std::string& out) {
  const bool single = b.find('\'') != std::string_view::npos, dbl = b.find('"') != std::string_view::npos;
  const char quote = single && !dbl ? '"' : '\'';
  out += 'b';
  out += quote;
  for (char ch : b) {
    const auto c = static_cast<unsigned char>(ch);
    if (ch == quote || ch == '\\') out += {'\\', ch};
    else if (ch == '\t') out += "\\t";
    else if (ch == '\n') out += "\\n";
    else if (ch == '\r') out += "\\r";
    else if (c < 0x20 || c >= 0x7f) out += fmt::format("\\x{:02x}", c);
    else out += ch;
  }
  out += quote;
}

// float.__repr__: the shortest digits that read back the same, in fixed notation from 1e-4 to 1e16.
std::string repr_float(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x < 0 ? "-inf" : "inf";
  if (x == 0) return std::signbit(x) ? "-0.0" : "0.0";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific);
  std::string_view s(buf, static_cast<std::size_t>(r.ptr - buf));
  std::string out;
  if (s[0] == '-') {
    out += '-';
    s.remove_prefix(1);
  }
  const auto e = s.find('e');
  std::string digits;
  for (char c : s.substr(0, e))
    if (c != '.') digits += c;
  int exponent = 0;
  auto exp_text = s.substr(e + 1);
  if (!exp_text.empty() && exp_text[0] == '+') exp_text.remove_prefix(1);
  std::from_chars(exp_text.data(), exp_text.data() + exp_text.size(), exponent);
  const int point = exponent + 1;  // digits d1 d2 ... mean 0.d1d2... x 10^point
  const auto n = static_cast<int>(digits.size());
  if (point > -4 && point <= 16) {
    if (point <= 0) out += "0." + std::string(static_cast<std::size_t>(-point), '0') + digits;
    else if (point >= n) out += digits + std::string(static_cast<std::size_t>(point - n), '0') + ".0";
    else
      out += digits.substr(0, static_cast<std::size_t>(point)) + "." + digits.substr(static_cast<std::size_t>(point));
    return out;
  }
  out += digits[0];
  if (n > 1) out += "." + digits.substr(1);
  out += fmt::format("e{}{:02}", exponent < 0 ? '-' : '+', exponent < 0 ? -exponent : exponent);
  return out;
}

// complex.__repr__: repr() of each part without a ".0" (Python's 'r' format without ADD_DOT_0), the
// imaginary one signed; a real part of +0.0 is left out, with the parentheses.
std::string repr_complex(const PyComplex& c) {
  const auto part = [](double x) {
    std::string text = repr_float(x);
    if (text.ends_with(".0")) text.resize(text.size() - 2);
    return text;
  };
  std::string imag = part(c.imag);
  if (c.real == 0 && !std::signbit(c.real)) return imag + "j";
  if (imag[0] != '-') imag.insert(0, "+");
  return "(" + part(c.real) + imag + "j)";
}

std::string repr_timedelta(std::int64_t days, std::int64_t seconds, std::int64_t micros) {
  std::string args;
  if (days) args += fmt::format("days={}", days);
  if (seconds) args += fmt::format("{}seconds={}", args.empty() ? "" : ", ", seconds);
  if (micros) args += fmt::format("{}microseconds={}", args.empty() ? "" : ", ", micros);
  return fmt::format("datetime.timedelta({})", args.empty() ? "0" : args);
}

std::string str_timedelta(const PyTimedelta& td) {
  std::string out;
  if (td.days) out += fmt::format("{} day{}, ", td.days, td.days == 1 || td.days == -1 ? "" : "s");
  out += fmt::format("{}:{:02}:{:02}", td.seconds / 3600, td.seconds / 60 % 60, td.seconds % 60);
  if (td.microseconds) out += fmt::format(".{:06}", td.microseconds);
  return out;
}

std::string repr_timezone(int offset, const std::string& name) {
  if (offset == 0 && name.empty()) return "datetime.timezone.utc";
  PyTimedelta td;
  normalize_timedelta(0, offset, 0, td);
  std::string out = "datetime.timezone(" + repr_timedelta(td.days, td.seconds, td.microseconds);
  if (!name.empty()) {
    out += ", ";
    repr_str(name, out);
  }
  return out + ")";
}

// "+01:00", "-05:30", "+01:00:01" (datetime's isoformat).
std::string str_offset(const std::optional<int>& offset) {
  if (!offset) return "";
  const int a = *offset < 0 ? -*offset : *offset;
  std::string out = fmt::format("{}{:02}:{:02}", *offset < 0 ? '-' : '+', a / 3600, a / 60 % 60);
  if (a % 60) out += fmt::format(":{:02}", a % 60);
  return out;
}

// hour, minute[, second[, microsecond]] as the datetime classes' repr() lists them.
std::string repr_clock(int hour, int minute, int second, int micro) {
  if (micro) return fmt::format("{}, {}, {}, {}", hour, minute, second, micro);
  if (second) return fmt::format("{}, {}, {}", hour, minute, second);
  return fmt::format("{}, {}", hour, minute);
}

std::string str_clock(int hour, int minute, int second, int micro) {
  std::string out = fmt::format("{:02}:{:02}:{:02}", hour, minute, second);
  if (micro) out += fmt::format(".{:06}", micro);
  return out;
}

constexpr int kMaxReprDepth = 1000;

void repr_into(const PyValue& v, std::string& out, int depth);

void repr_items(const std::vector<PyValue>& items, std::string& out, int depth) {
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i) out += ", ";
    repr_into(items[i], out, depth);
  }
}

void repr_into(const PyValue& v, std::string& out, int depth) {
  if (depth > kMaxReprDepth) {
    out += "...";
    return;
  }
  std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, PyNone>) {
          out += "None";
        } else if constexpr (std::is_same_v<T, bool>) {
          out += x ? "True" : "False";
        } else if constexpr (std::is_same_v<T, std::int64_t>) {
          out += std::to_string(x);
        } else if constexpr (std::is_same_v<T, PyBigInt>) {
          out += x.decimal;
        } else if constexpr (std::is_same_v<T, double>) {
          out += repr_float(x);
        } else if constexpr (std::is_same_v<T, std::string>) {
          repr_str(x, out);
        } else if constexpr (std::is_same_v<T, PyBytes>) {
          if (x.bytearray) out += "bytearray(";
          repr_bytes(x.bytes, out);
          if (x.bytearray) out += ')';
        } else if constexpr (std::is_same_v<T, PyList>) {
          out += '[';
          repr_items(x.items, out, depth + 1);
          out += ']';
        } else if constexpr (std::is_same_v<T, PyTuple>) {
          out += '(';
          repr_items(x.items, out, depth + 1);
          out += x.items.size() == 1 ? ",)" : ")";
        } else if constexpr (std::is_same_v<T, PySet>) {
          if (x.items.empty()) {
            out += x.frozen ? "frozenset()" : "set()";
            return;
          }
          out += x.frozen ? "frozenset({" : "{";
          repr_items(x.items, out, depth + 1);
          out += x.frozen ? "})" : "}";
        } else if constexpr (std::is_same_v<T, PyDict>) {
          if (x.kind == PyDict::Kind::ordered_dict) {
            out += "OrderedDict(";
            if (!x.items.empty()) {
              out += '[';
              for (std::size_t i = 0; i < x.items.size(); ++i) {
                out += i ? ", (" : "(";
                repr_into(x.items[i].first, out, depth + 1);
                out += ", ";
                repr_into(x.items[i].second, out, depth + 1);
                out += ')';
              }
              out += ']';
            }
            out += ')';
            return;
          }
          out += '{';
          for (std::size_t i = 0; i < x.items.size(); ++i) {
            if (i) out += ", ";
            repr_into(x.items[i].first, out, depth + 1);
            out += ": ";
            repr_into(x.items[i].second, out, depth + 1);
          }
          out += '}';
        } else if constexpr (std::is_same_v<T, PyDateTime>) {
          out += fmt::format("datetime.datetime({}, {}, {}, {}", x.year, x.month, x.day,
                             repr_clock(x.hour, x.minute, x.second, x.microsecond));
          if (x.fold) out += fmt::format(", fold={}", x.fold);
          if (x.utc_offset_seconds) out += ", tzinfo=" + repr_timezone(*x.utc_offset_seconds, x.tz_name);
          out += ')';
        } else if constexpr (std::is_same_v<T, PyDate>) {
          out += fmt::format("datetime.date({}, {}, {})", x.year, x.month, x.day);
        } else if constexpr (std::is_same_v<T, PyTime>) {
          out += "datetime.time(" + repr_clock(x.hour, x.minute, x.second, x.microsecond);
          if (x.utc_offset_seconds) out += ", tzinfo=" + repr_timezone(*x.utc_offset_seconds, x.tz_name);
          if (x.fold) out += fmt::format(", fold={}", x.fold);
          out += ')';
        } else if constexpr (std::is_same_v<T, PyTimedelta>) {
          out += repr_timedelta(x.days, x.seconds, x.microseconds);
        } else if constexpr (std::is_same_v<T, PyDecimal>) {
          out += "Decimal(";
          repr_str(x.text, out);
          out += ')';
        } else if constexpr (std::is_same_v<T, PyComplex>) {
          out += repr_complex(x);
        } else if constexpr (std::is_same_v<T, PyPath>) {
          out += x.pure ? "PurePosixPath(" : "PosixPath(";
          repr_str(x.path, out);
          out += ')';
        } else if constexpr (std::is_same_v<T, PyElement>) {
          // Python's is "<Element 'tag' at 0x7f...>": the address of an object no copy shares.
          out += "<Element ";
          repr_str(x.tag, out);
          out += '>';
        } else if constexpr (std::is_same_v<T, PySecret>) {
          out += "Secret(value=<secret>)";
        }
      },
      v.v);
}

}  // namespace

std::string py_repr(const PyValue& value) {
  std::string out;
  repr_into(value, out, 0);
  return out;
}

std::string py_str(const PyValue& value) {
  if (const auto* s = value.get<std::string>()) return *s;
  if (const auto* d = value.get<PyDecimal>()) return d->text;
  if (const auto* p = value.get<PyPath>()) return p->path;
  if (value.get<PySecret>()) return "<secret>";
  if (const auto* td = value.get<PyTimedelta>()) return str_timedelta(*td);
  if (const auto* d = value.get<PyDate>()) return fmt::format("{:04}-{:02}-{:02}", d->year, d->month, d->day);
  if (const auto* t = value.get<PyTime>())
    return str_clock(t->hour, t->minute, t->second, t->microsecond) + str_offset(t->utc_offset_seconds);
  if (const auto* dt = value.get<PyDateTime>())
    return fmt::format("{:04}-{:02}-{:02} ", dt->year, dt->month, dt->day) +
           str_clock(dt->hour, dt->minute, dt->second, dt->microsecond) + str_offset(dt->utc_offset_seconds);
  return py_repr(value);
}

}  // namespace rjg::pickle
