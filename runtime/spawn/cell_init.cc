#include "runtime/spawn/cell_init.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <asm/prctl.h>
#endif

#include <cstddef>
#include <cstdint>

// Once ReleaseInheritedMemory() has run, the init may touch only its stack,
// its TLS and code, so from then on it makes system calls through syscall(2)
// alone (resolved before the release), never through other libc wrappers:
// with lazy binding their first call would run the dynamic linker over
// released memory. The kernel's sigset is 64 bits, handled as a plain word.

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

// The thread pointer (TLS and thread control block: errno, the stack
// protector's canary), or 0 when this architecture is not handled.
uintptr_t ThreadPointer() noexcept {
#if defined(__x86_64__)
  unsigned long fs = 0;
  if (Sys(SYS_arch_prctl, ARCH_GET_FS, Arg(&fs)) != 0) return 0;
  return fs;
#elif defined(__aarch64__)
  return reinterpret_cast<uintptr_t>(__builtin_thread_pointer());
#else
  return 0;
#endif
}

// Parses a hex number at `p`, advancing it.
bool ParseHex(const char*& p, const char* end, uintptr_t& out) noexcept {
  const char* begin = p;
  uintptr_t value = 0;
  for (; p < end; ++p) {
    const char c = *p;
    int digit = -1;
    if (c >= '0' && c <= '9') digit = c - '0';
    if (c >= 'a' && c <= 'f') digit = c - 'a' + 10;
    if (digit < 0) break;
    value = value << 4 | static_cast<uintptr_t>(digit);
  }
  out = value;
  return p > begin;
}

// Skips one space-separated field and the spaces after it.
void SkipField(const char*& p, const char* end) noexcept {
  while (p < end && *p != ' ') ++p;
  while (p < end && *p == ' ') ++p;
}

struct Keep {
  uintptr_t addresses[3];
};

// One line of /proc/self/maps: "start-end perms offset dev inode [path]".
// Drops it if it is private, writable and anonymous (heap, thread stacks,
// .bss, malloc arenas) and holds none of the kept addresses. File-backed
// mappings (.data, the GOT) are small and stay.
void ReleaseMapping(const char* p, const char* end, const Keep& keep) noexcept {
  uintptr_t start = 0, stop = 0;
  if (!ParseHex(p, end, start) || p >= end || *p++ != '-') return;
  if (!ParseHex(p, end, stop) || p >= end || *p++ != ' ') return;
  if (end - p < 4 || p[1] != 'w' || p[3] != 'p' || stop <= start) return;
  SkipField(p, end);  // perms
  SkipField(p, end);  // offset
  SkipField(p, end);  // dev
  if (end - p < 1 || p[0] != '0' || (end - p > 1 && p[1] != ' ')) return;
  for (uintptr_t address : keep.addresses) {
    if (address >= start && address < stop) return;
  }
  // Errors (locked or special mappings) only mean the copy stays.
  Sys(SYS_madvise, static_cast<long>(start), static_cast<long>(stop - start),
      MADV_DONTNEED);
}

// The init is a copy-on-write image of the daemon. Every page the daemon
// writes after the fork would be copied for the init and kept for the life
// of the cell: each cell would end up holding a private copy of the daemon's
// heap. The init needs none of it (it runs on its stack and TLS and reads
// only code and constants), so those pages are dropped (MADV_DONTNEED).
// Best effort: without /proc the memory simply stays shared.
void ReleaseInheritedMemory() noexcept {
  const uintptr_t tp = ThreadPointer();
  if (tp == 0) return;
  char buf[4096];
  const Keep keep = {{reinterpret_cast<uintptr_t>(buf), tp,
                      reinterpret_cast<uintptr_t>(&errno)}};
  const long fd =
      Sys(SYS_openat, AT_FDCWD, Arg("/proc/self/maps"), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  // pread at the offset of the first unfinished line: no copying around.
  long offset = 0;
  for (;;) {
    const long n = Sys(SYS_pread64, fd, Arg(buf), sizeof(buf), offset);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    long line = 0;
    for (long i = 0; i < n; ++i) {
      if (buf[i] != '\n') continue;
      ReleaseMapping(buf + line, buf + i, keep);
      line = i + 1;
    }
    // A line longer than the buffer (only a path can be) is skipped whole.
    offset += line > 0 ? line : n;
  }
  Sys(SYS_close, fd);
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

void RunCellInit() noexcept {
  // Resolve syscall() and errno's accessor while all memory is still there.
  Sys(SYS_getpid);
  errno = 0;

  const KernelSigset all = ~KernelSigset{0};
  Sys(SYS_rt_sigprocmask, SIG_SETMASK, Arg(&all), 0, sizeof(all));
  ReleaseInheritedMemory();

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

}  // namespace mycel
