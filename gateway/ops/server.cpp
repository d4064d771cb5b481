// Server: the parts wired together, and the order of start, reload and shutdown across them.
#include "gateway/ops/server.hpp"

#include "gateway/ops/admin.hpp"
#include "gateway/fronts/classic.hpp"
#include "gateway/ops/heartbeat.hpp"
#include "gateway/fronts/http_server.hpp"
#include "gateway/fronts/listeners.hpp"
#include "gateway/ops/systemd.hpp"

#include "common/log.hpp"

#include <fmt/format.h>

#include <csignal>

namespace rjg::gateway::ops {

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
      sessions_(context_, loops_, offload_.get_executor()),
      admission_(io, context_, sessions_),
      reloader_(io, context_, admission_) {}

// Here, where the parts held by pointer are complete.
Server::~Server() = default;

void Server::listen(PassedSockets& passed, const std::vector<std::string>& named_elsewhere) {
  listening_ = true;
  const auto config = context_.config();
  std::vector<std::string> named = named_elsewhere;
  for (auto& name : fronts::named_sockets(*config)) named.push_back(std::move(name));
  for (const auto& address : config->gateway.listen)
    for (auto& listener : fronts::open_listen_entry(io_, config->gateway, address, &passed, named))
      admission_.add(std::move(listener));
}

void Server::listen_admin(PassedSockets& passed) {
  const auto config = context_.config();
  if (config->admin.listen.empty()) return;
  heartbeat_ = std::make_unique<LoopHeartbeat>(io_, loops_);
  admin_pages_ = std::make_unique<AdminPages>(
      *heartbeat_, [this] { return AdminPages::Readiness{ready_, context_.draining.load()}; },
      [this] { return admin_snapshot(); });
  admin_ = std::make_unique<fronts::HttpServer>(
      io_, [this](std::string_view path) { return admin_pages_->page(path); }, config->admin.allow_from,
      admin_limits());
  const auto named = fronts::named_sockets(*config);
  for (const auto& address : config->admin.listen)
    for (auto& listener : fronts::open_listen_entry(io_, config->gateway, address, &passed, named))
      admin_->serve(listener.acceptor, listener.entry);
}

void Server::listen_classic(PassedSockets& passed) {
  const auto config = context_.config();
  if (config->classic.listen.empty()) return;
  classic_ = std::make_unique<fronts::ClassicFront>(io_, context_, *config);
  const auto named = fronts::named_sockets(*config);
  for (const auto& address : config->classic.listen)
    for (auto& listener : fronts::open_listen_entry(io_, config->gateway, address, &passed, named))
      classic_->serve(listener.acceptor, listener.entry);
}

void Server::start() {
  context_.pools.start();
  admission_.start();
}

asio::awaitable<void> Server::serve_stdio(int in, int out) {
  sessions_.adopt(in, "stdio", "stdio", false, out);
  co_await sessions_.stdio_closed();
}

bool Server::reload(const std::string& path) {
  return reloader_.reload(path, Reloader::Fronts{listening_, admin_.get(), classic_.get()});
}

asio::awaitable<void> Server::shutdown(std::function<void()> drain_begun) {
  context_.draining = true;
  admission_.stop();
  if (drain_begun) drain_begun();
  // The sessions already open go on working, imports and keywords alike, so that no suite is cut at its
  // next keyword; a load balancer has stopped sending new ones (/readyz). They end by themselves, or
  // are closed when drain_timeout passes.
  const auto drain = context_.config()->gateway.drain_timeout;
  log::info("draining: no new connections; {} sessions ({} requests in flight) may go on for up to {}s",
            sessions_.size(), context_.requests_in_flight.load(), drain.count() / 1000.0);
  const auto deadline = runtime::AsyncEvent::clock::now() + drain;
  co_await sessions_.wait_empty_until(deadline);
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
  co_await sessions_.close_all(std::move(why));
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
  if (auto down = context_.pools.fork_servers_down(); !down.empty()) text += "; " + down;
  if (const auto& problem = reloader_.problem(); !problem.empty()) text += "; " + problem;
  return text;
}

AdminSnapshot Server::admin_snapshot() const {
  AdminSnapshot s;
  s.now = std::chrono::steady_clock::now();
  s.config = context_.config();
  s.version = context_.version;
  s.started_at = started_at_;
  s.uptime_seconds = std::chrono::duration<double>(s.now - started_steady_).count();
  s.serving = ready_;
  s.draining = context_.draining.load();
  s.requests_in_flight = context_.requests_in_flight.load();
  s.status = status_text();
  s.reload_problem = reloader_.problem();
  s.sessions = sessions_.entries();
  s.pools = context_.pools.view();
  for (const auto& pool : s.pools) {
    auto& rss = s.worker_rss.emplace_back();
    for (const auto& w : pool.workers) rss.push_back(w.upstream.empty() ? resident_bytes(w.pid) : 0);
  }
  if (classic_) s.classic = classic_->status();
  s.metrics = &context_.metrics;
  return s;
}

}  // namespace rjg::gateway::ops
