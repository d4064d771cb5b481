// SIGHUP reloads the configuration without dropping anything: sessions keep running keywords through
// every reload; a library added is importable at once, one removed refuses new imports with an error
// that says so, one whose settings changed serves new imports with the new settings while imports made
// before keep their worker; a broken file changes nothing; listeners open and close.
#include "tests/integration/gateway_test.hpp"

#include <fmt/format.h>

#include <atomic>
#include <thread>

namespace rjg::test {
namespace {

using ReloadTest = GatewayTest;

LibrarySpec shared_library(std::string generation) {
  auto spec = test_library("Shared");
  spec.extra_toml = "isolation = \"shared\"\n";
  spec.env["GENERATION"] = std::move(generation);  // the setting that changes between the two files
  return spec;
}

// A: TestLibrary, Shared (generation A) and Extra. B: TestLibrary and Shared (generation B).
std::vector<LibrarySpec> config_a() { return {test_library("TestLibrary"), shared_library("A"), test_library("Extra")}; }
std::vector<LibrarySpec> config_b() { return {test_library("TestLibrary"), shared_library("B")}; }

TEST_F(ReloadTest, FiftyReloadsUnderLoadCutNoSessionAndLoseNoKeyword) {
  GatewayOptions options;
  options.log_level = "info";
  start(config_a(), options);
  const auto write_config = [&](const std::vector<LibrarySpec>& libraries) {
    write_file(gateway().config_path(), make_config(gateway().port(), libraries, options));
  };

  // 20 sessions, each with an import of TestLibrary and of Shared made before any reload, run keywords
  // without pause on both until told to stop. Every call must be answered, and answered OK.
  constexpr int kSessions = 20;
  std::atomic<bool> stop{false};
  std::atomic<int> ready{0};
  std::atomic<long> calls{0};
  std::vector<std::string> failures(kSessions);
  std::vector<std::thread> threads;
  for (int i = 0; i < kSessions; ++i) {
    threads.emplace_back([&, i] {
      try {
        client::RpcClient client = connect();
        const auto own = open_library(client, "TestLibrary");
        const auto shared = open_library(client, "Shared");
        const auto generation = client.run_keyword(shared, "Get Env", json::array{"GENERATION"});
        if (!generation.ok() || keyword_value(generation) != json::value("A"))
          throw std::runtime_error("the first Shared import is not generation A: " + describe(generation));
        ++ready;
        for (long n = 0; !stop; ++n) {
          for (const auto& token : {own, shared}) {
            auto reply = client.run_keyword(token, "Echo", json::array{n});
            if (!reply.ok() || reply.keyword_error() || keyword_value(reply) != json::value(n))
              throw std::runtime_error(fmt::format("call {} answered {}", n, describe(reply)));
            ++calls;
          }
        }
        // The import made before every reload still answers with its own settings.
        auto last = client.run_keyword(shared, "Get Env", json::array{"GENERATION"});
        if (!last.ok() || keyword_value(last) != json::value("A"))
          throw std::runtime_error("the Shared import lost its worker's settings: " + describe(last));
        client.exit();
      } catch (const std::exception& e) {
        failures[i] = e.what();
        ++ready;
      }
    });
  }
  ASSERT_TRUE(eventually([&] { return ready == kSessions; }, 60s)) << gateway().log_tail();
  // The shared worker of generation A that all 20 imports share.
  pid_t first_shared = 0;
  {
    client::RpcClient c = connect();
    first_shared = remember_pid(worker_pid(c, open_library(c, "Shared")));
    c.exit();
  }

  // 50 reloads alternating between B and A, every 10th a broken file. After each, a new session sees
  // what the file says at once.
  std::size_t applied = 0, failed = 0;
  for (int r = 1; r <= 50; ++r) {
    const bool broken = r % 10 == 0;
    const bool a = r % 2 == 0;
    if (broken) write_file(gateway().config_path(), "[gateway]\nlisten = [\n");
    else write_config(a ? config_a() : config_b());
    gateway().signal(SIGHUP);
    if (broken) {
      ++failed;
      ASSERT_TRUE(log_eventually("reload: reload failed:", failed)) << gateway().log_tail();
    } else {
      ++applied;
      ASSERT_TRUE(log_eventually("reload: applied", applied)) << gateway().log_tail();
    }
    // What is in force now: after a broken file, what the previous good file said (r - 1: odd is B).
    const bool extra_served = broken ? (r - 1) % 2 == 0 : a;
    client::RpcClient probe = connect();
    probe.initialize();
    auto import = probe.import_library("Extra");
    if (extra_served) {
      ASSERT_TRUE(import.ok()) << "reload " << r << ": Extra not importable: " << describe(import);
    } else {
      ASSERT_EQ(import.error_code(), protocol::kUnknownLibrary) << "reload " << r << ": " << describe(import);
      EXPECT_TRUE(contains(import.error_message(), "Library 'Extra' was removed from the gateway's configuration by a reload"))
          << describe(import);
    }
    auto shared = probe.import_library("Shared");
    ASSERT_TRUE(shared.ok()) << describe(shared);
    auto generation = probe.run_keyword(token_of(shared), "Get Env", json::array{"GENERATION"});
    EXPECT_EQ(keyword_value(generation), json::value(extra_served ? "A" : "B"))
        << "reload " << r << ": a new Shared import did not get the settings in force";
    probe.exit();
  }
  const long before_stop = calls;
  stop = true;
  for (auto& t : threads) t.join();
  for (int i = 0; i < kSessions; ++i) EXPECT_EQ(failures[i], "") << "session " << i;
  EXPECT_GT(before_stop, 0);
  const auto log = gateway().log();
  EXPECT_EQ(count_of(log, "reload: applied"), 45u);
  EXPECT_EQ(count_of(log, "reload: reload failed: 1 problem"), 5u) << log;
  // The worker of the first generation drained at the first change and stopped after its last import.
  EXPECT_TRUE(contains(log, fmt::format("worker Shared[{}]: draining: its settings changed by a reload", first_shared)))
      << log;
  EXPECT_TRUE(wait_pid_gone(first_shared, 30s)) << "the drained Shared worker outlived its last import";
  std::cout << fmt::format("{} keywords answered during 50 reloads", calls.load()) << std::endl;
}

// Listeners follow the file: an address added opens, one removed closes while its sessions go on;
// threads cannot change without a restart and the log says so.
TEST_F(ReloadTest, ListenersOpenAndCloseAndThreadsWaitForARestart) {
  GatewayOptions options;
  options.log_level = "info";
  start(default_libraries(), options);
  auto [client, token] = session();
  const auto second = free_port();

  auto with_listen = [&](std::vector<std::string> listen, std::string extra) {
    auto o = options;
    o.listen = std::move(listen);
    o.extra_gateway_toml = std::move(extra);
    write_file(gateway().config_path(), make_config(gateway().port(), default_libraries(), o));
  };
  with_listen({"tcp://127.0.0.1:{port}", fmt::format("tcp://127.0.0.1:{}", second)}, "threads = 3\n");
  gateway().signal(SIGHUP);
  ASSERT_TRUE(log_eventually("reload: applied")) << gateway().log_tail();
  EXPECT_TRUE(can_connect(second)) << "the added address does not accept";
  EXPECT_TRUE(contains(gateway().log(), "threads changed from 0 to 3: that needs a restart")) << gateway().log_tail();

  // Only the new address now: the first closes, and the session that came through it goes on.
  with_listen({fmt::format("tcp://127.0.0.1:{}", second)}, "");
  gateway().signal(SIGHUP);
  ASSERT_TRUE(log_eventually("reload: applied", 2)) << gateway().log_tail();
  EXPECT_TRUE(eventually([&] { return !can_connect(gateway().port()); }, 20s)) << "the removed address still accepts";
  auto echo = client.run_keyword(token, "Echo", json::array{"still here"});
  RJG_ASSERT_KEYWORD_OK(echo);
  client::RpcClient other(20s);
  other.connect("127.0.0.1", second);
  const auto t = open_library(other, "TestLibrary");
  auto there = other.run_keyword(t, "Echo", json::array{"served on the new address"});
  RJG_ASSERT_KEYWORD_OK(there);

  // An address that cannot be opened fails the whole reload: nothing else changes.
  with_listen({fmt::format("tcp://127.0.0.1:{}", second), "tcp://192.0.2.1:8271"}, "");
  gateway().signal(SIGHUP);
  ASSERT_TRUE(log_eventually("reload: reload failed: 1 problem")) << gateway().log_tail();
  EXPECT_TRUE(contains(gateway().log(), "cannot listen on tcp://192.0.2.1:8271")) << gateway().log_tail();
  EXPECT_TRUE(can_connect(second));
}

}  // namespace
}  // namespace rjg::test
