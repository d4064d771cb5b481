// Fuzzes parse_message, the single place where a frame body becomes a classified message, and
// check_client_method, which routes it.
//
// Input: one frame body (any bytes). Invariants: no crash or sanitizer report, and classification
// never throws, and its work (counted by protocol::operations()) stays linear in the body. A failure is
// -32700 or -32600 with a message; its id text is "null" or a valid id (a JSON string or finite number),
// the one top_level_id() finds in the body. A Message keeps the body byte for byte; its id text
// is valid JSON (a string or a number for requests and responses, "null" for notifications), and the
// params, result and error data texts are valid JSON where present. with_id() replaces the id's text
// and nothing else: the result re-classifies to the same kind, method, params and result with the new
// id. Answering or forwarding with the raw builders carries the id text and the params text through
// unchanged.
//
// The tree views (params(), result(), ...) parse with Boost.JSON, for tools and tests only: a tree
// cannot hold what the relay passes on (NaN, Infinity, 1e400, 40-digit integers), so they may throw
// a std::exception for such texts, and nothing worse.
#include "common/protocol/message.hpp"

#include "common/protocol/protocol.hpp"
#include "fuzz_common.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>
#include <string_view>
#include <variant>

namespace {

namespace json = boost::json;
namespace protocol = rjg::protocol;
using rjg::protocol::Message;
using rjg::protocol::ProtocolError;

// Ids the gateway could put in place of a client's: a string with escapes, and an integer beyond 64 bits.
constexpr std::string_view kNewIds[] = {R"("gw-\u00e9\"7\"")", "18446744073709551617"};

// The kind of a valid JSON text, or nothing when it is not one.
std::optional<protocol::Kind> kind_of(std::string_view text) {
  auto [scanned, error] = protocol::scan(text);
  if (!scanned) return std::nullopt;
  return scanned->kind;
}

bool is_id_kind(std::optional<protocol::Kind> kind) {
  return kind == protocol::Kind::string || kind == protocol::Kind::number;
}

bool is_valid_id(std::string_view text) { return is_id_kind(kind_of(text)) && !protocol::is_non_finite(text); }

bool has_nonfinite(const json::value& v) {
  if (v.is_double()) return !std::isfinite(v.get_double());
  if (v.is_array()) return std::any_of(v.get_array().begin(), v.get_array().end(), has_nonfinite);
  if (v.is_object())
    return std::any_of(v.get_object().begin(), v.get_object().end(),
                       [](const json::key_value_pair& kv) { return has_nonfinite(kv.value()); });
  return false;
}

rjg::protocol::Classified classify(std::string_view body, std::string_view what) {
  try {
    return rjg::protocol::parse_message(body);
  } catch (const std::exception& e) {
    rjg::fuzz::invariant_failed("parse_message does not throw", std::string(what) + ": " + e.what(), __FILE__,
                                __LINE__);
  } catch (...) {
    rjg::fuzz::invariant_failed("parse_message does not throw", what, __FILE__, __LINE__);
  }
}

// Takes the Classified by value: a reference into a temporary would dangle past the statement.
Message expect_message(rjg::protocol::Classified c, std::string_view what) {
  if (auto* error = std::get_if<ProtocolError>(&c))
    rjg::fuzz::invariant_failed("std::holds_alternative<Message>(c)",
                                std::string(what) + " was not classified as a message: " + error->message, __FILE__,
                                __LINE__);
  return std::get<Message>(std::move(c));
}

// The tree views either build or throw a std::exception (NaN, exponent overflow); the id's tree, of a
// request's or response's (valid, finite) id, always builds. (An error response may carry any id.)
void check_tree_views(const Message& m) {
  try {
    (void)m.params();
    (void)m.result();
    (void)m.error();
  } catch (const std::exception&) {
  }
  if (m.kind == Message::Kind::error_response) return;
  try {
    (void)has_nonfinite(m.id());
  } catch (const std::exception& e) {
    // A number id whose exponent Boost.JSON cannot hold (84467E44073709551615) is valid JSON that the
    // relay passes on as text; only a tree cannot hold it, as the header says of 1e400. A string id
    // always builds.
    if (m.id_text().starts_with('"'))
      rjg::fuzz::invariant_failed("the id's tree view builds", std::string(e.what()) + ": " + m.text(), __FILE__, __LINE__);
  }
}

// The envelope fields that with_id() and the builders must carry through.
void check_same_content(const Message& again, const Message& m, std::string_view what) {
  RJG_FUZZ_CHECK(again.kind == m.kind, std::string(what) + ": another kind");
  RJG_FUZZ_CHECK(again.method() == m.method(), std::string(what) + ": another method");
  RJG_FUZZ_CHECK(again.params_text() == m.params_text(), std::string(what) + ": other params");
  RJG_FUZZ_CHECK(again.result_text() == m.result_text(), std::string(what) + ": another result");
  RJG_FUZZ_CHECK(again.error_code() == m.error_code() && again.error_message() == m.error_message() &&
                     again.error_data_text() == m.error_data_text(),
                 std::string(what) + ": another error");
}

void check_with_id(const Message& m) {
  const std::string& text = m.text();
  for (std::string_view new_id : kNewIds) {
    const std::string changed = m.with_id(new_id);
    if (m.kind == Message::Kind::notification) {
      RJG_FUZZ_CHECK(changed == text, "with_id changed a notification");
      continue;
    }
    // Exactly the id's bytes are replaced. Every message but a notification has an id member, and
    // id_text() is a view into text().
    const auto begin = reinterpret_cast<std::uintptr_t>(text.data());
    const auto id_at = reinterpret_cast<std::uintptr_t>(m.id_text().data());
    RJG_FUZZ_CHECK(id_at >= begin && id_at + m.id_text().size() <= begin + text.size(),
                   "the id text is not a slice of the text");
    const std::size_t at = id_at - begin;
    const std::string expected = text.substr(0, at) + std::string(new_id) + text.substr(at + m.id_text().size());
    RJG_FUZZ_CHECK(changed == expected, "with_id changed more than the id: " + changed);
    const Message again = expect_message(classify(changed, "with_id"), "with_id of " + text);
    check_same_content(again, m, "with_id");
    RJG_FUZZ_CHECK(again.id_text() == new_id, "with_id: the id is " + std::string(again.id_text()));
  }
}

void check_builders(const Message& m) {
  const std::string_view id = m.id_text();
  const Message result = expect_message(classify(rjg::protocol::make_result_raw(id, m.params_text().empty() ? "{}" : m.params_text()),
                                                 "make_result_raw"),
                                        "make_result_raw");
  RJG_FUZZ_CHECK(result.kind == Message::Kind::response && result.id_text() == id, "make_result_raw lost the id");

  const Message error = expect_message(
      classify(rjg::protocol::make_error_raw(id, rjg::protocol::kInvalidParams, m.method(), m.params_text()), "make_error_raw"),
      "make_error_raw");
  RJG_FUZZ_CHECK(error.kind == Message::Kind::error_response && error.id_text() == id, "make_error_raw lost the id");
  RJG_FUZZ_CHECK(error.error_code() == rjg::protocol::kInvalidParams && error.error_message() == m.method() &&
                     error.error_data_text() == m.params_text(),
                 "make_error_raw lost the code, the message or the data");

  const Message forwarded = expect_message(
      classify(rjg::protocol::make_request_raw(id, m.method(), m.params_text()), "make_request_raw"), "make_request_raw");
  RJG_FUZZ_CHECK(forwarded.kind == Message::Kind::request && forwarded.id_text() == id &&
                     forwarded.method() == m.method(),
                 "make_request_raw lost the id or the method");
  RJG_FUZZ_CHECK(forwarded.params_text() == (m.params_text().empty() ? "{}" : m.params_text()),
                 "make_request_raw changed the params");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view body(reinterpret_cast<const char*>(data), size);
  const auto work_before = protocol::operations();
  auto classified = classify(body, "the input");
  const auto work = protocol::operations() - work_before;
  RJG_FUZZ_CHECK(work <= 16 * size + 1024, "classification took " + std::to_string(work) + " operations for " +
                                              std::to_string(size) + " bytes");

  if (auto* error = std::get_if<ProtocolError>(&classified)) {
    RJG_FUZZ_CHECK(error->code == rjg::protocol::kParseError || error->code == rjg::protocol::kInvalidRequest,
                   "unexpected error code " + std::to_string(error->code));
    RJG_FUZZ_CHECK(!error->message.empty(), "a protocol error without a message");
    RJG_FUZZ_CHECK(error->id_text == "null" || is_valid_id(error->id_text),
                   "error id is neither null nor valid: " + error->id_text);
    if (error->code == rjg::protocol::kParseError)
      RJG_FUZZ_CHECK(error->id_text == rjg::protocol::top_level_id(body),
                     "a parse error with another id than the top-level one: " + error->id_text);
    return 0;
  }

  const Message& message = std::get<Message>(classified);
  RJG_FUZZ_CHECK(message.text() == body, "the message's text is not the body");
  const auto id_kind = kind_of(message.id_text());
  RJG_FUZZ_CHECK(id_kind.has_value(), "the id text is not JSON: " + std::string(message.id_text()));
  if (!message.params_text().empty())
    RJG_FUZZ_CHECK(kind_of(message.params_text()) == message.params_kind(), "the params text is not JSON of its kind");
  RJG_FUZZ_CHECK(kind_of(message.result_text()).has_value(), "the result text is not JSON");
  if (!message.error_data_text().empty())
    RJG_FUZZ_CHECK(kind_of(message.error_data_text()).has_value(), "the error data text is not JSON");

  switch (message.kind) {
    case Message::Kind::request:
    case Message::Kind::notification:
      if (message.kind == Message::Kind::request)
        RJG_FUZZ_CHECK(is_valid_id(message.id_text()), "a request with an invalid id: " + std::string(message.id_text()));
      else
        RJG_FUZZ_CHECK(message.id_text() == "null", "a notification with an id");
      // The dispatch check both servers use: unknown method or wrong kind, answered only for requests.
      if (auto unroutable = rjg::protocol::check_client_method(message)) {
        RJG_FUZZ_CHECK(unroutable->code == rjg::protocol::kMethodNotFound ||
                           unroutable->code == rjg::protocol::kInvalidRequest,
                       "check_client_method gave code " + std::to_string(unroutable->code));
        RJG_FUZZ_CHECK(unroutable->answer == (message.kind == Message::Kind::request),
                       "check_client_method answers a notification or not a request");
        RJG_FUZZ_CHECK(!unroutable->message.empty(), "check_client_method without a message");
      }
      break;
    case Message::Kind::response:
      RJG_FUZZ_CHECK(is_valid_id(message.id_text()), "a response with an invalid id: " + std::string(message.id_text()));
      break;
    case Message::Kind::error_response:
      break;
  }

  check_tree_views(message);
  check_with_id(message);
  if (message.kind == Message::Kind::request) check_builders(message);
  return 0;
}
