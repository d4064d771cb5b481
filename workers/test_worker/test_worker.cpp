// robot-test-worker: one binary whose behaviour the integration tests choose, by command-line flag
// (start-up faults) or by the keyword they call (crashes, hangs, garbage on stdout, big values).
//
// usage: robot-test-worker [--name NAME] [fault flags] [--stdio | --tcp HOST:PORT] [--log-level L]
#include "workers/sdk/sdk.hpp"

#include <fmt/format.h>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <thread>

namespace {

using rjg::sdk::Call;
using rjg::sdk::ErrorMode;
using rjg::sdk::KeywordError;
namespace json = rjg::sdk::json;

struct Faults {
  std::string name = "TestLibrary";
  std::optional<int> exit_on_start;
  double initialize_delay = 0;
  bool no_initialize = false;
  int stderr_lines = 0;
  bool fail_import = false;
};

constexpr const char* kUsage =
    "fault flags:\n"
    "  --name NAME                library name (default TestLibrary)\n"
    "  --exit-on-start CODE       print 'fatal: simulated start failure' to stderr and exit CODE at once\n"
    "  --initialize-delay SECONDS sleep before answering robot/initialize\n"
    "  --no-initialize            never answer robot/initialize\n"
    "  --stderr-lines N           print N numbered lines to stderr at start\n"
    "  --fail-import              answer robot/import_library with 'simulated import failure'\n";

void write_stderr(const std::string& text) {
  // Straight to fd 2, unbuffered, so the order against the SDK's own log lines is exact.
  for (std::string_view rest = text; !rest.empty();) {
    ssize_t n = ::write(STDERR_FILENO, rest.data(), rest.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return;
    rest.remove_prefix(static_cast<std::size_t>(n));
  }
}

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
  if (mode == "segv") ::raise(SIGSEGV);
  // kill() and raise() return only if the signal is somehow not fatal; make sure we still die.
  ::_exit(code);
}

void add_keywords(rjg::sdk::Library& lib) {
  lib.keyword("Echo", {{"value"}}, "Returns `value` unchanged (any JSON, pickled objects included).",
              [](Call& c) -> json::value { return c.value("value"); });

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

  lib.keyword("Get Import Args", {}, "Returns {'args': [...], 'kw_args': {...}} of the import behind this instance.",
              [](Call& c) -> json::value {
                json::object out;
                out["args"] = c.import_args().args;
                out["kw_args"] = c.import_args().kw_args;
                return out;
              });
}

// Takes the worker's own flags out of `args`, leaving the SDK's. Returns an error message or nothing.
std::optional<std::string> take_fault_flags(std::vector<std::string>& args, Faults& faults) {
  std::vector<std::string> rest;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    auto value = [&]() -> std::optional<std::string> {
      if (i + 1 < args.size()) return args[++i];
      return std::nullopt;
    };
    try {
      if (arg == "--name") {
        auto v = value();
        if (!v || v->empty()) return "--name needs a library name";
        faults.name = *v;
      } else if (arg == "--exit-on-start") {
        auto v = value();
        if (!v) return "--exit-on-start needs an exit code";
        faults.exit_on_start = std::stoi(*v);
      } else if (arg == "--initialize-delay") {
        auto v = value();
        if (!v) return "--initialize-delay needs seconds";
        faults.initialize_delay = std::stod(*v);
      } else if (arg == "--no-initialize") {
        faults.no_initialize = true;
      } else if (arg == "--stderr-lines") {
        auto v = value();
        if (!v) return "--stderr-lines needs a count";
        faults.stderr_lines = std::stoi(*v);
      } else if (arg == "--fail-import") {
        faults.fail_import = true;
      } else {
        rest.push_back(arg);
      }
    } catch (const std::exception&) {
      return fmt::format("{}: '{}' is not a number", arg, args[i]);
    }
  }
  args = std::move(rest);
  return std::nullopt;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string program = argc > 0 ? argv[0] : "robot-test-worker";
  std::vector<std::string> args(argv + (argc > 0 ? 1 : 0), argv + argc);
  for (const std::string& a : args) {
    if (a == "--help" || a == "-h") {
      std::fputs((rjg::sdk::serve_usage(program) + kUsage).c_str(), stdout);
      return 0;
    }
  }
  Faults faults;
  rjg::sdk::ServeOptions options;
  std::optional<std::string> error = take_fault_flags(args, faults);
  if (!error) error = rjg::sdk::parse_serve_options(args, options);
  if (error) {
    write_stderr(fmt::format("{}: {}\n{}{}", program, *error, rjg::sdk::serve_usage(program), kUsage));
    return 2;
  }

  for (int i = 1; i <= faults.stderr_lines; ++i) write_stderr(fmt::format("stderr line {}\n", i));
  if (faults.exit_on_start) {
    write_stderr("fatal: simulated start failure\n");
    return *faults.exit_on_start;
  }

  rjg::sdk::Library library{faults.name, "Fault-injecting test library of robot-jsonrpc-gateway.", "1.0"};
  add_keywords(library);
  library.on_initialize([delay = faults.initialize_delay, silent = faults.no_initialize](const json::value&) {
    if (delay > 0) std::this_thread::sleep_for(std::chrono::duration<double>(delay));
    return !silent;
  });
  if (faults.fail_import)
    library.on_import([](rjg::sdk::ImportContext&) { throw std::runtime_error("simulated import failure"); });
  return rjg::sdk::serve(library, options);
}
