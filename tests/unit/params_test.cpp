// The params binder (common/protocol/params.hpp): each robot/* method's params bound once from the
// message's text, optional fields absent or null alike, and every wrong shape answered with one
// -32602 message that names the method and the field.
#include "common/protocol/params.hpp"

#include "common/protocol/protocol.hpp"

#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

namespace {

namespace protocol = rjg::protocol;
using rjg::protocol::Message;

Message request(std::string_view method, std::string_view params_json) {
  std::string body = R"({"jsonrpc":"2.0","id":"1","method":")" + std::string(method) + "\"";
  if (!params_json.empty()) body += ",\"params\":" + std::string(params_json);
  body += "}";
  auto classified = rjg::protocol::parse_message(body);
  if (auto* e = std::get_if<rjg::protocol::ProtocolError>(&classified)) ADD_FAILURE() << body << ": " << e->message;
  auto* m = std::get_if<Message>(&classified);
  return m ? *m : Message{};
}

template <typename P>
P bound(const protocol::Bound<P>& b) {
  if (auto* invalid = std::get_if<protocol::Invalid>(&b)) ADD_FAILURE() << "not bound: " << invalid->message;
  auto* p = std::get_if<P>(&b);
  return p ? *p : P{};
}

template <typename P>
std::string invalid(const protocol::Bound<P>& b) {
  auto* i = std::get_if<protocol::Invalid>(&b);
  if (!i) {
    ADD_FAILURE() << "bound, expected a -32602 message";
    return {};
  }
  return i->message;
}

TEST(BindImportLibrary, AllFields) {
  const std::string text = R"({"name":"Lib\u00e9", "args":[1E+2,"a"],"kw_args":{"k":-0.0},"extra":true})";
  auto p = bound(protocol::bind_import_library(request(rjg::protocol::kImportLibrary, text)));
  EXPECT_EQ(p.text, text);  // the object as sent
  EXPECT_EQ(p.name, "Lib\xC3\xA9");
  EXPECT_EQ(p.name_value.of(p.text), R"("Lib\u00e9")");
  ASSERT_TRUE(p.args && p.kw_args);
  EXPECT_EQ(p.of(p.args), R"([1E+2,"a"])");
  EXPECT_EQ(p.of(p.kw_args), R"({"k":-0.0})");
  // A relay rewrites one field and passes every other byte on.
  EXPECT_EQ(p.with({{p.name_value, R"("Other")"}}),
            R"({"name":"Other", "args":[1E+2,"a"],"kw_args":{"k":-0.0},"extra":true})");
}

TEST(BindImportLibrary, OptionalFieldsAbsentOrNull) {
  for (std::string text : {R"({"name":"L"})", R"({"name":"L","args":null,"kw_args":null})"}) {
    auto p = bound(protocol::bind_import_library(request(rjg::protocol::kImportLibrary, text)));
    EXPECT_EQ(p.name, "L") << text;
    EXPECT_FALSE(p.args.has_value()) << text;
    EXPECT_FALSE(p.kw_args.has_value()) << text;
    EXPECT_EQ(p.of(p.args, "[]"), "[]");
  }
}

TEST(BindImportLibrary, DuplicatedFieldTheLastCounts) {
  auto p = bound(protocol::bind_import_library(request(rjg::protocol::kImportLibrary, R"({"name":"A","name":"B"})")));
  EXPECT_EQ(p.name, "B");
}

TEST(BindRunKeyword, AllFields) {
  const std::string text = R"({"library_token":"t-1","name":"Echo","args":[{"__pickled__":"80"}],"kwargs":{"a":1}})";
  auto p = bound(protocol::bind_run_keyword(request(rjg::protocol::kRunKeyword, text)));
  EXPECT_EQ(p.text, text);
  EXPECT_EQ(p.library_token, "t-1");
  EXPECT_EQ(p.library_token_value.of(p.text), R"("t-1")");
  EXPECT_EQ(p.name, "Echo");
  EXPECT_EQ(p.of(p.args), R"([{"__pickled__":"80"}])");
  EXPECT_EQ(p.of(p.kwargs), R"({"a":1})");
  EXPECT_EQ(p.with({{p.library_token_value, R"("w-7")"}}),
            R"({"library_token":"w-7","name":"Echo","args":[{"__pickled__":"80"}],"kwargs":{"a":1}})");
}

TEST(BindRunKeyword, OptionalFieldsAbsentOrNull) {
  for (std::string text : {R"({"library_token":"t","name":"K"})",
                           R"({"library_token":"t","name":"K","args":null,"kwargs":null})"}) {
    auto p = bound(protocol::bind_run_keyword(request(rjg::protocol::kRunKeyword, text)));
    EXPECT_EQ(p.name, "K") << text;
    EXPECT_FALSE(p.args.has_value()) << text;
    EXPECT_FALSE(p.kwargs.has_value()) << text;
  }
}

TEST(BindFinalizeLibrary, Token) {
  auto p = bound(protocol::bind_finalize_library(request(rjg::protocol::kFinalizeLibrary, R"({"token":"t-9"})")));
  EXPECT_EQ(p.token, "t-9");
}

TEST(BindInitialize, AnyParamsAreTaken) {
  // Neither the gateway nor the SDK reads them; a list was always accepted, and still is.
  for (std::string text : {"", "null", "{}", "[]", R"({"capabilities":{},"client_info":{"name":"x"},"more":1})"}) {
    auto p = bound(protocol::bind_initialize(request(rjg::protocol::kInitialize, text)));
    EXPECT_EQ(p.text, text.empty() || text == "null" ? "{}" : text);
  }
}

struct Wrong {
  const char* name;
  std::string_view method;
  const char* params;  // "" leaves params out
  std::string_view field;  // named in the message
  std::string_view says;   // and what is wrong
};
void PrintTo(const Wrong& w, std::ostream* os) { *os << w.name; }

protocol::Invalid bind_any(const Message& m) {
  auto pick = [](const auto& b) {
    auto* i = std::get_if<protocol::Invalid>(&b);
    return i ? *i : protocol::Invalid{};
  };
  if (m.method() == rjg::protocol::kImportLibrary) return pick(protocol::bind_import_library(m));
  if (m.method() == rjg::protocol::kRunKeyword) return pick(protocol::bind_run_keyword(m));
  if (m.method() == rjg::protocol::kFinalizeLibrary) return pick(protocol::bind_finalize_library(m));
  return pick(protocol::bind_initialize(m));
}

class WrongParams : public ::testing::TestWithParam<Wrong> {};

TEST_P(WrongParams, OneMessageNamesTheMethodAndTheField) {
  const auto& w = GetParam();
  auto problem = bind_any(request(w.method, w.params));
  ASSERT_FALSE(problem.message.empty()) << "bound: " << w.params;
  const std::string& msg = problem.message;
  EXPECT_TRUE(msg.starts_with(std::string(w.method) + ": ")) << msg;
  EXPECT_NE(msg.find(w.field), std::string::npos) << msg;
  EXPECT_NE(msg.find(w.says), std::string::npos) << msg;
  EXPECT_NE(msg.find("Expected params {"), std::string::npos) << msg;  // and what was expected
}

using namespace rjg::protocol;
INSTANTIATE_TEST_SUITE_P(
    Cases, WrongParams,
    ::testing::Values(
        Wrong{"import_no_params", kImportLibrary, "", "params.name", "is missing"},
        Wrong{"import_null_params", kImportLibrary, "null", "params.name", "is missing"},
        Wrong{"import_params_list", kImportLibrary, R"(["L"])", "params", "must be an object, not a list"},
        Wrong{"import_name_missing", kImportLibrary, R"({"args":[]})", "params.name", "is missing (a string)"},
        Wrong{"import_name_number", kImportLibrary, R"({"name":1})", "params.name", "must be a string, not a number"},
        Wrong{"import_name_null", kImportLibrary, R"({"name":null})", "params.name", "must be a string, not null"},
        Wrong{"import_args_object", kImportLibrary, R"({"name":"L","args":{}})", "params.args",
              "must be a list, not an object"},
        Wrong{"import_args_string", kImportLibrary, R"({"name":"L","args":"a"})", "params.args",
              "must be a list, not a string"},
        Wrong{"import_kw_args_list", kImportLibrary, R"({"name":"L","kw_args":[]})", "params.kw_args",
              "must be an object, not a list"},
        Wrong{"import_kw_args_bool", kImportLibrary, R"({"name":"L","kw_args":true})", "params.kw_args",
              "must be an object, not a boolean"},
        Wrong{"run_params_list", kRunKeyword, "[]", "params", "must be an object, not a list"},
        Wrong{"run_token_missing", kRunKeyword, R"({"name":"K"})", "params.library_token", "is missing"},
        Wrong{"run_token_object", kRunKeyword, R"({"library_token":{},"name":"K"})", "params.library_token",
              "must be a string, not an object"},
        Wrong{"run_name_missing", kRunKeyword, R"({"library_token":"t"})", "params.name", "is missing"},
        Wrong{"run_name_list", kRunKeyword, R"({"library_token":"t","name":["K"]})", "params.name",
              "must be a string, not a list"},
        Wrong{"run_args_object", kRunKeyword, R"({"library_token":"t","name":"K","args":{}})", "params.args",
              "must be a list, not an object"},
        Wrong{"run_kwargs_list", kRunKeyword, R"({"library_token":"t","name":"K","kwargs":[]})", "params.kwargs",
              "must be an object, not a list"},
        Wrong{"finalize_token_missing", kFinalizeLibrary, "{}", "params.token", "is missing"},
        Wrong{"finalize_token_number", kFinalizeLibrary, R"({"token":5})", "params.token",
              "must be a string, not a number"},
        Wrong{"run_keyword_params_list", kRunKeyword, "[]", "params", "must be an object, not a list"}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(WrongParams, OnlyTheFirstProblemIsReported) {
  auto problem = bind_any(request(kRunKeyword, R"({"library_token":1,"name":2,"args":{}})"));
  EXPECT_NE(problem.message.find("params.library_token"), std::string::npos) << problem.message;
  EXPECT_EQ(problem.message.find("params.name"), std::string::npos) << problem.message;
  EXPECT_EQ(problem.message.find("params.args"), std::string::npos) << problem.message;
}

}  // namespace
