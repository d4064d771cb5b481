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
#include <map>

namespace rjg::config {

bool same_settings(const Library& a, const Library& b) {
  Library moved = b;
  moved.source_line = a.source_line;
  return a == moved;
}

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

    detail::check_keys(reader_, root, "the top level", {"gateway", "admin", "defaults", "library"});

    if (auto* node = root.get("gateway")) {
      if (auto* table = reader_.expect_table(*node, "gateway", "[gateway]"))
        detail::load_table(reader_, *table, "[gateway]", "gateway", detail::gateway_keys(), config.gateway);
    }

    if (auto* node = root.get("admin")) {
      if (auto* table = reader_.expect_table(*node, "admin", "[admin]")) {
        detail::load_table(reader_, *table, "[admin]", "admin", detail::admin_keys(), config.admin);
        check_admin_listen(*table, config);
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
        }
        ++index;
      }
      check_total_prewarm(*libraries->as_array(), config, loaded);
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
    return reader_.problem_count() == before;
  }

  // The admin endpoint cannot share an address with the gateway, nor both take "every other" passed socket.
  void check_admin_listen(const toml::table& table, const Config& config) {
    const auto* listen = table.get("listen");
    if (!listen || !listen->is_array()) return;
    for (std::size_t i = 0; i < config.admin.listen.size(); ++i) {
      const auto& admin = config.admin.listen[i];
      for (const auto& gateway : config.gateway.listen) {
        const bool same = admin.kind == gateway.kind && admin.kind == ListenAddress::Kind::systemd
                              ? admin.fd_name == gateway.fd_name
                              : admin.kind == gateway.kind && admin.port != 0 && admin.host == gateway.host &&
                                    admin.port == gateway.port;
        if (!same) continue;
        const auto* element = listen->as_array()->get(i);
        reader_.problem(element ? element->source() : listen->source(),
                        fmt::format("'admin.listen[{}]' = \"{}\" is also in [gateway] listen; expected the admin "
                                    "endpoint on an address (or systemd socket name) of its own",
                                    i, admin.text));
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
