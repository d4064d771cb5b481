// Diagnostics go to stderr, one line per event; stdout is reserved for protocol frames.
#pragma once

#include <fmt/format.h>

#include <string_view>

namespace rjg::log {

enum class Level { debug = 0, info = 1, warn = 2, error = 3 };

void set_level(Level level);
Level level();
// Parses "debug", "info", "warn" or "error"; returns false for anything else.
bool parse_level(std::string_view text, Level& out);
// Prefix every line with a program name, e.g. "gateway" or "worker TestLibrary".
void set_program(std::string_view name);
void write(Level level, std::string_view text);

// Bytes made safe for a log line: control and non-ASCII bytes escaped, cut after `max` bytes.
std::string printable(std::string_view bytes, std::size_t max = 120);

template <typename... Args>
void debug(fmt::format_string<Args...> f, Args&&... args) {
  if (level() <= Level::debug) write(Level::debug, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void info(fmt::format_string<Args...> f, Args&&... args) {
  if (level() <= Level::info) write(Level::info, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void warn(fmt::format_string<Args...> f, Args&&... args) {
  if (level() <= Level::warn) write(Level::warn, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void error(fmt::format_string<Args...> f, Args&&... args) {
  write(Level::error, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace rjg::log
