#include "daemon/init/pid1.h"

#include <errno.h>
#include <signal.h>
#include <sys/reboot.h>

#include <chrono>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/fs.h"
#include "runtime/kernel_module.h"
#include "runtime/log.h"
#include "runtime/mount.h"
#include "runtime/net_config.h"
#include "runtime/process.h"
#include "runtime/random.h"
#include "runtime/status.h"
#include "runtime/system.h"

namespace mycel {
namespace {

// The inode of the initial pid namespace (PROC_PID_INIT_INO in the kernel).
constexpr char kInitialPidNs[] = "pid:[4026531836]";

void ReapFor(std::chrono::milliseconds budget) {
  auto deadline = std::chrono::steady_clock::now() + budget;
  while (std::chrono::steady_clock::now() < deadline) {
    pid_t p = ReapAnyChild(/*block=*/false);
    if (p < 0 && errno == ECHILD) return;  // nothing left
    if (p <= 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

int RebootCommand(mycel::v1::ShutdownMode mode) {
  switch (mode) {
    case mycel::v1::SHUTDOWN_MODE_REBOOT:
      return RB_AUTOBOOT;
    case mycel::v1::SHUTDOWN_MODE_HALT:
      return RB_HALT_SYSTEM;
    default:
      return RB_POWER_OFF;
  }
}

}  // namespace

absl::string_view InitRoleName(InitRole role) {
  switch (role) {
    case InitRole::kNone:
      return "none";
    case InitRole::kMachine:
      return "machine";
    case InitRole::kContainer:
      return "container";
  }
  return "none";
}

InitRole DetectInitRole(bool forced) {
  if (CurrentPid() != 1) return forced ? InitRole::kContainer : InitRole::kNone;
  absl::StatusOr<std::string> ns = ReadLink("/proc/self/ns/pid");
  // Before /proc is mounted the link cannot be read; the kernel starts the
  // first init in the initial namespace, so that case is a machine.
  if (!ns.ok()) return InitRole::kMachine;
  return *ns == kInitialPidNs ? InitRole::kMachine : InitRole::kContainer;
}

absl::StatusOr<std::string> EnsureMachineId(const std::string& root) {
  std::string path = root + "/etc/machine-id";
  absl::StatusOr<std::string> existing = ReadFile(path);
  if (existing.ok()) {
    std::string id(absl::StripAsciiWhitespace(*existing));
    if (!id.empty()) return id;
  }
  unsigned char bytes[16];
  if (absl::Status s = RandomBytes(bytes, sizeof(bytes)); !s.ok()) {
    return Annotate(s, "machine-id");
  }
  // A v4 UUID's variant and version bits, as systemd writes them.
  bytes[6] = (bytes[6] & 0x0f) | 0x40;
  bytes[8] = (bytes[8] & 0x3f) | 0x80;
  std::string id;
  for (unsigned char b : bytes) absl::StrAppendFormat(&id, "%02x", b);
  RETURN_IF_ERROR(MakeDirs(root + "/etc", 0755));
  RETURN_IF_ERROR(WriteFile(path, id + "\n", 0444));
  return id;
}

absl::Status SetUpMachine(const mycel::v1::DaemonConfig& config,
                          std::vector<std::string>* warnings) {
  RETURN_IF_ERROR(MountAll("/", SystemMounts(), warnings));

  const std::string& hostname = config.hostname();
  if (!hostname.empty()) {
    if (absl::Status s = SetHostname(hostname); !s.ok()) {
      warnings->push_back(std::string(s.message()));
    }
  }

  absl::StatusOr<std::string> cmdline = ReadFile("/proc/cmdline");
  const std::string& module_dir = config.module_dir();
  for (const std::string& name : config.modules()) {
    std::string params =
        ModuleParamsFromCmdline(cmdline.ok() ? *cmdline : "", name);
    absl::Status s = LoadModule(module_dir, name, params);
    if (!s.ok()) {
      warnings->push_back(std::string(s.message()));
    } else {
      log::Info("module loaded", {{"module", name}, {"params", params}});
    }
  }

  if (absl::Status s = InterfaceUp("lo"); !s.ok()) {
    warnings->push_back(std::string(s.message()));
  }
  for (const auto& iface : config.interfaces()) {
    absl::StatusOr<Ipv4Prefix> prefix = ParseIpv4Prefix(iface.address());
    absl::Status s =
        prefix.ok() ? ConfigureInterface(iface.name(), *prefix, iface.gateway())
                    : prefix.status();
    if (!s.ok()) {
      warnings->push_back(
          absl::StrCat("interface ", iface.name(), ": ", s.message()));
    } else {
      log::Info("interface configured", {{"interface", iface.name()},
                                         {"address", iface.address()},
                                         {"gateway", iface.gateway()}});
    }
  }

  absl::StatusOr<std::string> id = EnsureMachineId("");
  if (!id.ok()) warnings->push_back(std::string(id.status().message()));
  return absl::OkStatus();
}

void FinishMachineShutdown(mycel::v1::ShutdownMode mode) {
  log::Info("final shutdown: terminating remaining processes",
            {{"mode", mycel::v1::ShutdownMode_Name(mode)}});
  // ESRCH (nothing left to signal) is the end we want.
  SignalAllProcesses(SIGTERM).IgnoreError();
  ReapFor(std::chrono::seconds(3));
  SignalAllProcesses(SIGKILL).IgnoreError();
  ReapFor(std::chrono::seconds(1));
  SyncFilesystems();
  std::vector<std::string> warnings;
  int n = UnmountAllBelow("/", &warnings);
  for (const std::string& w : warnings) log::Warn("unmount", {{"error", w}});
  SyncFilesystems();
  log::Info("final shutdown: calling reboot(2)", {{"unmounted", n}});
  absl::Status s = Reboot(RebootCommand(mode));
  // Only reached when reboot(2) failed. PID 1 must not exit.
  log::Error("reboot(2) failed; staying up and reaping", {{"error", s}});
  ReapForever();
}

}  // namespace mycel
