#include "cli/cell_flags.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "cli/flags.h"

namespace mycel::cli {

const char kCellFlagsHelp[] = R"(limits:
  --cpu-max CORES       CPU time as a fraction of cores (0.5 = half a core)
  --cpu-weight N        relative CPU weight, 1..10000 (default 100)
  --memory-max SIZE     hard memory limit (64M, 1G, ...); above it the OOM
                        killer acts inside the cell
  --memory-high SIZE    throttling threshold
  --memory-swap-max SIZE
  --pids-max N          maximum number of processes
  --cpuset-cpus LIST    CPUs, e.g. 0-1
  --cpuset-mems LIST
isolation:
  --isolate LIST        namespaces: pid,mount,uts,ipc,net,user,cgroup (or all)
  --seccomp PROFILE     default (Docker-like), strict or none
  --seccomp-deny LIST   extra syscalls to deny, e.g. mkdir,chmod
  --cap LIST            capabilities to keep instead of the default set
  --rootfs DIR          pivot_root into DIR (needs --isolate mount)
  --readonly-rootfs     mount the rootfs read-only
  --uid-map MAP, --gid-map MAP
                        user namespace maps (default "0 100000 65536")
  --writable-system-paths
                        leave /sys and /proc/sys writable: a root workload
                        can then change the host's kernel settings and any
                        cgroup, its own limits included (not a security
                        boundary; see docs/security.md)
)";

const std::set<std::string>& CellValueFlags() {
  static const auto* flags = new std::set<std::string>{
      "--cpu-max",         "--cpu-weight", "--memory-max",   "--memory-high",
      "--memory-swap-max", "--pids-max",   "--cpuset-cpus",  "--cpuset-mems",
      "--isolate",         "--seccomp",    "--seccomp-deny", "--cap",
      "--rootfs",          "--uid-map",    "--gid-map"};
  return *flags;
}

const std::set<std::string>& CellBoolFlags() {
  static const auto* flags =
      new std::set<std::string>{"--readonly-rootfs", "--writable-system-paths"};
  return *flags;
}

absl::Status FillCellSpec(const ParsedArgs& a, mycel::v1::CellSpec* spec) {
  mycel::v1::Limits* l = spec->mutable_limits();
  if (a.has("--cpu-max")) {
    double v = 0;
    if (!absl::SimpleAtod(a.get("--cpu-max"), &v)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--cpu-max: want a number of cores such as 0.5, got \"",
                       a.get("--cpu-max"), "\""));
    }
    l->set_cpu_max(v);
  }
  if (a.has("--cpu-weight")) {
    uint64_t v = 0;
    if (!absl::SimpleAtoi(a.get("--cpu-weight"), &v)) {
      return absl::InvalidArgumentError("--cpu-weight: want a number 1..10000");
    }
    l->set_cpu_weight(v);
  }
  struct SizeFlag {
    const char* flag;
    void (mycel::v1::Limits::*set)(int64_t);
  };
  for (const SizeFlag& f :
       {SizeFlag{"--memory-max", &mycel::v1::Limits::set_memory_max},
        SizeFlag{"--memory-high", &mycel::v1::Limits::set_memory_high},
        SizeFlag{"--memory-swap-max",
                 &mycel::v1::Limits::set_memory_swap_max}}) {
    if (!a.has(f.flag)) continue;
    absl::StatusOr<int64_t> v = ParseSize(f.flag, a.get(f.flag));
    if (!v.ok()) return v.status();
    (l->*f.set)(*v);
  }
  if (a.has("--pids-max")) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(a.get("--pids-max"), &v)) {
      return absl::InvalidArgumentError(
          "--pids-max: want a number of processes");
    }
    l->set_pids_max(v);
  }
  l->set_cpuset_cpus(a.get("--cpuset-cpus"));
  l->set_cpuset_mems(a.get("--cpuset-mems"));
  for (const std::string& list : a.values.count("--isolate")
                                     ? a.values.at("--isolate")
                                     : std::vector<std::string>{}) {
    for (absl::string_view ns : absl::StrSplit(list, ',', absl::SkipEmpty())) {
      using mycel::v1::Namespace;
      static const std::pair<const char*, Namespace> kNames[] = {
          {"pid", mycel::v1::NAMESPACE_PID},
          {"mount", mycel::v1::NAMESPACE_MOUNT},
          {"uts", mycel::v1::NAMESPACE_UTS},
          {"ipc", mycel::v1::NAMESPACE_IPC},
          {"net", mycel::v1::NAMESPACE_NET},
          {"user", mycel::v1::NAMESPACE_USER},
          {"cgroup", mycel::v1::NAMESPACE_CGROUP}};
      bool found = false;
      for (const auto& [name, value] : kNames) {
        if (ns == name || (ns == "all" && value != mycel::v1::NAMESPACE_USER)) {
          found = true;
          // "--isolate all,pid" or "--isolate pid --isolate pid": the
          // daemon refuses a namespace listed twice, so list each once.
          bool listed = false;
          for (int listed_ns : spec->isolate()) listed |= listed_ns == value;
          if (!listed) spec->add_isolate(value);
        }
      }
      if (!found) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--isolate: unknown namespace \"", ns,
            "\" (want pid, mount, uts, ipc, net, user, cgroup or all)"));
      }
    }
  }
  spec->set_seccomp(a.get("--seccomp"));
  for (absl::string_view s :
       absl::StrSplit(a.get("--seccomp-deny"), ',', absl::SkipEmpty())) {
    spec->add_seccomp_deny(std::string(s));
  }
  for (absl::string_view s :
       absl::StrSplit(a.get("--cap"), ',', absl::SkipEmpty())) {
    spec->add_capabilities(std::string(s));
  }
  spec->set_rootfs(a.get("--rootfs"));
  spec->set_readonly_rootfs(a.has("--readonly-rootfs"));
  spec->set_writable_system_paths(a.has("--writable-system-paths"));
  spec->set_uid_map(a.get("--uid-map"));
  spec->set_gid_map(a.get("--gid-map"));
  return absl::OkStatus();
}

}  // namespace mycel::cli
