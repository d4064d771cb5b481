// common/process: finding a program, starting it as a child (what reaches it, what a failure says) and
// wait statuses in words. Real children of /bin/sh; nothing here depends on timing.
#include "common/process/child.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

namespace rjg::process {
namespace {

namespace fs = std::filesystem;

struct TempDir {
  fs::path path;
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "rjg-child-XXXXXX").string();
    if (!::mkdtemp(pattern.data())) throw std::system_error(errno, std::generic_category(), "mkdtemp");
    path = fs::canonical(pattern);  // as the child's pwd prints it, should TMPDIR lead through a symlink
  }
  ~TempDir() { fs::remove_all(path); }
};

// Everything `fd` gives until its end.
std::string read_all(int fd) {
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR))
    if (n > 0) out.append(buf, static_cast<std::size_t>(n));
  return out;
}

int wait_for(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

// Runs `script` in /bin/sh with its stdout on a pipe; returns what it printed and its wait status.
std::pair<std::string, int> shell(const std::string& script, ChildOptions options = {}) {
  int out[2];
  EXPECT_EQ(::pipe2(out, O_CLOEXEC), 0);
  options.argv = {"/bin/sh", "-c", script};
  options.stdout_fd = out[1];
  const pid_t pid = start_child(options);
  ::close(out[1]);
  std::string text = read_all(out[0]);
  ::close(out[0]);
  return {text, wait_for(pid)};
}

TEST(StartChild, OnlyStdinStdoutAndStderrReachTheChild) {
  // Not close-on-exec, as a careless library in the parent might leave one.
  const int leaked = ::open("/dev/null", O_RDONLY);
  ASSERT_GE(leaked, 3);
  const auto [fds, status] = shell("ls /proc/self/fd | sort -n | tr '\\n' ' '");
  ::close(leaked);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << describe_status(status);
  // 0, 1, 2, and the descriptor ls opened to read the directory (3).
  EXPECT_EQ(fds, "0 1 2 3 ") << "the child had descriptors of its parent's";
}

TEST(StartChild, StdinIsDevNullUnlessGiven) {
  const auto [text, status] = shell("cat; echo end");
  EXPECT_EQ(text, "end\n");
}

TEST(StartChild, DescriptorsBelowThreeMayBeSwapped) {
  // The child's stdout is this process's descriptor 0 and its stdin a pipe: the dup2 onto 0 must not
  // overwrite what is to become 1.
  const int saved_stdin = ::dup(0);
  int out[2], in[2];
  ASSERT_EQ(::pipe(out), 0);
  ASSERT_EQ(::pipe2(in, O_CLOEXEC), 0);
  ASSERT_EQ(::dup2(out[1], 0), 0);
  ::close(out[1]);
  ChildOptions o;
  o.argv = {"/bin/sh", "-c", "read line; echo \"got $line\""};
  o.stdin_fd = in[0];
  o.stdout_fd = 0;
  const pid_t pid = start_child(o);
  ::dup2(saved_stdin, 0);
  ::close(saved_stdin);
  ::close(in[0]);
  ASSERT_EQ(::write(in[1], "hello\n", 6), 6);
  ::close(in[1]);
  EXPECT_EQ(read_all(out[0]), "got hello\n");
  ::close(out[0]);
  EXPECT_EQ(describe_status(wait_for(pid)), "exited with status 0");
}

TEST(StartChild, SignalsAreBackToTheirDefaults) {
  // This process ignores SIGPIPE and blocks SIGTERM; the child must not inherit either.
  auto* previous = ::signal(SIGPIPE, SIG_IGN);
  sigset_t term, old;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  ::pthread_sigmask(SIG_BLOCK, &term, &old);
  const auto [text, status] = shell("grep -E '^(SigIgn|SigBlk)' /proc/self/status");
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  ::signal(SIGPIPE, previous);
  EXPECT_EQ(text, "SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n");
}

TEST(StartChild, EnvironmentWorkingDirectoryAndGroupAreAsAsked) {
  TempDir dir;
  ChildOptions o;
  o.env = std::vector<std::string>{"ONLY=this", "PATH=/usr/bin:/bin"};
  o.cwd = dir.path.string();
  o.own_group = true;
  ::setenv("RJG_CHILD_PROBE", "of-the-parent", 1);
  // Field 5 of /proc/PID/stat is the process group.
  const auto [text, status] = shell("echo \"$ONLY ${RJG_CHILD_PROBE:-absent} $(pwd) $$ $(cut -d' ' -f5 /proc/$$/stat)\"", o);
  std::istringstream words(text);
  std::string only, probe, cwd, self, group;
  words >> only >> probe >> cwd >> self >> group;
  EXPECT_EQ(only, "this");
  EXPECT_EQ(probe, "absent") << "this process's environment reached the child";
  EXPECT_EQ(cwd, dir.path.string());
  EXPECT_EQ(group, self) << "the child does not lead a group of its own";
}

TEST(StartChild, AFailedExecNamesTheProgramAndItsErrnoAndLeavesNoChild) {
  ChildOptions o;
  o.argv = {"/nonexistent/program"};
  try {
    start_child(o);
    FAIL() << "no error";
  } catch (const std::system_error& e) {
    EXPECT_EQ(e.code().value(), ENOENT);
    EXPECT_EQ(std::string(e.what()), "executing '/nonexistent/program': No such file or directory");
  }
  // Reaped already: this process has no child left.
  EXPECT_EQ(::waitpid(-1, nullptr, WNOHANG), -1);
  EXPECT_EQ(errno, ECHILD);
}

TEST(StartChild, AMissingWorkingDirectoryIsNamed) {
  ChildOptions o;
  o.argv = {"/bin/true"};
  o.cwd = "/nonexistent/dir";
  try {
    start_child(o);
    FAIL() << "no error";
  } catch (const std::system_error& e) {
    EXPECT_EQ(std::string(e.what()),
              "changing to the working directory '/nonexistent/dir': No such file or directory");
  }
  EXPECT_EQ(::waitpid(-1, nullptr, WNOHANG), -1);
}

// ChildOptions::cpu binds the child to one CPU (cpu_affinity = "one"); a CPU this process may not use is
// a failure naming it, and leaves no child.
TEST(StartChild, ACpuBindsTheChildToItAlone) {
  cpu_set_t own;
  CPU_ZERO(&own);
  ASSERT_EQ(::sched_getaffinity(0, sizeof own, &own), 0);
  int cpu = 0;
  while (!CPU_ISSET(cpu, &own)) ++cpu;
  ChildOptions o;
  o.cpu = cpu;
  const auto [text, status] = shell("grep Cpus_allowed_list /proc/$$/status", o);
  EXPECT_EQ(text, fmt::format("Cpus_allowed_list:\t{}\n", cpu));
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);

  o.argv = {"/bin/true"};
  o.cpu = CPU_SETSIZE - 1;  // no machine here has 1,024 CPUs
  try {
    start_child(o);
    FAIL() << "no error";
  } catch (const StartError& e) {
    EXPECT_EQ(e.step, StartError::Step::affinity);
    EXPECT_EQ(std::string(e.what()), fmt::format("binding it to CPU {}: Invalid argument", CPU_SETSIZE - 1));
  }
  o.cpu = CPU_SETSIZE;  // beyond any cpu_set_t: refused the same way, nothing written out of bounds
  EXPECT_THROW(start_child(o), StartError);
  EXPECT_EQ(::waitpid(-1, nullptr, WNOHANG), -1);
}

TEST(ResolveCommand, FindsInPathAndSaysWhyNot) {
  TempDir dir;
  const auto script = dir.path / "tool";
  std::ofstream(script) << "#!/bin/sh\n";
  fs::permissions(script, fs::perms::owner_read | fs::perms::owner_write);
  const std::string saved = std::getenv("PATH") ? std::getenv("PATH") : "";
  ::setenv("PATH", (dir.path.string() + ":/bin").c_str(), 1);
  const auto sh = resolve_command("sh");
  const auto tool = resolve_command("tool");
  const auto nothing = resolve_command("no-such-tool-here");
  const auto beside = resolve_command("no-such-tool-here", "/opt/x", "the gateway");
  ::setenv("PATH", saved.c_str(), 1);
  ASSERT_TRUE(sh.path);
  EXPECT_EQ(*sh.path, "/bin/sh");
  EXPECT_FALSE(tool.path);
  EXPECT_EQ(tool.problem, fmt::format("'{}' is not executable (mode 0600), and no other 'tool' was found in PATH ({}:/bin)",
                                      script.string(), dir.path.string()));
  EXPECT_EQ(nothing.problem, fmt::format("'no-such-tool-here' not found in PATH ({}:/bin)", dir.path.string()));
  EXPECT_EQ(beside.problem, fmt::format("'no-such-tool-here' not found in PATH ({}:/bin) nor next to the gateway (/opt/x)",
                                        dir.path.string()));
  EXPECT_EQ(resolve_command("/etc").problem, "'/etc' is a directory");
  EXPECT_EQ(resolve_command("").problem, "'' is empty");
}

TEST(ResolveCommand, ARelativePathEntryGivesAnAbsolutePathAndNoPathMeansTheDefault) {
  // An empty PATH entry is the working directory, as for execvp; a child that changes its directory
  // before the exec must still find the file, so the path found is absolute.
  TempDir dir;
  const auto script = dir.path / "tool";
  std::ofstream(script) << "#!/bin/sh\n";
  fs::permissions(script, fs::perms::owner_all);
  const auto saved_cwd = fs::current_path();
  const std::string saved = std::getenv("PATH") ? std::getenv("PATH") : "";
  fs::current_path(dir.path);
  ::setenv("PATH", ":/bin", 1);
  const auto relative = resolve_command("tool");
  ::unsetenv("PATH");
  const auto by_default = resolve_command("sh");
  const auto nowhere = resolve_command("no-such-tool-here");
  ::setenv("PATH", saved.c_str(), 1);
  fs::current_path(saved_cwd);
  ASSERT_TRUE(relative.path) << relative.problem;
  EXPECT_EQ(*relative.path, script.string());
  ASSERT_TRUE(by_default.path) << by_default.problem;
  EXPECT_EQ(*by_default.path, "/usr/bin/sh");
  EXPECT_EQ(nowhere.problem, "'no-such-tool-here' not found in PATH (not set, so /usr/local/bin:/usr/bin:/bin)");
}

TEST(StartChild, TheProgramSeesItsArgv0AsGiven) {
  ChildOptions o;
  o.path = "/bin/sh";
  const auto [text, status] = [&] {
    int out[2];
    EXPECT_EQ(::pipe2(out, O_CLOEXEC), 0);
    o.argv = {"called-so", "-c", "echo \"$0\""};
    o.stdout_fd = out[1];
    const pid_t pid = start_child(o);
    ::close(out[1]);
    std::string t = read_all(out[0]);
    ::close(out[0]);
    return std::pair{t, wait_for(pid)};
  }();
  EXPECT_EQ(text, "called-so\n");
  EXPECT_EQ(describe_status(status), "exited with status 0");
}

// The child shares this process's memory until its exec (CLONE_VM | CLONE_VFORK), so starting one
// leaves this process's pages as they were: writing 64 MiB of them again afterwards costs no page
// fault. (After a fork each of those 16,384 pages would fault once, copy-on-write.) A count, not a time.
TEST(StartChild, StartingAChildCopiesNoPageOfThisProcess) {
  constexpr std::size_t kBytes = 64u << 20;
  const long page = ::sysconf(_SC_PAGESIZE);
  // Small pages (transparent huge pages would make a fork's copies 512 times fewer), every one touched.
  void* mapping = ::mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mapping, MAP_FAILED);
  ::madvise(mapping, kBytes, MADV_NOHUGEPAGE);
  char* const heap = static_cast<char*>(mapping);
  std::memset(heap, 1, kBytes);
  const auto faults = [] {
    struct rusage usage {};
    ::getrusage(RUSAGE_SELF, &usage);
    return usage.ru_minflt;
  };
  ChildOptions o;
  o.argv = {"/bin/true"};
  const pid_t pid = start_child(o);
  EXPECT_EQ(describe_status(wait_for(pid)), "exited with status 0");
  const long before = faults();
  for (std::size_t i = 0; i < kBytes; i += static_cast<std::size_t>(page)) heap[i] = 2;
  const long pages = static_cast<long>(kBytes) / page;
  EXPECT_LT(faults() - before, pages / 16) << "writing " << pages << " pages after a child started";
  ::munmap(mapping, kBytes);
}

TEST(DescribeStatus, ExitsAndSignalsInWords) {
  const auto [text, exited] = shell("exit 3");
  EXPECT_EQ(describe_status(exited), "exited with status 3");
  const auto [none, killed] = shell("kill -9 $$");
  EXPECT_EQ(describe_status(killed), "was killed by signal 9 (Killed)");
}

}  // namespace
}  // namespace rjg::process
