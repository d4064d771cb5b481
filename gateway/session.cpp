#include "gateway/session.hpp"

#include "common/log.hpp"
#include "common/pickle/pickle_policy.hpp"
#include "common/protocol/protocol.hpp"

#include <boost/asio/co_spawn.hpp>

#include <fmt/format.h>

#include <unordered_map>

namespace rjg::gateway {
using namespace std::chrono_literals;
namespace protocol = rjg::protocol;

namespace {
// The client's write queue may hold this much before relaying a worker's logs waits for the client.
constexpr std::size_t kClientHighWater = 4u << 20;
// Requests one connection may have unanswered at once. The real client sends one at a time; the cap
// bounds what a pipelining client can make the gateway hold (each up to max_message_bytes).
constexpr std::size_t kMaxRequestsInFlight = 64;
// How long a worker may take to answer robot/finalize_library (its cleanup) before it is stopped anyway.
constexpr auto kFinalizeTimeout = std::chrono::seconds(30);
// How long closing a connection waits for its queued answers to be written.
constexpr auto kFlushTimeout = 5s;

std::string_view trim_trailing_whitespace(std::string_view s) {
  while (!s.empty() && (s.back() == '\r' || s.back() == '\n' || s.back() == ' ' || s.back() == '\t'))
    s.remove_suffix(1);
  return s;
}

PickleMode pickle_mode(const config::Library& library) {
  switch (library.pickle) {
    case config::PicklePolicy::allow: return PickleMode::allow;
    case config::PicklePolicy::deny: return PickleMode::deny;
    case config::PicklePolicy::data_only: break;
  }
  return PickleMode::data_only;
}

// Applies the library's pickle policy to some members of an object (arguments one way, results the
// other). Returns the error to answer with, or nothing when every value is admitted.
std::optional<std::pair<std::string, json::object>> refuse_pickles(const config::Library& library,
                                                                   const json::object& holder,
                                                                   std::initializer_list<std::string_view> keys) {
  const auto mode = pickle_mode(library);
  if (mode == PickleMode::allow) return std::nullopt;
  for (auto key : keys) {
    auto it = holder.find(key);
    if (it == holder.end()) continue;
    if (auto refusal = inspect_pickles(it->value(), mode, key)) {
      json::object data{{"library", library.name}, {"path", refusal->path}, {"reason", refusal->reason}};
      if (refusal->offset) data["offset"] = *refusal->offset;
      return std::pair{describe(*refusal, library.name), std::move(data)};
    }
  }
  return std::nullopt;
}

std::string_view string_field(const json::object& o, std::string_view key) {
  auto it = o.find(key);
  return it != o.end() && it->value().is_string() ? std::string_view(it->value().get_string()) : std::string_view();
}

// Returns what is wrong with an optional field that must be an array or an object, or "" if fine.
std::string check_optional(const json::object& o, std::string_view key, bool want_array) {
  auto it = o.find(key);
  if (it == o.end() || it->value().is_null()) return {};
  if (want_array ? it->value().is_array() : it->value().is_object()) return {};
  return fmt::format("params.{} must be {}", key, want_array ? "a list" : "an object");
}
}  // namespace

// --- Reply -------------------------------------------------------------------------------------

Reply::Reply(std::shared_ptr<Session> session, json::value id, std::string method)
    : session_(std::move(session)), id_(std::move(id)), method_(std::move(method)) {
  session_->context_.request_started();
  ++session_->requests_in_flight_;
}

Reply::Reply(Reply&& other) noexcept
    : session_(std::move(other.session_)), id_(std::move(other.id_)), method_(std::move(other.method_)),
      answered_(other.answered_) {
  other.answered_ = true;
}

Reply::~Reply() {
  if (answered_ || !session_) return;
  log::error("bug: {}: request {} ({}) was dropped without an answer", session_->name(), id_to_string(id_), method_);
  error(protocol::kInternalError,
        fmt::format("Internal error: the gateway dropped {} without answering it. This is a bug; please report it "
                    "with the gateway's log.",
                    method_));
}

bool Reply::claim() {
  if (answered_) {
    log::error("bug: {}: second answer to request {} ({}) not sent", session_->name(), id_to_string(id_), method_);
    return false;
  }
  answered_ = true;
  session_->context_.request_finished();
  --session_->requests_in_flight_;
  return true;
}

void Reply::result(json::value result) {
  if (claim()) session_->send(make_result(id_, std::move(result)));
}

void Reply::error(int code, std::string_view message, std::optional<json::value> data) {
  if (claim()) session_->send(make_error(id_, code, message, std::move(data)));
}

void Reply::forward(json::object response) {
  if (!claim()) return;
  response["id"] = id_;
  session_->send(json::serialize(response));
}

// --- Session -----------------------------------------------------------------------------------

Session::Session(tcp::socket socket, GatewayContext& context, std::uint64_t number)
    : socket_(std::move(socket)),
      context_(context),
      write_queue_(socket_, kClientHighWater),
      reader_(FramingLimits{context.config.gateway.max_message_bytes, context.config.gateway.max_header_bytes},
              FrameReader::Mode::strict),
      background_done_(socket_.get_executor()),
      closed_(socket_.get_executor()),
      connected_at_(AsyncEvent::clock::now()),
      last_activity_(connected_at_),
      watchdog_wake_(socket_.get_executor()) {
  boost::system::error_code ec;
  auto peer = socket_.remote_endpoint(ec);
  name_ = ec ? fmt::format("session {}", number)
             : fmt::format("session {} ({}:{})", number, peer.address().to_string(), peer.port());
  background_done_.set();
}

Session::~Session() { log::debug("{}: released", name_); }

void Session::start() {
  log::info("{}: connected", name_);
  auto self = shared_from_this();
  asio::co_spawn(
      socket_.get_executor(), [self]() { return self->write_queue_.run(); }, log_exceptions(name_ + " writer"));
  asio::co_spawn(
      socket_.get_executor(), [self]() { return self->read_loop(); }, log_exceptions(name_ + " reader"));
  asio::co_spawn(
      socket_.get_executor(), [self]() { return self->watchdog(); }, log_exceptions(name_ + " watchdog"));
}

asio::awaitable<void> Session::watchdog() {
  using clock = AsyncEvent::clock;
  const auto& gw = context_.config.gateway;
  auto seconds = [](config::Duration d) { return fmt::format("{:g}s", static_cast<double>(d.count()) / 1000.0); };
  while (!closing_) {
    const auto now = clock::now();
    auto next = clock::time_point::max();
    std::string expired;
    auto check = [&](clock::time_point deadline, std::string what) {
      if (now >= deadline) {
        if (expired.empty()) expired = std::move(what);
      } else {
        next = std::min(next, deadline);
      }
    };
    if (!initialize_received_)
      check(connected_at_ + gw.handshake_timeout,
            fmt::format("no robot/initialize within {} of connecting (handshake_timeout)", seconds(gw.handshake_timeout)));
    if (frame_started_)
      check(*frame_started_ + gw.read_timeout,
            fmt::format("a message stayed half-read for {} (read_timeout)", seconds(gw.read_timeout)));
    if (gw.idle_timeout.count() > 0 && background_ == 0)
      check(last_activity_ + gw.idle_timeout,
            fmt::format("no message for {} (idle_timeout)", seconds(gw.idle_timeout)));
    if (!expired.empty()) {
      log::warn("{}: closing: {}", name_, expired);
      send(make_error(nullptr, protocol::kSessionTimeout, "The gateway closes this connection: " + expired + "."));
      close(expired);
      co_return;
    }
    watchdog_wake_.reset();
    co_await watchdog_wake_.wait_until(next);
  }
}

void Session::send(std::string json_text) { write_queue_.push(encode_frame(json_text)); }

void Session::relay_notification(std::string_view body) {
  if (closing_) return;
  write_queue_.push(encode_frame(trim_trailing_whitespace(body)));
}

asio::awaitable<void> Session::wait_for_room() { co_await write_queue_.wait_for_room(); }

asio::awaitable<void> Session::read_loop() {
  std::vector<char> buffer(64 * 1024);
  std::string why = "the client closed the connection";
  bool stop = false;
  while (!stop && !closing_) {
    auto [ec, n] = co_await socket_.async_read_some(asio::buffer(buffer), asio::as_tuple(asio::use_awaitable));
    if (ec) {
      if (ec != asio::error::eof && ec != asio::error::operation_aborted) why = "read error: " + ec.message();
      break;
    }
    reader_.feed({buffer.data(), n});
    bool got_message = false;
    while (!stop && !closing_) {
      auto r = reader_.next();
      if (r.kind == FrameReader::Result::Kind::need_more) break;
      if (r.kind == FrameReader::Result::Kind::error) {
        // After a framing fault no later byte can be trusted to start a frame: say why, then hang up.
        log::warn("{}: framing error: {}; closing the connection", name_, r.error);
        send(make_error(nullptr, protocol::kParseError,
                        fmt::format("Framing error: {}. The gateway closes the connection.", r.error)));
        why = "framing error";
        stop = true;
        break;
      }
      got_message = true;
      auto classified = parse_message(r.body, JsonLimits{context_.config.gateway.max_json_depth});
      if (auto* bad = std::get_if<ProtocolError>(&classified)) {
        log::info("{}: answered an invalid message with {}: {}", name_, bad->code, bad->message);
        send(make_error(bad->id, bad->code, bad->message));
        continue;
      }
      dispatch(std::move(std::get<Message>(classified)));
    }
    // read_timeout runs from the first byte of a frame until the frame is complete.
    if (got_message) last_activity_ = AsyncEvent::clock::now();
    if (reader_.buffered() == 0) {
      frame_started_.reset();
    } else if (!frame_started_ || got_message) {
      frame_started_ = AsyncEvent::clock::now();
      watchdog_wake_.set();
    }
  }
  close(std::move(why));
}

void Session::dispatch(Message message) {
  static const std::unordered_map<std::string_view, Handler> kHandlers = {
      {protocol::kInitialize, &Session::on_initialize},
      {protocol::kInitialized, &Session::on_initialized},
      {protocol::kImportLibrary, &Session::on_import_library},
      {protocol::kRunKeyword, &Session::on_run_keyword},
      {protocol::kFinalizeLibrary, &Session::on_finalize_library},
      {protocol::kShutdown, &Session::on_shutdown},
      {protocol::kExit, &Session::on_exit},
  };

  if (message.kind == Message::Kind::response || message.kind == Message::Kind::error_response) {
    log::warn("{}: ignored a response from the client (id {}): the gateway sends no requests to clients", name_,
              id_to_string(message.id()));
    return;
  }
  if (message.kind == Message::Kind::request && requests_in_flight_ >= kMaxRequestsInFlight) {
    send(make_error(message.id(), protocol::kAtCapacity,
                    fmt::format("Too many requests in flight on this connection ({} unanswered); wait for answers "
                                "before sending more.",
                                kMaxRequestsInFlight)));
    return;
  }
  if (auto problem = check_client_method(message)) {
    if (problem->answer) send(make_error(message.id(), problem->code, problem->message));
    else if (problem->code == protocol::kMethodNotFound) log::debug("{}: ignored notification {}", name_, message.method());
    else log::warn("{}: ignored: {}", name_, problem->message);
    return;
  }
  (this->*kHandlers.at(message.method()))(message);
}

void Session::spawn_request(asio::awaitable<void> handler, std::string what) {
  ++background_;
  background_done_.reset();
  auto self = shared_from_this();
  asio::co_spawn(socket_.get_executor(), std::move(handler),
                 [self, where = name_ + " " + what](std::exception_ptr e) {
                   log_exceptions(where)(e);
                   if (--self->background_ == 0) {
                     self->background_done_.set();
                     self->last_activity_ = AsyncEvent::clock::now();
                     self->watchdog_wake_.set();  // idle_timeout counts from here
                   }
                 });
}

bool Session::require_initialized(Reply& reply, std::string_view method) {
  if (initialize_received_ && initialized_received_) return true;
  reply.error(protocol::kNotInitialized,
              fmt::format("{} was sent before the session was initialized: send robot/initialize, then the "
                          "robot/initialized notification, then import libraries",
                          method));
  return false;
}

void Session::on_initialize(Message& m) {
  Reply reply(shared_from_this(), m.id(), std::string(protocol::kInitialize));
  initialize_received_ = true;
  json::array libraries;
  for (auto& name : context_.router.names()) libraries.emplace_back(name);
  reply.result(json::object{
      {"capabilities", json::object{{"support_exit", true}, {"libraries", std::move(libraries)}}},
      {"server_info", json::object{{"name", kServerName}, {"version", context_.version}}},
  });
}

void Session::on_initialized(Message&) { initialized_received_ = true; }

void Session::on_import_library(Message& m) {
  Reply reply(shared_from_this(), m.id(), std::string(protocol::kImportLibrary));
  if (!require_initialized(reply, protocol::kImportLibrary)) return;
  if (context_.draining) {
    reply.error(protocol::kShuttingDown, "The gateway is shutting down and accepts no new imports; retry shortly.");
    return;
  }
  if (!m.params().is_object() || !m.params().get_object().contains("name") ||
      !m.params().get_object().at("name").is_string()) {
    reply.error(protocol::kInvalidParams,
                "robot/import_library needs params {\"name\": string, \"args\"?: list, \"kw_args\"?: object}");
    return;
  }
  auto& params = m.params().get_object();
  for (auto problem : {check_optional(params, "args", true), check_optional(params, "kw_args", false)}) {
    if (!problem.empty()) {
      reply.error(protocol::kInvalidParams, "robot/import_library: " + problem);
      return;
    }
  }
  spawn_request(import_library(std::move(reply), std::move(params)), "import_library");
}

asio::awaitable<void> Session::import_library(Reply reply, json::object params) {
  const std::string requested(string_field(params, "name"));
  const config::Library* library = context_.router.resolve(requested);
  if (!library) {
    json::array available;
    for (auto& name : context_.router.names()) available.emplace_back(name);
    reply.error(protocol::kUnknownLibrary,
                fmt::format("Library '{}' is not served by this gateway. Available libraries: {}.", requested,
                            context_.router.available()),
                json::object{{"library", requested}, {"available", std::move(available)}});
    co_return;
  }
  if (auto refused = refuse_pickles(*library, params, {"args", "kw_args"})) {
    log::warn("{}: import of {} refused: {}", name_, library->name, refused->first);
    reply.error(protocol::kPickleRefused, refused->first, std::move(refused->second));
    co_return;
  }
  log::info("{}: importing library {}", name_, library->name);

  auto& pool = context_.pools.pool(*library);
  workers::Lease lease;
  try {
    lease = co_await pool.acquire();
  } catch (const workers::WorkerError& e) {
    log::warn("{}: import of {} failed: {}", name_, library->name, e.what());
    reply.error(e.code, e.what(), e.data);
    co_return;
  }
  auto worker = lease.worker;

  // The worker's own command line names its library, so it is asked for its default one: the
  // configured name is the gateway's alias and need not match the worker's.
  params["name"] = "";
  std::optional<Message> response;
  std::optional<workers::WorkerError> failure;
  try {
    response.emplace(co_await worker->call(protocol::kImportLibrary, std::move(params), weak_from_this(),
                                           fmt::format("the import of library '{}'", library->name)));
  } catch (const workers::WorkerError& e) {
    failure = e;
  }

  if (!failure && response->kind == Message::Kind::error_response) {
    const auto& err = response->error();
    std::string message(string_field(err, "message"));
    int code = err.at("code").is_int64() ? static_cast<int>(err.at("code").get_int64()) : protocol::kWorkerFailed;
    auto data = err.contains("data") ? std::optional<json::value>(err.at("data")) : std::nullopt;
    log::warn("{}: library {} failed to import in worker pid {}: {}", name_, library->name, worker->pid(), message);
    reply.error(code,
                fmt::format("Library '{}' failed to import in its worker (pid {}): {}", library->name, worker->pid(),
                            message),
                std::move(data));
    co_await pool.release(lease, "its import failed");
    co_return;
  }
  if (!failure) {
    const auto& result = response->result();
    if (!result.is_object() || string_field(result.get_object(), "token").empty()) {
      failure.emplace(protocol::kWorkerFailed,
                      fmt::format("The worker of library '{}' (pid {}) answered robot/import_library without a token",
                                  library->name, worker->pid()));
    }
  }
  if (!failure) {
    // Argument defaults in the definition travel to the client: the same policy applies to them.
    if (auto refused = refuse_pickles(*library, response->result().get_object(), {"definition"})) {
      failure.emplace(protocol::kPickleRefused, refused->first, std::move(refused->second));
    }
  }
  if (failure) {
    log::warn("{}: import of {} failed: {}", name_, library->name, failure->what());
    reply.error(failure->code, failure->what(), failure->data);
    co_await pool.release(lease, "its import failed");
    co_return;
  }

  auto& result = response->object["result"].get_object();
  Import import{TokenMap::new_token(library->name), library->name, std::string(result.at("token").get_string()),
                worker, std::move(lease), library};
  if (closing_) {
    reply.error(protocol::kShuttingDown, "The connection closed during the import.");
    co_await end_import(std::move(import), "its session closed during the import");
    co_return;
  }

  result["token"] = import.token;
  log::info("{}: imported library {} in worker pid {}{}", name_, library->name, worker->pid(),
            import.lease.prewarmed ? " (warm)" : "");
  tokens_.add(std::move(import));
  reply.forward(std::move(response->object));
}

void Session::on_run_keyword(Message& m) {
  Reply reply(shared_from_this(), m.id(), std::string(protocol::kRunKeyword));
  if (!require_initialized(reply, protocol::kRunKeyword)) return;
  if (!m.params().is_object()) {
    reply.error(protocol::kInvalidParams,
                "robot/run_keyword needs params {\"library_token\": string, \"name\": string, \"args\"?: list, "
                "\"kwargs\"?: object}");
    return;
  }
  auto& params = m.params().get_object();
  std::string problem;
  if (!params.contains("library_token") || !params.at("library_token").is_string())
    problem = "params.library_token must be a string";
  else if (!params.contains("name") || !params.at("name").is_string())
    problem = "params.name must be a string (the keyword name)";
  else if (problem = check_optional(params, "args", true); problem.empty())
    problem = check_optional(params, "kwargs", false);
  if (!problem.empty()) {
    reply.error(protocol::kInvalidParams, "robot/run_keyword: " + problem);
    return;
  }
  if (context_.draining) {
    reply.error(protocol::kShuttingDown, "The gateway is shutting down and accepts no new keywords.");
    return;
  }
  const Import* import = tokens_.find(string_field(params, "library_token"));
  if (!import) {
    reply.error(protocol::kUnknownToken,
                fmt::format("Unknown library token '{}': it was not issued on this connection, or its library was "
                            "finalized. Tokens are valid only on the connection that imported the library.",
                            log::printable(string_field(params, "library_token"), 80)));
    return;
  }
  if (auto refused = refuse_pickles(*import->config, params, {"args", "kwargs"})) {
    log::warn("{}: keyword '{}' of {} refused: {}", name_, string_field(params, "name"), import->library,
              refused->first);
    reply.error(protocol::kPickleRefused, refused->first, std::move(refused->second));
    return;
  }
  params["library_token"] = import->worker_token;
  spawn_request(run_keyword(std::move(reply), std::move(params), *import), "run_keyword");
}

asio::awaitable<void> Session::run_keyword(Reply reply, json::object params, Import import) {
  // The import is a copy: a finalize that arrives meanwhile queues behind this call on the worker.
  const auto& worker = import.worker;
  const auto& library = import.library;
  const std::string keyword(string_field(params, "name"));
  const auto timeout = import.config->keyword_timeout;
  std::optional<workers::WorkerError> failure;
  try {
    auto response = co_await worker->call(protocol::kRunKeyword, std::move(params), weak_from_this(),
                                          fmt::format("keyword '{}' of library '{}'", keyword, library),
                                          timeout.count() ? std::optional(timeout) : std::nullopt);
    if (import.lease.pool) import.lease.pool->keyword_done(worker);
    if (auto refused = refuse_pickles(*import.config, response.object, {"result"})) {
      log::warn("{}: result of keyword '{}' of {} refused: {}", name_, keyword, library, refused->first);
      reply.error(protocol::kPickleRefused, refused->first, std::move(refused->second));
    } else {
      reply.forward(std::move(response.object));
    }
  } catch (const workers::WorkerError& e) {
    failure = e;
  }
  if (failure) {
    const auto& e = *failure;
    log::warn("{}: keyword '{}' of library {} failed in the gateway: {}", name_, keyword, library, e.what());
    if (e.code == protocol::kWorkerTimeout) {
      reply.error(e.code,
                  fmt::format("Keyword '{}' of library '{}' did not finish within {}ms (keyword_timeout). Its worker "
                              "(pid {}) is stopped, and this import with it: import the library again.",
                              keyword, library, timeout.count(), worker->pid()),
                  e.data);
    } else {
      reply.error(e.code, e.what(), e.data);
    }
    if (e.code == protocol::kWorkerTimeout) {
      // A keyword that overran cannot be interrupted inside the worker: end the worker, and with it
      // every import it holds (they then fail with this reason).
      auto reason = fmt::format("keyword '{}' exceeded keyword_timeout {}ms", keyword, timeout.count());
      if (import.lease.pool) import.lease.pool->retire(worker, reason);
      co_await worker->stop(reason, false);
    }
  }
}

void Session::on_finalize_library(Message& m) {
  Reply reply(shared_from_this(), m.id(), std::string(protocol::kFinalizeLibrary));
  if (!m.params().is_object() || string_field(m.params().get_object(), "token").empty()) {
    reply.error(protocol::kInvalidParams, "robot/finalize_library needs params {\"token\": string}");
    return;
  }
  auto token = string_field(m.params().get_object(), "token");
  auto import = tokens_.remove(token);
  if (!import) {
    reply.error(protocol::kUnknownToken,
                fmt::format("Unknown library token '{}': it was not issued on this connection, or it was already "
                            "finalized.",
                            log::printable(token, 80)));
    return;
  }
  spawn_request(finalize_library(std::move(reply), std::move(*import)), "finalize_library");
}

asio::awaitable<void> Session::finalize_library(Reply reply, Import import) {
  auto& worker = import.worker;
  bool answered = false;
  if (worker->alive()) {
    try {
      auto response = co_await finalize_in_worker(import);
      reply.forward(std::move(response.object));
      answered = true;
    } catch (const workers::WorkerError& e) {
      log::warn("{}: finalize of {} in worker pid {}: {}", name_, import.library, worker->pid(), e.what());
    }
  }
  // A worker that is already gone has nothing left to finalize.
  if (!answered) reply.result(json::object{});
  co_await import.lease.pool->release(import.lease, "its library was finalized");
}

asio::awaitable<Message> Session::finalize_in_worker(const Import& import) {
  // (Built outside the co_await: GCC 12 miscompiles braced lists with literals inside one.)
  json::object params{{"token", import.worker_token}};
  auto what = fmt::format("robot/finalize_library of '{}'", import.library);
  co_return co_await import.worker->call(protocol::kFinalizeLibrary, std::move(params), weak_from_this(),
                                         std::move(what), kFinalizeTimeout);
}

asio::awaitable<void> Session::end_import(Import import, std::string reason) {
  // A shared worker lives on: finalize this import's instance in it (after any keyword still running
  // there, whose late answer is dropped). A dedicated worker is simply ended.
  if (import.config->isolation == config::Isolation::shared && import.worker->alive()) {
    try {
      co_await finalize_in_worker(import);
    } catch (const workers::WorkerError& e) {
      log::info("{}: finalize of {} after the session ended: {}", name_, import.library, e.what());
    }
  }
  co_await import.lease.pool->release(import.lease, std::move(reason));
}

void Session::on_shutdown(Message& m) {
  Reply reply(shared_from_this(), m.id(), std::string(protocol::kShutdown));
  reply.result(json::object{});
}

void Session::on_exit(Message&) { close("the client sent robot/exit"); }

void Session::close(std::string why) {
  if (closing_) return;
  closing_ = true;
  watchdog_wake_.set();
  auto self = shared_from_this();
  asio::co_spawn(
      socket_.get_executor(), [self, why]() { return self->teardown(why); }, log_exceptions(name_ + " teardown"));
}

asio::awaitable<void> Session::teardown(std::string why) {
  log::info("{}: closing: {}", name_, why);
  // Wakes the read loop (end of stream) without cancelling writes still queued.
  boost::system::error_code ignored;
  socket_.shutdown(tcp::socket::shutdown_receive, ignored);

  // Every import ends in the background, all at once (each may take its grace period): dedicated
  // workers are stopped, which fails their calls in flight; shared ones finalize the instance.
  for (auto& import : tokens_.take_all()) {
    auto what = "end import of " + import.library;
    spawn_request(end_import(std::move(import), "its session closed"), std::move(what));
  }
  // Imports still starting end their own worker when they see the session closing. Each of these
  // tasks is bounded by its own timeouts, except a keyword still running on a shared worker.
  if (!co_await background_done_.wait_for(120s))
    log::error("{}: {} tasks still running 120s after close", name_, background_);

  write_queue_.close();
  co_await write_queue_.wait_finished(kFlushTimeout);
  socket_.close(ignored);
  log::info("{}: closed", name_);
  closed_.set();
}

}  // namespace rjg::gateway
