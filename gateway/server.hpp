// Listeners and the set of live sessions; orderly shutdown on SIGTERM/SIGINT.
#pragma once

#include "common/runtime/async_event.hpp"
#include "gateway/context.hpp"
#include "gateway/classic.hpp"
#include "gateway/http_server.hpp"
#include "gateway/connection.hpp"
#include "gateway/heartbeat.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/json/object.hpp>

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <memory>
#include <unordered_map>
#include <vector>

namespace rjg::gateway {

class PassedSockets;
using tcp = asio::ip::tcp;

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

  // The admin endpoint's pages (admin.cpp), on loop 0: /metrics, /livez, /readyz, /status, the status page
  // (/, status_page.cpp) and its stylesheet; nullopt: 404.
  std::optional<HttpResponse> admin_page(std::string_view path) const;
  // Listening and serving: /readyz says 200 from here until the drain begins.
  void set_ready() { ready_ = true; }
  // The admin listeners of the configuration: opened like [gateway] listen (systemd: NAME too).
  void listen_admin(PassedSockets& passed);
  // The classic Remote front's listeners ([classic] listen), likewise.
  void listen_classic(PassedSockets& passed);

 private:
  using unix_socket = asio::local::stream_protocol;
  struct Listener {
    std::string entry;  // the listen entry it serves, as written
    std::shared_ptr<tcp::acceptor> acceptor;            // tcp and systemd entries
    std::shared_ptr<unix_socket::acceptor> unix_acceptor;  // unix: entries
    std::string path;   // unix: the socket file, removed when the listener closes
    ino_t inode = 0;    // ... if it is still the one bound here
    std::string text() const;
    void close() const;
  };
  // The listeners of one entry, bound (tcp) or taken from what systemd passed; throws on failure.
  std::vector<Listener> open_entry(const config::ListenAddress& address, PassedSockets* passed,
                                   const std::vector<std::string>& named);
  void start_accepting(const Listener& listener);
  Listener open_unix(const config::ListenAddress& address);
  asio::awaitable<void> accept_loop(std::shared_ptr<tcp::acceptor> acceptor, std::string address);
  asio::awaitable<void> accept_unix(std::shared_ptr<unix_socket::acceptor> acceptor, std::string address);
  // A TCP connection whose balancer sends a PROXY header: read within handshake_timeout, then admitted as
  // the client it names.
  asio::awaitable<void> admit_proxied(tcp::socket socket, tcp::endpoint balancer, std::string address);
  // The checks every TCP client passes (allow_from, max_sessions, max_sessions_per_client), then adopt().
  // client: the address the checks apply to; name: how the session is named in logs.
  void admit_tcp(tcp::socket socket, const asio::ip::address& client, std::string peer, std::string address);
  // Starts the session on the next loop (a descriptor it takes over); `client` counts its sessions.
  void adopt(int fd, std::string client, std::string peer, bool is_socket = true, int out_fd = -1);
  // On the session's loop: completes once it is closed (at once if it is gone).
  static asio::awaitable<void> closed(std::weak_ptr<Connection> connection);
  // Answers a connection over a limit with a JSON-RPC error naming the limit, then closes it.
  template <class Socket>
  void refuse(Socket socket, std::string client, std::string message);
  // max_sessions and max_sessions_per_client (`who`: "This client address (10.1.2.3)"); false: refused.
  template <class Socket>
  bool within_limits(Socket& socket, const config::Gateway& gw, const std::string& client, const std::string& peer,
                     std::string_view who);

  // Threads that classify and pickle-check large frames off the event loop (see StreamConnection).
  static constexpr std::size_t kOffloadThreads = 2;

  struct Live {
    asio::any_io_executor loop;  // where the session runs: it is closed and awaited there
    std::weak_ptr<Connection> connection;
    std::string peer;  // "10.1.2.3:51234"
    std::chrono::steady_clock::time_point since;
    std::shared_ptr<std::atomic<std::size_t>> imports;  // the connection's imports_open
    std::shared_ptr<SessionActivity> activity;          // the connection's activity
  };

  asio::io_context& io_;
  std::vector<asio::any_io_executor> loops_;
  std::size_t next_loop_ = 0;
  asio::thread_pool offload_{kOffloadThreads};
  GatewayContext context_;
  std::vector<Listener> listeners_;
  bool started_ = false;
  bool listening_ = false;  // listen() ran: --stdio opens no listener, and a reload opens none either
  std::string reload_problem_;  // the last reload failed: why, for STATUS=
  std::unordered_map<std::uint64_t, Live> sessions_;  // loop 0's
  std::weak_ptr<Connection> stdio_;  // --stdio: the one session
  std::uint64_t next_session_ = 1;
  AsyncEvent sessions_gone_;  // set whenever the last session is forgotten (the drain waits for it)
  bool stopping_ = false;
  bool ready_ = false;
  const std::chrono::system_clock::time_point started_at_ = std::chrono::system_clock::now();
  const std::chrono::steady_clock::time_point started_steady_ = std::chrono::steady_clock::now();
  std::unique_ptr<HttpServer> admin_;
  std::unique_ptr<ClassicFront> classic_;
  // The names "systemd:NAME" entries take, in every section: a bare "systemd" leaves those sockets to them.
  std::vector<std::string> named_sockets() const;
  std::unique_ptr<LoopHeartbeat> heartbeat_;

  std::string metrics_text() const;
  // What /status says and the status page shows, taken at once on loop 0.
  boost::json::object status_snapshot() const;
};

}  // namespace rjg::gateway
