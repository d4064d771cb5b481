// The native-library SDK: Robot-like conversion, argument binding, error shapes, the protocol state
// machine driven in memory through Session, and whole sessions through serve_stream (over files, a
// socket pair and a broken pipe).
#include "workers/sdk/sdk.hpp"

#include "common/pickle/python_json.hpp"
#include "common/protocol/framing.hpp"
#include "common/protocol/protocol.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <regex>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace json = boost::json;
namespace protocol = rjg::protocol;
using rjg::sdk::Arg;
using rjg::sdk::ArgKind;
using rjg::sdk::Call;
using rjg::sdk::ErrorMode;
using rjg::sdk::ImportContext;
using rjg::sdk::KeywordError;
using rjg::sdk::Library;
using rjg::sdk::Session;

// ---------------------------------------------------------------------------------------------
// Fixtures

class Capture : public rjg::sdk::Output {
 public:
  void send(std::string_view text) override { messages.push_back(json::parse(text)); }
  void write_raw(std::string_view bytes) override { raw += bytes; }

  std::vector<json::value> take() { return std::exchange(messages, {}); }

  std::vector<json::value> messages;
  std::string raw;
};

Library make_probe_library() {
  Library lib{"Probe", "A library for tests.", "2.5"};
  lib.keyword("Add", {{"a", "int"}, {"b", "int", json::value(0)}}, "Adds.",
              [](Call& c) -> json::value { return c.get<std::int64_t>("a") + c.get<std::int64_t>("b"); }, {"math"});
  lib.keyword("Echo", {{"value"}}, "", [](Call& c) -> json::value { return c.value("value"); });
  lib.keyword("Nothing", {}, "", [](Call&) -> json::value { return nullptr; });
  lib.keyword("Fail", {}, "", [](Call&) -> json::value {
    throw KeywordError("it broke", "ValueError", "tb line", ErrorMode::continuable);
  });
  lib.keyword("Throw", {}, "", [](Call&) -> json::value { throw std::runtime_error("plain failure"); });
  lib.keyword("Chatty", {}, "", [](Call& c) -> json::value {
    c.log("first");
    c.log("<b>second</b>", "WARN", true, true);
    return "done";
  });
  lib.keyword("Count", {}, "", [](Call& c) -> json::value { return ++c.state<int>(); });
  lib.keyword("Import Args", {}, "", [](Call& c) -> json::value {
    return json::object{{"args", c.import_args().args}, {"kw_args", c.import_args().kw_args}};
  });
  lib.keyword("Raw", {}, "", [](Call& c) -> json::value {
    c.write_raw("junk");
    return "ok";
  });
  lib.on_import([](rjg::sdk::ImportContext& ctx) {
    if (!ctx.import.args.empty() && ctx.import.args[0] == "refuse") throw std::runtime_error("refused on purpose");
    ctx.state = 0;
  });
  return lib;
}

// Drives a Session with requests and returns what it wrote, as a client would see it.
class Driver {
 public:
  explicit Driver(const Library& lib) : session_(lib, out_) {}

  std::vector<json::value> send(const std::string& body) {
    session_.handle(body);
    return out_.take();
  }
  std::vector<json::value> request(const json::value& id, std::string_view method, json::value params = json::object()) {
    return send(rjg::protocol::make_request(id, method, std::move(params)));
  }
  std::vector<json::value> notify(std::string_view method) { return send(rjg::protocol::make_notification(method, json::object())); }

  // The single answer to a request; fails the test if there is not exactly one message.
  json::object answer(const json::value& id, std::string_view method, json::value params = json::object()) {
    auto messages = request(id, method, std::move(params));
    EXPECT_EQ(messages.size(), 1u) << method;
    if (messages.empty()) return {};
    EXPECT_EQ(messages.back().at("id"), id);
    return messages.back().as_object();
  }

  void initialize() {
    answer("init", protocol::kInitialize);
    EXPECT_TRUE(notify(protocol::kInitialized).empty());
  }

  std::string import(json::array args = {}, json::object kw_args = {}) {
    auto reply = answer("imp", protocol::kImportLibrary,
                        json::object{{"name", "Probe"}, {"args", std::move(args)}, {"kw_args", std::move(kw_args)}});
    return std::string(reply.at("result").at("token").as_string());
  }

  // The RunKeywordResult of a call.
  json::object run(const std::string& token, std::string_view keyword, json::array args = {}, json::object kwargs = {}) {
    auto reply = answer("run", protocol::kRunKeyword,
                        json::object{{"library_token", token}, {"name", keyword}, {"args", args}, {"kwargs", kwargs}});
    return reply.contains("result") ? reply.at("result").as_object() : json::object();
  }

  const Capture& output() const { return out_; }
  bool done() const { return session_.done(); }

 private:
  Capture out_;
  Session session_;
};

// A value as a Python peer reads it: a pickle ({"__pickled__": ...}) decoded, as plain JSON.
json::value python_value(const json::value& wire) {
  return rjg::pickle::plain_json(json::serialize(wire), "result");
}

bool is_pickled(const json::value& wire) {
  const auto* o = wire.if_object();
  return o && o->size() == 1 && o->contains("__pickled__");
}

std::string error_message(const json::object& run_result) {
  return std::string(run_result.at("error").at("message").as_string());
}

// ---------------------------------------------------------------------------------------------
// Conversion

TEST(Convert, IntFromRobotStrings) {
  using rjg::sdk::convert;
  EXPECT_EQ(convert("3", "int"), json::value(3));
  EXPECT_EQ(convert(" -42 ", "int"), json::value(-42));
  EXPECT_EQ(convert("1_000", "int"), json::value(1000));
  EXPECT_EQ(convert("1 000", "integer"), json::value(1000));
  EXPECT_EQ(convert("0x1F", "int"), json::value(31));
  EXPECT_EQ(convert("0o17", "int"), json::value(15));
  EXPECT_EQ(convert("0b101", "int"), json::value(5));
  EXPECT_EQ(convert("3.0", "int"), json::value(3));
  EXPECT_EQ(convert("1e3", "int"), json::value(1000));
  EXPECT_EQ(convert("-9223372036854775808", "int"), json::value(INT64_MIN));
  EXPECT_EQ(convert(7.0, "int"), json::value(7));
  EXPECT_EQ(convert(json::value(std::uint64_t{5}), "int"), json::value(5));
}

TEST(Convert, IntRejects) {
  using rjg::sdk::convert;
  EXPECT_FALSE(convert("3.5", "int"));
  EXPECT_FALSE(convert("abc", "int"));
  EXPECT_FALSE(convert("", "int"));
  EXPECT_FALSE(convert("0x", "int"));
  EXPECT_FALSE(convert("9223372036854775808", "int"));
  EXPECT_FALSE(convert(json::value(UINT64_MAX), "int"));
  EXPECT_FALSE(convert(2.5, "int"));
  EXPECT_FALSE(convert(true, "int"));
  EXPECT_FALSE(convert(nullptr, "int"));
  EXPECT_FALSE(convert(json::array{1}, "int"));
}

TEST(Convert, Float) {
  using rjg::sdk::convert;
  EXPECT_EQ(convert("2.5", "float"), json::value(2.5));
  EXPECT_EQ(convert("+1_000.5", "float"), json::value(1000.5));
  EXPECT_EQ(convert(3, "double"), json::value(3.0));
  EXPECT_TRUE(convert(3, "float")->is_double());
  EXPECT_FALSE(convert("x", "float"));
  EXPECT_FALSE(convert("", "float"));
  EXPECT_FALSE(convert("1.5abc", "float"));
  EXPECT_FALSE(convert(false, "float"));
}

TEST(Convert, Bool) {
  using rjg::sdk::convert;
  for (const char* yes : {"true", "TRUE", "Yes", "on", "1"}) EXPECT_EQ(convert(yes, "bool"), json::value(true)) << yes;
  for (const char* no : {"false", "False", "NO", "off", "0", ""}) EXPECT_EQ(convert(no, "bool"), json::value(false)) << no;
  EXPECT_EQ(convert(true, "boolean"), json::value(true));
  EXPECT_EQ(convert(0, "bool"), json::value(false));
  EXPECT_EQ(convert(2, "bool"), json::value(true));
  EXPECT_FALSE(convert("maybe", "bool"));
  EXPECT_FALSE(convert(1.5, "bool"));
}

TEST(Convert, Str) {
  using rjg::sdk::convert;
  EXPECT_EQ(convert("x", "str"), json::value("x"));
  EXPECT_EQ(convert(3, "str"), json::value("3"));
  EXPECT_EQ(convert(true, "string"), json::value("True"));
  EXPECT_FALSE(convert(nullptr, "str"));
  EXPECT_FALSE(convert(json::array{1}, "str"));
}

TEST(Convert, OtherTypesPassThrough) {
  const json::value pickled = json::object{{"__pickled__", "80049509000000000000008f94284b014b02902e"}};
  EXPECT_EQ(rjg::sdk::convert(pickled, ""), pickled);
  EXPECT_EQ(rjg::sdk::convert(pickled, "list"), pickled);
  EXPECT_EQ(rjg::sdk::convert("3", "Any"), json::value("3"));
}

// ---------------------------------------------------------------------------------------------
// Binding

rjg::sdk::Keyword keyword(std::string name, std::vector<Arg> args) {
  return {std::move(name), std::move(args), "", [](Call&) -> json::value { return nullptr; }, {}};
}

json::object bind(const rjg::sdk::Keyword& kw, json::array args, json::object kwargs = {}) {
  return rjg::sdk::bind_arguments("Lib", kw, args, kwargs);
}

std::string bind_error(const rjg::sdk::Keyword& kw, json::array args, json::object kwargs = {}) {
  try {
    bind(kw, std::move(args), std::move(kwargs));
  } catch (const KeywordError& e) {
    return e.type() + ": " + e.what();
  }
  return "no error";
}

TEST(Bind, PositionalNamedAndDefaults) {
  const auto kw = keyword("Add", {{"a", "int"}, {"b", "int", json::value(10)}});
  EXPECT_EQ(bind(kw, {"1", 2}), (json::object{{"a", 1}, {"b", 2}}));
  EXPECT_EQ(bind(kw, {1}), (json::object{{"a", 1}, {"b", 10}}));
  EXPECT_EQ(bind(kw, {}, {{"b", "5"}, {"a", "4"}}), (json::object{{"a", 4}, {"b", 5}}));
  EXPECT_EQ(bind(kw, {4}, {{"b", 5}}), (json::object{{"a", 4}, {"b", 5}}));
}

TEST(Bind, DefaultsAreNotConverted) {
  const auto kw = keyword("K", {{"n", "int", json::value("not a number")}, {"s", "str", json::value(nullptr)}});
  EXPECT_EQ(bind(kw, {}), (json::object{{"n", "not a number"}, {"s", nullptr}}));
  // An explicit None for `s: str = None` stays None, as Python's Optional[str] would.
  EXPECT_EQ(bind(kw, {}, {{"s", nullptr}}).at("s"), json::value(nullptr));
}

TEST(Bind, VariadicAndNamedOnly) {
  const auto kw = keyword("K", {{"first"}, Arg::var_positional("rest", "int"), Arg::named_only("sep", "str", json::value("-")),
                                Arg::named_only("flag", "bool"), Arg::var_named("options", "float")});
  const json::object bound = bind(kw, {"x", "1", 2}, {{"flag", "yes"}, {"ratio", "0.5"}});
  EXPECT_EQ(bound.at("first"), json::value("x"));
  EXPECT_EQ(bound.at("rest"), (json::array{1, 2}));
  EXPECT_EQ(bound.at("sep"), json::value("-"));
  EXPECT_EQ(bound.at("flag"), json::value(true));
  EXPECT_EQ(bound.at("options"), (json::object{{"ratio", 0.5}}));

  const json::object minimal = bind(kw, {"x"}, {{"flag", false}});
  EXPECT_EQ(minimal.at("rest"), json::array());
  EXPECT_EQ(minimal.at("options"), json::object());
}

TEST(Bind, ErrorsNameLibraryKeywordAndArgument) {
  const auto kw = keyword("Add", {{"a", "int"}, {"b", "int", json::value(0)}});
  EXPECT_EQ(bind_error(kw, {}), "TypeError: Keyword 'Lib.Add' missing value for argument 'a'.");
  EXPECT_EQ(bind_error(kw, {1, 2, 3}), "TypeError: Keyword 'Lib.Add' expected 1 to 2 arguments, got 3.");
  EXPECT_EQ(bind_error(kw, {1}, {{"a", 2}}), "TypeError: Keyword 'Lib.Add' got multiple values for argument 'a'.");
  EXPECT_EQ(bind_error(kw, {1}, {{"c", 2}}), "TypeError: Keyword 'Lib.Add' got unexpected named argument 'c'.");
  EXPECT_EQ(bind_error(kw, {"three"}),
            "ValueError: Keyword 'Lib.Add': argument 'a' got value 'three' that cannot be converted to int.");
  EXPECT_EQ(bind_error(keyword("One", {{"x"}}), {1, 2}), "TypeError: Keyword 'Lib.One' expected 1 argument, got 2.");
  EXPECT_EQ(bind_error(keyword("K", {Arg::named_only("n", "int")}), {}),
            "TypeError: Keyword 'Lib.K' missing value for argument 'n'.");
  EXPECT_EQ(bind_error(keyword("K", {Arg::var_positional("v", "int")}), {1, "x"}),
            "ValueError: Keyword 'Lib.K': argument 'v' got value 'x' that cannot be converted to int.");
}

TEST(Bind, VarPositionalNameIsNotANamedArgument) {
  const auto kw = keyword("K", {Arg::var_positional("items")});
  EXPECT_EQ(bind_error(kw, {}, {{"items", 1}}), "TypeError: Keyword 'Lib.K' got unexpected named argument 'items'.");
}

TEST(Signature, RejectedAtRegistration) {
  auto body = [](Call&) -> json::value { return nullptr; };
  Library lib{"L"};
  EXPECT_THROW(lib.keyword("K", {{"a"}, {"a"}}, "", body), std::invalid_argument);
  EXPECT_THROW(lib.keyword("K", {{"a", "", json::value(1)}, {"b"}}, "", body), std::invalid_argument);
  EXPECT_THROW(lib.keyword("K", {Arg::named_only("n"), {"a"}}, "", body), std::invalid_argument);
  EXPECT_THROW(lib.keyword("K", {Arg::var_positional("a"), Arg::var_positional("b")}, "", body), std::invalid_argument);
  EXPECT_THROW(lib.keyword("K", {Arg::var_named("kw"), Arg::named_only("n")}, "", body), std::invalid_argument);
  EXPECT_THROW(lib.keyword("K", {}, "", nullptr), std::invalid_argument);
  lib.keyword("Some Keyword", {}, "", body);
  EXPECT_THROW(lib.keyword("some_keyword", {}, "", body), std::invalid_argument);
  EXPECT_THROW(Library{""}, std::invalid_argument);
}

TEST(Library, FindsExactThenNormalizedNames) {
  const Library lib = make_probe_library();
  ASSERT_NE(lib.find("Import Args"), nullptr);
  EXPECT_EQ(lib.find("import_args"), lib.find("Import Args"));
  EXPECT_EQ(lib.find("IMPORTARGS"), lib.find("Import Args"));
  EXPECT_EQ(lib.find("Import Argz"), nullptr);
}

TEST(Library, DefinitionShape) {
  const json::object def = make_probe_library().definition();
  EXPECT_EQ(def.at("name"), json::value("Probe"));
  EXPECT_EQ(def.at("doc"), json::value("A library for tests."));
  EXPECT_EQ(def.at("doc_format"), json::value("ROBOT"));
  EXPECT_EQ(def.at("scope"), json::value("GLOBAL"));
  EXPECT_EQ(def.at("version"), json::value("2.5"));
  const json::object& add = def.at("keywords").as_array().at(0).as_object();
  EXPECT_EQ(add.at("name"), json::value("Add"));
  EXPECT_EQ(add.at("doc"), json::value("Adds."));
  EXPECT_EQ(add.at("tags"), (json::array{"math"}));
  EXPECT_EQ(add.at("args"), json::parse(R"([
      {"name":"a","type":"int","has_default":false,"required":true,"kind":"POSITIONAL_OR_NAMED"},
      {"name":"b","type":"int","has_default":true,"default":0,"required":true,"kind":"POSITIONAL_OR_NAMED"}])"));

  Library kinds{"Kinds"};
  kinds.keyword("K", {Arg::var_positional("v"), Arg::named_only("n", "", json::value(nullptr)), Arg::var_named("kw")}, "",
                [](Call&) -> json::value { return nullptr; });
  const json::object kinds_def = kinds.definition();
  const json::array& args = kinds_def.at("keywords").at(0).at("args").as_array();
  EXPECT_EQ(args.at(0).at("kind"), json::value("VAR_POSITIONAL"));
  EXPECT_EQ(args.at(1).at("kind"), json::value("NAMED_ONLY"));
  EXPECT_EQ(args.at(1).at("has_default"), json::value(true));
  EXPECT_EQ(args.at(1).at("default"), json::value(nullptr));  // a null default is still sent
  EXPECT_EQ(args.at(2).at("kind"), json::value("VAR_NAMED"));
}

// The markers Python's signature has, where a definition leaves them out (the stock client reads only
// them): "*" before named-only arguments no *varargs precedes, "/" after positional-only ones.
TEST(LibraryDefinition, MarkersAreAddedWhereTheSignatureHasThem) {
  auto kinds = [](std::string_view args_json) {
    json::object definition{{"keywords", json::array{json::object{{"name", "K"}, {"args", json::parse(args_json)}}}}};
    rjg::sdk::add_argument_markers(definition);
    std::string out;
    for (const auto& arg : definition.at("keywords").at(0).at("args").as_array()) {
      const auto& o = arg.as_object();
      out += std::string(o.at("kind").as_string()) + ":" + std::string(o.at("name").as_string()) + " ";
    }
    return out;
  };
  EXPECT_EQ(kinds(R"([{"name":"a","kind":"POSITIONAL_OR_NAMED"},{"name":"b","kind":"NAMED_ONLY"},{"name":"c","kind":"NAMED_ONLY"}])"),
            "POSITIONAL_OR_NAMED:a NAMED_ONLY_MARKER: NAMED_ONLY:b NAMED_ONLY:c ");
  EXPECT_EQ(kinds(R"([{"name":"v","kind":"VAR_POSITIONAL"},{"name":"n","kind":"NAMED_ONLY"}])"),
            "VAR_POSITIONAL:v NAMED_ONLY:n ");
  EXPECT_EQ(kinds(R"([{"name":"name","kind":"POSITIONAL_ONLY"},{"name":"arguments","kind":"VAR_NAMED"}])"),
            "POSITIONAL_ONLY:name POSITIONAL_ONLY_MARKER: VAR_NAMED:arguments ");
  EXPECT_EQ(kinds(R"([{"name":"a","kind":"POSITIONAL_ONLY"}])"), "POSITIONAL_ONLY:a POSITIONAL_ONLY_MARKER: ");
  // Markers already there are kept, not doubled.
  EXPECT_EQ(kinds(R"([{"name":"a","kind":"POSITIONAL_ONLY"},{"name":"","kind":"POSITIONAL_ONLY_MARKER"},)"
                  R"({"name":"","kind":"NAMED_ONLY_MARKER"},{"name":"b","kind":"NAMED_ONLY"}])"),
            "POSITIONAL_ONLY:a POSITIONAL_ONLY_MARKER: NAMED_ONLY_MARKER: NAMED_ONLY:b ");
  // Args of another shape are left alone.
  json::object odd{{"keywords", json::array{json::object{{"name", "K"}, {"args", "not a list"}}, 7}}};
  rjg::sdk::add_argument_markers(odd);
  EXPECT_EQ(odd.at("keywords").at(0).at("args"), "not a list");
}

// ---------------------------------------------------------------------------------------------
// Typed access from a keyword body

TEST(CallAccess, ConvertsRangeChecksAndReportsMisuse) {
  Library lib{"L"};
  std::vector<std::string> seen;
  lib.keyword("K", {{"raw"}, {"big", "int"}, {"list"}}, "", [&](Call& c) -> json::value {
    seen.push_back(std::to_string(c.get<std::int64_t>("raw")));  // untyped "42" converts on access
    seen.push_back(std::to_string(c.get<int>("raw")));
    try {
      c.get<std::int8_t>("big");
    } catch (const KeywordError& e) {
      seen.push_back(e.type() + ": " + e.what());
    }
    try {
      c.get<json::object>("list");
    } catch (const KeywordError& e) {
      seen.push_back(e.type() + ": " + e.what());
    }
    seen.push_back(json::serialize(c.get<json::array>("list")));
    c.value("undeclared");  // throws std::logic_error: a library bug, reported as a keyword failure
    return nullptr;
  });
  Driver d(lib);
  d.initialize();
  auto token = std::string(d.answer(1, protocol::kImportLibrary, json::object{{"name", ""}})
                               .at("result").at("token").as_string());
  const json::object result = d.run(token, "K", {"42", 1000, json::array{1}});
  EXPECT_EQ(seen, (std::vector<std::string>{"42", "42", "ValueError: Keyword 'L.K': argument 'big' is out of range for int.",
                                            "ValueError: Keyword 'L.K': argument 'list' is not a dictionary", "[1]"}));
  EXPECT_EQ(result.at("error").at("type"), json::value("std::logic_error"));
  EXPECT_EQ(error_message(result), "keyword 'L.K' has no argument named 'undeclared'");
}

// ---------------------------------------------------------------------------------------------
// The protocol state machine

TEST(SessionProtocol, RequestsBeforeInitializationAreRefusedWithTheirId) {
  const Library lib = make_probe_library();
  Driver d(lib);
  auto run = d.answer("1", protocol::kRunKeyword, json::object{{"library_token", "x"}, {"name", "Echo"}});
  EXPECT_EQ(run.at("error").at("code"), json::value(protocol::kNotInitialized));
  // The reference server's words first; what to do about it follows.
  EXPECT_TRUE(std::string(run.at("error").at("message").as_string())
                  .starts_with("Initialize and Initialized must be received before RunKeyword."))
      << run.at("error").at("message");
  d.answer(2, protocol::kInitialize);
  // robot/initialize alone is not enough: robot/initialized must arrive too.
  auto import = d.answer(3, protocol::kImportLibrary, json::object{{"name", "Probe"}});
  EXPECT_EQ(import.at("error").at("code"), json::value(protocol::kNotInitialized));
  EXPECT_TRUE(d.notify(protocol::kInitialized).empty());
  EXPECT_TRUE(d.answer(4, protocol::kImportLibrary, json::object{{"name", "Probe"}}).contains("result"));
}

TEST(SessionProtocol, InitializeResult) {
  const Library lib = make_probe_library();
  Driver d(lib);
  EXPECT_EQ(d.answer(7, protocol::kInitialize).at("result"), json::parse(R"({
      "capabilities": {"support_exit": true, "libraries": ["Probe"]},
      "server_info": {"name": "Probe", "version": "2.5"}})"));
}

TEST(SessionProtocol, ImportByNameOrDefaultGivesDistinctTokens) {
  const Library lib = make_probe_library();
  Driver d(lib);
  d.initialize();
  const std::regex token_shape("Probe_[0-9a-f]{8}_[0-9]+");
  auto first = d.answer(1, protocol::kImportLibrary, json::object{{"name", ""}});
  auto second = d.answer(2, protocol::kImportLibrary, json::object{{"name", "Probe"}, {"args", nullptr}});
  const std::string t1(first.at("result").at("token").as_string());
  const std::string t2(second.at("result").at("token").as_string());
  EXPECT_TRUE(std::regex_match(t1, token_shape)) << t1;
  EXPECT_TRUE(std::regex_match(t2, token_shape)) << t2;
  EXPECT_NE(t1, t2);
  EXPECT_EQ(first.at("result").at("definition"), json::value(lib.definition()));
}

TEST(SessionProtocol, ImportOfAnotherLibraryIsAJsonRpcError) {
  const Library lib = make_probe_library();
  Driver d(lib);
  d.initialize();
  auto reply = d.answer("9", protocol::kImportLibrary, json::object{{"name", "Other"}});
  EXPECT_EQ(reply.at("error").at("code"), json::value(protocol::kInvalidParams));
  EXPECT_NE(std::string(reply.at("error").at("message").as_string()).find("'Other'"), std::string::npos);
}

TEST(SessionProtocol, ImportHookFailureIsAJsonRpcError) {
  const Library lib = make_probe_library();
  Driver d(lib);
  d.initialize();
  auto reply = d.answer("9", protocol::kImportLibrary, json::object{{"name", "Probe"}, {"args", json::array{"refuse"}}});
  EXPECT_EQ(reply.at("error").at("code"), json::value(protocol::kInternalError));
  EXPECT_EQ(reply.at("error").at("message"), json::value("refused on purpose"));
}

TEST(SessionProtocol, InvalidParamsAreRefused) {
  const Library lib = make_probe_library();
  Driver d(lib);
  d.initialize();
  EXPECT_EQ(d.answer(1, protocol::kImportLibrary, json::object{{"name", 3}}).at("error").at("code"),
            json::value(protocol::kInvalidParams));
  EXPECT_EQ(d.answer(2, protocol::kImportLibrary, json::object{{"name", ""}, {"args", "x"}}).at("error").at("code"),
            json::value(protocol::kInvalidParams));
  EXPECT_EQ(d.answer(3, protocol::kRunKeyword, json::object{{"library_token", "t"}}).at("error").at("code"),
            json::value(protocol::kInvalidParams));
}

TEST(SessionProtocol, EachImportHasItsOwnArgsAndState) {
  const Library lib = make_probe_library();
  Driver d(lib);
  d.initialize();
  const std::string a = d.import({"a", 1}, {{"k", "v"}});
  const std::string b = d.import();
  // Nested values: pickled on the wire (Python's dialect), the same content.
  EXPECT_EQ(python_value(d.run(a, "Import Args").at("result")),
            json::parse(R"({"args": ["a", 1], "kw_args": {"k": "v"}})"));
  EXPECT_EQ(python_value(d.run(b, "Import Args").at("result")), json::parse(R"({"args": [], "kw_args": {}})"));
  EXPECT_EQ(d.run(a, "Count").at("result"), json::value(1));
  EXPECT_EQ(d.run(a, "Count").at("result"), json::value(2));
  EXPECT_EQ(d.run(b, "Count").at("result"), json::value(1));
}

TEST(SessionProtocol, RunKeywordResultShapes) {
  const Library lib = make_probe_library();
  Driver d(lib);
  d.initialize();
  const std::string token = d.import();

  EXPECT_EQ(d.run(token, "Add", {"2", 3}), (json::object{{"result", 5}}));
  EXPECT_EQ(d.run(token, "add", {2}), (json::object{{"result", 2}}));  // Robot-normalized name
  EXPECT_EQ(d.run(token, "Nothing"), json::object());                   // None: `result` left out
  EXPECT_EQ(d.run(token, "Echo", {nullptr}), json::object());
  const json::value pickled = json::object{{"__pickled__", "8004950a000000000000007d948c0161944b01732e"}};
  EXPECT_EQ(d.run(token, "Echo", {pickled}).at("result"), pickled);

  EXPECT_EQ(d.run(token, "Fail").at("error"), json::parse(R"({
      "message": "it broke", "type": "ValueError", "traceback": "tb line", "mode": "CONTINUABLE"})"));
  EXPECT_EQ(d.run(token, "Throw").at("error"), json::parse(R"({"message": "plain failure", "type": "std::runtime_error"})"));
  EXPECT_EQ(d.run(token, "Add", {"x"}).at("error").at("type"), json::value("ValueError"));
}

// Python's value dialect: a scalar or a flat list or dict of scalars as JSON, a nested value pickled whole
// (the stock client and the reference server refuse nested JSON), unless the keyword opted out.
TEST(SessionProtocol, NestedResultsArePickledUnlessTheKeywordSendsThemAsTheyAre) {
  Library lib{"Probe"};
  lib.keyword("Give", {{"json_text", "str"}}, "",
              [](Call& c) -> json::value { return json::parse(c.get<std::string>("json_text")); });
  lib.keyword("Relay", {{"json_text", "str"}}, "",
              [](Call& c) -> json::value { return json::parse(c.get<std::string>("json_text")); });
  lib.result_form("Relay", rjg::sdk::ResultForm::as_is);
  EXPECT_THROW(lib.result_form("Nope", rjg::sdk::ResultForm::as_is), std::invalid_argument);
  Driver d(lib);
  d.initialize();
  const std::string token = d.import();
  auto give = [&](std::string_view text) { return d.run(token, "Give", {json::string(text)}).at("result"); };

  for (const char* flat : {R"("text")", "1", "2.5", "true", R"([1, "two", null])", R"({"a": 1, "b": "c"})",
                           R"({"__pickled__": "80044b012e"})", "[]", "{}"})
    EXPECT_EQ(give(flat), json::parse(flat)) << flat;

  for (const char* nested : {R"([[1, 2], [3]])", R"({"content": [{"type": "text", "text": "hi"}]})",
                             R"({"cmd": ["echo", "hello"], "rc": 0})", R"([{"a": 1}])"}) {
    const json::value wire = give(nested);
    ASSERT_TRUE(is_pickled(wire)) << nested << " went as " << wire;
    EXPECT_EQ(python_value(wire), json::parse(nested)) << nested;
  }
  // A dict with a "__pickled__" member among others would be taken for a pickle: pickled whole.
  const json::value lookalike = give(R"({"__pickled__": "x", "other": 1})");
  ASSERT_TRUE(is_pickled(lookalike)) << lookalike;
  EXPECT_EQ(python_value(lookalike), json::parse(R"({"__pickled__": "x", "other": 1})"));
  // A pickle inside a nested value is read as Python would, then the whole is pickled.
  const std::string inner = rjg::pickle::encode_pickle_hex(rjg::pickle::PyValue(rjg::pickle::PyBytes{"z"}));
  const json::value with_bytes = give(fmt::format(R"({{"data": [{{"__pickled__": "{}"}}]}})", inner));
  ASSERT_TRUE(is_pickled(with_bytes)) << with_bytes;
  rjg::pickle::PyDict expected;
  expected.items.emplace_back(rjg::pickle::PyValue("data"),
                              rjg::pickle::PyValue(rjg::pickle::PyList{{rjg::pickle::PyValue(rjg::pickle::PyBytes{"z"})}}));
  EXPECT_EQ(std::get<rjg::pickle::PyValue>(rjg::pickle::decode_pickle_hex(with_bytes.at("__pickled__").as_string())),
            rjg::pickle::PyValue(expected));

  // as_is: exactly what the body returned.
  EXPECT_EQ(d.run(token, "Relay", {R"([[1, 2]])"}).at("result"), json::parse("[[1, 2]]"));
}

TEST(Library, NestedDefaultsAreSentInPythonsDialectAndTheBodyGetsThemAsDeclared) {
  Library lib{"Probe"};
  json::value seen;
  lib.keyword("K", {{"table", "", json::parse(R"([[1, 2]])")}, {"flat", "", json::parse("[1, 2]")}}, "",
              [&](Call& c) -> json::value {
                seen = c.value("table");
                return nullptr;
              });
  const json::object definition = lib.definition();
  const json::array& args = definition.at("keywords").at(0).at("args").as_array();
  ASSERT_TRUE(is_pickled(args.at(0).at("default"))) << args;
  EXPECT_EQ(python_value(args.at(0).at("default")), json::parse("[[1, 2]]"));
  EXPECT_EQ(args.at(1).at("default"), json::parse("[1, 2]"));
  Driver d(lib);
  d.initialize();
  d.run(d.import(), "K");
  EXPECT_EQ(seen, json::parse("[[1, 2]]"));
}

// What the stock client sends for a nested argument (a pickle) reads as plain JSON through the accessors;
// value() keeps it as sent (a relay returns it unchanged).
TEST(CallAccess, PickledArgumentsReadAsPlainJson) {
  using rjg::pickle::PyValue;
  Library lib{"Probe"};
  std::vector<std::string> seen;
  lib.keyword("K", {{"rows"}, {"options"}, {"blob"}}, "", [&](Call& c) -> json::value {
    seen.push_back(json::serialize(c.get<json::array>("rows")));
    seen.push_back(json::serialize(c.get<json::object>("options")));
    seen.push_back(json::serialize(c.plain("rows")));
    try {
      c.plain("blob");
    } catch (const KeywordError& e) {
      seen.push_back(e.type() + ": " + e.what());
    }
    return c.value("rows");
  });
  Driver d(lib);
  d.initialize();
  const std::string token = d.import();
  const json::value rows = json::object{
      {"__pickled__", rjg::pickle::encode_pickle_hex(PyValue(rjg::pickle::PyList{
                          {PyValue(rjg::pickle::PyList{{PyValue(1), PyValue(2)}}), PyValue(rjg::pickle::PyTuple{{PyValue("a")}})}}))}};
  rjg::pickle::PyDict options;
  options.items.emplace_back(PyValue("depth"), PyValue(rjg::pickle::PyList{{PyValue(3)}}));
  const json::value options_wire = json::object{{"__pickled__", rjg::pickle::encode_pickle_hex(PyValue(options))}};
  const json::value blob = json::object{{"__pickled__", rjg::pickle::encode_pickle_hex(PyValue(rjg::pickle::PyBytes{"\x01"}))}};
  const json::object result = d.run(token, "K", {rows, options_wire, blob});
  ASSERT_EQ(seen.size(), 4u) << json::serialize(result);
  EXPECT_EQ(seen[0], R"([[1,2],["a"]])");
  EXPECT_EQ(seen[1], R"({"depth":[3]})");
  EXPECT_EQ(seen[2], R"([[1,2],["a"]])");
  EXPECT_TRUE(seen[3].starts_with("ValueError: Keyword 'Probe.K': argument 'blob' cannot be read as JSON: ")) << seen[3];
  EXPECT_EQ(result.at("result"), rows);  // value(): as sent, and already in the dialect
}

TEST(SessionProtocol, UnknownTokenAndUnknownKeyword) {
  const Library lib = make_probe_library();
  Driver d(lib);
  d.initialize();
  const std::string token = d.import();
  EXPECT_EQ(error_message(d.run("bogus-token", "Echo", {1})), "No library 'bogus-token' found.");
  EXPECT_EQ(error_message(d.run(token, "Nope")),
            "No keyword named 'Nope' in library 'Probe'. Available: Add, Echo, Nothing, Fail, Throw, Chatty, Count, "
            "Import Args, Raw.");
}

TEST(SessionProtocol, DynamicKeywordsAreDescribedAtImportAndReachTheirBody) {
  // An adapter learns its keywords when imported: the import hook describes them, and every name that is
  // not registered reaches one body, with the texts as sent.
  Library lib("Probe");
  lib.on_import([](ImportContext& context) {
    context.extra_result["definition"] = json::object{{"name", "Probe"}, {"keywords", json::array{json::object{{"name", "Far Away"}}}}};
  });
  lib.dynamic_keywords([](Call& c) -> json::value {
    c.return_raw(fmt::format(R"({{"called": {}, "args": {}}})", json::serialize(json::value(c.keyword())), c.args_text()));
    return nullptr;
  });
  Driver d(lib);
  d.initialize();
  auto reply = d.answer("imp", protocol::kImportLibrary, json::object{{"name", "Probe"}});
  EXPECT_EQ(reply.at("result").at("definition").at("keywords").at(0).at("name"), "Far Away");
  const std::string token(reply.at("result").at("token").as_string());
  EXPECT_EQ(d.run(token, "Far Away", {1, "x"}).at("result"), json::parse(R"({"called": "Far Away", "args": [1,"x"]})"));
}

TEST(SessionProtocol, LogsArriveBeforeTheResponse) {
  const Library lib = make_probe_library();
  Driver d(lib);
  d.initialize();
  const std::string token = d.import();
  auto messages = d.request("5", protocol::kRunKeyword, json::object{{"library_token", token}, {"name", "Chatty"}});
  ASSERT_EQ(messages.size(), 3u);
  EXPECT_EQ(messages[0], json::parse(R"({"jsonrpc": "2.0", "method": "robot/log",
      "params": {"message": "first", "level": "INFO", "html": false, "console": false}})"));
  EXPECT_EQ(messages[1].at("params"),
            json::parse(R"({"message": "<b>second</b>", "level": "WARN", "html": true, "console": true})"));
  EXPECT_EQ(messages[2], json::parse(R"({"jsonrpc": "2.0", "id": "5", "result": {"result": "done"}})"));
}

TEST(SessionProtocol, WriteRawBypassesFraming) {
  const Library lib = make_probe_library();
  Driver d(lib);
  d.initialize();
  EXPECT_EQ(d.run(d.import(), "Raw").at("result"), json::value("ok"));
  EXPECT_EQ(d.output().raw, "junk");
}

TEST(SessionProtocol, FinalizeShutdownExit) {
  const Library lib = make_probe_library();
  Driver d(lib);
  d.initialize();
  const std::string token = d.import();
  EXPECT_EQ(d.answer(1, protocol::kFinalizeLibrary, json::object{{"token", token}}).at("result"), json::object());
  EXPECT_EQ(error_message(d.run(token, "Echo", {1})), "No library '" + token + "' found.");
  // Finalizing twice (or a token never issued) is answered {} like the reference server does.
  EXPECT_EQ(d.answer(2, protocol::kFinalizeLibrary, json::object{{"token", token}}).at("result"), json::object());
  EXPECT_EQ(d.answer("never issued", protocol::kFinalizeLibrary, json::object{{"token", "Probe_0_0"}}).at("result"),
            json::object());
  // The token itself is required, as a string.
  EXPECT_EQ(d.answer(11, protocol::kFinalizeLibrary).at("error").at("code"), json::value(protocol::kInvalidParams));
  EXPECT_EQ(d.answer(12, protocol::kFinalizeLibrary, json::object{{"token", 5}}).at("error").at("code"),
            json::value(protocol::kInvalidParams));
  EXPECT_EQ(d.answer(3, protocol::kShutdown).at("result"), json::object());
  EXPECT_FALSE(d.done());
  EXPECT_TRUE(d.notify(protocol::kExit).empty());
  EXPECT_TRUE(d.done());
}

TEST(SessionProtocol, UnknownAndMalformedMessages) {
  const Library lib = make_probe_library();
  Driver d(lib);
  auto unknown = d.answer("2", "robot/frobnicate");
  EXPECT_EQ(unknown.at("error").at("code"), json::value(protocol::kMethodNotFound));
  EXPECT_TRUE(d.notify("$/cancelRequest").empty());

  auto parse_error = d.send(R"({"jsonrpc":"2.0","method":"robot/initialize","id":1,"params":)");
  ASSERT_EQ(parse_error.size(), 1u);
  EXPECT_EQ(parse_error[0].at("error").at("code"), json::value(protocol::kParseError));
  EXPECT_EQ(parse_error[0].at("id"), json::value(1));  // found at the top level of the broken body

  // A response from the client is not answered; a notification-only method sent with an id is refused.
  EXPECT_TRUE(d.send(R"({"jsonrpc":"2.0","id":"x","result":{}})").empty());
  EXPECT_EQ(d.answer(4, protocol::kExit).at("error").at("code"), json::value(protocol::kInvalidRequest));
  EXPECT_FALSE(d.done());
  EXPECT_TRUE(d.notify(protocol::kShutdown).empty());  // a request without an id gets no answer

  // The session is still usable, and an integer id comes back as an integer.
  EXPECT_EQ(d.answer(7, protocol::kInitialize).at("id"), json::value(7));
}

TEST(SessionProtocol, InitializeHookCanWithholdTheAnswer) {
  Library lib{"Silent"};
  int calls = 0;
  lib.on_initialize([&](const json::value& params) {
    ++calls;
    return params.as_object().contains("answer");
  });
  Driver d(lib);
  EXPECT_TRUE(d.request(1, protocol::kInitialize).empty());
  EXPECT_EQ(d.request(2, protocol::kInitialize, json::object{{"answer", true}}).size(), 1u);
  EXPECT_EQ(calls, 2);
}

// Every request the real client and the probes sent gets exactly one answer carrying its id, and
// nothing a real peer sent makes the session throw.
TEST(SessionProtocol, RecordedTrafficIsAnsweredOncePerRequest) {
  const std::filesystem::path dir = RJG_TRACES_DIR;
  ASSERT_TRUE(std::filesystem::is_directory(dir)) << "fixture missing: traces folder " << dir;
  const Library lib = make_probe_library();
  int files = 0, requests = 0;
  for (const auto& file : std::filesystem::directory_iterator(dir)) {
    if (file.path().extension() != ".jsonl") continue;
    ++files;
    std::map<std::int64_t, std::unique_ptr<Driver>> sessions;
    std::ifstream in(file.path());
    for (std::string line; std::getline(in, line);) {
      if (line.empty()) continue;
      const json::object record = json::parse(line).as_object();
      if (record.at("dir") != "c2s") continue;
      auto& driver = sessions[record.at("conn").to_number<std::int64_t>()];
      if (!driver) driver = std::make_unique<Driver>(lib);
      const std::string body(record.at("body").as_string());
      json::error_code ec;
      const json::value parsed = json::parse(body, ec);
      std::vector<json::value> answers;
      ASSERT_NO_THROW(answers = driver->send(body)) << body;
      if (ec || !parsed.as_object().contains("id")) continue;
      ++requests;
      ASSERT_EQ(answers.size(), 1u) << body;  // none of the recorded calls logs
      EXPECT_EQ(answers[0].at("id"), parsed.at("id")) << body;
    }
  }
  EXPECT_GT(files, 0) << "fixture missing: no .jsonl file in " << dir;
  EXPECT_GT(requests, 50);
}

// ---------------------------------------------------------------------------------------------
// Transport

class TempFile {
 public:
  TempFile() : file_(std::tmpfile()) {}
  ~TempFile() { std::fclose(file_); }
  int fd() const { return ::fileno(file_); }
  void write(const std::string& bytes) {
    ASSERT_EQ(::write(fd(), bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
    ::lseek(fd(), 0, SEEK_SET);
  }
  std::string read_all() const {
    ::lseek(fd(), 0, SEEK_SET);
    std::string out;
    char buf[4096];
    for (ssize_t n; (n = ::read(fd(), buf, sizeof buf)) > 0;) out.append(buf, static_cast<std::size_t>(n));
    return out;
  }

 private:
  std::FILE* file_;
};

std::vector<json::value> decode_frames(const std::string& bytes) {
  rjg::protocol::FrameReader reader;
  reader.feed(bytes);
  std::vector<json::value> out;
  for (auto r = reader.next(); r.kind == rjg::protocol::FrameReader::Result::Kind::frame; r = reader.next())
    out.push_back(json::parse(r.body));
  EXPECT_EQ(reader.buffered(), 0u);
  return out;
}

TEST(ServeStream, WholeSessionOverDescriptors) {
  const Library lib = make_probe_library();
  std::string input;
  for (const std::string& body :
       {rjg::protocol::make_request("1", protocol::kInitialize, json::object()),
        rjg::protocol::make_notification(protocol::kInitialized, json::object()),
        rjg::protocol::make_request("2", protocol::kImportLibrary, json::object{{"name", ""}}),
        rjg::protocol::make_request("3", protocol::kRunKeyword, json::object{{"library_token", "nope"}, {"name", "Echo"}}),
        rjg::protocol::make_request("4", protocol::kShutdown, json::object()),
        rjg::protocol::make_notification(protocol::kExit, json::object()),
        rjg::protocol::make_request("5", protocol::kShutdown, json::object())})  // after exit: never read
    input += rjg::protocol::encode_frame(body);
  TempFile in, out;
  in.write(input);
  EXPECT_EQ(rjg::sdk::serve_stream(lib, in.fd(), out.fd(), "test"), 0);
  const auto frames = decode_frames(out.read_all());
  ASSERT_EQ(frames.size(), 4u);
  for (std::size_t i = 0; i < frames.size(); ++i) EXPECT_EQ(frames[i].at("id"), json::value(std::to_string(i + 1)));
}

TEST(ServeStream, EndOfInputEndsCleanlyAndFramingErrorsDoNot) {
  const Library lib = make_probe_library();
  {
    TempFile in, out;
    in.write(rjg::protocol::encode_frame(rjg::protocol::make_request(1, protocol::kInitialize, json::object())));
    EXPECT_EQ(rjg::sdk::serve_stream(lib, in.fd(), out.fd(), "test"), 0);
    EXPECT_EQ(decode_frames(out.read_all()).size(), 1u);
  }
  {
    TempFile in, out;
    in.write("Content-Length: nope\r\n\r\n{}");
    EXPECT_EQ(rjg::sdk::serve_stream(lib, in.fd(), out.fd(), "test"), 1);
  }
}

// A client at the other end of a socket pair, with serve_stream on a thread of its own.
class SocketPeer {
 public:
  explicit SocketPeer(const Library& lib) {
    int fds[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
    client_ = fds[0];
    server_ = fds[1];
    thread_ = std::thread([this, &lib] { rc_ = rjg::sdk::serve_stream(lib, server_, server_, "peer"); });
  }
  ~SocketPeer() {
    if (thread_.joinable()) finish();
    ::close(client_);
    ::close(server_);
  }

  void send(const std::string& body) {
    const std::string frame = rjg::protocol::encode_frame(body);
    ASSERT_EQ(::write(client_, frame.data(), frame.size()), static_cast<ssize_t>(frame.size()));
  }
  void request(const json::value& id, std::string_view method, json::value params = json::object()) {
    send(rjg::protocol::make_request(id, method, std::move(params)));
  }

  // The next message (stray bytes before it are collected in `skipped`); null after 10 s.
  json::value next() {
    for (;;) {
      auto r = reader_.next();
      skipped += r.skipped;
      if (r.kind == rjg::protocol::FrameReader::Result::Kind::frame) return json::parse(r.body);
      if (r.kind == rjg::protocol::FrameReader::Result::Kind::error) return nullptr;
      pollfd p{client_, POLLIN, 0};
      if (::poll(&p, 1, 10'000) != 1) return nullptr;
      char buf[4096];
      const ssize_t n = ::read(client_, buf, sizeof buf);
      if (n <= 0) return nullptr;
      reader_.feed({buf, static_cast<std::size_t>(n)});
    }
  }

  // Ends the input and waits for serve_stream to return.
  int finish() {
    ::shutdown(client_, SHUT_WR);
    thread_.join();
    return rc_;
  }

  int server_fd() const { return server_; }
  std::string skipped;

 private:
  int client_ = -1, server_ = -1;
  std::thread thread_;
  int rc_ = -1;
  rjg::protocol::FrameReader reader_{{}, rjg::protocol::FrameReader::Mode::lenient};
};

// A keyword's logs reach the peer while it runs; requests sent meanwhile (more than are read ahead)
// are answered afterwards, in order.
TEST(ServeStream, LogsGoOutWhileTheKeywordRuns) {
  Library lib = make_probe_library();
  std::atomic<bool> log_seen{false};
  lib.keyword("Wait For Peer", {}, "", [&](Call& c) -> json::value {
    c.log("waiting");
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!log_seen && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return log_seen ? "seen" : "the log was not seen";
  });
  SocketPeer peer(lib);
  peer.request(1, protocol::kInitialize);
  peer.send(rjg::protocol::make_notification(protocol::kInitialized, json::object()));
  peer.request(2, protocol::kImportLibrary, json::object{{"name", "Probe"}});
  EXPECT_EQ(peer.next().at("id"), json::value(1));
  const json::value imported = peer.next();
  const std::string token(imported.at("result").at("token").as_string());

  peer.request(3, protocol::kRunKeyword, json::object{{"library_token", token}, {"name", "Wait For Peer"}});
  constexpr int kPipelined = 100;
  for (int i = 0; i < kPipelined; ++i)
    peer.request(100 + i, protocol::kRunKeyword, json::object{{"library_token", token}, {"name", "Echo"}, {"args", json::array{i}}});
  const json::value log = peer.next();
  EXPECT_EQ(log.at("method"), json::value(protocol::kLog)) << log;
  EXPECT_EQ(log.at("params").at("message"), json::value("waiting")) << log;
  log_seen = true;
  EXPECT_EQ(peer.next(), json::parse(R"({"jsonrpc": "2.0", "id": 3, "result": {"result": "seen"}})"));
  for (int i = 0; i < kPipelined; ++i) {
    const json::value answer = peer.next();
    EXPECT_EQ(answer.at("id"), json::value(100 + i)) << answer;
    EXPECT_EQ(answer.at("result").at("result"), json::value(i)) << answer;
  }

  // Raw bytes go into the stream as they are, between frames.
  peer.request(4, protocol::kRunKeyword, json::object{{"library_token", token}, {"name", "Raw"}});
  EXPECT_EQ(peer.next().at("result").at("result"), json::value("ok"));
  EXPECT_EQ(peer.skipped, "junk");

  peer.send(rjg::protocol::make_notification(protocol::kExit, json::object()));
  EXPECT_EQ(peer.finish(), 0);
  // The descriptors are still the caller's, blocking as they were.
  const int flags = ::fcntl(peer.server_fd(), F_GETFL);
  ASSERT_GE(flags, 0);
  EXPECT_EQ(flags & O_NONBLOCK, 0);
}

TEST(ServeStream, BrokenOutputEndsTheSessionWithAnError) {
  std::signal(SIGPIPE, SIG_IGN);
  const Library lib = make_probe_library();
  int in[2], out[2];
  ASSERT_EQ(::pipe2(in, O_CLOEXEC), 0);
  ASSERT_EQ(::pipe2(out, O_CLOEXEC), 0);
  ::close(out[0]);  // nobody reads the answers
  const std::string frame = rjg::protocol::encode_frame(rjg::protocol::make_request(1, protocol::kInitialize, json::object()));
  ASSERT_EQ(::write(in[1], frame.data(), frame.size()), static_cast<ssize_t>(frame.size()));
  EXPECT_EQ(rjg::sdk::serve_stream(lib, in[0], out[1], "test"), 1);
  for (int fd : {in[0], in[1], out[1]}) ::close(fd);
}

// A keyword that asks to exit after its answer (an adapter whose backend died): the answer, a failure
// here, is written first; then the session ends, its instances are destroyed, and serve_stream returns
// the status without reading further requests.
TEST(ServeStream, ExitAfterAnswerEndsTheSessionOnceTheAnswerIsWritten) {
  auto destroyed = std::make_shared<std::atomic<int>>(0);
  struct Instance {
    explicit Instance(std::shared_ptr<std::atomic<int>> counter) : destroyed(std::move(counter)) {}
    ~Instance() { ++*destroyed; }
    std::shared_ptr<std::atomic<int>> destroyed;
  };
  Library lib{"Probe"};
  lib.on_import([&](ImportContext& ctx) { ctx.state = std::make_shared<Instance>(destroyed); });
  lib.keyword("Die", {}, "", [](Call& c) -> json::value {
    c.exit_after_answer(3);
    throw KeywordError("the backend is gone");
  });
  lib.keyword("Echo", {{"value"}}, "", [](Call& c) -> json::value { return c.value("value"); });
  {
    // In memory: the answer comes, then the session says it is done, with that status.
    Driver driver(lib);
    driver.initialize();
    const auto token = driver.import();
    EXPECT_FALSE(driver.done());
    EXPECT_EQ(error_message(driver.run(token, "Die")), "the backend is gone");
    EXPECT_TRUE(driver.done());
  }
  *destroyed = 0;
  SocketPeer peer(lib);
  peer.request(1, protocol::kInitialize);
  peer.send(rjg::protocol::make_notification(protocol::kInitialized, json::object()));
  peer.request(2, protocol::kImportLibrary, json::object{{"name", "Probe"}});
  EXPECT_EQ(peer.next().at("id"), json::value(1));
  const std::string token(peer.next().at("result").at("token").as_string());
  peer.request(3, protocol::kRunKeyword, json::object{{"library_token", token}, {"name", "Die"}});
  peer.request(4, protocol::kRunKeyword, json::object{{"library_token", token}, {"name", "Echo"}, {"args", json::array{1}}});
  const json::value answer = peer.next();
  EXPECT_EQ(answer.at("id"), json::value(3)) << answer;
  EXPECT_EQ(answer.at("result").at("error").at("message"), json::value("the backend is gone")) << answer;
  EXPECT_EQ(peer.finish(), 3);
  EXPECT_EQ(*destroyed, 1) << "the instance was not destroyed before serve_stream returned";
  ::shutdown(peer.server_fd(), SHUT_WR);
  EXPECT_TRUE(peer.next().is_null()) << "request 4 must not be answered";
}

TEST(ServeOptions, Parsing) {
  using rjg::sdk::ServeOptions;
  ServeOptions o;
  EXPECT_FALSE(rjg::sdk::parse_serve_options({"--tcp", "127.0.0.1:0", "--log-level", "debug"}, o));
  EXPECT_EQ(o.transport, ServeOptions::Transport::tcp);
  EXPECT_EQ(o.host, "127.0.0.1");
  EXPECT_EQ(o.port, 0);
  EXPECT_EQ(o.log_level, rjg::log::Level::debug);

  EXPECT_FALSE(rjg::sdk::parse_serve_options({"--tcp=[::1]:8270"}, o));
  EXPECT_EQ(o.host, "::1");
  EXPECT_EQ(o.port, 8270);
  EXPECT_FALSE(rjg::sdk::parse_serve_options({"--stdio"}, o));
  EXPECT_EQ(o.transport, ServeOptions::Transport::stdio);

  EXPECT_TRUE(rjg::sdk::parse_serve_options({"--tcp", "host"}, o));
  EXPECT_TRUE(rjg::sdk::parse_serve_options({"--tcp", "host:65536"}, o));
  EXPECT_TRUE(rjg::sdk::parse_serve_options({"--tcp"}, o));
  EXPECT_TRUE(rjg::sdk::parse_serve_options({"--log-level", "loud"}, o));
  EXPECT_TRUE(rjg::sdk::parse_serve_options({"--frobnicate"}, o));
}

}  // namespace
