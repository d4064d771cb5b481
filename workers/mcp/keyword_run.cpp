#include "workers/mcp/worker.hpp"

#include "common/log.hpp"
#include "common/xmlrpc/classic_values.hpp"

#include <fmt/format.h>

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <string>

namespace rjg::mcp {
namespace {

// The exit status after a server died under a keyword (the gateway logs it).
constexpr int kServerGoneExit = 3;

class KeywordRun {
 public:
  KeywordRun(sdk::Call& call, Instance& instance, std::chrono::milliseconds call_timeout)
      : call_(call), instance_(instance), server_(*instance.server), call_timeout_(call_timeout) {
    if (call_timeout.count() > 0) deadline_ = Clock::now() + call_timeout;
  }

  json::value run() {
    const KeywordEntry* entry = instance_.keywords->find(call_.keyword());
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
      if (entry->tool) return tool_value(call_tool(*entry->tool, args, kwargs, false));
      return generic(entry->generic, args, kwargs);
    } catch (const ToolFailed& e) {
      throw sdk::KeywordError(fmt::format("{}", e.what()), "McpToolError");
    } catch (const ArgumentError& e) {
      throw sdk::KeywordError(fmt::format("{} {}", here(), e.what()), e.type);
    } catch (const ServerTimeout& e) {
      // The server is still usable (a message cut in the middle is ServerGone): the request is
      // cancelled, its late answer will be skipped, and the next keyword goes on with the same server.
      // Unless the cancellation itself finds the server gone.
      try {
        server_.cancel(server_.last_request_id(), fmt::format("--call-timeout ({}) passed", seconds(call_timeout_)));
      } catch (const ServerGone& gone) {
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
    } catch (const ServerError& e) {
      std::string data = e.data.is_null() ? std::string() : " (data: " + rjg::log::printable(json::serialize(e.data), 400) + ")";
      throw sdk::KeywordError(fmt::format("{}: {} answered {} with JSON-RPC error {}: {}{}.", here(), who(server_),
                                          method_, e.code, e.what(), data),
                              "McpError");
    } catch (const ServerGone& e) {
      server_gone(e);
    }
  }

 private:
  // The failure is this keyword's answer; then the worker goes, and the gateway's supervision starts a
  // fresh worker (and server) for the next import.
  [[noreturn]] void server_gone(const ServerGone& e) {
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
  json::value decode(std::string_view text, std::string_view path, const KeywordEntry* entry) {
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
    if (!v.is_object()) throw ServerError(0, fmt::format("the result is not an object: {}", json::serialize(v)), {});
    return v.get_object();
  }

  json::object call_tool(const Tool& tool, const json::array& args, const json::object& kwargs, bool extra) {
    static std::atomic<std::uint64_t> calls{0};
    progress_token_ = fmt::format("robot-mcp-worker-{}-{}", ::getpid(), ++calls);
    json::object params{{"name", tool.name},
                        {"arguments", tool_call_arguments(tool, args, kwargs, extra)},
                        {"_meta", json::object{{"progressToken", progress_token_}}}};
    json::object result = request_object("tools/call", std::move(params));
    if (const auto* e = result.if_contains("isError"); e && *e == json::value(true))
      result_error_prefix(result, tool.name);
    return result;
  }

  // A tool's own failure text, prefixed so the Robot log says which tool of which server said it.
  void result_error_prefix(json::object& result, const std::string& tool) {
    if (keep_tool_errors_) return;
    const std::string text = result.contains("content") ? content_text(result.at("content")) : "(no content)";
    throw ToolFailed(fmt::format("{}: tool '{}' of {} reported an error: {}", here(), tool, who(server_), text));
  }

  json::value generic(Generic kind, const json::array& args, const json::object& kwargs) {
    auto positional = [&](std::size_t count, const char* usage) {
      if (args.size() != count)
        throw ArgumentError(fmt::format("expects {} ({} positional argument{} given)", usage, args.size(),
                                             args.size() == 1 ? "" : "s"),
                                 "TypeError");
    };
    auto no_named = [&] {
      if (!kwargs.empty()) throw ArgumentError("takes no named arguments", "TypeError");
    };
    auto text_argument = [&](const json::value& v, const char* what) {
      auto s = convert_to(v, "str");
      if (!s || !s->is_string()) throw ArgumentError(fmt::format("needs {} as text", what), "ValueError");
      return std::string(s->get_string());
    };
    switch (kind) {
      case Generic::call_tool: {
        positional(1, "the tool's name, then its named arguments");
        const std::string name = text_argument(args[0], "the tool's name");
        keep_tool_errors_ = true;
        for (const auto& tool : instance_.tools)
          if (tool.name == name) return call_tool(tool, {}, kwargs, true);
        return call_tool(Tool{name, {}, {}, {}}, {}, kwargs, true);
      }
      case Generic::list_tools:
        positional(0, "no arguments");
        no_named();
        method_ = "tools/list";
        return list_all(server_, "tools/list", "tools", listener(), deadline_);
      case Generic::list_resources:
        positional(0, "no arguments");
        no_named();
        method_ = "resources/list";
        return list_all(server_, "resources/list", "resources", listener(), deadline_);
      case Generic::list_prompts:
        positional(0, "no arguments");
        no_named();
        method_ = "prompts/list";
        return list_all(server_, "prompts/list", "prompts", listener(), deadline_);
      case Generic::read_resource: {
        json::value uri;
        if (args.size() == 1 && kwargs.empty()) uri = args[0];
        else if (args.empty() && kwargs.size() == 1 && kwargs.contains("uri")) uri = kwargs.at("uri");
        else throw ArgumentError("expects one argument, the resource's uri", "TypeError");
        return request_object("resources/read", json::object{{"uri", text_argument(uri, "the uri")}});
      }
      case Generic::get_prompt: {
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
  McpServer::Listener listener() {
    return [this](std::string_view method, const json::object& params, bool request) {
      if (request) {
        call_.log(fmt::format("The MCP server asked for {}, which robot-mcp-worker does not offer (no sampling, "
                              "roots or elicitation); the request was refused.",
                              method),
                  "WARN");
      } else if (method == "notifications/message") {
        const auto* level = params.if_contains("level");
        call_.log(log_text(params),
                  robot_level(level && level->is_string() ? std::string_view(level->get_string()) : "info"));
      } else if (method == "notifications/progress") {
        const auto* token = params.if_contains("progressToken");
        if (token && token->is_string() && token->get_string() == progress_token_) call_.log(progress_text(params));
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
  McpServer& server_;
  std::string method_ = "tools/call";
  std::string progress_token_;
  bool keep_tool_errors_ = false;  // Call Tool returns isError results instead of failing
  std::chrono::milliseconds call_timeout_;
  std::optional<Clock::time_point> deadline_;  // --call-timeout: for every request of this keyword
};

}  // namespace

json::value run_keyword(sdk::Call& call, Instance& instance, std::chrono::milliseconds call_timeout) {
  return KeywordRun(call, instance, call_timeout).run();
}

}  // namespace rjg::mcp
