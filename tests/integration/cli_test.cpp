// robot-jsonrpc-cli end to end against the real gateway.
#include "tests/integration/gateway_test.hpp"

#include "common/pickle/pickle_value.hpp"

namespace rjg::test {
namespace {

class CliTest : public GatewayTest {
 protected:
  ProcessResult cli(std::vector<std::string> args) {
    std::vector<std::string> argv{cli_binary(), "--server", gateway().uri(), "--timeout", "30"};
    for (auto& a : args) argv.push_back(std::move(a));
    return run_process(argv, gateway().dir(), 60s);
  }
};

TEST_F(CliTest, Libraries) {
  start();
  auto r = cli({"libraries"});
  ASSERT_TRUE(r.exited_with(0)) << r.describe();
  EXPECT_TRUE(contains(r.out, "robot-jsonrpc-gateway")) << r.describe();
  auto first = r.out.find("TestLibrary");
  auto second = r.out.find("SecondLibrary");
  ASSERT_NE(first, std::string::npos) << r.describe();
  ASSERT_NE(second, std::string::npos) << r.describe();
  EXPECT_LT(first, second) << "libraries not in configuration order:\n" << r.describe();
}

TEST_F(CliTest, RunEchoPrintsTheResultAsJson) {
  start();
  auto r = cli({"run", "TestLibrary", "Echo", "\"hi\""});
  ASSERT_TRUE(r.exited_with(0)) << r.describe();
  EXPECT_EQ(r.out, "\"hi\"\n") << r.describe();

  // Not valid JSON: taken as a plain string.
  r = cli({"run", "TestLibrary", "Echo", "hello"});
  ASSERT_TRUE(r.exited_with(0)) << r.describe();
  EXPECT_EQ(r.out, "\"hello\"\n") << r.describe();

  r = cli({"run", "TestLibrary", "Echo", R"({"a":[1,2,null]})"});
  ASSERT_TRUE(r.exited_with(0)) << r.describe();
  EXPECT_EQ(json::parse(r.out), json::parse(R"({"a":[1,2,null]})")) << r.describe();

  r = cli({"run", "TestLibrary", "Echo", "--kw", "value=42"});
  ASSERT_TRUE(r.exited_with(0)) << r.describe();
  EXPECT_EQ(r.out, "42\n") << r.describe();
}

// Python's value dialect: a pickled result is printed decoded, as JSON when it has a JSON form, else as
// Python's repr(); a nested argument goes pickled (as the stock client sends it) and comes back the same.
TEST_F(CliTest, PickledResultsArePrintedDecoded) {
  start();
  // The keywords take a JSON text: given as a JSON string, or the CLI would send the value itself.
  auto r = cli({"run", "TestLibrary", "Return Json In Dialect", json::serialize(json::string(R"({"rows": [[1, 2], ["a"]]})"))});
  ASSERT_TRUE(r.exited_with(0)) << r.describe();
  EXPECT_EQ(r.out, "{\"rows\":[[1,2],[\"a\"]]}\n") << r.describe();

  const std::string bytes = json::serialize(
      json::object{{"__pickled__", pickle::encode_pickle_hex(pickle::PyValue(pickle::PyBytes{std::string("\x00\xff", 2)}))}});
  r = cli({"run", "TestLibrary", "Return Json", json::serialize(json::string(bytes))});
  ASSERT_TRUE(r.exited_with(0)) << r.describe();
  EXPECT_EQ(r.out, "b'\\x00\\xff'\n") << r.describe();

  r = cli({"run", "TestLibrary", "Echo", "[[1, 2], {\"k\": [3]}]"});
  ASSERT_TRUE(r.exited_with(0)) << r.describe();
  EXPECT_EQ(json::parse(r.out), json::parse(R"([[1, 2], {"k": [3]}])")) << r.describe();
}

TEST_F(CliTest, RunPrintsLogsToStderr) {
  start();
  auto r = cli({"run", "TestLibrary", "Log Messages", "3", "--kw", "size=4", "--kw", "level=\"WARN\""});
  ASSERT_TRUE(r.exited_with(0)) << r.describe();
  EXPECT_TRUE(contains(r.err, "[WARN] 0:")) << r.describe();
  EXPECT_TRUE(contains(r.err, "[WARN] 2:")) << r.describe();
  EXPECT_LT(r.err.find("[WARN] 0:"), r.err.find("[WARN] 2:")) << r.describe();
}

TEST_F(CliTest, ImportArgumentsAreSent) {
  start();
  auto r = cli({"run", "TestLibrary", "Get Import Args", "--import-arg", "1", "--import-arg", "two", "--import-kwarg",
                "k=[true]"});
  ASSERT_TRUE(r.exited_with(0)) << r.describe();
  EXPECT_EQ(json::parse(r.out), json::parse(R"({"args":[1,"two"],"kw_args":{"k":[true]}})")) << r.describe();
}

TEST_F(CliTest, FailingKeywordExitsOne) {
  start();
  auto r = cli({"run", "TestLibrary", "Fail", "boom happened", "--kw", "type=\"ValueError\"", "--kw",
                "traceback=\"the traceback\""});
  EXPECT_TRUE(r.exited_with(1)) << r.describe();
  EXPECT_TRUE(contains(r.err, "boom happened")) << r.describe();
  EXPECT_TRUE(contains(r.err, "ValueError")) << r.describe();
  EXPECT_TRUE(contains(r.err, "the traceback")) << r.describe();
}

TEST_F(CliTest, KeywordsListsSignatures) {
  start();
  auto r = cli({"keywords", "TestLibrary"});
  ASSERT_TRUE(r.exited_with(0)) << r.describe();
  EXPECT_TRUE(contains(r.out, "Echo(value")) << r.describe();
  EXPECT_TRUE(contains(r.out, "Log Messages(count")) << r.describe();
}

TEST_F(CliTest, ServerErrorsExitThree) {
  start();
  auto r = cli({"run", "NoSuchLib", "Echo", "1"});
  EXPECT_TRUE(r.exited_with(3)) << r.describe();
  EXPECT_TRUE(contains(r.err, "NoSuchLib")) << r.describe();
  EXPECT_TRUE(contains(r.err, "-32010")) << r.describe();
}

// A failure the gateway decides for one keyword call (here its worker died) is that keyword's failure, as
// the gateway answers it: exit code 1, with the gateway's message and the type that names what happened.
TEST_F(CliTest, AKeywordWhoseWorkerDiesExitsOne) {
  start();
  auto r = cli({"run", "TestLibrary", "Crash", "exit"});
  EXPECT_TRUE(r.exited_with(1)) << r.describe();
  EXPECT_TRUE(contains(r.err, "keyword 'Crash' failed")) << r.describe();
  EXPECT_TRUE(contains(r.err, "TestLibrary")) << r.describe();
  EXPECT_TRUE(contains(r.err, "type: WorkerFailed")) << r.describe();
  EXPECT_FALSE(contains(r.err, "JSON-RPC error")) << r.describe();
}

TEST_F(CliTest, TimeoutOnAHangingKeywordExitsThree) {
  start();
  std::vector<std::string> argv{cli_binary(), "--server", gateway().uri(), "--timeout", "1", "run", "TestLibrary", "Hang"};
  auto r = run_process(argv, gateway().dir(), 60s);
  EXPECT_TRUE(r.exited_with(3)) << r.describe();
  EXPECT_TRUE(contains(r.err, "no answer")) << r.describe();
}

TEST(CliStandaloneTest, UsageAndConnectionErrors) {
  TempDir dir("rjg-cli");
  auto r = run_process({cli_binary()}, dir.path(), 30s);
  EXPECT_TRUE(r.exited_with(2)) << r.describe();
  r = run_process({cli_binary(), "frobnicate"}, dir.path(), 30s);
  EXPECT_TRUE(r.exited_with(2)) << r.describe();
  r = run_process({cli_binary(), "run", "OnlyLib"}, dir.path(), 30s);
  EXPECT_TRUE(r.exited_with(2)) << r.describe();
  r = run_process({cli_binary(), "--help"}, dir.path(), 30s);
  EXPECT_TRUE(r.exited_with(0)) << r.describe();
  EXPECT_TRUE(contains(r.out, "Usage")) << r.describe();
  // Nothing listens on a port that was free a moment ago.
  r = run_process({cli_binary(), "--server", "tcp://127.0.0.1:" + std::to_string(free_port()), "libraries"},
                  dir.path(), 30s);
  EXPECT_TRUE(r.exited_with(3)) << r.describe();
  EXPECT_TRUE(contains(r.err, "cannot connect")) << r.describe();
}

}  // namespace
}  // namespace rjg::test
