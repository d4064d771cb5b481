// Listeners and the set of live sessions; orderly shutdown on SIGTERM/SIGINT.
#pragma once

#include "gateway/context.hpp"
#include "gateway/connection.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/thread_pool.hpp>

#include <memory>
#include <unordered_map>
#include <vector>

namespace rjg::gateway {

using tcp = asio::ip::tcp;

class Server {
 public:
  Server(asio::io_context& io, const config::Config& config, std::string version);

  // Binds every configured address; throws std::runtime_error naming the address on failure.
  void listen();
  void start();
  // Stops accepting, lets requests in flight finish (up to drain_timeout), closes every session
  // (which ends its workers), and returns once all of that is done.
  asio::awaitable<void> shutdown();
  // Second signal: no more waiting.
  void force_stop();
  std::size_t workers_left() const;

 private:
  asio::awaitable<void> accept_loop(tcp::acceptor& acceptor, std::string address);
  bool allowed(const asio::ip::address& address) const;
  // Answers a connection over a limit with a JSON-RPC error naming the limit, then closes it.
  void refuse(tcp::socket socket, std::string client, std::string message);

  // Threads that classify and pickle-check large frames off the event loop (see StreamConnection).
  static constexpr std::size_t kOffloadThreads = 2;

  asio::io_context& io_;
  asio::thread_pool offload_{kOffloadThreads};
  GatewayContext context_;
  std::vector<std::unique_ptr<tcp::acceptor>> acceptors_;
  std::unordered_map<std::uint64_t, std::weak_ptr<Connection>> sessions_;
  std::unordered_map<std::string, std::size_t> per_client_;  // live sessions per source address
  std::uint64_t next_session_ = 1;
  bool stopping_ = false;
};

}  // namespace rjg::gateway
