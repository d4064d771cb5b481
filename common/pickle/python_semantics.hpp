// Python's semantics for the codec: integers beyond 64 bits, decimal.Decimal's text, dict keys compared
// with Python's equality, the datetime classes' states and checks, and pathlib's parsing. The decoder,
// the encoder and repr()/str() share them.
#pragma once

#include "common/pickle/pickle_value.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rjg::pickle {

void put_le(std::string& out, std::uint64_t v, int width);

// --- python_numbers.cpp: integers beyond 64 bits: magnitudes in base 2^32, least significant word
// first, no high zero words.
using Words = std::vector<std::uint32_t>;

void trim(Words& w);
Words words_from_twos_complement(std::string_view le, bool& negative);  // LONG1 and LONG4
std::string twos_complement(const Words& w, bool negative);  // the shortest, as CPython's encode_long
Words words_from_u64(std::uint64_t v);
std::size_t bit_length(const Words& w);
bool bit_at(const Words& w, std::size_t i);
bool fits_int64(const Words& w, bool negative, std::int64_t& out);
std::optional<double> words_as_double(const Words& w);  // the double exactly equal to the magnitude
std::uint32_t divide(Words& w, std::uint32_t d);        // in place; returns the remainder
std::string words_to_decimal(const Words& w);           // quadratic: callers bound what they convert
Words words_from_decimal(std::string_view digits);      // ASCII digits only
bool all_digits(std::string_view s);
bool parse_big_decimal(std::string_view text, bool& negative, Words& w);  // "-123..."

// decimal.Decimal's text: what its constructor accepts (libmpdec's syntax, CPython's exactness), and
// what str() prints.
struct DecimalNumber {
  enum class Kind { finite, infinity, nan, snan };
  bool negative = false;
  Kind kind = Kind::finite;
  std::string digits;  // finite: the coefficient, no leading zeros ("0" for zero); NaN: the payload, maybe empty
  std::int64_t exponent = 0;
};
std::optional<DecimalNumber> parse_decimal(std::string_view text);
std::string decimal_text(const DecimalNumber& d);  // Decimal.__str__

// --- python_keys.cpp: dict keys and set elements: Python's equality as a canonical string. Equal
// values (1, 1.0, True, Decimal('1.0')) get the same string; a NaN is only equal to itself (the same
// object, named by identity).
void put_int_key(std::string& out, std::int64_t v);
void put_double_key(std::string& out, double x, std::uint32_t identity);
void put_bigint_key(std::string& out, const Words& w, bool negative, std::string_view decimal_digits);
bool put_decimal_key(std::string& out, const DecimalNumber& d, std::uint32_t identity);  // false: sNaN

// --- python_dates_paths.cpp: datetime: the states the classes' __reduce__ produce, and the checks
// their constructors make.
constexpr std::int64_t kMicrosPerDay = 86400LL * 1000000;
bool valid_date(int y, int m, int d);
bool valid_time(int h, int mi, int s, int us, int fold);
bool valid_offset(int seconds);
std::int64_t days_before(int y, int m, int d);  // days since 0001-01-01
std::string date_state(int y, int m, int d);
std::string time_state(int h, int mi, int s, int us);
// timedelta(days, seconds, microseconds) as Python normalizes it; false beyond timedelta.max.
// Arguments within +-2^100, days within +-2^64.
bool normalize_timedelta(__int128 days, __int128 seconds, __int128 micros, PyTimedelta& out);

// pathlib: str() of PosixPath(*segments), in CPython 3.8 to 3.13 (all parse only text), and the parts
// 3.8 to 3.12 pickle.
std::string posix_path_text(const std::vector<std::string_view>& segments);
std::vector<std::string> posix_path_parts(const std::string& path);

// --- unicode_printable.cpp: CPython 3.13's str.isprintable() of one code point.
bool printable(std::uint32_t cp);

}  // namespace rjg::pickle
