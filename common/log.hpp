// Diagnostics go to stderr, one line per event; stdout is reserved for protocol frames. A line is text
// ("2026-12-01T08:00:00.123Z gateway INFO  what happened") or one JSON object (log_format = "json"); when
// stderr is the journal it carries a syslog priority prefix ("<6>") instead of a timestamp.
#pragma once

#include <fmt/format.h>

#include <string_view>

namespace rjg::log {

enum class Level { debug = 0, info = 1, warn = 2, error = 3 };

enum class Format { text, json };

void set_level(Level level);
void set_format(Format format);
// Parses "text" or "json"; returns false for anything else.
bool parse_format(std::string_view text, Format& out);
// When JOURNAL_STREAM names stderr's device and inode (systemd connected stderr to the journal), lines
// get a "<N>" priority prefix, which journald turns into the entry's priority, and no timestamp (the
// journal has its own). Returns whether it does.
bool use_journal_if_stderr_is_it();
Level level();
// Parses "debug", "info", "warn" or "error"; returns false for anything else.
bool parse_level(std::string_view text, Level& out);
// Prefix every line with a program name, e.g. "gateway" or "worker TestLibrary".
void set_program(std::string_view name);
void write(Level level, std::string_view text);

// One line as written for `level` and `text` now (a newline at the end).
std::string format_line(Level level, std::string_view text);

// Bytes made safe for a log line: control and non-ASCII bytes escaped, cut after `max` bytes.
std::string printable(std::string_view bytes, std::size_t max = 120);
// Text made valid UTF-8, for messages that carry what a process printed: each byte of an invalid
// sequence becomes U+FFFD, and a text longer than `max` bytes is cut at a character boundary and ends
// in "...". (A peer drops a message whose JSON holds invalid UTF-8: the answer would never arrive.)
std::string valid_utf8(std::string_view text, std::size_t max = std::string_view::npos);

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
