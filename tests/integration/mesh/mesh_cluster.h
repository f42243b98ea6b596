// Helpers for tests that run several myceld on loopback: a free port, the
// CLI with its own config directory, and a node that serves TCP.
#ifndef MYCEL_TESTS_INTEGRATION_MESH_MESH_CLUSTER_H_
#define MYCEL_TESTS_INTEGRATION_MESH_MESH_CLUSTER_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "tests/testing/ports.h"
#include "tests/testing/process.h"

namespace mycel::testing {

// The permission bits of `path`, or -1.
inline int Mode(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return -1;
  return st.st_mode & 07777;
}

// `s` as one shell word, single quotes included.
inline std::string Quote(const std::string& s) {
  return "'" + absl::StrReplaceAll(s, {{"'", "'\\''"}}) + "'";
}

// Runs the mycel CLI with `env` (e.g. "XDG_CONFIG_HOME=/x") and `args`.
inline CommandResult Mycel(const std::string& env,
                           const std::vector<std::string>& args) {
  std::string cmd =
      absl::StrCat("env -u MYCEL_CONFIG ", env, " ", Quote(Binary("mycel")));
  for (const std::string& a : args) absl::StrAppend(&cmd, " ", Quote(a));
  return Shell(cmd);
}

// A myceld serving TCP on a loopback port, with a config directory of its
// own for the CLI (where `mesh init` writes the admin's credentials).
struct MeshNodeProcess {
  // `host` is the address it listens on: an IPv4 one or "[IPV6]".
  explicit MeshNodeProcess(std::vector<std::string> extra = {},
                           const std::string& host = "127.0.0.1")
      : addr(absl::StrCat(host, ":", FreePort())),
        daemon(dir.path(), WithListen(std::move(extra), addr)) {}

  TempDir dir;
  std::string addr;
  std::string config = dir.Sub("config");
  std::string env = "XDG_CONFIG_HOME=" + config;
  DaemonProcess daemon;

  CommandResult Local(std::vector<std::string> args) const {
    args.insert(args.begin(), {"--socket", daemon.socket()});
    return Mycel(env, args);
  }
  CommandResult Remote(std::vector<std::string> args,
                       const std::string& extra_env = "") const {
    args.insert(args.begin(), {"--node", addr});
    return Mycel(env + " " + extra_env, args);
  }

 private:
  static std::vector<std::string> WithListen(std::vector<std::string> extra,
                                             const std::string& addr) {
    extra.insert(extra.begin(), {"--listen", addr});
    return extra;
  }
};

}  // namespace mycel::testing

#endif  // MYCEL_TESTS_INTEGRATION_MESH_MESH_CLUSTER_H_
