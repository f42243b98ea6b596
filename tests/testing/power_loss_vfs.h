// A SQLite VFS for tests that simulates a power loss. "powerloss" runs over
// the default VFS and keeps, beside each file it opens, a copy of the file
// as it was at its last sync (`<file>.synced`; a file that existed when it
// was opened counts as synced then). SimulatePowerLoss then puts a
// database back as a machine that lost power at that moment could leave
// it in the worst case: every file as of its last sync, and files never
// synced gone. Nothing written after a sync survives, which a real disk
// may or may not honour: the worst case is the one to test against.
//
//   RegisterPowerLossVfs();
//   store::Store::Open(path, {.vfs = kPowerLossVfs});
//   ... writes; then drop the store as a crash would ...
//   SimulatePowerLoss(path);
//   store::Store::Open(path, ...);  // what a restart after the loss sees
#ifndef MYCEL_TESTS_TESTING_POWER_LOSS_VFS_H_
#define MYCEL_TESTS_TESTING_POWER_LOSS_VFS_H_

#include <string>

#include "absl/status/status.h"

namespace mycel::testing {

inline constexpr char kPowerLossVfs[] = "powerloss";

// Registers the VFS (not as the default); more calls do nothing.
void RegisterPowerLossVfs();

// While set, every sync through the VFS fails (SQLITE_IOERR_FSYNC) and
// keeps nothing, as an fsync that hits a disk error.
void SetPowerLossSyncFailure(bool fail);

// Replaces the database at `db` and its -wal and -journal with their last
// synced copies, removes those never synced, and removes -shm (memory, not
// disk). No connection may have the database open.
absl::Status SimulatePowerLoss(const std::string& db);

}  // namespace mycel::testing

#endif  // MYCEL_TESTS_TESTING_POWER_LOSS_VFS_H_
