#include "cells/prepared_cell.h"

#include <sched.h>

#include <cctype>

#include "absl/strings/str_cat.h"
#include "cells/exposures.h"
#include "cells/names.h"
#include "cells/spec_validation.h"
#include "proto/proto_time.h"
#include "runtime/fs.h"
#include "runtime/status.h"

namespace mycel::cells {
namespace {

// A rootfs must be a directory of the cell's own: pivot_root cannot make
// the root its own new root, and a cell that "pivots" into the host's root
// would only pretend to be confined.
absl::Status CheckRootfs(const std::string& rootfs) {
  absl::StatusOr<FileInfo> dir =
      rootfs[0] == '/' ? Stat(rootfs) : absl::NotFoundError("relative");
  if (!dir.ok() || !dir->is_directory()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rootfs: \"", rootfs, "\" is not an absolute path to a directory"));
  }
  absl::StatusOr<FileInfo> host_root = Stat("/");
  if (host_root.ok() && dir->SameFile(*host_root)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rootfs: \"", rootfs,
        "\" is the host's root directory; give the cell a directory of its "
        "own"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<int> NamespaceFlags(const mycel::v1::CellSpec& spec) {
  int flags = 0;
  for (int i = 0; i < spec.isolate_size(); ++i) {
    switch (spec.isolate(i)) {
      case mycel::v1::NAMESPACE_PID:
        flags |= CLONE_NEWPID;
        break;
      case mycel::v1::NAMESPACE_MOUNT:
        flags |= CLONE_NEWNS;
        break;
      case mycel::v1::NAMESPACE_UTS:
        flags |= CLONE_NEWUTS;
        break;
      case mycel::v1::NAMESPACE_IPC:
        flags |= CLONE_NEWIPC;
        break;
      case mycel::v1::NAMESPACE_NET:
        flags |= CLONE_NEWNET;
        break;
      case mycel::v1::NAMESPACE_USER:
        flags |= CLONE_NEWUSER;
        break;
      case mycel::v1::NAMESPACE_CGROUP:
        flags |= CLONE_NEWCGROUP;
        break;
      default:
        return absl::InvalidArgumentError(absl::StrCat(
            "isolate[", i, "]: unknown namespace ", spec.isolate(i)));
    }
  }
  return flags;
}

CgroupLimits ToCgroupLimits(const mycel::v1::Limits& l) {
  CgroupLimits c;
  if (l.has_cpu_max()) c.cpu_max = l.cpu_max();
  if (l.has_cpu_weight()) c.cpu_weight = l.cpu_weight();
  if (l.has_memory_max()) c.memory_max = l.memory_max();
  if (l.has_memory_high()) c.memory_high = l.memory_high();
  if (l.has_memory_swap_max()) c.memory_swap_max = l.memory_swap_max();
  if (l.has_pids_max()) c.pids_max = l.pids_max();
  c.cpuset_cpus = l.cpuset_cpus();
  c.cpuset_mems = l.cpuset_mems();
  return c;
}

absl::StatusOr<PreparedCell> PrepareCell(const mycel::v1::CellSpec& spec,
                                         const HostShape& host) {
  PreparedCell cell;
  cell.spec = spec;
  RETURN_IF_ERROR(ValidateCellSpec(spec));
  ASSIGN_OR_RETURN(cell.ns_flags, NamespaceFlags(spec));
  cell.limits = ToCgroupLimits(spec.limits());
  RETURN_IF_ERROR(Annotate(
      ValidateCgroupLimits(cell.limits, host.num_cpus, host.num_memory_nodes),
      "limits"));
  if (!spec.rootfs().empty()) {
    if ((cell.ns_flags & CLONE_NEWNS) == 0) {
      return absl::InvalidArgumentError(
          "rootfs: needs its own mount namespace (isolate mount)");
    }
    RETURN_IF_ERROR(CheckRootfs(spec.rootfs()));
  } else if (spec.readonly_rootfs()) {
    return absl::InvalidArgumentError("readonly_rootfs: needs rootfs");
  }
  ASSIGN_OR_RETURN(
      SeccompProfileKind kind,
      ParseSeccompProfile(spec.seccomp().empty() ? "default" : spec.seccomp()));
  SeccompOptions so;
  so.profile = kind;
  so.extra_deny.assign(spec.seccomp_deny().begin(), spec.seccomp_deny().end());
  if ((cell.ns_flags & CLONE_NEWPID) == 0) {
    // The cell sees the host's pids: keep it off PID 1 and the daemon
    // (runtime/seccomp/README.md, "Cells without a pid namespace").
    so.protected_pids = host.protected_pids;
    so.deny_broadcast_signals = true;
  }
  ASSIGN_OR_RETURN(cell.seccomp, CompileSeccomp(so));
  CapabilitySet caps = DefaultCapabilities();
  if (spec.capabilities_size() > 0) {
    ASSIGN_OR_RETURN(
        caps, ParseCapabilities(std::vector<std::string>(
                  spec.capabilities().begin(), spec.capabilities().end())));
  }
  ASSIGN_OR_RETURN(cell.caps, PrepareCapabilities(caps));
  return cell;
}

absl::Status CheckIdsMapped(const PreparedCell& cell,
                            const mycel::v1::ExecutableSpec& spec) {
  if ((cell.ns_flags & CLONE_NEWUSER) == 0) return absl::OkStatus();
  struct Id {
    const char* field;
    bool set;
    uint32_t id;
    const std::string& map;
    const char* map_field;
  };
  for (const Id& id :
       {Id{"uid", spec.has_uid(), spec.uid(), cell.spec.uid_map(), "uid_map"},
        Id{"gid", spec.has_gid(), spec.gid(), cell.spec.gid_map(),
           "gid_map"}}) {
    if (!id.set) continue;
    const std::string& map = id.map.empty() ? kDefaultIdMap : id.map;
    ASSIGN_OR_RETURN(std::vector<IdMapRange> ranges,
                     ParseIdMap(id.map_field, map));
    if (!IdMapped(ranges, id.id)) {
      return absl::InvalidArgumentError(
          absl::StrCat(id.field, ": ", id.id, " is not mapped by the cell's ",
                       id.map_field, " (\"", map, "\")"));
    }
  }
  return absl::OkStatus();
}

std::string DefaultExecutableName(
    const std::string& command,
    const std::function<bool(const std::string&)>& taken) {
  std::string base = command.substr(command.rfind('/') + 1);
  std::string name;
  for (char c : base) {
    char l = static_cast<char>(tolower(static_cast<unsigned char>(c)));
    name.push_back(
        isalnum(static_cast<unsigned char>(l)) || l == '-' || l == '_' ? l
                                                                       : '-');
  }
  if (name.empty() || !isalnum(static_cast<unsigned char>(name[0]))) {
    name = "exe" + name;
  }
  name = name.substr(0, 48);
  std::string candidate = name;
  for (int i = 2; taken(candidate); ++i) {
    candidate = absl::StrCat(name, "-", i);
  }
  return candidate;
}

mycel::v1::Cell CellToProto(const mycel::v1::CellSpec& spec, int64_t created_us,
                            const CellCounts& counts,
                            absl::string_view cgroup_driver) {
  mycel::v1::Cell out;
  *out.mutable_spec() = spec;
  auto* st = out.mutable_status();
  st->set_state(mycel::v1::CELL_STATE_READY);
  mycel::ToProto(absl::FromUnixMicros(created_us), st->mutable_created_at());
  st->set_init_pid(counts.init_pid);
  st->set_executables_running(counts.running);
  st->set_executables_total(counts.total);
  st->set_cgroup_driver(std::string(cgroup_driver));
  std::vector<std::string> exposures = Exposures(spec);
  st->set_security_boundary(exposures.empty());
  for (std::string& e : exposures) st->add_exposures(std::move(e));
  return out;
}

mycel::v1::CellStats StatsToProto(const std::string& name,
                                  const CgroupStats& s) {
  mycel::v1::CellStats out;
  out.set_name(name);
  out.set_cpu_usage_usec(s.cpu_usage_usec);
  out.set_memory_current(s.memory_current);
  out.set_memory_peak(s.memory_peak);
  out.set_pids_current(s.pids_current);
  out.set_oom_kills(s.oom_kills);
  return out;
}

}  // namespace mycel::cells
