// The membership settings of myceld: their defaults, and errors that name
// the field at fault.
#include <doctest/doctest.h>

#include <string>

#include "absl/strings/match.h"
#include "daemon/config.h"
#include "runtime/fs.h"
#include "tests/testing/process.h"

namespace mycel {
namespace {

TEST_CASE("membership settings default to lan, the listen address, no seeds") {
  auto flags = ParseDaemonFlags({"--listen", "10.0.0.1:7946"});
  REQUIRE(flags.ok());
  CHECK(flags->config.membership_profile() == "lan");
  CHECK(flags->config.advertise() == "10.0.0.1:7946");
  CHECK(flags->config.seeds().empty());
  auto wan = ParseDaemonFlags(
      {"--membership-profile", "wan", "--advertise", "node-a.example:7946"});
  REQUIRE(wan.ok());
  CHECK(wan->config.membership_profile() == "wan");
  CHECK(wan->config.advertise() == "node-a.example:7946");
}

TEST_CASE("a bad membership setting is refused, naming the field") {
  auto profile = ParseDaemonFlags({"--membership-profile", "fast"});
  REQUIRE_FALSE(profile.ok());
  CHECK(profile.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(absl::StartsWith(profile.status().message(), "membership_profile:"));
  CHECK(absl::StrContains(profile.status().message(), "\"fast\""));

  auto advertise = ParseDaemonFlags({"--advertise", "no-port"});
  REQUIRE_FALSE(advertise.ok());
  CHECK(absl::StartsWith(advertise.status().message(), "advertise:"));
}

TEST_CASE("membership_dead_retention: 24h by default, bounded, named") {
  auto defaults = ParseDaemonFlags({});
  REQUIRE(defaults.ok());
  CHECK(*MembershipDeadRetention(defaults->config) == absl::Hours(24));
  auto brief = ParseDaemonFlags({"--membership-dead-retention", "2s"});
  REQUIRE(brief.ok());
  CHECK(*MembershipDeadRetention(brief->config) == absl::Seconds(2));
  for (const char* bad : {"0s", "500ms", "8761h", "soon"}) {
    CAPTURE(bad);
    auto f = ParseDaemonFlags({"--membership-dead-retention", bad});
    CHECK(f.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(absl::StartsWith(f.status().message(),
                           "membership_dead_retention: want a duration in "
                           "1s..8760h"));
  }
}

TEST_CASE("seeds come from the config file, each HOST:PORT with a port") {
  testing::TempDir dir;
  const std::string good = dir.Sub("good.json");
  REQUIRE(WriteFileAtomic(
              good, R"({"seeds": ["10.0.0.1:7946", "node-b:7946"]})", 0644)
              .ok());
  auto flags = ParseDaemonFlags({"--config", good});
  REQUIRE(flags.ok());
  REQUIRE(flags->config.seeds_size() == 2);
  CHECK(flags->config.seeds(1) == "node-b:7946");

  const std::string bad = dir.Sub("bad.json");
  REQUIRE(WriteFileAtomic(bad, R"({"seeds": ["10.0.0.1:0"]})", 0644).ok());
  auto refused = ParseDaemonFlags({"--config", bad});
  REQUIRE_FALSE(refused.ok());
  CHECK(absl::StartsWith(refused.status().message(), "seeds:"));
}

TEST_CASE("--seed adds seeds, repeatable; the flags replace the file's list") {
  auto one = ParseDaemonFlags({"--seed", "10.0.0.1:7946"});
  REQUIRE(one.ok());
  REQUIRE(one->config.seeds_size() == 1);
  CHECK(one->config.seeds(0) == "10.0.0.1:7946");
  auto two =
      ParseDaemonFlags({"--seed", "10.0.0.1:7946", "--seed=node-b:7946"});
  REQUIRE(two.ok());
  REQUIRE(two->config.seeds_size() == 2);
  CHECK(two->config.seeds(1) == "node-b:7946");

  testing::TempDir dir;
  const std::string file = dir.Sub("c.json");
  REQUIRE(WriteFileAtomic(file, R"({"seeds": ["a:1", "b:2"]})", 0644).ok());
  auto replaced = ParseDaemonFlags({"--config", file, "--seed", "c:3"});
  REQUIRE(replaced.ok());
  REQUIRE(replaced->config.seeds_size() == 1);
  CHECK(replaced->config.seeds(0) == "c:3");
  auto kept = ParseDaemonFlags({"--config", file});
  REQUIRE(kept.ok());
  CHECK(kept->config.seeds_size() == 2);

  // Validated like the file's: a port is required, and the error names it.
  auto no_port = ParseDaemonFlags({"--seed", "10.0.0.1"});
  REQUIRE_FALSE(no_port.ok());
  CHECK(absl::StartsWith(no_port.status().message(), "seeds:"));
  auto missing = ParseDaemonFlags({"--seed"});
  REQUIRE_FALSE(missing.ok());
  CHECK(absl::StrContains(missing.status().message(), "--seed: missing value"));
  // And --help lists it.
  CHECK(absl::StrContains(DaemonUsage(), "--seed HOST:PORT"));
}

}  // namespace
}  // namespace mycel
