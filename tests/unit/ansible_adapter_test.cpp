// The pure half of robot-ansible-worker: library arguments, module names and the allow-list, keyword
// definitions from ansible-doc, the playbook's YAML (every client string !unsafe), and results mapped to
// keyword answers. The worker against the real ansible-core is tests/integration/ansible_test.cpp.
#include "workers/ansible/adapter.hpp"
#include "workers/sdk/sdk.hpp"

#include <gtest/gtest.h>

namespace rjg::ansible {
namespace {

const Where kImport{"Ansible", ""};
const Where kRun{"Ansible", "Run Action"};

std::string refusal(const std::function<void()>& f) {
  try {
    f();
  } catch (const Refused& e) {
    return e.what();
  }
  return "(not refused)";
}

bool contains(std::string_view text, std::string_view part) { return text.find(part) != std::string_view::npos; }

TEST(AnsibleImport, ALocalConnectionByDefaultOnAnsiblesOwnPython) {
  const auto target = parse_import(kImport, {}, {}, false, "/usr/bin/python3");
  EXPECT_EQ(target.vars.at("ansible_connection"), "local");
  EXPECT_EQ(target.vars.at("ansible_python_interpreter"), "/usr/bin/python3");
  EXPECT_EQ(target.host, "localhost");
  EXPECT_TRUE(target.modules.empty());
}

TEST(AnsibleImport, TheLocalConnectionByItsFullNameIsLocalToo) {
  const auto target = parse_import(kImport, {}, json::object{{"ansible_connection", "ansible.builtin.local"}}, false,
                                   "/usr/bin/python3");
  EXPECT_TRUE(is_local(target));
  EXPECT_EQ(target.vars.at("ansible_python_interpreter"), "/usr/bin/python3");
  EXPECT_EQ(target.host, "localhost");
}

TEST(AnsibleImport, AHostMeansSshAndVariablesPassThrough) {
  const auto target = parse_import(kImport, json::array{"ansible_user=lab"},
                                   json::object{{"ansible_host", "10.0.0.5"}, {"ansible_port", 2222},
                                                {"ansible_ssh_private_key_file", "/keys/lab"}},
                                   false, "/usr/bin/python3");
  EXPECT_EQ(target.vars.at("ansible_connection"), "ssh");
  EXPECT_EQ(target.vars.at("ansible_user"), "lab");
  EXPECT_EQ(target.vars.at("ansible_port"), 2222);
  EXPECT_FALSE(target.vars.contains("ansible_python_interpreter"));  // discovered on the target
  EXPECT_EQ(target.host, "10.0.0.5");
}

TEST(AnsibleImport, ModulesAsAListOrACommaSeparatedText) {
  EXPECT_EQ(parse_import(kImport, {}, json::object{{"modules", json::array{"file", "ansible.builtin.copy"}}}, false, "")
                .modules,
            (std::vector<std::string>{"file", "ansible.builtin.copy"}));
  EXPECT_EQ(parse_import(kImport, json::array{"modules=ping, command"}, {}, false, "").modules,
            (std::vector<std::string>{"ping", "command"}));
  EXPECT_NE(refusal([] { parse_import(kImport, {}, json::object{{"modules", "file;rm -rf /"}}, false, ""); })
                .find("'file;rm -rf /' is not a module name"),
            std::string::npos);
  // Two modules with one keyword name, or a module named like one of the library's own keywords.
  EXPECT_NE(refusal([] { parse_import(kImport, {}, json::object{{"modules", "copy,ansible.builtin.copy"}}, false, ""); })
                .find("keyword 'copy' is already taken"),
            std::string::npos);
  EXPECT_NE(refusal([] { parse_import(kImport, {}, json::object{{"modules", "my.coll.run_action"}}, false, ""); })
                .find("already taken"),
            std::string::npos);
}

TEST(AnsibleImport, RefusalsSayWhatIsAccepted) {
  const auto unknown = refusal([] { parse_import(kImport, {}, json::object{{"host", "x"}}, false, ""); });
  EXPECT_EQ(unknown,
            "Library 'Ansible': unknown library argument 'host'. It takes ansible_* connection variables (ansible_host, "
            "ansible_user, ansible_port, ansible_connection, ansible_ssh_private_key_file, ansible_python_interpreter, "
            "...) and modules=MODULE,MODULE.");
  EXPECT_NE(refusal([] { parse_import(kImport, json::array{"10.0.0.5"}, {}, false, ""); })
                .find("library arguments are named (name=value), and '10.0.0.5' is not"),
            std::string::npos);
  EXPECT_NE(refusal([] { parse_import(kImport, {}, json::object{{"ansible_become", true}}, false, ""); })
                .find("privilege escalation (become)"),
            std::string::npos);
  EXPECT_NE(refusal([] { parse_import(kImport, {}, json::object{{"ansible_become_user", "root"}}, false, ""); })
                .find("'ansible_become_user'"),
            std::string::npos);
  EXPECT_NE(refusal([] { parse_import(kImport, {}, json::object{{"ansible_connection", "ssh -o x"}}, false, ""); })
                .find("is not a connection plugin name"),
            std::string::npos);
}

TEST(AnsibleImport, AnAllowListRefusesVariablesThatStartPrograms) {
  for (const char* name : {"ansible_ssh_common_args", "ansible_python_interpreter", "ansible_ssh_executable",
                           "ansible_paramiko_proxy_command", "ansible_winrm_kinit_cmd", "ansible_chroot_exe"}) {
    EXPECT_NE(refusal([&] { parse_import(kImport, {}, json::object{{name, "x"}}, true, ""); }).find("--allow"),
              std::string::npos)
        << name;
    EXPECT_NO_THROW(parse_import(kImport, {}, json::object{{name, "x"}}, false, "")) << name;
  }
  EXPECT_NO_THROW(parse_import(kImport, {}, json::object{{"ansible_host", "h"}, {"ansible_user", "u"}}, true, ""));
  EXPECT_NE(refusal([] { parse_import(kImport, {}, json::object{{"ansible_connection", "community.general.chroot"}}, true, ""); })
                .find("--allow"),
            std::string::npos);
  EXPECT_NO_THROW(parse_import(kImport, {}, json::object{{"ansible_connection", "ansible.builtin.ssh"}}, true, ""));
  // A host that ssh would read as an option, with or without --allow.
  EXPECT_NE(refusal([] { parse_import(kImport, {}, json::object{{"ansible_host", "-oProxyCommand=id"}}, false, ""); })
                .find("begins with '-'"),
            std::string::npos);
}

TEST(AnsibleModules, NamesAndTheAllowList) {
  EXPECT_TRUE(valid_module_name("ansible.builtin.copy"));
  EXPECT_TRUE(valid_module_name("get_url"));
  for (const char* bad : {"", ".", "a..", "copy ", "a/b", "a;b", "$(x)", ".copy"}) EXPECT_FALSE(valid_module_name(bad)) << bad;
  EXPECT_TRUE(allowed({}, "shell"));
  EXPECT_TRUE(allowed({"command"}, "ansible.builtin.command"));
  EXPECT_TRUE(allowed({"ansible.builtin.ping"}, "ping"));
  EXPECT_FALSE(allowed({"command"}, "shell"));
  EXPECT_FALSE(allowed({"community.general.foo"}, "foo"));
  EXPECT_EQ(refused_by_allow_list(kRun, "shell", {"command", "ping"}),
            "Library 'Ansible', keyword 'Run Action': module 'shell' is not allowed here: this worker runs only the "
            "modules given with --allow (command, ping). Use one of those, or ask the gateway's operator to add --allow "
            "shell to the library's command.");
  EXPECT_EQ(keyword_name("ansible.builtin.copy"), "copy");
  EXPECT_EQ(keyword_name("file"), "file");
  EXPECT_EQ(rjg::sdk::normalize_name("Get Url"), rjg::sdk::normalize_name("get_url"));
}

TEST(AnsibleModules, AKeywordFromAnsibleDoc) {
  const auto entry = json::parse(R"({"doc": {
      "short_description": "Manage files and file properties",
      "description": ["Set attributes of files.", "Use M(ansible.builtin.copy) for I(contents)."],
      "options": {
        "mode": {"type": "raw", "description": ["The permissions, like C(0644)."]},
        "path": {"type": "path", "required": true, "aliases": ["dest", "name"], "description": ["Path to the file."]},
        "recurse": {"type": "bool", "default": false, "description": "Recursively."},
        "state": {"type": "str", "choices": ["absent", "touch"], "description": ["If C(absent), removed."]},
        "diff": {"type": "bool", "description": "shadowed by the keyword's own"}
      }}})")
                         .as_object();
  const auto keyword = module_keyword("ansible.builtin.file", entry);
  EXPECT_EQ(keyword.at("name"), "file");
  const auto& args = keyword.at("args").as_array();
  ASSERT_EQ(args.size(), 6u) << keyword;
  // Required first, then ansible-doc's order; all named-only; then check_mode and diff.
  EXPECT_EQ(args[0], json::parse(R"({"name":"path","type":"str","kind":"NAMED_ONLY","required":true,"has_default":false})"));
  EXPECT_EQ(args[1], json::parse(R"({"name":"mode","type":"","kind":"NAMED_ONLY","required":true,"has_default":true,"default":null})"));
  EXPECT_EQ(args[2].at("name"), "recurse");
  EXPECT_EQ(args[2].at("type"), "bool");
  EXPECT_EQ(args[2].at("default"), false);
  EXPECT_EQ(args[3].at("name"), "state");
  EXPECT_EQ(args[4], json::parse(R"({"name":"check_mode","type":"bool","kind":"NAMED_ONLY","required":true,"has_default":true,"default":false})"));
  EXPECT_EQ(args[5].at("name"), "diff");
  const std::string doc(keyword.at("doc").as_string());
  EXPECT_NE(doc.find("Manage files and file properties"), std::string::npos) << doc;
  EXPECT_NE(doc.find("Use ``ansible.builtin.copy`` for _contents_."), std::string::npos) << doc;
  EXPECT_NE(doc.find("- ``path`` (required, path; aliases dest, name (through Run Action)): Path to the file."),
            std::string::npos)
      << doc;
  EXPECT_NE(doc.find("- ``state`` (str; one of absent, touch): If ``absent``, removed."), std::string::npos) << doc;
  EXPECT_NE(doc.find("- ``recurse`` (bool; default false): Recursively."), std::string::npos) << doc;
}

TEST(AnsiblePlaybook, EveryClientStringIsUnsafe) {
  EXPECT_EQ(unsafe_yaml(json::parse(R"({"cmd": "echo {{ lookup('pipe','id') }}", "n": [1, -2, 1.5, 1e20, true, null]})")),
            R"({? !unsafe "cmd": !unsafe "echo {{ lookup('pipe','id') }}", ? !unsafe "n": [1, -2, 1.5, 1.0e+20, true, null]})");
  EXPECT_EQ(unsafe_yaml(json::value("a\"b\\c\n\x01\x7f" "\xc2\x85" "é" "\xef\xbf\xbe")),
            "!unsafe \"a\\\"b\\\\c\\x0A\\x01\\x7F\\x85é\\uFFFE\"");
  // YAML 1.1 reads U+2028 and U+2029 as line breaks even in a quoted string: escaped, so "---" after one
  // cannot end the document and the spaces around it stay.
  EXPECT_EQ(unsafe_yaml(json::value("a \xe2\x80\xa8  b\xe2\x80\xa9--- c")), "!unsafe \"a \\u2028  b\\u2029--- c\"");
  const auto text = playbook("ansible.builtin.file", json::object{{"path", "/tmp/x"}},
                             json::object{{"ansible_connection", "local"}, {"ansible_port", 22}}, true, false);
  EXPECT_EQ(text,
            "[{\"hosts\": \"target\", \"gather_facts\": false, \"vars\": {\"ansible_connection\": !unsafe \"local\", "
            "\"ansible_port\": 22},\n  \"tasks\": [{\"name\": \"ansible.builtin.file\", \"ansible.builtin.file\": "
            "{? !unsafe \"path\": !unsafe \"/tmp/x\"}, \"check_mode\": true, \"diff\": false}]}]\n");
}

TEST(AnsibleResults, ResultsWarningsAndFailures) {
  const auto ok = parse_outcome(R"({"status": "ok", "result": {"changed": true, "rc": 0, "stdout": "hi",
      "_ansible_no_log": false, "invocation": {"module_args": {}}, "warnings": ["careful"],
      "deprecations": [{"msg": "old", "version": "2.16"}]}})");
  auto mapped = map_outcome(kRun, "command", "localhost", ok);
  EXPECT_EQ(json::value(mapped.value), json::parse(R"({"changed": true, "rc": 0, "stdout": "hi"})"));
  EXPECT_EQ(mapped.warnings, (std::vector<std::string>{"Ansible module 'command' on host localhost: careful",
                                                        "Ansible module 'command' on host localhost (deprecation): old"}));
  EXPECT_FALSE(mapped.failure);

  const auto failed = parse_outcome(R"({"status": "failed", "result": {"failed": true, "rc": 2,
      "msg": "[Errno 2] No such file or directory: b'nosuch'", "stderr": "", "cmd": "nosuch"}})");
  EXPECT_EQ(map_outcome(kRun, "command", "localhost", failed).failure,
            "Library 'Ansible', keyword 'Run Action': Ansible module 'command' failed on host localhost: [Errno 2] No "
            "such file or directory: b'nosuch' (rc 2)");
  const auto with_stderr =
      parse_outcome(R"({"status": "failed", "result": {"failed": true, "rc": 1, "msg": "non-zero return code", "stderr": "boom\n"}})");
  EXPECT_EQ(map_outcome(kRun, "command", "h", with_stderr).failure,
            "Library 'Ansible', keyword 'Run Action': Ansible module 'command' failed on host h: non-zero return code "
            "(rc 1)\nstderr: boom");

  const auto unreachable = parse_outcome(R"({"status": "unreachable", "result": {"unreachable": true,
      "msg": "Failed to connect to the host via ssh: Connection refused"}})");
  const auto text = *map_outcome(kRun, "ping", "10.0.0.5", unreachable).failure;
  EXPECT_EQ(text.rfind("Library 'Ansible', keyword 'Run Action': host 10.0.0.5 is unreachable (module 'ping'): Failed "
                       "to connect to the host via ssh: Connection refused. Check ansible_host",
                       0),
            0u)
      << text;

  const auto skipped = parse_outcome(R"({"status": "skipped", "result": {"skipped": true, "msg": "no check mode"}})");
  EXPECT_TRUE(map_outcome(kRun, "command", "h", skipped).skipped);
  EXPECT_FALSE(map_outcome(kRun, "command", "h", skipped).failure);

  EXPECT_NE(refusal([] { parse_outcome("not json"); }).find("not JSON"), std::string::npos);
  EXPECT_NE(refusal([] { parse_outcome(R"({"result": {}})"); }).find("no status"), std::string::npos);
}

TEST(AnsibleResults, FactsLoseTheEnvironmentWhereverTheyAre) {
  // setup's answer, a loop's, and a result without facts.
  auto facts = json::parse(R"({"changed": false, "ansible_facts": {"ansible_env": {"TOKEN": "s3cret"},
      "ansible_user_dir": "/home/lab", "ansible_system": "Linux"}})").as_object();
  EXPECT_TRUE(drop_environment(facts));
  EXPECT_EQ(json::value(facts),
            json::parse(R"({"changed": false, "ansible_facts": {"ansible_user_dir": "/home/lab", "ansible_system": "Linux"}})"));
  auto looped = json::parse(R"({"results": [{"ansible_facts": {"ansible_env": {}}}, {"rc": 0}],
      "nested": {"ansible_facts": {"ansible_env": {"A": "b"}, "x": 1}}})").as_object();
  EXPECT_TRUE(drop_environment(looped));
  EXPECT_EQ(json::value(looped), json::parse(R"({"results": [{"ansible_facts": {}}, {"rc": 0}],
      "nested": {"ansible_facts": {"x": 1}}})"));
  // Only facts lose it: a module's own output named so stays.
  auto plain = json::parse(R"({"ansible_env": "mine", "stdout": "TOKEN=s3cret"})").as_object();
  EXPECT_FALSE(drop_environment(plain));
  EXPECT_EQ(plain.size(), 2u);
}

TEST(AnsibleModules, GatherFactsUnderAnAllowListNamesTheOption) {
  EXPECT_FALSE(allowed({"ping", "file"}, "setup"));
  EXPECT_TRUE(allowed({"ansible.builtin.setup"}, "setup"));
  EXPECT_EQ(gather_facts_refused(Where{"Ansible", "Gather Facts"}, {"ping", "file"}),
            "Library 'Ansible', keyword 'Gather Facts': facts are gathered by the module 'setup', which is not allowed "
            "here: this worker runs only the modules given with --allow (ping, file). Ask the gateway's operator to "
            "add --allow setup to the library's command to gather facts.");
}

// An allowed module must not run a program the client picks: each option below ran one against ansible-core
// 2.14 (copy's validate= ran touch, a git repo of "--upload-pack=touch ..." ran it, package use=command ran a
// command, ...). Refused unless the operator names the option, and the refusal names the flag.
TEST(AnsibleModules, OptionsThatRunProgramsAreRefusedUnlessAllowed) {
  const auto refused = [](std::string_view module, const json::object& options,
                          const std::vector<std::string>& allowed_options = {}) {
    return refused_option(kRun, module, options, allowed_options).value_or("(not refused)");
  };
  EXPECT_EQ(refused("copy", {{"dest", "/tmp/x"}, {"content", "x"}, {"validate", "/usr/bin/touch /tmp/marker %s"}}),
            "Library 'Ansible', keyword 'Run Action': option 'validate' of module 'copy' runs the command it names on "
            "the file (%s) before the file is written. This worker runs only the modules given with --allow, whose "
            "clients do not choose programs to run: leave the option out, or ask the gateway's operator to add "
            "--allow-option copy.validate to the library's command.");
  // Every name of the module, and the operator's flag by either name.
  for (const char* module : {"copy", "ansible.builtin.copy", "ansible.legacy.copy"}) {
    EXPECT_TRUE(refused_option(kRun, module, {{"validate", "true %s"}}, {})) << module;
    EXPECT_FALSE(refused_option(kRun, module, {{"validate", "true %s"}}, {"copy.validate"})) << module;
    EXPECT_FALSE(refused_option(kRun, module, {{"validate", "true %s"}}, {"ansible.builtin.copy.validate"})) << module;
  }
  EXPECT_TRUE(refused_option(kRun, "copy", {{"validate", "true %s"}}, {"template.validate", "copy.mode"}));
  for (const char* module : {"assemble", "blockinfile", "lineinfile", "replace", "template"})
    EXPECT_TRUE(contains(refused(module, {{"validate", "true %s"}}), "--allow-option " + std::string(module) + ".validate"))
        << module;
  EXPECT_TRUE(contains(refused("setup", {{"fact_path", "/tmp/facts"}}), "runs every executable *.fact file"));
  EXPECT_TRUE(contains(refused("gather_facts", {{"fact_path", "/tmp/facts"}}), "--allow-option gather_facts.fact_path"));
  for (const char* module : {"package", "service"})
    EXPECT_TRUE(contains(refused(module, {{"use", "command"}, {"argv", json::array{"id"}}}), "use=command runs a command"))
        << module;
  EXPECT_TRUE(contains(refused("package", {{"name", "x"}, {"deb", "/tmp/x.deb"}}), "option 'deb' of module 'package'"));
  EXPECT_TRUE(contains(refused("git", {{"repo", "https://h/r"}, {"ssh_opts", "-o ProxyCommand=id"}}), "ProxyCommand"));
  EXPECT_TRUE(contains(refused("pip", {{"name", "x"}, {"virtualenv_command", "/tmp/x"}}), "pip.virtualenv_command"));
  EXPECT_TRUE(contains(refused("unarchive", {{"extra_opts", json::array{"--strip-components=1"}}}), "--to-command"));
  EXPECT_TRUE(contains(refused("reboot", {{"test_command", "id"}}), "is run as a command on the host"));
  EXPECT_TRUE(contains(refused("user", {{"name", "lab"}, {"shell", "/tmp/x"}}), "login shell"));

  // Some options only for some values: those that reach a command line as an option, or name a path.
  EXPECT_EQ(refused("git", {{"repo", "--upload-pack=touch /tmp/marker"}, {"dest", "/tmp/g"}}),
            "Library 'Ansible', keyword 'Run Action': option 'repo' of module 'git' begins with '-' or holds a space, "
            "a quote or a backslash (--upload-pack=touch /tmp/marker): the git module writes it into command lines "
            "that it splits into words, and a word beginning with '-' is an option of git's own, some of which run a "
            "command (--upload-pack). This worker runs only the modules given with --allow, whose clients do not "
            "choose programs to run: leave the option out, or ask the gateway's operator to add --allow-option "
            "git.repo to the library's command.");
  // git splits "git ls-remote REPO ..." into words itself: a quoted option inside a value is one too.
  EXPECT_TRUE(contains(refused("git", {{"repo", "'--upload-pack=id' /srv/r"}, {"dest", "/tmp/g"}}), "git.repo"));
  EXPECT_TRUE(contains(refused("git", {{"name", "https://h/r"}, {"remote", "x --upload-pack=id"}}), "git.remote"));
  EXPECT_TRUE(contains(refused("git", {{"repo", "https://h/r"}, {"dest", "-x"}}), "--allow-option git.dest"));
  EXPECT_FALSE(refused_option(kRun, "git", {{"repo", "https://h/r"}, {"dest", "/tmp/g"}, {"version", "main"}}, {}));
  EXPECT_TRUE(contains(refused("subversion", {{"repo", "--config-option=x"}}), "svn would read it"));
  EXPECT_TRUE(contains(refused("unarchive", {{"src", "/tmp/a.tgz"}, {"include", json::array{"a", "--to-command=id"}}}),
                       "(--to-command=id)"));
  EXPECT_FALSE(refused_option(kRun, "unarchive", {{"src", "/tmp/a.tgz"}, {"include", json::array{"a/b"}}}, {}));
  // Allowing extra_opts lets its values begin with '-' (its own rule replaces the module's).
  EXPECT_FALSE(refused_option(kRun, "unarchive", {{"extra_opts", json::array{"--strip-components=1"}}},
                              {"unarchive.extra_opts"}));
  EXPECT_TRUE(contains(refused("sysvinit", {{"name", "/tmp/evil.sh"}, {"state", "started"}}), "init script"));
  EXPECT_TRUE(contains(refused("service", {{"name", "../../tmp/evil.sh"}}), "names a path"));
  EXPECT_TRUE(contains(refused("systemd", {{"name", "/tmp/x.service"}, {"enabled", true}}), "links that file"));
  EXPECT_FALSE(refused_option(kRun, "service", {{"name", "cron"}, {"state", "started"}}, {}));
  EXPECT_TRUE(contains(refused("apt", {{"name", "x"}, {"default_release", "x' -o 'DPkg::Pre-Invoke::=id"}}),
                       "contains a quote"));
  EXPECT_FALSE(refused_option(kRun, "apt", {{"name", "x"}, {"default_release", "bookworm-backports"}}, {}));
  EXPECT_TRUE(contains(refused("apt", {{"pkg", json::array{"x", "y' -o 'DPkg::Pre-Invoke::=id"}}, {"state", "build-dep"}}),
                       "--allow-option apt.pkg"));

  // Ansible's internal parameters, for every module.
  EXPECT_TRUE(contains(refused("command", {{"cmd", "id; id"}, {"_uses_shell", true}}), "--allow-option command._uses_shell"));
  EXPECT_TRUE(contains(refused("ping", {{"_ansible_shell_executable", "/tmp/x"}}), "internal parameters"));
  // Null is an option left out; other modules and options pass; so does a module of another collection.
  EXPECT_FALSE(refused_option(kRun, "copy", {{"validate", nullptr}, {"dest", "/tmp/x"}, {"mode", "0644"}}, {}));
  EXPECT_FALSE(refused_option(kRun, "file", {{"path", "/tmp/x"}, {"validate", "id"}}, {}));
  EXPECT_FALSE(refused_option(kRun, "community.general.copy", {{"validate", "id"}}, {}));

  // --allow-option's argument, and which flags do something.
  EXPECT_TRUE(valid_option_flag("copy.validate"));
  EXPECT_TRUE(valid_option_flag("ansible.builtin.apt.default-release"));
  for (const char* bad : {"copy", "copy.", ".validate", "copy.val idate", "a;b.c"}) EXPECT_FALSE(valid_option_flag(bad)) << bad;
  EXPECT_TRUE(refusable_option("ansible.builtin.copy.validate"));
  EXPECT_TRUE(refusable_option("git.dest"));
  EXPECT_TRUE(refusable_option("command._uses_shell"));
  EXPECT_FALSE(refusable_option("copy.mode"));
  EXPECT_FALSE(refusable_option("file.validate"));

  EXPECT_EQ(program_runners({"ping", "ansible.builtin.command", "copy", "shell", "include_tasks", "pip"}),
            (std::vector<std::string>{"ansible.builtin.command", "shell", "include_tasks", "pip"}));
}

TEST(AnsibleResults, StderrExcerptsAndShebangs) {
  EXPECT_EQ(stderr_excerpt("[WARNING]: a\nERROR! couldn't resolve module/action 'nosuch'\n\nThe error appears to be in "
                           "'/x/playbook.yml'\n"),
            "ERROR! couldn't resolve module/action 'nosuch'\nThe error appears to be in '/x/playbook.yml'");
  std::string many;
  for (int i = 0; i < 20; ++i) many += "line " + std::to_string(i) + "\n";
  EXPECT_EQ(stderr_excerpt(many).rfind("line 12\n", 0), 0u);
  EXPECT_EQ(shebang_interpreter("#! /usr/bin/python3"), "/usr/bin/python3");
  EXPECT_EQ(shebang_interpreter("#!/opt/venv/bin/python -E"), "/opt/venv/bin/python");
  EXPECT_EQ(shebang_interpreter("#!/usr/bin/env python3"), "");
  EXPECT_EQ(shebang_interpreter("import sys"), "");
}

}  // namespace
}  // namespace rjg::ansible
