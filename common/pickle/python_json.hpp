// Python's JSON dialect of the protocol: how Python peers (the stock JsonRpcRemote client, the reference
// server) read and write values, in one place for the gateway, its bridges, the adapters, the SDK and the
// CLI.
//
// The protocol's value type (AnyType in robotframework-jsonrpcremote's protocol package) is a scalar or
// a flat list or dict of scalars (str keys); everything else travels as a pickle,
// {"__pickled__": "<hex>"}, which the peer unpickles at the top level only. A peer validates every
// value it reads: a nested JSON value (a list of dicts, a dict holding a list) fails with
// "NamedTypeError: Invalid value for ...", and the stock client then drops its whole session.
//
//   The dialect (what we send to a Python peer)
//     None, bool, int (64 bits), finite float, str        JSON
//     list of those, dict (plain, str keys) of those      JSON array, object
//     anything else (nested containers, tuple, set,       {"__pickled__": "<hex>"}: a data-only pickle
//     bytes, datetime, Decimal, NaN, ints beyond 64       (protocol 4), which Python unpickles into
//     bits, OrderedDict/DotDict, a dict holding a         the natural type
//     "__pickled__" key)
//   Reading (what a Python peer sent): from_json keeps what the JSON means to Python (NaN, big ints,
//   embedded pickles decoded under the data-only policy); plain_json turns it into plain JSON for peers
//   that read JSON only.
#pragma once

#include "common/pickle/pickle_policy.hpp"
#include "common/pickle/pickle_value.hpp"

#include <boost/json/value.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace rjg::pickle {

// A value that cannot be carried across; what() names where ("args[2][0]: ...") and why.
struct ValueError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Whether the value travels as plain JSON in the dialect (see above): a scalar, or a flat list or
// plain dict (str keys, none of them "__pickled__") of scalars.
bool has_json_form(const PyValue& value);
// The value's JSON text in the dialect: plain JSON where has_json_form, else {"__pickled__": ...}.
// Throws ValueError for what Python cannot hold either (see encode_pickle).
std::string dialect_text(const PyValue& value);

// A JSON text as the Python peer that sent it meant it, read in one pass without a tree (so NaN,
// Infinity and integers beyond 64 bits keep their value): {"__pickled__": "<hex>"} decoded under the
// data-only policy (anything else throws ValueError naming `path`), objects as dicts with str keys (a
// repeated key keeps its first place and takes the last value, as Python's json module does).
// The limits bound the tree too: a pickle that refers to one list a million times builds a million
// copies, each value some 90 bytes. kDecodeLimits: elements plus text bytes at most 2^25, as many as the
// largest pickle (32 MiB) holds of bytes or characters.
inline const PickleLimits kDecodeLimits = [] {
  PickleLimits limits;
  limits.max_expanded = std::uint64_t{1} << 25;
  return limits;
}();
PyValue from_json(std::string_view json_text, std::string_view path, std::size_t max_depth = 64,
                  const PickleLimits& limits = kDecodeLimits);

// Whether a JSON value holds an object with a "__pickled__" member, at any depth.
bool holds_pickle(const boost::json::value& value);
// Whether a JSON value is in the dialect as it is: a scalar, a flat array or object of scalars (no
// "__pickled__" member), or one {"__pickled__": "<hex>"} object. Integers beyond 64 bits (uint64
// values above int64's range) are not: Python's peer reads them, but from_json would carry them as
// big ints, which the dialect pickles.
bool in_python_dialect(const boost::json::value& value);
// A JSON value a native peer built, in the dialect: unchanged where in_python_dialect, else read as
// Python would (embedded pickles decoded) and pickled whole. Throws ValueError naming `path`.
boost::json::value python_dialect(const boost::json::value& value, std::string_view path);
// The same for a JSON text (NaN, Infinity and big integers keep their meaning): from_json, then
// dialect_text.
std::string python_dialect(std::string_view json_text, std::string_view path);

// A keyword argument's default for a library definition, in the dialect (python_dialect). A default
// that cannot be (a malformed pickle inside it, a tool schema's default nested too deep) is left out,
// with a warning in the log that names the argument and why: the argument stays optional (has_default),
// and the client shows no default. One odd default must not fail a whole import.
std::optional<boost::json::value> definition_default(const boost::json::value& value, std::string_view argument);

// A Python value as plain JSON, for peers that read JSON only (the MCP and Ansible adapter workers, the
// SDK's accessors), the way Python's json.dumps writes it: None null; list, tuple, set and frozenset
// arrays; dict (OrderedDict, DotDict) objects, keys of str, int, float, bool and None turned into text as
// json.dumps turns them; datetime, date and time as isoformat() text; timedelta as its total seconds.
// What JSON cannot carry throws ValueError naming `path` and the element ("args[1]['when']: bytes have
// no JSON form ..."): bytes, Decimal, NaN and Infinity, integers beyond 64 bits, other dict keys.
boost::json::value to_plain_json(const PyValue& value, std::string_view path);
// A JSON text a Python client sent (its pickles decoded under the data-only policy, see from_json) as
// plain JSON: from_json, then to_plain_json.
boost::json::value plain_json(std::string_view json_text, std::string_view path);

}  // namespace rjg::pickle
