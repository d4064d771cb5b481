// Running Ansible's programs: each in a process group of its own (so that ending the group ends ansible,
// its forks and the modules they run, which Ansible 2.14 keeps in that group), with PR_SET_PDEATHSIG so a
// killed worker takes ansible with it, no shell, and its output read line by line.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rjg::ansible {

struct RunResult {
  int status = 0;      // raw wait status
  std::string output;  // stdout and stderr as they came (the last 256 KiB), unless stdout went to a file
  std::string describe() const;  // "exited with status 2", "was killed by signal 9 (Killed)"
};

// Runs argv (argv[0] a path; see process::resolve_command) with exactly `env`, in `cwd`, stdin /dev/null. stdout goes to `stdout_file`
// when given, else with stderr into `output`; each line is passed to on_line as it arrives. Throws
// std::system_error when it cannot start (errno of the exec) or when end_all() has begun.
RunResult run(const std::vector<std::string>& argv, const std::vector<std::string>& env, const std::string& cwd,
              const std::optional<std::string>& stdout_file, const std::function<void(std::string_view)>& on_line);

// Ends every group run() has running and lets no new one start: SIGTERM, SIGKILL after `grace` to what is
// left. Any thread (the worker's signal thread calls it).
void end_all(std::chrono::milliseconds grace);

}  // namespace rjg::ansible
