// adapter.hpp's import arguments, names and allow-list, and task outcomes; option_rules.cpp, module_doc.cpp
// and playbook.cpp hold the rest of it.
#include "workers/ansible/adapter.hpp"

#include "common/protocol/json_text.hpp"
#include "workers/ansible/text.hpp"
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
  if (out.size() > 1500) {
    // Not out.substr(0, 1500) + "...": the same text, on which GCC 12 warns -Warray-bounds falsely.
    out.resize(1500);
    out += "...";
  }
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
