// One MCP server process on the stdio transport (the MCP specification's basic/transports page): the
// child's stdin and stdout carry one JSON-RPC message per line, its stderr is a log that is relayed
// line by line and never parsed.
//
// Requests are synchronous: request() writes a line and reads (blocking reads + poll, on the caller's
// thread, which is the keyword's) until the answer arrives, handing notifications to a callback on the
// way and answering the server's own requests (ping with {}, anything else with "method not found":
// this client offers no sampling, roots or elicitation). Stderr has a thread of its own, so the server
// never blocks on a full stderr pipe, even between keywords.
#pragma once

#include <boost/json.hpp>

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace rjg::mcp {

namespace json = boost::json;
using Clock = std::chrono::steady_clock;

// The server cannot be used any more: it could not start, it exited, closed its stdout, or broke the
// protocol. what() says what happened, in a sentence that continues "The MCP server ... ".
struct ServerGone : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// The server did not answer within the deadline.
struct ServerTimeout : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// The server answered with a JSON-RPC error.
struct ServerError : std::runtime_error {
  ServerError(int code, std::string message, json::value data)
      : std::runtime_error(std::move(message)), code(code), data(std::move(data)) {}
  int code;
  json::value data;
};

class McpServer {
 public:
  // A notification from the server (method, params), or, with is_request, a request of the server that
  // was just refused.
  using Listener = std::function<void(std::string_view method, const json::object& params, bool is_request)>;

  // Starts `command` (argv; a bare program name is looked up in PATH). Throws ServerGone when it cannot
  // be started. The child stays in this process's group (the gateway stops a worker with killpg, which
  // must reach the server too) and gets SIGKILL should this thread die first.
  McpServer(std::vector<std::string> command, std::chrono::milliseconds shutdown_grace);
  // Closes the server's stdin, waits shutdown_grace for it to exit, then SIGTERM, another grace, then
  // SIGKILL; reaps it and joins the stderr thread.
  ~McpServer();
  McpServer(const McpServer&) = delete;
  McpServer& operator=(const McpServer&) = delete;

  pid_t pid() const { return pid_; }
  // The command line as a user would type it, for messages.
  const std::string& command_text() const { return command_text_; }

  // Sends a request and returns its result. Throws ServerError for an error answer, ServerTimeout when
  // `deadline` passes first (the server is then still usable), ServerGone when the server is gone.
  json::value request(std::string_view method, json::object params, const Listener& listener,
                      std::optional<Clock::time_point> deadline = std::nullopt);
  // The id of the latest request, and notifications/cancelled for one the caller gave up on (after
  // ServerTimeout): its answer, should it come, is skipped.
  std::int64_t last_request_id() const { return next_id_ - 1; }
  void cancel(std::int64_t id, std::string reason);
  void notify(std::string_view method, json::object params);

  // After ServerGone: "exited with status 1", "was killed by signal 9 (Killed)", or "is still running"
  // (it is then stopped), once the exit is known (waits a little for it).
  std::string exit_description();
  // The last lines of the server's stderr (about 20 lines, 4 KiB), once stderr has ended or a short
  // wait has passed; "" when it wrote nothing.
  std::string stderr_tail(bool wait_for_end = false);

  // The longest line read from the server.
  static constexpr std::size_t kMaxLine = 64u << 20;

 private:
  void write_line(const std::string& line, std::optional<Clock::time_point> deadline);
  // The next JSON object on stdout (stray lines are logged and skipped).
  json::object read_message(std::optional<Clock::time_point> deadline);
  // Reads what is there into in_ (waiting until the deadline for something); false on timeout.
  bool fill(std::optional<Clock::time_point> deadline);
  [[noreturn]] void gone(std::string what);
  void relay_stderr();
  bool reaped(std::chrono::milliseconds wait);
  void stop();

  std::string command_text_;
  std::string program_;  // for log lines: the program's base name
  std::chrono::milliseconds shutdown_grace_;
  pid_t pid_ = -1;
  int stdin_ = -1, stdout_ = -1, stderr_ = -1;
  int wake_[2] = {-1, -1};  // wakes the stderr thread at the end
  std::optional<int> status_;  // wait status once reaped
  std::string in_;             // bytes read from stdout, not yet a whole line
  std::size_t scanned_ = 0;    // in_[0, scanned_) holds no newline
  std::int64_t next_id_ = 1;
  std::string broken_;         // why the server is unusable, once it is
  std::set<std::int64_t> cancelled_;  // requests given up on, whose late answers are skipped

  std::thread stderr_thread_;
  std::mutex stderr_mutex_;
  std::condition_variable stderr_ended_cv_;
  bool stderr_ended_ = false;
  std::deque<std::string> tail_;
  std::size_t tail_bytes_ = 0;
};

}  // namespace rjg::mcp
