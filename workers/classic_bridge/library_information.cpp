// The classic server's library information (get_library_information, or the per-keyword methods of
// servers that predate it), and the library definition an import answers with.
#include "common/protocol/protocol.hpp"
#include "common/xmlrpc/classic_values.hpp"
#include "workers/classic_bridge/classic_bridge.hpp"

#include <fmt/format.h>

#include <optional>
#include <string>
#include <utility>

namespace rjg::classic_bridge {

namespace {

void fill(KeywordInfo& kw, std::string_view field, const xmlrpc::Value& value) {
  if (field == "args" && value.is<xmlrpc::Array>()) kw.args = value.as<xmlrpc::Array>();
  else if (field == "types") kw.types = value;
  else if (field == "tags" && value.is<xmlrpc::Array>()) kw.tags = value.as<xmlrpc::Array>();
  else if (field == "doc") kw.doc = text_of(value);
}

}  // namespace

LibraryInfo fetch_information(XmlRpcServer& server) {
  LibraryInfo info;
  auto everything = server.call("get_library_information", {});
  if (!everything.is_fault && everything.value.is<xmlrpc::Struct>()) {
    for (const auto& [name, fields] : everything.value.as<xmlrpc::Struct>()) {
      if (name == "__intro__") {
        if (const auto* doc = fields.member("doc")) info.doc = text_of(*doc);
        continue;
      }
      // __init__ and any other __name__ describe the library, not a keyword (Remote.get_keyword_names).
      if (name.starts_with("__") && name.ends_with("__")) continue;  // "__" and "___" too, as in Remote
      KeywordInfo kw;
      kw.name = name;
      if (fields.is<xmlrpc::Struct>())
        for (const auto& [field, value] : fields.as<xmlrpc::Struct>()) fill(kw, field, value);
      info.keywords.push_back(std::move(kw));
    }
    return info;
  }
  // A server older than Robot 4's get_library_information: one call per keyword and field, each with its
  // default when the server faults or the call fails (as Robot's Remote library does: its client turns
  // both into the TypeError it falls back on).
  auto names = server.call("get_keyword_names", {});
  if (names.is_fault)
    throw sdk::RpcError(protocol::kWorkerFailed,
                        fmt::format("The classic remote server at {} answered get_keyword_names with a fault: {}",
                                    server.url(), names.fault.message));
  if (!names.value.is<xmlrpc::Array>())
    throw sdk::RpcError(protocol::kWorkerFailed,
                        fmt::format("The classic remote server at {} answered get_keyword_names with no list",
                                    server.url()));
  for (const auto& name : names.value.as<xmlrpc::Array>()) {
    KeywordInfo kw;
    kw.name = text_of(name);
    for (auto [method, field] : {std::pair{"get_keyword_arguments", "args"}, std::pair{"get_keyword_types", "types"},
                                 std::pair{"get_keyword_tags", "tags"}, std::pair{"get_keyword_documentation", "doc"}}) {
      try {
        auto answer = server.call(method, {xmlrpc::Value(kw.name)});
        if (!answer.is_fault) fill(kw, field, answer.value);
      } catch (const TransportError& e) {
        rjg::log::warn("{} of keyword '{}' failed, so the keyword has its default {}: {}", method, kw.name, field,
                       e.what());
      }
    }
    info.keywords.push_back(std::move(kw));
  }
  if (auto intro = server.call("get_keyword_documentation", {xmlrpc::Value("__intro__")}); !intro.is_fault)
    info.doc = text_of(intro.value);
  return info;
}

namespace {

// A classic argument spec ("a", "b=2", "*rest", "**named", "*", "/", or ["b", 2]) as ArgumentDefinitions.
json::array argument_definitions(const KeywordInfo& kw) {
  json::array out;
  bool named_only = false;
  std::size_t position = 0;
  // A nil type (None) says nothing about the argument, as an empty one.
  auto type_text = [](const xmlrpc::Value& type) -> std::optional<std::string> {
    if (type.is<xmlrpc::Nil>()) return std::nullopt;
    return text_of(type);
  };
  auto type_of = [&](const std::string& name) -> std::optional<std::string> {
    if (const auto* by_name = kw.types.member(name)) return type_text(*by_name);
    if (kw.types.is<xmlrpc::Array>() && position < kw.types.as<xmlrpc::Array>().size())
      return type_text(kw.types.as<xmlrpc::Array>()[position]);
    return std::nullopt;
  };
  for (const auto& item : kw.args) {
    std::string spec;
    std::optional<json::value> default_value;
    if (const auto* pair = std::get_if<xmlrpc::Array>(&item.v); pair && !pair->empty()) {
      spec = text_of((*pair)[0]);
      if (pair->size() > 1)
        default_value = json::parse(xmlrpc::to_json_argument(xmlrpc::to_python((*pair)[1])));
    } else {
      spec = text_of(item);
    }
    if (spec == "/") {
      // The markers themselves the SDK's session adds to the definition (sdk::add_argument_markers).
      for (auto& arg : out) arg.as_object()["kind"] = "POSITIONAL_ONLY";
      continue;
    }
    if (spec == "*") {
      named_only = true;
      continue;
    }
    json::object arg{{"required", true}};
    std::string name = spec;
    if (spec.starts_with("**")) {
      name = spec.substr(2);
      arg["kind"] = "VAR_NAMED";
    } else if (spec.starts_with("*")) {
      name = spec.substr(1);
      arg["kind"] = "VAR_POSITIONAL";
      named_only = true;
    } else {
      if (auto eq = spec.find('='); eq != std::string::npos && !default_value) {
        name = spec.substr(0, eq);
        default_value = json::value(spec.substr(eq + 1));  // a classic default is the text Robot converts
      }
      arg["kind"] = named_only ? "NAMED_ONLY" : "POSITIONAL_OR_NAMED";
    }
    arg["name"] = name;
    if (auto type = type_of(name); type && !type->empty()) arg["type"] = *type;
    arg["has_default"] = default_value.has_value();
    if (default_value) arg["default"] = std::move(*default_value);
    out.push_back(std::move(arg));
    ++position;
  }
  return out;
}

}  // namespace

json::object definition(const std::string& name, const LibraryInfo& info) {
  json::array keywords;
  for (const auto& kw : info.keywords) {
    json::array tags;
    for (const auto& tag : kw.tags) tags.emplace_back(text_of(tag));
    keywords.emplace_back(json::object{
        {"name", kw.name}, {"args", argument_definitions(kw)}, {"doc", kw.doc}, {"tags", std::move(tags)}});
  }
  return json::object{{"name", name}, {"doc", info.doc}, {"keywords", std::move(keywords)}};
}

}  // namespace rjg::classic_bridge
