// One client connection: a read loop that classifies each frame once and dispatches it through a
// method table, a single writer draining the connection's write queue, and the token map of the
// libraries this connection imported. Keyword calls run concurrently with reading, so a long keyword
// never blocks the connection (or any other).
#pragma once

#include "common/protocol/framing.hpp"
#include "common/protocol/message.hpp"
#include "common/runtime/write_queue.hpp"
#include "gateway/context.hpp"
#include "gateway/token_map.hpp"

#include <boost/asio/ip/tcp.hpp>

#include <memory>
#include <string>

namespace rjg::gateway {

using tcp = asio::ip::tcp;
class Session;

// Answers one request exactly once. Dropping it unanswered answers with an internal error and logs a
// bug; answering twice is logged as a bug and the second answer is not sent.
class Reply {
 public:
  Reply(std::shared_ptr<Session> session, json::value id, std::string method);
  Reply(Reply&& other) noexcept;
  Reply& operator=(Reply&&) = delete;
  ~Reply();

  void result(json::value result);
  void error(int code, std::string_view message, std::optional<json::value> data = std::nullopt);
  // Sends a worker's response object with the client's id put back; everything else unchanged.
  void forward(json::object response);
  const json::value& id() const { return id_; }

 private:
  bool claim();
  std::shared_ptr<Session> session_;
  json::value id_;
  std::string method_;
  bool answered_ = false;
};

class Session : public workers::CallObserver, public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, GatewayContext& context, std::uint64_t number);
  ~Session() override;

  void start();
  // Stops reading, ends this connection's workers, flushes what is queued, closes the socket.
  void close(std::string why);
  // Waits until close() has finished its work.
  asio::awaitable<void> wait_closed() { co_await closed_.wait(); }
  bool closing() const { return closing_; }
  const std::string& name() const { return name_; }

  // workers::CallObserver
  void relay_notification(std::string_view body) override;
  asio::awaitable<void> wait_for_room() override;

 private:
  friend class Reply;
  using Handler = void (Session::*)(Message&);

  asio::awaitable<void> read_loop();
  // Closes the connection when handshake_timeout, read_timeout or idle_timeout passes.
  asio::awaitable<void> watchdog();
  asio::awaitable<void> teardown(std::string why);
  void send(std::string json_text);
  void dispatch(Message message);
  // Runs a request handler as its own coroutine, so the read loop goes on.
  void spawn_request(asio::awaitable<void> handler, std::string what);

  void on_initialize(Message& m);
  void on_initialized(Message& m);
  void on_import_library(Message& m);
  void on_run_keyword(Message& m);
  void on_finalize_library(Message& m);
  void on_shutdown(Message& m);
  void on_exit(Message& m);

  asio::awaitable<void> import_library(Reply reply, json::object params);
  asio::awaitable<void> run_keyword(Reply reply, json::object params, Import import);
  asio::awaitable<void> finalize_library(Reply reply, Import import);
  asio::awaitable<Message> finalize_in_worker(const Import& import);
  // Ends one import: finalized in a shared worker, or its dedicated worker stopped.
  asio::awaitable<void> end_import(Import import, std::string reason);
  // Fails the request and returns false unless the handshake is complete.
  bool require_initialized(Reply& reply, std::string_view method);

  tcp::socket socket_;
  GatewayContext& context_;
  std::string name_;  // "session 7 (127.0.0.1:51234)", for log lines
  WriteQueue<tcp::socket> write_queue_;
  FrameReader reader_;
  TokenMap tokens_;
  bool initialize_received_ = false;
  bool initialized_received_ = false;
  bool closing_ = false;
  std::size_t requests_in_flight_ = 0;  // unanswered requests of this connection
  std::size_t background_ = 0;  // imports, keywords and worker stops still running for this session
  AsyncEvent background_done_;
  AsyncEvent closed_;
  // Watchdog state: when the connection opened, when the frame being read began (none: between
  // frames), when the last message arrived or the last request finished.
  AsyncEvent::clock::time_point connected_at_;
  std::optional<AsyncEvent::clock::time_point> frame_started_;
  AsyncEvent::clock::time_point last_activity_;
  AsyncEvent watchdog_wake_;
};

}  // namespace rjg::gateway
