// What a cell's mount namespace hides and makes read-only, so that no
// combination of cell settings lets a workload write the host's kernel
// knobs or reach the daemon, unless the cell asks for writable system
// paths by name (CellSpec.writable_system_paths).
//
// It is applied in the cell's own mount namespace when it has one, and
// otherwise in the node's "host view": one mount namespace, made when the
// daemon starts, that is a slave of the host's (the host's later mounts
// appear in it) with the same paths confined, which the executables of
// every cell without a mount namespace of its own join. A cell whose user
// namespace keeps it an unprivileged host user needs neither: the kernel
// refuses it those files already.
#ifndef MYCEL_CELLS_CONFINEMENT_H_
#define MYCEL_CELLS_CONFINEMENT_H_

#include <string>
#include <vector>

#include "mycel/v1/cells.pb.h"

namespace mycel::cells {

struct Confinement {
  std::vector<std::string> readonly_paths;
  std::vector<std::string> masked_paths;
};

// As runc and Docker do by default: /sys and /proc/sys (with
// sysrq-trigger, irq, bus, fs) read-only, the kernel's memory, keys and
// timers in /proc masked, and the daemon's own paths (`hidden`) masked.
// With writable_system_paths, only `hidden` is masked.
Confinement CellConfinement(const mycel::v1::CellSpec& spec,
                            const std::vector<std::string>& hidden);

// The daemon's paths a cell must not see: its state directory (database,
// keys, every workload's log), and its admin socket's directory, or the
// socket itself where that directory is a shared one such as /run or
// /tmp. (The socket's peer check refuses cells anyway; hiding it is the
// first line.)
std::vector<std::string> DaemonPathsToHide(const std::string& state_dir,
                                           const std::string& socket);

}  // namespace mycel::cells

#endif  // MYCEL_CELLS_CONFINEMENT_H_
