// Unit tests for the pieces PID 1 is built from: module parameters from the
// kernel command line, mountinfo parsing, IPv4 parsing, machine-id, the
// init role. Mounts and interfaces, which need root, are tested in
// tests/integration/runtime/system_setup_test.cc.
#include <doctest/doctest.h>

#include "daemon/init/pid1.h"
#include "runtime/fs.h"
#include "runtime/kernel_module.h"
#include "runtime/mount.h"
#include "runtime/net_config.h"
#include "tests/testing/process.h"

namespace mycel {
namespace {

TEST_CASE("module parameters come from NAME.param words, as modprobe does") {
  std::string cmdline =
      "console=ttyS0 virtio_mmio.device=4K@0xfeb00e00:12 quiet "
      "virtio-mmio.device=4K@0xfeb00c00:11 virtio_net.napi_tx=1 "
      "foo=virtio_mmio.x=1\n";
  CHECK(ModuleParamsFromCmdline(cmdline, "virtio_mmio") ==
        "device=4K@0xfeb00e00:12 device=4K@0xfeb00c00:11");
  CHECK(ModuleParamsFromCmdline(cmdline, "virtio-net") == "napi_tx=1");
  CHECK(ModuleParamsFromCmdline(cmdline, "failover") == "");
}

TEST_CASE("loading a missing module names the file") {
  auto s = LoadModule("/nonexistent", "virtio_net", "");
  CHECK(s.code() == absl::StatusCode::kNotFound);
  CHECK(s.message().find("/nonexistent/virtio_net.ko") !=
        absl::string_view::npos);
}

TEST_CASE("mountinfo lines give mount points (unescaped) and types") {
  auto m = ParseMountInfo(
      "22 1 0:21 / /proc rw,nosuid - proc proc rw\n"
      "30 22 0:5 / /mnt/with\\040space rw shared:1 - tmpfs tmpfs rw\n"
      "garbage\n");
  REQUIRE(m.size() == 2);
  CHECK(m[0].mount_point == "/proc");
  CHECK(m[0].fstype == "proc");
  CHECK(m[1].mount_point == "/mnt/with space");
  CHECK(m[1].fstype == "tmpfs");
}

TEST_CASE("IPv4 prefixes parse, and bad ones are named") {
  auto p = ParseIpv4Prefix("10.0.2.15/24");
  REQUIRE(p.ok());
  CHECK(p->prefix_len == 24);
  CHECK(ParseIpv4Prefix("10.0.2.15").status().code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(ParseIpv4Prefix("10.0.2.15/33").status().message().find("address:") ==
        0);
  CHECK(ParseIpv4("300.1.1.1").status().code() ==
        absl::StatusCode::kInvalidArgument);
}

TEST_CASE("machine-id is created once: 32 hex digits, then kept") {
  testing::TempDir dir;
  auto id = EnsureMachineId(dir.path());
  REQUIRE(id.ok());
  CHECK(id->size() == 32);
  CHECK(id->find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(*ReadFile(dir.path() + "/etc/machine-id") == *id + "\n");
  CHECK(*EnsureMachineId(dir.path()) == *id);
}

TEST_CASE("the init role: not PID 1 is none, --pid1 is a container") {
  CHECK(DetectInitRole(false) == InitRole::kNone);
  CHECK(DetectInitRole(true) == InitRole::kContainer);
}

}  // namespace
}  // namespace mycel
