// Values between Robot Framework's classic Remote library (XML-RPC) and the JSON-RPC protocol, both
// ways, going through Python's own data model (pickle::PyValue): what a classic client sends becomes
// what a Python JSON-RPC client would have sent for the same Robot value, and what a worker answers
// becomes what a classic remote server (PythonRemoteServer) answers for the same Python value.
//
//   XML-RPC -> JSON-RPC (keyword arguments)
//     string, int, double, boolean      the JSON string, number, boolean
//     nil                               null
//     base64                            bytes, pickled
//     dateTime.iso8601                  datetime.datetime, pickled
//     array, struct                     JSON array, object; pickled as a list or dict when something in
//                                       them has no JSON form (bytes, a datetime, NaN)
//     double NaN, Infinity              float, pickled (JSON has no such number)
//   JSON-RPC -> XML-RPC (return values, library information)
//     null (also inside containers)     "" (classic servers answer None as an empty string)
//     string                            string; base64 when it holds characters XML cannot carry (its
//                                       Latin-1 bytes when every character is below 256, else UTF-8)
//     integer                           int (32 bits) or i8; beyond 64 bits a string of its digits
//     {"__pickled__": ...}              decoded under the data-only policy: bytes and bytearray as
//                                       base64, list, tuple and set as array, dict (OrderedDict,
//                                       DotDict) as struct with str() of each key, datetime as
//                                       dateTime, date, time, timedelta and Decimal as their str()
#pragma once

#include "common/pickle/pickle_policy.hpp"
#include "common/pickle/pickle_value.hpp"
#include "common/xmlrpc/xmlrpc.hpp"

#include <boost/json/value.hpp>

#include <stdexcept>
#include <string>
#include <string_view>

namespace rjg::classic {

// A value that cannot be carried across; what() names where ("args[2][0]: ...") and why.
struct ValueError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// An XML-RPC value as Python's xmlrpc.client (use_builtin_types) reads it.
pickle::PyValue to_python(const xmlrpc::Value& value);
// A JSON text for one argument: plain JSON where the value has a JSON form, else {"__pickled__": ...}.
std::string to_json_argument(const pickle::PyValue& value);

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
pickle::PyValue from_json(std::string_view json_text, std::string_view path, std::size_t max_depth = 64,
                          const PickleLimits& limits = kDecodeLimits);
// A Python value as a classic remote server returns it (see above).
xmlrpc::Value to_xmlrpc(const pickle::PyValue& value);

// A Python value as plain JSON, for peers that read JSON only (the MCP and Ansible adapter workers),
// the way Python's json.dumps writes it: None null; list, tuple, set and frozenset arrays; dict
// (OrderedDict, DotDict) objects, keys of str, int, float, bool and None turned into text as json.dumps
// turns them; datetime, date and time as isoformat() text; timedelta as its total seconds. What JSON
// cannot carry throws ValueError naming `path` and the element ("args[1]['when']: bytes have no JSON
// form ..."): bytes, Decimal, NaN and Infinity, integers beyond 64 bits, other dict keys.
boost::json::value to_plain_json(const pickle::PyValue& value, std::string_view path);
// A JSON text a Python client sent (its pickles decoded under the data-only policy, see from_json) as
// plain JSON: from_json, then to_plain_json.
boost::json::value plain_json(std::string_view json_text, std::string_view path);

// A keyword argument's default in a classic argument spec ("name=default"): a str as it is, anything
// else as Python's repr() ("None", "True", "[1, 2]").
std::string default_text(const pickle::PyValue& value);

}  // namespace rjg::classic
