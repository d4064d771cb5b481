// ansible-doc's JSON as the keyword definition of a modules= entry (module_keyword).
#include "workers/ansible/adapter.hpp"

#include "common/pickle/python_json.hpp"
#include "workers/ansible/text.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <utility>

namespace rjg::ansible {
namespace {

// Ansible's documentation markup (C(code), I(italic), B(bold), M(module), U(url), L(text,url), O(option),
// V(value)) as Robot Framework's.
std::string robot_doc(std::string_view text) {
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    const bool marker = std::string_view("CIBMUOLV").find(c) != std::string_view::npos && i + 1 < text.size() &&
                        text[i + 1] == '(' && (i == 0 || !std::isalnum(static_cast<unsigned char>(text[i - 1])));
    const auto close = marker ? text.find(')', i + 2) : std::string_view::npos;
    if (close == std::string_view::npos) {
      out += c;
      continue;
    }
    const auto inner = text.substr(i + 2, close - i - 2);
    switch (c) {
      case 'I': out += fmt::format("_{}_", inner); break;
      case 'B': out += fmt::format("*{}*", inner); break;
      case 'U': out += inner; break;
      case 'L': {
        const auto comma = inner.rfind(',');
        out += comma == std::string_view::npos ? std::string(inner)
                                               : fmt::format("{} ({})", trim(inner.substr(0, comma)), trim(inner.substr(comma + 1)));
        break;
      }
      default: out += fmt::format("``{}``", inner);
    }
    i = close;
  }
  return out;
}

// ansible-doc gives a description as a text or a list of paragraphs.
std::vector<std::string> paragraphs(const json::value* v) {
  std::vector<std::string> out;
  if (!v) return out;
  if (v->is_string()) out.push_back(robot_doc(v->get_string()));
  if (v->is_array())
    for (const auto& p : v->get_array())
      if (p.is_string()) out.push_back(robot_doc(p.get_string()));
  return out;
}

std::string robot_type(std::string_view ansible_type) {
  if (ansible_type == "str" || ansible_type == "path") return "str";
  for (std::string_view same : {"int", "float", "bool", "list", "dict"})
    if (ansible_type == same) return std::string(same);
  return {};  // raw, jsonarg, bytes, bits, ...: Ansible converts them itself
}

json::object named_only(std::string_view name, std::string_view type, const json::value* default_value) {
  json::object arg{{"name", name}, {"type", type}, {"kind", "NAMED_ONLY"}, {"required", true},
                   {"has_default", default_value != nullptr}};
  // A Python client reads a default as a value: a nested one (a list of dicts) pickled.
  if (default_value)
    if (auto d = pickle::definition_default(*default_value, name)) arg["default"] = std::move(*d);
  return arg;
}

}  // namespace

json::object module_keyword(std::string_view module, const json::object& doc_entry) {
  static const json::object kNone;
  const auto* doc_value = doc_entry.if_contains("doc");
  const json::object& doc = doc_value && doc_value->is_object() ? doc_value->get_object() : kNone;
  const auto* options_value = doc.if_contains("options");
  const json::object& options = options_value && options_value->is_object() ? options_value->get_object() : kNone;

  std::string text;
  if (const auto* s = doc.if_contains("short_description"); s && s->is_string())
    text = robot_doc(s->get_string()) + "\n\n";
  for (const auto& p : paragraphs(doc.if_contains("description"))) text += p + "\n\n";
  text += fmt::format("Runs the Ansible module ``{}`` once on the library's host and returns its result as a "
                      "dictionary, as `Run Action` does; a failed module fails the keyword.\n\n",
                      module);

  // Required options first, each group in ansible-doc's (alphabetical) order.
  std::vector<std::pair<std::string_view, const json::object*>> ordered;
  for (const auto& [name, option] : options)
    if (option.is_object() && name != "check_mode" && name != "diff") ordered.emplace_back(name, &option.get_object());
  std::stable_partition(ordered.begin(), ordered.end(), [](const auto& o) {
    const auto* required = o.second->if_contains("required");
    return required && *required == true;
  });

  json::array args;
  std::string option_lines;
  for (const auto& [name, option] : ordered) {
    const auto* type = option->if_contains("type");
    const std::string ansible_type = type && type->is_string() ? std::string(type->get_string()) : "str";
    const auto* required = option->if_contains("required");
    const bool is_required = required && *required == true;
    const auto* default_value = option->if_contains("default");
    static const json::value kNull;
    args.push_back(named_only(name, robot_type(ansible_type), is_required ? nullptr : default_value ? default_value : &kNull));

    std::vector<std::string> facts{is_required ? "required, " + ansible_type : ansible_type};
    if (const auto* aliases = option->if_contains("aliases"); aliases && aliases->is_array() && !aliases->get_array().empty()) {
      std::vector<std::string> names;
      for (const auto& a : aliases->get_array()) names.push_back(text_of(a));
      facts.push_back(fmt::format("aliases {} (through Run Action)", fmt::join(names, ", ")));
    }
    if (const auto* choices = option->if_contains("choices"); choices && choices->is_array()) {
      std::vector<std::string> names;
      for (const auto& c : choices->get_array()) names.push_back(text_of(c));
      facts.push_back(fmt::format("one of {}", fmt::join(names, ", ")));
    }
    if (default_value && !is_required) facts.push_back("default " + text_of(*default_value));
    const auto described = paragraphs(option->if_contains("description"));
    option_lines += fmt::format("- ``{}`` ({}){}\n", name, fmt::join(facts, "; "),
                                described.empty() ? "" : ": " + described.front());
  }
  const json::value kFalse(false);
  args.push_back(named_only("check_mode", "bool", &kFalse));
  args.push_back(named_only("diff", "bool", &kFalse));
  if (!option_lines.empty()) text += "Options (all named):\n" + option_lines + "\n";
  text += "``check_mode``: report what would change, changing nothing. ``diff``: report the differences the "
          "module makes (in the result's ``diff``, when the module supports it).";

  return json::object{{"name", keyword_name(module)}, {"args", std::move(args)}, {"doc", std::move(text)},
                      {"tags", json::array{"ansible"}}};
}

}  // namespace rjg::ansible
