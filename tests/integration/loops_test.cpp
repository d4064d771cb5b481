// Event loops ([gateway] threads), end to end. Sessions are spread over the loops round robin; a
// session, its dedicated workers and its relay stay on its loop, and what is shared (pools, shared
// workers, the reaper, the drain) keeps its rules across loops. The pool tests run the pool rules with
// threads = 1 and 4 (tests/integration/CMakeLists.txt); every other suite runs with the default (one
// loop per core). Here: the loops exist, a relay never crosses threads (counted in system calls),
// sessions on every loop share one worker with each log reaching its own session, in order, and a
// prewarmed worker taken by an import is replaced on the loop it was taken from.
#include "tests/integration/gateway_test.hpp"

#include <fmt/format.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>

namespace rjg::test {
namespace {

class LoopsTest : public GatewayTest {
 protected:
  void start_with_threads(int threads, std::vector<LibrarySpec> libraries = default_libraries()) {
    GatewayOptions options;
    options.log_level = "info";  // debug lines are writes to stderr, per keyword
    options.extra_gateway_toml = fmt::format("threads = {}\n", threads);
    start(std::move(libraries), options);
  }

  // The names of the gateway's threads (/proc/PID/task/*/comm) that start with `prefix`.
  std::vector<std::string> threads_named(std::string_view prefix) {
    std::vector<std::string> names;
    for (const auto& task : std::filesystem::directory_iterator(fmt::format("/proc/{}/task", gateway().pid()))) {
      auto name = read_file(task.path() / "comm");
      while (!name.empty() && name.back() == '\n') name.pop_back();
      if (name.starts_with(prefix)) names.push_back(name);
    }
    std::sort(names.begin(), names.end());
    return names;
  }

  // The gateway's descriptor that points to `target`; -1 when it has none.
  int gateway_fd_of(const std::string& target) {
    for (const auto& [fd, what] : fd_targets(gateway().pid()))
      if (what == target) return fd;
    return -1;
  }

  // The epoll instance (the gateway's descriptor of it) that watches the gateway's descriptor `fd`, or -1.
  // Each event loop is an io_context with an epoll instance of its own, and a descriptor is registered
  // with the reactor of the loop it belongs to: the instance names the loop.
  int loop_watching(int fd) {
    for (const auto& [epoll_fd, what] : fd_targets(gateway().pid())) {
      if (what != "anon_inode:[eventpoll]") continue;
      std::istringstream info(read_file(fmt::format("/proc/{}/fdinfo/{}", gateway().pid(), epoll_fd)));
      std::string line;
      int watched = -1;
      while (std::getline(info, line))
        if (std::sscanf(line.c_str(), "tfd: %d", &watched) == 1 && watched == fd) return epoll_fd;
    }
    return -1;
  }

  // The loop of a worker: the one watching the gateway's end of the worker's stdout.
  int loop_of_worker(pid_t worker) {
    std::error_code ec;
    const auto stdout_pipe = std::filesystem::read_symlink(fmt::format("/proc/{}/fd/1", worker), ec);
    if (ec) return -1;
    return loop_watching(gateway_fd_of(stdout_pipe.string()));
  }

  // The inode of the gateway's TCP socket on its port whose peer is at `peer_port` (0: the listening
  // socket); 0 when there is none.
  unsigned long gateway_socket_inode(unsigned peer_port) {
    for (const auto& socket : tcp_sockets())
      if (socket.local_port == gateway().port() && socket.remote_port == peer_port) return std::stoul(socket.inode);
    return 0;
  }

  // The loop that holds the gateway's socket with that inode.
  int loop_of_socket(unsigned long inode) {
    return inode ? loop_watching(gateway_fd_of(fmt::format("socket:[{}]", inode))) : -1;
  }

  // A connected client and the loop of its session: the one watching the gateway's end of its connection.
  // The connection's own socket is the one this process did not have before; its port finds the
  // gateway's end in /proc/net/tcp.
  std::pair<client::RpcClient, int> connect_on_a_loop() {
    auto sockets = [] {
      std::set<int> fds;
      for (const auto& [fd, what] : fd_targets(::getpid()))
        if (what.starts_with("socket:")) fds.insert(fd);
      return fds;
    };
    const auto before = sockets();
    client::RpcClient client = connect();
    client.initialize();  // answered: the gateway has accepted it (and placed it) before the next connects
    int ours = -1;
    for (int fd : sockets())
      if (!before.contains(fd)) ours = fd;
    sockaddr_in local{};
    socklen_t length = sizeof local;
    if (ours < 0 || ::getsockname(ours, reinterpret_cast<sockaddr*>(&local), &length) != 0)
      return {std::move(client), -1};
    return {std::move(client), loop_of_socket(gateway_socket_inode(ntohs(local.sin_port)))};
  }
};

TEST_F(LoopsTest, EveryLoopBeyondTheFirstIsAThreadOfItsOwn) {
  // The port accepts once it is bound, a moment before the gateway logs how it serves: wait for the line.
  const auto logged = [&](std::string_view line) {
    return eventually([&] { return contains(gateway().log(), line); }, 20s);
  };
  start_with_threads(1);
  EXPECT_TRUE(logged("(2 libraries, 1 event loop)")) << gateway().log();
  EXPECT_TRUE(threads_named("rjg-loop-").empty());

  start_with_threads(3);
  // The loop threads start once the listeners are bound, so the port may accept a moment before.
  const std::vector<std::string> expected{"rjg-loop-1", "rjg-loop-2"};
  EXPECT_TRUE(eventually([&] { return threads_named("rjg-loop-") == expected; }, 20s))
      << ::testing::PrintToString(threads_named("rjg-loop-"));
  EXPECT_TRUE(logged("(2 libraries, 3 event loops)")) << gateway().log();
  // And every loop serves: consecutive sessions land on different loops.
  for (int i = 0; i < 6; ++i) {
    auto [client, token] = session();
    auto reply = client.run_keyword(token, "Echo", json::array{i});
    RJG_ASSERT_KEYWORD_OK(reply);
    EXPECT_EQ(keyword_value(reply), json::value(i));
  }
}

// Two sessions on two loops, each with its dedicated worker, keywords alternating between them. The
// relay stays at one read and one write per message per hop, as on a single loop. A worker living on
// another loop than its session (tried by starting every worker on loop 0) costs 9.5 calls per keyword
// instead: the threads wake each other (futex, epoll_ctl on the loop's interrupter, epoll_wait).
TEST_F(LoopsTest, ARelayOnAnyLoopStaysOnItsOwnThread) {
  start_with_threads(2);
  auto [a, token_a] = session();
  auto [b, token_b] = session();
  const json::array args{"payload"};
  for (int i = 0; i < 200; ++i) {
    RJG_ASSERT_KEYWORD_OK(a.run_keyword(token_a, "Echo", args));
    RJG_ASSERT_KEYWORD_OK(b.run_keyword(token_b, "Echo", args));
  }

  constexpr int kKeywords = 2000;
  int failures = 0;
  const auto counts = count_syscalls(gateway().pid(), [&] {
    for (int i = 0; i < kKeywords / 2; ++i) {
      for (auto* c : {&a, &b}) {
        auto reply = c->run_keyword(c == &a ? token_a : token_b, "Echo", args);
        if (!reply.ok() || reply.keyword_error()) ++failures;
      }
    }
  });
  ASSERT_EQ(failures, 0);
  std::string table;
  for (const auto& [name, entry] : counts.by_name)
    table += fmt::format("  {:<16} {:>8} calls ({:.2f} per keyword)\n", name, entry.calls,
                         static_cast<double>(entry.calls) / kKeywords);
  const double per_keyword = static_cast<double>(relay_calls(counts)) / kKeywords;
  EXPECT_LE(per_keyword, 7.0) << table;
  // Every write of the gateway: the relay's (writev to the worker, sendmsg to the client) and the
  // eventfd writes that wake another loop, which a relay crossing threads would add.
  std::uint64_t writes = 0;
  for (const char* call : {"write", "writev", "sendmsg", "sendto"})
    if (counts.by_name.contains(call)) writes += counts.by_name.at(call).calls;
  EXPECT_LE(writes, 2u * kKeywords + kKeywords / 100) << "more than one write per message per hop:\n" << table;
  // Threads that wait for each other would futex at every keyword (the sanitizers' allocators do a few).
  const auto futex = counts.by_name.contains("futex") ? counts.by_name.at("futex").calls : 0;
  EXPECT_LE(futex, static_cast<std::uint64_t>(kKeywords / 100)) << "threads waited for each other:\n" << table;
  std::cout << fmt::format("[ syscalls ] {:.2f} per relayed keyword, two sessions on two loops\n{}", per_keyword,
                           table);
}

// Eight sessions, spread over four loops, import one shared library whose single worker lives on the
// pools' loop. They all run a logging keyword at once: the worker runs them one at a time, and each
// session gets exactly its own logs, in order, before its answer.
TEST_F(LoopsTest, SessionsOnEveryLoopShareOneWorkerAndEachGetsItsOwnLogsInOrder) {
  LibrarySpec shared = test_library("Shared");
  shared.extra_toml = "isolation = \"shared\"\nmax_workers = 1\n";
  start_with_threads(4, {shared});
  constexpr int kSessions = 8;
  constexpr int kLogs = 50;
  std::vector<client::RpcClient> clients;
  std::vector<std::string> tokens;
  for (int i = 0; i < kSessions; ++i) {
    auto [client, token] = session("Shared");
    clients.push_back(std::move(client));
    tokens.push_back(std::move(token));
  }
  std::vector<json::value> ids;
  for (int i = 0; i < kSessions; ++i)
    ids.push_back(clients[i].send_request(
        protocol::kRunKeyword,
        json::object{{"library_token", tokens[i]}, {"name", "Log Messages"}, {"args", json::array{kLogs, i + 1}},
                     {"kwargs", json::object{}}}));
  for (int i = 0; i < kSessions; ++i) {
    std::vector<std::string> logs;
    auto reply = clients[i].wait_reply(ids[i], [&logs](const protocol::Message& m) {
      if (m.method() == protocol::kLog && m.params().is_object())
        logs.emplace_back(m.params().get_object().at("message").as_string());
    });
    RJG_ASSERT_KEYWORD_OK(reply);
    ASSERT_EQ(logs.size(), static_cast<std::size_t>(kLogs)) << "session " << i << " got another's logs, or lost some";
    for (int n = 0; n < kLogs; ++n)
      EXPECT_EQ(logs[n], fmt::format("{}:{}", n, std::string(static_cast<std::size_t>(i + 1), 'x')))
          << "session " << i << ", log " << n;
  }
  EXPECT_EQ(started_pids("Shared").size(), 1u) << "max_workers = 1 was exceeded";
}

// Two loops, a library with prewarm = 2: one prewarmed worker on each. Sessions land on the loops in
// turn; two of four connections are on the loop that does not accept (loop 1). The first of them
// imports and takes the prewarmed worker of its loop; the replacement must start on that loop too, so
// that the second's import also gets a worker of its own loop: one on the other loop would cost each of
// its keywords a hand-over between the two threads. (A round robin shared by every start put the
// replacement on loop 0, the next in turn.) Which loop a descriptor belongs to is read from the
// gateway's epoll instances, one per loop.
TEST_F(LoopsTest, APrewarmedWorkerTakenByAnImportIsReplacedOnTheLoopItWasTakenFrom) {
  LibrarySpec warm = test_library("Warm");
  warm.extra_toml = "prewarm = 2\n";
  start_with_threads(2, {warm});
  ASSERT_EQ(pids_eventually(R"(library Warm: worker pid (\d+) ready \(prewarm)", 2).size(), 2u)
      << "the two prewarmed workers never became ready";
  const int accepting_loop = loop_of_socket(gateway_socket_inode(0));
  ASSERT_GE(accepting_loop, 0) << "the loop of the listening socket was not found";

  std::vector<std::pair<client::RpcClient, int>> connections;
  std::vector<std::size_t> on_loop_1;
  for (std::size_t i = 0; i < 4; ++i) {
    connections.push_back(connect_on_a_loop());
    ASSERT_GE(connections.back().second, 0) << "the loop of session " << i + 1 << " was not found";
    if (connections.back().second != accepting_loop) on_loop_1.push_back(i);
  }
  ASSERT_EQ(on_loop_1.size(), 2u) << "sessions are not spread over the two loops in turn";
  auto& [first, first_loop] = connections[on_loop_1[0]];
  auto& [second, second_loop] = connections[on_loop_1[1]];

  const std::string first_token = token_of(first.import_library("Warm"));
  const pid_t first_worker = remember_pid(worker_pid(first, first_token));
  EXPECT_EQ(loop_of_worker(first_worker), first_loop) << "the first import got the prewarmed worker of loop 0";

  // The refill: a third prewarmed worker, ready before the second imports.
  ASSERT_EQ(pids_eventually(R"(library Warm: worker pid (\d+) ready \(prewarm)", 3).size(), 3u)
      << "the pool did not replace the prewarmed worker it handed out";
  const std::string second_token = token_of(second.import_library("Warm"));
  const pid_t second_worker = remember_pid(worker_pid(second, second_token));
  EXPECT_TRUE(contains(gateway().log(), fmt::format("library Warm: import served by prewarmed worker pid {}", second_worker)))
      << gateway().log();
  EXPECT_EQ(loop_of_worker(second_worker), second_loop)
      << "the second import on loop 1 got a prewarmed worker of loop 0: the replacement went there";
  RJG_ASSERT_KEYWORD_OK(second.run_keyword(second_token, "Echo", json::array{"here"}));
}

}  // namespace
}  // namespace rjg::test
