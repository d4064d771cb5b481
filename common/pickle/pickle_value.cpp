#include "common/pickle/pickle_value.hpp"

#include "common/log.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <bit>
#include <charconv>
#include <cmath>
#include <limits>
#include <map>
#include <stdexcept>

namespace rjg::pickle {
namespace {

// ---------------------------------------------------------------------------------------------------
// Opcodes (CPython Lib/pickle.py): the ones the data-only check admits, and the ones the encoder writes.

enum Op : unsigned char {
  MARK = '(', STOP = '.', BUILD = 'b', NEWOBJ = 0x81, BININT = 'J', BININT1 = 'K', BININT2 = 'M', NONE = 'N', REDUCE = 'R', APPEND = 'a',
  EMPTY_DICT = '}', APPENDS = 'e', GET = 'g', BINGET = 'h', LONG_BINGET = 'j', EMPTY_LIST = ']', PUT = 'p',
  BINPUT = 'q', LONG_BINPUT = 'r', SETITEM = 's', TUPLE = 't', EMPTY_TUPLE = ')', SETITEMS = 'u', BINFLOAT = 'G',
  BINUNICODE = 'X', BINBYTES = 'B', SHORT_BINBYTES = 'C',
  PROTO = 0x80, TUPLE1 = 0x85, TUPLE2 = 0x86, TUPLE3 = 0x87, NEWTRUE = 0x88, NEWFALSE = 0x89, LONG1 = 0x8a,
  LONG4 = 0x8b, SHORT_BINUNICODE = 0x8c, BINUNICODE8 = 0x8d, BINBYTES8 = 0x8e, EMPTY_SET = 0x8f, ADDITEMS = 0x90,
  FROZENSET = 0x91, STACK_GLOBAL = 0x93, MEMOIZE = 0x94, FRAME = 0x95, BYTEARRAY8 = 0x96,
};

constexpr std::size_t kBatchSize = 1000;              // CPython's pickler: items per APPENDS, SETITEMS, ADDITEMS
constexpr std::size_t kFrameTarget = 64 * 1024;       // CPython's _FRAME_SIZE_TARGET
constexpr std::size_t kFrameMin = 4;                  // smaller frames get no FRAME opcode
constexpr std::int64_t kMaxTimedeltaDays = 999999999;  // datetime.timedelta.max.days
constexpr std::int64_t kMicrosPerDay = 86400LL * 1000000;

std::uint64_t read_le(std::string_view b) {
  std::uint64_t v = 0;
  for (std::size_t i = b.size(); i-- > 0;) v = (v << 8) | static_cast<unsigned char>(b[i]);
  return v;
}

void put_le(std::string& out, std::uint64_t v, int width) {
  for (int i = 0; i < width; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
}


// ---------------------------------------------------------------------------------------------------
// Integers beyond 64 bits: magnitudes in base 2^32, least significant word first, no high zero words.

using Words = std::vector<std::uint32_t>;

void trim(Words& w) {
  while (!w.empty() && w.back() == 0) w.pop_back();
}

// LONG1 and LONG4 carry little-endian two's complement.
Words words_from_twos_complement(std::string_view le, bool& negative) {
  negative = !le.empty() && (static_cast<unsigned char>(le.back()) & 0x80);
  Words w((le.size() + 3) / 4, 0);
  unsigned carry = 1;
  for (std::size_t i = 0; i < le.size(); ++i) {
    unsigned b = static_cast<unsigned char>(le[i]);
    if (negative) {
      b = (~b & 0xffu) + carry;
      carry = b >> 8;
      b &= 0xffu;
    }
    w[i / 4] |= static_cast<std::uint32_t>(b) << (8 * (i % 4));
  }
  trim(w);
  return w;
}

// The shortest two's complement that holds the value, as CPython's encode_long writes it.
std::string twos_complement(const Words& w, bool negative) {
  std::string b;
  for (auto word : w) put_le(b, word, 4);
  while (!b.empty() && b.back() == 0) b.pop_back();
  if (!negative) {
    if (!b.empty() && (static_cast<unsigned char>(b.back()) & 0x80)) b += '\0';
    return b;
  }
  unsigned carry = 1;
  for (auto& c : b) {
    unsigned v = (~static_cast<unsigned>(static_cast<unsigned char>(c)) & 0xffu) + carry;
    carry = v >> 8;
    c = static_cast<char>(v & 0xffu);
  }
  if (b.empty() || !(static_cast<unsigned char>(b.back()) & 0x80)) b += '\xff';
  return b;
}

Words words_from_u64(std::uint64_t v) {
  Words w{static_cast<std::uint32_t>(v), static_cast<std::uint32_t>(v >> 32)};
  trim(w);
  return w;
}

std::size_t bit_length(const Words& w) {
  if (w.empty()) return 0;
  return 32 * (w.size() - 1) + static_cast<std::size_t>(std::bit_width(w.back()));
}

bool bit_at(const Words& w, std::size_t i) { return (w[i / 32] >> (i % 32)) & 1u; }

// Whether sign and magnitude fit std::int64_t, and the value when they do.
bool fits_int64(const Words& w, bool negative, std::int64_t& out) {
  if (bit_length(w) > 64) return false;
  std::uint64_t m = 0;
  for (std::size_t i = w.size(); i-- > 0;) m = (m << 32) | w[i];
  if (!negative) {
    if (m > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) return false;
    out = static_cast<std::int64_t>(m);
    return true;
  }
  if (m > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) + 1) return false;
  out = static_cast<std::int64_t>(0 - m);
  return true;
}

// The double exactly equal to the magnitude, when there is one.
std::optional<double> words_as_double(const Words& w) {
  std::size_t bits = bit_length(w);
  if (bits == 0) return 0.0;
  std::size_t low = 0;
  while (!bit_at(w, low)) ++low;
  if (bits > 1024 || bits - low > 53) return std::nullopt;
  std::uint64_t odd = 0;
  for (std::size_t i = bits; i-- > low;) odd = (odd << 1) | (bit_at(w, i) ? 1u : 0u);
  return std::ldexp(static_cast<double>(odd), static_cast<int>(low));
}

// Divides in place; returns the remainder.
std::uint32_t divide(Words& w, std::uint32_t d) {
  std::uint64_t r = 0;
  for (std::size_t i = w.size(); i-- > 0;) {
    std::uint64_t cur = (r << 32) | w[i];
    w[i] = static_cast<std::uint32_t>(cur / d);
    r = cur % d;
  }
  trim(w);
  return static_cast<std::uint32_t>(r);
}

// Quadratic in the length, like CPython's own int-to-str: callers bound what they convert.
std::string words_to_decimal(const Words& w) {
  if (w.empty()) return "0";
  std::vector<std::uint32_t> limbs;  // base 10^9, least significant first
  for (std::size_t i = w.size(); i-- > 0;) {
    std::uint64_t carry = w[i];
    for (auto& limb : limbs) {
      std::uint64_t cur = (static_cast<std::uint64_t>(limb) << 32) + carry;
      limb = static_cast<std::uint32_t>(cur % 1000000000u);
      carry = cur / 1000000000u;
    }
    while (carry) {
      limbs.push_back(static_cast<std::uint32_t>(carry % 1000000000u));
      carry /= 1000000000u;
    }
  }
  std::string out = std::to_string(limbs.back());
  for (std::size_t i = limbs.size() - 1; i-- > 0;) out += fmt::format("{:09}", limbs[i]);
  return out;
}

// digits: ASCII digits only.
Words words_from_decimal(std::string_view digits) {
  static constexpr std::array<std::uint32_t, 10> kPow10{1,      10,      100,      1000,      10000,
                                                        100000, 1000000, 10000000, 100000000, 1000000000};
  Words w;
  std::size_t i = 0;
  while (i < digits.size()) {
    std::size_t n = i == 0 && digits.size() % 9 ? digits.size() % 9 : 9;
    std::uint32_t chunk = 0;
    for (char c : digits.substr(i, n)) chunk = chunk * 10 + static_cast<std::uint32_t>(c - '0');
    std::uint64_t carry = chunk;
    for (auto& word : w) {
      std::uint64_t cur = static_cast<std::uint64_t>(word) * kPow10[n] + carry;
      word = static_cast<std::uint32_t>(cur);
      carry = cur >> 32;
    }
    if (carry) w.push_back(static_cast<std::uint32_t>(carry));
    i += n;
  }
  trim(w);
  return w;
}

bool all_digits(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// "-123..." as sign and magnitude; false when it is not an integer literal.
bool parse_big_decimal(std::string_view text, bool& negative, Words& w) {
  negative = !text.empty() && text[0] == '-';
  if (negative) text.remove_prefix(1);
  if (text.empty() || !all_digits(text)) return false;
  w = words_from_decimal(text);
  if (w.empty()) negative = false;
  return true;
}

// ---------------------------------------------------------------------------------------------------
// decimal.Decimal's text: what its constructor accepts (libmpdec's syntax, CPython's exactness), and
// what str() prints.

struct DecimalNumber {
  enum class Kind { finite, infinity, nan, snan };
  bool negative = false;
  Kind kind = Kind::finite;
  std::string digits;  // finite: the coefficient, no leading zeros ("0" for zero); NaN: the payload, maybe empty
  std::int64_t exponent = 0;
};

// libmpdec's MAX_EMAX and MIN_ETINY on 64-bit platforms; CPython refuses what would round.
constexpr std::int64_t kDecimalEmax = 999999999999999999;
constexpr std::int64_t kDecimalEtiny = -1999999999999999997;

bool is_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r') || (c >= '\x1c' && c <= '\x1f'); }

std::string lowercase(std::string_view s) {
  std::string out(s);
  for (auto& c : out)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return out;
}

std::string strip_leading_zeros(std::string_view digits) {
  auto nz = digits.find_first_not_of('0');
  return nz == std::string_view::npos ? std::string() : std::string(digits.substr(nz));
}

// CPython strips white space and drops underscores anywhere; the digits that remain must be ASCII here
// (CPython also reads other scripts' digits; no pickle of a Decimal carries them).
std::optional<DecimalNumber> parse_decimal(std::string_view text) {
  while (!text.empty() && is_space(text.front())) text.remove_prefix(1);
  while (!text.empty() && is_space(text.back())) text.remove_suffix(1);
  std::string s;
  for (char c : text) {
    if (c == '_') continue;
    if (static_cast<unsigned char>(c) >= 0x80) return std::nullopt;
    s += c;
  }
  DecimalNumber d;
  std::string_view t = s;
  if (!t.empty() && (t[0] == '+' || t[0] == '-')) {
    d.negative = t[0] == '-';
    t.remove_prefix(1);
  }
  const std::string lower = lowercase(t);
  if (lower == "inf" || lower == "infinity") {
    d.kind = DecimalNumber::Kind::infinity;
    return d;
  }
  for (auto [prefix, kind] : {std::pair{std::string_view("nan"), DecimalNumber::Kind::nan},
                              std::pair{std::string_view("snan"), DecimalNumber::Kind::snan}}) {
    if (std::string_view(lower).substr(0, prefix.size()) != prefix) continue;
    auto payload = std::string_view(lower).substr(prefix.size());
    if (!all_digits(payload)) return std::nullopt;
    d.kind = kind;
    d.digits = strip_leading_zeros(payload);
    return d;
  }
  std::string coefficient;
  bool point = false;
  std::int64_t fraction = 0;
  std::size_t i = 0;
  for (; i < t.size(); ++i) {
    if (t[i] >= '0' && t[i] <= '9') {
      coefficient += t[i];
      if (point) ++fraction;
    } else if (t[i] == '.' && !point) {
      point = true;
    } else {
      break;
    }
  }
  if (coefficient.empty()) return std::nullopt;
  __int128 exponent = 0;
  if (i < t.size()) {
    if (t[i] != 'e' && t[i] != 'E') return std::nullopt;
    ++i;
    bool negative_exponent = false;
    if (i < t.size() && (t[i] == '+' || t[i] == '-')) negative_exponent = t[i++] == '-';
    if (i == t.size() || !all_digits(t.substr(i))) return std::nullopt;
    for (; i < t.size(); ++i) exponent = std::min<__int128>(exponent * 10 + (t[i] - '0'), __int128{1} << 70);
    if (negative_exponent) exponent = -exponent;
  }
  exponent -= fraction;
  d.digits = strip_leading_zeros(coefficient);
  if (d.digits.empty()) d.digits = "0";
  const __int128 adjusted = exponent + static_cast<__int128>(d.digits.size()) - 1;
  if (adjusted > kDecimalEmax || exponent < kDecimalEtiny) return std::nullopt;
  d.exponent = static_cast<std::int64_t>(exponent);
  return d;
}

// Decimal.__str__ (the specification's to-scientific-string).
std::string decimal_text(const DecimalNumber& d) {
  std::string out = d.negative ? "-" : "";
  switch (d.kind) {
    case DecimalNumber::Kind::infinity: return out + "Infinity";
    case DecimalNumber::Kind::nan: return out + "NaN" + d.digits;
    case DecimalNumber::Kind::snan: return out + "sNaN" + d.digits;
    case DecimalNumber::Kind::finite: break;
  }
  const auto n = static_cast<std::int64_t>(d.digits.size());
  const std::int64_t adjusted = d.exponent + n - 1;
  if (d.exponent <= 0 && adjusted >= -6) {
    const std::int64_t k = -d.exponent;  // digits after the point
    if (k == 0) return out + d.digits;
    if (n <= k) return out + "0." + std::string(static_cast<std::size_t>(k - n), '0') + d.digits;
    const auto point = static_cast<std::size_t>(n - k);
    return out + d.digits.substr(0, point) + "." + d.digits.substr(point);
  }
  out += d.digits[0];
  if (n > 1) out += "." + d.digits.substr(1);
  out += fmt::format("E{}{}", adjusted >= 0 ? "+" : "-", adjusted >= 0 ? adjusted : -adjusted);
  return out;
}

// ---------------------------------------------------------------------------------------------------
// Dict keys and set elements: Python's equality as a canonical string. Equal values (1, 1.0, True,
// Decimal('1.0')) get the same string; a NaN is only equal to itself (the same object).

void put_int_key(std::string& out, std::int64_t v) { out += fmt::format("i{}", v); }

void put_double_key(std::string& out, double x, std::uint32_t identity) {
  if (std::isnan(x)) out += fmt::format("n{}", identity);
  else if (std::isinf(x)) out += x < 0 ? "F-" : "F+";
  else if (x == 0) out += "i0";
  else if (x == std::trunc(x) && x >= -0x1p63 && x < 0x1p63) put_int_key(out, static_cast<std::int64_t>(x));
  else out += fmt::format("f{:016x}", std::bit_cast<std::uint64_t>(x));
}

// An exact value beyond int64 and the doubles: sign, digits without trailing zeros, exponent.
void put_exact_key(std::string& out, bool negative, std::string_view digits, std::int64_t exponent) {
  auto end = digits.find_last_not_of('0');
  std::int64_t zeros = static_cast<std::int64_t>(digits.size() - end - 1);
  out += fmt::format("d{}{}e{}", negative ? '-' : '+', digits.substr(0, end + 1), exponent + zeros);
}

void put_bigint_key(std::string& out, const Words& w, bool negative, std::string_view decimal_digits) {
  if (auto x = words_as_double(w)) {
    put_double_key(out, negative ? -*x : *x, 0);
    return;
  }
  put_exact_key(out, negative, decimal_digits, 0);
}

// The double exactly equal to digits × 10^exponent (digits without leading or trailing zeros), if any.
// Costs at most a few thousand word operations: longer texts cannot be doubles.
std::optional<double> decimal_as_double(std::string_view digits, std::int64_t exponent) {
  if (exponent >= 0) {
    if (static_cast<std::int64_t>(digits.size()) + exponent > 309) return std::nullopt;
    std::string all(digits);
    all.append(static_cast<std::size_t>(exponent), '0');
    return words_as_double(words_from_decimal(all));
  }
  // digits × 10^-k is q × 2^-k with q = digits / 5^k, odd, below 2^53.
  const std::int64_t k = -exponent;
  if (k > 1074 || digits.back() != '5') return std::nullopt;
  if (static_cast<std::int64_t>(digits.size()) > 18 + (k * 7 + 9) / 10) return std::nullopt;
  Words w = words_from_decimal(digits);
  for (std::int64_t left = k; left > 0; left -= 13) {
    std::uint32_t d = 1;
    for (std::int64_t j = 0; j < std::min<std::int64_t>(left, 13); ++j) d *= 5;
    if (divide(w, d) != 0) return std::nullopt;
  }
  if (bit_length(w) > 53) return std::nullopt;
  std::uint64_t q = 0;
  for (std::size_t i = w.size(); i-- > 0;) q = (q << 32) | w[i];
  return std::ldexp(static_cast<double>(q), static_cast<int>(-k));
}

// False for a signaling NaN, which Python refuses to hash.
bool put_decimal_key(std::string& out, const DecimalNumber& d, std::uint32_t identity) {
  switch (d.kind) {
    case DecimalNumber::Kind::snan: return false;
    case DecimalNumber::Kind::nan: out += fmt::format("n{}", identity); return true;
    case DecimalNumber::Kind::infinity: out += d.negative ? "F-" : "F+"; return true;
    case DecimalNumber::Kind::finite: break;
  }
  if (d.digits == "0") {
    out += "i0";
    return true;
  }
  auto end = d.digits.find_last_not_of('0');
  std::string_view digits = std::string_view(d.digits).substr(0, end + 1);
  std::int64_t exponent = d.exponent + static_cast<std::int64_t>(d.digits.size() - end - 1);
  if (exponent >= 0 && static_cast<std::int64_t>(digits.size()) + exponent <= 19) {
    unsigned __int128 m = 0;
    for (char c : digits) m = m * 10 + static_cast<unsigned>(c - '0');
    for (std::int64_t j = 0; j < exponent; ++j) m *= 10;
    const unsigned __int128 limit =
        static_cast<unsigned __int128>(std::numeric_limits<std::int64_t>::max()) + (d.negative ? 1 : 0);
    if (m <= limit) {
      out += fmt::format("i{}{}", d.negative ? "-" : "", static_cast<std::uint64_t>(m));
      return true;
    }
  }
  if (auto x = decimal_as_double(digits, exponent)) {
    put_double_key(out, d.negative ? -*x : *x, 0);
    return true;
  }
  put_exact_key(out, d.negative, digits, exponent);
  return true;
}

// ---------------------------------------------------------------------------------------------------
// datetime: the states the classes' __reduce__ produce, and the checks their constructors make.

bool is_leap(int y) { return y % 4 == 0 && (y % 100 != 0 || y % 400 == 0); }

int days_in_month(int y, int m) {
  static constexpr std::array<int, 13> kDays{0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  return m == 2 && is_leap(y) ? 29 : kDays[static_cast<std::size_t>(m)];
}

bool valid_date(int y, int m, int d) {
  return y >= 1 && y <= 9999 && m >= 1 && m <= 12 && d >= 1 && d <= days_in_month(y, m);
}
bool valid_time(int h, int mi, int s, int us, int fold) {
  return h >= 0 && h < 24 && mi >= 0 && mi < 60 && s >= 0 && s < 60 && us >= 0 && us < 1000000 &&
         (fold == 0 || fold == 1);
}
bool valid_offset(int seconds) { return seconds > -86400 && seconds < 86400; }

// Days since 0001-01-01 (the proleptic Gregorian ordinal, minus one).
std::int64_t days_before(int y, int m, int d) {
  std::int64_t y1 = y - 1;
  std::int64_t days = y1 * 365 + y1 / 4 - y1 / 100 + y1 / 400;
  for (int k = 1; k < m; ++k) days += days_in_month(y, k);
  return days + d - 1;
}

std::string date_state(int y, int m, int d) {
  return {static_cast<char>(y >> 8), static_cast<char>(y & 0xff), static_cast<char>(m), static_cast<char>(d)};
}
std::string time_state(int h, int mi, int s, int us) {
  return {static_cast<char>(h), static_cast<char>(mi), static_cast<char>(s), static_cast<char>(us >> 16),
          static_cast<char>((us >> 8) & 0xff), static_cast<char>(us & 0xff)};
}

// timedelta(days, seconds, microseconds) as Python normalizes it; false beyond timedelta.max. Arguments
// within +-2^100, days within +-2^64 (larger ones only cancel out in pickles made to).
bool normalize_timedelta(__int128 days, __int128 seconds, __int128 micros, PyTimedelta& out) {
  if (days >= (__int128{1} << 64) || days <= -(__int128{1} << 64)) return false;
  __int128 total = days * kMicrosPerDay + seconds * 1000000 + micros;
  __int128 d = total / kMicrosPerDay;
  __int128 rest = total % kMicrosPerDay;
  if (rest < 0) rest += kMicrosPerDay, --d;
  if (d > kMaxTimedeltaDays || d < -kMaxTimedeltaDays) return false;
  out.days = static_cast<int>(d);
  out.seconds = static_cast<int>(rest / 1000000);
  out.microseconds = static_cast<int>(rest % 1000000);
  return true;
}

// ---------------------------------------------------------------------------------------------------
// pathlib: what str() of PosixPath(*segments) is, in CPython 3.8 to 3.13 (all parse only text).

// posixpath.join of the segments (an absolute one starts over), then the root ("/", or exactly "//")
// and the parts that are neither empty nor ".", as pathlib's parser keeps them; "." when none.
std::string posix_path_text(const std::vector<std::string_view>& segments) {
  std::string joined;
  for (const auto segment : segments) {
    if (segment.starts_with('/')) joined = segment;
    else if (joined.empty() || joined.ends_with('/')) joined += segment;
    else joined.append("/").append(segment);
  }
  std::string out;
  std::string_view rest = joined;
  if (rest.starts_with("//") && !rest.starts_with("///")) out = "//";
  else if (rest.starts_with('/')) out = "/";
  bool first = true;
  while (!rest.empty()) {
    const auto slash = rest.find('/');
    const auto part = rest.substr(0, slash);
    rest = slash == std::string_view::npos ? std::string_view() : rest.substr(slash + 1);
    if (part.empty() || part == ".") continue;
    if (!first) out += '/';
    out += part;
    first = false;
  }
  return out.empty() ? "." : out;
}

// The parts of a normalized path, as CPython 3.8 to 3.12 pickle them (self.parts): the root first.
std::vector<std::string> posix_path_parts(const std::string& path) {
  std::vector<std::string> parts;
  const std::string text = posix_path_text({path});
  std::string_view rest = text;
  if (rest == ".") return parts;
  if (rest.starts_with("//")) parts.emplace_back("//"), rest.remove_prefix(2);
  else if (rest.starts_with('/')) parts.emplace_back("/"), rest.remove_prefix(1);
  while (!rest.empty()) {
    const auto slash = rest.find('/');
    parts.emplace_back(rest.substr(0, slash));
    rest = slash == std::string_view::npos ? std::string_view() : rest.substr(slash + 1);
  }
  return parts;
}

// ---------------------------------------------------------------------------------------------------
// The decoder: the opcodes check_pickle_data_only() admits, run on plain values.

enum class Tag : std::uint8_t {
  none, boolean, integer, bigint, floating, str, bytes, bytearray,
  tuple, frozenset, list, dict, set,  // in seqs_
  scalar,                             // a finished datetime, date, time, timedelta, Decimal, complex or path in scalars_
  timezone, cls,
  element, secret,  // in objects_
};

enum class Cls : std::uint8_t {
  dot_dict, ordered_dict, datetime, date, time, timedelta, timezone, decimal, bytearray, complex, posix_path,
  pure_posix_path, element, secret,
};

struct AllowedClass {
  std::string_view module;
  std::string_view name;
  Cls cls;
};
// The checker's allowlist, with what each class makes (the review of each is next to the checker's).
constexpr std::array<AllowedClass, 16> kClasses{{
    {"robot.utils.dotdict", "DotDict", Cls::dot_dict},
    {"collections", "OrderedDict", Cls::ordered_dict},
    {"datetime", "datetime", Cls::datetime},
    {"datetime", "date", Cls::date},
    {"datetime", "time", Cls::time},
    {"datetime", "timedelta", Cls::timedelta},
    {"datetime", "timezone", Cls::timezone},
    {"decimal", "Decimal", Cls::decimal},
    {"builtins", "bytearray", Cls::bytearray},
    {"builtins", "complex", Cls::complex},
    {"pathlib", "PosixPath", Cls::posix_path},
    {"pathlib", "PurePosixPath", Cls::pure_posix_path},
    {"pathlib._local", "PosixPath", Cls::posix_path},
    {"pathlib._local", "PurePosixPath", Cls::pure_posix_path},
    {"xml.etree.ElementTree", "Element", Cls::element},
    {"robot.utils.secret", "Secret", Cls::secret},
}};

// One value on the stack or in the memo. Containers live in seqs_ and every reference shares them, as
// Python objects do; the tree is only built at STOP, so it holds each container's final contents.
struct Value {
  Tag tag = Tag::none;
  std::uint32_t at = 0;  // offset of the opcode that made it: its identity (a memo GET shares it)
  std::int64_t i = 0;    // boolean, integer: the value; seq tags: index in seqs_; scalar, bigint: in
                         // scalars_; timezone: in zones_; cls: Cls; element, secret: in objects_
  double f = 0;
  std::string_view text;  // str, bytes, bytearray; bigint: its LONG bytes
};

struct Seq {
  std::vector<Value> items;                  // dict: key, value, key, value, ...
  std::map<std::string, std::size_t> index;  // dict, set: canonical key -> position in items
  PyDict::Kind kind = PyDict::Kind::dict;
};

struct Zone {
  int offset_seconds = 0;
  std::string_view name;
};

// Decimal conversions of long integers cost the square of their length; this bounds their sum in one
// pickle (in 32-bit words squared: 64 integers of the checker's largest size, 4096 bytes).
constexpr std::uint64_t kBigIntWork = std::uint64_t{1} << 26;

class Unpickler {
 public:
  Unpickler(std::string_view in, const PickleLimits& limits) : in_(in), limits_(limits) {}

  std::variant<PyValue, std::string> run() {
    std::size_t offset = 0;
    if (auto why = check_pickle_data_only(in_, &offset, limits_)) return fmt::format("byte {}: {}", offset, *why);
    if (!execute()) return fmt::format("byte {}: {}", error_at_, error_);
    on_path_.assign(seqs_.size(), false);
    PyValue out;
    if (!materialize(stack_.back(), 0, out)) return fmt::format("byte {}: {}", error_at_, error_);
    return out;
  }

 private:
  bool fail(std::string reason) { return fail_at(op_start_, std::move(reason)); }
  bool fail_at(std::size_t at, std::string reason) {
    error_at_ = at;
    error_ = std::move(reason);
    return false;
  }
  // The checker admitted the stream, so these only guard against the two disagreeing.
  bool take(std::size_t n, std::string_view& out) {
    if (n > in_.size() - pos_) return fail("internal error: truncated opcode after the data-only check");
    out = in_.substr(pos_, n);
    pos_ += n;
    return true;
  }
  bool take_le(std::size_t width, std::uint64_t& v) {
    std::string_view b;
    if (!take(width, b)) return false;
    v = read_le(b);
    return true;
  }
  bool take_counted(std::size_t width, std::string_view& out) {
    std::uint64_t n;
    return take_le(width, n) && take(static_cast<std::size_t>(n), out);
  }
  bool take_decimal_line(std::uint64_t& v) {
    auto nl = in_.find('\n', pos_);
    if (nl == std::string_view::npos) return fail("internal error: no end of line after the data-only check");
    v = 0;
    for (char c : in_.substr(pos_, nl - pos_)) v = v * 10 + static_cast<unsigned>(c - '0');
    pos_ = nl + 1;
    return true;
  }
  bool pop(Value& v) {
    if (stack_.size() <= (marks_.empty() ? 0 : marks_.back()))
      return fail("internal error: stack underflow after the data-only check");
    v = stack_.back();
    stack_.pop_back();
    return true;
  }
  bool pop_mark(std::size_t& begin) {
    if (marks_.empty()) return fail("internal error: no MARK after the data-only check");
    begin = marks_.back();
    marks_.pop_back();
    return true;
  }
  Value& top() { return stack_.back(); }
  bool top_is(Tag tag) {
    if (stack_.empty() || stack_.back().tag != tag)
      return fail("internal error: unexpected type after the data-only check");
    return true;
  }

  Value make(Tag tag) {
    Value v;
    v.tag = tag;
    v.at = static_cast<std::uint32_t>(op_start_);
    return v;
  }
  Value make_seq(Tag tag, std::vector<Value> items = {}, PyDict::Kind kind = PyDict::Kind::dict) {
    Value v = make(tag);
    v.i = static_cast<std::int64_t>(seqs_.size());
    seqs_.push_back(Seq{std::move(items), {}, kind});
    return v;
  }
  Value make_scalar(PyValue value) {
    Value v = make(Tag::scalar);
    v.i = static_cast<std::int64_t>(scalars_.size());
    scalars_.push_back(std::move(value));
    return v;
  }

  bool push_long(std::string_view bytes) {
    bool negative;
    Words w = words_from_twos_complement(bytes, negative);
    Value v = make(Tag::integer);
    if (fits_int64(w, negative, v.i)) {
      stack_.push_back(v);
      return true;
    }
    bigint_work_ += static_cast<std::uint64_t>(w.size()) * w.size();
    if (bigint_work_ > kBigIntWork)
      return fail("the integers of this pickle are too long in total to convert to decimal");
    v = make_scalar(PyBigInt{(negative ? "-" : "") + words_to_decimal(w)});
    v.tag = Tag::bigint;
    v.text = bytes;
    stack_.push_back(v);
    return true;
  }

  // Appends the canonical key of a hashable value (see put_double_key).
  bool key_of(const Value& v, std::string& out) {
    switch (v.tag) {
      case Tag::none: out += 'N'; return true;
      case Tag::boolean:
      case Tag::integer: put_int_key(out, v.i); return true;
      case Tag::floating: put_double_key(out, v.f, v.at); return true;
      case Tag::bigint: {
        bool negative;
        Words w = words_from_twos_complement(v.text, negative);
        const std::string& decimal = std::get<PyBigInt>(scalars_[static_cast<std::size_t>(v.i)].v).decimal;
        put_bigint_key(out, w, negative, std::string_view(decimal).substr(negative ? 1 : 0));
        return true;
      }
      case Tag::str:
      case Tag::bytes:
        out += fmt::format("{}{}:", v.tag == Tag::str ? 's' : 'b', v.text.size());
        out += v.text;
        return true;
      case Tag::tuple:
      case Tag::frozenset: {
        std::vector<std::string> keys;
        for (const Value& item : seqs_[static_cast<std::size_t>(v.i)].items) {
          keys.emplace_back();
          if (!key_of(item, keys.back())) return false;
        }
        if (v.tag == Tag::frozenset) std::sort(keys.begin(), keys.end());
        out += fmt::format("{}{}(", v.tag == Tag::tuple ? 't' : 'z', keys.size());
        for (const auto& k : keys) out += fmt::format("{}:{}", k.size(), k);
        out += ')';
        return true;
      }
      case Tag::scalar: return scalar_key(v, out);
      case Tag::timezone:
        return fail_at(v.at, "a datetime.timezone on its own is not supported (only inside a datetime or time)");
      default:
        return fail_at(v.at, "internal error: unhashable value after the data-only check");
    }
  }

  bool scalar_key(const Value& v, std::string& out) {
    const PyValue& s = scalars_[static_cast<std::size_t>(v.i)];
    if (const auto* dt = s.get<PyDateTime>()) {
      if (!dt->utc_offset_seconds) {
        out += fmt::format("T{},{},{},{},{},{},{}", dt->year, dt->month, dt->day, dt->hour, dt->minute, dt->second,
                           dt->microsecond);
      } else {
        std::int64_t seconds = days_before(dt->year, dt->month, dt->day) * 86400 + dt->hour * 3600 +
                               dt->minute * 60 + dt->second - *dt->utc_offset_seconds;
        out += fmt::format("U{}", seconds * 1000000 + dt->microsecond);
      }
    } else if (const auto* d = s.get<PyDate>()) {
      out += fmt::format("D{},{},{}", d->year, d->month, d->day);
    } else if (const auto* t = s.get<PyTime>()) {
      std::int64_t us = (t->hour * 3600 + t->minute * 60 + t->second) * std::int64_t{1000000} + t->microsecond;
      if (!t->utc_offset_seconds) out += fmt::format("H{}", us);
      else out += fmt::format("h{}", us - *t->utc_offset_seconds * std::int64_t{1000000});
    } else if (const auto* td = s.get<PyTimedelta>()) {
      out += fmt::format("R{},{},{}", td->days, td->seconds, td->microseconds);
    } else if (const auto* c = s.get<PyComplex>()) {
      // complex(x, 0) == x (and hashes alike); otherwise equal only to the same pair.
      if (c->imag == 0) {
        put_double_key(out, c->real, v.at);
      } else {
        out += 'j';
        put_double_key(out, c->real, v.at);
        out += ',';
        put_double_key(out, c->imag, v.at);
      }
    } else if (const auto* path = s.get<PyPath>()) {
      // PosixPath('a') == PurePosixPath('a'): the same text is the same key.
      out += fmt::format("P{}:", path->path.size());
      out += path->path;
    } else if (const auto* dec = s.get<PyDecimal>()) {
      auto parsed = parse_decimal(dec->text);
      if (!parsed || !put_decimal_key(out, *parsed, v.at))
        return fail_at(v.at, fmt::format("Decimal('{}') cannot be a dict key or set element (Python cannot hash a "
                                         "signaling NaN)",
                                         dec->text));
    } else {
      return fail_at(v.at, "internal error: unhashable value after the data-only check");
    }
    return true;
  }

  // d[key] = value: a key already there keeps its place and its first object, and takes the new value.
  bool set_item(Seq& dict, const Value& key, const Value& value) {
    std::string k;
    if (!key_of(key, k)) return false;
    auto [it, fresh] = dict.index.try_emplace(std::move(k), dict.items.size());
    if (fresh) {
      dict.items.push_back(key);
      dict.items.push_back(value);
    } else {
      dict.items[it->second + 1] = value;
    }
    return true;
  }
  bool add_item(Seq& set, const Value& item) {
    std::string k;
    if (!key_of(item, k)) return false;
    if (set.index.try_emplace(std::move(k), set.items.size()).second) set.items.push_back(item);
    return true;
  }

  bool stack_global() {
    Value name, module;
    if (!pop(name) || !pop(module)) return false;
    auto it = std::find_if(kClasses.begin(), kClasses.end(),
                           [&](const AllowedClass& c) { return c.module == module.text && c.name == name.text; });
    if (it == kClasses.end()) return fail("internal error: class not allowed after the data-only check");
    Value c = make(Tag::cls);
    c.i = static_cast<std::int64_t>(it->cls);
    stack_.push_back(c);
    return true;
  }

  // An int argument (timedelta's) within +-2^100.
  bool int_arg(const Value& v, __int128& out) {
    if (v.tag == Tag::integer) {
      out = v.i;
      return true;
    }
    bool negative;
    Words w = words_from_twos_complement(v.text, negative);
    if (v.tag != Tag::bigint || bit_length(w) > 100)
      return fail("timedelta argument out of range (Python raises OverflowError)");
    unsigned __int128 m = 0;
    for (std::size_t i = w.size(); i-- > 0;) m = (m << 32) | w[i];
    out = negative ? -static_cast<__int128>(m) : static_cast<__int128>(m);
    return true;
  }

  bool zone_arg(const std::vector<Value>& args, std::size_t i, std::optional<int>& offset, std::string& name) {
    if (args.size() <= i) return true;
    if (args[i].tag != Tag::timezone) return fail("internal error: tzinfo is not a timezone after the data-only check");
    const Zone& z = zones_[static_cast<std::size_t>(args[i].i)];
    offset = z.offset_seconds;
    name = std::string(z.name);
    return true;
  }

  bool reduce() {
    Value args, callable;
    if (!pop(args) || !pop(callable)) return false;
    if (callable.tag != Tag::cls || args.tag != Tag::tuple)
      return fail("internal error: REDUCE shape after the data-only check");
    const std::vector<Value>& a = seqs_[static_cast<std::size_t>(args.i)].items;
    const auto state = [&](std::size_t size) -> std::string_view {
      return !a.empty() && a[0].tag == Tag::bytes && a[0].text.size() == size ? a[0].text : std::string_view();
    };
    const auto byte = [](std::string_view s, std::size_t i) {
      return static_cast<int>(static_cast<unsigned char>(s[i]));
    };
    switch (static_cast<Cls>(callable.i)) {
      case Cls::dot_dict:
      case Cls::ordered_dict:
        stack_.push_back(make_seq(
            Tag::dict, {},
            static_cast<Cls>(callable.i) == Cls::dot_dict ? PyDict::Kind::dot_dict : PyDict::Kind::ordered_dict));
        return true;
      case Cls::bytearray: {
        Value v = make(Tag::bytearray);
        if (!a.empty()) v.text = a[0].text;
        stack_.push_back(v);
        return true;
      }
      case Cls::decimal: {
        auto d = a.size() == 1 && a[0].tag == Tag::str ? parse_decimal(a[0].text) : std::nullopt;
        if (!d)
          return fail(fmt::format("Decimal('{}') is not a number (Python raises InvalidOperation)",
                                  log::printable(a.empty() ? std::string_view() : a[0].text, 80)));
        stack_.push_back(make_scalar(PyDecimal{decimal_text(*d)}));
        return true;
      }
      case Cls::datetime: {
        std::string_view s = state(10);
        if (s.empty()) return fail("internal error: datetime state after the data-only check");
        PyDateTime dt;
        dt.year = byte(s, 0) << 8 | byte(s, 1);
        dt.month = byte(s, 2) & 0x7f;
        dt.fold = byte(s, 2) >> 7;
        dt.day = byte(s, 3);
        dt.hour = byte(s, 4);
        dt.minute = byte(s, 5);
        dt.second = byte(s, 6);
        dt.microsecond = byte(s, 7) << 16 | byte(s, 8) << 8 | byte(s, 9);
        if (!valid_date(dt.year, dt.month, dt.day) || !valid_time(dt.hour, dt.minute, dt.second, dt.microsecond, 0))
          return fail(fmt::format("datetime state {} is not a valid datetime", log::printable(s)));
        if (!zone_arg(a, 1, dt.utc_offset_seconds, dt.tz_name)) return false;
        stack_.push_back(make_scalar(std::move(dt)));
        return true;
      }
      case Cls::date: {
        std::string_view s = state(4);
        if (s.empty()) return fail("internal error: date state after the data-only check");
        PyDate d{byte(s, 0) << 8 | byte(s, 1), byte(s, 2), byte(s, 3)};
        if (!valid_date(d.year, d.month, d.day))
          return fail(fmt::format("date state {} is not a valid date", log::printable(s)));
        stack_.push_back(make_scalar(d));
        return true;
      }
      case Cls::time: {
        std::string_view s = state(6);
        if (s.empty()) return fail("internal error: time state after the data-only check");
        PyTime t;
        t.hour = byte(s, 0) & 0x7f;
        t.fold = byte(s, 0) >> 7;
        t.minute = byte(s, 1);
        t.second = byte(s, 2);
        t.microsecond = byte(s, 3) << 16 | byte(s, 4) << 8 | byte(s, 5);
        if (!valid_time(t.hour, t.minute, t.second, t.microsecond, 0))
          return fail(fmt::format("time state {} is not a valid time", log::printable(s)));
        if (!zone_arg(a, 1, t.utc_offset_seconds, t.tz_name)) return false;
        stack_.push_back(make_scalar(std::move(t)));
        return true;
      }
      case Cls::timedelta: {
        __int128 days, seconds, micros;
        if (a.size() != 3 || !int_arg(a[0], days) || !int_arg(a[1], seconds) || !int_arg(a[2], micros)) return false;
        PyTimedelta td;
        if (!normalize_timedelta(days, seconds, micros, td))
          return fail("timedelta beyond 999999999 days (Python raises OverflowError)");
        stack_.push_back(make_scalar(td));
        return true;
      }
      case Cls::complex: {
        double parts[2] = {0, 0};
        for (std::size_t j = 0; j < 2; ++j) {
          if (j >= a.size()) return fail("internal error: complex arguments after the data-only check");
          if (a[j].tag == Tag::floating) parts[j] = a[j].f;
          else if (a[j].tag == Tag::integer) parts[j] = static_cast<double>(a[j].i);  // rounds as float(int)
          else return fail("complex() of an integer beyond 64 bits is not supported");
        }
        stack_.push_back(make_scalar(PyComplex{parts[0], parts[1]}));
        return true;
      }
      case Cls::posix_path:
      case Cls::pure_posix_path: {
        std::vector<std::string_view> segments;
        for (const Value& part : a) {
          if (part.tag != Tag::str) return fail("internal error: path part after the data-only check");
          segments.push_back(part.text);
        }
        stack_.push_back(
            make_scalar(PyPath{posix_path_text(segments), static_cast<Cls>(callable.i) == Cls::pure_posix_path}));
        return true;
      }
      case Cls::element:
      case Cls::secret: return fail("internal error: REDUCE on an object class after the data-only check");
      case Cls::timezone: {
        const PyTimedelta* td = !a.empty() && a[0].tag == Tag::scalar
                                    ? scalars_[static_cast<std::size_t>(a[0].i)].get<PyTimedelta>()
                                    : nullptr;
        if (!td) return fail("internal error: timezone offset after the data-only check");
        const __int128 micros = (__int128{td->days} * 86400 + td->seconds) * 1000000 + td->microseconds;
        if (micros <= -kMicrosPerDay || micros >= kMicrosPerDay)
          return fail("timezone offset not strictly within a day (Python raises ValueError)");
        if (micros % 1000000 != 0) return fail("timezone offsets with microseconds are not supported");
        Zone z{static_cast<int>(micros / 1000000), {}};
        if (a.size() == 2) z.name = a[1].text;
        Value v = make(Tag::timezone);
        v.i = static_cast<std::int64_t>(zones_.size());
        zones_.push_back(z);
        stack_.push_back(v);
        return true;
      }
    }
    return fail("internal error: unknown class");
  }

  // NEWOBJ: a new Element or Secret; BUILD gives it its state dict.
  bool newobj() {
    Value args, callable;
    if (!pop(args) || !pop(callable)) return false;
    const auto cls = static_cast<Cls>(callable.i);
    if (callable.tag != Tag::cls || (cls != Cls::element && cls != Cls::secret))
      return fail("internal error: NEWOBJ shape after the data-only check");
    Value v = make(cls == Cls::element ? Tag::element : Tag::secret);
    v.i = static_cast<std::int64_t>(objects_.size());
    objects_.emplace_back();
    stack_.push_back(v);
    return true;
  }
  bool build() {
    Value state;
    if (!pop(state) || stack_.empty() || state.tag != Tag::dict ||
        (top().tag != Tag::element && top().tag != Tag::secret))
      return fail("internal error: BUILD shape after the data-only check");
    objects_[static_cast<std::size_t>(top().i)] = state;
    return true;
  }

  // An object's state dict, as (key, value) pairs of the decoder's values.
  const std::vector<Value>& state_of(const Value& object) {
    return seqs_[static_cast<std::size_t>(objects_[static_cast<std::size_t>(object.i)].i)].items;
  }

  bool materialize_secret(const Value& v, PyValue& out) {
    const auto& items = state_of(v);
    if (items.size() != 2 || items[1].tag != Tag::str)
      return fail_at(v.at, "internal error: Secret state after the data-only check");
    out = PySecret{std::string(items[1].text)};
    return true;
  }

  // One level of the tree per element (the checker counts two: its state dict and children list).
  bool materialize_element(const Value& v, std::size_t depth, PyElement& out) {
    if (depth > limits_.max_depth + 1)
      return fail_at(v.at, fmt::format("nesting deeper than {} levels", limits_.max_depth));
    const auto& items = state_of(v);
    const auto bad = [&] { return fail_at(v.at, "internal error: Element state after the data-only check"); };
    for (std::size_t j = 0; j + 1 < items.size(); j += 2) {
      const std::string_view key = items[j].text;
      const Value& value = items[j + 1];
      const auto optional_text = [&](std::optional<std::string>& field) {
        if (value.tag == Tag::str) field = std::string(value.text);
        else if (value.tag == Tag::none) field.reset();
        else return false;
        return true;
      };
      if (key == "tag") {
        if (value.tag != Tag::str) return bad();
        out.tag = std::string(value.text);
      } else if (key == "text" || key == "tail") {
        if (!optional_text(key == "text" ? out.text : out.tail)) return bad();
      } else if (key == "attrib") {
        if (value.tag != Tag::dict) return bad();
        const auto& attrib = seqs_[static_cast<std::size_t>(value.i)].items;
        out.attrib.clear();
        for (std::size_t k = 0; k + 1 < attrib.size(); k += 2) {
          if (attrib[k].tag != Tag::str || attrib[k + 1].tag != Tag::str) return bad();
          out.attrib.emplace_back(std::string(attrib[k].text), std::string(attrib[k + 1].text));
        }
      } else if (key == "_children") {
        if (value.tag != Tag::list) return bad();
        const auto& children = seqs_[static_cast<std::size_t>(value.i)].items;
        out.children.assign(children.size(), PyElement{});
        for (std::size_t k = 0; k < children.size(); ++k)
          if (children[k].tag != Tag::element || !materialize_element(children[k], depth + 1, out.children[k]))
            return error_.empty() ? bad() : false;
      } else {
        return bad();
      }
    }
    return true;
  }

  bool execute() {
    while (pos_ < in_.size()) {
      op_start_ = pos_;
      const auto op = static_cast<unsigned char>(in_[pos_++]);
      std::uint64_t n = 0;
      std::string_view text;
      switch (op) {
        case PROTO:
          if (!take_le(1, n)) return false;
          break;
        case FRAME:
          if (!take_le(8, n)) return false;
          break;
        case STOP:
          if (stack_.size() != 1) return fail("internal error: STOP without one value after the data-only check");
          return true;
        case MARK:
          marks_.push_back(stack_.size());
          break;
        case NONE:
          stack_.push_back(make(Tag::none));
          break;
        case NEWTRUE:
        case NEWFALSE: {
          Value v = make(Tag::boolean);
          v.i = op == NEWTRUE;
          stack_.push_back(v);
          break;
        }
        case BININT1:
        case BININT2:
        case BININT: {
          if (!take_le(op == BININT1 ? 1 : op == BININT2 ? 2 : 4, n)) return false;
          Value v = make(Tag::integer);
          v.i = op == BININT ? static_cast<std::int32_t>(static_cast<std::uint32_t>(n)) : static_cast<std::int64_t>(n);
          stack_.push_back(v);
          break;
        }
        case LONG1:
        case LONG4:
          if (!take_counted(op == LONG1 ? 1 : 4, text) || !push_long(text)) return false;
          break;
        case BINFLOAT: {
          if (!take(8, text)) return false;
          std::uint64_t bits = 0;
          for (char c : text) bits = (bits << 8) | static_cast<unsigned char>(c);
          Value v = make(Tag::floating);
          v.f = std::bit_cast<double>(bits);
          stack_.push_back(v);
          break;
        }
        case SHORT_BINUNICODE:
        case BINUNICODE:
        case BINUNICODE8:
        case SHORT_BINBYTES:
        case BINBYTES:
        case BINBYTES8:
        case BYTEARRAY8: {
          const bool str = op == SHORT_BINUNICODE || op == BINUNICODE || op == BINUNICODE8;
          const std::size_t width = op == SHORT_BINUNICODE || op == SHORT_BINBYTES ? 1
                                    : op == BINUNICODE || op == BINBYTES         ? 4
                                                                                 : 8;
          if (!take_counted(width, text)) return false;
          Value v = make(str ? Tag::str : op == BYTEARRAY8 ? Tag::bytearray : Tag::bytes);
          v.text = text;
          stack_.push_back(v);
          break;
        }
        case EMPTY_TUPLE:
          stack_.push_back(make_seq(Tag::tuple));
          break;
        case TUPLE1:
        case TUPLE2:
        case TUPLE3: {
          std::size_t k = op - TUPLE1 + 1u;
          std::vector<Value> items(k);
          for (std::size_t j = k; j-- > 0;)
            if (!pop(items[j])) return false;
          stack_.push_back(make_seq(Tag::tuple, std::move(items)));
          break;
        }
        case TUPLE:
        case FROZENSET: {
          std::size_t begin = 0;
          if (!pop_mark(begin)) return false;
          std::vector<Value> items(stack_.begin() + static_cast<std::ptrdiff_t>(begin), stack_.end());
          stack_.resize(begin);
          if (op == TUPLE) {
            stack_.push_back(make_seq(Tag::tuple, std::move(items)));
            break;
          }
          Value v = make_seq(Tag::frozenset);
          Seq& set = seqs_.back();
          for (const Value& item : items)
            if (!add_item(set, item)) return false;
          set.index.clear();
          stack_.push_back(v);
          break;
        }
        case EMPTY_LIST:
          stack_.push_back(make_seq(Tag::list));
          break;
        case EMPTY_DICT:
          stack_.push_back(make_seq(Tag::dict));
          break;
        case EMPTY_SET:
          stack_.push_back(make_seq(Tag::set));
          break;
        case APPEND: {
          Value item;
          if (!pop(item) || !top_is(Tag::list)) return false;
          seqs_[static_cast<std::size_t>(top().i)].items.push_back(item);
          break;
        }
        case SETITEM: {
          Value value, key;
          if (!pop(value) || !pop(key) || !top_is(Tag::dict)) return false;
          if (!set_item(seqs_[static_cast<std::size_t>(top().i)], key, value)) return false;
          break;
        }
        case APPENDS:
        case SETITEMS:
        case ADDITEMS: {
          std::size_t begin = 0;
          if (!pop_mark(begin)) return false;
          std::vector<Value> items(stack_.begin() + static_cast<std::ptrdiff_t>(begin), stack_.end());
          stack_.resize(begin);
          if (!top_is(op == APPENDS ? Tag::list : op == SETITEMS ? Tag::dict : Tag::set)) return false;
          Seq& target = seqs_[static_cast<std::size_t>(top().i)];
          if (op == APPENDS) {
            target.items.insert(target.items.end(), items.begin(), items.end());
          } else if (op == SETITEMS) {
            for (std::size_t j = 0; j + 1 < items.size(); j += 2)
              if (!set_item(target, items[j], items[j + 1])) return false;
          } else {
            for (const Value& item : items)
              if (!add_item(target, item)) return false;
          }
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
        case BINPUT:
        case LONG_BINPUT:
        case PUT:
          if (op == BINPUT || op == LONG_BINPUT) {
            if (!take_le(op == BINPUT ? 1 : 4, n)) return false;
          } else if (op == PUT) {
            if (!take_decimal_line(n)) return false;
          }
          if (stack_.empty()) return fail("internal error: memo of an empty stack after the data-only check");
          memo_.push_back(top());
          break;
        case BINGET:
        case LONG_BINGET:
        case GET:
          if (op == GET ? !take_decimal_line(n) : !take_le(op == BINGET ? 1 : 4, n)) return false;
          if (n >= memo_.size()) return fail("internal error: memo index after the data-only check");
          stack_.push_back(memo_[static_cast<std::size_t>(n)]);
          break;
        default:
          return fail(fmt::format("internal error: opcode 0x{:02x} after the data-only check", op));
      }
    }
    return fail("internal error: no STOP after the data-only check");
  }

  bool materialize(const Value& v, std::size_t depth, PyValue& out) {
    // The checker bounds nesting and refuses cycles; these guard the recursion should that ever change.
    if (depth > limits_.max_depth + 1)
      return fail_at(v.at, fmt::format("nesting deeper than {} levels", limits_.max_depth));
    switch (v.tag) {
      case Tag::none: out = PyNone{}; return true;
      case Tag::boolean: out = v.i != 0; return true;
      case Tag::integer: out = v.i; return true;
      case Tag::floating: out = v.f; return true;
      case Tag::bigint:
      case Tag::scalar: out = scalars_[static_cast<std::size_t>(v.i)]; return true;
      case Tag::str: out = std::string(v.text); return true;
      case Tag::bytes:
      case Tag::bytearray: out = PyBytes{std::string(v.text), v.tag == Tag::bytearray}; return true;
      case Tag::timezone:
        return fail_at(v.at, "a datetime.timezone on its own is not supported (only inside a datetime or time)");
      case Tag::cls: return fail_at(v.at, "internal error: a class as a value after the data-only check");
      case Tag::secret: return materialize_secret(v, out);
      case Tag::element: {
        PyElement e;
        if (!materialize_element(v, depth, e)) return false;
        out = std::move(e);
        return true;
      }
      case Tag::tuple:
      case Tag::frozenset:
      case Tag::list:
      case Tag::dict:
      case Tag::set: break;
    }
    const auto index = static_cast<std::size_t>(v.i);
    if (on_path_[index])
      return fail_at(v.at, "a container that contains itself cannot be made a tree of values");
    on_path_[index] = true;
    const Seq& seq = seqs_[index];
    std::vector<PyValue> items(seq.items.size());
    for (std::size_t j = 0; j < items.size(); ++j)
      if (!materialize(seq.items[j], depth + 1, items[j])) return false;
    on_path_[index] = false;
    switch (v.tag) {
      case Tag::tuple: out = PyTuple{std::move(items)}; break;
      case Tag::list: out = PyList{std::move(items)}; break;
      case Tag::set:
      case Tag::frozenset: out = PySet{std::move(items), v.tag == Tag::frozenset}; break;
      default: {
        PyDict d;
        d.kind = seq.kind;
        d.items.reserve(items.size() / 2);
        for (std::size_t j = 0; j + 1 < items.size(); j += 2)
          d.items.emplace_back(std::move(items[j]), std::move(items[j + 1]));
        out = std::move(d);
      }
    }
    return true;
  }

  std::string_view in_;
  const PickleLimits& limits_;
  std::size_t pos_ = 0;
  std::size_t op_start_ = 0;
  std::vector<Value> stack_;
  std::vector<std::size_t> marks_;
  std::vector<Value> memo_;
  std::vector<Seq> seqs_;
  std::vector<PyValue> scalars_;
  std::vector<Zone> zones_;
  std::vector<Value> objects_;  // element, secret: the state dict BUILD gave each
  std::vector<bool> on_path_;
  std::uint64_t bigint_work_ = 0;
  std::size_t error_at_ = 0;
  std::string error_;
};

// ---------------------------------------------------------------------------------------------------
// The encoder: CPython's C pickler at protocol 4 (Modules/_pickle.c), for plain values.

[[noreturn]] void invalid(std::string what) { throw std::invalid_argument(std::move(what)); }

std::string checked_decimal_text(const PyDecimal& d) {
  auto parsed = parse_decimal(d.text);
  if (!parsed) invalid(fmt::format("Decimal text '{}' is not a number", log::printable(d.text, 80)));
  return decimal_text(*parsed);
}

// What Python can put in a set or use as a dict key.
void check_hashable(const PyValue& v, std::string_view as) {
  // Elements and Secrets hash by identity in Python; the checker refuses them as keys.
  if (v.get<PyList>() || v.get<PyDict>() || (v.get<PySet>() && !v.get<PySet>()->frozen) ||
      (v.get<PyBytes>() && v.get<PyBytes>()->bytearray) || v.get<PyElement>() || v.get<PySecret>())
    invalid(fmt::format("{} is unhashable and cannot be a {}", py_repr(v).substr(0, 80), as));
  if (const auto* t = v.get<PyTuple>())
    for (const auto& item : t->items) check_hashable(item, as);
  if (const auto* d = v.get<PyDecimal>()) {
    auto parsed = parse_decimal(d->text);
    if (parsed && parsed->kind == DecimalNumber::Kind::snan)
      invalid(fmt::format("Decimal('{}') cannot be a {} (Python cannot hash a signaling NaN)", d->text, as));
  }
}

class Pickler {
 public:
  std::string run(const PyValue& v) {
    out_.assign("\x80\x04", 2);
    save(v, 0);
    op(STOP);
    commit();
    return std::move(out_);
  }

 private:
  // Frames are cut between values once they reach 64 KiB; a str or bytes that long goes outside any.
  void commit() {
    if (frame_.size() >= kFrameMin) {
      out_ += static_cast<char>(FRAME);
      put_le(out_, frame_.size(), 8);
    }
    out_ += frame_;
    frame_.clear();
  }
  void op(unsigned char c) { frame_ += static_cast<char>(c); }
  void memoize() {
    op(MEMOIZE);
    ++memo_;
  }
  void get(std::uint32_t index) {
    if (index < 256) {
      op(BINGET);
      op(static_cast<unsigned char>(index));
    } else {
      op(LONG_BINGET);
      put_le(frame_, index, 4);
    }
  }
  void counted(unsigned char op1, unsigned char op4, unsigned char op8, std::string_view data) {
    std::string header;
    if (data.size() < 256) {
      header += static_cast<char>(op1);
      put_le(header, data.size(), 1);
    } else if (data.size() <= 0xffffffffu) {
      header += static_cast<char>(op4);
      put_le(header, data.size(), 4);
    } else {
      header += static_cast<char>(op8);
      put_le(header, data.size(), 8);
    }
    if (data.size() >= kFrameTarget) {
      commit();
      out_ += header;
      out_ += data;
    } else {
      frame_ += header;
      frame_ += data;
    }
  }

  void save_str(std::string_view s) {
    if (!valid_pickle_utf8(s)) invalid(fmt::format("str '{}' is not valid UTF-8", log::printable(s, 80)));
    counted(SHORT_BINUNICODE, BINUNICODE, BINUNICODE8, s);
    memoize();
  }
  void save_bytes(std::string_view b) {
    counted(SHORT_BINBYTES, BINBYTES, BINBYTES8, b);
    memoize();
  }
  void save_int(std::int64_t v) {
    if (v >= 0 && v <= 0xff) {
      op(BININT1);
      put_le(frame_, static_cast<std::uint64_t>(v), 1);
    } else if (v >= 0 && v <= 0xffff) {
      op(BININT2);
      put_le(frame_, static_cast<std::uint64_t>(v), 2);
    } else if (v >= std::numeric_limits<std::int32_t>::min() && v <= std::numeric_limits<std::int32_t>::max()) {
      op(BININT);
      put_le(frame_, static_cast<std::uint32_t>(static_cast<std::int32_t>(v)), 4);
    } else {
      const std::uint64_t m = v < 0 ? 0 - static_cast<std::uint64_t>(v) : static_cast<std::uint64_t>(v);
      save_long(words_from_u64(m), v < 0);
    }
  }
  void save_long(const Words& w, bool negative) {
    const std::string b = twos_complement(w, negative);
    if (b.size() > PickleLimits{}.max_long_bytes)
      invalid(
          fmt::format("integer of {} bytes is longer than the limit of {}", b.size(), PickleLimits{}.max_long_bytes));
    if (b.size() < 256) {
      op(LONG1);
      put_le(frame_, b.size(), 1);
    } else {
      op(LONG4);
      put_le(frame_, b.size(), 4);
    }
    frame_ += b;
  }
  void save_bigint(const PyBigInt& v) {
    std::string_view digits = v.decimal;
    // 4096 bytes of two's complement hold under 9865 digits: no need to convert more to find out.
    if (digits.size() > 10000) invalid(fmt::format("integer of {} digits is too long", digits.size()));
    bool negative;
    Words w;
    if (!parse_big_decimal(digits, negative, w))
      invalid(fmt::format("'{}' is not an integer", log::printable(digits, 80)));
    std::int64_t small;
    if (fits_int64(w, negative, small)) save_int(small);
    else save_long(w, negative);
  }
  void save_float(double x) {
    op(BINFLOAT);
    const auto bits = std::bit_cast<std::uint64_t>(x);
    for (int i = 7; i >= 0; --i) frame_ += static_cast<char>((bits >> (8 * i)) & 0xff);
  }

  // module.name, memoized as CPython does: the class object, and each module name's string.
  void save_global(std::string_view module, std::string_view name) {
    auto cls = classes_.find(std::pair{std::string(module), std::string(name)});
    if (cls != classes_.end()) {
      get(cls->second);
      return;
    }
    auto m = modules_.find(module);
    if (m != modules_.end()) {
      get(m->second);
    } else {
      counted(SHORT_BINUNICODE, BINUNICODE, BINUNICODE8, module);
      modules_.emplace(std::string(module), memo_);
      memoize();
    }
    counted(SHORT_BINUNICODE, BINUNICODE, BINUNICODE8, name);
    memoize();
    op(STACK_GLOBAL);
    classes_.emplace(std::pair{std::string(module), std::string(name)}, memo_);
    memoize();
  }
  // The end of save_reduce: arguments already saved, the call and its result memoized.
  void reduce_args(unsigned char tuple_op) {
    op(tuple_op);
    memoize();
    op(REDUCE);
    memoize();
  }

  void save_timedelta(std::int64_t days, std::int64_t seconds, std::int64_t micros) {
    PyTimedelta td;
    if (!normalize_timedelta(days, seconds, micros, td))
      invalid(fmt::format("timedelta({}, {}, {}) is beyond 999999999 days", days, seconds, micros));
    save_global("datetime", "timedelta");
    save_int(td.days);
    save_int(td.seconds);
    save_int(td.microseconds);
    reduce_args(TUPLE3);
  }
  // The tzinfo argument of a datetime or time; false when naive.
  bool save_zone(const std::optional<int>& offset, const std::string& name) {
    if (!offset) {
      if (!name.empty()) invalid(fmt::format("time zone name '{}' without an offset", log::printable(name, 80)));
      return false;
    }
    if (!valid_offset(*offset)) invalid(fmt::format("UTC offset of {} seconds is not strictly within a day", *offset));
    save_global("datetime", "timezone");
    save_timedelta(0, *offset, 0);
    if (name.empty()) {
      reduce_args(TUPLE1);
    } else {
      save_str(name);
      reduce_args(TUPLE2);
    }
    return true;
  }

  // Lists stop after their last item; sets (and plain dicts below) loop while a batch was full, so a
  // size that is a multiple of 1000 ends with an empty MARK ADDITEMS, as CPython writes it.
  void save_seq_items(const std::vector<PyValue>& items, std::size_t depth, unsigned char batch_op) {
    const bool list = batch_op == APPENDS;
    std::size_t i = 0, batch = 0;
    do {
      op(MARK);
      for (batch = 0; i < items.size() && batch < kBatchSize; ++i, ++batch) save(items[i], depth);
      op(batch_op);
    } while (list ? i < items.size() : batch == kBatchSize);
  }
  void save_item(const std::pair<PyValue, PyValue>& item, std::size_t depth) {
    check_hashable(item.first, "dict key");
    save(item.first, depth);
    save(item.second, depth);
  }
  // A plain dict of one item is a SETITEM. OrderedDict's items come from an iterator: a last batch of
  // one is a SETITEM too, and no batch is empty.
  void save_dict_items(const PyDict& d, std::size_t depth, bool iterator) {
    const auto& items = d.items;
    if (items.empty()) return;
    if (items.size() == 1 && !iterator) {
      save_item(items[0], depth);
      op(SETITEM);
      return;
    }
    std::size_t i = 0, batch = 0;
    do {
      if (iterator && items.size() - i == 1) {
        save_item(items[i], depth);
        op(SETITEM);
        return;
      }
      op(MARK);
      for (batch = 0; i < items.size() && batch < kBatchSize; ++i, ++batch) save_item(items[i], depth);
      op(SETITEMS);
    } while (iterator ? i < items.size() : batch == kBatchSize);
  }

  // What the C pickler writes for an Element: NEWOBJ, then BUILD with __getstate__'s dict (tag,
  // _children, attrib, text, tail). The checker counts two levels per element (the dict, the list).
  void save_element(const PyElement& e, std::size_t depth) {
    if (depth + 2 > PickleLimits{}.max_depth)
      invalid(fmt::format("elements nested deeper than the checker's {} levels (two per element)",
                          PickleLimits{}.max_depth));
    save_global("xml.etree.ElementTree", "Element");
    op(EMPTY_TUPLE);
    op(NEWOBJ);
    memoize();
    op(EMPTY_DICT);
    memoize();
    op(MARK);
    save_str("tag");
    save_str(e.tag);
    save_str("_children");
    op(EMPTY_LIST);
    memoize();
    std::size_t i = 0;
    if (e.children.size() == 1) {
      save_element(e.children[0], depth + 2);
      op(APPEND);
    } else if (!e.children.empty()) {
      do {
        op(MARK);
        for (std::size_t batch = 0; i < e.children.size() && batch < kBatchSize; ++i, ++batch) {
          if (frame_.size() >= kFrameTarget) commit();
          save_element(e.children[i], depth + 2);
        }
        op(APPENDS);
      } while (i < e.children.size());
    }
    save_str("attrib");
    PyDict attrib;
    for (const auto& [k, v] : e.attrib) attrib.items.emplace_back(k, v);
    op(EMPTY_DICT);
    memoize();
    save_dict_items(attrib, depth + 2, false);
    for (const auto* field : {&e.text, &e.tail}) {
      save_str(field == &e.text ? "text" : "tail");
      if (*field) save_str(**field);
      else op(NONE);
    }
    op(SETITEMS);
    op(BUILD);
  }

  void save(const PyValue& v, std::size_t depth) {
    if (frame_.size() >= kFrameTarget) commit();
    const bool container =
        v.get<PyList>() || v.get<PyTuple>() || v.get<PySet>() || v.get<PyDict>() || v.get<PySecret>();
    if (container && depth + 1 > PickleLimits{}.max_depth)
      invalid(fmt::format("nesting deeper than {} levels", PickleLimits{}.max_depth));
    const std::size_t inner = depth + 1;
    std::visit(
        [&](const auto& x) {
          using T = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<T, PyNone>) {
            op(NONE);
          } else if constexpr (std::is_same_v<T, bool>) {
            op(x ? NEWTRUE : NEWFALSE);
          } else if constexpr (std::is_same_v<T, std::int64_t>) {
            save_int(x);
          } else if constexpr (std::is_same_v<T, PyBigInt>) {
            save_bigint(x);
          } else if constexpr (std::is_same_v<T, double>) {
            save_float(x);
          } else if constexpr (std::is_same_v<T, std::string>) {
            save_str(x);
          } else if constexpr (std::is_same_v<T, PyBytes>) {
            if (!x.bytearray) {
              save_bytes(x.bytes);
            } else {
              save_global("builtins", "bytearray");
              if (x.bytes.empty()) {
                op(EMPTY_TUPLE);
                op(REDUCE);
                memoize();
              } else {
                save_bytes(x.bytes);
                reduce_args(TUPLE1);
              }
            }
          } else if constexpr (std::is_same_v<T, PyList>) {
            op(EMPTY_LIST);
            memoize();
            if (x.items.size() == 1) {
              save(x.items[0], inner);
              op(APPEND);
            } else if (!x.items.empty()) {
              save_seq_items(x.items, inner, APPENDS);
            }
          } else if constexpr (std::is_same_v<T, PyTuple>) {
            const std::size_t n = x.items.size();
            if (n == 0) {
              op(EMPTY_TUPLE);
              return;
            }
            if (n > 3) op(MARK);
            for (const auto& item : x.items) save(item, inner);
            op(n == 1 ? TUPLE1 : n == 2 ? TUPLE2 : n == 3 ? TUPLE3 : TUPLE);
            memoize();
          } else if constexpr (std::is_same_v<T, PySet>) {
            for (const auto& item : x.items) check_hashable(item, "set element");
            if (x.frozen) {
              op(MARK);
              for (const auto& item : x.items) save(item, inner);
              op(FROZENSET);
              memoize();
            } else {
              op(EMPTY_SET);
              memoize();
              if (!x.items.empty()) save_seq_items(x.items, inner, ADDITEMS);
            }
          } else if constexpr (std::is_same_v<T, PyDict>) {
            if (x.kind == PyDict::Kind::dict) {
              op(EMPTY_DICT);
              memoize();
            } else {
              if (x.kind == PyDict::Kind::dot_dict) save_global("robot.utils.dotdict", "DotDict");
              else save_global("collections", "OrderedDict");
              op(EMPTY_TUPLE);
              op(REDUCE);
              memoize();
            }
            save_dict_items(x, inner, x.kind != PyDict::Kind::dict);
          } else if constexpr (std::is_same_v<T, PyDateTime>) {
            if (!valid_date(x.year, x.month, x.day) || !valid_time(x.hour, x.minute, x.second, x.microsecond, x.fold))
              invalid(fmt::format("{} is not a valid datetime", py_repr(v)));
            save_global("datetime", "datetime");
            save_bytes(date_state(x.year, x.month | (x.fold << 7), x.day) +
                       time_state(x.hour, x.minute, x.second, x.microsecond));
            reduce_args(save_zone(x.utc_offset_seconds, x.tz_name) ? TUPLE2 : TUPLE1);
          } else if constexpr (std::is_same_v<T, PyDate>) {
            if (!valid_date(x.year, x.month, x.day)) invalid(fmt::format("{} is not a valid date", py_repr(v)));
            save_global("datetime", "date");
            save_bytes(date_state(x.year, x.month, x.day));
            reduce_args(TUPLE1);
          } else if constexpr (std::is_same_v<T, PyTime>) {
            if (!valid_time(x.hour, x.minute, x.second, x.microsecond, x.fold))
              invalid(fmt::format("{} is not a valid time", py_repr(v)));
            save_global("datetime", "time");
            save_bytes(time_state(x.hour | (x.fold << 7), x.minute, x.second, x.microsecond));
            reduce_args(save_zone(x.utc_offset_seconds, x.tz_name) ? TUPLE2 : TUPLE1);
          } else if constexpr (std::is_same_v<T, PyTimedelta>) {
            save_timedelta(x.days, x.seconds, x.microseconds);
          } else if constexpr (std::is_same_v<T, PyDecimal>) {
            const std::string text = checked_decimal_text(x);
            save_global("decimal", "Decimal");
            save_str(text);
            reduce_args(TUPLE1);
          } else if constexpr (std::is_same_v<T, PyComplex>) {
            save_global("builtins", "complex");
            save_float(x.real);
            save_float(x.imag);
            reduce_args(TUPLE2);
          } else if constexpr (std::is_same_v<T, PyPath>) {
            // As 3.8 to 3.12 write it (module pathlib, the parts), which every version reads.
            if (!valid_pickle_utf8(x.path)) invalid(fmt::format("path '{}' is not valid UTF-8", log::printable(x.path, 80)));
            save_global("pathlib", x.pure ? "PurePosixPath" : "PosixPath");
            const auto parts = posix_path_parts(x.path);
            if (parts.empty()) {
              op(EMPTY_TUPLE);
              op(REDUCE);
              memoize();
              return;
            }
            if (parts.size() > 3) op(MARK);
            for (const auto& part : parts) save_str(part);
            const auto n = parts.size();
            reduce_args(n == 1 ? TUPLE1 : n == 2 ? TUPLE2 : n == 3 ? TUPLE3 : TUPLE);
          } else if constexpr (std::is_same_v<T, PyElement>) {
            save_element(x, depth);
          } else if constexpr (std::is_same_v<T, PySecret>) {
            save_global("robot.utils.secret", "Secret");
            op(EMPTY_TUPLE);
            op(NEWOBJ);
            memoize();
            op(EMPTY_DICT);
            memoize();
            save_str("value");
            save_str(x.value);
            op(SETITEM);
            op(BUILD);
          }
        },
        v.v);
  }

  std::string out_;    // PROTO and committed frames
  std::string frame_;  // the current frame
  std::uint32_t memo_ = 0;
  std::map<std::string, std::uint32_t, std::less<>> modules_;
  std::map<std::pair<std::string, std::string>, std::uint32_t> classes_;
};

// ---------------------------------------------------------------------------------------------------
// str() and repr().

// Code points (from U+0080) for which CPython 3.13's str.isprintable() is false (Unicode 15.1: categories
// Cc, Cf, Cs, Co, Cn, Zl, Zp and Zs but the space). repr() escapes them. Generated with
//   r = [c for c in range(0x80, 0x110000) if not chr(c).isprintable()], merged into ranges.
constexpr std::pair<std::uint32_t, std::uint32_t> kNotPrintable[] = {
    {0x80, 0xa0}, {0xad, 0xad}, {0x378, 0x379}, {0x380, 0x383}, {0x38b, 0x38b}, {0x38d, 0x38d}, {0x3a2, 0x3a2},
    {0x530, 0x530}, {0x557, 0x558}, {0x58b, 0x58c}, {0x590, 0x590}, {0x5c8, 0x5cf}, {0x5eb, 0x5ee}, {0x5f5, 0x605},
    {0x61c, 0x61c}, {0x6dd, 0x6dd}, {0x70e, 0x70f}, {0x74b, 0x74c}, {0x7b2, 0x7bf}, {0x7fb, 0x7fc}, {0x82e, 0x82f},
    {0x83f, 0x83f}, {0x85c, 0x85d}, {0x85f, 0x85f}, {0x86b, 0x86f}, {0x88f, 0x897}, {0x8e2, 0x8e2}, {0x984, 0x984},
    {0x98d, 0x98e}, {0x991, 0x992}, {0x9a9, 0x9a9}, {0x9b1, 0x9b1}, {0x9b3, 0x9b5}, {0x9ba, 0x9bb}, {0x9c5, 0x9c6},
    {0x9c9, 0x9ca}, {0x9cf, 0x9d6}, {0x9d8, 0x9db}, {0x9de, 0x9de}, {0x9e4, 0x9e5}, {0x9ff, 0xa00}, {0xa04, 0xa04},
    {0xa0b, 0xa0e}, {0xa11, 0xa12}, {0xa29, 0xa29}, {0xa31, 0xa31}, {0xa34, 0xa34}, {0xa37, 0xa37}, {0xa3a, 0xa3b},
    {0xa3d, 0xa3d}, {0xa43, 0xa46}, {0xa49, 0xa4a}, {0xa4e, 0xa50}, {0xa52, 0xa58}, {0xa5d, 0xa5d}, {0xa5f, 0xa65},
    {0xa77, 0xa80}, {0xa84, 0xa84}, {0xa8e, 0xa8e}, {0xa92, 0xa92}, {0xaa9, 0xaa9}, {0xab1, 0xab1}, {0xab4, 0xab4},
    {0xaba, 0xabb}, {0xac6, 0xac6}, {0xaca, 0xaca}, {0xace, 0xacf}, {0xad1, 0xadf}, {0xae4, 0xae5}, {0xaf2, 0xaf8},
    {0xb00, 0xb00}, {0xb04, 0xb04}, {0xb0d, 0xb0e}, {0xb11, 0xb12}, {0xb29, 0xb29}, {0xb31, 0xb31}, {0xb34, 0xb34},
    {0xb3a, 0xb3b}, {0xb45, 0xb46}, {0xb49, 0xb4a}, {0xb4e, 0xb54}, {0xb58, 0xb5b}, {0xb5e, 0xb5e}, {0xb64, 0xb65},
    {0xb78, 0xb81}, {0xb84, 0xb84}, {0xb8b, 0xb8d}, {0xb91, 0xb91}, {0xb96, 0xb98}, {0xb9b, 0xb9b}, {0xb9d, 0xb9d},
    {0xba0, 0xba2}, {0xba5, 0xba7}, {0xbab, 0xbad}, {0xbba, 0xbbd}, {0xbc3, 0xbc5}, {0xbc9, 0xbc9}, {0xbce, 0xbcf},
    {0xbd1, 0xbd6}, {0xbd8, 0xbe5}, {0xbfb, 0xbff}, {0xc0d, 0xc0d}, {0xc11, 0xc11}, {0xc29, 0xc29}, {0xc3a, 0xc3b},
    {0xc45, 0xc45}, {0xc49, 0xc49}, {0xc4e, 0xc54}, {0xc57, 0xc57}, {0xc5b, 0xc5c}, {0xc5e, 0xc5f}, {0xc64, 0xc65},
    {0xc70, 0xc76}, {0xc8d, 0xc8d}, {0xc91, 0xc91}, {0xca9, 0xca9}, {0xcb4, 0xcb4}, {0xcba, 0xcbb}, {0xcc5, 0xcc5},
    {0xcc9, 0xcc9}, {0xcce, 0xcd4}, {0xcd7, 0xcdc}, {0xcdf, 0xcdf}, {0xce4, 0xce5}, {0xcf0, 0xcf0}, {0xcf4, 0xcff},
    {0xd0d, 0xd0d}, {0xd11, 0xd11}, {0xd45, 0xd45}, {0xd49, 0xd49}, {0xd50, 0xd53}, {0xd64, 0xd65}, {0xd80, 0xd80},
    {0xd84, 0xd84}, {0xd97, 0xd99}, {0xdb2, 0xdb2}, {0xdbc, 0xdbc}, {0xdbe, 0xdbf}, {0xdc7, 0xdc9}, {0xdcb, 0xdce},
    {0xdd5, 0xdd5}, {0xdd7, 0xdd7}, {0xde0, 0xde5}, {0xdf0, 0xdf1}, {0xdf5, 0xe00}, {0xe3b, 0xe3e}, {0xe5c, 0xe80},
    {0xe83, 0xe83}, {0xe85, 0xe85}, {0xe8b, 0xe8b}, {0xea4, 0xea4}, {0xea6, 0xea6}, {0xebe, 0xebf}, {0xec5, 0xec5},
    {0xec7, 0xec7}, {0xecf, 0xecf}, {0xeda, 0xedb}, {0xee0, 0xeff}, {0xf48, 0xf48}, {0xf6d, 0xf70}, {0xf98, 0xf98},
    {0xfbd, 0xfbd}, {0xfcd, 0xfcd}, {0xfdb, 0xfff}, {0x10c6, 0x10c6}, {0x10c8, 0x10cc}, {0x10ce, 0x10cf},
    {0x1249, 0x1249}, {0x124e, 0x124f}, {0x1257, 0x1257}, {0x1259, 0x1259}, {0x125e, 0x125f}, {0x1289, 0x1289},
    {0x128e, 0x128f}, {0x12b1, 0x12b1}, {0x12b6, 0x12b7}, {0x12bf, 0x12bf}, {0x12c1, 0x12c1}, {0x12c6, 0x12c7},
    {0x12d7, 0x12d7}, {0x1311, 0x1311}, {0x1316, 0x1317}, {0x135b, 0x135c}, {0x137d, 0x137f}, {0x139a, 0x139f},
    {0x13f6, 0x13f7}, {0x13fe, 0x13ff}, {0x1680, 0x1680}, {0x169d, 0x169f}, {0x16f9, 0x16ff}, {0x1716, 0x171e},
    {0x1737, 0x173f}, {0x1754, 0x175f}, {0x176d, 0x176d}, {0x1771, 0x1771}, {0x1774, 0x177f}, {0x17de, 0x17df},
    {0x17ea, 0x17ef}, {0x17fa, 0x17ff}, {0x180e, 0x180e}, {0x181a, 0x181f}, {0x1879, 0x187f}, {0x18ab, 0x18af},
    {0x18f6, 0x18ff}, {0x191f, 0x191f}, {0x192c, 0x192f}, {0x193c, 0x193f}, {0x1941, 0x1943}, {0x196e, 0x196f},
    {0x1975, 0x197f}, {0x19ac, 0x19af}, {0x19ca, 0x19cf}, {0x19db, 0x19dd}, {0x1a1c, 0x1a1d}, {0x1a5f, 0x1a5f},
    {0x1a7d, 0x1a7e}, {0x1a8a, 0x1a8f}, {0x1a9a, 0x1a9f}, {0x1aae, 0x1aaf}, {0x1acf, 0x1aff}, {0x1b4d, 0x1b4f},
    {0x1b7f, 0x1b7f}, {0x1bf4, 0x1bfb}, {0x1c38, 0x1c3a}, {0x1c4a, 0x1c4c}, {0x1c89, 0x1c8f}, {0x1cbb, 0x1cbc},
    {0x1cc8, 0x1ccf}, {0x1cfb, 0x1cff}, {0x1f16, 0x1f17}, {0x1f1e, 0x1f1f}, {0x1f46, 0x1f47}, {0x1f4e, 0x1f4f},
    {0x1f58, 0x1f58}, {0x1f5a, 0x1f5a}, {0x1f5c, 0x1f5c}, {0x1f5e, 0x1f5e}, {0x1f7e, 0x1f7f}, {0x1fb5, 0x1fb5},
    {0x1fc5, 0x1fc5}, {0x1fd4, 0x1fd5}, {0x1fdc, 0x1fdc}, {0x1ff0, 0x1ff1}, {0x1ff5, 0x1ff5}, {0x1fff, 0x200f},
    {0x2028, 0x202f}, {0x205f, 0x206f}, {0x2072, 0x2073}, {0x208f, 0x208f}, {0x209d, 0x209f}, {0x20c1, 0x20cf},
    {0x20f1, 0x20ff}, {0x218c, 0x218f}, {0x2427, 0x243f}, {0x244b, 0x245f}, {0x2b74, 0x2b75}, {0x2b96, 0x2b96},
    {0x2cf4, 0x2cf8}, {0x2d26, 0x2d26}, {0x2d28, 0x2d2c}, {0x2d2e, 0x2d2f}, {0x2d68, 0x2d6e}, {0x2d71, 0x2d7e},
    {0x2d97, 0x2d9f}, {0x2da7, 0x2da7}, {0x2daf, 0x2daf}, {0x2db7, 0x2db7}, {0x2dbf, 0x2dbf}, {0x2dc7, 0x2dc7},
    {0x2dcf, 0x2dcf}, {0x2dd7, 0x2dd7}, {0x2ddf, 0x2ddf}, {0x2e5e, 0x2e7f}, {0x2e9a, 0x2e9a}, {0x2ef4, 0x2eff},
    {0x2fd6, 0x2fef}, {0x3000, 0x3000}, {0x3040, 0x3040}, {0x3097, 0x3098}, {0x3100, 0x3104}, {0x3130, 0x3130},
    {0x318f, 0x318f}, {0x31e4, 0x31ee}, {0x321f, 0x321f}, {0xa48d, 0xa48f}, {0xa4c7, 0xa4cf}, {0xa62c, 0xa63f},
    {0xa6f8, 0xa6ff}, {0xa7cb, 0xa7cf}, {0xa7d2, 0xa7d2}, {0xa7d4, 0xa7d4}, {0xa7da, 0xa7f1}, {0xa82d, 0xa82f},
    {0xa83a, 0xa83f}, {0xa878, 0xa87f}, {0xa8c6, 0xa8cd}, {0xa8da, 0xa8df}, {0xa954, 0xa95e}, {0xa97d, 0xa97f},
    {0xa9ce, 0xa9ce}, {0xa9da, 0xa9dd}, {0xa9ff, 0xa9ff}, {0xaa37, 0xaa3f}, {0xaa4e, 0xaa4f}, {0xaa5a, 0xaa5b},
    {0xaac3, 0xaada}, {0xaaf7, 0xab00}, {0xab07, 0xab08}, {0xab0f, 0xab10}, {0xab17, 0xab1f}, {0xab27, 0xab27},
    {0xab2f, 0xab2f}, {0xab6c, 0xab6f}, {0xabee, 0xabef}, {0xabfa, 0xabff}, {0xd7a4, 0xd7af}, {0xd7c7, 0xd7ca},
    {0xd7fc, 0xf8ff}, {0xfa6e, 0xfa6f}, {0xfada, 0xfaff}, {0xfb07, 0xfb12}, {0xfb18, 0xfb1c}, {0xfb37, 0xfb37},
    {0xfb3d, 0xfb3d}, {0xfb3f, 0xfb3f}, {0xfb42, 0xfb42}, {0xfb45, 0xfb45}, {0xfbc3, 0xfbd2}, {0xfd90, 0xfd91},
    {0xfdc8, 0xfdce}, {0xfdd0, 0xfdef}, {0xfe1a, 0xfe1f}, {0xfe53, 0xfe53}, {0xfe67, 0xfe67}, {0xfe6c, 0xfe6f},
    {0xfe75, 0xfe75}, {0xfefd, 0xff00}, {0xffbf, 0xffc1}, {0xffc8, 0xffc9}, {0xffd0, 0xffd1}, {0xffd8, 0xffd9},
    {0xffdd, 0xffdf}, {0xffe7, 0xffe7}, {0xffef, 0xfffb}, {0xfffe, 0xffff}, {0x1000c, 0x1000c}, {0x10027, 0x10027},
    {0x1003b, 0x1003b}, {0x1003e, 0x1003e}, {0x1004e, 0x1004f}, {0x1005e, 0x1007f}, {0x100fb, 0x100ff},
    {0x10103, 0x10106}, {0x10134, 0x10136}, {0x1018f, 0x1018f}, {0x1019d, 0x1019f}, {0x101a1, 0x101cf},
    {0x101fe, 0x1027f}, {0x1029d, 0x1029f}, {0x102d1, 0x102df}, {0x102fc, 0x102ff}, {0x10324, 0x1032c},
    {0x1034b, 0x1034f}, {0x1037b, 0x1037f}, {0x1039e, 0x1039e}, {0x103c4, 0x103c7}, {0x103d6, 0x103ff},
    {0x1049e, 0x1049f}, {0x104aa, 0x104af}, {0x104d4, 0x104d7}, {0x104fc, 0x104ff}, {0x10528, 0x1052f},
    {0x10564, 0x1056e}, {0x1057b, 0x1057b}, {0x1058b, 0x1058b}, {0x10593, 0x10593}, {0x10596, 0x10596},
    {0x105a2, 0x105a2}, {0x105b2, 0x105b2}, {0x105ba, 0x105ba}, {0x105bd, 0x105ff}, {0x10737, 0x1073f},
    {0x10756, 0x1075f}, {0x10768, 0x1077f}, {0x10786, 0x10786}, {0x107b1, 0x107b1}, {0x107bb, 0x107ff},
    {0x10806, 0x10807}, {0x10809, 0x10809}, {0x10836, 0x10836}, {0x10839, 0x1083b}, {0x1083d, 0x1083e},
    {0x10856, 0x10856}, {0x1089f, 0x108a6}, {0x108b0, 0x108df}, {0x108f3, 0x108f3}, {0x108f6, 0x108fa},
    {0x1091c, 0x1091e}, {0x1093a, 0x1093e}, {0x10940, 0x1097f}, {0x109b8, 0x109bb}, {0x109d0, 0x109d1},
    {0x10a04, 0x10a04}, {0x10a07, 0x10a0b}, {0x10a14, 0x10a14}, {0x10a18, 0x10a18}, {0x10a36, 0x10a37},
    {0x10a3b, 0x10a3e}, {0x10a49, 0x10a4f}, {0x10a59, 0x10a5f}, {0x10aa0, 0x10abf}, {0x10ae7, 0x10aea},
    {0x10af7, 0x10aff}, {0x10b36, 0x10b38}, {0x10b56, 0x10b57}, {0x10b73, 0x10b77}, {0x10b92, 0x10b98},
    {0x10b9d, 0x10ba8}, {0x10bb0, 0x10bff}, {0x10c49, 0x10c7f}, {0x10cb3, 0x10cbf}, {0x10cf3, 0x10cf9},
    {0x10d28, 0x10d2f}, {0x10d3a, 0x10e5f}, {0x10e7f, 0x10e7f}, {0x10eaa, 0x10eaa}, {0x10eae, 0x10eaf},
    {0x10eb2, 0x10efc}, {0x10f28, 0x10f2f}, {0x10f5a, 0x10f6f}, {0x10f8a, 0x10faf}, {0x10fcc, 0x10fdf},
    {0x10ff7, 0x10fff}, {0x1104e, 0x11051}, {0x11076, 0x1107e}, {0x110bd, 0x110bd}, {0x110c3, 0x110cf},
    {0x110e9, 0x110ef}, {0x110fa, 0x110ff}, {0x11135, 0x11135}, {0x11148, 0x1114f}, {0x11177, 0x1117f},
    {0x111e0, 0x111e0}, {0x111f5, 0x111ff}, {0x11212, 0x11212}, {0x11242, 0x1127f}, {0x11287, 0x11287},
    {0x11289, 0x11289}, {0x1128e, 0x1128e}, {0x1129e, 0x1129e}, {0x112aa, 0x112af}, {0x112eb, 0x112ef},
    {0x112fa, 0x112ff}, {0x11304, 0x11304}, {0x1130d, 0x1130e}, {0x11311, 0x11312}, {0x11329, 0x11329},
    {0x11331, 0x11331}, {0x11334, 0x11334}, {0x1133a, 0x1133a}, {0x11345, 0x11346}, {0x11349, 0x1134a},
    {0x1134e, 0x1134f}, {0x11351, 0x11356}, {0x11358, 0x1135c}, {0x11364, 0x11365}, {0x1136d, 0x1136f},
    {0x11375, 0x113ff}, {0x1145c, 0x1145c}, {0x11462, 0x1147f}, {0x114c8, 0x114cf}, {0x114da, 0x1157f},
    {0x115b6, 0x115b7}, {0x115de, 0x115ff}, {0x11645, 0x1164f}, {0x1165a, 0x1165f}, {0x1166d, 0x1167f},
    {0x116ba, 0x116bf}, {0x116ca, 0x116ff}, {0x1171b, 0x1171c}, {0x1172c, 0x1172f}, {0x11747, 0x117ff},
    {0x1183c, 0x1189f}, {0x118f3, 0x118fe}, {0x11907, 0x11908}, {0x1190a, 0x1190b}, {0x11914, 0x11914},
    {0x11917, 0x11917}, {0x11936, 0x11936}, {0x11939, 0x1193a}, {0x11947, 0x1194f}, {0x1195a, 0x1199f},
    {0x119a8, 0x119a9}, {0x119d8, 0x119d9}, {0x119e5, 0x119ff}, {0x11a48, 0x11a4f}, {0x11aa3, 0x11aaf},
    {0x11af9, 0x11aff}, {0x11b0a, 0x11bff}, {0x11c09, 0x11c09}, {0x11c37, 0x11c37}, {0x11c46, 0x11c4f},
    {0x11c6d, 0x11c6f}, {0x11c90, 0x11c91}, {0x11ca8, 0x11ca8}, {0x11cb7, 0x11cff}, {0x11d07, 0x11d07},
    {0x11d0a, 0x11d0a}, {0x11d37, 0x11d39}, {0x11d3b, 0x11d3b}, {0x11d3e, 0x11d3e}, {0x11d48, 0x11d4f},
    {0x11d5a, 0x11d5f}, {0x11d66, 0x11d66}, {0x11d69, 0x11d69}, {0x11d8f, 0x11d8f}, {0x11d92, 0x11d92},
    {0x11d99, 0x11d9f}, {0x11daa, 0x11edf}, {0x11ef9, 0x11eff}, {0x11f11, 0x11f11}, {0x11f3b, 0x11f3d},
    {0x11f5a, 0x11faf}, {0x11fb1, 0x11fbf}, {0x11ff2, 0x11ffe}, {0x1239a, 0x123ff}, {0x1246f, 0x1246f},
    {0x12475, 0x1247f}, {0x12544, 0x12f8f}, {0x12ff3, 0x12fff}, {0x13430, 0x1343f}, {0x13456, 0x143ff},
    {0x14647, 0x167ff}, {0x16a39, 0x16a3f}, {0x16a5f, 0x16a5f}, {0x16a6a, 0x16a6d}, {0x16abf, 0x16abf},
    {0x16aca, 0x16acf}, {0x16aee, 0x16aef}, {0x16af6, 0x16aff}, {0x16b46, 0x16b4f}, {0x16b5a, 0x16b5a},
    {0x16b62, 0x16b62}, {0x16b78, 0x16b7c}, {0x16b90, 0x16e3f}, {0x16e9b, 0x16eff}, {0x16f4b, 0x16f4e},
    {0x16f88, 0x16f8e}, {0x16fa0, 0x16fdf}, {0x16fe5, 0x16fef}, {0x16ff2, 0x16fff}, {0x187f8, 0x187ff},
    {0x18cd6, 0x18cff}, {0x18d09, 0x1afef}, {0x1aff4, 0x1aff4}, {0x1affc, 0x1affc}, {0x1afff, 0x1afff},
    {0x1b123, 0x1b131}, {0x1b133, 0x1b14f}, {0x1b153, 0x1b154}, {0x1b156, 0x1b163}, {0x1b168, 0x1b16f},
    {0x1b2fc, 0x1bbff}, {0x1bc6b, 0x1bc6f}, {0x1bc7d, 0x1bc7f}, {0x1bc89, 0x1bc8f}, {0x1bc9a, 0x1bc9b},
    {0x1bca0, 0x1ceff}, {0x1cf2e, 0x1cf2f}, {0x1cf47, 0x1cf4f}, {0x1cfc4, 0x1cfff}, {0x1d0f6, 0x1d0ff},
    {0x1d127, 0x1d128}, {0x1d173, 0x1d17a}, {0x1d1eb, 0x1d1ff}, {0x1d246, 0x1d2bf}, {0x1d2d4, 0x1d2df},
    {0x1d2f4, 0x1d2ff}, {0x1d357, 0x1d35f}, {0x1d379, 0x1d3ff}, {0x1d455, 0x1d455}, {0x1d49d, 0x1d49d},
    {0x1d4a0, 0x1d4a1}, {0x1d4a3, 0x1d4a4}, {0x1d4a7, 0x1d4a8}, {0x1d4ad, 0x1d4ad}, {0x1d4ba, 0x1d4ba},
    {0x1d4bc, 0x1d4bc}, {0x1d4c4, 0x1d4c4}, {0x1d506, 0x1d506}, {0x1d50b, 0x1d50c}, {0x1d515, 0x1d515},
    {0x1d51d, 0x1d51d}, {0x1d53a, 0x1d53a}, {0x1d53f, 0x1d53f}, {0x1d545, 0x1d545}, {0x1d547, 0x1d549},
    {0x1d551, 0x1d551}, {0x1d6a6, 0x1d6a7}, {0x1d7cc, 0x1d7cd}, {0x1da8c, 0x1da9a}, {0x1daa0, 0x1daa0},
    {0x1dab0, 0x1deff}, {0x1df1f, 0x1df24}, {0x1df2b, 0x1dfff}, {0x1e007, 0x1e007}, {0x1e019, 0x1e01a},
    {0x1e022, 0x1e022}, {0x1e025, 0x1e025}, {0x1e02b, 0x1e02f}, {0x1e06e, 0x1e08e}, {0x1e090, 0x1e0ff},
    {0x1e12d, 0x1e12f}, {0x1e13e, 0x1e13f}, {0x1e14a, 0x1e14d}, {0x1e150, 0x1e28f}, {0x1e2af, 0x1e2bf},
    {0x1e2fa, 0x1e2fe}, {0x1e300, 0x1e4cf}, {0x1e4fa, 0x1e7df}, {0x1e7e7, 0x1e7e7}, {0x1e7ec, 0x1e7ec},
    {0x1e7ef, 0x1e7ef}, {0x1e7ff, 0x1e7ff}, {0x1e8c5, 0x1e8c6}, {0x1e8d7, 0x1e8ff}, {0x1e94c, 0x1e94f},
    {0x1e95a, 0x1e95d}, {0x1e960, 0x1ec70}, {0x1ecb5, 0x1ed00}, {0x1ed3e, 0x1edff}, {0x1ee04, 0x1ee04},
    {0x1ee20, 0x1ee20}, {0x1ee23, 0x1ee23}, {0x1ee25, 0x1ee26}, {0x1ee28, 0x1ee28}, {0x1ee33, 0x1ee33},
    {0x1ee38, 0x1ee38}, {0x1ee3a, 0x1ee3a}, {0x1ee3c, 0x1ee41}, {0x1ee43, 0x1ee46}, {0x1ee48, 0x1ee48},
    {0x1ee4a, 0x1ee4a}, {0x1ee4c, 0x1ee4c}, {0x1ee50, 0x1ee50}, {0x1ee53, 0x1ee53}, {0x1ee55, 0x1ee56},
    {0x1ee58, 0x1ee58}, {0x1ee5a, 0x1ee5a}, {0x1ee5c, 0x1ee5c}, {0x1ee5e, 0x1ee5e}, {0x1ee60, 0x1ee60},
    {0x1ee63, 0x1ee63}, {0x1ee65, 0x1ee66}, {0x1ee6b, 0x1ee6b}, {0x1ee73, 0x1ee73}, {0x1ee78, 0x1ee78},
    {0x1ee7d, 0x1ee7d}, {0x1ee7f, 0x1ee7f}, {0x1ee8a, 0x1ee8a}, {0x1ee9c, 0x1eea0}, {0x1eea4, 0x1eea4},
    {0x1eeaa, 0x1eeaa}, {0x1eebc, 0x1eeef}, {0x1eef2, 0x1efff}, {0x1f02c, 0x1f02f}, {0x1f094, 0x1f09f},
    {0x1f0af, 0x1f0b0}, {0x1f0c0, 0x1f0c0}, {0x1f0d0, 0x1f0d0}, {0x1f0f6, 0x1f0ff}, {0x1f1ae, 0x1f1e5},
    {0x1f203, 0x1f20f}, {0x1f23c, 0x1f23f}, {0x1f249, 0x1f24f}, {0x1f252, 0x1f25f}, {0x1f266, 0x1f2ff},
    {0x1f6d8, 0x1f6db}, {0x1f6ed, 0x1f6ef}, {0x1f6fd, 0x1f6ff}, {0x1f777, 0x1f77a}, {0x1f7da, 0x1f7df},
    {0x1f7ec, 0x1f7ef}, {0x1f7f1, 0x1f7ff}, {0x1f80c, 0x1f80f}, {0x1f848, 0x1f84f}, {0x1f85a, 0x1f85f},
    {0x1f888, 0x1f88f}, {0x1f8ae, 0x1f8af}, {0x1f8b2, 0x1f8ff}, {0x1fa54, 0x1fa5f}, {0x1fa6e, 0x1fa6f},
    {0x1fa7d, 0x1fa7f}, {0x1fa89, 0x1fa8f}, {0x1fabe, 0x1fabe}, {0x1fac6, 0x1facd}, {0x1fadc, 0x1fadf},
    {0x1fae9, 0x1faef}, {0x1faf9, 0x1faff}, {0x1fb93, 0x1fb93}, {0x1fbcb, 0x1fbef}, {0x1fbfa, 0x1ffff},
    {0x2a6e0, 0x2a6ff}, {0x2b73a, 0x2b73f}, {0x2b81e, 0x2b81f}, {0x2cea2, 0x2ceaf}, {0x2ebe1, 0x2ebef},
    {0x2ee5e, 0x2f7ff}, {0x2fa1e, 0x2ffff}, {0x3134b, 0x3134f}, {0x323b0, 0xe00ff}, {0xe01f0, 0x10ffff},
};

bool printable(std::uint32_t cp) {
  if (cp < 0x80) return cp >= 0x20 && cp < 0x7f;
  auto it = std::upper_bound(std::begin(kNotPrintable), std::end(kNotPrintable), cp,
                             [](std::uint32_t c, const auto& range) { return c < range.first; });
  return it == std::begin(kNotPrintable) || cp > std::prev(it)->second;
}

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

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

}  // namespace

std::variant<PyValue, std::string> decode_pickle(std::string_view bytes, const PickleLimits& limits) {
  return Unpickler(bytes, limits).run();
}

std::variant<PyValue, std::string> decode_pickle_hex(std::string_view hex, const PickleLimits& limits) {
  if (hex.size() % 2 != 0) return std::string("malformed pickled value: odd number of hex digits");
  if (hex.size() / 2 > limits.max_bytes)
    return fmt::format("pickle of {} bytes is larger than the limit of {}", hex.size() / 2, limits.max_bytes);
  std::string bytes(hex.size() / 2, '\0');
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    const int hi = hex_digit(hex[2 * i]), lo = hex_digit(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) {
      const std::size_t at = hi < 0 ? 2 * i : 2 * i + 1;
      return fmt::format("malformed pickled value: '{}' at hex digit {} is not lowercase hex",
                         log::printable(hex.substr(at, 1), 4), at);
    }
    bytes[i] = static_cast<char>(hi << 4 | lo);
  }
  return decode_pickle(bytes, limits);
}

std::string encode_pickle(const PyValue& value) { return Pickler().run(value); }

std::string encode_pickle_hex(const PyValue& value) {
  static constexpr char kDigits[] = "0123456789abcdef";
  const std::string bytes = encode_pickle(value);
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out += kDigits[c >> 4];
    out += kDigits[c & 15];
  }
  return out;
}

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
