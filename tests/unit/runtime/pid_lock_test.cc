#include "runtime/pid_lock.h"

#include <doctest/doctest.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "runtime/fs.h"
#include "tests/testing/process.h"

namespace mycel {
namespace {

TEST_CASE("a held lock refuses a second holder and names the pid") {
  testing::TempDir dir;
  std::string path = dir.Sub("x.lock");
  auto first = PidLock::Acquire(path);
  REQUIRE(first.ok());
  CHECK(*ReadFile(path) == absl::StrCat(getpid(), "\n"));
  auto second = PidLock::Acquire(path);  // another open file description
  REQUIRE_FALSE(second.ok());
  CHECK(second.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(second.status().message() ==
        absl::StrCat("another myceld is running: pid ", getpid(), " (lock ",
                     path, ")"));
}

TEST_CASE("a lock is free again once its holder is gone") {
  testing::TempDir dir;
  std::string path = dir.Sub("x.lock");
  {
    auto first = PidLock::Acquire(path);
    REQUIRE(first.ok());
  }
  CHECK(PidLock::Acquire(path).ok());
}

TEST_CASE("a lock in a missing directory is an error naming the path") {
  auto lock = PidLock::Acquire("/nonexistent-dir-xyz/x.lock");
  REQUIRE_FALSE(lock.ok());
  CHECK(lock.status().code() == absl::StatusCode::kNotFound);
  CHECK(lock.status().message().find("/nonexistent-dir-xyz/x.lock") !=
        absl::string_view::npos);
}

}  // namespace
}  // namespace mycel
