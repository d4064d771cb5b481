// robot-test-worker: one binary whose behaviour the integration tests choose, by command-line flag
// (start-up faults) or by the keyword they call (crashes, hangs, garbage on stdout, big values).
//
// usage: robot-test-worker [--name NAME] [fault flags] [--stdio | --tcp HOST:PORT] [--log-level L]
#include "workers/sdk/sdk.hpp"

#include <fmt/format.h>

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <new>
#include <optional>
#include <thread>
#include <vector>

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
  std::string initialize_wait_file;
};

// The descriptors open when main() began: what the worker inherited from whoever started it.
std::vector<int> g_fds_at_start;
// Set by 'Ignore Sigterm': after the session ends the worker keeps running until SIGKILL.
std::atomic<bool> g_linger{false};
// Library instances (imports) alive in this process, and keyword calls counted by 'Count Call'.
std::atomic<std::int64_t> g_live_instances{0};
std::atomic<std::int64_t> g_calls_counted{0};

struct InstanceTracker {
  InstanceTracker() { ++g_live_instances; }
  ~InstanceTracker() { --g_live_instances; }
  InstanceTracker(const InstanceTracker&) = delete;
  InstanceTracker& operator=(const InstanceTracker&) = delete;
};

// Open descriptors of this process, without the one used to list them.
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

std::string fd_target(int fd) {
  char buffer[4096];
  const std::string link = fmt::format("/proc/self/fd/{}", fd);
  const ssize_t n = ::readlink(link.c_str(), buffer, sizeof buffer - 1);
  return n < 0 ? std::string("?") : std::string(buffer, static_cast<std::size_t>(n));
}

constexpr const char* kUsage =
    "fault flags:\n"
    "  --name NAME                library name (default TestLibrary)\n"
    "  --exit-on-start CODE       print 'fatal: simulated start failure' to stderr and exit CODE at once\n"
    "  --initialize-delay SECONDS sleep before answering robot/initialize\n"
    "  --no-initialize            never answer robot/initialize\n"
    "  --stderr-lines N           print N numbered lines to stderr at start\n"
    "  --fail-import              answer robot/import_library with 'simulated import failure'\n"
    "  --initialize-wait-file PATH  answer robot/initialize only once PATH exists (checked every 10 ms, up to\n"
    "                             120 s; then it answers anyway)\n";

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
  if (mode == "segv") {
    // Die by the signal itself, even where a sanitizer runtime has installed a SIGSEGV handler.
    ::signal(SIGSEGV, SIG_DFL);
    ::raise(SIGSEGV);
  }
  // kill() and raise() return only if the signal is somehow not fatal; make sure we still die.
  ::_exit(code);
}

void add_keywords(rjg::sdk::Library& lib) {
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

  lib.keyword("Get Import Args", {}, "Returns {'args': [...], 'kw_args': {...}} of the import behind this instance.",
              [](Call& c) -> json::value {
                json::object out;
                out["args"] = c.import_args().args;
                out["kw_args"] = c.import_args().kw_args;
                return out;
              });

  // --- Pools, resource limits and process hygiene ------------------------------------------------

  lib.keyword("Allocate", {{"bytes", "int"}},
              "Allocates `bytes` bytes and touches every page; returns 'ok'. Fails with MemoryError when the "
              "allocation is refused (RLIMIT_AS).",
              [](Call& c) -> json::value {
                const auto bytes = c.get<std::int64_t>("bytes");
                if (bytes < 0) throw KeywordError("bytes must not be negative", "ValueError");
                try {
                  std::unique_ptr<char[]> block(new char[static_cast<std::size_t>(bytes)]);
                  volatile char* p = block.get();
                  for (std::int64_t i = 0; i < bytes; i += 4096) p[i] = static_cast<char>(i);
                  if (bytes > 0) p[bytes - 1] = 1;
                } catch (const std::bad_alloc&) {
                  throw KeywordError(fmt::format("cannot allocate {} bytes", bytes), "MemoryError");
                }
                return "ok";
              });

  lib.keyword("Open Files", {{"count", "int"}},
              "Opens /dev/null `count` times, closes them all again, and returns how many opens succeeded.",
              [](Call& c) -> json::value {
                const auto count = c.get<std::int64_t>("count");
                std::vector<int> fds;
                for (std::int64_t i = 0; i < count; ++i) {
                  const int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
                  if (fd < 0) break;
                  fds.push_back(fd);
                }
                for (int fd : fds) ::close(fd);
                return static_cast<std::int64_t>(fds.size());
              });

  lib.keyword("Get Rlimit", {{"name", "str"}},
              "Returns the soft limit 'as' (RLIMIT_AS), 'nofile', 'cpu', 'nproc' or 'core'; -1 for unlimited.",
              [](Call& c) -> json::value {
                const std::string name = c.get<std::string>("name");
                int resource = -1;
                if (name == "as") resource = RLIMIT_AS;
                else if (name == "nofile") resource = RLIMIT_NOFILE;
                else if (name == "cpu") resource = RLIMIT_CPU;
                else if (name == "nproc") resource = RLIMIT_NPROC;
                else if (name == "core") resource = RLIMIT_CORE;
                else throw KeywordError(fmt::format("unknown limit '{}' (as, nofile, cpu, nproc, core)", name), "ValueError");
                rlimit rl{};
                if (::getrlimit(resource, &rl) != 0) throw KeywordError("getrlimit failed", "OSError");
                if (rl.rlim_cur == RLIM_INFINITY) return std::int64_t{-1};
                return static_cast<std::int64_t>(rl.rlim_cur);
              });

  lib.keyword("Get Ppid", {}, "Returns the worker's parent process id.",
              [](Call&) -> json::value { return static_cast<std::int64_t>(::getppid()); });

  lib.keyword("Get Pgid", {}, "Returns the worker's process group id.",
              [](Call&) -> json::value { return static_cast<std::int64_t>(::getpgid(0)); });

  lib.keyword("List Fds", {{"when", "str", json::value("start")}},
              "Returns the open descriptor numbers: 'start' those open when the worker began (what it "
              "inherited), 'now' those open now (the SDK's own included: its copies of the protocol stream and its "
              "event loop's, all CLOEXEC).",
              [](Call& c) -> json::value {
                const std::string when = c.get<std::string>("when");
                std::vector<int> fds;
                if (when == "start") fds = g_fds_at_start;
                else if (when == "now") fds = open_fds();
                else throw KeywordError(fmt::format("unknown '{}' (start, now)", when), "ValueError");
                json::array out;
                for (int fd : fds) out.emplace_back(fd);
                return out;
              });

  lib.keyword("Describe Fds", {}, "Returns {fd: target} for the descriptors open when the worker began.",
              [](Call&) -> json::value {
                json::object out;
                for (int fd : g_fds_at_start) out[std::to_string(fd)] = fd_target(fd);
                return out;
              });

  lib.keyword("Ignore Sigterm", {},
              "Ignores SIGTERM from now on, and keeps the process running after its session ends, until "
              "SIGKILL. Returns 'ok'.",
              [](Call&) -> json::value {
                ::signal(SIGTERM, SIG_IGN);
                g_linger = true;
                return "ok";
              });

  lib.keyword("Spawn Child", {},
              "Forks a child that sleeps forever in the worker's process group (it inherits the worker's "
              "descriptors and signal dispositions); returns the child's pid.",
              [](Call&) -> json::value {
                const pid_t pid = ::fork();
                if (pid < 0) throw KeywordError("fork failed", "OSError");
                if (pid == 0) {
                  for (;;) ::pause();
                }
                return static_cast<std::int64_t>(pid);
              });

  lib.keyword("Wait For File", {{"path", "str"}, {"timeout", "float", json::value(60.0)}},
              "Logs 'waiting for PATH', then waits until PATH exists (checked every 10 ms); returns 'ok', or "
              "fails with TimeoutError after `timeout` seconds.",
              [](Call& c) -> json::value {
                const std::string path = c.get<std::string>("path");
                const double timeout = c.get<double>("timeout");
                c.log(fmt::format("waiting for {}", path));
                const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout);
                while (::access(path.c_str(), F_OK) != 0) {
                  if (std::chrono::steady_clock::now() >= deadline)
                    throw KeywordError(fmt::format("{} did not appear within {} s", path, timeout), "TimeoutError");
                  std::this_thread::sleep_for(std::chrono::milliseconds(10));
                }
                return "ok";
              });

  lib.keyword("Count Call", {},
              "Returns how many times 'Count Call' has run in this worker process, this call included (1, 2, "
              "...): the order in which calls from all sessions reached the worker.",
              [](Call&) -> json::value { return ++g_calls_counted; });

  lib.keyword("Live Instances", {}, "Returns how many library instances (imports not finalized) this process holds.",
              [](Call&) -> json::value { return g_live_instances.load(); });
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
  library.on_import([fail = faults.fail_import](rjg::sdk::ImportContext& context) {
    if (fail) throw std::runtime_error("simulated import failure");
    context.state = std::make_shared<InstanceTracker>();
  });
  const int rc = rjg::sdk::serve(library, options);
  if (g_linger) {
    write_stderr("session ended; lingering until SIGKILL ('Ignore Sigterm')\n");
    for (;;) ::pause();
  }
  return rc;
}
