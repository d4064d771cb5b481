// Ansible modules behind the gateway, end to end: the real gateway starting robot-ansible-worker, which runs
// Debian's ansible-core on this machine (connection local). Modules run, fail, change nothing in check
// mode, and become keywords of their own; facts are gathered once per import; a keyword_timeout leaves no
// module running; bad imports and modules outside --allow are refused in words a user can act on. Each
// ansible run costs about two seconds, so the checks share runs. Nothing is timed: every wait is a bound.
#include "tests/integration/gateway_test.hpp"

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

  static LibrarySpec ansible_library(const std::string& name, std::vector<std::string> extra_args = {}) {
    LibrarySpec spec;
    spec.name = name;
    spec.command = {(fs::path(gateway_binary()).parent_path() / "robot-ansible-worker").string()};
    for (auto& a : extra_args) spec.command.push_back(std::move(a));
    return spec;
  }

  static std::string failure(const RpcReply& reply) {
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
  EXPECT_EQ(args[0].at("name"), "path");  // the one required option comes first
  EXPECT_EQ(args[0].at("has_default"), false);
  EXPECT_EQ(args[0].at("kind"), "NAMED_ONLY");
  bool has_state = false;
  for (const auto& a : args) has_state = has_state || a.at("name") == "state";
  EXPECT_TRUE(has_state) << *file;
  EXPECT_EQ(args.back().at("name"), "diff");
  EXPECT_TRUE(contains(json::value_to<std::string>(file->at("doc")), "Manage files and file properties")) << *file;
  ASSERT_TRUE(keyword_definition(definition, "ping")) << definition;

  const auto pong = client.run_keyword(token, "ping");
  RJG_ASSERT_KEYWORD_OK(pong);
  EXPECT_EQ(keyword_value(pong).at("ping"), "pong") << describe(pong);
  EXPECT_EQ(keyword_value(pong).at("changed"), false) << describe(pong);

  // command with a list argument as the real client sends it (pickled), never templated by Ansible (a lookup
  // would run on the gateway's machine), and a module warning as a WARN log. Its output ends in a byte that
  // is not UTF-8 (printf's \377), which Ansible records as a lone surrogate: it arrives as U+FFFD.
  const json::object argv{{"__pickled__", pickle::encode_pickle_hex(pickle::PyValue(pickle::PyList{
                                              {pickle::PyValue("printf"), pickle::PyValue("hi {{ 7 * 6 }}\\377")}}))}};
  std::vector<std::string> warnings;
  const auto echoed = client.run_keyword(token, "Run Action", {"command"}, {{"argv", argv}, {"executable", "/bin/sh"}},
                                         [&](const Message& m) {
                                           if (m.params().at("level") == "WARN")
                                             warnings.push_back(json::value_to<std::string>(m.params().at("message")));
                                         });
  RJG_ASSERT_KEYWORD_OK(echoed);
  const auto result = keyword_value(echoed).as_object();
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
  EXPECT_EQ(keyword_value(checked).at("changed"), true) << describe(checked);
  EXPECT_FALSE(fs::exists(path));
  const json::object touch{{"path", path}, {"state", "touch"}, {"modification_time", "preserve"}, {"access_time", "preserve"}};
  const auto created = client.run_keyword(token, "File", {}, touch);
  RJG_ASSERT_KEYWORD_OK(created);
  EXPECT_EQ(keyword_value(created).at("changed"), true) << describe(created);
  EXPECT_TRUE(fs::exists(path));
  const auto again = client.run_keyword(token, "Run Action", {"ansible.builtin.file"}, touch);
  RJG_ASSERT_KEYWORD_OK(again);
  EXPECT_EQ(keyword_value(again).at("changed"), false) << describe(again);

  // A failing module fails the keyword with its message, naming the library, keyword, module and host; the
  // session goes on.
  std::vector<std::string> logs;
  const auto missing = client.run_keyword(token, "Run Action", {"command"}, {{"cmd", "rjg-no-such-program --x"}},
                                          [&](const Message& m) {
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
  EXPECT_EQ(keyword_value(facts).at("ansible_system"), "Linux") << describe(facts);
  EXPECT_EQ(as_int(keyword_value(facts).at("ansible_user_uid")), static_cast<std::int64_t>(::getuid())) << describe(facts);
  const auto cached = client.run_keyword(token, "Gather Facts", {"min"});
  RJG_ASSERT_KEYWORD_OK(cached);
  EXPECT_EQ(keyword_value(cached), keyword_value(facts));
  EXPECT_EQ(count_of(gateway().log(), kRunLine + "ansible.builtin.setup'"), 1u);
  EXPECT_EQ(count_of(gateway().log(), kRunLine), 7u);
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
  RJG_ASSERT_ERROR(reply, protocol::kWorkerTimeout);
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

}  // namespace
}  // namespace rjg::test
