// Log lines: text, JSON (always valid JSON, whatever bytes a message holds), and the journal's form.
#include "common/log.hpp"

#include <boost/json/parse.hpp>

#include <gtest/gtest.h>

#include <regex>

namespace {

using rjg::log::Format;
using rjg::log::Level;
namespace json = boost::json;

class LogTest : public ::testing::Test {
 protected:
  void SetUp() override { rjg::log::set_program("gateway"); }
  void TearDown() override { rjg::log::set_format(Format::text); }
};

TEST_F(LogTest, TextLinesHaveTimeProgramLevelAndMessage) {
  const auto line = rjg::log::format_line(Level::warn, "worker Lib[42]: draining");
  EXPECT_TRUE(std::regex_match(line, std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z gateway WARN  worker Lib\[42\]: draining\n)")))
      << line;
}

TEST_F(LogTest, JsonLinesAreOneValidObjectWhateverTheMessageHolds) {
  rjg::log::set_format(Format::json);
  // Quotes, a backslash, a control character, valid UTF-8, and bytes that are not UTF-8 at all (a lone
  // continuation byte, a truncated sequence, an overlong form, a surrogate).
  const std::string message = "say \"hi\" \\ tab\there \xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80 bad:\x80|\xe2\x82|\xc0\xaf|\xed\xa0\x80";
  const auto line = rjg::log::format_line(Level::error, message);
  ASSERT_FALSE(line.empty());
  EXPECT_EQ(line.back(), '\n');
  EXPECT_EQ(line.find('\n'), line.size() - 1) << "one line: " << line;
  boost::system::error_code ec;
  auto value = json::parse(line, ec);
  ASSERT_FALSE(ec) << ec.message() << ": " << line;
  const auto& object = value.as_object();
  EXPECT_EQ(object.at("level").as_string(), "ERROR");
  EXPECT_EQ(object.at("program").as_string(), "gateway");
  EXPECT_TRUE(std::regex_match(std::string(object.at("time").as_string()),
                               std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)")));
  const std::string replacement = "\xef\xbf\xbd";
  EXPECT_EQ(object.at("message").as_string(),
            "say \"hi\" \\ tab\there \xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80 bad:" + replacement + "|" + replacement +
                replacement + "|" + replacement + replacement + "|" + replacement + replacement + replacement);
}

TEST_F(LogTest, FormatsByName) {
  Format format = Format::text;
  EXPECT_TRUE(rjg::log::parse_format("json", format));
  EXPECT_EQ(format, Format::json);
  EXPECT_TRUE(rjg::log::parse_format("text", format));
  EXPECT_EQ(format, Format::text);
  EXPECT_FALSE(rjg::log::parse_format("JSON", format));
}

// What a process printed, made fit for a message: invalid bytes as U+FFFD, and a cut that never splits
// a character (a peer drops a message with invalid UTF-8).
TEST(ValidUtf8, ReplacesInvalidBytesAndCutsAtCharacters) {
  const std::string r = "\xef\xbf\xbd";
  EXPECT_EQ(rjg::log::valid_utf8("ok \xc3\xa9"), "ok \xc3\xa9");
  EXPECT_EQ(rjg::log::valid_utf8("a\xff\xc3" "b\xed\xa0\x80"), "a" + r + r + "b" + r + r + r);
  // 10 two-byte characters cut at 8 bytes: 2 whole ones (4 bytes) and the ellipsis, never half of one.
  std::string e;
  for (int i = 0; i < 10; ++i) e += "\xc3\xa9";
  EXPECT_EQ(rjg::log::valid_utf8(e, 8), "\xc3\xa9\xc3\xa9...");
  EXPECT_EQ(rjg::log::valid_utf8(e, 7), "\xc3\xa9\xc3\xa9...");
  EXPECT_EQ(rjg::log::valid_utf8("short", 8), "short");
}

}  // namespace
