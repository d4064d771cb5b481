#include "common/protocol/message.hpp"

#include "common/protocol/protocol.hpp"

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <limits>

namespace rjg::protocol {

struct MessageAccess {
  static Classified classify(std::string_view body, protocol::Scanned scanned);
};

namespace {

bool valid_id(Kind kind, std::string_view text) {
  return kind == Kind::string || (kind == Kind::number && !protocol::is_non_finite(text));
}

Slice shifted(Slice inner, std::size_t by) { return {inner.offset + by, inner.size}; }

int number_to_int(std::string_view text) {
  const double v = std::strtod(std::string(text).c_str(), nullptr);
  if (std::isnan(v)) return 0;
  if (v >= std::numeric_limits<int>::max()) return std::numeric_limits<int>::max();
  if (v <= std::numeric_limits<int>::min()) return std::numeric_limits<int>::min();
  return static_cast<int>(v);
}

}  // namespace

Classified MessageAccess::classify(std::string_view body, protocol::Scanned scanned) {
  if (scanned.kind != Kind::object) {
    return ProtocolError{protocol::kInvalidRequest,
                         scanned.kind == Kind::array ? "Invalid Request: batch messages are not supported"
                                                     : "Invalid Request: a message must be a JSON object"};
  }
  const auto& members = scanned.members;
  const Member* id = protocol::find(members, "id");
  const bool id_ok = id && valid_id(id->kind, id->value.of(body));
  const std::string id_text = id_ok ? std::string(id->value.of(body)) : "null";
  auto invalid = [&](std::string message) {
    return ProtocolError{protocol::kInvalidRequest, "Invalid Request: " + std::move(message), id_text};
  };

  const Member* version = protocol::find(members, "jsonrpc");
  if (!version || version->kind != Kind::string || version->value.of(body) != "\"2.0\"")
    return invalid("\"jsonrpc\" must be \"2.0\"");

  Message m;
  if (id) m.id_ = id->value;
  if (const Member* method = protocol::find(members, "method")) {
    if (method->kind != Kind::string) return invalid("\"method\" must be a string");
    if (const Member* params = protocol::find(members, "params")) {
      if (params->kind != Kind::object && params->kind != Kind::array && params->kind != Kind::null)
        return invalid("\"params\" must be an object or an array");
      m.params_ = params->value;
      m.params_kind_ = params->kind;
    }
    if (id && !id_ok) return invalid("\"id\" must be a string or a finite number");
    m.kind = id ? Message::Kind::request : Message::Kind::notification;
    m.method_ = protocol::decode_string(method->value.of(body));
    m.text_ = body;
    return m;
  }

  if (!id) return invalid("a message needs \"method\" or \"id\"");
  const Member* result = protocol::find(members, "result");
  const Member* error = protocol::find(members, "error");
  if (!result == !error) return invalid("a response needs exactly one of \"result\" and \"error\"");
  if (error) {
    if (error->kind != Kind::object) return invalid("\"error\" must be an object with a numeric \"code\"");
    const std::string_view error_text = error->value.of(body);
    const auto fields = protocol::members(error_text);
    const Member* code = protocol::find(fields, "code");
    if (!code || code->kind != Kind::number) return invalid("\"error\" must be an object with a numeric \"code\"");
    m.error_code_ = number_to_int(code->value.of(error_text));
    if (const Member* message = protocol::find(fields, "message"); message && message->kind == Kind::string)
      m.error_message_ = protocol::decode_string(message->value.of(error_text));
    if (const Member* data = protocol::find(fields, "data")) m.error_data_ = shifted(data->value, error->value.offset);
    m.kind = Message::Kind::error_response;
  } else {
    if (!id_ok) return invalid("\"id\" must be a string or a finite number");
    m.result_ = result->value;
    m.kind = Message::Kind::response;
  }
  m.text_ = body;
  return m;
}

Classified parse_message(std::string_view body, const JsonLimits& limits) {
  auto [scanned, error] = protocol::scan(body, protocol::Limits{limits.max_depth, limits.max_object_members});
  if (error) {
    // A limit, not a malformed body: the message is otherwise sound, and its method says how to answer it
    // (a keyword's arguments over a limit fail that keyword only).
    if (error->too_many_members)
      return ProtocolError{protocol::kInvalidRequest,
                           fmt::format("Invalid Request: the object at byte {} has more than {} members, the most "
                                       "this server accepts in one object (max_object_members)",
                                       error->offset, limits.max_object_members),
                           top_level_id(body), top_level_method(body)};
    if (error->too_deep)
      return ProtocolError{protocol::kParseError,
                           fmt::format("Parse error: JSON nesting is deeper than {} levels (max_json_depth)",
                                       limits.max_depth),
                           top_level_id(body), top_level_method(body)};
    return ProtocolError{protocol::kParseError, fmt::format("Parse error: {} (at byte {})", error->message, error->offset),
                         top_level_id(body)};
  }
  return MessageAccess::classify(body, std::move(*scanned));
}

namespace {

// The lenient scan of top_level_id: a cursor that skips values without judging them.
class LenientScan {
 public:
  explicit LenientScan(std::string_view s) : s_(s) {}

  std::string id() {
    const auto value = member("id", 14);  // an escaped key ("\u0069d") is at most 14 bytes long
    return value && valid(*value) ? std::string(*value) : "null";
  }

  // The value text of the last top-level member `name` read before the structure breaks; none when there
  // is none. Keys longer than max_key bytes (escapes included) are not compared.
  std::optional<std::string_view> member(std::string_view name, std::size_t max_key) {
    std::optional<std::string_view> found;
    skip_space();
    if (!take('{')) return found;
    for (;;) {
      skip_space();
      if (at_end() || s_[pos_] != '"') return found;
      const std::size_t key_start = pos_;
      if (!skip_string()) return found;
      const std::string_view key = s_.substr(key_start, pos_ - key_start);
      skip_space();
      if (!take(':')) return found;
      skip_space();
      const std::size_t value_start = pos_;
      if (!skip_value()) return found;
      std::string_view value = s_.substr(value_start, pos_ - value_start);
      while (!value.empty() && (value.back() == ' ' || value.back() == '\t' || value.back() == '\n' ||
                                value.back() == '\r'))
        value.remove_suffix(1);
      if (key.size() <= max_key && protocol::decode_string(key) == name) found = value;
      skip_space();
      if (!take(',')) return found;
    }
  }

 private:
  static bool valid(std::string_view value) {
    auto [scanned, error] = protocol::scan(value);
    return scanned && valid_id(scanned->kind, value);
  }
  bool at_end() const { return pos_ >= s_.size(); }
  void skip_space() {
    while (!at_end() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) ++pos_;
  }
  bool take(char c) {
    if (at_end() || s_[pos_] != c) return false;
    ++pos_;
    return true;
  }
  // At a quote; false when the string does not end.
  bool skip_string() {
    ++pos_;
    while (!at_end()) {
      const char c = s_[pos_++];
      if (c == '"') return true;
      if (c == '\\') ++pos_;
    }
    return false;
  }
  // Up to the ',' or '}' that ends a top-level value; false when brackets do not match or the text ends
  // inside a string or a container.
  bool skip_value() {
    std::vector<char> closers;
    while (!at_end()) {
      const char c = s_[pos_];
      if (closers.empty() && (c == ',' || c == '}')) return true;
      if (c == '"') {
        if (!skip_string()) return false;
        continue;
      }
      if (c == '{') closers.push_back('}');
      else if (c == '[') closers.push_back(']');
      else if (c == '}' || c == ']') {
        if (closers.empty() || closers.back() != c) return false;
        closers.pop_back();
      }
      ++pos_;
    }
    return false;
  }

  std::string_view s_;
  std::size_t pos_ = 0;
};

}  // namespace

std::string top_level_id(std::string_view body) { return LenientScan(body).id(); }

std::string top_level_method(std::string_view body) {
  const auto value = LenientScan(body).member("method", 40);
  if (!value || value->size() > 80) return {};
  auto [scanned, error] = protocol::scan(*value);
  return scanned && scanned->kind == protocol::Kind::string ? protocol::decode_string(*value) : std::string();
}

std::string Message::with_id(std::string_view id_text, std::vector<std::pair<Slice, std::string>> edits) const {
  if (id_) edits.emplace_back(*id_, std::string(id_text));
  return protocol::splice(text_, std::move(edits));
}

json::value parse_value(std::string_view text) {
  if (text.empty()) return nullptr;
  json::parse_options options;
  options.max_depth = std::numeric_limits<std::size_t>::max();
  return json::parse(text, {}, options);
}

json::value Message::id() const { return id_ ? parse_value(id_->of(text_)) : json::value(nullptr); }
json::value Message::params() const { return parse_value(params_text()); }
json::value Message::result() const { return result_ ? parse_value(result_->of(text_)) : json::value(nullptr); }
json::object Message::error() const {
  if (kind != Kind::error_response) return {};
  json::value whole = parse_value(text_);
  auto* err = whole.get_object().if_contains("error");
  return err && err->is_object() ? err->get_object() : json::object();
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

std::string make_request_raw(std::string_view id_text, std::string_view method, std::string_view params_text) {
  return fmt::format(R"({{"jsonrpc":"2.0","id":{},"method":{},"params":{}}})", id_text, protocol::quote(method),
                     params_text.empty() ? std::string_view("{}") : params_text);
}

std::string make_notification_raw(std::string_view method, std::string_view params_text) {
  return fmt::format(R"({{"jsonrpc":"2.0","method":{},"params":{}}})", protocol::quote(method),
                     params_text.empty() ? std::string_view("{}") : params_text);
}

std::string make_result_raw(std::string_view id_text, std::string_view result_text) {
  return fmt::format(R"({{"jsonrpc":"2.0","id":{},"result":{}}})", id_text, result_text);
}

std::string make_error_raw(std::string_view id_text, int code, std::string_view message, std::string_view data_text) {
  if (data_text.empty())
    return fmt::format(R"({{"jsonrpc":"2.0","id":{},"error":{{"code":{},"message":{}}}}})", id_text, code,
                       protocol::quote(message));
  return fmt::format(R"({{"jsonrpc":"2.0","id":{},"error":{{"code":{},"message":{},"data":{}}}}})", id_text, code,
                     protocol::quote(message), data_text);
}

std::string make_request(const json::value& id, std::string_view method, const json::value& params) {
  return make_request_raw(json::serialize(id), method, json::serialize(params));
}

std::string make_notification(std::string_view method, const json::value& params) {
  return make_notification_raw(method, json::serialize(params));
}

std::string make_result(const json::value& id, const json::value& result) {
  return make_result_raw(json::serialize(id), json::serialize(result));
}

std::string make_error(const json::value& id, int code, std::string_view message,
                       const std::optional<json::value>& data) {
  return make_error_raw(json::serialize(id), code, message, data ? json::serialize(*data) : std::string());
}

std::string id_to_string(const json::value& id) { return json::serialize(id); }

}  // namespace rjg::protocol
