// XML-RPC values, calls and responses, as Robot Framework's classic `Remote` library and classic remote
// servers exchange them (Python's xmlrpc.client on one side). Parsing uses expat with everything that
// could reach outside the document refused: a DOCTYPE (so no DTD, no entity of any kind) ends the parse
// with an error. Every size, depth and count is bounded (Limits), and the parse builds the values
// directly from expat's events, with no tree of the document in between: what it holds is the values
// themselves, at most one per Limits::bytes_per_value bytes of the document (a Value is 40 bytes).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace rjg::xmlrpc {

struct Value;
using Array = std::vector<Value>;
using Struct = std::vector<std::pair<std::string, Value>>;  // members in document order
struct Nil {
  bool operator==(const Nil&) const = default;
};
struct Binary {
  std::string bytes;
  bool operator==(const Binary&) const = default;
};
struct DateTime {
  std::string text;  // as written: "20240102T03:04:05"
  bool operator==(const DateTime&) const = default;
};

// One value. Integers keep 64 bits (<int>/<i4> are 32-bit on the wire, <i8> 64: write() chooses).
struct Value {
  using Variant = std::variant<Nil, bool, std::int64_t, double, std::string, Binary, DateTime, Array, Struct>;
  Variant v;

  Value() : v(Nil{}) {}
  template <class T>
    requires std::is_constructible_v<Variant, T&&>
  Value(T&& t) : v(std::forward<T>(t)) {}
  Value(int i) : v(std::int64_t{i}) {}
  Value(const char* s) : v(std::string(s)) {}

  template <class T>
  bool is() const { return std::holds_alternative<T>(v); }
  template <class T>
  const T& as() const { return std::get<T>(v); }
  template <class T>
  T& as() { return std::get<T>(v); }
  // A member of a struct value; nullptr when absent or not a struct.
  const Value* member(std::string_view name) const;
  bool operator==(const Value&) const = default;
};

struct Limits {
  std::size_t max_bytes = 64u * 1024 * 1024;  // the document
  std::size_t max_depth = 64;                 // nested arrays and structs
  std::size_t max_values = 1'000'000;         // values in the document
  // And at most one value per this many bytes of the document (0: no such cap), so that what a parse
  // holds stays within a small constant times the document. Python's xmlrpc.client writes at least 21
  // bytes per value (<value><nil/></value>); the smallest value there is, <value/>, takes 8.
  std::size_t bytes_per_value = 16;
};

// A document that is not well-formed XML, not XML-RPC, or beyond a limit; what() says which and where
// ("line 3: <value> holds two values").
struct ParseError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// A document refused for a limit of Limits (its bytes, values or nesting), not for its form: the caller
// may name the settings behind them.
struct LimitError : ParseError {
  using ParseError::ParseError;
};

struct Call {
  std::string method;
  Array params;
};
struct Fault {
  std::int64_t code = 0;
  std::string message;
};
struct Response {
  bool is_fault = false;
  Value value;  // the one param, when not a fault
  Fault fault;
};

Call parse_call(std::string_view document, const Limits& limits = {});
Response parse_response(std::string_view document, const Limits& limits = {});

// Documents as Python's xmlrpc.client writes them (UTF-8, no DOCTYPE). Integers outside 32 bits are
// written as <i8> (Python reads it; write_call_compatible() callers may prefer strings: see the bridge).
std::string write_call(std::string_view method, const Array& params);
std::string write_response(const Value& value);
std::string write_fault(std::int64_t code, std::string_view message);

// Base64 as XML-RPC uses it (RFC 4648, padding; whitespace ignored when decoding). decode: nullopt-like
// failure is a ParseError.
std::string base64_encode(std::string_view bytes);
std::string base64_decode(std::string_view text);

// Whether XML 1.0 can carry the text: valid UTF-8 without C0 controls other than tab, LF and CR, and
// without U+FFFE and U+FFFF. The writers replace what it cannot carry with U+FFFD.
bool xml_safe(std::string_view text);
// The text's Latin-1 bytes, when every character is below U+0100 (and it is valid UTF-8).
std::optional<std::string> to_latin1(std::string_view text);

}  // namespace rjg::xmlrpc
