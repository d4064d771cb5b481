// Inside the loader: collects the problems of one file, and reads typed values from TOML nodes, each
// check recording a problem and going on, so that one run reports everything that is wrong.
#pragma once

#include "config/config.hpp"

#include <toml++/toml.h>

#include <cstdint>
#include <filesystem>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace rjg::config::detail {

inline constexpr std::int64_t kNoMax = std::numeric_limits<std::int64_t>::max();

class Reader {
 public:
  explicit Reader(std::string path);

  // Problems: "FILE:LINE:COLUMN: message".
  void problem(const toml::source_region& region, std::string_view message);
  void problem_at_start(std::string_view message);  // at 1:1, before every other problem
  std::size_t problem_count() const { return problems_.size(); }
  // Throws ConfigError with every problem, in file order (tables are visited in key order, not in the
  // order they were written).
  [[noreturn]] void throw_problems();

  // Relative paths in the file are relative to the file, not to wherever the gateway was started.
  std::filesystem::path resolve(std::string_view path) const;

  // "'KEY' is a string, expected EXPECTED".
  void wrong_type(const toml::node& node, std::string_view key, std::string_view expected);
  const toml::table* expect_table(const toml::node& node, std::string_view key, std::string_view example);
  std::optional<std::string> get_string(const toml::node& node, std::string_view key);
  std::optional<bool> get_bool(const toml::node& node, std::string_view key);
  // Strings handed to execve end at a NUL; TOML allows "\u0000", so refuse it rather than truncate.
  bool no_nul(const toml::node& node, std::string_view key, std::string_view value);

  // A number of seconds, or a string for parse_duration.
  std::optional<Duration> get_duration(const toml::node& node, std::string_view key);
  // An integer from min to max (kNoMax: no upper bound); `note` follows the range in messages, and
  // `expected` replaces the range in the message for a value that is not an integer.
  std::optional<std::int64_t> get_integer(const toml::node& node, std::string_view key, std::int64_t min,
                                          std::int64_t max, std::string_view note = {},
                                          std::string_view expected = {});
  // A byte size: a TOML integer or a string for parse_size. Values from 1 to min - 1 are refused (0 only
  // when zero_ok) as the unit was surely forgotten.
  std::optional<std::uint64_t> get_size(const toml::node& node, std::string_view key, bool zero_ok = true,
                                        std::uint64_t min = 0);
  // One of a few names (`what`: "a pickle policy"), as its index. With hints, a near miss ("data_only")
  // is pointed at the name it was meant to be, and the names are listed for a value that is not a string.
  std::optional<std::size_t> get_choice(const toml::node& node, std::string_view key, std::string_view what,
                                        std::span<const std::string_view> names, bool hints);

 private:
  struct Problem {
    std::uint32_t line, column;
    std::string text;
  };

  std::string path_;
  std::filesystem::path base_dir_;
  std::vector<Problem> problems_;
};

// The node's type with its article: "a string", "an integer", "a table".
std::string a_type(const toml::node& node);
// Classic edit distance, to suggest the known key a typo was meant to be.
std::size_t edit_distance(std::string_view a, std::string_view b);
// "a, b, c".
std::string join(std::span<const std::string_view> words);
// "512MiB" for whole binary units, else the number of bytes.
std::string format_size(std::uint64_t bytes);
// The duration as the shortest string parse_duration reads back ("30s", "2m", "500ms"); "0" for 0.
std::string format_duration(Duration d);

}  // namespace rjg::config::detail
