// Churn: 1000 sessions through one real gateway - a few at a time, dedicated and shared workers, every
// tenth one crashing its worker mid-keyword, others finalizing, disconnecting without finalize or in the
// middle of a keyword - and afterwards nothing is left behind: no child process of the gateway (not even
// a zombie), no growth in the gateway's open file descriptors, and the gateway still serves.
//
// Outcomes only: every session must get the answers it expects, whatever the timing. The settle loops
// have deadlines only so that a leak fails the test instead of hanging it.
#include "tests/integration/gateway_test.hpp"

#include <fmt/format.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <thread>

namespace rjg::test {
namespace {

// RJG_CHURN_SESSIONS overrides the number of sessions after the warm-up (default 1000): the
// ThreadSanitizer stage of deploy/test.sh runs fewer, as each costs it several times more.
int churn_sessions() {
  const char* text = std::getenv("RJG_CHURN_SESSIONS");
  int sessions = text ? std::atoi(text) : 0;
  return sessions > 0 ? sessions : 1000;
}
constexpr int kWarmupSessions = 40;
constexpr int kConcurrency = 4;

enum class Kind {
  crash_mid_keyword,       // dedicated worker killed by its own keyword (abort, exit, SIGKILL, SIGSEGV)
  disconnect_mid_keyword,  // dedicated worker, client gone while a keyword runs
  finalize,                // dedicated worker, the polite way: finalize, shutdown, exit
  close_without_finalize,  // dedicated worker, client just goes away
  two_imports,             // two dedicated workers in one session, one finalized
  shared_finalize,         // shared worker
  shared_close,
  shared_disconnect_mid_keyword,
};

Kind kind_of(int i) {
  switch (i % 10) {
    case 0: return Kind::crash_mid_keyword;
    case 1: return Kind::disconnect_mid_keyword;
    case 2: return Kind::shared_finalize;
    case 3: return Kind::shared_close;
    case 4: return Kind::shared_disconnect_mid_keyword;
    case 5: return Kind::two_imports;
    case 6: return Kind::close_without_finalize;
    case 7: return Kind::shared_finalize;
    default: return Kind::finalize;
  }
}

void expect_echo(client::RpcClient& c, const std::string& token, int i) {
  auto reply = c.run_keyword(token, "Echo", json::array{i});
  if (!reply.ok() || reply.keyword_error() || keyword_value(reply) != json::value(i))
    throw std::runtime_error("Echo failed: " + describe(reply));
}

json::object keyword_params(const std::string& token, std::string_view keyword, json::array args) {
  return json::object{{"library_token", token}, {"name", keyword}, {"args", std::move(args)}, {"kwargs", json::object{}}};
}

// Runs session number i to its end; returns what went wrong, or "".
std::string run_session(const GatewayProcess& gateway, int i) {
  static const char* kCrashModes[] = {"exit", "abort", "sigkill", "segv"};
  const Kind kind = kind_of(i);
  try {
    client::RpcClient c = gateway.connect(60s);
    c.initialize();
    switch (kind) {
      case Kind::crash_mid_keyword: {
        auto token = token_of(c.import_library("Churn"));
        expect_echo(c, token, i);
        auto crash = c.run_keyword(token, "Crash", json::array{kCrashModes[(i / 10) % 4]});
        if (!crash.ok() || crash.keyword_error_type() != protocol::keyword_error_type(protocol::kWorkerFailed))
          throw std::runtime_error("Crash did not fail with WorkerFailed: " + describe(crash));
        c.close();
        break;
      }
      case Kind::disconnect_mid_keyword: {
        auto token = token_of(c.import_library("Churn"));
        expect_echo(c, token, i);
        c.send_request(protocol::kRunKeyword, keyword_params(token, "Sleep", json::array{30}));
        c.close();
        break;
      }
      case Kind::finalize: {
        auto token = token_of(c.import_library("Churn"));
        expect_echo(c, token, i);
        auto fin = c.finalize_library(token);
        if (!fin.ok()) throw std::runtime_error("finalize failed: " + describe(fin));
        auto down = c.shutdown();
        if (!down.ok()) throw std::runtime_error("shutdown failed: " + describe(down));
        c.exit();
        if (!c.wait_closed(30s)) throw std::runtime_error("robot/exit did not close the connection");
        break;
      }
      case Kind::close_without_finalize: {
        auto token = token_of(c.import_library("Churn"));
        expect_echo(c, token, i);
        c.close();
        break;
      }
      case Kind::two_imports: {
        auto first = token_of(c.import_library("Churn"));
        auto second = token_of(c.import_library("Churn"));
        expect_echo(c, first, i);
        expect_echo(c, second, i);
        auto fin = c.finalize_library(first);
        if (!fin.ok()) throw std::runtime_error("finalize failed: " + describe(fin));
        c.close();
        break;
      }
      case Kind::shared_finalize:
      case Kind::shared_close:
      case Kind::shared_disconnect_mid_keyword: {
        // Three keywords each: with max_keywords = 3 every shared worker drains (jitter: after 2 or 3),
        // so each one stops once its imports are gone and the run ends with none left.
        auto token = token_of(c.import_library("ChurnShared"));
        for (int k = 0; k < 3; ++k) expect_echo(c, token, i);
        if (kind == Kind::shared_finalize) {
          auto fin = c.finalize_library(token);
          if (!fin.ok()) throw std::runtime_error("finalize failed: " + describe(fin));
        } else if (kind == Kind::shared_disconnect_mid_keyword) {
          c.send_request(protocol::kRunKeyword, keyword_params(token, "Sleep", json::array{0.05}));
        }
        c.close();
        break;
      }
    }
  } catch (const std::exception& e) {
    return fmt::format("session {} (kind {}): {}", i, static_cast<int>(kind), e.what());
  }
  return {};
}

// Runs sessions [first, last) on kConcurrency threads; returns every problem.
std::vector<std::string> run_sessions(const GatewayProcess& gateway, int first, int last) {
  std::mutex mutex;
  std::vector<std::string> problems;
  std::atomic<int> next{first};
  std::vector<std::thread> threads;
  for (int t = 0; t < kConcurrency; ++t) {
    threads.emplace_back([&] {
      for (int i = next++; i < last; i = next++) {
        auto problem = run_session(gateway, i);
        if (!problem.empty()) {
          std::lock_guard lock(mutex);
          problems.push_back(std::move(problem));
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  return problems;
}

std::string describe_children(pid_t parent) {
  std::string out;
  for (const auto& child : children_of(parent))
    out += fmt::format("  pid {} state {} ({}): {}\n", child.pid, child.state, child.comm, proc_cmdline(child.pid));
  return out;
}

using ChurnTest = GatewayTest;

TEST_F(ChurnTest, ThousandSessionsLeaveNoProcessZombieOrDescriptorBehind) {
  GatewayOptions options;
  options.log_level = "info";
  start({test_library("Churn"),
         [] {
           auto shared = test_library("ChurnShared");
           shared.extra_toml = "isolation = \"shared\"\nmax_workers = 2\nmax_keywords = 3\n";
           return shared;
         }()},
        options);
  const pid_t gw = gateway().pid();

  // Warm-up: every kind of session once or more, so that whatever the gateway allocates once (and
  // keeps) exists before the baseline is taken.
  auto problems = run_sessions(gateway(), 0, kWarmupSessions);
  ASSERT_TRUE(problems.empty()) << problems.front();
  // Settled: no worker left, and the descriptor count unchanged between two looks.
  std::optional<std::size_t> last, baseline;
  ASSERT_TRUE(eventually(
      [&] {
        auto n = open_fd_count(gw);
        bool settled = n && last == n && children_of(gw).empty();
        last = n;
        if (settled) baseline = n;
        return settled;
      },
      60s, 100ms))
      << "the gateway did not settle after the warm-up; children:\n"
      << describe_children(gw) << "descriptors:\n"
      << describe_fds(gw);
  const std::string baseline_fds = describe_fds(gw);

  const int sessions = churn_sessions();
  problems = run_sessions(gateway(), kWarmupSessions, kWarmupSessions + sessions);
  EXPECT_TRUE(problems.empty()) << problems.size() << " sessions went wrong; the first: " << problems.front();
  ASSERT_TRUE(gateway().running()) << "the gateway died during the churn";

  // Every worker ends and is reaped, and every descriptor is closed, within a deadline.
  std::optional<std::size_t> fds;
  bool clean = eventually(
      [&] {
        fds = open_fd_count(gw);
        return children_of(gw).empty() && fds && *fds <= *baseline;
      },
      60s, 100ms);
  EXPECT_TRUE(children_of(gw).empty()) << "child processes of the gateway left after the churn:\n"
                                       << describe_children(gw);
  for (const auto& child : children_of(gw)) EXPECT_NE(child.state, 'Z') << "zombie " << child.pid;
  EXPECT_TRUE(clean && fds && *fds <= *baseline)
      << "the gateway's descriptors grew from " << *baseline << " to " << fds.value_or(0) << "\nbefore:\n"
      << baseline_fds << "after:\n"
      << describe_fds(gw);

  // The crashes really happened, and nothing went wrong inside the gateway.
  auto log = gateway().log();
  std::size_t crashes = 0;
  for (auto pos = log.find("exited unexpectedly"); pos != std::string::npos;
       pos = log.find("exited unexpectedly", pos + 1))
    ++crashes;
  EXPECT_GE(crashes, static_cast<std::size_t>(sessions / 10));
  EXPECT_EQ(log.find("bug:"), std::string::npos) << "the gateway logged a bug";

  // And it still serves a normal session, dedicated and shared.
  auto [c, token] = session("Churn");
  auto echo = c.run_keyword(token, "Echo", json::array{"after the churn"});
  RJG_ASSERT_KEYWORD_OK(echo);
  EXPECT_EQ(keyword_value(echo), json::value("after the churn"));
  auto shared = c.import_library("ChurnShared");
  RJG_ASSERT_OK(shared);
  auto echo2 = c.run_keyword(token_of(shared), "Echo", json::array{"shared"});
  RJG_ASSERT_KEYWORD_OK(echo2);
  auto fin = c.finalize_library(token);
  RJG_ASSERT_OK(fin);
}

}  // namespace
}  // namespace rjg::test
