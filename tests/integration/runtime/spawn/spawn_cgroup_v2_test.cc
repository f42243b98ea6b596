// Spawn into a cgroup2 hierarchy: the child is born in its cgroup
// (CLONE_INTO_CGROUP), or joins it by cgroup.procs where clone3 is hidden.
// Needs root and a cgroup2 mount (/sys/fs/cgroup, or /sys/fs/cgroup/unified
// on a hybrid host); skipped elsewhere.
#include <doctest/doctest.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/magic.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstddef>
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

// Where cgroup2 is mounted, or "" when it is not.
std::string Cgroup2Root() {
  for (const char* candidate : {"/sys/fs/cgroup/unified", "/sys/fs/cgroup"}) {
    struct statfs fs;
    if (statfs(candidate, &fs) == 0 && fs.f_type == CGROUP2_SUPER_MAGIC) {
      return candidate;
    }
  }
  return "";
}

MYCEL_TEST_REQUIRES(testing::Root("creates cgroups"));
MYCEL_TEST_REQUIRES(Cgroup2Root().empty() ? "no cgroup2 hierarchy is mounted"
                                          : "");

TEST_CASE("cgroup v2: the child is born in the cgroup (CLONE_INTO_CGROUP)") {
  const std::string base = Cgroup2Root();
  const std::string name = absl::StrCat("mycel-spawn-test-", getpid());
  TestCgroup cgroup(absl::StrCat(base, "/", name));
  REQUIRE(cgroup.ok());
  UniqueFd dir(open(cgroup.path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  REQUIRE(dir.valid());
  SpawnRequest request = ShellRequest("grep '^0::' /proc/self/cgroup");
  request.cgroup_dir_fd = dir.get();
  auto born = SpawnAndWait(request);
  REQUIRE(born.ok());
  // The pid is the cgroup's own, so it is in no ancestor's relative path.
  CHECK(absl::EndsWith(born->out, absl::StrCat("/", name, "\n")));

  // Where clone3 is hidden (Docker's default seccomp profile answers
  // ENOSYS), Spawn falls back to clone(2) and the child joins the cgroup
  // by writing its cgroup.procs: it ends up there all the same, and a
  // cgroup fd that is not one fails at that open instead of in clone3.
  // In a child process, so that the filter stays there.
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    struct sock_filter hide_clone3[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_clone3, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {4, hide_clone3};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
        prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) {
      _exit(10);
    }
    if (syscall(__NR_clone3, nullptr, 0) != -1 || errno != ENOSYS) _exit(11);
    auto joined = SpawnAndWait(request);
    if (!joined.ok()) _exit(12);
    if (!absl::EndsWith(joined->out, absl::StrCat("/", name, "\n"))) {
      _exit(13);
    }
    UniqueFd not_a_cgroup(open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    request.cgroup_dir_fd = not_a_cgroup.get();
    auto bad = Spawn(request);
    if (bad.ok() || !absl::StartsWith(bad.status().message(),
                                      absl::StrCat("open cgroup.procs of "
                                                   "cgroup fd ",
                                                   not_a_cgroup.get(), ": "))) {
      _exit(14);
    }
    _exit(0);
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

}  // namespace
}  // namespace mycel
