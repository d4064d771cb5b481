// Accepting and admitting: the accept loops of [gateway] listen, the PROXY hand-off, and the checks every
// client passes before it becomes a session.
#include "gateway/fronts/admission.hpp"

#include "gateway/fronts/addresses.hpp"
#include "gateway/fronts/proxy_protocol.hpp"

#include "common/log.hpp"
#include "common/protocol/framing.hpp"
#include "common/protocol/message.hpp"
#include "common/protocol/protocol.hpp"
#include "common/runtime/async_event.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include <fmt/format.h>

#include <sys/socket.h>

namespace rjg::gateway::fronts {
using namespace std::chrono_literals;

Admission::Admission(asio::io_context& io, session::GatewayContext& context, ops::SessionTable& sessions)
    : io_(io), context_(context), sessions_(sessions) {}

Admission::~Admission() {
  for (const auto& listener : listeners_) listener.close();
}

void Admission::add(Listener listener) {
  if (started_) start_accepting(listener);
  listeners_.push_back(std::move(listener));
}

void Admission::start() {
  started_ = true;
  for (const auto& listener : listeners_) start_accepting(listener);
}

void Admission::stop() {
  stopping_ = true;
  for (auto& listener : listeners_) listener.close();
}

void Admission::close_if(const std::function<bool(const Listener&)>& drop) {
  std::erase_if(listeners_, [&](const Listener& listener) {
    if (!drop(listener)) return false;
    listener.close();
    return true;
  });
}

void Admission::start_accepting(const Listener& listener) {
  if (listener.unix_acceptor) {
    asio::co_spawn(io_, accept_unix(listener.unix_acceptor, listener.text()), runtime::log_exceptions("listener " + listener.text()));
    return;
  }
  boost::system::error_code ec;
  auto bound = listener.acceptor->local_endpoint(ec);
  std::string address = fmt::format("{}:{}", bound.address().to_string(), bound.port());
  asio::co_spawn(io_, accept_tcp(listener.acceptor, address), runtime::log_exceptions("listener " + address));
}

// Accepts on one listener until it closes or the gateway stops, handing each connection to `take`.
template <class Acceptor, class Take>
asio::awaitable<void> Admission::accept_loop(std::shared_ptr<Acceptor> acceptor, std::string address, Take take) {
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
    take(std::move(socket));
  }
}

asio::awaitable<void> Admission::accept_tcp(std::shared_ptr<tcp::acceptor> acceptor, std::string address) {
  return accept_loop(std::move(acceptor), address, [this, address](tcp::socket socket) {
    boost::system::error_code ec;
    auto peer = socket.remote_endpoint(ec);
    if (ec) return;  // already gone
    // A balancer's connection starts with the PROXY header, read without holding up this loop's accepts.
    const auto config = context_.config();  // held: the networks below belong to it
    const auto& balancers = config->gateway.proxy_protocol_from;
    if (!balancers.empty() && allowed(balancers, peer.address())) {
      asio::co_spawn(io_, admit_proxied(std::move(socket), peer, address), runtime::log_exceptions("proxied connection"));
      return;
    }
    admit_tcp(std::move(socket), peer.address(), fmt::format("{}:{}", address_text(peer.address()), peer.port()),
              address);
  });
}

asio::awaitable<void> Admission::admit_proxied(tcp::socket socket, tcp::endpoint balancer, std::string address) {
  const auto balancer_text = fmt::format("{}:{}", balancer.address().to_string(), balancer.port());
  const auto parsed = co_await read_proxy_header(socket, context_.config()->gateway.handshake_timeout);
  if (stopping_) co_return;
  if (parsed.status != ProxyParse::Status::done) {
    // Nothing is said: a client that is not a balancer gets no hint, and a balancer logs the closed connection.
    log::warn("listener {}: refused a connection from {} (in [gateway] proxy_protocol_from): {}", address,
              balancer_text, parsed.error);
    context_.metrics.refuse(supervisor::Refusal::proxy_header);
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

void Admission::admit_tcp(tcp::socket socket, const asio::ip::address& client_address, std::string peer,
                       std::string address) {
  boost::system::error_code ec;
  const auto client = address_text(client_address);
  // The limits in force when the connection arrives; the session keeps them (a reload applies to new ones).
  const auto config = context_.config();
  const auto& gw = config->gateway;
  if (!allowed(gw.allow_from, client_address)) {
    // Nothing is said to an address that may not connect at all.
    log::warn("listener {}: refused a connection from {}: not in [gateway] allow_from", address, peer);
    context_.metrics.refuse(supervisor::Refusal::allow_from);
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
  sessions_.adopt(fd, client, std::move(peer));
}

asio::awaitable<void> Admission::accept_unix(std::shared_ptr<unix_socket::acceptor> acceptor, std::string address) {
  return accept_loop(std::move(acceptor), address, [this, address](unix_socket::socket socket) {
    // Who connected, as the kernel says: the file's mode and group decided that they may; sessions are
    // counted per uid.
    ucred cred{};
    socklen_t size = sizeof cred;
    if (::getsockopt(socket.native_handle(), SOL_SOCKET, SO_PEERCRED, &cred, &size) != 0) cred = ucred{0, 0, 0};
    const std::string client = fmt::format("uid {}", cred.uid);
    const std::string peer = fmt::format("{} uid {} pid {}", address, cred.uid, cred.pid);
    const auto config = context_.config();
    if (!within_limits(socket, config->gateway, client, peer, fmt::format("This user (uid {})", cred.uid))) return;
    boost::system::error_code ec;
    const int fd = socket.release(ec);
    if (ec) return;
    sessions_.adopt(fd, client, peer);
  });
}

template <class Socket>
bool Admission::within_limits(Socket& socket, const config::Gateway& gw, const std::string& client,
                           const std::string& peer, std::string_view who) {
  if (gw.max_sessions && sessions_.size() >= gw.max_sessions) {
    context_.metrics.refuse(supervisor::Refusal::max_sessions);
    refuse(std::move(socket), peer,
           fmt::format("The gateway serves at most {} sessions at once (max_sessions) and is full; retry later.",
                       gw.max_sessions));
    return false;
  }
  if (gw.max_sessions_per_client && context_.clients->held(client) >= gw.max_sessions_per_client) {
    context_.metrics.refuse(supervisor::Refusal::max_sessions_per_client);
    refuse(std::move(socket), peer,
           fmt::format("{} already has {} sessions, the most allowed (max_sessions_per_client; the imports the "
                       "classic front holds for its calls count as sessions); close some, or retry later.",
                       who, gw.max_sessions_per_client));
    return false;
  }
  return true;
}

template <class Socket>
void Admission::refuse(Socket socket, std::string peer, std::string message) {
  log::warn("refused a connection from {}: {}", peer, message);
  // Say which limit, then close; a client that does not read gets at most 2s of our attention.
  asio::co_spawn(
      io_,
      [socket = std::make_shared<Socket>(std::move(socket)),
       frame = protocol::encode_frame(protocol::make_error(nullptr, protocol::kAtCapacity, message))]() -> asio::awaitable<void> {
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
      runtime::log_exceptions("refuse"));
}

}  // namespace rjg::gateway::fronts
