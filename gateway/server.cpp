#include "gateway/server.hpp"

#include "gateway/stream_connection.hpp"
#include "gateway/systemd.hpp"

#include "common/protocol/framing.hpp"
#include "common/log.hpp"
#include "common/protocol/message.hpp"
#include "common/protocol/protocol.hpp"
#include "common/runtime/loops.hpp"

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ip/v6_only.hpp>

#include <fmt/format.h>

#include <csignal>

#include <sys/socket.h>

namespace rjg::gateway {
using namespace std::chrono_literals;

namespace {
std::string endpoint_text(const tcp::endpoint& bound) {
  return fmt::format("tcp://{}:{}", bound.address().is_v6() ? "[" + bound.address().to_string() + "]"
                                                             : bound.address().to_string(),
                     bound.port());
}

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
  // Names that "systemd:NAME" entries take, so that a bare "systemd" leaves those sockets to them.
  std::vector<std::string> named = named_elsewhere;
  for (const auto& address : context_.config.gateway.listen)
    if (!address.fd_name.empty()) named.push_back(address.fd_name);
  for (const auto& address : context_.config.gateway.listen) {
    if (address.kind == config::ListenAddress::Kind::systemd) {
      for (int fd : passed.take(address, named)) adopt(fd, address.text);
      continue;
    }
    tcp::resolver resolver(io_);
    boost::system::error_code ec;
    auto results = resolver.resolve(address.host, std::to_string(address.port),
                                    tcp::resolver::numeric_service | tcp::resolver::passive, ec);
    if (ec || results.empty())
      throw std::runtime_error(fmt::format("cannot resolve listen address {}: {}", address.text, ec.message()));
    for (const auto& entry : results) {
      auto acceptor = std::make_unique<tcp::acceptor>(io_);
      auto endpoint = entry.endpoint();
      acceptor->open(endpoint.protocol(), ec);
      if (!ec) acceptor->set_option(tcp::acceptor::reuse_address(true), ec);
      if (!ec && endpoint.protocol() == tcp::v6()) acceptor->set_option(asio::ip::v6_only(true), ec);
      if (!ec) acceptor->bind(endpoint, ec);
      if (!ec) acceptor->listen(asio::socket_base::max_listen_connections, ec);
      if (ec) {
        throw std::runtime_error(fmt::format("cannot listen on {} ({}:{}): {}", address.text,
                                             endpoint.address().to_string(), endpoint.port(), ec.message()));
      }
      log::info("listening on {}", endpoint_text(acceptor->local_endpoint(ec)));
      acceptors_.push_back(std::move(acceptor));
    }
  }
}

void Server::adopt(int fd, const std::string& entry) {
  // The socket is bound and listening already (PassedSockets checked): it only needs its protocol.
  sockaddr_storage address{};
  socklen_t size = sizeof address;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &size);
  auto acceptor = std::make_unique<tcp::acceptor>(io_);
  boost::system::error_code ec;
  acceptor->assign(address.ss_family == AF_INET6 ? tcp::v6() : tcp::v4(), fd, ec);
  if (ec) throw std::runtime_error(fmt::format("listen entry \"{}\": cannot use fd {}: {}", entry, fd, ec.message()));
  log::info("listening on {} (socket passed by systemd, fd {}, for \"{}\")", endpoint_text(acceptor->local_endpoint(ec)),
            fd, entry);
  acceptors_.push_back(std::move(acceptor));
}

void Server::start() {
  context_.pools.start();
  for (auto& acceptor : acceptors_) {
    boost::system::error_code ec;
    auto bound = acceptor->local_endpoint(ec);
    std::string address = fmt::format("{}:{}", bound.address().to_string(), bound.port());
    asio::co_spawn(io_, accept_loop(*acceptor, address), log_exceptions("listener " + address));
  }
}

asio::awaitable<void> Server::accept_loop(tcp::acceptor& acceptor, std::string address) {
  while (!stopping_) {
    auto [ec, socket] = co_await acceptor.async_accept(asio::as_tuple(asio::use_awaitable));
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
    const auto client = peer.address().to_string();
    if (!allowed(peer.address())) {
      // Nothing is said to an address that may not connect at all.
      log::warn("listener {}: refused a connection from {}: not in [gateway] allow_from", address, client);
      socket.close(ec);
      continue;
    }
    const auto& gw = context_.config.gateway;
    if (gw.max_sessions && sessions_.size() >= gw.max_sessions) {
      refuse(std::move(socket), client,
             fmt::format("The gateway serves at most {} sessions at once (max_sessions) and is full; retry later.",
                         gw.max_sessions));
      continue;
    }
    if (gw.max_sessions_per_client && per_client_[client] >= gw.max_sessions_per_client) {
      refuse(std::move(socket), client,
             fmt::format("This client address ({}) already has {} sessions, the most allowed "
                         "(max_sessions_per_client); close some, or retry later.",
                         client, gw.max_sessions_per_client));
      continue;
    }
    socket.set_option(tcp::no_delay(true), ec);
    // The session reads and writes the descriptor itself (FdStream: no read known to find nothing), on
    // the next loop in turn: it, its dedicated workers and its relay stay there.
    const auto loop = loops_[next_loop_++ % loops_.size()];
    const int fd = socket.release(ec);
    if (ec) {
      log::warn("listener {}: cannot take over the connection from {}: {}", address, client, ec.message());
      continue;
    }
    auto number = next_session_++;
    auto name = fmt::format("session {} ({}:{})", number, client, peer.port());
    // Made here, started on its loop: nothing of it runs on this one.
    auto session = std::make_shared<StreamConnection<FdStream>>(FdStream(loop, fd), context_, context_.pools,
                                                                std::move(name), offload_.get_executor());
    sessions_[number] = Live{loop, session};
    ++per_client_[client];
    // Forget sessions once they are gone, so neither map grows with every connection: the session's loop
    // awaits its end, this loop forgets it.
    asio::co_spawn(
        loop,
        [session]() -> asio::awaitable<void> {
          session->start();
          co_await session->wait_closed();
        },
        asio::bind_executor(io_, [this, number, client](std::exception_ptr e) {
          log_exceptions("session tracker")(e);
          sessions_.erase(number);
          if (auto it = per_client_.find(client); it != per_client_.end() && --it->second == 0) per_client_.erase(it);
          if (sessions_.empty()) sessions_gone_.set();
        }));
  }
}

bool Server::allowed(const asio::ip::address& address) const {
  const auto& networks = context_.config.gateway.allow_from;
  if (networks.empty()) return true;
  for (const auto& net : networks) {
    if (address.is_v4()) {
      auto bytes = address.to_v4().to_bytes();
      if (net.contains_bytes(false, bytes.data())) return true;
    } else {
      auto bytes = address.to_v6().to_bytes();
      if (net.contains_bytes(true, bytes.data())) return true;
    }
  }
  return false;
}

void Server::refuse(tcp::socket socket, std::string client, std::string message) {
  log::warn("refused a connection from {}: {}", client, message);
  // Say which limit, then close; a client that does not read gets at most 2s of our attention.
  asio::co_spawn(
      io_,
      [socket = std::make_shared<tcp::socket>(std::move(socket)),
       frame = encode_frame(make_error(nullptr, protocol::kAtCapacity, message))]() -> asio::awaitable<void> {
        asio::steady_timer deadline(socket->get_executor(), 2s);
        deadline.async_wait([socket](const boost::system::error_code& ec) {
          boost::system::error_code ignored;
          if (!ec) socket->close(ignored);
        });
        co_await asio::async_write(*socket, asio::buffer(frame), asio::as_tuple(asio::use_awaitable));
        boost::system::error_code ignored;
        socket->shutdown(tcp::socket::shutdown_both, ignored);
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
  for (auto& acceptor : acceptors_) {
    boost::system::error_code ignored;
    acceptor->close(ignored);
  }
  if (drain_begun) drain_begun();
  // The sessions already open go on working, imports and keywords alike, so that no suite is cut at its
  // next keyword; a load balancer has stopped sending new ones (/readyz). They end by themselves, or
  // are closed when drain_timeout passes.
  const auto drain = context_.config.gateway.drain_timeout;
  log::info("draining: no new connections; {} sessions ({} requests in flight) may go on for up to {}s",
            sessions_.size(), context_.requests_in_flight.load(), drain.count() / 1000.0);
  const auto deadline = AsyncEvent::clock::now() + drain;
  while (!sessions_.empty()) {
    sessions_gone_.reset();
    if (!co_await sessions_gone_.wait_until(deadline)) break;
  }
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
  // Ends every worker left: prewarmed and shared ones.
  co_await context_.pools.shutdown();
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
  return text;
}

}  // namespace rjg::gateway
