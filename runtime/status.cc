#include "runtime/status.h"

#include <errno.h>
#include <string.h>

#include <string>

#include "absl/strings/str_cat.h"

namespace mycel {
namespace {

absl::StatusCode CodeForErrno(int errnum) {
  switch (errnum) {
    case ENOENT:
    case ESRCH:
      return absl::StatusCode::kNotFound;
    case EACCES:
    case EPERM:
    case EROFS:
      return absl::StatusCode::kPermissionDenied;
    case EEXIST:
      return absl::StatusCode::kAlreadyExists;
    case EINVAL:
    case ENAMETOOLONG:
    case ENOTDIR:
    case EISDIR:
    case E2BIG:
      return absl::StatusCode::kInvalidArgument;
    case ENOSPC:
    case EMFILE:
    case ENFILE:
    case ENOMEM:
    case EDQUOT:
      return absl::StatusCode::kResourceExhausted;
    case EBUSY:
    case EAGAIN:
    case ECONNREFUSED:
      return absl::StatusCode::kUnavailable;
    case ETIMEDOUT:
      return absl::StatusCode::kDeadlineExceeded;
    case ENOSYS:
    case EOPNOTSUPP:
      return absl::StatusCode::kUnimplemented;
    default:
      return absl::StatusCode::kInternal;
  }
}

}  // namespace

absl::string_view ErrnoName(int errnum) {
  // strerrorname_np is glibc >= 2.32; Debian 12 ships 2.36.
  const char* name = strerrorname_np(errnum);
  if (name != nullptr) return name;
  thread_local std::string fallback;
  fallback = absl::StrCat("E", errnum);
  return fallback;
}

absl::Status PosixError(absl::string_view what, int errnum) {
  return absl::Status(CodeForErrno(errnum),
                      absl::StrCat(what, ": ", strerrordesc_np(errnum), " (",
                                   ErrnoName(errnum), ")"));
}

absl::Status Annotate(const absl::Status& status, absl::string_view context) {
  if (status.ok()) return status;
  absl::Status annotated(status.code(),
                         absl::StrCat(context, ": ", status.message()));
  status.ForEachPayload(
      [&annotated](absl::string_view type_url, const absl::Cord& payload) {
        annotated.SetPayload(type_url, payload);
      });
  return annotated;
}

}  // namespace mycel
