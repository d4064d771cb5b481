// The validating JSON scanner (common/protocol/json_text.hpp): which texts are JSON and which are
// not (RFC 8259, UTF-8), the depth limit, where values are (root, members, last duplicate wins), and
// the string helpers decode_string, quote and splice.
#include "common/protocol/json_text.hpp"

#include "common/protocol/message.hpp"
#include "common/protocol/params.hpp"
#include "tests/unit/hash_flood.hpp"

#include <boost/json.hpp>
#include <boost/json/detail/digest.hpp>
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

namespace {

using namespace std::string_literals;
namespace protocol = rjg::protocol;
using protocol::Kind;

struct Case {
  const char* name;
  std::string text;
  std::optional<Kind> kind;  // nullopt: not JSON
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class ScanTable : public ::testing::TestWithParam<Case> {};

TEST_P(ScanTable, AcceptsJsonAndRefusesTheRest) {
  const auto& c = GetParam();
  auto [scanned, error] = protocol::scan(c.text);
  if (c.kind) {
    ASSERT_TRUE(scanned.has_value()) << c.name << ": " << (error ? error->message : "") << " at byte "
                                     << (error ? error->offset : 0);
    EXPECT_FALSE(error.has_value());
    EXPECT_EQ(scanned->kind, *c.kind);
    // The root slice is the value without the white space around it.
    const auto first = c.text.find_first_not_of(" \t\r\n");
    const auto last = c.text.find_last_not_of(" \t\r\n");
    EXPECT_EQ(scanned->root.of(c.text), c.text.substr(first, last - first + 1));
  } else {
    ASSERT_FALSE(scanned.has_value()) << c.name << " was accepted";
    ASSERT_TRUE(error.has_value());
    EXPECT_FALSE(error->message.empty());
    EXPECT_LE(error->offset, c.text.size());
    EXPECT_FALSE(error->too_deep) << error->message;
  }
}

const Case kCases[] = {
    // literals
    {"null", "null", Kind::null},
    {"true", "true", Kind::boolean},
    {"false", "false", Kind::boolean},
    {"white_space_around", " \t\r\n true \n", Kind::boolean},
    {"literal_cut", "nul", std::nullopt},
    {"literal_misspelt", "tru", std::nullopt},
    {"literal_capitalized", "True", std::nullopt},
    {"literal_upper", "NULL", std::nullopt},
    {"literal_too_long", "nulll", std::nullopt},
    {"undefined", "undefined", std::nullopt},
    // numbers, in every spelling JSON has
    {"zero", "0", Kind::number},
    {"minus_zero", "-0", Kind::number},
    {"minus_zero_fraction", "-0.0", Kind::number},
    {"integer", "123", Kind::number},
    {"negative", "-7", Kind::number},
    {"fraction", "0.5", Kind::number},
    {"fraction_trailing_zero", "0.10", Kind::number},
    {"exponent_lower", "1e2", Kind::number},
    {"exponent_upper", "1E2", Kind::number},
    {"exponent_plus", "1E+2", Kind::number},
    {"exponent_minus", "1e-2", Kind::number},
    {"fraction_exponent", "-1.5e10", Kind::number},
    {"exponent_leading_zeros", "1e007", Kind::number},
    {"beyond_uint64", "18446744073709551617", Kind::number},
    {"forty_digits", "1234567890123456789012345678901234567890", Kind::number},
    {"largest_double", "1.7976931348623157e308", Kind::number},
    {"smallest_denormal", "4.9e-324", Kind::number},
    {"underflow_is_zero", "1e-400", Kind::number},
    {"leading_zero", "01", std::nullopt},
    {"minus_leading_zero", "-01", std::nullopt},
    {"minus_alone", "-", std::nullopt},
    {"plus", "+1", std::nullopt},
    {"no_integer_part", ".5", std::nullopt},
    {"no_fraction_digits", "1.", std::nullopt},
    {"dot_before_exponent", "1.e5", std::nullopt},
    {"no_exponent_digits", "1e", std::nullopt},
    {"sign_without_exponent_digits", "1e+", std::nullopt},
    {"hex", "0x10", std::nullopt},
    {"underscore", "1_000", std::nullopt},
    {"double_minus", "--1", std::nullopt},
    {"space_after_minus", "- 1", std::nullopt},
    // Numbers are never computed, so none is out of range: the text passes on as written.
    {"overflow", "1e400", Kind::number},
    {"negative_overflow", "-1e400", Kind::number},
    {"zero_with_huge_exponent", "0e400", Kind::number},
    {"exponent_beyond_range", "1e-9999999999", Kind::number},
    {"long_zero_exponent", "0e99999999999999999999", Kind::number},
    {"overflow_by_digits", std::string(400, '9'), Kind::number},
    {"minus_forty_digits", "-1234567890123456789012345678901234567890", Kind::number},
    {"smallest_subnormal", "5e-324", Kind::number},
    {"negative_zero_fraction", "-0.0", Kind::number},
    {"exponent_upper_plus", "1E+2", Kind::number},
    {"exponent_minus_leading_zeros", "1e-007", Kind::number},
    // What Python's json module writes for float('nan') and float('inf'), and nothing else like it.
    {"nan", "NaN", Kind::number},
    {"infinity", "Infinity", Kind::number},
    {"minus_infinity", "-Infinity", Kind::number},
    {"non_finite_in_values", R"({"a":[NaN,Infinity,-Infinity]})", Kind::object},
    {"nan_lower", "nan", std::nullopt},
    {"nan_upper", "NAN", std::nullopt},
    {"nan_signed", "-NaN", std::nullopt},
    {"plus_infinity", "+Infinity", std::nullopt},
    {"infinity_short", "Inf", std::nullopt},
    {"infinity_lower", "infinity", std::nullopt},
    {"infinity_cut", "-Infinit", std::nullopt},
    {"nan_as_key", "{NaN:1}", std::nullopt},
    // strings and escapes
    {"empty_string", R"("")", Kind::string},
    {"string", R"("abc")", Kind::string},
    {"every_short_escape", R"("\" \\ \/ \b \f \n \r \t")", Kind::string},
    {"u_escape", R"("\u00e9")", Kind::string},
    {"u_escape_upper_hex", R"("\u00E9")", Kind::string},
    {"u_escape_nul", R"("\u0000")", Kind::string},
    {"surrogate_pair", R"("\ud83d\ude00")", Kind::string},
    {"surrogate_pair_upper_hex", R"("\uD83D\uDE00")", Kind::string},
    {"highest_surrogate_pair", R"("\udbff\udfff")", Kind::string},
    {"surrogate_pair_in_a_key", R"({"\ud83d\ude00":1})", Kind::object},
    // Surrogate escapes only in high-low pairs (as Boost.JSON reads them, so every tree view can be built).
    {"lone_high_surrogate", R"("\ud800")", std::nullopt},
    {"lone_low_surrogate", R"("\udc00")", std::nullopt},
    {"reversed_surrogates", R"("\ude00\ud83d")", std::nullopt},
    {"high_surrogate_then_other_escape", R"("\ud800\u0041")", std::nullopt},
    {"high_surrogate_then_text", R"("\ud800x")", std::nullopt},
    {"high_surrogate_then_high", R"("\ud800\ud800")", std::nullopt},
    {"lone_surrogate_in_a_key", R"({"\udc00":1})", std::nullopt},
    {"unterminated", R"("abc)", std::nullopt},
    {"unterminated_after_escape", R"("\")", std::nullopt},
    {"backslash_at_end", "\"\\", std::nullopt},
    {"unknown_escape", R"("\x41")", std::nullopt},
    {"upper_u_escape", R"("\U0041")", std::nullopt},
    {"short_u_escape", R"("\u12")", std::nullopt},
    {"u_escape_not_hex", R"("\u12G4")", std::nullopt},
    {"single_quotes", "'a'", std::nullopt},
    // control characters must be escaped
    {"raw_newline", "\"a\nb\"", std::nullopt},
    {"raw_tab", "\"\t\"", std::nullopt},
    {"raw_nul", "\"\0\""s, std::nullopt},
    {"raw_0x01", "\"\x01\"", std::nullopt},
    {"raw_0x1f", "\"\x1f\"", std::nullopt},
    {"raw_del_is_fine", "\"\x7f\"", Kind::string},
    // UTF-8
    {"utf8_two_bytes", "\"\xC3\xA9\"", Kind::string},
    {"utf8_three_bytes", "\"\xE2\x82\xAC\"", Kind::string},
    {"utf8_four_bytes", "\"\xF0\x9F\x98\x80\"", Kind::string},
    {"utf8_u_ffff", "\"\xEF\xBF\xBF\"", Kind::string},
    {"utf8_u_10ffff", "\"\xF4\x8F\xBF\xBF\"", Kind::string},
    {"utf8_before_surrogates", "\"\xED\x9F\xBF\"", Kind::string},
    {"utf8_after_surrogates", "\"\xEE\x80\x80\"", Kind::string},
    {"overlong_nul", "\"\xC0\x80\"", std::nullopt},
    {"overlong_two_bytes", "\"\xC1\xBF\"", std::nullopt},
    {"overlong_three_bytes", "\"\xE0\x80\x80\"", std::nullopt},
    {"overlong_three_bytes_max", "\"\xE0\x9F\xBF\"", std::nullopt},
    {"overlong_four_bytes", "\"\xF0\x8F\xBF\xBF\"", std::nullopt},
    {"surrogate_code_point_high", "\"\xED\xA0\x80\"", std::nullopt},
    {"surrogate_code_point_low", "\"\xED\xBF\xBF\"", std::nullopt},
    {"above_10ffff", "\"\xF4\x90\x80\x80\"", std::nullopt},
    {"lead_f5", "\"\xF5\x80\x80\x80\"", std::nullopt},
    {"lead_ff", "\"\xFF\"", std::nullopt},
    {"lone_continuation", "\"\x80\"", std::nullopt},
    {"bad_continuation", "\"\xC3\x28\"", std::nullopt},
    {"truncated_two_bytes", "\"\xC3\"", std::nullopt},
    {"truncated_three_bytes", "\"\xE2\x82\"", std::nullopt},
    {"truncated_four_bytes", "\"\xF0\x9F\x98\"", std::nullopt},
    {"truncated_at_end_of_input", "\"\xE2\x82", std::nullopt},
    {"utf8_outside_a_string", "\xC3\xA9", std::nullopt},
    {"byte_order_mark", "\xEF\xBB\xBF{}", std::nullopt},
    // arrays and objects
    {"empty_array", "[]", Kind::array},
    {"empty_object", "{}", Kind::object},
    {"empty_with_space", "[ \n ]", Kind::array},
    {"nested", R"([1,[2,[3,{"a":[]}]],{}])", Kind::array},
    {"object", R"({"a":{"b":[]},"c":null})", Kind::object},
    {"empty_key", R"({"":0})", Kind::object},
    {"duplicate_keys", R"({"a":1,"a":2})", Kind::object},
    {"space_everywhere", " { \"a\" : [ 1 , 2 ] , \"b\" : { } } ", Kind::object},
    {"trailing_comma_array", "[1,]", std::nullopt},
    {"leading_comma_array", "[,1]", std::nullopt},
    {"missing_comma_array", "[1 2]", std::nullopt},
    {"key_without_value", R"({"a"})", std::nullopt},
    {"colon_without_value", R"({"a":})", std::nullopt},
    {"trailing_comma_object", R"({"a":1,})", std::nullopt},
    {"missing_comma_object", R"({"a":1 "b":2})", std::nullopt},
    {"bare_key", "{a:1}", std::nullopt},
    {"number_key", "{1:1}", std::nullopt},
    {"unclosed_array", "[", std::nullopt},
    {"unclosed_object", "{", std::nullopt},
    {"unclosed_nested", R"({"a":[1,{"b":2})", std::nullopt},
    {"close_only", "]", std::nullopt},
    {"mismatched_close", "[}", std::nullopt},
    {"mismatched_close_object", "{]", std::nullopt},
    // exactly one value
    {"empty_input", "", std::nullopt},
    {"only_white_space", " \n\t ", std::nullopt},
    {"extra_close", "[1]]", std::nullopt},
    {"two_values", "{} {}", std::nullopt},
    {"two_numbers", "1 2", std::nullopt},
    {"text_after_string", R"("a" x)", std::nullopt},
    {"text_after_object", "{}x", std::nullopt},
    {"comment_before", "//c\n{}", std::nullopt},
    {"comment_after", R"({"a":1}/* c */)", std::nullopt},
    {"nul_after", "{}\0"s, std::nullopt},
};

INSTANTIATE_TEST_SUITE_P(Json, ScanTable, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(Scan, ErrorsSayWhatAndWhere) {
  struct Expect {
    std::string text;
    std::string_view words;
    std::optional<std::size_t> offset;  // nullopt: somewhere in the escape
  };
  for (const auto& e : std::vector<Expect>{{"[1,]", "unexpected character", 3},
                                           {R"("abc)", "unterminated string", 4},
                                           {"\"a\nb\"", "control character", 2},
                                           {"\"\xC0\x80\"", "invalid UTF-8", 1},
                                           {"[NaNa]", "expected ',' or ']'", 4},
                                           {"[-Inf]", "invalid literal", 1},
                                           {"{} x", "unexpected text after the JSON value", 3},
                                           {"", "unexpected end of input", 0},
                                           {R"(["\ud800"])", "lone high surrogate", std::nullopt},
                                           {R"(["\udc00"])", "lone low surrogate", std::nullopt}}) {
    auto [scanned, error] = protocol::scan(e.text);
    ASSERT_TRUE(error.has_value()) << e.text;
    EXPECT_NE(error->message.find(e.words), std::string::npos) << e.text << ": " << error->message;
    if (e.offset) EXPECT_EQ(error->offset, *e.offset) << e.text << ": " << error->message;
    else EXPECT_TRUE(error->offset >= 2 && error->offset <= 8) << e.text << ": " << error->offset;
  }
}

TEST(Scan, NonFiniteLiteralsAreNumbersAndToldApart) {
  for (std::string_view text : {"NaN", "Infinity", "-Infinity"}) EXPECT_TRUE(protocol::is_non_finite(text)) << text;
  for (std::string_view text : {"0", "-0.0", "1e400", "-1", "12"}) EXPECT_FALSE(protocol::is_non_finite(text)) << text;
  const std::string text = R"({"n":NaN,"i":-Infinity})";
  auto [scanned, error] = protocol::scan(text);
  ASSERT_TRUE(scanned.has_value());
  ASSERT_EQ(scanned->members.size(), 2u);
  EXPECT_EQ(scanned->members[0].kind, Kind::number);
  EXPECT_EQ(scanned->members[0].value.of(text), "NaN");
  EXPECT_EQ(scanned->members[1].value.of(text), "-Infinity");
}

// `levels` containers opened by `open` and closed by `close`, nested around `inner`: nested(2, "[", "1", ']')
// is [[1]], nested(2, R"({"a":)", "1", '}') is {"a":{"a":1}}.
std::string nested(std::size_t levels, std::string_view open, std::string_view inner, char close) {
  std::string text;
  while (text.size() < levels * open.size()) text += open;
  return text.append(inner).append(levels, close);
}
std::string nested_arrays(std::size_t levels, bool empty_inside) {
  return nested(levels, "[", empty_inside ? "" : "1", ']');
}
std::string nested_objects(std::size_t levels) { return nested(levels, R"({"a":)", "1", '}'); }

TEST(Scan, DepthLimitIsExactlyMaxDepth) {
  for (std::size_t max_depth : {1u, 5u, 64u}) {
    protocol::Limits limits;
    limits.max_depth = max_depth;
    for (bool empty_inside : {false, true}) {
      auto at = protocol::scan(nested_arrays(max_depth, empty_inside), limits);
      EXPECT_TRUE(at.first.has_value()) << max_depth << " levels of arrays (empty inside: " << empty_inside << ")";
      auto above = protocol::scan(nested_arrays(max_depth + 1, empty_inside), limits);
      ASSERT_TRUE(above.second.has_value()) << max_depth + 1 << " levels of arrays were accepted";
      EXPECT_TRUE(above.second->too_deep) << above.second->message;
    }
    EXPECT_TRUE(protocol::scan(nested_objects(max_depth), limits).first.has_value()) << max_depth << " levels of objects";
    auto above = protocol::scan(nested_objects(max_depth + 1), limits);
    ASSERT_TRUE(above.second.has_value()) << max_depth + 1 << " levels of objects were accepted";
    EXPECT_TRUE(above.second->too_deep);
  }
  // The default is 64.
  EXPECT_TRUE(protocol::scan(nested_arrays(64, false)).first.has_value());
  EXPECT_TRUE(protocol::scan(nested_arrays(65, false)).second->too_deep);
  // Scalars have no depth: max_depth 0 still admits them, and nothing else.
  protocol::Limits flat;
  flat.max_depth = 0;
  EXPECT_TRUE(protocol::scan("\"s\"", flat).first.has_value());
  EXPECT_TRUE(protocol::scan("[]", flat).second->too_deep);
}

TEST(Scan, DeepBombIsRefusedWithoutRecursion) {
  auto [scanned, error] = protocol::scan(std::string(1'000'000, '['));
  ASSERT_TRUE(error.has_value());
  EXPECT_TRUE(error->too_deep);
}

TEST(Scan, RootMembersInOrderWithTheirKindsAndPlaces) {
  const std::string text = R"( {"a":1E+2, "b" : {"x":[1,{"y":2}]},"c":[],"\u0064":"s\"","e":null,"f":true,"a":-0.0} )";
  auto [scanned, error] = protocol::scan(text);
  ASSERT_TRUE(scanned.has_value()) << error->message;
  EXPECT_EQ(scanned->kind, Kind::object);
  EXPECT_EQ(scanned->root.offset, 1u);
  EXPECT_EQ(scanned->root.size, text.size() - 2);

  struct Expected {
    std::string key;
    Kind kind;
    std::string value;
  };
  const std::vector<Expected> expected = {
      {"a", Kind::number, "1E+2"},   {"b", Kind::object, R"({"x":[1,{"y":2}]})"}, {"c", Kind::array, "[]"},
      {"d", Kind::string, R"("s\"")"}, {"e", Kind::null, "null"}, {"f", Kind::boolean, "true"},
      {"a", Kind::number, "-0.0"}};
  ASSERT_EQ(scanned->members.size(), expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(scanned->members[i].key, expected[i].key) << i;  // decoded: "\u0064" is "d"
    EXPECT_EQ(scanned->members[i].kind, expected[i].kind) << i;
    EXPECT_EQ(scanned->members[i].value.of(text), expected[i].value) << i;
  }

  // Nested members are not root members; other roots have none.
  EXPECT_TRUE(protocol::scan("[{\"a\":1}]").first->members.empty());
  EXPECT_TRUE(protocol::scan("{}").first->members.empty());
  EXPECT_TRUE(protocol::scan("\"a\"").first->members.empty());
}

TEST(Members, OfAnObjectTextAndFindTakesTheLastDuplicate) {
  const std::string object = R"({"id":"first","method":"m","params":{"id":"inner"},"id":"last"})";
  auto members = protocol::members(object);
  ASSERT_EQ(members.size(), 4u);
  const protocol::Member* id = protocol::find(members, "id");
  ASSERT_NE(id, nullptr);
  EXPECT_EQ(id->value.of(object), R"("last")");  // as Python's json module reads it
  EXPECT_EQ(id, &members[3]);
  ASSERT_NE(protocol::find(members, "params"), nullptr);
  EXPECT_EQ(protocol::find(members, "params")->kind, Kind::object);
  EXPECT_EQ(protocol::find(members, "absent"), nullptr);
  const std::vector<protocol::Member> none;
  EXPECT_EQ(protocol::find(none, "id"), nullptr);

  // Slices are relative to the text given: members of a nested object's own text.
  const auto params = protocol::find(members, "params")->value.of(object);
  auto inner = protocol::members(params);
  ASSERT_EQ(inner.size(), 1u);
  EXPECT_EQ(inner[0].value.of(params), R"("inner")");

  // Anything that is not an object has no members.
  EXPECT_TRUE(protocol::members("[1,2]").empty());
  EXPECT_TRUE(protocol::members("\"{}\"").empty());
  EXPECT_TRUE(protocol::members("{}").empty());
}

TEST(Members, AreFoundAtAnyDepthOfTheirOwnText) {
  // members() has no depth limit of its own: it reads texts scan() already validated.
  const std::string deep = R"({"k":)" + nested_arrays(200, false) + "}";
  auto members = protocol::members(deep);
  ASSERT_EQ(members.size(), 1u);
  EXPECT_EQ(members[0].kind, Kind::array);
}

TEST(DecodeString, Escapes) {
  struct Case {
    std::string literal;
    std::string decoded;
  };
  for (const auto& c : std::vector<Case>{
           {R"("")", ""},
           {R"("abc")", "abc"},
           {R"("\" \\ \/ \b \f \n \r \t")", "\" \\ / \b \f \n \r \t"},
           {R"("caf\u00e9")", "caf\xC3\xA9"},
           {R"("\u20AC")", "\xE2\x82\xAC"},
           {R"("\ud83d\ude00")", "\xF0\x9F\x98\x80"},
           {R"("\uD83D\uDE00")", "\xF0\x9F\x98\x80"},
           {R"("\udbff\udfff")", "\xF4\x8F\xBF\xBF"},
           {R"("\u0000")", "\0"s},
           // scan() refuses lone surrogates; decode_string() turns any that reach it into U+FFFD.
           {R"("\ud800")", "\xEF\xBF\xBD"},
           {R"("\udc00")", "\xEF\xBF\xBD"},
           {R"("\ud800\u0041")", "\xEF\xBF\xBD" "A"},        // a high surrogate not followed by a low one
           {R"("\ud800x")", "\xEF\xBF\xBD" "x"},
           {R"("\ude00\ud83d")", "\xEF\xBF\xBD\xEF\xBF\xBD"},  // reversed
           {"\"raw \xC3\xA9 \xF0\x9F\x98\x80\"", "raw \xC3\xA9 \xF0\x9F\x98\x80"},
       }) {
    EXPECT_EQ(protocol::decode_string(c.literal), c.decoded) << c.literal;
  }
}

TEST(Quote, RoundTripsThroughScanAndDecode) {
  std::vector<std::string> samples = {"", "plain", "quote\" and back\\slash", "/ stays", "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80",
                                      "\x7f", "tab\there\nnewline\r\b\f"};
  std::string every_control;
  for (int c = 0; c < 0x20; ++c) every_control += static_cast<char>(c);
  samples.push_back(every_control);
  for (const auto& s : samples) {
    const std::string q = protocol::quote(s);
    auto [scanned, error] = protocol::scan(q);
    ASSERT_TRUE(scanned.has_value()) << q << ": " << error->message;
    EXPECT_EQ(scanned->kind, Kind::string);
    EXPECT_EQ(protocol::decode_string(q), s) << q;
  }
  EXPECT_EQ(protocol::quote("a\"b\\c"), R"("a\"b\\c")");
  EXPECT_EQ(protocol::quote("\n\r\t\b\f"), R"("\n\r\t\b\f")");
  EXPECT_EQ(protocol::quote("\x01\x1f"), R"("\u0001\u001f")");
  EXPECT_EQ(protocol::quote("\0"s), R"("\u0000")");
  EXPECT_EQ(protocol::quote("/ \xC3\xA9"), "\"/ \xC3\xA9\"");  // the rest as is
}

TEST(Splice, ReplacesEachSliceAndNothingElse) {
  EXPECT_EQ(protocol::splice("abcdef", {}), "abcdef");
  EXPECT_EQ(protocol::splice("abcdef", {{{0, 1}, "X"}}), "Xbcdef");
  EXPECT_EQ(protocol::splice("abcdef", {{{5, 1}, "XYZ"}}), "abcdeXYZ");
  EXPECT_EQ(protocol::splice("abcdef", {{{1, 4}, ""}}), "af");
  EXPECT_EQ(protocol::splice("abcdef", {{{3, 0}, "--"}}), "abc--def");  // an empty slice inserts
  // Any order.
  EXPECT_EQ(protocol::splice("abcdef", {{{4, 2}, "4"}, {{0, 1}, "0"}, {{2, 1}, "2"}}), "0b2d4");
  EXPECT_EQ(protocol::splice("", {{{0, 0}, "x"}}), "x");

  // What a relay does: rewrite the values it owns, found by the scanner, every other byte as it came.
  const std::string text = R"({"id":"c-1", "params":{"library_token":"t1","args":[1E+2,"\u00e9"]}})";
  auto members = protocol::members(text);
  const protocol::Member* id = protocol::find(members, "id");
  const protocol::Member* params = protocol::find(members, "params");
  ASSERT_TRUE(id && params);
  auto inner = protocol::members(params->value.of(text));
  const protocol::Member* token = protocol::find(inner, "library_token");
  ASSERT_TRUE(token);
  const protocol::Slice token_in_text{params->value.offset + token->value.offset, token->value.size};
  EXPECT_EQ(protocol::splice(text, {{token_in_text, R"("w-9")"}, {id->value, "17"}}),
            R"({"id":17, "params":{"library_token":"w-9","args":[1E+2,"\u00e9"]}})");
}

TEST(Limits, BoundTheMembersOfEveryObject) {
  protocol::Limits limits;
  limits.max_object_members = 3;
  EXPECT_TRUE(protocol::scan(R"({"a":1,"b":2,"c":{"x":1,"y":2,"z":3}})", limits).first.has_value());
  for (std::string text : {R"({"a":1,"b":2,"c":3,"d":4})"s, R"([{"a":1,"b":2,"c":3,"d":4}])"s,
                           R"({"a":{"a":1,"b":2,"c":3,"d":4}})"s}) {
    auto [scanned, error] = protocol::scan(text, limits);
    ASSERT_TRUE(error.has_value()) << text;
    EXPECT_TRUE(error->too_many_members) << text;
    EXPECT_NE(error->message.find("more than 3 members"), std::string::npos) << error->message;
    EXPECT_EQ(text[error->offset], '{') << "the offset is where the object begins: " << text;
  }
  // Duplicates count: they are members all the same.
  EXPECT_TRUE(protocol::scan(R"({"a":1,"a":2,"a":3,"a":4})", limits).second->too_many_members);
}

// Records walk()'s events as text.
struct Recorder final : protocol::Visitor {
  std::string_view text;
  std::string events;
  std::size_t stop_after = static_cast<std::size_t>(-1);
  bool note(std::string e) {
    events += e + " ";
    return --stop_after != 0;
  }
  bool begin(Kind k, std::size_t offset) override { return note(fmt::format("begin{}@{}", k == Kind::object ? "{" : "[", offset)); }
  bool key(protocol::Slice literal) override { return note("key" + std::string(literal.of(text))); }
  bool scalar(Kind, protocol::Slice value) override { return note(std::string(value.of(text))); }
  bool end(Kind k, protocol::Slice value) override { return note(fmt::format("end{}", std::string(value.of(text)))); }
};

TEST(Walk, ReportsEveryValueInOrder) {
  const std::string text = R"({"a":[1,NaN,{}],"b\u0041":"x","c":[]})";
  Recorder r;
  r.text = text;
  EXPECT_FALSE(protocol::walk(text, r).has_value());
  EXPECT_EQ(r.events,
            R"(begin{@0 key"a" begin[@5 1 NaN begin{@12 end{} end[1,NaN,{}] key"b\u0041" "x" key"c" begin[@34 end[] end{"a":[1,NaN,{}],"b\u0041":"x","c":[]} )");
  // The visitor can stop the walk.
  Recorder stopping;
  stopping.text = text;
  stopping.stop_after = 3;
  auto error = protocol::walk(text, stopping);
  ASSERT_TRUE(error.has_value());
  EXPECT_TRUE(error->stopped);
  // Invalid JSON is an error, not a stop.
  Recorder broken;
  broken.text = "[1,]";
  auto bad = protocol::walk("[1,]", broken);
  ASSERT_TRUE(bad.has_value());
  EXPECT_FALSE(bad->stopped);
}

// The work of classifying a message and binding its params, counted by protocol::operations().
std::uint64_t relay_work(const std::string& body, std::size_t max_members) {
  const auto before = protocol::operations();
  auto classified = rjg::protocol::parse_message(body, rjg::protocol::JsonLimits{64, max_members});
  const auto* m = std::get_if<rjg::protocol::Message>(&classified);
  EXPECT_TRUE(m) << "not classified";
  if (!m) return 0;
  auto bound = rjg::protocol::bind_run_keyword(*m);
  EXPECT_TRUE(std::holds_alternative<rjg::protocol::RunKeyword>(bound));
  return protocol::operations() - before;
}

// A run_keyword request with `object` as kwargs, as the only argument, and its keys at the top level of
// the message and of the params too.
std::vector<std::string> flood_frames(const std::vector<std::string>& keys) {
  const std::string object = rjg::test::object_of_keys(keys);
  const std::string members = object.substr(1, object.size() - 2);
  const std::string base = R"("library_token":"t","name":"Echo")";
  return {
      fmt::format(R"({{"jsonrpc":"2.0","id":1,"method":"robot/run_keyword","params":{{{},"kwargs":{}}}}})", base, object),
      fmt::format(R"({{"jsonrpc":"2.0","id":1,"method":"robot/run_keyword","params":{{{},"args":[{}]}}}})", base, object),
      fmt::format(R"({{"jsonrpc":"2.0","id":1,"method":"robot/run_keyword","params":{{{},{}}}}})", base, members),
      fmt::format(R"({{{},"jsonrpc":"2.0","id":1,"method":"robot/run_keyword","params":{{{}}}}})", members, base),
  };
}

// Keys crafted to fall into one bucket of Boost.JSON's hash table cost the scanner exactly what as
// many ordinary keys of the same length cost, and twice the keys cost twice the work: no hashing, no
// lookup that grows with the members. A count, not a clock.
TEST(Flood, WorkIsLinearUnderKeysThatCollideInBoostJson) {
  std::vector<double> per_byte;
  for (unsigned stages : {15u, 16u}) {
    SCOPED_TRACE(stages);
    const auto colliding = rjg::test::colliding_keys(stages);
    const auto ordinary = rjg::test::ordinary_keys(stages);
    // They do collide, for any salt (table address) whose lowest byte is 0x10.
    const std::size_t buckets = std::size_t{1} << stages;
    for (std::size_t salt : {std::size_t{0x7f3a12345010}, std::size_t{0x55d0c0de0010}}) {
      const auto bucket = [&](const std::string& k) {
        return boost::json::detail::digest(k.begin(), k.end(), salt) % buckets;
      };
      const auto first = bucket(colliding[0]);
      EXPECT_TRUE(std::all_of(colliding.begin(), colliding.end(), [&](auto& k) { return bucket(k) == first; }));
      std::size_t same = 0;
      for (const auto& k : ordinary) same += bucket(k) == bucket(ordinary[0]);
      EXPECT_LT(same, 64u) << "the ordinary keys collide too";
    }
    const auto flood = flood_frames(colliding);
    const auto plain = flood_frames(ordinary);
    for (std::size_t i = 0; i < flood.size(); ++i) {
      ASSERT_EQ(flood[i].size(), plain[i].size());
      const auto work = relay_work(flood[i], std::size_t{1} << 20);
      EXPECT_EQ(work, relay_work(plain[i], std::size_t{1} << 20)) << "frame " << i;
      per_byte.push_back(static_cast<double>(work) / static_cast<double>(flood[i].size()));
      EXPECT_LT(per_byte.back(), 8.0) << "frame " << i;
    }
  }
  // 2^16 keys cost per byte what 2^15 cost (to 1%).
  for (std::size_t i = 0; i < 4; ++i) EXPECT_NEAR(per_byte[i + 4], per_byte[i], per_byte[i] / 100) << "frame " << i;
}

// With the limit below the member count, the message is refused early with -32600 and its id.
TEST(Flood, TooManyMembersIsAnInvalidRequestWithItsId) {
  const auto frames = flood_frames(rjg::test::ordinary_keys(10));
  for (const auto& body : frames) {
    auto classified = rjg::protocol::parse_message(body, rjg::protocol::JsonLimits{64, 1000});
    const auto* problem = std::get_if<rjg::protocol::ProtocolError>(&classified);
    ASSERT_TRUE(problem);
    EXPECT_EQ(problem->code, -32600);
    EXPECT_NE(problem->message.find("more than 1000 members"), std::string::npos) << problem->message;
    EXPECT_NE(problem->message.find("max_object_members"), std::string::npos) << problem->message;
    EXPECT_EQ(problem->id_text, "1");
  }
}

TEST(Kinds, HaveReadableNames) {
  EXPECT_EQ(protocol::to_string(Kind::null), "null");
  EXPECT_EQ(protocol::to_string(Kind::boolean), "a boolean");
  EXPECT_EQ(protocol::to_string(Kind::number), "a number");
  EXPECT_EQ(protocol::to_string(Kind::string), "a string");
  EXPECT_EQ(protocol::to_string(Kind::array), "a list");
  EXPECT_EQ(protocol::to_string(Kind::object), "an object");
}

}  // namespace

// Lone surrogate escapes, as Python (surrogateescape) and JavaScript (a cut pair) write them, become
// U+FFFD; pairs, other escapes and an escaped backslash before "u" are left alone.
TEST(LoneSurrogates, BecomeTheReplacementCharacterAndNothingElseChanges) {
  using rjg::protocol::replace_lone_surrogates;
  EXPECT_EQ(replace_lone_surrogates(R"({"stdout":"\udcffok"})"), R"({"stdout":"\ufffdok"})");
  EXPECT_EQ(replace_lone_surrogates(R"(["\ud83d", "\ud83d\ude00", "\ude00\ud83d"])"),
            R"(["\ufffd", "\ud83d\ude00", "\ufffd\ufffd"])");
  EXPECT_EQ(replace_lone_surrogates(R"(["\\ud800", "\n\"\u00e9", "end\\"])"), R"(["\\ud800", "\n\"\u00e9", "end\\"])");
  EXPECT_EQ(replace_lone_surrogates(R"(["\ud800\u0041"])"), R"(["\ufffd\u0041"])");
  EXPECT_TRUE(rjg::protocol::scan(replace_lone_surrogates(R"({"a":"x\udcff\ud800"})")).first);
}
