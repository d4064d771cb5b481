// What robot-mcp-worker makes of MCP's data, with no process or pipe in sight (so it is unit-tested on
// its own): tools/list entries as keyword definitions, keyword arguments as tools/call arguments, a
// CallToolResult as a keyword's value or failure, and MCP's log and progress notifications as Robot
// log lines.
//
// Keywords, in the order of the definition:
//   each tool          named by the tool's name; doc: title, description, then the arguments'
//                      descriptions. Arguments from inputSchema: the `required` properties first, as
//                      positional arguments in `required` order, then the other properties in schema
//                      order, optional, with the schema's `default` (None when it has none: such an
//                      argument left out, or given as None, is not sent at all). Types: string str,
//                      integer int, number float, boolean bool, array list, object dict; a union with
//                      "null" (also anyOf/oneOf) takes the other type; anything else gets no type.
//   generic keywords   Call Tool, List Tools, List Resources, Read Resource, List Prompts, Get Prompt.
//                      Each is always declared as "MCP <name>" as well; the plain name is left out when a
//                      tool's name matches it as Robot matches names (case, spaces, underscores
//                      ignored), so the tool wins and the generic keyword stays reachable.
// Dispatch: the exact name first (tools, then declared generic names), then Robot's normalization.
#pragma once

#include <boost/json.hpp>

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace rjg::mcp {

namespace json = boost::json;

struct ToolArgument {
  std::string name;
  std::string type;  // the Robot type ("str", "int", "float", "bool", "list", "dict"), or "" for none
  bool required = false;
  json::value default_value;  // optional arguments only: the schema's default, or null (None)
  std::string doc;            // the property's description
};

struct Tool {
  std::string name;
  std::string title;
  std::string description;
  std::vector<ToolArgument> arguments;
};

// The Robot type of a property's schema ("" when there is no single JSON type to name).
std::string robot_type(const json::value& property_schema);
// The keyword arguments of an inputSchema, in the order described above.
std::vector<ToolArgument> tool_arguments(const json::value& input_schema);
// One entry of tools/list's `tools`. Throws std::invalid_argument when it is not an object with a name.
Tool parse_tool(const json::value& entry);

enum class Generic { call_tool, list_tools, list_resources, read_resource, list_prompts, get_prompt };

// A keyword of one import: a tool, or a generic keyword under one of its names.
struct KeywordEntry {
  std::string name;
  const Tool* tool = nullptr;  // null: the generic keyword below
  Generic generic = Generic::call_tool;
};

// The keywords of one import. Holds pointers into `tools`, which must outlive it unchanged.
class KeywordTable {
 public:
  explicit KeywordTable(const std::vector<Tool>& tools);
  explicit KeywordTable(std::vector<Tool>&& tools) = delete;  // it would point into a temporary
  const std::vector<KeywordEntry>& entries() const { return entries_; }
  // Generic keywords whose plain name a tool took ("List Tools" for a tool named list_tools).
  const std::vector<std::string>& shadowed() const { return shadowed_; }
  // Exact name first, then Robot's normalization; nullptr when nothing matches.
  const KeywordEntry* find(std::string_view name) const;
  // The KeywordDefinitions of the library definition.
  json::array definitions() const;

 private:
  std::vector<KeywordEntry> entries_;
  std::vector<std::string> shadowed_;
};


// A keyword call's arguments (plain JSON: pickles already decoded) bound to a tool's arguments and
// converted to the schema's types, as the `arguments` of tools/call. Throws ArgumentError naming the
// argument. With `extra_allowed` (Call Tool), named arguments the tool does not declare are sent too,
// values that do not convert are sent as they are, and missing ones are not asked for: the server judges.
struct ArgumentError : std::runtime_error {
  ArgumentError(std::string message, std::string type) : std::runtime_error(std::move(message)), type(std::move(type)) {}
  std::string type;  // "TypeError" (binding) or "ValueError" (conversion)
};
json::object tool_call_arguments(const Tool& tool, const json::array& args, const json::object& kwargs,
                                 bool extra_allowed = false);
// One value converted to a Robot type as Robot would (nullopt when it does not convert): int, float,
// bool and str as the SDK converts them (a float that is a whole number stays an integer in JSON),
// list and dict from JSON text too; no type leaves it unchanged.
std::optional<json::value> convert_to(const json::value& value, std::string_view robot_type);

// A CallToolResult as the keyword's value: structuredContent when present, the text of a single text
// item, else the content items as a list. A result with isError true throws ToolFailed with its text.
struct ToolFailed : std::runtime_error {
  using std::runtime_error::runtime_error;
};
json::value tool_value(const json::object& result);
// The text items of a content list joined by newlines; the list as JSON when it has no text item.
std::string content_text(const json::value& content);

// Robot's level for an MCP log level (debug DEBUG; info, notice INFO; warning WARN; error and above
// ERROR; anything else INFO).
std::string_view robot_level(std::string_view mcp_level);
// The text of a notifications/message: "logger: data", data serialized as JSON unless it is a string.
std::string log_text(const json::object& params);
// The text of a notifications/progress: "progress 2/3: message" (no total, no message: left out).
std::string progress_text(const json::object& params);

}  // namespace rjg::mcp
