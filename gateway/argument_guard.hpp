// Arguments arrive as sent, unevaluated: the gateway's side of workers that evaluate argument strings.
//
// The reference server (imbus/robotframework-jsonrpcremote, robot_jsonrpcremote_server) hands what a
// client sends to Robot Framework as test data (its _endpoint.py and _runner.py):
// * run_keyword: args and kwargs become running.Keyword(args=[...], named_args={name: value}) and run
//   through the library keyword's runner, whose argument resolution splits positional "name=value",
//   replaces variables in positional items (replace_list) and in named names and values
//   (replace_scalar), and unescapes backslashes;
// * import_library: positional args are passed on as they are (JSON types kept), and each kw_args entry
//   is appended as the string f"{name}={value}" (so a non-string value becomes its Python text) to
//   Namespace.import_library(), which resolves them against the library's __init__ the same way.
// So the gateway escapes every string Robot would evaluate there, exactly as Robot's own escape() does
// (common/protocol/robot_escape.hpp): positional strings, named names and string values, import args,
// kw_args names and string values. A kw_args value that is not a string (a JSON list or object, or a
// pickled value, which Python turns into text with repr() of its items) cannot be escaped, so every
// string inside it is checked and the import refused when one would be evaluated. Numbers, booleans and
// null become text without syntax. Pickles elsewhere reach the library as objects and need nothing.
//
// Only the strings that change are rewritten (jsontext::splice); every other byte of the params passes
// unchanged, number texts and unknown fields included.
#pragma once

#include "common/protocol/params.hpp"
#include "config/config.hpp"

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace rjg::gateway {

// server_info.name in the reference server's robot/initialize answer.
inline constexpr std::string_view kReferenceServerName = "RobotJsonRpcRemoteServer";

// Whether the worker of a library gets its argument strings escaped: arguments = "escape" always,
// "as-is" never, "auto" when its robot/initialize answer named the reference server.
bool escapes_arguments(config::Arguments mode, std::string_view worker_server_name);

// Rewrites params for a worker that evaluates argument strings: params.text gets the escaped strings
// and every slice in params is moved to match. Returns how many strings changed (0: text untouched).
std::size_t escape_arguments(params::RunKeyword& params);

struct ArgumentRefusal {
  std::string message;    // for the error answer: library, argument, the string, what to do
  std::string log;        // the same without the argument's text (values are not logged)
  std::string data_json;  // {"library", "path", "reason"}
};

// The same for an import; nullopt and the count of changed strings in *changed, or the refusal when a
// kw_args value that the worker turns into text holds a string its evaluation would change.
std::optional<ArgumentRefusal> escape_arguments(params::ImportLibrary& params, const config::Library& library,
                                                std::size_t* changed = nullptr);

}  // namespace rjg::gateway
