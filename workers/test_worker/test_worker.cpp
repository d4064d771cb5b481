// robot-test-worker: one binary whose behaviour the integration tests choose, by command-line flag
// (start-up faults) or by the keyword they call (crashes, hangs, garbage on stdout, big values).
//
// usage: robot-test-worker [--name NAME] [fault flags] [--stdio | --tcp HOST:PORT] [--log-level L]
#include "workers/sdk/sdk.hpp"
#include "workers/test_worker/robot_eval.hpp"

#include <map>
#include <mutex>

#include <fmt/format.h>

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
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
  std::string fail_import_if_exists;  // --fail-import-if-exists: fail imports while this file exists
  int import_delay_ms = 0;     // --import-delay: each import takes this long (a library's own import time)
  bool log_on_import = false;  // --log-on-import: each import sends a robot/log before its answer
  std::string initialize_wait_file;
  bool evaluate = false;  // --evaluate: pose as the reference server, which evaluates argument strings
};

// --evaluate (robot_eval.hpp): arguments are resolved as Robot Framework resolves them in the reference
// server. The resolved import arguments of each instance, by the address of its ImportArgs.
bool g_evaluate = false;
std::map<const rjg::sdk::ImportArgs*, json::object> g_resolved_imports;
std::mutex g_resolved_imports_mutex;

// The descriptors open when main() began: what the worker inherited from whoever started it.
std::vector<int> g_fds_at_start;
// Set by 'Ignore Sigterm': after the session ends the worker keeps running until SIGKILL.
std::atomic<bool> g_linger{false};
// Library instances (imports) alive in this process, and keyword calls counted by 'Count Call'.
std::atomic<std::int64_t> g_live_instances{0};
std::atomic<std::int64_t> g_calls_counted{0};
// Imports this process has begun (its import hook ran), failed ones included ('Import Count').
std::atomic<std::int64_t> g_imports_handled{0};

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

  // --- Pools, resource limits and process hygiene ------------------------------------------------

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

  lib.keyword("Spawn Detached Grandchild", {{"pid_file", "str"}, {"ignore_sigterm", "bool", json::value(false)}},
              "Forks a child that forks a grandchild and exits at once; the grandchild calls setsid (leaving "
              "the worker's process group), points stdin/stdout/stderr at /dev/null, closes every other "
              "descriptor, writes its pid to `pid_file` and sleeps forever (ignoring SIGTERM if "
              "`ignore_sigterm`). Returns the grandchild's pid once `pid_file` exists.",
              [](Call& c) -> json::value {
                const std::string path = c.get<std::string>("pid_file");
                const std::string temp = path + ".tmp";
                const bool ignore_term = c.get<bool>("ignore_sigterm");
                // Only async-signal-safe calls after fork (the SDK runs threads): prepare everything here.
                const pid_t child = ::fork();
                if (child < 0) throw KeywordError("fork failed", "OSError");
                if (child == 0) {
                  if (::fork() != 0) ::_exit(0);  // the grandchild's parent dies: it is reparented
                  ::setsid();
                  if (ignore_term) ::signal(SIGTERM, SIG_IGN);
                  const int null = ::open("/dev/null", O_RDWR);
                  for (int fd = 0; fd <= 2; ++fd) ::dup2(null, fd);
                  for (int fd = 3; fd < 1024; ++fd) ::close(fd);
                  char text[32];
                  int n = 0;
                  for (pid_t p = ::getpid(); p > 0; p /= 10) text[n++] = static_cast<char>('0' + p % 10);
                  for (int i = 0; i < n / 2; ++i) std::swap(text[i], text[n - 1 - i]);
                  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
                  if (fd >= 0) {
                    (void)!::write(fd, text, static_cast<std::size_t>(n));
                    ::close(fd);
                    ::rename(temp.c_str(), path.c_str());
                  }
                  for (;;) ::pause();
                }
                ::waitpid(child, nullptr, 0);
                const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
                while (::access(path.c_str(), F_OK) != 0) {
                  if (std::chrono::steady_clock::now() >= deadline)
                    throw KeywordError(fmt::format("{} did not appear within 20 s", path), "TimeoutError");
                  std::this_thread::sleep_for(std::chrono::milliseconds(5));
                }
                std::FILE* f = std::fopen(path.c_str(), "r");
                long long pid = 0;
                if (!f || std::fscanf(f, "%lld", &pid) != 1) pid = 0;
                if (f) std::fclose(f);
                return static_cast<std::int64_t>(pid);
              });

  lib.keyword("Write Garbage Lines", {{"line", "str"}, {"bytes", "int"}},
              "Writes `line` again and again raw into the protocol stream until `bytes` bytes are written (64 "
              "KiB at a time), then logs 'garbage written: N bytes' to stderr and answers 'ok'.",
              [](Call& c) -> json::value {
                const std::string line = c.get<std::string>("line");
                const auto bytes = c.get<std::int64_t>("bytes");
                if (line.empty() || bytes < 0) throw KeywordError("line must not be empty, bytes not negative", "ValueError");
                std::string chunk;
                while (chunk.size() < 65536) chunk += line;
                std::int64_t written = 0;
                while (written < bytes) {
                  const auto n = std::min<std::int64_t>(bytes - written, static_cast<std::int64_t>(chunk.size()));
                  c.write_raw(std::string_view(chunk).substr(0, static_cast<std::size_t>(n)));
                  written += n;
                }
                write_stderr(fmt::format("garbage written: {} bytes\n", written));
                return "ok";
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

  lib.keyword("Import Count", {},
              "Returns how many imports of the library this process has begun, failed ones included.",
              [](Call&) -> json::value { return g_imports_handled.load(); });

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
