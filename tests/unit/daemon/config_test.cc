#include "daemon/config.h"

#include <doctest/doctest.h>

#include "runtime/fs.h"
#include "tests/testing/process.h"

namespace mycel {
namespace {

TEST_CASE("defaults fill in state dir, socket, level and node name") {
  auto f = ParseDaemonFlags({});
  REQUIRE(f.ok());
  CHECK(f->config.state_dir() == "/var/lib/mycel");
  CHECK(f->config.socket() == "/run/mycel/mycel.sock");
  CHECK(f->config.log_level() == "info");
  CHECK_FALSE(f->config.node_name().empty());
}

TEST_CASE("flags take both --flag value and --flag=value") {
  auto f = ParseDaemonFlags({"--state-dir", "/srv/m", "--socket=/tmp/s.sock",
                             "--node-name", "n1", "--log-level=debug"});
  REQUIRE(f.ok());
  CHECK(f->config.state_dir() == "/srv/m");
  CHECK(f->config.socket() == "/tmp/s.sock");
  CHECK(f->config.node_name() == "n1");
  CHECK(f->config.log_level() == "debug");
}

TEST_CASE("a config file sets fields and flags override it wherever they are") {
  testing::TempDir dir;
  std::string path = dir.Sub("c.json");
  REQUIRE(
      WriteFile(path, R"({"state_dir": "/from/file", "node_name": "filenode",
                              "log_level": "warn"})")
          .ok());
  auto f = ParseDaemonFlags({"--node-name", "flagnode", "--config", path});
  REQUIRE(f.ok());
  CHECK(f->config.state_dir() == "/from/file");
  CHECK(f->config.node_name() == "flagnode");
  CHECK(f->config.log_level() == "warn");
}

TEST_CASE("bad input names the flag or field") {
  auto unknown = ParseDaemonFlags({"--state-dri", "/x"});
  CHECK(unknown.status().message() == "unknown flag --state-dri (see --help)");
  auto missing = ParseDaemonFlags({"--socket"});
  CHECK(missing.status().message() == "--socket: missing value");
  auto relative = ParseDaemonFlags({"--state-dir", "rel"});
  CHECK(relative.status().message().find("state_dir") == 0);
  auto level = ParseDaemonFlags({"--log-level", "loud"});
  CHECK(level.status().message().find("log_level") == 0);
  auto listen = ParseDaemonFlags({"--listen", "nohost"});
  CHECK(listen.status().message().find("listen:") == 0);
  auto port = ParseDaemonFlags({"--listen", "127.0.0.1:70000"});
  CHECK(port.status().message().find("listen:") == 0);
  auto tls = ParseDaemonFlags({"--tls-cert", "/a"});
  CHECK(tls.status().message().find("tls_cert, tls_key, tls_ca") == 0);
  std::string long_sock(120, 's');
  auto sock = ParseDaemonFlags({"--socket", "/" + long_sock});
  CHECK(sock.status().message().find("socket:") == 0);
  for (const char* bad : {"/abs", "a/../b", "a//b", "trailing/", ".", ".."}) {
    auto subtree = ParseDaemonFlags({"--cgroup-subtree", bad});
    CHECK_MESSAGE(subtree.status().code() == absl::StatusCode::kInvalidArgument,
                  bad);
    CHECK_MESSAGE(subtree.status().message().find("cgroup_subtree:") == 0, bad);
  }
  for (const char* bad : {"-1", "17", "many"}) {
    auto pool = ParseDaemonFlags({"--cell-pool", bad});
    CHECK_MESSAGE(pool.status().message().find("cell_pool:") == 0, bad);
  }
  auto pool = ParseDaemonFlags({"--cell-pool", "0"});
  REQUIRE(pool.ok());
  CHECK(pool->config.has_cell_pool());
  CHECK(pool->config.cell_pool() == 0);
  auto nested = ParseDaemonFlags({"--cgroup-subtree", "mycel/node-b"});
  REQUIRE(nested.ok());
  CHECK(nested->config.cgroup_subtree() == "mycel/node-b");
  for (const auto& s : {unknown.status(), missing.status(), relative.status(),
                        level.status(), tls.status()}) {
    CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  }
}

TEST_CASE("an unknown field or bad JSON in the config file is named") {
  testing::TempDir dir;
  std::string path = dir.Sub("c.json");
  REQUIRE(WriteFile(path, R"({"state_dri": "/x"})").ok());
  auto f = ParseDaemonFlags({"--config", path});
  REQUIRE_FALSE(f.ok());
  CHECK(f.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(f.status().message().find("state_dri") != absl::string_view::npos);
  CHECK(f.status().message().find(path) != absl::string_view::npos);

  REQUIRE(WriteFile(path, "{not json").ok());
  CHECK(ParseDaemonFlags({"--config", path}).status().code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(
      ParseDaemonFlags({"--config", dir.Sub("absent.json")}).status().code() ==
      absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace mycel
