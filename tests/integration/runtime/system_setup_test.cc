// The kernel calls PID 1's system set-up is built from, which need root:
// mounts under a root in a private mount namespace (runtime/mount.h) and
// interface configuration in a private network namespace
// (runtime/net_config.h).
#include <doctest/doctest.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runtime/fs.h"
#include "runtime/mount.h"
#include "runtime/net_config.h"
#include "tests/testing/process.h"
#include "tests/testing/requires.h"

namespace mycel {
namespace {

MYCEL_TEST_REQUIRES(testing::Root("mount and network namespaces"));

// Runs `fn` in a forked child after unshare(flags); returns the child's exit
// code (fn's return value), or -1.
template <typename Fn>
int InChild(int flags, Fn fn) {
  pid_t pid = fork();
  if (pid == 0) {
    if (unshare(flags) != 0) _exit(100);
    _exit(fn());
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// InChild in a new mount namespace whose mounts do not propagate back to
// the host's (exit code 10 if / cannot be made private).
template <typename Fn>
int InPrivateMountNamespace(Fn fn) {
  return InChild(CLONE_NEWNS, [&] {
    if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
      return 10;
    }
    return fn();
  });
}

TEST_CASE("system mounts go up under a root, skipping ones already there") {
  testing::TempDir dir;
  std::string root = dir.path();
  int rc = InPrivateMountNamespace([&] {
    std::vector<MountSpec> specs = {
        {"tmpfs", "/run", "tmpfs", MS_NOSUID, "mode=0755", true},
        {"proc", "/proc", "proc", MS_NOSUID, "", true},
        {"nosuchfs", "/weird", "nosuchfs", 0, "", false},
    };
    std::vector<std::string> warnings;
    if (!MountAll(root, specs, &warnings).ok()) return 11;
    if (warnings.size() != 1 ||
        warnings[0].find("nosuchfs") == std::string::npos) {
      return 12;
    }
    // Second pass: everything required is already mounted, so no change.
    size_t before = ParseMountInfo(*ReadFile("/proc/self/mountinfo")).size();
    warnings.clear();
    if (!MountAll(root, specs, &warnings).ok()) return 13;
    size_t after = ParseMountInfo(*ReadFile("/proc/self/mountinfo")).size();
    if (before != after) return 14;
    if (access((root + "/proc/self/stat").c_str(), R_OK) != 0) return 15;
    std::vector<std::string> uw;
    if (UnmountAllBelow(root, &uw) != 2) return 16;
    return 0;
  });
  CHECK(rc == 0);
}

TEST_CASE("options the kernel refuses fall back to fallback_data") {
  testing::TempDir dir;
  std::string root = dir.path();
  int rc = InPrivateMountNamespace([&] {
    MountSpec fallback = {
        "tmpfs", "/fb", "tmpfs", 0, "mode=0711,nosuchopt", true, "mode=0701"};
    MountSpec plain = {"tmpfs", "/nofb", "tmpfs", 0, "nosuchopt", false};
    std::vector<std::string> warnings;
    if (!MountAll(root, {fallback, plain}, &warnings).ok()) return 11;
    struct stat st;
    if (stat((root + "/fb").c_str(), &st) != 0) return 12;
    if ((st.st_mode & 07777) != 0701) return 13;
    // Without a fallback the refusal is reported, with its errno.
    if (warnings.size() != 1 ||
        warnings[0].find("mount tmpfs on " + root + "/nofb") != 0 ||
        warnings[0].find("EINVAL") == std::string::npos) {
      return 14;
    }
    std::vector<std::string> uw;
    if (UnmountAllBelow(root, &uw) != 1) return 15;
    return 0;
  });
  CHECK(rc == 0);
}

TEST_CASE("a required mount that fails is an error naming the target") {
  testing::TempDir dir;
  std::string root = dir.path();
  int rc = InPrivateMountNamespace([&] {
    std::vector<std::string> warnings;
    absl::Status s =
        MountAll(root, {{"x", "/a", "nosuchfs", 0, "", true}}, &warnings);
    return s.message().find("mount nosuchfs on " + root + "/a") == 0 ? 0 : 1;
  });
  CHECK(rc == 0);
}

TEST_CASE("interfaces are configured in a private network namespace") {
  int rc = InChild(CLONE_NEWNET, [] {
    if (!InterfaceUp("lo").ok()) return 10;
    if (system("ip link add m0 type veth peer name m1 2>/dev/null") != 0)
      return 11;
    auto p = ParseIpv4Prefix("10.213.0.15/24");
    if (!ConfigureInterface("m0", *p, "10.213.0.2").ok()) return 12;
    if (system("ip -4 -o addr show dev m0 | grep -q 'inet 10.213.0.15/24'") !=
        0) {
      return 13;
    }
    if (system("ip route show default | grep -q 'via 10.213.0.2 dev m0'") !=
        0) {
      return 14;
    }
    if (system("ip -o link show lo | grep -q 'UP'") != 0) return 15;
    absl::Status bad = ConfigureInterface("nosuch0", *p, "");
    if (bad.code() != absl::StatusCode::kNotFound &&
        bad.message().find("nosuch0") == absl::string_view::npos) {
      return 16;
    }
    return 0;
  });
  CHECK(rc == 0);
}

}  // namespace
}  // namespace mycel
