// The test worker's keywords about what travels on the protocol: values echoed or returned as asked,
// logs, failures, crashes, garbage on stdout, and arguments as the library sees them.
#include "workers/test_worker/robot_eval.hpp"
#include "workers/test_worker/test_worker.hpp"

#include <fmt/format.h>

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>

namespace rjg::test_worker {

namespace {

using rjg::sdk::Call;
using rjg::sdk::ErrorMode;
using rjg::sdk::KeywordError;
namespace json = rjg::sdk::json;

ErrorMode parse_mode(const std::string& mode) {
  if (mode.empty()) return ErrorMode::unset;
  if (mode == "CONTINUABLE") return ErrorMode::continuable;
  if (mode == "FATAL") return ErrorMode::fatal;
  if (mode == "SKIP") return ErrorMode::skip;
  throw KeywordError(fmt::format("unknown mode '{}' (CONTINUABLE, FATAL, SKIP or empty)", mode), "ValueError");
}

[[noreturn]] void crash(const std::string& mode, int code) {
  if (mode == "abort") std::abort();
  if (mode == "sigkill") ::kill(::getpid(), SIGKILL);
  if (mode == "exit") ::_exit(code);
  if (mode == "segv") {
    // Die by the signal itself, even where a sanitizer runtime has installed a SIGSEGV handler.
    ::signal(SIGSEGV, SIG_DFL);
    ::raise(SIGSEGV);
  }
  // kill() and raise() return only if the signal is somehow not fatal; make sure we still die.
  ::_exit(code);
}

}  // namespace

void add_protocol_keywords(rjg::sdk::Library& lib) {
  // How many times Echo ran in this process: lets a test show that a call never reached the worker.
  static std::int64_t echo_calls = 0;
  lib.keyword("Echo", {{"value"}}, "Returns `value` unchanged (any JSON, pickled objects included).",
              [](Call& c) -> json::value {
                ++echo_calls;
                return c.value("value");
              });

  lib.keyword("Echo Count", {}, "Returns how many times Echo has run in this worker process.",
              [](Call&) -> json::value { return echo_calls; });

  lib.keyword("Sleep", {{"seconds", "float"}}, "Sleeps, then returns `seconds`.", [](Call& c) -> json::value {
    const double seconds = c.get<double>("seconds");
    if (seconds < 0) throw KeywordError("seconds must not be negative", "ValueError");
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    return seconds;
  });

  lib.keyword("Log Messages", {{"count", "int"}, {"size", "int", json::value(10)}, {"level", "str", json::value("INFO")}},
              "Sends `count` robot/log messages '<i>:xxx...' (`size` x's) in order; returns `count`.",
              [](Call& c) -> json::value {
                const auto count = c.get<std::int64_t>("count");
                const std::string padding(static_cast<std::size_t>(std::max<std::int64_t>(0, c.get<std::int64_t>("size"))), 'x');
                const std::string level = c.get<std::string>("level");
                for (std::int64_t i = 0; i < count; ++i) c.log(fmt::format("{}:{}", i, padding), level);
                return count;
              });

  lib.keyword("Fail",
              {{"message", "str"}, {"type", "str", json::value("AssertionError")}, {"traceback", "str", json::value("")},
               {"mode", "str", json::value("")}},
              "Fails with the given message, error type, traceback and mode (CONTINUABLE, FATAL, SKIP).",
              [](Call& c) -> json::value {
                throw KeywordError(c.get<std::string>("message"), c.get<std::string>("type"),
                                   c.get<std::string>("traceback"), parse_mode(c.get<std::string>("mode")));
              });

  lib.keyword("Crash", {{"mode", "str", json::value("abort")}, {"code", "int", json::value(3)}},
              "Kills the worker: abort, sigkill, exit (with `code`) or segv. Logs 'about to crash (MODE)' first.",
              [](Call& c) -> json::value {
                const std::string mode = c.get<std::string>("mode");
                if (mode != "abort" && mode != "sigkill" && mode != "exit" && mode != "segv")
                  throw KeywordError(fmt::format("unknown crash mode '{}' (abort, sigkill, exit, segv)", mode), "ValueError");
                c.log(fmt::format("about to crash ({})", mode));
                crash(mode, static_cast<int>(c.get<std::int64_t>("code")));
              });

  lib.keyword("Write Garbage", {{"text", "str", json::value("garbage\n")}},
              "Writes `text` raw into the protocol stream, then answers 'ok' normally.", [](Call& c) -> json::value {
                c.write_raw(c.get<std::string>("text"));
                return "ok";
              });

  lib.keyword("Big Value", {{"bytes", "int"}}, "Returns a string of `bytes` x's.", [](Call& c) -> json::value {
    const auto bytes = c.get<std::int64_t>("bytes");
    if (bytes < 0) throw KeywordError("bytes must not be negative", "ValueError");
    return json::string(static_cast<std::size_t>(bytes), 'x');
  });

  lib.keyword("Hang", {}, "Never returns and never answers.", [](Call&) -> json::value {
    for (;;) ::pause();
  });

  lib.keyword("Print Stderr", {{"text", "str"}}, "Writes `text` and a newline to stderr; returns 'ok'.",
              [](Call& c) -> json::value {
                write_stderr(c.get<std::string>("text") + "\n");
                return "ok";
              });

  lib.keyword("Print Stdout", {{"text", "str"}},
              "printf()s `text` and a newline to stdout, which the SDK redirects to stderr; returns 'ok'.",
              [](Call& c) -> json::value {
                std::printf("%s\n", c.get<std::string>("text").c_str());
                std::fflush(stdout);
                return "ok";
              });

  lib.keyword("Get Pid", {}, "Returns the worker's process id.",
              [](Call&) -> json::value { return static_cast<std::int64_t>(::getpid()); });

  lib.keyword("Get Env", {{"name", "str"}}, "Returns the environment variable `name`, or None if unset.",
              [](Call& c) -> json::value {
                const char* value = std::getenv(c.get<std::string>("name").c_str());
                return value ? json::value(value) : json::value(nullptr);
              });

  lib.keyword("Get Cwd", {}, "Returns the worker's working directory.",
              [](Call&) -> json::value { return json::string(std::filesystem::current_path().string()); });

  lib.keyword("Return Json", {{"json_text", "str"}},
              "Parses `json_text` as JSON and returns the value (so a test can make the worker send any value, "
              "pickled objects included, without the client sending that value).",
              [](Call& c) -> json::value {
                json::error_code ec;
                json::value v = json::parse(c.get<std::string>("json_text"), ec);
                if (ec) throw KeywordError(fmt::format("json_text is not valid JSON: {}", ec.message()), "ValueError");
                return v;
              });

  lib.keyword("Return Json In Dialect", {{"json_text", "str"}},
              "Parses `json_text` as JSON and returns the value the way SDK keywords return values by default: "
              "in Python's dialect (a nested value pickled whole, a flat one as JSON).",
              [](Call& c) -> json::value {
                json::error_code ec;
                json::value v = json::parse(c.get<std::string>("json_text"), ec);
                if (ec) throw KeywordError(fmt::format("json_text is not valid JSON: {}", ec.message()), "ValueError");
                return v;
              });

  lib.keyword("Get Import Args", {}, "Returns {'args': [...], 'kw_args': {...}} of the import behind this instance.",
              [](Call& c) -> json::value {
                json::object out;
                out["args"] = c.import_args().args;
                out["kw_args"] = c.import_args().kw_args;
                return out;
              });

  // --- Arguments as the library sees them (--evaluate: after Robot Framework's resolution) -------

  lib.keyword("Echo Arguments", {rjg::sdk::Arg::var_positional("args"), rjg::sdk::Arg::var_named("kwargs")},
              "Returns {'args': [...], 'kwargs': {...}}: what a keyword with (*args, **kwargs) receives. With "
              "--evaluate, after the resolution the reference server's Robot Framework applies.",
              [](Call& c) -> json::value {
                const json::array& args = c.value("args").as_array();
                const json::object& kwargs = c.value("kwargs").as_object();
                if (!g_evaluate) return json::object{{"args", args}, {"kwargs", kwargs}};
                try {
                  return rjg::test_worker::resolve_keyword_call(args, kwargs);
                } catch (const rjg::test_worker::EvalError& e) {
                  throw KeywordError(e.what(), "DataError");
                }
              });

  lib.keyword("Get Resolved Import Args", {},
              "Returns {'args': [...], 'kw_args': {...}} as the library's __init__(*args, **kwargs) received them "
              "(with --evaluate: resolved, plus 'alias' when AS or WITH NAME gave one).",
              [](Call& c) -> json::value {
                if (g_evaluate) {
                  std::lock_guard lock(g_resolved_imports_mutex);
                  if (auto it = g_resolved_imports.find(&c.import_args()); it != g_resolved_imports.end())
                    return it->second;
                }
                return json::object{{"args", c.import_args().args}, {"kw_args", c.import_args().kw_args}};
              });

  // --- Values exactly as they travel (raw texts, no tree) and the values a gateway must check --------

  lib.raw_keyword("Echo Raw",
                  "Returns {'args': ARGS, 'kwargs': KWARGS} with the texts exactly as the worker received them "
                  "(NaN, Infinity, number spellings and string escapes included).",
                  [](Call& c) -> json::value {
                    const auto args = c.args_text(), kwargs = c.kwargs_text();
                    c.return_raw(fmt::format(R"({{"args":{},"kwargs":{}}})", args.empty() ? "[]" : args,
                                             kwargs.empty() ? "{}" : kwargs));
                    return nullptr;
                  });
  lib.keyword("Return Raw", {{"json_text", "str"}},
              "Returns `json_text` as the result's text, unparsed (any JSON, NaN and Infinity included).",
              [](Call& c) -> json::value {
                c.return_raw(c.get<std::string>("json_text"));
                return nullptr;
              });
  lib.keyword("Get Import Args Raw", {},
              "Returns {'args': ARGS, 'kw_args': KW_ARGS} with the import's texts exactly as received.",
              [](Call& c) -> json::value {
                const auto& i = c.import_args();
                c.return_raw(fmt::format(R"({{"args":{},"kw_args":{}}})", i.args_text.empty() ? "[]" : i.args_text,
                                         i.kw_args_text.empty() ? "{}" : i.kw_args_text));
                return nullptr;
              });
  lib.keyword("Log Raw", {{"params_json", "str"}},
              "Sends a robot/log notification whose params are `params_json` as written; returns 'logged'.",
              [](Call& c) -> json::value {
                c.notify_raw(rjg::protocol::make_notification_raw("robot/log", c.get<std::string>("params_json")));
                return json::string("logged");
              });
  lib.keyword("Fail With Data", {{"data_json", "str"}, {"code", "int", json::value(-32099)}},
              "Answers with a JSON-RPC error (not a keyword failure) whose data is `data_json` as written.",
              [](Call& c) -> json::value {
                throw rjg::sdk::RpcError(c.get<int>("code"), "failed on purpose, with data", c.get<std::string>("data_json"));
              });
}

}  // namespace rjg::test_worker
