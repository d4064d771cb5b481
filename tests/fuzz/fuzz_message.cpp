// Fuzzes parse_message, the single place where a frame body becomes a classified message, and
// check_client_method, which routes it.
//
// Input: one frame body (any bytes). Invariants: no crash or sanitizer report; a failure is -32700 or
// -32600 with a message, and its id is null or a valid id (string or number); a Message serialized
// again and re-classified has the same kind, the same id and the same content; answering its id with
// the builders gives a response (or error response) that carries that id back.
//
// "The same" allows doubles to differ in the last bits: Boost.JSON 1.81 parses numbers with more than
// 17 significant digits, or large exponents, without correct rounding (10.5e300 reads as
// 1.0500000000000001e301, which reads back as another double). Strings and integers must be exact.
//
// A number too large for a double (1e400) would parse as infinity and serialize as `Infinity`, which
// is not JSON: parse_message refuses it, and this target checks that nothing non-finite gets through
// (RJG_FUZZ_TOLERATE_NONFINITE=1 turns that check off).
#include "common/protocol/message.hpp"

#include "common/protocol/protocol.hpp"
#include "fuzz_common.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <variant>

#ifndef RJG_FUZZ_TOLERATE_NONFINITE
#define RJG_FUZZ_TOLERATE_NONFINITE 0
#endif

namespace {

namespace json = boost::json;
using rjg::Message;
using rjg::ProtocolError;

bool valid_id(const json::value& v) { return v.is_string() || v.is_int64() || v.is_uint64() || v.is_double(); }

std::string describe(const json::value& v) { return json::serialize(v); }

bool has_nonfinite(const json::value& v) {
  if (v.is_double()) return !std::isfinite(v.get_double());
  if (v.is_array()) return std::any_of(v.get_array().begin(), v.get_array().end(), has_nonfinite);
  if (v.is_object())
    return std::any_of(v.get_object().begin(), v.get_object().end(),
                       [](const json::key_value_pair& kv) { return has_nonfinite(kv.value()); });
  return false;
}

bool same(const json::value& a, const json::value& b) {
  if (a.is_double() && b.is_double()) {
    double x = a.get_double(), y = b.get_double();
    return x == y || std::fabs(x - y) <= 1e-15 * std::max(std::fabs(x), std::fabs(y)) || std::fabs(x - y) < 1e-300;
  }
  if (a.kind() != b.kind()) return false;
  if (a.is_array()) {
    const auto &x = a.get_array(), &y = b.get_array();
    if (x.size() != y.size()) return false;
    for (std::size_t i = 0; i < x.size(); ++i)
      if (!same(x[i], y[i])) return false;
    return true;
  }
  if (a.is_object()) {
    const auto &x = a.get_object(), &y = b.get_object();
    if (x.size() != y.size()) return false;
    for (const auto& kv : x) {
      auto* other = y.if_contains(kv.key());
      if (!other || !same(kv.value(), *other)) return false;
    }
    return true;
  }
  return a == b;
}

// Takes the Classified by value: a reference into a temporary would dangle past the statement.
Message expect_message(rjg::Classified c, std::string_view what) {
  if (auto* error = std::get_if<ProtocolError>(&c))
    rjg::fuzz::invariant_failed("std::holds_alternative<Message>(c)",
                                std::string(what) + " was not classified as a message: " + error->message, __FILE__,
                                __LINE__);
  return std::get<Message>(std::move(c));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view body(reinterpret_cast<const char*>(data), size);
  auto classified = rjg::parse_message(body);

  if (auto* error = std::get_if<ProtocolError>(&classified)) {
    RJG_FUZZ_CHECK(error->code == rjg::protocol::kParseError || error->code == rjg::protocol::kInvalidRequest,
                   "unexpected error code " + std::to_string(error->code));
    RJG_FUZZ_CHECK(!error->message.empty(), "a protocol error without a message");
    RJG_FUZZ_CHECK(error->id.is_null() || valid_id(error->id), "error id is neither null nor valid: " + describe(error->id));
    (void)rjg::id_to_string(error->id);
    return 0;
  }

  const Message& message = std::get<Message>(classified);
  const json::value id = message.id();
  (void)rjg::id_to_string(id);
  switch (message.kind) {
    case Message::Kind::request:
    case Message::Kind::notification:
      if (message.kind == Message::Kind::request)
        RJG_FUZZ_CHECK(valid_id(id), "a request with an invalid id: " + describe(id));
      else
        RJG_FUZZ_CHECK(!message.object.contains("id"), "a notification with an id");
      (void)message.params();
      // The dispatch check both servers use: unknown method or wrong kind, answered only for requests.
      if (auto unroutable = rjg::check_client_method(message)) {
        RJG_FUZZ_CHECK(unroutable->code == rjg::protocol::kMethodNotFound ||
                           unroutable->code == rjg::protocol::kInvalidRequest,
                       "check_client_method gave code " + std::to_string(unroutable->code));
        RJG_FUZZ_CHECK(unroutable->answer == (message.kind == Message::Kind::request),
                       "check_client_method answers a notification or not a request");
        RJG_FUZZ_CHECK(!unroutable->message.empty(), "check_client_method without a message");
      }
      break;
    case Message::Kind::response:
      RJG_FUZZ_CHECK(valid_id(id), "a response with an invalid id: " + describe(id));
      (void)message.result();
      break;
    case Message::Kind::error_response:
      RJG_FUZZ_CHECK(message.object.contains("id"), "an error response without an id");
      (void)message.error();
      break;
  }

  if (RJG_FUZZ_TOLERATE_NONFINITE && has_nonfinite(json::value(message.object))) return 0;

  // Serialized and classified again: same kind, same id.
  const std::string text = json::serialize(message.object);
  const Message again = expect_message(rjg::parse_message(text), "the re-serialized message " + text);
  RJG_FUZZ_CHECK(again.kind == message.kind, "re-classified as another kind: " + text);
  RJG_FUZZ_CHECK(same(again.id(), id), "re-classified with another id: " + text);
  RJG_FUZZ_CHECK(same(again.object, message.object), "re-parsed to another object: " + text);

  // What the gateway does with a request's id: answer it, or forward it.
  if (message.kind == Message::Kind::request) {
    const Message result = expect_message(rjg::parse_message(rjg::make_result(id, message.params())), "make_result");
    RJG_FUZZ_CHECK(result.kind == Message::Kind::response && same(result.id(), id), "make_result lost the id");
    const Message error = expect_message(
        rjg::parse_message(rjg::make_error(id, rjg::protocol::kInvalidParams, message.method(), message.params())),
        "make_error");
    RJG_FUZZ_CHECK(error.kind == Message::Kind::error_response && same(error.id(), id), "make_error lost the id");
    const Message forwarded =
        expect_message(rjg::parse_message(rjg::make_request(id, message.method(), message.params())), "make_request");
    RJG_FUZZ_CHECK(forwarded.kind == Message::Kind::request && same(forwarded.id(), id) &&
                       forwarded.method() == message.method(),
                   "make_request lost the id or the method");
  }
  return 0;
}
