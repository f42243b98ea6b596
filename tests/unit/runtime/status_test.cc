#include "runtime/status.h"

#include <doctest/doctest.h>
#include <errno.h>

#include <string>

namespace mycel {
namespace {

absl::StatusOr<int> Half(int x) {
  if (x % 2 != 0) return absl::InvalidArgumentError("x: odd");
  return x / 2;
}

absl::Status Quarter(int x, int* out) {
  ASSIGN_OR_RETURN(int half, Half(x));
  ASSIGN_OR_RETURN(*out, Half(half));
  return absl::OkStatus();
}

absl::Status FailIfNegative(int x) {
  RETURN_IF_ERROR(x < 0 ? absl::OutOfRangeError("negative") : absl::OkStatus());
  return absl::OkStatus();
}

TEST_CASE("PosixError names what failed, the reason and the errno") {
  absl::Status s =
      PosixError("write /sys/fs/cgroup/mycel/web/memory.max", ENOSPC);
  CHECK(s.code() == absl::StatusCode::kResourceExhausted);
  CHECK(s.message() ==
        "write /sys/fs/cgroup/mycel/web/memory.max: No space left on device "
        "(ENOSPC)");
}

TEST_CASE("PosixError maps errno to the code a client can act on") {
  CHECK(PosixError("x", ENOENT).code() == absl::StatusCode::kNotFound);
  CHECK(PosixError("x", EPERM).code() == absl::StatusCode::kPermissionDenied);
  CHECK(PosixError("x", EACCES).code() == absl::StatusCode::kPermissionDenied);
  CHECK(PosixError("x", EEXIST).code() == absl::StatusCode::kAlreadyExists);
  CHECK(PosixError("x", EINVAL).code() == absl::StatusCode::kInvalidArgument);
  CHECK(PosixError("x", EAGAIN).code() == absl::StatusCode::kUnavailable);
  CHECK(PosixError("x", ENOSYS).code() == absl::StatusCode::kUnimplemented);
  CHECK(PosixError("x", EIO).code() == absl::StatusCode::kInternal);
}

TEST_CASE("ErrnoName is symbolic, with a numeric fallback") {
  CHECK(ErrnoName(EPERM) == "EPERM");
  CHECK(ErrnoName(100000) == "E100000");
}

TEST_CASE("Annotate prepends context and keeps the code; OK stays OK") {
  absl::Status s = Annotate(PosixError("open f", ENOENT), "load config");
  CHECK(s.code() == absl::StatusCode::kNotFound);
  CHECK(s.message() ==
        "load config: open f: No such file or directory (ENOENT)");
  CHECK(Annotate(absl::OkStatus(), "ctx").ok());
}

TEST_CASE("Annotate keeps the payloads a caller acts on") {
  absl::Status s = absl::UnavailableError("no certificate of origin a");
  s.SetPayload("type.example/origin", absl::Cord("a"));
  absl::Status annotated = Annotate(Annotate(s, "change a:3"), "sent by b");
  CHECK(annotated.message() ==
        "sent by b: change a:3: no certificate of origin a");
  auto payload = annotated.GetPayload("type.example/origin");
  REQUIRE(payload.has_value());
  CHECK(std::string(*payload) == "a");
}

TEST_CASE("ASSIGN_OR_RETURN and RETURN_IF_ERROR propagate the first error") {
  int out = 0;
  CHECK(Quarter(8, &out).ok());
  CHECK(out == 2);
  absl::Status s = Quarter(6, &out);  // 6/2 = 3 is odd
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK(s.message() == "x: odd");
  CHECK(FailIfNegative(1).ok());
  CHECK(FailIfNegative(-1).code() == absl::StatusCode::kOutOfRange);
}

}  // namespace
}  // namespace mycel
