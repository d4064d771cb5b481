// The test worker's keywords about pools, resource limits and process hygiene: memory and descriptors,
// limits, process ids and groups, inherited descriptors, signals, children that outlive the worker,
// and the counts of calls, imports and instances a pool shares.
#include "workers/test_worker/test_worker.hpp"

#include <fmt/format.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <new>
#include <thread>
#include <vector>

namespace rjg::test_worker {

namespace {

using rjg::sdk::Call;
using rjg::sdk::KeywordError;
namespace json = rjg::sdk::json;

std::string fd_target(int fd) {
  char buffer[4096];
  const std::string link = fmt::format("/proc/self/fd/{}", fd);
  const ssize_t n = ::readlink(link.c_str(), buffer, sizeof buffer - 1);
  return n < 0 ? std::string("?") : std::string(buffer, static_cast<std::size_t>(n));
}

}  // namespace

void add_process_keywords(rjg::sdk::Library& lib) {
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
}

}  // namespace rjg::test_worker
