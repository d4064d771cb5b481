// JSON-RPC 2.0 message model: every incoming body is classified exactly once, here.
#pragma once

#include <boost/json.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <variant>

namespace rjg {

namespace json = boost::json;

struct JsonLimits {
  std::size_t max_depth = 64;
};

// A classified message. The whole object is kept so that unknown fields travel unchanged.
struct Message {
  enum class Kind { request, notification, response, error_response };
  Kind kind;
  json::object object;

  // request, response, error_response (an error response may carry a null id)
  const json::value& id() const;
  // request, notification
  std::string_view method() const;
  // request, notification: params, or null when absent
  const json::value& params() const;
  json::value& params();
  // response
  const json::value& result() const;
  // error_response
  const json::object& error() const;
};

// Why a body could not be classified, and what to answer (id is null when it could not be read).
struct ProtocolError {
  int code;
  std::string message;
  json::value id;  // null when unknown
};

using Classified = std::variant<Message, ProtocolError>;

// Parses and classifies one frame body: -32700 for invalid JSON, -32600 for an invalid message.
Classified parse_message(std::string_view body, const JsonLimits& limits = {});
// Classifies an already-parsed value.
Classified classify(json::value value);

// Why a server cannot dispatch a client's request or notification: the method is not one the
// protocol defines for clients, or it came as the wrong kind (a notification with an id, a request
// without one). A request gets an error answer (answer = true); a notification can only be logged.
struct Unroutable {
  bool answer;
  int code;
  std::string message;
};
std::optional<Unroutable> check_client_method(const Message& message);

// Builders. Each returns the serialized JSON text (without framing).
std::string make_request(const json::value& id, std::string_view method, json::value params);
std::string make_notification(std::string_view method, json::value params);
std::string make_result(const json::value& id, json::value result);
std::string make_error(const json::value& id, int code, std::string_view message,
                       std::optional<json::value> data = std::nullopt);

// A short printable form of an id for log lines: "1", "\"abc\"".
std::string id_to_string(const json::value& id);

}  // namespace rjg
