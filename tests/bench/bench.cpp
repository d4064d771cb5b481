// rjg-bench: what the gateway costs per relayed keyword, measured against the floor of this machine
// and against the same native worker reached directly, in one run. It starts the real gateway
// (serving robot-test-worker over pipes) and the same worker serving TCP by itself (the "direct"
// target), drives both with its own load generator (loadgen.hpp: one Asio thread for all sessions),
// and prints one table: the floor (ping-pong between two threads), keyword latency, throughput at
// several session counts, CPU and system calls per relayed keyword, memory per idle session and
// session set-up time. With --data DIR it also writes the figures as .dat files for gnuplot
// (deploy/bench.sh draws them). Absolute numbers vary between runs and machines; ratios are printed
// next to them. It never fails on numbers: the exit code is 0 unless a phase could not run at all.
#include "common/client/client.hpp"
#include "tests/bench/figures.hpp"
#include "tests/bench/loadgen.hpp"
#include "tests/bench/parser_flood.hpp"
#include "tests/bench/probes.hpp"
#include "tests/integration/harness.hpp"

#include <fmt/format.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace rjg::client;
using namespace rjg::test;
using namespace rjg::bench;
using Clock = std::chrono::steady_clock;

const std::vector<std::string> kPhases = {"parser", "floor",    "latency", "throughput",
                                          "cpu",    "syscalls", "rss",     "setup"};
constexpr const char* kLibrary = "TestLibrary";
constexpr const char* kNotSupported = "n/a (not supported by this build)";

struct Options {
  std::set<std::string> phases{kPhases.begin(), kPhases.end()};
  bool quick = false;
  std::string data_dir;
  std::size_t payload_bytes = 16;
  std::size_t floor_round_trips = 20000;
  int rounds = 10;
  int calls = 2000;
  int warmup_calls = 200;
  std::vector<std::size_t> sessions{1, 16, 64, 256};
  std::size_t shared_workers = 0;  // throughput: 0 = isolation "session"; else "shared" with this many workers
  double seconds = 3;
  double warmup_seconds = 0.5;
  int cpu_rounds = 3;
  int cpu_calls = 5000;
  int strace_calls = 3000;
  std::size_t strace_sessions = 16;
  std::size_t idle_sessions = 1000;
  int setups = 20;
  int import_delay_ms = 50;
  unsigned client_threads = 1;
  std::string log_level = "warn";
  unsigned flood_stages = 17;
  unsigned boost_flood_stages = 14;
};

constexpr std::string_view kUsage = R"(Usage: rjg-bench [--quick] [--only PHASES] [--skip PHASES] [--data DIR] [options]

Measures the gateway's cost per relayed keyword against the floor of this machine and against the
same native worker (robot-test-worker) reached directly over TCP, in one run, and prints a table.
Phases, in the order they run (PHASES is a comma-separated list of them):
  parser      parse time of a hash-flooding frame: the gateway's scanner vs Boost.JSON's parse
  floor       round trip of a small message between two threads: TCP loopback and a pipe pair
  latency     Echo p50/p99 through the gateway and direct (one session, sequential, alternating)
  throughput  keywords/s with N sessions calling back to back: direct, gateway threads = 1, default
  cpu         CPU per keyword: the gateway, the direct worker over TCP, the gateway's worker (pipes)
  syscalls    system calls of the gateway per relayed keyword (strace -c -f), 1 and 16 sessions
  rss         the gateway's resident memory per idle session (initialized; with a shared import)
  setup       session set-up: cold, prewarmed, imported ahead (prewarm_import)

Options (defaults in brackets):
  --quick                 small counts: every row in a few seconds (the ctest smoke test)
  --data DIR              also write the figures as whitespace-separated .dat files for gnuplot
  --payload-bytes N       Echo's argument [16]
  --floor-round-trips N   floor: round trips each [20000]
  --rounds N --calls N    latency: rounds of N calls each, gateway and direct in turn [10, 2000]
  --sessions LIST         throughput: session counts [1,16,64,256]
  --seconds S             throughput: measured seconds per row, after 0.5 s of warm-up [3]
  --shared-workers N      throughput: the gateway's library isolation = "shared" with N workers instead of
                          one worker process per session (for machines where 256 processes are too many) [0]
  --cpu-calls N           cpu: sequential keywords per round, 3 rounds alternating [5000]
  --strace-calls N        syscalls: keywords counted per row [3000]
  --strace-sessions N     syscalls: sessions of the second row [16]
  --idle-sessions N       rss: idle sessions opened [1000]
  --setups N              setup: set-ups per variant [20]
  --import-delay MS       setup: what an import costs the test worker (--import-delay) [50]
  --client-threads N      threads of the load generator's io_context [1]
  --log-level LEVEL       the gateway's log level [warn]
  --flood-stages N        parser: 2^N keys for the gateway's scanner [17]
  --boost-flood-stages N  parser: 2^N keys for Boost.JSON's parse, 0 skips it [14]
)";

// ---------------------------------------------------------------------------------------------
// Small helpers

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string item; std::getline(in, item, sep);)
    if (!item.empty()) out.push_back(item);
  return out;
}

void section(const std::string& title) { std::cout << "\n== " << title << "\n" << std::flush; }

// A machine-readable figure file for gnuplot: a comment header, then whitespace-separated rows.
class DataFile {
 public:
  DataFile(const Options& o, const std::string& name, const std::string& header) {
    if (o.data_dir.empty()) return;
    out_.open(fs::path(o.data_dir) / name, std::ios::trunc);
    if (!out_) throw std::runtime_error(fmt::format("cannot write {}/{}", o.data_dir, name));
    out_ << "# " << header << "\n";
  }
  template <typename... Args>
  void row(fmt::format_string<Args...> format, Args&&... args) {
    if (out_.is_open()) out_ << fmt::format(format, std::forward<Args>(args)...) << "\n" << std::flush;
  }

 private:
  std::ofstream out_;
};

// A figure for a .dat file: "?" (gnuplot's missing value) when there is none.
std::string datum(std::optional<double> v) { return v ? fmt::format("{:.3f}", *v) : std::string("?"); }

// Bounded waits for a server to be quiet again after a phase, so the next one starts on a calm machine.
void settle_gateway(GatewayProcess& gateway, std::size_t expected_children = 0) {
  if (!eventually([&] { return children_of(gateway.pid()).size() == expected_children; }, 60s, 5ms))
    std::cerr << fmt::format("rjg-bench: the gateway still has {} workers (expected {}) after 60 s; going on\n",
                             children_of(gateway.pid()).size(), expected_children);
}

void settle_direct(DirectWorker& direct, std::size_t threads) {
  if (!eventually([&] { return thread_count(direct.pid()) <= threads; }, 60s, 5ms))
    std::cerr << "rjg-bench: the direct worker's session threads did not end within 60 s; going on\n";
}

// ---------------------------------------------------------------------------------------------
// The servers measured

// The servers this process started, for on_termination.
std::array<std::atomic<pid_t>, 64> g_servers{};

void track_server(pid_t pid) {
  for (auto& slot : g_servers) {
    pid_t empty = 0;
    if (slot.compare_exchange_strong(empty, pid)) return;
  }
}

// [gateway] keys that let one client open as many sessions and workers as the benchmark needs.
constexpr const char* kNoLimits = "max_sessions = 0\nmax_sessions_per_client = 0\nmax_workers = 0\n";

std::unique_ptr<GatewayProcess> start_gateway(const Options& o, std::vector<LibrarySpec> libraries,
                                              const std::string& extra_toml, const std::string& log_level = "") {
  GatewayOptions gopts;
  gopts.log_level = log_level.empty() ? o.log_level : log_level;
  gopts.extra_gateway_toml = std::string(kNoLimits) + extra_toml;
  auto gateway = std::make_unique<GatewayProcess>(std::move(libraries), gopts);
  gateway->start();
  track_server(gateway->pid());
  return gateway;
}

// The servers that several phases share, started when first needed.
struct Servers {
  const Options& o;
  std::unique_ptr<GatewayProcess> gateway;        // [gateway] threads left at its default
  std::unique_ptr<GatewayProcess> single;         // threads = 1
  std::optional<std::string> single_unsupported;  // why threads = 1 could not be configured
  std::unique_ptr<DirectWorker> direct;
  std::size_t direct_threads = 0;  // its threads with no connection

  explicit Servers(const Options& options) : o(options) {}

  GatewayProcess& main_gateway() {
    if (!gateway) gateway = start_gateway(o, {test_library(kLibrary)}, "");
    return *gateway;
  }
  GatewayProcess* single_thread_gateway() {
    if (!single && !single_unsupported) {
      try {
        single = start_gateway(o, {test_library(kLibrary)}, "threads = 1\n");
      } catch (const std::exception& e) {
        single_unsupported = e.what();
      }
    }
    return single.get();
  }
  DirectWorker& direct_worker() {
    if (!direct) {
      direct = std::make_unique<DirectWorker>(kLibrary, std::vector<std::string>{"--log-level", "warn"});
      direct->start();
      track_server(direct->pid());
      eventually([&] { return thread_count(direct->pid()) > 0; }, 5s, 5ms);
      direct_threads = thread_count(direct->pid());
    }
    return *direct;
  }
};

struct Floor {
  std::vector<double> tcp_us, pipe_us;
};

// ---------------------------------------------------------------------------------------------
// Phases

Floor measure_floor(const Options& o) {
  // Messages the size of an Echo call's frame, so the floor carries what a keyword carries.
  const std::size_t bytes = echo_frame("TestLibrary_0123abcd_0", 1000000, std::string(o.payload_bytes, 'p')).size();
  Floor f;
  for (std::size_t done = 0, chunk = std::max<std::size_t>(1, o.floor_round_trips / 4); done < o.floor_round_trips;
       done += chunk) {
    // Alternated in chunks so that machine noise hits both alike.
    auto t = tcp_ping_pong_us(bytes, std::min(chunk, o.floor_round_trips - done));
    auto p = pipe_ping_pong_us(bytes, std::min(chunk, o.floor_round_trips - done));
    f.tcp_us.insert(f.tcp_us.end(), t.begin(), t.end());
    f.pipe_us.insert(f.pipe_us.end(), p.begin(), p.end());
  }
  return f;
}

void print_floor(const Options& o, const Floor& f) {
  const std::size_t bytes = echo_frame("TestLibrary_0123abcd_0", 1000000, std::string(o.payload_bytes, 'p')).size();
  section(fmt::format("floor: round trip of a {}-byte message between two threads of this process ({} each)", bytes,
                      f.tcp_us.size()));
  std::cout << fmt::format("{:<40} {:>10} {:>10}\n", "row", "p50 us", "p99 us");
  std::cout << fmt::format("{:<40} {:>10.1f} {:>10.1f}\n", "floor: TCP loopback ping-pong", percentile(f.tcp_us, 50),
                           percentile(f.tcp_us, 99));
  std::cout << fmt::format("{:<40} {:>10.1f} {:>10.1f}\n", "floor: pipe ping-pong", percentile(f.pipe_us, 50),
                           percentile(f.pipe_us, 99));
}

void latency_phase(const Options& o, Servers& servers, const Floor& floor, DataFile& data) {
  GatewayProcess& gateway = servers.main_gateway();
  DirectWorker& direct = servers.direct_worker();
  section(
      fmt::format("keyword latency: Echo ({}-byte argument), one session, sequential; {} rounds x {} calls, "
                  "gateway and direct in turn",
                  o.payload_bytes, o.rounds, o.calls));
  const std::string payload(o.payload_bytes, 'p');
  LoadGenerator via_gateway("127.0.0.1", gateway.port(), 1), via_direct(direct.host(), direct.port(), 1);
  via_gateway.open(1, kLibrary);
  via_direct.open(1, kLibrary);
  via_gateway.run(payload, static_cast<std::uint64_t>(o.warmup_calls), 0, false);
  via_direct.run(payload, static_cast<std::uint64_t>(o.warmup_calls), 0, false);
  auto [g, d, failures] = paired_latencies(via_gateway, via_direct, payload, o.rounds, o.calls);
  via_gateway.close();
  via_direct.close();
  std::cout << fmt::format("{:<40} {:>10} {:>10} {:>10} {:>12}\n", "row", "p50 us", "p99 us", "mean us", "calls/s");
  for (auto [label, v] : {std::pair{"latency: direct (TCP to the worker)", &d}, std::pair{"latency: gateway", &g}})
    std::cout << fmt::format("{:<40} {:>10.1f} {:>10.1f} {:>10.1f} {:>12.0f}\n", label, percentile(*v, 50),
                             percentile(*v, 99), mean(*v), mean(*v) > 0 ? 1e6 / mean(*v) : 0);
  const double added = percentile(g, 50) - percentile(d, 50);
  const double pipe = percentile(floor.pipe_us, 50), tcp = percentile(floor.tcp_us, 50);
  std::cout << fmt::format("{:<40} {:>10.1f}   gateway/direct: p50 {}, p99 {}\n", "added over direct (p50 us)", added,
                           ratio_text(percentile(g, 50), percentile(d, 50)),
                           ratio_text(percentile(g, 99), percentile(d, 99)));
  std::cout << fmt::format("{:<40} {:>10}   the added p50 / pipe ping-pong p50 ({:.1f} us): the extra hop's cost\n",
                           "added over floor (pipe round trips)", ratio_text(added, pipe), pipe);
  std::cout << fmt::format("{:<40} {:>10}   direct p50 / TCP ping-pong p50 ({:.1f} us)\n",
                           "direct over floor (TCP round trips)", ratio_text(percentile(d, 50), tcp), tcp);
  if (failures) std::cout << fmt::format("  ({} calls failed)\n", failures);
  data.row("\"direct\" {:.3f} {:.3f}", percentile(d, 50), percentile(d, 99));
  data.row("\"gateway\" {:.3f} {:.3f}", percentile(g, 50), percentile(g, 99));
}

// kw/s of n sessions calling Echo back to back against one server.
double throughput(const Options& o, const std::string& host, std::uint16_t port, std::size_t n,
                  std::size_t parallel_opens = 32) {
  const std::string payload(o.payload_bytes, 'p');
  LoadGenerator load(host, port, o.client_threads);
  load.open(n, kLibrary, std::chrono::seconds(300), parallel_opens);
  load.run(payload, 0, o.warmup_seconds, false);
  auto stats = load.run(payload, 0, o.seconds, false);
  load.close();
  if (stats.failures) std::cerr << fmt::format("rjg-bench: {} of the calls failed\n", stats.failures);
  return stats.per_second();
}

void throughput_phase(const Options& o, Servers& servers, DataFile& data) {
  DirectWorker& direct = servers.direct_worker();
  const std::string isolation =
      o.shared_workers == 0
          ? std::string("isolation = \"session\": one worker process per session")
          : fmt::format(
                "isolation = \"shared\": at most {} workers, the sessions spread evenly over them (a fresh "
                "gateway per row)",
                o.shared_workers);
  section(fmt::format(
      "throughput: keywords/s, N sessions each calling Echo back to back ({} s measured after {} s warm-up; load "
      "generator: {} Asio thread{}).\nGateway: {}; threads = 1, and threads left out (one per core: {}). Direct: one "
      "robot-test-worker --tcp, one I/O thread and one session thread per connection.",
      o.seconds, o.warmup_seconds, o.client_threads, o.client_threads == 1 ? "" : "s", isolation,
      std::thread::hardware_concurrency()));
  std::optional<std::string> single_problem;
  std::cout << fmt::format("{:<24} {:>12} {:>16} {:>16} {:>16} {:>16}\n", "row", "direct kw/s", "gw threads=1",
                           "gw default", "threads=1/direct", "default/direct");
  for (std::size_t i = 0; i < o.sessions.size(); ++i) {
    const std::size_t n = o.sessions[i];
    GatewayProcess* by_default = nullptr;
    GatewayProcess* single = nullptr;
    std::unique_ptr<GatewayProcess> row_default, row_single;
    if (o.shared_workers == 0) {
      by_default = &servers.main_gateway();
      single = servers.single_thread_gateway();
      if (!single) single_problem = servers.single_unsupported;
    } else {
      // max_imports_per_worker spreads the sessions: an import takes an idle worker with room first.
      auto library = test_library(kLibrary);
      library.extra_toml = fmt::format("isolation = \"shared\"\nmax_workers = {}\nmax_imports_per_worker = {}\n",
                                       o.shared_workers, (n + o.shared_workers - 1) / o.shared_workers);
      row_default = start_gateway(o, {library}, "");
      by_default = row_default.get();
      try {
        row_single = start_gateway(o, {library}, "threads = 1\n");
        single = row_single.get();
      } catch (const std::exception& e) {
        single_problem = e.what();
      }
    }
    // Shared workers: imports one at a time, so that each fills an idle worker with room before the next
    // worker starts (imports that arrive while every worker is still starting wait for capacity).
    const std::size_t parallel_opens = o.shared_workers == 0 ? 32 : 1;
    std::optional<double> d, g1, gd;
    // Rotate the order per row so that none of the three always runs first.
    for (int k = 0; k < 3; ++k) {
      switch ((k + i) % 3) {
        case 0:
          d = throughput(o, direct.host(), direct.port(), n);
          settle_direct(direct, servers.direct_threads);
          break;
        case 1:
          if (single) {
            g1 = throughput(o, "127.0.0.1", single->port(), n, parallel_opens);
            if (o.shared_workers == 0) settle_gateway(*single);
          }
          break;
        case 2:
          gd = throughput(o, "127.0.0.1", by_default->port(), n, parallel_opens);
          if (o.shared_workers == 0) settle_gateway(*by_default);
          break;
      }
    }
    auto cell = [](std::optional<double> v) { return v ? fmt::format("{:.0f}", *v) : std::string("n/a"); };
    auto ratio = [&](std::optional<double> v) { return v && d ? ratio_text(*v, *d) : std::string("-"); };
    std::cout << fmt::format("{:<24} {:>12} {:>16} {:>16} {:>16} {:>16}\n",
                             fmt::format("throughput: {} session{}", n, n == 1 ? "" : "s"), cell(d), cell(g1), cell(gd),
                             ratio(g1), ratio(gd))
              << std::flush;
    data.row("{} {} {} {}", n, datum(d), datum(g1), datum(gd));
  }
  if (single_problem)
    std::cout << fmt::format("gateway threads = 1: {}: {}\n", kNotSupported, last_line(*single_problem));
}

void cpu_phase(const Options& o, Servers& servers, DataFile& data) {
  GatewayProcess& gateway = servers.main_gateway();
  DirectWorker& direct = servers.direct_worker();
  settle_gateway(gateway);
  section(
      fmt::format("CPU per keyword: {} rounds x {} sequential Echo calls on one session, gateway and direct in "
                  "turn (CPU time of every thread, /proc/PID/task/*/schedstat)",
                  o.cpu_rounds, o.cpu_calls));
  const std::string payload(o.payload_bytes, 'p');
  LoadGenerator via_gateway("127.0.0.1", gateway.port(), 1), via_direct(direct.host(), direct.port(), 1);
  via_gateway.open(1, kLibrary);
  via_direct.open(1, kLibrary);
  // The session's own worker, asked through the gateway.
  const pid_t worker = via_gateway.worker_pid(0);
  via_gateway.run(payload, static_cast<std::uint64_t>(o.warmup_calls), 0, false);
  via_direct.run(payload, static_cast<std::uint64_t>(o.warmup_calls), 0, false);
  std::uint64_t g_ns = 0, w_ns = 0, d_ns = 0, g_calls = 0, d_calls = 0;
  auto through_gateway = [&] {
    const auto g0 = cpu_ns(gateway.pid()), w0 = cpu_ns(worker);
    auto stats = via_gateway.run(payload, static_cast<std::uint64_t>(o.cpu_calls), 0, false);
    const auto g1 = cpu_ns(gateway.pid()), w1 = cpu_ns(worker);
    g_ns += g1 - g0;
    w_ns += w1 - w0;
    g_calls += stats.calls + stats.failures;
  };
  auto to_direct = [&] {
    const auto d0 = cpu_ns(direct.pid());
    auto stats = via_direct.run(payload, static_cast<std::uint64_t>(o.cpu_calls), 0, false);
    d_ns += cpu_ns(direct.pid()) - d0;
    d_calls += stats.calls + stats.failures;
  };
  for (int round = 0; round < o.cpu_rounds; ++round) {
    // Alternate which goes first so neither always runs on a warmer machine.
    if (round % 2 == 0)
      through_gateway(), to_direct();
    else
      to_direct(), through_gateway();
  }
  via_gateway.close();
  via_direct.close();
  const double g = g_calls ? g_ns / 1e3 / g_calls : 0, w = g_calls ? w_ns / 1e3 / g_calls : 0,
               d = d_calls ? d_ns / 1e3 / d_calls : 0;
  std::cout << fmt::format("{:<48} {:>12}\n", "row", "CPU us/kw");
  std::cout << fmt::format("{:<48} {:>12.2f}\n", "cpu: gateway per relayed keyword", g);
  std::cout << fmt::format("{:<48} {:>12.2f}\n", "cpu: direct worker per keyword over TCP", d);
  std::cout << fmt::format("{:<48} {:>12.2f}\n", fmt::format("cpu: the gateway's worker (pid {}) over pipes", worker),
                           w);
  std::cout << fmt::format("{:<48} {:>12}   gateway / (direct TCP + worker pipes) = {:.2f}: {}\n",
                           "cpu target: gateway <= direct TCP + worker pipe", ratio_text(g, d + w),
                           d + w > 0 ? g / (d + w) : 0, d + w > 0 && g <= d + w ? "met" : "not met");
  data.row("\"gateway\" {:.3f}", g);
  data.row("\"direct worker (TCP)\" {:.3f}", d);
  data.row("\"gateway's worker (pipes)\" {:.3f}", w);
}

struct SyscallFigures {
  std::map<std::string, std::pair<std::uint64_t, std::uint64_t>> calls;  // name -> (calls, errors)
  std::uint64_t keywords = 0;
  std::uint64_t total() const {
    std::uint64_t n = 0;
    for (const auto& [name, c] : calls) n += c.first;
    return n;
  }
};

SyscallFigures count_syscalls(const Options& o, GatewayProcess& gateway, std::size_t sessions) {
  const std::string payload(o.payload_bytes, 'p');
  LoadGenerator load("127.0.0.1", gateway.port(), o.client_threads);
  load.open(sessions, kLibrary);
  load.run(payload, static_cast<std::uint64_t>(o.warmup_calls), 0, false);
  SyscallFigures f;
  // Only the calls of this phase are traced: attached before the first, detached after the last answer.
  const auto counts = rjg::test::count_syscalls(gateway.pid(), [&] {
    auto stats = load.run(payload, static_cast<std::uint64_t>(o.strace_calls), 0, false);
    f.keywords = stats.calls + stats.failures;
  });
  for (const auto& [name, entry] : counts.by_name) f.calls[name] = {entry.calls, entry.errors};
  load.close();
  settle_gateway(gateway);
  return f;
}

void syscalls_phase(const Options& o, Servers& servers, DataFile& data) {
  section(
      fmt::format("system calls of the gateway per relayed keyword: strace -c -f attached to the gateway for "
                  "{} Echo calls (sequential per session); target <= 7",
                  o.strace_calls));
  if (!rjg::test::find_program("strace")) {
    std::cout << "syscalls: strace not found (install strace to count them); rows skipped\n";
    return;
  }
  GatewayProcess& gateway = servers.main_gateway();
  settle_gateway(gateway);
  SyscallFigures one, many;
  try {
    one = count_syscalls(o, gateway, 1);
    many = count_syscalls(o, gateway, o.strace_sessions);
  } catch (const rjg::test::StraceUnusable& e) {
    // Not the gateway's fault, nor the benchmark's: this machine does not let strace trace.
    std::cout << "syscalls: strace not usable here (" << e.what() << "); rows skipped\n";
    return;
  }
  std::set<std::string> names;
  for (const auto* f : {&one, &many})
    for (const auto& [name, c] : f->calls) names.insert(name);
  std::vector<std::string> ordered(names.begin(), names.end());
  auto per_kw = [](const SyscallFigures& f, const std::string& name) {
    auto it = f.calls.find(name);
    return it == f.calls.end() || f.keywords == 0 ? 0.0 : static_cast<double>(it->second.first) / f.keywords;
  };
  std::stable_sort(ordered.begin(), ordered.end(), [&](const auto& a, const auto& b) {
    return per_kw(one, a) + per_kw(many, a) > per_kw(one, b) + per_kw(many, b);
  });
  const std::string many_label = fmt::format("{} sessions", o.strace_sessions);
  std::cout << fmt::format("{:<40} {:>14} {:>14}\n", "system call (calls per keyword)", "1 session", many_label);
  for (const auto& name : ordered) {
    auto errors = [&](const SyscallFigures& f) {
      auto it = f.calls.find(name);
      return it == f.calls.end() || it->second.second == 0 || f.keywords == 0
                 ? std::string()
                 : fmt::format(" ({:.2f} failed)", static_cast<double>(it->second.second) / f.keywords);
    };
    std::cout << fmt::format("  {:<38} {:>14} {:>14}\n", name, fmt::format("{:.2f}{}", per_kw(one, name), errors(one)),
                             fmt::format("{:.2f}{}", per_kw(many, name), errors(many)));
    data.row("{} {:.4f} {:.4f}", name, per_kw(one, name), per_kw(many, name));
  }
  auto total = [](const SyscallFigures& f) { return f.keywords ? static_cast<double>(f.total()) / f.keywords : 0.0; };
  std::cout << fmt::format("{:<40} {:>14.3f} {:>14.3f}   ({} and {} keywords traced)\n", "syscalls: total per keyword",
                           total(one), total(many), one.keywords, many.keywords);
  std::cout << fmt::format("{:<40} {:>14} {:>14}   {}\n", "syscalls target: <= 7 per keyword",
                           ratio_text(total(one), 7), ratio_text(total(many), 7),
                           total(one) <= 7 ? "met (1 session)" : "not met (1 session)");
  data.row("total {:.4f} {:.4f}", total(one), total(many));
}

void rss_phase(const Options& o, DataFile& data) {
  section(fmt::format("memory: the gateway's resident memory (VmRSS) per idle session, {} sessions open at once",
                      o.idle_sessions));
  auto shared = test_library("Shared");
  shared.extra_toml =
      fmt::format("isolation = \"shared\"\nmax_workers = 1\nmax_imports_per_worker = {}\n", o.idle_sessions + 16);
  std::cout << fmt::format("{:<48} {:>12} {:>12} {:>14}\n", "row", "before KiB", "after KiB", "bytes/session");
  for (const bool with_import : {false, true}) {
    // A fresh gateway for each row: memory freed by an earlier row would be reused, and hide the cost.
    auto gateway = start_gateway(o, {test_library(kLibrary), shared}, "");
    LoadGenerator load("127.0.0.1", gateway->port(), o.client_threads);
    // One session opened and closed first, so that what every session needs once is already there.
    load.open(1, with_import ? "Shared" : "");
    load.close();
    std::this_thread::sleep_for(200ms);
    const auto before = rss_bytes(gateway->pid());
    load.open(o.idle_sessions, with_import ? "Shared" : "");
    std::this_thread::sleep_for(200ms);
    const auto after = rss_bytes(gateway->pid());
    load.close();
    const double per =
        (static_cast<double>(after) - static_cast<double>(before)) / static_cast<double>(o.idle_sessions);
    const std::string label =
        with_import ? "rss per idle session, imported (shared worker)" : "rss per idle session (initialized)";
    std::cout << fmt::format("{:<48} {:>12} {:>12} {:>14.0f}\n", label, before / 1024, after / 1024, per);
    data.row("\"{}\" {:.1f}", with_import ? "imported (shared)" : "initialized", per);
    gateway->stop();
  }
}

void setup_phase(const Options& o, DataFile& data) {
  TempDir scratch("rjg-bench-setup");
  // Does this build's test worker take --import-delay? (--exit-on-start 0 ends it at once, with 0.)
  const bool delay_supported =
      o.import_delay_ms > 0 &&
      run_process({test_worker_binary(), "--import-delay", "1", "--exit-on-start", "0"}, scratch.path(), 30s)
          .exited_with(0);
  std::vector<std::string> worker_args;
  if (delay_supported) worker_args = {"--import-delay", std::to_string(o.import_delay_ms)};
  section(
      fmt::format("session set-up: connect, initialize, import, first Echo, on a new connection ({} per variant, "
                  "variants in turn); the worker's import takes {}",
                  o.setups,
                  delay_supported         ? fmt::format("{} ms (--import-delay)", o.import_delay_ms)
                  : o.import_delay_ms > 0 ? std::string("no time: --import-delay ") + kNotSupported
                                          : std::string("no extra time")));
  auto cold = test_library("Cold", worker_args);
  auto warm = test_library("Warm", worker_args);
  warm.extra_toml = "prewarm = 2\n";
  auto ahead = test_library("Ahead", worker_args);
  ahead.extra_toml = "prewarm = 2\nprewarm_import = true\n";
  std::unique_ptr<GatewayProcess> gateway;
  std::string ahead_problem;
  try {
    gateway = start_gateway(o, {cold, warm, ahead}, "", "info");
  } catch (const std::exception& e) {
    // An older gateway refuses the unknown key; measure the others.
    ahead_problem = last_line(e.what());
    if (ahead_problem.empty()) ahead_problem = "the gateway did not start";
    gateway = start_gateway(o, {cold, warm}, "", "info");
  }
  const bool with_ahead = ahead_problem.empty();
  const std::size_t prewarmed = with_ahead ? 4 : 2;

  struct Variant {
    std::string label, library;
    bool prewarmed;
    std::vector<double> import_ms, keyword_ms;
    int hits = 0;
  };
  std::vector<Variant> variants{{"setup: cold (prewarm = 0)", "Cold", false, {}, {}, 0},
                                {"setup: prewarmed (prewarm = 2)", "Warm", true, {}, {}, 0}};
  if (with_ahead) variants.push_back({"setup: imported ahead (prewarm_import)", "Ahead", true, {}, {}, 0});
  const std::string payload(o.payload_bytes, 'p');
  LoadGenerator load("127.0.0.1", gateway->port(), 1);
  auto measure = [&](Variant& v, bool record) {
    // Settled: the last session's worker gone, the prewarmed ones back (and done importing ahead).
    settle_gateway(*gateway, prewarmed);
    std::this_thread::sleep_for(std::chrono::milliseconds(50 + (delay_supported ? o.import_delay_ms : 0)));
    const std::string served = fmt::format("library {}: import served by prewarmed", v.library);
    const auto hits_before = count_of(gateway->log(), served);
    const auto t0 = Clock::now();
    load.open(1, v.library);
    const auto t1 = Clock::now();
    load.run(payload, 1, 0, false);
    const auto t2 = Clock::now();
    load.close();
    if (!record) return;
    v.import_ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    v.keyword_ms.push_back(std::chrono::duration<double, std::milli>(t2 - t0).count());
    if (count_of(gateway->log(), served) > hits_before) ++v.hits;
  };
  for (auto& v : variants) measure(v, false);
  for (int i = 0; i < o.setups; ++i)
    for (std::size_t k = 0; k < variants.size(); ++k)
      measure(variants[(k + static_cast<std::size_t>(i)) % variants.size()], true);

  std::cout << fmt::format("{:<42} {:>14} {:>14} {:>12} {:>12} {:>10}\n", "row", "to import ms", "+keyword ms",
                           "p99 ms", "mean ms", "warm hits");
  for (const auto& v : variants) {
    std::cout << fmt::format("{:<42} {:>14.2f} {:>14.2f} {:>12.2f} {:>12.2f} {:>10}\n", v.label,
                             percentile(v.import_ms, 50), percentile(v.keyword_ms, 50), percentile(v.keyword_ms, 99),
                             mean(v.keyword_ms), v.prewarmed ? fmt::format("{}/{}", v.hits, v.import_ms.size()) : "-");
    data.row("\"{}\" {:.3f} {:.3f} {:.3f}", v.library, percentile(v.import_ms, 50), percentile(v.keyword_ms, 50),
             percentile(v.keyword_ms, 99));
  }
  if (!with_ahead) {
    std::cout << fmt::format("{:<42} {}\n", "setup: imported ahead (prewarm_import)", kNotSupported);
    std::cout << "  the gateway refused prewarm_import: " << ahead_problem << "\n";
    data.row("\"Ahead\" ? ? ?");
  }
  const double cold50 = percentile(variants[0].keyword_ms, 50);
  std::cout << fmt::format("  cold/prewarmed p50 {}", ratio_text(cold50, percentile(variants[1].keyword_ms, 50)));
  if (with_ahead)
    std::cout << fmt::format(", cold/imported ahead p50 {}",
                             ratio_text(cold50, percentile(variants[2].keyword_ms, 50)));
  std::cout << " (to the first keyword's answer)\n";
  gateway->stop();
}

// ---------------------------------------------------------------------------------------------

void parse_options(int argc, char** argv, Options& o) {
  std::optional<std::string> only, skip;
  std::set<std::string> explicit_keys;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
      explicit_keys.insert(a);
      return argv[++i];
    };
    auto number = [&]() -> long {
      const std::string text = next();
      std::size_t used = 0;
      long value = -1;
      try {
        value = std::stol(text, &used);
      } catch (const std::exception&) {
      }
      if (used != text.size() || value < 0)
        throw std::invalid_argument(fmt::format("{} needs a number, not '{}'", a, text));
      return value;
    };
    if (a == "--help" || a == "-h") {
      std::cout << kUsage;
      std::exit(0);
    } else if (a == "--quick") {
      o.quick = true;
    } else if (a == "--only") {
      only = next();
    } else if (a == "--skip") {
      skip = next();
    } else if (a == "--data") {
      o.data_dir = next();
    } else if (a == "--payload-bytes") {
      o.payload_bytes = static_cast<std::size_t>(number());
    } else if (a == "--floor-round-trips") {
      o.floor_round_trips = static_cast<std::size_t>(number());
    } else if (a == "--rounds") {
      o.rounds = static_cast<int>(number());
    } else if (a == "--calls") {
      o.calls = static_cast<int>(number());
    } else if (a == "--sessions") {
      o.sessions.clear();
      for (const auto& n : split(next(), ',')) o.sessions.push_back(static_cast<std::size_t>(std::stoul(n)));
    } else if (a == "--seconds") {
      o.seconds = std::stod(next());
    } else if (a == "--shared-workers") {
      o.shared_workers = static_cast<std::size_t>(number());
    } else if (a == "--cpu-calls") {
      o.cpu_calls = static_cast<int>(number());
    } else if (a == "--strace-calls") {
      o.strace_calls = static_cast<int>(number());
    } else if (a == "--strace-sessions") {
      o.strace_sessions = static_cast<std::size_t>(number());
    } else if (a == "--idle-sessions") {
      o.idle_sessions = static_cast<std::size_t>(number());
    } else if (a == "--setups") {
      o.setups = static_cast<int>(number());
    } else if (a == "--import-delay") {
      o.import_delay_ms = static_cast<int>(number());
    } else if (a == "--client-threads") {
      o.client_threads = static_cast<unsigned>(number());
    } else if (a == "--log-level") {
      o.log_level = next();
    } else if (a == "--flood-stages") {
      o.flood_stages = static_cast<unsigned>(number());
    } else if (a == "--boost-flood-stages") {
      o.boost_flood_stages = static_cast<unsigned>(number());
    } else {
      throw std::invalid_argument("unknown option " + a);
    }
  }
  if (o.quick) {
    // Small counts, unless given explicitly: every row, in seconds.
    auto set = [&](const char* key, auto& field, auto value) {
      if (!explicit_keys.count(key)) field = value;
    };
    set("--floor-round-trips", o.floor_round_trips, std::size_t{500});
    set("--rounds", o.rounds, 2);
    set("--calls", o.calls, 100);
    set("--sessions", o.sessions, std::vector<std::size_t>{1, 4});
    set("--seconds", o.seconds, 0.2);
    o.warmup_seconds = 0.05;
    o.warmup_calls = 20;
    o.cpu_rounds = 1;
    set("--cpu-calls", o.cpu_calls, 200);
    set("--strace-calls", o.strace_calls, 200);
    set("--strace-sessions", o.strace_sessions, std::size_t{4});
    set("--idle-sessions", o.idle_sessions, std::size_t{50});
    set("--setups", o.setups, 2);
    set("--import-delay", o.import_delay_ms, 10);
    set("--flood-stages", o.flood_stages, 12u);
    set("--boost-flood-stages", o.boost_flood_stages, 10u);
  }
  auto phase_list = [](const std::string& text) {
    std::set<std::string> out;
    for (const auto& p : split(text, ',')) {
      if (std::find(kPhases.begin(), kPhases.end(), p) == kPhases.end())
        throw std::invalid_argument(fmt::format("unknown phase '{}'", p));
      out.insert(p);
    }
    return out;
  };
  if (only) o.phases = phase_list(*only);
  if (skip)
    for (const auto& p : phase_list(*skip)) o.phases.erase(p);
  if (o.rounds < 1 || o.calls < 1 || o.cpu_calls < 1 || o.strace_calls < 1 || o.setups < 1 || o.idle_sessions < 1 ||
      o.floor_round_trips < 1 || o.strace_sessions < 1 || o.seconds <= 0 || o.import_delay_ms < 0 ||
      o.sessions.empty() || o.client_threads < 1 || o.client_threads > 16)
    throw std::invalid_argument("counts must be positive");
  for (auto n : o.sessions)
    if (n < 1) throw std::invalid_argument("session counts must be positive");
  if (o.flood_stages > 20 || o.boost_flood_stages > 20) throw std::invalid_argument("flood stages go up to 20");
}

// Room for a thousand sessions' sockets here and in the gateway, which inherits the limit.
void raise_fd_limit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &limit);
  }
}

std::string machine_summary() {
  utsname u{};
  ::uname(&u);
  std::string load = read_file("/proc/loadavg");
  auto words = split(load, ' ');
  return fmt::format("{} cores, Linux {}, load average {}", std::thread::hardware_concurrency(), u.release,
                     words.size() >= 3 ? fmt::format("{} {} {}", words[0], words[1], words[2]) : std::string("?"));
}

// Says who ended the benchmark (on a shared machine not always the one who started it), and ends the
// servers it started, which would otherwise outlive it: a gateway with its workers, the direct worker.
// Only async-signal-safe calls.
void on_termination(int sig, siginfo_t* info, void*) {
  char text[96] = "\nrjg-bench: ended by signal ";
  std::size_t n = std::strlen(text);
  auto append_number = [&](long v) {
    char digits[24];
    int k = 0;
    do digits[k++] = static_cast<char>('0' + v % 10);
    while ((v /= 10) > 0 && k < 23);
    while (k > 0 && n < sizeof text - 1) text[n++] = digits[--k];
  };
  append_number(sig);
  for (const char* p = " from pid "; *p && n < sizeof text - 1; ++p) text[n++] = *p;
  append_number(info ? info->si_pid : 0);
  if (n < sizeof text - 1) text[n++] = '\n';
  (void)!::write(STDERR_FILENO, text, n);
  for (auto& slot : g_servers) {
    const pid_t pid = slot.load();
    siginfo_t child{};
    // Still a child of this process (not reaped, so its pid was not reused): end it.
    if (pid > 0 && ::waitid(P_PID, static_cast<id_t>(pid), &child, WEXITED | WNOHANG | WNOWAIT) == 0)
      ::kill(pid, SIGTERM);
  }
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

}  // namespace

int main(int argc, char** argv) {
  ::signal(SIGPIPE, SIG_IGN);
  struct sigaction action {};
  action.sa_sigaction = on_termination;
  action.sa_flags = SA_SIGINFO | SA_RESETHAND;
  ::sigaction(SIGTERM, &action, nullptr);
  ::sigaction(SIGINT, &action, nullptr);
  Options o;
  try {
    parse_options(argc, argv, o);
  } catch (const std::exception& e) {
    std::cerr << "rjg-bench: " << e.what() << "\n\n" << kUsage;
    return 2;
  }
  raise_fd_limit();
  if (!o.data_dir.empty()) {
    std::error_code ec;
    fs::create_directories(o.data_dir, ec);
  }
  auto has = [&](const char* phase) { return o.phases.count(phase) > 0; };

  std::cout << fmt::format("rjg-bench{}: {}\ngateway: {}\nworker:  {}\n", o.quick ? " --quick" : "", machine_summary(),
                           gateway_binary(), test_worker_binary())
            << "Absolute numbers vary between runs and machines: compare the ratios, measured in the same run.\n";
  int failed = 0;
  auto phase = [&](const char* name, auto&& body) {
    if (!has(name)) return;
    try {
      body();
    } catch (const std::exception& e) {
      ++failed;
      std::cout << fmt::format("{}: failed: {}\n", name, e.what()) << std::flush;
    }
    std::cout << std::flush;
  };

  phase("parser", [&] {
    section("parser: one frame of keys crafted to collide in Boost.JSON's hash table vs ordinary keys");
    parser_flood_report(o.flood_stages, o.boost_flood_stages, std::cout);
  });

  std::optional<DataFile> latency_data, throughput_data, cpu_data, syscall_data, rss_data, setup_data;
  try {
    latency_data.emplace(o, "latency.dat", "label p50_us p99_us (floor: ping-pong round trips; keywords: Echo)");
    throughput_data.emplace(o, "throughput.dat",
                            "sessions direct_kw_per_s gateway_threads1_kw_per_s gateway_default_kw_per_s");
    cpu_data.emplace(o, "cpu.dat", "label cpu_us_per_keyword");
    syscall_data.emplace(
        o, "syscalls.dat",
        fmt::format("syscall calls_per_keyword_1_session calls_per_keyword_{}_sessions", o.strace_sessions));
    rss_data.emplace(o, "rss.dat", "label gateway_rss_bytes_per_idle_session");
    setup_data.emplace(o, "setup.dat", "library p50_to_import_ms p50_to_first_keyword_ms p99_to_first_keyword_ms");
  } catch (const std::exception& e) {
    std::cerr << "rjg-bench: " << e.what() << "\n";
    return 2;
  }

  Servers servers(o);
  Floor floor;
  if (has("floor") || has("latency")) {
    // The latency rows are compared with the floor, so it is measured for them too.
    try {
      floor = measure_floor(o);
      if (has("floor")) print_floor(o, floor);
      latency_data->row("\"pipe floor\" {:.3f} {:.3f}", percentile(floor.pipe_us, 50), percentile(floor.pipe_us, 99));
      latency_data->row("\"TCP floor\" {:.3f} {:.3f}", percentile(floor.tcp_us, 50), percentile(floor.tcp_us, 99));
    } catch (const std::exception& e) {
      ++failed;
      std::cout << "floor: failed: " << e.what() << "\n";
    }
  }
  phase("latency", [&] { latency_phase(o, servers, floor, *latency_data); });
  phase("throughput", [&] { throughput_phase(o, servers, *throughput_data); });
  phase("cpu", [&] { cpu_phase(o, servers, *cpu_data); });
  phase("syscalls", [&] { syscalls_phase(o, servers, *syscall_data); });
  phase("rss", [&] { rss_phase(o, *rss_data); });
  phase("setup", [&] { setup_phase(o, *setup_data); });

  if (servers.gateway) servers.gateway->stop();
  if (servers.single) servers.single->stop();
  if (failed) std::cout << fmt::format("\nrjg-bench: {} phase(s) failed (see above)\n", failed);
  return failed ? 3 : 0;
}
