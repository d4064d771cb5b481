#include "gateway/fronts/classic_answers.hpp"

#include "common/protocol/json_text.hpp"
#include "common/xmlrpc/classic_values.hpp"

#include <boost/json/serialize.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <iterator>

namespace rjg::gateway::fronts {

std::string json_string(std::string_view text) { return json::serialize(json::value(json::string(text))); }

// One robot/log as Robot's classic output has it: a *LEVEL* marker at the start of a line (the level Robot
// gives stdout lines without one is INFO). HTML messages keep *HTML*.
std::string output_line(const json::value& params) {
  const auto* p = params.if_object();
  if (!p) return {};
  std::string message, level = "INFO";
  if (auto* m = p->if_contains("message"); m && m->is_string()) message = m->get_string();
  if (auto* l = p->if_contains("level"); l && l->is_string()) level = l->get_string();
  const bool html = [&] {
    auto* h = p->if_contains("html");
    return h && h->is_bool() && h->get_bool();
  }();
  if (html) level = "HTML";
  static constexpr std::string_view kLevels[] = {"TRACE", "DEBUG", "INFO", "WARN", "ERROR", "HTML", "CONSOLE"};
  if (std::find(std::begin(kLevels), std::end(kLevels), level) == std::end(kLevels)) level = "INFO";
  return fmt::format("*{}* {}\n", level, message);
}

namespace {
// Robot shows an exception's type before its message unless the type is a generic one. RemoteError is the
// failure of a classic server behind robot-classic-bridge, whose message names the server's own exception
// already (Robot leaves the names of its own errors out too).
std::string error_message(const std::string& message, const std::string& type) {
  static constexpr std::string_view kGeneric[] = {"",      "AssertionError", "AssertionFailedError", "Exception",
                                                  "Error", "RuntimeError",   "RuntimeException",     "RemoteError"};
  if (std::find(std::begin(kGeneric), std::end(kGeneric), type) != std::end(kGeneric)) return message;
  return message.empty() ? type : fmt::format("{}: {}", type, message);
}
}  // namespace

std::string string_member(const json::object& o, std::string_view key) {
  if (auto* v = o.if_contains(key); v && v->is_string()) return std::string(v->get_string());
  return {};
}

// ---- Library information from the library definition ----

const json::object* keyword_of(const json::value& definition, std::string_view name) {
  const json::object* found = nullptr;
  each_object(definition.if_object(), "keywords", [&](const json::object& k) {
    if (string_member(k, "name") == name) found = &k;
    return !found;
  });
  return found;
}

// The classic argument spec: "a", "b=default", "*varargs", "**kwargs", and the markers "*" and "/". A
// named-only argument comes after "*" or "*varargs" (a definition without the marker gets one): without it
// Robot would read it as positional, and refuse a keyword-only argument without a default after one with.
// Likewise positional-only arguments end with "/", or Robot would bind name=value to them.
xmlrpc::Value argument_spec(const json::object& keyword) {
  xmlrpc::Array spec;
  bool named_only = false;
  bool positional_only = false;  // the argument before was POSITIONAL_ONLY
  each_object(&keyword, "args", [&](const json::object& arg) {
    const auto name = string_member(arg, "name");
    const auto kind = string_member(arg, "kind");
    // Positional-only arguments end at "/": a definition that lists them without the marker gets one.
    if (positional_only && kind != "POSITIONAL_ONLY" && kind != "POSITIONAL_ONLY_MARKER") spec.emplace_back("/");
    positional_only = kind == "POSITIONAL_ONLY";
    if (kind == "NAMED_ONLY" && !named_only) spec.emplace_back("*");
    if (kind == "NAMED_ONLY_MARKER" || kind == "VAR_POSITIONAL" || kind == "NAMED_ONLY") named_only = true;
    if (kind == "POSITIONAL_ONLY_MARKER") spec.emplace_back("/");
    else if (kind == "NAMED_ONLY_MARKER") spec.emplace_back("*");
    else if (kind == "VAR_POSITIONAL") spec.emplace_back("*" + name);
    else if (kind == "VAR_NAMED") spec.emplace_back("**" + name);
    else {
      const auto* has_default = arg.if_contains("has_default");
      if (has_default && has_default->is_bool() && has_default->get_bool()) {
        std::string text;
        try {
          const auto* d = arg.if_contains("default");
          text = rjg::xmlrpc::default_text(rjg::xmlrpc::from_json(d ? json::serialize(*d) : "null", "default"));
        } catch (const rjg::xmlrpc::ValueError&) {
          text = "<not shown: a value outside the data-only subset>";
        }
        spec.emplace_back(fmt::format("{}={}", name, text));
      } else {
        spec.emplace_back(name);
      }
    }
    return true;
  });
  if (positional_only) spec.emplace_back("/");
  return spec;
}

xmlrpc::Value argument_types(const json::object& keyword) {
  xmlrpc::Struct types;
  each_object(&keyword, "args", [&](const json::object& arg) {
    auto type = string_member(arg, "type");
    auto name = string_member(arg, "name");
    const auto kind = string_member(arg, "kind");
    if (kind == "POSITIONAL_ONLY_MARKER" || kind == "NAMED_ONLY_MARKER") return true;
    if (!type.empty() && !name.empty()) types.emplace_back(std::move(name), std::move(type));
    return true;
  });
  return types;
}

xmlrpc::Value keyword_tags(const json::object& keyword) {
  xmlrpc::Array tags;
  if (const auto* t = keyword.if_contains("tags"); t && t->is_array())
    for (const auto& tag : t->get_array())
      if (tag.is_string()) tags.emplace_back(std::string(tag.get_string()));
  return tags;
}

std::string library_doc(const json::value& definition) {
  const auto* d = definition.if_object();
  return d ? string_member(*d, "doc") : std::string();
}

xmlrpc::Value library_information(const json::value& definition) {
  xmlrpc::Struct info;
  each_object(definition.if_object(), "keywords", [&](const json::object& kw) {
    info.emplace_back(string_member(kw, "name"), xmlrpc::Struct{{"args", argument_spec(kw)},
                                                                {"types", argument_types(kw)},
                                                                {"tags", keyword_tags(kw)},
                                                                {"doc", string_member(kw, "doc")}});
    return true;
  });
  info.emplace_back("__intro__", xmlrpc::Struct{{"doc", library_doc(definition)}});
  info.emplace_back("__init__", xmlrpc::Struct{{"doc", std::string()}});
  return info;
}

// ---- Answers ----

HttpResponse xml(std::string body) { return HttpResponse{200, "text/xml", std::move(body)}; }
HttpResponse fault(std::string_view message) { return xml(xmlrpc::write_fault(1, message)); }

namespace {
// A message (output, error, traceback) as a classic server sends it: text XML cannot carry (control
// characters) as base64 of its Latin-1 bytes, which Robot's Remote reads back as the same text (safe_str);
// beyond Latin-1 the writer puts U+FFFD for those characters.
xmlrpc::Value message_value(std::string text) {
  if (xmlrpc::xml_safe(text)) return xmlrpc::Value(std::move(text));
  if (auto latin1 = xmlrpc::to_latin1(text)) return xmlrpc::Value(xmlrpc::Binary{std::move(*latin1)});
  return xmlrpc::Value(std::move(text));
}
}  // namespace

// The struct Robot's Remote reads: status, return, output, error, traceback, continuable, fatal.
xmlrpc::Value keyword_result(const KeywordAnswer& answer, const std::string& library, const std::string& keyword,
                             std::size_t max_depth) {
  xmlrpc::Struct r;
  auto failed = [&](std::string error, std::string traceback = {}, bool continuable = false, bool fatal = false) {
    return xmlrpc::Struct{{"status", "FAIL"},
                          {"return", ""},
                          {"output", message_value(answer.output)},
                          {"error", message_value(std::move(error))},
                          {"traceback", message_value(std::move(traceback))},
                          {"continuable", continuable},
                          {"fatal", fatal}};
  };
  if (answer.failure) return failed(*answer.failure);
  // Read without a tree: a result may hold NaN or integers beyond 64 bits (see rjg::xmlrpc::from_json).
  const std::string_view text = answer.result_text;
  const auto members = protocol::members(text);
  if (const auto* error = protocol::find(members, "error"); error && error->kind == protocol::Kind::object) {
    const auto error_text = error->value.of(text);
    const auto fields = protocol::members(error_text);
    auto field = [&](std::string_view key) {
      const auto* m = protocol::find(fields, key);
      return m && m->kind == protocol::Kind::string ? protocol::decode_string(m->value.of(error_text)) : std::string();
    };
    const auto mode = field("mode");
    return failed(error_message(field("message"), field("type")), field("traceback"), mode == "CONTINUABLE",
                  mode == "FATAL");
  }
  xmlrpc::Value value{std::string()};
  if (const auto* returned = protocol::find(members, "result")) {
    try {
      value = rjg::xmlrpc::to_xmlrpc(rjg::xmlrpc::from_json(returned->value.of(text), "result", max_depth));
    } catch (const rjg::xmlrpc::ValueError& e) {
      return failed(fmt::format("The return value of keyword '{}' of library '{}' cannot be sent over XML-RPC: {}",
                                keyword, library, e.what()));
    }
  }
  return xmlrpc::Struct{{"status", "PASS"}, {"return", std::move(value)}, {"output", message_value(answer.output)},
                        {"error", ""},      {"traceback", ""},            {"continuable", false},
                        {"fatal", false}};
}

}  // namespace rjg::gateway::fronts
