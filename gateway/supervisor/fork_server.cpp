// ForkServer: the template process of a library with fork_server = true, its control socket and its
// supervision. The wire format is the template's (robot_jsonrpc_fork_control.py): one JSON object per
// SOCK_SEQPACKET packet; a request carries the new worker's stdin, stdout and stderr (SCM_RIGHTS).
#include "gateway/supervisor/fork_server.hpp"

#include "common/log.hpp"
#include "common/process/child.hpp"
#include "gateway/supervisor/durations.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>

#include <fmt/format.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>

namespace rjg::gateway::supervisor {
namespace json = boost::json;
using namespace std::chrono_literals;

namespace {
constexpr std::string_view kTemplateFile = "robot_jsonrpc_fork_server.py";
constexpr int kWireVersion = 1;
constexpr std::size_t kMaxPacket = 65536;  // the template's limit too
constexpr std::size_t kLogLineMax = 4096;
// Back-off between template starts that keep failing: 1 s, doubling, at most a minute.
constexpr auto kFirstRetry = 1s;
constexpr auto kLongestRetry = 60s;

std::string joined(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& arg : argv) out += (out.empty() ? "" : " ") + arg;
  return out;
}
}  // namespace

TemplateProgram find_template_program() {
  namespace fs = std::filesystem;
  const std::string self = process::self_directory();
  TemplateProgram out;
  if (self.empty()) {
    out.problem = fmt::format("the gateway cannot find its own directory (/proc/self/exe), where {} is looked for",
                              kTemplateFile);
    return out;
  }
  const fs::path candidates[] = {fs::path(self) / "fork_server" / kTemplateFile,
                                 fs::path(self).parent_path() / "share/robot-jsonrpc-gateway/fork_server" / kTemplateFile};
  for (const auto& candidate : candidates) {
    std::error_code ec;
    if (fs::is_regular_file(candidate, ec)) {
      out.path = candidate.string();
      return out;
    }
  }
  out.problem = fmt::format("the fork server's program {} is neither in {} nor in {}: install it with the gateway",
                            kTemplateFile, candidates[0].parent_path().string(), candidates[1].parent_path().string());
  return out;
}

// A request on its way: set when the template answered (pid or error), or when the template was lost.
struct ForkServer::Pending {
  explicit Pending(asio::any_io_executor executor) : done(executor) {}
  runtime::AsyncEvent done;
  pid_t pid = 0;
  std::string error;
};

ForkServer::ForkServer(asio::any_io_executor executor, std::shared_ptr<const config::Library> library,
                       ChildReaper& reaper, LibraryMetrics& metrics)
    : executor_(std::move(executor)),
      library_(std::move(library)),
      reaper_(reaper),
      metrics_(metrics),
      tag_(fmt::format("fork server of library '{}'", library_->name)),
      gone_(executor_) {}

ForkServer::~ForkServer() {
  // Never leaves its template behind: the pool that owns it stops it first; this is the backstop.
  if (pid_ > 0) ::killpg(pid_, SIGKILL);
}

const char* ForkServer::state_name(State state) {
  switch (state) {
    case State::starting: return "starting";
    case State::ready: return "ready";
    case State::down: return "down";
    case State::stopped: return "stopped";
  }
  return "?";
}

ForkServer::View ForkServer::view() const { return View{state_, pid_, problem_, starts_, forks_}; }

void ForkServer::start() {
  if (state_ == State::stopped || pid_ > 0) return;
  launch();
}

void ForkServer::launch() {
  const auto shape = config::reference_server_command(library_->command);  // the loader checked it
  const auto program = find_template_program();
  if (!shape) return lose(0, "the library's command is not the reference server's --stdio form");
  if (!program.path) return lose(0, program.problem);
  const auto interpreter = resolve_command(shape->interpreter.front());
  if (!interpreter.path) return lose(0, "command " + interpreter.problem);

  int pair[2], log_pipe[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0)
    return lose(0, fmt::format("no control socket: {}", std::strerror(errno)));
  OwnedFd ours(pair[0]), theirs(pair[1]);
  if (::pipe2(log_pipe, O_CLOEXEC) != 0) return lose(0, fmt::format("no pipe: {}", std::strerror(errno)));
  OwnedFd log_read(log_pipe[0]), log_write(log_pipe[1]);

  process::ChildOptions options;
  options.argv.push_back(*interpreter.path);
  options.argv.insert(options.argv.end(), shape->interpreter.begin() + 1, shape->interpreter.end());
  options.argv.insert(options.argv.end(), {*program.path, "--name", library_->name, "--control-fd", "0"});
  for (const auto& module : library_->preload) options.argv.insert(options.argv.end(), {"--preload", module});
  options.argv.emplace_back("--");
  options.argv.insert(options.argv.end(), shape->server_args.begin(), shape->server_args.end());
  options.env = worker_environment(*library_);
  if (library_->cwd) options.cwd = *library_->cwd;
  options.stdin_fd = theirs.get();
  options.stdout_fd = log_write.get();
  options.stderr_fd = log_write.get();
  // Its own group: a Ctrl-C on the gateway's terminal does not reach it, and killpg ends it whole. No
  // rlimits: each worker gets the library's in its request (a CPU limit would end a long-lived template).
  options.own_group = true;
  options.die_with_parent = false;

  // The gateway's ends join the loop first: once the template runs, nothing is left that could fail.
  boost::system::error_code ec;
  auto control = std::make_shared<asio::posix::stream_descriptor>(executor_);
  control->assign(ours.get(), ec);
  if (ec) return lose(0, fmt::format("its control socket cannot join the event loop: {}", ec.message()));
  ours.release();
  auto log = std::make_shared<asio::readable_pipe>(executor_);
  log->assign(log_read.get(), ec);
  if (ec) return lose(0, fmt::format("its log pipe cannot join the event loop: {}", ec.message()));
  log_read.release();

  pid_t pid = -1;
  {
    auto holding = reaper_.hold();
    try {
      pid = process::start_child(options);
    } catch (const process::StartError& e) {
      return lose(0, fmt::format("cannot start {}: {}", *interpreter.path, std::strerror(e.code().value())));
    }
    // Known before it is watched: the reaper may report its end at once (it runs on this loop).
    pid_ = pid;
    state_ = State::starting;
    settled_ = std::make_shared<runtime::AsyncEvent>(executor_);
    control_ = control;
    ++starts_;
    metrics_.fork_server_starts.fetch_add(1, std::memory_order_relaxed);
    std::weak_ptr<ForkServer> weak = weak_from_this();
    reaper_.watch(pid, executor_, [weak, pid](ExitStatus status) {
      if (auto self = weak.lock()) self->on_exit(pid, status);
    });
  }
  log::info("{}: started pid {}: {}", tag_, pid, joined(options.argv));
  auto self = shared_from_this();
  asio::co_spawn(executor_, [self, log, pid] { return self->read_log(log, pid); }, runtime::log_exceptions(tag_));
  if (pid_ != pid) return;  // it ended already (lose() said how)
  asio::co_spawn(executor_, [self, control, pid] { return self->read_control(control, pid); },
                 runtime::log_exceptions(tag_));
  asio::co_spawn(executor_, [self, pid] { return self->watch_ready(pid); }, runtime::log_exceptions(tag_));
}

asio::awaitable<void> ForkServer::watch_ready(pid_t pid) {
  auto settled = settled_;
  if (co_await settled->wait_for(library_->startup_timeout) || pid != pid_) co_return;
  ::killpg(pid, SIGKILL);
  lose(pid, fmt::format("not ready after startup_timeout ({}); killed", seconds_text(library_->startup_timeout)));
}

asio::awaitable<void> ForkServer::read_control(std::shared_ptr<asio::posix::stream_descriptor> control, pid_t pid) {
  std::string packet(kMaxPacket, '\0');
  for (;;) {
    auto [ec] = co_await control->async_wait(asio::posix::stream_descriptor::wait_read,
                                             asio::as_tuple(asio::use_awaitable));
    if (ec || !control->is_open()) co_return;  // closed: stopped or lost
    const ssize_t n = ::recv(control->native_handle(), packet.data(), packet.size(), MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (n <= 0) break;  // the template closed its end: it is exiting, and the reaper will say how
    if (pid != pid_) co_return;
    handle_packet(std::string_view(packet.data(), static_cast<std::size_t>(n)), pid);
  }
  // A template that closed its end of the socket but goes on running could fork nothing more: after a
  // moment for its exit to be reaped (which says how it ended), it is ended and replaced.
  asio::steady_timer grace(executor_, 1s);
  co_await grace.async_wait(asio::as_tuple(asio::use_awaitable));
  if (pid != pid_ || state_ == State::stopped) co_return;
  ::killpg(pid, SIGKILL);
  lose(pid, fmt::format("pid {} closed its control socket but did not exit; killed", pid));
}

void ForkServer::handle_packet(std::string_view packet, pid_t pid) {
  boost::system::error_code ec;
  json::value value = json::parse(packet, ec);
  const json::object* message = !ec ? value.if_object() : nullptr;
  const json::value* version = message ? message->if_contains("v") : nullptr;
  if (!message || !version || !version->is_int64() || version->as_int64() != kWireVersion) {
    ::killpg(pid, SIGKILL);
    return lose(pid, fmt::format("sent '{}', which is not version {} of the fork server's wire format: the gateway and "
                                 "its fork server program come from different releases (install them together); "
                                 "killed",
                                 log::printable(packet, 200), kWireVersion));
  }
  if (const auto* ready = message->if_contains("ready"); ready && ready->is_bool() && ready->as_bool()) {
    state_ = State::ready;
    ready_at_ = std::chrono::steady_clock::now();
    problem_.clear();
    settled_->set();
    auto text = [&](std::string_view key) {
      const auto* v = message->if_contains(key);
      return v && v->is_string() ? std::string(v->as_string()) : std::string("?");
    };
    std::string preloaded;
    if (const auto* list = message->if_contains("preloaded"); list && list->is_array())
      for (const auto& module : list->as_array())
        if (module.is_string()) preloaded += (preloaded.empty() ? "" : ", ") + std::string(module.as_string());
    log::info("{}: ready (pid {}; Python {}, Robot Framework {}, server {}; preloaded: {}): workers are forked from now on",
              tag_, pid, text("python"), text("robot"), text("server"), preloaded.empty() ? "none" : preloaded);
    if (warned_) log::warn("{}: back: workers of library '{}' are forked again", tag_, library_->name);
    return;
  }
  const auto* id = message->if_contains("id");
  // Answers come in request order: one to a request the template could not read (id null) is the oldest's.
  auto it = id && id->is_uint64() ? pending_.find(id->as_uint64())
          : id && id->is_int64() && id->as_int64() >= 0 ? pending_.find(static_cast<std::uint64_t>(id->as_int64()))
          : (!id || id->is_null()) && message->contains("error") ? pending_.begin()
                                                                 : pending_.end();
  if (it == pending_.end()) {
    log::warn("{}: pid {} answered a request the gateway did not make or no longer waits for: '{}'", tag_, pid,
              log::printable(packet, 200));
    return;
  }
  auto& pending = *it->second;
  if (const auto* error = message->if_contains("error"); error && error->is_string())
    pending.error = std::string(error->as_string());
  else if (const auto* worker = message->if_contains("pid"); worker && worker->is_int64() && worker->as_int64() > 0)
    pending.pid = static_cast<pid_t>(worker->as_int64());
  else
    pending.error = fmt::format("an answer without a pid or an error: '{}'", log::printable(packet, 200));
  pending.done.set();
  pending_.erase(it);  // answered: a loss of the template from now on does not undo it
}

asio::awaitable<void> ForkServer::read_log(std::shared_ptr<asio::readable_pipe> log_pipe, pid_t pid) {
  // The template's own lines ("[WARN] fork server for library 'X' (pid N): ...") keep their level; anything
  // else it writes (Robot's or Python's own output) is logged as it comes.
  co_await read_lines(*log_pipe, kLogLineMax, [this, pid](std::string_view line) {
    static constexpr std::pair<const char*, int> kLevels[] = {{"[ERROR] ", 2}, {"[WARN] ", 1}, {"[INFO] ", 0}};
    for (auto [prefix, level] : kLevels) {
      if (!line.starts_with(prefix)) continue;
      const auto text = log::printable(line.substr(std::strlen(prefix)), kLogLineMax);
      if (level == 2) log::error("{}", text);
      else if (level == 1) log::warn("{}", text);
      else log::info("{}", text);
      return;
    }
    log::info("{} pid {} output: {}", tag_, pid, log::printable(line, kLogLineMax));
  });
}

void ForkServer::on_exit(pid_t pid, ExitStatus status) {
  if (pid != pid_) return;  // one that was lost already (killed): said then
  if (state_ == State::stopped) {
    log::info("{}: pid {} ended ({})", tag_, pid, status.describe());
    pid_ = 0;
    if (kill_timer_) kill_timer_->cancel();
    gone_.set();
    return;
  }
  lose(pid, status.signaled || status.code != 3
                ? fmt::format("pid {} ended with {}", pid, status.describe())
                : fmt::format("pid {} could not get ready (exit code 3; its log lines above say why)", pid));
}

void ForkServer::fail_pending(const std::string& why) {
  for (auto& [id, pending] : pending_) {
    pending->error = why;
    pending->done.set();
  }
  pending_.clear();
}

void ForkServer::lose(pid_t pid, std::string problem) {
  if (pid != pid_) return;
  if (control_) {
    boost::system::error_code ignored;
    control_->close(ignored);
    control_.reset();
  }
  pid_ = 0;
  problem_ = std::move(problem);
  fail_pending(fmt::format("the fork server was lost: {}", problem_));
  if (settled_) settled_->set();
  if (state_ == State::stopped) return;
  // A template that served for a while before it died starts a new run of failures (back-off, WARN).
  if (state_ == State::ready && std::chrono::steady_clock::now() - ready_at_ >= kHealthyUptime) {
    failures_ = 0;
    warned_ = false;
  }
  state_ = State::down;
  ++failures_;
  const auto delay = std::min<std::chrono::milliseconds>(kLongestRetry, kFirstRetry * (1u << std::min<std::size_t>(failures_ - 1, 6)));
  const auto text = fmt::format("{}: {}; workers it forked live on. New workers of library '{}' start the plain way "
                                "(a fresh interpreter each: slower, more memory) until it is back; next try in {}",
                                tag_, problem_, library_->name, duration_text(delay));
  // Once per run of failures as a WARN (and in STATUS=, while it lasts); the retries that fail again, INFO.
  if (!warned_) log::warn("{}", text);
  else log::info("{}", text);
  warned_ = true;
  retry_ = std::make_unique<asio::steady_timer>(executor_, delay);
  std::weak_ptr<ForkServer> weak = weak_from_this();
  retry_->async_wait([weak](const boost::system::error_code& ec) {
    if (auto self = weak.lock(); self && !ec) self->start();
  });
}

void ForkServer::stop() {
  if (state_ == State::stopped) return;
  state_ = State::stopped;
  if (retry_) retry_->cancel();
  fail_pending("the fork server is stopping");
  if (settled_) settled_->set();
  if (control_) {
    // The template exits when its end of the control socket is closed; SIGKILL is the backstop.
    boost::system::error_code ignored;
    control_->close(ignored);
    control_.reset();
  }
  if (pid_ <= 0) return gone_.set();
  log::info("{}: stopping pid {} (workers it forked live on)", tag_, pid_);
  kill_timer_ = std::make_unique<asio::steady_timer>(executor_, library_->shutdown_grace);
  kill_timer_->async_wait([weak = weak_from_this(), pid = pid_](const boost::system::error_code& ec) {
    auto self = weak.lock();
    if (ec || !self || self->pid_ != pid) return;
    log::warn("{}: pid {} still running {} after its control socket was closed; sending SIGKILL", self->tag_, pid,
              seconds_text(self->library_->shutdown_grace));
    ::killpg(pid, SIGKILL);
  });
}

asio::awaitable<void> ForkServer::wait_gone(std::chrono::steady_clock::time_point deadline) {
  auto self = shared_from_this();
  if (!co_await gone_.wait_until(deadline)) log::error("{}: pid {} still not gone after shutdown", tag_, pid_);
}

asio::awaitable<bool> ForkServer::send_request(int control, const std::string& text, const int (&fds)[3]) {
  alignas(cmsghdr) char space[CMSG_SPACE(sizeof fds)] = {};
  for (;;) {
    iovec data{const_cast<char*>(text.data()), text.size()};
    msghdr message{};
    message.msg_iov = &data;
    message.msg_iovlen = 1;
    message.msg_control = space;
    message.msg_controllen = sizeof space;
    cmsghdr* header = CMSG_FIRSTHDR(&message);
    header->cmsg_level = SOL_SOCKET;
    header->cmsg_type = SCM_RIGHTS;
    header->cmsg_len = CMSG_LEN(sizeof fds);
    std::memcpy(CMSG_DATA(header), fds, sizeof fds);
    if (::sendmsg(control, &message, MSG_DONTWAIT | MSG_NOSIGNAL) >= 0) co_return true;
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      log::warn("{}: cannot send a fork request: {}", tag_, std::strerror(errno));
      co_return false;
    }
    // Its socket buffer is full of requests: wait until the template has read some.
    auto descriptor = control_;
    if (!descriptor) co_return false;
    auto [ec] = co_await descriptor->async_wait(asio::posix::stream_descriptor::wait_write,
                                                asio::as_tuple(asio::use_awaitable));
    if (ec || control_ != descriptor) co_return false;
  }
}

asio::awaitable<void> ForkServer::settle() {
  if (state_ != State::starting || !settled_) co_return;
  auto self = shared_from_this();
  auto settled = settled_;
  co_await settled->wait_for(library_->startup_timeout);
}

asio::awaitable<std::optional<ForkedProcess>> ForkServer::fork(const config::Library& settings) {
  auto self = shared_from_this();
  if (state_ != State::ready || !control_) co_return std::nullopt;

  // The worker's ends go to the template (which dup2s them to the worker's 0, 1 and 2); the gateway keeps
  // the others, as a plain start does.
  int in[2], out[2], err[2];
  if (::pipe2(in, O_CLOEXEC) != 0) co_return std::nullopt;
  OwnedFd in_read(in[0]), in_write(in[1]);
  if (::pipe2(out, O_CLOEXEC) != 0) co_return std::nullopt;
  OwnedFd out_read(out[0]), out_write(out[1]);
  if (::pipe2(err, O_CLOEXEC) != 0) co_return std::nullopt;
  OwnedFd err_read(err[0]), err_write(err[1]);

  json::object limits;
  const auto& rlimits = settings.rlimits;
  if (rlimits.address_space) limits["as"] = rlimits.address_space;
  if (rlimits.open_files) limits["nofile"] = rlimits.open_files;
  if (rlimits.cpu_seconds) limits["cpu"] = rlimits.cpu_seconds;
  if (rlimits.processes) limits["nproc"] = rlimits.processes;
  if (rlimits.core_size_set) limits["core"] = rlimits.core_size;
  const std::uint64_t id = next_id_++;
  json::object request{{"v", kWireVersion}, {"id", id}, {"rlimits", std::move(limits)}};
  if (const int cpu = worker_cpu(settings); cpu >= 0) request["cpu"] = cpu;

  // From here until the Worker watches it, the reaper keeps what it reaps of unknown children.
  auto window = reaper_.open_fork_window();
  auto pending = std::make_shared<Pending>(executor_);
  pending_[id] = pending;
  const pid_t template_pid = pid_;
  const int fds[3] = {in_read.get(), out_write.get(), err_write.get()};
  if (!co_await send_request(control_->native_handle(), json::serialize(request), fds)) {
    pending_.erase(id);
    co_return std::nullopt;
  }
  in_read.reset(), out_write.reset(), err_write.reset();  // the template holds its copies now
  const bool answered = co_await pending->done.wait_for(library_->startup_timeout);
  pending_.erase(id);
  if (!answered) {
    if (template_pid == pid_) ::killpg(template_pid, SIGKILL);
    lose(template_pid, fmt::format("pid {} did not answer a fork request within startup_timeout ({}); killed",
                                   template_pid, seconds_text(library_->startup_timeout)));
    co_return std::nullopt;
  }
  if (!pending->error.empty()) {
    log::warn("{}: no worker forked: {}; this one starts the plain way", tag_, pending->error);
    co_return std::nullopt;
  }
  ++forks_;
  metrics_.workers_forked.fetch_add(1, std::memory_order_relaxed);
  ForkedProcess forked;
  forked.pid = pending->pid;
  window.expect(pending->pid);
  forked.executable = fmt::format("{} forked by the fork server pid {}", config::kReferenceServerModule, template_pid);
  forked.stdin_write = std::move(in_write);
  forked.stdout_read = std::move(out_read);
  forked.stderr_read = std::move(err_read);
  forked.window = std::move(window);
  co_return forked;
}

}  // namespace rjg::gateway::supervisor
