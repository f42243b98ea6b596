#include "runtime/spawn/cell_init.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>

// The init runs from the binary's entry point, before the C library is
// initialised: there is no thread pointer yet (so no errno and no stack
// protector canary), and the static binary's IFUNCs (memcpy, strlen, ...)
// are not resolved. So this file makes system calls with the syscall
// instruction itself, calls no library function, and is compiled without
// a stack protector (runtime/spawn/CMakeLists.txt). The kernel's sigset is
// 64 bits, handled as a plain word.

#if !defined(__x86_64__)
#error "cell_init.cc: the cell init's entry point is written for x86-64"
#endif

namespace mycel {
namespace {

using KernelSigset = uint64_t;
constexpr KernelSigset Bit(int sig) { return KernelSigset{1} << (sig - 1); }

// Returns the kernel's result: -errno on failure.
long Sys(long number, long a = 0, long b = 0, long c = 0, long d = 0) noexcept {
  long ret;
  register long r10 __asm__("r10") = d;
  __asm__ volatile("syscall"
                   : "=a"(ret)
                   : "a"(number), "D"(a), "S"(b), "d"(c), "r"(r10)
                   : "rcx", "r11", "memory");
  return ret;
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
    if (pid > 0 || pid == -EINTR) continue;
    return;  // 0: children left, none exited; -ECHILD: no children
  }
}

int64_t MonotonicMs() noexcept {
  struct timespec now;
  Sys(SYS_clock_gettime, CLOCK_MONOTONIC, Arg(&now));
  return static_cast<int64_t>(now.tv_sec) * 1000 + now.tv_nsec / 1000000;
}

// Whether any process other than the init is left in the namespace. From
// the init, kill(-1) reaches every process of its namespace but itself.
bool OthersRemain() noexcept { return Sys(SYS_kill, -1, 0) != -ESRCH; }

[[noreturn]] void Exit(int code) noexcept {
  for (;;) Sys(SYS_exit_group, code);
}

[[noreturn]] void StopCell() noexcept {
  // kill(-1) reaches every process the caller may signal in its pid
  // namespace: the cell's own only when the init is that namespace's PID
  // 1. An init that holds other namespaces but shares the host's pids
  // (a cell without a pid namespace) has no processes of its own to stop.
  if (Sys(SYS_getpid) != 1) Exit(0);
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
    if (sig < 0) continue;  // -EINTR
    // Standard signals do not queue: one SIGCHLD may stand for many exits.
    ReapExited();
    if (sig == SIGTERM || sig == SIGINT || sig == SIGPWR) StopCell();
  }
}

// Called by mycel_entry (below) with the process's argc and argv, before
// the C library starts. Returns at once unless the process is a cell init.
// A C name, so that the assembly can call it.
extern "C" __attribute__((used, visibility("hidden"))) void MycelCellInitEntry(
    long argc, char** argv) noexcept {
  if (argc != 1 || argv == nullptr || argv[0] == nullptr) return;
  const char* a = argv[0];
  const char* b = kCellInitArgv0;
  while (*a != '\0' && *a == *b) ++a, ++b;
  if (*a != *b) return;
  Sys(SYS_prctl, PR_SET_NAME, Arg(kCellInitName));
  Sys(SYS_prctl, PR_SET_DUMPABLE, 0);
  RunCellInit();
}

}  // namespace mycel

// The entry point of every binary that links this file (the link option
// -e mycel_entry, runtime/spawn/CMakeLists.txt), in place of the C
// library's _start. The kernel (or, in a dynamic binary, ld.so) enters it
// with argc at the top of the stack, argv after it and, in %rdx, a function
// for atexit. It hands argc and argv to MycelCellInitEntry, which never
// returns in a cell init, then restores the stack pointer and %rdx exactly
// and jumps to _start, so that any other process starts as usual. %rbx and
// %r12 are callee-saved, so they survive the call; _start does not read
// them.
__asm__(
    ".text\n"
    ".globl mycel_entry\n"
    ".type mycel_entry, @function\n"
    "mycel_entry:\n"
    "  mov %rdx, %r12\n"
    "  mov %rsp, %rbx\n"
    "  mov (%rsp), %rdi\n"
    "  lea 8(%rsp), %rsi\n"
    "  and $-16, %rsp\n"
    "  call MycelCellInitEntry\n"
    "  mov %rbx, %rsp\n"
    "  mov %r12, %rdx\n"
    "  jmp _start\n"
    ".size mycel_entry, . - mycel_entry\n");
