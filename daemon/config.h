// Daemon configuration: defaults, then a JSON file (--config), then flags.
//
// The settings are the fields of DaemonConfig (proto/mycel/v1/config.proto)
// and everything else about them (flag, help text, default) is read from
// each field's `setting` option, so that a new setting is one field there.
#ifndef MYCEL_DAEMON_CONFIG_H_
#define MYCEL_DAEMON_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "google/protobuf/descriptor.h"
#include "mycel/v1/config.pb.h"
#include "mycel/v1/options.pb.h"

namespace mycel {

inline constexpr char kPid1Config[] = "/etc/mycel/myceld.json";
// The default of cgroup_subtree, for code that meets a config without
// defaults applied. config_test checks that it is config.proto's.
inline constexpr char kDefaultCgroupSubtree[] = "mycel";

// One setting: a field of DaemonConfig and its `setting` option.
struct DaemonSetting {
  const google::protobuf::FieldDescriptor* field;
  const mycel::v1::Setting* options;
  // "--state-dir"; empty for a setting that only the --config file can
  // give (a repeated field has no flag form).
  std::string flag;
};

// Every field of DaemonConfig, in the order of config.proto.
const std::vector<DaemonSetting>& DaemonSettings();

// How a setting's default reads in --help and in the docs:
// "/var/lib/mycel", "the hostname", "the node name"; empty when it has
// none.
std::string DefaultText(const DaemonSetting& setting);

struct DaemonFlags {
  mycel::v1::DaemonConfig config;
  bool help = false;
  bool version = false;
};

// Parses argv (without argv[0]). Accepts "--flag value" and "--flag=value";
// a bool setting is a flag without a value (--pid1). A --config file is read
// first and the other flags override it, wherever they appear. Unknown
// flags, missing values and bad JSON are INVALID_ARGUMENT naming the flag or
// field. Then the defaults are filled in (ApplyDefaults) and the result is
// validated. When no --config is given and `default_config` names a
// readable file, that file is read (PID 1 uses /etc/mycel/myceld.json this
// way).
absl::StatusOr<DaemonFlags> ParseDaemonFlags(
    const std::vector<std::string>& args,
    const std::string& default_config = "");

// Fills in every unset field that has a default. The one place defaults
// are applied: code that reads a DaemonConfig from ParseDaemonFlags finds
// every default there.
absl::Status ApplyDefaults(mycel::v1::DaemonConfig* config);

// Parses the JSON form of DaemonConfig. Unknown fields are rejected.
absl::StatusOr<mycel::v1::DaemonConfig> ParseConfigJson(
    const std::string& json, const std::string& origin);

// Most blank cells --cell-pool may ask for, per set of namespaces.
inline constexpr int kMaxCellPool = 16;
// The largest connections_per_source (and open_connections_per_source)
// accepted.
inline constexpr int kMaxConnectionsPerSource = 100000;
// The largest max_watches (and max_log_streams, max_waits) accepted.
inline constexpr int kMaxWatches = 1000000;

// Checks values: log level, HOST:PORT syntax, TLS files given all together.
absl::Status ValidateConfig(const mycel::v1::DaemonConfig& config);

// cert_lifetime as a duration (its default when unset);
// INVALID_ARGUMENT naming the field when it does not parse or is outside
// 10s..8760h.
absl::StatusOr<absl::Duration> CertLifetime(
    const mycel::v1::DaemonConfig& config);

// token_retention as a duration, the same way, within 0s..8760h.
absl::StatusOr<absl::Duration> TokenRetention(
    const mycel::v1::DaemonConfig& config);

// tombstone_retention as a duration, the same way, within 1s..8760h.
absl::StatusOr<absl::Duration> TombstoneRetention(
    const mycel::v1::DaemonConfig& config);

// membership_dead_retention as a duration, the same way, within 1s..8760h.
absl::StatusOr<absl::Duration> MembershipDeadRetention(
    const mycel::v1::DaemonConfig& config);

// state_quota in bytes (its default when unset); INVALID_ARGUMENT naming
// the field when it does not parse or is outside 1M..1T.
absl::StatusOr<int64_t> StateQuota(const mycel::v1::DaemonConfig& config);

// The --help text, built from DaemonSettings().
std::string DaemonUsage();

}  // namespace mycel

#endif  // MYCEL_DAEMON_CONFIG_H_
