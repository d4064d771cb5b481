// Accepting and admitting client connections: the listeners of [gateway] listen, the PROXY header of a
// balancer's connection, allow_from, max_sessions and max_sessions_per_client. A connection that passes
// is handed to the session table; one that does not is closed, or told which limit refused it.
#pragma once

#include "gateway/session/context.hpp"
#include "gateway/fronts/listeners.hpp"
#include "gateway/ops/session_table.hpp"

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace rjg::gateway::fronts {

namespace asio = boost::asio;

class Admission {
 public:
  Admission(asio::io_context& io, session::GatewayContext& context, ops::SessionTable& sessions);
  // Unix socket files go with their listeners.
  ~Admission();

  // Listeners accept once start() has run; one added later (a reload) accepts at once.
  void add(Listener listener);
  void start();
  // The drain: no listener accepts from now on, and a PROXY header read meanwhile admits nobody.
  void stop();
  bool stopping() const { return stopping_; }
  const std::vector<Listener>& listeners() const { return listeners_; }
  // Closes the listeners `drop` picks (a reload: their entries are no longer listed); their sessions stay.
  void close_if(const std::function<bool(const Listener&)>& drop);

 private:
  using tcp = asio::ip::tcp;
  using unix_socket = Listener::unix_socket;
  void start_accepting(const Listener& listener);
  template <class Acceptor, class Take>
  asio::awaitable<void> accept_loop(std::shared_ptr<Acceptor> acceptor, std::string address, Take take);
  asio::awaitable<void> accept_tcp(std::shared_ptr<tcp::acceptor> acceptor, std::string address);
  asio::awaitable<void> accept_unix(std::shared_ptr<unix_socket::acceptor> acceptor, std::string address);
  // A TCP connection whose balancer sends a PROXY header: read within handshake_timeout, then admitted as
  // the client it names.
  asio::awaitable<void> admit_proxied(tcp::socket socket, tcp::endpoint balancer, std::string address);
  // The checks every TCP client passes (allow_from, then the limits), then the session table adopts it.
  // client: the address the checks apply to; peer: how the session is named in logs.
  void admit_tcp(tcp::socket socket, const asio::ip::address& client, std::string peer, std::string address);
  // max_sessions and max_sessions_per_client (`who`: "This client address (10.1.2.3)"); false: refused.
  template <class Socket>
  bool within_limits(Socket& socket, const config::Gateway& gw, const std::string& client, const std::string& peer,
                     std::string_view who);
  // Answers a connection over a limit with a JSON-RPC error naming the limit, then closes it.
  template <class Socket>
  void refuse(Socket socket, std::string peer, std::string message);

  asio::io_context& io_;
  session::GatewayContext& context_;
  ops::SessionTable& sessions_;
  std::vector<Listener> listeners_;
  bool started_ = false;
  bool stopping_ = false;
};

}  // namespace rjg::gateway::fronts
