// Under an allow-list: the options with which a builtin module of ansible-core 2.14 runs a program or loads
// code of the client's choosing (refused_option), and the modules that run programs by design.
#include "workers/ansible/adapter.hpp"

#include "common/log.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

namespace rjg::ansible {
namespace {

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

}  // namespace

std::optional<std::string> refused_option(const Where& where, std::string_view module, const json::object& options,
                                          const std::vector<std::string>& allowed_options) {
  const auto name = builtin_name(module);
  for (const auto& entry : options) {
    // Named variables, not a structured binding: clang 14 cannot capture a binding in a lambda.
    const std::string_view key = entry.key();
    const auto& value = entry.value();
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

}  // namespace rjg::ansible
