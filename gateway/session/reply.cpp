#include "gateway/session/reply.hpp"

#include "common/log.hpp"
#include "common/protocol/protocol.hpp"
#include "gateway/session/client_session.hpp"

#include <boost/json/serialize.hpp>

#include <fmt/format.h>

namespace rjg::gateway::session {

std::string failure_answer(std::string_view id_text, std::string_view method, int code, std::string_view message,
                           std::string_view data_json, std::string_view type) {
  if (method != protocol::kRunKeyword) return protocol::make_error_raw(id_text, code, message, data_json);
  // The error's data (a refused pickle's path and offset, a worker's pid) is in the message already; a
  // RunKeywordError has no member for it.
  json::object error{{"message", message}, {"type", type.empty() ? protocol::keyword_error_type(code) : type}};
  return protocol::make_result_raw(id_text, json::serialize(json::object{{"error", std::move(error)}}));
}

Reply::Reply(std::shared_ptr<ClientSession> session, const protocol::Message& request)
    : session_(std::move(session)), id_text_(request.id_text()), method_(request.method()),
      bytes_(request.text().size()) {
  session_->context_.request_started();
  ++session_->requests_in_flight_;
  session_->pending_bytes_ += bytes_;
}

Reply::Reply(Reply&& other) noexcept
    : session_(std::move(other.session_)), id_text_(std::move(other.id_text_)), method_(std::move(other.method_)),
      bytes_(other.bytes_), answered_(other.answered_) {
  other.answered_ = true;
}

Reply::~Reply() {
  if (answered_ || !session_) return;
  log::error("bug: {}: request {} ({}) was dropped without an answer", session_->name_, id_text_, method_);
  error(protocol::kInternalError,
        fmt::format("Internal error: the gateway dropped {} without answering it. This is a bug; please report it "
                    "with the gateway's log.",
                    method_));
}

bool Reply::claim() {
  if (answered_) {
    log::error("bug: {}: second answer to request {} ({}) not sent", session_->name_, id_text_, method_);
    return false;
  }
  answered_ = true;
  session_->context_.request_finished();
  --session_->requests_in_flight_;
  session_->pending_bytes_ -= bytes_;
  return true;
}

void Reply::result(const json::value& result) {
  if (claim()) session_->send(protocol::make_result_raw(id_text_, json::serialize(result)));
}

void Reply::error(int code, std::string_view message, std::string_view data_json) {
  if (claim()) session_->send(failure_answer(id_text_, method_, code, message, data_json));
}

void Reply::send(std::string json_text) {
  if (claim()) session_->send(std::move(json_text));
}

}  // namespace rjg::gateway::session
