#include "config/config.hpp"

#include <fmt/format.h>
#include <toml++/toml.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <initializer_list>
#include <limits>
#include <set>
#include <string_view>
#include <tuple>
#include <utility>

namespace rjg::config {
namespace fs = std::filesystem;

namespace {

constexpr std::size_t kMaxMessageBytesLimit = 1024u * 1024 * 1024;  // 1 GiB
// Durations above this (about 31 years) are surely typos and would overflow arithmetic later.
constexpr long double kMaxDurationMs = 1e12L;

constexpr std::string_view kDurationHelp =
    "expected a non-negative number of seconds or a string such as \"500ms\", \"30s\", \"5m\", \"2h\"";
constexpr std::string_view kSizeHelp =
    "expected a non-negative integer number of bytes or a string such as \"4096\", \"64KiB\", \"512MiB\", "
    "\"2GiB\"";

constexpr std::int64_t kNoMax = std::numeric_limits<std::int64_t>::max();
constexpr std::uint64_t kMiB = 1024u * 1024;

constexpr std::size_t kMaxPrewarm = 64;
constexpr std::size_t kMinHeaderBytes = 256;
constexpr std::size_t kMaxHeaderBytes = 1024u * 1024;
constexpr std::size_t kMinJsonDepth = 8;
constexpr std::size_t kMaxJsonDepth = 1024;
// A keyword timeout below this is surely seconds meant as milliseconds ("5ms" for 5 s): no keyword call
// through two processes completes that fast reliably.
constexpr Duration kMinKeywordTimeout{10};
// Below these a worker cannot even start (address space) or is recycled after every keyword (resident
// size): surely a value written without its unit, such as 512 for 512 MiB.
constexpr std::uint64_t kMinAddressSpace = 16 * kMiB;
constexpr std::uint64_t kMinMaxRss = 1 * kMiB;

// Keys shared by [defaults] and [[library]] (a library's own value wins), in documentation order.
constexpr std::string_view kSettingKeys[] = {
    "startup_timeout", "shutdown_grace", "isolation", "prewarm", "max_workers", "queue_timeout", "keyword_timeout",
    "max_keywords", "max_age", "max_rss", "max_imports_per_worker", "rlimits", "pickle",
};
constexpr std::string_view kLibraryOnlyKeys[] = {"name", "command", "env", "cwd"};
constexpr std::string_view kGatewayKeys[] = {
    "listen", "log_level", "drain_timeout", "max_message_bytes", "max_workers", "max_header_bytes",
    "max_json_depth", "handshake_timeout", "read_timeout", "idle_timeout", "max_sessions",
    "max_sessions_per_client", "allow_from",
};
constexpr std::string_view kRlimitKeys[] = {"address_space", "open_files", "cpu_seconds", "processes", "core_size"};

constexpr std::pair<std::string_view, Isolation> kIsolations[] = {{"session", Isolation::session},
                                                                  {"shared", Isolation::shared}};
constexpr std::pair<std::string_view, PicklePolicy> kPicklePolicies[] = {
    {"allow", PicklePolicy::allow}, {"data-only", PicklePolicy::data_only}, {"deny", PicklePolicy::deny}};

template <class Words>
std::string join(const Words& words) {
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

bool contains(const auto& words, std::string_view word) {
  return std::find(std::begin(words), std::end(words), word) != std::end(words);
}

// The table a key belongs in when it is written in the wrong one, for the unknown-key message.
std::string_view home_of(std::string_view key) {
  if (contains(kSettingKeys, key)) return contains(kGatewayKeys, key) ? "" : "[defaults] or [[library]]";
  if (contains(kLibraryOnlyKeys, key)) return "each [[library]]";
  if (contains(kGatewayKeys, key)) return "[gateway]";
  if (contains(kRlimitKeys, key)) return "an rlimits table";
  return "";
}

// "512MiB" for whole binary units, else the number of bytes.
std::string format_size(std::uint64_t bytes) {
  static constexpr std::pair<std::uint64_t, std::string_view> kUnits[] = {
      {1ull << 40, "TiB"}, {1ull << 30, "GiB"}, {1ull << 20, "MiB"}, {1ull << 10, "KiB"}};
  for (auto [factor, unit] : kUnits)
    if (bytes >= factor && bytes % factor == 0) return fmt::format("{}{}", bytes / factor, unit);
  return std::to_string(bytes);
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

    // [defaults] is a library template: every [[library]] starts as a copy of it.
    Library defaults;
    if (auto* node = root.get("defaults")) {
      if (auto* table = expect_table(*node, "defaults", "[defaults]")) {
        defaults_table_ = table;
        load_defaults(*table, defaults);
      }
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
      std::vector<std::size_t> loaded;  // index in the array of each library in config.libraries
      for (auto& element : *libraries->as_array()) {
        Library library = defaults;
        if (load_library(*element.as_table(), index, library)) {
          config.libraries.push_back(std::move(library));
          loaded.push_back(index);
        }
        ++index;
      }
      check_total_prewarm(*libraries->as_array(), config, loaded);
    }

    if (!problems_.empty()) throw_problems();
    return config;
  }

 private:
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
  void check_keys(const toml::table& table, std::string_view context, const std::vector<std::string_view>& known) {
    for (auto&& [key, value] : table) {
      std::string_view name = key.str();
      if (std::find(known.begin(), known.end(), name) != known.end()) continue;
      if (auto home = home_of(name); !home.empty()) {
        problem(key.source(), fmt::format("unknown key '{}' in {} (it belongs in {}); known keys are: {}", name,
                                          context, home, join(known)));
        continue;
      }
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

  // A duration that must not be 0 (a timeout that has no "none").
  std::optional<Duration> get_positive_duration(const toml::node& node, std::string_view key) {
    auto d = get_duration(node, key);
    if (d && d->count() == 0) {
      problem(node.source(), fmt::format("'{}' is 0; expected a duration of at least 1ms, such as \"10s\"", key));
      return std::nullopt;
    }
    return d;
  }

  // An integer from min to max (kNoMax: no upper bound); `note` follows the range in messages.
  std::optional<std::int64_t> get_integer(const toml::node& node, std::string_view key, std::int64_t min,
                                          std::int64_t max, std::string_view note = {}) {
    std::string range = max == kNoMax ? fmt::format("an integer of at least {}", min)
                                      : fmt::format("an integer from {} to {}", min, max);
    if (!note.empty()) range += fmt::format(" ({})", note);
    auto* i = node.as_integer();
    if (!i) {
      wrong_type(node, key, range);
      return std::nullopt;
    }
    if (i->get() < min || i->get() > max) {
      problem(node.source(), fmt::format("'{}' = {} is out of range; expected {}", key, i->get(), range));
      return std::nullopt;
    }
    return i->get();
  }

  template <class To>
  void set_integer(const toml::table& table, std::string_view name, std::string_view prefix, To& target,
                   std::int64_t min, std::int64_t max = kNoMax, std::string_view note = {}) {
    if (auto* node = table.get(name))
      if (auto i = get_integer(*node, fmt::format("{}.{}", prefix, name), min, max, note))
        target = static_cast<To>(*i);
  }

  // A byte size: a TOML integer or a string for parse_size. Values from 1 to min - 1 are refused (0 only
  // when zero_ok) as the unit was surely forgotten.
  std::optional<std::uint64_t> get_size(const toml::node& node, std::string_view key, bool zero_ok = true,
                                        std::uint64_t min = 0) {
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

  // One of a few names; a near miss ("data_only") is pointed at the name it was meant to be.
  template <class E, std::size_t N>
  std::optional<E> get_enum(const toml::node& node, std::string_view key, std::string_view what,
                            const std::pair<std::string_view, E> (&values)[N]) {
    std::string known;
    for (auto& [name, value] : values) known += (known.empty() ? "" : ", ") + std::string(name);
    auto text = node.as_string();
    if (!text) {
      wrong_type(node, key, fmt::format("a string, one of: {}", known));
      return std::nullopt;
    }
    std::string_view given = text->get();
    std::string_view suggestion;
    for (auto& [name, value] : values) {
      if (name == given) return value;
      bool same_but_case = given.size() == name.size() &&
                           std::equal(given.begin(), given.end(), name.begin(), [](char a, char b) {
                             return std::tolower(static_cast<unsigned char>(a)) == b;
                           });
      if (same_but_case || edit_distance(given, name) <= 2) suggestion = name;
    }
    problem(node.source(), fmt::format("'{}' = \"{}\" is not {}{}; expected one of: {}", key, given, what,
                                       suggestion.empty() ? "" : fmt::format(" (did you mean \"{}\"?)", suggestion),
                                       known));
    return std::nullopt;
  }

  void load_gateway(const toml::table& table, Gateway& gateway) {
    check_keys(table, "[gateway]", {std::begin(kGatewayKeys), std::end(kGatewayKeys)});

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

    set_integer(table, "max_workers", "gateway", gateway.max_workers, 0, kNoMax, "0: no cap");
    set_integer(table, "max_header_bytes", "gateway", gateway.max_header_bytes, kMinHeaderBytes, kMaxHeaderBytes,
                "1 MiB");
    set_integer(table, "max_json_depth", "gateway", gateway.max_json_depth, kMinJsonDepth, kMaxJsonDepth);
    if (auto* node = table.get("handshake_timeout")) {
      if (auto d = get_positive_duration(*node, "gateway.handshake_timeout")) gateway.handshake_timeout = *d;
    }
    if (auto* node = table.get("read_timeout")) {
      if (auto d = get_positive_duration(*node, "gateway.read_timeout")) gateway.read_timeout = *d;
    }
    if (auto* node = table.get("idle_timeout")) {
      if (auto d = get_duration(*node, "gateway.idle_timeout")) gateway.idle_timeout = *d;
    }
    set_integer(table, "max_sessions", "gateway", gateway.max_sessions, 0, kNoMax, "0: no limit");
    set_integer(table, "max_sessions_per_client", "gateway", gateway.max_sessions_per_client, 0, kNoMax,
                "0: no limit");

    if (auto* node = table.get("allow_from")) {
      if (auto* array = node->as_array()) {
        std::vector<Network> networks;
        std::vector<std::size_t> indices;  // allow_from index of each network kept
        for (std::size_t i = 0; i < array->size(); ++i) {
          const toml::node& element = *array->get(i);
          auto key = fmt::format("gateway.allow_from[{}]", i);
          auto text = get_string(element, key);
          if (!text) continue;
          std::string why;
          auto network = parse_network(*text, &why);
          if (!network) {
            problem(element.source(), fmt::format("'{}' = \"{}\" is not a network: {}; expected an IPv4 or IPv6 "
                                                  "address with an optional /PREFIX, such as \"10.0.0.0/8\", "
                                                  "\"192.168.1.7\" or \"fd00::/8\"",
                                                  key, *text, why));
            continue;
          }
          auto same = std::find_if(networks.begin(), networks.end(), [&](const Network& n) {
            return n.v6 == network->v6 && n.prefix == network->prefix && n.bytes == network->bytes;
          });
          if (same != networks.end()) {
            problem(element.source(), fmt::format("'{}' = \"{}\" is the same network as 'gateway.allow_from[{}]' = "
                                                  "\"{}\"{}; expected each network once",
                                                  key, *text, indices[same - networks.begin()], same->text,
                                                  same->text == *text ? "" : " (address bits after the prefix are "
                                                                             "ignored)"));
            continue;
          }
          networks.push_back(std::move(*network));
          indices.push_back(i);
        }
        gateway.allow_from = std::move(networks);
      } else {
        wrong_type(*node, "gateway.allow_from", "an array of strings such as [\"10.0.0.0/8\", \"::1\"]");
      }
    }
  }

  void load_defaults(const toml::table& table, Library& defaults) {
    check_keys(table, "[defaults]", {std::begin(kSettingKeys), std::end(kSettingKeys)});
    load_settings(table, "defaults", defaults);
    check_prewarm_cap(table, "defaults", defaults);
  }

  // The keys [defaults] and [[library]] share; `prefix` names the table in messages ("library[2]").
  void load_settings(const toml::table& table, const std::string& prefix, Library& library) {
    auto key = [&](std::string_view name) { return fmt::format("{}.{}", prefix, name); };

    if (auto* node = table.get("startup_timeout")) {
      if (auto d = get_duration(*node, key("startup_timeout"))) library.startup_timeout = *d;
    }
    if (auto* node = table.get("shutdown_grace")) {
      if (auto d = get_duration(*node, key("shutdown_grace"))) library.shutdown_grace = *d;
    }
    if (auto* node = table.get("isolation")) {
      if (auto v = get_enum(*node, key("isolation"), "an isolation mode", kIsolations)) library.isolation = *v;
    }
    set_integer(table, "prewarm", prefix, library.prewarm, 0, kMaxPrewarm);
    set_integer(table, "max_workers", prefix, library.max_workers, 0, kNoMax, "0: no cap of its own");
    if (auto* node = table.get("queue_timeout")) {
      if (auto d = get_duration(*node, key("queue_timeout"))) library.queue_timeout = *d;
    }
    if (auto* node = table.get("keyword_timeout")) {
      if (auto d = get_duration(*node, key("keyword_timeout"))) {
        if (d->count() > 0 && *d < kMinKeywordTimeout)
          problem(node->source(), fmt::format("'{}' = {}ms is shorter than {}ms, surely a unit mistake; expected 0 "
                                              "(none) or at least {}ms (a number without a unit is seconds: 30 or "
                                              "\"30s\")",
                                              key("keyword_timeout"), d->count(), kMinKeywordTimeout.count(),
                                              kMinKeywordTimeout.count()));
        else
          library.keyword_timeout = *d;
      }
    }
    set_integer(table, "max_keywords", prefix, library.max_keywords, 0, kNoMax, "0: never");
    if (auto* node = table.get("max_age")) {
      if (auto d = get_duration(*node, key("max_age"))) library.max_age = *d;
    }
    if (auto* node = table.get("max_rss")) {
      if (auto size = get_size(*node, key("max_rss"), true, kMinMaxRss)) library.max_rss = *size;
    }
    set_integer(table, "max_imports_per_worker", prefix, library.max_imports_per_worker, 1);
    if (auto* node = table.get("rlimits")) {
      if (auto* rlimits = node->as_table()) {
        // The table replaces the one from [defaults] as a whole, so a library can drop a limit.
        library.rlimits = load_rlimits(*rlimits, key("rlimits"));
      } else {
        wrong_type(*node, key("rlimits"), "a table such as { open_files = 1024, address_space = \"4GiB\" }");
      }
    }
    if (auto* node = table.get("pickle")) {
      if (auto v = get_enum(*node, key("pickle"), "a pickle policy", kPicklePolicies)) library.pickle = *v;
    }
  }

  ResourceLimits load_rlimits(const toml::table& table, const std::string& prefix) {
    ResourceLimits limits;
    check_keys(table, prefix, {std::begin(kRlimitKeys), std::end(kRlimitKeys)});
    if (auto* node = table.get("address_space")) {
      if (auto size = get_size(*node, prefix + ".address_space", false, kMinAddressSpace)) limits.address_space = *size;
    }
    set_integer(table, "open_files", prefix, limits.open_files, 16);
    set_integer(table, "cpu_seconds", prefix, limits.cpu_seconds, 1);
    set_integer(table, "processes", prefix, limits.processes, 1);
    if (auto* node = table.get("core_size")) {
      if (auto size = get_size(*node, prefix + ".core_size")) {
        limits.core_size = *size;
        limits.core_size_set = true;
      }
    }
    return limits;
  }

  // The key a library's setting comes from in messages: its own, else the one in [defaults].
  std::string setting_key(const toml::table& table, std::string_view prefix, std::string_view name) const {
    if (table.get(name) || !defaults_table_ || !defaults_table_->get(name)) return fmt::format("{}.{}", prefix, name);
    return fmt::format("defaults.{}", name);
  }

  // prewarm workers can never all start when the library may have fewer. Checked for [defaults] itself, and for
  // a library that sets one of the two (a conflict inside [defaults] is reported once, there).
  void check_prewarm_cap(const toml::table& table, std::string_view prefix, const Library& library) {
    if (library.max_workers == 0 || library.prewarm <= library.max_workers) return;
    const toml::node* own = table.get("prewarm") ? table.get("prewarm") : table.get("max_workers");
    if (!own) return;
    problem(own->source(), fmt::format("'{}' = {} is more than '{}' = {}; expected prewarm to be at most "
                                       "max_workers (or max_workers = 0: no cap of the library's own)",
                                       setting_key(table, prefix, "prewarm"), library.prewarm,
                                       setting_key(table, prefix, "max_workers"), library.max_workers));
  }

  // All prewarmed workers run at once, so together they must fit under [gateway] max_workers. Reported once,
  // at the library that goes over.
  void check_total_prewarm(const toml::array& tables, const Config& config, const std::vector<std::size_t>& loaded) {
    const std::size_t cap = config.gateway.max_workers;
    if (cap == 0) return;
    std::size_t total = 0;
    for (std::size_t i = 0; i < loaded.size(); ++i) {
      const Library& library = config.libraries[i];
      total += library.prewarm;
      if (total <= cap) continue;
      const auto& table = *tables.get(loaded[i])->as_table();
      auto prefix = fmt::format("library[{}]", loaded[i]);
      auto* own = table.get("prewarm");
      problem(own ? own->source() : table.source(),
              fmt::format("'{}' = {} brings the prewarmed workers of all libraries to {}, more than "
                          "'gateway.max_workers' = {}; expected the prewarm values together to be at most "
                          "gateway.max_workers (0: no cap)",
                          setting_key(table, prefix, "prewarm"), library.prewarm, total, cap));
      return;
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

    std::vector<std::string_view> known(std::begin(kLibraryOnlyKeys), std::end(kLibraryOnlyKeys));
    known.insert(known.end(), std::begin(kSettingKeys), std::end(kSettingKeys));
    check_keys(table, fmt::format("[[library]] table {}", prefix), known);

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

    load_settings(table, prefix, library);
    check_prewarm_cap(table, prefix, library);
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
  const toml::table* defaults_table_ = nullptr;  // [defaults], when present and a table
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

std::string_view to_string(Isolation isolation) {
  for (auto [name, value] : kIsolations)
    if (value == isolation) return name;
  return "?";
}

std::string_view to_string(PicklePolicy policy) {
  for (auto [name, value] : kPicklePolicies)
    if (value == policy) return name;
  return "?";
}

namespace {

constexpr unsigned char kMappedPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

bool is_v4_mapped(const unsigned char* bytes16) { return std::memcmp(bytes16, kMappedPrefix, 12) == 0; }

// Whether the first `prefix` bits of a and b are equal.
bool same_prefix(const unsigned char* a, const unsigned char* b, int prefix) {
  int whole = prefix / 8;
  if (std::memcmp(a, b, static_cast<std::size_t>(whole)) != 0) return false;
  int rest = prefix % 8;
  if (rest == 0) return true;
  auto mask = static_cast<unsigned char>(0xff << (8 - rest));
  return (a[whole] & mask) == (b[whole] & mask);
}

}  // namespace

bool Network::contains_bytes(bool address_v6, const unsigned char* address) const {
  if (!v6) {
    if (!address_v6) return same_prefix(bytes.data(), address, prefix);
    return is_v4_mapped(address) && same_prefix(bytes.data(), address + 12, prefix);
  }
  if (address_v6) return same_prefix(bytes.data(), address, prefix);
  unsigned char mapped[16];
  std::memcpy(mapped, kMappedPrefix, 12);
  std::memcpy(mapped + 12, address, 4);
  return same_prefix(bytes.data(), mapped, prefix);
}

bool Network::contains(std::string_view ip_text) const {
  // A scope ("fe80::1%eth0") does not change which network an address is in.
  std::string text(ip_text.substr(0, ip_text.find('%')));
  unsigned char address[16];
  if (text.find(':') != std::string::npos) {
    if (inet_pton(AF_INET6, text.c_str(), address) != 1) return false;
    return contains_bytes(true, address);
  }
  if (inet_pton(AF_INET, text.c_str(), address) != 1) return false;
  return contains_bytes(false, address);
}

std::optional<Network> parse_network(std::string_view text, std::string* why) {
  auto fail = [&](std::string reason) -> std::optional<Network> {
    if (why) *why = std::move(reason);
    return std::nullopt;
  };
  if (text.empty()) return fail("it is empty");
  Network network;
  network.text = std::string(text);
  auto slash = text.find('/');
  std::string address(text.substr(0, slash));
  if (address.empty()) return fail("the address is missing");
  network.v6 = address.find(':') != std::string::npos;
  if (network.v6) {
    if (address.front() == '[') return fail("an IPv6 network is written without brackets");
    if (inet_pton(AF_INET6, address.c_str(), network.bytes.data()) != 1)
      return fail(fmt::format("'{}' is not an IPv6 address", address));
  } else if (inet_pton(AF_INET, address.c_str(), network.bytes.data()) != 1) {
    return fail(fmt::format("'{}' is not an IPv4 address", address));
  }
  const int bits = network.v6 ? 128 : 32;
  network.prefix = bits;
  if (slash != std::string_view::npos) {
    std::string_view prefix = text.substr(slash + 1);
    bool digits = !prefix.empty() && prefix.size() <= 3 &&
                  std::all_of(prefix.begin(), prefix.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (!digits || (prefix.size() > 1 && prefix[0] == '0'))
      return fail(fmt::format("prefix '/{}' is not a number from 0 to {}", prefix, bits));
    network.prefix = std::stoi(std::string(prefix));
    if (network.prefix > bits) return fail(fmt::format("prefix /{} is more than {}", network.prefix, bits));
  }
  // Host bits are allowed ("10.1.2.3/8" is 10.0.0.0/8): clear them, so that equal networks compare equal.
  for (int bit = network.prefix; bit < bits; ++bit)
    network.bytes[static_cast<std::size_t>(bit / 8)] &= static_cast<unsigned char>(~(0x80u >> (bit % 8)));
  if (network.v6 && network.prefix >= 96 && is_v4_mapped(network.bytes.data())) {
    std::memmove(network.bytes.data(), network.bytes.data() + 12, 4);
    std::fill(network.bytes.begin() + 4, network.bytes.end(), 0);
    network.v6 = false;
    network.prefix -= 96;
  }
  return network;
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
