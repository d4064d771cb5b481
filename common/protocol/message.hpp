// JSON-RPC 2.0 message model: every incoming body is classified exactly once, here.
//
// A Message keeps the frame body byte for byte. Classification finds the envelope (id, method,
// params, result, error) without building a tree, so whoever relays a message rewrites only what it
// owns (an id, a token) and every other byte travels unchanged: number texts, string escapes,
// unknown fields. Tree views (params(), result(), ...) parse on demand, for tools, tests and the
// SDK; the gateway's relay path does not use them.
#pragma once

#include "common/protocol/json_text.hpp"

#include <boost/json.hpp>

#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

namespace rjg::protocol {

namespace json = boost::json;

struct JsonLimits {
  std::size_t max_depth = 64;
  // Members of any one object ([gateway] max_object_members on a client connection; a worker's
  // messages are not bounded).
  std::size_t max_object_members = std::numeric_limits<std::size_t>::max();
};

class Message {
 public:
  enum class Kind { request, notification, response, error_response };
  Kind kind = Kind::notification;

  // The frame body as received.
  const std::string& text() const { return text_; }
  // request, notification
  const std::string& method() const { return method_; }
  // request, response, error_response: the id's JSON text as sent ("7", "\"abc\""); "null" when
  // absent (an error response may carry a null id).
  std::string_view id_text() const { return id_ ? id_->of(text_) : std::string_view("null"); }
  // request, notification: the params' text; "" when absent.
  std::string_view params_text() const { return params_ ? params_->of(text_) : std::string_view(); }
  protocol::Kind params_kind() const { return params_kind_; }
  // response: the result's text.
  std::string_view result_text() const { return result_ ? result_->of(text_) : std::string_view("null"); }
  // error_response: error.code (truncated to int), error.message ("" when not a string), and
  // error.data's text ("" when absent).
  int error_code() const { return error_code_; }
  const std::string& error_message() const { return error_message_; }
  std::string_view error_data_text() const { return error_data_ ? error_data_->of(text_) : std::string_view(); }

  // Where the result is in text(), for edits inside it (response).
  std::optional<Slice> result_slice() const { return result_; }
  // The same message with another id and the given edits of text(), every other byte unchanged.
  std::string with_id(std::string_view id_text, std::vector<std::pair<Slice, std::string>> edits = {}) const;

  // Tree views, parsed on demand (null / empty when absent).
  json::value id() const;
  json::value params() const;
  json::value result() const;
  json::object error() const;

 private:
  friend struct MessageAccess;  // parse_message fills it in
  std::string text_;
  std::string method_;
  std::optional<Slice> id_, params_, result_, error_data_;
  protocol::Kind params_kind_ = protocol::Kind::null;
  int error_code_ = 0;
  std::string error_message_;
};

// Why a body could not be classified, and what to answer.
struct ProtocolError {
  int code;
  std::string message;
  std::string id_text = "null";  // the request's id when it could be read
  // For a body over a limit (max_json_depth, max_object_members), its top-level "method" when it could be
  // read: a robot/run_keyword is then answered as the keyword's failure. Empty otherwise.
  std::string method{};
};

using Classified = std::variant<Message, ProtocolError>;

// Validates and classifies one frame body: -32700 for invalid JSON, -32600 for an invalid message (or
// an object with more members than the limit). Either answer carries the request's id when it can be
// read, even from a body that is not JSON (top_level_id). An id is a string or a finite number;
// NaN and Infinity are refused as ids, as the gateway never writes them.
Classified parse_message(std::string_view body, const JsonLimits& limits = {});

// The id of a body that may not be valid JSON: the text of the last "id" member at the top level of
// the object (never one nested deeper), when it is a valid id; "null" otherwise. A lenient scan that
// skips broken values, and stops where the object's structure breaks. Linear in the body.
std::string top_level_id(std::string_view body);
// The same lenient scan for the top-level "method": its decoded text when it is a string; "" otherwise.
std::string top_level_method(std::string_view body);

// Why a server cannot dispatch a client's request or notification: the method is not one the
// protocol defines for clients, or it came as the wrong kind (a notification with an id, a request
// without one). A request gets an error answer (answer = true); a notification can only be logged.
struct Unroutable {
  bool answer;
  int code;
  std::string message;
};
std::optional<Unroutable> check_client_method(const Message& message);

// Builders from JSON texts (an id as sent, params or a result passed on unchanged). Each returns the
// message's JSON text, without framing.
std::string make_request_raw(std::string_view id_text, std::string_view method, std::string_view params_text);
std::string make_notification_raw(std::string_view method, std::string_view params_text);
std::string make_result_raw(std::string_view id_text, std::string_view result_text);
std::string make_error_raw(std::string_view id_text, int code, std::string_view message,
                           std::string_view data_text = {});

// Builders from values, for messages a program makes up itself.
std::string make_request(const json::value& id, std::string_view method, const json::value& params);
std::string make_notification(std::string_view method, const json::value& params);
std::string make_result(const json::value& id, const json::value& result);
std::string make_error(const json::value& id, int code, std::string_view message,
                       const std::optional<json::value>& data = std::nullopt);

// A short printable form of an id for log lines: "1", "\"abc\"".
std::string id_to_string(const json::value& id);

// Parses a JSON text that is known to be valid (a slice of a classified message) into a tree.
json::value parse_value(std::string_view text);

}  // namespace rjg::protocol
