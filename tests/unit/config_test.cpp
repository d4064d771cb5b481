// Configuration loading: a valid file gives the model, and every mistake is reported with its
// line, the key it is about, and what was expected, all of them in one run.
#include "config/config.hpp"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cctype>
#include <filesystem>
#include <fstream>
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
command = ["../shared/bin/worker"]
[[library]]
name = "Plain"
command = ["robot-example-strings"]
[[library]]
name = "Abs"
command = ["/opt/venvs/web/bin/python"]
)");
  EXPECT_EQ(config.libraries[0].command[0], (dir_ / "workers/calc").string());
  EXPECT_EQ(config.libraries[0].command[1], "./not-resolved-argument");  // only the program is resolved
  EXPECT_EQ(config.libraries[1].command[0], (dir_.parent_path() / "shared/bin/worker").string());
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
  expect_problem(found[0], 1, {"gatway", "did you mean 'gateway'", "gateway, defaults, library"});
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
