// The one-task playbook as YAML flow, every string tagged !unsafe (playbook, unsafe_yaml).
#include "workers/ansible/adapter.hpp"

#include <fmt/format.h>

#include <string>
#include <utility>

namespace rjg::ansible {
namespace {

void write_yaml_string(std::string& out, std::string_view s) {
  out += "!unsafe \"";
  for (std::size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7f) {
      out += fmt::format("\\x{:02X}", c);
    } else if (c == 0xc2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) >= 0x80 &&
               static_cast<unsigned char>(s[i + 1]) <= 0x9f) {
      // C1 controls are not printable YAML: escaped as the code points they are.
      out += fmt::format("\\x{:02X}", static_cast<unsigned char>(s[++i]));
    } else if (c == 0xe2 && (s.substr(i, 3) == "\xe2\x80\xa8" || s.substr(i, 3) == "\xe2\x80\xa9")) {
      // U+2028 and U+2029 are line breaks to YAML 1.1, even inside a quoted string (the spaces around
      // them would fold away, and "---" after one would end the document).
      out += s[i + 2] == '\xa8' ? "\\u2028" : "\\u2029", i += 2;
    } else if (c == 0xef && s.substr(i, 3) == "\xef\xbf\xbe") {
      out += "\\uFFFE", i += 2;
    } else if (c == 0xef && s.substr(i, 3) == "\xef\xbf\xbf") {
      out += "\\uFFFF", i += 2;
    } else {
      out += static_cast<char>(c);
    }
  }
  out += '"';
}

void write_yaml(std::string& out, const json::value& v) {
  switch (v.kind()) {
    case json::kind::null: out += "null"; break;
    case json::kind::bool_: out += v.get_bool() ? "true" : "false"; break;
    case json::kind::int64: out += std::to_string(v.get_int64()); break;
    case json::kind::uint64: out += std::to_string(v.get_uint64()); break;
    case json::kind::double_: {
      // YAML 1.1 (PyYAML) reads a float only with a dot, and an exponent only with a sign.
      const double d = v.get_double();
      if (d != d) out += ".nan";
      else if (d == d + d && d != 0) out += d > 0 ? ".inf" : "-.inf";
      else {
        auto text = fmt::format("{}", d);
        const auto e = text.find('e');
        if (text.find('.') == std::string::npos) text.insert(e == std::string::npos ? text.size() : e, ".0");
        out += text;
      }
      break;
    }
    case json::kind::string: write_yaml_string(out, v.get_string()); break;
    case json::kind::array: {
      out += '[';
      bool first = true;
      for (const auto& item : v.get_array()) {
        if (!std::exchange(first, false)) out += ", ";
        write_yaml(out, item);
      }
      out += ']';
      break;
    }
    case json::kind::object: {
      // Explicit keys ("? "): PyYAML drops a plain flow key longer than 1024 characters.
      out += '{';
      bool first = true;
      for (const auto& [key, item] : v.get_object()) {
        if (!std::exchange(first, false)) out += ", ";
        out += "? ";
        write_yaml_string(out, key);
        out += ": ";
        write_yaml(out, item);
      }
      out += '}';
      break;
    }
  }
}

}  // namespace

std::string unsafe_yaml(const json::value& value) {
  std::string out;
  write_yaml(out, value);
  return out;
}

std::string playbook(std::string_view module, const json::object& args, const json::object& vars, bool check_mode,
                     bool diff) {
  // The play's own keys are ours and stay plain; the variables' names are checked words.
  std::string vars_yaml = "{";
  for (const auto& [name, value] : vars) {
    if (vars_yaml.size() > 1) vars_yaml += ", ";
    vars_yaml += fmt::format("\"{}\": ", std::string_view(name));
    write_yaml(vars_yaml, value);
  }
  vars_yaml += "}";
  return fmt::format(
      "[{{\"hosts\": \"target\", \"gather_facts\": false, \"vars\": {},\n"
      "  \"tasks\": [{{\"name\": \"{}\", \"{}\": {}, \"check_mode\": {}, \"diff\": {}}}]}}]\n",
      vars_yaml, module, module, unsafe_yaml(args), check_mode, diff);
}

}  // namespace rjg::ansible
