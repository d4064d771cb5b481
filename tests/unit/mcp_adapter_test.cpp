// robot-mcp-worker's mapping of MCP data, without a server: inputSchema to keyword arguments and Robot
// types, the keyword table (generic keywords and tools that take their names), argument binding and
// conversion for tools/call, CallToolResult to a value or a failure, log and progress lines.
#include "workers/mcp/mapping.hpp"

#include <gtest/gtest.h>

namespace {

namespace json = boost::json;
namespace mcp = rjg::mcp;

mcp::Tool tool_of(std::string_view json_text) { return mcp::parse_tool(json::parse(json_text)); }

TEST(McpMapping, RobotTypesFromJsonSchema) {
  auto type = [](std::string_view schema) { return mcp::robot_type(json::parse(schema)); };
  EXPECT_EQ(type(R"({"type": "string"})"), "str");
  EXPECT_EQ(type(R"({"type": "integer"})"), "int");
  EXPECT_EQ(type(R"({"type": "number"})"), "float");
  EXPECT_EQ(type(R"({"type": "boolean"})"), "bool");
  EXPECT_EQ(type(R"({"type": "array", "items": {}})"), "list");
  EXPECT_EQ(type(R"({"type": "object"})"), "dict");
  EXPECT_EQ(type(R"({"type": ["string", "null"]})"), "str");
  EXPECT_EQ(type(R"({"anyOf": [{"type": "integer"}, {"type": "null"}]})"), "int");
  EXPECT_EQ(type(R"({"type": ["integer", "number"]})"), "float");
  EXPECT_EQ(type(R"({"type": ["string", "integer"]})"), "");
  EXPECT_EQ(type(R"({"enum": ["a", "b"]})"), "");
  EXPECT_EQ(type(R"({})"), "");
}

TEST(McpMapping, RequiredArgumentsFirstInRequiredOrderThenOptionalOnesWithDefaults) {
  const auto tool = tool_of(R"({"name": "t", "title": "T", "description": "Does t.", "inputSchema": {"type": "object",
      "properties": {"z": {"type": "number", "default": 3}, "b": {"type": "string", "description": "Bee"},
                     "a": {"type": "integer"}, "o": {"type": "boolean"}},
      "required": ["b", "a", "ghost"]}})");
  ASSERT_EQ(tool.arguments.size(), 5u);
  const std::vector<std::string> names = {tool.arguments[0].name, tool.arguments[1].name, tool.arguments[2].name,
                                          tool.arguments[3].name, tool.arguments[4].name};
  EXPECT_EQ(names, (std::vector<std::string>{"b", "a", "ghost", "z", "o"}));
  EXPECT_TRUE(tool.arguments[0].required);
  EXPECT_EQ(tool.arguments[0].doc, "Bee");
  EXPECT_EQ(tool.arguments[2].type, "");  // required but not described
  EXPECT_FALSE(tool.arguments[3].required);
  EXPECT_EQ(tool.arguments[3].default_value, 3);
  EXPECT_TRUE(tool.arguments[4].default_value.is_null());

  const std::vector<mcp::Tool> tools = {tool};
  const mcp::KeywordTable table(tools);
  const auto definitions = table.definitions();
  const auto& t = definitions.at(0).as_object();
  EXPECT_EQ(t.at("name"), "t");
  EXPECT_EQ(t.at("doc"), "T\n\nDoes t.\n\nArguments:\n- ``b``: Bee");
  const auto& args = t.at("args").as_array();
  EXPECT_EQ(args.at(0), json::parse(R"({"name": "b", "has_default": false, "required": true,
      "kind": "POSITIONAL_OR_NAMED", "type": "str", "doc": "Bee"})"));
  EXPECT_EQ(args.at(3).at("default"), 3);
  EXPECT_EQ(args.at(4).at("has_default"), true);
  EXPECT_TRUE(args.at(4).at("default").is_null());
  EXPECT_THROW(mcp::parse_tool(json::parse(R"({"title": "nameless"})")), std::invalid_argument);
}

TEST(McpMapping, GenericKeywordsGiveWayToToolsOfTheSameName) {
  const std::vector<mcp::Tool> tools = {tool_of(R"({"name": "list_tools"})"), tool_of(R"({"name": "echo"})")};
  const mcp::KeywordTable table(tools);
  EXPECT_EQ(table.shadowed(), std::vector<std::string>{"List Tools"});
  const auto* entry = table.find("List Tools");
  ASSERT_TRUE(entry);
  EXPECT_EQ(entry->tool, &tools[0]);
  entry = table.find("mcp list tools");
  ASSERT_TRUE(entry);
  EXPECT_FALSE(entry->tool);
  EXPECT_EQ(entry->generic, mcp::Generic::list_tools);
  EXPECT_EQ(table.find("Call Tool")->generic, mcp::Generic::call_tool);
  EXPECT_EQ(table.find("ECHO")->tool, &tools[1]);
  EXPECT_FALSE(table.find("nothing"));
  // Call Tool's name is positional-only, so a tool argument called `name` can go with it.
  for (const auto& k : table.definitions()) {
    if (k.at("name") == "Call Tool") {
      EXPECT_EQ(k.at("args").at(0).at("kind"), "POSITIONAL_ONLY") << k;
    }
  }
}

TEST(McpMapping, ArgumentsAreBoundConvertedAndNoneMeansNotSent) {
  const auto tool = tool_of(R"({"name": "t", "inputSchema": {"type": "object", "properties": {
      "a": {"type": "number"}, "n": {"type": "integer"}, "flag": {"type": "boolean"}, "items": {"type": "array"},
      "opt": {"type": "string"}, "free": {}}, "required": ["a"]}})");
  auto bind = [&](std::string_view args, std::string_view kwargs = "{}", bool extra = false) {
    return mcp::tool_call_arguments(tool, json::parse(args).as_array(), json::parse(kwargs).as_object(), extra);
  };
  EXPECT_EQ(bind(R"(["3", "4", "yes", "[1, 2]"])"), json::parse(R"({"a": 3, "n": 4, "flag": true, "items": [1, 2]})"));
  EXPECT_EQ(bind(R"([2.5])", R"({"free": {"x": null}})"), json::parse(R"({"a": 2.5, "free": {"x": null}})"));
  EXPECT_EQ(bind(R"([1, null, null, null, null])"), json::parse(R"({"a": 1})"));
  auto fails = [&](std::string_view args, std::string_view kwargs, std::string_view message) {
    try {
      bind(args, kwargs);
      ADD_FAILURE() << "no error for " << args << " " << kwargs;
    } catch (const mcp::ArgumentError& e) {
      EXPECT_EQ(std::string(e.what()), message);
    }
  };
  fails("[]", "{}", "missing value for argument 'a'.");
  fails(R"(["x"])", "{}", "cannot convert argument 'a' to float: got 'x'.");
  fails("[1]", R"({"a": 2})", "got multiple values for argument 'a'.");
  fails("[1]", R"({"b": 2})", "got an unexpected named argument 'b'; it takes: a, n, flag, items, opt, free.");
  fails("[1, 2, 3, 4, 5, 6, 7]", "{}", "expected at most 6 positional arguments, got 7.");
  // Call Tool: undeclared names and unconvertible values go to the server as they are.
  EXPECT_EQ(bind("[]", R"({"a": "x", "b": 2})", true), json::parse(R"({"a": "x", "b": 2})"));
}

TEST(McpMapping, ResultsBecomeValuesOrFailures) {
  auto value = [](std::string_view result) { return mcp::tool_value(json::parse(result).as_object()); };
  EXPECT_EQ(value(R"({"content": [{"type": "text", "text": "hi"}]})"), "hi");
  EXPECT_EQ(value(R"({"content": [{"type": "text", "text": "{}"}], "structuredContent": {"t": 1}})"),
            json::parse(R"({"t": 1})"));
  EXPECT_EQ(value(R"({"content": [{"type": "text", "text": "a"}, {"type": "image", "data": "AA=="}]})"),
            json::parse(R"([{"type": "text", "text": "a"}, {"type": "image", "data": "AA=="}])"));
  EXPECT_EQ(value(R"({"content": []})"), json::array());
  try {
    value(R"({"content": [{"type": "text", "text": "bad"}, {"type": "text", "text": "input"}], "isError": true})");
    ADD_FAILURE() << "isError did not fail";
  } catch (const mcp::ToolFailed& e) {
    EXPECT_EQ(std::string(e.what()), "bad\ninput");
  }
}

TEST(McpMapping, LogAndProgressLines) {
  EXPECT_EQ(mcp::robot_level("debug"), "DEBUG");
  EXPECT_EQ(mcp::robot_level("info"), "INFO");
  EXPECT_EQ(mcp::robot_level("notice"), "INFO");
  EXPECT_EQ(mcp::robot_level("warning"), "WARN");
  for (const char* level : {"error", "critical", "alert", "emergency"}) EXPECT_EQ(mcp::robot_level(level), "ERROR");
  EXPECT_EQ(mcp::log_text(json::parse(R"({"level": "info", "data": "plain"})").as_object()), "plain");
  EXPECT_EQ(mcp::log_text(json::parse(R"({"level": "info", "logger": "db", "data": {"rows": 2}})").as_object()),
            R"(db: {"rows":2})");
  EXPECT_EQ(mcp::progress_text(json::parse(R"({"progress": 2, "total": 3, "message": "half"})").as_object()),
            "progress 2/3: half");
  EXPECT_EQ(mcp::progress_text(json::parse(R"({"progress": 0.5})").as_object()), "progress 0.5");
  EXPECT_EQ(mcp::progress_text(json::parse(R"({"progress": 1.0, "total": 4.0})").as_object()), "progress 1/4");
}

}  // namespace
