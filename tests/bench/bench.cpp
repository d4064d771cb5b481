// rjg-bench: the cost of the gateway per keyword call. Starts the real gateway (serving the test
// worker) and the same test worker directly over TCP, then runs Echo calls through both, measured
// alternately in rounds so that machine noise hits both alike. Prints a table; never fails on numbers.
#include "common/pickle/pickle_policy.hpp"
#include "common/protocol/params.hpp"
#include "gateway/cli/client.hpp"
#include "tests/integration/harness.hpp"
#include "tests/unit/hash_flood.hpp"

#include <fmt/format.h>
#include <malloc.h>
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
  unsigned flood_stages = 17;       // 2^N keys in the hash-flooding frame for the gateway's scanner
  unsigned boost_flood_stages = 14;  // 2^N keys for Boost.JSON's parse (quadratic under the flood)
};

constexpr std::string_view kUsage = R"(Usage: rjg-bench [--rounds N] [--calls N] [--payload-bytes N] [--warmup N] [--log-level LEVEL]
                 [--flood-stages N] [--boost-flood-stages N]

Runs N Echo calls per round through the gateway and directly against the test worker, alternating
gateway and direct each round, and prints round-trip latency (p50, p99, microseconds) and throughput.
First it prints the parse time of a hash-flooding frame (2^N keys that collide in Boost.JSON's hash
table) next to a normal frame of the same size: the gateway's scanner (classify, bind, pickle check)
with --flood-stages keys, and Boost.JSON's parse with --boost-flood-stages keys (0: skip), for contrast.
Defaults: --rounds 10 --calls 2000 --payload-bytes 16 --warmup 200 --log-level warn --flood-stages 17
--boost-flood-stages 14.
)";

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// The best of `runs` timings of f.
template <typename F>
double best_time(int runs, F&& f) {
  double best = 1e300;
  for (int i = 0; i < runs; ++i) {
    const auto start = Clock::now();
    f();
    best = std::min(best, seconds_since(start));
  }
  return best;
}

// The relay path's parsing of one run_keyword frame whose kwargs is `object`: classify, bind, pickle check.
void scan_frame(const std::string& body) {
  auto classified = parse_message(body, JsonLimits{64, std::size_t{1} << 24});
  const auto* m = std::get_if<Message>(&classified);
  if (!m) throw std::runtime_error("the flood frame was not classified");
  auto bound = params::bind_run_keyword(*m);
  const auto* p = std::get_if<params::RunKeyword>(&bound);
  if (!p) throw std::runtime_error("the flood frame's params did not bind");
  if (inspect_pickles_text(p->of(p->kwargs), PickleMode::data_only, "kwargs"))
    throw std::runtime_error("the flood frame's pickle check refused it");
}

void flood_report(const Options& o) {
  // Boost.JSON's salt is the table's address: with a fixed mmap threshold a large table is always
  // mmapped, at a page boundary plus malloc's header, which the colliding keys are made for.
  ::mallopt(M_MMAP_THRESHOLD, 64 * 1024);
  std::cout << "\nparse time of one frame: keys crafted to collide in Boost.JSON's hash table vs ordinary keys\n"
            << fmt::format("{:<28} {:>9} {:>11} {:>12} {:>12} {:>8}\n", "parser", "keys", "frame bytes",
                           "colliding ms", "ordinary ms", "ratio");
  auto row = [](std::string_view parser, unsigned stages, std::size_t bytes, double flood, double plain) {
    std::cout << fmt::format("{:<28} {:>9} {:>11} {:>12.2f} {:>12.2f} {:>8.2f}\n", parser, std::size_t{1} << stages,
                             bytes, flood * 1e3, plain * 1e3, plain > 0 ? flood / plain : 0);
  };
  // Boost.JSON first: later frees leave free heap that a large table could be carved from, at an
  // address the keys are not made for.
  if (o.boost_flood_stages > 0) {
    const std::string flood = object_of_keys(colliding_keys(o.boost_flood_stages));
    const std::string plain = object_of_keys(ordinary_keys(o.boost_flood_stages));
    const double t_plain = best_time(3, [&] { (void)json::parse(plain); });
    const double t_flood = best_time(1, [&] { (void)json::parse(flood); });
    row("Boost.JSON json::parse", o.boost_flood_stages, flood.size(), t_flood, t_plain);
  }
  if (o.flood_stages > 0) {
    auto frame = [](const std::vector<std::string>& keys) {
      return fmt::format(R"({{"jsonrpc":"2.0","id":1,"method":"robot/run_keyword","params":{{"library_token":"t",)"
                         R"("name":"Echo","args":[],"kwargs":{}}}}})",
                         object_of_keys(keys));
    };
    const std::string flood = frame(colliding_keys(o.flood_stages)), plain = frame(ordinary_keys(o.flood_stages));
    const double t_plain = best_time(3, [&] { scan_frame(plain); });
    const double t_flood = best_time(3, [&] { scan_frame(flood); });
    row("gateway scanner (relay path)", o.flood_stages, flood.size(), t_flood, t_plain);
  }
}

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
    } else if (a == "--flood-stages") {
      o.flood_stages = static_cast<unsigned>(std::stoul(next()));
    } else if (a == "--boost-flood-stages") {
      o.boost_flood_stages = static_cast<unsigned>(std::stoul(next()));
    } else {
      throw std::invalid_argument("unknown option " + a);
    }
  }
  if (o.rounds < 1 || o.calls < 1 || o.warmup < 0) throw std::invalid_argument("counts must be positive");
  if (o.flood_stages > 20 || o.boost_flood_stages > 20) throw std::invalid_argument("flood stages go up to 20");
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
  try {
    flood_report(o);
  } catch (const std::exception& e) {
    std::cerr << "rjg-bench: flood frames: " << e.what() << "\n";
  }

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
