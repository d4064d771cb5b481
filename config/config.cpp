// Loading a configuration file: its tables ([gateway], [defaults], [[library]]) and the checks across keys.
// The keys of each table are in keys.cpp.
#include "config/config.hpp"

#include "config/keys.hpp"
#include "config/reader.hpp"

#include <fmt/format.h>
#include <toml++/toml.h>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <algorithm>
#include <map>
#include <set>

namespace rjg::config {


namespace {

using detail::Reader;

class Loader {
 public:
  explicit Loader(std::string path) : path_(path), reader_(std::move(path)) {}

  Config load(std::string_view text) {
    Config config;
    config.path = path_;

    toml::table root;
    try {
      root = toml::parse(text, path_);
    } catch (const toml::parse_error& e) {
      reader_.problem(e.source(), fmt::format("TOML syntax error: {}", e.description()));
      reader_.throw_problems();
    }

    detail::check_keys(reader_, root, "the top level", {"gateway", "admin", "classic", "defaults", "library"});

    if (auto* node = root.get("gateway")) {
      if (auto* table = reader_.expect_table(*node, "gateway", "[gateway]"))
        detail::load_table(reader_, *table, "[gateway]", "gateway", detail::gateway_keys(), config.gateway);
    }

    if (auto* node = root.get("admin")) {
      if (auto* table = reader_.expect_table(*node, "admin", "[admin]")) {
        detail::load_table(reader_, *table, "[admin]", "admin", detail::admin_keys(), config.admin);
        check_http_listen(*table, "admin", "the admin endpoint", config.admin.listen, config);
      }
    }
    const toml::table* classic_table = nullptr;
    if (auto* node = root.get("classic")) {
      if ((classic_table = reader_.expect_table(*node, "classic", "[classic]"))) {
        detail::load_table(reader_, *classic_table, "[classic]", "classic", detail::classic_keys(), config.classic);
        check_http_listen(*classic_table, "classic", "the classic front", config.classic.listen, config);
      }
    }

    // [defaults] is a library template: every [[library]] starts as a copy of it.
    Library defaults;
    if (auto* node = root.get("defaults")) {
      if (auto* table = reader_.expect_table(*node, "defaults", "[defaults]")) {
        defaults_table_ = table;
        detail::load_table(reader_, *table, "[defaults]", "defaults", detail::library_keys(), defaults,
                           /*defaults_only=*/true);
        check_prewarm_cap(*table, "defaults", defaults);
        check_prewarm_import(*table, "defaults", defaults);
      }
    }

    auto* libraries = root.get("library");
    if (!libraries) {
      reader_.problem_at_start(
          "no library is configured; expected at least one [[library]] table with a name and a command");
    } else if (!libraries->is_array_of_tables()) {
      std::string what = libraries->is_table()                                     ? "a single table ([library])"
                         : libraries->is_array() && libraries->as_array()->empty() ? "an empty array"
                         : libraries->is_array()                                   ? "an array of non-tables"
                                                                                   : detail::a_type(*libraries);
      reader_.problem(libraries->source(), fmt::format("'library' is {}, expected one or more [[library]] tables "
                                                       "(with double brackets)",
                                                       what));
    } else {
      std::size_t index = 0;
      std::vector<std::size_t> loaded;  // index in the array of each library in config.libraries
      for (auto& element : *libraries->as_array()) {
        Library library = defaults;
        if (load_library(*element.as_table(), index, library)) {
          config.libraries.push_back(std::move(library));
          loaded.push_back(index);
          library_tables_.emplace_back(index, element.as_table());
        }
        ++index;
      }
      check_total_prewarm(*libraries->as_array(), config, loaded);
    }
    if (classic_table) {
      check_default_library(*classic_table, config);
      check_classic_share(*classic_table, config);
    }

    if (reader_.problem_count() > 0) reader_.throw_problems();
    return config;
  }

 private:
  bool load_library(const toml::table& table, std::size_t index, Library& library) {
    const std::size_t before = reader_.problem_count();
    const std::string prefix = fmt::format("library[{}]", index);
    library.source_line = static_cast<int>(table.source().begin.line);
    detail::load_table(reader_, table, fmt::format("[[library]] table {}", prefix), prefix, detail::library_keys(),
                       library);
    if (!library.name.empty()) {  // a valid name
      if (auto [it, fresh] = names_.emplace(library.name, library.source_line); !fresh)
        reader_.problem(table.get("name")->source(),
                        fmt::format("duplicate library name \"{}\" (first defined on line {}); expected each "
                                    "[[library]] name to be unique",
                                    library.name, it->second));
    }
    check_prewarm_cap(table, prefix, library);
    check_prewarm_import(table, prefix, library);
    check_command_or_upstream(table, prefix, library);
    check_glob(table, prefix, library);
    check_fork_server(table, prefix, library);
    // An exact entry serves one name: "{library}" is that name from the start (glob entries substitute it
    // at each import: concrete()).
    if (!library.is_glob() && !library.name.empty()) library = concrete(library, library.name), library.imported.clear();
    return reader_.problem_count() == before;
  }

  // A library is a worker program or an upstream server: exactly one. What only a worker process has is an
  // error next to an upstream, and ignored when it comes from [defaults].
  void check_command_or_upstream(const toml::table& table, std::string_view prefix, Library& library) {
    const bool command = table.get("command") != nullptr, upstream = table.get("upstream") != nullptr;
    if (command && upstream)
      reader_.problem(table.get("upstream")->source(),
                      fmt::format("'{}.upstream' and '{}.command' are both set; expected exactly one: a worker program "
                                  "(command) or a server elsewhere (upstream)",
                                  prefix, prefix));
    if (!command && !upstream)
      reader_.problem(table.source(), fmt::format("[[library]] table {} has no 'command'; expected the worker program "
                                                  "and its arguments, such as command = [\"robot-example-calculator\"], "
                                                  "or an upstream server, such as upstream = \"tcp://bench-pc:8270\"",
                                                  prefix));
    if (table.get("upstream_name") && !upstream)
      reader_.problem(table.get("upstream_name")->source(),
                      fmt::format("'{}.upstream_name' is set without 'upstream'; expected it only with an upstream", prefix));
    if (!upstream || command) return;
    if (!library.classic_upstream.empty()) {
      // A classic remote server: a bridge worker process speaks to it (workers/classic_bridge), so every
      // process setting applies to that process. The URL names the library: no upstream_name.
      if (const auto* node = table.get("upstream_name"))
        reader_.problem(node->source(), fmt::format("'{}.upstream_name' does not apply to a classic remote server "
                                                    "(http://): its URL names the one library it serves; expected "
                                                    "it removed",
                                                    prefix));
      library.command = {"robot-classic-bridge", "--url", library.classic_upstream, "--name", "{library}",
                         "--connect-timeout",
                         fmt::format("{}", std::chrono::duration<double>(library.connect_timeout).count()),
                         "--max-bytes", std::to_string(library.max_answer_bytes)};
      return;
    }
    for (std::string_view key :
         {"isolation", "prewarm", "prewarm_import", "rlimits", "cpu_affinity", "env", "cwd", "fork_server", "preload"}) {
      if (const auto* node = table.get(key))
        reader_.problem(node->source(),
                        fmt::format("'{}.{}' does not apply to an upstream library: the gateway starts no process for "
                                    "it, and each import opens a connection of its own; expected it removed",
                                    prefix, key));
    }
    // From [defaults]: ignored (documented).
    const Library plain;
    library.isolation = plain.isolation;
    library.prewarm = plain.prewarm;
    library.prewarm_import = plain.prewarm_import;
    library.rlimits = plain.rlimits;
    library.cpu_affinity = plain.cpu_affinity;
  }

  // fork_server: a library served by the reference server on stdio, one command for every import.
  void check_fork_server(const toml::table& table, std::string_view prefix, Library& library) {
    if (!library.fork_server) {
      if (const auto* node = table.get("preload"))
        reader_.problem(node->source(), fmt::format("'{}.preload' applies only with fork_server = true (it names what "
                                                    "the fork server's template imports ahead); expected it removed, "
                                                    "or fork_server = true",
                                                    prefix));
      return;
    }
    const auto* at = table.get("fork_server");
    if (!library.upstream.empty()) return;  // refused with the other process settings
    if (!library.classic_upstream.empty()) {
      reader_.problem(at->source(), fmt::format("'{}.fork_server' does not apply to a classic remote server (http://): "
                                                "its bridge worker is a native program; expected it removed",
                                                prefix));
      return;
    }
    if (library.is_glob()) {
      reader_.problem(at->source(), fmt::format("'{}.fork_server' = true on glob entry \"{}\": a fork server preloads "
                                                "one library, and the names a glob entry serves are not known ahead "
                                                "of time; expected an entry per library, or fork_server = false",
                                                prefix, library.name));
      return;
    }
    if (!library.command.empty() && !reference_server_command(library.command)) {
      std::string shown;
      for (const auto& item : library.command) shown += (shown.empty() ? "\"" : ", \"") + item + "\"";
      reader_.problem(at->source(), fmt::format("'{}.fork_server' = true needs a library served by the reference Python "
                                                "server on stdio, command = [PYTHON, \"-m\", \"{}\", \"--stdio\", ...], "
                                                "not [{}]: only that server's start-up can be forked from a template; "
                                                "expected that command, or fork_server = false",
                                                prefix, config::kReferenceServerModule, shown));
    }
  }

  // Glob entries: the deny list, and no prewarm or sharing where the command depends on the imported name
  // (an error in the entry's own table; from [defaults], ignored, as for an upstream).
  void check_glob(const toml::table& table, std::string_view prefix, Library& library) {
    if (!library.is_glob()) {
      // (dotted = false says what an exact entry does anyway.)
      for (std::string_view key : {"deny", "dotted"})
        if (const auto* node = table.get(key); node && (key == "deny" || library.dotted))
          reader_.problem(node->source(), fmt::format("'{}.{}' applies only to a glob entry (a name with '*' or '?'); "
                                                      "expected it removed, or a glob name",
                                                      prefix, key));
      return;
    }
    auto names = [](const std::string& item) { return item.find("{library}") != std::string::npos; };
    if (library.prewarm_import)
      reader_.problem((table.get("prewarm_import") ? table.get("prewarm_import") : table.get("name"))->source(),
                      fmt::format("'{}' = true on glob entry \"{}\": the name a client will import is not known "
                                  "ahead of time; expected prewarm_import = false",
                                  setting_key(table, prefix, "prewarm_import"), library.name));
    // A program looked up in PATH by a name the client chose: any program whose name matches the glob.
    if (!library.command.empty() && names(library.command.front()) && library.command.front().find('/') == std::string::npos)
      reader_.problem(table.get("command")->source(),
                      fmt::format("'{}.command[0]' = \"{}\" on glob entry \"{}\" lets a client choose which program "
                                  "in PATH runs; expected a fixed program, or a path such as "
                                  "\"/opt/venvs/{{library}}/bin/python\"",
                                  prefix, library.command.front(), library.name));
    const bool per_name = std::any_of(library.command.begin(), library.command.end(), names) ||
                          std::any_of(library.env.begin(), library.env.end(), [&](const auto& e) { return names(e.second); });
    if (!per_name) return;
    const Library plain;
    if (!table.get("prewarm")) library.prewarm = plain.prewarm, library.prewarm_import = plain.prewarm_import;
    if (!table.get("isolation")) library.isolation = plain.isolation;
    auto at = [&](std::string_view key) { return table.get(key) ? table.get(key) : table.get("command"); };
    if (library.prewarm > 0)
      reader_.problem(at("prewarm")->source(),
                      fmt::format("'{}' = {} on glob entry \"{}\" whose command or env contains {{library}}: a worker cannot "
                                  "be started before the name it serves is known; expected prewarm = 0",
                                  setting_key(table, prefix, "prewarm"), library.prewarm, library.name));
    if (library.isolation == Isolation::shared)
      reader_.problem(at("isolation")->source(),
                      fmt::format("'{}' = \"shared\" on glob entry \"{}\" whose command or env contains {{library}}: each "
                                  "imported name needs a worker of its own; expected isolation = \"session\", or a "
                                  "command without {{library}}",
                                  setting_key(table, prefix, "isolation"), library.name));
  }

  // [classic] default_library names a library the configuration serves: an exact entry, or a name a glob
  // entry serves.
  void check_default_library(const toml::table& table, const Config& config) {
    const auto& name = config.classic.default_library;
    const auto* node = table.get("default_library");
    if (name.empty() || !node) return;
    if (config.find_library(name)) return;
    for (const auto& library : config.libraries)
      if (library.is_glob() && glob_match(library.name, name) && glob_refusal(library, name) == GlobRefusal::none)
        return;
    std::string names;
    for (const auto& library : config.libraries) names += (names.empty() ? "" : ", ") + library.name;
    reader_.problem(node->source(), fmt::format("'classic.default_library' = \"{}\" is not a library of this "
                                                "configuration; expected one of: {}",
                                                name, names));
  }

  // What classic clients may hold leaves every capped pool room for JSON-RPC clients: [classic] max_imports
  // below [gateway] max_workers, and each library's classic share below its own max_workers (a glob entry's
  // names each hold imports of their own, up to max_imports together). classic_instances above max_imports
  // could never be reached.
  void check_classic_share(const toml::table& table, const Config& config) {
    const std::size_t most = config.classic.max_imports;
    const auto* own = table.get("max_imports");
    const std::string most_text =
        fmt::format("'classic.max_imports' = {}{}", most, own ? "" : " (the default)");
    const auto& source = own ? own->source() : table.source();
    if (const auto cap = config.gateway.max_workers; cap && most >= cap)
      reader_.problem(source, fmt::format("{} lets classic clients hold every one of the '[gateway] max_workers' = {} "
                                          "workers, leaving none for JSON-RPC clients; expected classic.max_imports "
                                          "below gateway.max_workers (or max_workers = 0: no cap)",
                                          most_text, cap));
    std::set<std::string> said;  // a key set in [defaults] is reported once
    for (std::size_t i = 0; i < config.libraries.size() && i < library_tables_.size(); ++i) {
      const Library& library = config.libraries[i];
      const toml::table& lib = *library_tables_[i].second;
      const auto prefix = fmt::format("library[{}]", library_tables_[i].first);
      auto at = [&](std::string_view key) -> const toml::source_region& {
        if (const auto* node = lib.get(key)) return node->source();
        if (defaults_table_ && defaults_table_->get(key)) return defaults_table_->get(key)->source();
        return lib.source();
      };
      const auto instances_key = setting_key(lib, prefix, "classic_instances");
      if (!library.is_glob() && library.classic_instances > most && said.insert(instances_key).second)
        reader_.problem(at("classic_instances"),
                        fmt::format("'{}' = {} is more than {}, so it can never be reached; expected at most "
                                    "classic.max_imports (or raise max_imports)",
                                    instances_key, library.classic_instances, most_text));
      if (library.max_workers == 0 || library.classic_instances == 0) continue;
      const bool shared = library.isolation == Isolation::shared;
      // Imports the pool can serve at once: a shared worker serves several.
      const std::size_t room = shared ? library.max_workers * library.max_imports_per_worker : library.max_workers;
      const std::size_t share = library.is_glob() ? most : std::min(library.classic_instances, most);
      if (share < room) continue;
      const auto workers_key = setting_key(lib, prefix, "max_workers");
      const auto what = shared ? fmt::format("every import its '{}' = {} shared workers serve ('{}' = {})", workers_key,
                                             library.max_workers, setting_key(lib, prefix, "max_imports_per_worker"),
                                             library.max_imports_per_worker)
                               : fmt::format("every one of its '{}' = {} workers", workers_key, library.max_workers);
      if (library.is_glob()) {
        if (said.insert(prefix + ".glob").second)
          reader_.problem(at("max_workers"),
                          fmt::format("{} lets classic clients hold {} of glob entry \"{}\" (each name they call "
                                      "holds an import of its own), leaving none for its JSON-RPC clients; expected "
                                      "classic.max_imports below that, or a higher max_workers",
                                      most_text, what, library.name));
      } else if (said.insert(instances_key + "/" + workers_key).second) {
        reader_.problem(at(lib.get("classic_instances") ? "classic_instances" : "max_workers"),
                        fmt::format("'{}' = {} lets classic clients hold {} of library \"{}\", leaving none for its "
                                    "JSON-RPC clients; expected classic_instances below that (0: not served to "
                                    "classic clients), or a higher max_workers",
                                    instances_key, library.classic_instances, what, library.name));
      }
    }
  }

  // The admin endpoint and the classic front listen on TCP only, and cannot share an address with the
  // gateway (or each other), nor take the same passed socket.
  void check_http_listen(const toml::table& table, std::string_view section, std::string_view what,
                         const std::vector<ListenAddress>& addresses, const Config& config) {
    const auto* listen = table.get("listen");
    if (!listen || !listen->is_array()) return;
    std::vector<std::pair<std::string_view, const std::vector<ListenAddress>*>> others = {{"[gateway]", &config.gateway.listen}};
    if (section == "classic") others.emplace_back("[admin]", &config.admin.listen);
    for (std::size_t i = 0; i < addresses.size(); ++i) {
      const auto& mine = addresses[i];
      const auto* element = listen->as_array()->get(i);
      const auto where = element ? element->source() : listen->source();
      if (mine.kind == ListenAddress::Kind::unix_socket)
        reader_.problem(where, fmt::format("'{}.listen[{}]' = \"{}\": {} listens on TCP only; expected "
                                           "\"tcp://HOST:PORT\" or a systemd socket",
                                           section, i, mine.text, what));
      for (const auto& [other_name, other] : others) {
        for (const auto& theirs : *other) {
          const bool same = mine.kind == theirs.kind && mine.kind == ListenAddress::Kind::systemd
                                ? mine.fd_name == theirs.fd_name
                                : mine.kind == theirs.kind && mine.port != 0 && mine.host == theirs.host &&
                                      mine.port == theirs.port;
          if (!same) continue;
          reader_.problem(where, fmt::format("'{}.listen[{}]' = \"{}\" is also in {} listen; expected {} on an "
                                             "address (or systemd socket name) of its own",
                                             section, i, mine.text, other_name, what));
        }
      }
    }
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
    reader_.problem(own->source(), fmt::format("'{}' = {} is more than '{}' = {}; expected prewarm to be at most "
                                               "max_workers (or max_workers = 0: no cap of the library's own)",
                                               setting_key(table, prefix, "prewarm"), library.prewarm,
                                               setting_key(table, prefix, "max_workers"), library.max_workers));
  }

  // prewarm_import imports ahead of time in prewarmed session workers only: without prewarm there is no
  // worker to import in, and a shared worker keeps the library loaded across imports already. Checked like
  // check_prewarm_cap: where one of the keys involved is set (a conflict inside [defaults] once, there).
  void check_prewarm_import(const toml::table& table, std::string_view prefix, const Library& library) {
    if (!library.prewarm_import) return;
    auto at = [&](std::string_view other) -> const toml::node* {
      return table.get("prewarm_import") ? table.get("prewarm_import") : table.get(other);
    };
    const auto key = setting_key(table, prefix, "prewarm_import");
    if (library.isolation == Isolation::shared) {
      if (const auto* node = at("isolation"))
        reader_.problem(node->source(),
                        fmt::format("'{}' = true does not apply to '{}' = \"shared\": a shared worker keeps the library "
                                    "loaded across imports already, and gives each import an instance of its own; "
                                    "expected isolation = \"session\", or prewarm_import = false",
                                    key, setting_key(table, prefix, "isolation")));
    }
    if (library.prewarm == 0) {
      if (const auto* node = at("prewarm"))
        reader_.problem(node->source(),
                        fmt::format("'{}' = true needs '{}' of at least 1 (it is 0): the library is imported ahead of "
                                    "time in prewarmed workers only; expected prewarm = 1 or more, or prewarm_import "
                                    "= false",
                                    key, setting_key(table, prefix, "prewarm")));
    }
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
      reader_.problem(own ? own->source() : table.source(),
                      fmt::format("'{}' = {} brings the prewarmed workers of all libraries to {}, more than "
                                  "'gateway.max_workers' = {}; expected the prewarm values together to be at most "
                                  "gateway.max_workers (0: no cap)",
                                  setting_key(table, prefix, "prewarm"), library.prewarm, total, cap));
      return;
    }
  }

  std::string path_;
  Reader reader_;
  std::map<std::string, int> names_;             // library name -> line of its [[library]]
  const toml::table* defaults_table_ = nullptr;  // [defaults], when present and a table
  std::vector<std::pair<std::size_t, const toml::table*>> library_tables_;  // of each library in config.libraries: its index and table
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

std::string_view to_string(Isolation isolation) {
  for (auto [name, value] : detail::kIsolations)
    if (value == isolation) return name;
  return "?";
}

std::string_view to_string(PicklePolicy policy) {
  for (auto [name, value] : detail::kPicklePolicies)
    if (value == policy) return name;
  return "?";
}

std::string_view to_string(Arguments arguments) {
  for (auto [name, value] : detail::kArgumentModes)
    if (value == arguments) return name;
  return "?";
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
