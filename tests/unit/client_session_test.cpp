// The gateway's session logic without a socket or a process: a client speaks to a StreamConnection
// over an in-memory stream (Beast's test stream), and the libraries are served by a fake LeaseSource.
// Drives initialize, import, run (with logs), finalize, a worker crash and the end of the session.
#include "common/protocol/protocol.hpp"
#include "common/runtime/message_stream.hpp"
#include "gateway/session/client_session.hpp"
#include "gateway/session/context.hpp"
#include "gateway/session/stream_connection.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/beast/_experimental/test/stream.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <functional>
#include <map>
#include <set>
#include <vector>

namespace rjg::gateway::session {

using TestStream = boost::beast::test::stream;

// The in-memory stream cannot half-close: the peer ends the session by closing its side.
template <>
struct Transport<TestStream> {
  static void stop_reading(TestStream&) {}
  static void close(TestStream& s) { s.close(); }
};

}  // namespace rjg::gateway::session

namespace {

using namespace rjg;
using namespace rjg::protocol;
namespace supervisor = rjg::gateway::supervisor;
namespace asio = boost::asio;
using rjg::gateway::session::StreamConnection;
using TestStream = boost::beast::test::stream;
namespace protocol = rjg::protocol;

Message parse(std::string text) {
  auto classified = parse_message(text);
  if (std::holds_alternative<ProtocolError>(classified)) throw std::runtime_error("fake worker built bad JSON: " + text);
  return std::get<Message>(std::move(classified));
}

// The "error" of a robot/run_keyword answer: every failure of a call, the gateway's own included, is a
// result that carries one ({} when the answer is anything else).
json::object keyword_error_of(const Message& m) {
  if (m.kind != Message::Kind::response) return {};
  const json::value result = m.result();
  if (!result.is_object()) return {};
  const auto* error = result.get_object().if_contains("error");
  return error && error->is_object() ? error->get_object() : json::object{};
}
std::string keyword_error_text(const Message& m, std::string_view member) {
  const auto error = keyword_error_of(m);
  const auto* value = error.if_contains(member);
  return value && value->is_string() ? std::string(value->get_string()) : std::string();
}

// What the fake workers saw, in order: "import {params}", "run {params}", "finalize {params}", "end ...".
struct Journal {
  std::vector<std::string> calls;
  int leases = 0;
  int released = 0;
  bool dropped_mid_call = false;  // a lease destroyed while one of its calls was suspended
};

// Suspends once, as a real worker call does: a lease that is not kept alive by its caller shows here.
asio::awaitable<void> yield_once() {
  co_await asio::post(co_await asio::this_coro::executor, asio::use_awaitable);
}

// A fake worker behind a lease. Keywords: "Log" relays two robot/log notifications, then answers;
// "Crash" fails the way a dying worker does; anything else echoes its params' text as the result.
class FakeLease final : public supervisor::Lease {
 public:
  FakeLease(Journal& journal, int number) : journal_(journal), number_(number) {}
  ~FakeLease() override {
    if (pending_) journal_.dropped_mid_call = true;
  }
  pid_t pid() const override { return 4200 + number_; }
  bool prewarmed() const override { return false; }

  asio::awaitable<Message> import_library(std::string params, std::weak_ptr<supervisor::CallObserver>) override {
    journal_.calls.push_back("import " + params);
    co_return parse(fmt::format(R"({{"jsonrpc":"2.0","id":9,"result":{{"token":"w-{}","definition":{{"keywords":[{{"name":"Log","args":[1.50,-0.0]}}]}},"x-extra":1E+2}}}})",
                                number_));
  }

  asio::awaitable<Message> run_keyword(std::string params, std::string keyword,
                                       std::weak_ptr<supervisor::CallObserver> observer) override {
    journal_.calls.push_back("run " + params);
    if (keyword == "Crash") {
      throw supervisor::WorkerError(protocol::kWorkerFailed,
                                 fmt::format("The worker of library 'Fake' (pid {}) died with signal 9 (SIGKILL) while "
                                             "running keyword 'Crash'.",
                                             pid()),
                                 json::object{{"library", "Fake"}, {"pid", pid()}});
    }
    if (keyword == "Log") {
      for (int i = 1; i <= 2; ++i) {
        if (auto o = observer.lock()) {
          o->relay_notification(fmt::format(R"({{"jsonrpc":"2.0","method":"robot/log","params":{{"message":"line {}","level":"INFO"}}}})", i));
          co_await o->wait_for_room();
        }
      }
      co_return parse(R"({"jsonrpc":"2.0","id":5,"result":{"result":"logged"}})");
    }
    co_return parse(R"({"jsonrpc":"2.0","id":5,"result":{"result":)" + params + "}}");
  }

  asio::awaitable<std::optional<Message>> finalize_library(std::string params,
                                                           std::weak_ptr<supervisor::CallObserver>) override {
    pending_ = true;
    co_await yield_once();
    pending_ = false;
    journal_.calls.push_back("finalize " + params);
    ++journal_.released;
    co_return parse(R"({"jsonrpc":"2.0","id":6,"result":{}})");
  }

  asio::awaitable<void> end(std::string finalize_params, std::string reason) override {
    pending_ = true;
    co_await yield_once();
    pending_ = false;
    journal_.calls.push_back("end " + finalize_params + " (" + reason + ")");
    ++journal_.released;
  }

  asio::awaitable<void> release(std::string reason) override {
    journal_.calls.push_back("release (" + reason + ")");
    ++journal_.released;
    co_return;
  }

 private:
  Journal& journal_;
  int number_;
  bool pending_ = false;
};

class FakeLeases final : public supervisor::LeaseSource {
 public:
  explicit FakeLeases(Journal& journal) : journal_(journal) {}
  asio::awaitable<std::shared_ptr<supervisor::Lease>> acquire(const config::Library&) override {
    co_return std::make_shared<FakeLease>(journal_, ++journal_.leases);
  }

 private:
  Journal& journal_;
};

// The client's side: a message stream over the other end of the in-memory stream.
class Client {
 public:
  explicit Client(TestStream stream) : stream_(runtime::StreamOptions{}, std::move(stream)) {}

  void start() { asio::co_spawn(stream_.get_executor(), stream_.run_writer(), asio::detached); }
  void send(std::string text) { stream_.send(text); }

  // The next message; notifications that arrive first are collected in `notes`.
  asio::awaitable<Message> answer(std::vector<Message>* notes = nullptr) {
    for (;;) {
      runtime::Incoming in = co_await stream_.read();
      if (in.kind != runtime::Incoming::Kind::message) throw std::runtime_error("the connection ended: " + in.error);
      if (in.message->kind == Message::Kind::notification && notes) {
        notes->push_back(std::move(*in.message));
        continue;
      }
      co_return std::move(*in.message);
    }
  }

  asio::awaitable<bool> closed_by_peer() {
    runtime::Incoming in = co_await stream_.read();
    co_return in.kind == runtime::Incoming::Kind::closed;
  }

  TestStream& raw() { return stream_.stream(); }

 private:
  runtime::MessageStream<TestStream> stream_;
};

std::string token_of(const Message& m) { return std::string(m.result().at("token").as_string()); }

TEST(ClientSession, HandshakeImportRunWithLogsFinalizeCrashAndEnd) {
  asio::io_context io;
  auto config = config::load_string(R"(
[gateway]
listen = ["tcp://127.0.0.1:0"]
[[library]]
name = "Fake"
command = ["/bin/true"]
)",
                                    "test.toml");
  rjg::gateway::session::GatewayContext context(io.get_executor(), config, "test");
  Journal journal;
  FakeLeases leases(journal);

  TestStream server_end(io), client_end(io);
  server_end.connect(client_end);
  auto connection = std::make_shared<StreamConnection<TestStream>>(std::move(server_end), context, leases,
                                                                  "session 1 (in-memory)");
  connection->start();
  Client client(std::move(client_end));
  client.start();

  bool finished = false;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        // Before the handshake, an import is refused with the client's id.
        client.send(R"({"jsonrpc":"2.0","id":"early","method":"robot/import_library","params":{"name":"Fake"}})");
        auto early = co_await client.answer();
        EXPECT_EQ(early.id_text(), "\"early\"");
        EXPECT_EQ(early.error_code(), protocol::kNotInitialized);

        client.send(R"({"jsonrpc":"2.0","id":1,"method":"robot/initialize","params":{"capabilities":{}}})");
        auto init = co_await client.answer();
        EXPECT_EQ(init.id_text(), "1");
        EXPECT_EQ(init.result().at("capabilities").at("libraries"), json::parse(R"(["Fake"])"));
        client.send(R"({"jsonrpc":"2.0","method":"robot/initialized","params":{}})");

        // Bad params: one -32602 naming the field.
        client.send(R"({"jsonrpc":"2.0","id":2,"method":"robot/import_library","params":{"name":7}})");
        auto bad = co_await client.answer();
        EXPECT_EQ(bad.error_code(), protocol::kInvalidParams);
        EXPECT_NE(bad.error_message().find("params.name must be a string"), std::string::npos) << bad.text();

        // Import: the worker is asked for its default library; the answer carries the gateway's token
        // and every other byte as the worker wrote it.
        client.send(R"({"jsonrpc":"2.0","id":123456789012345678901234567890,"method":"robot/import_library","params":{"name":"Fake","args":[1E+2,"a\u00e9"]}})");
        auto imported = co_await client.answer();
        EXPECT_EQ(imported.id_text(), "123456789012345678901234567890");
        const std::string token = token_of(imported);
        EXPECT_TRUE(token.starts_with("Fake-")) << token;
        EXPECT_NE(imported.text().find(R"("definition":{"keywords":[{"name":"Log","args":[1.50,-0.0]}]},"x-extra":1E+2)"),
                  std::string::npos)
            << imported.text();
        EXPECT_EQ(journal.calls.back(), R"(import {"name":"","args":[1E+2,"a\u00e9"]})");

        // A keyword with logs: both logs come before the answer, the worker sees its own token.
        client.send(fmt::format(R"({{"jsonrpc":"2.0","id":3,"method":"robot/run_keyword","params":{{"library_token":"{}","name":"Log","args":[5e-324]}}}})",
                                token));
        std::vector<Message> logs;
        auto ran = co_await client.answer(&logs);
        EXPECT_EQ(ran.id_text(), "3");
        EXPECT_EQ(ran.result().at("result"), json::value("logged"));
        EXPECT_EQ(logs.size(), 2u);
        if (logs.size() == 2) {
          EXPECT_EQ(logs[0].params().at("message"), json::value("line 1"));
          EXPECT_EQ(logs[1].params().at("message"), json::value("line 2"));
        }
        EXPECT_EQ(journal.calls.back(), R"(run {"library_token":"w-1","name":"Log","args":[5e-324]})");

        // A token of another connection, or made up, is unknown.
        client.send(R"({"jsonrpc":"2.0","id":4,"method":"robot/run_keyword","params":{"library_token":"w-1","name":"Log"}})");
        auto unknown = co_await client.answer();
        EXPECT_EQ(unknown.kind, Message::Kind::response) << unknown.text();
        EXPECT_EQ(keyword_error_text(unknown, "type"), protocol::keyword_error_type(protocol::kUnknownToken))
            << unknown.text();
        EXPECT_NE(keyword_error_text(unknown, "message").find("Unknown library token 'w-1'"), std::string::npos)
            << unknown.text();

        // Finalize goes to the worker with the worker's token.
        client.send(fmt::format(R"({{"jsonrpc":"2.0","id":5,"method":"robot/finalize_library","params":{{"token":"{}"}}}})", token));
        auto finalized = co_await client.answer();
        EXPECT_EQ(finalized.id_text(), "5");
        EXPECT_EQ(finalized.result_text(), "{}");
        EXPECT_EQ(journal.calls.back(), R"(finalize {"token":"w-1"})");

        // A worker that dies mid-keyword: a clear failure of that call (a result: the session goes on),
        // naming the pid.
        client.send(R"({"jsonrpc":"2.0","id":6,"method":"robot/import_library","params":{"name":"Fake"}})");
        const std::string token2 = token_of(co_await client.answer());
        client.send(fmt::format(R"({{"jsonrpc":"2.0","id":7,"method":"robot/run_keyword","params":{{"library_token":"{}","name":"Crash"}}}})",
                                token2));
        auto crashed = co_await client.answer();
        EXPECT_EQ(crashed.id_text(), "7");
        EXPECT_EQ(crashed.kind, Message::Kind::response) << crashed.text();
        EXPECT_EQ(keyword_error_text(crashed, "type"), protocol::keyword_error_type(protocol::kWorkerFailed))
            << crashed.text();
        EXPECT_NE(keyword_error_text(crashed, "message").find("pid 4202"), std::string::npos) << crashed.text();

        // robot/exit: the connection closes and ends the import still held.
        client.send(R"({"jsonrpc":"2.0","method":"robot/exit","params":{}})");
        EXPECT_TRUE(co_await client.closed_by_peer());
        co_await connection->wait_closed();
        finished = true;
        io.stop();  // the gateway context's reaper and timers would keep the loop alive
      },
      [](std::exception_ptr e) {
        if (e) std::rethrow_exception(e);
      });
  io.run_for(std::chrono::seconds(30));

  EXPECT_TRUE(finished);
  EXPECT_EQ(journal.leases, 2);
  EXPECT_EQ(journal.released, 2) << "every lease ends exactly once";
  EXPECT_FALSE(journal.dropped_mid_call) << "a lease was destroyed while its call was running";
  ASSERT_FALSE(journal.calls.empty());
  EXPECT_EQ(journal.calls.back(), R"(end {"token":"w-2"} (its session closed: the client sent robot/exit))");
  EXPECT_EQ(context.requests_in_flight, 0u);
}

// --- Accounting of pending requests (max_pending_requests, max_pending_bytes)

// A worker whose keywords all wait until the test opens the gate, then answer "done".
class GatedLease final : public supervisor::Lease {
 public:
  explicit GatedLease(runtime::AsyncEvent& gate) : gate_(gate) {}
  pid_t pid() const override { return 4300; }
  bool prewarmed() const override { return false; }
  asio::awaitable<Message> import_library(std::string, std::weak_ptr<supervisor::CallObserver>) override {
    co_return parse(R"({"jsonrpc":"2.0","id":1,"result":{"token":"w-gated","definition":{}}})");
  }
  asio::awaitable<Message> run_keyword(std::string, std::string, std::weak_ptr<supervisor::CallObserver>) override {
    co_await gate_.wait();
    co_return parse(R"({"jsonrpc":"2.0","id":2,"result":{"result":"done"}})");
  }
  asio::awaitable<std::optional<Message>> finalize_library(std::string, std::weak_ptr<supervisor::CallObserver>) override {
    co_return std::nullopt;
  }
  asio::awaitable<void> end(std::string, std::string) override { co_return; }
  asio::awaitable<void> release(std::string) override { co_return; }

 private:
  runtime::AsyncEvent& gate_;
};

class GatedLeases final : public supervisor::LeaseSource {
 public:
  explicit GatedLeases(runtime::AsyncEvent& gate) : gate_(gate) {}
  asio::awaitable<std::shared_ptr<supervisor::Lease>> acquire(const config::Library&) override {
    co_return std::make_shared<GatedLease>(gate_);
  }

 private:
  runtime::AsyncEvent& gate_;
};

// Each unanswered request counts against max_pending_requests and its text against max_pending_bytes
// until it is answered; a request beyond either is answered -32014 at once, naming the setting; a
// request is always admitted when nothing else waits.
TEST(ClientSession, PendingRequestsAreCountedAndBounded) {
  asio::io_context io;
  auto config = config::load_string(R"(
[gateway]
listen = ["tcp://127.0.0.1:0"]
max_pending_bytes = "64KiB"
max_pending_requests = 4
[[library]]
name = "Fake"
command = ["/bin/true"]
)",
                                    "test.toml");
  rjg::gateway::session::GatewayContext context(io.get_executor(), config, "test");
  runtime::AsyncEvent gate(io.get_executor());
  GatedLeases leases(gate);

  TestStream server_end(io), client_end(io);
  server_end.connect(client_end);
  auto connection = std::make_shared<StreamConnection<TestStream>>(std::move(server_end), context, leases,
                                                                  "session 2 (in-memory)");
  connection->start();
  Client client(std::move(client_end));
  client.start();

  auto run = [](int id, std::string_view token, std::size_t arg_bytes) {
    return fmt::format(R"({{"jsonrpc":"2.0","id":{},"method":"robot/run_keyword","params":{{"library_token":"{}","name":"K","args":["{}"]}}}})",
                       id, token, std::string(arg_bytes, 'x'));
  };
  bool finished = false;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        client.send(R"({"jsonrpc":"2.0","id":0,"method":"robot/initialize","params":{}})");
        co_await client.answer();
        client.send(R"({"jsonrpc":"2.0","method":"robot/initialized","params":{}})");
        client.send(R"({"jsonrpc":"2.0","id":"imp","method":"robot/import_library","params":{"name":"Fake"}})");
        const std::string token = token_of(co_await client.answer());

        // Two of 30 KiB fit in 64 KiB; the third does not.
        const auto first = run(1, token, 30 * 1024), second = run(2, token, 30 * 1024);
        client.send(first);
        client.send(second);
        client.send(run(3, token, 30 * 1024));
        auto too_big = co_await client.answer();
        EXPECT_EQ(too_big.id_text(), "3");
        EXPECT_EQ(keyword_error_text(too_big, "type"), protocol::keyword_error_type(protocol::kAtCapacity))
            << too_big.text();
        const std::string too_big_message = keyword_error_text(too_big, "message");
        // Each frame's body is the text and the CRLF that ends it (counted in Content-Length).
        const auto waiting = fmt::format("{} bytes of 2 unanswered requests", first.size() + second.size() + 4);
        EXPECT_NE(too_big_message.find(waiting), std::string::npos) << too_big_message << "\nexpected: " << waiting;
        EXPECT_NE(too_big_message.find("max_pending_bytes = 65536"), std::string::npos) << too_big_message;

        // Small ones fit, up to four unanswered; the fifth is refused by number.
        client.send(run(4, token, 10));
        client.send(run(5, token, 10));
        client.send(run(6, token, 10));
        auto too_many = co_await client.answer();
        EXPECT_EQ(too_many.id_text(), "6");
        EXPECT_EQ(keyword_error_text(too_many, "type"), protocol::keyword_error_type(protocol::kAtCapacity))
            << too_many.text();
        const std::string too_many_message = keyword_error_text(too_many, "message");
        EXPECT_NE(too_many_message.find("4 are unanswered"), std::string::npos) << too_many_message;
        EXPECT_NE(too_many_message.find("max_pending_requests = 4"), std::string::npos) << too_many_message;
        EXPECT_EQ(context.requests_in_flight, 4u);

        // Answers free what they counted.
        gate.set();
        std::set<std::string> answered;
        for (int i = 0; i < 4; ++i) {
          auto m = co_await client.answer();
          EXPECT_EQ(m.kind, Message::Kind::response) << m.text();
          EXPECT_TRUE(keyword_error_of(m).empty()) << m.text();
          answered.insert(std::string(m.id_text()));
        }
        EXPECT_EQ(answered, (std::set<std::string>{"1", "2", "4", "5"}));
        EXPECT_EQ(context.requests_in_flight, 0u);

        // Nothing waits: one request larger than max_pending_bytes is still admitted.
        client.send(run(7, token, 100 * 1024));
        auto big = co_await client.answer();
        EXPECT_EQ(big.id_text(), "7");
        EXPECT_EQ(big.kind, Message::Kind::response) << big.text().substr(0, 300);
        EXPECT_TRUE(keyword_error_of(big).empty()) << big.text().substr(0, 300);

        client.send(R"({"jsonrpc":"2.0","method":"robot/exit","params":{}})");
        EXPECT_TRUE(co_await client.closed_by_peer());
        co_await connection->wait_closed();
        finished = true;
        io.stop();
      },
      [](std::exception_ptr e) {
        if (e) std::rethrow_exception(e);
      });
  io.run_for(std::chrono::seconds(30));
  EXPECT_TRUE(finished);
  EXPECT_EQ(context.requests_in_flight, 0u);
}

// --- prewarm_import: an import without arguments answered by an instance imported ahead of time

// A lease source that records which acquire an import used. A lease acquired for an import without
// arguments holds a worker that imported ahead of time (its stored answer, once); the other kind is an
// ordinary FakeLease-like worker that is asked to import.
class AheadLease final : public supervisor::Lease {
 public:
  AheadLease(Journal& journal, std::optional<Message> preimported)
      : journal_(journal), preimported_(std::move(preimported)) {}
  pid_t pid() const override { return 4400; }
  bool prewarmed() const override { return true; }
  std::optional<Message> take_preimported() override { return std::exchange(preimported_, std::nullopt); }
  asio::awaitable<Message> import_library(std::string params, std::weak_ptr<supervisor::CallObserver>) override {
    journal_.calls.push_back("import " + params);
    co_return parse(R"({"jsonrpc":"2.0","id":3,"result":{"token":"w-fresh","definition":{}}})");
  }
  asio::awaitable<Message> run_keyword(std::string params, std::string, std::weak_ptr<supervisor::CallObserver>) override {
    journal_.calls.push_back("run " + params);
    co_return parse(R"({"jsonrpc":"2.0","id":4,"result":{"result":"ran"}})");
  }
  asio::awaitable<std::optional<Message>> finalize_library(std::string params,
                                                           std::weak_ptr<supervisor::CallObserver>) override {
    journal_.calls.push_back("finalize " + params);
    ++journal_.released;
    co_return parse(R"({"jsonrpc":"2.0","id":5,"result":{}})");
  }
  asio::awaitable<void> end(std::string, std::string) override {
    ++journal_.released;
    co_return;
  }
  asio::awaitable<void> release(std::string reason) override {
    journal_.calls.push_back("release (" + reason + ")");
    ++journal_.released;
    co_return;
  }

 private:
  Journal& journal_;
  std::optional<Message> preimported_;
};

class AheadLeases final : public supervisor::LeaseSource {
 public:
  explicit AheadLeases(Journal& journal) : journal_(journal) {}
  asio::awaitable<std::shared_ptr<supervisor::Lease>> acquire(const config::Library&) override {
    journal_.calls.push_back("acquire");
    ++journal_.leases;
    co_return std::make_shared<AheadLease>(journal_, std::nullopt);
  }
  asio::awaitable<std::shared_ptr<supervisor::Lease>> acquire_without_arguments(const config::Library&) override {
    journal_.calls.push_back("acquire without arguments");
    ++journal_.leases;
    co_return std::make_shared<AheadLease>(journal_, parse(stored_answer));
  }
  // The worker's answer to its import ahead of time (its id is the worker-side one).
  std::string stored_answer =
      R"({"jsonrpc":"2.0","id":1,"result":{"token":"w-ahead","definition":{"keywords":[{"name":"K","args":[1E+2]}]}}})";

 private:
  Journal& journal_;
};

// Args and kw_args absent, null or empty (white space inside allowed) make an import without
// arguments, which takes the stored answer: the client gets it with its own id and a gateway token, the
// worker is not asked to import again, and keywords reach the instance imported ahead. Any argument
// makes an ordinary import. The stored answer passes the pickle policy like any import answer.
TEST(ClientSession, ImportWithoutArgumentsIsAnsweredByTheImportMadeAheadOfTime) {
  asio::io_context io;
  auto config = config::load_string(R"(
[gateway]
listen = ["tcp://127.0.0.1:0"]
[[library]]
name = "Fake"
command = ["/bin/true"]
)",
                                    "test.toml");
  rjg::gateway::session::GatewayContext context(io.get_executor(), config, "test");
  Journal journal;
  AheadLeases leases(journal);

  TestStream server_end(io), client_end(io);
  server_end.connect(client_end);
  auto connection = std::make_shared<StreamConnection<TestStream>>(std::move(server_end), context, leases,
                                                                  "session 3 (in-memory)");
  connection->start();
  Client client(std::move(client_end));
  client.start();

  bool finished = false;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        client.send(R"({"jsonrpc":"2.0","id":0,"method":"robot/initialize","params":{}})");
        co_await client.answer();
        client.send(R"({"jsonrpc":"2.0","method":"robot/initialized","params":{}})");

        int id = 10;
        for (const char* params : {R"({"name":"Fake"})", R"({"name":"Fake","args":null,"kw_args":null})",
                                   R"({"name":"Fake","args":[ ],"kw_args":{ }})", R"({"name":"","args":[]})",
                                   R"({"name":"Fake","kw_args":{},"x-unknown":[1]})"}) {
          journal.calls.clear();
          client.send(fmt::format(R"({{"jsonrpc":"2.0","id":{},"method":"robot/import_library","params":{}}})", ++id,
                                  params));
          auto answer = co_await client.answer();
          EXPECT_EQ(answer.id_text(), std::to_string(id)) << params;
          EXPECT_EQ(answer.kind, Message::Kind::response) << params << ": " << answer.text();
          if (answer.kind != Message::Kind::response) continue;
          const std::string token = token_of(answer);
          EXPECT_TRUE(token.starts_with("Fake-")) << token;
          EXPECT_NE(answer.text().find(R"("definition":{"keywords":[{"name":"K","args":[1E+2]}]})"), std::string::npos)
              << answer.text();
          EXPECT_EQ(journal.calls, std::vector<std::string>{"acquire without arguments"})
              << params << ": the worker was asked to import again, or the wrong acquire was used";

          client.send(fmt::format(R"({{"jsonrpc":"2.0","id":"k","method":"robot/run_keyword","params":{{"library_token":"{}","name":"K"}}}})",
                                  token));
          auto ran = co_await client.answer();
          EXPECT_EQ(ran.result().at("result"), json::value("ran")) << ran.text();
          EXPECT_EQ(journal.calls.back(), R"(run {"library_token":"w-ahead","name":"K"})");
        }

        // With any argument: an ordinary import, sent to the worker.
        for (const char* params : {R"({"name":"Fake","args":[1]})", R"({"name":"Fake","args":[""]})",
                                   R"({"name":"Fake","args":[],"kw_args":{"a":null}})"}) {
          journal.calls.clear();
          client.send(fmt::format(R"({{"jsonrpc":"2.0","id":{},"method":"robot/import_library","params":{}}})", ++id,
                                  params));
          auto answer = co_await client.answer();
          EXPECT_EQ(answer.kind, Message::Kind::response) << params << ": " << answer.text();
          EXPECT_EQ(journal.calls.size(), 2u) << ::testing::PrintToString(journal.calls);
          if (journal.calls.size() != 2) continue;
          EXPECT_EQ(journal.calls[0], "acquire") << params;
          EXPECT_TRUE(journal.calls[1].starts_with("import {\"name\":\"\"")) << journal.calls[1];
          EXPECT_NE(answer.text().find("\"definition\":{}"), std::string::npos) << answer.text();
        }

        // A stored answer that holds a pickle the policy refuses is refused as any import answer is,
        // and the worker goes back (released).
        leases.stored_answer =
            R"({"jsonrpc":"2.0","id":1,"result":{"token":"w-ahead","definition":{"keywords":[{"name":"K","args":[{"__pickled__":"8004951d000000000000008c05706f736978948c0673797374656d9493948c02696494859452942e"}]}]}}})";
        journal.calls.clear();
        client.send(R"({"jsonrpc":"2.0","id":"p","method":"robot/import_library","params":{"name":"Fake"}})");
        auto refused = co_await client.answer();
        EXPECT_EQ(refused.error_code(), protocol::kPickleRefused) << refused.text();
        EXPECT_NE(refused.error_message().find("posix.system"), std::string::npos) << refused.text();
        EXPECT_EQ(journal.calls,
                  (std::vector<std::string>{"acquire without arguments", "release (its import failed)"}));

        client.send(R"({"jsonrpc":"2.0","method":"robot/exit","params":{}})");
        EXPECT_TRUE(co_await client.closed_by_peer());
        co_await connection->wait_closed();
        finished = true;
        io.stop();
      },
      [](std::exception_ptr e) {
        if (e) std::rethrow_exception(e);
      });
  io.run_for(std::chrono::seconds(30));
  EXPECT_TRUE(finished);
  EXPECT_EQ(journal.released, journal.leases) << "every lease ends exactly once";
}


// --- One request's checks in their corner cases: the pickle check of what comes in, escaping, the
// worker, the pickle check of what goes out, and the token rewrite. The session is driven directly (no
// stream), so a test can act between two steps of one request (a reload after its precheck).

// A connection that keeps what the session sends.
class Recorder final : public rjg::gateway::session::Connection {
 public:
  const std::string& name() const override { return name_; }
  void send(std::string json_text) override { sent.push_back(parse(std::move(json_text))); }
  asio::awaitable<void> wait_for_room() override { co_return; }
  void session_idle() override {}
  void close(std::string) override { closed = true; }
  bool closing() const override { return closed; }
  asio::awaitable<void> wait_closed() override { co_return; }

  std::vector<Message> sent;
  bool closed = false;

 private:
  std::string name_ = "session 9 (direct)";
};

// What the scripted workers answer, by lease number (1, 2, ... in the order acquired).
struct Script {
  // The import answer's member after its id: "result":{...} or "error":{...}.
  std::function<std::string(int)> import_answer = [](int n) {
    return fmt::format(R"("result":{{"token":"w-{}","definition":{{}}}})", n);
  };
  // The settings the pool grants a lease with (a reload since the session resolved the name); none: the route's.
  std::map<int, std::shared_ptr<const config::Library>> settings;
  std::string server_name;
  // The result of an import without arguments made ahead of time (prewarm_import): given to the first
  // lease acquired for an import without arguments.
  std::optional<std::string> preimported;
};

// A worker whose import answers a test sets. Keywords: "Crash" dies as a worker does (its lease then
// reports the loss); "Pickled" returns a pickle of the int 1; any other echoes its params' text as its
// result.
class ScriptedLease final : public supervisor::Lease {
 public:
  ScriptedLease(Journal& journal, Script& script, int number, std::optional<Message> preimported)
      : journal_(journal), script_(script), number_(number), preimported_(std::move(preimported)) {}
  pid_t pid() const override { return 4500 + number_; }
  bool prewarmed() const override { return false; }
  std::string loss() const override { return loss_; }
  std::string server_name() const override { return script_.server_name; }
  std::shared_ptr<const config::Library> settings() const override {
    auto it = script_.settings.find(number_);
    return it == script_.settings.end() ? nullptr : it->second;
  }
  std::optional<Message> take_preimported() override { return std::exchange(preimported_, std::nullopt); }

  asio::awaitable<Message> import_library(std::string params, std::weak_ptr<supervisor::CallObserver>) override {
    journal_.calls.push_back("import " + params);
    co_return parse(R"({"jsonrpc":"2.0","id":1,)" + script_.import_answer(number_) + "}");
  }
  asio::awaitable<Message> run_keyword(std::string params, std::string keyword,
                                       std::weak_ptr<supervisor::CallObserver>) override {
    journal_.calls.push_back("run " + params);
    if (keyword == "Crash") {
      loss_ = fmt::format("The worker of library 'Fake' (pid {}) died with signal 9 (SIGKILL)", pid());
      throw supervisor::WorkerError(protocol::kWorkerFailed, loss_ + " while running keyword 'Crash'.");
    }
    if (keyword == "Pickled") co_return parse(R"({"jsonrpc":"2.0","id":2,"result":{"result":{"__pickled__":"80044b012e"}}})");
    co_return parse(R"({"jsonrpc":"2.0","id":2,"result":{"result":)" + params + "}}");
  }
  asio::awaitable<std::optional<Message>> finalize_library(std::string params,
                                                           std::weak_ptr<supervisor::CallObserver>) override {
    journal_.calls.push_back("finalize " + params);
    ++journal_.released;
    co_return parse(R"({"jsonrpc":"2.0","id":3,"result":{}})");
  }
  asio::awaitable<void> end(std::string finalize_params, std::string reason) override {
    journal_.calls.push_back("end " + finalize_params + " (" + reason + ")");
    ++journal_.released;
    co_return;
  }
  asio::awaitable<void> release(std::string reason) override {
    journal_.calls.push_back("release (" + reason + ")");
    ++journal_.released;
    co_return;
  }

 private:
  Journal& journal_;
  Script& script_;
  int number_;
  std::optional<Message> preimported_;
  std::string loss_;
};

class ScriptedLeases final : public supervisor::LeaseSource {
 public:
  ScriptedLeases(Journal& journal, Script& script) : journal_(journal), script_(script) {}
  asio::awaitable<std::shared_ptr<supervisor::Lease>> acquire(const config::Library&) override {
    journal_.calls.push_back("acquire");
    co_return std::make_shared<ScriptedLease>(journal_, script_, ++journal_.leases, std::nullopt);
  }
  asio::awaitable<std::shared_ptr<supervisor::Lease>> acquire_without_arguments(const config::Library&) override {
    journal_.calls.push_back("acquire without arguments");
    std::optional<Message> ahead;
    if (auto result = std::exchange(script_.preimported, std::nullopt))
      ahead = parse(R"({"jsonrpc":"2.0","id":1,"result":)" + *result + "}");
    co_return std::make_shared<ScriptedLease>(journal_, script_, ++journal_.leases, std::move(ahead));
  }

 private:
  Journal& journal_;
  Script& script_;
};

std::string library_toml(std::string_view settings) {
  return fmt::format(R"(
[gateway]
listen = ["tcp://127.0.0.1:0"]
[[library]]
name = "Fake"
command = ["/bin/true"]
{}
)",
                     settings);
}

// The settings a pool grants after a reload gave the library `settings`.
std::shared_ptr<const config::Library> granted(std::string_view settings) {
  rjg::gateway::session::Router router(std::make_shared<const config::Config>(config::load_string(library_toml(settings), "test.toml")));
  return router.resolve("Fake").library;
}

// A ClientSession on a Recorder, past the handshake, with scripted workers.
class DirectSession {
 public:
  explicit DirectSession(std::string_view settings)
      : context(io.get_executor(), config::load_string(library_toml(settings), "test.toml"), "test"),
        leases(journal, script),
        connection(std::make_shared<Recorder>()),
        session(std::make_shared<rjg::gateway::session::ClientSession>(context, context.config(), leases, connection,
                                                         "session 9 (direct)", io.get_executor())) {
    call(R"({"jsonrpc":"2.0","id":0,"method":"robot/initialize","params":{}})");
    session->handle(keep(R"({"jsonrpc":"2.0","method":"robot/initialized","params":{}})"));
  }
  ~DirectSession() {
    bool ended = false;
    asio::co_spawn(io, session->end("the test is over"), [&](std::exception_ptr) { ended = true; });
    while (!ended && io.run_one_for(std::chrono::seconds(10)) > 0) {
    }
    EXPECT_TRUE(ended);
    EXPECT_EQ(journal.released, journal.leases) << "every lease ends exactly once";
    EXPECT_EQ(context.requests_in_flight, 0u);
  }

  // Handles one request and runs the loop until it is answered; the notifications sent before the
  // answer go to `notes`.
  Message call(std::string text, std::vector<Message>* notes = nullptr) {
    const Message& request = keep(std::move(text));
    const std::size_t from = connection->sent.size();
    session->handle(request);
    return answer_to(request, from, notes);
  }
  // The same, with a precheck (as a large request gets, off the loop) and then `between` before it is handled.
  Message call_prechecked(std::string text, const std::function<void()>& between) {
    const Message& request = keep(std::move(text));
    bool checked = false;
    asio::co_spawn(io, session->precheck(request, io.get_executor()), [&](std::exception_ptr e) {
      checked = true;
      if (e) std::rethrow_exception(e);
    });
    while (!checked && io.run_one_for(std::chrono::seconds(10)) > 0) {
    }
    EXPECT_TRUE(checked);
    between();
    const std::size_t from = connection->sent.size();
    session->handle(request);
    return answer_to(request, from, nullptr);
  }
  // Handles each request before the loop runs any, then runs it until all are answered (in order).
  std::vector<Message> call_together(std::vector<std::string> texts) {
    std::vector<const Message*> requests;
    const std::size_t from = connection->sent.size();
    for (auto& text : texts) requests.push_back(&keep(std::move(text)));
    for (const Message* request : requests) session->handle(*request);
    std::vector<Message> answers;
    for (const Message* request : requests) answers.push_back(answer_to(*request, from, nullptr));
    return answers;
  }
  std::string import(std::string params) {
    auto answer = call(fmt::format(R"({{"jsonrpc":"2.0","id":"i","method":"robot/import_library","params":{}}})", params));
    EXPECT_EQ(answer.kind, Message::Kind::response) << answer.text();
    return answer.kind == Message::Kind::response ? token_of(answer) : std::string();
  }
  Message run(std::string_view token, std::string_view keyword, std::string_view args = "[]",
              std::vector<Message>* notes = nullptr) {
    return call(fmt::format(R"({{"jsonrpc":"2.0","id":"k","method":"robot/run_keyword","params":{{"library_token":"{}","name":"{}","args":{}}}}})",
                            token, keyword, args),
                notes);
  }
  void reload(std::string_view settings) {
    context.router.update(std::make_shared<const config::Config>(config::load_string(library_toml(settings), "test.toml")));
  }
  std::uint64_t pickles_refused(supervisor::Direction direction) {
    return context.metrics.library("Fake").pickles_refused[static_cast<std::size_t>(direction)].load();
  }

  asio::io_context io;
  rjg::gateway::session::GatewayContext context;
  Journal journal;
  Script script;
  ScriptedLeases leases;
  std::shared_ptr<Recorder> connection;
  std::shared_ptr<rjg::gateway::session::ClientSession> session;

 private:
  const Message& keep(std::string text) { return kept_.emplace_back(parse(std::move(text))); }
  Message answer_to(const Message& request, std::size_t from, std::vector<Message>* notes) {
    for (;;) {
      auto& sent = connection->sent;
      for (std::size_t i = from; i < sent.size(); ++i) {
        if (sent[i].kind == Message::Kind::notification || sent[i].id_text() != request.id_text()) continue;
        if (notes)
          for (std::size_t j = from; j < i; ++j)
            if (sent[j].kind == Message::Kind::notification) notes->push_back(sent[j]);
        Message answer = sent[i];
        io.poll();  // what the request left running in the background (a lost lease ending) ends too
        return answer;
      }
      if (io.run_one_for(std::chrono::seconds(10)) == 0) throw std::runtime_error("no answer to " + request.text());
    }
  }
  std::deque<Message> kept_;  // the messages handled: views into them live as long as their handling
};

// A pickle of os.system: refused under data_only and deny. A pickle of the int 1: refused under deny only.
constexpr std::string_view kSystemPickle =
    R"({"__pickled__":"8004951d000000000000008c05706f736978948c0673797374656d9493948c02696494859452942e"})";
constexpr std::string_view kIntPickle = R"({"__pickled__":"80044b012e"})";

bool journal_has(const Journal& journal, std::string_view prefix) {
  for (auto& call : journal.calls)
    if (call.starts_with(prefix)) return true;
  return false;
}
std::string last_run(const Journal& journal) {
  for (auto it = journal.calls.rbegin(); it != journal.calls.rend(); ++it)
    if (it->starts_with("run ")) return *it;
  return "(no keyword ran)";
}

// (a) An import answer without a token fails as such, whatever else it carries: its result is not
// checked for pickles (it never reaches the client), so a refused pickle in it is neither named nor
// counted. With a token, the same result is refused; an error answer's data is checked either way.
TEST(ClientSessionPipeline, AnImportAnswerWithoutATokenFailsAsSuchEvenWithARefusedPickle) {
  DirectSession s("");
  s.script.import_answer = [](int n) {
    if (n == 1) return fmt::format(R"("result":{{"definition":{{"keywords":[{{"name":"K","args":[{}]}}]}}}})", kSystemPickle);
    if (n == 2) return fmt::format(R"("result":{{"token":"","x":{}}})", kSystemPickle);
    if (n == 3) return fmt::format(R"("result":{{"token":"w-3","x":{}}})", kSystemPickle);
    return fmt::format(R"("error":{{"code":-32000,"message":"no such library","data":{}}})", kSystemPickle);
  };
  auto no_token = s.call(R"({"jsonrpc":"2.0","id":1,"method":"robot/import_library","params":{"name":"Fake"}})");
  EXPECT_EQ(no_token.error_code(), protocol::kWorkerFailed) << no_token.text();
  EXPECT_NE(no_token.error_message().find("answered robot/import_library without a token"), std::string::npos)
      << no_token.text();
  EXPECT_EQ(no_token.error_message().find("posix.system"), std::string::npos) << no_token.text();
  EXPECT_EQ(s.journal.calls, (std::vector<std::string>{"acquire without arguments", R"(import {"name":""})",
                                                         "release (its import failed)"}));
  // An empty token is no token.
  auto empty_token = s.call(R"({"jsonrpc":"2.0","id":2,"method":"robot/import_library","params":{"name":"Fake"}})");
  EXPECT_EQ(empty_token.error_code(), protocol::kWorkerFailed) << empty_token.text();
  EXPECT_EQ(s.pickles_refused(supervisor::Direction::out), 0u);

  auto with_token = s.call(R"({"jsonrpc":"2.0","id":3,"method":"robot/import_library","params":{"name":"Fake"}})");
  EXPECT_EQ(with_token.error_code(), protocol::kPickleRefused) << with_token.text();
  EXPECT_NE(with_token.error_message().find("posix.system"), std::string::npos) << with_token.text();
  EXPECT_EQ(s.pickles_refused(supervisor::Direction::out), 1u);

  auto error = s.call(R"({"jsonrpc":"2.0","id":4,"method":"robot/import_library","params":{"name":"Fake"}})");
  EXPECT_EQ(error.error_code(), protocol::kPickleRefused) << error.text();
  EXPECT_EQ(s.pickles_refused(supervisor::Direction::out), 2u);
  EXPECT_EQ(s.journal.calls.back(), "release (its import failed)");
}

// (b) A large request's pickle check runs off the loop before it is handled (precheck). A reload
// between the two: an import is judged by the settings the router gives when it is handled (the
// precheck's verdict is dropped when the settings differ); a keyword by its import's settings, which a
// reload does not change, so the precheck's verdict holds.
TEST(ClientSessionPipeline, APrecheckedVerdictHoldsOnlyForTheSettingsItWasMadeUnder) {
  DirectSession s(R"(pickle = "deny")");
  const auto import_with_pickle =
      fmt::format(R"({{"jsonrpc":"2.0","id":"p","method":"robot/import_library","params":{{"name":"Fake","args":[{}]}}}})",
                  kIntPickle);
  // Refused by its precheck under "deny", handled under "allow": admitted, and the worker gets the pickle.
  auto admitted = s.call_prechecked(import_with_pickle, [&] { s.reload(R"(pickle = "allow")"); });
  EXPECT_EQ(admitted.kind, Message::Kind::response) << admitted.text();
  EXPECT_EQ(s.journal.calls.back(), fmt::format(R"(import {{"name":"","args":[{}]}})", kIntPickle));
  EXPECT_EQ(s.pickles_refused(supervisor::Direction::in), 0u);

  // Prechecked under "allow" (nothing to check), handled under "deny": refused before a worker is asked.
  s.journal.calls.clear();
  auto refused = s.call_prechecked(import_with_pickle, [&] { s.reload(R"(pickle = "deny")"); });
  EXPECT_EQ(refused.error_code(), protocol::kPickleRefused) << refused.text();
  EXPECT_TRUE(s.journal.calls.empty()) << ::testing::PrintToString(s.journal.calls);
  EXPECT_EQ(s.pickles_refused(supervisor::Direction::in), 1u);

  // A keyword: its import's settings ("deny", from its import) decide, before and after the reload.
  const std::string token = s.import(R"({"name":"Fake"})");
  s.journal.calls.clear();
  const auto keyword_with_pickle = fmt::format(
      R"({{"jsonrpc":"2.0","id":"k","method":"robot/run_keyword","params":{{"library_token":"{}","name":"K","args":[{}]}}}})",
      token, kIntPickle);
  auto keyword = s.call_prechecked(keyword_with_pickle, [&] { s.reload(R"(pickle = "allow")"); });
  EXPECT_EQ(keyword_error_text(keyword, "type"), protocol::keyword_error_type(protocol::kPickleRefused))
      << keyword.text();
  auto again = s.call(keyword_with_pickle);
  EXPECT_EQ(keyword_error_text(again, "type"), protocol::keyword_error_type(protocol::kPickleRefused)) << again.text();
  EXPECT_TRUE(s.journal.calls.empty()) << ::testing::PrintToString(s.journal.calls);
  EXPECT_EQ(s.pickles_refused(supervisor::Direction::in), 3u);
}

// (b) The import's pickle check runs a second time when the worker was granted under settings whose
// pickle policy differs from the route's (a reload between the lookup and the grant); the granted
// settings then govern the import and its keywords.
TEST(ClientSessionPipeline, AGrantUnderAnotherPicklePolicyChecksTheImportAgain) {
  DirectSession s(R"(pickle = "allow")");
  s.script.settings[1] = granted(R"(pickle = "deny")");
  s.script.settings[2] = granted(R"(pickle = "deny")");
  auto refused = s.call(fmt::format(
      R"({{"jsonrpc":"2.0","id":1,"method":"robot/import_library","params":{{"name":"Fake","args":[{}]}}}})", kIntPickle));
  EXPECT_EQ(refused.error_code(), protocol::kPickleRefused) << refused.text();
  EXPECT_EQ(s.journal.calls, (std::vector<std::string>{"acquire", "release (its import arguments were refused)"}));
  EXPECT_EQ(s.pickles_refused(supervisor::Direction::in), 1u);

  s.journal.calls.clear();
  const std::string token = s.import(R"({"name":"Fake","args":[1]})");
  auto keyword = s.run(token, "K", fmt::format("[{}]", kIntPickle));
  EXPECT_EQ(keyword_error_text(keyword, "type"), protocol::keyword_error_type(protocol::kPickleRefused))
      << keyword.text();
  EXPECT_FALSE(journal_has(s.journal, "run ")) << ::testing::PrintToString(s.journal.calls);
}

// (c) An import without arguments answered by the instance imported ahead (prewarm_import) sends the
// worker nothing, so nothing is escaped for it; its keywords are escaped as any import's. An import with
// arguments gets them escaped. The params kept for a re-import are the ones never sent (the name only):
// after a loss, the library is imported afresh with them, through an ordinary acquire.
TEST(ClientSessionPipeline, AnInstanceImportedAheadIsNotEscapedForButItsKeywordsAre) {
  DirectSession s(R"(arguments = "escape")");
  s.script.preimported = R"({"token":"w-ahead","definition":{}})";
  const std::string token = s.import(R"({"name":"Fake","args":[],"kw_args":{}})");
  EXPECT_EQ(s.journal.calls, std::vector<std::string>{"acquire without arguments"});
  auto ran = s.run(token, "K", R"(["${x}"])");
  EXPECT_TRUE(keyword_error_of(ran).empty()) << ran.text();
  EXPECT_EQ(s.journal.calls.back(), R"(run {"library_token":"w-ahead","name":"K","args":["\\${x}"]})");

  auto crashed = s.run(token, "Crash");
  EXPECT_EQ(keyword_error_text(crashed, "type"), protocol::keyword_error_type(protocol::kWorkerFailed));
  s.journal.calls.clear();
  auto again = s.run(token, "K", R"(["${y}"])");
  EXPECT_TRUE(keyword_error_of(again).empty()) << again.text();
  EXPECT_EQ(s.journal.calls.at(0), "acquire");
  EXPECT_EQ(s.journal.calls.at(1), R"(import {"name":"","args":[],"kw_args":{}})");
  EXPECT_EQ(last_run(s.journal), R"(run {"library_token":"w-2","name":"K","args":["\\${y}"]})");

  s.journal.calls.clear();
  s.import(R"({"name":"Fake","args":["${x}"]})");
  EXPECT_EQ(s.journal.calls, (std::vector<std::string>{"acquire", R"(import {"name":"","args":["\\${x}"]})"}));
}

// (d) A keyword on an import whose worker was lost imports the library again with the params the first
// worker got (escaped as sent), swaps the worker's token behind the client's (which stays the same),
// ends the lost lease with the old worker token, and says so in the keyword's log before its answer.
TEST(ClientSessionPipeline, AReimportKeepsTheClientsTokenAndSendsTheFirstImportsParams) {
  DirectSession s(R"(arguments = "escape")");
  const std::string token = s.import(R"({"name":"Fake","args":["${a}"]})");
  auto crashed = s.run(token, "Crash");
  EXPECT_NE(keyword_error_text(crashed, "message").find("imports it again"), std::string::npos) << crashed.text();
  s.journal.calls.clear();
  std::vector<Message> notes;
  auto ran = s.run(token, "Echo", R"(["${b}"])", &notes);
  EXPECT_TRUE(keyword_error_of(ran).empty()) << ran.text();
  EXPECT_EQ(ran.result().at("result"), json::parse(R"({"library_token":"w-2","name":"Echo","args":["\\${b}"]})"));
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_EQ(notes[0].params().at("level"), json::value("WARN"));
  EXPECT_NE(json::serialize(notes[0].params().at("message")).find("was imported again"), std::string::npos);
  EXPECT_EQ(s.journal.calls.at(0), "acquire");
  EXPECT_EQ(s.journal.calls.at(1), R"(import {"name":"","args":["\\${a}"]})");
  EXPECT_TRUE(journal_has(s.journal, R"(end {"token":"w-1"} (its worker was lost))"))
      << ::testing::PrintToString(s.journal.calls);
  EXPECT_EQ(last_run(s.journal), R"(run {"library_token":"w-2","name":"Echo","args":["\\${b}"]})");

  auto finalized = s.call(fmt::format(
      R"({{"jsonrpc":"2.0","id":"f","method":"robot/finalize_library","params":{{"token":"{}"}}}})", token));
  EXPECT_EQ(finalized.result_text(), "{}") << finalized.text();
  EXPECT_EQ(s.journal.calls.back(), R"(finalize {"token":"w-2"})");
}

// (d) The pickle checks on the re-import path. The re-import's answer goes nowhere, so it is not
// checked (a refused pickle in it does not stop the keyword), and one without a token fails that
// keyword only. The keyword that triggers a re-import was checked in under the lost import's settings;
// when the new worker was granted other settings (a reload between), it is checked in again under those
// before it is forwarded, and refused as any refused argument is: a pickle the new settings refuse never
// reaches the new worker. Its answer, and later keywords, are checked under the new settings.
TEST(ClientSessionPipeline, AReimportChecksTheKeywordAndItsAnswerUnderTheNewSettings) {
  DirectSession s(R"(pickle = "allow")");
  s.script.import_answer = [](int n) {
    if (n == 2) return std::string(R"("result":{"definition":{}})");
    return fmt::format(R"("result":{{"token":"w-{}","x":{}}})", n, n == 3 ? kSystemPickle : std::string_view("1"));
  };
  s.script.settings[3] = granted(R"(pickle = "deny")");
  const std::string token = s.import(R"({"name":"Fake","args":[1]})");
  s.run(token, "Crash");

  // Lease 2 answers without a token: this keyword fails, and says why; the next one tries again.
  auto failed = s.run(token, "K", fmt::format("[{}]", kIntPickle));
  EXPECT_EQ(keyword_error_text(failed, "type"), protocol::keyword_error_type(protocol::kWorkerFailed)) << failed.text();
  EXPECT_NE(keyword_error_text(failed, "message").find("answered robot/import_library without a token"), std::string::npos)
      << failed.text();
  EXPECT_EQ(s.journal.calls.back(), "release (its re-import failed)");

  // Lease 3: granted under "deny", its import answer carries os.system. The keyword was admitted under
  // "allow"; checked in again under "deny", it is refused, and worker 3 runs nothing.
  s.journal.calls.clear();
  std::vector<Message> notes;
  auto again = s.run(token, "K", fmt::format("[{}]", kIntPickle), &notes);
  EXPECT_EQ(keyword_error_text(again, "type"), protocol::keyword_error_type(protocol::kPickleRefused)) << again.text();
  EXPECT_FALSE(journal_has(s.journal, "run ")) << ::testing::PrintToString(s.journal.calls);
  EXPECT_TRUE(journal_has(s.journal, R"(end {"token":"w-1"} (its worker was lost))"))
      << ::testing::PrintToString(s.journal.calls);
  ASSERT_EQ(notes.size(), 1u) << "the re-import is told in the keyword's log, before its refusal";
  EXPECT_NE(json::serialize(notes[0].params().at("message")).find("was imported again"), std::string::npos);
  EXPECT_EQ(s.pickles_refused(supervisor::Direction::out), 0u) << "the re-import's answer is not checked";
  EXPECT_EQ(s.pickles_refused(supervisor::Direction::in), 1u);

  // Now under "deny": refused before the worker, with the same answer as the check in again gave.
  s.journal.calls.clear();
  auto refused = s.run(token, "K", fmt::format("[{}]", kIntPickle));
  EXPECT_EQ(keyword_error_text(refused, "type"), protocol::keyword_error_type(protocol::kPickleRefused)) << refused.text();
  EXPECT_EQ(keyword_error_text(refused, "message"), keyword_error_text(again, "message"));
  EXPECT_TRUE(s.journal.calls.empty()) << ::testing::PrintToString(s.journal.calls);
  EXPECT_EQ(s.pickles_refused(supervisor::Direction::in), 2u);

  // A keyword without pickles runs on worker 3; its answer is checked under "deny".
  auto ran = s.run(token, "K", "[1]");
  EXPECT_TRUE(keyword_error_of(ran).empty()) << ran.text();
  EXPECT_EQ(last_run(s.journal), R"(run {"library_token":"w-3","name":"K","args":[1]})");
  auto pickled = s.run(token, "Pickled");
  EXPECT_EQ(keyword_error_text(pickled, "type"), protocol::keyword_error_type(protocol::kPickleRefused)) << pickled.text();
  EXPECT_EQ(s.pickles_refused(supervisor::Direction::out), 1u);
}

// (d) Keywords that arrive while their import is being imported again were admitted under the lost
// import's settings too: each is checked in again under the settings the new worker was granted.
TEST(ClientSessionPipeline, KeywordsWaitingForAReimportAreCheckedInAgainUnderItsSettings) {
  DirectSession s(R"(pickle = "allow")");
  s.script.settings[2] = granted(R"(pickle = "deny")");
  const std::string token = s.import(R"({"name":"Fake","args":[1]})");
  s.run(token, "Crash");
  s.journal.calls.clear();
  auto answers = s.call_together({
      fmt::format(R"({{"jsonrpc":"2.0","id":"k1","method":"robot/run_keyword","params":{{"library_token":"{}","name":"K","args":[1]}}}})",
                  token),
      fmt::format(R"({{"jsonrpc":"2.0","id":"k2","method":"robot/run_keyword","params":{{"library_token":"{}","name":"K","args":[{}]}}}})",
                  token, kIntPickle),
  });
  ASSERT_EQ(answers.size(), 2u);
  EXPECT_TRUE(keyword_error_of(answers[0]).empty()) << answers[0].text();
  EXPECT_EQ(keyword_error_text(answers[1], "type"), protocol::keyword_error_type(protocol::kPickleRefused))
      << answers[1].text();
  EXPECT_EQ(std::count(s.journal.calls.begin(), s.journal.calls.end(), "acquire"), 1) << "one re-import";
  EXPECT_EQ(last_run(s.journal), R"(run {"library_token":"w-2","name":"K","args":[1]})");
  EXPECT_EQ(std::count_if(s.journal.calls.begin(), s.journal.calls.end(),
                          [](const std::string& call) { return call.starts_with("run "); }),
            1);
  EXPECT_EQ(s.pickles_refused(supervisor::Direction::in), 1u);
}

// (d) A re-import granted under settings that escape differently (a reload changed arguments) cannot
// send the first import's params again: the keyword fails, the new worker goes back, the next tries again.
TEST(ClientSessionPipeline, AReimportUnderOtherEscapingFailsItsKeyword) {
  DirectSession s(R"(arguments = "escape")");
  s.script.settings[2] = granted(R"(arguments = "as-is")");
  const std::string token = s.import(R"({"name":"Fake","args":["${a}"]})");
  s.run(token, "Crash");
  s.journal.calls.clear();
  auto failed = s.run(token, "K", R"(["${b}"])");
  EXPECT_EQ(keyword_error_text(failed, "type"), protocol::keyword_error_type(protocol::kWorkerFailed)) << failed.text();
  EXPECT_NE(keyword_error_text(failed, "message").find("a reload changed whether its worker gets argument strings escaped"),
            std::string::npos)
      << failed.text();
  EXPECT_EQ(s.journal.calls, (std::vector<std::string>{"acquire", "release (its re-import failed)"}));
  auto next = s.run(token, "K", R"(["${b}"])");
  EXPECT_TRUE(keyword_error_of(next).empty()) << next.text();
  EXPECT_EQ(last_run(s.journal), R"(run {"library_token":"w-3","name":"K","args":["\\${b}"]})");
}

}  // namespace
