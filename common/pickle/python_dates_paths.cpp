// The datetime classes' states and checks, and pathlib's parsing, as CPython has them.
#include "common/pickle/python_semantics.hpp"

#include <fmt/format.h>

#include <array>

namespace rjg::pickle {
namespace {

constexpr std::int64_t kMaxTimedeltaDays = 999999999;  // datetime.timedelta.max.days

bool is_leap(int y) { return y % 4 == 0 && (y % 100 != 0 || y % 400 == 0); }

int days_in_month(int y, int m) {
  static constexpr std::array<int, 13> kDays{0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  return m == 2 && is_leap(y) ? 29 : kDays[static_cast<std::size_t>(m)];
}
}  // namespace

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

}  // namespace rjg::pickle
