// The MCP server process and its newline-delimited JSON-RPC stream (see server.hpp).
#include "workers/mcp/server.hpp"

#include "common/log.hpp"
#include "common/process/child.hpp"
#include "common/protocol/json_text.hpp"

#include <fmt/format.h>

#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>

namespace rjg::mcp {
namespace {

constexpr std::size_t kTailLines = 20;
constexpr std::size_t kTailBytes = 4096;
constexpr std::size_t kStderrLine = 16 * 1024;  // longer stderr lines are split

std::string quoted(const std::string& arg) {
  if (!arg.empty() && arg.find_first_of(" \t\n'\"\\$") == std::string::npos) return arg;
  std::string out = "'";
  for (char c : arg) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

int poll_timeout(std::optional<Clock::time_point> deadline) {
  if (!deadline) return -1;
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(*deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<long long>(left, 0, 60'000));
}

}  // namespace

McpServer::McpServer(std::vector<std::string> command, std::chrono::milliseconds shutdown_grace)
    : shutdown_grace_(shutdown_grace) {
  if (command.empty()) throw ServerGone("has no command: give one after '--'");
  for (const auto& arg : command) command_text_ += (command_text_.empty() ? "" : " ") + quoted(arg);
  program_ = command.front().substr(command.front().rfind('/') + 1);
  const auto resolved = process::resolve_command(command.front());
  if (!resolved.path) throw ServerGone(fmt::format("could not be started: {}", resolved.problem));

  int in[2], out[2], err[2];
  if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0 ||
      ::pipe2(wake_, O_CLOEXEC) != 0)
    throw ServerGone(fmt::format("could not be started: no pipes: {}", std::strerror(errno)));
  process::ChildOptions child;
  child.argv = std::move(command);  // argv[0] as given (npx, uvx): some programs go by the name they are called
  child.path = *resolved.path;
  child.stdin_fd = in[0];
  child.stdout_fd = out[1];
  child.stderr_fd = err[1];
  // It stays in this process's group: the gateway stops a worker with killpg, which ends the server
  // too. die_with_parent (SIGKILL should the forking thread, the session's, end without stopping it)
  // is the backstop for a worker that dies abruptly.
  std::optional<std::system_error> failed;
  try {
    pid_ = process::start_child(child);
  } catch (const std::system_error& e) {
    failed = e;
  }
  for (int fd : {in[0], out[1], err[1]}) ::close(fd);
  stdin_ = in[1];
  stdout_ = out[0];
  stderr_ = err[0];
  if (failed) {
    for (int* fd : {&stdin_, &stdout_, &stderr_, &wake_[0], &wake_[1]}) close_fd(*fd);
    throw ServerGone(fmt::format("could not be started: {}", failed->what()));
  }
  ::fcntl(stdin_, F_SETFL, O_NONBLOCK);
  ::fcntl(stdout_, F_SETFL, O_NONBLOCK);
  stderr_thread_ = std::thread([this] { relay_stderr(); });
  log::info("started MCP server {} (pid {})", command_text_, pid_);
}

McpServer::~McpServer() { stop(); }

void McpServer::stop() {
  close_fd(stdin_);  // the transport's way to ask a server to exit
  const char* how = "after its stdin was closed";
  if (!status_ && !reaped(shutdown_grace_)) {
    how = "after SIGTERM";
    ::kill(pid_, SIGTERM);
    if (!reaped(shutdown_grace_)) {
      how = "after SIGKILL";
      ::kill(pid_, SIGKILL);
      reaped(std::chrono::milliseconds::max());
    }
  }
  log::info("MCP server {} (pid {}) {} {}", command_text_, pid_, process::describe_status(status_.value_or(0)), how);
  {
    // A process the server left behind may still hold its stderr: wait a little, then stop reading.
    std::unique_lock lock(stderr_mutex_);
    stderr_ended_cv_.wait_for(lock, std::chrono::milliseconds(500), [&] { return stderr_ended_; });
  }
  [[maybe_unused]] auto ignored = ::write(wake_[1], "x", 1);
  if (stderr_thread_.joinable()) stderr_thread_.join();
  for (int* fd : {&stdout_, &stderr_, &wake_[0], &wake_[1]}) close_fd(*fd);
}

bool McpServer::reaped(std::chrono::milliseconds wait) {
  if (status_) return true;
  const auto deadline = wait == std::chrono::milliseconds::max() ? Clock::time_point::max() : Clock::now() + wait;
  for (;;) {
    int status = 0;
    const pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      status_ = status;
      return true;
    }
    if (r < 0 && errno != EINTR) {
      status_ = 0;  // not our child any more (cannot happen: nobody else waits for it)
      return true;
    }
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

void McpServer::gone(std::string what) {
  broken_ = what;
  throw ServerGone(std::move(what));
}

std::string McpServer::exit_description() {
  if (reaped(std::chrono::seconds(2))) return process::describe_status(*status_);
  ::kill(pid_, SIGKILL);
  reaped(std::chrono::milliseconds::max());
  return "was still running, so it was killed";
}

std::string McpServer::stderr_tail(bool wait_for_end) {
  std::unique_lock lock(stderr_mutex_);
  if (wait_for_end) stderr_ended_cv_.wait_for(lock, std::chrono::seconds(1), [&] { return stderr_ended_; });
  std::string out;
  for (const auto& line : tail_) out += (out.empty() ? "" : "\n") + line;
  return out;
}

void McpServer::relay_stderr() {
  std::string partial;
  auto emit = [&](std::string line) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    log::info("{}[{}]: {}", program_, pid_, log::printable(line, kStderrLine));
    std::lock_guard lock(stderr_mutex_);
    if (line.size() > 1024) {
      line.resize(1021);
      line += "...";
    }
    tail_bytes_ += line.size();
    tail_.push_back(std::move(line));
    while (tail_.size() > kTailLines || tail_bytes_ > kTailBytes) {
      tail_bytes_ -= tail_.front().size();
      tail_.pop_front();
    }
  };
  char buffer[8192];
  for (;;) {
    pollfd fds[2] = {{stderr_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (fds[1].revents) break;
    const ssize_t n = ::read(stderr_, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    partial.append(buffer, static_cast<std::size_t>(n));
    std::size_t start = 0;
    for (std::size_t nl; (nl = partial.find('\n', start)) != std::string::npos; start = nl + 1)
      emit(partial.substr(start, nl - start));
    partial.erase(0, start);
    if (partial.size() > kStderrLine) {
      emit(partial);
      partial.clear();
    }
  }
  if (!partial.empty()) emit(std::move(partial));
  std::lock_guard lock(stderr_mutex_);
  stderr_ended_ = true;
  stderr_ended_cv_.notify_all();
}

bool McpServer::fill(std::optional<Clock::time_point> deadline) {
  for (;;) {
    pollfd p{stdout_, POLLIN, 0};
    const int r = ::poll(&p, 1, poll_timeout(deadline));
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) {
      if (deadline && Clock::now() >= *deadline) return false;
      continue;
    }
    char buffer[64 * 1024];
    const ssize_t n = ::read(stdout_, buffer, sizeof buffer);
    if (n > 0) {
      in_.append(buffer, static_cast<std::size_t>(n));
      return true;
    }
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n == 0) gone("closed its standard output");
    gone(fmt::format("could not be read from: {}", std::strerror(errno)));
  }
}

json::object McpServer::read_message(std::optional<Clock::time_point> deadline) {
  for (;;) {
    const auto nl = in_.find('\n', scanned_);
    if (nl == std::string::npos) {
      scanned_ = in_.size();
      if (in_.size() > kMaxLine)
        gone(fmt::format("sent a line longer than {} MiB, which this client does not read", kMaxLine >> 20));
      if (!fill(deadline)) throw ServerTimeout("no answer in time");
      continue;
    }
    std::string line = in_.substr(0, nl);
    in_.erase(0, nl + 1);
    scanned_ = 0;
    while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.pop_back();
    if (line.empty()) continue;
    boost::system::error_code ec;
    json::parse_options options;
    options.max_depth = 1000;
    json::value message = json::parse(line, ec, {}, options);
    if (ec) {
      // JavaScript servers write a string cut inside a surrogate pair as a lone \uD83D, which Boost.JSON
      // refuses: read it with U+FFFD in its place.
      ec.clear();
      message = json::parse(protocol::replace_lone_surrogates(line), ec, {}, options);
    }
    if (!ec && message.is_object()) return std::move(message.as_object());
    // A broken answer must not leave its request waiting for ever: a line that names an id fails the
    // request being waited for.
    if (ec && line.find("\"id\"") != std::string::npos)
      throw ServerError(-32700,
                        fmt::format("sent an answer that is not valid JSON ({}): {}", ec.message(),
                                    log::printable(line, 300)),
                        json::value());
    // Stdout belongs to the protocol; a server that prints there anyway is logged, not fatal.
    log::warn("MCP server {} (pid {}) wrote a line that is not a JSON-RPC message; skipped: {}", program_, pid_,
              log::printable(line));
  }
}

void McpServer::write_line(const std::string& line, std::optional<Clock::time_point> deadline) {
  if (!broken_.empty()) throw ServerGone(broken_);
  std::string_view rest = line;
  while (!rest.empty()) {
    // Read while writing: a server blocked on writing its stdout may not read its stdin.
    pollfd fds[2] = {{stdin_, POLLOUT, 0}, {stdout_, POLLIN, 0}};
    const int r = ::poll(fds, 2, poll_timeout(deadline));
    if (r < 0 && errno == EINTR) continue;
    // Checked on every pass: a server that keeps writing while it does not read wakes this loop each time.
    if (deadline && Clock::now() >= *deadline) {
      // Half a message cannot be taken back: the stream would not be JSON-RPC any more.
      if (rest.size() < line.size()) gone("stopped reading its input in the middle of a message");
      throw ServerTimeout("it did not read its input in time");
    }
    if (fds[1].revents) {
      // A server that writes more than two lines' limit while it does not read is not one to wait for
      // (and its readable stdout would make this loop spin).
      if (in_.size() >= 2 * kMaxLine)
        gone(fmt::format("wrote more than {} MiB without reading its input", (2 * kMaxLine) >> 20));
      fill(Clock::now());
    }
    if (fds[0].revents & (POLLERR | POLLHUP)) gone("closed its standard input");
    if (!(fds[0].revents & POLLOUT)) continue;
    const ssize_t n = ::write(stdin_, rest.data(), rest.size());
    if (n > 0) rest.remove_prefix(static_cast<std::size_t>(n));
    else if (n < 0 && errno != EINTR && errno != EAGAIN)
      gone(errno == EPIPE ? "closed its standard input" : fmt::format("could not be written to: {}", std::strerror(errno)));
  }
}

void McpServer::cancel(std::int64_t id, std::string reason) {
  cancelled_.insert(id);
  if (cancelled_.size() > 1000) cancelled_.erase(cancelled_.begin());  // answers that never came
  // Bounded: a server that does not read its input now is not waited for (the next request finds out).
  json::object message{{"jsonrpc", "2.0"},
                       {"method", "notifications/cancelled"},
                       {"params", json::object{{"requestId", id}, {"reason", std::move(reason)}}}};
  try {
    write_line(json::serialize(message) + "\n", Clock::now() + std::chrono::seconds(2));
  } catch (const ServerTimeout&) {
  }
}

void McpServer::notify(std::string_view method, json::object params) {
  json::object message{{"jsonrpc", "2.0"}, {"method", method}};
  if (!params.empty()) message["params"] = std::move(params);
  write_line(json::serialize(message) + "\n", std::nullopt);
}

json::value McpServer::request(std::string_view method, json::object params, const Listener& listener,
                               std::optional<Clock::time_point> deadline) {
  const std::int64_t id = next_id_++;
  json::object message{{"jsonrpc", "2.0"}, {"id", id}, {"method", method}, {"params", std::move(params)}};
  write_line(json::serialize(message) + "\n", deadline);
  for (;;) {
    json::object m = read_message(deadline);
    const json::value* method_of = m.if_contains("method");
    const json::value* id_of = m.if_contains("id");
    static const json::object kNoParams;
    const json::value* p = m.if_contains("params");
    const json::object& params_of = p && p->is_object() ? p->get_object() : kNoParams;
    if (method_of && method_of->is_string()) {
      const std::string_view name = method_of->get_string();
      if (!id_of) {
        if (listener) listener(name, params_of, false);
        continue;
      }
      // A request of the server's. ping is answered; this client declares no capabilities, so anything
      // else (sampling, roots, elicitation) is refused rather than left waiting.
      json::object answer{{"jsonrpc", "2.0"}, {"id", *id_of}};
      if (name == "ping") {
        answer["result"] = json::object();
      } else {
        answer["error"] = json::object{
            {"code", -32601},
            {"message", fmt::format("robot-mcp-worker does not offer {} (it declares no client capabilities: no "
                                    "sampling, roots or elicitation)",
                                    name)}};
        log::warn("MCP server {} (pid {}) asked for {}, which robot-mcp-worker does not offer; refused", program_,
                  pid_, name);
        if (listener) listener(name, params_of, true);
      }
      write_line(json::serialize(answer) + "\n", deadline);
      continue;
    }
    if (id_of && *id_of == json::value(id)) {
      if (const auto* error = m.if_contains("error"); error && error->is_object()) {
        const auto& e = error->get_object();
        const auto* code = e.if_contains("code");
        const auto* text = e.if_contains("message");
        throw ServerError(code && code->is_int64() ? static_cast<int>(code->get_int64()) : 0,
                          text && text->is_string() ? std::string(text->get_string()) : json::serialize(*error),
                          e.contains("data") ? e.at("data") : json::value());
      }
      const auto* result = m.if_contains("result");
      return result ? *result : json::value(json::object());
    }
    if (id_of && id_of->is_int64() && cancelled_.count(id_of->get_int64())) {
      log::debug("MCP server {} (pid {}) answered request {}, which was cancelled; skipped", program_, pid_,
                 id_of->get_int64());
      cancelled_.erase(id_of->get_int64());
      continue;
    }
    log::warn("MCP server {} (pid {}) sent a message that answers nothing pending (request {} is); skipped: {}",
              program_, pid_, id, log::printable(json::serialize(m)));
  }
}

}  // namespace rjg::mcp
