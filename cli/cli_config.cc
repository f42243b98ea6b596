#include "cli/cli_config.h"

#include <stdlib.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "google/protobuf/util/json_util.h"
#include "runtime/fs.h"
#include "runtime/process.h"
#include "runtime/status.h"

namespace mycel::cli {

absl::StatusOr<std::string> DefaultConfigDir() {
  if (const char* xdg = getenv("XDG_CONFIG_HOME"); xdg != nullptr && *xdg) {
    return absl::StrCat(xdg, "/mycel");
  }
  if (const char* home = getenv("HOME"); home != nullptr && *home) {
    return absl::StrCat(home, "/.config/mycel");
  }
  return absl::FailedPreconditionError(
      "neither $XDG_CONFIG_HOME nor $HOME is set: nowhere to keep the "
      "credentials");
}

absl::StatusOr<std::string> ConfigPath() {
  if (const char* env = getenv("MYCEL_CONFIG"); env != nullptr && *env) {
    return std::string(env);
  }
  ASSIGN_OR_RETURN(std::string dir, DefaultConfigDir());
  return dir + "/config.json";
}

absl::StatusOr<std::string> WriteCredentials(
    const std::string& dir, const mycel::v1::UserCredentials& creds,
    const mycel::v1::MeshInfo& info, const std::string& also_config) {
  std::string abs = dir;
  if (abs.empty() || abs[0] != '/') {
    ASSIGN_OR_RETURN(std::string cwd, CurrentDir());
    abs = absl::StrCat(cwd, "/", dir);
  }
  RETURN_IF_ERROR(MakeDirs(abs, 0700));
  mycel::v1::CliConfig config;
  config.set_mesh(creds.mesh());
  config.set_user(creds.user());
  config.set_ca(abs + "/ca.crt");
  config.set_cert(abs + "/client.crt");
  config.set_key(abs + "/client.key");
  if (!info.listen().empty()) {
    mycel::v1::CliEndpoint* e = config.add_endpoints();
    e->set_address(info.listen());
    e->set_node(info.node());
  }
  RETURN_IF_ERROR(WriteFileAtomic(config.key(), creds.private_key(), 0600));
  RETURN_IF_ERROR(WriteFileAtomic(config.cert(), creds.certificate(), 0644));
  RETURN_IF_ERROR(WriteFileAtomic(config.ca(), creds.ca_certificate(), 0644));
  google::protobuf::util::JsonPrintOptions opts;
  opts.add_whitespace = true;
  opts.preserve_proto_field_names = true;
  std::string json;
  if (!google::protobuf::util::MessageToJsonString(config, &json, opts).ok()) {
    return absl::InternalError("cannot write the CLI config as JSON");
  }
  std::string path = abs + "/config.json";
  RETURN_IF_ERROR(WriteFileAtomic(path, json, 0600));
  if (!also_config.empty()) {
    RETURN_IF_ERROR(WriteFileAtomic(also_config, json, 0600));
  }
  return path;
}

absl::StatusOr<mycel::v1::CliConfig> ReadConfig(const std::string& path) {
  if (!CanAccess(path, F_OK)) {
    return absl::NotFoundError(absl::StrCat(path, " does not exist"));
  }
  ASSIGN_OR_RETURN(std::string json, ReadFile(path));
  mycel::v1::CliConfig config;
  auto st = google::protobuf::util::JsonStringToMessage(json, &config);
  if (!st.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", std::string(st.message())));
  }
  return config;
}

}  // namespace mycel::cli
