// The store on a filesystem that needs root to make: a read-only mount.
// The rest of the store's tests are unit tests
// (tests/unit/daemon/store_test.cc).
#include "daemon/store/store.h"

#include <doctest/doctest.h>
#include <sys/mount.h>

#include "runtime/fs.h"
#include "tests/testing/process.h"
#include "tests/testing/requires.h"

namespace mycel::store {
namespace {

MYCEL_TEST_REQUIRES(testing::Root("mounts a read-only tmpfs"));

TEST_CASE("a read-only state directory gives a clear error") {
  testing::TempDir dir;
  std::string ro = dir.Sub("ro");
  REQUIRE(MakeDirs(ro, 0755).ok());
  REQUIRE(mount("tmpfs", ro.c_str(), "tmpfs", MS_RDONLY, nullptr) == 0);
  auto s = Store::Open(ro + "/mycel.db");
  umount(ro.c_str());
  REQUIRE_FALSE(s.ok());
  CHECK(s.status().code() == absl::StatusCode::kPermissionDenied);
  CHECK(s.status().message().find(ro + "/mycel.db") != absl::string_view::npos);
}

}  // namespace
}  // namespace mycel::store
