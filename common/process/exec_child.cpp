// The child's side of start_child. Compiled without sanitizers (CMakeLists.txt): the child runs on a
// stack of its own but in the parent's memory and with the parent thread's thread-local storage, so
// instrumented code would write to the sanitizers' bookkeeping of that thread. For the same reason it
// makes only raw system calls: the sanitizers intercept close, dup2, sigaction and _exit and keep state
// about them. (glibc's posix_spawn works the same way; it has no place for rlimits, a CPU or the
// parent-death signal, hence this.)
#include "common/process/exec_child.hpp"

#include <cerrno>
#include <climits>
#include <csignal>
#include <cstdint>

#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

// glibc's clone under the name the sanitizers do not intercept (TSan's clone interceptor prepares a
// forked child's runtime state, wrong for a child that shares this process's memory).
extern "C" int __clone(int (*fn)(void*), void* stack, int flags, void* arg, ...);

namespace rjg::process::detail {
namespace {

// The kernel's struct sigaction on x86-64 and arm64 (not glibc's): handler, flags, restorer, mask.
// (No memset or other library call may creep in here: the compiler is free to add one for a large
// zeroing, and a sanitizer would intercept it. Whatever needs building is built by the parent.)
struct KernelSigaction {
  void* handler = nullptr;  // SIG_DFL
  unsigned long flags = 0;
  void* restorer = nullptr;
  std::uint64_t mask = 0;
};
constexpr long kSigsetBytes = sizeof(std::uint64_t);
constexpr int kLastSignal = 64;

long sys(long number, long a = 0, long b = 0, long c = 0, long d = 0) { return ::syscall(number, a, b, c, d); }

[[noreturn]] void give_up(ExecPlan& plan, Step step) {
  plan.error = errno;
  plan.failed_step = step;
  for (;;) sys(SYS_exit_group, 127);
}

void close_range_from(unsigned low, unsigned high) {
  if (low > high) return;
  if (sys(SYS_close_range, low, high, 0) == 0) return;
  // Kernels before 5.9: one by one, up to the descriptor limit.
  struct rlimit rl {};
  unsigned max = sys(SYS_getrlimit, RLIMIT_NOFILE, reinterpret_cast<long>(&rl)) == 0 && rl.rlim_cur != RLIM_INFINITY
                     ? static_cast<unsigned>(rl.rlim_cur < (1u << 20) ? rl.rlim_cur : (1u << 20))
                     : 65536u;
  for (unsigned fd = low; fd <= high && fd < max; ++fd) sys(SYS_close, fd);
}

int child_main(void* arg) {
  ExecPlan& plan = *static_cast<ExecPlan*>(arg);
  if (plan.die_with_parent) {
    sys(SYS_prctl, PR_SET_PDEATHSIG, SIGKILL);
    if (sys(SYS_getppid) != plan.parent) sys(SYS_exit_group, 127);  // the parent ended before prctl
  }
  // Its own group before anything else can fail or be signalled: killpg must reach it from its start.
  if (plan.own_group && sys(SYS_setpgid, 0, 0) != 0) give_up(plan, kGroup);
  // Default dispositions (an ignored SIGPIPE would outlive the exec), then no signal blocked: the parent
  // blocked them all around the clone, so no handler of the parent's ever runs in here.
  const KernelSigaction default_action;
  for (int sig = 1; sig <= kLastSignal; ++sig) {
    if (sig != SIGKILL && sig != SIGSTOP)
      sys(SYS_rt_sigaction, sig, reinterpret_cast<long>(&default_action), 0, kSigsetBytes);
  }
  const std::uint64_t none = 0;
  sys(SYS_rt_sigprocmask, SIG_SETMASK, reinterpret_cast<long>(&none), 0, kSigsetBytes);

  // Descriptors below 3 that are to move would be overwritten by an earlier dup2: above 2 with them first.
  int from[3] = {plan.sources[0], plan.sources[1], plan.sources[2]};
  for (int i = 0; i < 3; ++i) {
    if (from[i] < 3 && from[i] != i) {
      from[i] = static_cast<int>(sys(SYS_fcntl, from[i], F_DUPFD_CLOEXEC, 3));
      if (from[i] < 0) give_up(plan, kStdio);
    }
  }
  for (int i = 0; i < 3; ++i) {
    // dup2 onto itself would leave close-on-exec set.
    // (dup3, which every architecture has; dup2 is not in arm64's table.)
    if ((from[i] == i ? sys(SYS_fcntl, i, F_SETFD, 0) : sys(SYS_dup3, from[i], i, 0)) < 0) give_up(plan, kStdio);
  }
  // Nothing else of this process's (a client's socket, the gateway's pipes) reaches the child.
  close_range_from(3, UINT_MAX);
  if (plan.cwd && sys(SYS_chdir, reinterpret_cast<long>(plan.cwd)) != 0) give_up(plan, kChdir);
  for (std::size_t i = 0; i < plan.limit_count; ++i) {
    struct rlimit rl {};
    rl.rlim_cur = rl.rlim_max = static_cast<rlim_t>(plan.limits[i].second);
    if (sys(SYS_setrlimit, plan.limits[i].first, reinterpret_cast<long>(&rl)) != 0) give_up(plan, kLimits);
  }
  if (plan.cpu >= CPU_SETSIZE) {  // beyond any set: refused as the kernel refuses a CPU it lacks
    errno = EINVAL;
    give_up(plan, kAffinity);
  }
  if (plan.cpu >= 0 &&
      sys(SYS_sched_setaffinity, 0, sizeof plan.cpu_set, reinterpret_cast<long>(&plan.cpu_set)) != 0)
    give_up(plan, kAffinity);
  sys(SYS_execve, reinterpret_cast<long>(plan.program), reinterpret_cast<long>(plan.argv),
      reinterpret_cast<long>(plan.envp));
  give_up(plan, kExec);
}

}  // namespace

pid_t clone_and_exec(ExecPlan& plan) {
  // The child's own stack: it must not run on this thread's, which is live (this call's frame) while
  // the child runs. It needs little: child_main's frame and the system calls' wrapper. Below it a guard
  // page: an overflow faults instead of writing into whatever this process has mapped there.
  constexpr std::size_t kStackBytes = 64 * 1024;
  const std::size_t guard = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  void* mapping = ::mmap(nullptr, guard + kStackBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK,
                         -1, 0);
  if (mapping == MAP_FAILED) return -1;
  if (::mprotect(mapping, guard, PROT_NONE) != 0) {
    const int e = errno;
    ::munmap(mapping, guard + kStackBytes);
    errno = e;
    return -1;
  }
  char* const stack_top = static_cast<char*>(mapping) + guard + kStackBytes;
  // What the child calls through the PLT is bound here first (syscall, by the mask's call below;
  // __errno_location, by setting errno): a lazy binding in the child would run the dynamic linker's
  // resolver in this process's memory.
  errno = 0;
  // Every signal blocked in this thread, so also in the child until it has set their defaults.
  const std::uint64_t all = ~std::uint64_t{0};
  std::uint64_t old = 0;
  sys(SYS_rt_sigprocmask, SIG_SETMASK, reinterpret_cast<long>(&all), reinterpret_cast<long>(&old), kSigsetBytes);
  const pid_t pid = __clone(&child_main, stack_top, CLONE_VM | CLONE_VFORK | SIGCHLD, &plan);
  const int clone_errno = errno;
  sys(SYS_rt_sigprocmask, SIG_SETMASK, reinterpret_cast<long>(&old), 0, kSigsetBytes);
  ::munmap(mapping, guard + kStackBytes);
  errno = clone_errno;
  return pid;
}

}  // namespace rjg::process::detail
