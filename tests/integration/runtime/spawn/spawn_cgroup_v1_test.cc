// Spawn into a cgroup v1 hierarchy: the child joins through the
// cgroup.procs fds it is given. Needs root and the pids hierarchy at
// /sys/fs/cgroup/pids (a v1 or hybrid host); skipped elsewhere.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <sched.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "runtime/spawn/spawn.h"
#include "runtime/unique_fd.h"
#include "tests/testing/requires.h"
#include "tests/testing/spawn_test_util.h"

namespace mycel {
namespace {

using spawn_test::ShellRequest;
using spawn_test::SpawnAndWait;
using spawn_test::TestCgroup;

MYCEL_TEST_REQUIRES(testing::Root("creates cgroups"));
MYCEL_TEST_REQUIRES([] {
  struct statfs fs;
  return statfs("/sys/fs/cgroup/pids", &fs) == 0 &&
                 fs.f_type == CGROUP_SUPER_MAGIC
             ? ""
             : "no cgroup v1 pids hierarchy at /sys/fs/cgroup/pids";
}());

TEST_CASE("cgroup v1: the child joins through cgroup.procs fds") {
  const std::string name = absl::StrCat("mycel-spawn-test-", getpid());
  TestCgroup cgroup(absl::StrCat("/sys/fs/cgroup/pids/", name));
  REQUIRE(cgroup.ok());
  UniqueFd procs(
      open((cgroup.path() + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC));
  REQUIRE(procs.valid());

  SpawnRequest request = ShellRequest("grep ':pids:' /proc/self/cgroup");
  request.cgroup_procs_fds = {procs.get()};
  auto joined = SpawnAndWait(request);
  REQUIRE(joined.ok());
  CHECK(absl::EndsWith(joined->out, absl::StrCat(":pids:/", name, "\n")));

  // A cgroup namespace is unshared after the join: rooted at the cell.
  request.new_namespaces = CLONE_NEWCGROUP;
  auto rooted = SpawnAndWait(request);
  REQUIRE(rooted.ok());
  CHECK(absl::EndsWith(rooted->out, ":pids:/\n"));

  // A procs fd that cannot take the write.
  UniqueFd readonly(
      open((cgroup.path() + "/cgroup.procs").c_str(), O_RDONLY | O_CLOEXEC));
  request.cgroup_procs_fds = {readonly.get()};
  auto bad = Spawn(request);
  REQUIRE_FALSE(bad.ok());
  CHECK(absl::StartsWith(bad.status().message(), "write cgroup.procs: "));
}

}  // namespace
}  // namespace mycel
