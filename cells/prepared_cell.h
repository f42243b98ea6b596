// PreparedCell: a cell spec checked and turned into what the kernel takes
// (namespace flags, cgroup limits, a compiled seccomp program, capability
// sets), and the conversions between the API's messages and the cell
// layer's types.
#ifndef MYCEL_CELLS_PREPARED_CELL_H_
#define MYCEL_CELLS_PREPARED_CELL_H_

#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "mycel/v1/cells.pb.h"
#include "runtime/cgroup/cgroup_driver.h"
#include "runtime/seccomp/capabilities.h"
#include "runtime/seccomp/seccomp_profile.h"

namespace mycel::cells {

// The id map a user namespace gets when the spec gives none.
inline constexpr char kDefaultIdMap[] = "0 100000 65536";

struct PreparedCell {
  mycel::v1::CellSpec spec;
  int ns_flags = 0;  // CLONE_NEW* of spec.isolate
  CgroupLimits limits;
  SeccompProgram seccomp;
  PreparedCapabilities caps;
};

// What checking a spec needs to know of the host.
struct HostShape {
  int num_cpus = 1;
  int num_memory_nodes = 0;
  // Processes that a cell without a pid namespace may not touch
  // (SeccompOptions::protected_pids).
  std::vector<pid_t> protected_pids;
};

// Validates `spec` (INVALID_ARGUMENT naming the field) and prepares it.
absl::StatusOr<PreparedCell> PrepareCell(const mycel::v1::CellSpec& spec,
                                         const HostShape& host);

// CLONE_NEW* flags of spec.isolate; INVALID_ARGUMENT for an unknown one.
absl::StatusOr<int> NamespaceFlags(const mycel::v1::CellSpec& spec);
CgroupLimits ToCgroupLimits(const mycel::v1::Limits& limits);

// In a user namespace, setresuid/setresgid take only ids its maps cover:
// INVALID_ARGUMENT naming the field, before spawning, rather than the
// kernel's EINVAL after.
absl::Status CheckIdsMapped(const PreparedCell& cell,
                            const mycel::v1::ExecutableSpec& spec);

// The name an executable gets when its spec has none: the program's base
// name, made a valid name, and unique among those `taken` says exist.
std::string DefaultExecutableName(
    const std::string& command,
    const std::function<bool(const std::string&)>& taken);

// A cell's status as the API shows it.
struct CellCounts {
  pid_t init_pid = 0;
  int running = 0;
  int total = 0;
};
mycel::v1::Cell CellToProto(const mycel::v1::CellSpec& spec, int64_t created_us,
                            const CellCounts& counts,
                            absl::string_view cgroup_driver);
mycel::v1::CellStats StatsToProto(const std::string& name,
                                  const CgroupStats& stats);

}  // namespace mycel::cells

#endif  // MYCEL_CELLS_PREPARED_CELL_H_
