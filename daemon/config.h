// Daemon configuration: defaults, then a JSON file (--config), then flags.
#ifndef MYCEL_DAEMON_CONFIG_H_
#define MYCEL_DAEMON_CONFIG_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "mycel/v1/config.pb.h"

namespace mycel {

inline constexpr char kDefaultStateDir[] = "/var/lib/mycel";
inline constexpr char kDefaultSocket[] = "/run/mycel/mycel.sock";
inline constexpr char kPid1Config[] = "/etc/mycel/myceld.json";
inline constexpr char kDefaultCgroupSubtree[] = "mycel";

struct DaemonFlags {
  mycel::v1::DaemonConfig config;
  bool help = false;
  bool version = false;
};

// Parses argv (without argv[0]). Accepts "--flag value" and "--flag=value".
// A --config file is read first and the other flags override it, wherever
// they appear. Unknown flags, missing values and bad JSON are
// INVALID_ARGUMENT naming the flag or field. Defaults are filled in for
// state_dir, socket, node_name and log_level. When no --config is given and
// `default_config` names a readable file, that file is read (PID 1 uses
// /etc/mycel/myceld.json this way).
absl::StatusOr<DaemonFlags> ParseDaemonFlags(
    const std::vector<std::string>& args,
    const std::string& default_config = "");

// Parses the JSON form of DaemonConfig. Unknown fields are rejected.
absl::StatusOr<mycel::v1::DaemonConfig> ParseConfigJson(
    const std::string& json, const std::string& origin);

// Most blank cells --cell-pool may ask for, per set of namespaces.
inline constexpr int kMaxCellPool = 16;

// Checks values: log level, HOST:PORT syntax, TLS files given all together.
absl::Status ValidateConfig(const mycel::v1::DaemonConfig& config);

// The --help text.
std::string DaemonUsage();

}  // namespace mycel

#endif  // MYCEL_DAEMON_CONFIG_H_
