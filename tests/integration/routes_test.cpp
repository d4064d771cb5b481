// Where a library is served from: an upstream server instead of a worker program (the test worker with
// --tcp, another gateway, or a scripted server in this file), and glob routes ("Lab*") that serve the
// names they match. Nothing is timed: every wait is a bound for a broken gateway.
#include "tests/integration/gateway_test.hpp"

#include <fmt/format.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>
#include <mutex>
#include <regex>
#include <thread>

namespace rjg::test {
namespace {

// ---------------------------------------------------------------------------------------------
// Helpers

// An [[library]] entry served by an upstream server; `more` is appended inside the table as it is.
LibrarySpec upstream_library(const std::string& name, const std::string& address, const std::string& more = "") {
  LibrarySpec spec;
  spec.name = name;
  spec.extra_toml = fmt::format("upstream = {}\n{}", toml_string(address), more);
  return spec;
}

std::string tcp_address(std::uint16_t port) { return fmt::format("tcp://127.0.0.1:{}", port); }

// A glob entry served by the test worker named after the imported name; RJG_TEST_ROUTE tells which entry
// served an import.
LibrarySpec glob_library(const std::string& glob, const std::string& route, const std::string& more = "") {
  LibrarySpec spec;
  spec.name = glob;
  spec.command = {test_worker_binary(), "--name", "{library}"};
  spec.env = {{"RJG_TEST_LIBRARY", "{library}"}, {"RJG_TEST_ROUTE", route}};
  spec.extra_toml = more;
  return spec;
}

// A test worker library whose RJG_TEST_ROUTE is `route`.
LibrarySpec tagged_library(const std::string& name, const std::string& route) {
  auto spec = test_library(name);
  spec.env["RJG_TEST_ROUTE"] = route;
  return spec;
}

// "Get Env NAME" through token: the string, or "<null>" / "<error ...>" for the failure message.
std::string get_env(client::RpcClient& client, const std::string& token, const std::string& name) {
  auto reply = client.run_keyword(token, "Get Env", json::array{json::string(name)});
  if (!reply.ok() || reply.keyword_error()) return "<error " + describe(reply) + ">";
  auto value = keyword_value(reply);
  return value.is_string() ? std::string(value.get_string()) : "<" + json::serialize(value) + ">";
}

// Runs "Log Messages" with `count` messages; returns the messages relayed before the answer, in the order
// they arrived. The reply must be the keyword's success with `count`.
std::vector<std::string> logged_messages(client::RpcClient& client, const std::string& token, int count, int size = 5) {
  std::vector<std::string> logs;
  auto reply = client.run_keyword(token, "Log Messages", json::array{count, size}, {}, [&](const protocol::Message& m) {
    if (m.method() != protocol::kLog) return;
    const json::value value = m.params();  // parsed on demand: a temporary
    if (value.is_object()) {
      const auto& params = value.get_object();
      if (const auto* text = params.if_contains("message"); text && text->is_string())
        logs.emplace_back(text->get_string());
      else
        logs.emplace_back("<no message: " + json::serialize(params) + ">");
    }
  });
  if (!reply.ok() || reply.keyword_error() || keyword_value(reply) != json::value(count))
    throw std::runtime_error("Log Messages failed: " + describe(reply));
  return logs;
}

std::vector<std::string> expected_logs(int count, int size = 5) {
  std::vector<std::string> out;
  for (int i = 0; i < count; ++i) out.push_back(fmt::format("{}:{}", i, std::string(static_cast<std::size_t>(size), 'x')));
  return out;
}

// The process is there and not a zombie (a DirectWorker is this process's child: gone means a zombie).
bool process_alive(pid_t pid) {
  auto info = proc_info(pid);
  return info && info->state != 'Z' && info->state != 'X';
}

// The token the SDK issued for the n-th import ("imported 'NAME' as TOKEN ...") in a worker's log.
std::vector<std::string> worker_tokens(const std::string& log, const std::string& library) {
  std::vector<std::string> out;
  const std::regex re(fmt::format(R"(imported '{}' as (\S+))", library));
  for (auto it = std::sregex_iterator(log.begin(), log.end(), re); it != std::sregex_iterator(); ++it)
    out.push_back((*it)[1].str());
  return out;
}

// ---------------------------------------------------------------------------------------------
// A scripted upstream: a loopback TCP server that records every message it receives, per connection,
// and either answers like a minimal library server (serve) or never answers anything (silent).

class FakeUpstream {
 public:
  enum class Mode { serve, silent };

  explicit FakeUpstream(Mode mode, std::string library = "Fake") : mode_(mode), library_(std::move(library)) {
    listener_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (listener_ < 0) throw std::runtime_error(fmt::format("socket: {}", std::strerror(errno)));
    const int one = 1;
    ::setsockopt(listener_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    if (::bind(listener_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(listener_, 16) != 0)
      throw std::runtime_error(fmt::format("bind/listen: {}", std::strerror(errno)));
    socklen_t len = sizeof addr;
    ::getsockname(listener_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    acceptor_ = std::thread([this] { accept_loop(); });
  }

  ~FakeUpstream() {
    stop_ = true;
    if (acceptor_.joinable()) acceptor_.join();
    std::vector<std::thread> threads;
    {
      std::lock_guard lock(mutex_);
      threads.swap(threads_);
    }
    for (auto& t : threads) t.join();
    ::close(listener_);
  }

  std::uint16_t port() const { return port_; }
  std::string uri() const { return tcp_address(port_); }

  struct Connection {
    std::vector<std::string> methods;  // every message's method, in order ("<response>" for others)
    bool closed = false;               // the gateway closed (EOF or reset)
  };
  std::vector<Connection> connections() const {
    std::lock_guard lock(mutex_);
    return connections_;
  }
  std::size_t count(std::string_view method) const {
    std::size_t n = 0;
    for (const auto& c : connections())
      for (const auto& m : c.methods) n += m == method;
    return n;
  }
  std::string describe() const {
    std::string out;
    auto all = connections();
    for (std::size_t i = 0; i < all.size(); ++i) {
      out += fmt::format("connection {}{}:", i, all[i].closed ? " (closed)" : "");
      for (const auto& m : all[i].methods) out += " " + m;
      out += "\n";
    }
    return out.empty() ? "no connection\n" : out;
  }

 private:
  void accept_loop() {
    while (!stop_) {
      pollfd p{listener_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      const int fd = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      std::lock_guard lock(mutex_);
      const std::size_t index = connections_.size();
      connections_.emplace_back();
      threads_.emplace_back([this, fd, index] { serve(fd, index); });
    }
  }

  void record(std::size_t index, std::string method) {
    std::lock_guard lock(mutex_);
    connections_[index].methods.push_back(std::move(method));
  }

  static void send_all(int fd, const std::string& body) {
    const std::string frame = fmt::format("Content-Length: {}\r\n\r\n{}", body.size(), body);
    for (std::string_view rest = frame; !rest.empty();) {
      const ssize_t n = ::send(fd, rest.data(), rest.size(), MSG_NOSIGNAL);
      if (n <= 0) {
        if (n < 0 && errno == EINTR) continue;
        return;
      }
      rest.remove_prefix(static_cast<std::size_t>(n));
    }
  }

  void answer(int fd, const json::object& message) {
    const auto* id = message.if_contains("id");
    const auto* method = message.if_contains("method");
    if (!id || !method || !method->is_string()) return;  // a notification or a response
    const std::string_view name = method->get_string();
    json::value result;
    if (name == protocol::kInitialize) {
      result = json::object{{"capabilities", json::object{{"support_exit", true}, {"libraries", json::array{json::string(library_)}}}},
                            {"server_info", json::object{{"name", "fake-upstream"}, {"version", "0"}}}};
    } else if (name == protocol::kImportLibrary) {
      result = json::object{{"token", fmt::format("fake-token-{}", ++tokens_)}};
    } else if (name == protocol::kRunKeyword) {
      result = json::object{{"result", "fake"}};
    } else {
      result = json::object{};  // finalize, shutdown: {}
    }
    send_all(fd, json::serialize(json::object{{"jsonrpc", "2.0"}, {"id", *id}, {"result", std::move(result)}}));
  }

  void serve(int fd, std::size_t index) {
    std::string buffer;
    char chunk[8192];
    bool open = true;
    while (!stop_ && open) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      const ssize_t n = ::recv(fd, chunk, sizeof chunk, 0);
      if (n <= 0) {
        if (n < 0 && errno == EINTR) continue;
        open = false;
        break;
      }
      buffer.append(chunk, static_cast<std::size_t>(n));
      for (;;) {
        const auto end = buffer.find("\r\n\r\n");
        if (end == std::string::npos) break;
        static const std::regex length_re(R"(Content-Length:\s*(\d+))", std::regex::icase);
        std::smatch m;
        const std::string headers = buffer.substr(0, end);
        if (!std::regex_search(headers, m, length_re)) {
          record(index, "<bad header>");
          open = false;
          break;
        }
        const std::size_t length = std::stoul(m[1].str());
        if (buffer.size() < end + 4 + length) break;
        const std::string body = buffer.substr(end + 4, length);
        buffer.erase(0, end + 4 + length);
        boost::system::error_code ec;
        auto value = json::parse(body, ec);
        if (ec || !value.is_object()) {
          record(index, "<bad json>");
          continue;
        }
        const auto& object = value.get_object();
        const auto* method = object.if_contains("method");
        record(index, method && method->is_string() ? std::string(method->get_string()) : std::string("<response>"));
        if (mode_ == Mode::serve) answer(fd, object);
      }
    }
    if (!open) {
      std::lock_guard lock(mutex_);
      connections_[index].closed = true;
    }
    ::close(fd);
  }

  Mode mode_;
  std::string library_;
  int listener_ = -1;
  std::uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> tokens_{0};
  mutable std::mutex mutex_;
  std::vector<Connection> connections_;
  std::vector<std::thread> threads_;
  std::thread acceptor_;
};

// ---------------------------------------------------------------------------------------------
// Upstream libraries

class UpstreamTest : public GatewayTest {
 protected:
  // A DirectWorker serving `name`, started (throws if it does not come up); kept until the test ends.
  DirectWorker& direct(const std::string& name) {
    workers_.push_back(std::make_unique<DirectWorker>(name));
    workers_.back()->start();
    return *workers_.back();
  }
  // Another gateway, started; kept until the test ends (after the test's own gateway has stopped).
  GatewayProcess& other_gateway(std::vector<LibrarySpec> libraries) {
    gateways_.push_back(std::make_unique<GatewayProcess>(std::move(libraries)));
    gateways_.back()->start();
    return *gateways_.back();
  }
  static std::string address(const DirectWorker& worker) { return tcp_address(worker.port()); }

  void TearDown() override {
    if (HasFailure()) {
      for (const auto& w : workers_) std::cerr << "---- DirectWorker stderr ----\n" << w->log() << "---- end ----\n";
      for (const auto& g : gateways_)
        std::cerr << "---- other gateway stderr (port " << g->port() << ") ----\n" << g->log_tail() << "---- end ----\n";
    }
    GatewayTest::TearDown();
    gateways_.clear();
    workers_.clear();
  }

  std::vector<std::unique_ptr<DirectWorker>> workers_;
  std::vector<std::unique_ptr<GatewayProcess>> gateways_;
};

// The import goes to the server at the address; keywords and their logs pass through; the client holds
// the gateway's token; finalize ends the instance there, and the server lives on.
TEST_F(UpstreamTest, DirectWorkerServesTheImportThroughTheGateway) {
  auto& worker = direct("Direct");
  start({upstream_library("Direct", address(worker))});

  auto [c, token] = session("Direct");
  EXPECT_EQ(worker_pid(c, token), worker.pid()) << "the keyword did not run in the upstream server";
  // No process was started for it: the gateway connected.
  EXPECT_TRUE(log_eventually(fmt::format("upstream Direct[{}]: connected", address(worker))));
  EXPECT_EQ(count_of(gateway().log(), "started:"), 0u) << "a worker process was started for an upstream library";

  // The client holds the gateway's token, not the server's.
  std::vector<std::string> tokens;
  ASSERT_TRUE(eventually([&] { return !(tokens = worker_tokens(worker.log(), "Direct")).empty(); }, 10s))
      << "the DirectWorker logged no import";
  ASSERT_EQ(tokens.size(), 1u);
  EXPECT_NE(token, tokens[0]);
  EXPECT_FALSE(contains(token, tokens[0])) << token << " carries the upstream's token " << tokens[0];

  // Logs arrive before the answer, in order.
  EXPECT_EQ(logged_messages(c, token, 25), expected_logs(25));
  auto echo = c.run_keyword(token, "Echo", json::array{json::object{{"nested", json::array{1, "two", nullptr}}}});
  RJG_ASSERT_KEYWORD_OK(echo);
  EXPECT_EQ(keyword_value(echo), (json::object{{"nested", json::array{1, "two", nullptr}}}));
  auto failed = c.run_keyword(token, "Fail", json::array{"upstream says no"});
  ASSERT_TRUE(failed.ok()) << describe(failed);
  ASSERT_NE(failed.keyword_error(), nullptr) << describe(failed);
  EXPECT_TRUE(contains(json::serialize(*failed.keyword_error()), "upstream says no")) << describe(failed);

  // Finalize reaches the upstream, under its own token.
  RJG_ASSERT_OK(c.finalize_library(token));
  EXPECT_TRUE(eventually([&] { return contains(worker.log(), "finalized " + tokens[0]); }, 10s))
      << "the upstream did not finalize " << tokens[0] << ":\n"
      << worker.log();
  auto after = c.run_keyword(token, "Echo", json::array{1});
  RJG_EXPECT_KEYWORD_FAILURE(after, protocol::kUnknownToken);

  // The server lives on (no robot/shutdown ended it) and serves the next import, on a new connection.
  EXPECT_TRUE(eventually([&] { return count_of(worker.log(), ": closed") >= 1; }, 10s))
      << "the gateway did not close its connection to the upstream after the finalize:\n"
      << worker.log();
  EXPECT_TRUE(process_alive(worker.pid())) << "the upstream server ended";
  auto token2 = c.import_library("Direct");
  RJG_ASSERT_OK(token2);
  const std::string t2(token2.result->as_object().at("token").as_string());
  EXPECT_NE(t2, token);
  EXPECT_EQ(worker_pid(c, t2), worker.pid());
  EXPECT_TRUE(eventually([&] { return worker_tokens(worker.log(), "Direct").size() == 2; }, 10s));
  c.close();
  // The session's end finalizes the open instance on the upstream, which lives on.
  EXPECT_TRUE(eventually(
      [&] {
        auto all = worker_tokens(worker.log(), "Direct");
        return all.size() == 2 && contains(worker.log(), "finalized " + all[1]);
      },
      10s))
      << "closing the session did not finalize its upstream instance:\n"
      << worker.log();
  EXPECT_TRUE(process_alive(worker.pid())) << "the upstream server ended with the session";
}

// robot/shutdown and robot/exit would end the server for all its clients: the gateway sends neither, and
// finalizes each instance before closing its connection (explicit finalize, session end, gateway stop).
TEST_F(UpstreamTest, TheUpstreamIsFinalizedAndNeverShutDown) {
  FakeUpstream fake(FakeUpstream::Mode::serve, "Fake");
  GatewayOptions options;
  options.drain_timeout = "1s";  // the third session is still open when the gateway stops
  start({upstream_library("Fake", fake.uri())}, options);

  {
    auto [c, token] = session("Fake");
    auto r = c.run_keyword(token, "Anything");
    RJG_ASSERT_KEYWORD_OK(r);
    EXPECT_EQ(keyword_value(r), json::value("fake"));
    RJG_ASSERT_OK(c.finalize_library(token));
  }
  {
    auto [c, token] = session("Fake");
    c.close();  // without finalize
  }
  ASSERT_TRUE(eventually(
      [&] {
        auto all = fake.connections();
        return all.size() == 2 && all[0].closed && all[1].closed;
      },
      20s))
      << fake.describe();
  auto [c3, token3] = session("Fake");
  ASSERT_TRUE(eventually([&] { return fake.count(protocol::kImportLibrary) == 3; }, 10s)) << fake.describe();
  auto status = gateway().stop();
  ASSERT_TRUE(status.has_value()) << "the gateway did not stop";
  ASSERT_TRUE(eventually(
      [&] {
        auto all = fake.connections();
        return all.size() == 3 && all[2].closed;
      },
      20s))
      << fake.describe();

  const std::vector<std::string> handshake{std::string(protocol::kInitialize), std::string(protocol::kInitialized),
                                           std::string(protocol::kImportLibrary)};
  auto all = fake.connections();
  for (std::size_t i = 0; i < all.size(); ++i) {
    const auto& methods = all[i].methods;
    ASSERT_GE(methods.size(), 3u) << fake.describe();
    EXPECT_EQ(std::vector<std::string>(methods.begin(), methods.begin() + 3), handshake) << fake.describe();
    EXPECT_EQ(std::count(methods.begin(), methods.end(), std::string(protocol::kShutdown)), 0) << fake.describe();
    EXPECT_EQ(std::count(methods.begin(), methods.end(), std::string(protocol::kExit)), 0) << fake.describe();
  }
  // Finalized as the last message: the client's own finalize; the session's end; the gateway's stop.
  for (std::size_t i = 0; i < all.size(); ++i)
    EXPECT_EQ(all[i].methods.back(), std::string(protocol::kFinalizeLibrary)) << "connection " << i << "\n"
                                                                             << fake.describe();
}

TEST_F(UpstreamTest, UpstreamNameIsTheNameImportedThere) {
  auto& worker = direct("Direct");
  start({upstream_library("Bench", address(worker), "upstream_name = \"Direct\"\n"), test_library("TestLibrary")});

  client::RpcClient c = connect();
  auto init = c.initialize();
  const auto& libraries = init.at("capabilities").at("libraries").as_array();
  EXPECT_EQ(libraries, (json::array{"Bench", "TestLibrary"}));
  auto reply = c.import_library("Bench");
  RJG_ASSERT_OK(reply);
  const std::string token(reply.result->as_object().at("token").as_string());
  EXPECT_EQ(worker_pid(c, token), worker.pid());
  EXPECT_EQ(logged_messages(c, token, 3), expected_logs(3));
  EXPECT_TRUE(eventually([&] { return worker_tokens(worker.log(), "Direct").size() == 1; }, 10s)) << worker.log();
  RJG_EXPECT_OK(c.finalize_library(token));

  // Without upstream_name the gateway's name is imported there, which this server refuses.
  auto& w2 = direct("Other");
  GatewayProcess& plain = other_gateway({upstream_library("Bench", address(w2))});
  client::RpcClient c2 = plain.connect();
  c2.initialize();
  auto refused = c2.import_library("Bench");
  ASSERT_FALSE(refused.ok()) << describe(refused);
  EXPECT_TRUE(contains(refused.error_message(), "Bench")) << refused.error_message();
  EXPECT_TRUE(contains(refused.error_message(), "Other")) << "the upstream's refusal is not relayed: "
                                                          << refused.error_message();
}

// Gateway A serves "Chained" from gateway B, which runs the worker: two hops, logs in order.
TEST_F(UpstreamTest, GatewayChainedToAGateway) {
  GatewayProcess& b = other_gateway({test_library("Chained")});
  start({upstream_library("Chained", b.uri())});

  auto [c, token] = session("Chained");
  EXPECT_EQ(get_env(c, token, "RJG_TEST_LIBRARY"), "Chained");
  const pid_t pid = remember_pid(worker_pid(c, token));
  auto info = proc_info(pid);
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ(info->ppid, b.pid()) << "the worker is not gateway B's child";
  EXPECT_EQ(logged_messages(c, token, 40), expected_logs(40));
  EXPECT_EQ(logged_messages(c, token, 2, 100), expected_logs(2, 100));
  RJG_ASSERT_OK(c.finalize_library(token));
  // A closed its connection to B: B's session ended, and its worker with it.
  EXPECT_TRUE(wait_pid_gone(pid, 20s)) << "gateway B's worker outlived A's finalize";
  // The chain serves the next import.
  auto again = c.import_library("Chained");
  RJG_ASSERT_OK(again);
  const std::string t2(again.result->as_object().at("token").as_string());
  EXPECT_EQ(logged_messages(c, t2, 5), expected_logs(5));
  remember_pid(worker_pid(c, t2));
}

// Nothing listens at the address: the import fails naming the library and the address; the session goes on.
TEST_F(UpstreamTest, RefusedConnectionFailsThatImportOnly) {
  const std::uint16_t port = free_port();
  ASSERT_FALSE(can_connect(port));
  start({upstream_library("Gone", tcp_address(port)), test_library("TestLibrary")});
  client::RpcClient c = connect();
  c.initialize();
  auto reply = c.import_library("Gone");
  RJG_ASSERT_ERROR(reply, protocol::kWorkerFailed);
  EXPECT_TRUE(contains(reply.error_message(), "'Gone'")) << reply.error_message();
  EXPECT_TRUE(contains(reply.error_message(), tcp_address(port))) << reply.error_message();

  auto ok = c.import_library("TestLibrary");
  RJG_ASSERT_OK(ok);
  const std::string token(ok.result->as_object().at("token").as_string());
  remember_pid(worker_pid(c, token));
  auto echo = c.run_keyword(token, "Echo", json::array{"still here"});
  RJG_ASSERT_KEYWORD_OK(echo);
  EXPECT_EQ(keyword_value(echo), json::value("still here"));
  // Each import tries anew (no memory of the failure, no retry in between).
  auto again = c.import_library("Gone");
  RJG_EXPECT_ERROR_CODE(again, protocol::kWorkerFailed);
  EXPECT_EQ(count_of(gateway().log(), "cannot reach the upstream"), 2u) << gateway().log_tail();
}

// A server that accepts and never answers robot/initialize: startup_timeout ends that import.
TEST_F(UpstreamTest, SilentUpstreamFailsTheImportAfterStartupTimeout) {
  FakeUpstream silent(FakeUpstream::Mode::silent);
  auto spec = upstream_library("Silent", silent.uri());
  spec.startup_timeout = "1s";
  start({spec, test_library("TestLibrary")});
  client::RpcClient c = connect();
  c.initialize();
  auto reply = c.import_library("Silent");
  RJG_ASSERT_ERROR(reply, protocol::kWorkerTimeout);
  const auto msg = reply.error_message();
  EXPECT_TRUE(contains(msg, "'Silent'")) << msg;
  EXPECT_TRUE(contains(msg, silent.uri())) << msg;
  EXPECT_TRUE(contains(msg, "robot/initialize")) << msg;
  EXPECT_TRUE(contains(msg, "startup_timeout")) << msg;
  // The gateway closed that connection, and sent nothing but the initialize.
  EXPECT_TRUE(eventually([&] {
    auto all = silent.connections();
    return all.size() == 1 && all[0].closed;
  }, 20s)) << silent.describe();
  EXPECT_EQ(silent.connections().at(0).methods, std::vector<std::string>{std::string(protocol::kInitialize)})
      << silent.describe();

  auto ok = c.import_library("TestLibrary");
  RJG_ASSERT_OK(ok);
  const std::string token(ok.result->as_object().at("token").as_string());
  remember_pid(worker_pid(c, token));
  RJG_EXPECT_KEYWORD_OK(c.run_keyword(token, "Echo", json::array{1}));
}

// A connect that never completes (a listener whose backlog is full drops the SYN): connect_timeout.
// Skipped where the kernel answers such a connect anyway (tcp_abort_on_overflow, a different stack).
TEST_F(UpstreamTest, ConnectThatNeverCompletesFailsAfterConnectTimeout) {
  const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(listener, 0);
  std::vector<int> fds{listener};
  struct Closer {
    std::vector<int>& fds;
    ~Closer() {
      for (int fd : fds) ::close(fd);
    }
  } closer{fds};
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(listener, 0), 0);
  socklen_t len = sizeof addr;
  ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len);
  const std::uint16_t port = ntohs(addr.sin_port);
  // Fill the accept queue (never accepted) until a connect stays pending.
  bool stalled = false;
  for (int i = 0; i < 8 && !stalled; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    ASSERT_GE(fd, 0);
    fds.push_back(fd);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) continue;
    ASSERT_EQ(errno, EINPROGRESS) << std::strerror(errno);
    pollfd p{fd, POLLOUT, 0};
    stalled = ::poll(&p, 1, 500) == 0;
  }
  if (!stalled) GTEST_SKIP() << "connects to a listener with a full backlog complete (or fail) at once here";

  auto spec = upstream_library("Stuck", tcp_address(port), "connect_timeout = \"1s\"\n");
  start({spec, test_library("TestLibrary")});
  client::RpcClient c = connect();
  c.initialize();
  auto reply = c.import_library("Stuck");
  ASSERT_FALSE(reply.ok()) << describe(reply);
  const auto msg = reply.error_message();
  EXPECT_TRUE(contains(msg, "'Stuck'")) << msg;
  EXPECT_TRUE(contains(msg, tcp_address(port))) << msg;
  EXPECT_TRUE(contains(msg, "connect_timeout")) << msg;

  auto ok = c.import_library("TestLibrary");
  RJG_ASSERT_OK(ok);
  const std::string token(ok.result->as_object().at("token").as_string());
  remember_pid(worker_pid(c, token));
  RJG_EXPECT_KEYWORD_OK(c.run_keyword(token, "Echo", json::array{1}));
}

// The server dies while a keyword runs there: that keyword fails naming the upstream, the import is over,
// and the session goes on.
TEST_F(UpstreamTest, UpstreamDyingMidKeywordEndsThatImport) {
  auto& worker = direct("Direct");
  const std::string where = address(worker);
  start({upstream_library("Direct", where), test_library("TestLibrary")});
  auto [c, token] = session("Direct");
  EXPECT_EQ(worker_pid(c, token), worker.pid());

  auto id = c.send_request(protocol::kRunKeyword, json::object{{"library_token", token},
                                                               {"name", "Sleep"},
                                                               {"args", json::array{120}},
                                                               {"kwargs", json::object{}}});
  // The gateway has sent the call on (the connection turned busy with it).
  ASSERT_TRUE(log_eventually("-> busy (keyword 'Sleep'")) << "the keyword never went to the upstream";
  ASSERT_EQ(::kill(worker.pid(), SIGKILL), 0);
  auto reply = c.wait_reply(id, {}, 30s);
  RJG_ASSERT_KEYWORD_FAILURE(reply, protocol::kWorkerFailed);
  EXPECT_TRUE(contains(reply.failure_message(), where)) << reply.failure_message();
  EXPECT_TRUE(contains(reply.failure_message(), "'Direct'")) << reply.failure_message();

  auto after = c.run_keyword(token, "Echo", json::array{1});
  ASSERT_TRUE(after.ok()) << "a keyword on the lost upstream's token was not answered as a keyword: " << describe(after);
  ASSERT_NE(after.keyword_error(), nullptr) << "a keyword on the lost upstream's token succeeded: " << describe(after);
  EXPECT_TRUE(protocol::keyword_error_ends_import(after.keyword_error_type())) << describe(after);
  EXPECT_FALSE(after.failure_message().empty()) << describe(after);

  // A new import of it tries again (and fails: nothing listens there now); other libraries work.
  auto again = c.import_library("Direct");
  RJG_ASSERT_ERROR(again, protocol::kWorkerFailed);
  EXPECT_TRUE(contains(again.error_message(), where)) << again.error_message();
  auto ok = c.import_library("TestLibrary");
  RJG_ASSERT_OK(ok);
  const std::string t2(ok.result->as_object().at("token").as_string());
  remember_pid(worker_pid(c, t2));
  auto echo = c.run_keyword(t2, "Echo", json::array{"on"});
  RJG_ASSERT_KEYWORD_OK(echo);
  EXPECT_EQ(keyword_value(echo), json::value("on"));
}

// keyword_timeout applies as to a worker: the keyword fails and the connection (this import) is ended;
// the server itself is not stopped, and serves the next import.
TEST_F(UpstreamTest, KeywordTimeoutEndsTheConnectionNotTheServer) {
  auto& worker = direct("Direct");
  start({upstream_library("Direct", address(worker), "keyword_timeout = \"1s\"\n")});
  auto [c, token] = session("Direct");
  auto reply = c.run_keyword(token, "Sleep", json::array{120});
  RJG_ASSERT_KEYWORD_FAILURE(reply, protocol::kWorkerTimeout);
  EXPECT_TRUE(contains(reply.failure_message(), "keyword_timeout")) << reply.failure_message();
  EXPECT_TRUE(contains(reply.failure_message(), address(worker))) << reply.failure_message();
  // The token's next keyword imports the library again on the same server (on_worker_loss = "reimport").
  auto after = c.run_keyword(token, "Echo", json::array{1});
  RJG_ASSERT_KEYWORD_OK(after);
  EXPECT_EQ(worker_pid(c, token), worker.pid());

  EXPECT_TRUE(process_alive(worker.pid())) << "the upstream server was stopped";
  auto again = c.import_library("Direct");
  RJG_ASSERT_OK(again);
  const std::string t2(again.result->as_object().at("token").as_string());
  EXPECT_EQ(worker_pid(c, t2), worker.pid());
  RJG_EXPECT_KEYWORD_OK(c.run_keyword(t2, "Echo", json::array{2}));
}

// Caps apply to upstream connections as to workers: max_workers = 1 admits one import at a time.
TEST_F(UpstreamTest, MaxWorkersCapsUpstreamConnections) {
  FakeUpstream fake(FakeUpstream::Mode::serve, "Fake");
  start({upstream_library("Fake", fake.uri(), "max_workers = 1\nqueue_timeout = \"0s\"\n")});
  auto [c1, t1] = session("Fake");
  client::RpcClient c2 = connect();
  c2.initialize();
  auto refused = c2.import_library("Fake");
  RJG_ASSERT_ERROR(refused, protocol::kAtCapacity);
  RJG_ASSERT_OK(c1.finalize_library(t1));
  // The connection is given back once the finalize is done there; bounded retries until then.
  std::optional<client::RpcReply> admitted;
  eventually(
      [&] {
        auto r = c2.import_library("Fake");
        if (r.ok()) admitted = std::move(r);
        else EXPECT_EQ(r.error_code(), protocol::kAtCapacity) << describe(r);
        return admitted.has_value();
      },
      20s, 100ms);
  ASSERT_TRUE(admitted.has_value()) << fake.describe();
  EXPECT_EQ(fake.count(protocol::kImportLibrary), 2u) << fake.describe();
}

// A glob entry with an upstream: the imported name is what the upstream is asked for.
TEST_F(UpstreamTest, GlobUpstreamImportsTheImportedNameThere) {
  auto& worker = direct("DirectA");
  start({upstream_library("Direct*", address(worker))});
  auto [c, token] = session("DirectA");
  EXPECT_EQ(worker_pid(c, token), worker.pid());
  auto refused = c.import_library("DirectB");
  ASSERT_FALSE(refused.ok()) << describe(refused);
  EXPECT_TRUE(contains(refused.error_message(), "DirectB")) << refused.error_message();
}

// A host name is resolved when each import connects; "{library}" in the address is the imported name.
TEST_F(UpstreamTest, HostNamesAndTheImportedNameInTheAddress) {
  auto& worker = direct("localhost");
  start({upstream_library("ByName", fmt::format("tcp://localhost:{}", worker.port()), "upstream_name = \"localhost\"\n"),
         upstream_library("local*", fmt::format("tcp://{{library}}:{}", worker.port()))});
  auto [c, token] = session("ByName");
  EXPECT_EQ(worker_pid(c, token), worker.pid());
  auto routed = c.import_library("localhost");
  RJG_ASSERT_OK(routed);
  const std::string t2(routed.result->as_object().at("token").as_string());
  EXPECT_EQ(worker_pid(c, t2), worker.pid());
  EXPECT_TRUE(log_eventually(fmt::format("upstream localhost[tcp://localhost:{}]", worker.port())))
      << "the address was not substituted";
}

// ---------------------------------------------------------------------------------------------
// Configuration of upstream libraries and globs

class RouteConfigTest : public ::testing::Test {
 protected:
  ProcessResult check(const std::string& libraries, const std::string& before = "") {
    auto file = dir_.path() / fmt::format("config-{}.toml", ++files_);
    write_file(file, "[gateway]\nlisten = [\"tcp://127.0.0.1:8271\"]\n" + before + libraries);
    last_file_ = read_file(file);
    return run_process({gateway_binary(), "--check-config", file.string()}, dir_.path(), 30s);
  }
  std::string worker() const { return toml_string(test_worker_binary()); }
  TempDir dir_{"rjg-routes-check"};
  int files_ = 0;
  std::string last_file_;
};

using UpstreamConfigTest = RouteConfigTest;
using GlobConfigTest = RouteConfigTest;

#define RJG_EXPECT_REFUSED(result, ...)                                                                   \
  do {                                                                                                    \
    const auto& r_ = (result);                                                                            \
    EXPECT_TRUE(r_.exited_with(1)) << r_.describe() << "\n" << r_.out << r_.err << "\n" << last_file_;     \
    for (const char* word : {__VA_ARGS__})                                                                \
      EXPECT_TRUE(contains(r_.out + r_.err, word)) << "'" << word << "' not named:\n" << r_.out << r_.err; \
  } while (0)
#define RJG_EXPECT_ACCEPTED(result)                                                                        \
  do {                                                                                                     \
    const auto& r_ = (result);                                                                             \
    EXPECT_TRUE(r_.exited_with(0)) << r_.describe() << "\n" << r_.out << r_.err << "\n" << last_file_;      \
  } while (0)

TEST_F(UpstreamConfigTest, UpstreamAlone) {
  RJG_EXPECT_ACCEPTED(check("[[library]]\nname = \"Bench\"\nupstream = \"tcp://127.0.0.1:8270\"\n"));
  RJG_EXPECT_ACCEPTED(check("[[library]]\nname = \"Bench\"\nupstream = \"tcp://bench-pc-7:8270\"\n"
                            "upstream_name = \"Other.Lib\"\nconnect_timeout = \"3s\"\nkeyword_timeout = \"5s\"\n"));
}

TEST_F(UpstreamConfigTest, CommandAndUpstreamBothSet) {
  RJG_EXPECT_REFUSED(check(fmt::format("[[library]]\nname = \"Bench\"\ncommand = [{}]\nupstream = "
                                       "\"tcp://127.0.0.1:8270\"\n",
                                       worker())),
                     "upstream", "command");
}

TEST_F(UpstreamConfigTest, NeitherCommandNorUpstream) {
  RJG_EXPECT_REFUSED(check("[[library]]\nname = \"Bench\"\n"), "command", "upstream");
}

TEST_F(UpstreamConfigTest, WorkerOnlySettingsInAnUpstreamTable) {
  for (std::string line : {"isolation = \"shared\"", "prewarm = 1", "env = { A = \"b\" }", "rlimits = { open_files = 64 }", "cwd = \"/tmp\""}) {
    SCOPED_TRACE(line);
    const std::string key = line.substr(0, line.find(' '));
    RJG_EXPECT_REFUSED(check("[[library]]\nname = \"Bench\"\nupstream = \"tcp://127.0.0.1:8270\"\n" + line + "\n"),
                       key.c_str(), "upstream");
  }
}

TEST_F(UpstreamConfigTest, WorkerOnlySettingsFromDefaultsAreIgnoredForAnUpstream) {
  RJG_EXPECT_ACCEPTED(check("[[library]]\nname = \"Bench\"\nupstream = \"tcp://127.0.0.1:8270\"\n",
                            "\n[defaults]\nprewarm = 1\nisolation = \"shared\"\n"));
}

TEST_F(UpstreamConfigTest, BadUpstreamValues) {
  RJG_EXPECT_REFUSED(check("[[library]]\nname = \"Bench\"\nupstream = \"ftp://127.0.0.1:8270\"\n"), "upstream");
  RJG_EXPECT_REFUSED(check("[[library]]\nname = \"Bench\"\nupstream = \"http://127.0.0.1\"\n"), "upstream");
  RJG_EXPECT_REFUSED(check("[[library]]\nname = \"Bench\"\nupstream = \"tcp://127.0.0.1\"\n"), "upstream");
  RJG_EXPECT_REFUSED(check(fmt::format("[[library]]\nname = \"Bench\"\ncommand = [{}]\nupstream_name = \"X\"\n",
                                       worker())),
                     "upstream_name");
  RJG_EXPECT_REFUSED(
      check("[[library]]\nname = \"Bench\"\nupstream = \"tcp://127.0.0.1:8270\"\nupstream_name = \"-c\"\n"),
      "upstream_name");
  RJG_EXPECT_REFUSED(
      check("[[library]]\nname = \"Bench\"\nupstream = \"tcp://127.0.0.1:8270\"\nconnect_timeout = \"0s\"\n"),
      "connect_timeout");
}

TEST_F(GlobConfigTest, NeedsALiteralPrefixOfTwoCharacters) {
  for (std::string glob : {"*", "L*", "?a*", "*Lab"}) {
    SCOPED_TRACE(glob);
    RJG_EXPECT_REFUSED(check(fmt::format("[[library]]\nname = {}\ncommand = [{}, \"--name\", \"{{library}}\"]\n",
                                         toml_string(glob), worker())),
                       glob.c_str());
  }
  RJG_EXPECT_ACCEPTED(
      check(fmt::format("[[library]]\nname = \"La*\"\ncommand = [{}, \"--name\", \"{{library}}\"]\n", worker())));
}

TEST_F(GlobConfigTest, Settings) {
  // Each name needs a worker of its own when the command names it.
  RJG_EXPECT_REFUSED(check(fmt::format("[[library]]\nname = \"Lab*\"\ncommand = [{}, \"--name\", "
                                       "\"{{library}}\"]\nisolation = \"shared\"\n",
                                       worker())),
                     "isolation");
  RJG_EXPECT_REFUSED(check(fmt::format("[[library]]\nname = \"Lab*\"\ncommand = [{}, \"--name\", "
                                       "\"{{library}}\"]\nprewarm = 1\n",
                                       worker())),
                     "prewarm");
  // deny: glob entries only, library names only.
  RJG_EXPECT_REFUSED(check(fmt::format("[[library]]\nname = \"Lab\"\ncommand = [{}]\ndeny = [\"LabX\"]\n", worker())),
                     "deny");
  RJG_EXPECT_REFUSED(check(fmt::format("[[library]]\nname = \"Lab*\"\ncommand = [{}, \"--name\", "
                                       "\"{{library}}\"]\ndeny = [\"../x\"]\n",
                                       worker())),
                     "deny");
  RJG_EXPECT_ACCEPTED(check(fmt::format("[[library]]\nname = \"Lab*\"\ncommand = [{}, \"--name\", "
                                        "\"{{library}}\"]\ndeny = []\n",
                                        worker())));
  // dotted: glob entries only.
  RJG_EXPECT_REFUSED(check(fmt::format("[[library]]\nname = \"Lab\"\ncommand = [{}]\ndotted = true\n", worker())),
                     "dotted");
  // [classic] default_library is held to the same rule as a client's name.
  const auto glob = fmt::format("[[library]]\nname = \"Lab*\"\ncommand = [{}, \"--name\", \"{{library}}\"]\n", worker());
  const std::string classic = "[classic]\nlisten = [\"tcp://127.0.0.1:0\"]\n";
  RJG_EXPECT_REFUSED(check(classic + "default_library = \"LabPower.os\"\n" + glob), "default_library");
  RJG_EXPECT_REFUSED(check(classic + "default_library = \"LabPower.Tools\"\n" + glob), "default_library");
  RJG_EXPECT_ACCEPTED(check(classic + "default_library = \"LabPower\"\n" + glob));
}

// ---------------------------------------------------------------------------------------------
// Glob routes

using GlobRouteTest = GatewayTest;

TEST_F(GlobRouteTest, ImportedNameReachesCommandAndEnvironment) {
  start({glob_library("Lab*", "glob"), test_library("TestLibrary")});
  client::RpcClient c = connect();
  auto init = c.initialize();
  EXPECT_EQ(init.at("capabilities").at("libraries").as_array(), (json::array{"Lab*", "TestLibrary"}));
  auto reply = c.import_library("LabPower");
  RJG_ASSERT_OK(reply);
  const std::string token(reply.result->as_object().at("token").as_string());
  EXPECT_EQ(get_env(c, token, "RJG_TEST_LIBRARY"), "LabPower");
  EXPECT_EQ(get_env(c, token, "RJG_TEST_ROUTE"), "glob");
  const pid_t pid = remember_pid(worker_pid(c, token));
  // The worker's own command line names it (--name LabPower), and logs name the imported library.
  EXPECT_TRUE(contains(proc_cmdline(pid), "--name LabPower")) << proc_cmdline(pid);
  EXPECT_EQ(started_pids("LabPower"), std::vector<pid_t>{pid}) << gateway().log_tail();
  EXPECT_EQ(logged_messages(c, token, 3), expected_logs(3));

  // Another name: another worker.
  auto other = c.import_library("LabScope_Channel_2");
  RJG_ASSERT_OK(other);
  const std::string t2(other.result->as_object().at("token").as_string());
  EXPECT_EQ(get_env(c, t2, "RJG_TEST_LIBRARY"), "LabScope_Channel_2");
  EXPECT_NE(remember_pid(worker_pid(c, t2)), pid);
  RJG_EXPECT_OK(c.finalize_library(token));
  EXPECT_TRUE(wait_pid_gone(pid, 20s));
}

TEST_F(GlobRouteTest, ExactNamesWinOverGlobsWhateverTheOrder) {
  start({glob_library("Lab*", "glob"), tagged_library("LabExact", "exact")});
  client::RpcClient c = connect();
  c.initialize();
  auto exact = c.import_library("LabExact");
  RJG_ASSERT_OK(exact);
  const std::string t1(exact.result->as_object().at("token").as_string());
  EXPECT_EQ(get_env(c, t1, "RJG_TEST_ROUTE"), "exact");
  remember_pid(worker_pid(c, t1));
  auto globbed = c.import_library("LabExactly");
  RJG_ASSERT_OK(globbed);
  const std::string t2(globbed.result->as_object().at("token").as_string());
  EXPECT_EQ(get_env(c, t2, "RJG_TEST_ROUTE"), "glob");
  EXPECT_EQ(get_env(c, t2, "RJG_TEST_LIBRARY"), "LabExactly");
  remember_pid(worker_pid(c, t2));
}

TEST_F(GlobRouteTest, FirstMatchingGlobInFileOrderServes) {
  start({glob_library("Lab*", "first"), glob_library("La*", "second")});
  client::RpcClient c = connect();
  auto init = c.initialize();
  EXPECT_EQ(init.at("capabilities").at("libraries").as_array(), (json::array{"Lab*", "La*"}));
  auto lab = c.import_library("LabX");
  RJG_ASSERT_OK(lab);
  const std::string t1(lab.result->as_object().at("token").as_string());
  EXPECT_EQ(get_env(c, t1, "RJG_TEST_ROUTE"), "first");
  remember_pid(worker_pid(c, t1));
  auto la = c.import_library("LaX");
  RJG_ASSERT_OK(la);
  const std::string t2(la.result->as_object().at("token").as_string());
  EXPECT_EQ(get_env(c, t2, "RJG_TEST_ROUTE"), "second");
  EXPECT_EQ(get_env(c, t2, "RJG_TEST_LIBRARY"), "LaX");
  remember_pid(worker_pid(c, t2));
}

// Only what can be a library name passes a glob; the refusal comes before anything is started.
TEST_F(GlobRouteTest, HostileNamesAreRefusedBeforeAnythingStarts) {
  start({glob_library("Lab*", "glob")});
  client::RpcClient c = connect();
  c.initialize();
  // Matching the glob, but not library names.
  for (std::string name : {"Lab-c", "Lab/../x", "Lab/b", "Lab b", "Lab;id", "Lab$(id)", "Lab{library}", "Lab.",
                           "Lab..x", "Lab.1x", "Lab\\x", "Lab\nx", "Lab\x01"}) {
    SCOPED_TRACE(json::serialize(json::value(name)));
    auto reply = c.import_library(name);
    RJG_EXPECT_ERROR_CODE(reply, protocol::kUnknownLibrary);
    EXPECT_TRUE(contains(reply.error_message(), "\"Lab*\"")) << reply.error_message();
    EXPECT_TRUE(contains(reply.error_message(), "not a library name")) << reply.error_message();
  }
  // Not matching it at all ("Lab" itself: '*' is one character or more).
  for (std::string name : {"-c", "../x", "a/b", "Lab", "lab", "XLab1", "*", "Lab*"}) {
    SCOPED_TRACE(name);
    auto reply = c.import_library(name);
    RJG_EXPECT_ERROR_CODE(reply, protocol::kUnknownLibrary);
  }
  EXPECT_EQ(count_of(gateway().log(), "started:"), 0u) << "a worker was started for a refused name";
  EXPECT_EQ(count_of(gateway().log(), "importing library"), 0u) << gateway().log_tail();
  // A valid name after all that: exactly one worker, its own.
  auto ok = c.import_library("Lab1");
  RJG_ASSERT_OK(ok);
  const std::string token(ok.result->as_object().at("token").as_string());
  const pid_t pid = remember_pid(worker_pid(c, token));
  EXPECT_EQ(count_of(gateway().log(), "started:"), 1u) << gateway().log_tail();
  EXPECT_EQ(started_pids("Lab1"), std::vector<pid_t>{pid});
}

TEST_F(GlobRouteTest, DenyListRefusesTheNameAndItsSubmodules) {
  start({glob_library("Lab*", "glob", "deny = [\"LabSecret\"]\n")});
  client::RpcClient c = connect();
  c.initialize();
  for (std::string name : {"LabSecret", "LabSecret.sub", "LabSecret.sub.deeper"}) {
    SCOPED_TRACE(name);
    auto reply = c.import_library(name);
    RJG_EXPECT_ERROR_CODE(reply, protocol::kUnknownLibrary);
    EXPECT_TRUE(contains(reply.error_message(), "deny")) << reply.error_message();
  }
  EXPECT_EQ(count_of(gateway().log(), "started:"), 0u) << "a worker was started for a denied name";
  // A name that only starts like a denied one is not denied.
  auto ok = c.import_library("LabSecretary");
  RJG_ASSERT_OK(ok);
  const std::string token(ok.result->as_object().at("token").as_string());
  EXPECT_EQ(get_env(c, token, "RJG_TEST_LIBRARY"), "LabSecretary");
  remember_pid(worker_pid(c, token));
}

// The red team's finding: with the reference server as worker, "LabPower.os" is the module os that LabPower
// imports (Robot's importer takes the attribute), a library of 188 keywords that run commands. A glob entry
// serves plain names only; with dotted = true every dotted part meets the deny list. Nothing starts for a
// refused name.
TEST_F(GlobRouteTest, DottedNamesAreRefusedUnlessTheEntryAllowsThem) {
  start({glob_library("Lab*", "plain"), glob_library("Kit*", "dotted", "dotted = true\n"),
         glob_library("Org.Dev*", "literal")});
  client::RpcClient c = connect();
  c.initialize();
  // paramiko and requests are in no deny list: only the rule on dots keeps them out.
  for (std::string name : {"LabPower.paramiko", "LabPower.requests", "LabPower.Tools", "LabPower.a.b"}) {
    SCOPED_TRACE(name);
    auto reply = c.import_library(name);
    RJG_EXPECT_ERROR_CODE(reply, protocol::kUnknownLibrary);
    EXPECT_TRUE(contains(reply.error_message(), "dotted = true")) << reply.error_message();
    EXPECT_TRUE(contains(reply.error_message(), "\"Lab*\"")) << reply.error_message();
  }
  // The deny list speaks first where it names a part.
  for (std::string name : {"LabPower.os", "LabPower.subprocess"}) {
    SCOPED_TRACE(name);
    auto reply = c.import_library(name);
    RJG_EXPECT_ERROR_CODE(reply, protocol::kUnknownLibrary);
    EXPECT_TRUE(contains(reply.error_message(), "deny list")) << reply.error_message();
  }
  // dotted = true: each dotted part is checked against the (default) deny list, wherever it stands.
  for (std::string name : {"KitPower.os", "KitPower.subprocess", "KitPower.os.path", "KitPower.Tools.shutil"}) {
    SCOPED_TRACE(name);
    auto reply = c.import_library(name);
    RJG_EXPECT_ERROR_CODE(reply, protocol::kUnknownLibrary);
    EXPECT_TRUE(contains(reply.error_message(), "deny list")) << reply.error_message();
  }
  // Dots the glob itself holds are the operator's; one more is the client's.
  auto extra = c.import_library("Org.DevBoard.os2");
  RJG_EXPECT_ERROR_CODE(extra, protocol::kUnknownLibrary);
  EXPECT_TRUE(contains(extra.error_message(), "dotted = true")) << extra.error_message();
  EXPECT_EQ(count_of(gateway().log(), "started:"), 0u) << "a worker was started for a refused name";

  for (auto [name, route] : {std::pair{"LabPower", "plain"}, {"KitPower.Tools", "dotted"}, {"Org.DevBoard", "literal"}}) {
    SCOPED_TRACE(name);
    auto ok = c.import_library(name);
    RJG_ASSERT_OK(ok);
    const std::string token(ok.result->as_object().at("token").as_string());
    EXPECT_EQ(get_env(c, token, "RJG_TEST_LIBRARY"), name);
    EXPECT_EQ(get_env(c, token, "RJG_TEST_ROUTE"), route);
    remember_pid(worker_pid(c, token));
  }
  EXPECT_EQ(count_of(gateway().log(), "started:"), 3u) << gateway().log_tail();
}

// Without `deny`: Robot's standard libraries and Python's standard modules are refused.
TEST_F(GlobRouteTest, DefaultDenyListCoversStandardLibraries) {
  start({glob_library("Pro*", "pro"), glob_library("os*", "os"), glob_library("Bu*", "bu"),
         glob_library("Any*", "any", "deny = []\n")});
  client::RpcClient c = connect();
  c.initialize();
  for (std::string name : {"Process", "os.path", "BuiltIn"}) {
    SCOPED_TRACE(name);
    auto reply = c.import_library(name);
    RJG_EXPECT_ERROR_CODE(reply, protocol::kUnknownLibrary);
    EXPECT_TRUE(contains(reply.error_message(), "deny")) << reply.error_message();
  }
  EXPECT_EQ(count_of(gateway().log(), "started:"), 0u) << "a worker was started for a denied name";
  auto ok = c.import_library("ProTool");
  RJG_ASSERT_OK(ok);
  const std::string token(ok.result->as_object().at("token").as_string());
  EXPECT_EQ(get_env(c, token, "RJG_TEST_LIBRARY"), "ProTool");
  remember_pid(worker_pid(c, token));
  // deny = [] refuses nothing.
  auto any = c.import_library("AnyThing");
  RJG_ASSERT_OK(any);
  remember_pid(worker_pid(c, std::string(any.result->as_object().at("token").as_string())));
}

// '?' is exactly one character, '*' one or more.
TEST_F(GlobRouteTest, QuestionMarkIsOneCharacter) {
  start({glob_library("Ch?", "one"), glob_library("Chan*", "many")});
  client::RpcClient c = connect();
  c.initialize();
  auto one = c.import_library("Ch1");
  RJG_ASSERT_OK(one);
  const std::string t1(one.result->as_object().at("token").as_string());
  EXPECT_EQ(get_env(c, t1, "RJG_TEST_ROUTE"), "one");
  remember_pid(worker_pid(c, t1));
  for (std::string name : {"Ch", "Ch12", "Chan"}) {
    SCOPED_TRACE(name);
    RJG_EXPECT_ERROR_CODE(c.import_library(name), protocol::kUnknownLibrary);
  }
  auto many = c.import_library("Channel_3");
  RJG_ASSERT_OK(many);
  const std::string t2(many.result->as_object().at("token").as_string());
  EXPECT_EQ(get_env(c, t2, "RJG_TEST_ROUTE"), "many");
  remember_pid(worker_pid(c, t2));
}

// An empty import name (the client's default library) never selects a glob.
TEST_F(GlobRouteTest, EmptyNameGoesToTheFirstExactEntry) {
  start({glob_library("Lab*", "glob"), tagged_library("Plain", "exact")});
  client::RpcClient c = connect();
  c.initialize();
  auto reply = c.import_library("");
  RJG_ASSERT_OK(reply);
  const std::string token(reply.result->as_object().at("token").as_string());
  EXPECT_EQ(get_env(c, token, "RJG_TEST_LIBRARY"), "Plain");
  remember_pid(worker_pid(c, token));
}

TEST_F(GlobRouteTest, EmptyNameWithOnlyGlobsIsAnError) {
  start({glob_library("Lab*", "glob")});
  client::RpcClient c = connect();
  c.initialize();
  auto reply = c.import_library("");
  RJG_EXPECT_ERROR_CODE(reply, protocol::kUnknownLibrary);
  EXPECT_EQ(count_of(gateway().log(), "started:"), 0u);
}

// A glob whose command does not name the library: the worker is asked for the imported name.
TEST_F(GlobRouteTest, CommandWithoutTheNameGetsItInTheImport) {
  auto spec = test_library("Fixed");
  spec.name = "Fix*";
  start({spec});
  client::RpcClient c = connect();
  c.initialize();
  auto ok = c.import_library("Fixed");
  RJG_ASSERT_OK(ok);
  remember_pid(worker_pid(c, std::string(ok.result->as_object().at("token").as_string())));
  auto other = c.import_library("Fixture");
  ASSERT_FALSE(other.ok()) << "the worker of 'Fixed' accepted an import of 'Fixture': " << describe(other);
  EXPECT_TRUE(contains(other.error_message(), "Fixture")) << other.error_message();
}

}  // namespace
}  // namespace rjg::test
