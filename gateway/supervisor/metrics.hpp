// The counters behind /metrics (Prometheus text format 0.0.4). Bumped from any event loop without a
// lock (relaxed atomics: each is a count on its own); read at a scrape. Label sets are bounded: library
// names come from the configuration only (never from a client), and every other label is a fixed word.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace rjg::gateway::supervisor {

// Cumulative buckets of durations in seconds, as Prometheus histograms count them.
class Histogram {
 public:
  static constexpr std::array<double, 14> kBounds = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                                    1,     2.5,  5,     10,   30,  60,   300};
  void observe(std::chrono::steady_clock::duration d);
  // name_bucket{labels,le="..."} lines, then _sum and _count.
  void render(std::string& out, std::string_view name, std::string_view labels) const;

 private:
  std::array<std::atomic<std::uint64_t>, kBounds.size() + 1> buckets_{};  // the last: +Inf only
  std::atomic<std::uint64_t> sum_us_{0};
  std::atomic<std::uint64_t> count_{0};
};

enum class ImportOutcome { ok, error, count };
enum class KeywordOutcome { pass, fail, error, timeout, count };
enum class StartKind { cold, prewarmed, count };
enum class ExitReason { normal, crash, killed, recycled, timeout, count };
enum class Direction { in, out, count };  // pickles: in the client's request, out in the worker's answer
enum class Refusal { allow_from, max_sessions, max_sessions_per_client, proxy_header, count };

template <class E>
using Counters = std::array<std::atomic<std::uint64_t>, static_cast<std::size_t>(E::count)>;

struct LibraryMetrics {
  Counters<ImportOutcome> imports{};
  Counters<KeywordOutcome> keywords{};
  Counters<StartKind> starts{};
  Counters<ExitReason> exits{};
  Counters<Direction> pickles_refused{};
  std::atomic<std::uint64_t> start_failures{0};  // a worker that did not come up (spawn, handshake, startup_timeout)
  std::atomic<std::uint64_t> workers_forked{0};      // fork_server: workers its template made
  std::atomic<std::uint64_t> fork_server_starts{0};  // fork_server: template processes started
  Histogram keyword_seconds;
  Histogram queue_wait_seconds;

  template <class E>
  static void add(Counters<E>& counters, E which) {
    counters[static_cast<std::size_t>(which)].fetch_add(1, std::memory_order_relaxed);
  }
};

class Metrics {
 public:
  // The counters of a library, made at its first use and kept for the life of the gateway (a reload
  // that removes a library keeps its history). The reference stays valid.
  LibraryMetrics& library(std::string_view name);
  // Every library seen so far, in name order.
  std::vector<std::pair<std::string, const LibraryMetrics*>> libraries() const;

  std::atomic<std::uint64_t> sessions_total{0};
  Counters<Refusal> refused{};
  std::atomic<std::uint64_t> bytes_in{0};   // frame bodies read from clients
  std::atomic<std::uint64_t> bytes_out{0};  // frame bodies written to clients
  std::atomic<std::uint64_t> reloads_ok{0};
  std::atomic<std::uint64_t> reloads_failed{0};
  std::atomic<double> last_reload_seconds{0};  // Unix time of the last reload that applied; 0: none

  void refuse(Refusal why) { refused[static_cast<std::size_t>(why)].fetch_add(1, std::memory_order_relaxed); }

 private:
  mutable std::mutex mutex_;  // only for the map; the counters are atomics
  std::map<std::string, std::unique_ptr<LibraryMetrics>, std::less<>> libraries_;
};

// A label value as the text format wants it: \, " and newline escaped.
std::string label_value(std::string_view text);

}  // namespace rjg::gateway::supervisor
