// The configuration keys. Adding a key: a field in the model (config.hpp, with its default), and one entry
// below; the loader, the unknown-key messages and the reference in doc/configuration.md follow from the entry.
#include "config/keys.hpp"

#include <fmt/format.h>

#include <grp.h>

#include <algorithm>
#include <array>
#include <set>

// Entries set only the fields they need (designated initializers); the others keep their defaults on purpose.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace rjg::config::detail {
namespace {

namespace fs = std::filesystem;

constexpr std::uint64_t kMiB = 1024u * 1024;

// ---- Helpers that make an entry for a key of a common type ----

// The default as written in the file, and what a 0 means when 0 is special.
std::string code(std::string_view text, std::string_view zero = {}) {
  return fmt::format("`{}`{}", text, zero.empty() ? "" : fmt::format(" ({})", zero));
}

struct IntegerRule {
  std::int64_t min = 0;
  std::int64_t max = kNoMax;
  std::string_view zero;      // what 0 means ("no cap"), when 0 is allowed; shown as "(0: no cap)"
  std::string_view note;      // else shown after the range ("1 MiB")
  std::string_view expected;  // for a value that is not an integer, instead of the range
  std::string_view unset;     // for the reference: what a key left out means, instead of the default value
};

template <class Model, class Field>
Key<Model> integer(std::string_view name, Field Model::*field, IntegerRule rule, std::string_view doc) {
  std::string note = rule.zero.empty() ? std::string(rule.note) : fmt::format("0: {}", rule.zero);
  std::string range =
      rule.max == kNoMax ? fmt::format("at least {}", rule.min) : fmt::format("{} to {}", rule.min, rule.max);
  if (!note.empty()) range += fmt::format(" ({})", note);
  auto value = Model{}.*field;
  return {.name = name,
          .type = "integer",
          .default_text = !rule.unset.empty() ? std::string(rule.unset)
                                              : code(std::to_string(value), value == 0 ? rule.zero : ""),
          .range = range,
          .doc = doc,
          .load = [=](Reader& reader, const toml::node& node, const std::string& key, Model& model) {
            if (auto i = reader.get_integer(node, key, rule.min, rule.max, note, rule.expected))
              model.*field = static_cast<Field>(*i);
          }};
}

struct DurationRule {
  bool nonzero = false;   // 0 is refused (a timeout that has no "none")
  Duration min{0};        // else: 0, or at least this (a shorter one is surely a unit mistake)
  std::string_view zero;  // what 0 means ("none")
};

template <class Model>
Key<Model> duration(std::string_view name, Duration Model::*field, DurationRule rule, std::string_view doc) {
  std::string zero = rule.zero.empty() ? "" : fmt::format(" ({})", rule.zero);
  std::string range = rule.nonzero ? "at least 1ms"
                      : rule.min.count() > 0 ? fmt::format("0{} or at least {}ms", zero, rule.min.count())
                      : rule.zero.empty() ? "any"
                                          : fmt::format("any (0: {})", rule.zero);
  Duration value = Model{}.*field;
  return {.name = name,
          .type = "duration",
          .default_text =
              value.count() == 0 ? code("0", rule.zero) : code(fmt::format("\"{}\"", format_duration(value))),
          .range = range,
          .doc = doc,
          .load = [=](Reader& reader, const toml::node& node, const std::string& key, Model& model) {
            auto d = reader.get_duration(node, key);
            if (!d) return;
            if (rule.nonzero && d->count() == 0)
              return reader.problem(
                  node.source(), fmt::format("'{}' is 0; expected a duration of at least 1ms, such as \"10s\"", key));
            if (d->count() > 0 && *d < rule.min)
              return reader.problem(
                  node.source(), fmt::format("'{}' = {}ms is shorter than {}ms, surely a unit mistake; expected 0{} "
                                             "or at least {}ms (a number without a unit is seconds: 30 or \"30s\")",
                                             key, d->count(), rule.min.count(), zero, rule.min.count()));
            model.*field = *d;
          }};
}

struct SizeRule {
  bool zero_ok = true;
  std::uint64_t min = 0;   // 1 to min - 1 are refused: the unit was surely forgotten
  std::string_view zero;   // what 0 means ("never")
  std::string_view unset;  // for the reference: what a key left out means, instead of the default value
};

template <class Model>
Key<Model> size(std::string_view name, std::uint64_t Model::*field, SizeRule rule, std::string_view doc) {
  std::string zero = rule.zero.empty() ? "" : fmt::format(" ({})", rule.zero);
  std::string range = !rule.zero_ok   ? fmt::format("at least {}", format_size(rule.min))
                      : rule.min > 0  ? fmt::format("0{} or at least {}", zero, format_size(rule.min))
                      : zero.empty()  ? "any"
                                      : fmt::format("any (0: {})", rule.zero);
  std::uint64_t value = Model{}.*field;
  return {.name = name,
          .type = "size",
          .default_text = !rule.unset.empty() ? std::string(rule.unset)
                          : value == 0        ? code("0", rule.zero)
                                              : code(fmt::format("\"{}\"", format_size(value))),
          .range = range,
          .doc = doc,
          .load = [=](Reader& reader, const toml::node& node, const std::string& key, Model& model) {
            if (auto s = reader.get_size(node, key, rule.zero_ok, rule.min)) model.*field = *s;
          }};
}

template <class Model>
Key<Model> boolean(std::string_view name, bool Model::*field, std::string_view doc) {
  return {.name = name,
          .type = "boolean",
          .default_text = code(Model{}.*field ? "true" : "false"),
          .range = "`true` or `false`",
          .doc = doc,
          .load = [=](Reader& reader, const toml::node& node, const std::string& key, Model& model) {
            if (auto b = reader.get_bool(node, key)) model.*field = *b;
          }};
}

// One of a few names (`what`: "a pickle policy"); with hints, messages suggest the name a near miss was
// meant to be.
template <class Model, class Field, class Value, std::size_t N>
Key<Model> choice(std::string_view name, Field Model::*field, const std::pair<std::string_view, Value> (&values)[N],
                  std::string_view what, std::string_view doc, bool hints = true) {
  std::array<std::string_view, N> names;
  std::string range, default_text;
  for (std::size_t i = 0; i < N; ++i) {
    names[i] = values[i].first;
    range += fmt::format("{}`{}`", i == 0 ? "" : ", ", names[i]);
    if (Model{}.*field == values[i].second) default_text = code(fmt::format("\"{}\"", names[i]));
  }
  return {.name = name,
          .type = "string",
          .default_text = default_text,
          .range = range,
          .doc = doc,
          .load = [=, &values](Reader& reader, const toml::node& node, const std::string& key, Model& model) {
            if (auto i = reader.get_choice(node, key, what, names, hints)) model.*field = Field(values[*i].second);
          }};
}

// ---- Keys with a shape of their own ----

// log_level stays text in the model (the log module reads it), so each name maps to itself.
constexpr std::pair<std::string_view, std::string_view> kLogLevels[] = {
    {"debug", "debug"}, {"info", "info"}, {"warn", "warn"}, {"error", "error"}};
constexpr std::pair<std::string_view, std::string_view> kLogFormats[] = {{"text", "text"}, {"json", "json"}};

// [gateway] listen and [admin] listen: the same address forms.
template <class Model>
void load_listen(Reader& reader, const toml::node& node, const std::string& key, Model& gateway) {
  auto* array = node.as_array();
  if (!array) return reader.wrong_type(node, key, "an array of strings such as [\"tcp://127.0.0.1:8271\"]");
  std::vector<ListenAddress> listen;
  std::set<std::pair<std::string, unsigned short>> seen;
  for (std::size_t i = 0; i < array->size(); ++i) {
    const toml::node& element = *array->get(i);
    auto element_key = fmt::format("{}[{}]", key, i);
    auto text = reader.get_string(element, element_key);
    if (!text) continue;
    std::string why;
    auto address = parse_listen_address(*text, &why);
    if (!address) {
      reader.problem(element.source(), fmt::format("'{}' = \"{}\" is not a listen address: {}; expected "
                                                   "\"tcp://HOST:PORT\" with HOST an IPv4 address, localhost or "
                                                   "[IPv6], for example \"tcp://127.0.0.1:8271\", \"unix:/PATH\" "
                                                   "for a Unix socket, or \"systemd\" or \"systemd:NAME\" for "
                                                   "sockets systemd passes",
                                                   element_key, *text, why));
      continue;
    }
    // Port 0 picks a free port each time, so it may be listed twice; "systemd", "systemd:NAME" and a Unix
    // socket path may not.
    const bool by_text = address->kind != ListenAddress::Kind::tcp;
    const auto id = by_text ? std::pair<std::string, unsigned short>{address->kind == ListenAddress::Kind::unix_socket
                                                                         ? address->path
                                                                         : address->text,
                                                                     0}
                            : std::pair<std::string, unsigned short>{address->host, address->port};
    if ((by_text || address->port != 0) && !seen.emplace(id).second) {
      reader.problem(element.source(),
                     fmt::format("'{}' = \"{}\" is listed twice; expected each address once", element_key, *text));
      continue;
    }
    listen.push_back(std::move(*address));
  }
  if (array->empty())
    reader.problem(node.source(), fmt::format("'{}' is empty; expected at least one \"tcp://HOST:PORT\" address", key));
  gateway.listen = std::move(listen);
}

// allow_from of [gateway] and [admin], proxy_protocol_from: lists of networks.
std::optional<std::vector<Network>> load_networks(Reader& reader, const toml::node& node, const std::string& key) {
  auto* array = node.as_array();
  if (!array) {
    reader.wrong_type(node, key, "an array of strings such as [\"10.0.0.0/8\", \"::1\"]");
    return std::nullopt;
  }
  std::vector<Network> networks;
  std::vector<std::size_t> indices;  // allow_from index of each network kept
  for (std::size_t i = 0; i < array->size(); ++i) {
    const toml::node& element = *array->get(i);
    auto element_key = fmt::format("{}[{}]", key, i);
    auto text = reader.get_string(element, element_key);
    if (!text) continue;
    std::string why;
    auto network = parse_network(*text, &why);
    if (!network) {
      reader.problem(element.source(), fmt::format("'{}' = \"{}\" is not a network: {}; expected an IPv4 or IPv6 "
                                                   "address with an optional /PREFIX, such as \"10.0.0.0/8\", "
                                                   "\"192.168.1.7\" or \"fd00::/8\"",
                                                   element_key, *text, why));
      continue;
    }
    auto same =
        std::find_if(networks.begin(), networks.end(), [&](const Network& n) { return n.same_network(*network); });
    if (same != networks.end()) {
      reader.problem(element.source(),
                     fmt::format("'{}' = \"{}\" is the same network as '{}[{}]' = \"{}\"{}; expected each network once",
                                 element_key, *text, key, indices[same - networks.begin()], same->text,
                                 same->text == *text ? "" : " (address bits after the prefix are ignored)"));
      continue;
    }
    networks.push_back(std::move(*network));
    indices.push_back(i);
  }
  return networks;
}

template <class Model>
Key<Model> networks(std::string_view name, std::vector<Network> Model::*field, std::string_view empty,
                    std::string_view doc) {
  return {.name = name,
          .type = "array of strings (networks)",
          .default_text = code("[]", empty),
          .range = "each network at most once",
          .doc = doc,
          .load = [=](Reader& reader, const toml::node& node, const std::string& key, Model& model) {
            if (auto list = load_networks(reader, node, key)) model.*field = std::move(*list);
          }};
}

void load_unix_mode(Reader& reader, const toml::node& node, const std::string& key, Gateway& gateway) {
  auto text = reader.get_string(node, key);
  if (!text) return;
  const bool octal = text->size() >= 3 && text->size() <= 4 &&
                     std::all_of(text->begin(), text->end(), [](char c) { return c >= '0' && c <= '7'; });
  const unsigned mode = octal ? static_cast<unsigned>(std::stoul(*text, nullptr, 8)) : 0;
  if (!octal || mode > 0777)
    return reader.problem(node.source(), fmt::format("'{}' = \"{}\" is not a file mode; expected octal digits such as "
                                                     "\"0660\" (owner and group may connect) or \"0600\" (owner only)",
                                                     key, *text));
  if ((mode & 0600) != 0600)
    return reader.problem(node.source(), fmt::format("'{}' = \"{}\" leaves the owner (the gateway) without read and "
                                                     "write; expected at least \"0600\"",
                                                     key, *text));
  gateway.unix_mode = mode;
}

void load_unix_group(Reader& reader, const toml::node& node, const std::string& key, Gateway& gateway) {
  auto text = reader.get_string(node, key);
  if (!text) return;
  if (text->empty() || !reader.no_nul(node, key, *text))
    return reader.problem(node.source(), fmt::format("'{}' is empty; expected a group name or number", key));
  const bool number = std::all_of(text->begin(), text->end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!number && !::getgrnam(text->c_str()))
    return reader.problem(node.source(), fmt::format("'{}' = \"{}\": this host has no group of that name; expected an "
                                                     "existing group name or number",
                                                     key, *text));
  gateway.unix_group = *text;
}

// Only a valid name is set: the loader then checks that it is unique.
void load_name(Reader& reader, const toml::node& node, const std::string& key, Library& library) {
  auto name = reader.get_string(node, key);
  if (!name) return;
  bool space_or_control = std::any_of(name->begin(), name->end(), [](char c) {
    auto u = static_cast<unsigned char>(c);
    return u <= 0x20 || u == 0x7f;
  });
  if (name->empty() || space_or_control)
    return reader.problem(node.source(), fmt::format("'{}' = \"{}\" is not a valid library name; expected a non-empty "
                                                     "name without spaces or control characters, as clients import it",
                                                     key, *name));
  if (is_glob(*name)) {
    // A route that lets clients choose what is imported needs a fence: a literal prefix of at least two
    // characters (a bare "*" with the reference server as worker would import os, Process, anything).
    const auto prefix = name->substr(0, name->find_first_of("*?"));
    if (prefix.size() < 2)
      return reader.problem(node.source(),
                            fmt::format("'{}' = \"{}\" is a catch-all route without a literal prefix of at least two "
                                        "characters; a client could import any module through it (os, Process, "
                                        "subprocess); expected a prefix such as \"Selenium*\" or \"Lab*\"",
                                        key, *name));
    if (!valid_import_name(prefix))
      return reader.problem(node.source(),
                            fmt::format("'{}' = \"{}\": the prefix '{}' is not the start of a library name; expected "
                                        "letters, digits, '_' and '.' before the first '*' or '?'",
                                        key, *name, prefix));
  }
  library.name = *name;
}

void load_upstream(Reader& reader, const toml::node& node, const std::string& key, Library& library) {
  auto text = reader.get_string(node, key);
  if (!text) return;
  std::string why;
  // "{library}" stands for the imported name: checked here with a name in its place.
  std::string probe = *text;
  for (std::size_t at; (at = probe.find("{library}")) != std::string::npos;) probe.replace(at, 9, "name");
  auto address = parse_upstream_address(probe, &why);
  if (!address)
    return reader.problem(node.source(), fmt::format("'{}' = \"{}\" is not an upstream address: {}; expected "
                                                     "\"tcp://HOST:PORT\", such as \"tcp://bench-pc-7:8270\", or a "
                                                     "classic remote server, \"http://HOST:PORT[/PATH]\"",
                                                     key, *text, why));
  if (address->http)
    library.classic_upstream = *text;
  else
    library.upstream = *text;
}

void load_upstream_name(Reader& reader, const toml::node& node, const std::string& key, Library& library) {
  auto text = reader.get_string(node, key);
  if (!text) return;
  if (!valid_import_name(*text) && text->find("{library}") == std::string::npos)
    return reader.problem(node.source(), fmt::format("'{}' = \"{}\" is not a library name; expected letters, digits, "
                                                     "'_' and '.', as the upstream imports it",
                                                     key, *text));
  library.upstream_name = *text;
}

// An array of dotted names (libraries, modules), each checked as Python would import it; a bad one is
// reported as "'KEY[i]' = "X" is not a WHAT; expected letters, digits, '_' and '.'HOW". Nothing when the
// node is not an array (reported with `example`).
std::optional<std::vector<std::string>> dotted_names(Reader& reader, const toml::node& node, const std::string& key,
                                                     std::string_view example, std::string_view what,
                                                     std::string_view how) {
  auto* array = node.as_array();
  if (!array) {
    reader.wrong_type(node, key, example);
    return std::nullopt;
  }
  std::vector<std::string> names;
  for (std::size_t i = 0; i < array->size(); ++i) {
    const toml::node& element = *array->get(i);
    auto element_key = fmt::format("{}[{}]", key, i);
    auto name = reader.get_string(element, element_key);
    if (!name) continue;
    if (!valid_import_name(*name)) {
      reader.problem(element.source(), fmt::format("'{}' = \"{}\" is not a {}; expected letters, digits, '_' and '.'{}",
                                                   element_key, *name, what, how));
      continue;
    }
    names.push_back(std::move(*name));
  }
  return names;
}

void load_deny(Reader& reader, const toml::node& node, const std::string& key, Library& library) {
  if (auto names = dotted_names(reader, node, key, "an array of library names such as [\"SeleniumLibrary.Testing\"]",
                                "library name", ""))
    library.deny = std::move(*names);
}

void load_preload(Reader& reader, const toml::node& node, const std::string& key, Library& library) {
  if (auto names = dotted_names(reader, node, key, "an array of module names such as [\"SeleniumLibrary\"]",
                                "module name", ", as Python imports it"))
    library.preload = std::move(*names);
}

void load_command(Reader& reader, const toml::node& node, const std::string& key, Library& library) {
  auto* array = node.as_array();
  if (!array) return reader.wrong_type(node, key, "an array of strings such as [\"robot-example-calculator\"]");
  if (array->empty())
    reader.problem(node.source(), fmt::format("'{}' is empty; expected the program and its arguments, such as "
                                              "[\"robot-example-calculator\"]",
                                              key));
  for (std::size_t i = 0; i < array->size(); ++i) {
    const toml::node& element = *array->get(i);
    auto element_key = fmt::format("{}[{}]", key, i);
    auto arg = reader.get_string(element, element_key);
    if (!arg) continue;
    if (arg->empty()) {
      reader.problem(element.source(), fmt::format("'{}' is an empty string; expected a non-empty {}", element_key,
                                                   i == 0 ? "program name or path" : "argument"));
      continue;
    }
    if (!reader.no_nul(element, element_key, *arg)) continue;
    if (i == 0 && arg->find('/') != std::string::npos) *arg = reader.resolve(*arg).string();
    library.command.push_back(std::move(*arg));
  }
}

void load_env(Reader& reader, const toml::node& node, const std::string& key, Library& library) {
  auto* env = node.as_table();
  if (!env) return reader.wrong_type(node, key, "a table of strings such as { DISPLAY = \":99\" }");
  auto alpha = [](char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_'; };
  auto alnum = [&](char c) { return alpha(c) || (c >= '0' && c <= '9'); };
  for (auto&& [name, value] : *env) {
    auto full = fmt::format("{}.{}", key, name.str());
    std::string_view n = name.str();
    if (n.empty() || !alpha(n[0]) || !std::all_of(n.begin() + 1, n.end(), alnum))
      reader.problem(name.source(), fmt::format("'{}' is not a valid environment variable name; expected letters, "
                                                "digits and '_', not starting with a digit",
                                                full));
    if (auto text = reader.get_string(value, full); text && reader.no_nul(value, full, *text))
      library.env.emplace(std::string(n), std::move(*text));
  }
}

void load_cwd(Reader& reader, const toml::node& node, const std::string& key, Library& library) {
  auto cwd = reader.get_string(node, key);
  if (!cwd) return;
  if (cwd->empty())
    return reader.problem(node.source(), fmt::format("'{}' is empty; expected a directory path (absolute, or relative "
                                                     "to the configuration file)",
                                                     key));
  if (!reader.no_nul(node, key, *cwd)) return;
  fs::path dir = reader.resolve(*cwd);
  std::error_code ec;
  auto status = fs::status(dir, ec);
  if (ec || !fs::exists(status))
    reader.problem(node.source(), fmt::format("'{}' = \"{}\": directory {} does not exist{}; expected an existing "
                                              "directory",
                                              key, *cwd, dir.string(),
                                              ec && ec != std::errc::no_such_file_or_directory
                                                  ? fmt::format(" or cannot be read ({})", ec.message())
                                                  : ""));
  else if (!fs::is_directory(status))
    reader.problem(node.source(), fmt::format("'{}' = \"{}\": {} is not a directory; expected an existing directory",
                                              key, *cwd, dir.string()));
  library.cwd = dir.string();
}

// The table replaces the one from [defaults] as a whole, so a library can drop a limit.
void load_rlimits(Reader& reader, const toml::node& node, const std::string& key, Library& library) {
  auto* table = node.as_table();
  if (!table) return reader.wrong_type(node, key, "a table such as { open_files = 1024, address_space = \"4GiB\" }");
  ResourceLimits limits;
  load_table(reader, *table, key, key, rlimit_keys(), limits);
  library.rlimits = limits;
}

// core_size = 0 is a setting of its own (no core dumps), not "not set".
void load_core_size(Reader& reader, const toml::node& node, const std::string& key, ResourceLimits& limits) {
  if (auto size = reader.get_size(node, key)) {
    limits.core_size = *size;
    limits.core_size_set = true;
  }
}

bool has(const auto& keys, std::string_view name) {
  return std::any_of(keys.begin(), keys.end(), [&](const auto& key) { return key.name == name; });
}

// The table a key belongs in when it is written in the wrong one, for the unknown-key message.
std::string_view home_of(std::string_view name) {
  for (const auto& key : library_keys())
    if (key.name == name && key.in_defaults) return has(gateway_keys(), name) ? "" : "[defaults] or [[library]]";
  if (has(library_keys(), name)) return "each [[library]]";
  if (has(gateway_keys(), name)) return "[gateway]";
  if (has(admin_keys(), name)) return "[admin]";
  if (has(classic_keys(), name)) return "[classic]";
  if (has(rlimit_keys(), name)) return "an rlimits table";
  return "";
}

}  // namespace

// ---- The tables ----

const std::vector<Key<Gateway>>& gateway_keys() {
  static const std::vector<Key<Gateway>> keys = {
      {.name = "listen",
       .type = "array of strings",
       .default_text = code(fmt::format("[\"{}\"]", Gateway{}.listen.at(0).text)),
       .range = "at least one; each at most once",
       .doc = "Addresses to accept client connections on: `tcp://HOST:PORT`, or sockets systemd passes "
              "(socket activation): `systemd:NAME` takes those named `NAME` (`FileDescriptorName=` in the .socket "
              "unit), `systemd` every passed socket no other entry names.",
       .load = load_listen<Gateway>},
      choice("log_level", &Gateway::log_level, kLogLevels, "a log level",
             "Least severe messages logged, to stderr.", /*hints=*/false),
      choice("log_format", &Gateway::log_format, kLogFormats, "a log format",
             "`text`: one line per event, `TIME PROGRAM LEVEL message`. `json`: one JSON object per line "
             "(`time`, `level`, `program`, `message`) for log shippers. Either way, when stderr is the journal "
             "(systemd's `JOURNAL_STREAM`) each line starts with a syslog priority (`<6>`) and text lines carry "
             "no timestamp.",
             /*hints=*/false),
      duration("drain_timeout", &Gateway::drain_timeout, {},
               "On SIGTERM the gateway stops accepting connections; the sessions already open go on working (imports "
               "and keywords) until they end or this long has passed. Then it closes those left, stops their workers "
               "and answers what still runs with an error."),
      integer("max_message_bytes", &Gateway::max_message_bytes,
              {.min = 1,
               .max = 1024 * kMiB,
               .note = "1 GiB",
               .expected = "an integer number of bytes, such as 67108864"},
              "Largest frame body accepted from a client or a worker; a larger frame ends that connection."),
      integer("max_workers", &Gateway::max_workers, {.zero = "no cap"},
              "Most worker processes of all libraries together, running or starting (prewarmed ones included)."),
      integer("max_header_bytes", &Gateway::max_header_bytes, {.min = 256, .max = 1024 * 1024, .note = "1 MiB"},
              "Largest header block of one frame (everything before the body); a larger one ends that connection."),
      integer("max_json_depth", &Gateway::max_json_depth, {.min = 8, .max = 1024},
              "Deepest nesting of arrays and objects in one message; a deeper message is rejected, so that no message "
              "can exhaust the gateway's stack."),
      duration("handshake_timeout", &Gateway::handshake_timeout, {.nonzero = true},
               "From accepting a connection until the client has sent `robot/initialize`; a slower client is "
               "disconnected."),
      duration("read_timeout", &Gateway::read_timeout, {.nonzero = true},
               "A frame the client has begun must arrive completely within this, else the connection is closed (a "
               "stalled or trickling client)."),
      duration("idle_timeout", &Gateway::idle_timeout, {.zero = "none"},
               "A connection that sends no message at all for this long is closed."),
      integer("max_sessions", &Gateway::max_sessions, {.zero = "no limit"},
              "Most client connections at once; further ones are refused (closed)."),
      integer("max_sessions_per_client", &Gateway::max_sessions_per_client, {.zero = "no limit"},
              "Most connections at once from one source address (over a Unix socket: from one uid); further ones from it "
              "are refused. The imports the classic front (`[classic]`) holds for an address's calls count as its "
              "sessions too: at the limit, its classic call that needs a new import gets a fault."),
      networks("allow_from", &Gateway::allow_from, "every address",
               "The client addresses allowed to connect over TCP; a connection from any other is closed without being "
               "served. Behind a load balancer that sends the PROXY protocol (`proxy_protocol_from`), the address in "
               "its header is the client's. Unix-socket clients are not checked: the socket file's mode and group "
               "decide who connects."),
      networks("proxy_protocol_from", &Gateway::proxy_protocol_from, "none",
               "Load balancers (HAProxy `send-proxy`/`send-proxy-v2`, a Kubernetes Service with the PROXY protocol): a "
               "TCP connection from these networks must start with a PROXY protocol header (version 1 or 2), read "
               "within `handshake_timeout`, and the client address in it counts everywhere (`allow_from`, "
               "`max_sessions_per_client`, logs, `/status`). A connection from them without a valid header is "
               "refused, and so is a header from any other address. A version 2 `LOCAL` header (a health check) is "
               "served as the balancer's own connection."),
      {.name = "unix_mode",
       .type = "string (octal)",
       .default_text = code("\"0660\""),
       .range = "`\"0600\"` to `\"0777\"`; the owner can always read and write",
       .doc = "Permissions of the socket files of `unix:` listeners: who may connect (write permission on the file "
              "is what connecting needs).",
       .load = load_unix_mode},
      {.name = "unix_group",
       .type = "string",
       .default_text = "the gateway's group",
       .range = "a group name or number",
       .doc = "Group of the socket files of `unix:` listeners (the gateway must be a member, or root).",
       .load = load_unix_group},
      // Below 64 KiB a single ordinary keyword call could not wait: surely a value written without its unit.
      size("max_pending_bytes", &Gateway::max_pending_bytes, {.zero_ok = false, .min = 64 * 1024},
           "Most bytes of request text one connection may have waiting for a worker; a request beyond it is "
           "answered with an error at once."),
      integer("max_pending_requests", &Gateway::max_pending_requests, {.min = 1, .max = 65536},
              "Most unanswered requests of one connection; a request beyond it is answered with an error at once."),
      duration("write_timeout", &Gateway::write_timeout, {.nonzero = true},
               "A client whose answers wait unread (its write queue full) for this long is disconnected, so that "
               "it cannot hold a shared worker's output."),
      integer("max_object_members", &Gateway::max_object_members, {.min = 16, .max = 16 * 1024 * 1024},
              "Most members of one JSON object in a message; a message with a larger object is rejected."),
      integer("threads", &Gateway::threads, {.max = 1024, .zero = "one per core"},
              "Event-loop threads that serve sessions, round robin. A session, its dedicated workers and its relay "
              "path stay on one thread; pools, shared workers and the drain run on the first. `1` runs everything "
              "on one thread."),
      boolean("end_orphans", &Gateway::end_orphans,
              "A worker's descendant that leaves its process group and outlives its parent is reparented to the "
              "gateway (a child subreaper): `true` ends it (SIGTERM, then SIGKILL after the longest `shutdown_grace` "
              "of all libraries) and reaps it; "
              "`false` leaves it running and only reaps it when it exits."),
  };
  return keys;
}

const std::vector<Key<Admin>>& admin_keys() {
  static const std::vector<Key<Admin>> keys = {
      {.name = "listen",
       .type = "array of strings",
       .default_text = "required",
       .range = "at least one; each at most once",
       .doc = "Addresses of the HTTP endpoint (`/metrics`, `/livez`, `/readyz`, `/status`), in the forms of "
              "`[gateway] listen`; `systemd:NAME` takes a socket of that name, and a bare `systemd` in "
              "`[gateway] listen` leaves it alone.",
       .missing = "the addresses of the admin endpoint, such as listen = [\"tcp://127.0.0.1:9271\"]",
       .load = load_listen<Admin>},
      networks("allow_from", &Admin::allow_from, "every address",
               "The addresses allowed to use the endpoint; a connection from any other is closed without an answer. "
               "Independent of `[gateway] allow_from`. Set it whenever `listen` is not loopback, to the hosts "
               "that scrape and probe the endpoint: it has no authentication."),
  };
  return keys;
}

const std::vector<Key<Classic>>& classic_keys() {
  static const std::vector<Key<Classic>> keys = {
      {.name = "listen",
       .type = "array of strings",
       .default_text = "required",
       .range = "at least one; each at most once; TCP only",
       .doc = "Addresses of the classic Remote front: XML-RPC over HTTP for Robot Framework's built-in `Remote` "
              "library (`Library  Remote  http://HOST:PORT/LIBRARY`). The forms of `[gateway] listen` but "
              "`unix:`; `[gateway]` `allow_from`, `max_sessions`, `max_sessions_per_client`, "
              "`handshake_timeout` (to receive a request) and `max_message_bytes` (to a keyword's output) apply to it.",
       .missing = "the addresses of the classic front, such as listen = [\"tcp://127.0.0.1:8270\"]",
       .load = load_listen<Classic>},
      {.name = "default_library",
       .type = "string",
       .default_text = "the first exact library",
       .range = "a library the configuration serves",
       .doc = "The library served at `/` and `/RPC2` (where Python's XML-RPC client posts when the URL has no "
              "path); any other path names the library (`/Calculator`).",
       .load = [](Reader& reader, const toml::node& node, const std::string& key, Classic& classic) {
         if (auto text = reader.get_string(node, key)) classic.default_library = *text;
       }},
      // Far below max_message_bytes: a body's values are parsed and turned into JSON, so each byte of it
      // costs several (doc/security.md, "Bounded memory"), and Robot's Remote sends keyword arguments here, rarely
      // more than a few KiB. Below 64 KiB surely a value written without its unit.
      size("max_body_bytes", &Classic::max_body_bytes, {.zero_ok = false, .min = 64 * 1024},
           "Largest body of an XML-RPC request (Robot's `Remote` sends keyword arguments in it); a larger "
           "request is answered with a fault naming this key, and its body is dropped unparsed. A body holds at "
           "most one value per 16 bytes (more get a fault), and one of 1 MiB or more is parsed off the event "
           "loop. Raise it for suites that pass large arguments: `bytes` of N bytes take about 4/3 N in the "
           "body."),
      integer("max_imports", &Classic::max_imports, {.min = 1, .max = 4096, .note = "below `[gateway] max_workers`"},
              "Most imports held for classic clients at once, all libraries together (each library has at most its "
              "`classic_instances`), each in a worker of its library's pool. When a call needs one more, the least "
              "recently used import that serves no call is ended to make room; when every one serves a call, the "
              "call waits up to its library's `queue_timeout`, then gets a fault. Must stay below `[gateway] "
              "max_workers`, and below a library's `max_workers`, so that classic clients never take every worker "
              "from JSON-RPC clients."),
      duration("idle_timeout", &Classic::idle_timeout, {.min = Duration(100), .zero = "never"},
               "An import that no classic call used for this long ends (a dedicated worker stops, a shared one "
               "finalizes the instance); the next call imports again. A library with no import left, no call "
               "running and none waiting leaves `/status`."),
  };
  return keys;
}

const std::vector<Key<Library>>& library_keys() {
  static const std::vector<Key<Library>> keys = [] {
    // Keys of each [[library]] only.
    std::vector<Key<Library>> keys = {
        {.name = "name",
         .type = "string",
         .default_text = "required",
         .range = "unique; not empty; no whitespace or control characters; a glob needs a literal prefix of 2 "
                  "characters or more",
         .doc = "The name clients import, matched exactly (case-sensitive); or a glob with `*` and `?` "
                "(`\"Selenium*\"`) that serves every valid library name it matches, after the exact names, in file "
                "order (a catch-all route: see `deny`).",
         .missing = "the name clients import, such as name = \"Calculator\"",
         .load = load_name},
        {.name = "command",
         .type = "array of strings",
         .default_text = "required unless `upstream`",
         .range = "not empty; no empty strings",
         .doc = "The worker program and its arguments. `{library}` in an item is replaced by the imported name.",
         .load = load_command},
        {.name = "env",
         .type = "table of strings",
         .default_text = code("{}"),
         .range = "names `[A-Za-z_][A-Za-z0-9_]*`",
         .doc = "Variables added to (or replacing those of) the gateway's environment for this worker. `{library}` "
                "in a value is replaced by the imported name.",
         .load = load_env},
        {.name = "cwd",
         .type = "string (path)",
         .default_text = "the gateway's working directory",
         .range = "an existing directory when the file is loaded",
         .doc = "The worker's working directory.",
         .load = load_cwd},
    };
    // Keys that [defaults] may set too.
    std::vector<Key<Library>> settings = {
        duration("startup_timeout", &Library::startup_timeout, {},
                 "From starting a worker until it has answered `robot/initialize`; a slower worker is killed and "
                 "the import fails."),
        duration("shutdown_grace", &Library::shutdown_grace, {},
                 "Stopping a worker: how long after `robot/shutdown` and `robot/exit` before SIGTERM, and after "
                 "SIGTERM before SIGKILL."),
        duration("connect_timeout", &Library::connect_timeout, {.nonzero = true},
                 "Upstreams: from resolving the host until the connection is open; a slower one fails the import."),
        // Below 64 KiB surely a value written without its unit.
        size("max_answer_bytes", &Library::max_answer_bytes, {.zero_ok = false, .min = 64 * 1024},
             "Classic remote servers (`upstream = \"http://...\"`): the largest answer the bridge worker reads "
             "from the server. A larger answer, or one with more than one value per 16 bytes or nested deeper than "
             "64, fails that import or keyword with an error naming the server and this key."),
        choice("isolation", &Library::isolation, kIsolations, "an isolation mode",
               "`session`: every import gets a worker of its own; `shared`: imports share long-lived workers."),
        integer("prewarm", &Library::prewarm, {.max = 64},
                "Workers started and initialized ahead of time and kept idle, so that imports need not wait for "
                "a start."),
        // Off by default: the import runs the library's constructor with no session to see it (hardware,
        // sessions, licences); the config loader checks that prewarm and isolation allow it.
        boolean("prewarm_import", &Library::prewarm_import,
                "Each prewarmed worker also imports the library without arguments ahead of time; an import without "
                "arguments then gets that instance, answered at once (an import with arguments gets the warm "
                "worker and a fresh instance). Needs `prewarm` of at least 1 and `isolation = \"session\"`; only "
                "for libraries whose constructor has no side effects."),
        integer("max_workers", &Library::max_workers, {.zero = "no cap of its own"},
                "Most workers of this library at once (prewarmed ones included); `[gateway]` `max_workers` still "
                "applies."),
        duration("queue_timeout", &Library::queue_timeout, {},
                 "How long an import waits for a worker when a cap is reached before it fails; 0 fails at once."),
        // Below 10ms surely seconds meant as milliseconds ("5ms" for 5 s): no keyword call through two processes
        // completes that fast reliably.
        duration("keyword_timeout", &Library::keyword_timeout, {.min = Duration(10), .zero = "none"},
                 "Longest a keyword may run; a keyword still running then fails, and its worker is stopped."),
        integer("max_keywords", &Library::max_keywords, {.zero = "never"},
                "Shared workers: a worker is recycled (replaced by a fresh one) after it has run this many keywords, "
                "against slow leaks."),
        duration("max_age", &Library::max_age, {.zero = "never"},
                 "Shared workers: a worker older than this is recycled."),
        // Below 1 MiB a worker would be recycled after every keyword: surely a value written without its unit.
        size("max_rss", &Library::max_rss, {.min = 1 * kMiB, .zero = "never"},
             "Shared workers: a worker whose resident memory (RSS) grows above this is recycled."),
        integer("max_imports_per_worker", &Library::max_imports_per_worker, {.min = 1},
                "Shared workers: most imports one worker serves at once."),
        {.name = "rlimits",
         .type = "table",
         .default_text = code("{}", "no limits"),
         .range = "the keys below",
         .doc = "Resource limits set in the worker before its program starts.",
         .load = load_rlimits},
        // "one" for workers that hand work between their own threads at every keyword (the reference server:
        // its event loop and its Robot thread): on a 2-core VM that hand-off across CPUs made a keyword
        // through the gateway take 1.6 times as long as on one CPU (doc/benchmarks.md).
        choice("cpu_affinity", &Library::cpu_affinity, kCpuAffinities, "a CPU affinity",
               "`any`: a worker runs on any CPU the gateway may use; `one`: each worker, and every process it "
               "starts, is bound to one of those CPUs, taken in turn, so that its threads hand work to each other "
               "on one CPU. For one-keyword-at-a-time workers such as the reference server; not for a library "
               "that works in parallel or starts a browser, which would get one CPU too."),
        choice("pickle", &Library::pickle, kPicklePolicies, "a pickle policy",
               "What passes of pickled Python values (`{\"__pickled__\": \"<hex>\"}`) to and from this library."),
        integer("classic_instances", &Library::classic_instances, {.min = 0, .max = 64, .zero = "not served to classic clients"},
                "The classic Remote front (`[classic]`): imports of the library that its classic clients share, "
                "each in a worker of the pool; keyword calls run one at a time on each, as on a classic remote "
                "server. More than 1 only for libraries whose instances are independent. At most `[classic] "
                "max_imports`, and below the library's `max_workers` when that is set (counted in imports for "
                "shared workers), so that JSON-RPC clients always find room."),
        choice("arguments", &Library::arguments, kArgumentModes, "an argument mode",
               "Whether argument strings are escaped so that a worker which evaluates them as Robot Framework data "
               "(the reference Python server does) receives them exactly as sent: `auto` escapes when the worker's "
               "`robot/initialize` answer names the reference server, `escape` always, `as-is` never."),
        choice("on_worker_loss", &Library::on_worker_loss, kWorkerLossModes, "a worker-loss mode",
               "When an import's worker is lost (it crashed, or `keyword_timeout` ended it), the keyword that was "
               "running fails; then `reimport`: the next keyword on the same token imports the library again, "
               "with the same arguments, in a new worker, and its log says as a WARN that the library's state was "
               "lost and why; `fail`: every later keyword on the token fails, saying the instance is gone."),
    };
    for (auto& key : settings) {
      key.in_defaults = true;
      keys.push_back(std::move(key));
    }
    // Libraries served elsewhere, and catch-all routes.
    std::vector<Key<Library>> more = {
        {.name = "upstream",
         .type = "string",
         .default_text = "none",
         .range = "`tcp://HOST:PORT` or `http://HOST:PORT[/PATH]`; exactly one of `command` and `upstream`",
         .doc = "Instead of a worker process: a server of the protocol elsewhere (the reference server, another "
                "gateway, a library with `--tcp`). Each import opens its own connection, resolved at connect time. "
                "`{library}` is replaced by the imported name. `isolation`, `prewarm`, `prewarm_import`, `rlimits`, "
                "`cpu_affinity`, `env` and `cwd` do not apply (in this table: an error; from `[defaults]`: ignored). "
                "`http://`: a classic remote server (XML-RPC, Robot's `Remote` protocol), reached through a bridge "
                "worker process (`robot-classic-bridge`) that the gateway starts like any worker, so those keys do "
                "apply; see \"Classic remote servers behind the gateway\".",
         .load = load_upstream},
        {.name = "upstream_name",
         .type = "string",
         .default_text = "the imported name",
         .range = "a library name",
         .doc = "The name the import uses on the upstream, when it differs from the name clients import.",
         .load = load_upstream_name},
        {.name = "deny",
         .type = "array of strings",
         .default_text = "Robot Framework's standard libraries and Python's standard modules",
         .range = "library names; glob entries only",
         .doc = "Names a glob entry refuses to import, matched against the whole name, each dotted prefix and each "
                "dotted part (`os` refuses `os.path` and `LabPower.os`). Setting it replaces the default list; `[]` "
                "refuses nothing.",
         .load = load_deny},
        // Library tables only: the shape of the command decides whether it applies (config.cpp checks it).
        boolean("fork_server", &Library::fork_server,
                "Workers of the reference Python server (`command = [PYTHON, \"-m\", \"robot_jsonrpcremote_server\", "
                "\"--stdio\", ...]`) are forked from one template process that the gateway starts per library and "
                "that has imported Robot Framework, the server and the library once, instead of each starting a "
                "fresh interpreter: a fraction of the memory and start-up time per session. Each session is still "
                "its own process. When the template cannot start, workers start the plain way (a WARN says why). "
                "See doc/workers.md."),
        {.name = "preload",
         .type = "array of strings",
         .default_text = "the libraries the command names",
         .range = "module names; only with `fork_server = true`",
         .doc = "Modules the fork server's template imports ahead of time besides the libraries its command names "
                "(what the library imports lazily, say). A module that fails to import is logged and left to each "
                "session; one that starts a thread keeps the template from forking (it says so).",
         .load = load_preload},
        boolean("dotted", &Library::dotted,
                "Glob entries only. Whether the entry serves names with a `.` where its wildcards stand (`LabPower.Tools` for "
                "`Lab*`). Off, such names are refused: Robot's importer reads `LabPower.os` as the attribute `os` "
                "of the module `LabPower`, so with the reference server a dotted name reaches every module that a "
                "matching library imports. On, each dotted part is also checked against `deny`."),
    };
    for (auto& key : more) keys.push_back(std::move(key));
    return keys;
  }();
  return keys;
}

const std::vector<Key<ResourceLimits>>& rlimit_keys() {
  static const std::vector<Key<ResourceLimits>> keys = {
      // Below 16 MiB a worker cannot even start: surely a value written without its unit (512 for 512 MiB).
      size("address_space", &ResourceLimits::address_space, {.zero_ok = false, .min = 16 * kMiB, .unset = "not set"},
           "`RLIMIT_AS`: the worker's virtual memory."),
      integer("open_files", &ResourceLimits::open_files, {.min = 16, .unset = "not set"},
              "`RLIMIT_NOFILE`: open file descriptors."),
      integer("cpu_seconds", &ResourceLimits::cpu_seconds, {.min = 1, .unset = "not set"},
              "`RLIMIT_CPU`: CPU time over the whole life of each process."),
      integer("processes", &ResourceLimits::processes, {.min = 1, .unset = "not set"},
              "`RLIMIT_NPROC`: processes of the user the gateway runs as."),
      {.name = "core_size",
       .type = "size",
       .default_text = "not set",
       .range = "any (0: no core dumps)",
       .doc = "`RLIMIT_CORE`: largest core dump file.",
       .load = load_core_size},
  };
  return keys;
}

void check_keys(Reader& reader, const toml::table& table, std::string_view context,
                const std::vector<std::string_view>& known) {
  for (auto&& [key, value] : table) {
    std::string_view name = key.str();
    if (std::find(known.begin(), known.end(), name) != known.end()) continue;
    if (auto home = home_of(name); !home.empty()) {
      reader.problem(key.source(), fmt::format("unknown key '{}' in {} (it belongs in {}); known keys are: {}", name,
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
    reader.problem(key.source(), fmt::format("unknown key '{}' in {}{}; known keys are: {}", name, context,
                                             suggestion.empty() ? "" : fmt::format(" (did you mean '{}'?)", suggestion),
                                             join(known)));
  }
}

}  // namespace rjg::config::detail
