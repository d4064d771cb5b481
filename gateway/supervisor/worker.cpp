// Worker: starting one (a spawned process, or a connection to an upstream server), the
// initialize/initialized handshake, and the call path: one call at a time, each with its id and its
// deadline. Reading what the worker sends (the answers, its logs relayed to the call in flight, stray
// output, stderr), how its death is established and how it is stopped: worker_end.cpp.
#include "gateway/supervisor/worker.hpp"

#include "common/log.hpp"
#include "common/protocol/protocol.hpp"
#include "common/runtime/loops.hpp"
#include "gateway/supervisor/durations.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <fmt/format.h>

#include <fcntl.h>
#include <signal.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

#include <chrono>

namespace rjg::gateway::supervisor {
using namespace std::chrono_literals;

namespace {
// A worker's stdin is written by the gateway only; a large argument may sit here while the worker reads.
constexpr std::size_t kStdinHighWater = 8u << 20;
}  // namespace

Worker::Worker(asio::any_io_executor executor, const config::Library& library, SpawnedProcess process,
               const WorkerOptions& options)
    : executor_(executor),
      library_(library),
      options_(options),
      pid_(process.pid),
      executable_(std::move(process.executable)),
      where_(fmt::format("pid {}", pid_)),
      tag_(fmt::format("worker {}[{}]", library.label(), pid_)),
      channel_(runtime::StreamOptions{options.framing, protocol::FrameReader::Mode::lenient, protocol::JsonLimits{}, kStdinHighWater},
               runtime::FdStream(executor, process.stdout_pipe.release()), runtime::FdStream(executor, process.stdin_pipe.release())),
      stderr_(std::move(process.stderr_pipe)),
      deadline_timer_(executor),
      exited_(executor),
      stdout_done_(executor),
      stderr_done_(executor) {
  if (options.offload) channel_.classify_large_frames_on(*options.offload, runtime::kOffloadFrameBytes);
}

Worker::Worker(asio::any_io_executor executor, const config::Library& library, int socket, std::string address,
               const WorkerOptions& options)
    : executor_(executor),
      library_(library),
      options_(options),
      pid_(0),
      executable_(std::move(address)),
      where_(fmt::format("upstream {}", executable_)),
      tag_(fmt::format("upstream {}[{}]", library.label(), executable_)),
      // One socket, read and written through two descriptors (the reader and the writer close apart).
      channel_(runtime::StreamOptions{options.framing, protocol::FrameReader::Mode::strict, protocol::JsonLimits{}, kStdinHighWater},
               runtime::FdStream(executor, socket), runtime::FdStream(executor, ::fcntl(socket, F_DUPFD_CLOEXEC, 3))),
      stderr_(executor),
      deadline_timer_(executor),
      exited_(executor),
      stdout_done_(executor),
      stderr_done_(executor) {
  if (options.offload) channel_.classify_large_frames_on(*options.offload, runtime::kOffloadFrameBytes);
  stderr_done_.set();  // an upstream has no stderr to read
}

Worker::~Worker() {
  // No orphans: a worker object never outlives its process silently.
  if (!exit_status_) kill_now();
}

std::string Worker::subject() const {
  if (is_upstream()) return fmt::format("The upstream of library '{}' ({})", library_.label(), executable_);
  return fmt::format("The worker of library '{}' (pid {})", library_.label(), pid_);
}

std::string Worker::subject_lower() const {
  auto text = subject();
  text[0] = 't';
  return text;
}

asio::awaitable<std::shared_ptr<Worker>> Worker::start(asio::any_io_executor executor, const config::Library& library,
                                                       ChildReaper& reaper, const WorkerOptions& options,
                                                       std::optional<ForkedProcess> forked) {
  if (library.is_upstream()) {
    auto worker = co_await connect(executor, library, options);
    co_await begin(worker);
    co_return worker;
  }
  // The reaper must know the child before it can collect it (it reaps on its own loop, maybe meanwhile).
  auto spawning = reaper.hold();
  std::optional<SpawnedProcess> process;
  try {
    process.emplace(forked ? adopt_forked(executor, *forked) : spawn_worker(executor, library));
  } catch (const std::system_error& e) {
    // A forked worker that cannot be adopted must not live on unwatched (it is reaped as it ends).
    if (forked) ::killpg(forked->pid, SIGKILL);
    log::error("library {}: cannot start worker: {}", library.label(), e.what());
    throw WorkerError(protocol::kWorkerFailed,
                      fmt::format("Cannot start the worker of library '{}': {}. Check the 'command' of this library "
                                  "in the gateway configuration.",
                                  library.label(), e.what()),
                      json::object{{"library", library.label()}});
  }

  // Deleted on its own loop, whichever loop lets go of it last (a pool on another loop, say).
  auto worker = runtime::make_shared_on<Worker>(executor, executor, library, std::move(*process), options);
  log::info("{}: started: {}", worker->tag_, worker->executable_);
  std::weak_ptr<Worker> weak = worker;
  auto on_exit = [weak](ExitStatus status) {
    if (auto w = weak.lock()) w->on_exit(status);
  };
  // A forked worker may have ended before this: its fork window kept the status for this watch.
  if (forked) forked->window.watch(executor, std::move(on_exit));
  else reaper.watch(worker->pid_, executor, std::move(on_exit));
  spawning.unlock();
  co_await begin(worker);
  co_return worker;
}

asio::awaitable<std::shared_ptr<Worker>> Worker::connect(asio::any_io_executor executor, const config::Library& library,
                                                         const WorkerOptions& options) {
  const auto address = config::parse_upstream_address(library.upstream);
  auto fail = [&](const std::string& what) {
    log::warn("library {}: cannot reach the upstream {}: {}", library.label(), library.upstream, what);
    return WorkerError(protocol::kWorkerFailed,
                       fmt::format("Cannot reach the upstream of library '{}' at {}: {}. Check that the server runs "
                                   "there and accepts connections from the gateway, and the 'upstream' of this library "
                                   "in the gateway configuration.",
                                   library.label(), library.upstream, what),
                       json::object{{"library", library.label()}, {"upstream", library.upstream}});
  };
  if (!address) throw fail("not a tcp://HOST:PORT address");
  // Resolving and connecting share one deadline: connect_timeout. The timer's handler may run after this
  // coroutine has moved on (it fired just as the connection completed): it holds what it touches.
  struct Attempt {
    explicit Attempt(asio::any_io_executor ex) : socket(ex), resolver(ex) {}
    asio::ip::tcp::socket socket;
    asio::ip::tcp::resolver resolver;
    bool timed_out = false;
  };
  auto state = std::make_shared<Attempt>(executor);
  asio::steady_timer deadline(executor, library.connect_timeout);
  deadline.async_wait([state](const boost::system::error_code& ec) {
    if (ec) return;
    state->timed_out = true;
    state->resolver.cancel();
    boost::system::error_code ignored;
    state->socket.close(ignored);
  });
  auto [resolve_error, endpoints] = co_await state->resolver.async_resolve(
      address->host, std::to_string(address->port), asio::ip::tcp::resolver::numeric_service,
      asio::as_tuple(asio::use_awaitable));
  if (state->timed_out)
    throw fail(fmt::format("resolving '{}' took longer than connect_timeout ({})", address->host,
                           seconds_text(library.connect_timeout)));
  if (resolve_error) {
    deadline.cancel();
    throw fail(fmt::format("cannot resolve '{}': {}", address->host, resolve_error.message()));
  }
  auto [connect_error, endpoint] =
      co_await asio::async_connect(state->socket, endpoints, asio::as_tuple(asio::use_awaitable));
  deadline.cancel();
  if (state->timed_out)
    throw fail(fmt::format("no connection within connect_timeout ({})", seconds_text(library.connect_timeout)));
  if (connect_error) throw fail(connect_error.message());
  boost::system::error_code ec;
  state->socket.set_option(asio::ip::tcp::no_delay(true), ec);
  // A host that is switched off sends nothing: keepalive probes find it within about a minute (30 s idle,
  // then 3 probes 10 s apart), so a keyword without keyword_timeout does not wait for hours.
  state->socket.set_option(asio::socket_base::keep_alive(true), ec);
  const int fd_for_options = state->socket.native_handle();
  for (auto [option, value] : {std::pair{TCP_KEEPIDLE, 30}, std::pair{TCP_KEEPINTVL, 10}, std::pair{TCP_KEEPCNT, 3}})
    ::setsockopt(fd_for_options, IPPROTO_TCP, option, &value, sizeof value);
  const int fd = state->socket.release(ec);
  if (ec) throw fail(fmt::format("cannot take over the connection: {}", ec.message()));
  auto worker = runtime::make_shared_on<Worker>(executor, executor, library, fd, library.upstream, options);
  log::info("{}: connected to {}", worker->tag_, endpoint.address().to_string() + ":" + std::to_string(endpoint.port()));
  co_return worker;
}

asio::awaitable<void> Worker::begin(std::shared_ptr<Worker> worker) {
  auto executor = worker->executor_;
  const auto& library = worker->library_;
  const auto& options = worker->options_;
  const std::string& where = worker->tag_;
  asio::co_spawn(executor, [worker]() { return worker->read_stdout(); }, runtime::log_exceptions(where + " stdout"));
  if (!worker->is_upstream())
    asio::co_spawn(executor, [worker]() { return worker->read_stderr(); }, runtime::log_exceptions(where + " stderr"));
  asio::co_spawn(
      executor,
      [worker]() -> asio::awaitable<void> {
        co_await worker->channel_.run_writer();
        // Closing our end is how the worker sees EOF on stdin (an upstream: the end of our half).
        boost::system::error_code ignored;
        if (worker->is_upstream()) worker->channel_.stream().out().shutdown(asio::socket_base::shutdown_send, ignored);
        worker->channel_.stream().out().close(ignored);
      },
      runtime::log_exceptions(where + " stdin"));

  json::object params{{"capabilities", json::object{}},
                      {"client_info", json::object{{"name", "robot-jsonrpc-gateway"},
                                                   {"version", options.gateway_version}}}};
  std::optional<WorkerError> failure;
  try {
    protocol::Message reply = co_await worker->request(protocol::kInitialize, json::serialize(params), {}, "robot/initialize",
                                             library.startup_timeout);
    if (reply.kind == protocol::Message::Kind::error_response) {
      failure.emplace(protocol::kWorkerFailed,
                      fmt::format("{} refused robot/initialize: {}", worker->subject(), reply.text()));
    } else if (const auto result = reply.result_text(); !result.empty()) {
      const auto members = protocol::members(result);
      if (const auto* info = protocol::find(members, "server_info"); info && info->kind == protocol::Kind::object) {
        const auto info_members = protocol::members(info->value.of(result));
        const auto* name = protocol::find(info_members, "name");
        if (name && name->kind == protocol::Kind::string)
          worker->server_name_ = protocol::decode_string(name->value.of(info->value.of(result)));
      }
    }
  } catch (const WorkerError& e) {
    failure = e;
    if (e.code == protocol::kWorkerTimeout)
    {
      std::string what = e.what();
      if (what.ends_with('.')) what.pop_back();
      failure.emplace(e.code,
                      what + (worker->is_upstream() ? " (startup_timeout); the connection was closed."
                                                    : " (startup_timeout); it was stopped."),
                      e.data);
    }
  }
  if (failure) {
    co_await worker->stop("the handshake failed", false);
    co_await worker->stderr_done_.wait_for(1s);
    std::string message = failure->what();
    if (auto tail = worker->stderr_tail(); !tail.empty()) message += " Last lines of its stderr:\n" + tail;
    json::object data = worker->error_data();
    throw WorkerError(failure->code, std::move(message), std::move(data));
  }
  worker->channel_.send(protocol::make_notification_raw(protocol::kInitialized, "{}"));
  worker->set_state(State::idle, "handshake done");
}

asio::awaitable<void> Worker::acquire() {
  if (!busy_) {
    busy_ = true;
    co_return;
  }
  auto turn = std::make_shared<runtime::AsyncEvent>(executor_);
  waiting_.push_back(turn);
  co_await turn->wait();  // release() hands the turn over with busy_ still set
}

void Worker::release() {
  if (waiting_.empty()) {
    busy_ = false;
    return;
  }
  auto next = std::move(waiting_.front());
  waiting_.pop_front();
  next->set();
}

asio::awaitable<protocol::Message> Worker::call(std::string_view method, std::string params,
                                      std::weak_ptr<CallObserver> observer, std::string what,
                                      std::optional<config::Duration> timeout) {
  if (stopping_ || !alive()) throw WorkerError(protocol::kWorkerFailed, unavailable(what), error_data());
  if (method == protocol::kRunKeyword) keywords_run_.fetch_add(1, std::memory_order_relaxed);
  co_return co_await request(method, std::move(params), std::move(observer), std::move(what), timeout);
}

std::string Worker::unavailable(const std::string& what) const {
  if (!death_.empty())
    return fmt::format("Cannot run {}: {}.", what, death_);  // what comes next is the session's to say
  return fmt::format("Cannot run {}: {} is being stopped ({}).", what, subject_lower(), stop_reason_);
}

asio::awaitable<protocol::Message> Worker::request(std::string_view method, std::string params,
                                         std::weak_ptr<CallObserver> observer, std::string what,
                                         std::optional<config::Duration> timeout) {
  auto self = shared_from_this();
  co_await acquire();
  struct Turn {
    Worker* worker;
    ~Turn() { worker->release(); }
  } turn{this};

  if (!alive()) throw WorkerError(protocol::kWorkerFailed, unavailable(what), error_data());

  const State state_before = state_;
  auto flight = std::make_shared<InFlight>(next_id_++, std::move(observer));
  in_flight_ = flight;
  current_call_ = what;
  if (state_ == State::idle) set_state(State::busy, what);
  if (timeout) {
    flight->deadline = runtime::AsyncEvent::clock::now() + *timeout;
    watch_deadline(*flight->deadline);
  }
  channel_.send(protocol::make_request_raw(std::to_string(flight->id), method, params));

  co_await flight->done.wait();
  const bool answered = !flight->timed_out;
  in_flight_.reset();
  if (state_ == State::busy) set_state(State::idle, "call done");

  if (!answered) {
    throw WorkerError(protocol::kWorkerTimeout,
                      fmt::format("{} did not answer {} within {}.", subject(), what, seconds_text(*timeout)),
                      error_data());
  }
  if (!flight->reply) {
    // Start-up failures get their stderr tail from start(); a death mid-call gets it here.
    if (state_before == State::starting)
      throw WorkerError(protocol::kWorkerFailed, fmt::format("{} before answering {}.", death_, what), error_data());
    // What becomes of the import is the session's to say (on_worker_loss).
    std::string message = fmt::format("{} while running {}. The library instance is lost.", death_, what);
    if (auto tail = stderr_tail(); !tail.empty()) message += " Last lines of its stderr:\n" + tail;
    throw WorkerError(protocol::kWorkerFailed, std::move(message), error_data());
  }
  co_return std::move(*flight->reply);
}

void Worker::watch_deadline(runtime::AsyncEvent::clock::time_point deadline) {
  if (deadline_armed_ && *deadline_armed_ <= deadline) return;  // it fires first and re-checks then
  // (Re)armed for an earlier deadline; a wait already running ends with operation_aborted and finds
  // deadline_armed_ set by its successor.
  deadline_armed_ = deadline;
  deadline_timer_.expires_at(deadline);
  deadline_timer_.async_wait([weak = weak_from_this(), deadline](const boost::system::error_code& ec) {
    auto self = weak.lock();
    if (!self || ec || self->deadline_armed_ != deadline) return;
    self->on_deadline_timer();
  });
}

void Worker::on_deadline_timer() {
  deadline_armed_.reset();
  auto flight = in_flight_;
  if (!flight || !flight->deadline || flight->reply || flight->done.notified()) return;
  if (runtime::AsyncEvent::clock::now() < *flight->deadline) {
    watch_deadline(*flight->deadline);  // an earlier call's deadline; this call still has time
    return;
  }
  flight->timed_out = true;
  flight->done.notify();
}

json::object Worker::error_data() const {
  json::object data{{"library", library_.label()}};
  if (is_upstream()) data["upstream"] = executable_;
  else data["pid"] = pid_;
  if (exit_status_ && !is_upstream()) {
    if (exit_status_->signaled) data["signal"] = exit_status_->signal;
    else data["exit_code"] = exit_status_->code;
  }
  if (!stderr_tail_.empty()) {
    json::array tail;
    for (const auto& line : stderr_tail_) tail.emplace_back(line);
    data["stderr_tail"] = std::move(tail);
  }
  return data;
}

}  // namespace rjg::gateway::supervisor
