#include "common/log.hpp"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <ctime>
#include <mutex>
#include <string>

namespace rjg::log {
namespace {
std::atomic<Level> g_level{Level::info};
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
}  // namespace

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

void set_level(Level level) { g_level = level; }
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

void write(Level level, std::string_view text) {
  using namespace std::chrono;
  const auto now = system_clock::now();
  const auto secs = system_clock::to_time_t(now);
  const auto millis = duration_cast<milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&secs, &tm);
  std::lock_guard lock(g_mutex);
  std::string line = fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z {} {:5} {}\n", tm.tm_year + 1900,
                                 tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, millis, g_program,
                                 name_of(level), text);
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
