// What the benchmark reads about other processes: CPU time and threads from /proc. (System calls are
// counted by test::count_syscalls, in the integration harness.)
#pragma once

#include "tests/integration/harness.hpp"

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace rjg::bench {

// CPU time of all threads of a process so far, in nanoseconds: the sum of the first field of
// /proc/PID/task/*/schedstat (time on a CPU, to the nanosecond; /proc/PID/stat counts whole clock
// ticks). A thread that ended is not counted, so measure across a phase in which the process keeps
// its threads. 0 if the process is gone.
std::uint64_t cpu_ns(pid_t pid);
// Threads of a process (entries of /proc/PID/task); 0 if it is gone.
std::size_t thread_count(pid_t pid);

}  // namespace rjg::bench
