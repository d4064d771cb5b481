// Library: keyword registration, signature checks, lookup and the LibraryDefinition.
#include "workers/sdk/sdk.hpp"

#include "common/pickle/python_json.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <set>

namespace rjg::sdk {
namespace {


// Rejects signatures that Robot Framework could not call, at registration time rather than at the
// first call, so a library author sees the mistake on start-up.
void check_signature(const std::string& keyword, const std::vector<Arg>& args) {
  auto bad = [&](const std::string& why) {
    throw std::invalid_argument(fmt::format("keyword '{}': {}", keyword, why));
  };
  std::set<std::string_view> names;
  int last_kind = -1;
  bool optional_positional_seen = false;
  for (const Arg& a : args) {
    if (a.name.empty()) bad("an argument has no name");
    if (!names.insert(a.name).second) bad(fmt::format("argument '{}' is declared twice", a.name));
    const int kind = static_cast<int>(a.kind);
    if (kind < last_kind) bad(fmt::format("argument '{}' is out of order (positional, *varargs, named-only, **kwargs)", a.name));
    const bool is_var = a.kind == ArgKind::var_positional || a.kind == ArgKind::var_named;
    if (is_var && kind == last_kind) bad(fmt::format("more than one {}", to_string(a.kind)));
    if (is_var && a.default_value) bad(fmt::format("argument '{}' is variadic and cannot have a default", a.name));
    if (a.kind == ArgKind::positional_or_named) {
      if (a.default_value) optional_positional_seen = true;
      else if (optional_positional_seen) bad(fmt::format("required argument '{}' follows an optional one", a.name));
    }
    last_kind = kind;
  }
}

json::object argument_definition(const Arg& a) {
  json::object o;
  o["name"] = a.name;
  o["type"] = a.type;
  o["has_default"] = a.default_value.has_value();
  // A Python client reads the default as it reads a value (a nested one pickled); the body still
  // gets the default as declared.
  if (a.default_value)
    if (auto d = pickle::definition_default(*a.default_value, a.name)) o["default"] = std::move(*d);
  o["required"] = true;  // reserved by the protocol, always true
  o["kind"] = to_string(a.kind);
  if (!a.doc.empty()) o["doc"] = a.doc;
  return o;
}

}  // namespace

std::string_view to_string(ArgKind kind) {
  switch (kind) {
    case ArgKind::positional_or_named: return "POSITIONAL_OR_NAMED";
    case ArgKind::var_positional: return "VAR_POSITIONAL";
    case ArgKind::named_only: return "NAMED_ONLY";
    case ArgKind::var_named: return "VAR_NAMED";
  }
  return "POSITIONAL_OR_NAMED";
}

Library::Library(std::string name, std::string doc, std::string version)
    : name_(std::move(name)), doc_(std::move(doc)), version_(std::move(version)) {
  if (name_.empty()) throw std::invalid_argument("a library needs a name");
}

Library& Library::keyword(std::string name, std::vector<Arg> args, std::string doc, KeywordBody body,
                          std::vector<std::string> tags) {
  if (name.empty()) throw std::invalid_argument("a keyword needs a name");
  if (!body) throw std::invalid_argument(fmt::format("keyword '{}' has no body", name));
  const std::string key = normalize_name(name);
  for (const Keyword& k : keywords_)
    if (normalize_name(k.name) == key) throw std::invalid_argument(fmt::format("keyword '{}' is declared twice", name));
  check_signature(name, args);
  keywords_.push_back({std::move(name), std::move(args), std::move(doc), std::move(body), std::move(tags)});
  return *this;
}

Library& Library::raw_keyword(std::string name, std::string doc, KeywordBody body) {
  keyword(std::move(name), {Arg::var_positional("args"), Arg::var_named("kwargs")}, std::move(doc), std::move(body));
  keywords_.back().raw = true;
  return *this;
}

Library& Library::result_form(std::string_view keyword, ResultForm form) {
  auto it = std::find_if(keywords_.begin(), keywords_.end(), [&](const Keyword& k) { return k.name == keyword; });
  if (it == keywords_.end())
    throw std::invalid_argument(fmt::format("result_form: no keyword named '{}' is registered", keyword));
  it->result_form = form;
  return *this;
}

Library& Library::dynamic_keywords(KeywordBody body) {
  dynamic_body_ = std::move(body);
  return *this;
}

Library& Library::on_import(std::function<void(ImportContext&)> hook) {
  import_hook_ = std::move(hook);
  return *this;
}

Library& Library::on_initialize(std::function<bool(const json::value&)> hook) {
  initialize_hook_ = std::move(hook);
  return *this;
}

std::string normalize_name(std::string_view name) {
  std::string out;
  for (char c : name) {
    if (c == ' ' || c == '_') continue;
    out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return out;
}

void add_argument_markers(json::object& definition) {
  auto* keywords = definition.if_contains("keywords");
  if (!keywords || !keywords->is_array()) return;
  for (auto& keyword : keywords->get_array()) {
    auto* args = keyword.is_object() ? keyword.get_object().if_contains("args") : nullptr;
    if (!args || !args->is_array()) continue;
    auto kind_of = [](const json::value& arg) -> std::string_view {
      const auto* o = arg.if_object();
      const auto* kind = o ? o->if_contains("kind") : nullptr;
      return kind && kind->is_string() ? std::string_view(kind->get_string()) : std::string_view();
    };
    auto marker = [](std::string_view kind) {
      // As the reference server sends a marker (Robot's ArgInfo of it has no name).
      return json::object{{"name", ""}, {"kind", kind}, {"required", true}, {"has_default", false}};
    };
    json::array with;
    bool star = false;             // "*", "*varargs" or a named-only marker seen
    bool positional_only = false;  // the argument before was POSITIONAL_ONLY
    for (auto& arg : args->get_array()) {
      const auto kind = kind_of(arg);
      if (positional_only && kind != "POSITIONAL_ONLY" && kind != "POSITIONAL_ONLY_MARKER")
        with.push_back(marker("POSITIONAL_ONLY_MARKER"));
      positional_only = kind == "POSITIONAL_ONLY";
      if (kind == "NAMED_ONLY" && !star) with.push_back(marker("NAMED_ONLY_MARKER"));
      if (kind == "NAMED_ONLY" || kind == "NAMED_ONLY_MARKER" || kind == "VAR_POSITIONAL") star = true;
      with.push_back(std::move(arg));
    }
    if (positional_only) with.push_back(marker("POSITIONAL_ONLY_MARKER"));
    *args = std::move(with);
  }
}

const Keyword* Library::find(std::string_view name) const {
  return find_by_name(keywords_, name, [](const Keyword& k) -> std::string_view { return k.name; });
}

json::object Library::definition() const {
  json::array keywords;
  for (const Keyword& k : keywords_) {
    json::array args;
    for (const Arg& a : k.args) args.push_back(argument_definition(a));
    json::array tags;
    for (const std::string& t : k.tags) tags.push_back(json::string(t));
    json::object kw;
    kw["name"] = k.name;
    kw["args"] = std::move(args);
    kw["doc"] = k.doc;
    kw["tags"] = std::move(tags);
    keywords.push_back(std::move(kw));
  }
  json::object def;
  def["name"] = name_;
  def["keywords"] = std::move(keywords);
  def["doc"] = doc_;
  def["doc_format"] = "ROBOT";
  // One instance per import token; nothing is shared between imports, so GLOBAL is honest.
  def["scope"] = "GLOBAL";
  def["version"] = version_;
  return def;
}

}  // namespace rjg::sdk
