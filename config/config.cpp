#include "config/config.hpp"

#include <fmt/format.h>
#include <toml++/toml.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <initializer_list>
#include <set>
#include <string_view>
#include <tuple>

namespace rjg::config {
namespace fs = std::filesystem;

namespace {

constexpr std::size_t kMaxMessageBytesLimit = 1024u * 1024 * 1024;  // 1 GiB
// Durations above this (about 31 years) are surely typos and would overflow arithmetic later.
constexpr long double kMaxDurationMs = 1e12L;

constexpr std::string_view kDurationHelp =
    "expected a non-negative number of seconds or a string such as \"500ms\", \"30s\", \"5m\", \"2h\"";

std::string join(std::initializer_list<std::string_view> words) {
  std::string out;
  for (auto w : words) {
    if (!out.empty()) out += ", ";
    out += w;
  }
  return out;
}

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

// Classic edit distance, to suggest the known key a typo was meant to be.
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

std::string with_article(std::string_view word) {
  bool vowel = !word.empty() && std::string_view("aeiou").find(word[0]) != std::string_view::npos;
  return fmt::format("{} {}", vowel ? "an" : "a", word);
}

bool valid_env_name(std::string_view name) {
  if (name.empty()) return false;
  auto alpha = [](char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_'; };
  if (!alpha(name[0])) return false;
  return std::all_of(name.begin() + 1, name.end(), [&](char c) { return alpha(c) || (c >= '0' && c <= '9'); });
}

bool has_space_or_control(std::string_view s) {
  return std::any_of(s.begin(), s.end(), [](char c) {
    auto u = static_cast<unsigned char>(c);
    return u <= 0x20 || u == 0x7f;
  });
}

std::optional<Duration> duration_from_ms(long double ms) {
  if (!std::isfinite(ms) || ms < 0 || ms > kMaxDurationMs) return std::nullopt;
  return Duration(static_cast<Duration::rep>(std::llround(ms)));
}

// Validates and loads one document; every check records a problem and goes on, so that one run
// reports everything that is wrong.
class Loader {
 public:
  explicit Loader(std::string path) : path_(std::move(path)) {
    std::error_code ec;
    fs::path p = fs::absolute(fs::path(path_), ec);
    base_dir_ = ec ? fs::current_path() : p.parent_path();
  }

  Config load(std::string_view text) {
    Config config;
    config.path = path_;
    config.gateway.listen.push_back(ListenAddress{"127.0.0.1", 8271, "tcp://127.0.0.1:8271"});

    toml::table root;
    try {
      root = toml::parse(text, path_);
    } catch (const toml::parse_error& e) {
      problem(e.source(), fmt::format("TOML syntax error: {}", e.description()));
      throw_problems();
    }

    check_keys(root, "the top level", {"gateway", "defaults", "library"});

    if (auto* node = root.get("gateway")) {
      if (auto* table = expect_table(*node, "gateway", "[gateway]")) load_gateway(*table, config.gateway);
    }

    Defaults defaults;
    if (auto* node = root.get("defaults")) {
      if (auto* table = expect_table(*node, "defaults", "[defaults]")) load_defaults(*table, defaults);
    }

    auto* libraries = root.get("library");
    if (!libraries) {
      problem_at_start(
          "no library is configured; expected at least one [[library]] table with a name and a command");
    } else if (!libraries->is_array_of_tables()) {
      std::string what = libraries->is_table()                                     ? "a single table ([library])"
                         : libraries->is_array() && libraries->as_array()->empty() ? "an empty array"
                         : libraries->is_array()                                   ? "an array of non-tables"
                                                   : with_article(type_name(libraries->type()));
      problem(libraries->source(),
              fmt::format("'library' is {}, expected one or more [[library]] tables (with double brackets)", what));
    } else {
      std::size_t index = 0;
      for (auto& element : *libraries->as_array()) {
        Library library;
        library.startup_timeout = defaults.startup_timeout;
        library.shutdown_grace = defaults.shutdown_grace;
        if (load_library(*element.as_table(), index, library)) config.libraries.push_back(std::move(library));
        ++index;
      }
    }

    if (!problems_.empty()) throw_problems();
    return config;
  }

 private:
  struct Defaults {
    Duration startup_timeout{std::chrono::seconds(30)};
    Duration shutdown_grace{std::chrono::seconds(5)};
  };

  std::string where(const toml::source_region& region) const {
    if (region.begin.line == 0) return fmt::format("{}:1:1", path_);
    return fmt::format("{}:{}:{}", path_, region.begin.line, region.begin.column);
  }
  void problem(const toml::source_region& region, std::string_view message) {
    problems_.push_back({region.begin.line, region.begin.column, fmt::format("{}: {}", where(region), message)});
  }
  void problem_at_start(std::string_view message) {
    problems_.push_back({0, 0, fmt::format("{}:1:1: {}", path_, message)});
  }

  // Reported in file order (tables are visited in key order, not in the order they were written).
  [[noreturn]] void throw_problems() {
    std::stable_sort(problems_.begin(), problems_.end(), [](const Problem& a, const Problem& b) {
      return std::tie(a.line, a.column) < std::tie(b.line, b.column);
    });
    std::vector<std::string> texts;
    for (auto& p : problems_) texts.push_back(std::move(p.text));
    throw ConfigError(std::move(texts));
  }

  // Every key must be known: a typo would otherwise silently fall back to a default.
  void check_keys(const toml::table& table, std::string_view context, std::initializer_list<std::string_view> known) {
    for (auto&& [key, value] : table) {
      std::string_view name = key.str();
      if (std::find(known.begin(), known.end(), name) != known.end()) continue;
      std::string_view suggestion;
      std::size_t best = 3;
      for (auto k : known) {
        auto d = edit_distance(name, k);
        if (d < best && d <= std::max<std::size_t>(1, k.size() / 3)) {
          best = d;
          suggestion = k;
        }
      }
      // "startup" for "startup_timeout": a truncated key.
      if (suggestion.empty() && name.size() >= 4)
        for (auto k : known)
          if (k.starts_with(name)) suggestion = k;
      problem(key.source(), fmt::format("unknown key '{}' in {}{}; known keys are: {}", name, context,
                                        suggestion.empty() ? "" : fmt::format(" (did you mean '{}'?)", suggestion),
                                        join(known)));
    }
  }

  void wrong_type(const toml::node& node, std::string_view key, std::string_view expected) {
    problem(node.source(), fmt::format("'{}' is {}, expected {}", key, with_article(type_name(node.type())), expected));
  }

  const toml::table* expect_table(const toml::node& node, std::string_view key, std::string_view example) {
    if (auto* table = node.as_table()) return table;
    wrong_type(node, key, fmt::format("a table ({})", example));
    return nullptr;
  }

  std::optional<std::string> get_string(const toml::node& node, std::string_view key) {
    if (auto* s = node.as_string()) return s->get();
    wrong_type(node, key, "a string");
    return std::nullopt;
  }

  // Strings handed to execve end at a NUL; TOML allows "\u0000", so refuse it rather than truncate.
  bool no_nul(const toml::node& node, std::string_view key, std::string_view value) {
    if (value.find('\0') == std::string_view::npos) return true;
    problem(node.source(), fmt::format("'{}' contains a NUL character (\\u0000); expected text without it", key));
    return false;
  }

  std::optional<Duration> get_duration(const toml::node& node, std::string_view key) {
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

  void load_gateway(const toml::table& table, Gateway& gateway) {
    check_keys(table, "[gateway]", {"listen", "log_level", "drain_timeout", "max_message_bytes"});

    if (auto* node = table.get("listen")) {
      if (auto* array = node->as_array()) {
        std::vector<ListenAddress> listen;
        std::set<std::pair<std::string, unsigned short>> seen;
        for (std::size_t i = 0; i < array->size(); ++i) {
          const toml::node& element = *array->get(i);
          auto key = fmt::format("gateway.listen[{}]", i);
          auto text = get_string(element, key);
          if (!text) continue;
          std::string why;
          auto address = parse_listen_address(*text, &why);
          if (!address) {
            problem(element.source(), fmt::format("'{}' = \"{}\" is not a listen address: {}; expected "
                                                  "\"tcp://HOST:PORT\" with HOST an IPv4 address, localhost or "
                                                  "[IPv6], for example \"tcp://127.0.0.1:8271\"",
                                                  key, *text, why));
            continue;
          }
          if (address->port != 0 && !seen.emplace(address->host, address->port).second) {
            problem(element.source(), fmt::format("'{}' = \"{}\" is listed twice; expected each address once", key, *text));
            continue;
          }
          listen.push_back(std::move(*address));
        }
        if (array->empty())
          problem(node->source(), "'gateway.listen' is empty; expected at least one \"tcp://HOST:PORT\" address");
        gateway.listen = std::move(listen);
      } else {
        wrong_type(*node, "gateway.listen", "an array of strings such as [\"tcp://127.0.0.1:8271\"]");
      }
    }

    if (auto* node = table.get("log_level")) {
      if (auto level = get_string(*node, "gateway.log_level")) {
        static constexpr std::string_view kLevels[] = {"debug", "info", "warn", "error"};
        if (std::find(std::begin(kLevels), std::end(kLevels), *level) == std::end(kLevels))
          problem(node->source(), fmt::format("'gateway.log_level' = \"{}\" is not a log level; expected one of: "
                                              "debug, info, warn, error",
                                              *level));
        else
          gateway.log_level = *level;
      }
    }

    if (auto* node = table.get("drain_timeout")) {
      if (auto d = get_duration(*node, "gateway.drain_timeout")) gateway.drain_timeout = *d;
    }

    if (auto* node = table.get("max_message_bytes")) {
      if (auto* i = node->as_integer()) {
        if (i->get() < 1 || static_cast<std::uint64_t>(i->get()) > kMaxMessageBytesLimit)
          problem(node->source(), fmt::format("'gateway.max_message_bytes' = {} is out of range; expected an integer "
                                              "from 1 to {} (1 GiB)",
                                              i->get(), kMaxMessageBytesLimit));
        else
          gateway.max_message_bytes = static_cast<std::size_t>(i->get());
      } else {
        wrong_type(*node, "gateway.max_message_bytes", "an integer number of bytes, such as 67108864");
      }
    }
  }

  void load_defaults(const toml::table& table, Defaults& defaults) {
    check_keys(table, "[defaults]", {"startup_timeout", "shutdown_grace"});
    if (auto* node = table.get("startup_timeout")) {
      if (auto d = get_duration(*node, "defaults.startup_timeout")) defaults.startup_timeout = *d;
    }
    if (auto* node = table.get("shutdown_grace")) {
      if (auto d = get_duration(*node, "defaults.shutdown_grace")) defaults.shutdown_grace = *d;
    }
  }

  // Relative paths in the file are relative to the file, not to wherever the gateway was started.
  fs::path resolve(std::string_view path) const {
    fs::path p(path);
    if (p.is_relative()) p = base_dir_ / p;
    return p.lexically_normal();
  }

  bool load_library(const toml::table& table, std::size_t index, Library& library) {
    const std::size_t before = problems_.size();
    const std::string prefix = fmt::format("library[{}]", index);
    library.source_line = static_cast<int>(table.source().begin.line);

    check_keys(table, fmt::format("[[library]] table {}", prefix),
               {"name", "command", "env", "cwd", "startup_timeout", "shutdown_grace"});

    if (auto* node = table.get("name")) {
      if (auto name = get_string(*node, prefix + ".name")) {
        if (name->empty() || has_space_or_control(*name)) {
          problem(node->source(), fmt::format("'{}.name' = \"{}\" is not a valid library name; expected a non-empty "
                                              "name without spaces or control characters, as clients import it",
                                              prefix, *name));
        } else if (auto [it, fresh] = names_.emplace(*name, library.source_line); !fresh) {
          problem(node->source(), fmt::format("duplicate library name \"{}\" (first defined on line {}); expected "
                                              "each [[library]] name to be unique",
                                              *name, it->second));
        }
        library.name = *name;
      }
    } else {
      problem(table.source(), fmt::format("[[library]] table {} has no 'name'; expected the name clients import, "
                                          "such as name = \"Calculator\"",
                                          prefix));
    }

    if (auto* node = table.get("command")) {
      if (auto* array = node->as_array()) {
        if (array->empty())
          problem(node->source(), fmt::format("'{}.command' is empty; expected the program and its arguments, "
                                              "such as [\"robot-example-calculator\"]",
                                              prefix));
        for (std::size_t i = 0; i < array->size(); ++i) {
          const toml::node& element = *array->get(i);
          auto key = fmt::format("{}.command[{}]", prefix, i);
          auto arg = get_string(element, key);
          if (!arg) continue;
          if (arg->empty()) {
            problem(element.source(), fmt::format("'{}' is an empty string; expected a non-empty {}", key,
                                                  i == 0 ? "program name or path" : "argument"));
            continue;
          }
          if (!no_nul(element, key, *arg)) continue;
          if (i == 0 && arg->find('/') != std::string::npos) *arg = resolve(*arg).string();
          library.command.push_back(std::move(*arg));
        }
      } else {
        wrong_type(*node, prefix + ".command", "an array of strings such as [\"robot-example-calculator\"]");
      }
    } else {
      problem(table.source(), fmt::format("[[library]] table {} has no 'command'; expected the worker program and "
                                          "its arguments, such as command = [\"robot-example-calculator\"]",
                                          prefix));
    }

    if (auto* node = table.get("env")) {
      if (auto* env = node->as_table()) {
        for (auto&& [key, value] : *env) {
          auto full = fmt::format("{}.env.{}", prefix, key.str());
          if (!valid_env_name(key.str()))
            problem(key.source(), fmt::format("'{}' is not a valid environment variable name; expected letters, "
                                              "digits and '_', not starting with a digit",
                                              full));
          if (auto text = get_string(value, full); text && no_nul(value, full, *text))
            library.env.emplace(std::string(key.str()), std::move(*text));
        }
      } else {
        wrong_type(*node, prefix + ".env", "a table of strings such as { DISPLAY = \":99\" }");
      }
    }

    if (auto* node = table.get("cwd")) {
      if (auto cwd = get_string(*node, prefix + ".cwd")) {
        if (cwd->empty()) {
          problem(node->source(), fmt::format("'{}.cwd' is empty; expected a directory path (absolute, or relative "
                                              "to the configuration file)",
                                              prefix));
        } else if (no_nul(*node, prefix + ".cwd", *cwd)) {
          fs::path dir = resolve(*cwd);
          std::error_code ec;
          auto status = fs::status(dir, ec);
          if (ec || !fs::exists(status))
            problem(node->source(), fmt::format("'{}.cwd' = \"{}\": directory {} does not exist{}; expected an "
                                                "existing directory",
                                                prefix, *cwd, dir.string(),
                                                ec && ec != std::errc::no_such_file_or_directory
                                                    ? fmt::format(" or cannot be read ({})", ec.message())
                                                    : ""));
          else if (!fs::is_directory(status))
            problem(node->source(), fmt::format("'{}.cwd' = \"{}\": {} is not a directory; expected an existing "
                                                "directory",
                                                prefix, *cwd, dir.string()));
          library.cwd = dir.string();
        }
      }
    }

    if (auto* node = table.get("startup_timeout")) {
      if (auto d = get_duration(*node, prefix + ".startup_timeout")) library.startup_timeout = *d;
    }
    if (auto* node = table.get("shutdown_grace")) {
      if (auto d = get_duration(*node, prefix + ".shutdown_grace")) library.shutdown_grace = *d;
    }
    return problems_.size() == before;
  }

  struct Problem {
    std::uint32_t line, column;
    std::string text;
  };

  std::string path_;
  fs::path base_dir_;
  std::vector<Problem> problems_;
  std::map<std::string, int> names_;  // library name -> line of its [[library]]
};

std::string join_problems(const std::vector<std::string>& problems) {
  std::string out;
  for (const auto& p : problems) {
    if (!out.empty()) out += '\n';
    out += p;
  }
  return out;
}

}  // namespace

ConfigError::ConfigError(std::vector<std::string> problems_in)
    : std::runtime_error(join_problems(problems_in)), problems(std::move(problems_in)) {}

const Library* Config::find_library(std::string_view name) const {
  for (const auto& library : libraries)
    if (library.name == name) return &library;
  return nullptr;
}

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
  return duration_from_ms(std::strtold(number.c_str(), nullptr) * factor);
}

std::optional<ListenAddress> parse_listen_address(std::string_view text, std::string* why) {
  auto fail = [&](std::string reason) -> std::optional<ListenAddress> {
    if (why) *why = std::move(reason);
    return std::nullopt;
  };
  constexpr std::string_view kScheme = "tcp://";
  if (text.substr(0, kScheme.size()) != kScheme) return fail("it does not start with tcp://");
  std::string_view rest = text.substr(kScheme.size());

  std::string host;
  std::string_view port_text;
  if (!rest.empty() && rest.front() == '[') {
    auto close = rest.find(']');
    if (close == std::string_view::npos) return fail("the IPv6 address has no closing ']'");
    host = std::string(rest.substr(1, close - 1));
    in6_addr addr6{};
    if (inet_pton(AF_INET6, host.c_str(), &addr6) != 1)
      return fail(fmt::format("'{}' is not an IPv6 address", host));
    rest.remove_prefix(close + 1);
    if (rest.empty() || rest.front() != ':') return fail("the port is missing after the address");
    port_text = rest.substr(1);
  } else {
    auto colon = rest.rfind(':');
    if (colon == std::string_view::npos) return fail("the port is missing (\":PORT\")");
    host = std::string(rest.substr(0, colon));
    port_text = rest.substr(colon + 1);
    if (host.empty()) return fail("the host is missing");
    in_addr addr4{};
    if (host != "localhost" && inet_pton(AF_INET, host.c_str(), &addr4) != 1) {
      if (host.find(':') != std::string::npos) return fail("an IPv6 address must be written in brackets");
      return fail(fmt::format("'{}' is neither an IPv4 address nor localhost", host));
    }
  }
  if (port_text.empty()) return fail("the port is missing");
  if (port_text.size() > 5 || !std::all_of(port_text.begin(), port_text.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return fail(fmt::format("port '{}' is not a number from 1 to 65535", port_text));
  unsigned long port = std::stoul(std::string(port_text));
  if (port > 65535) return fail(fmt::format("port {} is not from 1 to 65535", port));
  return ListenAddress{std::move(host), static_cast<unsigned short>(port), std::string(text)};
}

Config load_string(std::string_view text, const std::string& path) { return Loader(path).load(text); }

Config load_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw ConfigError({fmt::format("{}: cannot read: {}", path, std::strerror(errno))});
  std::string text;
  char buffer[65536];
  for (;;) {
    ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      throw ConfigError({fmt::format("{}: cannot read: {}", path, std::strerror(err))});
    }
    if (n == 0) break;
    text.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return load_string(text, path);
}

}  // namespace rjg::config
