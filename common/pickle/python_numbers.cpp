// Integers beyond 64 bits and decimal.Decimal's text, as Python reads and prints them.
#include "common/pickle/python_semantics.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <limits>

namespace rjg::pickle {

void put_le(std::string& out, std::uint64_t v, int width) {
  for (int i = 0; i < width; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
}

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

namespace {

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

}  // namespace

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

}  // namespace rjg::pickle
