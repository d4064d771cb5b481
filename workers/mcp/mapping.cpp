// MCP data as keywords, arguments, values and log lines (see mapping.hpp).
#include "workers/mcp/mapping.hpp"

#include "common/pickle/python_json.hpp"
#include "workers/sdk/sdk.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>

namespace rjg::mcp {
namespace {

struct GenericInfo {
  Generic kind;
  std::string_view name;
  std::string_view argument;  // its one positional argument, "" for none
  bool named_arguments;       // takes **arguments
  std::string_view doc;
};

constexpr GenericInfo kGenerics[] = {
    {Generic::call_tool, "Call Tool", "name", true,
     "Calls the MCP tool ``name`` with the given named arguments and returns its whole result (``content``, "
     "``structuredContent``, ``isError``) as a dictionary. Unlike the tool's own keyword, it does not fail when "
     "the tool reports an error: check ``isError`` yourself."},
    {Generic::list_tools, "List Tools", "", false,
     "Returns the tools the MCP server offers now (every page of ``tools/list``), as a list of dictionaries."},
    {Generic::list_resources, "List Resources", "", false,
     "Returns the resources the MCP server offers (every page of ``resources/list``), as a list of dictionaries."},
    {Generic::read_resource, "Read Resource", "uri", false,
     "Reads the resource at ``uri`` and returns the server's result (``contents``: a list of items with "
     "``uri``, ``mimeType`` and ``text`` or ``blob``)."},
    {Generic::list_prompts, "List Prompts", "", false,
     "Returns the prompts the MCP server offers (every page of ``prompts/list``), as a list of dictionaries."},
    {Generic::get_prompt, "Get Prompt", "name", true,
     "Gets the prompt ``name`` with the given named arguments (sent as text, as MCP wants) and returns the "
     "server's result (``description``, ``messages``)."},
};

json::object argument_definition(std::string_view name, std::string_view type, std::string_view kind,
                                 const json::value* default_value, std::string_view doc = {}) {
  json::object arg{{"name", name}, {"has_default", default_value != nullptr}, {"required", true}, {"kind", kind}};
  if (!type.empty()) arg["type"] = type;
  // A Python client reads a default as a value: a nested one (an object schema's default) pickled.
  if (default_value)
    if (auto d = pickle::definition_default(*default_value, name)) arg["default"] = std::move(*d);
  if (!doc.empty()) arg["doc"] = doc;
  return arg;
}

json::object tool_definition(const std::string& name, const Tool& tool) {
  json::array args;
  std::string doc = tool.title;
  if (!tool.description.empty() && tool.description != tool.title)
    doc += (doc.empty() ? "" : "\n\n") + tool.description;
  std::string argument_docs;
  for (const ToolArgument& a : tool.arguments) {
    args.push_back(argument_definition(a.name, a.type, "POSITIONAL_OR_NAMED", a.required ? nullptr : &a.default_value,
                                       a.doc));
    if (!a.doc.empty()) argument_docs += fmt::format("\n- ``{}``: {}", a.name, a.doc);
  }
  if (!argument_docs.empty()) doc += "\n\nArguments:" + argument_docs;
  return json::object{{"name", name}, {"args", std::move(args)}, {"doc", doc}, {"tags", json::array{"mcp tool"}}};
}

json::object generic_definition(const std::string& name, const GenericInfo& info) {
  json::array args;
  // Positional-only beside **arguments, as in Python: a tool argument called `name` can go with it.
  if (!info.argument.empty())
    args.push_back(argument_definition(info.argument, "str",
                                       info.named_arguments ? "POSITIONAL_ONLY" : "POSITIONAL_OR_NAMED", nullptr));
  if (info.named_arguments) args.push_back(argument_definition("arguments", "", "VAR_NAMED", nullptr));
  return json::object{{"name", name}, {"args", std::move(args)}, {"doc", info.doc}, {"tags", json::array{"mcp"}}};
}

std::string text_of(const json::value* v) { return v && v->is_string() ? std::string(v->get_string()) : std::string(); }

// The JSON Schema types a schema allows, "null" left out; anyOf/oneOf branches add theirs.
void collect_types(const json::value& schema, std::vector<std::string>& types, int depth = 0) {
  if (!schema.is_object() || depth > 8) return;
  const auto& o = schema.get_object();
  auto add = [&](const json::value& t) {
    if (t.is_string() && t.get_string() != "null" &&
        std::find(types.begin(), types.end(), t.get_string()) == types.end())
      types.emplace_back(t.get_string());
  };
  if (const auto* type = o.if_contains("type")) {
    if (type->is_array()) for (const auto& t : type->get_array()) add(t);
    else add(*type);
  }
  for (const char* key : {"anyOf", "oneOf"})
    if (const auto* branches = o.if_contains(key); branches && branches->is_array())
      for (const auto& b : branches->get_array()) collect_types(b, types, depth + 1);
}

bool is_text_item(const json::value& item) {
  const auto* o = item.if_object();
  const auto* type = o ? o->if_contains("type") : nullptr;
  return type && type->is_string() && type->get_string() == "text";
}

std::string number_text(const json::value& v) {
  if (v.is_double()) {
    const double d = v.get_double();
    if (std::isfinite(d) && d == std::trunc(d) && std::fabs(d) < 1e15) return fmt::format("{}", static_cast<long long>(d));
    return fmt::format("{}", d);
  }
  return v.is_number() ? json::serialize(v) : sdk::show_value(v);
}

}  // namespace

std::string robot_type(const json::value& property_schema) {
  std::vector<std::string> types;
  collect_types(property_schema, types);
  // "integer" and "number" together are a number.
  if (types.size() == 2 && std::find(types.begin(), types.end(), "integer") != types.end() &&
      std::find(types.begin(), types.end(), "number") != types.end())
    return "float";
  if (types.size() != 1) return "";
  const std::string& t = types.front();
  if (t == "string") return "str";
  if (t == "integer") return "int";
  if (t == "number") return "float";
  if (t == "boolean") return "bool";
  if (t == "array") return "list";
  if (t == "object") return "dict";
  return "";
}

std::vector<ToolArgument> tool_arguments(const json::value& input_schema) {
  std::vector<ToolArgument> out;
  if (!input_schema.is_object()) return out;
  const auto& schema = input_schema.get_object();
  static const json::object kNoProperties;
  const auto* props = schema.if_contains("properties");
  const json::object& properties = props && props->is_object() ? props->get_object() : kNoProperties;
  auto make = [&](std::string_view name, bool required) {
    ToolArgument a;
    a.name = std::string(name);
    a.required = required;
    if (const auto* p = properties.if_contains(name)) {
      a.type = robot_type(*p);
      if (p->is_object()) {
        a.doc = text_of(p->get_object().if_contains("description"));
        if (const auto* d = p->get_object().if_contains("default"); d && !required) a.default_value = *d;
      }
    }
    return a;
  };
  if (const auto* required = schema.if_contains("required"); required && required->is_array())
    for (const auto& r : required->get_array())
      if (r.is_string() && std::none_of(out.begin(), out.end(), [&](const auto& a) { return a.name == r.get_string(); }))
        out.push_back(make(r.get_string(), true));
  for (const auto& p : properties)
    if (std::none_of(out.begin(), out.end(), [&](const auto& a) { return a.name == p.key(); }))
      out.push_back(make(p.key(), false));
  return out;
}

Tool parse_tool(const json::value& entry) {
  const auto* o = entry.if_object();
  const auto* name = o ? o->if_contains("name") : nullptr;
  if (!name || !name->is_string() || name->get_string().empty())
    throw std::invalid_argument(fmt::format("a tool without a name: {}", sdk::show_value(entry)));
  Tool tool;
  tool.name = std::string(name->get_string());
  tool.title = text_of(o->if_contains("title"));
  if (tool.title.empty())  // older servers put the title in annotations
    if (const auto* annotations = o->if_contains("annotations"); annotations && annotations->is_object())
      tool.title = text_of(annotations->get_object().if_contains("title"));
  tool.description = text_of(o->if_contains("description"));
  if (const auto* schema = o->if_contains("inputSchema")) tool.arguments = tool_arguments(*schema);
  return tool;
}

KeywordTable::KeywordTable(const std::vector<Tool>& tools) {
  for (const Tool& t : tools) entries_.push_back({t.name, &t});
  auto taken = [&](std::string_view name) {
    const std::string key = sdk::normalize_name(name);
    return std::any_of(tools.begin(), tools.end(), [&](const Tool& t) { return sdk::normalize_name(t.name) == key; });
  };
  for (const GenericInfo& g : kGenerics) {
    if (taken(g.name)) shadowed_.emplace_back(g.name);
    else entries_.push_back({std::string(g.name), nullptr, g.kind});
    const std::string prefixed = fmt::format("MCP {}", g.name);
    if (taken(prefixed)) shadowed_.push_back(prefixed);
    else entries_.push_back({prefixed, nullptr, g.kind});
  }
}

const KeywordEntry* KeywordTable::find(std::string_view name) const {
  return sdk::find_by_name(entries_, name, [](const KeywordEntry& e) -> std::string_view { return e.name; });
}

json::array KeywordTable::definitions() const {
  json::array out;
  for (const auto& e : entries_) {
    if (e.tool) {
      out.push_back(tool_definition(e.name, *e.tool));
      continue;
    }
    for (const GenericInfo& g : kGenerics)
      if (g.kind == e.generic) out.push_back(generic_definition(e.name, g));
  }
  return out;
}

std::optional<json::value> convert_to(const json::value& value, std::string_view robot_type) {
  if (robot_type == "list" || robot_type == "dict") {
    const bool list = robot_type == "list";
    if (list ? value.is_array() : value.is_object()) return value;
    if (!value.is_string()) return std::nullopt;
    boost::system::error_code ec;
    json::value parsed = json::parse(value.get_string(), ec);
    if (ec || (list ? !parsed.is_array() : !parsed.is_object())) return std::nullopt;
    return parsed;
  }
  auto converted = sdk::convert(value, robot_type);
  // JSON Schema's number takes integers as they are: 3 stays 3 rather than becoming 3.0.
  if (converted && robot_type == "float" && converted->is_double() && !value.is_double()) {
    const double d = converted->get_double();
    if (d == std::trunc(d) && std::fabs(d) < 9007199254740992.0) return json::value(static_cast<std::int64_t>(d));
  }
  return converted;
}

json::object tool_call_arguments(const Tool& tool, const json::array& args, const json::object& kwargs,
                                 bool extra_allowed) {
  auto fail = [](std::string why, const char* type = "TypeError") { return ArgumentError(std::move(why), type); };
  if (args.size() > tool.arguments.size())
    throw fail(fmt::format("expected at most {} positional argument{}, got {}.", tool.arguments.size(),
                           tool.arguments.size() == 1 ? "" : "s", args.size()));
  json::object given;
  for (std::size_t i = 0; i < args.size(); ++i) given[tool.arguments[i].name] = args[i];
  json::object extra;
  for (const auto& [name, value] : kwargs) {
    const bool declared = std::any_of(tool.arguments.begin(), tool.arguments.end(),
                                      [&, &name = name](const ToolArgument& a) { return a.name == name; });
    if (!declared && !extra_allowed) {
      std::string names;
      for (const auto& a : tool.arguments) names += (names.empty() ? "" : ", ") + a.name;
      throw fail(fmt::format("got an unexpected named argument '{}'; it takes: {}.", std::string_view(name),
                             names.empty() ? "no arguments" : names));
    }
    if (given.contains(name)) throw fail(fmt::format("got multiple values for argument '{}'.", std::string_view(name)));
    (declared ? given : extra)[name] = value;
  }
  json::object out;
  for (const ToolArgument& a : tool.arguments) {
    const auto* v = given.if_contains(a.name);
    if (!v) {
      if (a.required && !extra_allowed) throw fail(fmt::format("missing value for argument '{}'.", a.name));
      continue;  // the server applies its own default
    }
    // None for an optional argument whose default is None means "not given" (Robot fills skipped
    // positions with the declared default).
    if (v->is_null() && !a.required && a.default_value.is_null()) continue;
    if (v->is_null() || a.type.empty()) {
      out[a.name] = *v;
      continue;
    }
    auto converted = convert_to(*v, a.type);
    // Call Tool sends what it cannot convert as it is: the server's answer (isError) says what is wrong.
    if (!converted && extra_allowed) converted = *v;
    if (!converted)
      throw fail(fmt::format("cannot convert argument '{}' to {}: got '{}'.", a.name, a.type, sdk::show_value(*v)),
                 "ValueError");
    out[a.name] = std::move(*converted);
  }
  for (auto& [name, value] : extra) out[name] = std::move(value);
  return out;
}

std::string content_text(const json::value& content) {
  std::string text;
  bool any = false;
  if (content.is_array())
    for (const auto& item : content.get_array())
      if (is_text_item(item)) {
        text += (any ? "\n" : "") + text_of(item.get_object().if_contains("text"));
        any = true;
      }
  return any ? text : json::serialize(content);
}

json::value tool_value(const json::object& result) {
  const json::value* content = result.if_contains("content");
  if (const auto* error = result.if_contains("isError"); error && error->is_bool() && error->get_bool())
    throw ToolFailed(content ? content_text(*content) : std::string("(no content)"));
  if (const auto* structured = result.if_contains("structuredContent"); structured && !structured->is_null())
    return *structured;
  if (!content || !content->is_array()) return json::array();
  const auto& items = content->get_array();
  if (items.size() == 1 && is_text_item(items[0])) return json::value(text_of(items[0].get_object().if_contains("text")));
  return items;
}

std::string_view robot_level(std::string_view level) {
  if (level == "debug") return "DEBUG";
  if (level == "warning") return "WARN";
  if (level == "error" || level == "critical" || level == "alert" || level == "emergency") return "ERROR";
  return "INFO";
}

std::string log_text(const json::object& params) {
  const json::value* data = params.if_contains("data");
  std::string text = !data ? std::string() : data->is_string() ? std::string(data->get_string()) : json::serialize(*data);
  if (const std::string logger = text_of(params.if_contains("logger")); !logger.empty()) text = logger + ": " + text;
  return text;
}

std::string progress_text(const json::object& params) {
  std::string text = "progress ";
  text += params.contains("progress") ? number_text(params.at("progress")) : "?";
  if (const auto* total = params.if_contains("total"); total && total->is_number()) text += "/" + number_text(*total);
  if (const std::string message = text_of(params.if_contains("message")); !message.empty()) text += ": " + message;
  return text;
}

}  // namespace rjg::mcp
