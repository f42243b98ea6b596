// Boots the microVM image of packaging/image in QEMU and drives the myceld
// inside it, which is the guest's PID 1, through its mTLS API. The image is
// built once per ctest run by the e2e_image_build fixture.
#include <doctest/doctest.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/match.h"
#include "daemon/config.h"
#include "google/protobuf/util/json_util.h"
#include "mycel/v1/node.pb.h"
#include "tests/e2e/guest.h"
#include "tests/testing/process.h"

namespace mycel {
namespace {

using std::chrono::seconds;
using testing::Guest;
using testing::ImageDir;
using testing::TempDir;

// Generous for TCG on a busy 2-core host, where a boot that takes 4 s when
// the host is idle was seen to take 20 s; a hung guest still fails in time.
constexpr seconds kBootTimeout{90};
constexpr seconds kPowerOffTimeout{45};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// build.sh's manifest line "KEY VALUE".
std::string ManifestValue(const std::string& key) {
  std::istringstream in(ReadFile(ImageDir() + "/manifest.txt"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key + " ", 0) == 0) return line.substr(key.size() + 1);
  }
  return "";
}

// The `cpio -tv` line for `path`, or "".
std::string ListingLine(const std::string& listing, const std::string& path) {
  std::istringstream in(listing);
  std::string line;
  while (std::getline(in, line)) {
    if (line.size() > path.size() &&
        line.compare(line.size() - path.size() - 1, std::string::npos,
                     " " + path) == 0) {
      return line;
    }
  }
  return "";
}

double Seconds(const google::protobuf::Duration& d) {
  return d.seconds() + d.nanos() / 1e9;
}

// Boots the myceld image and waits for its API. REQUIREs success, printing
// the console when the guest did not come up.
void BootAndWaitHealthy(Guest& guest) {
  std::string error;
  REQUIRE_MESSAGE(guest.Start(&error), error);
  bool healthy = guest.WaitHealthy(kBootTimeout);
  if (!healthy) {
    MESSAGE("guest console:\n", guest.Console());
    MESSAGE("last health check: ",
            guest.Cli({"--timeout", "2", "node", "health"}).err);
  }
  REQUIRE(healthy);
}

// Asks myceld to stop the machine with `flags` and checks that QEMU exits 0
// (with -no-reboot, poweroff and reboot both end QEMU) after myceld's own
// orderly shutdown, and that the kernel did not panic.
void ShutdownAndCheck(Guest& guest, const std::vector<std::string>& flags,
                      const std::string& kernel_line) {
  std::vector<std::string> args = {"node", "shutdown"};
  args.insert(args.end(), flags.begin(), flags.end());
  auto shutdown = guest.Cli(args);
  CHECK_MESSAGE(shutdown.exit_code == 0, shutdown.err);
  CHECK(shutdown.out == "shutdown requested\n");
  int exit_code = guest.Wait(kPowerOffTimeout);
  std::string console = guest.Console();
  INFO("guest console:\n", console);
  CHECK(exit_code == 0);
  CHECK(console.find("Kernel panic") == std::string::npos);
  // myceld's own lines (logged to /dev/kmsg, shown by loglevel=7): the
  // daemon stopped before the machine did.
  CHECK(console.find("msg=stopping reason=api") != std::string::npos);
  CHECK(console.find("myceld stopped") != std::string::npos);
  CHECK(console.find(kernel_line) != std::string::npos);
}

TEST_CASE("the image holds myceld as /init and a config that myceld takes") {
  const std::string img = ImageDir() + "/initramfs.img";
  auto listing = testing::Shell("zcat '" + img + "' | cpio -tv --quiet");
  REQUIRE_MESSAGE(listing.exit_code == 0, listing.err);
  INFO("initramfs listing:\n", listing.out);
  CHECK(listing.out.find(" init -> usr/bin/myceld\n") != std::string::npos);
  for (const char* path :
       {" usr/bin/myceld\n", " usr/bin/mycel\n", " bin/busybox\n",
        " bin/sh -> busybox\n", " etc/mycel/pki/ca.crt\n",
        " etc/mycel/pki/server.crt\n"}) {
    CHECK_MESSAGE(listing.out.find(path) != std::string::npos, path);
  }
  // Only root in the guest may read the server's private key.
  CHECK(ListingLine(listing.out, "etc/mycel/pki/server.key")
            .rfind("-rw------- ", 0) == 0);
  CHECK(listing.out.find("ca.key") == std::string::npos);
  CHECK(listing.out.find("client.key") == std::string::npos);

  TempDir dir;
  auto extract = testing::Shell("cd '" + dir.path() + "' && zcat '" + img +
                                "' | cpio -id --quiet etc/mycel/myceld.json");
  REQUIRE_MESSAGE(extract.exit_code == 0, extract.err);
  std::string json = ReadFile(dir.Sub("etc/mycel/myceld.json"));
  // The parser myceld itself uses, which rejects unknown fields.
  auto config = ParseConfigJson(json, kPid1Config);
  REQUIRE_MESSAGE(config.ok(), config.status().ToString());
  CHECK(ValidateConfig(*config).ok());
  CHECK(config->node_name() == "guest");
  CHECK(config->listen() == "0.0.0.0:7443");
  CHECK(config->state_dir() == "/var/lib/mycel");
  CHECK(config->socket() == "/run/mycel/mycel.sock");
  REQUIRE(config->interfaces_size() == 1);
  CHECK(config->interfaces(0).name() == "eth0");
  CHECK(config->interfaces(0).address() == "10.0.2.15/24");
  CHECK(config->interfaces(0).gateway() == "10.0.2.2");
  // Every module in load order, each after what it depends on, and each
  // file in the image.
  std::string modules;
  for (const std::string& m : config->modules()) {
    modules += (modules.empty() ? "" : " ") + m;
    std::string file = " lib/modules/mycel/" + m + ".ko\n";
    CHECK_MESSAGE(listing.out.find(file) != std::string::npos, file);
  }
  CHECK(modules == ManifestValue("modules"));
  CHECK(modules ==
        "virtio_ring virtio virtio_mmio failover net_failover virtio_net");
}

TEST_CASE("the anchor image boots the same kernel and powers off") {
  TempDir dir;
  Guest guest(ImageDir(), dir.Sub("console.log"),
              ImageDir() + "/busybox-initramfs.img");
  std::string error;
  REQUIRE_MESSAGE(guest.Start(&error), error);
  bool marker = guest.WaitForConsole("MYCEL-ANCHOR-INIT", kBootTimeout);
  int exit_code = guest.Wait(kPowerOffTimeout);
  INFO("guest console:\n", guest.Console());
  CHECK(marker);
  CHECK(exit_code == 0);
  CHECK(guest.Console().find("Kernel panic") == std::string::npos);
}

TEST_CASE("myceld is PID 1 of the guest, serves mTLS and powers it off") {
  TempDir dir;
  Guest guest(ImageDir(), dir.Sub("console.log"));
  BootAndWaitHealthy(guest);

  auto json = guest.Cli({"-o", "json", "node", "info"});
  REQUIRE_MESSAGE(json.exit_code == 0, json.err);
  INFO("node info: ", json.out);
  CHECK(json.out.find("\"pid1\": true") != std::string::npos);
  mycel::v1::NodeInfo info;
  REQUIRE(google::protobuf::util::JsonStringToMessage(json.out, &info).ok());
  CHECK(info.name() == "guest");
  CHECK(info.pid() == 1);
  CHECK(info.pid1());
  CHECK(info.cgroup_mode() == mycel::v1::CGROUP_MODE_V2);
  // PID 1 mounted cgroup2 with favordynmods, and the daemon saw it.
  CHECK(info.features().cgroup_favordynmods());
  CHECK(info.kernel_release() == ManifestValue("kernel_release"));
  CHECK(info.state_dir() == "/var/lib/mycel");
  // The kernel boots for seconds before it runs /init, and myceld does
  // work before it serves; both are measured, and the second cannot be
  // longer than the daemon has been up.
  CHECK(Seconds(info.boot_to_start()) > 0);
  CHECK(Seconds(info.start_to_ready()) > 0);
  CHECK(Seconds(info.start_to_ready()) <= Seconds(info.uptime()));

  // The table a person reads says the same.
  auto table = guest.Cli({"node", "info"});
  CHECK(table.exit_code == 0);
  CHECK(table.out.find("1 (PID 1)") != std::string::npos);

  // ---------------------------------------------------------------------
  // Run commands inside the guest, in cells on its pure cgroup v2.
  testing::CommandResult hello =
      guest.Cli({"run", "--isolate", "pid,mount,uts,ipc", "--memory-max", "64M",
                 "--pids-max", "50", "--", "/bin/sh", "-c",
                 "echo hello-from-guest; for i in $(seq 500); do "
                 "c=$(tr -d '\\0' < /proc/1/cmdline); [ -n \"$c\" ] && break; "
                 "done; echo \"$c\"; "
                 "exit 7"});
  CHECK_MESSAGE(hello.exit_code == 7, hello.err);
  CHECK(hello.out == "hello-from-guest\nmycel-cell-init\n");
  // The v2 driver enforces memory.max: the hog is OOM-killed (128+9).
  testing::CommandResult hog = guest.Cli(
      {"run", "--memory-max", "16M", "--memory-swap-max", "0", "--", "/bin/sh",
       "-c", "x=$(head -c 100000000 /dev/zero | tr '\\0' a)"});
  CHECK_MESSAGE(hog.exit_code == 137, hog.err);
  CHECK(hog.err.find("OOM") != std::string::npos);
  // The first run asked the pool for a blank of its namespaces; this one
  // takes it. cgroup v2 cannot rename, so the cell gets a new cgroup and
  // the blank's init moves into it.
  testing::CommandResult pooled =
      guest.Cli({"run", "--isolate", "pid,mount,uts,ipc", "--memory-max", "48M",
                 "--name", "pooled", "--", "/bin/sh", "-c",
                 "hostname; cat /proc/self/cgroup /proc/1/cgroup "
                 "/sys/fs/cgroup/mycel/pooled/memory.max"});
  CHECK_MESSAGE(pooled.exit_code == 0, pooled.err);
  CHECK(pooled.out == "pooled\n0::/mycel/pooled\n0::/mycel/pooled\n50331648\n");
  CHECK(guest.Console().find("from_pool=true") != std::string::npos);
  // PID 1 mounted cgroup2 with favordynmods (the guest kernel has it), so
  // a start's move into its cgroup does not wait for an RCU grace period.
  testing::CommandResult mounts = guest.Cli(
      {"run", "--", "/bin/sh", "-c", "grep ' cgroup2 ' /proc/mounts"});
  CHECK_MESSAGE(mounts.exit_code == 0, mounts.err);
  CHECK(absl::StartsWith(mounts.out, "cgroup2 /sys/fs/cgroup cgroup2 "));
  CHECK(mounts.out.find("nsdelegate") != std::string::npos);
  CHECK(mounts.out.find("favordynmods") != std::string::npos);
  testing::CommandResult cells = guest.Cli({"-o", "json", "cell", "ls"});
  CHECK(cells.exit_code == 0);

  ShutdownAndCheck(guest, {}, "reboot: Power down");
}

TEST_CASE("the cgroup v2 driver's kernel tests pass on the guest's cgroup2") {
  // The host here is cgroup v1/hybrid; the guest kernel mounts a pure
  // cgroup2. The same real-kernel tests that run on the host's v1 run here,
  // inside a cell (no seccomp filter, all capabilities, and writable system
  // paths: the tests create cgroups and fork bombs of their own).
  TempDir dir;
  Guest guest(ImageDir(), dir.Sub("console.log"));
  BootAndWaitHealthy(guest);
  testing::CommandResult r = guest.Cli(
      {"run", "--seccomp", "none", "--cap", "all", "--writable-system-paths",
       "--", "/usr/libexec/mycel/cgroup_v2_kernel_test"});
  CHECK_MESSAGE(r.exit_code == 0, r.out, r.err);
  CHECK(r.out.find("Status: SUCCESS!") != std::string::npos);
  CHECK(r.out.find("skipped:") == std::string::npos);  // no case skipped itself
  // On cgroup v2, as on the host's v1 (tests/adversarial/escape_test), no
  // cell leaves its cgroup or raises its limits unless it asks for
  // writable system paths.
  for (const std::vector<std::string>& flags :
       std::vector<std::vector<std::string>>{{},
                                             {"--isolate", "pid,mount,uts,ipc"},
                                             {"--isolate", "all"},
                                             {"--isolate", "cgroup"}}) {
    std::vector<std::string> args = {"run", "--name", "esc", "--memory-max",
                                     "32M"};
    args.insert(args.end(), flags.begin(), flags.end());
    args.insert(args.end(),
                {"--", "sh", "-c",
                 "echo $$ > /sys/fs/cgroup/cgroup.procs 2>/dev/null && echo "
                 "escaped; echo max > /sys/fs/cgroup/mycel/esc/memory.max "
                 "2>/dev/null && echo raised; v=$(cat /proc/sys/vm/swappiness);"
                 " echo $v > /proc/sys/vm/swappiness 2>/dev/null && echo "
                 "sysctl; echo done"});
    testing::CommandResult esc = guest.Cli(args);
    CHECK_MESSAGE(esc.out == "done\n", flags.size(), ": ", esc.out, esc.err);
  }
  ShutdownAndCheck(guest, {}, "reboot: Power down");
}

TEST_CASE("node shutdown --reboot restarts the guest (QEMU -no-reboot ends)") {
  TempDir dir;
  Guest guest(ImageDir(), dir.Sub("console.log"));
  BootAndWaitHealthy(guest);
  ShutdownAndCheck(guest, {"--reboot"}, "reboot: Restarting system");
}

}  // namespace
}  // namespace mycel
