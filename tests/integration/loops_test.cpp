// Event loops ([gateway] threads), end to end. Sessions are spread over the loops round robin; a
// session, its dedicated workers and its relay stay on its loop, and what is shared (pools, shared
// workers, the reaper, the drain) keeps its rules across loops. The pool tests run the pool rules with
// threads = 1 and 4 (tests/integration/CMakeLists.txt); every other suite runs with the default (one
// loop per core). Here: the loops exist, a relay never crosses threads (counted in system calls), and
// sessions on every loop share one worker with each log reaching its own session, in order.
#include "tests/integration/gateway_test.hpp"

#include <fmt/format.h>

#include <filesystem>

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
};

TEST_F(LoopsTest, EveryLoopBeyondTheFirstIsAThreadOfItsOwn) {
  start_with_threads(1);
  EXPECT_TRUE(threads_named("rjg-loop-").empty());
  EXPECT_TRUE(contains(gateway().log(), "(2 libraries, 1 event loop)")) << gateway().log();

  start_with_threads(3);
  // The loop threads start once the listeners are bound, so the port may accept a moment before.
  const std::vector<std::string> expected{"rjg-loop-1", "rjg-loop-2"};
  EXPECT_TRUE(eventually([&] { return threads_named("rjg-loop-") == expected; }, 20s))
      << ::testing::PrintToString(threads_named("rjg-loop-"));
  EXPECT_TRUE(contains(gateway().log(), "(2 libraries, 3 event loops)")) << gateway().log();
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
  const double per_keyword = static_cast<double>(counts.total) / kKeywords;
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

}  // namespace
}  // namespace rjg::test
