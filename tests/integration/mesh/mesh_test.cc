// `mycel mesh init`, tokens and users against real myceld processes, and the
// CLI reaching a node over loopback TCP with the credentials init wrote.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <regex>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "runtime/fs.h"
#include "tests/integration/mesh/mesh_cluster.h"
#include "tests/testing/process.h"

namespace mycel {
namespace {

using testing::CommandResult;
using testing::DaemonProcess;
using testing::TempDir;

using testing::Mode;
using testing::Mycel;
using testing::Quote;
using Node = testing::MeshNodeProcess;

TEST_CASE("mesh init: CA, node and admin; keys 0600; TCP served at once") {
  Node n;
  REQUIRE(n.daemon.Start());
  // Not in a mesh and no --tls-*: TCP stays closed.
  CHECK(n.daemon.Log().find("tcp listener disabled") != std::string::npos);
  CHECK(n.Local({"mesh", "info"}).out == "not in a mesh\n");

  CommandResult init = n.Local({"mesh", "init", "--name", "test"});
  REQUIRE_MESSAGE(init.exit_code == 0, init.err);
  CHECK(init.out.find("spiffe://test/node/test-node") != std::string::npos);

  // Keys: the CA's and the node's under the state directory, the admin's
  // under the config directory, all 0600.
  const std::string mesh_dir = n.daemon.state_dir() + "/mesh";
  CHECK(Mode(mesh_dir + "/ca.key") == 0600);
  CHECK(Mode(mesh_dir + "/node.key") == 0600);
  CHECK(Mode(mesh_dir) == 0700);
  CHECK(Mode(n.config + "/mycel/test/client.key") == 0600);
  CHECK(Mode(n.config + "/mycel/config.json") == 0600);
  std::string config = *ReadFile(n.config + "/mycel/config.json");
  CHECK(config.find("\"mesh\": \"test\"") != std::string::npos);
  CHECK(config.find(n.addr) != std::string::npos);

  // A second init is refused and changes nothing.
  std::string ca_before = *ReadFile(mesh_dir + "/ca.crt");
  CommandResult again = n.Local({"mesh", "init", "--name", "other"});
  CHECK(again.exit_code == 1);
  CHECK(again.err == "mycel: this node is already in the mesh test\n");
  CHECK(*ReadFile(mesh_dir + "/ca.crt") == ca_before);

  // The CLI reaches the node over TCP with the written credentials, and
  // only with the node named in the config.
  CommandResult info = n.Remote({"-o", "json", "node", "info"});
  CHECK_MESSAGE(info.exit_code == 0, info.err);
  CHECK(info.out.find("\"name\": \"test-node\"") != std::string::npos);

  // A bad name is a usage error naming the rule.
  Node m;
  REQUIRE(m.daemon.Start());
  CommandResult bad = m.Local({"mesh", "init", "--name", "Bad_Mesh"});
  CHECK(bad.exit_code == 1);
  CHECK(bad.err.find("mesh name") != std::string::npos);
}

TEST_CASE(
    "mesh membership survives a restart; TCP serves the mesh "
    "certificate without --tls-*") {
  Node n;
  REQUIRE(n.daemon.Start());
  REQUIRE(n.Local({"mesh", "init", "--name", "test"}).exit_code == 0);
  REQUIRE(n.daemon.Signal(SIGTERM) == 0);
  REQUIRE(n.daemon.Start());
  CHECK(n.daemon.Log().find("tcp listener disabled") == std::string::npos);
  CommandResult info = n.Local({"mesh", "info"});
  CHECK(info.out.find("spiffe://test/node/test-node") != std::string::npos);
  CHECK(info.out.find("AUTHORITY     yes") != std::string::npos);
  CHECK(n.Remote({"node", "health"}).exit_code == 0);
}

TEST_CASE("join tokens: printed alone, only a hash kept, listed, revoked") {
  Node n;
  REQUIRE(n.daemon.Start());
  // No mesh, no token.
  CommandResult none = n.Local({"mesh", "token", "create"});
  CHECK(none.exit_code == 1);
  CHECK(none.err.find("not in a mesh") != std::string::npos);
  REQUIRE(n.Local({"mesh", "init", "--name", "test"}).exit_code == 0);

  CommandResult made =
      n.Local({"mesh", "token", "create", "--ttl", "30m", "--uses", "2"});
  REQUIRE_MESSAGE(made.exit_code == 0, made.err);
  static const std::regex kToken(
      "mycel1\\.[a-z0-9]{6}\\.[0-9a-f]{64}\\.[0-9a-f]{64}\n");
  CHECK(std::regex_match(made.out, kToken));
  std::vector<std::string> parts = absl::StrSplit(made.out, '.');
  REQUIRE(parts.size() == 4);
  const std::string id = parts[1];
  const std::string secret = parts[2];
  // The CA pin in the token is the node's CA.
  CHECK(n.Local({"mesh", "info"}).out.find(parts[3].substr(0, 64)) !=
        std::string::npos);

  // The secret is nowhere in the state directory.
  CommandResult grep = testing::Shell(
      absl::StrCat("grep -r -l ", secret, " ", Quote(n.daemon.state_dir())));
  CHECK(grep.out.empty());

  CommandResult ls = n.Local({"mesh", "token", "ls"});
  CHECK(ls.exit_code == 0);
  CHECK(ls.out.find(id) != std::string::npos);
  CHECK(ls.out.find(secret) == std::string::npos);
  CHECK(ls.out.find(" 2 ") != std::string::npos);

  CHECK(n.Local({"mesh", "token", "revoke", id}).exit_code == 0);
  CHECK(n.Local({"mesh", "token", "ls"}).out.find("yes") != std::string::npos);
  CommandResult unknown = n.Local({"mesh", "token", "revoke", "zzzzzz"});
  CHECK(unknown.exit_code == 1);
  CHECK(unknown.err == "mycel: join token zzzzzz does not exist\n");

  // Bad flags are usage errors, and nothing is made.
  CHECK(n.Local({"mesh", "token", "create", "--ttl", "soon"}).exit_code == 2);
  CHECK(n.Local({"mesh", "token", "create", "--uses", "0"}).exit_code == 2);
  CHECK(n.Local({"mesh", "token", "create", "--ttl", "400h"}).exit_code == 1);
}

TEST_CASE("mesh user add: a viewer's credentials read and change nothing") {
  Node n;
  REQUIRE(n.daemon.Start());
  REQUIRE(n.Local({"mesh", "init", "--name", "test"}).exit_code == 0);
  std::string out = n.dir.Sub("bob");
  CommandResult add = n.Remote(
      {"mesh", "user", "add", "bob", "--role", "viewer", "--out", out});
  REQUIRE_MESSAGE(add.exit_code == 0, add.err);
  CHECK(add.out == out + "/config.json\n");
  CHECK(Mode(out + "/client.key") == 0600);
  CHECK(Mode(out + "/ca.crt") == 0644);
  CHECK(Mode(out + "/client.crt") == 0644);

  const std::string bob = "MYCEL_CONFIG=" + out + "/config.json";
  CommandResult info = n.Remote({"-o", "json", "node", "info"}, bob);
  CHECK_MESSAGE(info.exit_code == 0, info.err);
  CommandResult token = n.Remote({"mesh", "token", "create"}, bob);
  CHECK(token.exit_code == 1);
  CHECK(token.out.empty());
  CHECK(token.err ==
        "mycel: user bob (viewer) may not call /mycel.v1.Mesh/CreateToken: "
        "rule write needs an admin user\n");
  CommandResult ls = n.Local({"-o", "json", "mesh", "token", "ls"});
  CHECK(ls.out.find("\"id\"") == std::string::npos);
  // A viewer cannot mint users either.
  CommandResult mint = n.Remote({"mesh", "user", "add", "eve", "--role",
                                 "admin", "--out", n.dir.Sub("eve")},
                                bob);
  CHECK(mint.exit_code == 1);
  CHECK(access(n.dir.Sub("eve").c_str(), F_OK) != 0);

  // An address the config does not know is refused before any call.
  CommandResult stray = Mycel(n.env, {"--node", "127.0.0.1:1", "node", "info"});
  CHECK(stray.exit_code == 2);
  CHECK(stray.err.find("not an endpoint of the mesh test") !=
        std::string::npos);
}

}  // namespace
}  // namespace mycel
