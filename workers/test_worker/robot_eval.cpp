#include "workers/test_worker/robot_eval.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <utility>
#include <vector>

namespace rjg::test_worker {
namespace {

std::size_t backslashes_before(std::string_view s, std::size_t i) {
  std::size_t n = 0;
  while (i > n && s[i - n - 1] == '\\') ++n;
  return n;
}

// One variable found in a string: s[start, end) is "${...}", with its identifier and the text inside
// the braces.
struct Match {
  std::size_t start = 0;
  std::size_t end = 0;
  char identifier = '$';
  std::string_view base;
};

// robot.variables.search: the first $ @ & % followed by "{" that is not escaped, up to its matching
// closing brace (braces nest; an escaped brace does not count).
std::optional<Match> search_variable(std::string_view s, std::size_t from = 0) {
  for (std::size_t i = from; i + 1 < s.size(); ++i) {
    const char c = s[i];
    if ((c != '$' && c != '@' && c != '&' && c != '%') || s[i + 1] != '{') continue;
    if (backslashes_before(s, i) % 2 == 1) continue;
    int depth = 0;
    for (std::size_t j = i + 1; j < s.size(); ++j) {
      if (s[j] == '\\') {
        ++j;
        continue;
      }
      if (s[j] == '{') ++depth;
      else if (s[j] == '}' && --depth == 0) return Match{i, j + 1, c, s.substr(i + 2, j - i - 2)};
    }
    throw EvalError(fmt::format("Variable '{}' was not closed properly.", s.substr(i)));
  }
  return std::nullopt;
}

// Robot normalizes variable names: case, spaces and underscores do not count.
std::string normalize(std::string_view name) {
  std::string out;
  for (char c : name)
    if (c != ' ' && c != '_') out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

json::value list_value() { return json::array{"a", "b"}; }
json::value dict_value() { return json::object{{"a", "1"}}; }

std::optional<json::value> builtin(std::string_view name) {
  const std::string n = normalize(name);
  if (n == "space") return json::value(" ");
  if (n == "empty") return json::value("");
  if (n == "true") return json::value(true);
  if (n == "false") return json::value(false);
  if (n == "none") return json::value(nullptr);
  if (n == "list") return list_value();
  if (n == "dict") return dict_value();
  if (name == "\\n") return json::value("\n");
  return std::nullopt;
}

std::optional<json::value> number(std::string_view text) {
  std::string t(text);
  if (t.empty()) return std::nullopt;
  char* end = nullptr;
  const bool negative = t[0] == '-';
  std::string digits = negative || t[0] == '+' ? t.substr(1) : t;
  int base = 10;
  if (digits.size() > 2 && digits[0] == '0' && std::strchr("xXoObB", digits[1])) {
    base = std::strchr("xX", digits[1]) ? 16 : std::strchr("oO", digits[1]) ? 8 : 2;
    digits = digits.substr(2);
  }
  if (!digits.empty() && std::all_of(digits.begin(), digits.end(), [&](char c) {
        return base == 16 ? std::isxdigit(static_cast<unsigned char>(c)) != 0 : (c >= '0' && c < '0' + base);
      })) {
    const long long v = std::strtoll(digits.c_str(), &end, base);
    return json::value(negative ? -v : v);
  }
  const double d = std::strtod(t.c_str(), &end);
  if (end == t.c_str() + t.size() && t.find_first_not_of("0123456789.+-eE") == std::string::npos) return json::value(d);
  return std::nullopt;
}

// "Code runs": each open('PATH' in the expression creates PATH, as evaluating it would.
void run_expression(std::string_view expr) {
  for (std::size_t at = expr.find("open("); at != std::string_view::npos; at = expr.find("open(", at + 5)) {
    const std::size_t q = at + 5;
    if (q >= expr.size() || (expr[q] != '\'' && expr[q] != '"')) continue;
    const std::size_t close = expr.find(expr[q], q + 1);
    if (close == std::string_view::npos) continue;
    const std::string path(expr.substr(q + 1, close - q - 1));
    if (std::FILE* f = std::fopen(path.c_str(), "w")) std::fclose(f);
  }
}

json::value evaluated(std::string_view expr) {
  run_expression(expr);
  return json::value(fmt::format("EVALUATED({})", expr));
}

json::value resolve(const Match& m) {
  const std::string_view base = m.base;
  const std::string whole = fmt::format("{}{{{}}}", m.identifier, base);
  switch (m.identifier) {
    case '%': {
      const auto eq = base.find('=');
      const std::string name(base.substr(0, eq));
      if (const char* v = std::getenv(name.c_str())) return json::value(v);
      if (eq != std::string_view::npos) return json::value(base.substr(eq + 1));
      throw EvalError(fmt::format("Environment variable '{}' not found.", whole));
    }
    case '@':
      if (normalize(base) == "list") return list_value();
      if (normalize(base) == "empty") return json::array();
      throw EvalError(fmt::format("Variable '{}' not found.", whole));
    case '&':
      if (normalize(base) == "dict") return dict_value();
      if (normalize(base) == "empty") return json::object();
      throw EvalError(fmt::format("Variable '{}' not found.", whole));
    default:
      break;
  }
  // ${{expr}}: inline Python.
  if (base.size() >= 2 && base.front() == '{' && base.back() == '}') {
    const std::string_view expr = base.substr(1, base.size() - 2);
    if (auto n = number(expr); n && n->is_int64()) return *n;
    return evaluated(expr);
  }
  if (auto v = builtin(base)) return *v;
  if (auto n = number(base)) return *n;
  // Extended syntax: a known variable followed by Python (attribute access, calls, indexing, operators).
  std::size_t name_end = 0;
  while (name_end < base.size() &&
         (std::isalnum(static_cast<unsigned char>(base[name_end])) || base[name_end] == '_' || base[name_end] == ' '))
    ++name_end;
  if (name_end > 0 && name_end < base.size() && builtin(base.substr(0, name_end))) return evaluated(base);
  throw EvalError(fmt::format("Variable '{}' not found.", whole));
}

std::string python_repr_str(std::string_view s) {
  const bool use_double = s.find('\'') != std::string_view::npos && s.find('"') == std::string_view::npos;
  const char q = use_double ? '"' : '\'';
  std::string out(1, q);
  for (unsigned char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == static_cast<unsigned char>(q)) out += std::string("\\") + q;
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7f) out += fmt::format("\\x{:02x}", c);
    else out += static_cast<char>(c);
  }
  return out + q;
}

std::string python_repr(const json::value& v) {
  if (const auto* s = v.if_string()) return python_repr_str(*s);
  return python_str(v);
}

std::string to_text(const json::value& v) { return python_str(v); }

bool is_whole(std::string_view s, const std::optional<Match>& m) { return m && m->start == 0 && m->end == s.size(); }

std::string replace_string(std::string_view s) {
  std::string out;
  std::size_t pos = 0;
  while (auto m = search_variable(s, pos)) {
    out += unescape(s.substr(pos, m->start - pos));
    out += to_text(resolve(*m));
    pos = m->end;
  }
  return out + unescape(s.substr(pos));
}

// robot.utils.split_from_equals: at the first "=" that is not escaped and not inside a variable.
std::optional<std::pair<std::string, std::string>> split_from_equals(std::string_view s) {
  if (s.find('=') == std::string_view::npos) return std::nullopt;
  std::size_t pos = 0;
  for (;;) {
    std::optional<Match> m;
    try {
      m = search_variable(s, pos);
    } catch (const EvalError&) {
      m.reset();  // ignore_errors=True: an unclosed variable is plain text here
    }
    const std::size_t stop = m ? m->start : s.size();
    for (std::size_t i = pos; i < stop; ++i)
      if (s[i] == '=' && backslashes_before(s, i) % 2 == 0)
        return std::pair{std::string(s.substr(0, i)), std::string(s.substr(i + 1))};
    if (!m) return std::nullopt;
    pos = m->end;
  }
}

bool is_control_word(const json::value& v, std::initializer_list<std::string_view> words) {
  const auto* s = v.if_string();
  return s && std::find(words.begin(), words.end(), std::string_view(*s)) != words.end();
}

using Named = std::vector<std::pair<json::value, json::value>>;

// NamedArgumentResolver, then VariableReplacer, for a signature with **kwargs (every name accepted).
json::object resolve_arguments(const json::array& args, const json::object& named_args, const char* what,
                               const char* named_key) {
  json::array positional;
  Named named;
  std::vector<std::string> dict_variables;
  for (const auto& arg : args) {
    const auto* s = arg.if_string();
    if (s) {
      std::optional<Match> m;
      try {
        m = search_variable(*s);
      } catch (const EvalError&) {
      }
      if (is_whole(*s, m) && m->identifier == '&') {
        const json::value dict = resolve(*m);
        for (const auto& [k, v] : dict.as_object()) named.emplace_back(json::value(k), v);
        continue;
      }
      if (auto split = split_from_equals(*s)) {
        bool name_ok = true;
        try {
          replace_scalar(json::value(split->first));
        } catch (const EvalError&) {
          name_ok = false;
        }
        if (name_ok) {
          named.emplace_back(json::value(split->first), json::value(split->second));
          continue;
        }
      }
    }
    if (!named.empty()) throw EvalError(fmt::format("{} got positional argument after named arguments.", what));
    positional.push_back(arg);
  }
  for (const auto& [k, v] : named_args) named.emplace_back(json::value(k), v);

  json::array resolved;
  for (const auto& arg : positional) {
    const auto* s = arg.if_string();
    std::optional<Match> m = s ? search_variable(*s) : std::nullopt;
    if (s && is_whole(*s, m) && m->identifier == '@') {
      const json::value list = resolve(*m);
      for (const auto& item : list.as_array()) resolved.push_back(item);
      continue;
    }
    resolved.push_back(replace_scalar(arg));
  }
  json::object out_named;
  for (const auto& [k, v] : named) {
    json::value name = replace_scalar(k);
    if (!name.is_string()) throw EvalError("Argument names must be strings.");
    out_named[name.as_string()] = replace_scalar(v);
  }
  return json::object{{"args", std::move(resolved)}, {named_key, std::move(out_named)}};
}

}  // namespace

std::string unescape(std::string_view s) {
  if (s.find('\\') == std::string_view::npos) return std::string(s);
  std::string out;
  const auto hex_len = [](char marker) { return marker == 'x' ? 2u : marker == 'u' ? 4u : 8u; };
  for (std::size_t i = 0; i < s.size();) {
    if (s[i] != '\\') {
      out += s[i++];
      continue;
    }
    std::size_t n = 0;
    while (i + n < s.size() && s[i + n] == '\\') ++n;
    out.append(n / 2, '\\');
    i += n;
    if (n % 2 == 0 || i >= s.size()) continue;  // a trailing odd backslash escapes nothing and is dropped
    const char c = s[i];
    if (c == 'n') out += '\n', ++i;
    else if (c == 'r') out += '\r', ++i;
    else if (c == 't') out += '\t', ++i;
    else if (c == 'x' || c == 'u' || c == 'U') {
      const std::size_t len = hex_len(c);
      const auto digits = s.substr(i + 1, len);
      if (digits.size() == len &&
          std::all_of(digits.begin(), digits.end(), [](char d) { return std::isxdigit(static_cast<unsigned char>(d)); })) {
        const unsigned long cp = std::strtoul(std::string(digits).c_str(), nullptr, 16);
        if (cp > 0x10ffff) out += 'U', out += digits;
        else if (cp < 0x80) out += static_cast<char>(cp);
        else if (cp < 0x800) out += static_cast<char>(0xc0 | cp >> 6), out += static_cast<char>(0x80 | (cp & 0x3f));
        else if (cp < 0x10000)
          out += static_cast<char>(0xe0 | cp >> 12), out += static_cast<char>(0x80 | (cp >> 6 & 0x3f)),
              out += static_cast<char>(0x80 | (cp & 0x3f));
        else
          out += static_cast<char>(0xf0 | cp >> 18), out += static_cast<char>(0x80 | (cp >> 12 & 0x3f)),
              out += static_cast<char>(0x80 | (cp >> 6 & 0x3f)), out += static_cast<char>(0x80 | (cp & 0x3f));
        i += 1 + len;
      }
      // without valid hex digits the marker stays as it is, its backslash dropped
    }
    // any other character stays; its backslash is dropped
  }
  return out;
}

json::value replace_scalar(const json::value& v) {
  const auto* s = v.if_string();
  if (!s) return v;
  auto m = search_variable(*s);
  if (!m) return json::value(unescape(*s));
  if (is_whole(*s, m)) return resolve(*m);
  return json::value(replace_string(*s));
}

json::object resolve_keyword_call(const json::array& args, const json::object& kwargs) {
  json::array kept;
  for (const auto& a : args)
    if (!is_control_word(a, {"AND", "ELSE", "ELSE IF"})) kept.push_back(a);
  return resolve_arguments(kept, kwargs, "Keyword 'Echo Arguments'", "kwargs");
}

json::object resolve_import(const json::array& args, const json::object& kw_args) {
  json::array init_args = args;
  for (const auto& [k, v] : kw_args) init_args.emplace_back(fmt::format("{}={}", std::string_view(k), python_str(v)));
  std::optional<json::value> alias;
  if (init_args.size() >= 2 && is_control_word(init_args[init_args.size() - 2], {"AS", "WITH NAME"})) {
    alias = init_args.back();
    init_args.pop_back();
    init_args.pop_back();
  }
  json::object out = resolve_arguments(init_args, {}, "Library 'TestLibrary'", "kw_args");
  if (alias) out["alias"] = replace_scalar(*alias);
  return out;
}

std::string python_str(const json::value& v) {
  switch (v.kind()) {
    case json::kind::null: return "None";
    case json::kind::bool_: return v.get_bool() ? "True" : "False";
    case json::kind::int64: return std::to_string(v.get_int64());
    case json::kind::uint64: return std::to_string(v.get_uint64());
    case json::kind::double_: return json::serialize(v);
    case json::kind::string: return std::string(v.get_string());
    case json::kind::array: {
      std::string out = "[";
      for (const auto& item : v.get_array()) out += (out.size() > 1 ? ", " : "") + python_repr(item);
      return out + "]";
    }
    case json::kind::object: {
      std::string out = "{";
      for (const auto& [k, item] : v.get_object())
        out += (out.size() > 1 ? ", " : "") + python_repr_str(k) + ": " + python_repr(item);
      return out + "}";
    }
  }
  return {};
}

}  // namespace rjg::test_worker
