// Test harness for the integration tests and the benchmark: runs the real gateway binary with a
// real TOML configuration in a temporary directory, backed by the real test worker.
// Every wait is bounded; no test depends on how fast anything is.
#pragma once

#include "common/client/client.hpp"

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace rjg::test {

namespace fs = std::filesystem;
namespace json = boost::json;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Paths of the binaries under test: those of this build (compile definitions), or, when RJG_BIN_DIR is
// set, the programs of the same name in that directory. deploy/test.sh runs these tests against the
// gateway and workers of its ASan and TSan builds that way: the processes the tests start are what the
// sanitizers must see, and the test programs are compiled once.
const std::string& gateway_binary();
const std::string& test_worker_binary();
const std::string& cli_binary();
// The sanitizer the binaries under test were built with: RJG_SANITIZER ("address", "thread") when set,
// else this program's own, else "" (none). Tests that cannot hold under one (RLIMIT_AS with shadow
// memory, an RSS bound) say so and skip that part.
std::string_view sanitizer_under_test();
// How much of a volume-driven load to run (a log flood, large bodies): all of it against the optimized
// programs, a quarter against sanitized ones. A quarter still takes the same paths (a 25 MB flood
// overflows the 4 MiB write queue and both socket buffers several times); under a sanitizer the rest
// only made the run long (ThreadSanitizer's gateway took three minutes to relay the soak's 100 MB).
std::int64_t volume_under_test(std::int64_t full);

// A fresh directory under $TMPDIR (or /tmp), removed on destruction unless keep() was called.
class TempDir {
 public:
  explicit TempDir(std::string_view prefix = "rjg-it");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const fs::path& path() const { return path_; }
  void keep() { keep_ = true; }

 private:
  fs::path path_;
  bool keep_ = false;
};

// A loopback port that was free a moment ago (bind port 0, read it, close).
std::uint16_t free_port();
// True if a TCP connect to 127.0.0.1:port succeeds right now. Not proof that a given process listens
// there: another process may have the port, and a connect to a port nobody listens on can meet itself
// (TCP simultaneous open, when the kernel picks that same port as the local one). See listens_on.
bool can_connect(std::uint16_t port);

// What each descriptor of a process points to ("pipe:[123]", "socket:[456]", "anon_inode:[eventpoll]").
std::map<int, std::string> fd_targets(pid_t pid);
// One row of /proc/net/tcp or tcp6: a TCP socket of this network namespace.
struct TcpSocket {
  std::uint16_t local_port = 0;
  std::uint16_t remote_port = 0;  // 0 for a listening socket
  bool listening = false;         // state 0A
  std::string inode;              // as in a descriptor's link: socket:[inode]
};
std::vector<TcpSocket> tcp_sockets();
// The TCP sockets in LISTEN state in this network namespace, as "socket:[N]"; with a port, only those
// bound to it.
std::set<std::string> listening_sockets(std::optional<std::uint16_t> port = std::nullopt);
// True if the process holds a socket that listens on the TCP port.
bool listens_on(pid_t pid, std::uint16_t port);

std::string read_file(const fs::path& path);
void write_file(const fs::path& path, std::string_view text);
// A TOML basic string literal, quotes included.
std::string toml_string(std::string_view text);

// kill(pid, 0) fails with ESRCH: no such process, not even a zombie (so it was also reaped).
bool pid_gone(pid_t pid);
// Polls pid_gone() until it holds or the deadline passes.
bool wait_pid_gone(pid_t pid, std::chrono::milliseconds timeout);

// Polls pred until it returns true or the deadline passes.
template <typename Pred>
bool eventually(Pred pred, std::chrono::milliseconds timeout, std::chrono::milliseconds step = 50ms);

// A child process with stdout and stderr redirected to files.
class ChildProcess {
 public:
  ChildProcess() = default;
  ~ChildProcess();
  ChildProcess(ChildProcess&&) noexcept;
  ChildProcess& operator=(ChildProcess&&) noexcept;
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  // Throws std::runtime_error if fork fails; exec failures show as exit code 127. extra_env is added to
  // (or replaces entries of) this process's environment for the child.
  void start(const std::vector<std::string>& argv, const fs::path& stdout_path, const fs::path& stderr_path,
             const std::map<std::string, std::string>& extra_env = {});
  pid_t pid() const { return pid_; }
  bool running();  // reaps if it has exited
  // Waits until it exits (raw wait status) or the deadline passes (nullopt).
  std::optional<int> wait(std::chrono::milliseconds timeout);
  void signal(int sig);
  // SIGKILL and reap, if still running.
  void kill_and_reap();
  std::optional<int> status() const { return status_; }

 private:
  pid_t pid_ = -1;
  std::optional<int> status_;
};

struct ProcessResult {
  bool timed_out = false;
  int status = 0;  // raw wait status
  std::string out;
  std::string err;
  bool exited_with(int code) const;
  std::string describe() const;  // "exit code 1" / "signal 9" / "timed out"
};
// Runs argv to completion (bounded; killed after timeout), capturing stdout and stderr.
ProcessResult run_process(const std::vector<std::string>& argv, const fs::path& workdir,
                          std::chrono::milliseconds timeout = 60s);

std::string describe_status(int status);

// What /proc/PID/stat says about a process (Linux).
struct ProcInfo {
  pid_t pid = 0;
  pid_t ppid = 0;
  pid_t pgid = 0;
  char state = '?';  // R, S, D, Z (zombie), T, X, ...
  std::string comm;
};
// nullopt when there is no such process (not even a zombie).
std::optional<ProcInfo> proc_info(pid_t pid);
// Every process whose parent is `parent`, zombies included.
std::vector<ProcInfo> children_of(pid_t parent);
// Number of open file descriptors of a process (entries of /proc/PID/fd); nullopt if unreadable.
std::optional<std::size_t> open_fd_count(pid_t pid);
// Resident memory of a process in bytes, from /proc/PID/status (0 if unreadable).
std::uint64_t rss_bytes(pid_t pid);
// "fd -> target" lines for a process's descriptors, for failure messages.
std::string describe_fds(pid_t pid);
// The process's command line, arguments separated by spaces ("" if gone).
std::string proc_cmdline(pid_t pid);

// An executable named `name` on $PATH, or nullopt.
std::optional<std::string> find_program(const std::string& name);

// The system calls a process makes (all its threads), counted by `strace -c -f` attached to it.
struct SyscallCounts {
  struct Entry {
    std::uint64_t calls = 0;
    std::uint64_t errors = 0;  // calls that failed (EAGAIN among them)
  };
  std::map<std::string, Entry> by_name;
  std::uint64_t total = 0;
};
// strace is missing, or cannot trace here (no ptrace permission in a container, for example).
class StraceUnusable : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
// Attaches strace to pid, waits (up to 20 s) until every thread of it shows a tracer, runs `work`,
// detaches (SIGINT: strace then writes its summary) and returns the counts. Throws StraceUnusable, or
// std::runtime_error when strace fails after attaching.
SyscallCounts count_syscalls(pid_t pid, const std::function<void()>& work);
// The rows of strace -c's summary table, and its total.
SyscallCounts parse_strace_summary(const std::string& text);
// The calls that are the relay's: all of them against optimized programs; against sanitized ones,
// all but the memory mapping the sanitizer's allocator does on its own schedule (mmap, munmap,
// madvise, mprotect: half a call per keyword with ASan at -O0, whose fake stacks come and go).
std::uint64_t relay_calls(const SyscallCounts& counts);

// One [[library]] entry of the gateway configuration.
struct LibrarySpec {
  std::string name;
  std::vector<std::string> command;  // empty: no `command =` line (an upstream entry says it in extra_toml)
  std::map<std::string, std::string> env;
  std::optional<std::string> cwd;
  std::optional<std::string> startup_timeout;
  std::optional<std::string> shutdown_grace;
  // TOML lines appended inside this [[library]] table as they are (pool settings, rlimits = {...}).
  std::string extra_toml;
};

// A library served by the test worker: command = [robot-test-worker, --name, NAME, extra...], with
// env RJG_TEST_LIBRARY=NAME so a test can tell which library it got.
LibrarySpec test_library(const std::string& name, std::vector<std::string> extra_args = {});
// A library with just a name and a command.
LibrarySpec command_library(std::string name, std::vector<std::string> command);

struct GatewayOptions {
  std::string log_level = "debug";
  std::string drain_timeout = "10s";
  std::string extra_gateway_toml;  // appended inside [gateway]
  std::string extra_toml;          // tables of their own ([classic], [admin]), after [gateway]
  std::map<std::string, std::string> env;  // added to (or replacing in) the gateway process's environment
  // Instead of ["tcp://127.0.0.1:PORT"]; "{port}" in an entry is the port start() picked.
  std::vector<std::string> listen;
  // Runs the gateway through this command ("{port}" replaced), e.g. systemd-socket-activate.
  std::vector<std::string> launcher;
};

std::string make_config(std::uint16_t port, const std::vector<LibrarySpec>& libraries, const GatewayOptions& options);

// The real gateway binary, started with a configuration written to its own temporary directory.
class GatewayProcess {
 public:
  explicit GatewayProcess(std::vector<LibrarySpec> libraries, GatewayOptions options = {});
  ~GatewayProcess();

  // Writes the configuration, starts the gateway and waits (up to 10 s) until it listens on its port and
  // accepts there. Throws std::runtime_error with the gateway's stderr if it exits or does not come up;
  // a gateway that found its port taken by another process starts again on another (up to three times).
  void start();
  // SIGTERM, then wait up to timeout for the exit; returns the raw wait status, or nullopt if it
  // did not exit (it is then killed with SIGKILL).
  std::optional<int> stop(std::chrono::milliseconds timeout = 30s);
  void signal(int sig) { process_.signal(sig); }
  std::optional<int> wait(std::chrono::milliseconds timeout) { return process_.wait(timeout); }
  bool running() { return process_.running(); }

  std::uint16_t port() const { return port_; }
  std::string uri() const;
  pid_t pid() const { return process_.pid(); }
  const fs::path& dir() const { return dir_.path(); }
  fs::path config_path() const { return dir_.path() / "gateway.toml"; }
  fs::path stderr_path() const { return dir_.path() / "gateway.stderr"; }
  std::string log() const;  // the gateway's stderr so far
  // The last max_lines lines of the log, for failure reports.
  std::string log_tail(std::size_t max_lines = 400) const;
  void keep_dir() { dir_.keep(); }
  // Before start(): what it will be started with (a test may set what depends on dir()).
  GatewayOptions& options() { return options_; }

  // A connected client (not yet initialized).
  client::RpcClient connect(std::chrono::milliseconds timeout = 20s) const;

 private:
  std::vector<LibrarySpec> libraries_;
  GatewayOptions options_;
  // True once the gateway's own socket listens on port_ and accepts; false if the gateway exited.
  bool wait_listening();

  TempDir dir_{"rjg-gateway"};
  std::uint16_t port_ = 0;
  ChildProcess process_;
};

// Text helpers for log checks.
bool contains(std::string_view haystack, std::string_view needle);
// How often `needle` occurs in `text` (not overlapping).
std::size_t count_of(std::string_view text, std::string_view needle);
// Group 1 of every match of `pattern` in `text`, as pids, in order.
std::vector<pid_t> captured_pids(const std::string& text, const std::string& pattern);
// The lines of `text` that contain `needle`.
std::vector<std::string> lines_with(const std::string& text, std::string_view needle);

// Helpers for keyword replies.
// An integer result (int64 or uint64); throws otherwise.
std::int64_t as_int(const json::value& v);
// The token of an import's result; throws with the reply described otherwise.
std::string token_of(const client::RpcReply& reply);
// RunKeywordResult.result, or null when the field is left out (a keyword that returned None).
json::value keyword_value(const client::RpcReply& reply);
// A robot/run_keyword answer read as a raw message: the gateway answers every failure of a call with a
// result that carries "error" (never a JSON-RPC error). Its type and message; nullopt for a message that is
// not such a result. Read from the text, so a result holding NaN or huge numbers is no problem.
struct KeywordFailure {
  std::string type;
  std::string message;
};
std::optional<KeywordFailure> keyword_failure_of(const protocol::Message& answer);
// The keyword named `name` in an import's LibraryDefinition, or nullptr.
const json::object* keyword_definition(const json::object& definition, std::string_view name);
// Initialize + initialized + import; returns the gateway token (ASSERT-style: throws on failure).
std::string open_library(client::RpcClient& client, const std::string& library, json::array args = {},
                         json::object kw_args = {});
// Runs "Get Pid" and returns the worker's pid.
pid_t worker_pid(client::RpcClient& client, const std::string& token);
std::string describe(const client::RpcReply& reply);
// Content-Length framing of a raw body (any bytes, valid JSON or not), without the CRLF the real peers append.
std::string frame(std::string_view body);

// The test worker started directly (not through the gateway) with --tcp 127.0.0.1:0.
class DirectWorker {
 public:
  explicit DirectWorker(const std::string& name, std::vector<std::string> extra_args = {});
  ~DirectWorker();
  // Starts it and parses "listening on HOST:PORT" from its stderr (bounded). Throws
  // std::runtime_error naming the problem (e.g. the --tcp flag is not supported).
  void start(std::chrono::milliseconds timeout = 10s);
  std::uint16_t port() const { return port_; }
  std::string host() const { return host_; }
  pid_t pid() const { return process_.pid(); }
  std::string log() const;

 private:
  std::string name_;
  std::vector<std::string> extra_;
  TempDir dir_{"rjg-worker"};
  std::string host_;
  std::uint16_t port_ = 0;
  ChildProcess process_;
};

template <typename Pred>
bool eventually(Pred pred, std::chrono::milliseconds timeout, std::chrono::milliseconds step) {
  auto deadline = Clock::now() + timeout;
  for (;;) {
    if (pred()) return true;
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(step);
  }
}

}  // namespace rjg::test
