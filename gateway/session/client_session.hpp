// The gateway's protocol logic for one client: handshake, imports, keyword calls, finalize, the
// token map, the pickle policy and the log relay. It sees classified messages and talks back through
// its Connection; it never touches a socket, so a unit test drives it over an in-memory stream with
// a fake LeaseSource. Keyword calls run as coroutines of their own, so a long keyword never blocks
// the connection (or any other).
#pragma once

#include "common/protocol/server_protocol.hpp"
#include "common/runtime/async_event.hpp"
#include "gateway/session/connection.hpp"
#include "gateway/session/context.hpp"
#include "gateway/session/pickle_guard.hpp"
#include "gateway/session/reply.hpp"
#include "gateway/session/token_map.hpp"

#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace rjg::gateway::session {

class ClientSession : public protocol::ServerMethods, public std::enable_shared_from_this<ClientSession> {
 public:
  // config: the configuration when the client connected, which its limits come from.
  ClientSession(GatewayContext& context, std::shared_ptr<const config::Config> config, supervisor::LeaseSource& leases,
                std::weak_ptr<Connection> connection, std::string name, asio::any_io_executor executor);
  ~ClientSession() override;

  // One message from the client, classified by the transport.
  void handle(const protocol::Message& message);
  // A frame whose body is not a valid message.
  void handle_invalid(const protocol::ProtocolError& problem);
  // For a large request, before handle(): binds its params and runs its pickle check on `pool` (off
  // the event loop); handle() then uses that verdict instead of checking on the loop. The caller
  // awaits it before handling the message and before reading the next, so order is kept.
  asio::awaitable<void> precheck(const protocol::Message& message, asio::any_io_executor pool);
  // Forgets what precheck() found, when the message will not be handled after all.
  void clear_precheck() { prechecked_.reset(); }

  bool handshake_started() const { return protocol_.initialize_received(); }
  // Imports, keywords or finalizes are running for this session.
  bool busy() const { return background_ > 0; }
  // Why the import of `token` lost its worker ("" while it serves, or when there is no such import).
  std::string import_lost(std::string_view token) const;
  // Bytes of request text this connection has waiting for an answer (counted by each Reply).
  std::size_t pending_bytes() const { return pending_bytes_; }
  std::size_t requests_in_flight() const { return requests_in_flight_; }
  // The connection is closing: every import ends (dedicated workers stop, shared ones finalize the
  // instance); completes once the session's tasks are done (bounded).
  asio::awaitable<void> end(std::string why);

  // What the worker of a call sends meanwhile (robot/log, robot/trace), after the library's pickle policy
  // (CallRelay, the observer each call hands its lease): to the client, in order, ahead of the answer.
  void relay_notification(std::string_view json_text);
  // Room in the client's write queue, which a worker relaying logs waits for (back-pressure).
  asio::awaitable<void> wait_for_room();

  // ServerMethods
  void on_initialize(const protocol::Message& request, protocol::Initialize params) override;
  void on_initialized(const protocol::Message& notification) override;
  void on_import_library(const protocol::Message& request, protocol::ImportLibrary params) override;
  void on_run_keyword(const protocol::Message& request, protocol::RunKeyword params) override;
  void on_finalize_library(const protocol::Message& request, protocol::FinalizeLibrary params) override;
  void on_shutdown(const protocol::Message& request) override;
  void on_exit(const protocol::Message& notification) override;
  void refuse(const protocol::Message& request, int code, std::string message) override;
  void ignore(const protocol::Message& message, std::string why) override;

 private:
  friend class Reply;

  void send(std::string json_text);
  // Answers wait for room in the client's write queue, as relayed logs do: the queue stays within its
  // high-water mark plus one message. Await it right before answering, with no suspension between.
  asio::awaitable<void> room_for_answer();
  // session::refuse_pickles for the arguments of the request being handled, except that a verdict
  // precheck() computed off the loop for exactly these values is used as it is.
  std::optional<PickleRefusal> refuse_argument_pickles(
      const config::Library& library, std::initializer_list<std::pair<std::string_view, std::string_view>> values);
  // session::refuse_pickles for the values of a worker's answer (a second one may be empty); off the
  // loop when they are large.
  asio::awaitable<std::optional<PickleRefusal>> refuse_answer_pickles(
      const config::Library& library, std::pair<std::string_view, std::string_view> first,
      std::pair<std::string_view, std::string_view> second = {});
  // Runs a request handler as its own coroutine, so reading goes on.
  void spawn(asio::awaitable<void> task, std::string what);

  asio::awaitable<void> import_library(Reply reply, protocol::ImportLibrary params,
                                       std::shared_ptr<const config::Library> route);
  asio::awaitable<void> run_keyword(Reply reply, std::string worker_params, std::string keyword, Import import);
  // A keyword on an import whose worker was lost: imports the library again (once, however many keywords
  // wait for it) with the params of the first import, tells the client's log, then runs the keyword.
  asio::awaitable<void> reimport_then_run(Reply reply, protocol::RunKeyword params);
  // Whether the import's worker is gone: a keyword failed with it, or the lease says so.
  static bool worker_lost(const Import& import);
  static std::string lost_reason(const Import& import);
  asio::awaitable<void> finalize_library(Reply reply, Import import);
  void count_imports();  // for /status
  static asio::awaitable<void> end_import(std::shared_ptr<supervisor::Lease> lease, std::string finalize_params,
                                          std::string why);

  GatewayContext& context_;
  std::shared_ptr<const config::Config> config_;
  supervisor::LeaseSource& leases_;
  std::weak_ptr<Connection> connection_;
  std::shared_ptr<SessionActivity> activity_;  // the connection's: what /status shows of this session
  std::string name_;
  protocol::ServerProtocol protocol_;
  TokenMap tokens_;
  bool ending_ = false;
  std::size_t requests_in_flight_ = 0;  // unanswered requests of this connection
  std::size_t pending_bytes_ = 0;       // the text of those requests, in bytes
  struct Prechecked {
    const protocol::Message* message;  // the message it was computed for: it applies to that one only
    std::shared_ptr<const config::Library> library;
    std::vector<std::pair<std::string, std::string_view>> values;  // views into the message being handled
    std::optional<PickleRefusal> verdict;
  };
  std::optional<Prechecked> prechecked_;  // set by precheck() for the message handle() is about to see
  std::size_t background_ = 0;          // imports, keywords and finalizes still running
  runtime::AsyncEvent background_done_;
};

}  // namespace rjg::gateway::session
