// The pure half of robot-ansible-worker: what a Robot import and a keyword call mean to Ansible, and what
// Ansible's answer means to Robot. No processes and no files here, so all of it is unit-tested.
//
//   import arguments  -> Target        ansible_* host variables (checked), modules= (a list or "a,b")
//   ansible-doc JSON  -> keywords      one keyword per modules= entry, options as named-only arguments
//   module + args     -> playbook      one play, one task, every string tagged !unsafe (never templated)
//   task outcome      -> Mapped        the result dictionary, warnings to log, or the failure text
#pragma once

#include <boost/json.hpp>

#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace rjg::ansible {

namespace json = boost::json;

// A refusal whose what() is the whole sentence the Robot user reads.
struct Refused : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Who is asking, for error texts: every failure names the library and keyword (or the import).
struct Where {
  std::string library;
  std::string keyword;  // "" for the import
  std::string prefix() const;  // "Library 'Ansible', keyword 'Run Action': " or "Library 'Ansible': "
};

// What one import of the library points at.
struct Target {
  json::object vars;  // ansible_* host variables, as the client gave them (plus ansible_connection)
  std::string host;   // for messages: ansible_host, or "localhost" for a local connection
  std::vector<std::string> modules;  // modules=, in the order given
};

// Library arguments: ansible_* names are host variables (ansible_become* refused: become is out of scope;
// with an allow-list, variables that name programs or command lines on this machine are refused too),
// modules= a list or a comma-separated text. Positional "name=value" texts count as named. Values are
// plain JSON (pickles already decoded). `local_python` is used as ansible_python_interpreter for a local
// connection that names none (the interpreter Ansible itself runs on). Throws Refused.
Target parse_import(const Where& where, const json::array& args, const json::object& kw_args, bool restricted,
                    const std::string& local_python);

// [A-Za-z0-9_.]+, not starting or ending with a dot.
// Whether the target is this machine (ansible_connection local, by its short or its full name).
bool is_local(const Target& target);
bool valid_module_name(std::string_view name);
// Throws Refused unless valid_module_name.
void check_module_name(const Where& where, std::string_view name);
// With an allow-list (--allow), may `module` run? A short name and its ansible.builtin. name are the same
// module; other collections' modules must be named as listed. An empty list allows everything.
bool allowed(const std::vector<std::string>& allow, std::string_view module);
std::string refused_by_allow_list(const Where& where, std::string_view module, const std::vector<std::string>& allow);
// Gather Facts runs setup: under an allow-list without it, this refusal names the option that allows it.
std::string gather_facts_refused(const Where& where, const std::vector<std::string>& allow);

// Options with which a module of ansible-core 2.14 runs a program, or loads code, of the client's choosing:
// copy's validate= (a command run on the file), setup's fact_path= (a directory of executables), package's
// and service's use= (any module), git's ssh_opts=, a git or subversion value beginning with '-' (an
// option of git's own, such as --upload-pack), ... and Ansible's internal _-parameters (command's
// _uses_shell). Under an allow-list each is refused unless the operator names it with --allow-option
// MODULE.OPTION, so allowing copy lets a client copy files, not run programs. `allowed_options` holds the
// MODULE.OPTION texts given. Returns the refusal, naming the module, the option and the flag.
std::optional<std::string> refused_option(const Where& where, std::string_view module, const json::object& options,
                                          const std::vector<std::string>& allowed_options);
// MODULE.OPTION, as --allow-option takes it (MODULE may be ansible.builtin.MODULE).
bool valid_option_flag(std::string_view flag);
// Whether refused_option can ever refuse what `flag` names (else the flag is a typo or has no effect).
bool refusable_option(std::string_view flag);
// Modules whose purpose is running programs or tasks the client names (command, shell, script, raw, expect,
// cron, pip, the package managers, include_tasks and its kin): allowing one gives the library's clients the
// service user's reach wherever it connects, whatever refused_option refuses. Those among `allow`.
std::vector<std::string> program_runners(const std::vector<std::string>& allow);

// The one fact of ansible-core that copies an environment is ansible_env: every variable of the process
// that ran setup (on a local connection this worker's, so the library's env table and whatever the gateway
// inherited; on ssh the login's). Unless the worker runs with --facts-env, it is removed from every
// ansible_facts of a result, whichever module gathered them (setup, gather_facts). Returns whether it was
// there.
bool drop_environment(json::object& result);

// The keyword of a modules= entry: its short name (ansible.builtin.copy -> copy).
std::string keyword_name(std::string_view module);

// The KeywordDefinition of a modules= entry from its ansible-doc --json entry ({"doc": {...}, ...}):
// every option NAMED_ONLY (required ones without a default), typed str/int/float/bool/list/dict (path ->
// str, raw and others untyped), then check_mode and diff. The doc holds the short description, the
// description, and one line per option with its aliases, choices and default.
json::object module_keyword(std::string_view module, const json::object& doc_entry);

// The playbook that runs `module` once with `args` on the target, as YAML in flow style: JSON where each
// string, keys included, carries the !unsafe tag, so Ansible never templates what a client sent.
std::string playbook(std::string_view module, const json::object& args, const json::object& vars, bool check_mode,
                     bool diff);
// One JSON value as YAML flow with every string !unsafe (exposed for tests).
std::string unsafe_yaml(const json::value& value);

// What the worker's callback plugin records for the task: {"status": ok|failed|unreachable|skipped,
// "result": {...}}.
struct Outcome {
  std::string status;
  json::object result;
};
// Throws Refused (naming `where`, module and host) when the text is not such a record.
Outcome parse_outcome(std::string_view text);

struct Mapped {
  json::object value;                  // the result, without _ansible_* keys, invocation, warnings, deprecations
  std::vector<std::string> warnings;   // module warnings and deprecations, one log line each
  std::optional<std::string> failure;  // set: the keyword fails with this text
  bool skipped = false;
};
Mapped map_outcome(const Where& where, std::string_view module, std::string_view host, const Outcome& outcome);

// The lines of Ansible's stderr worth showing in an error: from its last "ERROR!" line on, else the last
// few lines; at most about 1500 bytes.
std::string stderr_excerpt(std::string_view stderr_text);

// ansible-playbook's interpreter from its "#!" line ("" for an env-style or missing one).
std::string shebang_interpreter(std::string_view first_line);

}  // namespace rjg::ansible
