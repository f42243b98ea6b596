// The log keeper: the process that sits between executables and their log
// files, as conmon and journald's stream handling do.
//
// Executables write their stdout and stderr into a pipe; the keeper copies
// the pipe into <state-dir>/logs/<cell>/<exe>.log and rotates by rename
// (cells/log_file.h). It is the myceld binary itself, started by the daemon
// as `myceld --log-keeper <state-dir>`, a process of its own, so the pipes
// survive restarts and crashes of the daemon: the keeper holds each pipe's
// read end and one write end of its own, so a pipe never reaches end of
// file while its stream exists, across restarts of the executable and of
// the daemon, and a restarted daemon finds the keeper again through its
// socket. One keeper serves a state directory (an flock on
// <state-dir>/logkeeper.lock, which also holds its pid).
//
// The bound it keeps, whatever the writer's speed: each log file holds at
// most `cap` bytes (default kDefaultLogCapBytes, 8 MiB), so an executable
// has at most 2 × cap bytes on disk, the file and its one predecessor. When
// the next write would pass the cap, the keeper writes what fits (up to the
// last newline in it, if there is one, so that rotation does not split a
// line; else exactly up to the cap), renames the file to <exe>.log.1 and
// starts a new one. A writer faster than the disk is slowed by the full
// pipe (kKeeperPipeBytes); it is never allowed to overrun the cap. A
// writer is never blocked by a failing disk instead: when a write fails
// (ENOSPC, EIO), the keeper goes on draining the pipe, counts what it
// drops, and once writing works again writes one line
// "[mycel: N bytes of output dropped: <reason>]" in its place.
//
// Memory does not grow with the output or the number of lines: one
// kKeeperBufferBytes buffer serves every stream, and a stream's state is a
// few hundred bytes. The kernel holds up to kKeeperPipeBytes per pipe,
// charged to the writer.
//
// The keeper is a single thread around epoll. It serves one controller (the
// daemon) at a time over the protocol of cells/log_keeper_protocol.h; a new
// one replaces the one before (only one daemon runs per state directory,
// so the old one is gone, or hung, or its socket outlived it). It
// ignores the signals that would end it (SIGTERM included: the streams of
// running workloads must outlive whoever sent it; SIGKILL ends it), is not
// dumpable, and logs its errors in logfmt to the stderr it was given. It
// exits when it has no streams and no controller (and none came within
// kKeeperStartGrace of its start).
//
// If the keeper dies anyway (SIGKILL, OOM), its pipes lose their reader:
// executables that write get EPIPE (SIGPIPE, which ends a process that does
// not handle it), and their output is gone until the daemon opens their
// streams again on a new keeper, which it does the next time it starts them.
#ifndef MYCEL_CELLS_LOG_KEEPER_H_
#define MYCEL_CELLS_LOG_KEEPER_H_

#include <cstddef>
#include <string>

#include "absl/time/time.h"

namespace mycel::cells {

// argv[1] of a myceld that is to be the keeper; argv[2] is the state dir.
inline constexpr char kLogKeeperFlag[] = "--log-keeper";
// The keeper's name (prctl PR_SET_NAME), as ps and /proc/PID/comm show it.
inline constexpr char kLogKeeperName[] = "mycel-logkeeper";

// The size the keeper asks for each pipe (F_SETPIPE_SZ; 1 MiB is the
// default /proc/sys/fs/pipe-max-size): output a writer can leave before it
// blocks, and what smooths over a slow moment of the disk.
inline constexpr size_t kKeeperPipeBytes = 1 << 20;
// The one buffer that all streams' data goes through.
inline constexpr size_t kKeeperBufferBytes = 64 << 10;
// How long a keeper that no controller has connected to yet waits for one
// before it exits, when it has no streams.
inline constexpr absl::Duration kKeeperStartGrace = absl::Seconds(10);

std::string LogKeeperSocketPath(const std::string& state_dir);
std::string LogKeeperLockPath(const std::string& state_dir);

// The keeper process's main function: myceld's main() calls it, before
// anything else, when argv[1] is kLogKeeperFlag. Returns the exit code: 0
// when it ends because it has nothing left to do, or because another
// keeper already serves `state_dir`; 1 when it cannot start (the state
// directory is missing, the socket cannot be bound).
int LogKeeperMain(const std::string& state_dir);

}  // namespace mycel::cells

#endif  // MYCEL_CELLS_LOG_KEEPER_H_
