// robot-test-worker: one binary whose behaviour the integration tests choose, by command-line flag
// (start-up faults) or by the keyword they call (crashes, hangs, garbage on stdout, big values).
//
// usage: robot-test-worker [--name NAME] [fault flags] [--stdio | --tcp HOST:PORT] [--log-level L]
//
// The keywords are in protocol_keywords.cpp and process_keywords.cpp; what they share with main() is
// in test_worker.hpp.
#include "workers/sdk/sdk.hpp"
#include "workers/test_worker/robot_eval.hpp"
#include "workers/test_worker/test_worker.hpp"

#include <mutex>

#include <fmt/format.h>

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

namespace rjg::test_worker {

std::vector<int> open_fds() {
  std::vector<int> fds;
  DIR* dir = ::opendir("/proc/self/fd");
  if (!dir) return fds;
  const int own = ::dirfd(dir);
  while (const dirent* entry = ::readdir(dir)) {
    if (entry->d_name[0] < '0' || entry->d_name[0] > '9') continue;
    const int fd = std::atoi(entry->d_name);
    if (fd != own) fds.push_back(fd);
  }
  ::closedir(dir);
  std::sort(fds.begin(), fds.end());
  return fds;
}

void write_stderr(const std::string& text) {
  // Straight to fd 2, unbuffered, so the order against the SDK's own log lines is exact.
  for (std::string_view rest = text; !rest.empty();) {
    ssize_t n = ::write(STDERR_FILENO, rest.data(), rest.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return;
    rest.remove_prefix(static_cast<std::size_t>(n));
  }
}

}  // namespace rjg::test_worker

using namespace rjg::test_worker;

namespace {

namespace json = rjg::sdk::json;

struct Faults {
  std::string name = "TestLibrary";
  std::optional<int> exit_on_start;
  double initialize_delay = 0;
  bool no_initialize = false;
  int stderr_lines = 0;
  bool fail_import = false;
  std::string fail_import_if_exists;  // --fail-import-if-exists: fail imports while this file exists
  int import_delay_ms = 0;     // --import-delay: each import takes this long (a library's own import time)
  bool log_on_import = false;  // --log-on-import: each import sends a robot/log before its answer
  std::string initialize_wait_file;
  bool evaluate = false;  // --evaluate: pose as the reference server, which evaluates argument strings
};

struct InstanceTracker {
  InstanceTracker() { ++g_live_instances; }
  ~InstanceTracker() { --g_live_instances; }
  InstanceTracker(const InstanceTracker&) = delete;
  InstanceTracker& operator=(const InstanceTracker&) = delete;
};

constexpr const char* kUsage =
    "fault flags:\n"
    "  --name NAME                library name (default TestLibrary)\n"
    "  --exit-on-start CODE       print 'fatal: simulated start failure' to stderr and exit CODE at once\n"
    "  --initialize-delay SECONDS sleep before answering robot/initialize\n"
    "  --no-initialize            never answer robot/initialize\n"
    "  --stderr-lines N           print N numbered lines to stderr at start\n"
    "  --fail-import              answer robot/import_library with 'simulated import failure'\n"
    "  --fail-import-if-exists PATH  the same while PATH exists (a library that cannot be imported again)\n"
    "  --import-delay MS          each robot/import_library takes MS milliseconds longer (a slow library import)\n"
    "  --log-on-import            each robot/import_library sends the robot/log 'import log: import N of pid P'\n"
    "                             before its answer\n"
    "  --evaluate                 pose as the reference server (server_info name RobotJsonRpcRemoteServer) and\n"
    "                             resolve argument strings as its Robot Framework does (variables, inline\n"
    "                             Python: each open('PATH' creates PATH, %{ENV}, backslashes, name=value,\n"
    "                             control words); see 'Echo Arguments' and 'Get Resolved Import Args'\n"
    "  --initialize-wait-file PATH  answer robot/initialize only once PATH exists (checked every 10 ms, up to\n"
    "                             120 s; then it answers anyway)\n";

// Import kw_args that make the worker send values the gateway must check: "fail_with_data_json" fails
// the import with a JSON-RPC error whose data is that text; "extra_result_json" adds a member "extra"
// with that value to the import result.
void lossless_import_hook(rjg::sdk::ImportContext& context) {
  const auto& kw = context.import.kw_args;
  if (const auto* data = kw.if_contains("fail_with_data_json"); data && data->is_string())
    throw rjg::sdk::RpcError(-32099, "import failed on purpose, with data", std::string(data->get_string()));
  if (const auto* extra = kw.if_contains("extra_result_json"); extra && extra->is_string())
    context.extra_result["extra"] = json::parse(extra->get_string());
}

void add_keywords(rjg::sdk::Library& lib) {
  add_protocol_keywords(lib);
  add_process_keywords(lib);

  // Relays: what the worker received, or exactly the JSON a test asked for, sent as it is (the
  // integration tests compare it as JSON, and the gateway's own checks of results need the exact value).
  // Every other keyword returns values in Python's dialect, the SDK's default.
  for (const char* relay : {"Echo", "Return Json", "Get Import Args", "Echo Arguments", "Get Resolved Import Args"})
    lib.result_form(relay, rjg::sdk::ResultForm::as_is);
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
      } else if (arg == "--fail-import-if-exists") {
        auto v = value();
        if (!v || v->empty()) return "--fail-import-if-exists needs a path";
        faults.fail_import_if_exists = *v;
      } else if (arg == "--import-delay") {
        auto v = value();
        if (!v) return "--import-delay needs milliseconds";
        faults.import_delay_ms = std::stoi(*v);
      } else if (arg == "--log-on-import") {
        faults.log_on_import = true;
      } else if (arg == "--evaluate") {
        faults.evaluate = true;
      } else if (arg == "--initialize-wait-file") {
        auto v = value();
        if (!v || v->empty()) return "--initialize-wait-file needs a path";
        faults.initialize_wait_file = *v;
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
  g_fds_at_start = open_fds();
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
  library.on_initialize([delay = faults.initialize_delay, silent = faults.no_initialize,
                          wait_file = faults.initialize_wait_file](const json::value&) {
    if (delay > 0) std::this_thread::sleep_for(std::chrono::duration<double>(delay));
    if (!wait_file.empty()) {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
      while (::access(wait_file.c_str(), F_OK) != 0 && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return !silent;
  });
  g_evaluate = faults.evaluate;
  if (faults.evaluate) library.server_name("RobotJsonRpcRemoteServer");
  library.on_import([fail = faults.fail_import, fail_if = faults.fail_import_if_exists, delay = faults.import_delay_ms,
                     log = faults.log_on_import](rjg::sdk::ImportContext& context) {
    const auto number = ++g_imports_handled;
    if (delay > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay));
    if (log)
      context.log(fmt::format("import log: import {} of pid {} (args {}, kw_args {})", number, ::getpid(),
                              context.import.args_text.empty() ? "[]" : context.import.args_text,
                              context.import.kw_args_text.empty() ? "{}" : context.import.kw_args_text));
    if (fail || (!fail_if.empty() && ::access(fail_if.c_str(), F_OK) == 0))
      throw std::runtime_error("simulated import failure");
    lossless_import_hook(context);
    if (g_evaluate) {
      // Resolved at import time, as Robot resolves a library's init arguments: "code runs" now.
      json::object resolved;
      try {
        resolved = rjg::test_worker::resolve_import(context.import.args, context.import.kw_args);
      } catch (const rjg::test_worker::EvalError& e) {
        throw std::runtime_error(e.what());
      }
      std::lock_guard lock(g_resolved_imports_mutex);
      g_resolved_imports[&context.import] = std::move(resolved);
    }
    context.state = std::make_shared<InstanceTracker>();
  });
  const int rc = rjg::sdk::serve(library, options);
  if (g_linger) {
    write_stderr("session ended; lingering until SIGKILL ('Ignore Sigterm')\n");
    for (;;) ::pause();
  }
  return rc;
}
