// Lossless: what a client sends reaches the worker byte for byte, and what the worker sends reaches the
// client byte for byte (number texts, NaN/Infinity as Python writes them, every string escape); ids of
// every kind come back as sent, even from a body that is not JSON; and the pickle policy covers every
// path a value takes from the worker (logs, error data, every member of a result).
//
// The worker's raw keywords ('Echo Raw', 'Return Raw', 'Get Import Args Raw') read and write texts,
// never trees, so any change on the way shows as a difference of texts.
#include "tests/integration/gateway_test.hpp"

#include "common/protocol/json_text.hpp"

#include <fmt/format.h>

#include <bit>
#include <cmath>
#include <random>

namespace rjg::test {
namespace {

// A benign pickle (a list holding 1) and one that calls posix.system('id').
constexpr const char* kBenignHex = "80045d944b01612e";
constexpr const char* kEvilHex = "80048c05706f7369788c0673797374656d938c0269648552942e";

std::string pickled(const char* hex) { return fmt::format(R"({{"__pickled__":"{}"}})", hex); }

class LosslessTest : public GatewayTest {
 protected:
  // Sends `body` and reads up to the answer to it; notifications on the way are kept in `notes`.
  protocol::Message exchange(client::RpcClient& c, std::string_view body, std::vector<protocol::Message>* notes = nullptr) {
    c.send_raw(frame(body));
    for (;;) {
      auto m = c.read_message(30s);
      if (!m) throw std::runtime_error("no answer to " + std::string(body.substr(0, 200)));
      if (m->kind == protocol::Message::Kind::notification) {
        if (notes) notes->push_back(*m);
        continue;
      }
      return *m;
    }
  }

  std::string run_body(std::string_view id, std::string_view token, std::string_view keyword, std::string_view args,
                       std::string_view kwargs = "{}") {
    return fmt::format(R"({{"jsonrpc":"2.0","id":{},"method":"robot/run_keyword","params":{{"library_token":"{}",)"
                       R"("name":"{}","args":{},"kwargs":{}}}}})",
                       id, token, keyword, args, kwargs);
  }
  std::string import_body(std::string_view id, std::string_view args, std::string_view kw_args) {
    return fmt::format(R"({{"jsonrpc":"2.0","id":{},"method":"robot/import_library","params":{{"name":"TestLibrary",)"
                       R"("args":{},"kw_args":{}}}}})",
                       id, args, kw_args);
  }
  // The token of a successful import answer.
  static std::string token_of(const protocol::Message& answer) {
    const auto result = answer.result_text();
    const auto members = protocol::members(result);
    const auto* token = protocol::find(members, "token");
    return token ? protocol::decode_string(token->value.of(result)) : std::string();
  }
};

// Every number spelling: shortest and 17 digits, e/E, with and without sign, leading zeros in the
// exponent; integers of up to 40 digits; the special values.
std::vector<std::string> number_texts(std::size_t count) {
  std::mt19937_64 rng(20261201);
  std::vector<std::string> out{"-0.0", "-0", "0", "0e0", "0E-0", "1e400", "-1e400", "5e-324", "4.9e-324",
                               "1.7976931348623157e308", "1E+2", "1e-007", "NaN", "Infinity", "-Infinity",
                               "18446744073709551617", "-9223372036854775809", "0.1", "100", "1.0", "1.50"};
  auto respell = [&](std::string s) {
    // Exponent forms: e or E, '+' or not, leading zeros or not.
    const auto e = s.find_first_of("eE");
    if (e == std::string::npos) return s;
    std::string mantissa = s.substr(0, e), exponent = s.substr(e + 1);
    std::string sign;
    if (exponent[0] == '+' || exponent[0] == '-') {
      sign = exponent.substr(0, 1);
      exponent = exponent.substr(1);
    }
    if (sign == "+" && rng() % 2) sign.clear();
    if (sign.empty() && rng() % 3 == 0) sign = "+";
    exponent = std::string(rng() % 3, '0') + exponent;
    return mantissa + (rng() % 2 ? "e" : "E") + sign + exponent;
  };
  while (out.size() < count) {
    switch (rng() % 4) {
      case 0:
      case 1: {
        const double d = std::bit_cast<double>(rng());
        if (!std::isfinite(d)) continue;
        out.push_back(respell(rng() % 2 ? fmt::format("{}", d) : fmt::format("{:.17g}", d)));
        break;
      }
      case 2: {
        // A double of an ordinary size, in both spellings.
        const double d = std::ldexp(static_cast<double>(rng() % 1000000) + 0.5, static_cast<int>(rng() % 80) - 40);
        out.push_back(respell(rng() % 2 ? fmt::format("{}", d) : fmt::format("{:.17g}", d)));
        break;
      }
      default: {
        std::string digits = std::to_string(1 + rng() % 9);
        const auto length = 1 + rng() % 40;
        while (digits.size() < length) digits += static_cast<char>('0' + rng() % 10);
        out.push_back((rng() % 2 ? "-" : "") + digits);
      }
    }
  }
  for (const auto& n : out) {
    auto [scanned, error] = protocol::scan(n);
    if (!scanned || scanned->kind != protocol::Kind::number) throw std::logic_error("not a JSON number: " + n);
  }
  return out;
}

// Strings in every escape form JSON has.
std::vector<std::string> string_texts() {
  return {R"("")", R"("plain")", R"("\"quoted\" and \\backslash")", R"("\/ solidus and / plain")",
          R"("\b\f\n\r\t")", R"("\u0000\u0001\u001f\u007f")", R"("\u00e9\u00E9 \u20ac")", "\"caf\xC3\xA9 \xE2\x82\xAC\"",
          R"("\ud83d\ude00 \uD83D\uDE00")", "\"\xF0\x9F\x98\x80\"", R"("${var} %{HOME} \\n")", R"("\u0022\u005c")"};
}

std::string join(const std::vector<std::string>& items, std::size_t from, std::size_t to) {
  std::string out = "[";
  for (std::size_t i = from; i < to; ++i) {
    if (i > from) out += ',';
    out += items[i];
  }
  return out + "]";
}

std::string object_of(const std::vector<std::string>& items, std::size_t from, std::size_t to) {
  std::string out = "{";
  for (std::size_t i = from; i < to; ++i) {
    if (i > from) out += ',';
    out += fmt::format(R"("k{}":{})", i, items[i]);
  }
  return out + "}";
}

TEST_F(LosslessTest, NumbersAndStringsTravelByteForByteBothWays) {
  start();
  client::RpcClient c = connect();
  c.initialize();
  std::vector<std::string> values = number_texts(4000);
  for (const auto& s : string_texts()) values.push_back(s);
  values.push_back(R"({"nested":[NaN,{"x":-0.0,"y":"\ud83d\ude00"}],"n":null,"t":true})");

  // Import arguments arrive as sent.
  const std::string import_args = join(values, 0, 50), import_kw = object_of(values, 50, 100);
  auto imported = exchange(c, import_body("1", import_args, import_kw));
  ASSERT_EQ(imported.kind, protocol::Message::Kind::response) << imported.text();
  const std::string token = token_of(imported);
  auto import_seen = exchange(c, run_body("2", token, "Get Import Args Raw", "[]"));
  ASSERT_EQ(import_seen.kind, protocol::Message::Kind::response) << import_seen.text();
  EXPECT_EQ(import_seen.result_text(), fmt::format(R"({{"result":{{"args":{},"kw_args":{}}}}})", import_args, import_kw));

  // Keyword arguments, positional and named: the worker gets these texts, and the client gets back
  // what the worker sent, unchanged.
  std::size_t calls = 0;
  for (std::size_t from = 0; from < values.size(); from += 400) {
    const std::size_t to = std::min(values.size(), from + 400), mid = (from + to) / 2;
    const std::string args = join(values, from, mid), kwargs = object_of(values, mid, to);
    auto echoed = exchange(c, run_body(std::to_string(100 + from), token, "Echo Raw", args, kwargs));
    ASSERT_EQ(echoed.kind, protocol::Message::Kind::response) << echoed.text().substr(0, 500);
    EXPECT_EQ(echoed.result_text(), fmt::format(R"({{"result":{{"args":{},"kwargs":{}}}}})", args, kwargs))
        << "values " << from << ".." << to;
    // A result the worker makes up arrives as it wrote it.
    const std::string made_up = join(values, from, to);
    auto returned = exchange(c, run_body(std::to_string(50000 + from), token, "Return Raw",
                                         "[" + protocol::quote(made_up) + "]"));
    ASSERT_EQ(returned.kind, protocol::Message::Kind::response) << returned.text().substr(0, 500);
    EXPECT_EQ(returned.result_text(), R"({"result":)" + made_up + "}");
    ++calls;
  }
  EXPECT_GE(calls, 10u);
  RecordProperty("values", std::to_string(values.size()));
}

TEST_F(LosslessTest, IdsOfEveryKindComeBackByteIdentical) {
  start();
  client::RpcClient c = connect();
  c.initialize();
  auto imported = exchange(c, import_body("\"import\"", "[]", "{}"));
  const std::string token = token_of(imported);
  ASSERT_FALSE(token.empty()) << imported.text();
  std::vector<std::string> ids{"0", "-1", "7", "18446744073709551617", "-1234567890123456789012345678901234567890",
                               "1.5", "-0.0", "0.1", "1e400", "1E+2", "5e-324", "2.5e-0007", "1.0000000000000002",
                               R"("s")", R"("")", R"("\u00e9\ud83d\ude00\/\"")", "\"caf\xC3\xA9\""};
  for (const auto& id : ids) {
    SCOPED_TRACE(id);
    // Relayed: the worker's answer with the client's id spliced back.
    auto relayed = exchange(c, run_body(id, token, "Echo Raw", "[1]"));
    EXPECT_EQ(relayed.kind, protocol::Message::Kind::response);
    EXPECT_EQ(relayed.id_text(), id);
    // The gateway's own answers: an unknown token (the keyword's failure, a result the gateway makes),
    // shutdown.
    auto refused = exchange(c, run_body(id, "no-such-token", "Echo Raw", "[]"));
    EXPECT_EQ(refused.kind, protocol::Message::Kind::response) << refused.text();
    EXPECT_EQ(keyword_failure_of(refused).value_or(KeywordFailure{}).type,
              protocol::keyword_error_type(protocol::kUnknownToken))
        << refused.text();
    EXPECT_EQ(refused.id_text(), id);
    auto own = exchange(c, fmt::format(R"({{"jsonrpc":"2.0","id":{},"method":"robot/shutdown"}})", id));
    EXPECT_EQ(own.id_text(), id);
    // Invalid params and a body that is not JSON: the id is still found at the top level.
    auto invalid = exchange(c, fmt::format(R"({{"jsonrpc":"2.0","id":{},"method":"robot/run_keyword","params":{{}}}})", id));
    EXPECT_EQ(invalid.error_code(), protocol::kInvalidParams);
    EXPECT_EQ(invalid.id_text(), id);
    auto broken = exchange(c, fmt::format(R"({{"jsonrpc":"2.0","id":{},"method":"robot/run_keyword","params":{{"args":[tru]}}}})", id));
    EXPECT_EQ(broken.error_code(), protocol::kParseError);
    EXPECT_EQ(broken.id_text(), id);
  }
  // A nested "id" is never taken for the message's.
  auto nested = exchange(c, R"({"jsonrpc":"2.0","method":"robot/run_keyword","params":{"id":5,"args":[x]}})");
  EXPECT_EQ(nested.error_code(), protocol::kParseError);
  EXPECT_EQ(nested.id_text(), "null");
  // NaN is a value, never an id: the gateway does not write it.
  auto nan_id = exchange(c, R"({"jsonrpc":"2.0","id":NaN,"method":"robot/shutdown"})");
  EXPECT_EQ(nan_id.error_code(), protocol::kInvalidRequest);
  EXPECT_EQ(nan_id.id_text(), "null");
  // The session goes on.
  auto after = exchange(c, run_body("99", token, "Echo Raw", "[NaN]"));
  EXPECT_EQ(after.result_text(), R"({"result":{"args":[NaN],"kwargs":{}}})");
}

// [gateway] max_object_members bounds every object of a message: a keyword over it fails with the request's
// id (an import or other request gets -32600), and the connection goes on.
TEST_F(LosslessTest, ObjectsAreBoundedInMembers) {
  GatewayOptions options;
  options.extra_gateway_toml = "max_object_members = 16\n";
  start(default_libraries(), options);
  auto [c, token] = session();
  std::vector<std::string> ones(17, "1");
  auto at_limit = exchange(c, run_body("\"ok\"", token, "Echo Raw", "[]", object_of(ones, 0, 16)));
  EXPECT_EQ(at_limit.kind, protocol::Message::Kind::response) << at_limit.text();
  for (const auto& body : {run_body("\"kw\"", token, "Echo Raw", "[]", object_of(ones, 0, 17)),
                           run_body("\"kw\"", token, "Echo Raw", "[[" + object_of(ones, 0, 17) + "]]")}) {
    // A keyword's failure, with the request's id: the stock client would end its session on an error.
    auto refused = exchange(c, body);
    ASSERT_EQ(refused.kind, protocol::Message::Kind::response) << refused.text();
    EXPECT_EQ(refused.id_text(), "\"kw\"");
    const auto failure = keyword_failure_of(refused);
    ASSERT_TRUE(failure) << refused.text();
    EXPECT_EQ(failure->type, "ArgumentsOverLimit");
    EXPECT_NE(failure->message.find("more than 16 members"), std::string::npos) << failure->message;
    EXPECT_NE(failure->message.find("max_object_members"), std::string::npos) << failure->message;
  }
  auto after = exchange(c, run_body("1", token, "Echo Raw", "[1]"));
  EXPECT_EQ(after.result_text(), R"({"result":{"args":[1],"kwargs":{}}})");
}

// A log with a refused pickle is dropped and replaced by a WARN log that says so; a benign one arrives
// unchanged. The keyword itself succeeds.
TEST_F(LosslessTest, RefusedPickleInALogIsReplacedByANotice) {
  start();
  auto [c, token] = session();
  const std::string evil_params = fmt::format(R"({{"message":{},"level":"INFO","html":false}})", pickled(kEvilHex));
  const std::string benign_params = fmt::format(R"({{"message":{},"level":"INFO","x":NaN}})", pickled(kBenignHex));
  for (const auto& [params, refused] : {std::pair{evil_params, true}, std::pair{benign_params, false}}) {
    std::vector<protocol::Message> notes;
    auto answer = exchange(c, run_body("1", token, "Log Raw", "[" + protocol::quote(params) + "]"), &notes);
    ASSERT_EQ(answer.kind, protocol::Message::Kind::response) << answer.text();
    EXPECT_EQ(answer.result_text(), R"({"result":"logged"})");
    ASSERT_EQ(notes.size(), 1u);
    if (!refused) {
      EXPECT_EQ(notes[0].params_text(), params);
      continue;
    }
    EXPECT_EQ(notes[0].text().find("__pickled__"), std::string::npos) << notes[0].text();
    const auto text = notes[0].params_text();
    EXPECT_NE(text.find(R"("level":"WARN")"), std::string::npos) << text;
    EXPECT_NE(text.find("dropped a message from library 'TestLibrary'"), std::string::npos) << text;
    EXPECT_NE(text.find("params.message"), std::string::npos) << text;
    EXPECT_NE(text.find("posix.system"), std::string::npos) << text;
    EXPECT_NE(gateway().log().find("was dropped"), std::string::npos);
  }
}

// A worker's JSON-RPC error answer to a keyword is that keyword's failure (a result). When its data holds a
// refused pickle the failure is PickleRefused and the pickle goes nowhere; a benign one is a RemoteError
// with the worker's message.
TEST_F(LosslessTest, RefusedPickleInKeywordErrorDataIsRefused) {
  start();
  auto [c, token] = session();
  auto evil = exchange(c, run_body("1", token, "Fail With Data", "[" + protocol::quote(pickled(kEvilHex)) + "]"));
  ASSERT_EQ(evil.kind, protocol::Message::Kind::response) << evil.text();
  const auto evil_failure = keyword_failure_of(evil);
  ASSERT_TRUE(evil_failure) << evil.text();
  EXPECT_EQ(evil_failure->type, protocol::keyword_error_type(protocol::kPickleRefused)) << evil.text();
  EXPECT_NE(evil_failure->message.find("error.data"), std::string::npos) << evil_failure->message;
  EXPECT_EQ(evil.text().find(kEvilHex), std::string::npos);
  const std::string data = R"({"v":)" + pickled(kBenignHex) + R"(,"n":[NaN,1e400]})";
  auto benign = exchange(c, run_body("2", token, "Fail With Data", "[" + protocol::quote(data) + "]"));
  ASSERT_EQ(benign.kind, protocol::Message::Kind::response) << benign.text();
  const auto benign_failure = keyword_failure_of(benign);
  ASSERT_TRUE(benign_failure) << benign.text();
  EXPECT_EQ(benign_failure->type, protocol::keyword_error_type(-32099)) << benign.text();
  EXPECT_NE(benign_failure->message.find("failed on purpose, with data"), std::string::npos) << benign_failure->message;
}

// A result member other than "result" (the keyword's) and other than "definition" (the import's):
// checked like the rest.
TEST_F(LosslessTest, RefusedPickleInAnyResultMemberIsRefused) {
  start();
  client::RpcClient c = connect();
  c.initialize();
  // The import result gets a member "extra" from the worker.
  auto evil_import = exchange(c, import_body("1", "[]", R"({"extra_result_json":)" + protocol::quote(pickled(kEvilHex)) + "}"));
  ASSERT_EQ(evil_import.kind, protocol::Message::Kind::error_response) << evil_import.text();
  EXPECT_EQ(evil_import.error_code(), protocol::kPickleRefused);
  EXPECT_NE(evil_import.error_message().find("result.extra"), std::string::npos) << evil_import.error_message();
  auto benign_import = exchange(c, import_body("2", "[]", R"({"extra_result_json":)" + protocol::quote(pickled(kBenignHex)) + "}"));
  ASSERT_EQ(benign_import.kind, protocol::Message::Kind::response) << benign_import.text();
  EXPECT_NE(benign_import.result_text().find(R"("extra":)" + pickled(kBenignHex)), std::string::npos);
  // The import's error data.
  auto failed = exchange(c, import_body("3", "[]", R"({"fail_with_data_json":)" + protocol::quote(pickled(kEvilHex)) + "}"));
  ASSERT_EQ(failed.kind, protocol::Message::Kind::error_response);
  EXPECT_EQ(failed.error_code(), protocol::kPickleRefused) << failed.text();
  EXPECT_NE(failed.error_message().find("error.data"), std::string::npos) << failed.error_message();
  // A keyword result member next to "result".
  const std::string token = token_of(benign_import);
  auto member = exchange(c, run_body("4", token, "Return Raw", "[" + protocol::quote(pickled(kEvilHex)) + "]"));
  const auto member_failure = keyword_failure_of(member);
  ASSERT_TRUE(member_failure) << member.text();
  EXPECT_EQ(member_failure->type, protocol::keyword_error_type(protocol::kPickleRefused)) << member.text();
  EXPECT_NE(member_failure->message.find("result.result"), std::string::npos) << member_failure->message;
  EXPECT_EQ(member.text().find(kEvilHex), std::string::npos);
}

}  // namespace
}  // namespace rjg::test
