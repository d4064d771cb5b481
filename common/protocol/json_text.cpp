#include "common/protocol/json_text.hpp"

#include <algorithm>
#include <fmt/format.h>

namespace rjg::protocol {
namespace {

// operations(): each thread counts its own work.
thread_local std::uint64_t t_operations = 0;

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// One pass over a text: validates it, records the root object's members (scan) or reports every value
// to a visitor (walk).
class Scanner {
 public:
  Scanner(std::string_view text, const Limits& limits, Visitor* visitor = nullptr)
      : s_(text), limits_(limits), visitor_(visitor) {}
  ~Scanner() { t_operations += pos_ + values_; }

  using Result = std::pair<std::optional<Scanned>, std::optional<Error>>;

  Result run() {
    struct Frame {
      bool object;
      std::size_t start;
      std::size_t members;
    };
    std::vector<Frame> stack;
    Scanned out;
    std::string key;  // of the root member being read
    const bool record = visitor_ == nullptr;

    // A value [start, pos_) of `kind` is complete: note it where it belongs.
    auto complete = [&](Kind kind, std::size_t start) {
      ++values_;
      if (stack.empty()) {
        out.kind = kind;
        out.root = {start, pos_ - start};
      }
      if (record && stack.size() == 1 && stack[0].object)
        out.members.push_back({std::move(key), kind, {start, pos_ - start}});
    };
    // A member's key, counted against the limit of its object.
    auto next_key = [&]() -> bool {
      Frame& top = stack.back();
      if (++top.members > limits_.max_object_members) {
        error_ = Error{fmt::format("an object has more than {} members", limits_.max_object_members), top.start};
        error_->too_many_members = true;
        return false;
      }
      return read_key(record && stack.size() == 1 ? &key : nullptr);
    };

    skip_space();
    for (;;) {
      // At the start of a value.
      skip_space();
      if (at_end()) return fail("unexpected end of input");
      const std::size_t start = pos_;
      const char c = s_[pos_];
      std::optional<Kind> kind;
      if (c == '{' || c == '[') {
        if (stack.size() >= limits_.max_depth) return fail("nesting is too deep", true);
        const bool object = c == '{';
        if (visitor_ && !visitor_->begin(object ? Kind::object : Kind::array, start)) return stop();
        ++pos_;
        skip_space();
        if (!at_end() && s_[pos_] == (object ? '}' : ']')) {
          ++pos_;
          kind = object ? Kind::object : Kind::array;
          if (visitor_ && !visitor_->end(*kind, {start, pos_ - start})) return stop();
        } else {
          stack.push_back({object, start, 0});
          if (object && !next_key()) return error();
          continue;
        }
      } else {
        if (c == '"') {
          if (!read_string()) return error();
          kind = Kind::string;
        } else if (c == 't' || c == 'f') {
          if (!read_literal(c == 't' ? "true" : "false")) return error();
          kind = Kind::boolean;
        } else if (c == 'n') {
          if (!read_literal("null")) return error();
          kind = Kind::null;
        } else if (c == 'N') {
          if (!read_literal("NaN")) return error();
          kind = Kind::number;
        } else if (c == 'I') {
          if (!read_literal("Infinity")) return error();
          kind = Kind::number;
        } else if (c == '-' && pos_ + 1 < s_.size() && s_[pos_ + 1] == 'I') {
          if (!read_literal("-Infinity")) return error();
          kind = Kind::number;
        } else if (c == '-' || is_digit(c)) {
          if (!read_number()) return error();
          kind = Kind::number;
        } else {
          return fail("unexpected character");
        }
        if (visitor_ && !visitor_->scalar(*kind, {start, pos_ - start})) return stop();
      }

      // A value is complete; close every container that ends here, then go on to the next value.
      std::size_t value_start = start;
      Kind value_kind = *kind;
      for (;;) {
        complete(value_kind, value_start);
        if (stack.empty()) {
          skip_space();
          if (!at_end()) return fail("unexpected text after the JSON value");
          return {std::move(out), std::nullopt};
        }
        skip_space();
        if (at_end()) return fail("unexpected end of input");
        const Frame top = stack.back();
        if (s_[pos_] == ',') {
          ++pos_;
          if (top.object && !next_key()) return error();
          break;
        }
        if (s_[pos_] != (top.object ? '}' : ']'))
          return fail(top.object ? "expected ',' or '}' in an object" : "expected ',' or ']' in an array");
        ++pos_;
        stack.pop_back();
        value_start = top.start;
        value_kind = top.object ? Kind::object : Kind::array;
        if (visitor_ && !visitor_->end(value_kind, {value_start, pos_ - value_start})) return stop();
      }
    }
  }

 private:
  bool at_end() const { return pos_ >= s_.size(); }
  void skip_space() {
    while (pos_ < s_.size() && is_space(s_[pos_])) ++pos_;
  }
  Result fail(std::string message, bool too_deep = false) {
    set_error(std::move(message), too_deep);
    return error();
  }
  Result stop() {
    error_ = Error{"stopped", pos_};
    error_->stopped = true;
    return error();
  }
  Result error() { return {std::nullopt, std::move(error_)}; }
  bool set_error(std::string message, bool too_deep = false) {
    error_ = Error{std::move(message), pos_, too_deep};
    return false;
  }

  // A member's key and the colon after it; decodes the key into *key when asked.
  bool read_key(std::string* key) {
    skip_space();
    if (at_end() || s_[pos_] != '"') return set_error("expected a string key in an object");
    const std::size_t start = pos_;
    if (!read_string()) return false;
    if (key) *key = decode_string(s_.substr(start, pos_ - start));
    if (visitor_ && !visitor_->key({start, pos_ - start})) {
      error_ = Error{"stopped", pos_};
      error_->stopped = true;
      return false;
    }
    skip_space();
    if (at_end() || s_[pos_] != ':') return set_error("expected ':' after a key");
    ++pos_;
    return true;
  }

  bool read_literal(std::string_view word) {
    if (s_.substr(pos_, word.size()) != word) return set_error("invalid literal");
    pos_ += word.size();
    return true;
  }

  // RFC 8259's grammar only: the value is never computed, so no number is out of range.
  bool read_number() {
    if (s_[pos_] == '-') ++pos_;
    if (at_end() || !is_digit(s_[pos_])) return set_error("invalid number");
    if (s_[pos_] == '0') {
      ++pos_;
    } else {
      while (!at_end() && is_digit(s_[pos_])) ++pos_;
    }
    if (!at_end() && s_[pos_] == '.') {
      ++pos_;
      if (at_end() || !is_digit(s_[pos_])) return set_error("invalid number: digits must follow '.'");
      while (!at_end() && is_digit(s_[pos_])) ++pos_;
    }
    if (!at_end() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      ++pos_;
      if (!at_end() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
      if (at_end() || !is_digit(s_[pos_])) return set_error("invalid number: digits must follow the exponent");
      while (!at_end() && is_digit(s_[pos_])) ++pos_;
    }
    return true;
  }
  // At the opening quote; leaves pos_ after the closing one.
  bool read_string() {
    ++pos_;
    for (;;) {
      if (at_end()) return set_error("unterminated string");
      const auto c = static_cast<unsigned char>(s_[pos_]);
      if (c == '"') {
        ++pos_;
        return true;
      }
      if (c == '\\') {
        if (pos_ + 1 >= s_.size()) return set_error("unterminated string");
        const char e = s_[pos_ + 1];
        if (e == 'u') {
          const auto unit = read_u_escape(pos_);
          if (!unit) return set_error("invalid \\u escape");
          pos_ += 6;
          // UTF-16 surrogates come in pairs: a high one, then a low one; either alone is refused.
          if (*unit >= 0xDC00 && *unit <= 0xDFFF) return set_error("lone low surrogate in a \\u escape");
          if (*unit >= 0xD800 && *unit <= 0xDBFF) {
            const auto low = read_u_escape(pos_);
            if (!low || *low < 0xDC00 || *low > 0xDFFF) return set_error("lone high surrogate in a \\u escape");
            pos_ += 6;
          }
        } else if (e == '"' || e == '\\' || e == '/' || e == 'b' || e == 'f' || e == 'n' || e == 'r' || e == 't') {
          pos_ += 2;
        } else {
          return set_error("invalid escape in a string");
        }
        continue;
      }
      if (c < 0x20) return set_error("control character in a string (it must be escaped)");
      if (c < 0x80) {
        ++pos_;
        continue;
      }
      if (!read_utf8(c)) return set_error("invalid UTF-8 in a string");
    }
  }

  // The code unit of the \\uXXXX escape at `at`, or nothing when it is not one.
  std::optional<std::uint32_t> read_u_escape(std::size_t at) const {
    if (at + 6 > s_.size() || s_[at] != '\\' || s_[at + 1] != 'u') return std::nullopt;
    std::uint32_t v = 0;
    for (std::size_t k = 2; k < 6; ++k) {
      const int h = hex_value(s_[at + k]);
      if (h < 0) return std::nullopt;
      v = v * 16 + static_cast<std::uint32_t>(h);
    }
    return v;
  }

  // One multi-byte UTF-8 sequence: no overlong forms, no surrogates, nothing above U+10FFFF.
  bool read_utf8(unsigned char lead) {
    std::size_t extra;
    unsigned char lo = 0x80, hi = 0xBF;
    if (lead >= 0xC2 && lead <= 0xDF) {
      extra = 1;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
      extra = 2;
      if (lead == 0xE0) lo = 0xA0;
      if (lead == 0xED) hi = 0x9F;
    } else if (lead >= 0xF0 && lead <= 0xF4) {
      extra = 3;
      if (lead == 0xF0) lo = 0x90;
      if (lead == 0xF4) hi = 0x8F;
    } else {
      return false;
    }
    if (pos_ + extra >= s_.size()) return false;
    for (std::size_t k = 1; k <= extra; ++k) {
      const auto b = static_cast<unsigned char>(s_[pos_ + k]);
      const unsigned char min = k == 1 ? lo : 0x80, max = k == 1 ? hi : 0xBF;
      if (b < min || b > max) return false;
    }
    pos_ += extra + 1;
    return true;
  }

  std::string_view s_;
  const Limits& limits_;
  Visitor* visitor_;
  std::size_t pos_ = 0;
  std::size_t values_ = 0;
  std::optional<Error> error_;
};

void append_utf8(std::string& out, std::uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::uint32_t hex4(std::string_view s) {
  std::uint32_t v = 0;
  for (char c : s.substr(0, 4)) v = v * 16 + static_cast<std::uint32_t>(hex_value(c));
  return v;
}

}  // namespace

std::string_view to_string(Kind kind) {
  switch (kind) {
    case Kind::null: return "null";
    case Kind::boolean: return "a boolean";
    case Kind::number: return "a number";
    case Kind::string: return "a string";
    case Kind::array: return "a list";
    case Kind::object: return "an object";
  }
  return "?";
}

std::pair<std::optional<Scanned>, std::optional<Error>> scan(std::string_view text, const Limits& limits) {
  return Scanner(text, limits).run();
}

std::optional<Error> walk(std::string_view text, Visitor& visitor, const Limits& limits) {
  return Scanner(text, limits, &visitor).run().second;
}

bool is_non_finite(std::string_view number_text) {
  return number_text == "NaN" || number_text == "Infinity" || number_text == "-Infinity";
}

std::vector<Member> members(std::string_view object_text) {
  static const Limits unbounded{std::numeric_limits<std::size_t>::max()};
  auto [scanned, error] = scan(object_text, unbounded);
  if (!scanned || scanned->kind != Kind::object) return {};
  return std::move(scanned->members);
}

const Member* find(const std::vector<Member>& members, std::string_view key) {
  std::uint64_t compared = 0;
  const Member* found = nullptr;
  for (auto it = members.rbegin(); it != members.rend(); ++it) {
    ++compared;
    if (it->key == key) {
      found = &*it;
      break;
    }
  }
  t_operations += compared;
  return found;
}

std::uint64_t operations() { return t_operations; }

std::string decode_string(std::string_view literal) {
  t_operations += literal.size();
  std::string out;
  if (literal.size() < 2) return out;
  std::string_view s = literal.substr(1, literal.size() - 2);
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 >= s.size()) {
      out += s[i];
      continue;
    }
    const char e = s[++i];
    switch (e) {
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      case 't': out += '\t'; break;
      case 'u': {
        std::uint32_t cp = hex4(s.substr(i + 1));
        i += 4;
        if (cp >= 0xD800 && cp <= 0xDBFF && i + 6 < s.size() && s[i + 1] == '\\' && s[i + 2] == 'u') {
          const std::uint32_t low = hex4(s.substr(i + 3));
          if (low >= 0xDC00 && low <= 0xDFFF) {
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
            i += 6;
          }
        }
        if (cp >= 0xD800 && cp <= 0xDFFF) cp = 0xFFFD;
        append_utf8(out, cp);
        break;
      }
      default: out += e; break;  // " \ /
    }
  }
  return out;
}

namespace {
// The value of the four hex digits at text[at], or -1.
int hex4(std::string_view text, std::size_t at) {
  if (at + 4 > text.size()) return -1;
  int v = 0;
  for (std::size_t k = at; k < at + 4; ++k) {
    const char c = text[k];
    const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v;
}
}  // namespace

std::string replace_lone_surrogates(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  std::size_t i = 0;
  while (i < text.size()) {
    const auto slash = text.find('\\', i);
    if (slash == std::string_view::npos) break;
    out.append(text.substr(i, slash - i));
    if (slash + 1 >= text.size()) {
      i = slash;
      break;
    }
    const int v = text[slash + 1] == 'u' ? hex4(text, slash + 2) : -1;
    if (v >= 0xD800 && v <= 0xDBFF && slash + 7 < text.size() && text[slash + 6] == '\\' && text[slash + 7] == 'u') {
      const int low = hex4(text, slash + 8);
      if (low >= 0xDC00 && low <= 0xDFFF) {  // a pair: kept
        out.append(text.substr(slash, 12));
        i = slash + 12;
        continue;
      }
    }
    if (v >= 0xD800 && v <= 0xDFFF) {
      out += "\\ufffd";
      i = slash + 6;
    } else {  // any other escape, kept as it is (two characters; \uXXXX's digits follow as text)
      out.append(text.substr(slash, 2));
      i = slash + 2;
    }
  }
  out.append(text.substr(i));
  return out;
}

std::string quote(std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(s.size() + 2);
  out += '"';
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += "\\u00";
          out += kHex[(c >> 4) & 0xF];
          out += kHex[c & 0xF];
        } else {
          out += c;
        }
    }
  }
  out += '"';
  return out;
}

std::string splice(std::string_view text, std::vector<std::pair<Slice, std::string>> edits) {
  std::sort(edits.begin(), edits.end(), [](const auto& a, const auto& b) { return a.first.offset < b.first.offset; });
  std::string out;
  std::size_t size = text.size();
  for (const auto& [slice, replacement] : edits) size = size - slice.size + replacement.size();
  out.reserve(size);
  std::size_t at = 0;
  for (const auto& [slice, replacement] : edits) {
    out.append(text.substr(at, slice.offset - at));
    out.append(replacement);
    at = slice.offset + slice.size;
  }
  out.append(text.substr(std::min(at, text.size())));
  return out;
}

}  // namespace rjg::protocol
