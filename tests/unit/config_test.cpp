// Configuration loading: a valid file gives the model, and every mistake is reported with its
// line, the key it is about, and what was expected, all of them in one run.
#include "config/config.hpp"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using rjg::config::Config;
using rjg::config::ConfigError;
using rjg::config::Duration;

class ConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           (std::string("rjg-config-test-") + std::to_string(::getpid()) + "-" + info->test_suite_name() + "-" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    path_ = (dir_ / "gateway.toml").string();
  }
  void TearDown() override { fs::remove_all(dir_); }

  Config load(const std::string& text) { return rjg::config::load_string(text, path_); }

  // The problems reported for a text that must not load.
  std::vector<std::string> problems(const std::string& text) {
    try {
      load(text);
    } catch (const ConfigError& e) {
      return e.problems;
    }
    ADD_FAILURE() << "expected a ConfigError for:\n" << text;
    return {};
  }

  // Exactly one problem, at `line`, mentioning every word in `mentions`.
  void expect_one_problem(const std::string& text, int line, std::initializer_list<std::string_view> mentions) {
    auto found = problems(text);
    ASSERT_EQ(found.size(), 1u) << ::testing::PrintToString(found);
    expect_problem(found[0], line, mentions);
  }

  void expect_problem(const std::string& problem, int line, std::initializer_list<std::string_view> mentions) {
    auto prefix = path_ + ":" + std::to_string(line) + ":";
    EXPECT_TRUE(problem.starts_with(prefix)) << "expected line " << line << " in: " << problem;
    for (auto word : mentions) EXPECT_NE(problem.find(word), std::string::npos) << "'" << word << "' not in: " << problem;
  }

  fs::path dir_;
  std::string path_;
};

constexpr const char* kMinimal = R"(
[[library]]
name = "Calculator"
command = ["robot-example-calculator"]
)";

TEST_F(ConfigTest, ValidFullFile) {
  fs::create_directories(dir_ / "work");
  fs::create_directories(dir_ / "libs");
  auto config = load(R"(# full example
[gateway]
listen = ["tcp://0.0.0.0:8271", "tcp://localhost:0", "tcp://[::1]:9000"]
log_level = "debug"
drain_timeout = "45s"
max_message_bytes = 1048576

[defaults]
startup_timeout = "1m"
shutdown_grace = 2

[[library]]
name = "Calculator"
command = ["robot-example-calculator", "--verbose"]

[[library]]
name = "SeleniumLibrary"
command = ["venv/bin/python", "-m", "robot_jsonrpcremote_server", "--stdio", "SeleniumLibrary"]
env = { DISPLAY = ":99", PYTHONPATH = "/srv/robot-libs" }
cwd = "work"
startup_timeout = 90
shutdown_grace = "500ms"

[[library]]
name = "Absolute"
command = ["/usr/bin/env", "true"]
cwd = ")" + (dir_ / "libs").string() + R"("
)");
  EXPECT_EQ(config.path, path_);
  ASSERT_EQ(config.gateway.listen.size(), 3u);
  EXPECT_EQ(config.gateway.listen[0].host, "0.0.0.0");
  EXPECT_EQ(config.gateway.listen[0].port, 8271);
  EXPECT_EQ(config.gateway.listen[0].text, "tcp://0.0.0.0:8271");
  EXPECT_EQ(config.gateway.listen[1].host, "localhost");
  EXPECT_EQ(config.gateway.listen[1].port, 0);
  EXPECT_EQ(config.gateway.listen[2].host, "::1");
  EXPECT_EQ(config.gateway.listen[2].port, 9000);
  EXPECT_EQ(config.gateway.log_level, "debug");
  EXPECT_EQ(config.gateway.drain_timeout, 45s);
  EXPECT_EQ(config.gateway.max_message_bytes, 1048576u);

  ASSERT_EQ(config.libraries.size(), 3u);
  const auto& calc = config.libraries[0];
  EXPECT_EQ(calc.name, "Calculator");
  EXPECT_EQ(calc.command, (std::vector<std::string>{"robot-example-calculator", "--verbose"}));  // no slash: PATH
  EXPECT_TRUE(calc.env.empty());
  EXPECT_FALSE(calc.cwd);
  EXPECT_EQ(calc.startup_timeout, 1min);  // from [defaults]
  EXPECT_EQ(calc.shutdown_grace, 2s);
  EXPECT_EQ(calc.source_line, 12);

  const auto& selenium = config.libraries[1];
  EXPECT_EQ(selenium.command[0], (dir_ / "venv/bin/python").string());
  EXPECT_EQ(selenium.command.size(), 5u);
  EXPECT_EQ(selenium.command[4], "SeleniumLibrary");
  EXPECT_EQ(selenium.env, (std::map<std::string, std::string>{{"DISPLAY", ":99"}, {"PYTHONPATH", "/srv/robot-libs"}}));
  ASSERT_TRUE(selenium.cwd);
  EXPECT_EQ(*selenium.cwd, (dir_ / "work").string());
  EXPECT_EQ(selenium.startup_timeout, 90s);  // its own value wins over [defaults]
  EXPECT_EQ(selenium.shutdown_grace, 500ms);
  EXPECT_EQ(selenium.source_line, 16);

  EXPECT_EQ(config.libraries[2].command[0], "/usr/bin/env");
  EXPECT_EQ(*config.libraries[2].cwd, (dir_ / "libs").string());

  EXPECT_EQ(config.find_library("SeleniumLibrary"), &config.libraries[1]);
  EXPECT_EQ(config.find_library("Calculator"), &config.libraries[0]);
  EXPECT_EQ(config.find_library("calculator"), nullptr);  // exact match only
  EXPECT_EQ(config.find_library(""), nullptr);
}

TEST_F(ConfigTest, DefaultsWhenOmitted) {
  auto config = load(kMinimal);
  ASSERT_EQ(config.gateway.listen.size(), 1u);
  EXPECT_EQ(config.gateway.listen[0].host, "127.0.0.1");
  EXPECT_EQ(config.gateway.listen[0].port, 8271);
  EXPECT_EQ(config.gateway.listen[0].text, "tcp://127.0.0.1:8271");
  EXPECT_EQ(config.gateway.log_level, "info");
  EXPECT_EQ(config.gateway.drain_timeout, 30s);
  EXPECT_EQ(config.gateway.max_message_bytes, 64u * 1024 * 1024);
  ASSERT_EQ(config.libraries.size(), 1u);
  EXPECT_EQ(config.libraries[0].startup_timeout, 30s);
  EXPECT_EQ(config.libraries[0].shutdown_grace, 5s);
  EXPECT_EQ(config.libraries[0].source_line, 2);
}

TEST_F(ConfigTest, DefaultsTableAppliesUnlessOverridden) {
  auto config = load(R"(
[defaults]
startup_timeout = "2m"
shutdown_grace = "10s"

[[library]]
name = "A"
command = ["a"]

[[library]]
name = "B"
command = ["b"]
startup_timeout = "5s"

[[library]]
name = "C"
command = ["c"]
shutdown_grace = 0
)");
  ASSERT_EQ(config.libraries.size(), 3u);
  EXPECT_EQ(config.libraries[0].startup_timeout, 2min);
  EXPECT_EQ(config.libraries[0].shutdown_grace, 10s);
  EXPECT_EQ(config.libraries[1].startup_timeout, 5s);
  EXPECT_EQ(config.libraries[1].shutdown_grace, 10s);
  EXPECT_EQ(config.libraries[2].startup_timeout, 2min);
  EXPECT_EQ(config.libraries[2].shutdown_grace, 0ms);
}

TEST_F(ConfigTest, RelativeCommandPathResolvedAgainstTheFilesDirectory) {
  auto config = load(R"(
[[library]]
name = "Dot"
command = ["./workers/calc", "./not-resolved-argument"]
[[library]]
name = "Up"
command = ["../tools/bin/worker"]
[[library]]
name = "Plain"
command = ["robot-example-strings"]
[[library]]
name = "Abs"
command = ["/opt/venvs/web/bin/python"]
)");
  EXPECT_EQ(config.libraries[0].command[0], (dir_ / "workers/calc").string());
  EXPECT_EQ(config.libraries[0].command[1], "./not-resolved-argument");  // only the program is resolved
  EXPECT_EQ(config.libraries[1].command[0], (dir_.parent_path() / "tools/bin/worker").string());
  EXPECT_EQ(config.libraries[2].command[0], "robot-example-strings");
  EXPECT_EQ(config.libraries[3].command[0], "/opt/venvs/web/bin/python");
}

TEST_F(ConfigTest, UnknownKeyTypoIsNamedWithSuggestion) {
  expect_one_problem(R"([[library]]
name = "Calculator"
command = ["calc"]
comand = ["calc"]
)",
                     4, {"comand", "did you mean 'command'", "name, command, env, cwd"});
}

TEST_F(ConfigTest, UnknownKeysEverywhere) {
  auto found = problems(R"([gatway]
listen = ["tcp://127.0.0.1:1"]

[gateway]
log_levl = "info"

[defaults]
startup = 5

[[library]]
name = "A"
command = ["a"]
environment = { A = "1" }
)");
  ASSERT_EQ(found.size(), 4u) << ::testing::PrintToString(found);
  expect_problem(found[0], 1, {"gatway", "did you mean 'gateway'", "gateway, admin, classic, defaults, library"});
  expect_problem(found[1], 5, {"log_levl", "log_level", "[gateway]"});
  expect_problem(found[2], 8, {"startup", "[defaults]", "did you mean 'startup_timeout'", "startup_timeout, shutdown_grace"});
  expect_problem(found[3], 13, {"environment", "[[library]]"});
}

TEST_F(ConfigTest, WrongTypesNameTheExpectedType) {
  auto found = problems(R"([gateway]
listen = "tcp://127.0.0.1:8271"
log_level = 3
drain_timeout = true
max_message_bytes = "64MiB"

[[library]]
name = 5
command = "robot-example-calculator"
env = ["A=1"]
cwd = 1

[[library]]
name = "B"
command = ["b", 2]
env = { A = 1 }
)");
  ASSERT_EQ(found.size(), 10u) << ::testing::PrintToString(found);
  expect_problem(found[0], 2, {"gateway.listen", "is a string", "an array of strings"});
  expect_problem(found[1], 3, {"gateway.log_level", "is an integer", "a string"});
  expect_problem(found[2], 4, {"gateway.drain_timeout", "boolean", "duration"});
  expect_problem(found[3], 5, {"gateway.max_message_bytes", "string", "an integer"});
  expect_problem(found[4], 8, {"library[0].name", "integer", "a string"});
  expect_problem(found[5], 9, {"library[0].command", "string", "an array of strings"});
  expect_problem(found[6], 10, {"library[0].env", "array", "a table of strings"});
  expect_problem(found[7], 11, {"library[0].cwd", "integer", "a string"});
  expect_problem(found[8], 15, {"library[1].command[1]", "integer", "a string"});
  expect_problem(found[9], 16, {"library[1].env.A", "integer", "a string"});
}

TEST_F(ConfigTest, EmptyCommand) {
  expect_one_problem(R"([[library]]
name = "Calculator"
command = []
)",
                     3, {"library[0].command", "empty"});
  expect_one_problem(R"([[library]]
name = "Calculator"
command = ["", "x"]
)",
                     3, {"library[0].command[0]", "empty string"});
}

TEST_F(ConfigTest, MissingNameOrCommandPointsAtTheTable) {
  auto found = problems(R"(
[[library]]
command = ["a"]

[[library]]
name = "B"
)");
  ASSERT_EQ(found.size(), 2u) << ::testing::PrintToString(found);
  expect_problem(found[0], 2, {"no 'name'"});
  expect_problem(found[1], 5, {"no 'command'"});
}

TEST_F(ConfigTest, DuplicateLibraryNames) {
  expect_one_problem(R"([[library]]
name = "Calculator"
command = ["a"]

[[library]]
name = "Calculator"
command = ["b"]
)",
                     6, {"duplicate library name", "Calculator", "line 1"});
}

TEST_F(ConfigTest, BadLibraryNames) {
  auto found = problems(R"([[library]]
name = ""
command = ["a"]
[[library]]
name = "Selenium Library"
command = ["a"]
[[library]]
name = "Tab\tLib"
command = ["a"]
)");
  ASSERT_EQ(found.size(), 3u) << ::testing::PrintToString(found);
  expect_problem(found[0], 2, {"library[0].name", "not a valid library name"});
  expect_problem(found[1], 5, {"Selenium Library", "without spaces"});
  expect_problem(found[2], 8, {"library[2].name"});
}

TEST_F(ConfigTest, BadListenAddresses) {
  auto found = problems(R"([gateway]
listen = [
  "http://127.0.0.1:8271",
  "tcp://127.0.0.1",
  "tcp://example.com:8271",
  "tcp://::1:8271",
  "tcp://[::zz]:8271",
  "tcp://256.1.1.1:8271",
  "tcp://127.0.0.1:70000",
  "tcp://127.0.0.1:-1",
  "tcp://127.0.0.1:http",
  "tcp://:8271",
  "tcp://127.0.0.1:8271",
  "tcp://127.0.0.1:8271",
]
)" + std::string(kMinimal));
  ASSERT_EQ(found.size(), 11u) << ::testing::PrintToString(found);
  for (int i = 0; i < 11; ++i) expect_problem(found[i], 3 + i + (i == 10 ? 1 : 0), {"gateway.listen["});
  expect_problem(found[0], 3, {"tcp://", "\"tcp://HOST:PORT\""});
  expect_problem(found[1], 4, {"port is missing"});
  expect_problem(found[2], 5, {"example.com", "IPv4", "localhost"});
  expect_problem(found[3], 6, {"brackets"});
  expect_problem(found[4], 7, {"::zz", "IPv6"});
  expect_problem(found[5], 8, {"256.1.1.1"});
  expect_problem(found[6], 9, {"70000", "65535"});
  expect_problem(found[7], 10, {"-1"});
  expect_problem(found[8], 11, {"http"});
  expect_problem(found[9], 12, {"host is missing"});
  expect_problem(found[10], 14, {"listed twice"});
}

// Socket activation: "systemd" and "systemd:NAME" are listen entries; names follow FileDescriptorName=.
TEST_F(ConfigTest, SystemdListenEntries) {
  auto config = load(std::string("[gateway]\nlisten = [\"systemd:gateway\", \"systemd\", \"tcp://127.0.0.1:0\"]\n") + kMinimal);
  ASSERT_EQ(config.gateway.listen.size(), 3u);
  EXPECT_EQ(config.gateway.listen[0].kind, rjg::config::ListenAddress::Kind::systemd);
  EXPECT_EQ(config.gateway.listen[0].fd_name, "gateway");
  EXPECT_EQ(config.gateway.listen[1].kind, rjg::config::ListenAddress::Kind::systemd);
  EXPECT_EQ(config.gateway.listen[1].fd_name, "");
  EXPECT_EQ(config.gateway.listen[2].kind, rjg::config::ListenAddress::Kind::tcp);

  auto found = problems(R"([gateway]
listen = [
  "systemd:",
  "systemd:a:b",
  "systemd:two words",
  "systemd:gw",
  "systemd:gw",
  "systemd",
  "systemd",
]
)" + std::string(kMinimal));
  ASSERT_EQ(found.size(), 5u) << ::testing::PrintToString(found);
  expect_problem(found[0], 3, {"gateway.listen[0]", "name after \"systemd:\" is missing"});
  expect_problem(found[1], 4, {"gateway.listen[1]", "without spaces or ':'"});
  expect_problem(found[2], 5, {"gateway.listen[2]", "without spaces or ':'"});
  expect_problem(found[3], 7, {"gateway.listen[4]", "listed twice"});
  expect_problem(found[4], 9, {"gateway.listen[6]", "listed twice"});
}

// [admin]: its own listen (required in the table) and allow_from; never an address of [gateway].
TEST_F(ConfigTest, AdminTable) {
  auto config = load(std::string("[admin]\nlisten = [\"tcp://127.0.0.1:9271\", \"systemd:admin\"]\nallow_from = [\"10.0.0.0/8\"]\n") +
                     kMinimal);
  ASSERT_EQ(config.admin.listen.size(), 2u);
  EXPECT_EQ(config.admin.listen[0].port, 9271);
  EXPECT_EQ(config.admin.listen[1].fd_name, "admin");
  ASSERT_EQ(config.admin.allow_from.size(), 1u);
  EXPECT_TRUE(load(kMinimal).admin.listen.empty()) << "no [admin]: no endpoint";

  expect_one_problem(std::string("[admin]\nallow_from = []\n") + kMinimal, 1, {"[admin] has no 'listen'", "9271"});
  expect_one_problem(std::string("[gateway]\nlisten = [\"tcp://127.0.0.1:8271\"]\n[admin]\nlisten = [\"tcp://127.0.0.1:8271\"]\n") +
                         kMinimal,
                     4, {"admin.listen[0]", "also in [gateway] listen"});
  expect_one_problem(std::string("[admin]\nlisten = [\"http://127.0.0.1:9271\"]\n") + kMinimal, 2,
                     {"admin.listen[0]", "tcp://"});
}

TEST_F(ConfigTest, BadPort) {
  expect_one_problem(std::string("[gateway]\nlisten = [\"tcp://127.0.0.1:65536\"]\n") + kMinimal, 2,
                     {"gateway.listen[0]", "65536", "1 to 65535"});
}

TEST_F(ConfigTest, EmptyListenIsAnError) {
  expect_one_problem(std::string("[gateway]\nlisten = []\n") + kMinimal, 2, {"gateway.listen", "empty"});
}

TEST_F(ConfigTest, BadDuration) {
  expect_one_problem(R"([[library]]
name = "Calculator"
command = ["a"]
startup_timeout = "5 minutes"
)",
                     4, {"library[0].startup_timeout", "\"5 minutes\"", "not a valid duration", "\"500ms\""});
  expect_one_problem(std::string("[gateway]\ndrain_timeout = -1\n") + kMinimal, 2, {"gateway.drain_timeout", "-1"});
  expect_one_problem(std::string("[defaults]\nshutdown_grace = \"1x\"\n") + kMinimal, 2,
                     {"defaults.shutdown_grace", "1x"});
  expect_one_problem(std::string("[defaults]\nshutdown_grace = nan\n") + kMinimal, 2, {"defaults.shutdown_grace"});
  expect_one_problem(std::string("[defaults]\nshutdown_grace = inf\n") + kMinimal, 2, {"defaults.shutdown_grace"});
}

TEST_F(ConfigTest, DurationsAsTomlNumbers) {
  auto config = load(R"([gateway]
drain_timeout = 1.5
[[library]]
name = "A"
command = ["a"]
startup_timeout = 2
shutdown_grace = 0.25
)");
  EXPECT_EQ(config.gateway.drain_timeout, 1500ms);
  EXPECT_EQ(config.libraries[0].startup_timeout, 2s);
  EXPECT_EQ(config.libraries[0].shutdown_grace, 250ms);
}

TEST_F(ConfigTest, BadGatewayValues) {
  auto found = problems(R"([gateway]
log_level = "verbose"
max_message_bytes = 0
[[library]]
name = "A"
command = ["a"]
[[library]]
name = "B"
command = ["b"]
env = { "1BAD" = "x", "WITH-DASH" = "y", OK_1 = "z" }
)");
  ASSERT_EQ(found.size(), 4u) << ::testing::PrintToString(found);
  expect_problem(found[0], 2, {"gateway.log_level", "verbose", "debug, info, warn, error"});
  expect_problem(found[1], 3, {"gateway.max_message_bytes", "0", "1 to 1073741824"});
  expect_problem(found[2], 10, {"library[1].env.1BAD", "environment variable name"});
  expect_problem(found[3], 10, {"library[1].env.WITH-DASH"});

  expect_one_problem(std::string("[gateway]\nmax_message_bytes = 1073741825\n") + kMinimal, 2,
                     {"gateway.max_message_bytes", "1073741825"});
  EXPECT_EQ(load(std::string("[gateway]\nmax_message_bytes = 1073741824\n") + kMinimal).gateway.max_message_bytes,
            1073741824u);
}

TEST_F(ConfigTest, MissingLibrary) {
  expect_one_problem("[gateway]\nlog_level = \"info\"\n", 1, {"no library", "[[library]]"});
  expect_one_problem("", 1, {"[[library]]"});
  expect_one_problem("library = []\n", 1, {"'library' is an empty array", "[[library]]"});
  expect_one_problem("library = [1]\n", 1, {"'library' is an array of non-tables", "[[library]]"});
  expect_one_problem("library = \"A\"\n", 1, {"'library' is a string", "[[library]]"});
  expect_one_problem("[library]\nname = \"A\"\ncommand = [\"a\"]\n", 1, {"single table", "[[library]]"});
}

TEST_F(ConfigTest, NulCharactersAreRefused) {
  auto found = problems(R"([[library]]
name = "A"
command = ["a", "x\u0000y"]
env = { A = "\u0000" }
cwd = "/tmp\u0000/x"
)");
  ASSERT_EQ(found.size(), 3u) << ::testing::PrintToString(found);
  expect_problem(found[0], 3, {"library[0].command[1]", "NUL"});
  expect_problem(found[1], 4, {"library[0].env.A", "NUL"});
  expect_problem(found[2], 5, {"library[0].cwd", "NUL"});
}

TEST_F(ConfigTest, CwdMustBeAnExistingDirectory) {
  std::ofstream(dir_ / "a-file") << "x";
  auto found = problems(R"([[library]]
name = "A"
command = ["a"]
cwd = "missing/dir"
[[library]]
name = "B"
command = ["b"]
cwd = "a-file"
[[library]]
name = "C"
command = ["c"]
cwd = "/nonexistent-rjg-dir"
)");
  ASSERT_EQ(found.size(), 3u) << ::testing::PrintToString(found);
  expect_problem(found[0], 4, {"library[0].cwd", (dir_ / "missing/dir").string(), "does not exist"});
  expect_problem(found[1], 8, {"library[1].cwd", "not a directory"});
  expect_problem(found[2], 12, {"library[2].cwd", "/nonexistent-rjg-dir", "does not exist"});
}

TEST_F(ConfigTest, TomlSyntaxErrorHasItsLine) {
  auto found = problems(R"([gateway]
log_level = "info"

[[library]]
name = "A"
command = ["a"
)");
  ASSERT_EQ(found.size(), 1u) << ::testing::PrintToString(found);
  EXPECT_NE(found[0].find("TOML syntax error"), std::string::npos) << found[0];
  EXPECT_TRUE(found[0].starts_with(path_ + ":6:") || found[0].starts_with(path_ + ":7:")) << found[0];

  expect_one_problem("[gateway]\nlog_level = info\n", 2, {"TOML syntax error"});
  expect_one_problem("[[library]]\nname = \"A\"\nname = \"B\"\n", 3, {"TOML syntax error"});
}

TEST_F(ConfigTest, CollectsAllProblemsAtOnce) {
  try {
    load(R"([gateway]
listen = ["tcp://127.0.0.1:99999"]
log_level = "loud"

[[library]]
name = "A"
comand = ["a"]
startup_timeout = "forever"
)");
    FAIL() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    ASSERT_EQ(e.problems.size(), 5u) << ::testing::PrintToString(e.problems);
    expect_problem(e.problems[0], 2, {"99999"});
    expect_problem(e.problems[1], 3, {"loud"});
    expect_problem(e.problems[2], 5, {"no 'command'"});
    expect_problem(e.problems[3], 7, {"comand"});
    expect_problem(e.problems[4], 8, {"forever"});
    // what() lists them all, one per line, for a log line or stderr.
    std::string what = e.what();
    for (const auto& p : e.problems) EXPECT_NE(what.find(p), std::string::npos);
  }
}

TEST_F(ConfigTest, LoadFile) {
  std::ofstream(path_) << kMinimal;
  auto config = rjg::config::load_file(path_);
  EXPECT_EQ(config.path, path_);
  ASSERT_EQ(config.libraries.size(), 1u);
  EXPECT_EQ(config.libraries[0].name, "Calculator");
}

TEST_F(ConfigTest, LoadFileUnreadable) {
  auto missing = (dir_ / "nope.toml").string();
  try {
    rjg::config::load_file(missing);
    FAIL() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    ASSERT_EQ(e.problems.size(), 1u);
    EXPECT_EQ(e.problems[0], missing + ": cannot read: No such file or directory");
  }
  try {
    rjg::config::load_file(dir_.string());
    FAIL() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    ASSERT_EQ(e.problems.size(), 1u);
    EXPECT_EQ(e.problems[0], dir_.string() + ": cannot read: Is a directory");
  }
}

// The bundled example must always load: it is what a new user starts from.
TEST_F(ConfigTest, BundledExampleLoads) {
  auto config = rjg::config::load_file(RJG_CONFIG_DIR "/example.toml");
  ASSERT_EQ(config.gateway.listen.size(), 1u);
  EXPECT_EQ(config.gateway.listen[0].text, "tcp://127.0.0.1:8271");
  EXPECT_EQ(config.gateway.log_level, "info");
  ASSERT_EQ(config.libraries.size(), 2u);
  ASSERT_NE(config.find_library("Calculator"), nullptr);
  EXPECT_EQ(config.find_library("Calculator")->command, std::vector<std::string>{"robot-example-calculator"});
  ASSERT_NE(config.find_library("StringTools"), nullptr);
  EXPECT_EQ(config.find_library("StringTools")->command, std::vector<std::string>{"robot-example-strings"});
}

// ---- Pools, lifecycle and hardening ----

using rjg::config::Isolation;
using rjg::config::Network;
using rjg::config::PicklePolicy;

TEST_F(ConfigTest, PoolAndHardeningDefaultsWhenOmitted) {
  auto config = load(kMinimal);
  const auto& g = config.gateway;
  EXPECT_EQ(g.max_workers, 256u);
  EXPECT_EQ(g.max_header_bytes, 8192u);
  EXPECT_EQ(g.max_json_depth, 64u);
  EXPECT_EQ(g.handshake_timeout, 10s);
  EXPECT_EQ(g.read_timeout, 30s);
  EXPECT_EQ(g.idle_timeout, 0ms);
  EXPECT_EQ(g.max_sessions, 1024u);
  EXPECT_EQ(g.max_sessions_per_client, 64u);
  EXPECT_TRUE(g.allow_from.empty());

  const auto& lib = config.libraries.at(0);
  EXPECT_EQ(lib.isolation, Isolation::session);
  EXPECT_EQ(lib.prewarm, 0u);
  EXPECT_EQ(lib.max_workers, 0u);
  EXPECT_EQ(lib.queue_timeout, 30s);
  EXPECT_EQ(lib.keyword_timeout, 0ms);
  EXPECT_EQ(lib.max_keywords, 0u);
  EXPECT_EQ(lib.max_age, 0ms);
  EXPECT_EQ(lib.max_rss, 0u);
  EXPECT_EQ(lib.max_imports_per_worker, 16u);
  EXPECT_FALSE(lib.rlimits.any());
  EXPECT_FALSE(lib.rlimits.core_size_set);
  EXPECT_EQ(lib.pickle, PicklePolicy::data_only);
}

TEST_F(ConfigTest, EveryNewKeyValid) {
  auto config = load(R"([gateway]
max_workers = 40
max_header_bytes = 16384
max_json_depth = 128
handshake_timeout = "5s"
read_timeout = 20
idle_timeout = "15m"
max_sessions = 200
max_sessions_per_client = 0
allow_from = ["10.0.0.0/8", "192.168.1.7", "::1/128", "fd00::/8"]

[[library]]
name = "Browser"
command = ["python3"]
isolation = "shared"
prewarm = 2
max_workers = 8
queue_timeout = "2m"
keyword_timeout = "10m"
max_keywords = 500
max_age = "1h"
max_rss = "1GiB"
max_imports_per_worker = 4
rlimits = { address_space = "4GiB", open_files = 4096, cpu_seconds = 3600, processes = 512, core_size = 0 }
pickle = "deny"
)");
  const auto& g = config.gateway;
  EXPECT_EQ(g.max_workers, 40u);
  EXPECT_EQ(g.max_header_bytes, 16384u);
  EXPECT_EQ(g.max_json_depth, 128u);
  EXPECT_EQ(g.handshake_timeout, 5s);
  EXPECT_EQ(g.read_timeout, 20s);
  EXPECT_EQ(g.idle_timeout, 15min);
  EXPECT_EQ(g.max_sessions, 200u);
  EXPECT_EQ(g.max_sessions_per_client, 0u);
  ASSERT_EQ(g.allow_from.size(), 4u);
  EXPECT_EQ(g.allow_from[0].text, "10.0.0.0/8");
  EXPECT_FALSE(g.allow_from[0].v6);
  EXPECT_EQ(g.allow_from[0].prefix, 8);
  EXPECT_EQ(g.allow_from[1].prefix, 32);
  EXPECT_TRUE(g.allow_from[2].v6);
  EXPECT_EQ(g.allow_from[2].prefix, 128);
  EXPECT_EQ(g.allow_from[3].prefix, 8);

  const auto& lib = config.libraries.at(0);
  EXPECT_EQ(lib.isolation, Isolation::shared);
  EXPECT_EQ(lib.prewarm, 2u);
  EXPECT_EQ(lib.max_workers, 8u);
  EXPECT_EQ(lib.queue_timeout, 2min);
  EXPECT_EQ(lib.keyword_timeout, 10min);
  EXPECT_EQ(lib.max_keywords, 500u);
  EXPECT_EQ(lib.max_age, 1h);
  EXPECT_EQ(lib.max_rss, 1024u * 1024 * 1024);
  EXPECT_EQ(lib.max_imports_per_worker, 4u);
  EXPECT_EQ(lib.rlimits.address_space, 4ull << 30);
  EXPECT_EQ(lib.rlimits.open_files, 4096u);
  EXPECT_EQ(lib.rlimits.cpu_seconds, 3600u);
  EXPECT_EQ(lib.rlimits.processes, 512u);
  EXPECT_EQ(lib.rlimits.core_size, 0u);
  EXPECT_TRUE(lib.rlimits.core_size_set);  // core_size = 0 is a setting: no core dumps
  EXPECT_TRUE(lib.rlimits.any());
  EXPECT_EQ(lib.pickle, PicklePolicy::deny);
}

TEST_F(ConfigTest, NewKeysInheritFromDefaultsUnlessOverridden) {
  auto config = load(R"([defaults]
isolation = "shared"
prewarm = 1
max_workers = 4
queue_timeout = "10s"
keyword_timeout = "5m"
max_keywords = 100
max_age = "30m"
max_rss = "512MiB"
max_imports_per_worker = 8
rlimits = { address_space = "2GiB", open_files = 1024 }
pickle = "allow"

[[library]]
name = "Inherits"
command = ["a"]

[[library]]
name = "Overrides"
command = ["b"]
isolation = "session"
prewarm = 0
max_workers = 0
queue_timeout = 0
keyword_timeout = 0
max_keywords = 0
max_age = 0
max_rss = 0
max_imports_per_worker = 1
rlimits = { cpu_seconds = 60 }
pickle = "data-only"

[[library]]
name = "NoLimits"
command = ["c"]
rlimits = {}
)");
  ASSERT_EQ(config.libraries.size(), 3u);
  const auto& a = config.libraries[0];
  EXPECT_EQ(a.isolation, Isolation::shared);
  EXPECT_EQ(a.prewarm, 1u);
  EXPECT_EQ(a.max_workers, 4u);
  EXPECT_EQ(a.queue_timeout, 10s);
  EXPECT_EQ(a.keyword_timeout, 5min);
  EXPECT_EQ(a.max_keywords, 100u);
  EXPECT_EQ(a.max_age, 30min);
  EXPECT_EQ(a.max_rss, 512u * 1024 * 1024);
  EXPECT_EQ(a.max_imports_per_worker, 8u);
  EXPECT_EQ(a.rlimits.address_space, 2ull << 30);
  EXPECT_EQ(a.rlimits.open_files, 1024u);
  EXPECT_EQ(a.pickle, PicklePolicy::allow);
  EXPECT_EQ(a.startup_timeout, 30s);  // the built-in defaults still apply to keys [defaults] leaves out
  EXPECT_EQ(a.source_line, 14);

  const auto& b = config.libraries[1];
  EXPECT_EQ(b.isolation, Isolation::session);
  EXPECT_EQ(b.prewarm, 0u);
  EXPECT_EQ(b.max_workers, 0u);
  EXPECT_EQ(b.queue_timeout, 0ms);
  EXPECT_EQ(b.keyword_timeout, 0ms);
  EXPECT_EQ(b.max_keywords, 0u);
  EXPECT_EQ(b.max_age, 0ms);
  EXPECT_EQ(b.max_rss, 0u);
  EXPECT_EQ(b.max_imports_per_worker, 1u);
  // A library's rlimits table replaces the one of [defaults] as a whole.
  EXPECT_EQ(b.rlimits.cpu_seconds, 60u);
  EXPECT_EQ(b.rlimits.address_space, 0u);
  EXPECT_EQ(b.rlimits.open_files, 0u);
  EXPECT_EQ(b.pickle, PicklePolicy::data_only);

  EXPECT_FALSE(config.libraries[2].rlimits.any());
  EXPECT_EQ(config.libraries[2].isolation, Isolation::shared);
}

TEST_F(ConfigTest, EnumValues) {
  for (auto [text, value] : {std::pair{"session", Isolation::session}, std::pair{"shared", Isolation::shared}}) {
    auto config = load(std::string(kMinimal) + "isolation = \"" + text + "\"\n");
    EXPECT_EQ(config.libraries[0].isolation, value) << text;
    EXPECT_EQ(rjg::config::to_string(value), text);
  }
  for (auto [text, value] : {std::pair{"allow", PicklePolicy::allow}, std::pair{"data-only", PicklePolicy::data_only},
                             std::pair{"deny", PicklePolicy::deny}}) {
    auto config = load(std::string(kMinimal) + "pickle = \"" + text + "\"\n");
    EXPECT_EQ(config.libraries[0].pickle, value) << text;
    EXPECT_EQ(rjg::config::to_string(value), text);
  }

  auto found = problems(R"([defaults]
isolation = "Shared"
pickle = "data_only"
[[library]]
name = "A"
command = ["a"]
isolation = "process"
pickle = "never"
)");
  ASSERT_EQ(found.size(), 4u) << ::testing::PrintToString(found);
  expect_problem(found[0], 2, {"'defaults.isolation' = \"Shared\"", "not an isolation mode", "did you mean \"shared\"",
                               "session, shared"});
  expect_problem(found[1], 3, {"'defaults.pickle' = \"data_only\"", "did you mean \"data-only\"",
                               "allow, data-only, deny"});
  expect_problem(found[2], 7, {"'library[0].isolation' = \"process\"", "session, shared"});
  expect_problem(found[3], 8, {"'library[0].pickle' = \"never\"", "not a pickle policy", "allow, data-only, deny"});
  EXPECT_EQ(found[3].find("did you mean"), std::string::npos) << found[3];
  expect_one_problem("[[library]]\nname = \"A\"\ncommand = [\"a\"]\ncpu_affinity = \"two\"\n", 4,
                     {"'library[0].cpu_affinity' = \"two\"", "not a CPU affinity", "any, one"});
  expect_one_problem(std::string(kMinimal) + "pickle = \"DATA-ONLY\"\n", 5, {"did you mean \"data-only\""});
}

TEST_F(ConfigTest, BadLibraryPoolValues) {
  auto found = problems(R"([[library]]
name = "A"
command = ["a"]
prewarm = 65
max_workers = -1
queue_timeout = "soon"
keyword_timeout = "-5s"
max_keywords = -1
max_age = "1d"
max_rss = "1.5G"
max_imports_per_worker = 0
[[library]]
name = "B"
command = ["b"]
prewarm = -1
max_rss = "512"
keyword_timeout = "5ms"
)");
  ASSERT_EQ(found.size(), 11u) << ::testing::PrintToString(found);
  expect_problem(found[0], 4, {"'library[0].prewarm' = 65", "out of range", "from 0 to 64"});
  expect_problem(found[1], 5, {"'library[0].max_workers' = -1", "at least 0"});
  expect_problem(found[2], 6, {"library[0].queue_timeout", "\"soon\"", "not a valid duration"});
  expect_problem(found[3], 7, {"library[0].keyword_timeout", "\"-5s\""});
  expect_problem(found[4], 8, {"'library[0].max_keywords' = -1", "at least 0"});
  expect_problem(found[5], 9, {"library[0].max_age", "\"1d\""});
  expect_problem(found[6], 10, {"'library[0].max_rss' = \"1.5G\"", "not a valid size", "\"512MiB\""});
  expect_problem(found[7], 11, {"'library[0].max_imports_per_worker' = 0", "at least 1"});
  expect_problem(found[8], 15, {"'library[1].prewarm' = -1", "from 0 to 64"});
  expect_problem(found[9], 16, {"'library[1].max_rss' = \"512\"", "512 bytes", "less than 1MiB", "0 or at least 1MiB"});
  expect_problem(found[10], 17, {"'library[1].keyword_timeout' = 5ms", "at least 10ms", "0 (none)"});
}

TEST_F(ConfigTest, KeywordTimeoutBoundaries) {
  EXPECT_EQ(load(std::string(kMinimal) + "keyword_timeout = 0\n").libraries[0].keyword_timeout, 0ms);
  EXPECT_EQ(load(std::string(kMinimal) + "keyword_timeout = \"10ms\"\n").libraries[0].keyword_timeout, 10ms);
  EXPECT_EQ(load(std::string(kMinimal) + "keyword_timeout = 0.01\n").libraries[0].keyword_timeout, 10ms);
  expect_one_problem(std::string(kMinimal) + "keyword_timeout = \"9ms\"\n", 5, {"library[0].keyword_timeout", "9ms"});
  expect_one_problem(std::string(kMinimal) + "keyword_timeout = 0.005\n", 5, {"library[0].keyword_timeout", "5ms"});
  expect_one_problem("[defaults]\nkeyword_timeout = \"1ms\"\n" + std::string(kMinimal), 2,
                     {"defaults.keyword_timeout", "1ms", "at least 10ms"});
}

TEST_F(ConfigTest, WrongTypesForNewKeys) {
  auto found = problems(R"([gateway]
max_workers = 1.5
max_header_bytes = "8KiB"
handshake_timeout = false
allow_from = "10.0.0.0/8"

[defaults]
rlimits = 5

[[library]]
name = "A"
command = ["a"]
isolation = 1
prewarm = "2"
max_rss = true
pickle = ["deny"]

[[library]]
name = "B"
command = ["b"]
rlimits = { open_files = "many", address_space = 1.5 }
)");
  ASSERT_EQ(found.size(), 11u) << ::testing::PrintToString(found);
  expect_problem(found[0], 2, {"gateway.max_workers", "is a float", "an integer of at least 0"});
  expect_problem(found[1], 3, {"gateway.max_header_bytes", "is a string", "an integer from 256 to 1048576"});
  expect_problem(found[2], 4, {"gateway.handshake_timeout", "boolean", "a duration"});
  expect_problem(found[3], 5, {"gateway.allow_from", "is a string", "an array of strings"});
  expect_problem(found[4], 8, {"defaults.rlimits", "is an integer", "a table"});
  expect_problem(found[5], 13, {"library[0].isolation", "is an integer", "a string, one of: session, shared"});
  expect_problem(found[6], 14, {"library[0].prewarm", "is a string", "an integer from 0 to 64"});
  expect_problem(found[7], 15, {"library[0].max_rss", "is a boolean", "a size"});
  expect_problem(found[8], 16, {"library[0].pickle", "is an array", "allow, data-only, deny"});
  expect_problem(found[9], 21, {"library[1].rlimits.open_files", "is a string", "an integer of at least 16"});
  expect_problem(found[10], 21, {"library[1].rlimits.address_space", "is a float", "a size"});
}

TEST_F(ConfigTest, Rlimits) {
  auto config = load(std::string(kMinimal) +
                     "rlimits = { address_space = 17179869184, open_files = 16, cpu_seconds = 1, processes = 1, "
                     "core_size = \"64MiB\" }\n");
  const auto& r = config.libraries[0].rlimits;
  EXPECT_EQ(r.address_space, 16ull << 30);
  EXPECT_EQ(r.open_files, 16u);
  EXPECT_EQ(r.cpu_seconds, 1u);
  EXPECT_EQ(r.processes, 1u);
  EXPECT_EQ(r.core_size, 64u << 20);
  EXPECT_TRUE(r.core_size_set);

  auto only = load(std::string(kMinimal) + "rlimits = { open_files = 64 }\n").libraries[0].rlimits;
  EXPECT_TRUE(only.any());
  EXPECT_FALSE(only.core_size_set);
  EXPECT_EQ(only.address_space, 0u);

  auto found = problems(R"([[library]]
name = "A"
command = ["a"]

[library.rlimits]
address_space = "1MiB"
open_files = 15
cpu_seconds = 0
processes = 0
core_size = "-1"
stack_size = "8MiB"
open_file = 10
)");
  ASSERT_EQ(found.size(), 7u) << ::testing::PrintToString(found);
  expect_problem(found[0], 6, {"'library[0].rlimits.address_space' = \"1MiB\"", "less than 16MiB",
                               "leave the key out for no limit"});
  expect_problem(found[1], 7, {"'library[0].rlimits.open_files' = 15", "at least 16"});
  expect_problem(found[2], 8, {"'library[0].rlimits.cpu_seconds' = 0", "at least 1"});
  expect_problem(found[3], 9, {"'library[0].rlimits.processes' = 0", "at least 1"});
  expect_problem(found[4], 10, {"'library[0].rlimits.core_size' = \"-1\"", "not a valid size"});
  expect_problem(found[5], 11, {"unknown key 'stack_size' in library[0].rlimits",
                                "address_space, open_files, cpu_seconds, processes, core_size"});
  expect_problem(found[6], 12, {"unknown key 'open_file'", "did you mean 'open_files'"});

  expect_one_problem(std::string(kMinimal) + "rlimits = { address_space = 0 }\n", 5,
                     {"library[0].rlimits.address_space", "expected at least 16MiB"});
}

TEST_F(ConfigTest, BadGatewayHardeningValues) {
  auto found = problems(R"([gateway]
max_workers = -1
max_header_bytes = 255
max_json_depth = 7
handshake_timeout = 0
read_timeout = "0s"
idle_timeout = -1
max_sessions = -1
max_sessions_per_client = -2
)" + std::string(kMinimal));
  ASSERT_EQ(found.size(), 8u) << ::testing::PrintToString(found);
  expect_problem(found[0], 2, {"'gateway.max_workers' = -1", "at least 0", "0: no cap"});
  expect_problem(found[1], 3, {"'gateway.max_header_bytes' = 255", "from 256 to 1048576 (1 MiB)"});
  expect_problem(found[2], 4, {"'gateway.max_json_depth' = 7", "from 8 to 1024"});
  expect_problem(found[3], 5, {"'gateway.handshake_timeout' is 0", "at least 1ms"});
  expect_problem(found[4], 6, {"'gateway.read_timeout' is 0"});
  expect_problem(found[5], 7, {"gateway.idle_timeout", "-1", "not a valid duration"});
  expect_problem(found[6], 8, {"'gateway.max_sessions' = -1"});
  expect_problem(found[7], 9, {"'gateway.max_sessions_per_client' = -2"});

  expect_one_problem("[gateway]\nmax_header_bytes = 1048577\n" + std::string(kMinimal), 2,
                     {"gateway.max_header_bytes", "1048577"});
  expect_one_problem("[gateway]\nmax_json_depth = 1025\n" + std::string(kMinimal), 2,
                     {"gateway.max_json_depth", "1025"});
  auto edges = load(R"([gateway]
max_header_bytes = 256
max_json_depth = 8
handshake_timeout = "1ms"
read_timeout = 0.5
idle_timeout = 0
max_workers = 0
max_sessions = 0
)" + std::string(kMinimal));
  EXPECT_EQ(edges.gateway.max_header_bytes, 256u);
  EXPECT_EQ(edges.gateway.max_json_depth, 8u);
  EXPECT_EQ(edges.gateway.handshake_timeout, 1ms);
  EXPECT_EQ(edges.gateway.read_timeout, 500ms);
  EXPECT_EQ(edges.gateway.idle_timeout, 0ms);
  EXPECT_EQ(edges.gateway.max_workers, 0u);
  EXPECT_EQ(edges.gateway.max_sessions, 0u);
  auto top = load("[gateway]\nmax_header_bytes = 1048576\nmax_json_depth = 1024\n" + std::string(kMinimal));
  EXPECT_EQ(top.gateway.max_header_bytes, 1048576u);
  EXPECT_EQ(top.gateway.max_json_depth, 1024u);
}

TEST_F(ConfigTest, KeysInTheWrongTableSayWhereTheyBelong) {
  auto found = problems(R"(listen = ["tcp://127.0.0.1:1"]
[gateway]
isolation = "shared"
[defaults]
cwd = "/tmp"
allow_from = ["10.0.0.0/8"]
[[library]]
name = "A"
command = ["a"]
open_files = 1024
)");
  ASSERT_EQ(found.size(), 5u) << ::testing::PrintToString(found);
  expect_problem(found[0], 1, {"unknown key 'listen' in the top level", "it belongs in [gateway]"});
  expect_problem(found[1], 3, {"unknown key 'isolation' in [gateway]", "it belongs in [defaults] or [[library]]",
                               "known keys are: listen, log_level"});
  expect_problem(found[2], 5, {"unknown key 'cwd' in [defaults]", "it belongs in each [[library]]"});
  expect_problem(found[3], 6, {"'allow_from'", "it belongs in [gateway]"});
  expect_problem(found[4], 10, {"'open_files'", "[[library]] table library[0]", "it belongs in an rlimits table"});
}

TEST_F(ConfigTest, UnknownKeysListTheNewKnownKeys) {
  auto found = problems(R"([gateway]
max_session = 3
[defaults]
prewarn = 1
[[library]]
name = "A"
command = ["a"]
max_import_per_worker = 2
)");
  ASSERT_EQ(found.size(), 3u) << ::testing::PrintToString(found);
  expect_problem(found[0], 2, {"did you mean 'max_sessions'", "max_sessions_per_client, allow_from"});
  expect_problem(found[1], 4, {"[defaults]", "did you mean 'prewarm'", "max_imports_per_worker, rlimits, cpu_affinity, pickle"});
  expect_problem(found[2], 8, {"did you mean 'max_imports_per_worker'", "name, command, env, cwd, startup_timeout"});
}

TEST_F(ConfigTest, PrewarmMoreThanMaxWorkers) {
  auto found = problems(R"([defaults]
prewarm = 3
max_workers = 2
[[library]]
name = "A"
command = ["a"]
[[library]]
name = "B"
command = ["b"]
max_workers = 1
[[library]]
name = "C"
command = ["c"]
prewarm = 5
max_workers = 4
[[library]]
name = "D"
command = ["d"]
max_workers = 0
[[library]]
name = "E"
command = ["e"]
prewarm = 2
)");
  // [defaults] itself once (not again for A, which sets neither); B and C for their own keys; D lifts the cap and
  // E lowers prewarm, both fine.
  ASSERT_EQ(found.size(), 3u) << ::testing::PrintToString(found);
  expect_problem(found[0], 2, {"'defaults.prewarm' = 3 is more than 'defaults.max_workers' = 2",
                               "at most max_workers"});
  expect_problem(found[1], 10, {"'defaults.prewarm' = 3 is more than 'library[1].max_workers' = 1"});
  expect_problem(found[2], 14, {"'library[2].prewarm' = 5 is more than 'library[2].max_workers' = 4"});
}

TEST_F(ConfigTest, PrewarmTogetherMustFitTheGatewayCap) {
  auto found = problems(R"([gateway]
max_workers = 10
[defaults]
prewarm = 4
[[library]]
name = "A"
command = ["a"]
[[library]]
name = 7
command = ["broken"]
prewarm = 64
[[library]]
name = "C"
command = ["c"]
[[library]]
name = "D"
command = ["d"]
prewarm = 1
[[library]]
name = "E"
command = ["e"]
)");
  // A (4) + C (4) + D (1) = 9 fits; E brings it to 13 (the broken library is not counted).
  ASSERT_EQ(found.size(), 2u) << ::testing::PrintToString(found);
  expect_problem(found[0], 9, {"library[1].name"});
  expect_problem(found[1], 19, {"'defaults.prewarm' = 4 brings the prewarmed workers of all libraries to 13",
                                "'gateway.max_workers' = 10"});

  expect_one_problem("[gateway]\nmax_workers = 2\n" + std::string(kMinimal) + "prewarm = 3\n", 7,
                     {"'library[0].prewarm' = 3", "to 3", "'gateway.max_workers' = 2"});
  // No global cap: no check.
  EXPECT_EQ(load("[gateway]\nmax_workers = 0\n" + std::string(kMinimal) + "prewarm = 64\n").libraries[0].prewarm, 64u);
}

// [classic] max_imports and idle_timeout; what classic clients may hold leaves every capped pool room for
// JSON-RPC clients, and the check names both keys.
TEST_F(ConfigTest, ClassicImportsLeaveRoomForJsonRpcClients) {
  const std::string classic = "[classic]\nlisten = [\"tcp://127.0.0.1:8270\"]\n";
  EXPECT_EQ(rjg::config::Classic{}.max_imports, 4u);
  EXPECT_EQ(rjg::config::Classic{}.idle_timeout, Duration(300'000));
  auto config = load(classic + "max_imports = 2\nidle_timeout = \"30s\"\n" + kMinimal);
  EXPECT_EQ(config.classic.max_imports, 2u);
  EXPECT_EQ(config.classic.idle_timeout, Duration(30'000));
  EXPECT_EQ(load(classic + "idle_timeout = 0\n" + kMinimal).classic.idle_timeout, Duration(0));  // never
  expect_one_problem(classic + "idle_timeout = \"10ms\"\n" + kMinimal, 3, {"classic.idle_timeout", "unit mistake"});
  expect_one_problem(classic + "max_imports = 0\n" + kMinimal, 3, {"classic.max_imports"});

  // The gateway-wide cap: classic imports alone must not reach it.
  expect_one_problem("[gateway]\nmax_workers = 4\n" + classic + kMinimal, 3,
                     {"'classic.max_imports' = 4 (the default)", "'[gateway] max_workers' = 4", "JSON-RPC"});
  expect_one_problem("[gateway]\nmax_workers = 4\n" + classic + "max_imports = 6\n" + kMinimal, 5,
                     {"'classic.max_imports' = 6", "'[gateway] max_workers' = 4"});
  EXPECT_EQ(load("[gateway]\nmax_workers = 4\n" + classic + "max_imports = 3\n" + kMinimal).classic.max_imports, 3u);
  EXPECT_EQ(load("[gateway]\nmax_workers = 0\n" + classic + kMinimal).gateway.max_workers, 0u);  // no cap
  // Without the front nothing is held for classic clients: no check.
  EXPECT_EQ(load("[gateway]\nmax_workers = 1\n" + std::string(kMinimal)).gateway.max_workers, 1u);

  // A library's own cap: its classic_instances must stay below it.
  expect_one_problem(classic + kMinimal + "max_workers = 2\nclassic_instances = 2\n", 8,
                     {"'library[0].classic_instances' = 2", "'library[0].max_workers' = 2", "\"Calculator\""});
  expect_one_problem(classic + kMinimal + "max_workers = 1\n", 7,
                     {"'library[0].classic_instances' = 1", "'library[0].max_workers' = 1", "0: not served"});
  // From [defaults], the key is named where it is set.
  expect_one_problem(classic + "[defaults]\nmax_workers = 1\n" + kMinimal, 4,
                     {"'library[0].classic_instances' = 1", "'defaults.max_workers' = 1"});
  EXPECT_EQ(load(classic + kMinimal + "max_workers = 3\nclassic_instances = 2\n").libraries[0].classic_instances, 2u);
  // 0: not served to classic clients, so nothing is taken from the pool.
  EXPECT_EQ(load(classic + kMinimal + "max_workers = 1\nclassic_instances = 0\n").libraries[0].classic_instances, 0u);
  // Shared workers serve several imports each: room is counted in imports.
  EXPECT_EQ(load(classic + kMinimal + "isolation = \"shared\"\nmax_workers = 1\n").libraries[0].max_workers, 1u);
  expect_one_problem(classic + kMinimal + "isolation = \"shared\"\nmax_workers = 1\nmax_imports_per_worker = 1\n", 8,
                     {"'library[0].max_workers' = 1 shared workers", "'library[0].max_imports_per_worker' = 1"});
  // More instances than the front may hold at all can never be reached.
  expect_one_problem(classic + "max_imports = 2\n" + kMinimal + "classic_instances = 3\n", 8,
                     {"'library[0].classic_instances' = 3", "'classic.max_imports' = 2", "never be reached"});

  // A glob entry: each name classic clients call holds imports of its own, up to max_imports together.
  const std::string glob = "[[library]]\nname = \"Lab*\"\ncommand = [\"/opt/lab/bin/serve\", \"{library}\"]\n";
  expect_one_problem(classic + glob + "max_workers = 4\n", 6,
                     {"'classic.max_imports' = 4 (the default)", "'library[0].max_workers' = 4", "glob entry \"Lab*\""});
  EXPECT_EQ(load(classic + "max_imports = 3\n" + glob + "max_workers = 4\n").libraries[0].max_workers, 4u);
}

// prewarm_import: off unless set; a library's own value wins over [defaults].
TEST_F(ConfigTest, PrewarmImportIsOffByDefaultAndInherits) {
  EXPECT_FALSE(load(kMinimal).libraries[0].prewarm_import);
  EXPECT_TRUE(load(std::string(kMinimal) + "prewarm = 1\nprewarm_import = true\n").libraries[0].prewarm_import);

  auto config = load(R"([defaults]
prewarm = 2
prewarm_import = true
[[library]]
name = "Inherits"
command = ["a"]
[[library]]
name = "Overrides"
command = ["b"]
prewarm_import = false
[[library]]
name = "NoPrewarm"
command = ["c"]
prewarm = 0
prewarm_import = false
)");
  ASSERT_EQ(config.libraries.size(), 3u);
  EXPECT_TRUE(config.libraries[0].prewarm_import);
  EXPECT_FALSE(config.libraries[1].prewarm_import);
  EXPECT_FALSE(config.libraries[2].prewarm_import);

  expect_one_problem(std::string(kMinimal) + "prewarm = 1\nprewarm_import = \"yes\"\n", 6,
                     {"'library[0].prewarm_import'", "is a string", "true or false"});
}

// prewarm_import needs prewarmed workers to import in, and session isolation (a shared worker keeps the
// library loaded across imports already): every conflict is reported, naming both keys and what to do.
TEST_F(ConfigTest, PrewarmImportNeedsPrewarmAndSessionIsolation) {
  expect_one_problem(std::string(kMinimal) + "prewarm_import = true\n", 5,
                     {"'library[0].prewarm_import' = true needs 'library[0].prewarm' of at least 1 (it is 0)",
                      "expected prewarm = 1 or more, or prewarm_import = false"});
  expect_one_problem(std::string(kMinimal) + "isolation = \"shared\"\nprewarm = 1\nprewarm_import = true\n", 7,
                     {"'library[0].prewarm_import' = true does not apply to 'library[0].isolation' = \"shared\"",
                      "expected isolation = \"session\", or prewarm_import = false"});

  // Both at once: both reported, at the key that asks for it.
  auto both = problems(std::string(kMinimal) + "isolation = \"shared\"\nprewarm_import = true\n");
  ASSERT_EQ(both.size(), 2u) << ::testing::PrintToString(both);
  expect_problem(both[0], 6, {"does not apply to 'library[0].isolation' = \"shared\""});
  expect_problem(both[1], 6, {"needs 'library[0].prewarm' of at least 1"});

  auto found = problems(R"([defaults]
prewarm_import = true
[[library]]
name = "A"
command = ["a"]
[[library]]
name = "B"
command = ["b"]
prewarm = 1
[[library]]
name = "C"
command = ["c"]
prewarm = 1
isolation = "shared"
[[library]]
name = "D"
command = ["d"]
prewarm = 1
prewarm_import = false
isolation = "shared"
)");
  // [defaults] itself once (not again for A, which sets none of the keys); B sets prewarm and is fine; C
  // conflicts through its own isolation; D turns prewarm_import off.
  ASSERT_EQ(found.size(), 2u) << ::testing::PrintToString(found);
  expect_problem(found[0], 2, {"'defaults.prewarm_import' = true needs 'defaults.prewarm' of at least 1"});
  expect_problem(found[1], 14, {"'defaults.prewarm_import' = true does not apply to 'library[2].isolation' = \"shared\""});
}

TEST_F(ConfigTest, SharedOnlyKeysAreAllowedForSessionLibraries) {
  auto config = load(std::string(kMinimal) +
                     "isolation = \"session\"\nmax_keywords = 10\nmax_age = \"1h\"\nmax_rss = \"1GiB\"\n"
                     "max_imports_per_worker = 2\n");
  EXPECT_EQ(config.libraries[0].isolation, Isolation::session);
  EXPECT_EQ(config.libraries[0].max_keywords, 10u);
}

TEST_F(ConfigTest, SizesInTheFile) {
  auto config = load(R"([[library]]
name = "A"
command = ["a"]
max_rss = 1048576
rlimits = { address_space = "2G", core_size = "512" }
[[library]]
name = "B"
command = ["b"]
max_rss = "64MB"
rlimits = { address_space = "16MiB", core_size = 4096 }
)");
  EXPECT_EQ(config.libraries[0].max_rss, 1048576u);
  EXPECT_EQ(config.libraries[0].rlimits.address_space, 2ull << 30);
  EXPECT_EQ(config.libraries[0].rlimits.core_size, 512u);
  EXPECT_EQ(config.libraries[1].max_rss, 64u << 20);
  EXPECT_EQ(config.libraries[1].rlimits.address_space, 16u << 20);
  EXPECT_EQ(config.libraries[1].rlimits.core_size, 4096u);

  auto found = problems(R"([[library]]
name = "A"
command = ["a"]
max_rss = -1
rlimits = { core_size = "12XB" }
[[library]]
name = "B"
command = ["b"]
max_rss = "99999999999G"
rlimits = { core_size = "1 MiB" }
)");
  ASSERT_EQ(found.size(), 4u) << ::testing::PrintToString(found);
  expect_problem(found[0], 4, {"'library[0].max_rss' = -1 is not a valid size", "non-negative"});
  expect_problem(found[1], 5, {"'library[0].rlimits.core_size' = \"12XB\" is not a valid size"});
  expect_problem(found[2], 9, {"\"99999999999G\"", "not a valid size"});
  expect_problem(found[3], 10, {"\"1 MiB\""});
}

TEST_F(ConfigTest, AllowFromParsing) {
  auto config = load(R"([gateway]
allow_from = ["10.1.2.3/8", "192.168.1.7", "0.0.0.0/0", "2001:db8::1/32", "::ffff:172.16.0.0/108", "fe80::/10"]
)" + std::string(kMinimal));
  const auto& nets = config.gateway.allow_from;
  ASSERT_EQ(nets.size(), 6u);
  // Host bits are allowed in the text and cleared.
  EXPECT_EQ(nets[0].text, "10.1.2.3/8");
  EXPECT_EQ(nets[0].prefix, 8);
  EXPECT_EQ(nets[0].bytes[0], 10);
  EXPECT_EQ(nets[0].bytes[1], 0);
  EXPECT_EQ(nets[0].bytes[3], 0);
  EXPECT_EQ(nets[1].prefix, 32);
  EXPECT_EQ(nets[1].bytes[3], 7);
  EXPECT_EQ(nets[2].prefix, 0);
  EXPECT_TRUE(nets[3].v6);
  EXPECT_EQ(nets[3].prefix, 32);
  EXPECT_EQ(nets[3].bytes[15], 0);
  // An IPv4-mapped network is kept as the IPv4 network.
  EXPECT_FALSE(nets[4].v6);
  EXPECT_EQ(nets[4].prefix, 12);
  EXPECT_EQ(nets[4].bytes[0], 172);
  EXPECT_EQ(nets[4].bytes[1], 16);
  EXPECT_EQ(nets[4].text, "::ffff:172.16.0.0/108");

  auto found = problems(R"([gateway]
allow_from = [
  "10.0.0.0/33",
  "10.0.0/8",
  "::1/129",
  "[::1]/128",
  "10.0.0.0/",
  "10.0.0.0/8/8",
  "host.example",
  "",
  "10.0.0.0/ 8",
  "10.0.0.0/08",
  "fe80::1%eth0",
  "/8",
  "010.0.0.1",
  3,
  "10.0.0.0/8",
  "10.9.9.9/8",
  "::1",
  "0:0:0:0:0:0:0:1/128",
]
)" + std::string(kMinimal));
  ASSERT_EQ(found.size(), 16u) << ::testing::PrintToString(found);
  for (int i = 0; i < 13; ++i) expect_problem(found[i], 3 + i, {"gateway.allow_from[", "is not a network"});
  expect_problem(found[0], 3, {"'gateway.allow_from[0]' = \"10.0.0.0/33\"", "more than 32"});
  expect_problem(found[1], 4, {"'10.0.0' is not an IPv4 address"});
  expect_problem(found[2], 5, {"more than 128"});
  expect_problem(found[3], 6, {"without brackets"});
  expect_problem(found[4], 7, {"prefix '/'", "from 0 to 32"});
  expect_problem(found[5], 8, {"prefix '/8/8'"});
  expect_problem(found[6], 9, {"'host.example' is not an IPv4 address"});
  expect_problem(found[7], 10, {"it is empty"});
  expect_problem(found[8], 11, {"prefix '/ 8'"});
  expect_problem(found[9], 12, {"prefix '/08'"});
  expect_problem(found[10], 13, {"'fe80::1%eth0' is not an IPv6 address"});
  expect_problem(found[11], 14, {"the address is missing"});
  expect_problem(found[12], 15, {"'010.0.0.1' is not an IPv4 address"});
  expect_problem(found[13], 16, {"gateway.allow_from[13]", "is an integer", "a string"});
  expect_problem(found[14], 18, {"'gateway.allow_from[15]' = \"10.9.9.9/8\"",
                                 "same network as 'gateway.allow_from[14]' = \"10.0.0.0/8\""});
  expect_problem(found[15], 20, {"gateway.allow_from[17]", "same network as 'gateway.allow_from[16]'"});

  // Empty: every address.
  EXPECT_TRUE(load("[gateway]\nallow_from = []\n" + std::string(kMinimal)).gateway.allow_from.empty());
}

Network net(const char* text) {
  std::string why;
  auto n = rjg::config::parse_network(text, &why);
  EXPECT_TRUE(n) << text << ": " << why;
  return n.value_or(Network{});
}

TEST(NetworkContains, IPv4) {
  auto ten = net("10.0.0.0/8");
  EXPECT_TRUE(ten.contains("10.0.0.0"));
  EXPECT_TRUE(ten.contains("10.255.255.255"));
  EXPECT_TRUE(ten.contains("10.1.2.3"));
  EXPECT_FALSE(ten.contains("11.0.0.0"));
  EXPECT_FALSE(ten.contains("9.255.255.255"));
  EXPECT_TRUE(net("10.200.3.4/8").contains("10.1.2.3"));  // host bits masked

  auto host = net("192.168.1.7");
  EXPECT_EQ(host.prefix, 32);
  EXPECT_TRUE(host.contains("192.168.1.7"));
  EXPECT_FALSE(host.contains("192.168.1.8"));

  auto odd = net("172.16.0.0/12");
  EXPECT_TRUE(odd.contains("172.31.255.255"));
  EXPECT_FALSE(odd.contains("172.32.0.0"));
  EXPECT_FALSE(odd.contains("172.15.255.255"));
  auto narrow = net("192.168.1.64/27");
  EXPECT_TRUE(narrow.contains("192.168.1.95"));
  EXPECT_FALSE(narrow.contains("192.168.1.96"));
  EXPECT_FALSE(narrow.contains("192.168.1.63"));

  auto all = net("0.0.0.0/0");
  EXPECT_TRUE(all.contains("1.2.3.4"));
  EXPECT_TRUE(all.contains("255.255.255.255"));
  EXPECT_TRUE(all.contains("::ffff:1.2.3.4"));
  EXPECT_FALSE(all.contains("::1"));  // an IPv6 address is not in an IPv4 network
  EXPECT_FALSE(all.contains("2001:db8::1"));
}

TEST(NetworkContains, IPv6) {
  auto ula = net("fd00::/8");
  EXPECT_TRUE(ula.contains("fd12:3456::1"));
  EXPECT_TRUE(ula.contains("FD00::"));
  EXPECT_FALSE(ula.contains("fe80::1"));
  EXPECT_FALSE(ula.contains("10.0.0.1"));

  auto loopback = net("::1/128");
  EXPECT_TRUE(loopback.contains("::1"));
  EXPECT_TRUE(loopback.contains("0:0:0:0:0:0:0:1"));
  EXPECT_FALSE(loopback.contains("::2"));
  EXPECT_FALSE(loopback.contains("127.0.0.1"));

  auto link = net("fe80::/10");
  EXPECT_TRUE(link.contains("fe80::1%eth0"));  // the scope of a link-local address is ignored
  EXPECT_TRUE(link.contains("febf::1"));
  EXPECT_FALSE(link.contains("fec0::1"));

  auto all = net("::/0");
  EXPECT_TRUE(all.contains("2001:db8::1"));
  EXPECT_TRUE(all.contains("10.1.2.3"));  // as ::ffff:10.1.2.3, which "::/0" contains
}

TEST(NetworkContains, IPv4MappedAddressesCountAsIPv4) {
  auto ten = net("10.0.0.0/8");
  EXPECT_TRUE(ten.contains("::ffff:10.1.2.3"));
  EXPECT_TRUE(ten.contains("::FFFF:a01:203"));  // the same address in hex
  EXPECT_FALSE(ten.contains("::ffff:11.1.2.3"));
  EXPECT_FALSE(ten.contains("::10.1.2.3"));      // IPv4-compatible, not mapped
  EXPECT_FALSE(ten.contains("64:ff9b::a01:203"));  // NAT64, not mapped

  auto mapped = net("::ffff:10.0.0.0/104");  // stored as 10.0.0.0/8
  EXPECT_FALSE(mapped.v6);
  EXPECT_EQ(mapped.prefix, 8);
  EXPECT_TRUE(mapped.contains("10.9.9.9"));
  EXPECT_TRUE(mapped.contains("::ffff:10.9.9.9"));
  EXPECT_FALSE(mapped.contains("11.0.0.1"));

  auto every_v4 = net("::ffff:0.0.0.0/96");
  EXPECT_FALSE(every_v4.v6);
  EXPECT_EQ(every_v4.prefix, 0);
  EXPECT_TRUE(every_v4.contains("8.8.8.8"));
  EXPECT_FALSE(every_v4.contains("::1"));

  auto wide = net("::ffff:0:0/95");  // below /96 it stays an IPv6 network, and still contains mapped addresses
  EXPECT_TRUE(wide.v6);
  EXPECT_TRUE(wide.contains("1.2.3.4"));
  EXPECT_TRUE(wide.contains("::ffff:1.2.3.4"));
}

TEST(NetworkContains, RawBytesAndInvalidText) {
  auto ten = net("10.0.0.0/8");
  const unsigned char v4[4] = {10, 20, 30, 40};
  const unsigned char other[4] = {192, 168, 0, 1};
  const unsigned char mapped[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1};
  EXPECT_TRUE(ten.contains_bytes(false, v4));
  EXPECT_FALSE(ten.contains_bytes(false, other));
  EXPECT_TRUE(ten.contains_bytes(true, mapped));

  EXPECT_FALSE(ten.contains(""));
  EXPECT_FALSE(ten.contains("10.0.0"));
  EXPECT_FALSE(ten.contains("10.0.0.1 "));
  EXPECT_FALSE(ten.contains("localhost"));
  EXPECT_FALSE(ten.contains("10.0.0.0/8"));
  EXPECT_FALSE(Network{}.contains("garbage"));

  std::string why;
  EXPECT_FALSE(rjg::config::parse_network("10.0.0.0/33", &why));
  EXPECT_EQ(why, "prefix /33 is more than 32");
  EXPECT_FALSE(rjg::config::parse_network("10.0.0.0/-1"));
}

// A fuller, realistic configuration: shared pools, limits, a restricted network. It must always load.
TEST_F(ConfigTest, BundledLabExampleLoads) {
  auto config = rjg::config::load_file(RJG_CONFIG_DIR "/lab.toml");
  EXPECT_FALSE(config.gateway.allow_from.empty());
  EXPECT_GE(config.libraries.size(), 3u);
  ASSERT_NE(config.find_library("Calculator"), nullptr);
  bool any_shared = false;
  for (const auto& library : config.libraries) any_shared |= library.isolation == Isolation::shared;
  EXPECT_TRUE(any_shared);
}

TEST_F(ConfigTest, BundledExampleHasTheDefaultPoolSettings) {
  auto example = rjg::config::load_file(RJG_CONFIG_DIR "/example.toml");
  auto minimal = load(kMinimal);
  EXPECT_EQ(example.gateway.max_workers, minimal.gateway.max_workers);
  EXPECT_EQ(example.gateway.max_sessions, minimal.gateway.max_sessions);
  EXPECT_TRUE(example.gateway.allow_from.empty());
  for (const auto& library : example.libraries) {
    EXPECT_EQ(library.isolation, Isolation::session);
    EXPECT_EQ(library.pickle, PicklePolicy::data_only);
    EXPECT_EQ(library.queue_timeout, minimal.libraries[0].queue_timeout);
  }
}

// ---- The configuration reference ----

// doc/configuration.md holds the reference rendered from the key declarations: it must never drift from them.
TEST(ConfigReference, ReadmeIsUpToDate) {
  std::ifstream in(RJG_CONFIGURATION_DOC);
  ASSERT_TRUE(in) << "cannot read " << RJG_CONFIGURATION_DOC;
  std::stringstream text;
  text << in.rdbuf();
  const std::string readme = text.str();
  const std::string begin_marker = rjg::config::kReferenceBegin, end_marker = rjg::config::kReferenceEnd;
  auto begin = readme.find(begin_marker);
  auto end = readme.find(end_marker);
  ASSERT_NE(begin, std::string::npos) << "no line " << begin_marker << "in " << RJG_CONFIGURATION_DOC;
  ASSERT_NE(end, std::string::npos) << "no line " << end_marker << "in " << RJG_CONFIGURATION_DOC;
  ASSERT_LT(begin, end);
  begin += begin_marker.size();
  const std::string generated = rjg::config::reference_markdown();
  const std::string written = readme.substr(begin, end - begin);
  if (written == generated) return;
  std::istringstream a(written), b(generated);
  std::string line_written, line_generated;
  int line = 1;
  while (std::getline(a, line_written) && std::getline(b, line_generated) && line_written == line_generated) ++line;
  ADD_FAILURE() << "The configuration reference in " << RJG_CONFIGURATION_DOC << " is out of date (from line " << line
                << " after the begin marker on). Replace it, markers included, with this text (which "
                << "robot-jsonrpc-config-reference prints too):\n"
                << begin_marker << generated << end_marker;
}

// Every default the reference gives as a value is valid, and is the default: writing it changes nothing.
TEST_F(ConfigTest, EveryDefaultInTheReferenceIsTheDefault) {
  auto plain = load(kMinimal);
  auto without_line = [](rjg::config::Library library) {
    library.source_line = 0;
    return library;
  };
  std::istringstream reference(rjg::config::reference_markdown());
  std::string line, table;
  int checked = 0;
  while (std::getline(reference, line)) {
    if (line.starts_with("### ")) table = line;
    // | `key` | type | `default` (what it means) | range | what it does |
    if (!line.starts_with("| `")) continue;
    auto key = line.substr(3, line.find('`', 3) - 3);
    auto cell = line.substr(line.find(" | ", line.find(" | ") + 3) + 3);
    if (!cell.starts_with("`")) continue;  // "required", "not set"...
    auto value = cell.substr(1, cell.find('`', 1) - 1);
    SCOPED_TRACE(table + ": " + key + " = " + value);
    ++checked;
    if (table.starts_with("### `[gateway]`")) {
      EXPECT_EQ(load("[gateway]\n" + key + " = " + value + "\n" + kMinimal).gateway, plain.gateway);
    } else if (table.starts_with("### `[defaults]`")) {
      EXPECT_EQ(without_line(load("[defaults]\n" + key + " = " + value + "\n" + kMinimal).libraries.at(0)),
                without_line(plain.libraries[0]));
      EXPECT_EQ(load(kMinimal + key + " = " + value + "\n").libraries.at(0), plain.libraries[0]);
    } else if (table.starts_with("### `[[library]]`")) {
      EXPECT_EQ(load(kMinimal + key + " = " + value + "\n").libraries.at(0), plain.libraries[0]);
    } else if (table.starts_with("### `[admin]`")) {
      const auto admin = "[admin]\nlisten = [\"tcp://127.0.0.1:9271\"]\n" + std::string(kMinimal);
      EXPECT_EQ(load("[admin]\nlisten = [\"tcp://127.0.0.1:9271\"]\n" + key + " = " + value + "\n" + kMinimal).admin,
                load(admin).admin);
    } else if (table.starts_with("### `[classic]`")) {
      const std::string classic = "[classic]\nlisten = [\"tcp://127.0.0.1:8270\"]\n";
      EXPECT_EQ(load(classic + key + " = " + value + "\n" + kMinimal).classic, load(classic + kMinimal).classic);
    } else {
      ADD_FAILURE() << "a default in an unexpected table";
    }
  }
  EXPECT_GE(checked, 25);
}

TEST(ConfigReference, ListsEveryKeyWithItsRange) {
  const std::string reference = rjg::config::reference_markdown();
  for (std::string_view row : {
           "| `listen` | array of strings | `[\"tcp://127.0.0.1:8271\"]` |",
           "| `max_message_bytes` | integer | `67108864` | 1 to 1073741824 (1 GiB) |",
           "| `max_workers` | integer | `256` | at least 0 (0: no cap) |",
           "| `name` | string | required |",
           "| `keyword_timeout` | duration | `0` (none) | 0 (none) or at least 10ms |",
           "| `max_rss` | size | `0` (never) | 0 (never) or at least 1MiB |",
           "| `pickle` | string | `\"data-only\"` | `allow`, `data-only`, `deny` |",
           "| `address_space` | size | not set | at least 16MiB |",
       })
    EXPECT_NE(reference.find(row), std::string::npos) << row << " not in:\n" << reference;
}

struct SizeCase {
  const char* text;
  std::optional<std::uint64_t> expected;
};
void PrintTo(const SizeCase& c, std::ostream* os) { *os << '"' << c.text << '"'; }

class ParseSize : public ::testing::TestWithParam<SizeCase> {};

TEST_P(ParseSize, Table) {
  EXPECT_EQ(rjg::config::parse_size(GetParam().text), GetParam().expected) << "'" << GetParam().text << "'";
}

constexpr std::uint64_t KiB = 1024, MiB = KiB * 1024, GiB = MiB * 1024;

INSTANTIATE_TEST_SUITE_P(
    Cases, ParseSize,
    ::testing::Values(
        SizeCase{"512", 512}, SizeCase{"0", 0}, SizeCase{"4096", 4096}, SizeCase{"512B", 512},
        SizeCase{"64KiB", 64 * KiB}, SizeCase{"64K", 64 * KiB}, SizeCase{"64KB", 64 * KiB},
        SizeCase{"512MiB", 536870912}, SizeCase{"512M", 512 * MiB}, SizeCase{"512MB", 512 * MiB},
        SizeCase{"2GiB", 2 * GiB}, SizeCase{"2G", 2 * GiB}, SizeCase{"2GB", 2 * GiB}, SizeCase{"1TiB", 1024 * GiB},
        SizeCase{"0MiB", 0}, SizeCase{"007K", 7 * KiB},
        SizeCase{"18446744073709551615", 18446744073709551615ull},
        SizeCase{"17179869183G", 17179869183ull * GiB},  // the largest whole number of GiB
        SizeCase{"18446744073709551616", std::nullopt}, SizeCase{"17179869184G", std::nullopt},
        SizeCase{"99999999999G", std::nullopt}, SizeCase{"99999999999999999999999", std::nullopt},
        SizeCase{"-1", std::nullopt}, SizeCase{"+1", std::nullopt}, SizeCase{"1.5G", std::nullopt},
        SizeCase{"12XB", std::nullopt}, SizeCase{"", std::nullopt}, SizeCase{"K", std::nullopt},
        SizeCase{"MiB", std::nullopt}, SizeCase{"1 MiB", std::nullopt}, SizeCase{" 1", std::nullopt},
        SizeCase{"1 ", std::nullopt}, SizeCase{"1mib", std::nullopt}, SizeCase{"1kb", std::nullopt},
        SizeCase{"1Ki", std::nullopt}, SizeCase{"1e3", std::nullopt}, SizeCase{"0x10", std::nullopt},
        SizeCase{"1KiBB", std::nullopt}, SizeCase{"1P", std::nullopt}),
    [](const auto& info) {
      std::string name = std::to_string(info.index) + "_";
      for (char c : std::string_view(info.param.text)) name += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
      return name;
    });

struct DurationCase {
  const char* text;
  std::optional<Duration> expected;
};
void PrintTo(const DurationCase& c, std::ostream* os) { *os << '"' << c.text << '"'; }

class ParseDuration : public ::testing::TestWithParam<DurationCase> {};

TEST_P(ParseDuration, Table) {
  EXPECT_EQ(rjg::config::parse_duration(GetParam().text), GetParam().expected) << "'" << GetParam().text << "'";
}

INSTANTIATE_TEST_SUITE_P(
    Cases, ParseDuration,
    ::testing::Values(DurationCase{"500ms", 500ms}, DurationCase{"30s", 30s}, DurationCase{"5m", 5min},
                      DurationCase{"2h", 2h}, DurationCase{"1.5", 1500ms}, DurationCase{"1.5s", 1500ms},
                      DurationCase{"0", 0ms}, DurationCase{"0ms", 0ms}, DurationCase{"10", 10s},
                      DurationCase{"0.5m", 30s}, DurationCase{"0.001", 1ms}, DurationCase{"-1s", std::nullopt},
                      DurationCase{"1x", std::nullopt}, DurationCase{"5 minutes", std::nullopt},
                      DurationCase{"", std::nullopt}, DurationCase{"s", std::nullopt}, DurationCase{"ms", std::nullopt},
                      DurationCase{" 5s", std::nullopt}, DurationCase{"5s ", std::nullopt},
                      DurationCase{"5 s", std::nullopt}, DurationCase{"+5s", std::nullopt},
                      DurationCase{"1e3", std::nullopt}, DurationCase{"inf", std::nullopt},
                      DurationCase{"nan", std::nullopt}, DurationCase{"1.", std::nullopt},
                      DurationCase{".5", std::nullopt}, DurationCase{"5S", std::nullopt},
                      DurationCase{"1d", std::nullopt}, DurationCase{"99999999999999999999h", std::nullopt}),
    [](const auto& info) {
      std::string name = std::to_string(info.index) + "_";
      for (char c : std::string_view(info.param.text)) name += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
      return name;
    });

}  // namespace

// ---- Fronts and backs: unix: listeners, PROXY protocol, upstreams, glob routes ----

TEST_F(ConfigTest, UnixListenersAndTheirMode) {
  auto config = load(R"([gateway]
listen = ["unix:/run/rjg/gateway.sock", "tcp://127.0.0.1:8271"]
unix_mode = "0600"
unix_group = "0"
proxy_protocol_from = ["10.0.0.0/8"]
)" + std::string(kMinimal));
  ASSERT_EQ(config.gateway.listen.size(), 2u);
  EXPECT_EQ(config.gateway.listen[0].kind, rjg::config::ListenAddress::Kind::unix_socket);
  EXPECT_EQ(config.gateway.listen[0].path, "/run/rjg/gateway.sock");
  EXPECT_EQ(config.gateway.unix_mode, 0600u);
  EXPECT_EQ(config.gateway.unix_group, "0");
  ASSERT_EQ(config.gateway.proxy_protocol_from.size(), 1u);
  EXPECT_TRUE(config.gateway.proxy_protocol_from[0].contains("10.1.2.3"));
  EXPECT_EQ(load(kMinimal).gateway.unix_mode, 0660u);
}

TEST_F(ConfigTest, BadUnixListenersAndModesAreNamed) {
  expect_one_problem("[gateway]\nlisten = [\"unix:relative.sock\"]\n" + std::string(kMinimal), 2, {"absolute"});
  expect_one_problem("[gateway]\nlisten = [\"unix:/" + std::string(120, 'x') + "\"]\n" + std::string(kMinimal), 2,
                     {"107 bytes"});
  expect_one_problem("[gateway]\nlisten = [\"unix:/a.sock\", \"unix:/a.sock\"]\n" + std::string(kMinimal), 2,
                     {"listed twice"});
  expect_one_problem("[gateway]\nunix_mode = \"0460\"\n" + std::string(kMinimal), 2, {"unix_mode", "owner"});
  expect_one_problem("[gateway]\nunix_mode = \"rw\"\n" + std::string(kMinimal), 2, {"unix_mode", "octal"});
  expect_one_problem("[gateway]\nunix_group = \"no-such-group-rjg\"\n" + std::string(kMinimal), 2,
                     {"unix_group", "no group"});
  expect_one_problem("[admin]\nlisten = [\"unix:/a.sock\"]\n" + std::string(kMinimal), 2, {"admin", "TCP only"});
  expect_one_problem("[gateway]\nproxy_protocol_from = [\"10.0.0.0/33\"]\n" + std::string(kMinimal), 2,
                     {"proxy_protocol_from", "prefix"});
}

TEST_F(ConfigTest, UpstreamLibraries) {
  auto config = load(R"([defaults]
prewarm = 1
isolation = "shared"
[[library]]
name = "Bench"
upstream = "tcp://bench-pc-7:8270"
upstream_name = "InstrumentLibrary"
connect_timeout = "3s"
[[library]]
name = "Calculator"
command = ["robot-example-calculator"]
)");
  const auto& bench = config.libraries.at(0);
  EXPECT_TRUE(bench.is_upstream());
  EXPECT_TRUE(bench.command.empty());
  EXPECT_EQ(bench.connect_timeout, Duration(3000));
  // From [defaults], what an upstream has no use for is ignored.
  EXPECT_EQ(bench.prewarm, 0u);
  EXPECT_EQ(bench.isolation, rjg::config::Isolation::session);
  EXPECT_EQ(bench.import_name(), "InstrumentLibrary");
  EXPECT_EQ(config.libraries.at(1).prewarm, 1u);
  EXPECT_EQ(config.libraries.at(1).import_name(), "");
}

TEST_F(ConfigTest, ClassicUpstreamsRunTheBridgeWorker) {
  auto config = load(R"([[library]]
name = "Bench"
upstream = "http://bench-pc-7:8270/Instruments"
connect_timeout = "2.5s"
isolation = "shared"
max_answer_bytes = "32MiB"
[[library]]
name = "Lab*"
upstream = "http://lab:8270/{library}"
)");
  const auto& bench = config.libraries.at(0);
  // A process serves it: not an upstream of the protocol, and process settings apply.
  EXPECT_FALSE(bench.is_upstream());
  EXPECT_EQ(bench.isolation, rjg::config::Isolation::shared);
  EXPECT_EQ(bench.classic_upstream, "http://bench-pc-7:8270/Instruments");
  EXPECT_EQ(bench.command, (std::vector<std::string>{"robot-classic-bridge", "--url", "http://bench-pc-7:8270/Instruments",
                                                     "--name", "Bench", "--connect-timeout", "2.5", "--max-bytes",
                                                     "33554432"}));
  const auto lab = rjg::config::concrete(config.libraries.at(1), "Lab3");
  EXPECT_EQ(lab.command.at(2), "http://lab:8270/Lab3");
  EXPECT_EQ(lab.command.at(4), "Lab3");
  EXPECT_EQ(lab.command.back(), "16777216");  // max_answer_bytes' default: 16 MiB
}

TEST_F(ConfigTest, ClassicBodiesAndAnswersHaveLimitsOfTheirOwn) {
  auto config = load(R"([classic]
listen = ["tcp://127.0.0.1:8270"]
max_body_bytes = "1MiB"
[[library]]
name = "A"
command = ["robot-example-calculator"]
)");
  EXPECT_EQ(config.classic.max_body_bytes, 1024u * 1024);
  EXPECT_EQ(rjg::config::Classic{}.max_body_bytes, 8u * 1024 * 1024);
  expect_one_problem("[classic]\nlisten = [\"tcp://127.0.0.1:8270\"]\nmax_body_bytes = 8000\n[[library]]\nname = \"A\"\n"
                     "command = [\"x\"]\n",
                     3, {"max_body_bytes", "less than 64KiB"});
  expect_one_problem("[[library]]\nname = \"A\"\nupstream = \"http://h:1\"\nmax_answer_bytes = 0\n", 4,
                     {"max_answer_bytes", "at least 64KiB"});
}

TEST_F(ConfigTest, UpstreamMistakesAreNamed) {
  expect_one_problem("[[library]]\nname = \"A\"\ncommand = [\"x\"]\nupstream = \"tcp://h:1\"\n", 4,
                     {"upstream", "command", "exactly one"});
  expect_one_problem("[[library]]\nname = \"A\"\n", 1, {"no 'command'", "upstream"});
  expect_one_problem("[[library]]\nname = \"A\"\nupstream = \"ftp://h:1\"\n", 3, {"upstream", "tcp://", "http://"});
  expect_one_problem("[[library]]\nname = \"A\"\nupstream = \"http://h\"\n", 3, {"upstream", "port"});
  expect_one_problem("[[library]]\nname = \"A\"\nupstream = \"http://h:1/a b\"\n", 3, {"upstream", "path"});
  expect_one_problem("[[library]]\nname = \"A\"\nupstream = \"http://h:1\"\nupstream_name = \"B\"\n", 4,
                     {"upstream_name", "classic remote server"});
  expect_one_problem("[[library]]\nname = \"A\"\nupstream = \"tcp://h:0\"\n", 3, {"port"});
  expect_one_problem("[[library]]\nname = \"A\"\nupstream = \"tcp://h:1\"\nisolation = \"shared\"\n", 4,
                     {"isolation", "does not apply to an upstream"});
  expect_one_problem("[[library]]\nname = \"A\"\nupstream = \"tcp://h:1\"\nrlimits = { open_files = 64 }\n", 4,
                     {"rlimits", "does not apply"});
  expect_one_problem("[[library]]\nname = \"A\"\nupstream = \"tcp://h:1\"\ncpu_affinity = \"one\"\n", 4,
                     {"cpu_affinity", "does not apply to an upstream"});
  expect_one_problem("[[library]]\nname = \"A\"\ncommand = [\"x\"]\nupstream_name = \"B\"\n", 4,
                     {"upstream_name", "without 'upstream'"});
}

TEST_F(ConfigTest, GlobRoutes) {
  auto config = load(R"([[library]]
name = "Lab*"
command = ["/opt/venvs/{library}/bin/python", "-m", "server", "{library}"]
env = { LIB = "{library}" }
deny = ["LabSecret"]
[[library]]
name = "Exact"
command = ["worker", "--name", "{library}"]
)");
  const auto& glob = config.libraries.at(0);
  EXPECT_TRUE(glob.is_glob());
  // An exact entry's {library} is its name from the start.
  EXPECT_EQ(config.libraries.at(1).command.at(2), "Exact");
  auto served = rjg::config::concrete(glob, "LabPower");
  EXPECT_EQ(served.name, "Lab*");  // its pool and metrics
  EXPECT_EQ(served.label(), "LabPower");
  EXPECT_EQ(served.command.at(0), "/opt/venvs/LabPower/bin/python");
  EXPECT_EQ(served.command.at(3), "LabPower");
  EXPECT_EQ(served.env.at("LIB"), "LabPower");
  EXPECT_EQ(served.import_name(), "");  // the command names it
  EXPECT_TRUE(rjg::config::denied(glob, "LabSecret"));
  EXPECT_TRUE(rjg::config::denied(glob, "LabSecret.sub"));
  EXPECT_FALSE(rjg::config::denied(glob, "LabPower"));
  rjg::config::Library any;
  any.name = "Pro*";
  EXPECT_TRUE(rjg::config::denied(any, "Process"));
  EXPECT_TRUE(rjg::config::denied(any, "os.path"));
  EXPECT_FALSE(rjg::config::denied(any, "ProductLibrary"));
  // Every dotted part and prefix meets the list: "Pro.os" is the module os that the library Pro imports.
  EXPECT_TRUE(rjg::config::denied(any, "ProTool.os"));
  EXPECT_TRUE(rjg::config::denied(any, "ProTool.Helpers.subprocess"));
  EXPECT_FALSE(rjg::config::denied(any, "ProTool.Helpers"));
  any.deny = std::vector<std::string>{"ProTool.Secret"};
  EXPECT_TRUE(rjg::config::denied(any, "ProTool.Secret.Key"));
  EXPECT_FALSE(rjg::config::denied(any, "ProTool.Public"));

  using rjg::config::GlobRefusal;
  using rjg::config::glob_refusal;
  rjg::config::Library lab;
  lab.name = "Lab*";
  EXPECT_EQ(glob_refusal(lab, "LabPower"), GlobRefusal::none);
  EXPECT_EQ(glob_refusal(lab, "LabPower.os"), GlobRefusal::denied);  // the deny list speaks first
  EXPECT_EQ(glob_refusal(lab, "LabPower.Tools"), GlobRefusal::dotted);
  EXPECT_EQ(glob_refusal(lab, "Lab-c"), GlobRefusal::not_a_name);
  lab.dotted = true;
  EXPECT_EQ(glob_refusal(lab, "LabPower.Tools"), GlobRefusal::none);
  EXPECT_EQ(glob_refusal(lab, "LabPower.Tools.shutil"), GlobRefusal::denied);
  lab.upstream = "tcp://{library}.lab:8270";
  EXPECT_EQ(glob_refusal(lab, "LabPower.Tools"), GlobRefusal::chooses_host);
  // A classic upstream's host too; its path may hold the name.
  lab.upstream.clear();
  lab.classic_upstream = "http://{library}:8270/RPC2";
  EXPECT_EQ(glob_refusal(lab, "evil.example.com"), GlobRefusal::chooses_host);
  lab.classic_upstream = "http://lab:8270/{library}";
  EXPECT_EQ(glob_refusal(lab, "LabPower.Tools"), GlobRefusal::none);
  lab.classic_upstream.clear();
  // Dots the pattern holds are the operator's.
  rjg::config::Library org;
  org.name = "Org.Lab*";
  EXPECT_EQ(glob_refusal(org, "Org.LabPower"), GlobRefusal::none);
  EXPECT_EQ(glob_refusal(org, "Org.LabPower.x"), GlobRefusal::dotted);
}

TEST_F(ConfigTest, GlobMistakesAreNamed) {
  expect_one_problem("[[library]]\nname = \"*\"\ncommand = [\"x\"]\n", 2, {"catch-all", "prefix"});
  expect_one_problem("[[library]]\nname = \"L*\"\ncommand = [\"x\"]\n", 2, {"two"});
  expect_one_problem("[[library]]\nname = \"a/*\"\ncommand = [\"x\"]\n", 2, {"prefix 'a/'"});
  expect_one_problem("[[library]]\nname = \"Lab*\"\ncommand = [\"x\", \"{library}\"]\nprewarm = 1\n", 4,
                     {"prewarm", "{library}"});
  expect_one_problem("[[library]]\nname = \"Lab*\"\ncommand = [\"x\", \"{library}\"]\nisolation = \"shared\"\n", 4,
                     {"shared", "{library}"});
  expect_one_problem("[[library]]\nname = \"Lab\"\ncommand = [\"x\"]\ndeny = [\"a\"]\n", 4, {"deny", "glob"});
  expect_one_problem("[[library]]\nname = \"Lab*\"\ncommand = [\"x\"]\ndeny = [\"../x\"]\n", 4, {"not a library name"});
  expect_one_problem("[[library]]\nname = \"Lab*\"\ncommand = [\"x\"]\nprewarm = 1\nprewarm_import = true\n", 5,
                     {"prewarm_import", "not known ahead"});
  expect_one_problem("[[library]]\nname = \"Lab*\"\ncommand = [\"{library}\"]\n", 3, {"which program"});
  expect_one_problem("[[library]]\nname = \"Lab*\"\ncommand = [\"x\"]\nenv = { N = \"{library}\" }\nprewarm = 1\n", 5,
                     {"prewarm", "command or env"});
  // From [defaults], what a name-dependent glob entry cannot use is ignored.
  auto config = load("[defaults]\nprewarm = 1\nisolation = \"shared\"\n[[library]]\nname = \"Lab*\"\n"
                     "command = [\"x\", \"{library}\"]\n");
  EXPECT_EQ(config.libraries.at(0).prewarm, 0u);
  EXPECT_EQ(config.libraries.at(0).isolation, rjg::config::Isolation::session);
}

TEST(GlobNames, MatchAndValidity) {
  using rjg::config::glob_match;
  using rjg::config::valid_import_name;
  EXPECT_TRUE(glob_match("Lab*", "LabPower"));
  EXPECT_FALSE(glob_match("Lab*", "Lab"));  // '*' is at least one character
  EXPECT_TRUE(glob_match("Lab?x*", "Lab1xY"));
  EXPECT_FALSE(glob_match("Lab*", "lab1"));
  EXPECT_TRUE(glob_match("Se*Lib*", "SeleniumLibrary"));
  EXPECT_FALSE(glob_match(std::string(40, '*') + "b", std::string(5000, 'a')));  // no blow-up
  for (std::string_view good : {"LabPower", "Lab_2", "Selenium.Library", "a.b_c"}) EXPECT_TRUE(valid_import_name(good)) << good;
  for (std::string_view bad : {"", "-c", "../x", "a/b", "a..b", ".a", "a.", "1abc", "a b", "a;b", "Lab\n", "_io", "X.__main__"})
    EXPECT_FALSE(valid_import_name(bad)) << bad;
  EXPECT_TRUE(valid_import_name(std::string(rjg::config::kMaxImportName, 'a')));
  EXPECT_FALSE(valid_import_name(std::string(rjg::config::kMaxImportName + 1, 'a')));
}

namespace rjg::config {
namespace {

TEST(ReferenceServerCommandTest, AcceptsTheServersStdioFormWithInterpreterOptions) {
  auto plain = reference_server_command({"python3", "-m", "robot_jsonrpcremote_server", "--stdio", "Lib"});
  ASSERT_TRUE(plain);
  EXPECT_EQ(plain->interpreter, (std::vector<std::string>{"python3"}));
  EXPECT_EQ(plain->server_args, (std::vector<std::string>{"--stdio", "Lib"}));
  auto options = reference_server_command(
      {"/venv/bin/python", "-X", "dev", "-u", "-W", "error", "-m", "robot_jsonrpcremote_server", "Lib", "--stdio"});
  ASSERT_TRUE(options);
  EXPECT_EQ(options->interpreter, (std::vector<std::string>{"/venv/bin/python", "-X", "dev", "-u", "-W", "error"}));
  EXPECT_EQ(options->server_args, (std::vector<std::string>{"Lib", "--stdio"}));
  // Not that form: another module, no --stdio (a TCP server), a script, -c, a dangling -X.
  for (const std::vector<std::string>& command :
       {std::vector<std::string>{"python3", "-m", "other_server", "--stdio"},
        {"python3", "-m", "robot_jsonrpcremote_server", "--tcp", "127.0.0.1:1"},
        {"python3", "server.py", "-m", "robot_jsonrpcremote_server", "--stdio"},
        {"python3", "-c", "import x", "-m", "robot_jsonrpcremote_server", "--stdio"},
        {"python3", "-X"},
        {"python3", "-m"},
        {"robot-test-worker", "--stdio"}})
    EXPECT_FALSE(reference_server_command(command)) << ::testing::PrintToString(command);
}

}  // namespace
}  // namespace rjg::config

TEST_F(ConfigTest, ForkServerNeedsTheReferenceServerOnStdio) {
  auto config = load(R"([[library]]
name = "Browser"
command = ["/venv/bin/python", "-m", "robot_jsonrpcremote_server", "--stdio", "SeleniumLibrary"]
fork_server = true
preload = ["selenium.webdriver", "SeleniumLibrary.keywords"]
[[library]]
name = "Plain"
command = ["python3", "-m", "robot_jsonrpcremote_server", "--stdio", "Plain"]
)");
  ASSERT_EQ(config.libraries.size(), 2u);
  EXPECT_TRUE(config.libraries[0].fork_server);
  EXPECT_EQ(config.libraries[0].preload, (std::vector<std::string>{"selenium.webdriver", "SeleniumLibrary.keywords"}));
  EXPECT_FALSE(config.libraries[1].fork_server);
  EXPECT_TRUE(config.libraries[1].preload.empty());

  expect_one_problem("[[library]]\nname = \"A\"\ncommand = [\"robot-test-worker\", \"--stdio\"]\nfork_server = true\n", 4,
                     {"'library[0].fork_server' = true needs a library served by the reference Python server",
                      "not [\"robot-test-worker\", \"--stdio\"]", "fork_server = false"});
  expect_one_problem("[[library]]\nname = \"A\"\ncommand = [\"python3\", \"-m\", \"robot_jsonrpcremote_server\", "
                     "\"--tcp\", \"127.0.0.1:1\"]\nfork_server = true\n",
                     4, {"needs a library served by the reference Python server", "\"--stdio\""});
  expect_one_problem("[[library]]\nname = \"A\"\nupstream = \"tcp://h:1\"\nfork_server = true\n", 4,
                     {"fork_server", "does not apply to an upstream"});
  expect_one_problem("[[library]]\nname = \"A\"\nupstream = \"http://h:1/\"\nfork_server = true\n", 4,
                     {"fork_server", "does not apply to a classic remote server"});
  expect_one_problem("[[library]]\nname = \"Lab*\"\ncommand = [\"python3\", \"-m\", \"robot_jsonrpcremote_server\", "
                     "\"--stdio\", \"{library}\"]\nfork_server = true\n",
                     4, {"on glob entry \"Lab*\"", "not known ahead of time"});
  expect_one_problem("[[library]]\nname = \"A\"\ncommand = [\"python3\", \"-m\", \"robot_jsonrpcremote_server\", "
                     "\"--stdio\", \"A\"]\npreload = [\"x\"]\n",
                     4, {"'library[0].preload' applies only with fork_server = true"});
  expect_one_problem("[[library]]\nname = \"A\"\ncommand = [\"python3\", \"-m\", \"robot_jsonrpcremote_server\", "
                     "\"--stdio\", \"A\"]\nfork_server = true\npreload = [\"os; rm\"]\n",
                     5, {"'library[0].preload[0]' = \"os; rm\" is not a module name"});
  expect_one_problem("[defaults]\nfork_server = true\n[[library]]\nname = \"A\"\ncommand = [\"a\"]\n", 2,
                     {"unknown key 'fork_server' in [defaults]"});
}
