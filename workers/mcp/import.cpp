#include "workers/mcp/worker.hpp"

#include "common/log.hpp"
#include "common/protocol/protocol.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <memory>
#include <string>

#ifndef RJG_VERSION
#define RJG_VERSION "0.0.0"
#endif

namespace rjg::mcp {
namespace {

constexpr std::string_view kProtocolVersion = "2025-06-18";
// tools/list and friends: more pages than this is a server that loops.
constexpr int kMaxPages = 1000;

}  // namespace

std::string seconds(std::chrono::milliseconds d) { return fmt::format("{:g} s", std::chrono::duration<double>(d).count()); }

std::string who(const McpServer& server) {
  return fmt::format("the MCP server `{}` (pid {})", server.command_text(), server.pid());
}

std::string who(const McpServer& server, const std::string& library) {
  return fmt::format("The MCP server `{}` (pid {}) of library '{}'", server.command_text(), server.pid(), library);
}

std::string stderr_part(McpServer& server) {
  const std::string tail = server.stderr_tail(true);
  if (tail.empty()) return "It wrote nothing to stderr.";
  return "Its stderr ended with:\n" + tail;
}

json::array list_all(McpServer& server, std::string_view method, std::string_view key,
                     const McpServer::Listener& listener, std::optional<Clock::time_point> deadline) {
  json::array all;
  std::optional<std::string> cursor;
  for (int page = 0; page < kMaxPages; ++page) {
    json::object params;
    if (cursor) params["cursor"] = *cursor;
    const json::value result = server.request(method, std::move(params), listener, deadline);
    const json::object* o = result.if_object();
    if (const auto* items = o ? o->if_contains(key) : nullptr; items && items->is_array())
      for (const auto& item : items->get_array()) all.push_back(item);
    const auto* next = o ? o->if_contains("nextCursor") : nullptr;
    if (!next || !next->is_string()) return all;
    if (cursor && *cursor == next->get_string())
      throw ServerGone(fmt::format("answered {} with the same nextCursor twice ('{}')", method, *cursor));
    cursor = std::string(next->get_string());
  }
  throw ServerGone(fmt::format("answered {} with more than {} pages", method, kMaxPages));
}

void import_library(const Options& options, sdk::ImportContext& context) {
  const std::string& library = context.library;
  if (!context.import.args.empty() || !context.import.kw_args.empty())
    throw sdk::RpcError(protocol::kInvalidParams,
                        fmt::format("Library '{}' takes no import arguments: it is the MCP server `{}`, configured "
                                    "in the gateway's configuration. Import it without arguments.",
                                    library, fmt::join(options.command, " ")));
  auto instance = std::make_shared<Instance>();
  try {
    instance->server = std::make_unique<McpServer>(options.command, options.shutdown_grace);
  } catch (const ServerGone& e) {
    throw sdk::RpcError(protocol::kWorkerFailed,
                        fmt::format("The MCP server of library '{}' {}. Check the command after '--' in the "
                                    "library's command in the gateway configuration.",
                                    library, e.what()));
  }
  McpServer& server = *instance->server;
  // While importing, the server's log messages go to the importing session; a tool list that changes
  // before the list is read is part of starting up (server-everything announces one right away).
  const McpServer::Listener listener = [&](std::string_view method, const json::object& params, bool request) {
    if (request) {
      context.log(fmt::format("The MCP server asked for {}, which robot-mcp-worker does not offer.", method), "WARN");
    } else if (method == "notifications/message") {
      const auto* level = params.if_contains("level");
      context.log(log_text(params),
                  robot_level(level && level->is_string() ? std::string_view(level->get_string()) : "info"));
    } else {
      rjg::log::debug("MCP server (pid {}) during import: {}", server.pid(), method);
    }
  };
  const auto deadline = Clock::now() + options.startup_timeout;
  std::string stage = "initialize";
  json::object server_info, capabilities;
  std::string instructions;
  try {
    const json::value init = server.request(
        "initialize",
        json::object{{"protocolVersion", kProtocolVersion},
                     {"capabilities", json::object()},
                     {"clientInfo", json::object{{"name", "robot-mcp-worker"}, {"version", RJG_VERSION}}}},
        listener, deadline);
    if (const auto* o = init.if_object()) {
      if (const auto* i = o->if_contains("serverInfo"); i && i->is_object()) server_info = i->get_object();
      if (const auto* c = o->if_contains("capabilities"); c && c->is_object()) capabilities = c->get_object();
      if (const auto* i = o->if_contains("instructions"); i && i->is_string()) instructions = i->get_string();
      if (const auto* v = o->if_contains("protocolVersion"); v && *v != json::value(kProtocolVersion))
        rjg::log::info("MCP server (pid {}) speaks protocol version {} (asked for {})", server.pid(),
                       json::serialize(*v), kProtocolVersion);
    }
    server.notify("notifications/initialized", {});
    if (capabilities.contains("logging") && options.server_log_level != "none") {
      stage = "logging/setLevel";
      try {
        server.request("logging/setLevel", json::object{{"level", options.server_log_level}}, listener, deadline);
      } catch (const ServerError& e) {
        rjg::log::warn("MCP server (pid {}) refused logging/setLevel {}: {}", server.pid(), options.server_log_level,
                       e.what());
      }
    }
    if (capabilities.contains("tools")) {
      stage = "tools/list";
      for (const auto& entry : list_all(server, "tools/list", "tools", listener, deadline)) {
        try {
          instance->tools.push_back(parse_tool(entry));
        } catch (const std::invalid_argument& e) {
          rjg::log::warn("MCP server (pid {}) listed {}; skipped", server.pid(), e.what());
        }
      }
    }
  } catch (const ServerTimeout&) {
    throw sdk::RpcError(protocol::kWorkerTimeout,
                        fmt::format("{} did not answer {} within {} (--startup-timeout). Is it an MCP server on "
                                    "the stdio transport (some need an argument such as 'stdio')? If it is only slow "
                                    "to start, raise --startup-timeout. {}",
                                    who(server, library), stage, seconds(options.startup_timeout),
                                    stderr_part(server)));
  } catch (const ServerGone& e) {
    const std::string status = server.exit_description();
    throw sdk::RpcError(protocol::kWorkerFailed,
                        fmt::format("{} {} and {} during {}. Check that the command after '--' starts an MCP "
                                    "server on the stdio transport. {}",
                                    who(server, library), e.what(), status, stage, stderr_part(server)));
  } catch (const ServerError& e) {
    throw sdk::RpcError(protocol::kWorkerFailed,
                        fmt::format("{} answered {} with JSON-RPC error {}: {}", who(server, library), stage,
                                    e.code, e.what()));
  }
  instance->listed = true;
  instance->keywords = std::make_unique<KeywordTable>(instance->tools);
  for (const auto& name : instance->keywords->shadowed())
    rjg::log::info("library '{}': a tool is named like the generic keyword '{}', which stays reachable as "
                   "'MCP {}'", library, name, name);

  std::string doc = fmt::format("The MCP server `{}`", options.command.empty() ? "" : server.command_text());
  const auto text = [](const json::object& o, const char* key) {
    const auto* v = o.if_contains(key);
    return v && v->is_string() ? std::string(v->get_string()) : std::string();
  };
  if (auto title = text(server_info, "title").empty() ? text(server_info, "name") : text(server_info, "title");
      !title.empty())
    doc += fmt::format(": {} {}", title, text(server_info, "version"));
  doc += ".\n\nEach tool is a keyword; Call Tool, List Tools, List Resources, Read Resource, List Prompts and Get "
         "Prompt (also as MCP Call Tool, ...) reach the rest of the server.";
  if (!instructions.empty()) doc += "\n\n" + instructions;
  context.extra_result["definition"] = json::object{{"name", library},
                                                    {"doc", doc},
                                                    {"version", text(server_info, "version")},
                                                    {"scope", "GLOBAL"},
                                                    {"keywords", instance->keywords->definitions()}};
  rjg::log::info("library '{}': {} offers {} tool(s)", library, who(server), instance->tools.size());
  context.state = std::move(instance);
}

}  // namespace rjg::mcp
