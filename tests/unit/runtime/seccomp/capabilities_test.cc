#include "runtime/seccomp/capabilities.h"

#include <doctest/doctest.h>
#include <linux/capability.h>
#include <sys/prctl.h>

#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/strip.h"
#include "runtime/fs.h"

namespace mycel {
namespace {

TEST_CASE("the default set is Docker's") {
  CHECK(CapabilityNames(DefaultCapabilities()) ==
        std::vector<std::string>{
            "CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_FSETID",
            "CAP_KILL", "CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP",
            "CAP_NET_BIND_SERVICE", "CAP_NET_RAW", "CAP_SYS_CHROOT",
            "CAP_MKNOD", "CAP_AUDIT_WRITE", "CAP_SETFCAP"});
  // The bits /proc/PID/status shows for a Docker container.
  CHECK(DefaultCapabilities().bits == 0x00000000a80425fbULL);
}

TEST_CASE("capability names parse in any spelling") {
  for (const char* spelling :
       {"CAP_NET_ADMIN", "net_admin", "NET_ADMIN", "Cap_Net_Admin"}) {
    auto set = ParseCapabilities({spelling});
    REQUIRE_MESSAGE(set.ok(), spelling);
    CHECK(set->bits == (uint64_t{1} << CAP_NET_ADMIN));
  }
  auto several = ParseCapabilities({"chown", "CAP_SYS_ADMIN", "chown"});
  REQUIRE(several.ok());
  CHECK(CapabilityNames(*several) ==
        std::vector<std::string>{"CAP_CHOWN", "CAP_SYS_ADMIN"});
  CHECK(ParseCapabilities({})->bits == 0);
  CHECK(ParseCapabilities({"CAP_CHECKPOINT_RESTORE"})->Has(40));
}

TEST_CASE("all is every capability mycel knows that the bounding set has") {
  auto all = ParseCapabilities({"all"});
  REQUIRE(all.ok());
  uint64_t bounding = 0;
  for (int cap = 0; cap <= CAP_LAST_CAP; ++cap) {
    if (prctl(PR_CAPBSET_READ, cap, 0, 0, 0) == 1)
      bounding |= uint64_t{1} << cap;
  }
  CHECK(all->bits == bounding);
  CHECK(all->bits != 0);
  CHECK(ParseCapabilities({"ALL", "chown"})->bits ==
        (all->bits | (uint64_t{1} << CAP_CHOWN)));
}

TEST_CASE("names round-trip") {
  for (CapabilitySet set :
       {DefaultCapabilities(), *ParseCapabilities({"all"}), CapabilitySet{},
        CapabilitySet{uint64_t{1} << CAP_BPF}}) {
    auto parsed = ParseCapabilities(CapabilityNames(set));
    REQUIRE(parsed.ok());
    CHECK(*parsed == set);
  }
}

TEST_CASE("an unknown capability is rejected and named") {
  for (const char* bad : {"CAP_FOO", "", "CAP_", "cap_net admin", "12"}) {
    auto set = ParseCapabilities({"chown", bad});
    REQUIRE_FALSE(set.ok());
    CHECK(set.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(set.status().message() ==
          std::string("capabilities: unknown capability \"") + bad + "\"");
  }
}

TEST_CASE("bits without a name are shown by number") {
  CapabilitySet set{(uint64_t{1} << 50) | 1};
  CHECK(CapabilityNames(set) ==
        std::vector<std::string>{"CAP_CHOWN", "CAP_50"});
  CHECK_FALSE(ParseCapabilities({"CAP_50"}).ok());
}

TEST_CASE("prepare reads cap_last_cap and drops what the kernel lacks") {
  auto text = ReadFile("/proc/sys/kernel/cap_last_cap");
  REQUIRE(text.ok());
  int last_cap = -1;
  REQUIRE(absl::SimpleAtoi(absl::StripAsciiWhitespace(*text), &last_cap));

  auto prepared = PrepareCapabilities(CapabilitySet{~uint64_t{0}});
  REQUIRE(prepared.ok());
  CHECK(prepared->last_cap == last_cap);
  CHECK(prepared->set.bits == (uint64_t{1} << (last_cap + 1)) - 1);

  prepared = PrepareCapabilities(DefaultCapabilities());
  REQUIRE(prepared.ok());
  CHECK(prepared->set == DefaultCapabilities());
}

}  // namespace
}  // namespace mycel
