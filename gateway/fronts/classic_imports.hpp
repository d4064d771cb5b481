// The imports the classic front holds for classic clients: `Imports` and `Ticket` count them under
// [classic] max_imports and charge each to the client address that made it; an `Instance` is one import,
// held by an in-process ClientSession that the front talks JSON-RPC to; a `Library` hands its instances to
// calls one at a time, in arrival order. Only the classic front (gateway/fronts/classic*.cpp) uses these.
#pragma once

#include "common/protocol/message.hpp"
#include "common/runtime/async_event.hpp"
#include "gateway/fronts/classic_answers.hpp"
#include "gateway/fronts/client_counts.hpp"
#include "gateway/session/connection.hpp"
#include "gateway/session/context.hpp"
#include "gateway/supervisor/durations.hpp"

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace rjg::gateway::session {
class ClientSession;
}  // namespace rjg::gateway::session

namespace rjg::gateway::fronts {

namespace asio = boost::asio;
namespace json = boost::json;

class Ticket;

// A call that cannot be answered with a keyword result: answered with an XML-RPC fault carrying the text.
struct Failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Codes after which an import is not usable any more: its worker died, overran keyword_timeout, or is gone.
bool import_lost(int code);

// The longest the front waits for an import that is ending to make room (a session's end is bounded by its
// workers' grace periods; ClientSession::end gives up after 120 s).
constexpr auto kRoomComing = std::chrono::seconds(130);

using supervisor::seconds_text;  // "90s", or "1500ms" when not whole seconds

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
    auto turn = std::make_shared<runtime::AsyncEvent>(executor_);
    waiting_.push_back(turn);
    struct Leave {
      std::shared_ptr<Imports> imports;  // held: the frame may outlive the front at exit
      std::shared_ptr<runtime::AsyncEvent> turn;
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
  std::deque<std::shared_ptr<runtime::AsyncEvent>> waiting_;
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

// One import of the library, held by an in-process client session: the front talks JSON-RPC to it, and
// it answers through this Connection. Used by one call at a time (Library hands it out).
class Instance final : public session::Connection, public std::enable_shared_from_this<Instance> {
 public:
  Instance(session::GatewayContext& context, asio::any_io_executor executor, std::string library, std::string name);

  const std::string& name() const override { return name_; }
  void send(std::string json_text) override;
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
  asio::awaitable<void> previous_ended(std::chrono::steady_clock::time_point deadline);

  // A call took it: the idle clock stops.
  void taken() {
    ++rests_;
    idle_timer_.cancel();
  }
  // A call gave it back: once it has been idle for `timeout` (0: never), `expired` runs.
  void rest(std::chrono::milliseconds timeout, std::function<void()> expired);

  // Imports the library unless this instance holds an import (charge() first). Throws Failure; a failed
  // import is forgotten at once (its session ends), so the next call starts afresh.
  asio::awaitable<void> ensure_imported();

  // robot/run_keyword on this instance's import; args and kwargs are JSON texts. The output kept is cut
  // at max_output bytes.
  asio::awaitable<KeywordAnswer> run(const std::string& keyword, const std::string& args, const std::string& kwargs,
                                     std::size_t max_output);

  // Forgets the import; its session ends in the background (a shared worker finalizes the instance, a
  // dedicated one stops), and the room it was counted in comes free then. The next call imports again, unless
  // stopped.
  void drop(std::string why);
  // The gateway is stopping: the import ends, and none is made again.
  void stop() {
    stopped_ = true;
    drop("the gateway is stopping");
  }

 private:
  struct Pending {
    explicit Pending(asio::any_io_executor executor) : done(std::move(executor)) {}
    std::optional<protocol::Message> answer;
    runtime::AsyncEvent done;
  };

  asio::awaitable<void> import();
  void notify(std::string_view method, std::string_view params);
  asio::awaitable<protocol::Message> request(std::string_view method, std::string params);
  protocol::JsonLimits request_limits() const;
  // Answers every call waiting with an internal error.
  void fail_pending(std::string_view why);

  session::GatewayContext& context_;
  asio::any_io_executor executor_;
  const std::string library_;
  const std::string name_;
  std::shared_ptr<session::ClientSession> session_;
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
  std::shared_ptr<runtime::AsyncEvent> previous_;  // set once the session of its last import has ended
};

// A library as classic clients see it: its imports, and the calls waiting for one.
class Library : public std::enable_shared_from_this<Library> {
 public:
  // unused: called when it holds no import, serves no call and has none waiting (the front forgets it).
  Library(session::GatewayContext& context, asio::any_io_executor executor, std::string name, std::shared_ptr<Imports> imports,
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
  asio::awaitable<std::shared_ptr<Instance>> take(std::size_t wanted, std::size_t max_waiting);
  // Gives an instance back: to the call that waited longest, or to the idle ones, where its idle clock runs
  // ([classic] idle_timeout) and a call waiting for room may retire it.
  void give_back(std::shared_ptr<Instance> instance);

  // Its idle import used least recently, if it has one.
  std::shared_ptr<Instance> least_recently_used() const;
  // Ends an idle instance's import (idle_timeout, or room for another library's); the library may then
  // hold nothing and leave the table.
  void retire(const std::shared_ptr<Instance>& instance, std::string why);

  // For /status: its instances (each one import held for classic clients), how many imported so far,
  // how many serve a call now, and the calls waiting for one.
  json::object status() const;

  // The library definition of any import made (the same library gives the same one).
  const json::value* definition() const;
  void remember(const json::value& definition) { remembered_ = definition; }

  // The gateway is stopping: calls waiting fail, and every import ends (in the background; the pools end
  // what is left). Nothing is forgotten from now on: the front is going away with its table.
  void stop();

 private:
  struct Waiter {
    explicit Waiter(asio::any_io_executor executor) : ready(std::move(executor)) {}
    runtime::AsyncEvent ready;
    std::shared_ptr<Instance> instance;
  };

  void check_unused();

  session::GatewayContext& context_;
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

// An instance taken from a library, given back however the call ends. Moves, never copies: a copy would
// give the instance back twice.
struct Held {
  Held(std::shared_ptr<Library> library, std::shared_ptr<Instance> instance)
      : library(std::move(library)), instance(std::move(instance)) {}
  Held(Held&& other) noexcept : library(std::move(other.library)), instance(std::move(other.instance)) {}
  Held& operator=(Held&&) = delete;
  ~Held() {
    if (instance) library->give_back(std::move(instance));
  }

  std::shared_ptr<Library> library;
  std::shared_ptr<Instance> instance;
};

}  // namespace rjg::gateway::fronts
