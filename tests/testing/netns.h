// Network namespaces for tests that need several hosts on one machine:
// a "hub" namespace holds the bridges (so nothing is added to the host's
// own network, and its firewall never sees the traffic), and each node
// gets its own namespace with eth0, a veth whose other end is on a bridge
// in the hub. Everything is removed on destruction, also after a
// constructor that failed part way. Needs root and iproute2.
#ifndef MYCEL_TESTS_TESTING_NETNS_H_
#define MYCEL_TESTS_TESTING_NETNS_H_

#include <doctest/doctest.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tests/testing/process.h"

namespace mycel::testing {

inline constexpr char kIp[] = "/usr/sbin/ip";
inline constexpr char kTc[] = "/usr/sbin/tc";
inline constexpr char kNft[] = "/usr/sbin/nft";
inline constexpr char kNsenter[] = "/usr/bin/nsenter";

// Why network namespaces cannot be used here, or "" when they can (it
// adds and deletes one named `probe` plus the pid).
inline std::string NetnsUnavailable(const std::string& probe) {
  if (geteuid() != 0) return "needs root to create network namespaces";
  if (access(kIp, X_OK) != 0) return absl::StrCat(kIp, " is not installed");
  if (access(kNsenter, X_OK) != 0) {
    return absl::StrCat(kNsenter, " is not installed");
  }
  const std::string name = absl::StrCat(probe, getpid());
  CommandResult add = Run({kIp, "netns", "add", name});
  if (add.exit_code != 0) {
    return absl::StrCat("`ip netns add` fails: ", add.err);
  }
  Run({kIp, "netns", "del", name});
  return "";
}

// Runs argv; fails the test with its stderr when it fails.
inline void Must(const std::vector<std::string>& argv) {
  CommandResult r = Run(argv);
  REQUIRE_MESSAGE(r.exit_code == 0, absl::StrJoin(argv, " "), ": ", r.err);
}

// Namespaces deleted on destruction (deleting one deletes its interfaces).
class Namespaces {
 public:
  Namespaces() = default;
  Namespaces(const Namespaces&) = delete;
  Namespaces& operator=(const Namespaces&) = delete;
  ~Namespaces() {
    for (const std::string& n : names_) Run({kIp, "netns", "del", n});
  }
  void Add(const std::string& name) {
    Must({kIp, "netns", "add", name});
    names_.push_back(name);
  }

 private:
  std::vector<std::string> names_;
};

// Nodes 1..nodes at <subnet><i>/24 (subnet "10.213.0."), each with its link
// on the first of `bridges`.
class BridgeNet {
 public:
  struct Options {
    std::string prefix;  // of the namespaces' names; the pid is appended
    std::string subnet;
    int nodes = 0;
    int port = 0;  // address(i) is ip(i):port
    std::vector<std::string> bridges = {"br0"};
  };

  explicit BridgeNet(Options o)
      : options_(std::move(o)),
        prefix_(absl::StrCat(options_.prefix, getpid())) {
    namespaces_.Add(hub());
    for (const std::string& bridge : options_.bridges) {
      Must({kIp, "-n", hub(), "link", "add", bridge, "type", "bridge"});
      Must({kIp, "-n", hub(), "link", "set", bridge, "up"});
    }
    for (int i = 1; i <= options_.nodes; ++i) {
      namespaces_.Add(ns(i));
      Must({kIp, "-n", hub(), "link", "add", veth(i), "type", "veth", "peer",
            "name", "eth0", "netns", ns(i)});
      Must({kIp, "-n", hub(), "link", "set", veth(i), "master",
            options_.bridges.front()});
      Must({kIp, "-n", hub(), "link", "set", veth(i), "up"});
      Must({kIp, "-n", ns(i), "addr", "add", absl::StrCat(ip(i), "/24"), "dev",
            "eth0"});
      Must({kIp, "-n", ns(i), "link", "set", "eth0", "up"});
      Must({kIp, "-n", ns(i), "link", "set", "lo", "up"});
    }
  }

  std::string hub() const { return prefix_ + "-hub"; }
  std::string ns(int i) const { return absl::StrCat(prefix_, "-n", i); }
  static std::string veth(int i) { return absl::StrCat("h", i); }
  std::string ip(int i) const { return absl::StrCat(options_.subnet, i); }
  std::string address(int i) const {
    return absl::StrCat(ip(i), ":", options_.port);
  }
  // The command prefix that runs a program in node i's namespace.
  std::vector<std::string> Enter(int i) const {
    return {kNsenter, absl::StrCat("--net=/run/netns/", ns(i)), "--"};
  }
  // Takes node i's link down, or up again; the error, or "".
  std::string SetLink(int i, bool up) const {
    CommandResult r =
        Run({kIp, "-n", hub(), "link", "set", veth(i), up ? "up" : "down"});
    return r.exit_code == 0 ? "" : absl::StrCat("ip link set: ", r.err);
  }
  // Drops `percent` of the packets node i sends (0: none again). Every
  // packet between two nodes then has that chance of being lost once.
  // With tc netem on its eth0 where the kernel has it, else with an
  // nftables rule in the node's namespace that drops at random (numgen),
  // the same loss for a kernel built without sch_netem. The error, or "".
  std::string SetLoss(int i, int percent) const {
    CommandResult r =
        percent > 0
            ? Run({kTc, "-n", ns(i), "qdisc", "replace", "dev", "eth0", "root",
                   "netem", "loss", absl::StrCat(percent, "%")})
            : Run({kTc, "-n", ns(i), "qdisc", "del", "dev", "eth0", "root"});
    if (r.exit_code == 0) return "";
    const std::string netem = r.err;
    std::vector<std::string> nft = {kIp, "netns", "exec", ns(i), kNft};
    if (percent == 0) {
      nft.insert(nft.end(), {"delete", "table", "inet", "mycel_loss"});
      r = Run(nft);
      return r.exit_code == 0 ? "" : absl::StrCat("nft: ", r.err);
    }
    nft.insert(nft.end(),
               {absl::StrCat("add table inet mycel_loss; "
                             "add chain inet mycel_loss out { type filter "
                             "hook output priority 0; }; "
                             "add rule inet mycel_loss out numgen random mod "
                             "100 < ",
                             percent, " counter drop")});
    r = Run(nft);
    return r.exit_code == 0
               ? ""
               : absl::StrCat("tc netem: ", netem, "; nft: ", r.err);
  }
  // Packets that SetLoss dropped for node i so far (netem's or the rule's
  // counter), or -1 when none can be read.
  int64_t Dropped(int i) const {
    CommandResult r =
        Run({kTc, "-s", "-n", ns(i), "qdisc", "show", "dev", "eth0"});
    int64_t n = -1;
    if (r.exit_code == 0 && r.out.find("netem") != std::string::npos) {
      n = NumberAfter(r.out, "dropped ");
    }
    if (n < 0) {
      r = Run({kIp, "netns", "exec", ns(i), kNft, "list", "table", "inet",
               "mycel_loss"});
      if (r.exit_code == 0) n = NumberAfter(r.out, "packets ");
    }
    return n;
  }
  // Puts node i's link on `bridge`; the error, or "".
  std::string Attach(int i, const std::string& bridge) const {
    CommandResult r =
        Run({kIp, "-n", hub(), "link", "set", veth(i), "master", bridge});
    return r.exit_code == 0 ? "" : absl::StrCat("ip link set master: ", r.err);
  }

 private:
  // The decimal number after the first `label` in `text`, or -1.
  static int64_t NumberAfter(const std::string& text,
                             const std::string& label) {
    size_t at = text.find(label);
    if (at == std::string::npos) return -1;
    at += label.size();
    size_t end = at;
    while (end < text.size() && text[end] >= '0' && text[end] <= '9') ++end;
    if (end == at) return -1;
    return std::stoll(text.substr(at, end - at));
  }

  Options options_;
  std::string prefix_;
  Namespaces namespaces_;
};

}  // namespace mycel::testing

#endif  // MYCEL_TESTS_TESTING_NETNS_H_
