// myceld: the mycel node agent. It may be the host's PID 1.
#include <fcntl.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "cells/log_keeper.h"
#include "daemon/config.h"
#include "daemon/daemon.h"
#include "daemon/init/pid1.h"
#include "daemon/server/grpc_log.h"
#include "runtime/fs.h"
#include "runtime/log.h"
#include "runtime/mount.h"
#include "runtime/process.h"
#include "runtime/signals.h"

namespace {

// As PID 1 of a machine, stderr may not even be open. Log to the kernel log
// (which reaches the console), or to the console itself.
void UseKernelLog() {
  // The sink keeps the descriptor for the life of the process.
  absl::StatusOr<mycel::UniqueFd> fd =
      mycel::OpenFile("/dev/kmsg", O_WRONLY | O_CLOEXEC | O_NOCTTY);
  if (fd.ok()) {
    mycel::log::SetSink(fd->release(), /*kmsg=*/true);
    return;
  }
  fd = mycel::OpenFile("/dev/console", O_WRONLY | O_CLOEXEC | O_NOCTTY);
  if (fd.ok()) mycel::log::SetSink(fd->release(), /*kmsg=*/false);
}

}  // namespace

int main(int argc, char** argv) {
  // The log keeper is this binary too (cells/log_keeper.h); it shares
  // none of the daemon's set-up.
  if (argc >= 2 && strcmp(argv[1], mycel::cells::kLogKeeperFlag) == 0) {
    if (argc != 3) {
      fprintf(stderr, "usage: myceld %s STATE_DIR\n",
              mycel::cells::kLogKeeperFlag);
      return 2;
    }
    return mycel::cells::LogKeeperMain(argv[2]);
  }
  const absl::Duration main_entered = mycel::BootClockNow();
  // Before anything can write to a pipe or a socket whose reader is gone:
  // such a write must fail with EPIPE, not end the daemon. The event loop
  // takes the other signals (daemon.cc).
  mycel::CatchAndDiscard(SIGPIPE);
  mycel::GuardFaultSignals();
  // Debian's Abseil checks every Mutex acquisition for lock-order cycles
  // (it keeps a graph of all locks); that is a debugging aid, and it costs
  // a measurable share of each cell's lifecycle. -Wthread-safety checks the
  // lock discipline at compile time instead.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  // gRPC threads would each get a malloc arena; a node agent's allocation
  // rate does not need them, and each costs resident memory.
  mallopt(M_ARENA_MAX, 2);
  // Before any channel or server: gRPC's lines come out as the daemon's.
  mycel::RouteGrpcLogs();

  std::vector<std::string> args(argv + 1, argv + argc);
  bool forced_pid1 = false;
  for (const auto& a : args) forced_pid1 |= a == "--pid1";
  mycel::InitRole role = mycel::DetectInitRole(forced_pid1);
  if (role == mycel::InitRole::kMachine) {
    // The kernel hands init the words of its command line that it did not
    // understand ("quiet" is not one, but "splash" would be). Only flags
    // are ours.
    std::vector<std::string> flags;
    for (const auto& a : args) {
      if (a.rfind("--", 0) == 0) flags.push_back(a);
    }
    args = std::move(flags);
    // /dev may not be mounted yet; mount it early enough to log.
    if (!mycel::CanAccess("/dev/kmsg", W_OK)) {
      // Without it, UseKernelLog tries /dev/console, then logs nowhere.
      mycel::MountDevtmpfs("/dev").IgnoreError();
    }
    UseKernelLog();
  }

  absl::StatusOr<mycel::DaemonFlags> flags = mycel::ParseDaemonFlags(
      args, role == mycel::InitRole::kMachine ? mycel::kPid1Config : "");
  if (!flags.ok()) {
    if (role != mycel::InitRole::kMachine) {
      fprintf(stderr, "myceld: %s\n",
              std::string(flags.status().message()).c_str());
      return 2;
    }
    mycel::log::Error("bad configuration; starting with defaults",
                      {{"error", flags.status()}});
    flags = mycel::ParseDaemonFlags({});
    if (!flags.ok()) mycel::ReapForever();
  }
  if (flags->help) {
    fputs(mycel::DaemonUsage().c_str(), stdout);
    return 0;
  }
  if (flags->version) {
    printf("myceld %s\n", MYCEL_VERSION);
    return 0;
  }
  mycel::log::SetLevel(*mycel::log::ParseLevel(flags->config.log_level()));

  mycel::Daemon daemon(flags->config, role, main_entered);
  absl::Status s = daemon.Start();
  if (!s.ok()) {
    mycel::log::Error("startup failed",
                      {{"error", std::string(s.message())},
                       {"code", absl::StatusCodeToString(s.code())}});
    if (role == mycel::InitRole::kNone) return 1;
    daemon.EnterSafeMode(s);
  }
  daemon.Run();
  if (role == mycel::InitRole::kMachine) {
    mycel::FinishMachineShutdown(daemon.shutdown_mode());
  }
  return 0;
}
