#include "common/log.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include <atomic>
#include <chrono>
#include <ctime>
#include <mutex>
#include <string>

namespace rjg::log {
namespace {
std::atomic<Level> g_level{Level::info};
std::atomic<Format> g_format{Format::text};
std::atomic<bool> g_journal{false};
std::string g_program = "rjg";
std::mutex g_mutex;

std::string_view name_of(Level level) {
  switch (level) {
    case Level::debug: return "DEBUG";
    case Level::info: return "INFO";
    case Level::warn: return "WARN";
    case Level::error: return "ERROR";
  }
  return "?";
}

// The length of the valid UTF-8 sequence at text[i] (i < size), or 0 when it is not one: overlong
// forms, surrogates and code points past U+10FFFF are invalid, as in JSON.
std::size_t utf8_sequence(std::string_view text, std::size_t i) {
  const auto c = static_cast<unsigned char>(text[i]);
  if (c < 0x80) return 1;
  const std::size_t n = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
  bool valid = n > 0 && i + n <= text.size();
  for (std::size_t k = 1; valid && k < n; ++k) valid = (static_cast<unsigned char>(text[i + k]) & 0xc0) == 0x80;
  if (valid && n == 3) {
    const auto c1 = static_cast<unsigned char>(text[i + 1]);
    valid = !(c == 0xe0 && c1 < 0xa0) && !(c == 0xed && c1 >= 0xa0);
  }
  if (valid && n == 4) {
    const auto c1 = static_cast<unsigned char>(text[i + 1]);
    valid = !(c == 0xf0 && c1 < 0x90) && !(c == 0xf4 && c1 >= 0x90);
  }
  return valid ? n : 0;
}

constexpr std::string_view kReplacement = "\xef\xbf\xbd";  // U+FFFD
}  // namespace

std::string valid_utf8(std::string_view text, std::size_t max) {
  std::string out;
  out.reserve(std::min(text.size(), max));
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t n = utf8_sequence(text, i);
    const std::string_view piece = n ? text.substr(i, n) : kReplacement;
    if (out.size() + piece.size() > max) {
      // Cut at the last character that leaves room for the ellipsis.
      while (!out.empty() && out.size() + 3 > max) {
        std::size_t back = out.size() - 1;
        while (back > 0 && (static_cast<unsigned char>(out[back]) & 0xc0) == 0x80) --back;
        out.resize(back);
      }
      out += "...";
      break;
    }
    out += piece;
    i += n ? n : 1;
  }
  return out;
}

std::string printable(std::string_view bytes, std::size_t max) {
  std::string out;
  for (char c : bytes.substr(0, max)) {
    auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7f && c != '\\') out += c;
    else if (c == '\\') out += "\\\\";
    else if (c == '\r') out += "\\r";
    else if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else out += fmt::format("\\x{:02x}", u);
  }
  if (bytes.size() > max) out += fmt::format("... ({} bytes)", bytes.size());
  return out;
}

// syslog(3) priorities, as journald reads them from a "<N>" prefix.
int priority_of(Level level) {
  switch (level) {
    case Level::debug: return 7;
    case Level::info: return 6;
    case Level::warn: return 4;
    case Level::error: return 3;
  }
  return 6;
}

// `text` as the inside of a JSON string: ", \ and control characters escaped, valid UTF-8 as is, and
// each byte of an invalid sequence as U+FFFD, so that every line is valid JSON.
void append_json_string(std::string& out, std::string_view text) {
  for (std::size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
      ++i;
    } else if (c < 0x20) {
      out += fmt::format("\\u{:04x}", c);
      ++i;
    } else if (const std::size_t n = utf8_sequence(text, i)) {
      out.append(text.substr(i, n));
      i += n;
    } else {
      out += kReplacement;
      ++i;
    }
  }
}

void set_level(Level level) { g_level = level; }
void set_format(Format format) { g_format = format; }

bool parse_format(std::string_view text, Format& out) {
  if (text == "text") out = Format::text;
  else if (text == "json") out = Format::json;
  else return false;
  return true;
}

bool use_journal_if_stderr_is_it() {
  const char* stream = std::getenv("JOURNAL_STREAM");
  struct stat st {};
  unsigned long long dev = 0, ino = 0;
  const bool ours = stream && std::sscanf(stream, "%llu:%llu", &dev, &ino) == 2 && ::fstat(STDERR_FILENO, &st) == 0 &&
                    static_cast<unsigned long long>(st.st_dev) == dev && static_cast<unsigned long long>(st.st_ino) == ino;
  g_journal = ours;
  return ours;
}
Level level() { return g_level; }

bool parse_level(std::string_view text, Level& out) {
  if (text == "debug") out = Level::debug;
  else if (text == "info") out = Level::info;
  else if (text == "warn" || text == "warning") out = Level::warn;
  else if (text == "error") out = Level::error;
  else return false;
  return true;
}

void set_program(std::string_view name) {
  std::lock_guard lock(g_mutex);
  g_program = name;
}

std::string format_line(Level level, std::string_view text) {
  using namespace std::chrono;
  const auto now = system_clock::now();
  const auto secs = system_clock::to_time_t(now);
  const auto millis = duration_cast<milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&secs, &tm);
  const bool journal = g_journal;
  std::string line = journal ? fmt::format("<{}>", priority_of(level)) : std::string();
  std::string program;
  {
    std::lock_guard lock(g_mutex);
    program = g_program;
  }
  if (g_format == Format::json) {
    line += fmt::format("{{\"time\":\"{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z\",\"level\":\"{}\",\"program\":\"",
                        tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, millis,
                        name_of(level));
    append_json_string(line, program);
    line += "\",\"message\":\"";
    append_json_string(line, text);
    line += "\"}\n";
  } else if (journal) {
    line += fmt::format("{} {:5} {}\n", program, name_of(level), text);
  } else {
    line += fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z {} {:5} {}\n", tm.tm_year + 1900, tm.tm_mon + 1,
                        tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, millis, program, name_of(level), text);
  }
  return line;
}

void write(Level level, std::string_view text) {
  const std::string line = format_line(level, text);
  std::lock_guard lock(g_mutex);
  // One write(2) per line keeps lines whole when several processes share the stream.
  const char* p = line.data();
  size_t left = line.size();
  while (left > 0) {
    ssize_t n = ::write(STDERR_FILENO, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
}

}  // namespace rjg::log
