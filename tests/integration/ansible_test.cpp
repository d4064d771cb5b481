// Ansible modules behind the gateway, end to end: the real gateway starting robot-ansible-worker, which runs
// Debian's ansible-core on this machine (connection local). Modules run, fail, change nothing in check
// mode, and become keywords of their own; facts are gathered once per import; a keyword_timeout leaves no
// module running; bad imports and modules outside --allow are refused in words a user can act on. Each
// ansible run costs about two seconds, so the checks share runs. Nothing is timed: every wait is a bound.
#include "tests/integration/gateway_test.hpp"
#include "tests/integration/python_dialect.hpp"

#include "common/pickle/pickle_value.hpp"

#include <unistd.h>

#include <fmt/format.h>

#include <future>

namespace rjg::test {
namespace {

const std::string kRunLine = "running ansible-playbook: module '";

class AnsibleTest : public GatewayTest {
 protected:
  void SetUp() override {
    GatewayTest::SetUp();
    if (!find_program("ansible-playbook")) GTEST_SKIP() << "ansible-core is not installed (apt install ansible-core)";
  }

  // Each keyword runs ansible-playbook, a Python program of several seconds even on a quiet machine; under
  // a sanitizer stage with a build beside it, gathering facts took longer than the client's usual 20 s
  // deadline, which is there to catch a hang, not to time the keyword.
  client::RpcClient connect() { return gateway().connect(120s); }

  static LibrarySpec ansible_library(const std::string& name, std::vector<std::string> extra_args = {}) {
    LibrarySpec spec;
    spec.name = name;
    spec.command = {(fs::path(gateway_binary()).parent_path() / "robot-ansible-worker").string()};
    for (auto& a : extra_args) spec.command.push_back(std::move(a));
    return spec;
  }

  static std::string failure(const client::RpcReply& reply) {
    const auto* error = reply.keyword_error();
    return error ? json::value_to<std::string>(error->at("message")) : "(no keyword failure: " + describe(reply) + ")";
  }

  // Processes whose command line contains `needle`, this test's own excepted.
  static std::vector<pid_t> processes_with(std::string_view needle) {
    std::vector<pid_t> found;
    for (const auto& entry : fs::directory_iterator("/proc")) {
      const auto name = entry.path().filename().string();
      if (name.find_first_not_of("0123456789") != std::string::npos) continue;
      const pid_t pid = std::stoi(name);
      if (pid != ::getpid() && contains(proc_cmdline(pid), needle)) found.push_back(pid);
    }
    return found;
  }
};

TEST_F(AnsibleTest, ModulesRunFailChangeNothingInCheckModeAndBecomeKeywords) {
  start({ansible_library("Ansible")});
  TempDir dir("rjg-ansible");
  const auto path = (dir.path() / "created").string();
  auto client = connect();
  client.initialize();
  const auto imported = client.import_library("Ansible", {}, {{"modules", "ansible.builtin.file,ping"}});
  ASSERT_TRUE(imported.ok()) << describe(imported);
  const auto token = token_of(imported);

  // modules=: a keyword per module, documented from ansible-doc, its options named.
  const auto& definition = imported.result->at("definition").as_object();
  ASSERT_TRUE(keyword_definition(definition, "Run Action")) << definition;
  ASSERT_TRUE(keyword_definition(definition, "Gather Facts")) << definition;
  const auto* file = keyword_definition(definition, "file");
  ASSERT_TRUE(file) << definition;
  const auto& args = file->at("args").as_array();
  // Options are named-only, after "*" as the reference server would send them (the stock client builds
  // Robot's spec from the markers); the one required option comes first.
  EXPECT_EQ(args[0].at("kind"), "NAMED_ONLY_MARKER");
  EXPECT_EQ(args[1].at("name"), "path");
  EXPECT_EQ(args[1].at("has_default"), false);
  EXPECT_EQ(args[1].at("kind"), "NAMED_ONLY");
  bool has_state = false;
  for (const auto& a : args) has_state = has_state || a.at("name") == "state";
  EXPECT_TRUE(has_state) << *file;
  EXPECT_EQ(args.back().at("name"), "diff");
  EXPECT_TRUE(contains(json::value_to<std::string>(file->at("doc")), "Manage files and file properties")) << *file;
  ASSERT_TRUE(keyword_definition(definition, "ping")) << definition;

  const auto pong = client.run_keyword(token, "ping");
  RJG_ASSERT_KEYWORD_OK(pong);
  EXPECT_EQ(python_value(pong).at("ping"), "pong") << describe(pong);
  EXPECT_EQ(python_value(pong).at("changed"), false) << describe(pong);

  // command with a list argument as the real client sends it (pickled), never templated by Ansible (a lookup
  // would run on the gateway's machine), and a module warning as a WARN log. Its output ends in a byte that
  // is not UTF-8 (printf's \377), which Ansible records as a lone surrogate: it arrives as U+FFFD.
  const json::object argv{{"__pickled__", pickle::encode_pickle_hex(pickle::PyValue(pickle::PyList{
                                              {pickle::PyValue("printf"), pickle::PyValue("hi {{ 7 * 6 }}\\377")}}))}};
  std::vector<std::string> warnings;
  const auto echoed = client.run_keyword(token, "Run Action", {"command"}, {{"argv", argv}, {"executable", "/bin/sh"}},
                                         [&](const protocol::Message& m) {
                                           if (m.params().at("level") == "WARN")
                                             warnings.push_back(json::value_to<std::string>(m.params().at("message")));
                                         });
  RJG_ASSERT_KEYWORD_OK(echoed);
  const auto result = python_value(echoed).as_object();
  EXPECT_EQ(result.at("rc"), 0) << result;
  EXPECT_EQ(result.at("stdout"), "hi {{ 7 * 6 }}\xef\xbf\xbd") << result;
  EXPECT_EQ(result.at("changed"), true) << result;
  EXPECT_FALSE(result.contains("invocation")) << result;
  EXPECT_FALSE(result.contains("_ansible_no_log")) << result;
  ASSERT_EQ(warnings.size(), 1u) << describe(echoed);
  EXPECT_TRUE(contains(warnings[0], "Ansible module 'command' on host localhost: As of Ansible 2.4, the parameter "
                                    "'executable' is no longer supported"))
      << warnings[0];

  // Check mode reports the change and makes none; then the file keyword creates the file, and a second run
  // finds nothing to do (touch keeping the times is idempotent).
  const auto checked = client.run_keyword(token, "Run Action", {"file"},
                                          {{"path", path}, {"state", "touch"}, {"check_mode", true}});
  RJG_ASSERT_KEYWORD_OK(checked);
  EXPECT_EQ(python_value(checked).at("changed"), true) << describe(checked);
  EXPECT_FALSE(fs::exists(path));
  const json::object touch{{"path", path}, {"state", "touch"}, {"modification_time", "preserve"}, {"access_time", "preserve"}};
  const auto created = client.run_keyword(token, "File", {}, touch);
  RJG_ASSERT_KEYWORD_OK(created);
  EXPECT_EQ(python_value(created).at("changed"), true) << describe(created);
  EXPECT_TRUE(fs::exists(path));
  const auto again = client.run_keyword(token, "Run Action", {"ansible.builtin.file"}, touch);
  RJG_ASSERT_KEYWORD_OK(again);
  EXPECT_EQ(python_value(again).at("changed"), false) << describe(again);

  // A failing module fails the keyword with its message, naming the library, keyword, module and host; the
  // session goes on.
  std::vector<std::string> logs;
  const auto missing = client.run_keyword(token, "Run Action", {"command"}, {{"cmd", "rjg-no-such-program --x"}},
                                          [&](const protocol::Message& m) {
                                            logs.push_back(json::value_to<std::string>(m.params().at("message")));
                                          });
  ASSERT_TRUE(missing.ok()) << describe(missing);
  const auto message = failure(missing);
  EXPECT_TRUE(contains(message, "Library 'Ansible', keyword 'Run Action': Ansible module 'command' failed on host "
                                "localhost: [Errno 2] No such file or directory"))
      << message;
  EXPECT_TRUE(contains(message, "(rc 2)")) << message;
  ASSERT_FALSE(logs.empty());
  EXPECT_TRUE(contains(logs.back(), "Result of module 'command' on host localhost: {")) << logs.back();

  // Facts: once per subset and import.
  const auto facts = client.run_keyword(token, "Gather Facts");
  RJG_ASSERT_KEYWORD_OK(facts);
  EXPECT_EQ(python_value(facts).at("ansible_system"), "Linux") << describe(facts);
  EXPECT_EQ(as_int(python_value(facts).at("ansible_user_uid")), static_cast<std::int64_t>(::getuid())) << describe(facts);
  const auto cached = client.run_keyword(token, "Gather Facts", {"min"});
  RJG_ASSERT_KEYWORD_OK(cached);
  EXPECT_EQ(python_value(cached), python_value(facts));
  EXPECT_EQ(count_of(gateway().log(), kRunLine + "ansible.builtin.setup'"), 1u);
  EXPECT_EQ(count_of(gateway().log(), kRunLine), 7u);
}

// Python's value dialect: a module's result holding a list (command's `cmd`) or facts (dicts inside) travel
// as one pickle of the whole result, which the stock client unpickles into the dict the module returned; a
// flat result (ping's) stays JSON. Never nested JSON, which the stock client refuses.
TEST_F(AnsibleTest, NestedResultsTravelPickledAndFlatOnesAsJson) {
  start({ansible_library("Ansible")});
  auto client = connect();
  client.initialize();
  const auto token = token_of(client.import_library("Ansible"));

  const auto pong = keyword_value(client.run_keyword(token, "Run Action", {"ping"}));
  EXPECT_FALSE(is_pickled(pong)) << pong;
  EXPECT_EQ(python_value(pong).at("ping"), "pong") << pong;

  const auto echoed = client.run_keyword(token, "Run Action", {"command"}, {{"cmd", "echo hello"}});
  RJG_ASSERT_KEYWORD_OK(echoed);
  const auto wire = keyword_value(echoed);
  ASSERT_TRUE(is_pickled(wire)) << wire;
  const auto result = python_value(wire);
  EXPECT_EQ(result.at("cmd"), (json::array{"echo", "hello"})) << result;
  EXPECT_EQ(result.at("stdout"), "hello") << result;

  const auto facts = client.run_keyword(token, "Gather Facts", {"min"});
  RJG_ASSERT_KEYWORD_OK(facts);
  ASSERT_TRUE(is_pickled(keyword_value(facts))) << describe(facts);
  EXPECT_EQ(python_value(facts).at("ansible_system"), "Linux") << describe(facts);
}

TEST_F(AnsibleTest, AKeywordTimeoutLeavesNoModuleRunning) {
  auto spec = ansible_library("Ansible");
  spec.extra_toml = "keyword_timeout = \"10s\"\n";
  start({spec});
  // Not a structured binding: clang 14 cannot capture one in a lambda.
  auto opened = session("Ansible");
  auto& client = opened.first;
  const auto token = opened.second;
  // A duration no other test uses, to find this very sleep among the processes.
  const auto sleep = fmt::format("sleep 300.{}", ::getpid());
  auto call = std::async(std::launch::async,
                         [&] { return client.run_keyword(token, "Run Action", {"command"}, {{"cmd", sleep}}); });
  bool seen = false;
  while (call.wait_for(50ms) != std::future_status::ready)
    seen = seen || !processes_with(sleep).empty();
  const auto reply = call.get();
  ASSERT_TRUE(seen) << "ansible did not start the module within keyword_timeout: " << describe(reply);
  RJG_ASSERT_KEYWORD_FAILURE(reply, protocol::kWorkerTimeout);
  EXPECT_TRUE(eventually([&] { return processes_with(sleep).empty(); }, 30s))
      << "still running: " << proc_cmdline(processes_with(sleep).front());
  for (pid_t worker : started_pids("Ansible")) EXPECT_TRUE(wait_pid_gone(worker, 30s)) << proc_cmdline(worker);
  // The worker ended on the gateway's SIGTERM by ending its ansible group itself, not by SIGKILL.
  EXPECT_TRUE(log_eventually("ending the Ansible processes that run")) << gateway().log_tail();
}

TEST_F(AnsibleTest, BadImportsAndModulesOutsideTheAllowListAreRefusedClearly) {
  auto missing = ansible_library("NoAnsible");
  missing.env["PATH"] = "/nonexistent";
  start({ansible_library("Ansible"), ansible_library("Restricted", {"--allow", "ping", "--allow", "setup"}), missing});
  auto client = connect();
  client.initialize();

  const auto unknown = client.import_library("Ansible", {}, {{"host", "10.0.0.5"}});
  RJG_ASSERT_ERROR(unknown, protocol::kInvalidParams);
  EXPECT_TRUE(contains(unknown.error_message(), "Library 'Ansible': unknown library argument 'host'. It takes ansible_* "
                                                "connection variables (ansible_host, "))
      << describe(unknown);
  const auto become = client.import_library("Ansible", {"ansible_become=true"});
  RJG_ASSERT_ERROR(become, protocol::kInvalidParams);
  EXPECT_TRUE(contains(become.error_message(), "privilege escalation (become)")) << describe(become);
  const auto no_module = client.import_library("Ansible", {}, {{"modules", json::array{"ping", "rjg_no_such_module"}}});
  RJG_ASSERT_ERROR(no_module, protocol::kInvalidParams);
  EXPECT_TRUE(contains(no_module.error_message(), "Ansible has no module 'rjg_no_such_module' (from modules=)"))
      << describe(no_module);

  const auto not_installed = client.import_library("NoAnsible");
  RJG_ASSERT_ERROR(not_installed, protocol::kInvalidParams);
  EXPECT_TRUE(contains(not_installed.error_message(), "Ansible is not installed here: 'ansible-playbook' not found in PATH (/nonexistent)"))
      << describe(not_installed);
  EXPECT_TRUE(contains(not_installed.error_message(), "apt install ansible-core")) << describe(not_installed);

  // --allow: other modules are refused before anything runs, and so are variables that start programs.
  const auto restricted = open_library(client, "Restricted");
  const auto shell = client.run_keyword(restricted, "Run Action", {"shell"}, {{"cmd", "id"}});
  EXPECT_TRUE(contains(failure(shell), "module 'shell' is not allowed here: this worker runs only the modules given "
                                       "with --allow (ping, setup)"))
      << describe(shell);
  const auto bad_name = client.run_keyword(restricted, "Run Action", {"ping;id"});
  EXPECT_TRUE(contains(failure(bad_name), "'ping;id' is not a module name")) << describe(bad_name);
  const auto proxy = client.import_library("Restricted", {}, {{"ansible_ssh_common_args", "-o ProxyCommand=id"}});
  RJG_ASSERT_ERROR(proxy, protocol::kInvalidParams);
  EXPECT_TRUE(contains(proxy.error_message(), "--allow")) << describe(proxy);
  EXPECT_EQ(count_of(gateway().log(), kRunLine), 0u);
}

// The red team's finding: with --allow ping --allow file, Gather Facts (then always allowed) handed out the
// worker's environment. Under an allow-list it is now the module setup like any other: refused before
// anything runs, naming the option that allows it.
TEST_F(AnsibleTest, UnderAnAllowListGatherFactsNeedsSetup) {
  start({ansible_library("Restricted", {"--allow", "ping", "--allow", "file"})});
  auto client = connect();
  const auto token = open_library(client, "Restricted");
  const auto facts = client.run_keyword(token, "Gather Facts");
  ASSERT_TRUE(facts.ok()) << describe(facts);
  EXPECT_EQ(failure(facts),
            "Library 'Ansible', keyword 'Gather Facts': facts are gathered by the module 'setup', which is not "
            "allowed here: this worker runs only the modules given with --allow (ping, file). Ask the gateway's "
            "operator to add --allow setup to the library's command to gather facts.");
  const auto setup = client.run_keyword(token, "Run Action", {"setup"});
  EXPECT_TRUE(contains(failure(setup), "add --allow setup")) << describe(setup);
  EXPECT_EQ(count_of(gateway().log(), kRunLine), 0u);
}

// With --allow copy, copy's validate= ran any program (a command run on the file before it is written):
// the allow-list did not confine the client. Such options are now refused before anything runs, naming the
// flag that accepts them, and run once the operator gives it. setup's fact_path= (a directory whose
// executables run) and a git repo that git reads as --upload-pack are refused the same way.
TEST_F(AnsibleTest, UnderAnAllowListOptionsThatRunProgramsNeedTheirOwnFlag) {
  start({ansible_library("Copy", {"--allow", "copy", "--allow", "setup", "--allow", "git"}),
         ansible_library("CopyValidated", {"--allow", "copy", "--allow-option", "copy.validate"})});
  TempDir dir("rjg-ansible-validate");
  const auto marker = dir.path() / "marker";
  const auto dest = dir.path() / "copied";
  const json::object copy{{"dest", dest.string()},
                          {"content", "x\n"},
                          {"validate", fmt::format("/usr/bin/touch {} %s", marker.string())}};
  auto client = connect();

  const auto restricted = open_library(client, "Copy");
  const auto refused = client.run_keyword(restricted, "Run Action", {"copy"}, copy);
  ASSERT_TRUE(refused.ok()) << describe(refused);
  EXPECT_EQ(failure(refused),
            "Library 'Ansible', keyword 'Run Action': option 'validate' of module 'copy' runs the command it names on "
            "the file (%s) before the file is written. This worker runs only the modules given with --allow, whose "
            "clients do not choose programs to run: leave the option out, or ask the gateway's operator to add "
            "--allow-option copy.validate to the library's command.");
  const auto facts = client.run_keyword(restricted, "Run Action", {"setup"}, {{"fact_path", dir.path().string()}});
  EXPECT_TRUE(contains(failure(facts), "add --allow-option setup.fact_path")) << describe(facts);
  const auto git = client.run_keyword(restricted, "Run Action", {"ansible.builtin.git"},
                                      {{"repo", fmt::format("--upload-pack=/usr/bin/touch {}", marker.string())},
                                       {"dest", (dir.path() / "clone").string()}});
  EXPECT_TRUE(contains(failure(git), "option 'repo' of module 'ansible.builtin.git' begins with '-'")) << describe(git);
  EXPECT_FALSE(fs::exists(marker));
  EXPECT_FALSE(fs::exists(dest));
  EXPECT_EQ(count_of(gateway().log(), kRunLine), 0u);

  const auto validated = client.run_keyword(open_library(client, "CopyValidated"), "Run Action", {"copy"}, copy);
  RJG_ASSERT_KEYWORD_OK(validated);
  EXPECT_EQ(python_value(validated).at("changed"), true) << describe(validated);
  EXPECT_TRUE(fs::exists(marker));
  EXPECT_TRUE(fs::exists(dest));
  EXPECT_TRUE(log_eventually("clients may give copy.validate (--allow-option), which otherwise is refused"))
      << gateway().log_tail();
}

// Facts leave out the environment they were gathered in, which on a local connection is the worker's: the
// library's env table and all the gateway inherited. Whichever way setup runs, and however the client asks
// for env; the worker's --facts-env gives it back.
TEST_F(AnsibleTest, FactsCarryNoEnvironmentUnlessTheWorkerIsToldTo) {
  const auto library_secret = fmt::format("rjg-library-secret-{}", ::getpid());
  const auto gateway_secret = fmt::format("rjg-gateway-secret-{}", ::getpid());
  auto facts = ansible_library("Facts", {"--allow", "ping", "--allow", "ansible.builtin.setup"});
  facts.env["RJG_LAB_TOKEN"] = library_secret;
  auto with_env = ansible_library("FactsWithEnv", {"--facts-env"});
  with_env.env["RJG_LAB_TOKEN"] = library_secret;
  GatewayOptions options;
  options.env["RJG_GATEWAY_TOKEN"] = gateway_secret;
  start({facts, with_env}, options);
  auto client = connect();

  std::vector<std::string> logs;
  const auto collect = [&](const protocol::Message& m) { logs.push_back(json::value_to<std::string>(m.params().at("message"))); };
  const auto no_secret = [&](const client::RpcReply& reply) {
    // The answer as it came over the socket, and every log line the keyword sent.
    const auto text = reply.text + fmt::format("{}", fmt::join(logs, "\n"));
    return !contains(text, library_secret) && !contains(text, gateway_secret);
  };
  const auto token = open_library(client, "Facts");
  const auto gathered = client.run_keyword(token, "Gather Facts", {}, {}, collect);
  RJG_ASSERT_KEYWORD_OK(gathered);
  const auto values = python_value(gathered).as_object();
  EXPECT_EQ(values.at("ansible_system"), "Linux") << describe(gathered);
  EXPECT_TRUE(values.contains("ansible_user_dir")) << describe(gathered);  // from the password database: kept
  EXPECT_FALSE(values.contains("ansible_env")) << describe(gathered);
  EXPECT_TRUE(no_secret(gathered)) << gathered.text;

  // Run Action setup asking for env alone (setup's gather_subset takes a comma-separated text too).
  logs.clear();
  const auto asked = client.run_keyword(token, "Run Action", {"setup"}, {{"gather_subset", "!all,!min,env"}}, collect);
  RJG_ASSERT_KEYWORD_OK(asked);
  ASSERT_TRUE(python_value(asked).as_object().contains("ansible_facts")) << describe(asked);
  EXPECT_FALSE(python_value(asked).at("ansible_facts").as_object().contains("ansible_env")) << describe(asked);
  EXPECT_TRUE(no_secret(asked)) << asked.text;
  bool told = false;
  for (const auto& line : logs) told = told || contains(line, "ansible_env is left out of the facts of host localhost");
  EXPECT_TRUE(told) << fmt::format("{}", fmt::join(logs, "\n"));

  const auto opened = open_library(client, "FactsWithEnv");
  const auto full = client.run_keyword(opened, "Gather Facts");
  RJG_ASSERT_KEYWORD_OK(full);
  const auto with_facts = python_value(full).as_object();
  const auto* env = with_facts.if_contains("ansible_env");
  ASSERT_TRUE(env && env->is_object()) << describe(full);
  EXPECT_EQ(env->as_object().at("RJG_LAB_TOKEN"), json::value(library_secret));
  EXPECT_EQ(env->as_object().at("RJG_GATEWAY_TOKEN"), json::value(gateway_secret));
  EXPECT_EQ(count_of(gateway().log(), kRunLine), 3u);
}

}  // namespace
}  // namespace rjg::test
