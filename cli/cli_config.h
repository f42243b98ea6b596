// The CLI's configuration file (mycel.v1.CliConfig as JSON): where it
// lives, how `mesh init` and `mesh user add` write it, and how --node reads
// it.
#ifndef MYCEL_CLI_CLI_CONFIG_H_
#define MYCEL_CLI_CLI_CONFIG_H_

#include <string>

#include "absl/status/statusor.h"
#include "mycel/v1/mesh.pb.h"

namespace mycel::cli {

// $XDG_CONFIG_HOME/mycel, else $HOME/.config/mycel.
absl::StatusOr<std::string> DefaultConfigDir();

// The file --node reads: $MYCEL_CONFIG, else DefaultConfigDir()/config.json.
absl::StatusOr<std::string> ConfigPath();

// Writes `creds` as DIR/ca.crt, DIR/client.crt, DIR/client.key (0600) and
// DIR/config.json naming them (absolute paths), the mesh, and this node's
// endpoint from `info` when it listens; and the same config to
// `also_config` when not empty. Returns the path of DIR/config.json.
absl::StatusOr<std::string> WriteCredentials(
    const std::string& dir, const mycel::v1::UserCredentials& creds,
    const mycel::v1::MeshInfo& info, const std::string& also_config = "");

// Reads a config file; NOT_FOUND when it does not exist, INVALID_ARGUMENT
// naming the file when it does not parse.
absl::StatusOr<mycel::v1::CliConfig> ReadConfig(const std::string& path);

}  // namespace mycel::cli

#endif  // MYCEL_CLI_CLI_CONFIG_H_
