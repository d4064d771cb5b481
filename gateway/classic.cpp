#include "gateway/classic.hpp"

#include "common/log.hpp"
#include "common/protocol/json_text.hpp"
#include "common/protocol/protocol.hpp"
#include "common/runtime/async_event.hpp"
#include "common/runtime/message_stream.hpp"
#include "common/xmlrpc/xmlrpc.hpp"
#include "common/xmlrpc/classic_values.hpp"
#include "gateway/client_counts.hpp"
#include "gateway/client_session.hpp"
#include "gateway/connection.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/json/serialize.hpp>

#include <fmt/format.h>

#include <deque>
#include <functional>
#include <unordered_map>

namespace rjg::gateway {
using namespace std::chrono_literals;
namespace protocol = rjg::protocol;

namespace front {
namespace {
// A call that cannot be answered with a keyword result: answered with an XML-RPC fault carrying the text.
struct Failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Codes after which an import is not usable any more: its worker died, overran keyword_timeout, or is gone.
bool import_lost(int code) {
  return code == protocol::kWorkerFailed || code == protocol::kWorkerTimeout || code == protocol::kUnknownToken ||
         code == protocol::kShuttingDown;
}

std::string json_string(std::string_view text) { return json::serialize(json::value(json::string(text))); }

// One robot/log as Robot's classic output has it: a *LEVEL* marker at the start of a line (the level Robot
// gives stdout lines without one is INFO). HTML messages keep *HTML*.
std::string output_line(const json::value& params) {
  const auto* p = params.if_object();
  if (!p) return {};
  std::string message, level = "INFO";
  if (auto* m = p->if_contains("message"); m && m->is_string()) message = m->get_string();
  if (auto* l = p->if_contains("level"); l && l->is_string()) level = l->get_string();
  const bool html = [&] {
    auto* h = p->if_contains("html");
    return h && h->is_bool() && h->get_bool();
  }();
  if (html) level = "HTML";
  static constexpr std::string_view kLevels[] = {"TRACE", "DEBUG", "INFO", "WARN", "ERROR", "HTML", "CONSOLE"};
  if (std::find(std::begin(kLevels), std::end(kLevels), level) == std::end(kLevels)) level = "INFO";
  return fmt::format("*{}* {}\n", level, message);
}

// Robot shows an exception's type before its message unless the type is a generic one. RemoteError is the
// failure of a classic server behind robot-classic-bridge, whose message names the server's own exception
// already (Robot leaves the names of its own errors out too).
std::string error_message(const std::string& message, const std::string& type) {
  static constexpr std::string_view kGeneric[] = {"",      "AssertionError", "AssertionFailedError", "Exception",
                                                  "Error", "RuntimeError",   "RuntimeException",     "RemoteError"};
  if (std::find(std::begin(kGeneric), std::end(kGeneric), type) != std::end(kGeneric)) return message;
  return message.empty() ? type : fmt::format("{}: {}", type, message);
}

std::string string_member(const json::object& o, std::string_view key) {
  if (auto* v = o.if_contains(key); v && v->is_string()) return std::string(v->get_string());
  return {};
}

// What a keyword call returns to the classic client.
struct KeywordAnswer {
  std::optional<std::string> failure;  // the gateway could not run it (a JSON-RPC error): why
  std::string result_text;             // otherwise, the RunKeywordResult
  std::string output;
};

// The longest the front waits for an import that is ending to make room (a session's end is bounded by its
// workers' grace periods; ClientSession::end gives up after 120 s).
constexpr auto kRoomComing = std::chrono::seconds(130);

std::string seconds_text(std::chrono::milliseconds d) {
  return d.count() % 1000 ? fmt::format("{}ms", d.count()) : fmt::format("{}s", d.count() / 1000);
}
}  // namespace

// The imports held for classic clients, all libraries together: how many, and the calls waiting for room
// under [classic] max_imports. An import counts until its session has ended (its worker stopped, or its
// instance finalized), so the front never holds more workers than the cap, not even while one makes room
// for another. Shared: a ticket may be let go of by a coroutine frame destroyed after the front at exit.
class Imports : public std::enable_shared_from_this<Imports> {
 public:
  Imports(asio::any_io_executor executor, std::shared_ptr<ClientCounts> clients)
      : executor_(std::move(executor)), clients_(std::move(clients)) {}

  std::size_t held() const { return held_; }
  std::size_t ending() const { return ending_; }     // held by a session that is ending: room soon
  std::size_t waiting() const { return waiting_.size(); }

  Ticket take(const std::string& client);

  // Room may have come (an import ended, or went idle and may be retired): the calls waiting look again.
  // Posted, not at once: this runs from destructors too, which may run while the loop is torn down at exit.
  void changed() {
    if (closed_) return;
    asio::post(executor_, [weak = weak_from_this()] {
      auto self = weak.lock();
      if (!self || self->closed_) return;
      for (auto& waiter : self->waiting_) waiter->set();
    });
  }
  // True when changed() was called, false at the deadline.
  asio::awaitable<bool> wait_until(std::chrono::steady_clock::time_point deadline) {
    auto turn = std::make_shared<AsyncEvent>(executor_);
    waiting_.push_back(turn);
    struct Leave {
      std::shared_ptr<Imports> imports;  // held: the frame may outlive the front at exit
      std::shared_ptr<AsyncEvent> turn;
      ~Leave() { std::erase(imports->waiting_, turn); }
    } leave{shared_from_this(), turn};
    co_return co_await turn->wait_until(deadline);
  }
  // The front stops: the calls waiting wake (and fail), and nothing is woken from now on.
  void close() {
    for (auto& waiter : waiting_) waiter->set();
    closed_ = true;
  }

 private:
  friend class Ticket;
  asio::any_io_executor executor_;
  std::shared_ptr<ClientCounts> clients_;
  std::size_t held_ = 0;
  std::size_t ending_ = 0;
  std::deque<std::shared_ptr<AsyncEvent>> waiting_;
  bool closed_ = false;
};

// One import held for classic clients, charged to the client whose call made it; let go of when its session
// has ended.
class Ticket {
 public:
  Ticket() = default;
  Ticket(std::shared_ptr<Imports> imports, ClientCharge charge) : imports_(std::move(imports)), charge_(std::move(charge)) {
    ++imports_->held_;
  }
  Ticket(Ticket&& other) noexcept
      : imports_(std::move(other.imports_)), charge_(std::move(other.charge_)), ending_(std::exchange(other.ending_, false)) {}
  Ticket& operator=(Ticket&& other) noexcept {
    if (this != &other) {
      release();
      imports_ = std::move(other.imports_);
      charge_ = std::move(other.charge_);
      ending_ = std::exchange(other.ending_, false);
    }
    return *this;
  }
  ~Ticket() { release(); }

  explicit operator bool() const { return imports_ != nullptr; }
  const std::string& client() const { return charge_.client(); }
  // Its session is ending: the room it holds comes free soon, and no other import need end for it.
  void ending() {
    if (imports_ && !ending_) ending_ = true, ++imports_->ending_;
  }
  void release() {
    auto imports = std::exchange(imports_, nullptr);
    if (!imports) return;
    --imports->held_;
    if (std::exchange(ending_, false)) --imports->ending_;
    charge_.release();
    imports->changed();
  }

 private:
  std::shared_ptr<Imports> imports_;
  ClientCharge charge_;
  bool ending_ = false;
};

Ticket Imports::take(const std::string& client) { return Ticket(shared_from_this(), ClientCharge(clients_, client)); }

namespace {
// Ends a session that held an import, in the background: its end may wait for grace periods, and only the
// next import of the same instance waits for it (the pools end what is left at shutdown). The import's room
// comes free once it has ended.
asio::awaitable<void> end_session(std::shared_ptr<ClientSession> session, std::string why, Ticket ticket,
                                  std::shared_ptr<AsyncEvent> ended) {
  co_await session->end(std::move(why));
  ticket.release();
  ended->set();
}

// One import of the library, held by an in-process client session: the front talks JSON-RPC to it, and
// it answers through this Connection. Used by one call at a time (Library hands it out).
class Instance final : public Connection, public std::enable_shared_from_this<Instance> {
 public:
  Instance(GatewayContext& context, asio::any_io_executor executor, std::string library, std::string name)
      : context_(context), executor_(executor), library_(std::move(library)), name_(std::move(name)),
        idle_timer_(std::move(executor)) {}

  const std::string& name() const override { return name_; }
  void send(std::string json_text) override {
    auto classified = parse_message(json_text);
    auto* message = std::get_if<Message>(&classified);
    if (!message) {
      // Never expected; the calls waiting are failed rather than left waiting for good.
      log::error("bug: {}: the session sent a message that is not one: {}", name_,
                 std::get<ProtocolError>(classified).message);
      fail_pending("the gateway's session sent a malformed message (a bug; see the gateway's log)");
      return;
    }
    if (message->kind == Message::Kind::notification) {
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
  asio::awaitable<void> wait_for_room() override { co_return; }  // logs are collected in memory, bounded in send()
  void session_idle() override {}
  void close(std::string) override { closing_ = true; }
  bool closing() const override { return closing_; }
  asio::awaitable<void> wait_closed() override { co_return; }

  bool imported() const { return !token_.empty() && session_; }
  const json::value& definition() const { return definition_; }
  // When it last went idle: the least recently used idle import makes room for another.
  std::chrono::steady_clock::time_point last_used() const { return last_used_; }

  // The room an import it makes is counted in (ClassicFront::admit); needed before ensure_imported() when
  // it holds none.
  void charge(Ticket ticket) { ticket_ = std::move(ticket); }

  // Its previous import (lost, or ended for idle_timeout) has ended, or the deadline passed: a library then
  // never holds more than classic_instances workers of its pool, not even for a moment.
  asio::awaitable<void> previous_ended(std::chrono::steady_clock::time_point deadline) {
    const auto previous = previous_;
    if (!previous) co_return;
    const bool ended = co_await previous->wait_until(deadline);  // not in a condition: GCC 12
    if (!ended) log::warn("{}: its previous import of library {} is still ending; importing anyway", name_, library_);
    co_return;
  }

  // A call took it: the idle clock stops.
  void taken() {
    ++rests_;
    idle_timer_.cancel();
  }
  // A call gave it back: once it has been idle for `timeout` (0: never), `expired` runs.
  void rest(std::chrono::milliseconds timeout, std::function<void()> expired) {
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

  // Imports the library unless this instance holds an import (charge() first). Throws Failure; a failed
  // import is forgotten at once (its session ends), so the next call starts afresh.
  asio::awaitable<void> ensure_imported() {
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

 private:
  asio::awaitable<void> import() {
    if (!session_) {
      closing_ = false;
      auto session = std::make_shared<ClientSession>(context_, context_.config(), context_.pools, weak_from_this(),
                                                     name_, executor_);
      session_ = session;
      std::string params = R"({"client_info": {"name": "robot-jsonrpc-gateway classic front"}})";
      auto init = co_await request(protocol::kInitialize, std::move(params));
      if (init.kind != Message::Kind::response || session_ != session) {
        session_.reset();
        throw Failure(init.kind == Message::Kind::response ? "the gateway is stopping" : init.error_message());
      }
      notify(protocol::kInitialized, "{}");
    }
    const auto session = session_;
    std::string params = fmt::format(R"({{"name": {}}})", json_string(library_));
    auto answer = co_await request(protocol::kImportLibrary, std::move(params));
    if (session_ != session) throw Failure("the gateway is stopping");
    if (answer.kind != Message::Kind::response) throw Failure(answer.error_message());
    auto result = answer.result();
    const auto* token = result.is_object() ? result.as_object().if_contains("token") : nullptr;
    if (!token || !token->is_string()) throw Failure("the import answered without a token");
    token_ = token->get_string();
    if (auto* definition = result.as_object().if_contains("definition")) definition_ = *definition;
    log::info("{}: imported library {} for classic clients (made for {})", name_, library_, ticket_.client());
  }

 public:

  // robot/run_keyword on this instance's import; args and kwargs are JSON texts. The output kept is cut
  // at max_output bytes.
  asio::awaitable<KeywordAnswer> run(const std::string& keyword, const std::string& args, const std::string& kwargs,
                                     std::size_t max_output) {
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
    if (answer.kind == Message::Kind::response) {
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

  // Forgets the import; its session ends in the background (a shared worker finalizes the instance, a
  // dedicated one stops), and the room it was counted in comes free then. The next call imports again, unless
  // stopped.
  void drop(std::string why) {
    token_.clear();
    taken();  // no idle clock for what is not imported
    auto ticket = std::move(ticket_);
    if (auto session = std::move(session_)) {
      session_.reset();
      ticket.ending();
      previous_ = std::make_shared<AsyncEvent>(executor_);
      asio::co_spawn(executor_, end_session(std::move(session), std::move(why), std::move(ticket), previous_),
                     log_exceptions("classic: end " + name_));
    }
  }
  // The gateway is stopping: the import ends, and none is made again.
  void stop() {
    stopped_ = true;
    drop("the gateway is stopping");
  }

 private:
  void notify(std::string_view method, std::string_view params) {
    auto text = make_notification_raw(method, params);
    auto classified = parse_message(text);
    session_->handle(std::get<Message>(classified));
  }

  asio::awaitable<Message> request(std::string_view method, std::string params) {
    if (!session_) throw Failure("the gateway is stopping");
    const auto id = next_id_++;
    auto classified = parse_message(make_request_raw(std::to_string(id), method, params), request_limits());
    auto* message = std::get_if<Message>(&classified);
    // What a classic client sent made an invalid message (arguments nested deeper than max_json_depth).
    if (!message) throw Failure(std::get<ProtocolError>(classified).message);
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

  JsonLimits request_limits() const {
    const auto config = context_.config();
    JsonLimits limits;
    limits.max_depth = config->gateway.max_json_depth;
    limits.max_object_members = config->gateway.max_object_members;
    return limits;
  }

  // Answers every call waiting with an internal error.
  void fail_pending(std::string_view why) {
    for (auto& [id, pending] : pending_) {
      auto classified = parse_message(make_error_raw(std::to_string(id), protocol::kInternalError, why));
      pending->answer.emplace(std::move(std::get<Message>(classified)));
      pending->done.set();
    }
  }

  struct Pending {
    explicit Pending(asio::any_io_executor executor) : done(std::move(executor)) {}
    std::optional<Message> answer;
    AsyncEvent done;
  };

  GatewayContext& context_;
  asio::any_io_executor executor_;
  const std::string library_;
  const std::string name_;
  std::shared_ptr<ClientSession> session_;
  std::string token_;
  json::value definition_;
  std::uint64_t next_id_ = 1;
  std::unordered_map<std::uint64_t, std::shared_ptr<Pending>> pending_;
  std::string* output_ = nullptr;  // the running keyword's output
  std::size_t max_output_ = 0;
  bool output_cut_ = false;
  bool closing_ = false;
  bool stopped_ = false;
  Ticket ticket_;  // while it holds an import, or makes one
  std::chrono::steady_clock::time_point last_used_ = std::chrono::steady_clock::now();
  asio::steady_timer idle_timer_;
  std::uint64_t rests_ = 0;                  // which rest the idle timer is for
  std::shared_ptr<AsyncEvent> previous_;  // set once the session of its last import has ended
};
}  // namespace

// A library as classic clients see it: its imports, and the calls waiting for one.
class Library : public std::enable_shared_from_this<Library> {
 public:
  // unused: called when it holds no import, serves no call and has none waiting (the front forgets it).
  Library(GatewayContext& context, asio::any_io_executor executor, std::string name, std::shared_ptr<Imports> imports,
          std::function<void(Library&)> unused)
      : context_(context), executor_(std::move(executor)), name_(std::move(name)), imports_(std::move(imports)),
        unused_(std::move(unused)) {}

  const std::string& name() const { return name_; }

  // A call that holds the library: while one does, it stays in the front's table.
  class Use {
   public:
    explicit Use(std::shared_ptr<Library> library) : library_(std::move(library)) { ++library_->users_; }
    Use(const Use&) = delete;
    Use& operator=(const Use&) = delete;
    ~Use() {
      --library_->users_;
      library_->check_unused();
    }

   private:
    std::shared_ptr<Library> library_;  // held: the frame may outlive the front at exit
  };

  // The front no longer keeps it (forgotten, or the front is gone): it calls nothing back any more.
  void detach() { unused_ = nullptr; }

  // An idle instance, taken in arrival order; `wanted`: classic_instances now. Throws Failure when too many
  // calls wait already, or once the gateway is stopping.
  asio::awaitable<std::shared_ptr<Instance>> take(std::size_t wanted, std::size_t max_waiting) {
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
  // Gives an instance back: to the call that waited longest, or to the idle ones, where its idle clock runs
  // ([classic] idle_timeout) and a call waiting for room may retire it.
  void give_back(std::shared_ptr<Instance> instance) {
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

  // Its idle import used least recently, if it has one.
  std::shared_ptr<Instance> least_recently_used() const {
    std::shared_ptr<Instance> oldest;
    for (const auto& instance : idle_)
      if (instance->imported() && (!oldest || instance->last_used() < oldest->last_used())) oldest = instance;
    return oldest;
  }
  // Ends an idle instance's import (idle_timeout, or room for another library's); the library may then
  // hold nothing and leave the table.
  void retire(const std::shared_ptr<Instance>& instance, std::string why) {
    if (stopped_ || !instance->imported() || std::find(idle_.begin(), idle_.end(), instance) == idle_.end()) return;
    log::info("{}: ending the import of library {}: {}", instance->name(), name_, why);
    instance->drop(std::move(why));
    check_unused();
  }

  // For /status: its instances (each one import held for classic clients), how many imported so far,
  // how many serve a call now, and the calls waiting for one.
  json::object status() const {
    std::size_t imported = 0;
    for (const auto& instance : instances_) imported += instance->imported() ? 1 : 0;
    return json::object{{"library", name_},
                        {"instances", instances_.size()},
                        {"imported", imported},
                        {"busy", instances_.size() - idle_.size()},
                        {"calls_waiting", waiting_.size()}};
  }

  // The library definition of any import made (the same library gives the same one).
  const json::value* definition() const {
    for (const auto& instance : instances_)
      if (instance->imported()) return &instance->definition();
    return remembered_.is_null() ? nullptr : &remembered_;
  }
  void remember(const json::value& definition) { remembered_ = definition; }

  // The gateway is stopping: calls waiting fail, and every import ends (in the background; the pools end
  // what is left). Nothing is forgotten from now on: the front is going away with its table.
  void stop() {
    stopped_ = true;
    for (auto& waiter : std::exchange(waiting_, {})) waiter->ready.set();  // with no instance: a Failure
    for (auto& instance : instances_) instance->stop();
  }

 private:
  struct Waiter {
    explicit Waiter(asio::any_io_executor executor) : ready(std::move(executor)) {}
    AsyncEvent ready;
    std::shared_ptr<Instance> instance;
  };

  void check_unused() {
    if (stopped_ || users_ > 0 || !waiting_.empty()) return;
    if (std::any_of(instances_.begin(), instances_.end(), [](const auto& i) { return i->imported(); })) return;
    // A copy: the call may detach this library, which would destroy the function while it runs.
    if (auto unused = unused_) unused(*this);
  }

  GatewayContext& context_;
  asio::any_io_executor executor_;
  const std::string name_;
  std::shared_ptr<Imports> imports_;
  std::function<void(Library&)> unused_;
  std::size_t users_ = 0;  // calls that hold it (Use)
  std::vector<std::shared_ptr<Instance>> instances_;
  std::deque<std::shared_ptr<Instance>> idle_;
  std::deque<std::shared_ptr<Waiter>> waiting_;
  json::value remembered_;
  bool stopped_ = false;
};

// An instance taken from a library, given back however the call ends.
struct Held {
  std::shared_ptr<Library> library;
  std::shared_ptr<Instance> instance;
  ~Held() {
    if (instance) library->give_back(std::move(instance));
  }
};

namespace {
// ---- Library information from the library definition ----

// The objects of the array `key` of an object (a definition's keywords, a keyword's args); f returns
// false to stop.
template <class F>
void each_object(const json::object* o, std::string_view key, F&& f) {
  const auto* list = o ? o->if_contains(key) : nullptr;
  if (!list || !list->is_array()) return;
  for (const auto& item : list->get_array())
    if (item.is_object() && !f(item.get_object())) return;
}

const json::object* keyword_of(const json::value& definition, std::string_view name) {
  const json::object* found = nullptr;
  each_object(definition.if_object(), "keywords", [&](const json::object& k) {
    if (string_member(k, "name") == name) found = &k;
    return !found;
  });
  return found;
}

// The classic argument spec: "a", "b=default", "*varargs", "**kwargs", and the markers "*" and "/". A
// named-only argument comes after "*" or "*varargs" (a definition without the marker gets one): without it
// Robot would read it as positional, and refuse a keyword-only argument without a default after one with.
// Likewise positional-only arguments end with "/", or Robot would bind name=value to them.
xmlrpc::Value argument_spec(const json::object& keyword) {
  xmlrpc::Array spec;
  bool named_only = false;
  bool positional_only = false;  // the argument before was POSITIONAL_ONLY
  each_object(&keyword, "args", [&](const json::object& arg) {
    const auto name = string_member(arg, "name");
    const auto kind = string_member(arg, "kind");
    // Positional-only arguments end at "/": a definition that lists them without the marker gets one.
    if (positional_only && kind != "POSITIONAL_ONLY" && kind != "POSITIONAL_ONLY_MARKER") spec.emplace_back("/");
    positional_only = kind == "POSITIONAL_ONLY";
    if (kind == "NAMED_ONLY" && !named_only) spec.emplace_back("*");
    if (kind == "NAMED_ONLY_MARKER" || kind == "VAR_POSITIONAL" || kind == "NAMED_ONLY") named_only = true;
    if (kind == "POSITIONAL_ONLY_MARKER") spec.emplace_back("/");
    else if (kind == "NAMED_ONLY_MARKER") spec.emplace_back("*");
    else if (kind == "VAR_POSITIONAL") spec.emplace_back("*" + name);
    else if (kind == "VAR_NAMED") spec.emplace_back("**" + name);
    else {
      const auto* has_default = arg.if_contains("has_default");
      if (has_default && has_default->is_bool() && has_default->get_bool()) {
        std::string text;
        try {
          const auto* d = arg.if_contains("default");
          text = rjg::classic::default_text(rjg::classic::from_json(d ? json::serialize(*d) : "null", "default"));
        } catch (const rjg::classic::ValueError&) {
          text = "<not shown: a value outside the data-only subset>";
        }
        spec.emplace_back(fmt::format("{}={}", name, text));
      } else {
        spec.emplace_back(name);
      }
    }
    return true;
  });
  if (positional_only) spec.emplace_back("/");
  return spec;
}

xmlrpc::Value argument_types(const json::object& keyword) {
  xmlrpc::Struct types;
  each_object(&keyword, "args", [&](const json::object& arg) {
    auto type = string_member(arg, "type");
    auto name = string_member(arg, "name");
    const auto kind = string_member(arg, "kind");
    if (kind == "POSITIONAL_ONLY_MARKER" || kind == "NAMED_ONLY_MARKER") return true;
    if (!type.empty() && !name.empty()) types.emplace_back(std::move(name), std::move(type));
    return true;
  });
  return types;
}

xmlrpc::Value keyword_tags(const json::object& keyword) {
  xmlrpc::Array tags;
  if (const auto* t = keyword.if_contains("tags"); t && t->is_array())
    for (const auto& tag : t->get_array())
      if (tag.is_string()) tags.emplace_back(std::string(tag.get_string()));
  return tags;
}

std::string library_doc(const json::value& definition) {
  const auto* d = definition.if_object();
  return d ? string_member(*d, "doc") : std::string();
}

xmlrpc::Value library_information(const json::value& definition) {
  xmlrpc::Struct info;
  each_object(definition.if_object(), "keywords", [&](const json::object& kw) {
    info.emplace_back(string_member(kw, "name"), xmlrpc::Struct{{"args", argument_spec(kw)},
                                                                {"types", argument_types(kw)},
                                                                {"tags", keyword_tags(kw)},
                                                                {"doc", string_member(kw, "doc")}});
    return true;
  });
  info.emplace_back("__intro__", xmlrpc::Struct{{"doc", library_doc(definition)}});
  info.emplace_back("__init__", xmlrpc::Struct{{"doc", std::string()}});
  return info;
}

// ---- Answers ----

HttpResponse xml(std::string body) { return HttpResponse{200, "text/xml", std::move(body)}; }
HttpResponse fault(std::string_view message) { return xml(xmlrpc::write_fault(1, message)); }

// A message (output, error, traceback) as a classic server sends it: text XML cannot carry (control
// characters) as base64 of its Latin-1 bytes, which Robot's Remote reads back as the same text (safe_str);
// beyond Latin-1 the writer puts U+FFFD for those characters.
xmlrpc::Value message_value(std::string text) {
  if (xmlrpc::xml_safe(text)) return xmlrpc::Value(std::move(text));
  if (auto latin1 = xmlrpc::to_latin1(text)) return xmlrpc::Value(xmlrpc::Binary{std::move(*latin1)});
  return xmlrpc::Value(std::move(text));
}

// The struct Robot's Remote reads: status, return, output, error, traceback, continuable, fatal.
xmlrpc::Value keyword_result(const KeywordAnswer& answer, const std::string& library, const std::string& keyword,
                             std::size_t max_depth) {
  xmlrpc::Struct r;
  auto failed = [&](std::string error, std::string traceback = {}, bool continuable = false, bool fatal = false) {
    return xmlrpc::Struct{{"status", "FAIL"},
                          {"return", ""},
                          {"output", message_value(answer.output)},
                          {"error", message_value(std::move(error))},
                          {"traceback", message_value(std::move(traceback))},
                          {"continuable", continuable},
                          {"fatal", fatal}};
  };
  if (answer.failure) return failed(*answer.failure);
  // Read without a tree: a result may hold NaN or integers beyond 64 bits (see rjg::classic::from_json).
  const std::string_view text = answer.result_text;
  const auto members = jsontext::members(text);
  if (const auto* error = jsontext::find(members, "error"); error && error->kind == jsontext::Kind::object) {
    const auto error_text = error->value.of(text);
    const auto fields = jsontext::members(error_text);
    auto field = [&](std::string_view key) {
      const auto* m = jsontext::find(fields, key);
      return m && m->kind == jsontext::Kind::string ? jsontext::decode_string(m->value.of(error_text)) : std::string();
    };
    const auto mode = field("mode");
    return failed(error_message(field("message"), field("type")), field("traceback"), mode == "CONTINUABLE",
                  mode == "FATAL");
  }
  xmlrpc::Value value{std::string()};
  if (const auto* returned = jsontext::find(members, "result")) {
    try {
      value = rjg::classic::to_xmlrpc(rjg::classic::from_json(returned->value.of(text), "result", max_depth));
    } catch (const rjg::classic::ValueError& e) {
      return failed(fmt::format("The return value of keyword '{}' of library '{}' cannot be sent over XML-RPC: {}",
                                keyword, library, e.what()));
    }
  }
  return xmlrpc::Struct{{"status", "PASS"}, {"return", std::move(value)}, {"output", message_value(answer.output)},
                        {"error", ""},      {"traceback", ""},            {"continuable", false},
                        {"fatal", false}};
}

// "/SeleniumLibrary" -> "SeleniumLibrary" (percent-escapes decoded, one trailing slash dropped); "/" and
// "/RPC2" -> "" (the default library).
std::optional<std::string> library_in_path(std::string_view path) {
  if (path.starts_with('/')) path.remove_prefix(1);
  if (path.ends_with('/')) path.remove_suffix(1);
  if (path.empty() || path == "RPC2") return std::string();
  std::string out;
  for (std::size_t i = 0; i < path.size(); ++i) {
    if (path[i] != '%') {
      out += path[i];
      continue;
    }
    auto hex = [](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      return -1;
    };
    if (i + 2 >= path.size()) return std::nullopt;
    const int hi = hex(path[i + 1]), lo = hex(path[i + 2]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return out;
}

std::string default_library(const config::Config& config) {
  if (!config.classic.default_library.empty()) return config.classic.default_library;
  for (const auto& library : config.libraries)
    if (!library.is_glob()) return library.name;
  return {};
}

// Whether a call is run_keyword(name, args[, kwargs]) with parameters of the types it takes.
bool keyword_call(const xmlrpc::Call& call) {
  const auto& params = call.params;
  return call.method == "run_keyword" && params.size() >= 2 && params.size() <= 3 && params[0].is<std::string>() &&
         params[1].is<xmlrpc::Array>() && (params.size() == 2 || params[2].is<xmlrpc::Struct>());
}

// A request's body read as an XML-RPC call, and for run_keyword its arguments as JSON texts: the work that
// grows with the body, done in one place, on the offload pool when the body is large.
struct ReadCall {
  xmlrpc::Call call;
  std::optional<std::string> refusal;          // a fault's text: not a call, or over a limit
  std::string args = "[]", kwargs = "{}";      // run_keyword's arguments
  std::optional<std::string> argument_error;   // run_keyword: an argument that cannot be passed (ValueError)
};

ReadCall read_call(std::string body, const xmlrpc::Limits& limits, const std::string& limits_text) {
  ReadCall out;
  try {
    out.call = xmlrpc::parse_call(body, limits);
  } catch (const xmlrpc::LimitError& e) {
    out.refusal = fmt::format("The request is over a limit of the classic front: {}. {}", e.what(), limits_text);
    return out;
  } catch (const xmlrpc::ParseError& e) {
    out.refusal = fmt::format("The request is not an XML-RPC call: {}", e.what());
    return out;
  }
  std::string().swap(body);  // not held while the keyword runs
  if (!keyword_call(out.call)) return out;
  auto& params = out.call.params;
  try {
    std::string args = "[";
    for (const auto& a : params[1].as<xmlrpc::Array>())
      args += (args.size() > 1 ? ", " : "") + rjg::classic::to_json_argument(rjg::classic::to_python(a));
    args += "]";
    std::string kwargs = "{";
    if (params.size() == 3)
      for (const auto& [key, value] : params[2].as<xmlrpc::Struct>())
        kwargs += (kwargs.size() > 1 ? ", " : "") + json_string(key) + ": " +
                  rjg::classic::to_json_argument(rjg::classic::to_python(value));
    kwargs += "}";
    out.args = std::move(args);
    out.kwargs = std::move(kwargs);
  } catch (const rjg::classic::ValueError& e) {
    out.argument_error = e.what();
  }
  // The texts carry the arguments now: the values are not held twice while the keyword runs (emptied,
  // of the same types, so the call keeps its shape).
  params[1] = xmlrpc::Value(xmlrpc::Array{});
  if (params.size() == 3) params[2] = xmlrpc::Value(xmlrpc::Struct{});
  return out;
}

// On the offload pool (a coroutine function, not a capturing lambda: its frame owns the body).
asio::awaitable<ReadCall> read_call_on_pool(std::string body, xmlrpc::Limits limits, std::string limits_text) {
  co_return read_call(std::move(body), limits, limits_text);
}

// A keyword's answer as the document the classic client gets, on the offload pool: a large result is
// converted twice over (to Python's values, then to XML-RPC's), which would hold up the loop as long as
// parsing a large body.
asio::awaitable<std::string> write_result_on_pool(KeywordAnswer answer, std::string library, std::string keyword,
                                                  std::size_t max_depth) {
  co_return xmlrpc::write_response(keyword_result(answer, library, keyword, max_depth));
}

HttpLimits http_limits(const config::Config& config) {
  const auto& gw = config.gateway;
  HttpLimits limits;
  // A body of its own limit, far below max_message_bytes: parsed and converted, each byte costs several.
  limits.max_request_bytes = config.classic.max_body_bytes + gw.max_header_bytes;
  // A fault, which Robot shows (of a 413 it would show the status only).
  limits.too_large_answer =
      fault(fmt::format("The request is too large for the classic front: its body may have at most [classic] "
                        "max_body_bytes = {} bytes (and its headers [gateway] max_header_bytes = {}). Pass smaller "
                        "arguments, or raise max_body_bytes.",
                        config.classic.max_body_bytes, gw.max_header_bytes));
  limits.request_timeout = std::chrono::duration_cast<std::chrono::milliseconds>(gw.handshake_timeout);
  limits.max_connections = gw.max_sessions;
  limits.max_connections_per_client = gw.max_sessions_per_client;
  limits.max_requests_per_connection = 0;
  return limits;
}
}  // namespace
}  // namespace front

ClassicFront::ClassicFront(asio::io_context& io, GatewayContext& context, const config::Config& config)
    : io_(io),
      context_(context),
      http_(io, "classic", [this](HttpRequest request) { return handle(std::move(request)); }, config.gateway.allow_from,
            front::http_limits(config)),
      idle_(io.get_executor()),
      imports_(std::make_shared<front::Imports>(io.get_executor(), context.clients)) {
  idle_.set();
}

ClassicFront::~ClassicFront() {
  http_.stop();
  // Coroutine frames destroyed after this (at exit) may still hold a library or a ticket: neither calls
  // back here, nor wakes anything, any more.
  for (auto& [name, library] : libraries_) library->detach();
  imports_->close();
}

void ClassicFront::serve(std::shared_ptr<asio::ip::tcp::acceptor> acceptor, std::string entry) {
  http_.serve(std::move(acceptor), std::move(entry));
}

void ClassicFront::reconfigure(const config::Config& config) {
  http_.set_allow_from(config.gateway.allow_from);
  http_.set_limits(front::http_limits(config));
}

asio::awaitable<bool> ClassicFront::drain(std::chrono::steady_clock::time_point deadline) {
  stopping_ = true;
  co_return co_await idle_.wait_until(deadline);
}

asio::awaitable<void> ClassicFront::shutdown() {
  stopping_ = true;
  http_.stop();
  imports_->close();  // calls waiting for room fail
  for (auto& [name, library] : libraries_) library->stop();
  co_return;
}

json::object ClassicFront::status() const {
  json::array libraries;
  for (const auto& [name, library] : libraries_) libraries.push_back(library->status());
  return json::object{{"connections", http_.connections()},
                      {"calls_running", calls_},
                      {"imports", imports_->held()},
                      {"libraries", std::move(libraries)}};
}

std::shared_ptr<front::Library> ClassicFront::library(const std::string& name) {
  auto& slot = libraries_[name];
  if (!slot)
    slot = std::make_shared<front::Library>(context_, io_.get_executor(), name, imports_,
                                            [this](front::Library& library) { forget(library); });
  return slot;
}

void ClassicFront::forget(const front::Library& library) {
  auto it = libraries_.find(library.name());
  if (it == libraries_.end() || it->second.get() != &library) return;
  it->second->detach();
  libraries_.erase(it);  // the caller holds it still
}

bool ClassicFront::retire_idle_import(const front::Library* except) {
  std::shared_ptr<front::Library> owner;
  std::shared_ptr<front::Instance> oldest;
  for (const auto& [name, library] : libraries_) {
    if (library.get() == except) continue;
    auto candidate = library->least_recently_used();
    if (candidate && (!oldest || candidate->last_used() < oldest->last_used())) oldest = std::move(candidate), owner = library;
  }
  if (!oldest) return false;
  owner->retire(oldest, "making room for an import of another library ([classic] max_imports)");
  return true;
}

asio::awaitable<front::Ticket> ClassicFront::admit(const std::string& client, const front::Library& library,
                                                   std::chrono::milliseconds queue_timeout,
                                                   std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    if (stopping_) throw front::Failure("the gateway is stopping");
    const auto config = context_.config();
    const auto per_client = config->gateway.max_sessions_per_client;
    if (per_client && context_.clients->held(client) >= per_client)
      throw front::Failure(fmt::format(
          "this client address ({}) already holds {} sessions and imports, the most allowed ([gateway] "
          "max_sessions_per_client = {}; each import the classic front made for its calls counts, until it ends "
          "after [classic] idle_timeout unused). Close JSON-RPC sessions, call the libraries imported already, "
          "retry later, or raise max_sessions_per_client.",
          client, context_.clients->held(client), per_client));
    const auto most = config->classic.max_imports;
    if (imports_->held() < most) co_return imports_->take(client);
    // At the cap. The imports ending already make room for as many calls; for the others, the least
    // recently used idle import of another library ends (this library's idle ones would have been taken).
    // Room that is coming is waited for whatever queue_timeout says (0 too): an idle import's end is bounded
    // by its worker's grace periods, and only a call that finds every import busy waits queue_timeout.
    const bool coming = imports_->ending() > imports_->waiting() || retire_idle_import(&library);
    const auto until = coming ? std::max(deadline, std::chrono::steady_clock::now() + front::kRoomComing) : deadline;
    const bool woken = co_await imports_->wait_until(until);  // not in the condition: GCC 12
    if (!woken && imports_->held() >= most) {
      if (stopping_) throw front::Failure("the gateway is stopping");
      throw front::Failure(fmt::format(
          "the classic front holds {} imports for classic clients, the most allowed ([classic] max_imports = {}), "
          "and every one served a call for the {} this call may wait (the library's queue_timeout). Retry later, "
          "or raise [classic] max_imports (below [gateway] max_workers).",
          imports_->held(), most, front::seconds_text(queue_timeout)));
    }
  }
}

asio::awaitable<std::optional<HttpResponse>> ClassicFront::handle(HttpRequest request) {
  using front::fault;
  const auto config = context_.config();
  const auto& gw = config->gateway;
  if (stopping_ || context_.draining) co_return fault("The gateway is stopping; no new calls are taken.");
  ++calls_;
  idle_.reset();
  struct Count {
    ClassicFront& front;
    ~Count() {
      if (--front.calls_ == 0) front.idle_.set();
    }
  } count{*this};

  auto requested = front::library_in_path(request.path);
  if (!requested)
    co_return fault(fmt::format("The path {} is not a library name: a '%' escape in it is malformed.",
                                log::printable(request.path, 200)));
  const std::string name = requested->empty() ? front::default_library(*config) : *requested;
  auto route = context_.router.resolve(name);
  if (!route.library) {
    std::string names;
    for (const auto& n : context_.router.names()) names += (names.empty() ? "" : ", ") + n;
    co_return fault(fmt::format("No library '{}' is served here{}{}. The URL's path names the library: "
                                "http://HOST:PORT/LIBRARY; \"/\" and \"/RPC2\" serve '{}'. Libraries: {}.",
                                log::printable(name, 200), route.refused.empty() ? "" : ": ", route.refused,
                                front::default_library(*config), names));
  }
  const auto& settings = *route.library;
  if (settings.classic_instances == 0)
    co_return fault(fmt::format("Library '{}' is not served to classic clients (its classic_instances = 0); JSON-RPC "
                                "clients import it on the gateway's protocol port.",
                                log::printable(name, 200)));

  xmlrpc::Limits limits;
  limits.max_bytes = config->classic.max_body_bytes;
  limits.max_depth = gw.max_json_depth;
  std::string limits_text = fmt::format(
      "A body holds at most [classic] max_body_bytes = {} bytes, at most one value per {} bytes of it, and arrays "
      "and structs nested at most [gateway] max_json_depth = {} deep.",
      limits.max_bytes, limits.bytes_per_value, limits.max_depth);
  // A large body is read off this loop, as large JSON frames are, so that the sessions on it go on meanwhile.
  const std::size_t body_bytes = request.body.size();
  front::ReadCall read;
  if (context_.offload && body_bytes >= kOffloadFrameBytes) {
    auto reading = front::read_call_on_pool(std::move(request.body), limits, std::move(limits_text));
    read = co_await asio::co_spawn(*context_.offload, std::move(reading), asio::use_awaitable);
    log::debug("classic: the request of {} bytes from {} was read off the event loop", body_bytes, request.peer);
  } else {
    read = front::read_call(std::move(request.body), limits, limits_text);
  }
  if (read.refusal) {
    log::info("classic: {} sent a request that is refused: {}", request.peer, *read.refusal);
    co_return fault(*read.refusal);
  }
  xmlrpc::Call call = std::move(read.call);
  const auto& params = call.params;
  auto library = this->library(name);
  const front::Library::Use use{library};  // in the table while this call holds it
  auto string_param = [&](std::size_t i) -> const std::string* {
    return i < params.size() && params[i].is<std::string>() ? &params[i].as<std::string>() : nullptr;
  };
  auto shape = [&](std::string_view expected) {
    return fault(fmt::format("{} takes {}; got {} parameter(s).", call.method, expected, params.size()));
  };

  // An instance taken that holds no import gets room for one first (ClassicFront::admit).
  auto ready = [&](const std::shared_ptr<front::Instance>& instance) -> asio::awaitable<void> {
    if (instance->imported()) co_return;
    const auto deadline = std::chrono::steady_clock::now() + settings.queue_timeout;
    auto ticket = co_await admit(request.client, *library, settings.queue_timeout, deadline);
    co_await instance->previous_ended(deadline);
    instance->charge(std::move(ticket));
    co_return;  // explicit: GCC 12 and an awaitable<void> that falls off the end
  };
  // The methods that describe the library read its definition, importing it first when no call has.
  auto definition = [&]() -> asio::awaitable<const json::value*> {
    if (const auto* d = library->definition()) co_return d;
    auto taken = co_await library->take(settings.classic_instances, gw.max_pending_requests);
    front::Held held{library, std::move(taken)};
    auto& instance = held.instance;
    co_await ready(instance);
    co_await instance->ensure_imported();
    library->remember(instance->definition());
    co_return library->definition();
  };

  try {
    const auto& method = call.method;
    if (method == "run_keyword") {
      const auto* keyword = string_param(0);
      if (!front::keyword_call(call))
        co_return shape("a keyword name, a list of arguments and optionally a struct of named arguments");
      if (read.argument_error) throw rjg::classic::ValueError(*read.argument_error);
      const std::string& args = read.args;  // converted with the parse (front::read_call)
      const std::string& kwargs = read.kwargs;
      auto taken = co_await library->take(settings.classic_instances, gw.max_pending_requests);
      front::Held held{library, std::move(taken)};
      auto& instance = held.instance;
      co_await ready(instance);
      auto answer = co_await instance->run(*keyword, args, kwargs, gw.max_message_bytes);
      if (instance->imported()) library->remember(instance->definition());
      if (context_.offload && answer.result_text.size() + answer.output.size() >= kOffloadFrameBytes) {
        const std::size_t result_bytes = answer.result_text.size() + answer.output.size();
        auto writing = front::write_result_on_pool(std::move(answer), name, *keyword, gw.max_json_depth);
        std::string written = co_await asio::co_spawn(*context_.offload, std::move(writing), asio::use_awaitable);
        log::debug("classic: the result of {} from library {} ({} bytes) was written off the event loop",
                   log::printable(*keyword, 200), name, result_bytes);
        co_return front::xml(std::move(written));
      }
      co_return front::xml(
          xmlrpc::write_response(front::keyword_result(answer, name, *keyword, gw.max_json_depth)));
    }
    if (method == "get_library_information") {
      if (!params.empty()) co_return shape("no parameters");
      co_return front::xml(xmlrpc::write_response(front::library_information(*co_await definition())));
    }
    if (method == "get_keyword_names") {
      if (!params.empty()) co_return shape("no parameters");
      xmlrpc::Array names;
      front::each_object((co_await definition())->if_object(), "keywords", [&](const json::object& k) {
        names.emplace_back(front::string_member(k, "name"));
        return true;
      });
      co_return front::xml(xmlrpc::write_response(names));
    }
    if (method == "get_keyword_arguments" || method == "get_keyword_types" || method == "get_keyword_tags" ||
        method == "get_keyword_documentation") {
      const auto* keyword = string_param(0);
      if (!keyword || params.size() != 1) co_return shape("a keyword name");
      const auto& d = *co_await definition();
      if (method == "get_keyword_documentation" && (*keyword == "__intro__" || *keyword == "__init__"))
        co_return front::xml(
            xmlrpc::write_response(*keyword == "__intro__" ? front::library_doc(d) : std::string()));
      const auto* kw = front::keyword_of(d, *keyword);
      if (!kw) {
        if (method == "get_keyword_documentation" || method == "get_keyword_tags" || method == "get_keyword_types")
          co_return front::xml(xmlrpc::write_response(method == "get_keyword_documentation" ? xmlrpc::Value("")
                                                        : method == "get_keyword_tags" ? xmlrpc::Value(xmlrpc::Array{})
                                                                                       : xmlrpc::Value(xmlrpc::Struct{})));
        co_return fault(fmt::format("Library '{}' has no keyword '{}'.", name, log::printable(*keyword, 200)));
      }
      xmlrpc::Value answer = method == "get_keyword_arguments" ? front::argument_spec(*kw)
                             : method == "get_keyword_types"   ? front::argument_types(*kw)
                             : method == "get_keyword_tags"    ? front::keyword_tags(*kw)
                                                               : xmlrpc::Value(front::string_member(*kw, "doc"));
      co_return front::xml(xmlrpc::write_response(answer));
    }
    if (method == "stop_remote_server")
      co_return fault("The gateway is not stopped by its clients: stop_remote_server is refused. Operators stop it "
                      "with SIGTERM (systemctl stop).");
    co_return fault(fmt::format("Unknown method '{}'. The classic remote API has get_library_information, "
                                "get_keyword_names, get_keyword_arguments, get_keyword_types, get_keyword_tags, "
                                "get_keyword_documentation and run_keyword.",
                                log::printable(method, 200)));
  } catch (const rjg::classic::ValueError& e) {
    log::info("classic: {} on library {} from {}: an argument cannot be passed on: {}", call.method, name,
              request.peer, e.what());
    co_return fault(fmt::format("Library '{}': an argument cannot be passed to the library: {}", name, e.what()));
  } catch (const front::Failure& e) {
    log::warn("classic: {} on library {} from {} failed: {}", call.method, name, request.peer, e.what());
    co_return fault(fmt::format("Library '{}': {}", name, e.what()));
  } catch (const std::exception& e) {
    // A bug (or bad_alloc): still an XML-RPC answer, never an HTTP error the client cannot read.
    log::error("bug: classic: {} on library {} from {}: {}", call.method, name, request.peer, e.what());
    co_return fault(fmt::format("Library '{}': internal error in the gateway: {}", name, e.what()));
  }
}

}  // namespace rjg::gateway
