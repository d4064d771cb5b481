// robot-ansible-worker: Ansible modules as Robot Framework keywords, run by the ansible-core installed on
// the gateway's machine (Debian: apt install ansible-core).
//
//   robot-ansible-worker [--allow MODULE]... [--allow-option MODULE.OPTION]... [--facts-env]
//                        [--stdio | --tcp HOST:PORT] [--log-level LEVEL]
//
// Configured as any library (command = ["robot-ansible-worker"]) and imported with library arguments:
// ansible_* connection variables (ansible_host, ansible_user, ansible_port, ansible_connection (default
// local without ansible_host, else ssh), ansible_ssh_private_key_file, ansible_python_interpreter, ...)
// and modules=MODULE,... (a list or a comma-separated text). ansible_become* is refused: privilege
// escalation is out of scope.
//
// Keywords (the methods runAction and gatherFacts of ansible-jsonrpc-server):
//   Run Action  MODULE  check_mode=False  diff=False  **options
//       runs the module once on the host and returns its result as a dictionary, without Ansible's
//       internal _ansible_* keys, `invocation` (the echo of the arguments) and `warnings`/`deprecations`
//       (logged as WARN instead); `failed` or `unreachable` fails the keyword with the module's msg, rc and
//       stderr. Options named module, check_mode or diff cannot be given this way.
//   Gather Facts  subset=min
//       the ansible_facts dictionary (setup, gather_subset=SUBSET; "min,network" for several), kept for
//       the life of the import: import again for fresh facts.
//   one keyword per modules= entry, named by the module's short name (ansible.builtin.copy -> copy),
//       documented from ansible-doc; its options are named-only arguments (required ones without a
//       default), then check_mode and diff.
//
// Each run is one ansible-playbook process (argv, no shell): a one-task play written as YAML whose every
// client string is tagged !unsafe, so nothing a client sends is templated (a Jinja2 lookup would run
// commands here), and whose result a callback plugin of this worker writes to a file. The process leads a
// group of its own with PR_SET_PDEATHSIG; SIGTERM to this worker (the gateway's keyword_timeout and stop
// send it to the worker's group) ends those groups, SIGTERM then SIGKILL, before the worker exits.
//
// --allow MODULE (repeatable) limits Run Action and modules= to those modules (a short name and its
// ansible.builtin. name are the same module), and then refuses connection variables that make Ansible
// start a program named by the client on this machine (*_executable, *_interpreter, *_args, *_command).
// Gather Facts runs setup, so with an allow-list it needs --allow setup like Run Action setup does.
// Under an allow-list, options with which an allowed module runs a program or loads code of the client's
// choosing (copy's validate=, setup's fact_path=, package's use=, ...: ans::refused_option) are refused too,
// unless given with --allow-option MODULE.OPTION (repeatable). Modules that run programs by design (command,
// shell, ...) stay what --allow makes them: the service user's reach for every client.
//
// Facts leave out ansible_env, the environment of the process that gathered them: on a local connection
// that is this worker's, which holds the library's env table and all the gateway inherited (secrets
// among them). It is removed from every result's ansible_facts (Gather Facts, Run Action setup or
// gather_facts, a setup keyword), allowed or not; --facts-env returns it.
#include "common/log.hpp"
#include "common/process/child.hpp"
#include "common/protocol/protocol.hpp"
#include "common/xmlrpc/classic_values.hpp"
#include "workers/ansible/adapter.hpp"
#include "workers/ansible/runner.hpp"
#include "workers/sdk/sdk.hpp"

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <fmt/format.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <system_error>
#include <thread>

extern char** environ;

namespace {
namespace json = boost::json;
namespace fs = std::filesystem;
namespace sdk = rjg::sdk;
namespace log = rjg::log;
namespace protocol = rjg::protocol;
namespace ans = rjg::ansible;
using namespace std::chrono_literals;

// Writes the one task's outcome where the worker reads it. Ansible's own json callback lives in the
// ansible.posix collection, which ansible-core alone does not have.
constexpr std::string_view kCallback = R"(# Written by robot-ansible-worker: records the task's outcome in $RJG_ANSIBLE_RESULT.
import json
import os

from ansible.module_utils.common.json import AnsibleJSONEncoder
from ansible.plugins.callback import CallbackBase


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = 'stdout'
    CALLBACK_NAME = 'rjg_result'

    def _record(self, status, result):
        with open(os.environ['RJG_ANSIBLE_RESULT'], 'w') as f:
            json.dump({'status': status, 'result': result._result}, f, cls=AnsibleJSONEncoder)

    def v2_runner_on_ok(self, result):
        self._record('ok', result)

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._record('failed', result)

    def v2_runner_on_unreachable(self, result):
        self._record('unreachable', result)

    def v2_runner_on_skipped(self, result):
        self._record('skipped', result)
)";

constexpr std::string_view kInstall =
    "Install ansible-core on the gateway's machine (apt install ansible-core), or give this worker a PATH that "
    "holds it (env in the library's configuration)";

// The worker's private directory (callback plugin, Ansible's local temp, one folder per run) and the
// environment every Ansible process gets.
class Workspace {
 public:
  void create() {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = fmt::format("{}/robot-ansible-worker.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!::mkdtemp(pattern.data()))
      throw std::system_error(errno, std::generic_category(), "cannot create a private directory " + pattern);
    dir_ = pattern;
    fs::create_directories(dir_ / "callback");
    fs::create_directories(dir_ / "tmp");
    std::ofstream(dir_ / "callback" / "rjg_result.py") << kCallback;

    const char* home = std::getenv("HOME");
    home_writable_ = home && *home && ::access(home, W_OK) == 0 &&
                     (!fs::exists(fs::path(home) / ".ansible") || ::access((fs::path(home) / ".ansible").c_str(), W_OK) == 0);
    std::map<std::string, std::string> overrides{
        {"ANSIBLE_STDOUT_CALLBACK", "rjg_result"},
        {"ANSIBLE_NOCOLOR", "1"},
        {"ANSIBLE_RETRY_FILES_ENABLED", "0"},
        {"ANSIBLE_LOCAL_TEMP", (dir_ / "tmp").string()},
    };
    const char* callbacks = std::getenv("ANSIBLE_CALLBACK_PLUGINS");
    overrides["ANSIBLE_CALLBACK_PLUGINS"] =
        (dir_ / "callback").string() + ":" +
        (callbacks && *callbacks ? callbacks : "~/.ansible/plugins/callback:/usr/share/ansible/plugins/callback");
    // Ansible keeps its state under ~/.ansible; a service user's HOME is often missing or read-only.
    if (!home_writable_) overrides["ANSIBLE_HOME"] = (dir_ / "home").string();
    if (!std::getenv("LC_ALL") && !std::getenv("LC_CTYPE") && !std::getenv("LANG")) overrides["LANG"] = "C.UTF-8";
    for (char** e = environ; *e; ++e) {
      std::string_view entry(*e);
      if (!overrides.count(std::string(entry.substr(0, entry.find('='))))) env_.emplace_back(entry);
    }
    for (const auto& [name, value] : overrides) env_.push_back(name + "=" + value);
  }

  void remove() {
    std::error_code ignored;
    if (!dir_.empty()) fs::remove_all(dir_, ignored);
  }

  const fs::path& dir() const { return dir_; }
  bool home_writable() const { return home_writable_; }
  std::vector<std::string> env() const { return env_; }
  // A directory no one could have prepared (Ansible reads ./ansible.cfg and plugins next to the playbook).
  fs::path new_run_dir() {
    std::string pattern = (dir_ / fmt::format("run-{}-XXXXXX", ++runs_)).string();
    if (!::mkdtemp(pattern.data()))
      throw std::system_error(errno, std::generic_category(), "cannot create a directory " + pattern);
    return pattern;
  }

 private:
  fs::path dir_;
  bool home_writable_ = true;
  std::vector<std::string> env_;
  std::atomic<std::uint64_t> runs_{0};
};

// Never destroyed: the signal thread may be removing it while the main thread returns from main.
Workspace& workspace = *new Workspace;
std::vector<std::string> allow_list;
std::vector<std::string> allowed_options;  // --allow-option MODULE.OPTION
bool facts_env = false;  // --facts-env: facts keep ansible_env

// The Ansible program `name` (ansible-playbook, ansible-doc), or the refusal telling how to install it.
std::string program(const ans::Where& where, std::string_view name) {
  auto found = rjg::process::resolve_command(std::string(name));
  if (found.path) return *found.path;
  // "'ansible-playbook' not found in PATH (...)", or why the one found cannot run (mode 0644, say).
  throw ans::Refused(fmt::format("{}Ansible is not installed here: {}. {}.", where.prefix(), found.problem, kInstall));
}

// The interpreter ansible-playbook runs on, from its "#!" line.
std::string ansible_python(const std::string& playbook_program) {
  std::ifstream in(playbook_program);
  std::string first;
  std::getline(in, first);
  return ans::shebang_interpreter(first);
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
ans::RunResult run_program(const ans::Where& where, std::vector<std::string> argv, std::vector<std::string> env,
                           const fs::path& cwd, const std::optional<std::string>& stdout_file) {
  try {
    return ans::run(argv, env, cwd.string(), stdout_file,
                    [&](std::string_view line) { log::info("{}: {}", fs::path(argv[0]).filename().string(), line); });
  } catch (const std::system_error& e) {
    if (e.code() == std::errc::operation_canceled)
      throw ans::Refused(fmt::format("{}{} was not started: this worker is stopping (the gateway ended it, "
                                     "or its keyword_timeout passed).",
                                     where.prefix(), argv[0]));
    throw ans::Refused(fmt::format("{}{} could not be started: {}. {}.", where.prefix(), argv[0], e.what(), kInstall));
  }
}

struct Import {
  ans::Target target;
  std::map<std::string, std::string> keywords;  // normalized keyword name -> module (modules=)
  std::map<std::string, json::object> facts;    // by gather_subset
};

ans::Mapped run_module(const ans::Where& where, const ans::Target& target, const std::string& module,
                       const json::object& args, bool check_mode, bool diff) {
  const auto playbook_program = program(where, "ansible-playbook");
  RunDir run;
  std::ofstream(run.path / "playbook.yml") << ans::playbook(module, args, target.vars, check_mode, diff);
  auto env = workspace.env();
  env.push_back("RJG_ANSIBLE_RESULT=" + (run.path / "result.json").string());
  // Modules of a local connection run under this HOME too: their temp files then go where Ansible's do.
  if (!workspace.home_writable() && ans::is_local(target))
    env.push_back("ANSIBLE_REMOTE_TEMP=" + (workspace.dir() / "tmp").string());
  log::info("{}running ansible-playbook: module '{}' on host {}{}", where.prefix(), module, target.host,
            check_mode ? " (check mode)" : "");
  const auto ran = run_program(where, {playbook_program, "-i", "target,", (run.path / "playbook.yml").string()}, env,
                               run.path, std::nullopt);
  const auto record = read_text(run.path / "result.json");
  if (record.empty())
    throw ans::Refused(fmt::format(
        "{}ansible-playbook {} and no result for module '{}' on host {}. It said:\n{}\nCheck the module "
        "name (ansible-doc -l lists the installed modules), its options and the library arguments.",
        where.prefix(), ran.describe(), module, target.host, ans::stderr_excerpt(ran.output)));
  try {
    return ans::map_outcome(where, module, target.host, ans::parse_outcome(record));
  } catch (const ans::Refused& e) {
    throw ans::Refused(fmt::format("{}ansible-playbook ran module '{}' on host {}, but {}. This is a bug of "
                                   "robot-ansible-worker or a change in Ansible: please report it.",
                                   where.prefix(), module, target.host, e.what()));
  }
}

// A keyword's answer: warnings logged, a failure thrown (after logging the whole result), else the result.
json::object answer(sdk::Call& call, const ans::Where& where, const std::string& module, const ans::Target& target,
                    ans::Mapped mapped) {
  // Before anything is logged or answered: a failure's log line carries the result too.
  if (!facts_env && ans::drop_environment(mapped.value))
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
json::object module_options(const ans::Where& where, const sdk::Call& call, std::initializer_list<std::string_view> ours) {
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

json::value run_and_answer(sdk::Call& call, const ans::Where& where, const std::string& module, json::object options,
                           bool check_mode, bool diff) {
  const auto& import = *call.state<std::shared_ptr<Import>>();
  try {
    ans::check_module_name(where, module);
    if (!ans::allowed(allow_list, module)) throw ans::Refused(ans::refused_by_allow_list(where, module, allow_list));
    if (!allow_list.empty())
      if (auto refusal = ans::refused_option(where, module, options, allowed_options)) throw ans::Refused(*refusal);
    return answer(call, where, module, import.target,
                  run_module(where, import.target, module, options, check_mode, diff));
  } catch (const ans::Refused& e) {
    throw sdk::KeywordError(e.what());
  }
}

json::value gather_facts(sdk::Call& call) {
  auto& import = *call.state<std::shared_ptr<Import>>();
  const ans::Where where{call.library(), call.keyword()};
  if (!ans::allowed(allow_list, "setup")) throw sdk::KeywordError(ans::gather_facts_refused(where, allow_list));
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
  } catch (const ans::Refused& e) {
    throw sdk::KeywordError(e.what());
  }
  const auto* facts = result.as_object().if_contains("ansible_facts");
  if (!facts || !facts->is_object())
    throw sdk::KeywordError(fmt::format("{}the setup module answered without ansible_facts for host {}.",
                                        where.prefix(), import.target.host));
  return import.facts[key] = facts->get_object();
}

// ansible-doc for the modules= entries, in one run; a module it does not know is refused.
json::array module_keywords(const ans::Where& where, Import& import) {
  for (const auto& module : import.target.modules)
    if (!ans::allowed(allow_list, module)) throw ans::Refused(ans::refused_by_allow_list(where, module, allow_list));
  RunDir run;
  std::vector<std::string> argv{program(where, "ansible-doc"), "--json", "--type", "module"};
  argv.insert(argv.end(), import.target.modules.begin(), import.target.modules.end());
  const auto ran = run_program(where, argv, workspace.env(), run.path, (run.path / "doc.json").string());
  boost::system::error_code ec;
  auto docs = json::parse(read_text(run.path / "doc.json"), ec);
  if (ec || !docs.is_object())
    throw ans::Refused(fmt::format("{}ansible-doc {} and no documentation for modules={}. It said:\n{}",
                                   where.prefix(), ran.describe(), fmt::join(import.target.modules, ","),
                                   ans::stderr_excerpt(ran.output)));
  json::array keywords;
  for (const auto& module : import.target.modules) {
    const auto* entry = docs.get_object().if_contains(module);
    if (!entry || !entry->is_object())
      throw ans::Refused(fmt::format("{}Ansible has no module '{}' (from modules=). Check its name (ansible-doc -l lists "
                                     "the installed modules) and that its collection is installed.",
                                     where.prefix(), module));
    keywords.push_back(ans::module_keyword(module, entry->get_object()));
    import.keywords[sdk::normalize_name(ans::keyword_name(module))] = module;
  }
  return keywords;
}

void on_import(const sdk::Library& library, sdk::ImportContext& context) {
  const ans::Where where{context.library, ""};
  try {
    const auto args = rjg::xmlrpc::plain_json(context.import.args_text.empty() ? "[]" : context.import.args_text, "args");
    const auto kw_args =
        rjg::xmlrpc::plain_json(context.import.kw_args_text.empty() ? "{}" : context.import.kw_args_text, "kw_args");
    auto import = std::make_shared<Import>();
    const auto playbook_program = program(where, "ansible-playbook");
    import->target = ans::parse_import(where, args.is_array() ? args.get_array() : json::array(),
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
  } catch (const ans::Refused& e) {
    throw sdk::RpcError(protocol::kInvalidParams, e.what());
  }
}

// Keywords of modules= entries: the name called, named options only.
json::value module_keyword_call(sdk::Call& call) {
  const auto& import = *call.state<std::shared_ptr<Import>>();
  const auto found = import.keywords.find(sdk::normalize_name(call.keyword()));
  if (found == import.keywords.end())
    throw sdk::KeywordError(fmt::format("No keyword named '{}' in library '{}'. Run Action runs any module; import "
                                        "the library with modules={} to have a keyword of it.",
                                        call.keyword(), call.library(), call.keyword()),
                            "KeywordNotFoundError");
  const ans::Where where{call.library(), call.keyword()};
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

// SIGTERM, SIGINT and SIGHUP are taken by a thread of their own: it ends what runs, then the process.
void start_signal_thread() {
  static sigset_t stop_signals;
  sigemptyset(&stop_signals);
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) sigaddset(&stop_signals, sig);
  ::pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);  // before any other thread exists, so all inherit it
  std::thread([] {
    int sig = 0;
    if (::sigwait(&stop_signals, &sig) != 0) return;
    log::info("signal {}: ending the Ansible processes that run, then exiting", sig);
    ans::end_all(2s);
    workspace.remove();
    ::signal(sig, SIG_DFL);
    ::pthread_sigmask(SIG_UNBLOCK, &stop_signals, nullptr);
    ::raise(sig);
  }).detach();
}

int usage(const char* program, std::string_view problem) {
  if (!problem.empty()) std::fprintf(stderr, "%s: %.*s\n", program, static_cast<int>(problem.size()), problem.data());
  std::fprintf(stderr,
               "usage: %s [--allow MODULE]... [--allow-option MODULE.OPTION]... [--facts-env]\n"
               "          [--stdio | --tcp HOST:PORT] [--log-level LEVEL]\n"
               "  --allow MODULE  run only these modules (repeatable; command and ansible.builtin.command are one;\n"
               "                  Gather Facts needs --allow setup)\n"
               "  --allow-option MODULE.OPTION\n"
               "                  with --allow, accept an option that runs a program of the client's choosing\n"
               "                  (refused by default: copy.validate, setup.fact_path, package.use, ...)\n"
               "  --facts-env     facts keep ansible_env (the environment of the process that gathered them,\n"
               "                  on a local connection this worker's); left out by default\n"
               "%s",
               program, sdk::serve_usage(program).c_str());
  return 2;
}

constexpr std::string_view kLibraryDoc =
    "Ansible modules as keywords, run by the ansible-core of the gateway's machine.\n\n"
    "Library arguments: ansible_* connection variables (``ansible_host``, ``ansible_user``, ``ansible_port``, "
    "``ansible_connection`` (``local`` without ``ansible_host``, else ``ssh``), ``ansible_ssh_private_key_file``, "
    "``ansible_python_interpreter``, ...) and ``modules=`` (a list, or names separated by commas) for a keyword per "
    "module. Privilege escalation (``ansible_become``) is not supported.";

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> rest;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--allow") {
      if (i + 1 >= argc || !ans::valid_module_name(argv[i + 1]))
        return usage(argv[0], "--allow needs a module name (letters, digits, '_' and '.')");
      allow_list.emplace_back(argv[++i]);
    } else if (arg == "--allow-option") {
      if (i + 1 >= argc || !ans::valid_option_flag(argv[i + 1]))
        return usage(argv[0], "--allow-option needs MODULE.OPTION (copy.validate, say)");
      allowed_options.emplace_back(argv[++i]);
    } else if (arg == "--facts-env") {
      facts_env = true;
    } else if (arg == "--help" || arg == "-h") {
      usage(argv[0], {});
      return 0;
    } else {
      rest.push_back(arg);
    }
  }
  sdk::ServeOptions serve;
  if (auto problem = sdk::parse_serve_options(rest, serve)) return usage(argv[0], *problem);

  start_signal_thread();
  try {
    workspace.create();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", argv[0], e.what());
    return 1;
  }

  sdk::Library library("Ansible", std::string(kLibraryDoc));
  library.server_name("robot-ansible-worker");
  library.keyword(
      "Run Action",
      {{"module", "str"}, sdk::Arg::named_only("check_mode", "bool", false), sdk::Arg::named_only("diff", "bool", false),
       sdk::Arg::var_named("options")},
      "Runs the Ansible module ``module`` once on the library's host with ``options`` and returns its result as a "
      "dictionary (``changed``, ``rc``, ``stdout``, ``msg``, ...; without Ansible's internal ``_ansible_*`` keys and "
      "``invocation``).\n\nA result with ``failed`` or ``unreachable`` fails the keyword with the module's message. "
      "The module's warnings and deprecations are logged as warnings. ``check_mode`` reports what would change and "
      "changes nothing; ``diff`` asks the module for the differences it makes. Facts in a result (``setup``, "
      "``gather_facts``) leave out ``ansible_env`` unless the worker runs with ``--facts-env``.\n\n"
      "| ${result} = | Run Action | command | cmd=uname -r |\n| Run Action | file | path=/tmp/x | state=touch |",
      [](sdk::Call& call) -> json::value {
        const ans::Where where{call.library(), call.keyword()};
        return run_and_answer(call, where, call.get<std::string>("module"),
                              module_options(where, call, {"module", "check_mode", "diff"}),
                              call.get<bool>("check_mode"), call.get<bool>("diff"));
      });
  library.keyword("Gather Facts", {{"subset", "str", json::value("min")}},
                  "Returns the ``ansible_facts`` dictionary of the library's host (the setup module with "
                  "``gather_subset``: ``min``, ``all``, ``network``, ... or several separated by commas).\n\n"
                  "Facts are gathered once per subset and import: import the library again for fresh ones. "
                  "``ansible_env`` (the environment variables of the process that gathered them) is left out "
                  "unless the gateway's operator gave the worker ``--facts-env``.",
                  gather_facts);
  library.on_import([&library](sdk::ImportContext& context) { on_import(library, context); });
  library.dynamic_keywords(module_keyword_call);
  if (!allow_list.empty()) log::info("only these modules may run (--allow): {}", fmt::join(allow_list, ", "));
  if (const auto runners = ans::program_runners(allow_list); !runners.empty())
    log::warn("modules that run programs or tasks the client names are allowed ({}): this library's clients have the "
              "reach of the service user on every host it connects to",
              fmt::join(runners, ", "));
  for (const auto& flag : allowed_options) {
    const auto module = flag.substr(0, flag.rfind('.'));
    if (allow_list.empty())
      log::warn("--allow-option {} has no effect: without --allow every module and option may run", flag);
    else if (!ans::allowed(allow_list, module))
      log::warn("--allow-option {} has no effect: the module {} is not given with --allow", flag, module);
    else if (!ans::refusable_option(flag))
      log::warn("--allow-option {} has no effect: it names no option that this worker refuses", flag);
    else
      log::info("clients may give {} (--allow-option), which otherwise is refused: it lets them run programs of their "
                "choosing",
                flag);
  }
  if (facts_env) log::info("facts keep ansible_env, the environment they were gathered in (--facts-env)");
  const int status = sdk::serve(library, serve);
  workspace.remove();
  return status;
}
