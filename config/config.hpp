// The gateway's configuration model, loaded from TOML and validated strictly at start-up.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace rjg::config {

using Duration = std::chrono::milliseconds;

// One address to listen on, from "tcp://HOST:PORT" (HOST may be an IPv6 literal in brackets).
struct ListenAddress {
  std::string host;  // "127.0.0.1", "localhost" or an IPv6 address without its brackets ("::1")
  unsigned short port = 0;
  std::string text;  // as written, for log lines
};

struct Library {
  std::string name;
  // command[0] without a slash is looked up in PATH (then next to the gateway) at spawn time; with a
  // slash it has been made absolute against the configuration file's directory.
  std::vector<std::string> command;
  std::map<std::string, std::string> env;    // added to the worker's environment
  std::optional<std::string> cwd;              // absolute (relative ones resolved against the file's directory)
  Duration startup_timeout{std::chrono::seconds(30)};  // spawn until the worker answers initialize
  Duration shutdown_grace{std::chrono::seconds(5)};    // shutdown/exit until SIGTERM, and SIGTERM until SIGKILL
  int source_line = 0;                                 // where the [[library]] table starts
};

struct Gateway {
  std::vector<ListenAddress> listen;
  std::string log_level = "info";
  Duration drain_timeout{std::chrono::seconds(30)};  // on SIGTERM: how long keywords in flight may finish
  std::size_t max_message_bytes = 64u * 1024 * 1024;
};

struct Config {
  std::string path;  // the file it was loaded from
  Gateway gateway;
  std::vector<Library> libraries;

  const Library* find_library(std::string_view name) const;
};

// All problems found in a file, each "FILE:LINE:COLUMN: what is wrong".
struct ConfigError : std::runtime_error {
  explicit ConfigError(std::vector<std::string> problems);
  std::vector<std::string> problems;
};

// Loads and validates; throws ConfigError listing every problem found.
Config load_file(const std::string& path);
// Same, from text (path is used in messages only).
Config load_string(std::string_view text, const std::string& path);

// Parses "500ms", "30s", "5m", "2h" or a number of seconds (integer or float). Returns nullopt if invalid.
std::optional<Duration> parse_duration(std::string_view text);

// Parses "tcp://HOST:PORT" (HOST: IPv4 literal, localhost, or [IPv6]; PORT 0-65535, 0 picks a free port).
// Returns nullopt if invalid, and says why in *why when given.
std::optional<ListenAddress> parse_listen_address(std::string_view text, std::string* why = nullptr);

}  // namespace rjg::config
