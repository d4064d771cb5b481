// MCP servers behind the gateway (robot-mcp-worker), end to end: the real gateway starts the worker,
// which starts Node's MCP reference server (@modelcontextprotocol/server-everything, found through
// RJG_MCP_SERVER or BUILD/npm, where deploy/test.sh installs it), and a JSON-RPC client imports it and
// runs its tools: definitions from tools/list, values, conversions, failures, progress and log
// notifications, the generic keywords, pickled arguments, a server killed under a keyword, servers that
// cannot start, and no server process left behind. A small MCP server in Python (written by the test)
// covers what the reference server cannot be asked for: paged tool lists, requests of the server to the
// client, tools taking lists and dictionaries. Nothing is timed: every wait is a bound.
#include "tests/integration/gateway_test.hpp"
#include "tests/integration/python_dialect.hpp"

#include "common/pickle/pickle_value.hpp"

#include <fmt/format.h>

#include <csignal>
#include <cstdlib>
#include <thread>

namespace rjg::test {
namespace {

std::string mcp_server_path() {
  if (const char* env = std::getenv("RJG_MCP_SERVER"); env && *env) return env;
  return RJG_MCP_SERVER_DEFAULT;
}

// An MCP server on the stdio transport in a page of Python: tools/list in two pages; "inspect" returns
// the arguments it got as structuredContent (or, given data={"cut": true}, a text with a lone surrogate); "ask" sends the client a ping and a sampling request and
// returns their answers; "exit" ends the process without answering.
constexpr std::string_view kFakeServer = R"PY(
import json, sys
def send(m):
    sys.stdout.write(json.dumps(m) + "\n"); sys.stdout.flush()
def read():
    line = sys.stdin.readline()
    if not line: sys.exit(0)
    return json.loads(line)
inspect = {"name": "inspect", "description": "Returns its arguments.", "inputSchema": {"type": "object",
    "properties": {"data": {"type": "object"}, "items": {"type": "array"}, "n": {"type": ["integer", "null"]}},
    "required": ["data"]}}
ask = {"name": "ask", "inputSchema": {"type": "object", "properties": {}}}
leave = {"name": "exit", "inputSchema": {"type": "object", "properties": {}}}
print("fake MCP server up", file=sys.stderr, flush=True)
while True:
    m = read()
    method, id = m.get("method"), m.get("id")
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": id, "result": {"protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
              "serverInfo": {"name": "fake", "version": "9"}}})
    elif method == "tools/list":
        page = [inspect] if "cursor" not in m.get("params", {}) else [ask, leave]
        result = {"tools": page}
        if len(page) == 1: result["nextCursor"] = "page2"
        send({"jsonrpc": "2.0", "id": id, "result": result})
    elif method == "tools/call" and m["params"]["name"] == "inspect" and m["params"]["arguments"]["data"].get("cut"):
        # A text cut inside a surrogate pair, as a JavaScript server writes one: a lone \ud83d.
        send({"jsonrpc": "2.0", "id": id, "result": {"content": [{"type": "text", "text": "emoji \ud83d"}]}})
    elif method == "tools/call" and m["params"]["name"] == "inspect":
        send({"jsonrpc": "2.0", "id": id, "result": {"content": [], "structuredContent": m["params"]["arguments"]}})
    elif method == "tools/call" and m["params"]["name"] == "ask":
        send({"jsonrpc": "2.0", "id": "s1", "method": "ping"})
        send({"jsonrpc": "2.0", "id": "s2", "method": "sampling/createMessage", "params": {"messages": []}})
        answers = {}
        while len(answers) < 2:
            a = read()
            answers[a["id"]] = a.get("result", a.get("error"))
        send({"jsonrpc": "2.0", "id": id, "result": {"content": [], "structuredContent": answers}})
    elif method == "tools/call" and m["params"]["name"] == "exit":
        print("leaving on purpose", file=sys.stderr, flush=True)
        sys.exit(7)
    elif id is not None:
        send({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": "no " + method}})
)PY";

class McpTest : public GatewayTest {
 protected:
  void SetUp() override {
    GatewayTest::SetUp();
    server_ = mcp_server_path();
    ASSERT_TRUE(fs::exists(server_)) << "The MCP reference server is not installed at " << server_
                                     << " (set RJG_MCP_SERVER to its mcp-server-everything): deploy/test.sh installs "
                                        "it with `npm install --prefix BUILD/npm "
                                        "@modelcontextprotocol/server-everything@2026.8.31`.";
  }

  // A gateway whose library "Everything" is robot-mcp-worker running `server_command` (default: the
  // reference server).
  void start_mcp(std::vector<std::string> server_command = {}, std::vector<std::string> worker_options = {},
                 std::string library_toml = {}) {
    if (server_command.empty()) server_command = {server_, "stdio"};
    LibrarySpec spec;
    spec.name = "Everything";
    spec.command = {"robot-mcp-worker", "--name", "{library}"};
    for (auto& o : worker_options) spec.command.push_back(std::move(o));
    spec.command.push_back("--");
    for (auto& c : server_command) spec.command.push_back(std::move(c));
    spec.extra_toml = std::move(library_toml);
    start({spec});
  }

  void start_fake() {
    const auto python = find_program("python3");
    ASSERT_TRUE(python) << "python3 is not installed (deploy/install-deps.sh installs it)";
    write_file(dir_.path() / "fake_mcp.py", kFakeServer);
    // pickle = "allow": the gateway passes every pickle on, so the worker's own decoding is what refuses.
    start_mcp({*python, (dir_.path() / "fake_mcp.py").string()}, {}, "pickle = \"allow\"\n");
  }

  // The pids of the MCP servers started so far, from the worker's log lines.
  std::vector<pid_t> server_pids(std::size_t at_least = 1) {
    return pids_eventually(R"(started MCP server .* \(pid (\d+)\))", at_least);
  }

  static std::string message_of(const client::RpcReply& reply) {
    const auto* error = reply.keyword_error();
    return error ? json::value_to<std::string>(error->at("message")) : std::string();
  }

  static json::value pickled(const pickle::PyValue& value) {
    return json::object{{"__pickled__", pickle::encode_pickle_hex(value)}};
  }

  std::string server_;
  TempDir dir_{"rjg-mcp"};
};

using Logs = std::vector<std::pair<std::string, std::string>>;  // level, message
client::RpcClient::NotificationHandler collect(Logs& logs) {
  return [&logs](const protocol::Message& m) {
    const auto p = m.params();
    logs.emplace_back(json::value_to<std::string>(p.at("level")), json::value_to<std::string>(p.at("message")));
  };
}

TEST_F(McpTest, KeywordsAreTheServersToolsWithTheirArgumentsAndTypes) {
  start_mcp();
  auto client = connect();
  client.initialize();
  const auto reply = client.import_library("Everything");
  ASSERT_TRUE(reply.ok()) << describe(reply);
  const auto& definition = reply.result->at("definition").as_object();
  EXPECT_EQ(definition.at("name"), "Everything");
  const auto* sum = keyword_definition(definition, "get-sum");
  ASSERT_TRUE(sum) << definition;
  const auto& args = sum->at("args").as_array();
  ASSERT_EQ(args.size(), 2u) << *sum;
  for (std::size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(args[i].at("name"), i == 0 ? "a" : "b");
    EXPECT_EQ(args[i].at("type"), "float");
    EXPECT_EQ(args[i].at("has_default"), false);
    EXPECT_EQ(args[i].at("kind"), "POSITIONAL_OR_NAMED");
  }
  EXPECT_TRUE(contains(json::value_to<std::string>(sum->at("doc")), "Get Sum Tool")) << *sum;
  const auto* echo = keyword_definition(definition, "echo");
  ASSERT_TRUE(echo);
  EXPECT_EQ(echo->at("args").at(0).at("type"), "str");
  // Optional properties come after the required ones, with the schema's defaults.
  const auto* longop = keyword_definition(definition, "trigger-long-running-operation");
  ASSERT_TRUE(longop);
  EXPECT_EQ(longop->at("args").at(0).at("name"), "duration");
  EXPECT_EQ(longop->at("args").at(0).at("has_default"), true);
  EXPECT_EQ(as_int(longop->at("args").at(0).at("default")), 10);
  const auto* annotated = keyword_definition(definition, "get-annotated-message");
  ASSERT_TRUE(annotated);
  EXPECT_EQ(annotated->at("args").at(1).at("type"), "bool");
  EXPECT_EQ(annotated->at("args").at(1).at("default"), false);
  for (const char* generic : {"Call Tool", "List Tools", "List Resources", "Read Resource", "List Prompts",
                              "Get Prompt", "MCP Call Tool", "MCP Get Prompt"})
    EXPECT_TRUE(keyword_definition(definition, generic)) << generic;
}

TEST_F(McpTest, ToolsReturnTheirValuesAndBadArgumentsFailTheKeyword) {
  start_mcp();
  auto [client, token] = session("Everything");
  EXPECT_EQ(python_value(client.run_keyword(token, "echo", {"hello"})), "Echo: hello");
  // JSON numbers, as a client that converted them sends them, and strings the worker converts.
  EXPECT_EQ(python_value(client.run_keyword(token, "get-sum", {1, 2.5})), "The sum of 1 and 2.5 is 3.5.");
  EXPECT_EQ(python_value(client.run_keyword(token, "get-sum", {"3", "4"})), "The sum of 3 and 4 is 7.");
  EXPECT_EQ(python_value(client.run_keyword(token, "get-sum", {}, {{"b", "0.5"}, {"a", 2}})),
            "The sum of 2 and 0.5 is 2.5.");
  // Robot's normalization reaches the tool too.
  EXPECT_EQ(python_value(client.run_keyword(token, "ECHO", {"x"})), "Echo: x");
  // structuredContent is the value: a dictionary.
  const auto weather = python_value(client.run_keyword(token, "get-structured-content", {"Chicago"}));
  ASSERT_TRUE(weather.is_object()) << weather;
  EXPECT_TRUE(weather.as_object().contains("temperature")) << weather;
  // Content other than a single text: the items as a list.
  const auto image = python_value(client.run_keyword(token, "get-tiny-image"));
  ASSERT_TRUE(image.is_array()) << image;
  EXPECT_TRUE(contains(json::serialize(image), R"("type":"image")")) << image;

  // Bad arguments are keyword failures, never JSON-RPC errors.
  const auto not_a_number = client.run_keyword(token, "get-sum", {"x", 1});
  RJG_ASSERT_OK(not_a_number);
  EXPECT_EQ(message_of(not_a_number), "Keyword 'Everything.get-sum' cannot convert argument 'a' to float: got 'x'.")
      << describe(not_a_number);
  const auto missing = client.run_keyword(token, "get-sum", {1});
  RJG_ASSERT_OK(missing);
  EXPECT_EQ(message_of(missing), "Keyword 'Everything.get-sum' missing value for argument 'b'.");
  // A value the tool itself refuses: its error text fails the keyword, naming tool and server.
  const auto refused = client.run_keyword(token, "get-structured-content", {"Atlantis"});
  RJG_ASSERT_OK(refused);
  EXPECT_TRUE(contains(message_of(refused), "tool 'get-structured-content' of the MCP server `")) << describe(refused);
  EXPECT_TRUE(contains(message_of(refused), "reported an error")) << describe(refused);
  const auto unknown = client.run_keyword(token, "no-such-tool");
  EXPECT_TRUE(contains(message_of(unknown), "No keyword named 'no-such-tool' in library 'Everything'"))
      << describe(unknown);
}

TEST_F(McpTest, ProgressArrivesAsLogsBeforeTheAnswer) {
  start_mcp();
  auto [client, token] = session("Everything");
  Logs logs;
  const auto reply =
      client.run_keyword(token, "trigger-long-running-operation", {}, {{"duration", 1}, {"steps", 3}}, collect(logs));
  RJG_ASSERT_KEYWORD_OK(reply);
  EXPECT_TRUE(contains(json::value_to<std::string>(python_value(reply)), "Steps: 3")) << describe(reply);
  Logs progress;
  for (const auto& l : logs)
    if (l.second.starts_with("progress")) progress.push_back(l);
  const Logs expected = {{"INFO", "progress 1/3"}, {"INFO", "progress 2/3"}, {"INFO", "progress 3/3"}};
  EXPECT_EQ(progress, expected);
}

// --call-timeout: a tool that takes longer fails its keyword with a message that says what to do; the
// request is cancelled, and the same server serves the next keywords. (The bound is generous, and the
// operation takes six times as long: nothing here depends on how fast the machine is.)
TEST_F(McpTest, ACallTimeoutCancelsTheRequestAndTheServerServesOn) {
  start_mcp({}, {"--call-timeout", "10"});
  auto [client, token] = session("Everything");
  const auto slow = client.run_keyword(token, "trigger-long-running-operation", {}, {{"duration", 60}, {"steps", 3}});
  RJG_ASSERT_OK(slow);
  const std::string message = message_of(slow);
  EXPECT_TRUE(contains(message, "Keyword 'Everything.trigger-long-running-operation': the MCP server `")) << message;
  EXPECT_TRUE(contains(message, "did not answer tools/call before the keyword's --call-timeout (10 s, in the "
                                "library's command) passed"))
      << message;
  EXPECT_TRUE(contains(message, "The request was cancelled (notifications/cancelled) and the server serves the next "
                                "keyword. If the tool needs longer, raise --call-timeout."))
      << message;
  for (int n = 0; n < 5; ++n) {
    const auto reply = client.run_keyword(token, "echo", {fmt::format("after {}", n)});
    RJG_ASSERT_KEYWORD_OK(reply);
    ASSERT_EQ(python_value(reply), json::value(fmt::format("Echo: after {}", n)));
  }
  EXPECT_EQ(server_pids().size(), 1u) << "the server was replaced";
}

TEST_F(McpTest, TheServersLogMessagesBecomeRobotLogsOfLaterKeywords) {
  start_mcp();
  auto [client, token] = session("Everything");
  RJG_ASSERT_KEYWORD_OK(client.run_keyword(token, "toggle-simulated-logging"));
  // The server logs every 5 s; each later keyword relays what arrived since the one before.
  Logs logs;
  const bool seen = eventually(
      [&] {
        const auto reply = client.run_keyword(token, "echo", {"poll"}, {}, collect(logs));
        return reply.ok() && !logs.empty();
      },
      30s, 500ms);
  ASSERT_TRUE(seen) << "no server log message reached a keyword within 30 s";
  for (const auto& [level, message] : logs) {
    const std::string expected = contains(message, "Debug")     ? "DEBUG"
                                 : contains(message, "Warning") ? "WARN"
                                 : contains(message, "Info") || contains(message, "Notice") ? "INFO"
                                                                                             : "ERROR";
    EXPECT_EQ(level, expected) << message;
    EXPECT_TRUE(contains(message, "-level message") || contains(message, "level-message")) << message;
  }
}

TEST_F(McpTest, GenericKeywords) {
  start_mcp();
  auto [client, token] = session("Everything");
  const auto tools = python_value(client.run_keyword(token, "List Tools"));
  ASSERT_TRUE(tools.is_array()) << tools;
  EXPECT_TRUE(contains(json::serialize(tools), R"("name":"get-sum")"));
  EXPECT_EQ(python_value(client.run_keyword(token, "MCP List Tools")), tools);
  // Call Tool returns the whole result, isError included, without failing.
  const auto failed = client.run_keyword(token, "Call Tool", {"get-sum"}, {{"a", "x"}});
  RJG_ASSERT_KEYWORD_OK(failed);
  EXPECT_EQ(python_value(failed).at("isError"), true) << describe(failed);
  const auto sum = python_value(client.run_keyword(token, "call_tool", {"get-sum"}, {{"a", "1"}, {"b", 2}}));
  EXPECT_EQ(sum.at("content").at(0).at("text"), "The sum of 1 and 2 is 3.") << sum;
  const auto resources = python_value(client.run_keyword(token, "List Resources"));
  ASSERT_TRUE(resources.is_array() && !resources.as_array().empty()) << resources;
  const auto uri = json::value_to<std::string>(resources.at(0).at("uri"));
  const auto read = python_value(client.run_keyword(token, "Read Resource", {}, {{"uri", uri}}));
  EXPECT_EQ(read.at("contents").at(0).at("uri"), json::value(uri)) << read;
  const auto prompts = python_value(client.run_keyword(token, "List Prompts"));
  EXPECT_TRUE(contains(json::serialize(prompts), R"("name":"args-prompt")")) << prompts;
  const auto prompt = python_value(client.run_keyword(token, "Get Prompt", {"args-prompt"}, {{"city", "Oslo"}}));
  EXPECT_TRUE(contains(json::serialize(prompt), "What's weather in Oslo?")) << prompt;
  // A JSON-RPC error of the server fails the keyword with its code and message.
  const auto missing = client.run_keyword(token, "Get Prompt", {"no-such-prompt"});
  EXPECT_TRUE(contains(message_of(missing), "answered prompts/get with JSON-RPC error -32602")) << describe(missing);
}

// Python's value dialect: what a Python client reads is a scalar, a flat list or dict of scalars, or a
// pickle; a nested result (content items, a whole CallToolResult, tools/list) travels pickled and holds the
// value the server sent, a flat one (structuredContent of scalars) stays JSON.
TEST_F(McpTest, NestedResultsTravelPickledAndFlatOnesAsJson) {
  start_mcp();
  auto [client, token] = session("Everything");
  const auto weather = keyword_value(client.run_keyword(token, "get-structured-content", {"Chicago"}));
  ASSERT_TRUE(weather.is_object()) << weather;
  EXPECT_FALSE(is_pickled(weather)) << weather;
  EXPECT_TRUE(weather.as_object().contains("temperature")) << weather;

  const auto image = keyword_value(client.run_keyword(token, "get-tiny-image"));
  ASSERT_TRUE(is_pickled(image)) << image;
  const auto items = python_value(image);
  ASSERT_TRUE(items.is_array()) << items;
  EXPECT_TRUE(contains(json::serialize(items), R"("type":"image")")) << items;

  const auto sum = keyword_value(client.run_keyword(token, "Call Tool", {"get-sum"}, {{"a", 1}, {"b", 2}}));
  ASSERT_TRUE(is_pickled(sum)) << sum;
  EXPECT_EQ(python_value(sum).at("content").at(0).at("text"), "The sum of 1 and 2 is 3.") << sum;
  const auto tools = keyword_value(client.run_keyword(token, "List Tools"));
  ASSERT_TRUE(is_pickled(tools)) << tools;
  EXPECT_TRUE(contains(json::serialize(python_value(tools)), R"("name":"get-sum")")) << python_value(tools);
}

TEST_F(McpTest, PickledArgumentsReachTheToolAsJsonAndOtherPicklesAreRefused) {
  start_fake();
  auto [client, token] = session("Everything");
  // The fake server's tools/list has two pages: every tool is a keyword.
  const auto imported = client.import_library("Everything");
  ASSERT_TRUE(imported.ok()) << describe(imported);
  for (const char* name : {"inspect", "ask", "exit"})
    EXPECT_TRUE(keyword_definition(imported.result->at("definition").as_object(), name)) << name;

  pickle::PyDict dict;
  dict.items.emplace_back(pickle::PyValue("k"), pickle::PyValue(pickle::PyList{{pickle::PyValue(1), pickle::PyValue("two")}}));
  const pickle::PyValue list(pickle::PyTuple{{pickle::PyValue(true), pickle::PyValue(2.5)}});
  const auto got = client.run_keyword(token, "inspect", {pickled(pickle::PyValue(dict)), pickled(list)}, {{"n", "7"}});
  RJG_ASSERT_KEYWORD_OK(got);
  EXPECT_EQ(python_value(got), json::parse(R"({"data": {"k": [1, "two"]}, "items": [true, 2.5], "n": 7})"));
  // A lone surrogate escape (which Boost.JSON refuses) arrives as U+FFFD rather than hanging the keyword.
  const auto cut = client.run_keyword(token, "inspect", {json::object{{"cut", true}}});
  EXPECT_EQ(python_value(cut), "emoji \xef\xbf\xbd") << describe(cut);
  // None for an optional argument without a default is not sent.
  const auto none = client.run_keyword(token, "inspect", {json::object{{"a", 1}}, nullptr});
  EXPECT_EQ(python_value(none), json::parse(R"({"data": {"a": 1}})")) << describe(none);

  // Bytes have no JSON form; a pickle that calls something is outside the data-only subset.
  const auto bytes = client.run_keyword(token, "inspect", {pickled(pickle::PyValue(pickle::PyBytes{"\x01\x02"}))});
  RJG_ASSERT_OK(bytes);
  EXPECT_TRUE(contains(message_of(bytes), "Keyword 'Everything.inspect': argument 'data' cannot be sent to the MCP "
                                          "server `"))
      << describe(bytes);
  EXPECT_TRUE(contains(message_of(bytes), "args[0]: a bytes value has no JSON form")) << describe(bytes);
  // A reference to os.system (a STACK_GLOBAL): the gateway lets it through (pickle = "allow"), the worker's
  // data-only decoding refuses it.
  const std::string evil = "80048c05706f736978948c0673797374656d9493942e";
  const auto refused = client.run_keyword(token, "inspect", {}, {{"data", json::object{{"__pickled__", evil}}}});
  RJG_ASSERT_OK(refused);
  EXPECT_TRUE(contains(message_of(refused), "argument 'data' cannot be sent")) << describe(refused);
  EXPECT_TRUE(contains(message_of(refused), "outside the data-only subset")) << describe(refused);

  // The server's own requests: ping is answered, sampling refused as not offered.
  Logs logs;
  const auto asked = client.run_keyword(token, "ask", {}, {}, collect(logs));
  RJG_ASSERT_KEYWORD_OK(asked);
  const auto answers = python_value(asked);
  EXPECT_EQ(answers.at("s1"), json::object()) << answers;
  EXPECT_EQ(answers.at("s2").at("code"), -32601) << answers;
  EXPECT_TRUE(contains(json::value_to<std::string>(answers.at("s2").at("message")),
                       "robot-mcp-worker does not offer sampling/createMessage"))
      << answers;
  ASSERT_EQ(logs.size(), 1u);
  EXPECT_EQ(logs[0].first, "WARN");
}

TEST_F(McpTest, AServerThatDiesUnderAKeywordFailsItAndTheWorkerMakesWayForAFreshOne) {
  start_mcp();
  auto [client, token] = session("Everything");
  const pid_t server = server_pids().at(0);
  const pid_t worker = started_pids("Everything").at(0);
  // A long operation, killed once its first progress note shows it is running.
  const auto id = client.send_request(
      protocol::kRunKeyword, json::object{{"library_token", token},
                                          {"name", "trigger-long-running-operation"},
                                          {"args", json::array()},
                                          {"kwargs", json::object{{"duration", 60}, {"steps", 60}}}});
  bool killed = false;
  const auto reply = client.wait_reply(id, [&](const protocol::Message&) {
    if (!std::exchange(killed, true)) ::kill(server, SIGKILL);
  });
  ASSERT_TRUE(killed) << describe(reply);
  RJG_ASSERT_OK(reply);
  const std::string message = message_of(reply);
  EXPECT_TRUE(contains(message, "Keyword 'Everything.trigger-long-running-operation': the MCP server `")) << message;
  EXPECT_TRUE(contains(message, fmt::format("(pid {}) closed its standard output and was killed by signal 9", server)))
      << message;
  EXPECT_TRUE(contains(message, "robot-mcp-worker exits now")) << message;
  EXPECT_EQ(reply.keyword_error()->at("type"), "McpServerGone");
  // The worker exits; the next import gets a fresh worker and server.
  EXPECT_TRUE(wait_pid_gone(worker, 20s)) << "the worker did not exit";
  auto [again, token2] = session("Everything");
  EXPECT_EQ(python_value(again.run_keyword(token2, "echo", {"back"})), "Echo: back");
  const auto workers = started_pids("Everything");
  EXPECT_EQ(workers.size(), 2u);
  const auto servers = server_pids(2);
  ASSERT_EQ(servers.size(), 2u);
  EXPECT_NE(servers[1], server);
}

TEST_F(McpTest, AServerThatExitsUnderAKeywordNamesItsStatusAndStderr) {
  start_fake();
  auto [client, token] = session("Everything");
  const auto reply = client.run_keyword(token, "exit");
  RJG_ASSERT_OK(reply);
  const std::string message = message_of(reply);
  EXPECT_TRUE(contains(message, "exited with status 7 while the keyword ran (tools/call)")) << message;
  EXPECT_TRUE(contains(message, "leaving on purpose")) << message;
}

TEST_F(McpTest, AServerThatCannotStartFailsTheImportClearly) {
  start_mcp({"/nonexistent/mcp-server"});
  auto client = connect();
  client.initialize();
  const auto missing = client.import_library("Everything");
  ASSERT_FALSE(missing.ok()) << describe(missing);
  EXPECT_TRUE(contains(missing.error_message(),
                       "The MCP server of library 'Everything' could not be started: '/nonexistent/mcp-server' does "
                       "not exist. Check the command after '--' in the library's command in the gateway "
                       "configuration."))
      << describe(missing);
}

TEST_F(McpTest, AServerThatExitsAtOnceFailsTheImportWithItsStatusAndStderr) {
  start_mcp({"/bin/sh", "-c", "echo 'no configuration found' >&2; exit 3"});
  auto client = connect();
  client.initialize();
  const auto reply = client.import_library("Everything");
  ASSERT_FALSE(reply.ok()) << describe(reply);
  const std::string message = reply.error_message();
  EXPECT_TRUE(contains(message, "The MCP server `/bin/sh -c ")) << message;
  EXPECT_TRUE(contains(message, "of library 'Everything' closed its standard output and exited with status 3 "
                                "during initialize"))
      << message;
  EXPECT_TRUE(contains(message, "no configuration found")) << message;
}

TEST_F(McpTest, AServerThatNeverAnswersTimesOut) {
  start_mcp({"/bin/sh", "-c", "exec sleep 60"}, {"--startup-timeout", "1"});
  auto client = connect();
  client.initialize();
  const auto reply = client.import_library("Everything");
  ASSERT_FALSE(reply.ok()) << describe(reply);
  EXPECT_TRUE(contains(reply.error_message(), "did not answer initialize within 1 s (--startup-timeout)"))
      << describe(reply);
  const auto servers = server_pids();
  ASSERT_FALSE(servers.empty());
  EXPECT_TRUE(wait_pid_gone(servers[0], 20s)) << "the server was left running";
}

TEST_F(McpTest, NoServerIsLeftAfterFinalizeOrDisconnect) {
  start_mcp();
  {
    auto [client, token] = session("Everything");
    const pid_t first = server_pids(1).at(0);
    RJG_ASSERT_OK(client.finalize_library(token));
    EXPECT_TRUE(wait_pid_gone(first, 20s)) << "finalize left the MCP server running";
    const auto second_token = open_library(client, "Everything");
    // Simulated logging keeps the server busy after its stdin closes: it takes SIGTERM to stop it.
    RJG_ASSERT_KEYWORD_OK(client.run_keyword(second_token, "toggle-simulated-logging"));
    const pid_t second = server_pids(2).at(1);
    client.close();
    EXPECT_TRUE(wait_pid_gone(second, 30s)) << "a disconnect left the MCP server running";
  }
  for (pid_t pid : server_pids(2)) EXPECT_TRUE(pid_gone(pid)) << pid;
}

}  // namespace
}  // namespace rjg::test
