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
#include "workers/ansible/adapter.hpp"
#include "workers/ansible/keywords.hpp"
#include "workers/ansible/runner.hpp"
#include "workers/sdk/sdk.hpp"

#include <signal.h>

#include <fmt/format.h>

#include <cstdio>
#include <thread>

namespace {
namespace json = boost::json;
namespace sdk = rjg::sdk;
namespace log = rjg::log;
namespace ans = rjg::ansible;
using ans::allow_list;
using ans::allowed_options;
using ans::facts_env;
using ans::workspace;
using namespace std::chrono_literals;

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
      ans::run_action);
  library.keyword("Gather Facts", {{"subset", "str", json::value("min")}},
                  "Returns the ``ansible_facts`` dictionary of the library's host (the setup module with "
                  "``gather_subset``: ``min``, ``all``, ``network``, ... or several separated by commas).\n\n"
                  "Facts are gathered once per subset and import: import the library again for fresh ones. "
                  "``ansible_env`` (the environment variables of the process that gathered them) is left out "
                  "unless the gateway's operator gave the worker ``--facts-env``.",
                  ans::gather_facts);
  library.on_import([&library](sdk::ImportContext& context) { ans::on_import(library, context); });
  library.dynamic_keywords(ans::module_keyword_call);
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
