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
#include "common/protocol/protocol.hpp"
#include "common/xmlrpc/classic_values.hpp"
#include "workers/mcp/mapping.hpp"
#include "workers/mcp/server.hpp"
#include "workers/sdk/sdk.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#ifndef RJG_VERSION
#define RJG_VERSION "0.0.0"
#endif

namespace {
namespace json = boost::json;
namespace sdk = rjg::sdk;
namespace mcp = rjg::mcp;
namespace protocol = rjg::protocol;
using namespace std::chrono_literals;

constexpr std::string_view kProtocolVersion = "2025-06-18";
// The exit status after a server died under a keyword (the gateway logs it).
constexpr int kServerGoneExit = 3;
// tools/list and friends: more pages than this is a server that loops.
constexpr int kMaxPages = 1000;

struct Options {
  std::vector<std::string> command;
  std::string name = "MCP";
  std::chrono::milliseconds startup_timeout = 30s;
  std::chrono::milliseconds call_timeout{0};  // none: the gateway's keyword_timeout still bounds a keyword
  std::chrono::milliseconds shutdown_grace = 2s;
  std::string server_log_level = "debug";
};

// One import: its server process and the keywords made of its tools.
struct Instance {
  std::unique_ptr<mcp::McpServer> server;
  std::vector<mcp::Tool> tools;
  std::unique_ptr<mcp::KeywordTable> keywords;  // points into tools
  bool listed = false;                          // the startup tools/list is done
};

std::string seconds(std::chrono::milliseconds d) { return fmt::format("{:g} s", std::chrono::duration<double>(d).count()); }

// "the MCP server `node x.js stdio` (pid 42)"
std::string who(const mcp::McpServer& server) {
  return fmt::format("the MCP server `{}` (pid {})", server.command_text(), server.pid());
}

// "The MCP server `node x.js stdio` (pid 42) of library 'Everything'", to start an import's error.
std::string who(const mcp::McpServer& server, const std::string& library) {
  return fmt::format("The MCP server `{}` (pid {}) of library '{}'", server.command_text(), server.pid(), library);
}

std::string stderr_part(mcp::McpServer& server) {
  const std::string tail = server.stderr_tail(true);
  if (tail.empty()) return "It wrote nothing to stderr.";
  return "Its stderr ended with:\n" + tail;
}

// Every page of a list method (tools/list, resources/list, prompts/list).
json::array list_all(mcp::McpServer& server, std::string_view method, std::string_view key,
                     const mcp::McpServer::Listener& listener, std::optional<mcp::Clock::time_point> deadline = {}) {
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
      throw mcp::ServerGone(fmt::format("answered {} with the same nextCursor twice ('{}')", method, *cursor));
    cursor = std::string(next->get_string());
  }
  throw mcp::ServerGone(fmt::format("answered {} with more than {} pages", method, kMaxPages));
}

// ---- Import ----

void import_library(const Options& options, sdk::ImportContext& context) {
  const std::string& library = context.library;
  if (!context.import.args.empty() || !context.import.kw_args.empty())
    throw sdk::RpcError(protocol::kInvalidParams,
                        fmt::format("Library '{}' takes no import arguments: it is the MCP server `{}`, configured "
                                    "in the gateway's configuration. Import it without arguments.",
                                    library, fmt::join(options.command, " ")));
  auto instance = std::make_shared<Instance>();
  try {
    instance->server = std::make_unique<mcp::McpServer>(options.command, options.shutdown_grace);
  } catch (const mcp::ServerGone& e) {
    throw sdk::RpcError(protocol::kWorkerFailed,
                        fmt::format("The MCP server of library '{}' {}. Check the command after '--' in the "
                                    "library's command in the gateway configuration.",
                                    library, e.what()));
  }
  mcp::McpServer& server = *instance->server;
  // While importing, the server's log messages go to the importing session; a tool list that changes
  // before the list is read is part of starting up (server-everything announces one right away).
  const mcp::McpServer::Listener listener = [&](std::string_view method, const json::object& params, bool request) {
    if (request) {
      context.log(fmt::format("The MCP server asked for {}, which robot-mcp-worker does not offer.", method), "WARN");
    } else if (method == "notifications/message") {
      const auto* level = params.if_contains("level");
      context.log(mcp::log_text(params),
                  mcp::robot_level(level && level->is_string() ? std::string_view(level->get_string()) : "info"));
    } else {
      rjg::log::debug("MCP server (pid {}) during import: {}", server.pid(), method);
    }
  };
  const auto deadline = mcp::Clock::now() + options.startup_timeout;
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
      } catch (const mcp::ServerError& e) {
        rjg::log::warn("MCP server (pid {}) refused logging/setLevel {}: {}", server.pid(), options.server_log_level,
                       e.what());
      }
    }
    if (capabilities.contains("tools")) {
      stage = "tools/list";
      for (const auto& entry : list_all(server, "tools/list", "tools", listener, deadline)) {
        try {
          instance->tools.push_back(mcp::parse_tool(entry));
        } catch (const std::invalid_argument& e) {
          rjg::log::warn("MCP server (pid {}) listed {}; skipped", server.pid(), e.what());
        }
      }
    }
  } catch (const mcp::ServerTimeout&) {
    throw sdk::RpcError(protocol::kWorkerTimeout,
                        fmt::format("{} did not answer {} within {} (--startup-timeout). Is it an MCP server on "
                                    "the stdio transport (some need an argument such as 'stdio')? If it is only slow "
                                    "to start, raise --startup-timeout. {}",
                                    who(server, library), stage, seconds(options.startup_timeout),
                                    stderr_part(server)));
  } catch (const mcp::ServerGone& e) {
    const std::string status = server.exit_description();
    throw sdk::RpcError(protocol::kWorkerFailed,
                        fmt::format("{} {} and {} during {}. Check that the command after '--' starts an MCP "
                                    "server on the stdio transport. {}",
                                    who(server, library), e.what(), status, stage, stderr_part(server)));
  } catch (const mcp::ServerError& e) {
    throw sdk::RpcError(protocol::kWorkerFailed,
                        fmt::format("{} answered {} with JSON-RPC error {}: {}", who(server, library), stage,
                                    e.code, e.what()));
  }
  instance->listed = true;
  instance->keywords = std::make_unique<mcp::KeywordTable>(instance->tools);
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

// ---- Keywords ----

class KeywordRun {
 public:
  KeywordRun(sdk::Call& call, Instance& instance, std::chrono::milliseconds call_timeout)
      : call_(call), instance_(instance), server_(*instance.server), call_timeout_(call_timeout) {
    if (call_timeout.count() > 0) deadline_ = mcp::Clock::now() + call_timeout;
  }

  json::value run() {
    const mcp::KeywordEntry* entry = instance_.keywords->find(call_.keyword());
    if (!entry) {
      std::string names;
      for (const auto& e : instance_.keywords->entries()) names += (names.empty() ? "" : ", ") + e.name;
      throw sdk::KeywordError(fmt::format("No keyword named '{}' in library '{}' ({}). Available: {}.", call_.keyword(),
                                          call_.library(), who(server_), names),
                              "KeywordNotFoundError");
    }
    const json::array args = decode(call_.args_text(), "args", entry).as_array();
    const json::object kwargs = decode(call_.kwargs_text(), "kwargs", entry).as_object();
    try {
      if (entry->tool) return mcp::tool_value(call_tool(*entry->tool, args, kwargs, false));
      return generic(entry->generic, args, kwargs);
    } catch (const mcp::ToolFailed& e) {
      throw sdk::KeywordError(fmt::format("{}", e.what()), "McpToolError");
    } catch (const mcp::ArgumentError& e) {
      throw sdk::KeywordError(fmt::format("{} {}", here(), e.what()), e.type);
    } catch (const mcp::ServerTimeout& e) {
      // The server is still usable (a message cut in the middle is ServerGone): the request is
      // cancelled, its late answer will be skipped, and the next keyword goes on with the same server.
      // Unless the cancellation itself finds the server gone.
      try {
        server_.cancel(server_.last_request_id(), fmt::format("--call-timeout ({}) passed", seconds(call_timeout_)));
      } catch (const mcp::ServerGone& gone) {
        server_gone(gone);
      }
      rjg::log::warn("library '{}': {} did not answer {} before --call-timeout ({}) passed; cancelled",
                     call_.library(), who(server_), method_, seconds(call_timeout_));
      throw sdk::KeywordError(
          fmt::format("{}: {} did not answer {} before the keyword's --call-timeout ({}, in the library's command) "
                      "passed: {}. The request was cancelled (notifications/cancelled) and the server serves the "
                      "next keyword. If the tool needs longer, raise --call-timeout.",
                      here(), who(server_), method_, seconds(call_timeout_), e.what()),
          "McpTimeout");
    } catch (const mcp::ServerError& e) {
      std::string data = e.data.is_null() ? std::string() : " (data: " + rjg::log::printable(json::serialize(e.data), 400) + ")";
      throw sdk::KeywordError(fmt::format("{}: {} answered {} with JSON-RPC error {}: {}{}.", here(), who(server_),
                                          method_, e.code, e.what(), data),
                              "McpError");
    } catch (const mcp::ServerGone& e) {
      server_gone(e);
    }
  }

 private:
  // The failure is this keyword's answer; then the worker goes, and the gateway's supervision starts a
  // fresh worker (and server) for the next import.
  [[noreturn]] void server_gone(const mcp::ServerGone& e) {
    const std::string status = server_.exit_description();
    call_.exit_after_answer(kServerGoneExit);
    rjg::log::error("library '{}': {} {} and {} during {}; exiting after this keyword's answer", call_.library(),
                    who(server_), e.what(), status, method_);
    throw sdk::KeywordError(
        fmt::format("{}: {} {} and {} while the keyword ran ({}). {}\nrobot-mcp-worker exits now; the gateway "
                    "starts a fresh worker and server for the next import of '{}'.",
                    here(), who(server_), e.what(), status, method_, stderr_part(server_), call_.library()),
        "McpServerGone");
  }

  std::string here() const { return fmt::format("Keyword '{}.{}'", call_.library(), call_.keyword()); }

  // Arguments as plain JSON: the client pickles lists and dicts, which are decoded here under the
  // data-only policy; anything with no JSON form is refused, naming the argument.
  json::value decode(std::string_view text, std::string_view path, const mcp::KeywordEntry* entry) {
    const bool list = path == "args";
    if (text.empty()) return list ? json::value(json::array()) : json::value(json::object());
    try {
      json::value v = rjg::xmlrpc::plain_json(text, path);
      if (list ? v.is_array() : v.is_object()) return v;
      throw rjg::xmlrpc::ValueError(fmt::format("{}: not a {}", path, list ? "list" : "dictionary"));
    } catch (const rjg::xmlrpc::ValueError& e) {
      std::string what = e.what();
      std::string argument;
      // "args[1]...": the second positional argument; "kwargs.name...": a named one.
      if (what.starts_with("args[") && entry->tool) {
        const auto index = std::strtoul(what.c_str() + 5, nullptr, 10);
        if (index < entry->tool->arguments.size()) argument = entry->tool->arguments[index].name;
      } else if (what.starts_with("kwargs.")) {
        argument = what.substr(7, what.find_first_of(".[:", 7) - 7);
      }
      throw sdk::KeywordError(
          fmt::format("{}: {} cannot be sent to {}: {}. MCP takes JSON only: strings, numbers, booleans, None, and "
                      "lists and dictionaries of them.",
                      here(), argument.empty() ? "an argument" : fmt::format("argument '{}'", argument), who(server_),
                      what),
          "ValueError");
    }
  }

  json::object request_object(std::string_view method, json::object params) {
    method_ = std::string(method);
    const json::value v = server_.request(method, std::move(params), listener(), deadline_);
    if (!v.is_object()) throw mcp::ServerError(0, fmt::format("the result is not an object: {}", json::serialize(v)), {});
    return v.get_object();
  }

  json::object call_tool(const mcp::Tool& tool, const json::array& args, const json::object& kwargs, bool extra) {
    static std::atomic<std::uint64_t> calls{0};
    progress_token_ = fmt::format("robot-mcp-worker-{}-{}", ::getpid(), ++calls);
    json::object params{{"name", tool.name},
                        {"arguments", mcp::tool_call_arguments(tool, args, kwargs, extra)},
                        {"_meta", json::object{{"progressToken", progress_token_}}}};
    json::object result = request_object("tools/call", std::move(params));
    if (const auto* e = result.if_contains("isError"); e && *e == json::value(true))
      result_error_prefix(result, tool.name);
    return result;
  }

  // A tool's own failure text, prefixed so the Robot log says which tool of which server said it.
  void result_error_prefix(json::object& result, const std::string& tool) {
    if (keep_tool_errors_) return;
    const std::string text = result.contains("content") ? mcp::content_text(result.at("content")) : "(no content)";
    throw mcp::ToolFailed(fmt::format("{}: tool '{}' of {} reported an error: {}", here(), tool, who(server_), text));
  }

  json::value generic(mcp::Generic kind, const json::array& args, const json::object& kwargs) {
    auto positional = [&](std::size_t count, const char* usage) {
      if (args.size() != count)
        throw mcp::ArgumentError(fmt::format("expects {} ({} positional argument{} given)", usage, args.size(),
                                             args.size() == 1 ? "" : "s"),
                                 "TypeError");
    };
    auto no_named = [&] {
      if (!kwargs.empty()) throw mcp::ArgumentError("takes no named arguments", "TypeError");
    };
    auto text_argument = [&](const json::value& v, const char* what) {
      auto s = mcp::convert_to(v, "str");
      if (!s || !s->is_string()) throw mcp::ArgumentError(fmt::format("needs {} as text", what), "ValueError");
      return std::string(s->get_string());
    };
    switch (kind) {
      case mcp::Generic::call_tool: {
        positional(1, "the tool's name, then its named arguments");
        const std::string name = text_argument(args[0], "the tool's name");
        keep_tool_errors_ = true;
        for (const auto& tool : instance_.tools)
          if (tool.name == name) return call_tool(tool, {}, kwargs, true);
        return call_tool(mcp::Tool{name, {}, {}, {}}, {}, kwargs, true);
      }
      case mcp::Generic::list_tools:
        positional(0, "no arguments");
        no_named();
        method_ = "tools/list";
        return list_all(server_, "tools/list", "tools", listener(), deadline_);
      case mcp::Generic::list_resources:
        positional(0, "no arguments");
        no_named();
        method_ = "resources/list";
        return list_all(server_, "resources/list", "resources", listener(), deadline_);
      case mcp::Generic::list_prompts:
        positional(0, "no arguments");
        no_named();
        method_ = "prompts/list";
        return list_all(server_, "prompts/list", "prompts", listener(), deadline_);
      case mcp::Generic::read_resource: {
        json::value uri;
        if (args.size() == 1 && kwargs.empty()) uri = args[0];
        else if (args.empty() && kwargs.size() == 1 && kwargs.contains("uri")) uri = kwargs.at("uri");
        else throw mcp::ArgumentError("expects one argument, the resource's uri", "TypeError");
        return request_object("resources/read", json::object{{"uri", text_argument(uri, "the uri")}});
      }
      case mcp::Generic::get_prompt: {
        positional(1, "the prompt's name, then its named arguments");
        // MCP's prompt arguments are strings.
        json::object arguments;
        for (const auto& [key, value] : kwargs)
          arguments[key] = value.is_structured() ? json::value(json::serialize(value))
                                                 : json::value(text_argument(value, "each prompt argument"));
        return request_object("prompts/get", json::object{{"name", text_argument(args[0], "the prompt's name")},
                                                          {"arguments", std::move(arguments)}});
      }
    }
    return nullptr;
  }

  // What the server sends while this keyword runs (and what it sent since the last one) becomes the
  // keyword's log.
  mcp::McpServer::Listener listener() {
    return [this](std::string_view method, const json::object& params, bool request) {
      if (request) {
        call_.log(fmt::format("The MCP server asked for {}, which robot-mcp-worker does not offer (no sampling, "
                              "roots or elicitation); the request was refused.",
                              method),
                  "WARN");
      } else if (method == "notifications/message") {
        const auto* level = params.if_contains("level");
        call_.log(mcp::log_text(params),
                  mcp::robot_level(level && level->is_string() ? std::string_view(level->get_string()) : "info"));
      } else if (method == "notifications/progress") {
        const auto* token = params.if_contains("progressToken");
        if (token && token->is_string() && token->get_string() == progress_token_) call_.log(mcp::progress_text(params));
      } else if (method == "notifications/tools/list_changed") {
        rjg::log::warn("library '{}': {} says its tool list changed; this import keeps its keywords, the next "
                       "import sees the new list",
                       call_.library(), who(server_));
        call_.log("The MCP server's tool list changed: the keywords of this import stay as they were imported; "
                  "import the library again (or use Call Tool) to reach new tools.",
                  "WARN");
      } else {
        rjg::log::debug("library '{}': {} sent {}", call_.library(), who(server_), method);
      }
    };
  }

  sdk::Call& call_;
  Instance& instance_;
  mcp::McpServer& server_;
  std::string method_ = "tools/call";
  std::string progress_token_;
  bool keep_tool_errors_ = false;  // Call Tool returns isError results instead of failing
  std::chrono::milliseconds call_timeout_;
  std::optional<mcp::Clock::time_point> deadline_;  // --call-timeout: for every request of this keyword
};

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
  Options options;
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
  library.on_import([&](sdk::ImportContext& context) { import_library(options, context); });
  library.dynamic_keywords([&options](sdk::Call& call) -> json::value {
    auto& instance = call.state<std::shared_ptr<Instance>>();
    return KeywordRun(call, *instance, options.call_timeout).run();
  });
  rjg::log::info("serving the MCP server `{}` as library {}", fmt::join(options.command, " "), options.name);
  return sdk::serve(library, serve);
}
