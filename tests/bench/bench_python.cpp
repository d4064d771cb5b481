// rjg-bench-python: Python's reference server (robot_jsonrpcremote_server) through the gateway against
// the same server reached directly over TCP, in one run (issue 25's figures):
//
//   latency     one session calling Echo back to back: p50 and p99, gateway and direct in turn;
//   sessions    N sessions calling Echo back to back: keywords per second and CPU per keyword, the
//               gateway with one worker process per session (`isolation = "session"`, each worker the
//               server over its stdin and stdout) against one server process serving every session,
//               and against N server processes over TCP with one session each (no gateway: what a
//               process per session costs by itself);
//   syscalls    system calls per keyword (strace -c -f) of the server over TCP, and of the gateway
//               and its worker, the same server over pipes;
//   startup     per session, one after another: set-up time (connect, import, first keyword) and the
//               worker's private memory after 200 keywords (/proc/PID/smaps_rollup), workers started
//               cold, prewarmed, forked from a fork server (fork_server = true), and both.
//
// CPU per keyword is every thread's time on a CPU (/proc/PID/task/*/schedstat) over the measured
// window: the gateway plus its workers against the direct server; the load generator is not counted.
// Needs the real peers (`pip install robotframework robotframework-jsonrpcremote-server`, or them on
// PYTHONPATH); without them it says so in one line and exits 0. It never fails on numbers.
#include "common/process/child.hpp"
#include "tests/bench/figures.hpp"
#include "tests/bench/loadgen.hpp"
#include "tests/bench/probes.hpp"
#include "tests/integration/harness.hpp"

#include <fmt/format.h>
#include <signal.h>

#include <algorithm>
#include <functional>
#include <set>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace rjg::test;
using namespace rjg::bench;

constexpr const char* kLibrary = "BenchEchoLibrary";

// The library both targets serve: Echo returns its argument, Get Pid names the process that ran it.
constexpr const char* kLibrarySource = R"(import os


class BenchEchoLibrary:
    def echo(self, value):
        return value

    def get_pid(self):
        return os.getpid()
)";

struct Options {
  std::string python = "python3";
  int rounds = 6;
  int calls = 500;
  int warmup_calls = 100;
  std::vector<std::size_t> sessions{1, 8, 32};
  double seconds = 3;
  double warmup_seconds = 1;
  std::size_t payload_bytes = 16;
  int strace_calls = 2000;
  std::string cpu_affinity;  // the gateway library's cpu_affinity; empty: left out ("any")
  bool fork_server = false;  // the gateway library's fork_server (latency, sessions, syscalls)
  std::size_t shared_workers = 0;  // sessions rows: 0 = a worker per session; else isolation "shared"
  std::size_t startup_sessions = 8;  // startup rows: sessions per kind of start
  int startup_keywords = 200;
  std::chrono::milliseconds refill_pause{2500};  // startup: before each prewarmed session, for the pool to refill
  std::string only;  // one section: latency, sessions, syscalls, startup; empty: all
};

constexpr std::string_view kUsage = R"(Usage: rjg-bench-python [--quick] [options]

Python's reference server through the gateway (a worker per session, over its stdin and stdout) against
the same server reached directly over TCP, in one run: keyword latency with one session, and keywords
per second and CPU per keyword with N sessions calling Echo back to back. Needs python3 to import
robot_jsonrpcremote_server (and Robot Framework); skipped, with exit code 0, when it cannot.

Options (defaults in brackets):
  --quick                 small counts: every row in well under a minute
  --python PATH           the interpreter of both targets [python3]
  --rounds N --calls N    latency: rounds of N calls each, gateway and direct in turn [6, 500]
  --sessions LIST         sessions rows: session counts [1,8,32]
  --seconds S             sessions rows: measured seconds per target, after 1 s of warm-up [3]
  --cpu-affinity MODE     the gateway library's cpu_affinity ("one": each worker on one CPU) [any]
  --fork-server           the gateway library's workers forked from a template (fork_server = true)
  --shared-workers N      sessions rows: isolation = "shared" with N workers, the sessions spread evenly
                          over them (a fresh gateway per row), instead of a worker per session [0]
  --strace-calls N        syscalls: sequential calls traced per target (strace -c -f) [2000]
  --payload-bytes N       Echo's argument [16]
  --startup-sessions N    startup: sessions per kind of start (cold, prewarmed, forked, both) [8]
  --only SECTION          one section: latency, sessions, syscalls or startup [all]
)";

std::vector<std::size_t> size_list(const std::string& text) {
  std::vector<std::size_t> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    const auto comma = std::min(text.find(',', start), text.size());
    const auto item = text.substr(start, comma - start);
    const long n = std::strtol(item.c_str(), nullptr, 10);
    if (n <= 0) throw std::invalid_argument("not a positive count: '" + item + "'");
    out.push_back(static_cast<std::size_t>(n));
    start = comma + 1;
  }
  return out;
}

Options parse_options(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
      return argv[++i];
    };
    if (a == "--quick") {
      o.rounds = 2;
      o.calls = 100;
      o.warmup_calls = 20;
      o.sessions = {1, 2};
      o.seconds = 1;
      o.warmup_seconds = 0.5;
      o.strace_calls = 200;
      o.startup_sessions = 1;
      o.startup_keywords = 50;
      o.refill_pause = 1s;
    } else if (a == "--startup-sessions") {
      o.startup_sessions = static_cast<std::size_t>(std::clamp(std::atoi(next().c_str()), 1, 64));
    } else if (a == "--only") {
      o.only = next();
      if (o.only != "latency" && o.only != "sessions" && o.only != "syscalls" && o.only != "startup")
        throw std::invalid_argument("--only takes latency, sessions, syscalls or startup, not '" + o.only + "'");
    } else if (a == "--python") {
      o.python = next();
    } else if (a == "--rounds") {
      o.rounds = std::max(1, std::atoi(next().c_str()));
    } else if (a == "--calls") {
      o.calls = std::max(1, std::atoi(next().c_str()));
    } else if (a == "--sessions") {
      o.sessions = size_list(next());
    } else if (a == "--seconds") {
      o.seconds = std::max(0.1, std::atof(next().c_str()));
    } else if (a == "--shared-workers") {
      o.shared_workers = static_cast<std::size_t>(std::max(0, std::atoi(next().c_str())));
    } else if (a == "--fork-server") {
      o.fork_server = true;
    } else if (a == "--cpu-affinity") {
      o.cpu_affinity = next();
    } else if (a == "--strace-calls") {
      o.strace_calls = std::max(1, std::atoi(next().c_str()));
    } else if (a == "--payload-bytes") {
      o.payload_bytes = static_cast<std::size_t>(std::max(0, std::atoi(next().c_str())));
    } else if (a == "--help" || a == "-h") {
      std::cout << kUsage;
      std::exit(0);
    } else {
      throw std::invalid_argument("unknown option '" + a + "' (see --help)");
    }
  }
  return o;
}

// The reference server serving TCP by itself: the direct target. Bound to `cpu` when given (taskset), as
// the gateway binds a worker under cpu_affinity = "one". Waits until it listens, unless `wait` is false
// (then wait_listening() does: many can start at once).
class DirectServer {
 public:
  DirectServer(const Options& o, const fs::path& library_dir, std::optional<int> cpu = {}, bool wait = true)
      : port_(free_port()) {
    std::vector<std::string> argv{"/usr/bin/env"};
    if (cpu) argv.insert(argv.end(), {"taskset", "-c", std::to_string(*cpu)});
    argv.insert(argv.end(), {o.python, "-m", "robot_jsonrpcremote_server", "--tcp", "--bind", "127.0.0.1", "--port",
                             std::to_string(port_), "--pythonpath", library_dir.string(), kLibrary});
    process_.start(argv, dir_.path() / "server.stdout", dir_.path() / "server.stderr");
    if (wait) wait_listening();
  }
  void wait_listening() {
    if (!eventually([&] { return can_connect(port_) || !process_.running(); }, 120s, 20ms) || !process_.running())
      throw std::runtime_error("the reference server did not listen on port " + std::to_string(port_) + ": " +
                               read_file(dir_.path() / "server.stderr"));
  }
  ~DirectServer() { process_.kill_and_reap(); }
  std::uint16_t port() const { return port_; }
  pid_t pid() const { return process_.pid(); }

 private:
  TempDir dir_{"rjg-bench-python"};
  std::uint16_t port_;
  ChildProcess process_;
};

// The gateway's library: the server over its stdin and stdout, with o.cpu_affinity and `extra_toml`.
LibrarySpec python_library(const Options& o, const fs::path& library_dir, const std::string& extra_toml = "") {
  auto library = command_library(kLibrary, {o.python, "-m", "robot_jsonrpcremote_server", "--stdio", "--pythonpath",
                                            library_dir.string(), kLibrary});
  if (!o.cpu_affinity.empty()) library.extra_toml = fmt::format("cpu_affinity = \"{}\"\n", o.cpu_affinity);
  if (o.fork_server) library.extra_toml += "fork_server = true\n";
  library.extra_toml += extra_toml;
  return library;
}

std::unique_ptr<GatewayProcess> start_gateway(LibrarySpec library) {
  GatewayOptions gopts;
  gopts.log_level = "warn";
  gopts.extra_gateway_toml = "max_sessions = 0\nmax_sessions_per_client = 0\nmax_workers = 0\n";
  auto gateway = std::make_unique<GatewayProcess>(std::vector<LibrarySpec>{std::move(library)}, gopts);
  gateway->start();
  return gateway;
}

// CPU time of the gateway and of its workers, in nanoseconds.
std::uint64_t gateway_cpu_ns(const GatewayProcess& gateway, const std::vector<pid_t>& workers) {
  std::uint64_t ns = cpu_ns(gateway.pid());
  for (pid_t w : workers) ns += cpu_ns(w);
  return ns;
}

// Whether pid is a fork server's template (fork_server = true): a child of the gateway, not a worker. Its
// workers have its command line (they are forks, not programs started afresh); the template alone has
// its control socket, not a pipe, as stdin.
bool is_template(pid_t pid) {
  std::error_code ec;
  return contains(read_file(fmt::format("/proc/{}/cmdline", pid)), "robot_jsonrpc_fork_server") &&
         fs::read_symlink(fmt::format("/proc/{}/fd/0", pid), ec).string().starts_with("socket:");
}

std::vector<pid_t> workers_of(const GatewayProcess& gateway) {
  std::vector<pid_t> out;
  for (const auto& child : children_of(gateway.pid()))
    if (child.state != 'Z' && !is_template(child.pid)) out.push_back(child.pid);
  return out;
}

void latency(const Options& o, GatewayProcess& gateway, DirectServer& direct) {
  std::cout << fmt::format(
      "\n== latency: Echo ({}-byte argument), one session, sequential; {} rounds x {} calls, gateway and direct in "
      "turn\n",
      o.payload_bytes, o.rounds, o.calls);
  const std::string payload(o.payload_bytes, 'p');
  LoadGenerator via_gateway("127.0.0.1", gateway.port(), 1), via_direct("127.0.0.1", direct.port(), 1);
  via_gateway.open(1, kLibrary, 300s);
  via_direct.open(1, kLibrary, 300s);
  via_gateway.run(payload, static_cast<std::uint64_t>(o.warmup_calls), 0, false);
  via_direct.run(payload, static_cast<std::uint64_t>(o.warmup_calls), 0, false);
  auto [g, d, failures] = paired_latencies(via_gateway, via_direct, payload, o.rounds, o.calls);
  via_gateway.close();
  via_direct.close();
  std::cout << fmt::format("{:<44} {:>10} {:>10} {:>10} {:>10}\n", "row", "p50 us", "p90 us", "p99 us", "mean us");
  for (auto [label, v] : {std::pair{"python latency: direct (TCP to the server)", &d},
                          std::pair{"python latency: gateway (server as worker)", &g}})
    std::cout << fmt::format("{:<44} {:>10.0f} {:>10.0f} {:>10.0f} {:>10.0f}\n", label, percentile(*v, 50),
                             percentile(*v, 90), percentile(*v, 99), mean(*v));
  std::cout << fmt::format("{:<44} {:>10.0f}   gateway/direct: p50 {}, p99 {} (issue 25's target: p50 at most x1.25)\n",
                           "python latency: added over direct (p50 us)", percentile(g, 50) - percentile(d, 50),
                           ratio_text(percentile(g, 50), percentile(d, 50)),
                           ratio_text(percentile(g, 99), percentile(d, 99)));
  if (failures) std::cout << fmt::format("  ({} calls failed)\n", failures);
}

struct Measured {
  double per_second = 0;
  double cpu_us_per_keyword = 0;  // every process of the target
  double own_cpu_us_per_keyword = 0;  // the gateway's own share (gateway target only)
  std::uint64_t failures = 0;
};

void sessions(const Options& o, GatewayProcess& per_session, DirectServer& direct, const fs::path& library_dir) {
  std::cout << fmt::format(
      "\n== sessions: N sessions each calling Echo back to back ({} s measured after {} s of warm-up). Gateway: {}; "
      "direct: one server process serving every session; procs: a server process per session over TCP, no gateway. "
      "CPU: every thread of the target's processes over the measured window.\n",
      o.seconds, o.warmup_seconds,
      o.shared_workers ? fmt::format("isolation = \"shared\", {} workers, the sessions spread evenly over them",
                                     o.shared_workers)
                       : std::string("one worker process per session"));
  std::cout << fmt::format("{:<22} {:>11} {:>11} {:>9} {:>12} {:>12} {:>12} {:>11} {:>11} {:>9}\n", "row",
                           "direct kw/s", "gateway kw/s", "gw/direct", "direct us/kw", "gateway us/kw", "of it gw us",
                           "procs kw/s", "procs us/kw", "gw/procs");
  const std::string payload(o.payload_bytes, 'p');
  for (std::size_t n : o.sessions) {
    // Shared workers: a gateway per row, whose max_imports_per_worker spreads the row's sessions (an
    // import takes an idle worker with room first), opened one at a time.
    std::unique_ptr<GatewayProcess> shared;
    if (o.shared_workers)
      shared = start_gateway(python_library(
          o, library_dir,
          fmt::format("isolation = \"shared\"\nmax_workers = {}\nmax_imports_per_worker = {}\n", o.shared_workers,
                      (n + o.shared_workers - 1) / o.shared_workers)));
    GatewayProcess& gateway = shared ? *shared : per_session;
    Measured d, g, p;
    auto measure_direct = [&] {
      LoadGenerator load("127.0.0.1", direct.port(), 1);
      load.open(n, kLibrary, 300s);
      load.run(payload, 0, o.warmup_seconds, false);
      const auto cpu0 = cpu_ns(direct.pid());
      auto stats = load.run(payload, 0, o.seconds, false);
      const auto cpu1 = cpu_ns(direct.pid());
      load.close();
      const double keywords = static_cast<double>(std::max<std::uint64_t>(1, stats.calls + stats.failures));
      d = {stats.per_second(), static_cast<double>(cpu1 - cpu0) / 1e3 / keywords, 0, stats.failures};
    };
    auto measure_gateway = [&] {
      LoadGenerator load("127.0.0.1", gateway.port(), 1);
      load.open(n, kLibrary, 600s, shared ? 1 : 32);
      load.run(payload, 0, o.warmup_seconds, false);
      const auto workers = workers_of(gateway);
      const auto own0 = cpu_ns(gateway.pid()), all0 = gateway_cpu_ns(gateway, workers);
      auto stats = load.run(payload, 0, o.seconds, false);
      const auto own1 = cpu_ns(gateway.pid()), all1 = gateway_cpu_ns(gateway, workers);
      load.close();
      const double keywords = static_cast<double>(std::max<std::uint64_t>(1, stats.calls + stats.failures));
      g = {stats.per_second(), static_cast<double>(all1 - all0) / 1e3 / keywords,
           static_cast<double>(own1 - own0) / 1e3 / keywords, stats.failures};
      // The next row starts with no worker left over from this one (shared ones end with their gateway).
      if (!shared && !eventually([&] { return workers_of(gateway).empty(); }, 120s, 20ms))
        std::cerr << "rjg-bench-python: the gateway's workers did not end within 120 s; going on\n";
    };
    // Isolation without the gateway: n server processes over TCP, one session each (bound like the
    // gateway's workers under cpu_affinity = "one"). What a process per session costs on this machine,
    // whoever relays to it: against the gateway's row, the gateway's own part.
    auto measure_processes = [&] {
      const auto cpus = rjg::process::allowed_cpus();
      std::vector<std::unique_ptr<DirectServer>> servers;
      std::vector<std::uint16_t> ports;
      std::vector<pid_t> pids;
      for (std::size_t i = 0; i < n; ++i) {
        std::optional<int> cpu;
        if (o.cpu_affinity == "one" && !cpus.empty()) cpu = cpus[i % cpus.size()];
        servers.push_back(std::make_unique<DirectServer>(o, library_dir, cpu, false));
      }
      for (auto& server : servers) {
        server->wait_listening();
        ports.push_back(server->port());
        pids.push_back(server->pid());
      }
      auto cpu_of_all = [&] {
        std::uint64_t ns = 0;
        for (pid_t pid : pids) ns += cpu_ns(pid);
        return ns;
      };
      LoadGenerator load("127.0.0.1", ports, 1);
      load.open(n, kLibrary, 600s);
      load.run(payload, 0, o.warmup_seconds, false);
      const auto cpu0 = cpu_of_all();
      auto stats = load.run(payload, 0, o.seconds, false);
      const auto cpu1 = cpu_of_all();
      load.close();
      const double keywords = static_cast<double>(std::max<std::uint64_t>(1, stats.calls + stats.failures));
      p = {stats.per_second(), static_cast<double>(cpu1 - cpu0) / 1e3 / keywords, 0, stats.failures};
    };
    if (n % 2) measure_direct(), measure_gateway(), measure_processes();
    else measure_processes(), measure_gateway(), measure_direct();
    std::cout << fmt::format("{:<22} {:>11.0f} {:>11.0f} {:>9} {:>12.0f} {:>12.0f} {:>12.0f} {:>11.0f} {:>11.0f} {:>9}\n",
                             fmt::format("python: {} session{}", n, n == 1 ? "" : "s"), d.per_second, g.per_second,
                             ratio_text(g.per_second, d.per_second), d.cpu_us_per_keyword, g.cpu_us_per_keyword,
                             g.own_cpu_us_per_keyword, p.per_second, p.cpu_us_per_keyword,
                             ratio_text(g.per_second, p.per_second))
              << std::flush;
    if (d.failures || g.failures || p.failures)
      std::cout << fmt::format("  ({} direct, {} gateway and {} process-per-session calls failed)\n", d.failures,
                               g.failures, p.failures);
  }
}

// System calls per keyword (strace -c -f) of the server over TCP, and of the gateway and its worker (the
// same server over pipes), while one session calls Echo back to back: where the two meet, call by call.
void syscalls(const Options& o, GatewayProcess& gateway, DirectServer& direct) {
  std::cout << fmt::format(
      "\n== syscalls: strace -c -f attached while one session runs {} sequential Echo calls: per keyword\n",
      o.strace_calls);
  const std::string payload(o.payload_bytes, 'p');
  auto count = [&](std::uint16_t port, const std::vector<pid_t>& pids_of_worker, bool through_gateway) {
    LoadGenerator load("127.0.0.1", port, 1);
    load.open(1, kLibrary, 300s);
    load.run(payload, static_cast<std::uint64_t>(o.warmup_calls), 0, false);
    std::vector<pid_t> pids = pids_of_worker;
    if (through_gateway) {
      pids = {gateway.pid(), load.worker_pid(0)};
    }
    std::vector<SyscallCounts> counts(pids.size());
    // Nested: every process is traced during the same calls.
    std::function<void(std::size_t)> traced = [&](std::size_t i) {
      if (i == pids.size()) {
        load.run(payload, static_cast<std::uint64_t>(o.strace_calls), 0, false);
        return;
      }
      counts[i] = count_syscalls(pids[i], [&] { traced(i + 1); });
    };
    traced(0);
    load.close();
    if (through_gateway && !eventually([&] { return workers_of(gateway).empty(); }, 60s, 20ms))
      std::cerr << "rjg-bench-python: the gateway's worker did not end within 60 s; going on\n";
    return counts;
  };
  std::vector<SyscallCounts> d, g;
  try {
    d = count(direct.port(), {direct.pid()}, false);
    g = count(gateway.port(), {}, true);
  } catch (const StraceUnusable& e) {
    std::cout << "syscalls: skipped: " << e.what() << "\n";
    return;
  }
  std::set<std::string> names;
  for (const auto* list : {&d, &g})
    for (const auto& c : *list)
      for (const auto& [name, entry] : c.by_name) names.insert(name);
  const double k = o.strace_calls;
  auto cell = [&](const SyscallCounts& c, const std::string& name) {
    auto it = c.by_name.find(name);
    return it == c.by_name.end() ? std::string("-") : fmt::format("{:.2f}", it->second.calls / k);
  };
  std::cout << fmt::format("{:<20} {:>16} {:>16} {:>16}\n", "call", "server over TCP", "its worker (pipes)",
                           "the gateway");
  for (const auto& name : names)
    std::cout << fmt::format("{:<20} {:>16} {:>16} {:>16}\n", name, cell(d[0], name), cell(g[1], name),
                             cell(g[0], name));
  std::cout << fmt::format("{:<20} {:>16.2f} {:>16.2f} {:>16.2f}\n", "total", d[0].total / k, g[1].total / k,
                           g[0].total / k);
}

// Private memory of a process (Private_Clean + Private_Dirty of /proc/PID/smaps_rollup), in bytes; 0 when
// it cannot be read.
std::uint64_t private_bytes(pid_t pid) {
  std::ifstream in(fmt::format("/proc/{}/smaps_rollup", pid));
  std::uint64_t kib = 0;
  for (std::string line; std::getline(in, line);)
    if (line.starts_with("Private_Clean:") || line.starts_with("Private_Dirty:"))
      kib += std::strtoull(line.c_str() + line.find(':') + 1, nullptr, 10);
  return kib * 1024;
}

// Set-up per session and memory per worker, by kind of start: each session in turn connects, imports and
// runs its first keyword (the set-up time), then 200 more; the worker's private memory is read with every
// session still open. A first session, not counted, warms the disk cache (and waits for the template).
void startup(const Options& o, const fs::path& library_dir) {
  const std::size_t n = o.startup_sessions;
  std::cout << fmt::format(
      "\n== startup: {} sessions one after another per kind of start; set-up = connect, import and the first "
      "keyword; private memory (smaps_rollup) of each worker after {} keywords, all sessions open\n",
      n, o.startup_keywords);
  std::cout << fmt::format("{:<38} {:>12} {:>12} {:>14} {:>14}\n", "row", "p50 ms", "max ms", "private MiB",
                           "of template");
  struct Row {
    double p50_ms = 0;
    double private_mib = 0;
  };
  Options each = o;
  each.fork_server = false;  // set row by row below
  const std::size_t prewarm = std::min<std::size_t>(n, 4);
  auto run = [&](const char* label, const std::string& toml) {
    auto gateway = start_gateway(python_library(each, library_dir, toml));
    // The pool as it runs for hours, not as it starts: one session before the measured ones, and with
    // prewarm, first the workers it started with, so that those measured are started as later ones are
    // (a fork server's template has learned then which pages its workers copy: PagePlan in
    // workers/fork_server/robot_jsonrpc_fork_control.py).
    const bool prewarming = toml.find("prewarm") != std::string::npos;
    for (std::size_t i = 0; i < (prewarming ? prewarm + 1 : 1); ++i) {
      auto c = gateway->connect();
      const auto token = open_library(c, kLibrary);
      c.run_keyword(token, "Echo", json::array{"warm"});
    }
    std::vector<double> setup_ms;
    std::vector<std::pair<rjg::client::RpcClient, std::string>> open;
    for (std::size_t i = 0; i < n; ++i) {
      // A prewarmed worker is started again after each import: give it the time a quiet pool would have.
      if (prewarming) std::this_thread::sleep_for(o.refill_pause);
      const auto t0 = Clock::now();
      auto c = gateway->connect();
      const auto token = open_library(c, kLibrary);
      const auto first = c.run_keyword(token, "Echo", json::array{"first"});
      setup_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
      if (!first.ok() || first.keyword_error()) throw std::runtime_error("startup: first keyword failed: " + describe(first));
      open.emplace_back(std::move(c), token);
    }
    std::vector<double> mib;
    for (auto& [c, token] : open) {
      for (int k = 0; k < o.startup_keywords; ++k) c.run_keyword(token, "Echo", json::array{k});
      const auto pid = static_cast<pid_t>(as_int(keyword_value(c.run_keyword(token, "Get Pid"))));
      mib.push_back(static_cast<double>(private_bytes(pid)) / (1024.0 * 1024.0));
    }
    std::string template_mib = "-";
    for (const auto& child : children_of(gateway->pid()))
      if (is_template(child.pid))
        template_mib = fmt::format("{:.1f}", static_cast<double>(private_bytes(child.pid)) / (1024.0 * 1024.0));
    const Row row{percentile(setup_ms, 50), mean(mib)};
    std::cout << fmt::format("{:<38} {:>12.0f} {:>12.0f} {:>14.1f} {:>14}\n", fmt::format("python startup: {}", label),
                             row.p50_ms, *std::max_element(setup_ms.begin(), setup_ms.end()), row.private_mib,
                             template_mib)
              << std::flush;
    return row;
  };
  const Row cold = run("cold", "");
  const Row prewarmed = run("prewarmed", fmt::format("prewarm = {}\n", prewarm));
  const Row forked = run("forked (fork_server)", "fork_server = true\n");
  const Row both = run("forked and prewarmed", fmt::format("fork_server = true\nprewarm = {}\n", prewarm));
  std::cout << fmt::format("forked/cold: set-up p50 {}, private memory {} (issue 25's targets: at most 50 ms and 8 MiB); "
                           "forked/prewarmed set-up {}\n",
                           ratio_text(forked.p50_ms, cold.p50_ms), ratio_text(forked.private_mib, cold.private_mib),
                           ratio_text(forked.p50_ms, prewarmed.p50_ms));
  std::cout << fmt::format("forked and prewarmed/cold: set-up p50 {}, private memory {}\n",
                           ratio_text(both.p50_ms, cold.p50_ms), ratio_text(both.private_mib, cold.private_mib));
}

}  // namespace

int main(int argc, char** argv) {
  ::signal(SIGPIPE, SIG_IGN);
  Options o;
  try {
    o = parse_options(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "rjg-bench-python: " << e.what() << "\n";
    return 2;
  }
  TempDir scratch("rjg-bench-python");
  auto probe = run_process({"/usr/bin/env", o.python, "-c", "import robot, robot_jsonrpcremote_server"},
                           scratch.path(), 60s);
  if (!probe.exited_with(0)) {
    std::cout << fmt::format("rjg-bench-python: skipped: `{} -c 'import robot, robot_jsonrpcremote_server'` failed "
                             "({}: {}): install robotframework and robotframework-jsonrpcremote-server, or put them on "
                             "PYTHONPATH\n",
                             o.python, probe.timed_out ? "timed out" : describe_status(probe.status),
                             last_line(probe.err));
    return 0;
  }
  const fs::path library_dir = scratch.path() / "library";
  fs::create_directories(library_dir);
  std::ofstream(library_dir / (std::string(kLibrary) + ".py")) << kLibrarySource;
  try {
    DirectServer direct(o, library_dir);
    auto gateway_holder = start_gateway(python_library(o, library_dir));
    GatewayProcess& gateway = *gateway_holder;
    std::cout << fmt::format("rjg-bench-python: {} -m robot_jsonrpcremote_server, library {} (Echo, Get Pid); {} "
                             "cores; the gateway's workers: cpu_affinity = \"{}\"{}\n",
                             o.python, kLibrary, std::thread::hardware_concurrency(),
                             o.cpu_affinity.empty() ? "any" : o.cpu_affinity, o.fork_server ? ", fork_server = true" : "");
    auto wanted = [&](std::string_view section) { return o.only.empty() || o.only == section; };
    if (wanted("latency")) latency(o, gateway, direct);
    if (wanted("sessions")) sessions(o, gateway, direct, library_dir);
    if (wanted("syscalls")) syscalls(o, gateway, direct);
    if (wanted("startup")) startup(o, library_dir);
  } catch (const std::exception& e) {
    std::cerr << "rjg-bench-python: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
