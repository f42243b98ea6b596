// What a cell shares with the host, as a user should read it: the basis of
// CellStatus.security_boundary and CellStatus.exposures, and of the table
// in docs/security.md.
#ifndef MYCEL_CELLS_EXPOSURES_H_
#define MYCEL_CELLS_EXPOSURES_H_

#include <string>
#include <vector>

#include "mycel/v1/cells.pb.h"

namespace mycel::cells {

// Each item names the resource shared and what a workload can do with it
// ("processes: shares the host's pids; ..."). Empty for a cell that is a
// security boundary: its own rootfs and pid, mount, net and ipc
// namespaces, no capability that reaches outside them, a seccomp profile,
// and read-only system paths. `spec` must be valid (see Prepare).
std::vector<std::string> Exposures(const mycel::v1::CellSpec& spec);

// Whether a user namespace keeps the cell's root an unprivileged host
// user: the spec has one, and neither map gives it the host's uid or gid
// 0. Such a cell cannot write the host's root-owned files, /sys and
// /proc/sys included, whatever its mounts.
bool UnprivilegedOnHost(const mycel::v1::CellSpec& spec);

}  // namespace mycel::cells

#endif  // MYCEL_CELLS_EXPOSURES_H_
