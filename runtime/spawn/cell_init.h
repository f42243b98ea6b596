// The built-in init of a cell: PID 1 of the cell's pid namespace.
//
// Spawn() with `cell_init = true` creates the cell's namespaces and, instead
// of exec'ing anything, runs RunCellInit() in the new child. Executables of
// the cell then join its namespaces through the init's pidfd, so they see it
// as PID 1; it reaps the orphans they leave behind and ends the cell on
// SIGTERM.
//
// Why a forked copy of the daemon that never execs, rather than exec'ing
// myceld in an init mode: starting a sandboxed process has a budget of a few
// milliseconds, and an exec of myceld costs more than the clone it follows.
// Dynamically linked, relocating gRPC and protobuf and running their static
// initialisers takes ~50 ms; even the static build maps and initialises a
// 25 MB binary (tests/bench/spawn_bench: `myceld --version` takes 1.5 to 3
// times as long as /bin/true, longer than starting a whole cell init). The
// forked copy costs one clone3 and runs code that is already mapped.
//
// The price of a copy is its memory: it shares the daemon's pages
// copy-on-write, so every page the daemon writes later would be duplicated
// for each cell. The init therefore drops its copy of every private
// anonymous mapping except its stack and TLS before entering the loop
// (~1.5 MB resident per init afterwards, whatever the daemon's size).
//
// Since the init is a copy of a multi-threaded process in which only one
// thread survives, it is bound by the same rules as the code between clone
// and exec: async-signal-safe calls only, no allocation, no locks. Before
// the loop starts, every inherited descriptor except 0/1/2 is closed, so the
// init pins none of the daemon's files or sockets.
#ifndef MYCEL_RUNTIME_SPAWN_CELL_INIT_H_
#define MYCEL_RUNTIME_SPAWN_CELL_INIT_H_

namespace mycel {

// The init's name (prctl PR_SET_NAME), visible as /proc/1/comm in the cell.
inline constexpr char kCellInitName[] = "cell-init";

// After SIGTERM/SIGINT/SIGPWR the init sends SIGTERM to every process of the
// namespace and waits at most this long for them to go before it exits
// (when the init exits, the kernel SIGKILLs what is left).
inline constexpr int kCellInitStopGraceMs = 2000;

// The init loop: blocks all signals and waits for them with sigwaitinfo.
// SIGCHLD: reaps every exited child (orphans are reparented to the init).
// SIGTERM, SIGINT, SIGPWR: stops the cell as described above, then _exit(0).
// Other signals (SIGHUP, SIGUSR1, ...) only trigger a reap.
//
// Note for the owner: processes that joined the cell with setns are
// children of the daemon, not of the init; the kernel lets the init finish
// exiting only once those have been reaped, so reap them before (or while)
// waiting for the init.
//
// A seccomp filter loaded by a pre_exec step for the init must allow what
// it uses: getpid, arch_prctl, rt_sigprocmask, openat, pread64, close,
// madvise (dropping memory), rt_sigtimedwait, wait4, kill, clock_gettime
// and exit_group.
//
// REQUIRES: called in a child created by Spawn (async-signal-safe context),
// as PID 1 of a pid namespace for the reaping to cover orphans.
[[noreturn]] void RunCellInit() noexcept;

}  // namespace mycel

#endif  // MYCEL_RUNTIME_SPAWN_CELL_INIT_H_
