// ServerProtocol (common/protocol/server_protocol.hpp), with a fake ServerMethods that records each
// call: the handshake gates imports and keyword calls (-32000), unknown methods are -32601, a request
// sent as a notification (or the other way round) is refused or ignored, responses from the client are
// ignored, and params the binder refuses are -32602 with the binder's message.
#include "common/protocol/server_protocol.hpp"

#include "common/protocol/protocol.hpp"

#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

namespace {

using namespace rjg::protocol;
using rjg::protocol::Message;

struct Call {
  std::string what;     // "initialize", "refuse", "ignore", ...
  std::string id_text;  // of the message handed over
  std::string detail;   // a bound field, or the refusal's / the ignore's message
  int code = 0;         // refuse
};

class Recorder : public rjg::protocol::ServerMethods {
 public:
  std::vector<Call> calls;

  void on_initialize(const Message& m, rjg::protocol::Initialize p) override { add("initialize", m, p.text); }
  void on_initialized(const Message& m) override { add("initialized", m); }
  void on_import_library(const Message& m, rjg::protocol::ImportLibrary p) override {
    add("import_library", m, p.name);
  }
  void on_run_keyword(const Message& m, rjg::protocol::RunKeyword p) override {
    add("run_keyword", m, p.library_token + " " + p.name);
  }
  void on_finalize_library(const Message& m, rjg::protocol::FinalizeLibrary p) override {
    add("finalize_library", m, p.token);
  }
  void on_shutdown(const Message& m) override { add("shutdown", m); }
  void on_exit(const Message& m) override { add("exit", m); }
  void refuse(const Message& m, int code, std::string message) override {
    add("refuse", m, std::move(message));
    calls.back().code = code;
  }
  void ignore(const Message& m, std::string why) override { add("ignore", m, std::move(why)); }

  // The one call since the last take(), or a failure.
  Call take() {
    EXPECT_EQ(calls.size(), 1u) << describe();
    Call c = calls.empty() ? Call{} : calls.back();
    calls.clear();
    return c;
  }

  std::string describe() const {
    std::string out;
    for (const auto& c : calls) out += c.what + "(" + c.id_text + ", " + c.detail + ") ";
    return out;
  }

 private:
  void add(std::string what, const Message& m, std::string detail = {}) {
    calls.push_back({std::move(what), std::string(m.id_text()), std::move(detail)});
  }
};

Message parse(const std::string& body) {
  auto classified = rjg::protocol::parse_message(body);
  if (auto* e = std::get_if<rjg::protocol::ProtocolError>(&classified)) ADD_FAILURE() << body << ": " << e->message;
  auto* m = std::get_if<Message>(&classified);
  return m ? *m : Message{};
}

Message request(std::string_view id, std::string_view method, std::string_view params = "{}") {
  return parse(rjg::protocol::make_request_raw(id, method, params));
}
Message notification(std::string_view method, std::string_view params = "{}") {
  return parse(rjg::protocol::make_notification_raw(method, params));
}

class ServerProtocolTest : public ::testing::Test {
 protected:
  Call dispatch(const Message& m) {
    protocol_.dispatch(m, methods_);
    return methods_.take();
  }
  void handshake() {
    EXPECT_EQ(dispatch(request("1", kInitialize)).what, "initialize");
    EXPECT_EQ(dispatch(notification(kInitialized)).what, "initialized");
    ASSERT_TRUE(protocol_.ready());
  }

  rjg::protocol::ServerProtocol protocol_;
  Recorder methods_;
};

const std::string kImport = R"({"name":"TestLibrary"})";
const std::string kRun = R"({"library_token":"t","name":"Echo","args":[1]})";

TEST_F(ServerProtocolTest, ImportAndRunWaitForTheHandshake) {
  EXPECT_FALSE(protocol_.initialize_received());
  EXPECT_FALSE(protocol_.ready());
  for (auto [method, params] : {std::pair{kImportLibrary, kImport}, std::pair{kRunKeyword, kRun}}) {
    auto refused = dispatch(request("\"early\"", method, params));
    EXPECT_EQ(refused.what, "refuse") << method;
    EXPECT_EQ(refused.code, kNotInitialized) << method;
    EXPECT_EQ(refused.id_text, "\"early\"");
    EXPECT_NE(refused.detail.find(method), std::string::npos) << refused.detail;
  }

  // robot/initialize alone is not enough: robot/initialized must follow.
  auto init = dispatch(request("7", kInitialize, R"({"capabilities":{}})"));
  EXPECT_EQ(init.what, "initialize");
  EXPECT_EQ(init.id_text, "7");
  EXPECT_EQ(init.detail, R"({"capabilities":{}})");
  EXPECT_TRUE(protocol_.initialize_received());
  EXPECT_FALSE(protocol_.ready());
  EXPECT_EQ(dispatch(request("8", kImportLibrary, kImport)).code, kNotInitialized);

  EXPECT_EQ(dispatch(notification(kInitialized)).what, "initialized");
  EXPECT_TRUE(protocol_.ready());
  auto imported = dispatch(request("9", kImportLibrary, kImport));
  EXPECT_EQ(imported.what, "import_library");
  EXPECT_EQ(imported.detail, "TestLibrary");
  auto ran = dispatch(request("10", kRunKeyword, kRun));
  EXPECT_EQ(ran.what, "run_keyword");
  EXPECT_EQ(ran.detail, "t Echo");
}

TEST_F(ServerProtocolTest, FinalizeShutdownAndExitNeedNoHandshake) {
  EXPECT_EQ(dispatch(request("1", kFinalizeLibrary, R"({"token":"t"})")).what, "finalize_library");
  EXPECT_EQ(dispatch(request("2", kShutdown)).what, "shutdown");
  EXPECT_EQ(dispatch(notification(kExit)).what, "exit");
}

TEST_F(ServerProtocolTest, UnknownMethodRequestIsMethodNotFoundAndNotificationIgnored) {
  handshake();
  auto refused = dispatch(request("\"u\"", "robot/frobnicate"));
  EXPECT_EQ(refused.what, "refuse");
  EXPECT_EQ(refused.code, kMethodNotFound);
  EXPECT_EQ(refused.id_text, "\"u\"");
  EXPECT_NE(refused.detail.find("robot/frobnicate"), std::string::npos) << refused.detail;

  // Before the handshake too: an unknown method is never -32000.
  rjg::protocol::ServerProtocol fresh;
  fresh.dispatch(request("1", "no/such"), methods_);
  EXPECT_EQ(methods_.take().code, kMethodNotFound);

  auto ignored = dispatch(notification("$/cancelRequest", R"({"id":"1"})"));
  EXPECT_EQ(ignored.what, "ignore");
  EXPECT_NE(ignored.detail.find("$/cancelRequest"), std::string::npos) << ignored.detail;
}

TEST_F(ServerProtocolTest, RequestSentAsNotificationOrTheOtherWayRound) {
  handshake();
  // Notifications sent with an id: answered, never dispatched.
  for (auto method : {kInitialized, kExit}) {
    auto refused = dispatch(request("\"n\"", method));
    EXPECT_EQ(refused.what, "refuse") << method;
    EXPECT_EQ(refused.code, kInvalidRequest) << method;
    EXPECT_NE(refused.detail.find("is a notification"), std::string::npos) << refused.detail;
  }
  // Requests sent without an id: nothing can be answered; ignored, never dispatched.
  for (auto [method, params] : {std::pair{kInitialize, std::string("{}")}, std::pair{kImportLibrary, kImport},
                                std::pair{kRunKeyword, kRun}, std::pair{kFinalizeLibrary, std::string(R"({"token":"t"})")},
                                std::pair{kShutdown, std::string("{}")}}) {
    auto ignored = dispatch(notification(method, params));
    EXPECT_EQ(ignored.what, "ignore") << method;
    EXPECT_NE(ignored.detail.find("needs an id"), std::string::npos) << ignored.detail;
  }
}

TEST_F(ServerProtocolTest, ResponsesFromTheClientAreIgnored) {
  for (const std::string body : {R"({"jsonrpc":"2.0","id":"5","result":{}})",
                                 R"({"jsonrpc":"2.0","id":6,"error":{"code":-32603,"message":"x"}})",
                                 R"({"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"x"}})"}) {
    auto ignored = dispatch(parse(body));
    EXPECT_EQ(ignored.what, "ignore") << body;
    EXPECT_NE(ignored.detail.find("response"), std::string::npos) << ignored.detail;
  }
  EXPECT_FALSE(protocol_.initialize_received());
}

TEST_F(ServerProtocolTest, ParamsTheBinderRefusesAreInvalidParams) {
  // robot/initialize takes any params (nobody reads them).
  auto init = dispatch(request("1", kInitialize, "[]"));
  EXPECT_EQ(init.what, "initialize");

  handshake();
  struct Case {
    std::string_view method;
    std::string params;
  };
  for (const auto& c : {Case{kImportLibrary, R"({"name":1})"}, Case{kImportLibrary, R"({"name":"L","args":{}})"},
                        Case{kRunKeyword, R"({"library_token":"t"})"}, Case{kRunKeyword, "[]"},
                        Case{kFinalizeLibrary, "{}"}}) {
    const Message m = request("\"p\"", c.method, c.params);
    auto refused = dispatch(m);
    EXPECT_EQ(refused.what, "refuse") << c.params;
    EXPECT_EQ(refused.code, kInvalidParams) << c.params;
    EXPECT_EQ(refused.id_text, "\"p\"");
    // The binder's message, as it is.
    std::string expected;
    if (c.method == kImportLibrary) expected = std::get<rjg::protocol::Invalid>(rjg::protocol::bind_import_library(m)).message;
    if (c.method == kRunKeyword) expected = std::get<rjg::protocol::Invalid>(rjg::protocol::bind_run_keyword(m)).message;
    if (c.method == kFinalizeLibrary)
      expected = std::get<rjg::protocol::Invalid>(rjg::protocol::bind_finalize_library(m)).message;
    EXPECT_EQ(refused.detail, expected);
  }
}

TEST_F(ServerProtocolTest, HandshakeIsCheckedBeforeParams) {
  // Bad params before the handshake: the handshake is what the client must fix first.
  auto refused = dispatch(request("1", kImportLibrary, R"({"name":1})"));
  EXPECT_EQ(refused.code, kNotInitialized);
}

}  // namespace
