// The gateway as one object: it wires the parts that each have one job (fronts/admission.hpp: listeners and
// admission; session_table.hpp: the sessions and the drain; reload.hpp: SIGHUP; admin.hpp: the admin
// pages; fronts/classic.hpp: the classic front) and orders start, reload and an orderly shutdown on SIGTERM/SIGINT.
#pragma once

#include "gateway/fronts/admission.hpp"
#include "gateway/session/context.hpp"
#include "gateway/ops/reload.hpp"
#include "gateway/ops/session_table.hpp"

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/thread_pool.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace rjg::gateway::ops {

class AdminPages;
struct AdminSnapshot;
class LoopHeartbeat;
class PassedSockets;

class Server {
 public:
  // io: loop 0, which accepts, runs the pools and the drain. loops: every event loop sessions are spread
  // over, loop 0 included (none: loop 0 only).
  Server(asio::io_context& io, const config::Config& config, std::string version,
         std::vector<asio::any_io_executor> loops = {});
  ~Server();

  // Binds every configured address, and takes the sockets systemd passed for "systemd" entries (a bare
  // "systemd" leaves the names in named_elsewhere to other listeners); throws std::runtime_error naming
  // the address on failure.
  void listen(PassedSockets& passed, const std::vector<std::string>& named_elsewhere = {});
  void start();
  // --stdio: one session on these descriptors (taken over), on loop 0; completes once it has closed.
  asio::awaitable<void> serve_stdio(int in, int out);
  // SIGHUP, on loop 0: reads and checks `path` as --check-config does. A file with problems changes
  // nothing (each problem is logged, and STATUS= says so). A good one applies to what comes next: new
  // connections get the new limits, new imports the new libraries and settings; listeners open and
  // close; what runs keeps its settings. Returns whether it applied.
  bool reload(const std::string& path);
  // Stops accepting; the sessions already open go on working until they end or drain_timeout passes;
  // then closes those left (which ends their workers and answers what still runs with an error), ends
  // every other worker, and returns once all of that is done.
  // drain_begun: called once no new connection is accepted and the drain has begun (systemd's STOPPING=1).
  asio::awaitable<void> shutdown(std::function<void()> drain_begun = {});
  // Second signal: no more waiting.
  void force_stop();
  std::size_t workers_left() const;
  // On loop 0: "3 sessions, 5 workers, 0 imports waiting" (and, once draining, the requests in flight),
  // for systemd's STATUS=.
  std::string status_text() const;

  // Listening and serving: /readyz says 200 from here until the drain begins.
  void set_ready() { ready_ = true; }
  // The admin listeners of the configuration: opened like [gateway] listen (systemd: NAME too).
  void listen_admin(PassedSockets& passed);
  // The classic Remote front's listeners ([classic] listen), likewise.
  void listen_classic(PassedSockets& passed);

 private:
  // What /metrics, /status and the status page show, taken at once on loop 0: the one place it is built.
  AdminSnapshot admin_snapshot() const;

  // Threads that classify and pickle-check large frames off the event loop (see StreamConnection).
  static constexpr std::size_t kOffloadThreads = 2;

  asio::io_context& io_;
  std::vector<asio::any_io_executor> loops_;
  asio::thread_pool offload_{kOffloadThreads};
  session::GatewayContext context_;
  SessionTable sessions_;
  fronts::Admission admission_;
  Reloader reloader_;
  bool listening_ = false;  // listen() ran: --stdio opens no listener, and a reload opens none either
  bool ready_ = false;
  const std::chrono::system_clock::time_point started_at_ = std::chrono::system_clock::now();
  const std::chrono::steady_clock::time_point started_steady_ = std::chrono::steady_clock::now();
  std::unique_ptr<LoopHeartbeat> heartbeat_;
  std::unique_ptr<AdminPages> admin_pages_;  // before admin_, whose handler calls it
  std::unique_ptr<fronts::HttpServer> admin_;
  std::unique_ptr<fronts::ClassicFront> classic_;
};

}  // namespace rjg::gateway::ops
