#include "workers/ansible/keywords.hpp"

#include "common/log.hpp"
#include "common/process/child.hpp"
#include "common/protocol/protocol.hpp"
#include "common/xmlrpc/classic_values.hpp"
#include "workers/ansible/adapter.hpp"
#include "workers/ansible/runner.hpp"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <system_error>

namespace rjg::ansible {

// Never destroyed: the signal thread may be removing it while the main thread returns from main.
Workspace& workspace = *new Workspace;
std::vector<std::string> allow_list;
std::vector<std::string> allowed_options;  // --allow-option MODULE.OPTION
bool facts_env = false;  // --facts-env: facts keep ansible_env

namespace {
namespace fs = std::filesystem;

constexpr std::string_view kInstall =
    "Install ansible-core on the gateway's machine (apt install ansible-core), or give this worker a PATH that "
    "holds it (env in the library's configuration)";

// The Ansible program `name` (ansible-playbook, ansible-doc), or the refusal telling how to install it.
std::string program(const Where& where, std::string_view name) {
  auto found = rjg::process::resolve_command(std::string(name));
  if (found.path) return *found.path;
  // "'ansible-playbook' not found in PATH (...)", or why the one found cannot run (mode 0644, say).
  throw Refused(fmt::format("{}Ansible is not installed here: {}. {}.", where.prefix(), found.problem, kInstall));
}

// The interpreter ansible-playbook runs on, from its "#!" line.
std::string ansible_python(const std::string& playbook_program) {
  std::ifstream in(playbook_program);
  std::string first;
  std::getline(in, first);
  return shebang_interpreter(first);
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

struct RunDir {
  fs::path path = workspace.new_run_dir();
  ~RunDir() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
};

// One ansible program to completion, its output logged line by line on this worker's stderr.
RunResult run_program(const Where& where, std::vector<std::string> argv, std::vector<std::string> env,
                           const fs::path& cwd, const std::optional<std::string>& stdout_file) {
  try {
    return run(argv, env, cwd.string(), stdout_file,
                    [&](std::string_view line) { log::info("{}: {}", fs::path(argv[0]).filename().string(), line); });
  } catch (const std::system_error& e) {
    if (e.code() == std::errc::operation_canceled)
      throw Refused(fmt::format("{}{} was not started: this worker is stopping (the gateway ended it, "
                                     "or its keyword_timeout passed).",
                                     where.prefix(), argv[0]));
    throw Refused(fmt::format("{}{} could not be started: {}. {}.", where.prefix(), argv[0], e.what(), kInstall));
  }
}

struct Import {
  Target target;
  std::map<std::string, std::string> keywords;  // normalized keyword name -> module (modules=)
  std::map<std::string, json::object> facts;    // by gather_subset
};

Mapped run_module(const Where& where, const Target& target, const std::string& module,
                       const json::object& args, bool check_mode, bool diff) {
  const auto playbook_program = program(where, "ansible-playbook");
  RunDir run;
  std::ofstream(run.path / "playbook.yml") << playbook(module, args, target.vars, check_mode, diff);
  auto env = workspace.env();
  env.push_back("RJG_ANSIBLE_RESULT=" + (run.path / "result.json").string());
  // Modules of a local connection run under this HOME too: their temp files then go where Ansible's do.
  if (!workspace.home_writable() && is_local(target))
    env.push_back("ANSIBLE_REMOTE_TEMP=" + (workspace.dir() / "tmp").string());
  log::info("{}running ansible-playbook: module '{}' on host {}{}", where.prefix(), module, target.host,
            check_mode ? " (check mode)" : "");
  const auto ran = run_program(where, {playbook_program, "-i", "target,", (run.path / "playbook.yml").string()}, env,
                               run.path, std::nullopt);
  const auto record = read_text(run.path / "result.json");
  if (record.empty())
    throw Refused(fmt::format(
        "{}ansible-playbook {} and no result for module '{}' on host {}. It said:\n{}\nCheck the module "
        "name (ansible-doc -l lists the installed modules), its options and the library arguments.",
        where.prefix(), ran.describe(), module, target.host, stderr_excerpt(ran.output)));
  try {
    return map_outcome(where, module, target.host, parse_outcome(record));
  } catch (const Refused& e) {
    throw Refused(fmt::format("{}ansible-playbook ran module '{}' on host {}, but {}. This is a bug of "
                                   "robot-ansible-worker or a change in Ansible: please report it.",
                                   where.prefix(), module, target.host, e.what()));
  }
}

// A keyword's answer: warnings logged, a failure thrown (after logging the whole result), else the result.
json::object answer(sdk::Call& call, const Where& where, const std::string& module, const Target& target,
                    Mapped mapped) {
  // Before anything is logged or answered: a failure's log line carries the result too.
  if (!facts_env && drop_environment(mapped.value))
    call.log(fmt::format("{}ansible_env is left out of the facts of host {}: it holds the environment of the process "
                         "that gathered them. The worker's --facts-env option returns it.",
                         where.prefix(), target.host));
  for (const auto& warning : mapped.warnings) call.log(warning, "WARN");
  if (mapped.failure) {
    call.log(fmt::format("Result of module '{}' on host {}: {}", module, target.host, json::serialize(mapped.value)));
    throw sdk::KeywordError(*mapped.failure);
  }
  if (mapped.skipped) {
    const auto* msg = mapped.value.if_contains("msg");
    call.log(fmt::format("{}Ansible skipped module '{}' on host {}{}", where.prefix(), module, target.host,
                         msg ? ": " + json::serialize(*msg) : std::string()),
             "WARN");
  }
  return std::move(mapped.value);
}

// A keyword's named arguments as plain JSON (pickled lists and dictionaries decoded), without `ours`.
json::object module_options(const Where& where, const sdk::Call& call, std::initializer_list<std::string_view> ours) {
  json::value options;
  try {
    options = rjg::xmlrpc::plain_json(call.kwargs_text().empty() ? "{}" : call.kwargs_text(), "kwargs");
  } catch (const rjg::xmlrpc::ValueError& e) {
    throw sdk::KeywordError(fmt::format("{}an argument cannot be given to Ansible, which reads JSON only: {}",
                                        where.prefix(), e.what()),
                            "ValueError");
  }
  if (!options.is_object()) return {};
  for (auto name : ours) options.get_object().erase(name);
  return std::move(options.get_object());
}

json::value run_and_answer(sdk::Call& call, const Where& where, const std::string& module, json::object options,
                           bool check_mode, bool diff) {
  const auto& import = *call.state<std::shared_ptr<Import>>();
  try {
    check_module_name(where, module);
    if (!allowed(allow_list, module)) throw Refused(refused_by_allow_list(where, module, allow_list));
    if (!allow_list.empty())
      if (auto refusal = refused_option(where, module, options, allowed_options)) throw Refused(*refusal);
    return answer(call, where, module, import.target,
                  run_module(where, import.target, module, options, check_mode, diff));
  } catch (const Refused& e) {
    throw sdk::KeywordError(e.what());
  }
}


// ansible-doc for the modules= entries, in one run; a module it does not know is refused.
json::array module_keywords(const Where& where, Import& import) {
  for (const auto& module : import.target.modules)
    if (!allowed(allow_list, module)) throw Refused(refused_by_allow_list(where, module, allow_list));
  RunDir run;
  std::vector<std::string> argv{program(where, "ansible-doc"), "--json", "--type", "module"};
  argv.insert(argv.end(), import.target.modules.begin(), import.target.modules.end());
  const auto ran = run_program(where, argv, workspace.env(), run.path, (run.path / "doc.json").string());
  boost::system::error_code ec;
  auto docs = json::parse(read_text(run.path / "doc.json"), ec);
  if (ec || !docs.is_object())
    throw Refused(fmt::format("{}ansible-doc {} and no documentation for modules={}. It said:\n{}",
                                   where.prefix(), ran.describe(), fmt::join(import.target.modules, ","),
                                   stderr_excerpt(ran.output)));
  json::array keywords;
  for (const auto& module : import.target.modules) {
    const auto* entry = docs.get_object().if_contains(module);
    if (!entry || !entry->is_object())
      throw Refused(fmt::format("{}Ansible has no module '{}' (from modules=). Check its name (ansible-doc -l lists "
                                     "the installed modules) and that its collection is installed.",
                                     where.prefix(), module));
    keywords.push_back(module_keyword(module, entry->get_object()));
    import.keywords[sdk::normalize_name(keyword_name(module))] = module;
  }
  return keywords;
}

}  // namespace

json::value run_action(sdk::Call& call) {
  const Where where{call.library(), call.keyword()};
  return run_and_answer(call, where, call.get<std::string>("module"),
                        module_options(where, call, {"module", "check_mode", "diff"}),
                        call.get<bool>("check_mode"), call.get<bool>("diff"));
}

json::value gather_facts(sdk::Call& call) {
  auto& import = *call.state<std::shared_ptr<Import>>();
  const Where where{call.library(), call.keyword()};
  if (!allowed(allow_list, "setup")) throw sdk::KeywordError(gather_facts_refused(where, allow_list));
  json::array subsets;
  const auto text = call.get<std::string>("subset");
  for (std::size_t begin = 0; begin <= text.size();) {
    auto comma = std::min(text.find(',', begin), text.size());
    auto part = text.substr(begin, comma - begin);
    part.erase(0, part.find_first_not_of(' '));
    part.erase(part.find_last_not_of(' ') + 1);
    if (!part.empty()) subsets.emplace_back(part);
    begin = comma + 1;
  }
  if (subsets.empty()) subsets.emplace_back("min");
  const auto key = json::serialize(subsets);
  // Not even collected then (the answer drops it anyway: a subset that names env explicitly wins over !env).
  if (!facts_env) subsets.emplace_back("!env");
  if (auto cached = import.facts.find(key); cached != import.facts.end()) {
    call.log(fmt::format("Facts of host {} (subset {}) as gathered earlier in this import.", import.target.host, text),
             "DEBUG");
    return cached->second;
  }
  json::value result;
  try {
    auto mapped = run_module(where, import.target, "ansible.builtin.setup", json::object{{"gather_subset", subsets}},
                             false, false);
    result = answer(call, where, "setup", import.target, std::move(mapped));
  } catch (const Refused& e) {
    throw sdk::KeywordError(e.what());
  }
  const auto* facts = result.as_object().if_contains("ansible_facts");
  if (!facts || !facts->is_object())
    throw sdk::KeywordError(fmt::format("{}the setup module answered without ansible_facts for host {}.",
                                        where.prefix(), import.target.host));
  return import.facts[key] = facts->get_object();
}

void on_import(const sdk::Library& library, sdk::ImportContext& context) {
  const Where where{context.library, ""};
  try {
    const auto args = rjg::xmlrpc::plain_json(context.import.args_text.empty() ? "[]" : context.import.args_text, "args");
    const auto kw_args =
        rjg::xmlrpc::plain_json(context.import.kw_args_text.empty() ? "{}" : context.import.kw_args_text, "kw_args");
    auto import = std::make_shared<Import>();
    const auto playbook_program = program(where, "ansible-playbook");
    import->target = parse_import(where, args.is_array() ? args.get_array() : json::array(),
                                       kw_args.is_object() ? kw_args.get_object() : json::object(),
                                       !allow_list.empty(), ansible_python(playbook_program));
    if (!import->target.modules.empty()) {
      auto definition = library.definition();
      for (auto& keyword : module_keywords(where, *import)) definition["keywords"].as_array().push_back(std::move(keyword));
      context.extra_result["definition"] = std::move(definition);
    }
    log::info("{}imported for host {} ({} connection){}", where.prefix(), import->target.host,
              json::serialize(import->target.vars.at("ansible_connection")),
              import->keywords.empty() ? "" : fmt::format(", modules {}", fmt::join(import->target.modules, ", ")));
    context.state = std::move(import);
  } catch (const rjg::xmlrpc::ValueError& e) {
    throw sdk::RpcError(protocol::kInvalidParams,
                        fmt::format("{}a library argument cannot be read: {}.", where.prefix(), e.what()));
  } catch (const Refused& e) {
    throw sdk::RpcError(protocol::kInvalidParams, e.what());
  }
}

json::value module_keyword_call(sdk::Call& call) {
  const auto& import = *call.state<std::shared_ptr<Import>>();
  const auto found = import.keywords.find(sdk::normalize_name(call.keyword()));
  if (found == import.keywords.end())
    throw sdk::KeywordError(fmt::format("No keyword named '{}' in library '{}'. Run Action runs any module; import "
                                        "the library with modules={} to have a keyword of it.",
                                        call.keyword(), call.library(), call.keyword()),
                            "KeywordNotFoundError");
  const Where where{call.library(), call.keyword()};
  const auto& module = found->second;
  boost::system::error_code ec;
  const auto positional = json::parse(call.args_text().empty() ? "[]" : call.args_text(), ec);
  if (ec || !positional.is_array() || !positional.get_array().empty())
    throw sdk::KeywordError(fmt::format("{}the options of module '{}' are named: give them as option=value.",
                                        where.prefix(), module),
                            "TypeError");
  auto options = module_options(where, call, {});
  auto flag = [&](std::string_view name) {
    const auto* given = options.if_contains(name);
    if (!given) return false;
    const auto converted = sdk::convert(*given, "bool");
    if (!converted || !converted->is_bool())
      throw sdk::KeywordError(fmt::format("{}{}={} is not a boolean.", where.prefix(), name, json::serialize(*given)),
                              "ValueError");
    const bool value = converted->get_bool();
    options.erase(name);
    return value;
  };
  const bool check_mode = flag("check_mode");
  const bool diff = flag("diff");
  return run_and_answer(call, where, module, std::move(options), check_mode, diff);
}

}  // namespace rjg::ansible
