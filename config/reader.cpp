#include "config/reader.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <tuple>
#include <utility>

namespace rjg::config {
namespace detail {
namespace {

namespace fs = std::filesystem;

// Durations above this (about 31 years) are surely typos and would overflow arithmetic later.
constexpr long double kMaxDurationMs = 1e12L;

constexpr std::string_view kDurationHelp =
    "expected a non-negative number of seconds or a string such as \"500ms\", \"30s\", \"5m\", \"2h\"";
constexpr std::string_view kSizeHelp =
    "expected a non-negative integer number of bytes or a string such as \"4096\", \"64KiB\", \"512MiB\", "
    "\"2GiB\"";

std::string_view type_name(toml::node_type type) {
  switch (type) {
    case toml::node_type::table: return "table";
    case toml::node_type::array: return "array";
    case toml::node_type::string: return "string";
    case toml::node_type::integer: return "integer";
    case toml::node_type::floating_point: return "float";
    case toml::node_type::boolean: return "boolean";
    case toml::node_type::date: return "date";
    case toml::node_type::time: return "time";
    case toml::node_type::date_time: return "date-time";
    default: return "nothing";
  }
}

std::optional<Duration> duration_from_ms(long double ms) {
  if (!std::isfinite(ms) || ms < 0 || ms > kMaxDurationMs) return std::nullopt;
  return Duration(static_cast<Duration::rep>(std::llround(ms)));
}

}  // namespace

std::string a_type(const toml::node& node) {
  std::string_view word = type_name(node.type());
  bool vowel = !word.empty() && std::string_view("aeiou").find(word[0]) != std::string_view::npos;
  return fmt::format("{} {}", vowel ? "an" : "a", word);
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t above = row[j];
      std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + cost});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::string join(std::span<const std::string_view> words) {
  std::string out;
  for (auto w : words) {
    if (!out.empty()) out += ", ";
    out += w;
  }
  return out;
}

std::string format_size(std::uint64_t bytes) {
  static constexpr std::pair<std::uint64_t, std::string_view> kUnits[] = {
      {1ull << 40, "TiB"}, {1ull << 30, "GiB"}, {1ull << 20, "MiB"}, {1ull << 10, "KiB"}};
  for (auto [factor, unit] : kUnits)
    if (bytes >= factor && bytes % factor == 0) return fmt::format("{}{}", bytes / factor, unit);
  return std::to_string(bytes);
}

std::string format_duration(Duration d) {
  static constexpr std::pair<Duration::rep, std::string_view> kUnits[] = {
      {3600 * 1000, "h"}, {60 * 1000, "m"}, {1000, "s"}};
  if (d.count() == 0) return "0";
  for (auto [factor, unit] : kUnits)
    if (d.count() % factor == 0) return fmt::format("{}{}", d.count() / factor, unit);
  return fmt::format("{}ms", d.count());
}

Reader::Reader(std::string path) : path_(std::move(path)) {
  std::error_code ec;
  fs::path p = fs::absolute(fs::path(path_), ec);
  base_dir_ = ec ? fs::current_path() : p.parent_path();
}

void Reader::problem(const toml::source_region& region, std::string_view message) {
  auto where = region.begin.line == 0 ? fmt::format("{}:1:1", path_)
                                      : fmt::format("{}:{}:{}", path_, region.begin.line, region.begin.column);
  problems_.push_back({region.begin.line, region.begin.column, fmt::format("{}: {}", where, message)});
}

void Reader::problem_at_start(std::string_view message) {
  problems_.push_back({0, 0, fmt::format("{}:1:1: {}", path_, message)});
}

void Reader::throw_problems() {
  std::stable_sort(problems_.begin(), problems_.end(), [](const Problem& a, const Problem& b) {
    return std::tie(a.line, a.column) < std::tie(b.line, b.column);
  });
  std::vector<std::string> texts;
  for (auto& p : problems_) texts.push_back(std::move(p.text));
  throw ConfigError(std::move(texts));
}

fs::path Reader::resolve(std::string_view path) const {
  fs::path p(path);
  if (p.is_relative()) p = base_dir_ / p;
  return p.lexically_normal();
}

void Reader::wrong_type(const toml::node& node, std::string_view key, std::string_view expected) {
  problem(node.source(), fmt::format("'{}' is {}, expected {}", key, a_type(node), expected));
}

const toml::table* Reader::expect_table(const toml::node& node, std::string_view key, std::string_view example) {
  if (auto* table = node.as_table()) return table;
  wrong_type(node, key, fmt::format("a table ({})", example));
  return nullptr;
}

std::optional<std::string> Reader::get_string(const toml::node& node, std::string_view key) {
  if (auto* s = node.as_string()) return s->get();
  wrong_type(node, key, "a string");
  return std::nullopt;
}

std::optional<bool> Reader::get_bool(const toml::node& node, std::string_view key) {
  if (auto* b = node.as_boolean()) return b->get();
  wrong_type(node, key, "true or false");
  return std::nullopt;
}

bool Reader::no_nul(const toml::node& node, std::string_view key, std::string_view value) {
  if (value.find('\0') == std::string_view::npos) return true;
  problem(node.source(), fmt::format("'{}' contains a NUL character (\\u0000); expected text without it", key));
  return false;
}

std::optional<Duration> Reader::get_duration(const toml::node& node, std::string_view key) {
  std::optional<Duration> result;
  std::string shown;
  if (auto* i = node.as_integer()) {
    result = duration_from_ms(static_cast<long double>(i->get()) * 1000);
    shown = std::to_string(i->get());
  } else if (auto* f = node.as_floating_point()) {
    result = duration_from_ms(static_cast<long double>(f->get()) * 1000);
    shown = fmt::format("{}", f->get());
  } else if (auto* s = node.as_string()) {
    result = parse_duration(s->get());
    shown = fmt::format("\"{}\"", s->get());
  } else {
    wrong_type(node, key, fmt::format("a duration: {}", kDurationHelp.substr(9)));
    return std::nullopt;
  }
  if (!result) problem(node.source(), fmt::format("'{}' = {} is not a valid duration; {}", key, shown, kDurationHelp));
  return result;
}

std::optional<std::int64_t> Reader::get_integer(const toml::node& node, std::string_view key, std::int64_t min,
                                                std::int64_t max, std::string_view note, std::string_view expected) {
  std::string range = max == kNoMax ? fmt::format("an integer of at least {}", min)
                                    : fmt::format("an integer from {} to {}", min, max);
  if (!note.empty()) range += fmt::format(" ({})", note);
  auto* i = node.as_integer();
  if (!i) {
    wrong_type(node, key, expected.empty() ? std::string_view(range) : expected);
    return std::nullopt;
  }
  if (i->get() < min || i->get() > max) {
    problem(node.source(), fmt::format("'{}' = {} is out of range; expected {}", key, i->get(), range));
    return std::nullopt;
  }
  return i->get();
}

std::optional<std::uint64_t> Reader::get_size(const toml::node& node, std::string_view key, bool zero_ok,
                                              std::uint64_t min) {
  std::optional<std::uint64_t> result;
  std::string shown;
  if (auto* i = node.as_integer()) {
    if (i->get() >= 0) result = static_cast<std::uint64_t>(i->get());
    shown = std::to_string(i->get());
  } else if (auto* s = node.as_string()) {
    result = parse_size(s->get());
    shown = fmt::format("\"{}\"", s->get());
  } else {
    wrong_type(node, key, fmt::format("a size: {}", kSizeHelp.substr(9)));
    return std::nullopt;
  }
  if (!result) {
    problem(node.source(), fmt::format("'{}' = {} is not a valid size; {}", key, shown, kSizeHelp));
    return std::nullopt;
  }
  if ((*result == 0 && !zero_ok) || (*result != 0 && *result < min)) {
    problem(node.source(),
            fmt::format("'{}' = {} is {} bytes, less than {}; expected {}at least {} (write the unit, such as "
                        "\"512MiB\"){}",
                        key, shown, *result, format_size(min), zero_ok ? "0 or " : "", format_size(min),
                        zero_ok ? "" : ", or leave the key out for no limit"));
    return std::nullopt;
  }
  return result;
}

std::optional<std::size_t> Reader::get_choice(const toml::node& node, std::string_view key, std::string_view what,
                                              std::span<const std::string_view> names, bool hints) {
  auto text = node.as_string();
  if (!text) {
    wrong_type(node, key, hints ? fmt::format("a string, one of: {}", join(names)) : "a string");
    return std::nullopt;
  }
  std::string_view given = text->get();
  std::string_view suggestion;
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (names[i] == given) return i;
    bool same_but_case = given.size() == names[i].size() &&
                         std::equal(given.begin(), given.end(), names[i].begin(), [](char a, char b) {
                           return std::tolower(static_cast<unsigned char>(a)) == b;
                         });
    if (hints && (same_but_case || edit_distance(given, names[i]) <= 2)) suggestion = names[i];
  }
  problem(node.source(), fmt::format("'{}' = \"{}\" is not {}{}; expected one of: {}", key, given, what,
                                     suggestion.empty() ? "" : fmt::format(" (did you mean \"{}\"?)", suggestion),
                                     join(names)));
  return std::nullopt;
}

}  // namespace detail

std::optional<Duration> parse_duration(std::string_view text) {
  // NUMBER [UNIT], NUMBER = digits ["." digits]; strict on purpose: no signs, spaces or exponents.
  std::size_t i = 0;
  auto digits = [&] {
    std::size_t start = i;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9') ++i;
    return i - start;
  };
  if (digits() == 0) return std::nullopt;
  if (i < text.size() && text[i] == '.') {
    ++i;
    if (digits() == 0) return std::nullopt;
  }
  std::string number(text.substr(0, i));
  std::string_view unit = text.substr(i);
  long double factor;
  if (unit.empty() || unit == "s") factor = 1000;
  else if (unit == "ms") factor = 1;
  else if (unit == "m") factor = 60 * 1000;
  else if (unit == "h") factor = 60 * 60 * 1000;
  else return std::nullopt;
  if (number.size() > 30) return std::nullopt;
  return detail::duration_from_ms(std::strtold(number.c_str(), nullptr) * factor);
}

std::optional<std::uint64_t> parse_size(std::string_view text) {
  // DIGITS [UNIT]; strict like durations: no signs, spaces, fractions or exponents.
  std::size_t i = 0;
  std::uint64_t value = 0;
  constexpr std::uint64_t kMax = std::numeric_limits<std::uint64_t>::max();
  for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) {
    auto digit = static_cast<std::uint64_t>(text[i] - '0');
    if (value > (kMax - digit) / 10) return std::nullopt;
    value = value * 10 + digit;
  }
  if (i == 0) return std::nullopt;
  static constexpr std::pair<std::string_view, int> kUnits[] = {
      {"", 0},    {"B", 0},    {"K", 10},  {"KB", 10}, {"KiB", 10}, {"M", 20},  {"MB", 20},  {"MiB", 20},
      {"G", 30},  {"GB", 30},  {"GiB", 30}, {"T", 40}, {"TB", 40},  {"TiB", 40}};
  std::string_view unit = text.substr(i);
  for (auto [name, shift] : kUnits) {
    if (name != unit) continue;
    if (value > (kMax >> shift)) return std::nullopt;
    return value << shift;
  }
  return std::nullopt;
}

}  // namespace rjg::config
