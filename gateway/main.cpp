// robot-jsonrpc-gateway: serves Robot Framework JsonRpcRemote clients, each imported library in a
// worker process of its own.
#include "common/log.hpp"
#include "config/config.hpp"
#include "gateway/ops/server.hpp"
#include "gateway/ops/systemd.hpp"
#include "gateway/supervisor/spawn.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>

#include <fmt/format.h>

#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <unistd.h>
#include <sched.h>
#include <sys/prctl.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <utility>
#include <string>
#include <thread>
#include <vector>

#ifndef RJG_VERSION
#define RJG_VERSION "0.0.0"
#endif

namespace {

constexpr const char* kUsage = R"(usage: robot-jsonrpc-gateway --config FILE
       robot-jsonrpc-gateway --stdio --config FILE
       robot-jsonrpc-gateway --check-config FILE
       robot-jsonrpc-gateway --version

Serves Robot Framework JsonRpcRemote clients and runs every imported library in a worker process
of its own. Logs go to stderr. SIGTERM or SIGINT: stop accepting; the sessions already open go on
working until they end or [gateway] drain_timeout passes; then end every worker and exit 0. A second
signal kills the workers at once. SIGHUP: read FILE again; a file with problems changes nothing, a good
one applies to new connections and imports without cutting any session.

--stdio: serve exactly one client on stdin/stdout (JsonRpcRemote's stdio:COMMAND) and open no listener
([gateway] listen is ignored; [admin] still applies). Stdout carries frames only. When stdin closes or the
client sends robot/exit, every worker is stopped and the gateway exits 0.
)";

// One event loop: an io_context run by one thread, whose services can be shut down before anything is
// destroyed (see the end of run()).
class EventLoop : public boost::asio::io_context {
 public:
  EventLoop() : io_context(1) {}
  using boost::asio::execution_context::shutdown;
};

// [gateway] threads = 0: one event loop per core this process may run on (its CPU affinity, which a
// container or systemd's CPUAffinity narrows), not per core of the machine.
std::size_t loop_count(std::size_t configured) {
  if (configured) return configured;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return static_cast<std::size_t>(CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

int check_config(const std::string& path) {
  try {
    auto config = rjg::config::load_file(path);
    // Every command resolved as a worker start would resolve it (same function, same environment):
    // a worker that cannot start is found now, not at the first import.
    auto problems = rjg::gateway::supervisor::check_libraries(config);
    if (!problems.empty()) {
      for (const auto& problem : problems) std::fprintf(stderr, "%s\n", problem.c_str());
      std::fprintf(stderr, "%s: %zu problem(s); these libraries' workers cannot start\n", path.c_str(),
                   problems.size());
      return 1;
    }
    std::string names;
    for (const auto& lib : config.libraries) {
      std::string serves = lib.is_upstream()                                          ? "upstream " + lib.upstream
                           : lib.command.at(0).find("{library}") != std::string::npos ? lib.command.at(0)
                                                                                       : *rjg::gateway::supervisor::resolve_command(lib.command.at(0)).path;
      names += (names.empty() ? "" : ", ") + lib.name + ": " + serves;
    }
    std::fprintf(stderr, "%s: OK: %zu libraries (%s)\n", path.c_str(), config.libraries.size(), names.c_str());
    return 0;
  } catch (const rjg::config::ConfigError& e) {
    for (const auto& problem : e.problems) std::fprintf(stderr, "%s\n", problem.c_str());
    std::fprintf(stderr, "%s: %zu problem(s); the gateway would refuse to start\n", path.c_str(), e.problems.size());
    return 1;
  }
}

// --stdio: the client's pipes move to descriptors of their own (close-on-exec: no worker inherits them),
// and /dev/null takes 0 and 1, so that nothing but the session's frames ever reaches the client. The
// session makes them non-blocking, which is a flag of the open file that the client shares (a terminal
// when run by hand): the flags it had are put back at exit, through descriptors kept for that alone
// (the session closes its own when it ends).
struct StdioFds {
  int in = -1, out = -1;
  int kept_in = -1, kept_out = -1;
  int in_flags = -1, out_flags = -1;

  StdioFds() = default;
  StdioFds(StdioFds&& other) noexcept { *this = std::move(other); }
  StdioFds& operator=(StdioFds&& other) noexcept {
    std::swap(in, other.in);
    std::swap(out, other.out);
    std::swap(kept_in, other.kept_in);
    std::swap(kept_out, other.kept_out);
    std::swap(in_flags, other.in_flags);
    std::swap(out_flags, other.out_flags);
    return *this;
  }
  ~StdioFds() {
    if (kept_in >= 0 && in_flags >= 0) ::fcntl(kept_in, F_SETFL, in_flags);
    if (kept_out >= 0 && out_flags >= 0) ::fcntl(kept_out, F_SETFL, out_flags);
    for (int fd : {kept_in, kept_out})
      if (fd >= 0) ::close(fd);
  }
};
std::optional<StdioFds> take_stdio() {
  StdioFds fds;
  fds.in_flags = ::fcntl(0, F_GETFL);
  fds.out_flags = ::fcntl(1, F_GETFL);
  fds.kept_in = ::fcntl(0, F_DUPFD_CLOEXEC, 3);
  fds.kept_out = ::fcntl(1, F_DUPFD_CLOEXEC, 3);
  fds.in = ::fcntl(0, F_DUPFD_CLOEXEC, 3);
  fds.out = ::fcntl(1, F_DUPFD_CLOEXEC, 3);
  const int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  if (fds.in < 0 || fds.out < 0 || fds.kept_in < 0 || fds.kept_out < 0 || null < 0 || ::dup2(null, 0) < 0 ||
      ::dup2(null, 1) < 0) {
    std::fprintf(stderr, "robot-jsonrpc-gateway: --stdio: cannot take over stdin/stdout: %s\n", std::strerror(errno));
    return std::nullopt;
  }
  if (null > 2) ::close(null);  // else it took a descriptor of the three, which must stay taken
  return fds;
}

int run(const std::string& path, bool stdio = false) {
  rjg::config::Config config;
  try {
    config = rjg::config::load_file(path);
  } catch (const rjg::config::ConfigError& e) {
    for (const auto& problem : e.problems) std::fprintf(stderr, "%s\n", problem.c_str());
    std::fprintf(stderr, "robot-jsonrpc-gateway: refusing to start with an invalid configuration\n");
    return 1;
  }
  rjg::log::Level level;
  if (rjg::log::parse_level(config.gateway.log_level, level)) rjg::log::set_level(level);
  rjg::log::Format format;
  if (rjg::log::parse_format(config.gateway.log_format, format)) rjg::log::set_format(format);

  // A client that vanishes mid-write must be an error code on that socket, not the end of the gateway.
  std::signal(SIGPIPE, SIG_IGN);

  // No survivors: a worker's descendant that leaves the worker's process group and loses its parent is
  // reparented to the gateway (not to init), so the reaper can end it (end_orphans) and reap it.
  if (::prctl(PR_SET_CHILD_SUBREAPER, 1) != 0)
    rjg::log::warn("cannot become a child subreaper ({}): a worker's descendant that leaves its process group "
                   "can outlive the worker",
                   std::strerror(errno));

  // Before any thread or child exists: the variables are taken out of the environment.
  auto notifier = rjg::gateway::ops::SystemdNotifier::from_environment();
  auto passed = rjg::gateway::ops::PassedSockets::from_environment();

  // Loop 0 (this thread) accepts and runs the pools, the reaper and the drain; sessions are spread over
  // all loops. Each loop is one io_context run by one thread, so nothing of a loop needs a lock.
  std::optional<StdioFds> client;
  if (stdio && !(client = take_stdio())) return 1;
  // One session: one loop serves it.
  const std::size_t threads = stdio ? 1 : loop_count(config.gateway.threads);
  EventLoop io;
  std::vector<std::unique_ptr<EventLoop>> others;
  std::vector<boost::asio::any_io_executor> loops{io.get_executor()};
  for (std::size_t i = 1; i < threads; ++i) {
    others.push_back(std::make_unique<EventLoop>());
    loops.push_back(others.back()->get_executor());
  }
  std::vector<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> keep;
  for (auto& loop : others) keep.push_back(boost::asio::make_work_guard(*loop));
  // SIGHUP is caught from here on (asio keeps one that arrives before the handler below waits): its
  // default action would end the gateway, and a reload may race the start.
  boost::asio::signal_set hangups(io, SIGHUP);
  rjg::gateway::ops::Server server(io, config, RJG_VERSION, loops);
  try {
    // The admin endpoint first: once the client port accepts, /readyz and /livez answer too.
    server.listen_admin(passed);
    if (!stdio) {
      server.listen_classic(passed);
      server.listen(passed);
    }
    passed.close_untaken();
  } catch (const std::exception& e) {
    rjg::log::error("{}", e.what());
    return 1;
  }
  if (stdio)
    rjg::log::info("robot-jsonrpc-gateway {} started with {} ({} libraries): serving one session on stdin/stdout",
                   RJG_VERSION, path, config.libraries.size());
  else
    rjg::log::info("robot-jsonrpc-gateway {} started with {} ({} libraries, {} event loop{})", RJG_VERSION, path,
                   config.libraries.size(), threads, threads == 1 ? "" : "s");
  std::vector<std::thread> runners;
  for (std::size_t i = 0; i < others.size(); ++i) {
    runners.emplace_back([loop = others[i].get(), name = fmt::format("rjg-loop-{}", i + 1)] {
      ::pthread_setname_np(::pthread_self(), name.c_str());  // in top, ps -L, gdb and /proc/PID/task
      loop->run();
    });
  }
  server.start();
  server.set_ready();
  // Every listener is bound and prewarming has begun: systemd may start what depends on the gateway.
  rjg::gateway::ops::ServiceNotifications notifications(std::move(notifier), loops, [&server] { return server.status_text(); });
  notifications.ready();

  // SIGHUP: reload the file. Handled here, on loop 0, where the listeners and the pools live; each signal
  // is one reload, from start to end (a reload does not wait for anything).
  std::function<void(const boost::system::error_code&, int)> on_hangup = [&](const boost::system::error_code& ec, int) {
    if (ec) return;
    notifications.reloading();
    server.reload(path);
    notifications.reloaded();
    hangups.async_wait(on_hangup);
  };
  hangups.async_wait(on_hangup);

  // --stdio: the end is stdin's. A Ctrl-C in the terminal reaches the whole foreground group, Robot
  // included, which then runs its teardown through this session: SIGINT must not cut it.
  if (stdio) std::signal(SIGINT, SIG_IGN);
  boost::asio::signal_set signals(io, SIGTERM);
  if (!stdio) signals.add(SIGINT);
  int received = 0;
  bool stdio_ended = false;
  if (client) {
    // The session's end is the gateway's: its workers stop with it, then every other (prewarmed) one.
    boost::asio::co_spawn(
        io,
        [&]() -> boost::asio::awaitable<void> {
          co_await server.serve_stdio(client->in, client->out);
          if (received > 0) co_return;  // a signal's shutdown is under way, and ends the loop itself
          rjg::log::info("the stdio session ended: shutting down");
          stdio_ended = true;
          co_await server.shutdown([&] { notifications.stopping(); });
        },
        [&](std::exception_ptr e) {
          rjg::runtime::log_exceptions("stdio session")(e);
          if (stdio_ended) {
            signals.cancel();
            hangups.cancel();
            io.stop();
          }
        });
  }
  std::function<void(const boost::system::error_code&, int)> on_signal = [&](const boost::system::error_code& ec,
                                                                             int sig) {
    if (ec) return;
    if (stdio_ended && received == 0) {
      // The session's end began the shutdown already: a signal now (a client that closes stdin, then
      // terminates us) is the first one, not a second.
      ++received;
      rjg::log::info("received {} while shutting down after the stdio session ended", sig == SIGTERM ? "SIGTERM" : "SIGINT");
    } else if (++received == 1) {
      rjg::log::info("received {}: shutting down", sig == SIGTERM ? "SIGTERM" : "SIGINT");
      boost::asio::co_spawn(io, server.shutdown([&] { notifications.stopping(); }), [&](std::exception_ptr e) {
        rjg::runtime::log_exceptions("shutdown")(e);
        signals.cancel();
        hangups.cancel();
        io.stop();
      });
    } else {
      server.force_stop();
      io.stop();
    }
    signals.async_wait(on_signal);
  };
  signals.async_wait(on_signal);
  io.run();
  // The other loops stop with loop 0. Then, with no loop running, every loop is shut down before
  // anything is destroyed: what their pending handlers and coroutines still hold (a session, a worker,
  // a call parked on another loop) goes now, while every loop's reactor and the server still exist.
  for (auto& loop : others) loop->stop();
  for (auto& runner : runners) runner.join();
  for (auto& loop : others) loop->shutdown();
  io.shutdown();
  if (received > 1) return 1;
  if (auto left = server.workers_left(); left > 0) {
    rjg::log::warn("{} workers still running at exit; killing them", left);
    server.force_stop();
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
#ifdef __GLIBC__
  // Blocks of 1 MiB and more (large frames, classic bodies and their values) go back to the system when
  // freed, whichever thread frees them. glibc would raise this threshold to the largest block freed so far
  // and keep such blocks in the arena of the thread that freed them: with the offload pool, each of its
  // threads and each loop would keep its own room for the largest request seen (doc/security.md, "Bounded memory").
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
#endif
  rjg::log::set_program("gateway");
  rjg::log::use_journal_if_stderr_is_it();
  std::string arg1 = argc > 1 ? argv[1] : "";
  if (argc == 2 && (arg1 == "--version" || arg1 == "-V")) {
    std::printf("robot-jsonrpc-gateway %s\n", RJG_VERSION);
    return 0;
  }
  if (argc == 2 && (arg1 == "--help" || arg1 == "-h")) {
    std::printf("%s", kUsage);
    return 0;
  }
  if (argc == 3 && arg1 == "--check-config") return check_config(argv[2]);
  if (argc == 3 && arg1 == "--config") return run(argv[2]);
  const std::string arg2 = argc > 2 ? argv[2] : "";
  if (argc == 4 && arg1 == "--stdio" && arg2 == "--config") return run(argv[3], true);
  if (argc == 4 && arg1 == "--config" && std::string(argv[3]) == "--stdio") return run(argv[2], true);
  std::fprintf(stderr, "%s", kUsage);
  return 2;
}
