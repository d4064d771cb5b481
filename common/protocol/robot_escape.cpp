#include "common/protocol/robot_escape.hpp"

#include <fmt/format.h>

#include <array>
#include <cstdint>

namespace rjg::protocol {
namespace {

// robot.utils.escaping._CONTROL_WORDS: escaped only when they are the whole string.
constexpr std::array<std::string_view, 5> kControlWords{"ELSE", "ELSE IF", "AND", "WITH NAME", "AS"};

bool is_control_word(std::string_view s) {
  for (auto w : kControlWords)
    if (s == w) return true;
  return false;
}

// The first characters of the two-character sequences in _SEQUENCES_TO_BE_ESCAPED ("${", "@{", "%{",
// "&{", "*{"); "*" is there although Robot 7 has no "*{...}" variables, as Robot escapes it too.
bool starts_variable(std::string_view s, std::size_t i) {
  const char c = s[i];
  return (c == '$' || c == '@' || c == '%' || c == '&' || c == '*') && i + 1 < s.size() && s[i + 1] == '{';
}

bool needs_backslash(std::string_view s, std::size_t i) {
  return s[i] == '\\' || s[i] == '=' || starts_variable(s, i);
}

// One code point of UTF-8 at s[i]; nullopt for anything that is not valid UTF-8.
std::optional<std::uint32_t> decode(std::string_view s, std::size_t& i) {
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned c = b(i);
  if (c < 0x80) return ++i, c;
  std::size_t more;
  std::uint32_t cp;
  if (c >= 0xc2 && c <= 0xdf) more = 1, cp = c & 0x1f;
  else if (c >= 0xe0 && c <= 0xef) more = 2, cp = c & 0x0f;
  else if (c >= 0xf0 && c <= 0xf4) more = 3, cp = c & 0x07;
  else return std::nullopt;
  if (s.size() - i <= more) return std::nullopt;
  for (std::size_t k = 1; k <= more; ++k) {
    if ((b(i + k) & 0xc0) != 0x80) return std::nullopt;
    cp = cp << 6 | (b(i + k) & 0x3f);
  }
  i += more + 1;
  if ((more == 2 && cp < 0x800) || (more == 3 && (cp < 0x10000 || cp > 0x10ffff))) return std::nullopt;
  return cp;
}

// Code points that str.isprintable() rejects and repr() therefore writes as \x, \u or \U escapes: the
// control, format, surrogate, private-use and separator ones (space excepted). Unassigned code points
// are not listed (that needs the Unicode database); they are rare in arguments and, evaluated, only
// change the text: an unescaped \u escape never becomes syntax, as Robot finds variables first.
bool repr_escapes(std::uint32_t cp) {
  if (cp < 0x20 || cp == 0x7f) return true;
  if (cp < 0x80) return false;
  struct Range {
    std::uint32_t first, last;
  };
  static constexpr Range kRanges[] = {
      {0x80, 0xa0},       {0xad, 0xad},       {0x600, 0x605},     {0x61c, 0x61c},   {0x6dd, 0x6dd},
      {0x70f, 0x70f},     {0x1680, 0x1680},   {0x180e, 0x180e},   {0x2000, 0x200f}, {0x2028, 0x202f},
      {0x205f, 0x206f},   {0x3000, 0x3000},   {0xd800, 0xdfff},   {0xe000, 0xf8ff}, {0xfeff, 0xfeff},
      {0xfff9, 0xfffb},   {0xfffe, 0xffff},   {0x110bd, 0x110bd}, {0x1bca0, 0x1bca3},
      {0x1d173, 0x1d17a}, {0xe0000, 0xe0fff}, {0xf0000, 0x10ffff},
  };
  for (const auto& r : kRanges)
    if (cp >= r.first && cp <= r.last) return true;
  return false;
}

}  // namespace

std::string escape(std::string_view s) {
  if (is_control_word(s)) return "\\" + std::string(s);
  std::string out;
  out.reserve(s.size() + 8);
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (needs_backslash(s, i)) out += '\\';
    out += s[i];
  }
  return out;
}

bool holds_syntax(std::string_view s) {
  if (is_control_word(s)) return true;
  for (std::size_t i = 0; i < s.size(); ++i)
    if (needs_backslash(s, i)) return true;
  return false;
}

std::optional<std::string> evaluated_in_text(std::string_view s, bool is_bytes) {
  bool single = false, dbl = false;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '\\') return "contains a backslash, which Robot Framework reads as an escape";
    if (starts_variable(s, i))
      return fmt::format("contains '{}{{', which Robot Framework evaluates as a variable", c);
    single = single || c == '\'';
    dbl = dbl || c == '"';
  }
  if (single && dbl) return "contains both quote characters, so its repr() escapes one with a backslash";
  for (std::size_t i = 0; i < s.size();) {
    if (is_bytes) {
      const auto b = static_cast<unsigned char>(s[i++]);
      if (b < 0x20 || b >= 0x7f)
        return fmt::format("contains byte 0x{:02x}, which repr() writes as a backslash escape", b);
      continue;
    }
    auto cp = decode(s, i);
    if (!cp) return "is not valid UTF-8";
    if (repr_escapes(*cp))
      return fmt::format("contains U+{:04X}, which repr() writes as a backslash escape", *cp);
  }
  return std::nullopt;
}

}  // namespace rjg::protocol
