#include "gateway/server.hpp"

#include "gateway/addresses.hpp"
#include "gateway/proxy_protocol.hpp"
#include "gateway/stream_connection.hpp"
#include "gateway/systemd.hpp"

#include "common/protocol/framing.hpp"
#include "common/log.hpp"
#include "common/protocol/message.hpp"
#include "common/protocol/protocol.hpp"
#include "common/runtime/loops.hpp"
#include "workers/supervisor/spawn.hpp"

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ip/v6_only.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <csignal>

#include <grp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace rjg::gateway {
using namespace std::chrono_literals;

namespace {

std::vector<asio::any_io_executor> or_only(asio::io_context& io, std::vector<asio::any_io_executor> loops) {
  if (loops.empty()) loops.push_back(io.get_executor());
  return loops;
}
}  // namespace

Server::Server(asio::io_context& io, const config::Config& config, std::string version,
               std::vector<asio::any_io_executor> loops)
    : io_(io),
      loops_(or_only(io, std::move(loops))),
      context_(io.get_executor(), config, std::move(version), offload_.get_executor(), loops_),
      sessions_gone_(io.get_executor()) {}

void Server::listen(PassedSockets& passed, const std::vector<std::string>& named_elsewhere) {
  listening_ = true;
  const auto config = context_.config();
  std::vector<std::string> named = named_elsewhere;
  for (auto& name : named_sockets()) named.push_back(std::move(name));
  for (const auto& address : config->gateway.listen)
    for (auto& listener : open_entry(address, &passed, named)) listeners_.push_back(std::move(listener));
}

std::string Server::Listener::text() const {
  boost::system::error_code ec;
  if (unix_acceptor) return "unix:" + path;
  return endpoint_text(acceptor->local_endpoint(ec));
}

void Server::Listener::close() const {
  boost::system::error_code ignored;
  if (acceptor) acceptor->close(ignored);
  if (!unix_acceptor || !unix_acceptor->is_open()) return;
  unix_acceptor->close(ignored);
  // Only the file bound here: a gateway started since may have replaced it.
  struct stat st{};
  if (::lstat(path.c_str(), &st) == 0 && st.st_ino == inode && S_ISSOCK(st.st_mode)) ::unlink(path.c_str());
}

Server::Listener Server::open_unix(const config::ListenAddress& address) {
  const auto& gw = context_.config()->gateway;
  const std::string& path = address.path;
  auto fail = [&](const std::string& why) {
    return std::runtime_error(fmt::format("cannot listen on {}: {}", address.text, why));
  };
  // A file left by a gateway that did not exit cleanly is replaced; a socket someone listens on, or a file
  // that is not a socket, is not.
  struct stat st{};
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) throw fail("the path exists and is not a socket; refusing to replace it");
    unix_socket::socket probe(io_);
    boost::system::error_code ec;
    // Never blocking: a listener whose backlog is full (a stopped process) answers EAGAIN, and listens.
    probe.open(unix_socket(), ec);
    if (!ec) probe.non_blocking(true, ec);
    if (!ec) probe.connect(unix_socket::endpoint(path), ec);
    if (!ec || ec == asio::error::would_block || ec == asio::error::try_again || ec == asio::error::in_progress)
      throw fail("another process listens on it (stop it, or choose another path)");
    if (ec != asio::error::connection_refused)
      throw fail(fmt::format("it exists and cannot be checked ({}); remove it if no gateway uses it", ec.message()));
    log::info("{}: replacing a stale socket file (nothing listens on it)", address.text);
    ::unlink(path.c_str());
  }
  gid_t group = static_cast<gid_t>(-1);
  if (!gw.unix_group.empty()) {
    if (std::all_of(gw.unix_group.begin(), gw.unix_group.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      group = static_cast<gid_t>(std::stoul(gw.unix_group));
    } else if (const ::group* g = ::getgrnam(gw.unix_group.c_str())) {
      group = g->gr_gid;
    } else {
      throw fail(fmt::format("unix_group '{}' does not exist on this host", gw.unix_group));
    }
  }
  // Bound in a private directory (0700, made beside the path) where nobody else can reach the file, given its
  // mode and group there, then linked into place: at the path there is never a file of the umask's mode, and
  // no window between bind() and chmod() in which a writer of the directory could swap the file under us.
  // (Short names: a socket's path has at most 107 bytes.)
  const auto slash = path.rfind('/');
  std::string private_dir =
      (slash == std::string::npos ? std::string(".") : path.substr(0, slash == 0 ? 1 : slash)) + "/.rjg-XXXXXX";
  if (private_dir.size() + 2 > sizeof(sockaddr_un::sun_path) - 1)
    throw fail(fmt::format("the gateway binds the socket in a private directory beside it first ({}/s), and that "
                           "path would be longer than a socket's {} bytes; choose a shorter directory",
                           private_dir, sizeof(sockaddr_un::sun_path) - 1));
  if (!::mkdtemp(private_dir.data()))
    throw fail(fmt::format("cannot make a private directory beside it ({}): the gateway needs to create files in "
                           "the socket's directory",
                           std::strerror(errno)));
  const std::string staged = private_dir + "/s";
  struct Cleanup {
    const std::string& dir;
    const std::string& file;
    ~Cleanup() {
      ::unlink(file.c_str());  // the path keeps the socket file's other link
      ::rmdir(dir.c_str());
    }
  } cleanup{private_dir, staged};
  auto acceptor = std::make_shared<unix_socket::acceptor>(io_);
  boost::system::error_code ec;
  acceptor->open(unix_socket(), ec);
  if (!ec) acceptor->bind(unix_socket::endpoint(staged), ec);
  if (ec) throw fail(ec.message());
  if (::chmod(staged.c_str(), static_cast<mode_t>(gw.unix_mode)) != 0 ||
      (group != static_cast<gid_t>(-1) && ::chown(staged.c_str(), static_cast<uid_t>(-1), group) != 0)) {
    throw fail(fmt::format("cannot set the socket file's {} ({})", group != static_cast<gid_t>(-1) ? "mode or group" : "mode",
                           std::strerror(errno)));
  }
  // Mode and group are set before listen() and before the file appears at the path, so a connect finds it
  // only as it is meant. link(), not rename(): it never replaces a file that appeared there meanwhile.
  if (::link(staged.c_str(), path.c_str()) != 0)
    throw fail(errno == EEXIST ? std::string("a file appeared at the path while the gateway was binding; refusing to "
                                             "replace it")
                               : fmt::format("cannot put the socket file in place ({})", std::strerror(errno)));
  Listener listener{address.text, nullptr, acceptor, path, 0};
  if (::lstat(path.c_str(), &st) == 0) listener.inode = st.st_ino;
  acceptor->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    listener.close();
    throw fail(ec.message());
  }
  log::info("listening on {} (mode {:04o}{})", address.text, gw.unix_mode,
            gw.unix_group.empty() ? "" : ", group " + gw.unix_group);
  return listener;
}

std::vector<Server::Listener> Server::open_entry(const config::ListenAddress& address, PassedSockets* passed,
                                                 const std::vector<std::string>& named) {
  std::vector<Listener> opened;
  if (address.kind == config::ListenAddress::Kind::unix_socket) {
    opened.push_back(open_unix(address));
    return opened;
  }
  if (address.kind == config::ListenAddress::Kind::systemd) {
    if (!passed)
      throw std::runtime_error(fmt::format("listen entry \"{}\": systemd passes sockets only when it starts the "
                                           "gateway; restart it to listen there",
                                           address.text));
    for (int fd : passed->take(address, named)) {
      // The socket is bound and listening already (PassedSockets checked): it only needs its protocol.
      sockaddr_storage bound{};
      socklen_t size = sizeof bound;
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &size);
      auto acceptor = std::make_shared<tcp::acceptor>(io_);
      boost::system::error_code ec;
      acceptor->assign(bound.ss_family == AF_INET6 ? tcp::v6() : tcp::v4(), fd, ec);
      if (ec) throw std::runtime_error(fmt::format("listen entry \"{}\": cannot use fd {}: {}", address.text, fd, ec.message()));
      log::info("listening on {} (socket passed by systemd, fd {}, for \"{}\")",
                endpoint_text(acceptor->local_endpoint(ec)), fd, address.text);
      opened.push_back({address.text, std::move(acceptor), nullptr, {}, 0});
    }
    return opened;
  }
  tcp::resolver resolver(io_);
  boost::system::error_code ec;
  auto results = resolver.resolve(address.host, std::to_string(address.port),
                                  tcp::resolver::numeric_service | tcp::resolver::passive, ec);
  if (ec || results.empty())
    throw std::runtime_error(fmt::format("cannot resolve listen address {}: {}", address.text, ec.message()));
  for (const auto& entry : results) {
    auto acceptor = std::make_shared<tcp::acceptor>(io_);
    auto endpoint = entry.endpoint();
    acceptor->open(endpoint.protocol(), ec);
    if (!ec) acceptor->set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec && endpoint.protocol() == tcp::v6()) acceptor->set_option(asio::ip::v6_only(true), ec);
    if (!ec) acceptor->bind(endpoint, ec);
    if (!ec) acceptor->listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
      // What this entry opened so far closes with `opened`.
      throw std::runtime_error(fmt::format("cannot listen on {} ({}:{}): {}", address.text,
                                           endpoint.address().to_string(), endpoint.port(), ec.message()));
    }
    log::info("listening on {}", endpoint_text(acceptor->local_endpoint(ec)));
    opened.push_back({address.text, std::move(acceptor), nullptr, {}, 0});
  }
  return opened;
}

void Server::start() {
  context_.pools.start();
  started_ = true;
  for (const auto& listener : listeners_) start_accepting(listener);
}

void Server::start_accepting(const Listener& listener) {
  if (listener.unix_acceptor) {
    asio::co_spawn(io_, accept_unix(listener.unix_acceptor, listener.text()), log_exceptions("listener " + listener.text()));
    return;
  }
  boost::system::error_code ec;
  auto bound = listener.acceptor->local_endpoint(ec);
  std::string address = fmt::format("{}:{}", bound.address().to_string(), bound.port());
  asio::co_spawn(io_, accept_loop(listener.acceptor, address), log_exceptions("listener " + address));
}

bool Server::reload(const std::string& path) {
  if (stopping_) {
    log::warn("reload: ignored, the gateway is shutting down");
    return false;
  }
  log::info("reload: reading {}", path);
  const auto before = context_.config();
  std::vector<std::string> problems;
  std::shared_ptr<config::Config> next;
  try {
    next = std::make_shared<config::Config>(config::load_file(path));
    problems = workers::check_libraries(*next);
  } catch (const config::ConfigError& e) {
    problems = e.problems;
  }
  auto fail = [&](std::vector<std::string> why) {
    for (const auto& problem : why) log::error("reload: {}", problem);
    reload_problem_ = fmt::format("reload failed: {} problem{} in {}; serving the previous configuration", why.size(),
                                  why.size() == 1 ? "" : "s", path);
    log::error("reload: {} (nothing changed; fix the file and reload again)", reload_problem_);
    context_.metrics.reloads_failed.fetch_add(1, std::memory_order_relaxed);
    return false;
  };
  if (!problems.empty()) return fail(std::move(problems));

  // What cannot change while running keeps its value, and the log says so; the rest applies.
  auto& gw = next->gateway;
  std::vector<std::string> notes;  // logged once the reload is sure to apply
  if (gw.threads != before->gateway.threads) {
    notes.push_back(fmt::format("[gateway] threads changed from {} to {}: that needs a restart; the event loops "
                                "stay as they are",
                                before->gateway.threads, gw.threads));
    gw.threads = before->gateway.threads;
  }
  for (auto limit : {&config::Gateway::max_message_bytes, &config::Gateway::max_header_bytes}) {
    if (gw.*limit != before->gateway.*limit)
      notes.push_back(fmt::format("[gateway] {} changed: a lower value applies to new client connections, a higher "
                                  "one only after a restart (workers keep the limit they started with)",
                                  limit == &config::Gateway::max_message_bytes ? "max_message_bytes" : "max_header_bytes"));
  }

  if (gw.unix_mode != before->gateway.unix_mode || gw.unix_group != before->gateway.unix_group)
    notes.push_back("[gateway] unix_mode or unix_group changed: it applies to unix: listeners opened from now on; "
                    "those already open keep their file's mode and group until a restart");
  // --stdio: no listener, whatever the file says.
  if (!listening_) gw.listen = before->gateway.listen;
  // Listeners: the entries no longer listed close (their sessions stay); new ones open. A new address that
  // cannot be opened fails the whole reload, before anything has changed.
  auto listed = [](const config::Config& c, const std::string& text) {
    return std::any_of(c.gateway.listen.begin(), c.gateway.listen.end(), [&](auto& a) { return a.text == text; });
  };
  std::vector<Listener> opened;
  std::vector<config::ListenAddress> kept_listen;
  for (const auto& address : gw.listen) {
    if (listed(*before, address.text)) {
      kept_listen.push_back(address);
      continue;
    }
    if (address.kind == config::ListenAddress::Kind::systemd) {
      notes.push_back(fmt::format("listen entry \"{}\" is new: systemd passes sockets only at start, so it needs a "
                                  "restart",
                                  address.text));
      continue;
    }
    try {
      for (auto& listener : open_entry(address, nullptr, {})) opened.push_back(std::move(listener));
    } catch (const std::exception& e) {
      for (auto& listener : opened) listener.close();
      return fail({e.what()});
    }
    kept_listen.push_back(address);
  }
  // systemd entries that could not be added stay out of the configuration in force.
  gw.listen = std::move(kept_listen);
  std::erase_if(listeners_, [&](Listener& listener) {
    if (listed(*next, listener.entry)) return false;
    log::info("reload: no longer listening on {} (\"{}\"); its sessions go on", listener.text(), listener.entry);
    if (listener.entry.starts_with("systemd"))
      log::warn("reload: systemd still holds the socket of \"{}\": clients that connect there now wait unserved; "
                "remove it from the .socket unit as well",
                listener.entry);
    listener.close();
    return true;
  });
  for (auto& listener : opened) {
    if (started_) start_accepting(listener);
    listeners_.push_back(std::move(listener));
  }

  // [admin] and [classic]: who may connect applies to new connections; their addresses need a restart.
  if (next->admin.listen != before->admin.listen) {
    notes.push_back("[admin] listen changed: that needs a restart; the admin endpoint stays where it is");
    next->admin.listen = before->admin.listen;
  }
  if (admin_) admin_->set_allow_from(next->admin.allow_from);
  if (next->classic.listen != before->classic.listen) {
    notes.push_back("[classic] listen changed: that needs a restart; the classic front stays where it is");
    next->classic.listen = before->classic.listen;
  }
  if (classic_) classic_->reconfigure(*next);
  for (const auto& note : notes) log::warn("reload: {}", note);

  // Everything else: from now on.
  std::shared_ptr<const config::Config> applied = std::move(next);
  context_.set_config(applied);
  context_.router.update(applied);
  const auto changes = context_.pools.reload(applied);
  if (log::Level level; log::parse_level(applied->gateway.log_level, level)) log::set_level(level);
  if (log::Format format; log::parse_format(applied->gateway.log_format, format)) log::set_format(format);
  reload_problem_.clear();
  context_.metrics.reloads_ok.fetch_add(1, std::memory_order_relaxed);
  context_.metrics.last_reload_seconds =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  auto names = [](const std::vector<std::string>& v) { return v.empty() ? std::string("none") : fmt::format("{}", fmt::join(v, ", ")); };
  log::info("reload: applied {}: libraries added: {}; removed: {}; changed: {}; unchanged: {}", path,
            names(changes.added), names(changes.removed), names(changes.changed), changes.unchanged);
  return true;
}

asio::awaitable<void> Server::accept_loop(std::shared_ptr<tcp::acceptor> acceptor, std::string address) {
  while (!stopping_ && acceptor->is_open()) {
    auto [ec, socket] = co_await acceptor->async_accept(asio::as_tuple(asio::use_awaitable));
    // A connection accepted just before its listener closed (a reload) is served all the same.
    if (stopping_ || ec == asio::error::operation_aborted) break;
    if (ec) {
      // Typically out of file descriptors: back off instead of spinning on the same error.
      log::error("listener {}: accept failed: {}; retrying in 100ms", address, ec.message());
      asio::steady_timer pause(io_, 100ms);
      co_await pause.async_wait(asio::as_tuple(asio::use_awaitable));
      continue;
    }
    auto peer = socket.remote_endpoint(ec);
    if (ec) continue;  // already gone
    // A balancer's connection starts with the PROXY header, read without holding up this loop's accepts.
    const auto config = context_.config();  // held: the networks below belong to it
    const auto& balancers = config->gateway.proxy_protocol_from;
    if (!balancers.empty() && allowed(balancers, peer.address())) {
      asio::co_spawn(io_, admit_proxied(std::move(socket), peer, address), log_exceptions("proxied connection"));
      continue;
    }
    admit_tcp(std::move(socket), peer.address(), fmt::format("{}:{}", address_text(peer.address()), peer.port()), address);
  }
}

asio::awaitable<void> Server::admit_proxied(tcp::socket socket, tcp::endpoint balancer, std::string address) {
  const auto balancer_text = fmt::format("{}:{}", balancer.address().to_string(), balancer.port());
  const auto parsed = co_await read_proxy_header(socket, context_.config()->gateway.handshake_timeout);
  if (stopping_) co_return;
  if (parsed.status != ProxyParse::Status::done) {
    // Nothing is said: a client that is not a balancer gets no hint, and a balancer logs the closed connection.
    log::warn("listener {}: refused a connection from {} (in [gateway] proxy_protocol_from): {}", address,
              balancer_text, parsed.error);
    context_.metrics.refuse(workers::Refusal::proxy_header);
    boost::system::error_code ignored;
    socket.close(ignored);
    co_return;
  }
  if (parsed.header.local || !parsed.header.source) {
    // A health check, or a header without addresses: the balancer's own connection.
    admit_tcp(std::move(socket), balancer.address(), balancer_text + " (PROXY LOCAL)", address);
    co_return;
  }
  const auto& client = *parsed.header.source;
  admit_tcp(std::move(socket), client.address(),
            fmt::format("{}:{} via {}", address_text(client.address()), client.port(), balancer_text), address);
}

void Server::admit_tcp(tcp::socket socket, const asio::ip::address& client_address, std::string peer,
                       std::string address) {
  boost::system::error_code ec;
  const auto client = address_text(client_address);
  // The limits in force when the connection arrives; the session keeps them (a reload applies to new ones).
  const auto config = context_.config();
  const auto& gw = config->gateway;
  if (!allowed(gw.allow_from, client_address)) {
    // Nothing is said to an address that may not connect at all.
    log::warn("listener {}: refused a connection from {}: not in [gateway] allow_from", address, peer);
    context_.metrics.refuse(workers::Refusal::allow_from);
    socket.close(ec);
    return;
  }
  if (!within_limits(socket, gw, client, peer, fmt::format("This client address ({})", client))) return;
  socket.set_option(tcp::no_delay(true), ec);
  const int fd = socket.release(ec);
  if (ec) {
    log::warn("listener {}: cannot take over the connection from {}: {}", address, peer, ec.message());
    return;
  }
  adopt(fd, client, std::move(peer));
}

asio::awaitable<void> Server::accept_unix(std::shared_ptr<unix_socket::acceptor> acceptor, std::string address) {
  while (!stopping_ && acceptor->is_open()) {
    auto [ec, socket] = co_await acceptor->async_accept(asio::as_tuple(asio::use_awaitable));
    if (stopping_ || ec == asio::error::operation_aborted) break;
    if (ec) {
      log::error("listener {}: accept failed: {}; retrying in 100ms", address, ec.message());
      asio::steady_timer pause(io_, 100ms);
      co_await pause.async_wait(asio::as_tuple(asio::use_awaitable));
      continue;
    }
    // Who connected, as the kernel says: the file's mode and group decided that they may; sessions are
    // counted per uid.
    ucred cred{};
    socklen_t size = sizeof cred;
    if (::getsockopt(socket.native_handle(), SOL_SOCKET, SO_PEERCRED, &cred, &size) != 0) cred = ucred{0, 0, 0};
    const std::string client = fmt::format("uid {}", cred.uid);
    const std::string peer = fmt::format("{} uid {} pid {}", address, cred.uid, cred.pid);
    const auto config = context_.config();
    if (!within_limits(socket, config->gateway, client, peer, fmt::format("This user (uid {})", cred.uid))) continue;
    const int fd = socket.release(ec);
    if (ec) continue;
    adopt(fd, client, peer);
  }
}

asio::awaitable<void> Server::serve_stdio(int in, int out) {
  adopt(in, "stdio", "stdio", false, out);
  co_await closed(stdio_);
}

void Server::adopt(int fd, std::string client, std::string peer, bool is_socket, int out_fd) {
  // The session reads and writes the descriptor itself (FdStream: no read known to find nothing), on
  // the next loop in turn: it, its dedicated workers and its relay stay there.
  const auto loop = loops_[next_loop_++ % loops_.size()];
  auto number = next_session_++;
  context_.metrics.sessions_total.fetch_add(1, std::memory_order_relaxed);
  auto name = fmt::format("session {} ({})", number, peer);
  std::shared_ptr<Connection> session;
  std::function<void()> start;
  if (is_socket) {
    // Made here, started on its loop: nothing of it runs on this one.
    auto s = std::make_shared<StreamConnection<FdStream>>(FdStream(loop, fd), context_, context_.pools,
                                                          std::move(name), offload_.get_executor());
    start = [s] { s->start(); };
    session = s;
  } else {
    using Stdio = DuplexStream<FdStream, FdStream>;
    auto s = std::make_shared<StreamConnection<Stdio>>(Stdio(FdStream(loop, fd), FdStream(loop, out_fd)), context_,
                                                       context_.pools, std::move(name), offload_.get_executor());
    start = [s] { s->start(); };
    session = s;
    stdio_ = s;
  }
  sessions_[number] =
      Live{loop, session, std::move(peer), std::chrono::steady_clock::now(), session->imports_open, session->activity};
  context_.clients->add(client);
  // Forget sessions once they are gone, so neither map grows with every connection: the session's loop
  // awaits its end, this loop forgets it.
  asio::co_spawn(
      loop,
      [session, start]() -> asio::awaitable<void> {
        start();
        co_await session->wait_closed();
      },
      asio::bind_executor(io_, [this, number, client](std::exception_ptr e) {
        log_exceptions("session tracker")(e);
        sessions_.erase(number);
        context_.clients->remove(client);
        if (sessions_.empty()) sessions_gone_.set();
      }));
}

template <class Socket>
bool Server::within_limits(Socket& socket, const config::Gateway& gw, const std::string& client,
                           const std::string& peer, std::string_view who) {
  if (gw.max_sessions && sessions_.size() >= gw.max_sessions) {
    context_.metrics.refuse(workers::Refusal::max_sessions);
    refuse(std::move(socket), peer,
           fmt::format("The gateway serves at most {} sessions at once (max_sessions) and is full; retry later.",
                       gw.max_sessions));
    return false;
  }
  if (gw.max_sessions_per_client && context_.clients->held(client) >= gw.max_sessions_per_client) {
    context_.metrics.refuse(workers::Refusal::max_sessions_per_client);
    refuse(std::move(socket), peer,
           fmt::format("{} already has {} sessions, the most allowed (max_sessions_per_client; the imports the "
                       "classic front holds for its calls count as sessions); close some, or retry later.",
                       who, gw.max_sessions_per_client));
    return false;
  }
  return true;
}

template <class Socket>
void Server::refuse(Socket socket, std::string client, std::string message) {
  log::warn("refused a connection from {}: {}", client, message);
  // Say which limit, then close; a client that does not read gets at most 2s of our attention.
  asio::co_spawn(
      io_,
      [socket = std::make_shared<Socket>(std::move(socket)),
       frame = encode_frame(make_error(nullptr, protocol::kAtCapacity, message))]() -> asio::awaitable<void> {
        asio::steady_timer deadline(socket->get_executor(), 2s);
        deadline.async_wait([socket](const boost::system::error_code& ec) {
          boost::system::error_code ignored;
          if (!ec) socket->close(ignored);
        });
        co_await asio::async_write(*socket, asio::buffer(frame), asio::as_tuple(asio::use_awaitable));
        boost::system::error_code ignored;
        socket->shutdown(asio::socket_base::shutdown_both, ignored);
        socket->close(ignored);
        deadline.cancel();
      },
      log_exceptions("refuse"));
}

asio::awaitable<void> Server::closed(std::weak_ptr<Connection> connection) {
  if (auto s = connection.lock()) co_await s->wait_closed();
}

asio::awaitable<void> Server::shutdown(std::function<void()> drain_begun) {
  stopping_ = true;
  context_.draining = true;
  for (auto& listener : listeners_) listener.close();
  if (drain_begun) drain_begun();
  // The sessions already open go on working, imports and keywords alike, so that no suite is cut at its
  // next keyword; a load balancer has stopped sending new ones (/readyz). They end by themselves, or
  // are closed when drain_timeout passes.
  const auto drain = context_.config()->gateway.drain_timeout;
  log::info("draining: no new connections; {} sessions ({} requests in flight) may go on for up to {}s",
            sessions_.size(), context_.requests_in_flight.load(), drain.count() / 1000.0);
  const auto deadline = AsyncEvent::clock::now() + drain;
  while (!sessions_.empty()) {
    sessions_gone_.reset();
    if (!co_await sessions_gone_.wait_until(deadline)) break;
  }
  bool classic_drained = true;  // not `!classic_ || co_await ...`: GCC 12 and co_await in a condition
  if (classic_) classic_drained = co_await classic_->drain(deadline);
  if (!classic_drained)
    log::warn("draining: {} classic Remote calls still running after drain_timeout; ending them",
              classic_->calls_running());
  std::string why;
  if (!sessions_.empty()) {
    why = fmt::format("the gateway is shutting down and its drain_timeout ({}s) has passed", drain.count() / 1000.0);
    log::warn("draining: {} sessions still open ({} requests in flight) after drain_timeout; closing them",
              sessions_.size(), context_.requests_in_flight.load());
  }

  // Each session is closed and awaited on its own loop. Only weak references are held here: a session
  // is always let go of on its own loop, even if this coroutine never resumes (a second signal).
  // Closing a session stops its workers, and what still runs there is answered with an error naming why.
  std::vector<Live> live;
  for (auto& [number, session] : sessions_) live.push_back(session);
  for (auto& session : live)
    asio::post(session.loop, [weak = session.connection, why] {
      if (auto s = weak.lock()) s->close(why);
    });
  for (auto& session : live) co_await run_on(session.loop, closed(session.connection));
  // The classic front's imports end (what still runs there fails), then every worker left: prewarmed and
  // shared ones.
  if (classic_) co_await classic_->shutdown();
  co_await context_.pools.shutdown();
  if (admin_) admin_->stop();
  log::info("shutdown complete");
}

void Server::force_stop() {
  log::warn("second signal: killing {} workers and stopping now", context_.reaper.watched());
  context_.reaper.signal_all(SIGKILL);
}

std::size_t Server::workers_left() const { return context_.reaper.watched(); }

std::string Server::status_text() const {
  std::string text = fmt::format("{} session{}, {} worker{}, {} import{} waiting", sessions_.size(),
                                 sessions_.size() == 1 ? "" : "s", context_.pools.live(),
                                 context_.pools.live() == 1 ? "" : "s", context_.pools.waiting(),
                                 context_.pools.waiting() == 1 ? "" : "s");
  if (context_.draining) text = fmt::format("draining: {} requests in flight; ", context_.requests_in_flight.load()) + text;
  if (auto backoffs = context_.pools.backoffs(); !backoffs.empty()) text += "; " + backoffs;
  if (!reload_problem_.empty()) text += "; " + reload_problem_;
  return text;
}

}  // namespace rjg::gateway
