// What robot-mcp-worker's parts share (mcp_worker.cpp: the command line; import.cpp: an import, its server
// and keywords; keyword_run.cpp: a keyword call): the options, one import's state, and how messages name
// a server.
#pragma once

#include "workers/mcp/mapping.hpp"
#include "workers/mcp/server.hpp"
#include "workers/sdk/sdk.hpp"

#include <boost/json.hpp>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rjg::mcp {

// The worker's command line.
struct Options {
  std::vector<std::string> command;
  std::string name = "MCP";
  std::chrono::milliseconds startup_timeout = std::chrono::seconds(30);
  std::chrono::milliseconds call_timeout{0};  // none: the gateway's keyword_timeout still bounds a keyword
  std::chrono::milliseconds shutdown_grace = std::chrono::seconds(2);
  std::string server_log_level = "debug";
};

// One import: its server process and the keywords made of its tools.
struct Instance {
  std::unique_ptr<McpServer> server;
  std::vector<Tool> tools;
  std::unique_ptr<KeywordTable> keywords;  // points into tools
  bool listed = false;                     // the startup tools/list is done
};

std::string seconds(std::chrono::milliseconds d);
// "the MCP server `node x.js stdio` (pid 42)"
std::string who(const McpServer& server);
// "The MCP server `node x.js stdio` (pid 42) of library 'Everything'", to start an import's error.
std::string who(const McpServer& server, const std::string& library);
std::string stderr_part(McpServer& server);
// Every page of a list method (tools/list, resources/list, prompts/list).
json::array list_all(McpServer& server, std::string_view method, std::string_view key,
                     const McpServer::Listener& listener, std::optional<Clock::time_point> deadline = {});

// Starts the import's server, initializes it and lists its tools: the library's definition, and
// context.state an Instance.
void import_library(const Options& options, sdk::ImportContext& context);

// One keyword call on an import's server (a tool, or Call Tool, List Tools, ...).
json::value run_keyword(sdk::Call& call, Instance& instance, std::chrono::milliseconds call_timeout);

}  // namespace rjg::mcp
