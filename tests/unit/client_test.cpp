// The blocking RpcClient against a fake server on loopback that the test drives byte by byte: answers
// among stray messages, error responses without id, deadlines that leave a partly received frame in
// place, frames counted as they arrive, the peer closing (cleanly or mid-frame), bad bytes, raw writes,
// a server that does not read, and reconnecting.
#include "common/client/client.hpp"

#include "common/protocol/framing.hpp"
#include "common/protocol/protocol.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <poll.h>

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace {

namespace asio = boost::asio;
namespace json = boost::json;
using asio::ip::tcp;
using namespace std::chrono_literals;
using rjg::protocol::Message;
using rjg::client::RpcClient;
using rjg::client::RpcError;

// One accepted connection on 127.0.0.1, read and written synchronously by the test; every read is
// bounded so a broken client fails the test instead of hanging it.
class FakeServer {
 public:
  FakeServer() : acceptor_(io_, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)) {}

  std::uint16_t port() const { return acceptor_.local_endpoint().port(); }

  // The client connects first (the backlog takes it); then the test accepts.
  void accept() { peer_.emplace(acceptor_.accept()); }

  void write(std::string_view bytes) { asio::write(*peer_, asio::buffer(bytes.data(), bytes.size())); }
  void send(std::string_view json_text) { write(rjg::protocol::encode_frame(json_text)); }

  // The next frame body the client sent.
  std::string read_frame() {
    for (;;) {
      auto r = reader_.next();
      if (r.kind == rjg::protocol::FrameReader::Result::Kind::frame) return r.body;
      if (r.kind == rjg::protocol::FrameReader::Result::Kind::error) {
        ADD_FAILURE() << "bad frame from the client: " << r.error;
        return {};
      }
      std::string chunk = read_some();
      if (chunk.empty()) return {};
      reader_.feed(chunk);
    }
  }

  // Exactly n bytes as the client wrote them.
  std::string read_bytes(std::size_t n) {
    std::string out;
    while (out.size() < n) {
      std::string chunk = read_some();
      if (chunk.empty()) break;
      out += chunk;
    }
    return out;
  }

  void close() {
    boost::system::error_code ec;
    peer_->close(ec);
  }

 private:
  std::string read_some() {
    pollfd pfd{peer_->native_handle(), POLLIN, 0};
    if (::poll(&pfd, 1, 10'000) != 1) {
      ADD_FAILURE() << "the client sent nothing within 10 s";
      return {};
    }
    char buf[64 * 1024];
    boost::system::error_code ec;
    std::size_t n = peer_->read_some(asio::buffer(buf), ec);
    if (ec) ADD_FAILURE() << "read from the client: " << ec.message();
    return std::string(buf, n);
  }

  asio::io_context io_;
  tcp::acceptor acceptor_;
  std::optional<tcp::socket> peer_;
  rjg::protocol::FrameReader reader_;
};

class ClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    client_.connect("127.0.0.1", server_.port());
    server_.accept();
  }

  FakeServer server_;
  RpcClient client_{5s};
};

TEST_F(ClientTest, AnswerAmongStrayMessages) {
  auto id = client_.send_request("robot/run_keyword", json::object{{"x", 1}});
  EXPECT_EQ(id, json::value("1"));
  auto sent = rjg::protocol::parse_message(server_.read_frame());
  ASSERT_TRUE(std::holds_alternative<Message>(sent));
  EXPECT_EQ(std::get<Message>(sent).method(), "robot/run_keyword");
  EXPECT_EQ(std::get<Message>(sent).id_text(), R"("1")");

  const std::string answer = R"({"jsonrpc":"2.0","id":"1","result":{"result":1E+2,"big":18446744073709551617}})";
  server_.send(R"({"jsonrpc":"2.0","method":"robot/log","params":{"message":"m1"}})");
  server_.send(R"({"jsonrpc":"2.0","id":"other","result":{}})");
  server_.send(R"({"jsonrpc":"2.0","id":"x","method":"server/request","params":{}})");
  // Framed without the CRLF encode_frame() counts into the body, so the body is exactly `answer`.
  server_.write(fmt::format("Content-Length: {}\r\n\r\n{}", answer.size(), answer));

  std::vector<std::string> logs;
  auto reply = client_.wait_reply(id, [&](const Message& m) { logs.push_back(m.text()); });
  ASSERT_TRUE(reply.ok());
  EXPECT_EQ(reply.id, json::value("1"));
  EXPECT_EQ(reply.text, answer);  // byte for byte
  EXPECT_EQ(reply.result->at("result"), json::value(100.0));
  ASSERT_EQ(logs.size(), 1u);
  EXPECT_NE(logs[0].find("m1"), std::string::npos);

  // The stray response and the server's request are kept, in arrival order.
  EXPECT_EQ(client_.pending_messages(), 2u);
  auto stray = client_.read_message(0ms);
  ASSERT_TRUE(stray);
  EXPECT_EQ(stray->id_text(), R"("other")");
  auto request = client_.read_message(0ms);
  ASSERT_TRUE(request);
  EXPECT_EQ(request->kind, Message::Kind::request);
  EXPECT_EQ(client_.pending_messages(), 0u);
  EXPECT_FALSE(client_.read_message(0ms).has_value());
}

TEST_F(ClientTest, KeptAnswerIsFoundLater) {
  auto first = client_.send_request("a", json::object{});
  auto second = client_.send_request("b", json::object{});
  server_.send(R"({"jsonrpc":"2.0","id":"2","result":"second"})");
  server_.send(R"({"jsonrpc":"2.0","id":"1","result":"first"})");
  EXPECT_EQ(*client_.wait_reply(first).result, json::value("first"));
  EXPECT_EQ(client_.pending_messages(), 1u);
  EXPECT_EQ(*client_.wait_reply(second).result, json::value("second"));
  EXPECT_EQ(client_.pending_messages(), 0u);
}

TEST_F(ClientTest, ErrorResponseWithoutIdIsTheAnswer) {
  auto id = client_.send_request("robot/initialize", json::object{});
  server_.send(R"({"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error","data":"d"}})");
  auto reply = client_.wait_reply(id);
  EXPECT_FALSE(reply.ok());
  EXPECT_TRUE(reply.id.is_null());
  EXPECT_EQ(reply.error_code(), rjg::protocol::kParseError);
  EXPECT_EQ(reply.error_message(), "Parse error");
}

// A keyword's failure, the gateway's decision included, is a result with "error"; failure_message() reads
// it whichever way the server said it, so a caller need not know which.
TEST_F(ClientTest, FailureMessageReadsAKeywordFailureAndAJsonRpcError) {
  auto failed = client_.send_request("robot/run_keyword", json::object{});
  auto refused = client_.send_request("robot/run_keyword", json::object{});
  auto passed = client_.send_request("robot/run_keyword", json::object{});
  auto untyped = client_.send_request("robot/run_keyword", json::object{});
  server_.send(R"({"jsonrpc":"2.0","id":"1","result":{"error":{"message":"worker died","type":"WorkerFailed"}}})");
  server_.send(R"({"jsonrpc":"2.0","id":"2","error":{"code":-32602,"message":"params.name must be a string"}})");
  server_.send(R"({"jsonrpc":"2.0","id":"3","result":{"result":"fine"}})");
  server_.send(R"({"jsonrpc":"2.0","id":"4","result":{"error":{"message":"boom"}}})");

  auto reply = client_.wait_reply(failed);
  ASSERT_TRUE(reply.ok());
  ASSERT_NE(reply.keyword_error(), nullptr);
  EXPECT_EQ(reply.keyword_error_type(), "WorkerFailed");
  EXPECT_EQ(reply.failure_message(), "worker died");
  EXPECT_EQ(reply.error_message(), "");

  reply = client_.wait_reply(refused);
  EXPECT_FALSE(reply.ok());
  EXPECT_EQ(reply.keyword_error_type(), "");
  EXPECT_EQ(reply.failure_message(), "params.name must be a string");

  reply = client_.wait_reply(passed);
  EXPECT_EQ(reply.keyword_error(), nullptr);
  EXPECT_EQ(reply.keyword_error_type(), "");
  EXPECT_EQ(reply.failure_message(), "");

  reply = client_.wait_reply(untyped);
  EXPECT_EQ(reply.keyword_error_type(), "");
  EXPECT_EQ(reply.failure_message(), "boom");
}

// An answer the client cannot read is a protocol error that shows the body, and what was kept
// meanwhile stays kept: an escaped lone surrogate (classification refuses it, as Boost.JSON does), and
// an exponent too long for Boost.JSON 1.81 (classification admits it, the result's tree cannot be built).
TEST_F(ClientTest, UnreadableAnswerIsAProtocolError) {
  for (std::string result : {R"("\ud800")", "1e-9999999999"}) {
    SCOPED_TRACE(result);
    auto id = client_.send_request("m", json::object{});
    server_.send(R"({"jsonrpc":"2.0","id":"stray","result":{}})");
    server_.send(R"({"jsonrpc":"2.0","id":)" + json::serialize(id) + R"(,"result":)" + result + "}");
    try {
      client_.wait_reply(id);
      ADD_FAILURE() << "no error";
    } catch (const RpcError& e) {
      EXPECT_EQ(e.kind(), RpcError::Kind::protocol) << e.what();
      EXPECT_NE(std::string(e.what()).find(result), std::string::npos) << e.what();
    }
    EXPECT_EQ(client_.pending_messages(), 1u);
    EXPECT_EQ(client_.read_message(0ms)->id_text(), R"("stray")");
  }
}

TEST_F(ClientTest, IntegerIdsAreMatchedByValue) {
  client_.send_request_with_id(7, "m", json::object{});
  server_.send(R"({"jsonrpc":"2.0","id":"7","result":"string seven"})");
  server_.send(R"({"jsonrpc":"2.0","id":7,"result":"seven"})");
  auto reply = client_.wait_reply(7);
  EXPECT_EQ(*reply.result, json::value("seven"));
  EXPECT_EQ(client_.pending_messages(), 1u);  // "7" is another id
}

// A deadline cancels the pending read; what already arrived of a frame stays and completes later.
TEST_F(ClientTest, TimeoutsLoseNoBytes) {
  const std::string frame = rjg::protocol::encode_frame(R"({"jsonrpc":"2.0","id":"1","result":"whole"})");
  auto id = client_.send_request("m", json::object{});
  server_.write(frame.substr(0, 10));  // part of the header
  EXPECT_FALSE(client_.read_message(50ms).has_value());
  server_.write(frame.substr(10, 20));  // the rest of the header, part of the body
  try {
    client_.wait_reply(id, {}, 50ms);
    ADD_FAILURE() << "no timeout";
  } catch (const RpcError& e) {
    EXPECT_EQ(e.kind(), RpcError::Kind::timeout) << e.what();
  }
  EXPECT_TRUE(client_.connected());
  server_.write(frame.substr(30));
  auto reply = client_.wait_reply(id);
  EXPECT_EQ(*reply.result, json::value("whole"));

  // And the connection goes on.
  auto next = client_.send_request("m", json::object{});
  server_.read_frame();
  server_.read_frame();
  server_.send(R"({"jsonrpc":"2.0","id":"2","result":"next"})");
  EXPECT_EQ(*client_.wait_reply(next).result, json::value("next"));
}

TEST_F(ClientTest, PollReturnsWhatIsThereAndCountsEveryFrameReceived) {
  EXPECT_FALSE(client_.read_message(0ms).has_value());
  std::string three;
  for (int i = 0; i < 3; ++i)
    three += rjg::protocol::encode_frame(R"({"jsonrpc":"2.0","method":"robot/log","params":{"n":)" + std::to_string(i) + "}}");
  server_.write(three);
  auto m = client_.read_message(1s);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->params().at("n"), json::value(0));
  EXPECT_EQ(client_.pending_messages(), 2u);  // received with it, not yet handed out
  EXPECT_EQ(client_.read_message(0ms)->params().at("n"), json::value(1));
  EXPECT_EQ(client_.read_message(0ms)->params().at("n"), json::value(2));
  EXPECT_EQ(client_.pending_messages(), 0u);
}

TEST_F(ClientTest, PeerClosesAfterAMessage) {
  server_.send(R"({"jsonrpc":"2.0","id":null,"error":{"code":-32016,"message":"bye"}})");
  server_.close();
  EXPECT_TRUE(client_.wait_closed(5s));
  EXPECT_FALSE(client_.connected());
  EXPECT_EQ(client_.pending_messages(), 1u);
  auto m = client_.read_message(1s);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->error_code(), -32016);
  try {
    client_.read_message(1s);
    ADD_FAILURE() << "read after the close";
  } catch (const RpcError& e) {
    EXPECT_EQ(e.kind(), RpcError::Kind::closed) << e.what();
  }
  EXPECT_TRUE(client_.wait_closed(0ms));
}

TEST_F(ClientTest, WaitClosedTimesOutWhileThePeerStays) {
  EXPECT_FALSE(client_.wait_closed(100ms));
  EXPECT_TRUE(client_.connected()) << "a peer that stays is not taken for closed";
  EXPECT_TRUE(client_.connected());
}

TEST_F(ClientTest, PeerClosesMidFrame) {
  server_.write("Content-Length: 100\r\n\r\n{\"jsonrpc\"");
  server_.close();
  try {
    client_.read_message(5s);
    ADD_FAILURE() << "no error";
  } catch (const RpcError& e) {
    EXPECT_EQ(e.kind(), RpcError::Kind::closed) << e.what();
    EXPECT_NE(std::string(e.what()).find("middle of a frame"), std::string::npos) << e.what();
  }
}

TEST_F(ClientTest, BadFramingIsAFramingError) {
  server_.write("Not-A-Header\r\n\r\n");
  try {
    client_.read_message(5s);
    ADD_FAILURE() << "no error";
  } catch (const RpcError& e) {
    EXPECT_EQ(e.kind(), RpcError::Kind::framing) << e.what();
  }
}

TEST_F(ClientTest, InvalidMessageIsAProtocolError) {
  server_.send(R"({"jsonrpc":"2.0","id":1})");
  try {
    client_.read_message(5s);
    ADD_FAILURE() << "no error";
  } catch (const RpcError& e) {
    EXPECT_EQ(e.kind(), RpcError::Kind::protocol) << e.what();
    EXPECT_NE(std::string(e.what()).find(R"("id":1)"), std::string::npos) << e.what();  // the body is shown
  }
}

TEST_F(ClientTest, SendRawWritesBytesAsTheyAre) {
  const std::string bytes("Content-Length: 5\r\n\r\n\0\x01\xff", 24);
  client_.send_raw(bytes);
  EXPECT_EQ(server_.read_bytes(bytes.size()), bytes);
}

TEST_F(ClientTest, WritingToAServerThatDoesNotReadTimesOut) {
  client_.set_timeout(200ms);
  const std::string big(64u << 20, 'x');
  try {
    client_.send_raw(big);
    ADD_FAILURE() << "64 MiB written to a server that does not read";
  } catch (const RpcError& e) {
    EXPECT_EQ(e.kind(), RpcError::Kind::timeout) << e.what();
  }
  // close() returns even with 64 MiB unwritten (ctest's timeout bounds it; no clock here).
  client_.close();
  EXPECT_FALSE(client_.connected());
  EXPECT_FALSE(client_.connected());
}

TEST_F(ClientTest, WritingAfterThePeerLeftFails) {
  server_.close();
  EXPECT_TRUE(client_.wait_closed(5s));
  try {
    // The first writes may still be taken by the kernel; a reset follows.
    for (int i = 0; i < 100; ++i) {
      client_.notify("robot/log", json::object{{"i", i}});
      std::this_thread::sleep_for(5ms);
    }
    ADD_FAILURE() << "every write succeeded";
  } catch (const RpcError& e) {
    EXPECT_EQ(e.kind(), RpcError::Kind::io) << e.what();
  }
}

TEST_F(ClientTest, InitializeSendsClientInfoThenInitialized) {
  client_.set_client_info("tester", "9.9");
  server_.send(R"({"jsonrpc":"2.0","id":"1","result":{"capabilities":{"support_exit":true}}})");
  auto result = client_.initialize();
  EXPECT_EQ(result.at("capabilities").at("support_exit"), json::value(true));
  auto init = std::get<Message>(rjg::protocol::parse_message(server_.read_frame()));
  EXPECT_EQ(init.method(), rjg::protocol::kInitialize);
  EXPECT_EQ(init.params().at("client_info").at("name"), json::value("tester"));
  auto initialized = std::get<Message>(rjg::protocol::parse_message(server_.read_frame()));
  EXPECT_EQ(initialized.kind, Message::Kind::notification);
  EXPECT_EQ(initialized.method(), rjg::protocol::kInitialized);
}

TEST_F(ClientTest, InitializeErrorIsRpcCallError) {
  server_.send(R"({"jsonrpc":"2.0","id":"1","error":{"code":-32014,"message":"full"}})");
  try {
    client_.initialize();
    ADD_FAILURE() << "no error";
  } catch (const rjg::client::RpcCallError& e) {
    EXPECT_EQ(e.code(), -32014);
    EXPECT_EQ(e.server_message(), "full");
  }
}

TEST_F(ClientTest, MovedClientKeepsItsConnection) {
  auto id = client_.send_request("m", json::object{});
  RpcClient moved = std::move(client_);
  server_.send(R"({"jsonrpc":"2.0","id":"1","result":1})");
  EXPECT_EQ(*moved.wait_reply(id).result, json::value(1));
}

TEST_F(ClientTest, CloseThenCallsSayNotConnected) {
  server_.send(R"({"jsonrpc":"2.0","method":"robot/log","params":{}})");
  ASSERT_TRUE(client_.read_message(1s));
  client_.close();
  EXPECT_FALSE(client_.connected());
  EXPECT_TRUE(client_.wait_closed(0ms));
  for (auto call : {+[](RpcClient& c) { c.read_message(10ms); }, +[](RpcClient& c) { c.send_raw("x"); }}) {
    try {
      call(client_);
      ADD_FAILURE() << "no error";
    } catch (const RpcError& e) {
      EXPECT_EQ(e.kind(), RpcError::Kind::closed) << e.what();
    }
  }
}

TEST(Client, ReconnectStartsAfresh) {
  FakeServer first, second;
  RpcClient client(5s);
  client.connect("127.0.0.1", first.port());
  first.accept();
  first.send(R"({"jsonrpc":"2.0","method":"robot/log","params":{}})");
  first.send(R"({"jsonrpc":"2.0","method":"robot/log","params":{}})");
  ASSERT_TRUE(client.read_message(1s));
  client.connect(fmt::format("tcp://127.0.0.1:{}", second.port()));
  second.accept();
  EXPECT_EQ(client.pending_messages(), 0u);
  auto id = client.send_request("m", json::object{});
  EXPECT_FALSE(second.read_frame().empty());
  second.send(rjg::protocol::make_result(id, "again"));
  EXPECT_EQ(*client.wait_reply(id).result, json::value("again"));
}

TEST(Client, ConnectFailureNamesTheAddress) {
  std::uint16_t port;
  {
    FakeServer gone;
    port = gone.port();
  }
  RpcClient client(1s);
  try {
    client.connect("127.0.0.1", port);
    ADD_FAILURE() << "connected to a closed port";
  } catch (const RpcError& e) {
    EXPECT_EQ(e.kind(), RpcError::Kind::connect);
    EXPECT_NE(std::string(e.what()).find(std::to_string(port)), std::string::npos) << e.what();
  }
  EXPECT_FALSE(client.connected());
  try {
    client.connect(std::string_view("no-port"));
    ADD_FAILURE() << "accepted a bad address";
  } catch (const RpcError& e) {
    EXPECT_EQ(e.kind(), RpcError::Kind::connect);
  }
}

}  // namespace
