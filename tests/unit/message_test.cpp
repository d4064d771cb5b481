// The JSON-RPC message model: every recorded body classified, ids round-tripped, each way a body can
// be invalid answered with the right code and, when readable, the right id, and the body kept byte
// for byte (unknown fields, number texts, string escapes) with with_id() changing only the id.
#include "common/protocol/message.hpp"
#include "common/protocol/protocol.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace {

namespace json = boost::json;
using rjg::protocol::Message;
using rjg::protocol::ProtocolError;
using Kind = Message::Kind;

struct Recorded {
  int conn;
  std::string dir;  // c2s or s2c
  std::string body;
};

std::vector<Recorded> load_trace(const std::filesystem::path& file) {
  std::vector<Recorded> out;
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    auto record = json::parse(line).as_object();
    out.push_back({static_cast<int>(record.at("conn").to_number<int>()), std::string(record.at("dir").as_string()),
                   std::string(record.at("body").as_string())});
  }
  return out;
}

const Message& as_message(const rjg::protocol::Classified& c) {
  if (auto* e = std::get_if<ProtocolError>(&c)) ADD_FAILURE() << "unexpected protocol error: " << e->message;
  static const Message kEmpty;
  auto* m = std::get_if<Message>(&c);
  return m ? *m : kEmpty;
}

ProtocolError as_error(const rjg::protocol::Classified& c) {
  if (auto* e = std::get_if<ProtocolError>(&c)) return *e;
  ADD_FAILURE() << "expected a protocol error, got a message";
  return ProtocolError{0, ""};
}

struct Counts {
  int request = 0, notification = 0, response = 0, error_response = 0, parse_error = 0;
  bool operator==(const Counts&) const = default;
};

std::ostream& operator<<(std::ostream& os, const Counts& c) {
  return os << "{request " << c.request << ", notification " << c.notification << ", response " << c.response
            << ", error_response " << c.error_response << ", parse_error " << c.parse_error << "}";
}

struct TraceExpectation {
  const char* file;
  Counts c2s;
  Counts s2c;
};
void PrintTo(const TraceExpectation& t, std::ostream* os) { *os << t.file; }

class TraceClassification : public ::testing::TestWithParam<TraceExpectation> {};

// Clients send requests and notifications; servers answer with responses and error responses and
// send robot/log notifications. Every request is answered once, with its own id, on its connection.
TEST_P(TraceClassification, EveryBodyHasTheKindItsDirectionImplies) {
  std::filesystem::path file = std::filesystem::path(RJG_TRACES_DIR) / GetParam().file;
  ASSERT_TRUE(std::filesystem::exists(file)) << "fixture missing: trace file " << file;

  Counts c2s, s2c;
  std::map<int, std::multiset<std::string>> requested, answered;
  std::map<int, int> unreadable, answered_without_id;
  for (const auto& rec : load_trace(file)) {
    bool client = rec.dir == "c2s";
    ASSERT_TRUE(client || rec.dir == "s2c") << rec.dir;
    Counts& counts = client ? c2s : s2c;
    auto classified = rjg::protocol::parse_message(rec.body);
    if (auto* e = std::get_if<ProtocolError>(&classified)) {
      EXPECT_EQ(e->code, rjg::protocol::kParseError) << rec.body;
      // (The reference answered its one malformed body without an id; the gateway finds the id at
      // the top level even there: Message.MalformedJsonIsParseErrorWithTheTopLevelId.)
      ++counts.parse_error;
      ++unreadable[rec.conn];
      continue;
    }
    const Message& m = std::get<Message>(classified);
    switch (m.kind) {
      case Kind::request:
        ++counts.request;
        EXPECT_TRUE(client) << "a server sent a request: " << rec.body;
        EXPECT_TRUE(m.method().starts_with("robot/")) << m.method();
        requested[rec.conn].insert(rjg::protocol::id_to_string(m.id()));
        break;
      case Kind::notification:
        ++counts.notification;
        if (client)
          EXPECT_TRUE(m.method() == rjg::protocol::kInitialized || m.method() == rjg::protocol::kExit) << m.method();
        else
          EXPECT_EQ(m.method(), rjg::protocol::kLog);
        EXPECT_TRUE(m.id().is_null());
        break;
      case Kind::response:
        ++counts.response;
        EXPECT_FALSE(client) << "a client sent a response: " << rec.body;
        answered[rec.conn].insert(rjg::protocol::id_to_string(m.id()));
        break;
      case Kind::error_response:
        ++counts.error_response;
        EXPECT_FALSE(client) << "a client sent an error response: " << rec.body;
        EXPECT_TRUE(m.error().at("code").is_number());
        EXPECT_TRUE(m.error().at("message").is_string());
        if (m.id().is_null()) {
          EXPECT_EQ(m.error().at("code").to_number<int>(), rjg::protocol::kParseError);
          ++answered_without_id[rec.conn];
        } else {
          answered[rec.conn].insert(rjg::protocol::id_to_string(m.id()));
        }
        break;
    }
  }
  EXPECT_EQ(c2s, GetParam().c2s);
  EXPECT_EQ(s2c, GetParam().s2c);
  EXPECT_EQ(requested, answered);
  EXPECT_EQ(unreadable, answered_without_id);  // each malformed body got its id-less -32700
}

INSTANTIATE_TEST_SUITE_P(
    Traces, TraceClassification,
    ::testing::Values(
        TraceExpectation{"reference-suite-tcp.jsonl", {.request = 70, .notification = 20}, {.notification = 9, .response = 70}},
        TraceExpectation{"reference-edge-cases.jsonl",
                         {.request = 35, .notification = 5, .parse_error = 1},
                         {.notification = 10, .response = 31, .error_response = 5}}),
    [](const auto& info) { return std::string(info.param.file).starts_with("reference-suite") ? "suite" : "edge_cases"; });

TEST(Message, RecordedIntegerIdIsEchoedAsInteger) {
  auto m = as_message(rjg::protocol::parse_message(R"({"jsonrpc": "2.0", "method": "robot/initialize", "id": 7, "params": {}})"));
  EXPECT_EQ(m.kind, Kind::request);
  ASSERT_TRUE(m.id().is_int64());
  auto answer = rjg::protocol::make_result(m.id(), json::object{});
  EXPECT_NE(answer.find("\"id\":7"), std::string::npos) << answer;
  auto back = as_message(rjg::protocol::parse_message(answer));
  EXPECT_EQ(back.kind, Kind::response);
  EXPECT_EQ(back.id(), json::value(7));
}

TEST(Message, IdsRoundTripExactly) {
  for (const char* id_text : {"\"1\"", "\"\"", "\"abc-\\u00fc-\\\"quoted\\\"\"", "0", "-5", "9223372036854775807",
                              "18446744073709551615"}) {
    std::string body = std::string(R"({"jsonrpc":"2.0","method":"robot/run_keyword","params":{},"id":)") + id_text + "}";
    auto m = as_message(rjg::protocol::parse_message(body));
    ASSERT_EQ(m.kind, Kind::request) << body;
    json::value original = json::parse(id_text);
    EXPECT_EQ(m.id(), original) << id_text;

    for (const std::string& answer :
         {rjg::protocol::make_result(m.id(), json::object{}), rjg::protocol::make_error(m.id(), rjg::protocol::kKeywordNotFound, "no")}) {
      auto reply = as_message(rjg::protocol::parse_message(answer));
      EXPECT_EQ(reply.id(), original) << answer;
      EXPECT_EQ(reply.id().kind(), original.kind()) << answer;  // a string id stays a string, a number a number
      EXPECT_EQ(rjg::protocol::id_to_string(reply.id()), json::serialize(original));
    }
  }
}

TEST(Message, MakeErrorCarriesCodeMessageAndData) {
  auto text = rjg::protocol::make_error("3", rjg::protocol::kUnknownLibrary, "Library 'X' is not served", json::value("detail"));
  auto m = as_message(rjg::protocol::parse_message(text));
  ASSERT_EQ(m.kind, Kind::error_response);
  EXPECT_EQ(m.id(), json::value("3"));
  EXPECT_EQ(m.error().at("code"), json::value(rjg::protocol::kUnknownLibrary));
  EXPECT_EQ(m.error().at("message"), json::value("Library 'X' is not served"));
  EXPECT_EQ(m.error().at("data"), json::value("detail"));
}

TEST(Message, MalformedJsonIsParseErrorWithTheTopLevelId) {
  // Recorded in reference-edge-cases.jsonl: a body cut short. The reference answered it without an
  // id, so its client could not match the answer; the id is there, at the top level, and comes back.
  auto e = as_error(rjg::protocol::parse_message(R"({"jsonrpc":"2.0","method":"robot/initialize","id":1,"params":)"));
  EXPECT_EQ(e.code, rjg::protocol::kParseError);
  EXPECT_EQ(e.id_text, "1");
  for (const char* body : {"", "{", "not json", "{\"a\":1}}", "\xff\xfe"}) {
    auto err = as_error(rjg::protocol::parse_message(body));
    EXPECT_EQ(err.code, rjg::protocol::kParseError) << body;
    EXPECT_EQ(err.id_text, "null") << body;
  }
}

struct Invalid {
  const char* name;
  const char* body;
  const char* id_text;  // expected in the answer: the id exactly as sent, or null
};
void PrintTo(const Invalid& c, std::ostream* os) { *os << c.name; }

class InvalidRequests : public ::testing::TestWithParam<Invalid> {};

TEST_P(InvalidRequests, AnswerInvalidRequestWithTheReadableId) {
  auto e = as_error(rjg::protocol::parse_message(GetParam().body));
  EXPECT_EQ(e.code, rjg::protocol::kInvalidRequest) << e.message;
  EXPECT_EQ(e.id_text, GetParam().id_text) << e.message;  // a string id stays a string, a number a number
  EXPECT_TRUE(e.message.starts_with("Invalid Request")) << e.message;
}

INSTANTIATE_TEST_SUITE_P(
    Cases, InvalidRequests,
    ::testing::Values(Invalid{"missing_jsonrpc", R"({"id":"3","method":"robot/initialize"})", R"("3")"},
                      Invalid{"wrong_version", R"({"jsonrpc":"1.0","id":4,"method":"robot/initialize"})", "4"},
                      Invalid{"version_not_string", R"({"jsonrpc":2.0,"id":"v","method":"robot/initialize"})", R"("v")"},
                      Invalid{"method_not_string", R"({"jsonrpc":"2.0","id":"5","method":5})", R"("5")"},
                      Invalid{"params_number", R"({"jsonrpc":"2.0","id":"6","method":"robot/run_keyword","params":1})", R"("6")"},
                      Invalid{"params_string", R"({"jsonrpc":"2.0","id":6,"method":"robot/run_keyword","params":"x"})", "6"},
                      Invalid{"array_batch", R"([{"jsonrpc":"2.0","id":"1","method":"robot/initialize"}])", "null"},
                      Invalid{"scalar", R"(42)", "null"},
                      Invalid{"result_and_error",
                              R"({"jsonrpc":"2.0","id":"9","result":{},"error":{"code":-32603,"message":"x"}})", R"("9")"},
                      Invalid{"neither_result_nor_error", R"({"jsonrpc":"2.0","id":"10"})", R"("10")"},
                      Invalid{"error_without_code", R"({"jsonrpc":"2.0","id":"11","error":{"message":"x"}})", R"("11")"},
                      Invalid{"null_id_on_request", R"({"jsonrpc":"2.0","id":null,"method":"robot/initialize"})", "null"},
                      Invalid{"object_id_on_request", R"({"jsonrpc":"2.0","id":{"a":1},"method":"robot/initialize"})",
                              "null"},
                      Invalid{"nothing_to_classify", R"({"jsonrpc":"2.0"})", "null"},
                      // The id as sent, spelling and escapes included.
                      Invalid{"id_text_kept", R"({"jsonrpc":"1.0","id":1E+2,"method":"robot/initialize"})", "1E+2"},
                      Invalid{"id_escapes_kept", R"({"jsonrpc":"1.0","id":"\u00e9\/","method":"robot/initialize"})",
                              R"("\u00e9\/")"}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(Message, NestingDeeperThanTheLimitIsParseError) {
  rjg::protocol::JsonLimits limits;
  limits.max_depth = 8;
  auto nested = [](int levels) {
    // The message object is one level; the rest is params nesting.
    std::string params(levels - 1, '[');
    params += std::string(levels - 1, ']');
    return R"({"jsonrpc":"2.0","method":"robot/log","params":)" + params + "}";
  };
  EXPECT_EQ(as_message(rjg::protocol::parse_message(nested(8), limits)).kind, Kind::notification);
  auto e = as_error(rjg::protocol::parse_message(nested(9), limits));
  EXPECT_EQ(e.code, rjg::protocol::kParseError);
  EXPECT_EQ(e.id_text, "null");
  EXPECT_NE(e.message.find("nesting"), std::string::npos) << e.message;
  EXPECT_NE(e.message.find("8"), std::string::npos) << e.message;

  // The default limit stops a deep bomb without recursion trouble.
  std::string bomb = R"({"jsonrpc":"2.0","id":"1","method":"m","params":)" + std::string(100000, '[');
  EXPECT_EQ(as_error(rjg::protocol::parse_message(bomb)).code, rjg::protocol::kParseError);
}

// The body is kept as received: unknown fields, white space and every value's spelling travel on.
TEST(Message, UnknownFieldsSurviveByteForByte) {
  const std::string params =
      R"({"library_token":"t", "name":"Echo","args":[{"__pickled__":"80049500"}],"future":true})";
  const std::string body = "{\"jsonrpc\":\"2.0\", \"id\":\"1\",\"method\":\"robot/run_keyword\",\n"
                           "  \"x-trace\":{\"span\":[1,2]},\"params\":" + params + "} ";
  auto m = as_message(rjg::protocol::parse_message(body));
  ASSERT_EQ(m.kind, Kind::request);
  EXPECT_EQ(m.text(), body);
  EXPECT_EQ(m.params_text(), params);
  EXPECT_EQ(m.params_kind(), rjg::protocol::Kind::object);
  // The tree view is parsed from the same text.
  EXPECT_EQ(m.params().at("future"), json::value(true));
  EXPECT_EQ(m.params().at("args"), json::parse(R"([{"__pickled__":"80049500"}])"));

  const std::string response = R"({"jsonrpc":"2.0","id":"2","result":{},"extra":[null]})";
  auto r = as_message(rjg::protocol::parse_message(response));
  ASSERT_EQ(r.kind, Kind::response);
  EXPECT_EQ(r.text(), response);
  EXPECT_EQ(r.result_text(), "{}");
}

// Number texts are never read into a double and written back: 1E+2 stays 1E+2 (not 100 or 1e2),
// -0.0 keeps its sign and fraction, integers beyond 64 bits keep every digit.
TEST(Message, NumberTextsAreKept) {
  for (std::string number : {"1E+2", "-0.0", "18446744073709551617", "1234567890123456789012345678901234567890",
                             "0.10", "-5e-3"}) {
    const std::string request = R"({"jsonrpc":"2.0","id":)" + number +
                                R"(,"method":"robot/run_keyword","params":{"args":[)" + number + "]}}";
    auto m = as_message(rjg::protocol::parse_message(request));
    ASSERT_EQ(m.kind, Kind::request) << request;
    EXPECT_EQ(m.text(), request);
    EXPECT_EQ(m.id_text(), number);
    EXPECT_EQ(m.params_text(), R"({"args":[)" + number + "]}");

    const std::string response = R"({"jsonrpc":"2.0","id":)" + number + R"(,"result":)" + number + "}";
    auto r = as_message(rjg::protocol::parse_message(response));
    ASSERT_EQ(r.kind, Kind::response) << response;
    EXPECT_EQ(r.id_text(), number);
    EXPECT_EQ(r.result_text(), number);
    // Answering with the raw builders carries the texts through.
    EXPECT_EQ(rjg::protocol::make_result_raw(m.id_text(), r.result_text()), response);

    const std::string error = R"({"jsonrpc":"2.0","id":)" + number +
                              R"(,"error":{"code":-32001,"message":"m","data":)" + number + "}}";
    auto e = as_message(rjg::protocol::parse_message(error));
    ASSERT_EQ(e.kind, Kind::error_response) << error;
    EXPECT_EQ(e.error_data_text(), number);
    EXPECT_EQ(e.text(), error);
  }
}

// String escapes are kept as sent; decoded values are what the escapes mean.
TEST(Message, StringEscapesAreKept) {
  const std::string body =
      R"({"jsonrpc":"2.0","id":"\u00e9\/","method":"robot\/log","params":{"message":"caf\u00e9 \/ \"q\""}})";
  auto m = as_message(rjg::protocol::parse_message(body));
  ASSERT_EQ(m.kind, Kind::request);
  EXPECT_EQ(m.text(), body);
  EXPECT_EQ(m.id_text(), R"("\u00e9\/")");
  EXPECT_EQ(m.id(), json::value("\xC3\xA9/"));
  EXPECT_EQ(m.method(), "robot/log");  // decoded
  EXPECT_EQ(m.params_text(), R"({"message":"caf\u00e9 \/ \"q\""})");
  EXPECT_EQ(m.params().at("message"), json::value("caf\xC3\xA9 / \"q\""));

  auto e = as_message(rjg::protocol::parse_message(
      R"({"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"bad \u00e9\/","data":"\ud83d\ude00"}})"));
  ASSERT_EQ(e.kind, Kind::error_response);
  EXPECT_EQ(e.error_code(), -32700);
  EXPECT_EQ(e.error_message(), "bad \xC3\xA9/");
  EXPECT_EQ(e.error_data_text(), R"("\ud83d\ude00")");
}

// with_id() replaces the id's text and nothing else, for every kind that has an id.
TEST(Message, WithIdChangesOnlyTheId) {
  const std::string head = R"({ "jsonrpc" : "2.0", "id" : )";
  const std::string tail = R"( , "method":"robot\/run_keyword","params":{"args":[1E+2,-0.0,"\u00e9\/"]},"x":{}} )";
  auto m = as_message(rjg::protocol::parse_message(head + R"("client-7")" + tail));
  ASSERT_EQ(m.kind, Kind::request);
  for (std::string new_id : {R"("gw-1")", "18446744073709551617", R"("\u00e9\"")"}) {
    const std::string changed = m.with_id(new_id);
    EXPECT_EQ(changed, head + new_id + tail);
    auto again = as_message(rjg::protocol::parse_message(changed));
    EXPECT_EQ(again.kind, Kind::request);
    EXPECT_EQ(again.id_text(), new_id);
    EXPECT_EQ(again.method(), m.method());
    EXPECT_EQ(again.params_text(), m.params_text());
  }

  const std::string response = R"({"jsonrpc":"2.0","result":{"result":1E+2},"id":"w-3"})";
  auto r = as_message(rjg::protocol::parse_message(response));
  EXPECT_EQ(r.with_id(R"("c-9")"), R"({"jsonrpc":"2.0","result":{"result":1E+2},"id":"c-9"})");

  auto e = as_message(rjg::protocol::parse_message(R"({"jsonrpc":"2.0","id":7,"error":{"code":-32001,"message":"x"}})"));
  EXPECT_EQ(e.with_id("8"), R"({"jsonrpc":"2.0","id":8,"error":{"code":-32001,"message":"x"}})");

  // A duplicated id: the last one is the id (as Python's json module reads it), and the one replaced.
  auto dup = as_message(rjg::protocol::parse_message(R"({"jsonrpc":"2.0","id":"a","method":"robot/shutdown","id":"b"})"));
  EXPECT_EQ(dup.id_text(), R"("b")");
  EXPECT_EQ(dup.with_id("1"), R"({"jsonrpc":"2.0","id":"a","method":"robot/shutdown","id":1})");

  // A notification has no id to change.
  const std::string notification = R"({"jsonrpc":"2.0","method":"robot/log","params":{"message":"m"}})";
  auto n = as_message(rjg::protocol::parse_message(notification));
  EXPECT_EQ(n.with_id(R"("x")"), notification);
}

TEST(Message, AccessorsOnEachKind) {
  auto n = as_message(rjg::protocol::parse_message(R"({"jsonrpc":"2.0","method":"robot/initialized"})"));
  EXPECT_EQ(n.kind, Kind::notification);
  EXPECT_EQ(n.method(), rjg::protocol::kInitialized);
  EXPECT_TRUE(n.params().is_null());  // absent params read as null
  EXPECT_EQ(n.params_text(), "");
  EXPECT_EQ(n.id_text(), "null");

  auto r = as_message(rjg::protocol::parse_message(R"({"jsonrpc":"2.0","id":"4","result":{"result":"x"}})"));
  EXPECT_EQ(r.kind, Kind::response);
  EXPECT_EQ(r.result(), json::parse(R"({"result":"x"})"));
  EXPECT_EQ(r.result_text(), R"({"result":"x"})");
  EXPECT_EQ(r.id_text(), R"("4")");

  auto e = as_message(rjg::protocol::parse_message(R"({"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"bad"}})"));
  EXPECT_EQ(e.kind, Kind::error_response);
  EXPECT_TRUE(e.id().is_null());
  EXPECT_EQ(e.error().at("code"), json::value(-32700));
  EXPECT_EQ(e.id_text(), "null");
  EXPECT_EQ(e.error_code(), -32700);
  EXPECT_EQ(e.error_message(), "bad");
  EXPECT_EQ(e.error_data_text(), "");  // absent
}

}  // namespace

// Numbers pass as written, whatever their size: 1e400 is no longer a parse error, and every number
// text (and NaN, Infinity, -Infinity, which Python peers write) reaches the relay unchanged.
TEST(MessageTest, NumbersOfAnySizeAndNonFiniteLiteralsPassUnchanged) {
  const std::string args = R"([1e400,-1e400,-0.0,1E+2,5e-324,1234567890123456789012345678901234567890,NaN,Infinity,-Infinity,0e-0007])";
  const std::string body = R"({"jsonrpc":"2.0","id":"1","method":"robot/run_keyword","params":{"args":)" + args + "}}";
  auto m = as_message(rjg::protocol::parse_message(body));
  EXPECT_EQ(m.text(), body);
  EXPECT_EQ(m.params_text(), R"({"args":)" + args + "}");
  EXPECT_EQ(m.with_id("7"), R"({"jsonrpc":"2.0","id":7,"method":"robot/run_keyword","params":{"args":)" + args + "}}");
  // A result and error data from a worker, likewise.
  auto r = as_message(rjg::protocol::parse_message(R"({"jsonrpc":"2.0","id":3,"result":{"result":[NaN,1e400]}})"));
  EXPECT_EQ(r.result_text(), R"({"result":[NaN,1e400]})");
  auto e = as_message(rjg::protocol::parse_message(R"({"jsonrpc":"2.0","id":3,"error":{"code":NaN,"message":"m","data":-Infinity}})"));
  EXPECT_EQ(e.error_code(), 0);  // not a number the gateway can use, and no undefined conversion
  EXPECT_EQ(e.error_data_text(), "-Infinity");
}

// Ids of every kind come back byte for byte, in relayed answers (with_id) and in the gateway's own.
TEST(MessageTest, IdsOfEveryKindComeBackByteIdentical) {
  for (std::string id : {"1e400", "-0.0", "1E+2", "5e-324", "0.10000000000000001", "-12345678901234567890123456789012345678901",
                         "18446744073709551617", "1.5e-7", "-7", "\"x\\u00e9\\ud83d\\ude00\\/\"", "\"\"", "0"}) {
    SCOPED_TRACE(id);
    const std::string body = R"({"jsonrpc":"2.0","id":)" + id + R"(,"method":"robot/shutdown"})";
    auto m = as_message(rjg::protocol::parse_message(body));
    ASSERT_EQ(m.kind, Kind::request);
    EXPECT_EQ(m.id_text(), id);
    EXPECT_NE(rjg::protocol::make_result_raw(m.id_text(), "{}").find(R"("id":)" + id + ","), std::string::npos);
    EXPECT_NE(rjg::protocol::make_error_raw(m.id_text(), -32601, "no").find(R"("id":)" + id + ","), std::string::npos);
    // An invalid message keeps it too.
    auto invalid = rjg::protocol::parse_message(R"({"jsonrpc":"1.0","id":)" + id + "}");
    ASSERT_TRUE(std::holds_alternative<rjg::protocol::ProtocolError>(invalid));
    EXPECT_EQ(std::get<rjg::protocol::ProtocolError>(invalid).id_text, id);
  }
}

// NaN and Infinity are numbers in values, but the gateway never writes them: not as an id.
TEST(MessageTest, NonFiniteIdsAreInvalid) {
  for (const char* id : {"NaN", "Infinity", "-Infinity"}) {
    auto classified = rjg::protocol::parse_message(std::string(R"({"jsonrpc":"2.0","id":)") + id + R"(,"method":"robot/shutdown"})");
    ASSERT_TRUE(std::holds_alternative<rjg::protocol::ProtocolError>(classified)) << id;
    const auto& problem = std::get<rjg::protocol::ProtocolError>(classified);
    EXPECT_EQ(problem.code, rjg::protocol::kInvalidRequest) << id;
    EXPECT_EQ(problem.id_text, "null") << id;
    EXPECT_NE(problem.message.find("finite number"), std::string::npos) << problem.message;
    EXPECT_EQ(rjg::protocol::top_level_id(std::string(R"({"id":)") + id + "}"), "null");
  }
}

// A body that is not JSON still gets its id back when a lenient scan finds it at the top level.
TEST(MessageTest, ParseErrorsCarryTheTopLevelId) {
  struct Case {
    std::string body;
    std::string id;
  };
  for (const auto& c : std::vector<Case>{
           {R"({"jsonrpc":"2.0","id":5,"method":"robot/run_keyword","params":{"args":[tru]}})", "5"},
           {R"({"jsonrpc":"2.0","method":"robot/run_keyword","params":{"args":[1,]},"id":"late"})", R"("late")"},
           {R"({"id":"a\"b}","x":"bad \q escape"})", R"("a\"b}")"},
           {R"({"id":1e400, "x": nope})", "1e400"},
           {R"({"id":-0.0,"params":{"args":["unterminated)", "-0.0"},
           {R"({"params":{"id":7,"args":[x]},"method":"m"})", "null"},          // nested: never taken
           {R"({"params":[{"id":7}, x],"method":"m"})", "null"},
           {R"({"params":{"a":[1,2}, "id":7})", "null"},                          // brackets broken before the id
           {R"({"id":1,"id":2, bad})", "2"},                                      // the last, as JSON readers take
           {R"({"id":[1], bad})", "null"},                                        // not a valid id
           {R"({"id":NaN, bad})", "null"},
           {R"({"id":"x" "y", bad})", "null"},
           {R"({"\u0069d":9, bad})", "9"},                                         // an escaped key is the same key
           {R"(  {  "id"  :  12  , bad  })", "12"},
           {R"([{"id":3}, bad])", "null"},                                         // not an object
           {"", "null"},
       }) {
    SCOPED_TRACE(c.body);
    EXPECT_EQ(rjg::protocol::top_level_id(c.body), c.id);
    auto classified = rjg::protocol::parse_message(c.body);
    ASSERT_TRUE(std::holds_alternative<rjg::protocol::ProtocolError>(classified));
    const auto& problem = std::get<rjg::protocol::ProtocolError>(classified);
    EXPECT_EQ(problem.code, rjg::protocol::kParseError) << problem.message;
    EXPECT_EQ(problem.id_text, c.id);
  }
  // Too deep is a parse error too, with the id.
  std::string deep = R"({"id":"d","params":)" + std::string(100, '[') + std::string(100, ']') + "}";
  auto classified = rjg::protocol::parse_message(deep);
  ASSERT_TRUE(std::holds_alternative<rjg::protocol::ProtocolError>(classified));
  EXPECT_EQ(std::get<rjg::protocol::ProtocolError>(classified).id_text, R"("d")");
}

// The lenient scan is linear: a body of many top-level members and deep brackets costs one pass.
TEST(MessageTest, TopLevelIdScanIsLinear) {
  std::string body = "{";
  for (int i = 0; i < 100000; ++i) body += R"("k":[[[[1]]]],)";
  body += R"("id":42, broken)";
  EXPECT_EQ(rjg::protocol::top_level_id(body), "42");
}
