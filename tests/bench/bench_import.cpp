// rjg-bench-import: what prewarming buys. One real gateway serves the same worker twice, as a cold
// library (prewarm = 0: every import starts a worker) and as a prewarmed one (prewarm = 2: an import
// takes a worker that is already running and initialized). Each measured import is a new client
// session: connect, robot/initialize, robot/initialized, robot/import_library, until the import's
// answer. Cold and warm imports alternate in one run, each after the gateway has settled (finished
// workers gone, the prewarmed ones refilled), so that both see the same machine. The native test
// worker is always measured; Python's reference server too when `python3 -c 'import
// robot_jsonrpcremote_server'` works. Prints a table; never fails on numbers.
#include "common/client/client.hpp"
#include "tests/bench/figures.hpp"
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

using namespace rjg::client;
using namespace rjg::test;
using namespace rjg::bench;
using Clock = std::chrono::steady_clock;

struct Options {
  int imports = 40;
  int warmup = 3;
  std::string python = "python3";
  std::string python_library = "String";
};

constexpr std::string_view kUsage =
    R"(Usage: rjg-bench-import [--imports N] [--warmup N] [--python PATH] [--python-library NAME]

Measures import latency (connect + initialize + import, one new session per import) through the real
gateway for a cold library (prewarm = 0) and the same library prewarmed (prewarm = 2), alternating,
and prints p50, p99, mean, min and max in milliseconds. The native test worker is always measured;
Python's reference server (python3 -m robot_jsonrpcremote_server --stdio LIBRARY) when it is installed.
Defaults: --imports 40 --warmup 3 --python python3 --python-library String.
)";

struct Variant {
  std::string label;    // for the table
  std::string library;  // configured name
  bool warm = false;
  std::vector<double> ms;
  int hits = 0;  // imports the gateway logged as served by a prewarmed worker
  int failures = 0;
  std::string last_error;
};

// Lines of the gateway's log that contain both a and b (in that order).
std::size_t count_lines(const std::string& log, const std::string& a, const std::string& b) {
  std::size_t n = 0, start = 0;
  while (start < log.size()) {
    auto end = log.find('\n', start);
    if (end == std::string::npos) end = log.size();
    std::string_view line(log.data() + start, end - start);
    auto at = line.find(a);
    if (at != std::string_view::npos && line.find(b, at + a.size()) != std::string_view::npos) ++n;
    start = end + 1;
  }
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  ::signal(SIGPIPE, SIG_IGN);
  Options o;
  try {
    for (int i = 1; i < argc; ++i) {
      std::string a = argv[i];
      auto next = [&]() -> std::string {
        if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
        return argv[++i];
      };
      if (a == "--help" || a == "-h") {
        std::cout << kUsage;
        return 0;
      } else if (a == "--imports") {
        o.imports = std::stoi(next());
      } else if (a == "--warmup") {
        o.warmup = std::stoi(next());
      } else if (a == "--python") {
        o.python = next();
      } else if (a == "--python-library") {
        o.python_library = next();
      } else {
        throw std::invalid_argument("unknown option " + a);
      }
    }
    if (o.imports < 1 || o.warmup < 0) throw std::invalid_argument("--imports must be at least 1, --warmup at least 0");
  } catch (const std::exception& e) {
    std::cerr << "rjg-bench-import: " << e.what() << "\n\n" << kUsage;
    return 2;
  }

  TempDir scratch("rjg-bench-import");
  auto probe = run_process({"/usr/bin/env", o.python, "-c", "import robot_jsonrpcremote_server"}, scratch.path(), 60s);
  const bool with_python = probe.exited_with(0);

  std::vector<LibrarySpec> libraries;
  auto cold = test_library("Cold");
  auto warm = test_library("Warm");
  warm.extra_toml = "prewarm = 2\n";
  libraries = {cold, warm};
  if (with_python) {
    LibrarySpec py_cold;
    py_cold.name = "PyCold";
    py_cold.command = {o.python, "-m", "robot_jsonrpcremote_server", "--stdio", o.python_library};
    py_cold.startup_timeout = "120s";
    LibrarySpec py_warm = py_cold;
    py_warm.name = "PyWarm";
    py_warm.extra_toml = "prewarm = 2\n";
    libraries.push_back(py_cold);
    libraries.push_back(py_warm);
  }

  std::cout << fmt::format("rjg-bench-import: {} measured imports per variant (after {} warm-up), cold and "
                           "prewarmed alternating\n",
                           o.imports, o.warmup);
  std::cout << fmt::format("gateway: {}\nworker:  {}\n", gateway_binary(), test_worker_binary());
  if (with_python)
    std::cout << fmt::format("python:  {} -m robot_jsonrpcremote_server --stdio {}\n", o.python, o.python_library);
  else
    std::cout << fmt::format("python:  skipped: `{} -c 'import robot_jsonrpcremote_server'` failed ({}){}\n",
                             o.python, probe.timed_out ? "timed out" : describe_status(probe.status),
                             probe.err.empty() ? "" : ": " + last_line(probe.err));

  GatewayOptions gopts;
  gopts.log_level = "info";  // the prewarm and import lines tell when the pool is ready, and hits
  GatewayProcess gateway(libraries, gopts);
  try {
    gateway.start();
  } catch (const std::exception& e) {
    std::cerr << "rjg-bench-import: cannot start the gateway: " << e.what() << "\n";
    return 3;
  }
  const std::size_t prewarmed_total = with_python ? 4 : 2;

  std::vector<std::pair<Variant, Variant>> pairs;
  auto variant = [](std::string label, std::string library, bool warm) {
    Variant v;
    v.label = std::move(label);
    v.library = std::move(library);
    v.warm = warm;
    return v;
  };
  pairs.emplace_back(variant("native cold (prewarm 0)", "Cold", false), variant("native prewarm 2", "Warm", true));
  if (with_python)
    pairs.emplace_back(variant("python cold (prewarm 0)", "PyCold", false), variant("python prewarm 2", "PyWarm", true));

  // Settled: every finished worker gone and every prewarmed one ready (bounded).
  auto settle = [&]() {
    bool ok = eventually(
        [&] {
          if (children_of(gateway.pid()).size() != prewarmed_total) return false;
          auto log = gateway.log();
          for (const auto* lib : {"Warm", "PyWarm"}) {
            if (std::string_view(lib).starts_with("Py") && !with_python) continue;
            long ready = static_cast<long>(count_lines(log, fmt::format("library {}: worker pid ", lib), "ready (prewarm")) -
                         static_cast<long>(count_of(log, fmt::format("library {}: import served by prewarmed", lib)));
            if (ready < 2) return false;
          }
          return true;
        },
        120s, 5ms);
    if (!ok) std::cerr << "rjg-bench-import: the gateway did not settle within 120 s; measuring anyway\n";
  };

  auto measure = [&](Variant& v, bool record) {
    settle();
    const auto served_before = count_of(gateway.log(), fmt::format("library {}: import served by prewarmed", v.library));
    auto t0 = Clock::now();
    try {
      RpcClient client(std::chrono::seconds(120));
      client.connect("127.0.0.1", gateway.port());
      std::string token = open_library(client, v.library);
      auto t1 = Clock::now();
      if (record) v.ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
      client.finalize_library(token);
      client.shutdown();
      client.exit();
      client.close();
    } catch (const std::exception& e) {
      if (record) ++v.failures;
      v.last_error = e.what();
      return;
    }
    if (record && count_of(gateway.log(), fmt::format("library {}: import served by prewarmed", v.library)) > served_before)
      ++v.hits;
  };

  for (auto& [c, w] : pairs) {
    for (int i = 0; i < o.warmup; ++i) {
      measure(c, false);
      measure(w, false);
    }
    for (int i = 0; i < o.imports; ++i) {
      // Alternate which goes first, so neither always runs right after the other's worker stopped.
      if (i % 2 == 0) {
        measure(c, true);
        measure(w, true);
      } else {
        measure(w, true);
        measure(c, true);
      }
    }
    std::cerr << fmt::format("{} / {} done\n", c.library, w.library);
  }

  std::cout << "\n"
            << fmt::format("{:<26} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9} {:>10} {:>9}\n", "variant", "imports", "p50 ms",
                           "p99 ms", "mean ms", "min ms", "max ms", "warm hits", "failures");
  for (auto& [c, w] : pairs) {
    for (auto* v : {&c, &w}) {
      double mean = v->ms.empty() ? 0 : std::accumulate(v->ms.begin(), v->ms.end(), 0.0) / v->ms.size();
      double mn = v->ms.empty() ? 0 : *std::min_element(v->ms.begin(), v->ms.end());
      double mx = v->ms.empty() ? 0 : *std::max_element(v->ms.begin(), v->ms.end());
      std::cout << fmt::format("{:<26} {:>8} {:>9.2f} {:>9.2f} {:>9.2f} {:>9.2f} {:>9.2f} {:>10} {:>9}\n", v->label,
                               v->ms.size(), percentile(v->ms, 50), percentile(v->ms, 99), mean, mn, mx,
                               v->warm ? fmt::format("{}/{}", v->hits, v->ms.size()) : std::string("-"),
                               v->failures);
      if (v->failures) std::cout << "  last error: " << v->last_error << "\n";
    }
    if (!c.ms.empty() && !w.ms.empty() && percentile(w.ms, 50) > 0)
      std::cout << fmt::format("  {}: prewarm saves {:.2f} ms at p50 (cold/prewarmed x{:.1f}), {:.2f} ms at p99\n",
                               c.library, percentile(c.ms, 50) - percentile(w.ms, 50),
                               percentile(c.ms, 50) / percentile(w.ms, 50), percentile(c.ms, 99) - percentile(w.ms, 99));
  }
  if (!with_python) std::cout << "python reference server: skipped (not installed)\n";
  gateway.stop();
  return 0;
}
