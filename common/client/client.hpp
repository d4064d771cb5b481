// A blocking protocol client over TCP, for the command-line tool, integration tests and benchmarks.
// Each call blocks its caller: inside, a private io_context drives the one MessageStream (framing,
// reader, write queue) that every other protocol peer uses, with a deadline on every read and write
// so nothing can hang forever.
#pragma once

#include "common/protocol/message.hpp"

#include <boost/json.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace rjg::client {

namespace json = boost::json;

// A transport or protocol failure: the connection cannot be trusted any more (except for timeouts).
class RpcError : public std::runtime_error {
 public:
  enum class Kind { connect, timeout, closed, io, framing, protocol };
  RpcError(Kind kind, const std::string& what) : std::runtime_error(what), kind_(kind) {}
  Kind kind() const { return kind_; }

 private:
  Kind kind_;
};

// The server answered a convenience call (initialize) with a JSON-RPC error.
class RpcCallError : public std::runtime_error {
 public:
  RpcCallError(int code, const std::string& message)
      : std::runtime_error(message + " (JSON-RPC error " + std::to_string(code) + ")"), code_(code),
        message_(message) {}
  int code() const { return code_; }
  const std::string& server_message() const { return message_; }

 private:
  int code_;
  std::string message_;
};

// The answer to one request: exactly one of result and error is set.
struct RpcReply {
  json::value id;  // as the server sent it; null for an error response without id
  std::string text;  // the answer's body as received, byte for byte (number texts as the server wrote them)
  std::optional<json::value> result;
  std::optional<json::object> error;

  bool ok() const { return result.has_value(); }
  // error.code, or 0 for a successful reply.
  int error_code() const;
  // error.message, or "" for a successful reply.
  std::string error_message() const;
  // For run_keyword: the RunKeywordResult's "error" object (keyword failed), if any. The gateway answers
  // every failure of a keyword call this way, its own decisions included (a refused pickle, a crashed
  // worker, a keyword timeout): robot/run_keyword is never answered with a JSON-RPC error.
  const json::object* keyword_error() const;
  // keyword_error()'s "type" ("" when it has none, or when the keyword did not fail).
  std::string keyword_error_type() const;
  // What went wrong, whichever way the server said it: the keyword error's message when the result
  // carries one, else the JSON-RPC error's message ("" for a reply that succeeded).
  std::string failure_message() const;
};

class RpcClient {
 public:
  using NotificationHandler = std::function<void(const protocol::Message&)>;
  using Clock = std::chrono::steady_clock;

  static constexpr std::chrono::milliseconds kDefaultTimeout{30'000};

  explicit RpcClient(std::chrono::milliseconds read_timeout = kDefaultTimeout);
  ~RpcClient();
  RpcClient(RpcClient&&) noexcept;
  RpcClient& operator=(RpcClient&&) noexcept;
  RpcClient(const RpcClient&) = delete;
  RpcClient& operator=(const RpcClient&) = delete;

  // Connects to host:port (throws RpcError{connect} on failure, naming the address).
  void connect(const std::string& host, std::uint16_t port);
  // Parses "tcp://HOST:PORT" (or "HOST:PORT") and connects.
  void connect(std::string_view uri);
  bool connected() const;

  // Default deadline for every read and write.
  void set_timeout(std::chrono::milliseconds timeout);
  std::chrono::milliseconds timeout() const;
  // Name and version sent in robot/initialize's client_info.
  void set_client_info(std::string name, std::string version);

  // Sends a request with a fresh string id ("1", "2", ...) and reads until the answer with that id.
  // Notifications that arrive meanwhile go to on_notification in arrival order; other stray
  // messages are kept for read_message(). An error response without id (the reference server's
  // answer to some faults) is taken as the answer. Throws RpcError on timeout or a broken stream.
  RpcReply request(std::string_view method, json::value params, const NotificationHandler& on_notification = {});
  // The same with an id of the caller's choice (integer ids, odd strings).
  RpcReply request_with_id(const json::value& id, std::string_view method, json::value params,
                           const NotificationHandler& on_notification = {});
  // Sends a request without waiting; returns the id used. Pair with wait_reply().
  json::value send_request(std::string_view method, json::value params);
  void send_request_with_id(const json::value& id, std::string_view method, json::value params);
  // Reads until the answer to id arrives (see request()). timeout 0 means the default.
  RpcReply wait_reply(const json::value& id, const NotificationHandler& on_notification = {},
                      std::chrono::milliseconds timeout = std::chrono::milliseconds{0});
  void notify(std::string_view method, json::value params);

  // Low level, for tests.
  void send_raw(std::string_view bytes);
  // The next message (kept stray messages first); nullopt when none arrives within timeout.
  // Throws RpcError{closed} if the peer closed the connection, RpcError{framing|protocol} on bad
  // bytes. timeout < 0 means the default; 0 means only what is already there (poll).
  std::optional<protocol::Message> read_message(std::chrono::milliseconds timeout = std::chrono::milliseconds{-1});
  // True once the peer has closed the connection (EOF or reset) within timeout; messages that arrive
  // meanwhile are kept for read_message().
  bool wait_closed(std::chrono::milliseconds timeout);
  void close();
  // Messages received but not yet handed out.
  std::size_t pending_messages() const;

  // Convenience calls in the order the real client makes them.
  // robot/initialize with client_info, then robot/initialized; returns the InitializeResult.
  // Throws RpcCallError if the server answers with an error.
  json::object initialize();
  RpcReply import_library(std::string_view name, json::array args = {}, json::object kw_args = {});
  RpcReply run_keyword(std::string_view token, std::string_view name, json::array args = {},
                       json::object kwargs = {}, const NotificationHandler& on_log = {});
  RpcReply finalize_library(std::string_view token);
  RpcReply shutdown();
  void exit();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// "tcp://HOST:PORT" or "HOST:PORT" -> host and port; false if malformed.
bool parse_tcp_uri(std::string_view uri, std::string& host, std::uint16_t& port);

}  // namespace rjg::client
