// robot-example-strings: the library "StringTools", string keywords that show variadic and
// named-only arguments, list return values and logging from a keyword.
//
//   ${joined}=    Join    a    b    c    separator=-      # a-b-c
//   ${words}=     Split    one two  three                 # ['one', 'two', 'three']
//
// Case mapping covers ASCII letters only; Reverse keeps UTF-8 characters whole.
#include "workers/sdk/sdk.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <string>

namespace {

using rjg::sdk::Arg;
using rjg::sdk::Call;
using rjg::sdk::KeywordError;
namespace json = rjg::sdk::json;

std::string map_ascii(std::string text, int (*f)(int)) {
  for (char& ch : text)
    if (static_cast<unsigned char>(ch) < 0x80) ch = static_cast<char>(f(static_cast<unsigned char>(ch)));
  return text;
}

// Reverses code points, not bytes: reversing the bytes of "é" would produce invalid UTF-8.
std::string reverse_utf8(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  std::size_t end = text.size();
  while (end > 0) {
    std::size_t start = end - 1;
    while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;  // continuation bytes
    out.append(text, start, end - start);
    end = start;
  }
  return out;
}

// Python's str.split: no separator splits on runs of whitespace and drops empty pieces.
json::array split(const std::string& text, const json::value& separator, std::int64_t max_split) {
  json::array parts;
  auto room = [&] { return max_split < 0 || static_cast<std::int64_t>(parts.size()) < max_split; };
  if (separator.is_null()) {
    std::size_t i = 0;
    while (true) {
      while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
      if (i == text.size()) break;
      if (!room()) {
        parts.emplace_back(text.substr(i));  // like Python, the remainder keeps its trailing space
        break;
      }
      std::size_t j = i;
      while (j < text.size() && !std::isspace(static_cast<unsigned char>(text[j]))) ++j;
      parts.emplace_back(text.substr(i, j - i));
      i = j;
    }
    return parts;
  }
  const std::string sep(separator.get_string());
  if (sep.empty()) throw KeywordError("Empty separator", "ValueError");
  std::size_t start = 0;
  for (std::size_t pos; room() && (pos = text.find(sep, start)) != std::string::npos; start = pos + sep.size())
    parts.emplace_back(text.substr(start, pos - start));
  parts.emplace_back(text.substr(start));
  return parts;
}

rjg::sdk::Library make_library() {
  rjg::sdk::Library lib{"StringTools", "String helpers: case, reversal, joining, splitting, repetition.", "1.0"};

  lib.keyword("Upper", {{"text", "str"}}, "Returns `text` with ASCII letters in upper case.",
              [](Call& c) -> json::value { return json::string(map_ascii(c.get<std::string>("text"), ::toupper)); });

  lib.keyword("Lower", {{"text", "str"}}, "Returns `text` with ASCII letters in lower case.",
              [](Call& c) -> json::value { return json::string(map_ascii(c.get<std::string>("text"), ::tolower)); });

  lib.keyword("Reverse", {{"text", "str"}}, "Returns `text` backwards, character by character.",
              [](Call& c) -> json::value { return json::string(reverse_utf8(c.get<std::string>("text"))); });

  lib.keyword("Join", {Arg::var_positional("parts", "str"), Arg::named_only("separator", "str", json::value(" "))},
              "Joins `parts` with `separator` (named only, a space by default).", [](Call& c) -> json::value {
                const std::string separator = c.get<std::string>("separator");
                std::string out;
                bool first = true;
                for (const json::value& part : c.get<json::array>("parts")) {
                  if (!first) out += separator;
                  out += part.get_string();
                  first = false;
                }
                return json::string(out);
              });

  lib.keyword("Repeat", {{"text", "str"}, {"times", "int", json::value(2)}},
              "Returns `text` repeated `times` times, logging each step.", [](Call& c) -> json::value {
                const std::string text = c.get<std::string>("text");
                const std::int64_t times = c.get<std::int64_t>("times");
                if (times < 0) throw KeywordError(fmt::format("times must not be negative, got {}", times), "ValueError");
                std::string out;
                for (std::int64_t i = 1; i <= times; ++i) {
                  out += text;
                  c.log(fmt::format("step {}/{}: {}", i, times, out));
                }
                return json::string(out);
              });

  lib.keyword("Split", {{"text", "str"}, {"separator", "str", json::value(nullptr)}, {"max_split", "int", json::value(-1)}},
              "Splits `text` at `separator` (runs of whitespace by default), at most `max_split` times "
              "(-1: no limit). Returns a list.",
              [](Call& c) -> json::value {
                return split(c.get<std::string>("text"), c.value("separator"), c.get<std::int64_t>("max_split"));
              });

  return lib;
}

}  // namespace

int main(int argc, char** argv) {
  const rjg::sdk::Library library = make_library();
  return rjg::sdk::serve(library, argc, argv);
}
