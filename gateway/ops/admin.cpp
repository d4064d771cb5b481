// The admin endpoint's pages: Prometheus metrics, liveness, readiness, a JSON status and the status page
// (its HTML in status_page.cpp, from the same snapshot). They run on loop 0, where the snapshot is taken,
// and read the counters (atomics) every loop bumps.
#include "gateway/ops/admin.hpp"

#include "gateway/ops/status_page.hpp"

#include <boost/json/serialize.hpp>

#include <fmt/format.h>

#include <array>
#include <fstream>
#include <map>

#include <unistd.h>

namespace rjg::gateway::ops {
using namespace std::chrono_literals;
namespace json = boost::json;

namespace {

constexpr std::string_view kPrefix = "robot_jsonrpc_gateway_";
// A loop that has not run a handler for this long is stuck (the heartbeat runs every second).
constexpr auto kStuckAfter = 5s;

// One metric family: HELP and TYPE once, then its samples.
class Family {
 public:
  // prefixed: false for the names every Prometheus client library gives a process (process_...), which
  // dashboards and rules written for any exporter use.
  Family(std::string& out, std::string_view name, std::string_view type, std::string_view help, bool prefixed = true)
      : out_(out) {
    name_ = fmt::format("{}{}", prefixed ? kPrefix : "", name);
    out_ += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name_, help, name_, type);
  }
  void sample(std::string_view labels, double value) {
    out_ += labels.empty() ? fmt::format("{} {}\n", name_, value) : fmt::format("{}{{{}}} {}\n", name_, labels, value);
  }
  void histogram(std::string_view labels, const supervisor::Histogram& h) { h.render(out_, name_, labels); }

 private:
  std::string& out_;
  std::string name_;
};

std::string library_label(std::string_view name) { return fmt::format("library=\"{}\"", supervisor::label_value(name)); }

template <class Values, std::size_t N>
void counters(Family& family, std::string_view library, const Values& values, std::string_view label,
              const std::array<std::string_view, N>& names) {
  static_assert(std::tuple_size_v<Values> == N, "one name per counter");
  for (std::size_t i = 0; i < N; ++i)
    family.sample(fmt::format("{},{}=\"{}\"", library_label(library), label, names[i]),
                  static_cast<double>(values[i].load(std::memory_order_relaxed)));
}

}  // namespace

// What the admin endpoint takes, chosen so that no client can make a health probe fail: one address holds at
// most 8 connections, a request line and headers must come within 2 s (a half-sent request holds a
// connection no longer), and beyond the 64 connections 8 more are kept for /livez and /readyz, one per
// address, so that a probe from elsewhere is answered whoever holds the 64. doc/operations.md
// says the same numbers.
fronts::HttpLimits admin_limits() {
  fronts::HttpLimits limits;
  limits.max_request_bytes = 8 * 1024;
  limits.request_timeout = 10s;
  limits.header_timeout = 2s;
  limits.max_connections = 64;
  limits.max_connections_per_client = 8;
  limits.max_requests_per_connection = 100;
  limits.probe_connections = 8;
  limits.probe_paths = {"/livez", "/readyz"};
  return limits;
}

AdminPages::AdminPages(const LoopHeartbeat& heartbeat, std::function<Readiness()> readiness,
                       std::function<AdminSnapshot()> snapshot)
    : heartbeat_(heartbeat), readiness_(std::move(readiness)), snapshot_(std::move(snapshot)) {}

std::optional<fronts::HttpResponse> AdminPages::page(std::string_view path) const {
  if (path == "/metrics") {
    // The content type of the text exposition format, version 0.0.4.
    return fronts::HttpResponse{200, "text/plain; version=0.0.4; charset=utf-8", metrics_text(snapshot_())};
  }
  if (path == "/livez") {
    const auto stuck = heartbeat_.stuck(kStuckAfter);
    if (stuck == 0) return fronts::HttpResponse{200, "text/plain; charset=utf-8", "ok\n"};
    return fronts::HttpResponse{503, "text/plain; charset=utf-8",
                        fmt::format("{} of {} event loops ran no handler for {}s\n", stuck, heartbeat_.loops(),
                                    kStuckAfter.count())};
  }
  if (path == "/readyz") {
    const auto readiness = readiness_();
    if (readiness.draining) return fronts::HttpResponse{503, "text/plain; charset=utf-8", "draining: no new sessions\n"};
    if (!readiness.serving) return fronts::HttpResponse{503, "text/plain; charset=utf-8", "starting\n"};
    return fronts::HttpResponse{200, "text/plain; charset=utf-8", "ready\n"};
  }
  if (path == "/status") return fronts::HttpResponse{200, "application/json", json::serialize(status_json(snapshot_())) + "\n"};
  if (path == "/") return status_page_response(status_json(snapshot_()));
  if (path == kStatusPageStylesheet) return status_page_stylesheet();
  if (path == kStatusPageIcon) return status_page_icon();
  return std::nullopt;
}

// The resident memory of a process, in bytes (/proc/PID/statm: pages); 0 if gone.
std::uint64_t resident_bytes(pid_t pid) {
  std::ifstream statm(fmt::format("/proc/{}/statm", pid));
  std::uint64_t size = 0, resident = 0;
  if (!(statm >> size >> resident)) return 0;
  return resident * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
}

std::string metrics_text(const AdminSnapshot& s) {
  std::string out;
  const auto& m = *s.metrics;
  const auto count = [](const std::atomic<std::uint64_t>& a) { return static_cast<double>(a.load(std::memory_order_relaxed)); };

  Family(out, "build_info", "gauge", "The gateway's version (always 1).")
      .sample(fmt::format("version=\"{}\"", supervisor::label_value(s.version)), 1);
  Family(out, "start_time_seconds", "gauge", "When the gateway started, in seconds since the Unix epoch.")
      .sample("", std::chrono::duration<double>(s.started_at.time_since_epoch()).count());
  Family(out, "ready", "gauge", "1 while the gateway takes new sessions (as /readyz), 0 before and while draining.")
      .sample("", s.serving && !s.draining ? 1 : 0);
  Family(out, "sessions_open", "gauge", "Client sessions connected now.").sample("", static_cast<double>(s.sessions.size()));
  Family(out, "max_sessions", "gauge", "Client sessions the gateway takes at once ([gateway] max_sessions); 0: no cap.")
      .sample("", static_cast<double>(s.config->gateway.max_sessions));
  Family(out, "sessions_total", "counter", "Client sessions accepted since start.").sample("", count(m.sessions_total));
  {
    Family f(out, "connections_refused_total", "counter", "Client connections refused, by the limit that refused them.");
    constexpr std::array<std::string_view, 4> reasons = {"allow_from", "max_sessions", "max_sessions_per_client",
                                                         "proxy_header"};
    for (std::size_t i = 0; i < reasons.size(); ++i) f.sample(fmt::format("reason=\"{}\"", reasons[i]), count(m.refused[i]));
  }
  Family(out, "requests_in_flight", "gauge", "Client requests being answered now.")
      .sample("", static_cast<double>(s.requests_in_flight));
  {
    Family f(out, "client_bytes_total", "counter", "Message bytes (frame bodies) received from and sent to clients.");
    f.sample("direction=\"received\"", count(m.bytes_in));
    f.sample("direction=\"sent\"", count(m.bytes_out));
  }
  {
    Family f(out, "reloads_total", "counter", "Configuration reloads (SIGHUP), by outcome.");
    f.sample("outcome=\"applied\"", count(m.reloads_ok));
    f.sample("outcome=\"failed\"", count(m.reloads_failed));
  }
  Family(out, "last_reload_success_timestamp_seconds", "gauge",
         "When a reload last applied, in seconds since the Unix epoch; 0: none since start.")
      .sample("", m.last_reload_seconds.load());
  // As Prometheus' own prometheus_config_last_reload_successful: an alert on == 0 needs no arithmetic.
  Family(out, "last_reload_successful", "gauge",
         "1 unless the last reload failed (the gateway then serves the previous configuration); 1 before any.")
      .sample("", s.reload_problem.empty() ? 1 : 0);
  Family(out, "process_resident_memory_bytes", "gauge", "The gateway process's resident memory, in bytes.", false)
      .sample("", static_cast<double>(resident_bytes(::getpid())));

  // Per library: every name configured now, and every one counted since start (a reload may remove one).
  const auto& pools = s.pools;
  const auto known = m.libraries();
  std::map<std::string, const supervisor::LibraryMetrics*> libraries;
  for (const auto& [name, lib] : known) libraries[name] = lib;
  for (const auto& pool : pools) libraries.try_emplace(pool.library, nullptr);
  static const supervisor::LibraryMetrics kNone;
  auto of = [&](const std::string& name) -> const supervisor::LibraryMetrics& {
    auto it = libraries.find(name);
    return it != libraries.end() && it->second ? *it->second : kNone;
  };

  {
    Family f(out, "imports_total", "counter", "Imports answered, by library and outcome.");
    for (const auto& [name, lib] : libraries) counters(f, name, of(name).imports, "outcome", std::array<std::string_view, 2>{"ok", "error"});
  }
  {
    Family f(out, "imports_waiting", "gauge", "Imports waiting for a worker (a cap is reached), by library.");
    for (const auto& [name, lib] : libraries) {
      std::size_t waiting = 0;
      for (const auto& pool : pools)
        if (pool.library == name) waiting += pool.waiting;
      f.sample(library_label(name), static_cast<double>(waiting));
    }
  }
  {
    Family f(out, "import_queue_wait_seconds", "histogram",
             "How long imports waited for capacity (a worker cap), by library; starting a worker is not counted, "
             "an import that gave up at queue_timeout is.");
    for (const auto& [name, lib] : libraries) f.histogram(library_label(name), of(name).queue_wait_seconds);
  }
  {
    Family f(out, "keywords_total", "counter",
             "Keywords answered, by library and outcome: pass, fail (the keyword failed), error (the gateway or the "
             "worker could not run it), timeout (keyword_timeout).");
    for (const auto& [name, lib] : libraries)
      counters(f, name, of(name).keywords, "outcome", std::array<std::string_view, 4>{"pass", "fail", "error", "timeout"});
  }
  {
    Family f(out, "keyword_duration_seconds", "histogram", "How long keywords took, from request to answer, by library.");
    for (const auto& [name, lib] : libraries) f.histogram(library_label(name), of(name).keyword_seconds);
  }
  {
    Family f(out, "workers", "gauge", "Worker processes now, by library and state.");
    constexpr std::array<std::string_view, 4> states = {"starting", "idle", "busy", "draining"};
    for (const auto& [name, lib] : libraries) {
      std::array<std::size_t, 4> n{};
      for (const auto& pool : pools) {
        if (pool.library != name) continue;
        n[0] += pool.starting;
        for (const auto& w : pool.workers)
          for (std::size_t i = 0; i < states.size(); ++i)
            if (states[i] == w.state) ++n[i];
      }
      for (std::size_t i = 0; i < states.size(); ++i)
        f.sample(fmt::format("{},state=\"{}\"", library_label(name), states[i]), static_cast<double>(n[i]));
    }
  }
  {
    Family f(out, "worker_resident_bytes", "gauge",
             "Resident memory of a library's live worker processes together, in bytes, by library (connections to "
             "an upstream count 0).");
    for (const auto& [name, lib] : libraries) {
      std::uint64_t bytes = 0;
      for (std::size_t p = 0; p < pools.size(); ++p)
        if (pools[p].library == name)
          for (const auto rss : s.worker_rss[p]) bytes += rss;  // 0 for an upstream
      f.sample(library_label(name), static_cast<double>(bytes));
    }
  }
  {
    Family f(out, "worker_starts_total", "counter",
             "Workers started, by library and kind: cold (for an import) or prewarmed (ahead of imports).");
    for (const auto& [name, lib] : libraries)
      counters(f, name, of(name).starts, "kind", std::array<std::string_view, 2>{"cold", "prewarmed"});
  }
  // A counter per library, one sample each.
  auto per_library = [&](std::string_view family, std::string_view help,
                         std::atomic<std::uint64_t> supervisor::LibraryMetrics::*counter) {
    Family f(out, family, "counter", help);
    for (const auto& [name, lib] : libraries)
      f.sample(library_label(name), static_cast<double>((of(name).*counter).load(std::memory_order_relaxed)));
  };
  per_library("worker_start_failures_total",
              "Workers that did not come up (spawn, handshake or startup_timeout failed), by library; a prewarm "
              "that keeps failing shows here.",
              &supervisor::LibraryMetrics::start_failures);
  per_library("worker_forks_total",
              "Workers forked from a library's fork server (fork_server = true), by library; the rest of its "
              "starts were plain.",
              &supervisor::LibraryMetrics::workers_forked);
  per_library("fork_server_starts_total",
              "Fork server template processes started, by library: one, plus one per restart after it died.",
              &supervisor::LibraryMetrics::fork_server_starts);
  {
    Family f(out, "fork_server_ready", "gauge",
             "1 while a library's fork server is ready to fork workers, 0 while it starts or is down (plain starts "
             "meanwhile); only libraries with fork_server = true.");
    for (const auto& pool : pools)
      if (pool.fork_server && !pool.retired) f.sample(library_label(pool.library), pool.fork_server->state == "ready" ? 1 : 0);
  }
  {
    Family f(out, "library_backoff", "gauge",
             "1 while a library's worker starts back off after repeated failures (crash backoff), by library.");
    for (const auto& [name, lib] : libraries) {
      bool backing_off = false;
      for (const auto& pool : pools)
        if (pool.library == name && !pool.retired) backing_off = backing_off || pool.backing_off;
      f.sample(library_label(name), backing_off ? 1 : 0);
    }
  }
  {
    Family f(out, "worker_exits_total", "counter",
             "Workers gone, by library and reason: normal (the gateway ended it), crash (it exited or died of a "
             "fault by itself), killed (SIGKILL or SIGTERM from elsewhere, such as the OOM killer), recycled "
             "(max_keywords, max_age, max_rss), timeout (keyword_timeout).");
    for (const auto& [name, lib] : libraries)
      counters(f, name, of(name).exits, "reason",
               std::array<std::string_view, 5>{"normal", "crash", "killed", "recycled", "timeout"});
  }
  {
    Family f(out, "pickles_refused_total", "counter",
             "Values refused by the library's pickle policy, by library and direction: in (from a client), out (from "
             "a worker).");
    for (const auto& [name, lib] : libraries)
      counters(f, name, of(name).pickles_refused, "direction", std::array<std::string_view, 2>{"in", "out"});
  }
  return out;
}

json::object status_json(const AdminSnapshot& s) {
  const auto now = s.now;
  const auto& config = s.config;
  json::array sessions;
  for (const auto& live : s.sessions) {
    json::object session{
        {"id", live.id},
        {"peer", live.peer},
        {"age_seconds", std::chrono::duration<double>(now - live.since).count()},
        {"imports", live.imports},
    };
    if (live.activity) {
      const auto& activity = *live.activity;
      json::array libraries, keywords;
      for (const auto& [name, held] : activity.libraries) libraries.push_back(json::string(name));
      for (const auto& running : activity.keywords)
        keywords.push_back(json::object{{"library", running.library},
                                        {"keyword", running.keyword},
                                        {"seconds", std::chrono::duration<double>(now - running.since).count()}});
      session["libraries"] = std::move(libraries);
      session["keywords_running"] = std::move(keywords);
    }
    sessions.push_back(std::move(session));
  }
  json::array libraries;
  for (std::size_t p = 0; p < s.pools.size(); ++p) {
    const auto& pool = s.pools[p];
    json::array workers;
    std::uint64_t rss_total = 0;
    for (std::size_t i = 0; i < pool.workers.size(); ++i) {
      const auto& w = pool.workers[i];
      const auto rss = s.worker_rss[p][i];
      rss_total += rss;
      json::object worker{{"pid", w.pid},
                          {"state", w.state},
                          {"age_seconds", w.age_seconds},
                          {"keywords", w.keywords},
                          {"imports", w.imports},
                          {"prewarmed", w.prewarmed_unused},
                          {"rss_bytes", rss}};
      if (!w.upstream.empty()) worker["upstream"] = w.upstream;
      if (!w.serves.empty()) worker["serves"] = w.serves;
      workers.push_back(std::move(worker));
    }
    json::object library{{"name", pool.library},
                         {"retired", pool.retired},
                         {"backing_off", pool.backing_off},
                         {"failures_in_a_row", pool.failures},
                         {"imports_waiting", pool.waiting},
                         {"workers_starting", pool.starting},
                         {"rss_bytes", rss_total},
                         {"workers", std::move(workers)}};
    if (!pool.last_crash.empty())
      library["last_crash"] = json::object{{"what", pool.last_crash}, {"seconds_ago", pool.last_crash_seconds_ago}};
    if (const auto& fork = pool.fork_server) {
      json::object server{{"state", fork->state}, {"pid", fork->pid}, {"starts", fork->starts}, {"forks", fork->forks}};
      if (!fork->problem.empty()) server["problem"] = fork->problem;
      library["fork_server"] = std::move(server);
    }
    // The settings of the configuration now (a retired pool's may differ: it shows none).
    if (!pool.retired)
      for (const auto& lib : config->libraries) {
        if (lib.name != pool.library) continue;
        library["isolation"] = lib.isolation == config::Isolation::shared ? "shared" : "session";
        library["prewarm"] = lib.prewarm;
        library["max_workers"] = lib.max_workers;
        if (!lib.upstream.empty() || !lib.classic_upstream.empty())
          library["upstream"] = lib.upstream.empty() ? lib.classic_upstream : lib.upstream;
        break;
      }
    libraries.push_back(std::move(library));
  }
  const auto& m = *s.metrics;
  const auto applied = m.reloads_ok.load(std::memory_order_relaxed);
  const auto failed = m.reloads_failed.load(std::memory_order_relaxed);
  json::object reload{{"applied", applied}, {"failed", failed}};
  reload["last"] = !s.reload_problem.empty() ? "failed" : applied > 0 ? "applied" : "none";
  if (!s.reload_problem.empty()) reload["problem"] = s.reload_problem;
  if (applied > 0) reload["applied_at_seconds"] = m.last_reload_seconds.load();
  json::object status{
      {"version", s.version},
      {"config", config->path},
      // 1 as started, one more for each reload that applied.
      {"config_generation", 1 + applied},
      {"reload", std::move(reload)},
      {"ready", s.serving && !s.draining},
      {"draining", s.draining},
      {"uptime_seconds", s.uptime_seconds},
      {"status", s.status},
      {"requests_in_flight", s.requests_in_flight},
      {"max_sessions", config->gateway.max_sessions},
      {"max_workers", config->gateway.max_workers},
      {"sessions", std::move(sessions)},
      {"libraries", std::move(libraries)},
  };
  if (s.classic) status["classic"] = *s.classic;
  return status;
}

}  // namespace rjg::gateway::ops
