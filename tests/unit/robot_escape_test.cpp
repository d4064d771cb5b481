// Robot Framework's escaping (common/protocol/robot_escape.hpp): the exact text of every form, and that
// the resolution Robot applies to arguments (reproduced by the test worker's robot_eval) turns the
// escaped text back into the original: as a positional argument, as a named value and name, and as an
// import argument or kw_args entry formatted "name=value" by the reference server.
#include "common/protocol/robot_escape.hpp"
#include "workers/test_worker/robot_eval.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace {

namespace json = boost::json;
namespace protocol = rjg::protocol;
namespace eval = rjg::test_worker;

// Every form the evaluation knows, plus strings that hold none.
const std::vector<std::string> kForms = {
    "${SPACE}", "${EMPTY}", "${TRUE}", "${1}", "${-2}", "${0x10}", "@{LIST}", "&{DICT}", "%{HOME}", "%{NOPE=dflt}",
    "${{1+1}}", "${{__import__('os').system('true')}}", "${SPACE.__class__('x')}", "${LIST}[0]", "a ${SPACE} b",
    "x${EMPTY}y${TRUE}", "${unclosed", "${", "$", "{}", "${}", "$${SPACE}", "\\", "a\\", "a\\\\", "\\\\\\", "a\\b",
    "\\n", "\\t\\r", "\\x41", "\\u00e4", "\\U0001F600", "\\${SPACE}", "\\\\${SPACE}", "name=value", "a=b=c",
    "\\=", "x\\=1", "=", "=x", "${SPACE}=1", "a=${SPACE}", "AND", "ELSE", "ELSE IF", "WITH NAME", "AS", "and",
    " AND", "AND ", "*{x}", "&{", "%{", "@{", "\\AND", "", "plain", "päivää 世界 😀", "a${SPACE}=${{1}}\\\\n",
};

TEST(RobotEscape, ExactTextOfEachForm) {
  EXPECT_EQ(protocol::escape(""), "");
  EXPECT_EQ(protocol::escape("plain text"), "plain text");
  EXPECT_EQ(protocol::escape("${x}"), "\\${x}");
  EXPECT_EQ(protocol::escape("@{x}"), "\\@{x}");
  EXPECT_EQ(protocol::escape("&{x}"), "\\&{x}");
  EXPECT_EQ(protocol::escape("%{x}"), "\\%{x}");
  EXPECT_EQ(protocol::escape("*{x}"), "\\*{x}");
  EXPECT_EQ(protocol::escape("${{1+1}}"), "\\${{1+1}}");
  EXPECT_EQ(protocol::escape("$${x}"), "$\\${x}");
  EXPECT_EQ(protocol::escape("$ {x} {"), "$ {x} {");
  EXPECT_EQ(protocol::escape("a\\b"), "a\\\\b");
  EXPECT_EQ(protocol::escape("\\"), "\\\\");
  EXPECT_EQ(protocol::escape("\\${x}"), "\\\\\\${x}");
  EXPECT_EQ(protocol::escape("a=b"), "a\\=b");
  EXPECT_EQ(protocol::escape("AND"), "\\AND");
  EXPECT_EQ(protocol::escape("ELSE IF"), "\\ELSE IF");
  EXPECT_EQ(protocol::escape("WITH NAME"), "\\WITH NAME");
  EXPECT_EQ(protocol::escape("AS"), "\\AS");
  EXPECT_EQ(protocol::escape("ELSE"), "\\ELSE");
  // Only whole control words: anything else is plain text to Robot.
  EXPECT_EQ(protocol::escape("and"), "and");
  EXPECT_EQ(protocol::escape("AND "), "AND ");
  EXPECT_EQ(protocol::escape("ANDY"), "ANDY");
  // A control word with "=" is not a control word; the "=" is escaped.
  EXPECT_EQ(protocol::escape("AS=1"), "AS\\=1");
  EXPECT_EQ(protocol::escape("päivää=世界"), "päivää\\=世界");
}

TEST(RobotEscape, HoldsSyntaxIsEscapeChangesIt) {
  for (const auto& s : kForms) EXPECT_EQ(protocol::holds_syntax(s), protocol::escape(s) != s) << s;
  EXPECT_FALSE(protocol::holds_syntax(""));
  EXPECT_FALSE(protocol::holds_syntax("plain, {braces} and $ @ & % * alone"));
  EXPECT_TRUE(protocol::holds_syntax("x=1"));
  EXPECT_TRUE(protocol::holds_syntax("AND"));
  EXPECT_TRUE(protocol::holds_syntax("%{HOME}"));
}

// The forms do evaluate: without escaping most of them arrive changed (or fail), which is why they
// are escaped. (A sanity check of the evaluator the other tests rely on.)
TEST(RobotEscape, UnescapedFormsAreEvaluated) {
  EXPECT_EQ(eval::replace_scalar(json::value("${SPACE}")), json::value(" "));
  EXPECT_EQ(eval::replace_scalar(json::value("${1}")), json::value(1));
  EXPECT_EQ(eval::replace_scalar(json::value("a\\b")), json::value("ab"));
  EXPECT_EQ(eval::replace_scalar(json::value("a\\")), json::value("a"));
  EXPECT_EQ(eval::replace_scalar(json::value("\\x41")), json::value("A"));
  EXPECT_EQ(eval::replace_scalar(json::value("x${EMPTY}y")), json::value("xy"));
  EXPECT_THROW(eval::replace_scalar(json::value("${nope}")), eval::EvalError);
  EXPECT_THROW(eval::replace_scalar(json::value("${unclosed")), eval::EvalError);
  auto call = eval::resolve_keyword_call(json::array{"plain", "AND", "@{LIST}"}, {});
  EXPECT_EQ(call["args"], (json::array{"plain", "a", "b"}));
  call = eval::resolve_keyword_call(json::array{"name=value"}, {});
  EXPECT_EQ(call["args"], json::array());
  EXPECT_EQ(call["kwargs"], (json::object{{"name", "value"}}));
  call = eval::resolve_keyword_call(json::array{"&{DICT}"}, {});
  EXPECT_EQ(call["kwargs"], (json::object{{"a", "1"}}));
  auto import = eval::resolve_import(json::array{"x", "AS", "Alias"}, {});
  EXPECT_EQ(import["args"], json::array{"x"});
  EXPECT_EQ(import["alias"], json::value("Alias"));
  // kw_args entries become "name=value" strings after the positional ones, then named arguments.
  import = eval::resolve_import(json::array{"x"}, json::object{{"k", "${TRUE}"}, {"l", json::array{"a\\b"}}});
  EXPECT_EQ(import["args"], json::array{"x"});
  EXPECT_EQ(import["kw_args"], (json::object{{"k", true}, {"l", "['a\\b']"}}));
}

TEST(RobotEscape, EscapedFormsArriveUnchangedAsPositionalArguments) {
  for (const auto& s : kForms) {
    SCOPED_TRACE(s);
    EXPECT_EQ(eval::replace_scalar(json::value(protocol::escape(s))), json::value(s));
    auto call = eval::resolve_keyword_call(json::array{json::value(protocol::escape(s))}, {});
    EXPECT_EQ(call["args"], json::array{json::value(s)});
    EXPECT_EQ(call["kwargs"], json::object());
  }
  // All at once, in order, control words among them.
  json::array escaped, original;
  for (const auto& s : kForms) escaped.emplace_back(protocol::escape(s)), original.emplace_back(s);
  auto call = eval::resolve_keyword_call(escaped, {});
  EXPECT_EQ(call["args"], original);
  EXPECT_EQ(call["kwargs"], json::object());
}

TEST(RobotEscape, EscapedFormsArriveUnchangedAsNamesAndNamedValues) {
  for (const auto& s : kForms) {
    SCOPED_TRACE(s);
    auto call = eval::resolve_keyword_call({}, json::object{{"value", protocol::escape(s)}});
    EXPECT_EQ(call["kwargs"], (json::object{{"value", s}}));
    if (s.empty()) continue;
    call = eval::resolve_keyword_call({}, json::object{{protocol::escape(s), "v"}});
    EXPECT_EQ(call["kwargs"], (json::object{{s, "v"}}));
  }
}

TEST(RobotEscape, EscapedFormsArriveUnchangedAsImportArguments) {
  for (const auto& s : kForms) {
    SCOPED_TRACE(s);
    auto import = eval::resolve_import(json::array{json::value(protocol::escape(s))}, {});
    EXPECT_EQ(import["args"], json::array{json::value(s)});
    EXPECT_EQ(import["kw_args"], json::object());
    import = eval::resolve_import({}, json::object{{"value", protocol::escape(s)}});
    EXPECT_EQ(import["kw_args"], (json::object{{"value", s}}));
    EXPECT_EQ(import["args"], json::array());
    if (s.empty()) continue;
    // The name is formatted into "name=value" too: escaped, its "=" cannot split the entry early.
    import = eval::resolve_import({}, json::object{{protocol::escape(s), "v"}});
    EXPECT_EQ(import["kw_args"], (json::object{{s, "v"}}));
  }
  // AS before the last import argument, escaped, is no alias.
  auto import = eval::resolve_import(json::array{"x", protocol::escape("AS"), "y"}, {});
  EXPECT_EQ(import["args"], (json::array{"x", "AS", "y"}));
  EXPECT_FALSE(import.contains("alias"));
}

TEST(RobotEscape, EvaluatedInText) {
  EXPECT_FALSE(protocol::evaluated_in_text("plain text"));
  EXPECT_FALSE(protocol::evaluated_in_text("a=b, AND, $ {x}, it's"));
  EXPECT_FALSE(protocol::evaluated_in_text("päivää 世界 😀"));
  EXPECT_FALSE(protocol::evaluated_in_text(""));
  for (std::string s : {"${x}", "@{x}", "&{x}", "%{x}", "*{x}", "a${{1}}", "${SPACE.__class__}"})
    EXPECT_TRUE(protocol::evaluated_in_text(s)) << s;
  EXPECT_NE(protocol::evaluated_in_text("a\\b")->find("backslash"), std::string::npos);
  EXPECT_TRUE(protocol::evaluated_in_text("line\nbreak"));
  EXPECT_TRUE(protocol::evaluated_in_text(std::string("nul\0", 4)));
  EXPECT_TRUE(protocol::evaluated_in_text("it's \"quoted\""));
  EXPECT_TRUE(protocol::evaluated_in_text("\xc2\x85"));       // U+0085, a C1 control
  EXPECT_TRUE(protocol::evaluated_in_text("\xe2\x80\xa8"));   // U+2028 line separator
  EXPECT_TRUE(protocol::evaluated_in_text("\xef\xbb\xbf"));   // U+FEFF
  EXPECT_TRUE(protocol::evaluated_in_text("\xff"));           // not UTF-8
  EXPECT_FALSE(protocol::evaluated_in_text("bytes ok", true));
  EXPECT_TRUE(protocol::evaluated_in_text("\xc3\xa4", true));  // bytes >= 0x80 are \x escapes in repr
  EXPECT_TRUE(protocol::evaluated_in_text("${x}", true));
}

}  // namespace
