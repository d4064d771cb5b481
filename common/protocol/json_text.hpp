// JSON as text: a validating scanner that finds where values are without building a tree, so that the
// gateway reads the few fields it owns and passes every other byte on exactly as it came (number texts
// included: no round trip through a double, no re-encoding of strings).
//
// Work is linear in the input: one pass, an explicit stack for nesting, and no hashing of keys (a
// frame of keys crafted to collide in a hash table costs what any frame of its size costs).
// operations() counts that work, so tests can show it without a clock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace rjg::protocol {

enum class Kind : std::uint8_t { null, boolean, number, string, array, object };

std::string_view to_string(Kind kind);  // "null", "a boolean", "a number", "a string", "a list", "an object"

// A range of bytes inside a text.
struct Slice {
  std::size_t offset = 0;
  std::size_t size = 0;
  std::string_view of(std::string_view text) const { return text.substr(offset, size); }
};

// One member of an object: its key (decoded) and where its value is.
struct Member {
  std::string key;
  Kind kind = Kind::null;
  Slice value;
};

// Numbers are taken as written, whatever their size (1e400, a 40-digit integer): their texts are passed
// on, never converted. The literals NaN, Infinity and -Infinity, which Python's json module writes for
// float('nan') and float('inf'), are numbers too (is_non_finite() tells them apart).
struct Limits {
  std::size_t max_depth = 64;  // nesting of arrays and objects; deeper is an error
  // Members of any one object; more is an error (too_many_members).
  std::size_t max_object_members = std::numeric_limits<std::size_t>::max();
};

struct Error {
  std::string message;  // "invalid literal", "unterminated string", ...
  std::size_t offset = 0;
  bool too_deep = false;
  bool too_many_members = false;
  bool stopped = false;  // walk(): the visitor asked to stop
};

// The result of scanning one JSON text: the root's kind and place, and when the root is an object,
// its members in order (a key that occurs twice is listed twice; lookups take the last, as Python's
// json module does).
struct Scanned {
  Kind kind = Kind::null;
  Slice root;
  std::vector<Member> members;
};

// Validates `text` as exactly one JSON value (RFC 8259, UTF-8, white space around it allowed; \u
// escapes of UTF-16 surrogates only in high-low pairs; NaN, Infinity and -Infinity as numbers).
std::pair<std::optional<Scanned>, std::optional<Error>> scan(std::string_view text, const Limits& limits = {});

// Whether a number text is one of the literals NaN, Infinity, -Infinity.
bool is_non_finite(std::string_view number_text);

// What walk() reports, in document order. Each returns false to stop the walk.
class Visitor {
 public:
  virtual ~Visitor() = default;
  // An array or object opens at `offset`.
  virtual bool begin(Kind container, std::size_t offset) = 0;
  // A member's key (the string literal, quotes included), before its value.
  virtual bool key(Slice literal) = 0;
  // A value that is neither an array nor an object.
  virtual bool scalar(Kind kind, Slice value) = 0;
  // The array or object opened last is complete; `value` is all of it.
  virtual bool end(Kind container, Slice value) = 0;
};

// Validates `text` as scan() does and reports every value to `visitor`: one pass, no tree. An error
// (or the visitor's stop, Error::stopped) ends the walk; what was reported until then stays reported.
std::optional<Error> walk(std::string_view text, Visitor& visitor, const Limits& limits = {});

// The members of an object text that is already known to be valid JSON (from scan()); empty for
// anything that is not an object. Slices are relative to `object_text`.
std::vector<Member> members(std::string_view object_text);

// The last member named `key`, or nullptr. The pointer is into `members`, so a temporary list is refused.
const Member* find(const std::vector<Member>& members, std::string_view key);
const Member* find(std::vector<Member>&& members, std::string_view key) = delete;

// The text of a valid JSON string literal (quotes included) decoded to UTF-8. (scan() refuses lone
// surrogate escapes, as Boost.JSON does; should one reach here anyway it becomes U+FFFD.)
std::string decode_string(std::string_view literal);

// `s` as a JSON string literal (quotes included): ", \ and control characters escaped, the rest as is.
std::string quote(std::string_view s);

// `text` with every lone UTF-16 surrogate escape (\uD800 to \uDFFF outside a high-low pair) replaced by
// \uFFFD. Python's json writes them for undecodable bytes (surrogateescape: Ansible's output of a
// command that printed Latin-1) and JavaScript's JSON.stringify for a string cut inside a pair; JSON
// readers here (Boost.JSON, scan()) refuse them. Nothing else changes.
std::string replace_lone_surrogates(std::string_view text);

// `text` with each slice replaced by its new text. Edits must not overlap; any order.
std::string splice(std::string_view text, std::vector<std::pair<Slice, std::string>> edits);

// The work done by this thread's scans, walks, lookups and decodes since it started: one per byte
// examined, one per value, one per key compared. Tests read the difference before and after.
std::uint64_t operations();

}  // namespace rjg::protocol
