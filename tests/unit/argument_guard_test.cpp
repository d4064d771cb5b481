// The gateway's argument guard (gateway/session/argument_guard.hpp): which strings of run_keyword and
// import_library params are escaped, that every other byte stays as it was, that the params' slices
// follow the edits, and which kw_args values are refused.
#include "gateway/session/argument_guard.hpp"

#include "common/protocol/message.hpp"
#include "common/pickle/pickle_policy.hpp"
#include "common/protocol/robot_escape.hpp"

#include <boost/json.hpp>
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace {

namespace session = rjg::gateway::session;
namespace protocol = rjg::protocol;
using rjg::config::Arguments;

rjg::protocol::Message request(std::string_view method, std::string_view params_text) {
  auto parsed = rjg::protocol::parse_message(
      fmt::format(R"({{"jsonrpc":"2.0","id":7,"method":"{}","params":{}}})", method, params_text));
  return std::get<rjg::protocol::Message>(parsed);
}

protocol::RunKeyword run_keyword(std::string_view params_text) {
  auto bound = protocol::bind_run_keyword(request("robot/run_keyword", params_text));
  return std::get<protocol::RunKeyword>(bound);
}

protocol::ImportLibrary import_library(std::string_view params_text) {
  auto bound = protocol::bind_import_library(request("robot/import_library", params_text));
  return std::get<protocol::ImportLibrary>(bound);
}

rjg::config::Library library() {
  rjg::config::Library l;
  l.name = "Lib";
  return l;
}

TEST(ArgumentGuard, Detection) {
  EXPECT_TRUE(session::escapes_arguments(Arguments::auto_, "RobotJsonRpcRemoteServer"));
  EXPECT_FALSE(session::escapes_arguments(Arguments::auto_, "TestLibrary"));
  EXPECT_FALSE(session::escapes_arguments(Arguments::auto_, ""));
  EXPECT_TRUE(session::escapes_arguments(Arguments::escape, ""));
  EXPECT_FALSE(session::escapes_arguments(Arguments::as_is, "RobotJsonRpcRemoteServer"));
}

// The reference server's own initialize answers (recorded traffic) are what "auto" recognizes.
TEST(ArgumentGuard, AutoRecognizesTheReferenceServerOfTheTraces) {
  std::size_t answers = 0;
  for (const char* name : {"reference-suite-tcp.jsonl", "reference-edge-cases.jsonl"}) {
    std::ifstream in(std::string(RJG_TRACES_DIR) + "/" + name);
    ASSERT_TRUE(in) << name;
    for (std::string line; std::getline(in, line);) {
      auto record = boost::json::parse(line).as_object();
      if (record["dir"] != "s2c") continue;
      auto body = boost::json::parse(record["body"].as_string());
      const auto* result = body.as_object().if_contains("result");
      if (!result || !result->is_object() || !result->as_object().contains("server_info")) continue;
      const auto& server_name = result->as_object().at("server_info").at("name").as_string();
      EXPECT_TRUE(session::escapes_arguments(Arguments::auto_, server_name));
      ++answers;
    }
  }
  EXPECT_GT(answers, 0u);
}

TEST(ArgumentGuard, RunKeywordEscapesTopLevelStringsOnlyAndKeepsEveryOtherByte) {
  const std::string text =
      R"({ "kwargs" : {"a=b": "${x}", "n": 1e400, "plain": "p"}, "library_token":"tok", "name":"K",)"
      R"( "args": [ "${SPACE}" , 1.50, -0.0, "ok", ["${nested}"], {"k": "${nested}"}, "a\\b", "AND", "x=1" ],)"
      R"( "extra": "${untouched}"})";
  auto p = run_keyword(text);
  EXPECT_EQ(session::escape_arguments(p), 6u);
  EXPECT_EQ(p.text,
            R"({ "kwargs" : {"a\\=b": "\\${x}", "n": 1e400, "plain": "p"}, "library_token":"tok", "name":"K",)"
            R"( "args": [ "\\${SPACE}" , 1.50, -0.0, "ok", ["${nested}"], {"k": "${nested}"}, "a\\\\b", "\\AND", "x\\=1" ],)"
            R"( "extra": "${untouched}"})");
  // The slices follow: the token is where it was, args and kwargs cover their new texts.
  EXPECT_EQ(p.of(p.library_token_value), R"("tok")");
  EXPECT_EQ(p.of(p.args).front(), '[');
  EXPECT_EQ(p.of(p.args).back(), ']');
  EXPECT_EQ(p.of(p.kwargs), R"({"a\\=b": "\\${x}", "n": 1e400, "plain": "p"})");
}

TEST(ArgumentGuard, NothingToEscapeLeavesTheTextAlone) {
  const std::string text = R"({"library_token":"t","name":"K","args":["a", 1, null, "päivää"],"kwargs":{"b":"c"}})";
  auto p = run_keyword(text);
  EXPECT_EQ(session::escape_arguments(p), 0u);
  EXPECT_EQ(p.text, text);
}

TEST(ArgumentGuard, ImportEscapesArgsAndKwArgsNamesAndValues) {
  const std::string text = R"({"name":"Lib","args":["%{HOME}", 2],"kw_args":{"k${x}": "v\\", "n": 3, "l": ["ok", 1]}})";
  auto p = import_library(text);
  std::size_t changed = 0;
  auto refused = session::escape_arguments(p, library(), &changed);
  ASSERT_FALSE(refused) << refused->message;
  EXPECT_EQ(changed, 3u);
  EXPECT_EQ(p.text, R"({"name":"Lib","args":["\\%{HOME}", 2],"kw_args":{"k\\${x}": "v\\\\", "n": 3, "l": ["ok", 1]}})");
  EXPECT_EQ(p.of(p.name_value), R"("Lib")");
}

std::string hex(std::string_view bytes) {
  std::string out;
  for (unsigned char c : bytes) out += fmt::format("{:02x}", c);
  return out;
}

TEST(ArgumentGuard, KwArgsValuesMadeTextAreRefusedWhenAStringWouldBeEvaluated) {
  // A protocol 4 pickle of ['plain', '${SPACE}'].
  const std::string pickle = hex(std::string("\x80\x04]\x28\x8c\x05plain\x8c\x08${SPACE}e.", 23));
  for (const std::string& value :
       {fmt::format(R"({{"__pickled__":"{}"}})", pickle), std::string(R"(["ok", "${SPACE}"])"),
        std::string(R"({"${SPACE}": 1})"), fmt::format(R"([1, [{{"__pickled__":"{}"}}]])", pickle)}) {
    SCOPED_TRACE(value);
    auto p = import_library(fmt::format(R"({{"name":"Lib","kw_args":{{"opts": {}}}}})", value));
    const std::string before = p.text;
    auto refused = session::escape_arguments(p, library());
    ASSERT_TRUE(refused);
    EXPECT_NE(refused->message.find("kw_args.opts"), std::string::npos) << refused->message;
    EXPECT_NE(refused->message.find("'${SPACE}'"), std::string::npos) << refused->message;
    EXPECT_NE(refused->message.find("Lib"), std::string::npos) << refused->message;
    EXPECT_EQ(refused->log.find("${SPACE}"), std::string::npos) << refused->log;
    EXPECT_EQ(p.text, before);
  }
  // Clean ones pass unchanged.
  const std::string clean = hex(std::string("\x80\x04]\x28\x8c\x05plain\x8c\x03x=1e.", 18));
  auto p = import_library(fmt::format(R"({{"name":"Lib","kw_args":{{"opts": {{"__pickled__":"{}"}}, "l": [1, "a b"]}}}})", clean));
  const std::string before = p.text;
  EXPECT_FALSE(session::escape_arguments(p, library()));
  EXPECT_EQ(p.text, before);
  // A pickle that cannot be lexed is refused.
  p = import_library(R"({"name":"Lib","kw_args":{"opts": {"__pickled__":"8004ff"}}})");
  auto refused = session::escape_arguments(p, library());
  ASSERT_TRUE(refused);
  EXPECT_NE(refused->message.find("cannot be read"), std::string::npos) << refused->message;
}

// visit_pickle_strings lexes every real pickle of Robot values and reports their strings.
class Collect final : public rjg::pickle::PickleTextVisitor {
 public:
  bool text(std::string_view value, bool is_bytes) override {
    seen.emplace_back(value, is_bytes);
    return true;
  }
  std::vector<std::pair<std::string, bool>> seen;
};

TEST(ArgumentGuard, PickleStringsOfTheBenignCorpus) {
  std::size_t files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(RJG_PICKLES_DIR)) {
    std::ifstream in(entry.path(), std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    Collect strings;
    EXPECT_FALSE(rjg::pickle::visit_pickle_strings(bytes, strings)) << entry.path();
    ++files;
    if (entry.path().filename().string().starts_with("DotDict_p")) {
      // STACK_GLOBAL's module and class names are strings of the stream too.
      bool module = false;
      for (const auto& [text, is_bytes] : strings.seen) module = module || text == "robot.utils.dotdict";
      EXPECT_TRUE(module) << entry.path();
    }
  }
  EXPECT_GT(files, 100u);
  // Truncated streams are reported, not read past.
  Collect strings;
  EXPECT_TRUE(rjg::pickle::visit_pickle_strings(std::string("\x80\x04\x8c\x09" "abc", 6), strings));
  EXPECT_TRUE(rjg::pickle::visit_pickle_strings(std::string("\x80\x04]", 3), strings));  // no STOP
}

}  // namespace

namespace {

// The reference server makes each positional import argument text with str() before Robot evaluates
// it: a list, object or pickle there cannot be escaped, so the strings in it are checked like kw_args.
TEST(ArgumentGuard, ImportArgsMadeTextAreRefusedWhenAStringWouldBeEvaluated) {
  auto p = import_library(R"({"name":"Lib","args":["plain", ["ok", "${SPACE}"]]})");
  const std::string before = p.text;
  auto refused = session::escape_arguments(p, library());
  ASSERT_TRUE(refused);
  EXPECT_NE(refused->message.find("args[1]"), std::string::npos) << refused->message;
  EXPECT_NE(refused->message.find("each positional import argument"), std::string::npos) << refused->message;
  EXPECT_EQ(p.text, before);
  // Lists of harmless strings pass, and the strings beside them are escaped.
  p = import_library(R"({"name":"Lib","args":["a=b", ["ok", 1], {"k": "v"}]})");
  std::size_t changed = 0;
  EXPECT_FALSE(session::escape_arguments(p, library(), &changed));
  EXPECT_EQ(changed, 1u);
  EXPECT_EQ(p.text, R"({"name":"Lib","args":["a\\=b", ["ok", 1], {"k": "v"}]})");
}

// A pickled str at the top level of args or kwargs reaches Robot's argument resolution as that string:
// it is refused when Robot would change it. A pickled list holding such strings is not resolved.
TEST(ArgumentGuard, PickledStringsWithSyntaxAreRefusedForEvaluatingWorkers) {
  // Protocol 4 pickles: the str '${{1+1}}' (with FRAME and MEMOIZE, as CPython writes it), and
  // ['plain', '${SPACE}'].
  const std::string str_pickle =
      hex(std::string("\x80\x04\x95\x0c\x00\x00\x00\x00\x00\x00\x00\x8c\x08${{1+1}}\x94.", 23));
  const std::string list_pickle = hex(std::string("\x80\x04]\x28\x8c\x05plain\x8c\x08${SPACE}e.", 23));
  for (const std::string& params_text :
       {fmt::format(R"({{"library_token":"t","name":"K","args":[1, {{"__pickled__":"{}"}}]}})", str_pickle),
        fmt::format(R"({{"library_token":"t","name":"K","kwargs":{{"x": {{"__pickled__":"{}"}}}}}})", str_pickle)}) {
    SCOPED_TRACE(params_text);
    auto refused = session::refuse_evaluated_pickles(run_keyword(params_text), library(), "K");
    ASSERT_TRUE(refused);
    EXPECT_NE(refused->message.find("'${{1+1}}'"), std::string::npos) << refused->message;
    EXPECT_NE(refused->message.find("keyword 'K'"), std::string::npos) << refused->message;
    EXPECT_EQ(refused->log.find("${{"), std::string::npos) << refused->log;
  }
  EXPECT_FALSE(session::refuse_evaluated_pickles(
      run_keyword(fmt::format(R"({{"library_token":"t","name":"K","args":[{{"__pickled__":"{}"}}]}})", list_pickle)),
      library(), "K"));
  // A pickled plain string without syntax passes.
  const std::string plain = hex(std::string("\x80\x04\x8c\x05plain\x94.", 10));
  EXPECT_FALSE(session::refuse_evaluated_pickles(
      run_keyword(fmt::format(R"({{"library_token":"t","name":"K","args":[{{"__pickled__":"{}"}}]}})", plain)),
      library(), "K"));
  // Bytes are data: Robot resolves str arguments only. CPython's pickle.dumps(b'\x00\xff\x80\\" bytes ${x}',
  // protocol=4), as the stock client sends a bytes argument.
  const std::string bytes_pickle = "8004951400000000000000431000ff805c2220627974657320247b787d942e";
  for (const std::string& params_text :
       {fmt::format(R"({{"library_token":"t","name":"K","args":[{{"__pickled__":"{}"}}]}})", bytes_pickle),
        fmt::format(R"({{"library_token":"t","name":"K","kwargs":{{"x": {{"__pickled__":"{}"}}}}}})", bytes_pickle)}) {
    SCOPED_TRACE(params_text);
    auto refused = session::refuse_evaluated_pickles(run_keyword(params_text), library(), "K");
    EXPECT_FALSE(refused) << refused->message;
  }
}

}  // namespace
