// The benchmark's load generator: protocol sessions over TCP, all driven by one io_context on one or
// two threads, so that 256 sessions cost the benchmark two threads, not 256, and its own overhead stays
// small and the same whichever server it measures. Also the floor: ping-pong between two threads.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace rjg::bench {

struct CallStats {
  std::uint64_t calls = 0;           // answered with Echo's own value
  std::uint64_t failures = 0;        // answered with an error or a keyword failure
  double seconds = 0;                // from the first request sent to the last answer received
  std::vector<double> latencies_us;  // each call's round trip, when asked for
  double per_second() const { return seconds > 0 ? static_cast<double>(calls) / seconds : 0; }
};

class LoadGenerator {
 public:
  // Sessions connect to host:port. io_threads: threads running the io_context (1 or 2 is plenty).
  LoadGenerator(std::string host, std::uint16_t port, unsigned io_threads = 1);
  // Session i connects to ports[i % ports.size()]: one session per server when there are as many.
  LoadGenerator(std::string host, const std::vector<std::uint16_t>& ports, unsigned io_threads = 1);
  ~LoadGenerator();
  LoadGenerator(const LoadGenerator&) = delete;
  LoadGenerator& operator=(const LoadGenerator&) = delete;

  // Opens n more sessions: connect, robot/initialize, robot/initialized, then, unless library is
  // empty, robot/import_library of it (no arguments). At most `parallel` are being opened at once.
  // Blocks until all are open; throws std::runtime_error naming the first failure or the timeout
  // (the sessions opened so far stay open; close() ends them).
  void open(std::size_t n, const std::string& library, std::chrono::milliseconds timeout = std::chrono::seconds(300),
            std::size_t parallel = 32);
  // Every open session calls Echo(payload) back to back, one call in flight per session, until
  // max_calls answers have arrived in all (0: no bound) or max_seconds have passed (0: no bound).
  // Throws std::runtime_error if a session's connection fails.
  CallStats run(const std::string& payload, std::uint64_t max_calls, double max_seconds, bool record_latency);
  // Runs keyword `name` without arguments on open session `index`; returns the answer's result text
  // ({"result": VALUE}). Throws std::runtime_error on an error answer or a keyword failure.
  std::string call_keyword(std::size_t index, const std::string& name);
  // The pid that keyword "Get Pid" names on open session `index` (its worker's, through the gateway).
  // Throws std::runtime_error when the answer holds no pid.
  pid_t worker_pid(std::size_t index);
  std::size_t sessions() const;
  // Closes every session's connection (the servers see the clients go away).
  void close();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Sequential calls through two targets in turn, for a fair comparison: `rounds` rounds of `calls` calls on
// each of `a` and `b` (each with its sessions open), which goes first alternating per round so that
// neither always runs on a warmer machine. Each call's round trip in microseconds, per target.
struct PairedLatencies {
  std::vector<double> a_us, b_us;
  std::uint64_t failures = 0;
};
PairedLatencies paired_latencies(LoadGenerator& a, LoadGenerator& b, const std::string& payload, int rounds,
                                 int calls);

// Round trips of a `bytes`-byte message between two threads of this process, over a TCP loopback
// connection (TCP_NODELAY, as the gateway and the workers set it) or a pair of pipes: the floor under
// any relay on this machine. Returns each round trip in microseconds.
std::vector<double> tcp_ping_pong_us(std::size_t bytes, std::size_t round_trips);
std::vector<double> pipe_ping_pong_us(std::size_t bytes, std::size_t round_trips);

// The frame of one Echo call (what the load generator sends), to size the floor's messages alike.
std::string echo_frame(std::string_view token, std::uint64_t id, std::string_view payload);

}  // namespace rjg::bench
