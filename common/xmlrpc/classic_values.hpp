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
//     array, struct                     JSON array, object when flat (every member a scalar with a
//                                       JSON form); else pickled as a list or dict (Python's dialect)
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
#include "common/pickle/python_json.hpp"
#include "common/xmlrpc/xmlrpc.hpp"

#include <boost/json/value.hpp>

#include <stdexcept>
#include <string>
#include <string_view>

namespace rjg::xmlrpc {

// Python's JSON dialect (common/pickle/python_json.hpp) under the names the classic code uses.
using pickle::from_json;
using pickle::kDecodeLimits;
using pickle::plain_json;
using pickle::to_plain_json;
using pickle::ValueError;

// An XML-RPC value as Python's xmlrpc.client (use_builtin_types) reads it.
pickle::PyValue to_python(const xmlrpc::Value& value);
// A JSON text for one argument (or a bridged result) in Python's dialect: plain JSON where the value
// is a scalar or a flat list or dict of scalars, else {"__pickled__": ...}.
inline std::string to_json_argument(const pickle::PyValue& value) { return pickle::dialect_text(value); }
// A Python value as a classic remote server returns it (see above).
xmlrpc::Value to_xmlrpc(const pickle::PyValue& value);

// A keyword argument's default in a classic argument spec ("name=default"): a str as it is, anything
// else as Python's repr() ("None", "True", "[1, 2]").
std::string default_text(const pickle::PyValue& value);

}  // namespace rjg::xmlrpc
