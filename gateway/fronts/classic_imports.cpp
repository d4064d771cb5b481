#include "gateway/fronts/classic_imports.hpp"

#include "common/log.hpp"
#include "common/protocol/protocol.hpp"
#include "gateway/session/client_session.hpp"

#include <boost/asio/co_spawn.hpp>

#include <fmt/format.h>

#include <algorithm>

namespace rjg::gateway::fronts {
namespace protocol = rjg::protocol;

bool import_lost(int code) {
  return code == protocol::kWorkerFailed || code == protocol::kWorkerTimeout || code == protocol::kUnknownToken ||
         code == protocol::kShuttingDown;
}

Ticket Imports::take(const std::string& client) { return Ticket(shared_from_this(), ClientCharge(clients_, client)); }

namespace {
// Ends a session that held an import, in the background: its end may wait for grace periods, and only the
// next import of the same instance waits for it (the pools end what is left at shutdown). The import's room
// comes free once it has ended.
asio::awaitable<void> end_session(std::shared_ptr<session::ClientSession> session, std::string why, Ticket ticket,
                                  std::shared_ptr<runtime::AsyncEvent> ended) {
  co_await session->end(std::move(why));
  ticket.release();
  ended->set();
}
}  // namespace

Instance::Instance(session::GatewayContext& context, asio::any_io_executor executor, std::string library, std::string name)
    : context_(context), executor_(executor), library_(std::move(library)), name_(std::move(name)),
      idle_timer_(std::move(executor)) {}

void Instance::send(std::string json_text) {
  auto classified = protocol::parse_message(json_text);
  auto* message = std::get_if<protocol::Message>(&classified);
  if (!message) {
    // Never expected; the calls waiting are failed rather than left waiting for good.
    log::error("bug: {}: the session sent a message that is not one: {}", name_,
               std::get<protocol::ProtocolError>(classified).message);
    fail_pending("the gateway's session sent a malformed message (a bug; see the gateway's log)");
    return;
  }
  if (message->kind == protocol::Message::Kind::notification) {
    if (message->method() != protocol::kLog) return;
    if (!output_) {
      log::debug("{}: a log outside a keyword call was dropped", name_);
    } else if (output_->size() < max_output_) {
      *output_ += output_line(message->params());
    } else if (!output_cut_) {
      output_cut_ = true;
      *output_ += "*WARN* robot-jsonrpc-gateway: the rest of this keyword's log was cut off ([gateway] "
                  "max_message_bytes)\n";
    }
    return;
  }
  auto id = message->id();
  if (!id.is_int64()) return;
  if (auto it = pending_.find(id.get_int64()); it != pending_.end()) {
    it->second->answer.emplace(std::move(*message));
    it->second->done.set();
  }
}

asio::awaitable<void> Instance::previous_ended(std::chrono::steady_clock::time_point deadline) {
  const auto previous = previous_;
  if (!previous) co_return;
  const bool ended = co_await previous->wait_until(deadline);  // not in a condition: GCC 12
  if (!ended) log::warn("{}: its previous import of library {} is still ending; importing anyway", name_, library_);
  co_return;
}

void Instance::rest(std::chrono::milliseconds timeout, std::function<void()> expired) {
  last_used_ = std::chrono::steady_clock::now();
  const auto rest = ++rests_;
  if (timeout.count() == 0 || !imported()) return;
  idle_timer_.expires_after(timeout);
  idle_timer_.async_wait([weak = weak_from_this(), rest, expired = std::move(expired)](const boost::system::error_code& ec) {
    auto self = weak.lock();
    // Taken meanwhile (or rested again): a later rest has its own wait.
    if (!ec && self && self->rests_ == rest) expired();
  });
}

asio::awaitable<void> Instance::ensure_imported() {
  if (imported()) co_return;
  if (stopped_) throw Failure("the gateway is stopping");
  if (!ticket_) throw Failure("internal error: an import without room counted for it (a bug; see the gateway's log)");
  try {
    co_await import();
  } catch (const Failure&) {
    drop("its import failed");
    throw;
  }
}

asio::awaitable<void> Instance::import() {
  if (!session_) {
    closing_ = false;
    auto session = std::make_shared<session::ClientSession>(context_, context_.config(), context_.pools, weak_from_this(),
                                                   name_, executor_);
    session_ = session;
    std::string params = R"({"client_info": {"name": "robot-jsonrpc-gateway classic front"}})";
    auto init = co_await request(protocol::kInitialize, std::move(params));
    if (init.kind != protocol::Message::Kind::response || session_ != session) {
      session_.reset();
      throw Failure(init.kind == protocol::Message::Kind::response ? "the gateway is stopping" : init.error_message());
    }
    notify(protocol::kInitialized, "{}");
  }
  const auto session = session_;
  std::string params = fmt::format(R"({{"name": {}}})", json_string(library_));
  auto answer = co_await request(protocol::kImportLibrary, std::move(params));
  if (session_ != session) throw Failure("the gateway is stopping");
  if (answer.kind != protocol::Message::Kind::response) throw Failure(answer.error_message());
  auto result = answer.result();
  const auto* token = result.is_object() ? result.as_object().if_contains("token") : nullptr;
  if (!token || !token->is_string()) throw Failure("the import answered without a token");
  token_ = token->get_string();
  if (auto* definition = result.as_object().if_contains("definition")) definition_ = *definition;
  log::info("{}: imported library {} for classic clients (made for {})", name_, library_, ticket_.client());
}

asio::awaitable<KeywordAnswer> Instance::run(const std::string& keyword, const std::string& args,
                                             const std::string& kwargs, std::size_t max_output) {
  co_await ensure_imported();
  log::debug("{}: running keyword '{}'", name_, log::printable(keyword, 200));
  KeywordAnswer out;
  output_ = &out.output;
  max_output_ = max_output;
  output_cut_ = false;
  struct Stop {
    std::string*& output;
    ~Stop() { output = nullptr; }
  } stop{output_};
  std::string params = fmt::format(R"({{"library_token": {}, "name": {}, "args": {}, "kwargs": {}}})",
                                   json_string(token_), json_string(keyword), args, kwargs);
  auto answer = co_await request(protocol::kRunKeyword, std::move(params));
  if (answer.kind == protocol::Message::Kind::response) {
    out.result_text = answer.result_text();
    // A keyword's failure is in its result: whether it took the import with it (its worker died or
    // overran keyword_timeout) the session knows, not the text (a library may name its own error so).
    if (auto lost = session_ ? session_->import_lost(token_) : std::string(); !lost.empty())
      drop("its worker was lost: " + lost);
    co_return out;
  }
  out.failure = answer.error_message();
  if (import_lost(answer.error_code())) drop("its worker was lost: " + answer.error_message());
  co_return out;
}

void Instance::drop(std::string why) {
  token_.clear();
  taken();  // no idle clock for what is not imported
  auto ticket = std::move(ticket_);
  if (auto session = std::move(session_)) {
    session_.reset();
    ticket.ending();
    previous_ = std::make_shared<runtime::AsyncEvent>(executor_);
    asio::co_spawn(executor_, end_session(std::move(session), std::move(why), std::move(ticket), previous_),
                   runtime::log_exceptions("classic: end " + name_));
  }
}

void Instance::notify(std::string_view method, std::string_view params) {
  auto text = protocol::make_notification_raw(method, params);
  auto classified = protocol::parse_message(text);
  session_->handle(std::get<protocol::Message>(classified));
}

asio::awaitable<protocol::Message> Instance::request(std::string_view method, std::string params) {
  if (!session_) throw Failure("the gateway is stopping");
  const auto id = next_id_++;
  auto classified = protocol::parse_message(protocol::make_request_raw(std::to_string(id), method, params), request_limits());
  auto* message = std::get_if<protocol::Message>(&classified);
  // What a classic client sent made an invalid message (arguments nested deeper than max_json_depth).
  if (!message) throw Failure(std::get<protocol::ProtocolError>(classified).message);
  auto pending = std::make_shared<Pending>(executor_);
  pending_[id] = pending;
  struct Forget {
    Instance& self;
    std::uint64_t id;
    ~Forget() { self.pending_.erase(id); }
  } forget{*this, id};
  auto session = session_;  // kept for the call: a drop() meanwhile does not end it under us
  session->handle(*message);
  co_await pending->done.wait();
  co_return std::move(*pending->answer);
}

protocol::JsonLimits Instance::request_limits() const {
  const auto config = context_.config();
  protocol::JsonLimits limits;
  limits.max_depth = config->gateway.max_json_depth;
  limits.max_object_members = config->gateway.max_object_members;
  return limits;
}

void Instance::fail_pending(std::string_view why) {
  for (auto& [id, pending] : pending_) {
    auto classified = protocol::parse_message(protocol::make_error_raw(std::to_string(id), protocol::kInternalError, why));
    pending->answer.emplace(std::move(std::get<protocol::Message>(classified)));
    pending->done.set();
  }
}

asio::awaitable<std::shared_ptr<Instance>> Library::take(std::size_t wanted, std::size_t max_waiting) {
  if (stopped_) throw Failure("the gateway is stopping");
  while (instances_.size() < wanted) {
    const auto n = instances_.size() + 1;
    instances_.push_back(std::make_shared<Instance>(
        context_, executor_, name_, wanted > 1 ? fmt::format("classic {} #{}", name_, n) : "classic " + name_));
    give_back(instances_.back());  // to a call that waits already, if one does
  }
  if (!idle_.empty()) {
    // One that holds an import, if one does: the call then needs no new one.
    auto it = std::find_if(idle_.begin(), idle_.end(), [](const auto& i) { return i->imported(); });
    if (it == idle_.end()) it = idle_.begin();
    auto instance = std::move(*it);
    idle_.erase(it);
    instance->taken();
    co_return instance;
  }
  if (waiting_.size() >= max_waiting)
    throw Failure(fmt::format("Library '{}' is busy: {} keyword calls of classic clients already wait for its "
                              "{} instance(s) ([gateway] max_pending_requests = {}). Try again later, or raise "
                              "classic_instances for this library.",
                              name_, waiting_.size(), instances_.size(), max_waiting));
  auto waiter = std::make_shared<Waiter>(executor_);
  waiting_.push_back(waiter);
  // Leaves the queue however this coroutine ends (its frame may be destroyed at exit without resuming).
  struct Leave {
    std::shared_ptr<Library> library;  // held: the frame may outlive the front at exit
    std::shared_ptr<Waiter> waiter;
    ~Leave() { std::erase(library->waiting_, waiter); }
  } leave{shared_from_this(), waiter};
  co_await waiter->ready.wait();
  if (!waiter->instance) throw Failure("the gateway is stopping");
  co_return std::move(waiter->instance);
}

void Library::give_back(std::shared_ptr<Instance> instance) {
  if (!waiting_.empty()) {
    auto waiter = std::move(waiting_.front());
    waiting_.pop_front();
    instance->taken();
    waiter->instance = std::move(instance);
    waiter->ready.set();
    return;
  }
  idle_.push_back(instance);
  if (stopped_) return;
  const auto timeout = context_.config()->classic.idle_timeout;
  instance->rest(timeout, [library = weak_from_this(), weak = std::weak_ptr<Instance>(instance), timeout] {
    auto self = library.lock();
    auto idle = weak.lock();
    if (self && idle)
      self->retire(idle, fmt::format("no classic call used it for {} ([classic] idle_timeout)", seconds_text(timeout)));
  });
  if (instance->imported()) imports_->changed();
}

std::shared_ptr<Instance> Library::least_recently_used() const {
  std::shared_ptr<Instance> oldest;
  for (const auto& instance : idle_)
    if (instance->imported() && (!oldest || instance->last_used() < oldest->last_used())) oldest = instance;
  return oldest;
}

void Library::retire(const std::shared_ptr<Instance>& instance, std::string why) {
  if (stopped_ || !instance->imported() || std::find(idle_.begin(), idle_.end(), instance) == idle_.end()) return;
  log::info("{}: ending the import of library {}: {}", instance->name(), name_, why);
  instance->drop(std::move(why));
  check_unused();
}

json::object Library::status() const {
  std::size_t imported = 0;
  for (const auto& instance : instances_) imported += instance->imported() ? 1 : 0;
  return json::object{{"library", name_},
                      {"instances", instances_.size()},
                      {"imported", imported},
                      {"busy", instances_.size() - idle_.size()},
                      {"calls_waiting", waiting_.size()}};
}

const json::value* Library::definition() const {
  for (const auto& instance : instances_)
    if (instance->imported()) return &instance->definition();
  return remembered_.is_null() ? nullptr : &remembered_;
}

void Library::stop() {
  stopped_ = true;
  for (auto& waiter : std::exchange(waiting_, {})) waiter->ready.set();  // with no instance: a Failure
  for (auto& instance : instances_) instance->stop();
}

void Library::check_unused() {
  if (stopped_ || users_ > 0 || !waiting_.empty()) return;
  if (std::any_of(instances_.begin(), instances_.end(), [](const auto& i) { return i->imported(); })) return;
  // A copy: the call may detach this library, which would destroy the function while it runs.
  if (auto unused = unused_) unused(*this);
}

}  // namespace rjg::gateway::fronts
