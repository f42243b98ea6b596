// Error helpers shared by every layer. All fallible calls return
// absl::Status or absl::StatusOr<T>; errno becomes a Status in exactly one
// place, PosixError(), which always names what failed.
#ifndef MYCEL_RUNTIME_STATUS_H_
#define MYCEL_RUNTIME_STATUS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mycel {

// Converts an errno value into a Status whose message is
// "<what>: <strerror> (<ERRNO-NAME>)". The code follows the errno:
//   ENOENT, ESRCH                              → NOT_FOUND
//   EACCES, EPERM, EROFS                       → PERMISSION_DENIED
//   EEXIST                                     → ALREADY_EXISTS
//   EINVAL, ENAMETOOLONG, ENOTDIR, EISDIR, E2BIG → INVALID_ARGUMENT
//   ENOSPC, EMFILE, ENFILE, ENOMEM, EDQUOT     → RESOURCE_EXHAUSTED
//   EBUSY, EAGAIN, ECONNREFUSED                → UNAVAILABLE
//   ETIMEDOUT                                  → DEADLINE_EXCEEDED
//   ENOSYS, EOPNOTSUPP                         → UNIMPLEMENTED
//   anything else                              → INTERNAL
absl::Status PosixError(absl::string_view what, int errnum);

// The symbolic name of an errno value ("ENOENT"), or "E<number>".
absl::string_view ErrnoName(int errnum);

// Returns `status` with "<context>: " prepended to its message, keeping the
// code and any payloads. OK stays OK.
absl::Status Annotate(const absl::Status& status, absl::string_view context);

}  // namespace mycel

#define MYCEL_STATUS_CONCAT_INNER_(a, b) a##b
#define MYCEL_STATUS_CONCAT_(a, b) MYCEL_STATUS_CONCAT_INNER_(a, b)

// Returns from the enclosing function when `expr` is not OK.
#define RETURN_IF_ERROR(expr)                      \
  do {                                             \
    ::absl::Status _mycel_status = (expr);         \
    if (!_mycel_status.ok()) return _mycel_status; \
  } while (0)

// ASSIGN_OR_RETURN(lhs, expr): evaluates the StatusOr `expr`; on error
// returns its status, else moves the value into `lhs` (which may be a
// declaration such as `auto x`).
#define ASSIGN_OR_RETURN(lhs, expr)                                            \
  ASSIGN_OR_RETURN_IMPL_(MYCEL_STATUS_CONCAT_(_mycel_statusor, __LINE__), lhs, \
                         expr)
#define ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                           \
  if (!statusor.ok()) return statusor.status();     \
  lhs = std::move(statusor).value()

#endif  // MYCEL_RUNTIME_STATUS_H_
