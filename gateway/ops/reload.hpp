// A reload (SIGHUP): validate the new configuration, apply it, report the outcome. A file with problems
// changes nothing; a good one applies to what comes next, and what needs a restart keeps its value with
// a line in the log saying so.
#pragma once

#include "gateway/fronts/admission.hpp"
#include "gateway/session/context.hpp"

#include <boost/asio/io_context.hpp>

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace rjg::gateway::fronts {
namespace asio = boost::asio;
class ClassicFront;
class HttpServer;
}  // namespace rjg::gateway::fronts

namespace rjg::gateway::ops {


class Reloader {
 public:
  Reloader(asio::io_context& io, session::GatewayContext& context, fronts::Admission& admission);

  // What serves now, besides the admission's listeners (none: not there).
  struct Fronts {
    bool listening = false;  // [gateway] listen was opened: --stdio opens no listener, and a reload none either
    fronts::HttpServer* admin = nullptr;
    fronts::ClassicFront* classic = nullptr;
  };
  // On loop 0: reads and checks `path` as --check-config does, and applies it; returns whether it did.
  bool reload(const std::string& path, const Fronts& fronts);
  // Why the last reload failed, for STATUS=, /status and /metrics; empty once one applies (or before any).
  const std::string& problem() const { return problem_; }

 private:
  // The file loaded and checked, or its problems.
  std::shared_ptr<config::Config> validate(const std::string& path, std::vector<std::string>& problems) const;
  bool fail(const std::string& path, const std::vector<std::string>& why);
  // Settings that cannot change while running keep their value in `next`, with a note for the log.
  static void keep_fixed(const config::Config& before, config::Config& next, bool listening,
                         std::vector<std::string>& notes);
  // Opens the listen entries `next` adds (systemd ones cannot be: noted and left out of `next`); on
  // failure closes what it opened and returns why.
  std::optional<std::string> open_added(const config::Config& before, config::Config& next,
                                        std::vector<fronts::Listener>& opened, std::vector<std::string>& notes);
  // Closes the listeners `next` no longer lists and starts the opened ones.
  void swap_listeners(const config::Config& next, std::vector<fronts::Listener> opened);
  static void reconfigure_fronts(const config::Config& before, config::Config& next, const Fronts& fronts,
                                 std::vector<std::string>& notes);
  // Everything else, from now on: routes, pools, logging; counted and logged.
  void apply(const std::string& path, std::shared_ptr<const config::Config> next);

  asio::io_context& io_;
  session::GatewayContext& context_;
  fronts::Admission& admission_;
  std::string problem_;
};

}  // namespace rjg::gateway::ops
