// rjg-bench: the cost of the gateway per keyword call. Starts the real gateway (serving the test
// worker) and the same test worker directly over TCP, then runs Echo calls through both, measured
// alternately in rounds so that machine noise hits both alike. Prints a table; never fails on numbers.
#include "gateway/cli/client.hpp"
#include "tests/integration/harness.hpp"

#include <fmt/format.h>
#include <signal.h>

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <numeric>
#include <string>
#include <vector>

namespace {

using namespace rjg;
using namespace rjg::test;
using Clock = std::chrono::steady_clock;

struct Options {
  int rounds = 10;
  int calls = 2000;
  std::size_t payload_bytes = 16;
  int warmup = 200;
  std::string log_level = "warn";
};

constexpr std::string_view kUsage = R"(Usage: rjg-bench [--rounds N] [--calls N] [--payload-bytes N] [--warmup N] [--log-level LEVEL]

Runs N Echo calls per round through the gateway and directly against the test worker, alternating
gateway and direct each round, and prints round-trip latency (p50, p99, microseconds) and throughput.
Defaults: --rounds 10 --calls 2000 --payload-bytes 16 --warmup 200 --log-level warn.
)";

struct Target {
  std::string name;
  RpcClient client{std::chrono::seconds(30)};
  std::string token;
  std::vector<double> latencies_us;
  double busy_seconds = 0;
  long long calls = 0;
  long long failures = 0;
};

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  auto idx = static_cast<std::size_t>(std::min<double>(v.size() - 1, std::max(0.0, p / 100.0 * (v.size() - 1) + 0.5)));
  return v[idx];
}

void run_calls(Target& t, int n, const json::array& args, bool record) {
  auto round_start = Clock::now();
  for (int i = 0; i < n; ++i) {
    auto t0 = Clock::now();
    auto reply = t.client.run_keyword(t.token, "Echo", args);
    auto t1 = Clock::now();
    if (!reply.ok() || reply.keyword_error()) ++t.failures;
    if (record) t.latencies_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  if (record) {
    t.busy_seconds += std::chrono::duration<double>(Clock::now() - round_start).count();
    t.calls += n;
  }
}

bool parse_options(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
      return argv[++i];
    };
    if (a == "--help" || a == "-h") {
      std::cout << kUsage;
      std::exit(0);
    } else if (a == "--rounds") {
      o.rounds = std::stoi(next());
    } else if (a == "--calls") {
      o.calls = std::stoi(next());
    } else if (a == "--payload-bytes") {
      o.payload_bytes = static_cast<std::size_t>(std::stoul(next()));
    } else if (a == "--warmup") {
      o.warmup = std::stoi(next());
    } else if (a == "--log-level") {
      o.log_level = next();
    } else {
      throw std::invalid_argument("unknown option " + a);
    }
  }
  if (o.rounds < 1 || o.calls < 1 || o.warmup < 0) throw std::invalid_argument("counts must be positive");
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  ::signal(SIGPIPE, SIG_IGN);
  Options o;
  try {
    parse_options(argc, argv, o);
  } catch (const std::exception& e) {
    std::cerr << "rjg-bench: " << e.what() << "\n\n" << kUsage;
    return 2;
  }

  std::cout << fmt::format("rjg-bench: {} rounds x {} Echo calls, payload {} bytes, warm-up {} calls\n", o.rounds,
                           o.calls, o.payload_bytes, o.warmup);
  std::cout << fmt::format("gateway: {}\nworker:  {}\n", gateway_binary(), test_worker_binary());

  GatewayOptions gopts;
  gopts.log_level = o.log_level;
  GatewayProcess gateway({test_library("TestLibrary")}, gopts);
  DirectWorker direct("TestLibrary");
  std::vector<Target> targets;
  try {
    gateway.start();
    targets.emplace_back();
    targets.back().name = "gateway";
    targets.back().client.connect("127.0.0.1", gateway.port());
    targets.back().token = open_library(targets.back().client, "TestLibrary");
  } catch (const std::exception& e) {
    std::cerr << "rjg-bench: cannot use the gateway: " << e.what() << "\n";
    return 3;
  }
  try {
    direct.start();
    targets.emplace_back();
    targets.back().name = "direct";
    targets.back().client.connect(direct.host(), direct.port());
    targets.back().token = open_library(targets.back().client, "TestLibrary");
  } catch (const std::exception& e) {
    std::cerr << "rjg-bench: no direct worker to compare with (" << e.what() << "); measuring the gateway only\n";
  }

  json::array args{json::string(std::string(o.payload_bytes, 'p'))};
  try {
    for (auto& t : targets) run_calls(t, o.warmup, args, false);
    for (int round = 0; round < o.rounds; ++round) {
      // Alternate which target goes first so neither always runs on a warmer machine.
      if (round % 2 == 0) {
        for (auto& t : targets) run_calls(t, o.calls, args, true);
      } else {
        for (auto it = targets.rbegin(); it != targets.rend(); ++it) run_calls(*it, o.calls, args, true);
      }
      std::cerr << fmt::format("round {}/{} done\n", round + 1, o.rounds);
    }
  } catch (const std::exception& e) {
    std::cerr << "rjg-bench: " << e.what() << "\n";
    if (!gateway.running()) std::cerr << "gateway stderr:\n" << gateway.log_tail(50) << "\n";
    return 3;
  }

  struct Row {
    std::string name;
    double p50, p99, mean, throughput;
    long long calls, failures;
  };
  std::vector<Row> rows;
  for (auto& t : targets) {
    double mean = t.latencies_us.empty()
                      ? 0
                      : std::accumulate(t.latencies_us.begin(), t.latencies_us.end(), 0.0) / t.latencies_us.size();
    rows.push_back({t.name, percentile(t.latencies_us, 50), percentile(t.latencies_us, 99), mean,
                    t.busy_seconds > 0 ? t.calls / t.busy_seconds : 0, t.calls, t.failures});
  }

  std::cout << "\n"
            << fmt::format("{:<10} {:>10} {:>10} {:>10} {:>12} {:>10} {:>9}\n", "target", "p50 us", "p99 us",
                           "mean us", "calls/s", "calls", "failures");
  for (const auto& r : rows)
    std::cout << fmt::format("{:<10} {:>10.1f} {:>10.1f} {:>10.1f} {:>12.0f} {:>10} {:>9}\n", r.name, r.p50, r.p99,
                             r.mean, r.throughput, r.calls, r.failures);
  if (rows.size() == 2 && rows[1].p50 > 0 && rows[1].p99 > 0 && rows[1].throughput > 0) {
    const auto& g = rows[0];
    const auto& d = rows[1];
    std::cout << "\n"
              << fmt::format("gateway/direct: p50 x{:.2f}, p99 x{:.2f}, throughput x{:.2f}\n", g.p50 / d.p50,
                             g.p99 / d.p99, g.throughput / d.throughput)
              << fmt::format("gateway added cost per keyword (p50 difference): {:.1f} us\n", g.p50 - d.p50);
  }

  for (auto& t : targets) {
    try {
      t.client.finalize_library(t.token);
      t.client.shutdown();
      t.client.exit();
      t.client.close();
    } catch (const std::exception&) {
    }
  }
  gateway.stop();
  return 0;
}
