// Argument binding and Robot-like conversion of the simple types (int, float, bool, str).
#include "workers/sdk/sdk.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>

namespace rjg::sdk {
namespace {

enum class Simple { none, integer, floating, boolean, string };

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

Simple simple_type(std::string_view type) {
  const std::string t = lower(type);
  if (t == "int" || t == "integer") return Simple::integer;
  if (t == "float" || t == "double") return Simple::floating;
  if (t == "bool" || t == "boolean") return Simple::boolean;
  if (t == "str" || t == "string") return Simple::string;
  return Simple::none;
}

// Robot accepts spaces and underscores as digit separators ("1 000", "1_000").
std::string strip_separators(std::string_view s) {
  std::string out;
  for (char c : s)
    if (c != '_' && c != ' ' && c != '\t') out += c;
  return out;
}

std::optional<double> parse_double(std::string_view text) {
  std::string s = strip_separators(text);
  std::string_view v = s;
  if (!v.empty() && v.front() == '+') v.remove_prefix(1);
  if (v.empty()) return std::nullopt;
  double d = 0;
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), d);
  if (ec != std::errc() || end != v.data() + v.size()) return std::nullopt;
  return d;
}

std::optional<std::int64_t> integral_double(double d) {
  // 2^63 as a double; the range check keeps the cast defined.
  constexpr double kLimit = 9223372036854775808.0;
  if (!std::isfinite(d) || d != std::trunc(d) || d < -kLimit || d >= kLimit) return std::nullopt;
  return static_cast<std::int64_t>(d);
}

// "42", "-7", "0x1F", "0o17", "0b101", "1_000", and since Robot 7 "3.0" or "1e3" (integral floats).
std::optional<std::int64_t> parse_int(std::string_view text) {
  std::string s = strip_separators(text);
  std::string_view v = s;
  bool negative = false;
  if (!v.empty() && (v.front() == '+' || v.front() == '-')) {
    negative = v.front() == '-';
    v.remove_prefix(1);
  }
  int base = 10;
  if (v.size() > 2 && v[0] == '0') {
    const char p = static_cast<char>(std::tolower(static_cast<unsigned char>(v[1])));
    base = p == 'x' ? 16 : p == 'o' ? 8 : p == 'b' ? 2 : 10;
    if (base != 10) v.remove_prefix(2);
  }
  if (v.empty()) return std::nullopt;
  std::uint64_t magnitude = 0;
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), magnitude, base);
  if (ec == std::errc() && end == v.data() + v.size()) {
    constexpr std::uint64_t kMaxNegative = std::uint64_t{1} << 63;
    if (negative && magnitude <= kMaxNegative) return static_cast<std::int64_t>(0 - magnitude);
    if (!negative && magnitude < kMaxNegative) return static_cast<std::int64_t>(magnitude);
    return std::nullopt;
  }
  if (base != 10) return std::nullopt;
  if (auto d = parse_double(text)) return integral_double(*d);
  return std::nullopt;
}

std::optional<json::value> to_int(const json::value& v) {
  if (v.is_int64()) return v;
  if (v.is_uint64()) {
    if (v.get_uint64() > static_cast<std::uint64_t>(INT64_MAX)) return std::nullopt;
    return json::value(static_cast<std::int64_t>(v.get_uint64()));
  }
  if (v.is_double()) {
    if (auto i = integral_double(v.get_double())) return json::value(*i);
    return std::nullopt;
  }
  if (v.is_string()) {
    if (auto i = parse_int(v.get_string())) return json::value(*i);
  }
  return std::nullopt;
}

std::optional<json::value> to_float(const json::value& v) {
  if (v.is_number()) return json::value(v.to_number<double>());
  if (v.is_string()) {
    if (auto d = parse_double(v.get_string())) return json::value(*d);
  }
  return std::nullopt;
}

std::optional<json::value> to_bool(const json::value& v) {
  if (v.is_bool()) return v;
  if (v.is_int64() || v.is_uint64()) return json::value(v.to_number<double>() != 0);
  if (!v.is_string()) return std::nullopt;
  std::string s = lower(v.get_string());
  s.erase(0, s.find_first_not_of(" \t"));
  s.erase(s.find_last_not_of(" \t") + 1);
  if (s == "true" || s == "yes" || s == "on" || s == "1") return json::value(true);
  if (s == "false" || s == "no" || s == "off" || s == "0" || s.empty()) return json::value(false);
  return std::nullopt;
}

std::optional<json::value> to_str(const json::value& v) {
  if (v.is_string()) return v;
  // Python's str() spelling, which is what a Robot user would expect to see.
  if (v.is_bool()) return json::value(v.get_bool() ? "True" : "False");
  if (v.is_number()) return json::value(json::serialize(v));
  return std::nullopt;
}

std::string plural(std::size_t n, std::string_view word) {
  return fmt::format("{} {}{}", n, word, n == 1 ? "" : "s");
}

}  // namespace

std::optional<json::value> convert(const json::value& value, std::string_view type) {
  switch (simple_type(type)) {
    case Simple::integer: return to_int(value);
    case Simple::floating: return to_float(value);
    case Simple::boolean: return to_bool(value);
    case Simple::string: return to_str(value);
    case Simple::none: return value;
  }
  return value;
}

namespace {

class Binder {
 public:
  Binder(const std::string& library, const Keyword& keyword)
      : keyword_(keyword), who_(fmt::format("Keyword '{}.{}'", library, keyword.name)) {
    for (const Arg& a : keyword.args) {
      if (a.kind == ArgKind::positional_or_named) positional_.push_back(&a);
      else if (a.kind == ArgKind::var_positional) var_positional_ = &a;
      else if (a.kind == ArgKind::var_named) var_named_ = &a;
    }
  }

  json::object bind(const json::array& args, const json::object& kwargs) {
    bind_positional(args);
    bind_named(kwargs);
    fill_defaults();
    convert_given();
    return std::move(bound_);
  }

 private:
  [[noreturn]] void fail(std::string message, std::string type = "TypeError") const {
    throw KeywordError(std::move(message), std::move(type));
  }

  void bind_positional(const json::array& args) {
    const std::size_t n = std::min(args.size(), positional_.size());
    for (std::size_t i = 0; i < n; ++i) bound_[positional_[i]->name] = args[i];
    if (args.size() <= positional_.size()) return;
    if (!var_positional_) {
      const auto required = static_cast<std::size_t>(
          std::count_if(positional_.begin(), positional_.end(), [](const Arg* a) { return !a->default_value; }));
      const std::string expected = required == positional_.size()
                                       ? plural(required, "argument")
                                       : fmt::format("{} to {}", required, plural(positional_.size(), "argument"));
      fail(fmt::format("{} expected {}, got {}.", who_, expected, args.size()));
    }
    bound_[var_positional_->name] = json::array(args.begin() + static_cast<std::ptrdiff_t>(n), args.end());
  }

  void bind_named(const json::object& kwargs) {
    json::object rest;
    for (const auto& [name, value] : kwargs) {
      const Arg* target = nullptr;
      for (const Arg& a : keyword_.args)
        if (a.name == name && (a.kind == ArgKind::positional_or_named || a.kind == ArgKind::named_only)) target = &a;
      if (target) {
        if (bound_.contains(name)) fail(fmt::format("{} got multiple values for argument '{}'.", who_, std::string_view(name)));
        bound_[name] = value;
      } else if (var_named_) {
        rest[name] = value;
      } else {
        fail(fmt::format("{} got unexpected named argument '{}'.", who_, std::string_view(name)));
      }
    }
    if (var_named_) bound_[var_named_->name] = std::move(rest);
  }

  void fill_defaults() {
    for (const Arg& a : keyword_.args) {
      if (bound_.contains(a.name)) continue;
      if (a.kind == ArgKind::var_positional) {
        bound_[a.name] = json::array();
      } else if (a.default_value) {
        bound_[a.name] = *a.default_value;
        defaulted_.push_back(&a);  // defaults are used as declared, like Robot does
      } else {
        fail(fmt::format("{} missing value for argument '{}'.", who_, a.name));
      }
    }
  }

  void convert_given() {
    for (const Arg& a : keyword_.args) {
      if (a.type.empty() || std::find(defaulted_.begin(), defaulted_.end(), &a) != defaulted_.end()) continue;
      json::value& v = bound_[a.name];
      if (a.kind == ArgKind::var_positional) {
        for (json::value& item : v.get_array()) item = convert_one(a, item);
      } else if (a.kind == ArgKind::var_named) {
        for (auto& entry : v.get_object()) entry.value() = convert_one(a, entry.value());
      } else {
        v = convert_one(a, v);
      }
    }
  }

  json::value convert_one(const Arg& a, const json::value& v) const {
    // `x: str = None` is Optional[str] in Python: an explicit None stays None.
    if (v.is_null() && a.default_value && a.default_value->is_null()) return v;
    if (auto converted = convert(v, a.type)) return std::move(*converted);
    fail(fmt::format("{}: argument '{}' got value '{}' that cannot be converted to {}.", who_, a.name, show_value(v), a.type),
         "ValueError");
  }

  const Keyword& keyword_;
  const std::string who_;
  std::vector<const Arg*> positional_;
  const Arg* var_positional_ = nullptr;
  const Arg* var_named_ = nullptr;
  std::vector<const Arg*> defaulted_;
  json::object bound_;
};

}  // namespace

json::object bind_arguments(const std::string& library, const Keyword& keyword, const json::array& args,
                            const json::object& kwargs) {
  return Binder(library, keyword).bind(args, kwargs);
}

std::string show_value(const json::value& v) {
  return log::valid_utf8(v.is_string() ? std::string_view(v.get_string()) : json::serialize(v), 80);
}

}  // namespace rjg::sdk
