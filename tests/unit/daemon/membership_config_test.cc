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

}  // namespace
}  // namespace mycel
