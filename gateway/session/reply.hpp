// Answers one client request exactly once. Dropping it unanswered answers with an internal error and
// logs a bug; answering twice is logged as a bug and the second answer is not sent.
// Until it answers, a Reply counts its request against the session's limits: one of
// max_pending_requests, and the request's text against max_pending_bytes.
#pragma once

#include "common/protocol/message.hpp"

#include <memory>
#include <string>
#include <string_view>

namespace rjg::gateway::session {

namespace json = boost::json;

class ClientSession;

// The answer to a request of `method` that failed: a JSON-RPC error, except for robot/run_keyword, which is
// always answered with a result (protocol::keyword_error_type). The one place that decides, for a Reply and
// for the admission refusals that answer before a Reply exists.
// `type`: the keyword failure's type when the code alone does not say it ("": keyword_error_type(code)).
std::string failure_answer(std::string_view id_text, std::string_view method, int code, std::string_view message,
                           std::string_view data_json = {}, std::string_view type = {});

class Reply {
 public:
  Reply(std::shared_ptr<ClientSession> session, const protocol::Message& request);
  Reply(Reply&& other) noexcept;
  Reply& operator=(Reply&&) = delete;
  ~Reply();

  void result(const json::value& result);
  // data_json: the error's data as a JSON text ("" for none). For robot/run_keyword the answer is a result
  // whose "error" carries the message (and a type named after the code; see failure_answer).
  void error(int code, std::string_view message, std::string_view data_json = {});
  // A whole answer made elsewhere (a worker's, with the client's id already in place).
  void send(std::string json_text);
  const std::string& id_text() const { return id_text_; }

 private:
  bool claim();
  std::shared_ptr<ClientSession> session_;
  std::string id_text_;
  std::string method_;
  std::size_t bytes_ = 0;  // the request's text, counted in the session's pending bytes
  bool answered_ = false;
};

}  // namespace rjg::gateway::session
