// Robot Framework's escaping of test data, for workers that evaluate the argument strings they get.
//
// The reference server (imbus/robotframework-jsonrpcremote) hands every argument string to Robot
// Framework as if it were test data, and Robot evaluates it: variables, inline Python, environment
// lookups, backslash escapes, `name=value` and control words all take effect. Escaping a string the way
// Robot's own robot.utils.escaping.escape() does makes that evaluation yield the string as it was sent.
//
// Where the rules come from (Robot Framework 6/7 sources; nothing is copied, only the behaviour):
//
// * robot/utils/escaping.py, escape(): a string that is exactly one of the control words ELSE,
//   ELSE IF, AND, WITH NAME, AS gets one backslash in front ("\AND"); otherwise every occurrence of
//   each of the sequences  \  ${  @{  %{  &{  *{  =  gets a backslash in front. The sequences are
//   replaced one after the other, backslash first, which equals one left-to-right pass that puts a
//   backslash before every "\" and "=", and before every one of $ @ % & * that is followed by "{".
// * robot/utils/escaping.py, Unescaper: a run of n backslashes becomes n/2 of them; when n is odd, the
//   last one escapes what follows: n, r, t become a newline, a carriage return, a tab; xHH, uHHHH,
//   UHHHHHHHH become that code point; any other character stays and the backslash is dropped. So the
//   escaped text unescapes back to the original: doubled backslashes halve, and "\$", "\=", "\A" lose
//   their backslash.
// * robot/variables (search.py, replacer.py): a variable starts at $ @ & % (and * in the search) followed
//   by "{" that is not preceded by an odd number of backslashes; replace_scalar() and replace_string()
//   resolve variables (${name}, extended ${name.attr...}, inline Python ${{expr}}, %{ENV}, @{list},
//   &{dict}) in the raw text and unescape the text around them. An escaped "\${" is no variable.
// * robot/running/arguments/argumentresolver.py, NamedArgumentResolver: a positional string is split at
//   its first "=" that is not escaped and not inside a variable (robot.utils.split_from_equals); when the
//   keyword accepts that name (or takes **kwargs) it becomes a named argument. "\=" never splits.
//   Names and values of named arguments both go through replace_scalar().
//
// Everything in the escaped text that the evaluation touches is undone by the unescaping, so the
// keyword receives the original string, whether Robot goes through replace_scalar (named values,
// names), replace_list (positional) or split_from_equals first.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace rjg::protocol {

// `s` escaped exactly as robot.utils.escaping.escape() does. UTF-8 passes through byte for byte (only
// ASCII bytes are ever matched).
std::string escape(std::string_view s);

// True when escape(s) != s: `s` holds something Robot would evaluate or split on (a backslash, "=", a
// variable start such as "${", or a whole control word).
bool holds_syntax(std::string_view s);

// The reason the text of a str (or bytes) value changes when Robot evaluates the Python text of a
// value that contains it (the reference server formats import kw_args as f"{name}={value}", so a list
// or dict there becomes its repr(), which Robot then evaluates), or nullopt when it arrives unchanged.
// Refused: variable starts ($@%&* followed by "{", which could run code), backslashes, and whatever
// repr() writes with a backslash (control characters, both quote kinds in one string, and for str the
// non-printable code points; that last check is a conservative approximation of str.isprintable()).
// The reason reads as a clause after "the string": "contains a backslash, which ...".
std::optional<std::string> evaluated_in_text(std::string_view s, bool is_bytes = false);

}  // namespace rjg::protocol
