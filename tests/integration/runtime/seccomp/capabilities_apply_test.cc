// Integration tests for capability sets: a forked child applies a set with
// ApplyCapabilitiesInChild and execs real programs, whose /proc/self/status
// and behaviour show what the kernel granted. Needs root (else the binary
// is skipped).
#include <doctest/doctest.h>
#include <linux/capability.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "runtime/seccomp/capabilities.h"
#include "runtime/seccomp/seccomp_profile.h"
#include "tests/integration/runtime/seccomp/child_runner.h"
#include "tests/testing/requires.h"

namespace mycel {
namespace {

using testing::ChildResult;
using testing::Exec;
using testing::Report;
using testing::RunInChild;

constexpr int kApplyFailed = 100;
constexpr int kSetupFailed = 99;

MYCEL_TEST_REQUIRES(
    testing::Root("a non-root process cannot shape its capability sets"));
MYCEL_TEST_REQUIRES(testing::CanUnshare(CLONE_NEWNET));

PreparedCapabilities Prepare(CapabilitySet set) {
  auto prepared = PrepareCapabilities(set);
  REQUIRE_MESSAGE(prepared.ok(), prepared.status().ToString());
  return *prepared;
}

bool ApplyCaps(const PreparedCapabilities& caps) {
  int rc = ApplyCapabilitiesInChild(caps);
  if (rc != 0) Report("apply_caps", rc);
  return rc == 0;
}

// The capability sets of a /proc/PID/status.
struct CapSets {
  uint64_t inh = 0, prm = 0, eff = 0, bnd = 0, amb = 0;
  bool ok = false;
};

CapSets ParseCapSets(const std::string& status) {
  CapSets sets;
  int found = 0;
  auto field = [&](const char* key, uint64_t* out) {
    size_t at = status.find(absl::StrCat("\n", key, ":\t"));
    if (at == std::string::npos) return;
    size_t start = at + strlen(key) + 3;
    std::string hex = status.substr(start, status.find('\n', start) - start);
    if (absl::SimpleHexAtoi(hex, out)) ++found;
  };
  field("CapInh", &sets.inh);
  field("CapPrm", &sets.prm);
  field("CapEff", &sets.eff);
  field("CapBnd", &sets.bnd);
  field("CapAmb", &sets.amb);
  sets.ok = found == 5;
  return sets;
}

// Applies `set` in a child and returns the sets of the program it execs.
CapSets SetsAfterExec(CapabilitySet set) {
  PreparedCapabilities caps = Prepare(set);
  ChildResult r = RunInChild([&] {
    if (!ApplyCaps(caps)) return kApplyFailed;
    return Exec({"/bin/cat", "/proc/self/status"});
  });
  REQUIRE_MESSAGE(r.exit_code == 0, r.out);
  CapSets sets = ParseCapSets(r.out);
  REQUIRE_MESSAGE(sets.ok, r.out);
  return sets;
}

TEST_CASE("root execs with exactly the default set") {
  CapSets sets = SetsAfterExec(DefaultCapabilities());
  uint64_t want = DefaultCapabilities().bits;
  CHECK(sets.eff == want);
  CHECK(sets.prm == want);
  CHECK(sets.bnd == want);
  CHECK(sets.inh == want);
  // Root needs no ambient set (as in Docker): exec grants it the bounding
  // set, which is already exactly `want`.
  CHECK(sets.amb == 0);
  CHECK((sets.eff >> CAP_NET_ADMIN & 1) == 0);
  CHECK((sets.eff >> CAP_SYS_ADMIN & 1) == 0);
}

TEST_CASE("a set parsed from CAP_NET_ADMIN is exactly that") {
  auto set = ParseCapabilities({"CAP_NET_ADMIN"});
  REQUIRE(set.ok());
  CapSets sets = SetsAfterExec(*set);
  uint64_t want = uint64_t{1} << CAP_NET_ADMIN;
  CHECK(sets.bnd == want);
  CHECK(sets.eff == want);
  CHECK(sets.prm == want);
  CHECK(sets.amb == 0);
}

TEST_CASE("a non-root uid keeps exactly its set across exec (ambient)") {
  auto set = ParseCapabilities({"NET_BIND_SERVICE"});
  REQUIRE(set.ok());
  PreparedCapabilities caps = Prepare(*set);
  ChildResult r = RunInChild([&] {
    // What a spawner does for a non-root cell: keep the permitted set across
    // the uid change, then apply.
    if (prctl(PR_SET_KEEPCAPS, 1UL, 0UL, 0UL, 0UL) != 0 ||
        syscall(SYS_setresgid, 65534, 65534, 65534) != 0 ||
        syscall(SYS_setresuid, 65534, 65534, 65534) != 0) {
      return kSetupFailed;
    }
    if (!ApplyCaps(caps)) return kApplyFailed;
    return Exec({"/bin/cat", "/proc/self/status"});
  });
  REQUIRE_MESSAGE(r.exit_code == 0, r.out);
  CHECK(absl::StrContains(r.out, "\nUid:\t65534\t65534\t65534\t65534\n"));
  CapSets sets = ParseCapSets(r.out);
  REQUIRE(sets.ok);
  uint64_t want = uint64_t{1} << CAP_NET_BIND_SERVICE;
  CHECK(sets.eff == want);
  CHECK(sets.prm == want);
  CHECK(sets.amb == want);
  CHECK(sets.bnd == want);
}

TEST_CASE("a non-root uid without PR_SET_KEEPCAPS gets EPERM") {
  PreparedCapabilities caps = Prepare(DefaultCapabilities());
  ChildResult r = RunInChild([&] {
    if (syscall(SYS_setresuid, 65534, 65534, 65534) != 0) return kSetupFailed;
    return ApplyCapabilitiesInChild(caps);
  });
  CHECK(r.exit_code == EPERM);
}

TEST_CASE("an empty set leaves root with nothing") {
  CapSets sets = SetsAfterExec(CapabilitySet{});
  CHECK(sets.eff == 0);
  CHECK(sets.prm == 0);
  CHECK(sets.bnd == 0);
  CHECK(sets.amb == 0);
}

// Bringing a link up takes CAP_NET_ADMIN. The child first gets its own
// network namespace, so nothing on the host changes either way.
ChildResult LinkUpWith(CapabilitySet set) {
  PreparedCapabilities caps = Prepare(set);
  return RunInChild([&] {
    if (unshare(CLONE_NEWNET) != 0) return kSetupFailed;
    if (!ApplyCaps(caps)) return kApplyFailed;
    return Exec({"/sbin/ip", "link", "set", "lo", "up"});
  });
}

TEST_CASE(
    "without CAP_NET_ADMIN a link cannot be configured; with it, it can") {
  REQUIRE_MESSAGE(access("/sbin/ip", X_OK) == 0,
                  "/sbin/ip is missing: install iproute2 "
                  "(packaging/install-deps.sh)");
  ChildResult denied = LinkUpWith(DefaultCapabilities());
  REQUIRE(denied.exit_code != kSetupFailed);
  CHECK(denied.exit_code != 0);
  CHECK_MESSAGE(absl::StrContains(denied.out, "Operation not permitted"),
                denied.out);

  auto with_admin = ParseCapabilities({"NET_ADMIN"});
  REQUIRE(with_admin.ok());
  ChildResult allowed = LinkUpWith(*with_admin);
  CHECK_MESSAGE(allowed.exit_code == 0, allowed.out);
}

TEST_CASE("capabilities first, then seccomp, then exec (the spawn order)") {
  PreparedCapabilities caps = Prepare(DefaultCapabilities());
  for (auto kind :
       {SeccompProfileKind::kDefault, SeccompProfileKind::kStrict}) {
    CAPTURE(SeccompProfileName(kind));
    auto program = CompileSeccomp({kind, {}});
    REQUIRE(program.ok());
    ChildResult r = RunInChild([&] {
      if (!ApplyCaps(caps)) return kApplyFailed;
      if (int rc = ApplySeccompInChild(*program); rc != 0) {
        Report("apply_seccomp", rc);
        return kApplyFailed;
      }
      return Exec({"/bin/cat", "/proc/self/status"});
    });
    REQUIRE_MESSAGE(r.exit_code == 0, r.out);
    CapSets sets = ParseCapSets(r.out);
    REQUIRE(sets.ok);
    CHECK(sets.eff == DefaultCapabilities().bits);
    CHECK(sets.bnd == DefaultCapabilities().bits);
  }
}

TEST_CASE("a capability the process does not hold is an errno, not a crash") {
  // Drop CAP_SYS_ADMIN first, then ask for it.
  PreparedCapabilities without = Prepare(DefaultCapabilities());
  auto admin = ParseCapabilities({"SYS_ADMIN"});
  REQUIRE(admin.ok());
  PreparedCapabilities with = Prepare(*admin);
  ChildResult r = RunInChild([&] {
    if (!ApplyCaps(without)) return kApplyFailed;
    return ApplyCapabilitiesInChild(with);
  });
  CHECK(r.exit_code == EPERM);
}

}  // namespace
}  // namespace mycel
