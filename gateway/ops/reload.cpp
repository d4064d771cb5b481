// A reload in steps: validate the file, keep what needs a restart, open the listeners it adds (the one
// step that can still fail, before anything changed), swap listeners, reconfigure the admin endpoint
// and the classic front, then apply the rest and report.
#include "gateway/ops/reload.hpp"

#include "gateway/fronts/classic.hpp"
#include "gateway/fronts/http_server.hpp"

#include "common/log.hpp"
#include "gateway/supervisor/spawn.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>

namespace rjg::gateway::ops {

namespace {

bool listed(const config::Config& c, const std::string& text) {
  return std::any_of(c.gateway.listen.begin(), c.gateway.listen.end(), [&](auto& a) { return a.text == text; });
}

}  // namespace

Reloader::Reloader(asio::io_context& io, session::GatewayContext& context, fronts::Admission& admission)
    : io_(io), context_(context), admission_(admission) {}

bool Reloader::reload(const std::string& path, const Fronts& fronts) {
  if (admission_.stopping()) {
    log::warn("reload: ignored, the gateway is shutting down");
    return false;
  }
  log::info("reload: reading {}", path);
  const auto before = context_.config();
  std::vector<std::string> problems;
  auto next = validate(path, problems);
  if (!problems.empty()) return fail(path, problems);

  std::vector<std::string> notes;  // logged once the reload is sure to apply
  keep_fixed(*before, *next, fronts.listening, notes);
  std::vector<fronts::Listener> opened;
  if (auto problem = open_added(*before, *next, opened, notes)) return fail(path, {*problem});
  swap_listeners(*next, std::move(opened));
  reconfigure_fronts(*before, *next, fronts, notes);
  for (const auto& note : notes) log::warn("reload: {}", note);
  apply(path, std::move(next));
  return true;
}

std::shared_ptr<config::Config> Reloader::validate(const std::string& path, std::vector<std::string>& problems) const {
  std::shared_ptr<config::Config> next;
  try {
    next = std::make_shared<config::Config>(config::load_file(path));
    problems = supervisor::check_libraries(*next);
  } catch (const config::ConfigError& e) {
    problems = e.problems;
  }
  return next;
}

bool Reloader::fail(const std::string& path, const std::vector<std::string>& why) {
  for (const auto& problem : why) log::error("reload: {}", problem);
  problem_ = fmt::format("reload failed: {} problem{} in {}; serving the previous configuration", why.size(),
                         why.size() == 1 ? "" : "s", path);
  log::error("reload: {} (nothing changed; fix the file and reload again)", problem_);
  context_.metrics.reloads_failed.fetch_add(1, std::memory_order_relaxed);
  return false;
}

void Reloader::keep_fixed(const config::Config& before, config::Config& next, bool listening,
                          std::vector<std::string>& notes) {
  auto& gw = next.gateway;
  if (gw.threads != before.gateway.threads) {
    notes.push_back(fmt::format("[gateway] threads changed from {} to {}: that needs a restart; the event loops "
                                "stay as they are",
                                before.gateway.threads, gw.threads));
    gw.threads = before.gateway.threads;
  }
  for (auto limit : {&config::Gateway::max_message_bytes, &config::Gateway::max_header_bytes}) {
    if (gw.*limit != before.gateway.*limit)
      notes.push_back(fmt::format("[gateway] {} changed: a lower value applies to new client connections, a higher "
                                  "one only after a restart (workers keep the limit they started with)",
                                  limit == &config::Gateway::max_message_bytes ? "max_message_bytes" : "max_header_bytes"));
  }
  if (gw.unix_mode != before.gateway.unix_mode || gw.unix_group != before.gateway.unix_group)
    notes.push_back("[gateway] unix_mode or unix_group changed: it applies to unix: listeners opened from now on; "
                    "those already open keep their file's mode and group until a restart");
  // --stdio: no listener, whatever the file says.
  if (!listening) gw.listen = before.gateway.listen;
}

std::optional<std::string> Reloader::open_added(const config::Config& before, config::Config& next,
                                                std::vector<fronts::Listener>& opened, std::vector<std::string>& notes) {
  // The entries no longer listed close later (their sessions stay); new ones open here. A new address that
  // cannot be opened fails the whole reload, before anything has changed.
  std::vector<config::ListenAddress> kept_listen;
  for (const auto& address : next.gateway.listen) {
    if (listed(before, address.text)) {
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
      // Opened with the unix_mode and unix_group in force until this reload applies.
      for (auto& listener : fronts::open_listen_entry(io_, before.gateway, address, nullptr, {}))
        opened.push_back(std::move(listener));
    } catch (const std::exception& e) {
      for (auto& listener : opened) listener.close();
      return std::string(e.what());
    }
    kept_listen.push_back(address);
  }
  // systemd entries that could not be added stay out of the configuration in force.
  next.gateway.listen = std::move(kept_listen);
  return std::nullopt;
}

void Reloader::swap_listeners(const config::Config& next, std::vector<fronts::Listener> opened) {
  admission_.close_if([&](const fronts::Listener& listener) {
    if (listed(next, listener.entry)) return false;
    log::info("reload: no longer listening on {} (\"{}\"); its sessions go on", listener.text(), listener.entry);
    if (listener.entry.starts_with("systemd"))
      log::warn("reload: systemd still holds the socket of \"{}\": clients that connect there now wait unserved; "
                "remove it from the .socket unit as well",
                listener.entry);
    return true;
  });
  for (auto& listener : opened) admission_.add(std::move(listener));
}

void Reloader::reconfigure_fronts(const config::Config& before, config::Config& next, const Fronts& fronts,
                                  std::vector<std::string>& notes) {
  // [admin] and [classic]: who may connect applies to new connections; their addresses need a restart.
  if (next.admin.listen != before.admin.listen) {
    notes.push_back("[admin] listen changed: that needs a restart; the admin endpoint stays where it is");
    next.admin.listen = before.admin.listen;
  }
  if (fronts.admin) fronts.admin->set_allow_from(next.admin.allow_from);
  if (next.classic.listen != before.classic.listen) {
    notes.push_back("[classic] listen changed: that needs a restart; the classic front stays where it is");
    next.classic.listen = before.classic.listen;
  }
  if (fronts.classic) fronts.classic->reconfigure(next);
}

void Reloader::apply(const std::string& path, std::shared_ptr<const config::Config> applied) {
  context_.set_config(applied);
  context_.router.update(applied);
  const auto changes = context_.pools.reload(applied);
  if (log::Level level; log::parse_level(applied->gateway.log_level, level)) log::set_level(level);
  if (log::Format format; log::parse_format(applied->gateway.log_format, format)) log::set_format(format);
  problem_.clear();
  context_.metrics.reloads_ok.fetch_add(1, std::memory_order_relaxed);
  context_.metrics.last_reload_seconds =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  auto names = [](const std::vector<std::string>& v) { return v.empty() ? std::string("none") : fmt::format("{}", fmt::join(v, ", ")); };
  log::info("reload: applied {}: libraries added: {}; removed: {}; changed: {}; unchanged: {}", path,
            names(changes.added), names(changes.removed), names(changes.changed), changes.unchanged);
}

}  // namespace rjg::gateway::ops
