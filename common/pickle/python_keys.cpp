// Python's equality of dict keys and set elements, as canonical strings.
#include "common/pickle/python_semantics.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

namespace rjg::pickle {
namespace {

// An exact value beyond int64 and the doubles: sign, digits without trailing zeros, exponent.
void put_exact_key(std::string& out, bool negative, std::string_view digits, std::int64_t exponent) {
  auto end = digits.find_last_not_of('0');
  std::int64_t zeros = static_cast<std::int64_t>(digits.size() - end - 1);
  out += fmt::format("d{}{}e{}", negative ? '-' : '+', digits.substr(0, end + 1), exponent + zeros);
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


}  // namespace

void put_int_key(std::string& out, std::int64_t v) { out += fmt::format("i{}", v); }

void put_double_key(std::string& out, double x, std::uint32_t identity) {
  if (std::isnan(x)) out += fmt::format("n{}", identity);
  else if (std::isinf(x)) out += x < 0 ? "F-" : "F+";
  else if (x == 0) out += "i0";
  else if (x == std::trunc(x) && x >= -0x1p63 && x < 0x1p63) put_int_key(out, static_cast<std::int64_t>(x));
  else out += fmt::format("f{:016x}", std::bit_cast<std::uint64_t>(x));
}

void put_bigint_key(std::string& out, const Words& w, bool negative, std::string_view decimal_digits) {
  if (auto x = words_as_double(w)) {
    put_double_key(out, negative ? -*x : *x, 0);
    return;
  }
  put_exact_key(out, negative, decimal_digits, 0);
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

}  // namespace rjg::pickle
