// The gateway process: graceful stop, worker environment, worker stderr relay, --check-config.
#include "tests/integration/gateway_test.hpp"

#include <fmt/format.h>
#include <sys/wait.h>

#include <regex>

namespace rjg::test {
namespace {

bool contains(std::string_view haystack, std::string_view needle) {
  return haystack.find(needle) != std::string_view::npos;
}

using LifecycleTest = GatewayTest;

TEST_F(LifecycleTest, SigtermDrainsTheKeywordInFlightAndExitsCleanly) {
  start();
  auto [c, token] = session();
  pid_t pid = remember_pid(worker_pid(c, token));
  json::value id = c.send_request(
      protocol::kRunKeyword,
      json::object{{"library_token", token}, {"name", "Sleep"}, {"args", json::array{2}}, {"kwargs", json::object{}}});
  std::this_thread::sleep_for(100ms);  // let the call reach the worker; nothing depends on it
  gateway().signal(SIGTERM);

  // New connections are refused once the gateway is stopping (bounded poll).
  bool refused = eventually([&] { return !can_connect(gateway().port()); }, 20s, 20ms);
  EXPECT_TRUE(refused) << "the gateway still accepts connections after SIGTERM";

  // The keyword in flight still gets its answer.
  auto reply = c.wait_reply(id, {}, 30s);
  RJG_EXPECT_OK(reply);
  EXPECT_EQ(reply.keyword_error(), nullptr) << describe(reply);

  auto status = gateway().wait(30s);
  ASSERT_TRUE(status.has_value()) << "the gateway did not exit after SIGTERM";
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0)
      << "the gateway ended with " << describe_status(*status);
  EXPECT_TRUE(wait_pid_gone(pid, 20s)) << "worker pid " << pid << " outlived the gateway";
}

TEST_F(LifecycleTest, SigtermWithIdleSessionsStopsEveryWorker) {
  GatewayOptions options;
  options.drain_timeout = "2s";
  start(default_libraries(), options);
  auto [a, ta] = session();
  auto [b, tb] = session("SecondLibrary");
  pid_t pa = remember_pid(worker_pid(a, ta));
  pid_t pb = remember_pid(worker_pid(b, tb));
  auto status = gateway().stop(30s);
  ASSERT_TRUE(status.has_value()) << "the gateway did not exit within 30 s of SIGTERM";
  EXPECT_TRUE(WIFEXITED(*status)) << "the gateway ended with " << describe_status(*status);
  EXPECT_TRUE(wait_pid_gone(pa, 20s)) << "worker pid " << pa << " outlived the gateway";
  EXPECT_TRUE(wait_pid_gone(pb, 20s)) << "worker pid " << pb << " outlived the gateway";
  // The sessions see their connections end.
  EXPECT_TRUE(a.wait_closed(20s));
  EXPECT_TRUE(b.wait_closed(20s));
}

TEST_F(LifecycleTest, EnvAndCwdReachTheWorker) {
  TempDir cwd_dir("rjg-cwd");
  auto lib = test_library("TestLibrary");
  lib.env["FOO"] = "bar";
  lib.env["WITH_SPACES"] = "a b \"c\"";
  lib.cwd = cwd_dir.path().string();
  start({lib});
  auto [c, token] = session();
  auto foo = c.run_keyword(token, "Get Env", json::array{"FOO"});
  RJG_ASSERT_KEYWORD_OK(foo);
  EXPECT_EQ(keyword_value(foo), json::value("bar")) << describe(foo);
  auto spaces = c.run_keyword(token, "Get Env", json::array{"WITH_SPACES"});
  RJG_ASSERT_KEYWORD_OK(spaces);
  EXPECT_EQ(keyword_value(spaces), json::value("a b \"c\"")) << describe(spaces);
  auto cwd = c.run_keyword(token, "Get Cwd");
  RJG_ASSERT_KEYWORD_OK(cwd);
  ASSERT_TRUE(keyword_value(cwd).is_string()) << describe(cwd);
  EXPECT_EQ(fs::canonical(std::string(keyword_value(cwd).get_string())), fs::canonical(cwd_dir.path()))
      << describe(cwd);
}

TEST_F(LifecycleTest, WorkerStderrIsLoggedWithLibraryAndPid) {
  start();
  auto [c, token] = session();
  pid_t pid = remember_pid(worker_pid(c, token));
  auto printed = c.run_keyword(token, "Print Stderr", json::array{"marker-123"});
  RJG_ASSERT_KEYWORD_OK(printed);
  const std::string pid_text = std::to_string(pid);
  auto has_line = [&] {
    std::string log = gateway().log();
    std::size_t pos = 0;
    while ((pos = log.find("marker-123", pos)) != std::string::npos) {
      auto begin = log.rfind('\n', pos);
      begin = begin == std::string::npos ? 0 : begin + 1;
      auto end = log.find('\n', pos);
      std::string line = log.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
      if (contains(line, "TestLibrary") && contains(line, pid_text)) return true;
      pos += 1;
    }
    return false;
  };
  EXPECT_TRUE(eventually(has_line, 10s))
      << "no gateway log line with 'TestLibrary', pid " << pid << " and 'marker-123'";
}

// ------------------------------------------------------------------------------------------------
// --check-config

class CheckConfigTest : public ::testing::Test {
 protected:
  ProcessResult check(const fs::path& file) {
    return run_process({gateway_binary(), "--check-config", file.string()}, dir_.path(), 30s);
  }
  TempDir dir_{"rjg-check"};
};

TEST_F(CheckConfigTest, GoodFileExitsZero) {
  auto file = dir_.path() / "good.toml";
  write_file(file, make_config(free_port(), {test_library("TestLibrary"), test_library("SecondLibrary")}, {}));
  auto r = check(file);
  EXPECT_TRUE(r.exited_with(0)) << r.describe();
}

TEST_F(CheckConfigTest, SyntaxErrorNamesFileAndLine) {
  auto file = dir_.path() / "broken-syntax.toml";
  write_file(file,
             "[gateway]\n"
             "listen = [\"tcp://127.0.0.1:8271\"]\n"
             "log_level = \"debug\"\n"
             "drain_timeout = \"10s\n"  // line 4: unterminated string
             "[[library]]\n"
             "name = \"TestLibrary\"\n"
             "command = [\"/bin/true\"]\n");
  auto r = check(file);
  EXPECT_TRUE(r.exited_with(1)) << r.describe();
  std::string out = r.out + r.err;
  EXPECT_TRUE(contains(out, file.string()) || contains(out, "broken-syntax.toml")) << r.describe();
  EXPECT_TRUE(std::regex_search(out, std::regex(R"((:4\b|line 4\b))"))) << "line 4 not named:\n" << r.describe();
}

TEST_F(CheckConfigTest, InvalidContentNamesTheFile) {
  auto file = dir_.path() / "broken-content.toml";
  write_file(file,
             "[gateway]\n"
             "listen = [\"tcp://127.0.0.1:8271\"]\n"
             "\n"
             "[[library]]\n"
             "name = \"NoCommand\"\n");
  auto r = check(file);
  EXPECT_TRUE(r.exited_with(1)) << r.describe();
  std::string out = r.out + r.err;
  EXPECT_TRUE(contains(out, "broken-content.toml")) << r.describe();
}

TEST_F(CheckConfigTest, GatewayRefusesToStartWithABrokenFile) {
  auto file = dir_.path() / "refused.toml";
  write_file(file, "[gateway\nlisten = 3\n");
  auto r = run_process({gateway_binary(), "--config", file.string()}, dir_.path(), 30s);
  EXPECT_FALSE(r.timed_out) << "the gateway started with a broken configuration";
  EXPECT_FALSE(r.exited_with(0)) << r.describe();
  EXPECT_TRUE(contains(r.out + r.err, "refused.toml")) << r.describe();
}

}  // namespace
}  // namespace rjg::test
