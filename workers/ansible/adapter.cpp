#include "workers/ansible/adapter.hpp"

#include "common/log.hpp"
#include "common/pickle/python_json.hpp"
#include "common/protocol/json_text.hpp"
#include "workers/sdk/sdk.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <utility>

namespace rjg::ansible {
namespace {

bool starts_with_any(std::string_view s, std::initializer_list<std::string_view> prefixes) {
  return std::any_of(prefixes.begin(), prefixes.end(), [&](std::string_view p) { return s.starts_with(p); });
}

std::string text_of(const json::value& v) {
  if (v.is_string()) return std::string(v.get_string());
  return json::serialize(v);
}

std::string trim(std::string_view s) {
  const auto first = s.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return {};
  return std::string(s.substr(first, s.find_last_not_of(" \t\r\n") - first + 1));
}

bool is_word(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isalnum(c) || c == '_'; });
}

constexpr std::string_view kAccepted =
    "It takes ansible_* connection variables (ansible_host, ansible_user, ansible_port, ansible_connection, "
    "ansible_ssh_private_key_file, ansible_python_interpreter, ...) and modules=MODULE,MODULE";

std::vector<std::string> module_list(const Where& where, const json::value& value) {
  std::vector<std::string> names;
  if (value.is_array()) {
    for (const auto& item : value.get_array()) {
      if (!item.is_string())
        throw Refused(fmt::format("{}modules= must list module names, and {} is not one.", where.prefix(),
                                  json::serialize(item)));
      names.push_back(trim(item.get_string()));
    }
  } else if (value.is_string()) {
    std::string_view text = value.get_string();
    for (std::size_t begin = 0; begin <= text.size();) {
      auto comma = text.find(',', begin);
      if (comma == std::string_view::npos) comma = text.size();
      if (auto name = trim(text.substr(begin, comma - begin)); !name.empty()) names.push_back(std::move(name));
      begin = comma + 1;
    }
  } else {
    throw Refused(fmt::format("{}modules= takes a list of module names or a comma-separated text, not {}.",
                              where.prefix(), json::serialize(value)));
  }
  std::vector<std::string> keywords{"runaction", "gatherfacts"};
  for (const auto& name : names) {
    check_module_name(where, name);
    const auto key = sdk::normalize_name(keyword_name(name));
    if (std::find(keywords.begin(), keywords.end(), key) != keywords.end())
      throw Refused(fmt::format("{}modules= names '{}', whose keyword '{}' is already taken (by Run Action, Gather "
                                "Facts or another module of the list). Run it with Run Action instead.",
                                where.prefix(), name, keyword_name(name)));
    keywords.push_back(key);
  }
  return names;
}

// The connection variables a worker with --allow accepts: where to connect and as whom, and nothing else.
// Many others make Ansible start a program of the client's choosing on this machine (interpreters, ssh
// binaries and options such as ProxyCommand, other plugins' kinit or chroot commands), which an
// allow-list of modules must not let through; a list of what is safe cannot miss one.
bool safe_when_restricted(std::string_view name) {
  static constexpr std::string_view kSafe[] = {
      "ansible_host",     "ansible_port",     "ansible_user",          "ansible_password",
      "ansible_ssh_host", "ansible_ssh_port", "ansible_ssh_user",      "ansible_ssh_pass",
      "ansible_connection", "ansible_ssh_private_key_file", "ansible_private_key_file", "ansible_timeout",
      "ansible_ssh_timeout"};
  return std::find(std::begin(kSafe), std::end(kSafe), name) != std::end(kSafe);
}
// Connection plugins a worker with --allow uses: those of ansible-core that start no program the client
// names.
bool safe_connection(std::string_view plugin) {
  if (plugin.starts_with("ansible.builtin.")) plugin.remove_prefix(16);
  return plugin == "local" || plugin == "ssh" || plugin == "paramiko_ssh" || plugin == "paramiko";
}

std::string_view builtin_name(std::string_view module) {
  if (module.starts_with("ansible.builtin.")) module.remove_prefix(16);
  else if (module.starts_with("ansible.legacy.")) module.remove_prefix(15);
  return module;
}

// When an option of OptionRule runs what the client chose: whenever it is given, or for some values only
// (split: a text that a module writes into a command line which it then splits into words).
enum class When { given, dash, path, quote, split };

// One option of a builtin module of ansible-core 2.14 that runs a program or loads code of the client's
// choosing. Aliases have rows of their own; option "*" is every option of the module (for When::dash).
struct OptionRule {
  std::string_view module;
  std::string_view option;
  When when;
  std::string_view does;  // completes "option 'O' of module 'M' ..." (given) or "... (value): " (the others)
};

constexpr std::string_view kValidate = "runs the command it names on the file (%s) before the file is written";
constexpr std::string_view kFactPath = "runs every executable *.fact file of the directory it names";
constexpr std::string_view kUse = "runs the module it names with the other options (use=command runs a command)";
constexpr std::string_view kDeb = "installs the package file it names, whose maintainer scripts run";
constexpr std::string_view kDpkgOptions =
    "is written into apt-get's command line, where an option such as DPkg::Pre-Invoke runs a command";
constexpr std::string_view kQuoted =
    "apt writes it into apt-get's command line in quotes, which it would end, and the rest would become "
    "apt-get options such as DPkg::Pre-Invoke, which runs a command";
constexpr std::string_view kConfFile = "makes the package manager read the configuration file it names, whose "
                                       "pluginpath loads Python code";
constexpr std::string_view kInstallRoot = "makes the package manager read its configuration under the directory it "
                                          "names, whose pluginpath loads Python code";
constexpr std::string_view kGitWords =
    "the git module writes it into command lines that it splits into words, and a word beginning with '-' is an "
    "option of git's own, some of which run a command (--upload-pack)";
constexpr std::string_view kCommand = "is run as a command on the host";
constexpr std::string_view kInitScript = "a path runs that file as the service's init script";
constexpr std::string_view kUnitFile = "systemctl links that file as a unit, whose commands then run";

constexpr OptionRule kOptionRules[] = {
    {"assemble", "validate", When::given, kValidate},
    {"blockinfile", "validate", When::given, kValidate},
    {"copy", "validate", When::given, kValidate},
    {"lineinfile", "validate", When::given, kValidate},
    {"replace", "validate", When::given, kValidate},
    {"template", "validate", When::given, kValidate},
    {"setup", "fact_path", When::given, kFactPath},
    {"gather_facts", "fact_path", When::given, kFactPath},
    {"package", "use", When::given, kUse},
    {"service", "use", When::given, kUse},
    // package hands every other option to the package manager module it picks.
    {"apt", "deb", When::given, kDeb},
    {"package", "deb", When::given, kDeb},
    {"apt", "dpkg_options", When::given, kDpkgOptions},
    {"package", "dpkg_options", When::given, kDpkgOptions},
    {"apt", "name", When::quote, kQuoted},
    {"apt", "package", When::quote, kQuoted},
    {"apt", "pkg", When::quote, kQuoted},
    {"package", "name", When::quote, kQuoted},
    {"apt", "default_release", When::quote, kQuoted},
    {"apt", "default-release", When::quote, kQuoted},
    {"package", "default_release", When::quote, kQuoted},
    {"package", "default-release", When::quote, kQuoted},
    {"dnf", "conf_file", When::given, kConfFile},
    {"yum", "conf_file", When::given, kConfFile},
    {"package", "conf_file", When::given, kConfFile},
    {"dnf", "installroot", When::given, kInstallRoot},
    {"yum", "installroot", When::given, kInstallRoot},
    {"package", "installroot", When::given, kInstallRoot},
    {"pip", "executable", When::given, "is the pip program run"},
    {"pip", "virtualenv_command", When::given, "is the program run to create the virtualenv"},
    {"pip", "virtualenv_python", When::given, "is the Python interpreter the virtualenv tool runs"},
    {"git", "executable", When::given, "is the git program run"},
    {"git", "ssh_opts", When::given, "goes to ssh, where -o ProxyCommand=... runs a command"},
    {"git", "repo", When::split, kGitWords},
    {"git", "name", When::split, kGitWords},
    {"git", "remote", When::split, kGitWords},
    {"git", "version", When::split, kGitWords},
    {"git", "*", When::dash, "git would read it as an option of its own, and some run a command (--upload-pack)"},
    {"subversion", "executable", When::given, "is the svn program run"},
    {"subversion", "*", When::dash,
     "svn would read it as an option of its own, and some run a command (--config-option with a tunnel)"},
    {"unarchive", "extra_opts", When::given,
     "goes to tar or unzip, where --to-command or --use-compress-program runs a command"},
    {"unarchive", "*", When::dash, "tar would read it as an option of its own, and some run a command (--to-command)"},
    {"reboot", "reboot_command", When::given, kCommand},
    {"reboot", "boot_time_command", When::given, kCommand},
    {"reboot", "test_command", When::given, kCommand},
    {"reboot", "search_paths", When::given, "names the directories searched for the shutdown program that runs"},
    {"service", "name", When::path, kInitScript},
    {"sysvinit", "name", When::path, kInitScript},
    {"sysvinit", "service", When::path, kInitScript},
    {"systemd", "name", When::path, kUnitFile},
    {"systemd_service", "name", When::path, kUnitFile},
    {"user", "shell", When::given,
     "becomes the user's login shell, which every later login of the user runs (Ansible's over ssh too)"},
};

constexpr std::string_view kProgramRunners[] = {
    "command", "shell",   "script", "raw",          "expect",       "cron",        "pip",         "apt", "dnf",
    "yum",     "package", "include", "include_tasks", "import_tasks", "include_role", "import_role"};

// Whether `value` (a text, or a list holding one) is what `when` looks for; the text that is.
std::optional<std::string> matching_value(When when, const json::value& value) {
  const auto matches = [when](std::string_view text) {
    switch (when) {
      case When::dash: return text.starts_with('-');
      case When::path: return text.find('/') != std::string_view::npos;
      case When::quote: return text.find_first_of("'\"\\") != std::string_view::npos;
      case When::split:
        return text.starts_with('-') || text.find_first_of(" \t\n\r\v\f'\"\\") != std::string_view::npos;
      case When::given: return true;
    }
    return false;
  };
  if (value.is_string() && matches(value.get_string())) return std::string(value.get_string());
  if (value.is_array())
    for (const auto& item : value.get_array())
      if (item.is_string() && matches(item.get_string())) return std::string(item.get_string());
  return std::nullopt;
}

std::string_view what_value(When when) {
  switch (when) {
    case When::dash: return "begins with '-'";
    case When::path: return "names a path";
    case When::quote: return "contains a quote";
    case When::split: return "begins with '-' or holds a space, a quote or a backslash";
    case When::given: break;
  }
  return "";
}

// Ansible's documentation markup (C(code), I(italic), B(bold), M(module), U(url), L(text,url), O(option),
// V(value)) as Robot Framework's.
std::string robot_doc(std::string_view text) {
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    const bool marker = std::string_view("CIBMUOLV").find(c) != std::string_view::npos && i + 1 < text.size() &&
                        text[i + 1] == '(' && (i == 0 || !std::isalnum(static_cast<unsigned char>(text[i - 1])));
    const auto close = marker ? text.find(')', i + 2) : std::string_view::npos;
    if (close == std::string_view::npos) {
      out += c;
      continue;
    }
    const auto inner = text.substr(i + 2, close - i - 2);
    switch (c) {
      case 'I': out += fmt::format("_{}_", inner); break;
      case 'B': out += fmt::format("*{}*", inner); break;
      case 'U': out += inner; break;
      case 'L': {
        const auto comma = inner.rfind(',');
        out += comma == std::string_view::npos ? std::string(inner)
                                               : fmt::format("{} ({})", trim(inner.substr(0, comma)), trim(inner.substr(comma + 1)));
        break;
      }
      default: out += fmt::format("``{}``", inner);
    }
    i = close;
  }
  return out;
}

// ansible-doc gives a description as a text or a list of paragraphs.
std::vector<std::string> paragraphs(const json::value* v) {
  std::vector<std::string> out;
  if (!v) return out;
  if (v->is_string()) out.push_back(robot_doc(v->get_string()));
  if (v->is_array())
    for (const auto& p : v->get_array())
      if (p.is_string()) out.push_back(robot_doc(p.get_string()));
  return out;
}

std::string robot_type(std::string_view ansible_type) {
  if (ansible_type == "str" || ansible_type == "path") return "str";
  for (std::string_view same : {"int", "float", "bool", "list", "dict"})
    if (ansible_type == same) return std::string(same);
  return {};  // raw, jsonarg, bytes, bits, ...: Ansible converts them itself
}

json::object named_only(std::string_view name, std::string_view type, const json::value* default_value) {
  json::object arg{{"name", name}, {"type", type}, {"kind", "NAMED_ONLY"}, {"required", true},
                   {"has_default", default_value != nullptr}};
  // A Python client reads a default as a value: a nested one (a list of dicts) pickled.
  if (default_value)
    if (auto d = pickle::definition_default(*default_value, name)) arg["default"] = std::move(*d);
  return arg;
}

void write_yaml_string(std::string& out, std::string_view s) {
  out += "!unsafe \"";
  for (std::size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7f) {
      out += fmt::format("\\x{:02X}", c);
    } else if (c == 0xc2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) >= 0x80 &&
               static_cast<unsigned char>(s[i + 1]) <= 0x9f) {
      // C1 controls are not printable YAML: escaped as the code points they are.
      out += fmt::format("\\x{:02X}", static_cast<unsigned char>(s[++i]));
    } else if (c == 0xe2 && (s.substr(i, 3) == "\xe2\x80\xa8" || s.substr(i, 3) == "\xe2\x80\xa9")) {
      // U+2028 and U+2029 are line breaks to YAML 1.1, even inside a quoted string (the spaces around
      // them would fold away, and "---" after one would end the document).
      out += s[i + 2] == '\xa8' ? "\\u2028" : "\\u2029", i += 2;
    } else if (c == 0xef && s.substr(i, 3) == "\xef\xbf\xbe") {
      out += "\\uFFFE", i += 2;
    } else if (c == 0xef && s.substr(i, 3) == "\xef\xbf\xbf") {
      out += "\\uFFFF", i += 2;
    } else {
      out += static_cast<char>(c);
    }
  }
  out += '"';
}

void write_yaml(std::string& out, const json::value& v) {
  switch (v.kind()) {
    case json::kind::null: out += "null"; break;
    case json::kind::bool_: out += v.get_bool() ? "true" : "false"; break;
    case json::kind::int64: out += std::to_string(v.get_int64()); break;
    case json::kind::uint64: out += std::to_string(v.get_uint64()); break;
    case json::kind::double_: {
      // YAML 1.1 (PyYAML) reads a float only with a dot, and an exponent only with a sign.
      const double d = v.get_double();
      if (d != d) out += ".nan";
      else if (d == d + d && d != 0) out += d > 0 ? ".inf" : "-.inf";
      else {
        auto text = fmt::format("{}", d);
        const auto e = text.find('e');
        if (text.find('.') == std::string::npos) text.insert(e == std::string::npos ? text.size() : e, ".0");
        out += text;
      }
      break;
    }
    case json::kind::string: write_yaml_string(out, v.get_string()); break;
    case json::kind::array: {
      out += '[';
      bool first = true;
      for (const auto& item : v.get_array()) {
        if (!std::exchange(first, false)) out += ", ";
        write_yaml(out, item);
      }
      out += ']';
      break;
    }
    case json::kind::object: {
      // Explicit keys ("? "): PyYAML drops a plain flow key longer than 1024 characters.
      out += '{';
      bool first = true;
      for (const auto& [key, item] : v.get_object()) {
        if (!std::exchange(first, false)) out += ", ";
        out += "? ";
        write_yaml_string(out, key);
        out += ": ";
        write_yaml(out, item);
      }
      out += '}';
      break;
    }
  }
}

}  // namespace

std::string Where::prefix() const {
  return keyword.empty() ? fmt::format("Library '{}': ", library)
                         : fmt::format("Library '{}', keyword '{}': ", library, keyword);
}

Target parse_import(const Where& where, const json::array& args, const json::object& kw_args, bool restricted,
                    const std::string& local_python) {
  std::vector<std::pair<std::string, json::value>> given;
  for (const auto& arg : args) {
    const auto text = text_of(arg);
    const auto eq = text.find('=');
    if (!arg.is_string() || eq == std::string::npos || eq == 0)
      throw Refused(fmt::format("{}library arguments are named (name=value), and '{}' is not. {}.", where.prefix(),
                                text, kAccepted));
    given.emplace_back(text.substr(0, eq), json::value(text.substr(eq + 1)));
  }
  for (const auto& [name, value] : kw_args) given.emplace_back(std::string(name), value);

  Target target;
  for (auto& [name, value] : given) {
    if (name == "modules") {
      target.modules = module_list(where, value);
    } else if (starts_with_any(name, {"ansible_become", "ansible_sudo", "ansible_su_"}) || name == "ansible_su") {
      throw Refused(fmt::format("{}the argument '{}' asks for privilege escalation (become), which this library does "
                                "not do. Connect as a user that has the rights the modules need (ansible_user).",
                                where.prefix(), name));
    } else if (name.starts_with("ansible_") && is_word(name)) {
      if (restricted && !safe_when_restricted(name))
        throw Refused(fmt::format("{}the argument '{}' is refused: this worker runs only the modules given with "
                                  "--allow, and then takes only the connection variables that say where to connect "
                                  "and as whom (ansible_host, ansible_port, ansible_user, ansible_password, "
                                  "ansible_connection, ansible_ssh_private_key_file, ansible_timeout), none that "
                                  "could name a program to start here. Ask the gateway's operator if the target "
                                  "needs it.",
                                  where.prefix(), name));
      // A host or user beginning with '-' would reach ssh's command line as an option.
      if ((name == "ansible_host" || name == "ansible_user" || name == "ansible_ssh_host" ||
           name == "ansible_ssh_user") &&
          value.is_string() && value.get_string().starts_with("-"))
        throw Refused(fmt::format("{}{}='{}' begins with '-', which ssh would read as an option: give a host "
                                  "name, an address or a user name.",
                                  where.prefix(), name, std::string_view(value.get_string())));
      target.vars[name] = std::move(value);
    } else {
      throw Refused(fmt::format("{}unknown library argument '{}'. {}.", where.prefix(), name, kAccepted));
    }
  }

  // Copied, not pointed at: the inserts below may rehash target.vars.
  std::optional<std::string> host;
  if (const auto* h = target.vars.if_contains("ansible_host")) host = text_of(*h);
  if (const auto* connection = target.vars.if_contains("ansible_connection")) {
    if (!connection->is_string() || !valid_module_name(connection->get_string()))
      throw Refused(fmt::format("{}ansible_connection={} is not a connection plugin name (local, ssh, paramiko, ...).",
                                where.prefix(), text_of(*connection)));
    if (restricted && !safe_connection(connection->get_string()))
      throw Refused(fmt::format("{}ansible_connection={} is refused: this worker runs only the modules given with "
                                "--allow, and then connects only with local, ssh or paramiko.",
                                where.prefix(), text_of(*connection)));
  } else {
    target.vars["ansible_connection"] = host ? "ssh" : "local";
  }
  const bool local = is_local(target);
  // A local connection runs modules on the interpreter Ansible itself runs on (as Ansible's implicit
  // localhost does), rather than whatever "python3" comes first on PATH.
  if (local && !local_python.empty() && !target.vars.contains("ansible_python_interpreter"))
    target.vars["ansible_python_interpreter"] = local_python;
  target.host = host ? *host : local ? "localhost" : "the inventory host";
  return target;
}

bool is_local(const Target& target) {
  const auto* connection = target.vars.if_contains("ansible_connection");
  return connection && connection->is_string() &&
         (connection->get_string() == "local" || connection->get_string() == "ansible.builtin.local");
}

bool valid_module_name(std::string_view name) {
  return !name.empty() && name.front() != '.' && name.back() != '.' &&
         std::all_of(name.begin(), name.end(),
                     [](unsigned char c) { return std::isalnum(c) || c == '_' || c == '.'; });
}

void check_module_name(const Where& where, std::string_view name) {
  if (!valid_module_name(name))
    throw Refused(fmt::format("{}'{}' is not a module name: module names are letters, digits, '_' and '.' (like "
                              "command or ansible.builtin.copy).",
                              where.prefix(), name));
}

bool allowed(const std::vector<std::string>& allow, std::string_view module) {
  if (allow.empty()) return true;
  auto builtin = [](std::string_view name) {
    return name.starts_with("ansible.builtin.") ? name.substr(16) : name.starts_with("ansible.legacy.") ? name.substr(15) : name;
  };
  return std::any_of(allow.begin(), allow.end(), [&](const std::string& a) { return builtin(a) == builtin(module); });
}

std::string refused_by_allow_list(const Where& where, std::string_view module, const std::vector<std::string>& allow) {
  return fmt::format("{}module '{}' is not allowed here: this worker runs only the modules given with --allow ({}). "
                     "Use one of those, or ask the gateway's operator to add --allow {} to the library's command.",
                     where.prefix(), module, fmt::join(allow, ", "), module);
}

std::string gather_facts_refused(const Where& where, const std::vector<std::string>& allow) {
  return fmt::format("{}facts are gathered by the module 'setup', which is not allowed here: this worker runs only "
                     "the modules given with --allow ({}). Ask the gateway's operator to add --allow setup to the "
                     "library's command to gather facts.",
                     where.prefix(), fmt::join(allow, ", "));
}

std::optional<std::string> refused_option(const Where& where, std::string_view module, const json::object& options,
                                          const std::vector<std::string>& allowed_options) {
  const auto name = builtin_name(module);
  for (const auto& [key, value] : options) {
    // Null is an option left out, to Ansible as here.
    if (value.is_null()) continue;
    const auto flag = fmt::format("{}.{}", name, std::string_view(key));
    if (std::any_of(allowed_options.begin(), allowed_options.end(), [&](const std::string& given) {
          const auto dot = given.rfind('.');
          return builtin_name(std::string_view(given).substr(0, dot)) == name &&
                 std::string_view(given).substr(dot + 1) == key;
        }))
      continue;
    const auto refuse = [&](std::string_view why) {
      return fmt::format("{}option '{}' of module '{}' {}. This worker runs only the modules given with --allow, whose "
                         "clients do not choose programs to run: leave the option out, or ask the gateway's operator "
                         "to add --allow-option {} to the library's command.",
                         where.prefix(), std::string_view(key), module, why, flag);
    };
    if (key.starts_with("_"))
      return refuse("is one of Ansible's internal parameters, which no client needs (command's _uses_shell runs the "
                    "command through a shell)");
    const auto rules_for = [&](std::string_view option) {
      std::vector<const OptionRule*> found;
      for (const auto& rule : kOptionRules)
        if (rule.module == name && rule.option == option) found.push_back(&rule);
      return found;
    };
    // An option's own rules replace the module's rule for every option.
    auto rules = rules_for(key);
    if (rules.empty()) rules = rules_for("*");
    for (const auto* rule : rules) {
      if (rule->when == When::given) return refuse(rule->does);
      if (const auto text = matching_value(rule->when, value))
        return refuse(fmt::format("{} ({}): {}", what_value(rule->when), log::printable(*text, 80), rule->does));
    }
  }
  return std::nullopt;
}

bool valid_option_flag(std::string_view flag) {
  const auto dot = flag.rfind('.');
  if (dot == std::string_view::npos || !valid_module_name(flag.substr(0, dot))) return false;
  const auto option = flag.substr(dot + 1);
  return !option.empty() && std::all_of(option.begin(), option.end(), [](unsigned char c) {
    return std::isalnum(c) || c == '_' || c == '-';
  });
}

bool refusable_option(std::string_view flag) {
  if (!valid_option_flag(flag)) return false;
  const auto dot = flag.rfind('.');
  const auto name = builtin_name(flag.substr(0, dot));
  const auto option = flag.substr(dot + 1);
  return option.starts_with('_') || std::any_of(std::begin(kOptionRules), std::end(kOptionRules), [&](const auto& rule) {
           return rule.module == name && (rule.option == option || rule.option == "*");
         });
}

std::vector<std::string> program_runners(const std::vector<std::string>& allow) {
  std::vector<std::string> found;
  for (const auto& module : allow)
    if (std::find(std::begin(kProgramRunners), std::end(kProgramRunners), builtin_name(module)) !=
        std::end(kProgramRunners))
      found.push_back(module);
  return found;
}

bool drop_environment(json::object& result) {
  bool dropped = false;
  for (auto& [key, item] : result) {
    if (key == "ansible_facts" && item.is_object()) dropped = item.get_object().erase("ansible_env") > 0 || dropped;
    // Results nested in the result too (a loop's "results" list).
    if (item.is_object()) dropped = drop_environment(item.get_object()) || dropped;
    if (item.is_array())
      for (auto& element : item.get_array())
        if (element.is_object()) dropped = drop_environment(element.get_object()) || dropped;
  }
  return dropped;
}

std::string keyword_name(std::string_view module) {
  const auto dot = module.rfind('.');
  return std::string(dot == std::string_view::npos ? module : module.substr(dot + 1));
}

json::object module_keyword(std::string_view module, const json::object& doc_entry) {
  static const json::object kNone;
  const auto* doc_value = doc_entry.if_contains("doc");
  const json::object& doc = doc_value && doc_value->is_object() ? doc_value->get_object() : kNone;
  const auto* options_value = doc.if_contains("options");
  const json::object& options = options_value && options_value->is_object() ? options_value->get_object() : kNone;

  std::string text;
  if (const auto* s = doc.if_contains("short_description"); s && s->is_string())
    text = robot_doc(s->get_string()) + "\n\n";
  for (const auto& p : paragraphs(doc.if_contains("description"))) text += p + "\n\n";
  text += fmt::format("Runs the Ansible module ``{}`` once on the library's host and returns its result as a "
                      "dictionary, as `Run Action` does; a failed module fails the keyword.\n\n",
                      module);

  // Required options first, each group in ansible-doc's (alphabetical) order.
  std::vector<std::pair<std::string_view, const json::object*>> ordered;
  for (const auto& [name, option] : options)
    if (option.is_object() && name != "check_mode" && name != "diff") ordered.emplace_back(name, &option.get_object());
  std::stable_partition(ordered.begin(), ordered.end(), [](const auto& o) {
    const auto* required = o.second->if_contains("required");
    return required && *required == true;
  });

  json::array args;
  std::string option_lines;
  for (const auto& [name, option] : ordered) {
    const auto* type = option->if_contains("type");
    const std::string ansible_type = type && type->is_string() ? std::string(type->get_string()) : "str";
    const auto* required = option->if_contains("required");
    const bool is_required = required && *required == true;
    const auto* default_value = option->if_contains("default");
    static const json::value kNull;
    args.push_back(named_only(name, robot_type(ansible_type), is_required ? nullptr : default_value ? default_value : &kNull));

    std::vector<std::string> facts{is_required ? "required, " + ansible_type : ansible_type};
    if (const auto* aliases = option->if_contains("aliases"); aliases && aliases->is_array() && !aliases->get_array().empty()) {
      std::vector<std::string> names;
      for (const auto& a : aliases->get_array()) names.push_back(text_of(a));
      facts.push_back(fmt::format("aliases {} (through Run Action)", fmt::join(names, ", ")));
    }
    if (const auto* choices = option->if_contains("choices"); choices && choices->is_array()) {
      std::vector<std::string> names;
      for (const auto& c : choices->get_array()) names.push_back(text_of(c));
      facts.push_back(fmt::format("one of {}", fmt::join(names, ", ")));
    }
    if (default_value && !is_required) facts.push_back("default " + text_of(*default_value));
    const auto described = paragraphs(option->if_contains("description"));
    option_lines += fmt::format("- ``{}`` ({}){}\n", name, fmt::join(facts, "; "),
                                described.empty() ? "" : ": " + described.front());
  }
  const json::value kFalse(false);
  args.push_back(named_only("check_mode", "bool", &kFalse));
  args.push_back(named_only("diff", "bool", &kFalse));
  if (!option_lines.empty()) text += "Options (all named):\n" + option_lines + "\n";
  text += "``check_mode``: report what would change, changing nothing. ``diff``: report the differences the "
          "module makes (in the result's ``diff``, when the module supports it).";

  return json::object{{"name", keyword_name(module)}, {"args", std::move(args)}, {"doc", std::move(text)},
                      {"tags", json::array{"ansible"}}};
}

std::string unsafe_yaml(const json::value& value) {
  std::string out;
  write_yaml(out, value);
  return out;
}

std::string playbook(std::string_view module, const json::object& args, const json::object& vars, bool check_mode,
                     bool diff) {
  // The play's own keys are ours and stay plain; the variables' names are checked words.
  std::string vars_yaml = "{";
  for (const auto& [name, value] : vars) {
    if (vars_yaml.size() > 1) vars_yaml += ", ";
    vars_yaml += fmt::format("\"{}\": ", std::string_view(name));
    write_yaml(vars_yaml, value);
  }
  vars_yaml += "}";
  return fmt::format(
      "[{{\"hosts\": \"target\", \"gather_facts\": false, \"vars\": {},\n"
      "  \"tasks\": [{{\"name\": \"{}\", \"{}\": {}, \"check_mode\": {}, \"diff\": {}}}]}}]\n",
      vars_yaml, module, module, unsafe_yaml(args), check_mode, diff);
}

Outcome parse_outcome(std::string_view text) {
  boost::system::error_code ec;
  // Output that is not UTF-8 (a command printing Latin-1) reaches the record as lone surrogate escapes
  // (Python's surrogateescape), which Boost.JSON refuses: read them as U+FFFD.
  auto value = json::parse(protocol::replace_lone_surrogates(text), ec);
  const auto* status = !ec && value.is_object() ? value.get_object().if_contains("status") : nullptr;
  const auto* result = !ec && value.is_object() ? value.get_object().if_contains("result") : nullptr;
  if (!status || !status->is_string() || !result || !result->is_object())
    throw Refused(ec ? "its result record is not JSON: " + ec.message() : "its result record has no status or result");
  return {std::string(status->get_string()), std::move(value.get_object().at("result").get_object())};
}

Mapped map_outcome(const Where& where, std::string_view module, std::string_view host, const Outcome& outcome) {
  Mapped mapped;
  for (const auto& [key, value] : outcome.result) {
    if (key.starts_with("_ansible_") || key == "invocation") continue;
    if (key == "warnings" || key == "deprecations") {
      if (!value.is_array()) continue;
      for (const auto& w : value.get_array()) {
        const auto* msg = w.is_object() ? w.get_object().if_contains("msg") : nullptr;
        mapped.warnings.push_back(fmt::format("Ansible module '{}' on host {}{}: {}", module, host,
                                              key == "deprecations" ? " (deprecation)" : "",
                                              msg ? text_of(*msg) : text_of(w)));
      }
      continue;
    }
    mapped.value[key] = value;
  }
  const auto field = [&](std::string_view name) -> std::string {
    const auto* v = mapped.value.if_contains(name);
    return v && !v->is_null() ? trim(text_of(*v)) : std::string();
  };
  const auto flag = [&](std::string_view name) {
    const auto* v = mapped.value.if_contains(name);
    return v && *v == true;
  };
  const bool unreachable = outcome.status == "unreachable" || flag("unreachable");
  const bool failed = outcome.status == "failed" || flag("failed");
  mapped.skipped = outcome.status == "skipped" || flag("skipped");
  if (unreachable) {
    mapped.failure = fmt::format(
        "{}host {} is unreachable (module '{}'): {}. Check ansible_host, ansible_port, ansible_user and "
        "ansible_ssh_private_key_file, and that the gateway's machine can log in to the host with ssh.",
        where.prefix(), host, module, field("msg").empty() ? "no reason given" : field("msg"));
  } else if (failed) {
    std::string text = fmt::format("{}Ansible module '{}' failed on host {}: {}", where.prefix(), module, host,
                                   field("msg").empty() ? "no message given" : field("msg"));
    if (const auto rc = field("rc"); !rc.empty()) text += fmt::format(" (rc {})", rc);
    for (std::string_view stream : {"stderr", "module_stderr"})
      if (const auto s = field(stream); !s.empty()) text += fmt::format("\n{}: {}", stream, s.substr(0, 2000));
    mapped.failure = std::move(text);
  }
  return mapped;
}

std::string stderr_excerpt(std::string_view text) {
  std::vector<std::string_view> lines;
  for (std::size_t begin = 0; begin < text.size();) {
    auto end = text.find('\n', begin);
    if (end == std::string_view::npos) end = text.size();
    if (auto line = text.substr(begin, end - begin); !trim(line).empty()) lines.push_back(line);
    begin = end + 1;
  }
  std::size_t from = lines.size() > 8 ? lines.size() - 8 : 0;
  for (std::size_t i = lines.size(); i-- > 0;)
    if (lines[i].starts_with("ERROR!")) {
      from = i;
      break;
    }
  std::string out;
  for (std::size_t i = from; i < lines.size() && out.size() < 1500; ++i) out += std::string(lines[i]) + "\n";
  if (out.size() > 1500) out = out.substr(0, 1500) + "...";
  return trim(out);
}

std::string shebang_interpreter(std::string_view line) {
  if (!line.starts_with("#!")) return {};
  auto program = trim(line.substr(2));
  program = program.substr(0, program.find_first_of(" \t"));
  if (program.empty() || program.ends_with("/env")) return {};
  return program;
}

}  // namespace rjg::ansible
