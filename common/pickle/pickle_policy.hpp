// The pickle policy: what the gateway lets through of {"__pickled__": "<hex>"} values.
//
// Python peers send every list, dict and object as a pickle, and unpickling can run arbitrary code. The
// data-only check is a typed symbolic execution of the opcode stream (stack, memo, marks, frames): it
// admits exactly the pickles that build plain Robot data, and refuses everything else, including
// anything it is unsure about. It never looks for "bad" names; it only knows the good shapes.
#pragma once

#include <boost/json/fwd.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace rjg::pickle {

// The one key of the JSON form of a pickled value: {"__pickled__": "<hex>"}.
inline constexpr std::string_view kPickledKey = "__pickled__";

// Mirrors config::PicklePolicy (common/ does not depend on config/).
enum class PickleMode {
  allow,      // every value passes unchecked
  data_only,  // only pickles that build plain data
  deny,       // no pickled value at all
};

// Bounds of the data-only check; exceeding any of them refuses the pickle.
struct PickleLimits {
  std::size_t max_bytes = 32u * 1024 * 1024;  // one pickle (half the largest message, as hex doubles it)
  std::size_t max_opcodes = std::size_t{1} << 23;
  std::size_t max_stack = std::size_t{1} << 20;       // values on the stack (a tuple's items all sit there)
  std::size_t max_memo = std::size_t{1} << 20;        // memo entries
  std::size_t max_containers = std::size_t{1} << 20;  // mutable containers created (list, dict, set, ...)
  std::size_t max_depth = 128;                        // container nesting, and open MARKs
  // Elements plus string and bytes lengths, counted as if every shared reference were a copy: what a
  // consumer that walks the value (repr, logging, JSON) has to go through.
  std::uint64_t max_expanded = std::uint64_t{1} << 26;
  std::size_t max_long_bytes = 4096;  // LONG4 integers (str() of bigger ints fails in Python anyway)
};

// UTF-8 as CPython decodes a pickle's str ("utf-8", "surrogatepass"): strict, but encoded surrogates pass.
bool valid_pickle_utf8(std::string_view s);

// Checks one raw pickle under the data-only policy. nullopt: admitted. Otherwise the reason, and the
// byte offset in the pickle of the opcode (or length field) it is about in *offset when given.
std::optional<std::string> check_pickle_data_only(std::string_view bytes, std::size_t* offset = nullptr,
                                                  const PickleLimits& limits = {});

struct PickleRefusal {
  std::string path;                   // JSON path of the value: "args[0]", "kwargs.data", "result"
  std::string reason;                 // "class os.system is not allowed", "opcode BUILD is not allowed"
  std::optional<std::size_t> offset;  // byte offset in the pickle; none for deny and malformed objects
  PickleMode mode = PickleMode::data_only;
};

// Walks a JSON value, finds every {"__pickled__": ...} object (and malformed look-alikes: extra keys,
// a value that is not lowercase even-length hex) and applies the policy. path names v itself ("args",
// "result", "" for none); members and elements are appended as ".key" and "[i]". nullopt: admitted.
// allow returns at once; otherwise a value without "__pickled__" costs one tree walk.
std::optional<PickleRefusal> inspect_pickles(const boost::json::value& v, PickleMode mode, std::string_view path,
                                             const PickleLimits& limits = {});

// The same policy over a JSON text, walked by the scanner in one pass without building a tree: a tree
// cannot hold NaN or a 40-digit integer, and its hash table can be flooded with colliding keys. Work is
// linear in the text (protocol::operations() counts it). Where "__pickled__" occurs twice in an
// object, the last one is checked, as a Python peer's json module keeps the last. A text that is not
// valid JSON is refused.
std::optional<PickleRefusal> inspect_pickles_text(std::string_view json_text, PickleMode mode, std::string_view path,
                                                  const PickleLimits& limits = {});

// The user-facing message: what was refused, where, and the configuration key that changes it.
// `hint` replaces the advice on the configuration key where that key would not help (a classic upstream).
std::string describe(const PickleRefusal& refusal, std::string_view library, std::string_view hint = {});

// Receives the text values of a pickle (see visit_pickle_strings); returning false stops the walk.
class PickleTextVisitor {
 public:
  virtual ~PickleTextVisitor() = default;
  virtual bool text(std::string_view value, bool is_bytes) = 0;
  // Every opcode, before its argument is read (text() follows for the text ones).
  virtual void opcode(unsigned char) {}
};

// Calls visitor.text() for the argument of every str, bytes and bytearray opcode of a raw pickle, in
// stream order (str: as UTF-8; the old STRING and UNICODE line forms: the raw line). This only lexes
// opcodes (linear, no stack, no memo), so it works on any pickle, also ones the data-only check would
// refuse; what the strings end up as (keys, items, class names) does not matter to its users, which
// ask whether any text in the value would read differently once the value is made text (the
// gateway's argument guard). Returns why the stream cannot be lexed (unknown opcode, truncated), or
// nullopt once STOP is reached or the visitor stopped the walk.
std::optional<std::string> visit_pickle_strings(std::string_view bytes, PickleTextVisitor& visitor);

}  // namespace rjg::pickle
