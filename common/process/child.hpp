// Starting child processes, one way for every program of the project: finding the program (with the
// reason it cannot be run), starting it (the child's side before its exec is exec_child.cpp), and wait
// statuses in words.
// The gateway starts its workers with start_child, and so do the adapter workers their MCP servers and
// Ansible's programs. Nothing here uses Asio.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

namespace rjg::process {

// Why `path` cannot be executed by this process ("is a directory", "is not executable (mode 0644)"),
// or nothing when it can.
std::optional<std::string> exec_problem(const std::string& path);

// Where command0 is, or precisely why it cannot be run.
struct ResolvedCommand {
  std::optional<std::string> path;  // the file to execute
  // When path is empty: "'/opt/w' is a directory", "'/opt/w' is not executable (mode 0644)",
  // "'w' not found in PATH (/usr/bin:/bin) nor next to the gateway (/usr/local/bin)", ...
  std::string problem;
};

// Finds command0 as execvp would: as given when it holds a slash, else in this process's PATH
// (/usr/local/bin:/usr/bin:/bin when PATH is unset); what a relative PATH entry finds is made absolute. The file must be a regular file this user may execute; a candidate
// that is not (a directory, mode 0644) is passed over like execvp does, and named in the problem when
// nothing else is found. With `next_to_name` (the gateway), `next_to` (its directory; empty when
// unknown) is searched last.
ResolvedCommand resolve_command(const std::string& command0, const std::string& next_to = {},
                                std::string_view next_to_name = {});

// The directory of this process's executable, or empty when /proc does not say.
std::string self_directory();

struct ChildOptions {
  std::vector<std::string> argv;                    // argv[0] as the program sees it
  std::string path;                                 // the file to execute (resolve_command); empty: argv[0]
  std::optional<std::vector<std::string>> env;      // "NAME=value"; none: this process's environment
  std::string cwd;                                  // empty: this process's
  int stdin_fd = -1, stdout_fd = -1, stderr_fd = 2;  // become the child's 0, 1, 2; -1: /dev/null
  bool own_group = false;                           // leads a process group of its own (killpg ends it all)
  // PR_SET_PDEATHSIG: SIGKILL when the *thread* that started it ends, the backstop for a program killed
  // before it could stop its children.
  bool die_with_parent = true;
  // setrlimit(resource, {value, value}) in the child, for it and what it starts.
  std::vector<std::pair<int, std::uint64_t>> limits;
  // Binds the child, and what it starts, to this CPU alone (sched_setaffinity); -1: this process's CPUs.
  int cpu = -1;
};

// What start_child could not do, and the step it failed at; code() is the errno.
class StartError : public std::system_error {
 public:
  enum class Step { fork, group, stdio, chdir, limits, affinity, exec };
  StartError(int error, Step step, const std::string& what)
      : std::system_error(error, std::generic_category(), what), step(step) {}
  Step step;
};

// Starts the program and returns once it has executed. The child is made as posix_spawn makes one
// (clone with CLONE_VM | CLONE_VFORK, exec_child.hpp): it makes only system calls before its exec, so
// the cost of starting it does not grow with this process's memory (a fork copies the page tables, and
// every page this process's other threads write afterwards faults once). Nothing but 0, 1 and 2 reaches
// the child, with every signal at its default disposition (an ignored SIGPIPE would survive the exec)
// and none blocked. Throws StartError (a std::system_error) with the errno and the step that failed:
// the clone, its group, a dup2, the chdir, a limit, the CPU, the exec; a child that failed is reaped
// first. The caller reaps the pid it gets (which may also be a child killed before its exec, or one that
// found this process's thread gone: it then ends with status 127).
pid_t start_child(const ChildOptions& options);

// "exited with status 2", "was killed by signal 9 (Killed)", from a raw wait status.
std::string describe_status(int status);

// The CPUs this process may run on (its affinity mask), in ascending order; empty when the mask cannot be
// read. What cpu_affinity = "one" deals workers out over.
std::vector<int> allowed_cpus();

}  // namespace rjg::process
