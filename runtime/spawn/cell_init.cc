#include "runtime/spawn/cell_init.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>

// The init runs from a .preinit_array hook, before the C++ runtime of the
// binary is initialised: it makes system calls through syscall(2) and uses
// nothing else. The kernel's sigset is 64 bits, handled as a plain word.

namespace mycel {
namespace {

using KernelSigset = uint64_t;
constexpr KernelSigset Bit(int sig) { return KernelSigset{1} << (sig - 1); }

long Sys(long number, long a = 0, long b = 0, long c = 0, long d = 0) noexcept {
  return syscall(number, a, b, c, d);
}
template <typename T>
long Arg(T* pointer) noexcept {
  return reinterpret_cast<long>(pointer);
}

// Reaps every child that has exited, without blocking.
void ReapExited() noexcept {
  for (;;) {
    int status;
    const long pid = Sys(SYS_wait4, -1, Arg(&status), WNOHANG, 0);
    if (pid > 0) continue;
    if (pid < 0 && errno == EINTR) continue;
    return;  // 0: children left, none exited; -1/ECHILD: no children
  }
}

int64_t MonotonicMs() noexcept {
  struct timespec now;
  Sys(SYS_clock_gettime, CLOCK_MONOTONIC, Arg(&now));
  return static_cast<int64_t>(now.tv_sec) * 1000 + now.tv_nsec / 1000000;
}

// Whether any process other than the init is left in the namespace. From
// the init, kill(-1) reaches every process of its namespace but itself.
bool OthersRemain() noexcept {
  return !(Sys(SYS_kill, -1, 0) != 0 && errno == ESRCH);
}

[[noreturn]] void Exit(int code) noexcept {
  for (;;) Sys(SYS_exit_group, code);
}

[[noreturn]] void StopCell() noexcept {
  Sys(SYS_kill, -1, SIGTERM);
  const int64_t deadline = MonotonicMs() + kCellInitStopGraceMs;
  const KernelSigset chld = Bit(SIGCHLD);
  for (;;) {
    ReapExited();
    if (!OthersRemain()) break;
    const int64_t left = deadline - MonotonicMs();
    if (left <= 0) break;
    // Processes that joined with setns are not our children and send no
    // SIGCHLD, so look again every 10 ms.
    struct timespec timeout;
    timeout.tv_sec = 0;
    timeout.tv_nsec = (left < 10 ? left : 10) * 1000000L;
    siginfo_t info;
    Sys(SYS_rt_sigtimedwait, Arg(&chld), Arg(&info), Arg(&timeout),
        sizeof(chld));
  }
  // Exiting makes the kernel SIGKILL whatever is left in the namespace.
  Exit(0);
}

}  // namespace

const char kCellInitArgv0[] = "mycel-cell-init";

void RunCellInit() noexcept {
  const KernelSigset all = ~KernelSigset{0};
  Sys(SYS_rt_sigprocmask, SIG_SETMASK, Arg(&all), 0, sizeof(all));

  const KernelSigset wanted = Bit(SIGCHLD) | Bit(SIGTERM) | Bit(SIGINT) |
                              Bit(SIGPWR) | Bit(SIGHUP) | Bit(SIGUSR1) |
                              Bit(SIGUSR2) | Bit(SIGQUIT);
  for (;;) {
    siginfo_t info;
    const long sig =
        Sys(SYS_rt_sigtimedwait, Arg(&wanted), Arg(&info), 0, sizeof(wanted));
    if (sig < 0) continue;  // EINTR
    // Standard signals do not queue: one SIGCHLD may stand for many exits.
    ReapExited();
    if (sig == SIGTERM || sig == SIGINT || sig == SIGPWR) StopCell();
  }
}

namespace {

// Runs before the binary's constructors and main(), in every binary that
// links this file: a process exec'ed by Spawn as a cell init never leaves
// it. Any other invocation returns at once.
void CellInitHook(int argc, char** argv, char** /*envp*/) {
  if (argc != 1 || argv == nullptr || argv[0] == nullptr) return;
  const char* a = argv[0];
  const char* b = kCellInitArgv0;
  while (*a != '\0' && *a == *b) ++a, ++b;
  if (*a != *b) return;
  Sys(SYS_prctl, PR_SET_NAME, Arg(kCellInitName));
  Sys(SYS_prctl, PR_SET_DUMPABLE, 0);
  RunCellInit();
}

__attribute__((section(".preinit_array"),
               used)) void (*const kCellInitHook)(int, char**,
                                                  char**) = CellInitHook;

}  // namespace
}  // namespace mycel
