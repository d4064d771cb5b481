// The server side of the protocol, once for every server (the gateway's client sessions and the
// SDK's sessions): the method table, the handshake state, and typed dispatch.
//
// A server implements ServerMethods; ServerProtocol::dispatch checks each client message (method
// known, request or notification as the protocol defines it, handshake complete where it must be,
// params bound) and calls the matching handler with typed params, or answers the request with the
// one error that says what is wrong.
#pragma once

#include "common/protocol/message.hpp"
#include "common/protocol/params.hpp"

#include <string>
#include <string_view>

namespace rjg::protocol {

class ServerMethods {
 public:
  virtual ~ServerMethods() = default;
  virtual void on_initialize(const Message& request, protocol::Initialize params) = 0;
  virtual void on_initialized(const Message& notification) = 0;
  virtual void on_import_library(const Message& request, protocol::ImportLibrary params) = 0;
  virtual void on_run_keyword(const Message& request, protocol::RunKeyword params) = 0;
  virtual void on_finalize_library(const Message& request, protocol::FinalizeLibrary params) = 0;
  virtual void on_shutdown(const Message& request) = 0;
  virtual void on_exit(const Message& notification) = 0;

  // A request that cannot be dispatched: answer it with this error.
  virtual void refuse(const Message& request, int code, std::string message) = 0;
  // A notification that cannot be dispatched, or a response from the client (a server sends no
  // requests): nothing can be answered; the server logs it.
  virtual void ignore(const Message& message, std::string why) = 0;
};

class ServerProtocol {
 public:
  void dispatch(const Message& message, ServerMethods& methods);

  bool initialize_received() const { return initialize_received_; }
  // robot/initialize answered and robot/initialized received: libraries may be imported.
  bool ready() const { return initialize_received_ && initialized_received_; }

 private:
  bool require_ready(const Message& request, ServerMethods& methods) const;

  bool initialize_received_ = false;
  bool initialized_received_ = false;
};

}  // namespace rjg::protocol
