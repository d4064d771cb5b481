// Arguments arrive as sent, unevaluated: the gateway's side of workers that evaluate argument strings.
//
// The reference server (imbus/robotframework-jsonrpcremote, robot_jsonrpcremote_server) hands what a
// client sends to Robot Framework as test data (its _endpoint.py and _runner.py):
// * run_keyword: args and kwargs become running.Keyword(args=[...], named_args={name: value}) and run
//   through the library keyword's runner, whose argument resolution splits positional "name=value",
//   replaces variables in positional items (replace_list) and in named names and values
//   (replace_scalar), and unescapes backslashes;
// * import_library: each positional arg is made text with str() (0.2.0's _endpoint.py:
//   `list(str(a) for a in params.args)`), and in versions that pass kw_args each entry is appended as
//   the string f"{name}={value}"; Namespace.import_library() then resolves them against the library's
//   __init__ the same way. So a non-string value becomes its Python text, and that text is evaluated.
// So the gateway escapes every string Robot would evaluate there, exactly as Robot's own escape() does
// (common/protocol/robot_escape.hpp): positional strings, named names and string values, import args,
// kw_args names and string values. An import arg or kw_args value that is not a string (a JSON list or
// object, or a pickled value, which Python turns into text with repr() of its items) cannot be escaped,
// so every string inside it is checked and the import refused when one would be evaluated. Numbers,
// booleans and null become text without syntax. A pickle in run_keyword args or kwargs reaches the
// keyword as the object it builds, which Robot resolves only when it is a str: a pickle of a plain
// string holding syntax is refused (refuse_evaluated_pickles); lists and dicts are not resolved.
//
// Only the strings that change are rewritten (protocol::splice); every other byte of the params passes
// unchanged, number texts and unknown fields included.
#pragma once

#include "common/protocol/params.hpp"
#include "config/config.hpp"

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace rjg::gateway::session {

// server_info.name in the reference server's robot/initialize answer.
inline constexpr std::string_view kReferenceServerName = "RobotJsonRpcRemoteServer";

// Whether the worker of a library gets its argument strings escaped: arguments = "escape" always,
// "as-is" never, "auto" when its robot/initialize answer named the reference server.
bool escapes_arguments(config::Arguments mode, std::string_view worker_server_name);

// Rewrites params for a worker that evaluates argument strings: params.text gets the escaped strings
// and every slice in params is moved to match. Returns how many strings changed (0: text untouched).
std::size_t escape_arguments(protocol::RunKeyword& params);

struct ArgumentRefusal {
  std::string message;    // for the error answer: library, argument, the string, what to do
  std::string log;        // the same without the argument's text (values are not logged)
  std::string data_json;  // {"library", "path", "reason"}
};

// For a worker that evaluates arguments: a pickle at the top level of args or a kwargs value whose
// whole value is a string reaches Robot's argument resolution as that string, and cannot be escaped
// inside the pickle; it is refused when Robot would change it.
std::optional<ArgumentRefusal> refuse_evaluated_pickles(const protocol::RunKeyword& params,
                                                        const config::Library& library, std::string_view keyword);

// The same for an import; nullopt and the count of changed strings in *changed, or the refusal when a
// kw_args value that the worker turns into text holds a string its evaluation would change.
std::optional<ArgumentRefusal> escape_arguments(protocol::ImportLibrary& params, const config::Library& library,
                                                std::size_t* changed = nullptr);

}  // namespace rjg::gateway::session
