// Fault soak (issue #4): many concurrent sessions against one gateway for a bounded time while
// workers crash, clients disconnect mid-keyword and mid-frame, clients send broken frames and broken
// JSON, one client stops reading while its worker floods logs, and every frame is written in random
// pieces with tiny pauses. Afterwards: every request got exactly one answer (except those a client
// abandoned by closing), no worker process or file descriptor is left over, the gateway's memory
// stayed bounded and settled, and a normal session still works.
//
// RJG_SOAK_SECONDS overrides how long new episodes are started (default 40).
#include "tests/integration/gateway_test.hpp"

#include "common/protocol/framing.hpp"

#include <fmt/format.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>

namespace rjg::test {
namespace {

constexpr int kThreads = 24;          // client threads in all, the special ones included
constexpr auto kAnswerBound = 60s;     // bounds every wait for an answer or a close (never a timing assertion)
// 100 MB for the stalled reader (25 MB under a sanitizer: volume_under_test).
const std::int64_t kFloodLogs = volume_under_test(100000);
constexpr std::int64_t kFloodLogSize = 1000;
constexpr std::uint64_t kMiB = 1u << 20;
constexpr std::uint64_t kPeakRssBound = 512 * kMiB;

std::chrono::seconds soak_duration() {
  const char* text = std::getenv("RJG_SOAK_SECONDS");
  int seconds = text ? std::atoi(text) : 0;
  return std::chrono::seconds(seconds > 0 ? seconds : 40);
}

// Socket descriptors a process holds ("fd->socket:[inode]" items).
std::vector<std::string> sockets_of(pid_t pid) {
  std::vector<std::string> out;
  for (const auto& [fd, target] : fd_targets(pid))
    if (target.starts_with("socket:")) out.push_back(fmt::format("{}->{}", fd, target));
  return out;
}

std::string mib(std::uint64_t bytes) { return fmt::format("{:.1f} MiB", static_cast<double>(bytes) / kMiB); }

struct Failures {
  void add(std::string what) {
    std::lock_guard lock(mutex);
    ++count;
    if (list.size() < 60) list.push_back(std::move(what));
  }
  std::mutex mutex;
  std::vector<std::string> list;
  std::size_t count = 0;
};

struct Stats {
  std::atomic<std::uint64_t> sessions{0}, requests{0}, answers{0}, abandoned{0}, logs{0}, keywords_ok{0},
      keyword_failures{0}, crashes{0}, disconnects_mid_keyword{0}, disconnects_mid_frame{0}, framing_errors{0},
      json_errors{0}, handshake_timeouts{0}, pieces{0}, completed{0}, completed_during_stall{0},
      silent_ms_max{0};
  std::atomic<std::uint64_t> episodes[8]{};
};

struct PidSet {
  void add(pid_t pid) {
    std::lock_guard lock(mutex);
    pids.insert(pid);
  }
  std::mutex mutex;
  std::set<pid_t> pids;
};

struct Shared {
  std::uint16_t port = 0;
  Stats stats;
  Failures failures;
  PidSet pids;
  Clock::time_point deadline;  // no new episode starts after this
};

// Random JSON values for Echo: nested, non-ASCII, escapes, numbers that round-trip.
json::value random_value(std::mt19937& rng, int depth) {
  static const std::vector<std::string> strings = {
      "", "plain", "na\xc3\xafve", "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e", "\xf0\x9f\x98\x80 emoji",
      "quote \" backslash \\ slash /", "line\nbreak\ttab\r", std::string("nul\0byte", 8), "\x01\x1f control",
      "\xe2\x80\xa8 line separator", "Content-Length: 5\r\n\r\n{}",  "{\"__not_pickled__\": 1}"};
  std::uniform_int_distribution<int> kind(0, depth > 0 ? 7 : 5);
  switch (kind(rng)) {
    case 0: return std::uniform_int_distribution<std::int64_t>(-1'000'000'000'000, 1'000'000'000'000)(rng);
    case 1: return json::string(strings[std::uniform_int_distribution<std::size_t>(0, strings.size() - 1)(rng)]);
    case 2: return std::uniform_int_distribution<int>(0, 1)(rng) == 1;
    case 3: return nullptr;
    case 4: return std::uniform_int_distribution<int>(-64, 64)(rng) / 8.0;
    case 5: return json::string(std::string(std::uniform_int_distribution<std::size_t>(0, 3000)(rng), 'z'));
    case 6: {
      json::array a;
      for (int i = std::uniform_int_distribution<int>(0, 4)(rng); i > 0; --i) a.push_back(random_value(rng, depth - 1));
      return a;
    }
    default: {
      json::object o;
      for (int i = std::uniform_int_distribution<int>(0, 4)(rng); i > 0; --i)
        o[fmt::format("k{}", std::uniform_int_distribution<int>(0, 9)(rng))] = random_value(rng, depth - 1);
      return o;
    }
  }
}

// ------------------------------------------------------------------------------------------------
// One client connection: frames go out in random pieces with tiny pauses; every request id is tracked
// until its one answer, and a second answer, or one for an id never sent, is a failure.

class SoakConn {
 public:
  SoakConn(Shared& shared, std::mt19937& rng, std::string label)
      : shared_(shared), rng_(rng), label_(std::move(label)), client_(kAnswerBound) {
    client_.connect("127.0.0.1", shared_.port);
    ++shared_.stats.sessions;
  }

  ~SoakConn() {
    if (!client_closed_ && !closed_) abandon();
  }

  const std::string& label() const { return label_; }
  void fail(const std::string& what) { shared_.failures.add(fmt::format("{}: {}", label_, what)); }

  // Sends a request with a fresh id (strings and integers alternate); returns the id.
  json::value send(std::string_view method, json::value params) {
    json::value id = next_id_ % 2 ? json::value(fmt::format("{}-{}", label_, next_id_))
                                  : json::value(static_cast<std::int64_t>(next_id_));
    ++next_id_;
    outstanding_[json::serialize(id)] = std::string(method);
    ++shared_.stats.requests;
    write_in_pieces(protocol::encode_frame(protocol::make_request(id, method, std::move(params))));
    return id;
  }

  void notify(std::string_view method, json::value params) {
    write_in_pieces(protocol::encode_frame(protocol::make_notification(method, std::move(params))));
  }

  json::value run(const std::string& token, std::string_view keyword, json::array args) {
    return send(protocol::kRunKeyword, json::object{{"library_token", token},
                                                    {"name", keyword},
                                                    {"args", std::move(args)},
                                                    {"kwargs", json::object{}}});
  }

  // Writes bytes cut at random points, with a pause of up to 2 ms between pieces.
  void write_in_pieces(const std::string& bytes) {
    std::uniform_int_distribution<int> cuts(0, 4);
    std::vector<std::size_t> at{0, bytes.size()};
    for (int i = cuts(rng_); i > 0; --i) at.push_back(std::uniform_int_distribution<std::size_t>(0, bytes.size())(rng_));
    std::sort(at.begin(), at.end());
    for (std::size_t i = 0; i + 1 < at.size(); ++i) {
      if (at[i + 1] == at[i]) continue;
      if (!write_error_.empty()) return;
      try {
        client_.send_raw(std::string_view(bytes).substr(at[i], at[i + 1] - at[i]));
      } catch (const client::RpcError& e) {
        // The gateway closed the connection (after a framing error, say); reading shows what it said.
        write_error_ = e.what();
        return;
      }
      ++shared_.stats.pieces;
      if (i + 2 < at.size()) std::this_thread::sleep_for(std::chrono::microseconds(std::uniform_int_distribution<int>(0, 2000)(rng_)));
    }
  }

  // Reads until `id` is answered; nullopt (and a failure) if the connection closes or the bound passes.
  std::optional<protocol::Message> wait(const json::value& id, std::chrono::milliseconds bound = kAnswerBound) {
    const auto key = json::serialize(id);
    auto deadline = Clock::now() + bound;
    for (;;) {
      if (auto it = answers_.find(key); it != answers_.end()) {
        protocol::Message m = std::move(it->second);
        answers_.erase(it);
        return m;
      }
      if (closed_ || Clock::now() >= deadline || !read_one(deadline)) {
        auto it = outstanding_.find(key);
        fail(fmt::format("request {} ({}) got no answer{}{}", key, it != outstanding_.end() ? it->second : "?",
                         closed_ ? " before the gateway closed the connection" : " within the bound",
                         write_error_.empty() ? "" : " (writing failed: " + write_error_ + ")"));
        return std::nullopt;
      }
    }
  }

  // Reads until the gateway closes the connection (after robot/exit, or a fault it closes on).
  bool drain_until_closed(std::chrono::milliseconds bound = kAnswerBound) {
    auto deadline = Clock::now() + bound;
    while (!closed_) {
      if (Clock::now() >= deadline) return false;
      read_one(deadline);
    }
    return true;
  }

  // The client hangs up: what is still outstanding is abandoned, not owed.
  void abandon() {
    shared_.stats.abandoned += outstanding_.size();
    outstanding_.clear();
    client_closed_ = true;
    client_.close();
  }

  // Every request sent has been answered (call when the client did not hang up).
  void expect_all_answered(std::string_view when) {
    for (const auto& [key, method] : outstanding_) fail(fmt::format("request {} ({}) never answered ({})", key, method, when));
    shared_.stats.abandoned += outstanding_.size();  // counted once, so the totals still add up
    outstanding_.clear();
  }

  std::vector<protocol::Message>& null_id_errors() { return null_id_errors_; }
  std::uint64_t logs() const { return logs_; }
  bool closed() const { return closed_; }
  std::size_t outstanding() const { return outstanding_.size(); }

 private:
  // Reads one message (or the close); false on timeout.
  bool read_one(Clock::time_point deadline) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    std::optional<protocol::Message> m;
    try {
      m = client_.read_message(std::max(left, 1ms));
    } catch (const client::RpcError& e) {
      if (e.kind() != client::RpcError::Kind::closed) fail(fmt::format("connection error: {}", e.what()));
      closed_ = true;
      return true;
    }
    if (!m) return false;
    handle(std::move(*m));
    return true;
  }

  void handle(protocol::Message m) {
    switch (m.kind) {
      case protocol::Message::Kind::notification:
        if (m.method() == protocol::kLog) {
          ++logs_;
          ++shared_.stats.logs;
        }
        return;
      case protocol::Message::Kind::request:
        fail("the gateway sent a request: " + m.text());
        return;
      case protocol::Message::Kind::response:
      case protocol::Message::Kind::error_response: {
        if (m.id().is_null()) {
          null_id_errors_.push_back(std::move(m));
          return;
        }
        const auto key = json::serialize(m.id());
        if (answered_.count(key)) {
          fail(fmt::format("request {} answered twice; second answer: {}", key, m.text()));
          return;
        }
        auto it = outstanding_.find(key);
        if (it == outstanding_.end()) {
          fail(fmt::format("answer for id {} that was never sent: {}", key, m.text()));
          return;
        }
        outstanding_.erase(it);
        answered_.insert(key);
        ++shared_.stats.answers;
        answers_.emplace(key, std::move(m));
        return;
      }
    }
  }

  Shared& shared_;
  std::mt19937& rng_;
  std::string label_;
  client::RpcClient client_;
  std::uint64_t next_id_ = 1;
  std::map<std::string, std::string> outstanding_;  // id (serialized) -> method
  std::set<std::string> answered_;
  std::map<std::string, protocol::Message> answers_;  // answered, not yet taken by wait()
  std::vector<protocol::Message> null_id_errors_;
  std::uint64_t logs_ = 0;
  std::string write_error_;     // why writing failed, once it has
  bool closed_ = false;         // the gateway closed (EOF seen)
  bool client_closed_ = false;  // we hung up
};

// Message's tree views parse a fresh copy on each call: each helper keeps the copy it reads from.
std::string error_message_of(const protocol::Message& m) {
  const json::object err = m.error();
  auto it = err.find("message");
  return it != err.end() && it->value().is_string() ? std::string(it->value().get_string()) : "";
}
int error_code_of(const protocol::Message& m) {
  const json::object err = m.error();
  auto it = err.find("code");
  return it != err.end() && it->value().is_int64() ? static_cast<int>(it->value().get_int64()) : 0;
}
std::optional<json::value> keyword_result(const protocol::Message& m) {
  if (m.kind != protocol::Message::Kind::response) return std::nullopt;
  const json::value result = m.result();
  if (!result.is_object()) return std::nullopt;
  auto it = result.get_object().find("result");
  return it == result.get_object().end() ? json::value(nullptr) : it->value();
}
std::optional<json::object> keyword_error(const protocol::Message& m) {
  if (m.kind != protocol::Message::Kind::response) return std::nullopt;
  const json::value result = m.result();
  if (!result.is_object()) return std::nullopt;
  auto it = result.get_object().find("error");
  if (it == result.get_object().end() || !it->value().is_object()) return std::nullopt;
  return it->value().get_object();
}

// ------------------------------------------------------------------------------------------------
// Episodes: each is one connection doing one kind of thing, checking every answer it gets.

class Episodes {
 public:
  Episodes(Shared& shared, std::mt19937& rng, int thread) : shared_(shared), rng_(rng), thread_(thread) {}

  std::string label(std::string_view kind) { return fmt::format("t{}e{}-{}", thread_, ++episode_, kind); }

  // initialize + initialized + import; "" (and a failure) if any of it fails.
  std::string open(SoakConn& c, const std::string& library = "TestLibrary") {
    auto init = c.wait(c.send(protocol::kInitialize,
                              json::object{{"capabilities", json::object{}},
                                           {"client_info", json::object{{"name", "soak"}, {"version", "0"}}}}));
    if (!init) return "";
    if (init->kind != protocol::Message::Kind::response) {
      c.fail("initialize failed: " + init->text());
      return "";
    }
    c.notify(protocol::kInitialized, json::object{});
    return import(c, library);
  }

  std::string import(SoakConn& c, const std::string& library) {
    auto imported = c.wait(c.send(protocol::kImportLibrary,
                                  json::object{{"name", library}, {"args", json::array{}}, {"kw_args", json::object{}}}));
    if (!imported) return "";
    if (imported->kind != protocol::Message::Kind::response || !imported->result().is_object() ||
        !imported->result().get_object().contains("token")) {
      c.fail("import failed: " + imported->text());
      return "";
    }
    return std::string(imported->result().get_object().at("token").as_string());
  }

  // Runs Get Pid and remembers the worker's pid for the leftover check; 0 on failure.
  pid_t get_pid(SoakConn& c, const std::string& token) {
    auto m = c.wait(c.run(token, "Get Pid", {}));
    const auto v = m ? keyword_result(*m) : std::nullopt;
    if (!v || !v->is_int64()) {
      if (m) c.fail("Get Pid failed: " + m->text());
      return 0;
    }
    auto pid = static_cast<pid_t>(v->get_int64());
    shared_.pids.add(pid);
    return pid;
  }

  // shutdown, exit, and the gateway closes the connection; nothing may be left unanswered.
  void finish(SoakConn& c) {
    auto bye = c.wait(c.send(protocol::kShutdown, json::object{}));
    if (bye && bye->kind != protocol::Message::Kind::response) c.fail("shutdown failed: " + bye->text());
    c.notify(protocol::kExit, json::object{});
    if (!c.drain_until_closed()) c.fail("the gateway did not close the connection after robot/exit");
    c.expect_all_answered("after robot/exit");
    for (const auto& m : c.null_id_errors()) c.fail("unexpected error without id: " + m.text());
    ++shared_.stats.completed;
  }

  // A batch of pipelined keywords, each answer checked; adds the logs it asked for to expected_logs.
  void keyword_batch(SoakConn& c, const std::string& token, std::uint64_t& expected_logs) {
    struct Pending {
      json::value id;
      std::string keyword;
      json::value expect;
    };
    std::vector<Pending> batch;
    for (int i = std::uniform_int_distribution<int>(1, 6)(rng_); i > 0; --i) {
      switch (std::uniform_int_distribution<int>(0, 5)(rng_)) {
        case 0:
        case 1: {
          auto value = random_value(rng_, 3);
          batch.push_back({c.run(token, "Echo", json::array{value}), "Echo", value});
          break;
        }
        case 2: {
          std::int64_t n = std::uniform_int_distribution<std::int64_t>(0, 40)(rng_);
          std::int64_t size = std::uniform_int_distribution<std::int64_t>(0, 300)(rng_);
          expected_logs += static_cast<std::uint64_t>(n);
          batch.push_back({c.run(token, "Log Messages", json::array{n, size}), "Log Messages", n});
          break;
        }
        case 3: {
          std::string message = fmt::format("expected failure {}", std::uniform_int_distribution<int>(0, 999)(rng_));
          batch.push_back({c.run(token, "Fail", json::array{message}), "Fail", json::value(message)});
          break;
        }
        case 4: {
          double seconds = std::uniform_int_distribution<int>(0, 15)(rng_) / 100.0;
          batch.push_back({c.run(token, "Sleep", json::array{seconds}), "Sleep", seconds});
          break;
        }
        default:
          batch.push_back({c.run(token, "Get Pid", {}), "Get Pid", nullptr});
      }
    }
    for (auto& p : batch) {
      auto m = c.wait(p.id);
      if (!m) continue;
      const auto result = keyword_result(*m);
      if (!result) {
        c.fail(fmt::format("{} answered with an error: {}", p.keyword, m->text()));
        continue;
      }
      if (p.keyword == "Fail") {
        const auto err = keyword_error(*m);
        if (!err || !err->contains("message") || err->at("message") != p.expect)
          c.fail("Fail did not fail as asked: " + m->text());
        else
          ++shared_.stats.keyword_failures;
        continue;
      }
      if (keyword_error(*m)) {
        c.fail(fmt::format("{} failed: {}", p.keyword, m->text()));
        continue;
      }
      if (p.keyword != "Get Pid" && *result != p.expect)
        c.fail(fmt::format("{} returned {}, expected {}", p.keyword, json::serialize(*result),
                           json::serialize(p.expect)));
      ++shared_.stats.keywords_ok;
    }
  }

  // A normal session: keywords in pipelined batches on one or two libraries, then finalize/shutdown/exit.
  void normal() {
    SoakConn c(shared_, rng_, label("normal"));
    std::string token = open(c);
    if (token.empty()) return;
    get_pid(c, token);
    std::string second;
    if (std::uniform_int_distribution<int>(0, 2)(rng_) == 0) {
      second = import(c, "SecondLibrary");
      if (!second.empty()) get_pid(c, second);
    }
    std::uint64_t expected_logs = 0;
    for (int round = std::uniform_int_distribution<int>(1, 4)(rng_); round > 0; --round) {
      keyword_batch(c, second.empty() || round % 2 ? token : second, expected_logs);
    }
    if (std::uniform_int_distribution<int>(0, 1)(rng_) == 0) {
      auto fin = c.wait(c.send(protocol::kFinalizeLibrary, json::object{{"token", token}}));
      if (fin && fin->kind != protocol::Message::Kind::response) c.fail("finalize failed: " + fin->text());
    }
    if (std::uniform_int_distribution<int>(0, 4)(rng_) == 0) {
      // Hang up without saying goodbye (nothing is outstanding).
      if (c.logs() != expected_logs) c.fail(fmt::format("{} logs received, {} expected", c.logs(), expected_logs));
      c.abandon();
      return;
    }
    finish(c);
    if (c.logs() != expected_logs) c.fail(fmt::format("{} logs received, {} expected", c.logs(), expected_logs));
  }

  // The worker crashes mid-keyword with calls queued behind it: each gets exactly one answer, and the
  // session goes on with a fresh import.
  void crash() {
    static const char* kModes[] = {"abort", "sigkill", "exit", "segv"};
    SoakConn c(shared_, rng_, label("crash"));
    std::string token = open(c);
    if (token.empty()) return;
    get_pid(c, token);
    auto before = c.run(token, "Echo", json::array{"before"});
    auto crash = c.run(token, "Crash", json::array{kModes[std::uniform_int_distribution<int>(0, 3)(rng_)]});
    std::vector<json::value> behind;
    for (int i = std::uniform_int_distribution<int>(0, 3)(rng_); i > 0; --i) behind.push_back(c.run(token, "Echo", json::array{i}));
    if (auto m = c.wait(before); m && (!keyword_result(*m) || *keyword_result(*m) != json::value("before")))
      c.fail("Echo before the crash: " + m->text());
    // Each fails as a keyword (a result with an error), never as the session.
    auto failure_type = [](const protocol::Message& m) -> std::string {
      const auto err = keyword_error(m);
      return err && err->contains("type") && err->at("type").is_string() ? std::string(err->at("type").get_string())
                                                                          : std::string();
    };
    if (auto m = c.wait(crash); m && failure_type(*m) != protocol::keyword_error_type(protocol::kWorkerFailed))
      c.fail("Crash did not fail with WorkerFailed: " + m->text());
    // A call queued behind the crash fails with the worker; one the gateway reads after it learned of the
    // loss runs in a new worker (on_worker_loss = "reimport"). Which one a call meets is a race.
    for (std::size_t i = 0; i < behind.size(); ++i) {
      auto m = c.wait(behind[i]);
      if (!m) continue;
      const auto result = keyword_result(*m);
      const bool ran = result && !keyword_error(*m) && *result == json::value(static_cast<std::int64_t>(behind.size() - i));
      if (!ran && !protocol::keyword_error_ends_import(failure_type(*m)))
        c.fail("a call queued behind a crash neither failed with its worker nor ran again: " + m->text());
    }
    ++shared_.stats.crashes;
    std::string fresh = import(c, "TestLibrary");
    if (fresh.empty()) return;
    get_pid(c, fresh);
    auto echo = c.wait(c.run(fresh, "Echo", json::array{"after"}));
    if (echo && (!keyword_result(*echo) || *keyword_result(*echo) != json::value("after")))
      c.fail("Echo after the crash: " + echo->text());
    if (std::uniform_int_distribution<int>(0, 1)(rng_)) finish(c);
    else c.abandon();
  }

  // The client hangs up while a keyword runs (sleeping, hung, or flooding logs it does not read).
  void disconnect_mid_keyword() {
    SoakConn c(shared_, rng_, label("disconnect"));
    std::string token = open(c);
    if (token.empty()) return;
    get_pid(c, token);
    switch (std::uniform_int_distribution<int>(0, 2)(rng_)) {
      case 0: c.run(token, "Sleep", json::array{30}); break;
      case 1: c.run(token, "Hang", {}); break;
      default: c.run(token, "Log Messages", json::array{kFloodLogs, 200}); break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(std::uniform_int_distribution<int>(0, 300)(rng_)));
    c.abandon();
    ++shared_.stats.disconnects_mid_keyword;
  }

  // The client hangs up in the middle of a frame.
  void disconnect_mid_frame() {
    SoakConn c(shared_, rng_, label("midframe"));
    std::string token = open(c);
    if (token.empty()) return;
    get_pid(c, token);
    std::string bytes = protocol::encode_frame(protocol::make_request("cut", protocol::kRunKeyword,
                                                  json::object{{"library_token", token},
                                                               {"name", "Echo"},
                                                               {"args", json::array{random_value(rng_, 2)}},
                                                               {"kwargs", json::object{}}}));
    c.write_in_pieces(bytes.substr(0, std::uniform_int_distribution<std::size_t>(1, bytes.size() - 1)(rng_)));
    c.abandon();
    ++shared_.stats.disconnects_mid_frame;
  }

  // A broken frame while a keyword runs: one framing error, the keyword still answered, then the close.
  void framing_error() {
    static const char* kBad[] = {"Content-Length: -1\r\n\r\n", "Content-Length: 0x10\r\n\r\n",
                                 "Content-Length: 1\r\nContent-Length: 1\r\n\r\n{", "Content-Length: 99999999999\r\n\r\n",
                                 "Content-Length: 2\n\n{}"};
    SoakConn c(shared_, rng_, label("framing"));
    std::string token = open(c);
    if (token.empty()) return;
    get_pid(c, token);
    c.run(token, "Sleep", json::array{0.3});
    c.write_in_pieces(kBad[std::uniform_int_distribution<int>(0, 4)(rng_)]);
    if (!c.drain_until_closed()) {
      c.fail("the gateway did not close the connection after a framing error");
      c.abandon();
      return;
    }
    c.expect_all_answered("after a framing error");
    int framing = 0;
    for (const auto& m : c.null_id_errors()) {
      if (error_code_of(m) == protocol::kParseError && error_message_of(m).rfind("Framing error: ", 0) == 0) ++framing;
      else c.fail("unexpected error without id: " + m.text());
    }
    if (framing != 1) c.fail(fmt::format("{} framing errors for one broken frame", framing));
    ++shared_.stats.framing_errors;
  }

  // Broken JSON, too deep JSON and invalid UTF-8 each get -32700 and the connection goes on.
  void json_errors() {
    SoakConn c(shared_, rng_, label("json"));
    std::string token = open(c);
    if (token.empty()) return;
    const std::string bodies[] = {
        // (Without ids: a broken body's top-level id would come back with its error.)
        R"({"jsonrpc":"2.0","method":)",
        std::string(200, '[') + std::string(200, ']'),
        "{\"jsonrpc\":\"2.0\",\"method\":\"robot/shutdown\",\"params\":{\"bad\":\"\xc0\xaf\"}}",
    };
    for (const auto& body : bodies) c.write_in_pieces(fmt::format("Content-Length: {}\r\n\r\n{}", body.size(), body));
    auto echo = c.wait(c.run(token, "Echo", json::array{"goes on"}));
    if (echo && (!keyword_result(*echo) || *keyword_result(*echo) != json::value("goes on")))
      c.fail("Echo after broken JSON: " + echo->text());
    // Answers come in order: the three parse errors were sent before the Echo's answer.
    if (c.null_id_errors().size() != 3) c.fail(fmt::format("{} errors for 3 broken bodies", c.null_id_errors().size()));
    for (const auto& m : c.null_id_errors()) {
      if (error_code_of(m) != protocol::kParseError) c.fail("broken JSON answered with " + m.text());
    }
    c.null_id_errors().clear();
    shared_.stats.json_errors += 3;
    finish(c);
  }

  // A connection that never sends robot/initialize is closed at handshake_timeout with -32016.
  void silent() {
    const auto began = Clock::now();
    SoakConn c(shared_, rng_, label("silent"));
    if (!c.drain_until_closed()) {
      c.fail("a silent connection was not closed at handshake_timeout");
      return;
    }
    if (c.null_id_errors().size() != 1 || error_code_of(c.null_id_errors()[0]) != protocol::kSessionTimeout ||
        error_message_of(c.null_id_errors()[0]).find("handshake_timeout") == std::string::npos) {
      std::string got;
      for (const auto& m : c.null_id_errors()) got += m.text() + " ";
      c.fail("a silent connection was not told about handshake_timeout: " + got);
    }
    ++shared_.stats.handshake_timeouts;
    const auto ms = static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - began).count());
    shared_.stats.silent_ms_max = std::max(shared_.stats.silent_ms_max.load(), ms);
  }

  // Sends a huge log flood and does not read for `stall`; then reads it all (every log, in order,
  // then the one answer) or hangs up.
  void non_reader(std::chrono::seconds stall, bool read_afterwards) {
    SoakConn c(shared_, rng_, label(read_afterwards ? "nonreader" : "nonreader-hangup"));
    std::string token = open(c);
    if (token.empty()) return;
    get_pid(c, token);
    auto id = c.run(token, "Log Messages", json::array{kFloodLogs, kFloodLogSize});
    const auto completed_before = shared_.stats.completed.load();
    std::this_thread::sleep_for(stall);
    // Other sessions went on while this client did not read.
    const auto completed = shared_.stats.completed.load() - completed_before;
    if (read_afterwards) shared_.stats.completed_during_stall = completed;
    if (completed == 0) c.fail("no other session completed while this client did not read");
    if (!read_afterwards) {
      c.abandon();
      return;
    }
    auto m = c.wait(id, 300s);
    if (!m) return;
    const auto result = keyword_result(*m);
    if (!result || *result != json::value(kFloodLogs)) c.fail("the flood's answer: " + m->text());
    if (c.logs() != static_cast<std::uint64_t>(kFloodLogs))
      c.fail(fmt::format("{} of {} flood logs arrived", c.logs(), kFloodLogs));
    finish(c);
  }

  // One random episode.
  void any() {
    int pick = std::uniform_int_distribution<int>(0, 99)(rng_);
    int kind = pick < 40 ? 0 : pick < 55 ? 1 : pick < 70 ? 2 : pick < 77 ? 3 : pick < 88 ? 4 : 5;
    ++shared_.stats.episodes[kind];
    switch (kind) {
      case 0: normal(); break;
      case 1: crash(); break;
      case 2: disconnect_mid_keyword(); break;
      case 3: disconnect_mid_frame(); break;
      case 4: framing_error(); break;
      default: json_errors(); break;
    }
  }

 private:
  Shared& shared_;
  std::mt19937& rng_;
  int thread_;
  int episode_ = 0;
};

// ------------------------------------------------------------------------------------------------

class SoakTest : public GatewayTest {};

TEST_F(SoakTest, ManySessionsWithFaultsLeaveNothingBehind) {
  auto test_lib = test_library("TestLibrary");
  test_lib.shutdown_grace = "2s";
  auto second_lib = test_library("SecondLibrary");
  second_lib.shutdown_grace = "2s";
  GatewayOptions options;
  options.log_level = "info";
  options.extra_gateway_toml =
      "handshake_timeout = \"3s\"\nmax_sessions = 0\nmax_sessions_per_client = 0\nmax_workers = 0\n"
      // The stalled reader pauses for half the run: a long RJG_SOAK_SECONDS must not trip write_timeout.
      "write_timeout = \"1h\"\n";
  start({test_lib, second_lib}, options);
  const pid_t gw = gateway().pid();

  Shared shared;
  shared.port = gateway().port();

  // Warm up (first worker spawn, lazily created resources), then take the baselines.
  {
    auto [c, token] = session();
    RJG_ASSERT_KEYWORD_OK(c.run_keyword(token, "Echo", json::array{1}));
    remember_pid(worker_pid(c, token));
  }
  ASSERT_TRUE(eventually([&] { return children_of(gw).empty(); }, 60s)) << "warm-up worker not reaped";
  std::this_thread::sleep_for(500ms);
  const std::size_t baseline_fds = open_fd_count(gw).value_or(0);
  const std::uint64_t baseline_rss = rss_bytes(gw);
  ASSERT_GT(baseline_fds, 0u);

  // Sample the gateway while the soak runs.
  std::atomic<bool> sampling{true};
  std::uint64_t peak_rss = baseline_rss;
  std::size_t peak_fds = baseline_fds, peak_children = 0;
  // Workers (children past exec) seen holding a socket: the gateway's client connections or listener.
  std::set<pid_t> holding_sockets;
  std::string holding_example;
  std::thread sampler([&] {
    while (sampling) {
      peak_rss = std::max(peak_rss, rss_bytes(gw));
      peak_fds = std::max(peak_fds, open_fd_count(gw).value_or(0));
      auto children = children_of(gw);
      peak_children = std::max(peak_children, children.size());
      for (const auto& child : children) {
        if (child.comm.rfind("robot-test-wor", 0) != 0 || holding_sockets.count(child.pid)) continue;
        auto sockets = sockets_of(child.pid);
        if (sockets.empty()) continue;
        holding_sockets.insert(child.pid);
        if (holding_example.empty())
          for (const auto& sck : sockets) holding_example += fmt::format(" {}", sck);
      }
      std::this_thread::sleep_for(100ms);
    }
  });

  const auto started = Clock::now();
  shared.deadline = started + soak_duration();
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&shared, t] {
      std::mt19937 rng(0x5eed0000u + static_cast<unsigned>(t));
      Episodes episodes(shared, rng, t);
      try {
        if (t == 0) {
          episodes.non_reader(std::max(soak_duration() / 2, std::chrono::seconds(10)), true);
        } else if (t == 1) {
          episodes.non_reader(std::chrono::seconds(10), false);
        } else if (t == 2) {
          while (Clock::now() < shared.deadline) episodes.silent();
        } else {
          while (Clock::now() < shared.deadline) episodes.any();
        }
      } catch (const std::exception& e) {
        shared.failures.add(fmt::format("thread {}: {}", t, e.what()));
      }
    });
  }
  for (auto& th : threads) th.join();
  const auto soak_seconds = std::chrono::duration<double>(Clock::now() - started).count();

  // Nothing left over: every worker ended and reaped, every descriptor closed.
  std::vector<ProcInfo> left;
  bool no_children = eventually([&] { return (left = children_of(gw)).empty(); }, 60s, 200ms);
  std::string children_text;
  for (const auto& p : left) children_text += fmt::format(" {}({},{})", p.pid, p.comm, p.state);
  EXPECT_TRUE(no_children) << "worker processes left over:" << children_text;
  std::vector<pid_t> alive;
  {
    std::lock_guard lock(shared.pids.mutex);
    for (pid_t pid : shared.pids.pids) {
      remember_pid(pid);
      if (!pid_gone(pid)) alive.push_back(pid);
    }
  }
  EXPECT_TRUE(alive.empty()) << alive.size() << " worker pids seen by clients are still alive";
  std::size_t fds = 0;
  bool fds_back = eventually([&] { return (fds = open_fd_count(gw).value_or(0)) == baseline_fds; }, 30s, 200ms);
  EXPECT_TRUE(fds_back) << "gateway fds: " << fds << ", baseline " << baseline_fds << "\n" << describe_fds(gw);

  sampling = false;
  sampler.join();
  const std::uint64_t after_rss = rss_bytes(gw);

  // A normal session still works, and more normal sessions do not grow the gateway further.
  for (int i = 0; i < 20; ++i) {
    auto [c, token] = session(i % 2 ? "SecondLibrary" : "TestLibrary");
    auto echo = c.run_keyword(token, "Echo", json::array{"after the soak"});
    RJG_ASSERT_KEYWORD_OK(echo);
    EXPECT_EQ(keyword_value(echo), json::value("after the soak"));
    remember_pid(worker_pid(c, token));
  }
  const std::uint64_t final_rss = rss_bytes(gw);

  // Memory: bounded during the soak (a non-reading client's 100 MB of logs included), and settled
  // afterwards: the gateway holds no per-session memory once the sessions are gone.
  EXPECT_LT(peak_rss, kPeakRssBound) << "peak RSS " << mib(peak_rss);
  EXPECT_LT(after_rss, baseline_rss + 128 * kMiB)
      << "RSS after the soak " << mib(after_rss) << ", baseline " << mib(baseline_rss);
  EXPECT_LT(final_rss, after_rss + 16 * kMiB)
      << "RSS kept growing after the soak: " << mib(after_rss) << " -> " << mib(final_rss);

  // A worker runs library code: it must hold none of the gateway's sockets (another session's
  // connection, the listener), else the gateway's own closes do not reach clients while it lives.
  EXPECT_TRUE(holding_sockets.empty()) << holding_sockets.size()
                                       << " workers held sockets of the gateway; e.g. pid "
                                       << (holding_sockets.empty() ? 0 : *holding_sockets.begin()) << ":"
                                       << holding_example;

  // Every request was answered exactly once, or abandoned by a client that hung up.
  auto& s = shared.stats;
  EXPECT_EQ(s.requests.load(), s.answers.load() + s.abandoned.load());
  {
    std::lock_guard lock(shared.failures.mutex);
    std::string text;
    for (const auto& f : shared.failures.list) text += "  " + f + "\n";
    EXPECT_EQ(shared.failures.count, 0u) << shared.failures.count << " failures (first ones):\n" << text;
  }
  std::string log = gateway().log();
  EXPECT_EQ(log.find("bug:"), std::string::npos) << "the gateway logged a bug";
  EXPECT_TRUE(gateway().running()) << "the gateway died during the soak";

  const std::string figures = fmt::format(
      "soak: {:.0f} s, {} threads, {} sessions ({} normal, {} crash, {} disconnect mid-keyword, {} mid-frame, {} "
      "framing error, {} bad JSON episodes; {} silent, closed after at most {} ms), {} requests, {} answers, {} abandoned by clients, {} logs "
      "relayed, {} keywords ok, {} keyword failures, {} crashes, {} frame pieces, {} sessions completed while a client "
      "did not read; workers seen {}, peak children {}; "
      "gateway RSS baseline {}, peak {}, after {}, after 20 more sessions {}; fds baseline {}, peak {}, after {}; "
      "workers seen holding a gateway socket {}",
      soak_seconds, kThreads, s.sessions.load(), s.episodes[0].load(), s.episodes[1].load(), s.episodes[2].load(),
      s.episodes[3].load(), s.episodes[4].load(), s.episodes[5].load(), s.handshake_timeouts.load(),
      s.silent_ms_max.load(),
      s.requests.load(), s.answers.load(), s.abandoned.load(), s.logs.load(), s.keywords_ok.load(),
      s.keyword_failures.load(), s.crashes.load(), s.pieces.load(), s.completed_during_stall.load(),
      shared.pids.pids.size(), peak_children,
      mib(baseline_rss), mib(peak_rss), mib(after_rss), mib(final_rss), baseline_fds, peak_fds, fds,
      holding_sockets.size());
  std::cout << figures << std::endl;
  RecordProperty("figures", figures);

  // And it still stops cleanly.
  auto status = gateway().stop(60s);
  ASSERT_TRUE(status) << "the gateway did not exit on SIGTERM";
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << describe_status(*status);
}

}  // namespace
}  // namespace rjg::test
