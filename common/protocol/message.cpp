#include "common/protocol/message.hpp"

#include "common/protocol/protocol.hpp"

#include <fmt/format.h>

#include <cmath>

namespace rjg {
namespace {
const json::value kNull;
const json::object kEmptyObject;

bool all_finite(const json::value& v) {
  switch (v.kind()) {
    case json::kind::double_: return std::isfinite(v.get_double());
    case json::kind::array:
      for (const auto& e : v.get_array())
        if (!all_finite(e)) return false;
      return true;
    case json::kind::object:
      for (const auto& m : v.get_object())
        if (!all_finite(m.value())) return false;
      return true;
    default: return true;
  }
}

bool valid_id(const json::value& v) { return v.is_string() || v.is_int64() || v.is_uint64() || v.is_double(); }
}  // namespace

const json::value& Message::id() const {
  auto it = object.find("id");
  return it == object.end() ? kNull : it->value();
}

std::string_view Message::method() const {
  auto it = object.find("method");
  if (it == object.end() || !it->value().is_string()) return {};
  return it->value().get_string();
}

const json::value& Message::params() const {
  auto it = object.find("params");
  return it == object.end() ? kNull : it->value();
}

json::value& Message::params() {
  auto it = object.find("params");
  if (it == object.end()) return object["params"];
  return it->value();
}

const json::value& Message::result() const {
  auto it = object.find("result");
  return it == object.end() ? kNull : it->value();
}

const json::object& Message::error() const {
  auto it = object.find("error");
  return it == object.end() || !it->value().is_object() ? kEmptyObject : it->value().get_object();
}

Classified parse_message(std::string_view body, const JsonLimits& limits) {
  json::parse_options options;
  options.max_depth = limits.max_depth;
  json::error_code ec;
  json::value value = json::parse(body, ec, {}, options);
  if (ec) {
    std::string what = ec == json::error::too_deep
                           ? fmt::format("Parse error: JSON nesting is deeper than {} levels", limits.max_depth)
                           : fmt::format("Parse error: {}", ec.message());
    return ProtocolError{protocol::kParseError, std::move(what), nullptr};
  }
  // Boost.JSON reads 1e400 as infinity and would write it back as "Infinity", which no JSON parser
  // (a worker, a client) accepts: refuse it here, where the sender can still be told.
  if (!all_finite(value))
    return ProtocolError{protocol::kParseError, "Parse error: a number is out of the range of a double", nullptr};
  return classify(std::move(value));
}

Classified classify(json::value value) {
  if (!value.is_object()) {
    return ProtocolError{protocol::kInvalidRequest,
                         value.is_array() ? "Invalid Request: batch messages are not supported"
                                          : "Invalid Request: a message must be a JSON object",
                         nullptr};
  }
  json::object& obj = value.get_object();
  json::value id = nullptr;
  bool has_id = false;
  if (auto it = obj.find("id"); it != obj.end()) {
    has_id = true;
    if (valid_id(it->value())) id = it->value();
  }
  auto invalid = [&](std::string message) {
    return ProtocolError{protocol::kInvalidRequest, "Invalid Request: " + std::move(message), id};
  };

  auto version = obj.find("jsonrpc");
  if (version == obj.end() || !version->value().is_string() || version->value().get_string() != "2.0")
    return invalid("\"jsonrpc\" must be \"2.0\"");

  if (auto method = obj.find("method"); method != obj.end()) {
    if (!method->value().is_string()) return invalid("\"method\" must be a string");
    if (auto params = obj.find("params"); params != obj.end()) {
      const auto& p = params->value();
      if (!p.is_object() && !p.is_array() && !p.is_null())
        return invalid("\"params\" must be an object or an array");
    }
    if (!has_id) return Message{Message::Kind::notification, std::move(obj)};
    if (!valid_id(obj.at("id"))) return invalid("\"id\" must be a string or a number");
    return Message{Message::Kind::request, std::move(obj)};
  }

  if (!has_id) return invalid("a message needs \"method\" or \"id\"");
  const bool has_result = obj.contains("result");
  const bool has_error = obj.contains("error");
  if (has_result == has_error) return invalid("a response needs exactly one of \"result\" and \"error\"");
  if (has_error) {
    const auto& err = obj.at("error");
    if (!err.is_object() || !err.get_object().contains("code") || !err.get_object().at("code").is_number())
      return invalid("\"error\" must be an object with a numeric \"code\"");
    return Message{Message::Kind::error_response, std::move(obj)};
  }
  if (!valid_id(obj.at("id"))) return invalid("\"id\" must be a string or a number");
  return Message{Message::Kind::response, std::move(obj)};
}

std::optional<Unroutable> check_client_method(const Message& message) {
  const bool is_request = message.kind == Message::Kind::request;
  auto expected = protocol::client_method_is_request(message.method());
  if (!expected) {
    return Unroutable{is_request, protocol::kMethodNotFound,
                      fmt::format("Method '{}' not found. This server handles robot/initialize, robot/initialized, "
                                  "robot/import_library, robot/run_keyword, robot/finalize_library, robot/shutdown "
                                  "and robot/exit.",
                                  message.method())};
  }
  if (*expected == is_request) return std::nullopt;
  if (is_request)
    return Unroutable{true, protocol::kInvalidRequest,
                      fmt::format("{} is a notification: send it without an id", message.method())};
  return Unroutable{false, protocol::kInvalidRequest,
                    fmt::format("{} is a request and needs an id: sent as a notification, it cannot be answered",
                                message.method())};
}

std::string make_request(const json::value& id, std::string_view method, json::value params) {
  json::object o;
  o["jsonrpc"] = "2.0";
  o["id"] = id;
  o["method"] = method;
  o["params"] = std::move(params);
  return json::serialize(o);
}

std::string make_notification(std::string_view method, json::value params) {
  json::object o;
  o["jsonrpc"] = "2.0";
  o["method"] = method;
  o["params"] = std::move(params);
  return json::serialize(o);
}

std::string make_result(const json::value& id, json::value result) {
  json::object o;
  o["jsonrpc"] = "2.0";
  o["id"] = id;
  o["result"] = std::move(result);
  return json::serialize(o);
}

std::string make_error(const json::value& id, int code, std::string_view message, std::optional<json::value> data) {
  json::object err;
  err["code"] = code;
  err["message"] = message;
  if (data) err["data"] = std::move(*data);
  json::object o;
  o["jsonrpc"] = "2.0";
  o["id"] = id;
  o["error"] = std::move(err);
  return json::serialize(o);
}

std::string id_to_string(const json::value& id) { return json::serialize(id); }

}  // namespace rjg
