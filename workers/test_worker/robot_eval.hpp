// How the reference server's Robot Framework treats the argument strings it is given, reproduced for
// the test worker's --evaluate mode, so that integration tests can show what reaches a library behind
// an evaluating worker with and without the gateway's escaping (common/protocol/robot_escape.hpp has
// the rules and where they come from).
//
// Covered, as Robot Framework 6/7 does it:
// * variables: ${SPACE} " ", ${EMPTY} "", ${TRUE}/${FALSE}/${NONE} (booleans, null), numbers ${1},
//   ${-2}, ${1.5}, ${0x10}, ${LIST} and ${DICT} as scalars, @{LIST} ["a", "b"] (expanded in argument
//   lists), &{DICT} {"a": "1"} (a whole-argument &{DICT} becomes named arguments), %{NAME} and
//   %{NAME=default} from the environment; a variable that is the whole string keeps its type, one inside
//   a longer string becomes text; unknown or unclosed variables fail the call as Robot does;
// * inline Python ${{expr}} and extended syntax ${SPACE.__class__(...)} (any ${name...} whose name
//   starts with a known variable and goes on with Python): "code runs". The marker convention: every
//   open('PATH' (single or double quotes) in such an expression creates the file PATH, as the real
//   expression would; the value is the text "EVALUATED(expr)". ${{<integer>}} yields that integer;
// * backslash unescaping (\\ \n \r \t \xHH \uHHHH \UHHHHHHHH, any other escaped character loses its
//   backslash), after variables are found, so "\${x}" is the text "${x}";
// * `name=value` (split at the first "=" that is not escaped and not inside a variable) becomes a named
//   argument: these keywords and the library's init take **kwargs, so every name is accepted; a
//   positional argument after a named one fails; names and values are both resolved;
// * control words as syntax: a bare AND, ELSE or ELSE IF among keyword arguments is consumed (as
//   Run Keywords and IF do), and a bare AS or WITH NAME before the last import argument makes that
//   argument the alias. Escaped ("\AND") they are plain text.
#pragma once

#include <boost/json.hpp>

#include <stdexcept>
#include <string>
#include <string_view>

namespace rjg::test_worker {

namespace json = boost::json;

// Robot's error for data it cannot resolve ("Variable '${x}' not found.").
class EvalError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// robot.utils.escaping.unescape.
std::string unescape(std::string_view s);

// Variables.replace_scalar: a string that is exactly one variable becomes that variable's value (any
// type); otherwise variables become text and the rest is unescaped. Non-strings pass unchanged.
json::value replace_scalar(const json::value& v);

// What a keyword with (*args, **kwargs) receives from this call: {"args": [...], "kwargs": {...}}.
// Throws EvalError.
json::object resolve_keyword_call(const json::array& args, const json::object& kwargs);

// What a library whose __init__ takes (*args, **kwargs) receives from robot/import_library as the
// reference server passes it on (positional args, then each kw_args entry as the string
// f"{name}={value}"): {"args": [...], "kw_args": {...}} and "alias" when AS / WITH NAME named one.
// Throws EvalError.
json::object resolve_import(const json::array& args, const json::object& kw_args);

// Python's str() of a JSON value as the reference server sees it (True, None, ['a', 1], ...).
std::string python_str(const json::value& v);

}  // namespace rjg::test_worker
