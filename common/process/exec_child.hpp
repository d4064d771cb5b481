#pragma once
// The child's side of start_child (child.cpp): what runs between the new process's creation and its
// exec. It lives in a file of its own, compiled without sanitizers (common/process/CMakeLists.txt),
// because the child shares the parent's memory until it executes (see clone_and_exec).

#include <sched.h>
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <utility>

namespace rjg::process::detail {

// The steps the child can fail at; a failed child records one with its errno in ExecPlan.
enum Step : int { kNone = 0, kStdio = 1, kChdir = 2, kLimits = 3, kExec = 4, kAffinity = 5, kGroup = 6 };

// Everything the child needs, made by the parent before the child exists: the child only reads it and
// makes system calls (it allocates nothing and calls no library function a sanitizer intercepts).
struct ExecPlan {
  const char* program = nullptr;
  char* const* argv = nullptr;
  char* const* envp = nullptr;        // a copy's array: another thread may change environ meanwhile
  const char* cwd = nullptr;          // null: the parent's
  int sources[3] = {-1, -1, -1};      // become the child's 0, 1 and 2
  bool own_group = false;
  bool die_with_parent = true;
  pid_t parent = 0;                   // for the die_with_parent race check
  const std::pair<int, std::uint64_t>* limits = nullptr;
  std::size_t limit_count = 0;
  int cpu = -1;
  cpu_set_t cpu_set{};                // cpu alone, made by the parent (CPU_ZERO may call memset)
  // Written by a child that could not execute, read by the parent once clone_and_exec returns.
  int failed_step = kNone;
  int error = 0;
};

// Starts a process that shares this one's memory and waits (only this thread) until it has executed
// plan.program or given up (CLONE_VM | CLONE_VFORK, as posix_spawn does): no copy of the page tables,
// however large this process is, and no copy-on-write faults afterwards in its other threads. Returns
// its pid, or -1 with errno when it could not be created; a child that gave up has set
// plan.failed_step and plan.error and exited with status 127 (the caller reaps it).
pid_t clone_and_exec(ExecPlan& plan);

}  // namespace rjg::process::detail
