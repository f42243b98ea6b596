#include "cells/confinement.h"

#include "absl/strings/match.h"

namespace mycel::cells {
namespace {

// Directories shared by much more than the daemon: hiding one would hide
// the host's own files from cells that share them.
constexpr const char* kSharedDirs[] = {
    "/",        "/run",  "/var/run", "/tmp",  "/var/tmp", "/var",
    "/var/lib", "/dev",  "/dev/shm", "/home", "/root",    "/etc",
    "/usr",     "/opt",  "/srv",     "/mnt",  "/media",   "/proc",
    "/sys",     "/boot", "/lib",     "/bin",  "/sbin"};

std::string Parent(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

bool Within(const std::string& path, const std::string& dir) {
  return path == dir || absl::StartsWith(path, dir + "/");
}

}  // namespace

Confinement CellConfinement(const mycel::v1::CellSpec& spec,
                            const std::vector<std::string>& hidden) {
  Confinement c;
  if (!spec.writable_system_paths()) {
    c.readonly_paths = {"/sys",      "/proc/sys", "/proc/sysrq-trigger",
                        "/proc/irq", "/proc/bus", "/proc/fs"};
    c.masked_paths = {"/proc/kcore",
                      "/proc/keys",
                      "/proc/timer_list",
                      "/proc/sched_debug",
                      "/proc/latency_stats",
                      "/proc/acpi",
                      "/proc/scsi",
                      "/sys/firmware",
                      "/sys/devices/virtual/powercap"};
  }
  c.masked_paths.insert(c.masked_paths.end(), hidden.begin(), hidden.end());
  return c;
}

std::vector<std::string> DaemonPathsToHide(const std::string& state_dir,
                                           const std::string& socket) {
  std::vector<std::string> out = {state_dir};
  if (Within(socket, state_dir)) return out;
  const std::string dir = Parent(socket);
  bool shared = false;
  for (const char* s : kSharedDirs) shared |= dir == s;
  out.push_back(shared ? socket : dir);
  return out;
}

}  // namespace mycel::cells
