// The gateway's protocol logic for one client: handshake, dispatch, imports, keyword calls, finalize,
// the import table and the leases' lifetimes. What happens to a request on its way to the worker and
// back (pickle checks, escaping, the relay of what the worker sends meanwhile, the token rewrite) is
// the RequestPipeline's. It sees classified messages and talks back through its Connection; it never
// touches a socket, so a unit test drives it over an in-memory stream with a fake LeaseSource. Keyword
// calls run as coroutines of their own, so a long keyword never blocks the connection (or any other).
// The handling of an import whose worker was lost (on_worker_loss) is in worker_loss.cpp.
#pragma once

#include "common/protocol/server_protocol.hpp"
#include "common/runtime/async_event.hpp"
#include "gateway/session/connection.hpp"
#include "gateway/session/context.hpp"
#include "gateway/session/reply.hpp"
#include "gateway/session/request_pipeline.hpp"
#include "gateway/session/token_map.hpp"

#include <memory>
#include <string>
#include <string_view>

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
  // For a large request, before handle(): its pickle check, off the event loop (RequestPipeline::precheck).
  asio::awaitable<void> precheck(const protocol::Message& message, asio::any_io_executor pool) {
    return pipeline_.precheck(message, std::move(pool), tokens_);
  }
  // Forgets what precheck() found, when the message will not be handled after all.
  void clear_precheck() { pipeline_.clear_precheck(); }

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
  // Runs a request handler as its own coroutine, so reading goes on.
  void spawn(asio::awaitable<void> task, std::string what);

  using Failure = RequestPipeline::Failure;
  asio::awaitable<void> import_library(Reply reply, protocol::ImportLibrary params,
                                       std::shared_ptr<const config::Library> route);
  asio::awaitable<void> run_keyword(Reply reply, RequestPipeline::KeywordCall call);
  asio::awaitable<void> finalize_library(Reply reply, Import import);

  // worker_loss.cpp
  // Answers a keyword on an import whose worker was lost, as the library's on_worker_loss says; false
  // while the worker serves.
  bool on_lost_worker(Reply& reply, protocol::RunKeyword& params, const Import& import);
  // A keyword on an import whose worker was lost: imports the library again (once, however many keywords
  // wait for it) with the params of the first import, tells the client's log, checks the keyword in again
  // when the import's settings are no longer `checked_under` (those it was admitted under), then runs it.
  asio::awaitable<void> reimport_then_run(Reply reply, protocol::RunKeyword params,
                                          std::shared_ptr<const config::Library> checked_under);
  // A keyword failed because its worker is gone: so is the import's instance. The failure says what the
  // next keyword on the token gets.
  void worker_lost_in(const RequestPipeline::KeywordCall& call, Failure& failure);
  // Whether the import's worker is gone: a keyword failed with it, or the lease says so.
  static bool worker_lost(const Import& import);
  static std::string lost_reason(const Import& import);

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
  RequestPipeline pipeline_;
  bool ending_ = false;
  std::size_t requests_in_flight_ = 0;  // unanswered requests of this connection
  std::size_t pending_bytes_ = 0;       // the text of those requests, in bytes
  std::size_t background_ = 0;          // imports, keywords and finalizes still running
  runtime::AsyncEvent background_done_;
};

}  // namespace rjg::gateway::session
