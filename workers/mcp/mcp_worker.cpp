// robot-mcp-worker: an MCP server (stdio transport) served as a keyword library of the JSON-RPC
// protocol. The gateway runs it like any worker:
//
//   [[library]]
//   name = "Everything"
//   command = ["robot-mcp-worker", "--name", "{library}", "--", "npx", "mcp-server-everything"]
//
//   robot-mcp-worker [--name NAME] [--startup-timeout SECONDS] [--call-timeout SECONDS]
//                    [--shutdown-grace SECONDS] [--server-log-level LEVEL|none] [--stdio | --tcp HOST:PORT] [--log-level LEVEL]
//                    -- COMMAND [ARGS...]
//
// Each import starts its own server process and holds it until the import is finalized: initialize
// (protocol 2025-06-18, no client capabilities), notifications/initialized, logging/setLevel when the
// server logs, and every page of tools/list, all within --startup-timeout. The tools become keywords
// (mapping.hpp says how); a keyword call is tools/call, with the server's log messages and the call's
// progress relayed as robot/log while it runs; with --call-timeout, a call the server does not answer in
// time is cancelled (notifications/cancelled) and fails its keyword. A server that dies under a keyword fails that keyword,
// and then this worker exits, so that the gateway starts a fresh one for the next import.
#include "common/log.hpp"
#include "workers/mcp/worker.hpp"
#include "workers/sdk/sdk.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#ifndef RJG_VERSION
#define RJG_VERSION "0.0.0"
#endif

namespace {
namespace json = boost::json;
namespace sdk = rjg::sdk;
namespace mcp = rjg::mcp;

int usage(const char* program, std::string_view problem) {
  if (!problem.empty()) std::fprintf(stderr, "%s: %.*s\n", program, static_cast<int>(problem.size()), problem.data());
  std::fprintf(stderr,
               "usage: %s [--name NAME] [--startup-timeout SECONDS] [--call-timeout SECONDS]\n"
               "       [--shutdown-grace SECONDS] [--server-log-level LEVEL|none] [--stdio | --tcp HOST:PORT]\n"
               "       [--log-level LEVEL]\n"
               "       -- COMMAND [ARGS...]\n"
               "  COMMAND                   the MCP server (stdio transport), started once per import\n"
               "  --name NAME               the library's name in definitions and messages (default MCP;\n"
               "                            \"{library}\" in the gateway's command gives the configured name)\n"
               "  --startup-timeout SECONDS how long initialize and tools/list may take (default 30)\n"
               "  --call-timeout SECONDS    how long a keyword's requests may take; then the request is\n"
               "                            cancelled and the keyword fails, and the server serves on\n"
               "                            (default: none; the gateway's keyword_timeout ends the worker)\n"
               "  --shutdown-grace SECONDS  how long the server gets to exit after its stdin is closed, and\n"
               "                            again after SIGTERM, before SIGKILL (default 2)\n"
               "  --server-log-level LEVEL  logging/setLevel sent to a server that logs (default debug; none:\n"
               "                            not sent)\n"
               "%s",
               program, sdk::serve_usage(program).c_str());
  return 2;
}

std::optional<std::chrono::milliseconds> parse_seconds(const std::optional<std::string>& text) {
  if (!text) return std::nullopt;
  char* end = nullptr;
  const double s = std::strtod(text->c_str(), &end);
  if (end != text->c_str() + text->size() || !(s > 0) || s > 86400) return std::nullopt;
  return std::chrono::milliseconds(static_cast<long long>(s * 1000));
}

}  // namespace

int main(int argc, char** argv) {
  mcp::Options options;
  std::vector<std::string> rest;
  int i = 1;
  for (; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::optional<std::string> {
      if (i + 1 >= argc) return std::nullopt;
      return std::string(argv[++i]);
    };
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg == "--name") {
      auto v = value();
      if (!v || v->empty()) return usage(argv[0], "--name needs a name");
      options.name = *v;
    } else if (arg == "--startup-timeout" || arg == "--shutdown-grace" || arg == "--call-timeout") {
      auto d = parse_seconds(value());
      if (!d) return usage(argv[0], fmt::format("{} needs a number of seconds above 0", arg));
      (arg == "--startup-timeout" ? options.startup_timeout
       : arg == "--call-timeout"  ? options.call_timeout
                                  : options.shutdown_grace) = *d;
    } else if (arg == "--server-log-level") {
      static constexpr std::string_view kLevels[] = {"debug", "info",     "notice", "warning", "error",
                                                     "critical", "alert", "emergency", "none"};
      auto v = value();
      if (!v || std::find(std::begin(kLevels), std::end(kLevels), *v) == std::end(kLevels))
        return usage(argv[0], "--server-log-level needs one of debug, info, notice, warning, error, critical, alert, "
                              "emergency, none");
      options.server_log_level = *v;
    } else if (arg == "--help" || arg == "-h") {
      usage(argv[0], {});
      return 0;
    } else {
      rest.push_back(arg);
    }
  }
  for (; i < argc; ++i) options.command.emplace_back(argv[i]);
  if (options.command.empty()) return usage(argv[0], "no MCP server command: give it after '--'");
  sdk::ServeOptions serve;
  if (auto problem = sdk::parse_serve_options(rest, serve)) return usage(argv[0], *problem);

  sdk::Library library(options.name, fmt::format("The MCP server `{}`.", fmt::join(options.command, " ")), RJG_VERSION);
  library.server_name("robot-mcp-worker");
  library.on_import([&](sdk::ImportContext& context) { mcp::import_library(options, context); });
  library.dynamic_keywords([&options](sdk::Call& call) -> json::value {
    auto& instance = call.state<std::shared_ptr<mcp::Instance>>();
    return mcp::run_keyword(call, *instance, options.call_timeout);
  });
  rjg::log::info("serving the MCP server `{}` as library {}", fmt::join(options.command, " "), options.name);
  return sdk::serve(library, serve);
}
