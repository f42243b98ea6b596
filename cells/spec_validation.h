// Checks of user-supplied cell and executable specs that need nothing from
// the host. Every error is INVALID_ARGUMENT and starts with the field at
// fault ("uid: ...", "command[2]: ...", "uid_map: line 1: ..."), so that a
// client can tell what to fix. What needs the host (does the rootfs exist,
// how many CPUs are there) is checked where the host is known.
#ifndef MYCEL_CELLS_SPEC_VALIDATION_H_
#define MYCEL_CELLS_SPEC_VALIDATION_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/duration.pb.h"
#include "google/protobuf/repeated_field.h"
#include "mycel/v1/cells.pb.h"

namespace mycel::cells {

// The id the kernel reads as "leave unchanged" in setresuid(2),
// setresgid(2) and chown(2), and refuses in user namespace maps. A process
// asked to take it would keep the daemon's ids instead.
inline constexpr uint32_t kUnchangedId = 0xFFFFFFFFu;

// The kernel accepts at most this many lines in a uid_map or gid_map.
inline constexpr size_t kMaxIdMapLines = 340;

// One line of a user namespace map: `count` ids from `inside` (in the
// namespace) map to `outside` (on the host).
struct IdMapRange {
  uint32_t inside = 0;
  uint32_t outside = 0;
  uint32_t count = 0;
};

// Parses a uid_map or gid_map as the kernel takes it ("INSIDE OUTSIDE
// COUNT" per line), with the kernel's rules checked here so that the error
// names `field` and the line: numbers only, count > 0, no range that
// reaches kUnchangedId or wraps, no two ranges that overlap inside or
// outside, at most kMaxIdMapLines lines.
absl::StatusOr<std::vector<IdMapRange>> ParseIdMap(absl::string_view field,
                                                   absl::string_view text);

// Whether `id` (inside the namespace) is mapped by `map`.
bool IdMapped(const std::vector<IdMapRange>& map, uint32_t id);

// A uid or gid that a process can take: not kUnchangedId.
absl::Status ValidateId(absl::string_view field, uint32_t id);

// A google.protobuf.Duration as its definition requires (seconds and nanos
// of the same sign, |nanos| < 1e9, within ±10000 years), and not negative.
absl::Status ValidateDuration(absl::string_view field,
                              const google::protobuf::Duration& d);

// Strings that become argv, environment or paths for the kernel, which
// ends them at the first NUL: one would silently cut the value short.
absl::Status ValidateNoNul(absl::string_view field, absl::string_view value);
absl::Status ValidateNoNul(
    absl::string_view field,
    const google::protobuf::RepeatedPtrField<std::string>& values);

// The host-independent checks of a cell spec: its name, each isolate entry
// known and listed once, id maps only with a user namespace and well
// formed, paths and names without NUL.
absl::Status ValidateCellSpec(const mycel::v1::CellSpec& spec);

// The host-independent checks of an executable spec: command not empty,
// no NUL in command, env or cwd, env entries KEY=VALUE, cwd absolute, ids
// not kUnchangedId, durations valid and not negative.
absl::Status ValidateExecutableSpec(const mycel::v1::ExecutableSpec& spec);

}  // namespace mycel::cells

#endif  // MYCEL_CELLS_SPEC_VALIDATION_H_
