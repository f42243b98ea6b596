// The built-in init of a cell: PID 1 of the cell's pid namespace.
//
// Spawn() with `cell_init = true` creates the cell's namespaces and, in the
// new process, execs the running binary itself (the open /proc/self/exe of
// the process that called Spawn: myceld, or a test) with argv
// {kCellInitArgv0}. Every binary that links this library enters through
// cell_init.cc's mycel_entry instead of the C library's _start; it
// recognises that argv and runs RunCellInit() before anything else in the
// binary runs: not the C library's start-up, no C++ static initialiser, no
// main(). Executables of the cell then join its namespaces through the
// init's pidfd, so they see it as PID 1; it reaps the orphans they leave
// behind and ends the cell on SIGTERM.
//
// Why exec, and why so early: the init must not be a copy of the daemon. A
// copy (fork without exec) shares the daemon's pages copy-on-write, so every
// page the daemon writes afterwards faults and is copied, with a TLB
// shootdown on every CPU, and a fork copies the daemon's page tables; on
// this project's build machines (a paravirtualised VM) that made up most of
// the cost of starting a cell. An exec of the static myceld that ran its
// static initialisers (gRPC, protobuf, Abseil) would cost more than the
// clone it follows, and even the C library's own start-up of a static
// binary (CPU feature detection with dozens of CPUID instructions, each a
// trap to the hypervisor there, then TLS and IFUNC set-up) took about 1 ms
// of CPU per cell. Entered before all of it, the init is running and
// waiting for signals about 0.5 ms after the exec, with 5 page faults. Being
// the same binary, the init is always the version of the daemon that
// started it, even after an upgrade on disk.
//
// Spawn returns once the exec has happened, not once the init runs: the
// init then already holds the cell's namespaces, which is all an executable
// needs to join them, and signals sent to it meanwhile stay pending (they
// are blocked across the exec). Its /proc/PID/cmdline is kCellInitArgv0
// from the start; its name (comm) becomes kCellInitName a moment later.
//
// The init is not dumpable (PR_SET_DUMPABLE 0): a process in the cell cannot
// open /proc/1/exe (the daemon's binary) or /proc/1/mem without
// CAP_SYS_PTRACE, which the default capabilities do not grant.
#ifndef MYCEL_RUNTIME_SPAWN_CELL_INIT_H_
#define MYCEL_RUNTIME_SPAWN_CELL_INIT_H_

namespace mycel {

// The init's name (prctl PR_SET_NAME), visible as /proc/1/comm in the cell.
inline constexpr char kCellInitName[] = "cell-init";

// argv[0] (and the only argument) of an exec that becomes the init. Defined
// in cell_init.cc, so that a binary that spawns cell inits links that file,
// and with it the entry point.
extern const char kCellInitArgv0[];

// After SIGTERM/SIGINT/SIGPWR the init sends SIGTERM to every process of the
// namespace and waits at most this long for them to go before it exits
// (when the init exits, the kernel SIGKILLs what is left).
inline constexpr int kCellInitStopGraceMs = 2000;

// The init loop: blocks all signals and waits for them with sigwaitinfo.
// SIGCHLD: reaps every exited child (orphans are reparented to the init).
// SIGTERM, SIGINT, SIGPWR: stops the cell as described above, then _exit(0);
// an init that is not PID 1 of its pid namespace (a cell without one) only
// exits, since kill(-1) would reach the host's processes.
// Other signals (SIGHUP, SIGUSR1, ...) only trigger a reap.
//
// Note for the owner: processes that joined the cell with setns are
// children of the daemon, not of the init; the kernel lets the init finish
// exiting only once those have been reaped, so reap them before (or while)
// waiting for the init.
//
// A seccomp filter loaded by a pre_exec step for the init must allow execve
// and what the init uses: prctl, close, rt_sigprocmask, rt_sigtimedwait,
// wait4, kill, clock_gettime and exit_group.
//
// REQUIRES: PID 1 of a pid namespace, for the reaping to cover orphans.
[[noreturn]] void RunCellInit() noexcept;

}  // namespace mycel

#endif  // MYCEL_RUNTIME_SPAWN_CELL_INIT_H_
