// Replicated state across five real myceld, each in its own network
// namespace (as in membership_netns_test.cc: the bridges live in a sixth,
// "hub" namespace, so that nothing is added to the host's own network), in
// a mesh made the way an operator makes one: `mesh init` on node1, then a
// join token and `mesh join` for each other node, with no seeds. Asserts
// what an operator sees through the CLI (`mycel state`, `mycel -o json
// state ls`, `mycel -o json mesh members`):
//   - a write on one node is readable on all five, within a bound;
//   - during a partition ({node1, node2} | {node3, node4, node5}) both sides
//     keep accepting writes to the same keys; once it ends, all five hold
//     identical state, each key the write with the highest (HLC, origin);
//   - kill -9 of a node in a burst of writes to it loses no acknowledged
//     write, on it or elsewhere, and its writes after the restart take new
//     sequence numbers and replicate;
//   - a node stopped (SIGSTOP) while the others take 200 writes catches up
//     once continued, and every member's replication_behind goes to 0.
// The cases share one mesh (forming it costs seconds) and run in order;
// each starts by waiting for all five to be alive. Needs root and `ip
// netns`; skipped with the reason otherwise.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "daemon/store/objects.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "mycel/v1/membership.pb.h"
#include "mycel/v1/state.pb.h"
#include "tests/testing/netns.h"
#include "tests/testing/process.h"
#include "tests/testing/requires.h"

namespace mycel {
namespace {

constexpr int kNodes = 5;
constexpr int kPort = 7946;
constexpr char kEnv[] = "/usr/bin/env";

// The bounds are a few times what the protocol implies, for a loaded
// 2-core machine; each case prints what it measured.
//
// Joining is a TLS handshake and a certificate per node, then one
// push-pull and gossip rounds (membership_netns_test allows 20 s).
constexpr absl::Duration kJoinBound = absl::Seconds(30);
// A put is pushed at once to 3 live peers, which pass it on (about 40 ms
// here); a push that missed a node is repaired by anti-entropy, every 2 s:
// 10 s is five rounds of it.
constexpr absl::Duration kVisibleBound = absl::Seconds(10);
// Right after the mesh forms, replication may not know every member yet:
// it polls membership every 200 ms, and until then its pushes skip the
// members it has not seen and it drops its answers to their digests, so
// the first write may travel by anti-entropy alone, one random peer per
// node per 2 s round. With a 1 s poll this measured 0.3 to 6 s; with
// 200 ms, 65 ms. The bound stays ten rounds.
constexpr absl::Duration kFirstWriteBound = absl::Seconds(20);
// Membership suspects an unreachable member after a failed probe and its
// indirect probes (1 s probe interval, 4 members to go through).
constexpr absl::Duration kNoticeBound = absl::Seconds(30);
// After a partition: the members on the other side are suspect (they
// refute at once) or, if the cut lasted past the suspicion timeout (4 to
// 24 s), dead, and retried every 10 s (membership_netns_test allows 60 s
// for that); then a digest exchange (2 s rounds) moves what each side
// lacks.
constexpr absl::Duration kHealBound = absl::Seconds(75);
// A restarted or continued node: alive again, then anti-entropy.
constexpr absl::Duration kCatchUpBound = absl::Seconds(40);
// replication_behind is from each member's last digest; a node exchanges
// digests with one random peer per 2 s round, so hearing from all four
// takes about 8 s on average.
constexpr absl::Duration kBehindBound = absl::Seconds(45);

MYCEL_TEST_REQUIRES(testing::NetnsUnavailable("mycel-repl-probe-"));

using testing::Must;

// Five nodes at 10.214.0.N. Every node's link is on br0; a partition moves
// one side's links to br1, so that each side still reaches its own
// members.
class Network : public testing::BridgeNet {
 public:
  Network()
      : BridgeNet({.prefix = "mycel-repl-",
                   .subnet = "10.214.0.",
                   .nodes = kNodes,
                   .port = kPort,
                   .bridges = {"br0", "br1"}}) {}
};

// Cuts `side` off from the rest (their links on br1) from Cut() until
// Heal() or destruction.
class Partition {
 public:
  Partition(const Network& net, std::vector<int> side)
      : net_(net), side_(std::move(side)) {}
  Partition(const Partition&) = delete;
  Partition& operator=(const Partition&) = delete;
  ~Partition() { Heal(); }
  // The first error, or "".
  std::string Cut() {
    cut_ = true;
    for (int i : side_) {
      std::string error = net_.Attach(i, "br1");
      if (!error.empty()) return error;
    }
    return "";
  }
  // Puts every link back on br0; the first error, or "".
  std::string Heal() {
    std::string first;
    if (!cut_) return first;
    cut_ = false;
    for (int i : side_) {
      std::string error = net_.Attach(i, "br0");
      if (first.empty()) first = error;
    }
    return first;
  }

 private:
  const Network& net_;
  std::vector<int> side_;
  bool cut_ = false;
};

std::string NodeName(int i) { return absl::StrCat("node", i); }

// One key of `mycel -o json state ls`, without the node-local revision.
struct Entry {
  std::string value;
  std::string version;
  std::string origin;
  int64_t seq = 0;
  uint64_t hlc = 0;
  bool operator==(const Entry&) const = default;
};
using Listing = std::map<std::string, Entry>;

// Five myceld in their namespaces, in one mesh. The CLI runs on the host
// (it talks to a node over its unix socket) with a config directory of the
// test's own, where `mesh init` writes the admin's credentials.
class Cluster {
 public:
  Cluster() : config_(root_.Sub("config")) {
    for (int i = 1; i <= kNodes; ++i) {
      const std::string dir = root_.Sub(absl::StrCat("repl", i));
      REQUIRE(mkdir(dir.c_str(), 0700) == 0);
      auto d = std::make_unique<testing::DaemonProcess>(
          dir, std::vector<std::string>{"--node-name", NodeName(i), "--listen",
                                        net_.address(i), "--cell-pool", "0"});
      d->set_wrapper(net_.Enter(i));
      daemons_.push_back(std::move(d));
    }
  }
  Cluster(const Cluster&) = delete;
  Cluster& operator=(const Cluster&) = delete;
  ~Cluster() {
    // Every daemon stops at once rather than one after the other; each
    // DaemonProcess then reaps its own.
    for (auto& d : daemons_) {
      if (d->pid() > 0) {
        kill(d->pid(), SIGCONT);
        kill(d->pid(), SIGTERM);
      }
    }
  }

  // Starts the five and makes the mesh: init on node1, a token for each
  // other node, which joins through node1.
  void Form() {
    for (auto& d : daemons_) REQUIRE_MESSAGE(d->Start(), d->Log());
    testing::CommandResult init = Cli(1, {"mesh", "init", "--name", "repl"});
    REQUIRE_MESSAGE(init.exit_code == 0, init.err);
    for (int i = 2; i <= kNodes; ++i) {
      testing::CommandResult token = Cli(1, {"mesh", "token", "create"});
      REQUIRE_MESSAGE(token.exit_code == 0, token.err);
      testing::CommandResult join =
          Cli(i, {"mesh", "join", net_.address(1), "--token",
                  std::string(absl::StripAsciiWhitespace(token.out))});
      REQUIRE_MESSAGE(join.exit_code == 0, NodeName(i), ": ", join.err);
    }
    const absl::Time start = absl::Now();
    REQUIRE_MESSAGE(AllAlive(kJoinBound), Describe());
    MESSAGE("5 nodes joined; all alive everywhere ",
            absl::FormatDuration(absl::Now() - start), " after the last join");
  }

  const Network& net() const { return net_; }
  testing::DaemonProcess& daemon(int i) { return *daemons_[i - 1]; }

  // The mycel CLI against node i.
  testing::CommandResult Cli(int i, const std::vector<std::string>& args) {
    std::vector<std::string> argv = {kEnv,
                                     "-u",
                                     "MYCEL_CONFIG",
                                     "XDG_CONFIG_HOME=" + config_,
                                     testing::Binary("mycel"),
                                     "--socket",
                                     daemon(i).socket()};
    argv.insert(argv.end(), args.begin(), args.end());
    return testing::Run(argv);
  }

  // `mycel -o json mesh members` on node i, by name; nullopt on failure.
  std::optional<std::map<std::string, mycel::v1::Member>> Members(int i) {
    testing::CommandResult r = Cli(i, {"-o", "json", "mesh", "members"});
    if (r.exit_code != 0) return std::nullopt;
    mycel::v1::ListMembersResponse resp;
    if (!google::protobuf::util::JsonStringToMessage(r.out, &resp).ok()) {
      return std::nullopt;
    }
    std::map<std::string, mycel::v1::Member> out;
    for (const auto& m : resp.members()) out[m.name()] = m;
    return out;
  }

  // Whether node i sees each of `nodes` as alive (or, with `alive` false,
  // as anything but alive).
  bool Sees(int i, const std::vector<int>& nodes, bool alive) {
    auto members = Members(i);
    if (!members.has_value()) return false;
    for (int n : nodes) {
      auto it = members->find(NodeName(n));
      const bool is_alive = it != members->end() &&
                            it->second.state() == mycel::v1::MEMBER_STATE_ALIVE;
      if (is_alive != alive) return false;
    }
    return true;
  }

  // Waits until every node sees all five alive.
  bool AllAlive(absl::Duration limit);

  // `mycel -o json state ls PREFIX` on node i; nullopt on failure.
  std::optional<Listing> Ls(int i, const std::string& prefix) {
    testing::CommandResult r = Cli(i, {"-o", "json", "state", "ls", prefix});
    if (r.exit_code != 0) return std::nullopt;
    mycel::v1::ListStateResponse resp;
    if (!google::protobuf::util::JsonStringToMessage(r.out, &resp).ok()) {
      return std::nullopt;
    }
    Listing out;
    for (const auto& o : resp.objects()) {
      out[o.key()] =
          Entry{o.value(), o.version(), o.origin(), o.seq(), o.hlc()};
    }
    return out;
  }

  // Every node's `mesh members` table and the end of its log; the table
  // of none in `stopped` (the CLI would wait for them).
  std::string Describe(const std::vector<int>& stopped = {}) {
    std::string out;
    for (int i = 1; i <= kNodes; ++i) {
      testing::CommandResult r;
      if (std::find(stopped.begin(), stopped.end(), i) == stopped.end()) {
        r = Cli(i, {"mesh", "members"});
      }
      std::string log = daemon(i).Log();
      if (log.size() > 3000) log = "..." + log.substr(log.size() - 3000);
      absl::StrAppend(&out, "--- ", NodeName(i), " (exit ", r.exit_code, ")\n",
                      r.out, r.err, "log:\n", log, "\n");
    }
    return out;
  }

 private:
  testing::TempDir root_;
  Network net_;
  std::string config_;
  std::vector<std::unique_ptr<testing::DaemonProcess>> daemons_;
};

// Polls `done` every 100 ms; the time it took, or nullopt at `limit`.
std::optional<absl::Duration> WaitFor(const std::function<bool()>& done,
                                      absl::Duration limit) {
  const absl::Time start = absl::Now();
  while (absl::Now() - start < limit) {
    if (done()) return absl::Now() - start;
    absl::SleepFor(absl::Milliseconds(100));
  }
  return std::nullopt;
}

bool Cluster::AllAlive(absl::Duration limit) {
  const std::vector<int> all = {1, 2, 3, 4, 5};
  return WaitFor(
             [&] {
               for (int i = 1; i <= kNodes; ++i) {
                 if (!Sees(i, all, true)) return false;
               }
               return true;
             },
             limit)
      .has_value();
}

// The one mesh the cases share, formed by the first case that runs; it
// goes (daemons stopped, namespaces deleted) when the binary exits.
Cluster& TheMesh() {
  static std::unique_ptr<Cluster> cluster;
  static bool tried = false;
  if (!tried) {
    tried = true;
    auto made = std::make_unique<Cluster>();
    made->Form();
    cluster = std::move(made);
  }
  REQUIRE_MESSAGE(cluster != nullptr,
                  "the mesh could not be formed: see the first case");
  // (A case before may have ended with members dead to each other.)
  REQUIRE_MESSAGE(cluster->AllAlive(kHealBound), cluster->Describe());
  return *cluster;
}

// Whether `nodes` all list the same objects under `prefix` (revisions
// aside: they are node-local), and that listing has `keys` keys.
bool SameListing(Cluster& c, const std::vector<int>& nodes,
                 const std::string& prefix, size_t keys,
                 Listing* out = nullptr) {
  std::optional<Listing> first;
  for (int i : nodes) {
    std::optional<Listing> l = c.Ls(i, prefix);
    if (!l.has_value() || l->size() != keys) return false;
    if (!first.has_value()) {
      first = std::move(l);
    } else if (*l != *first) {
      return false;
    }
  }
  if (out != nullptr) *out = *first;
  return true;
}

std::string Show(const Listing& l) {
  std::string out;
  for (const auto& [key, e] : l) {
    absl::StrAppend(&out, key, " = ", e.value, " (", e.version, ", hlc ", e.hlc,
                    ")\n");
  }
  return out;
}

// Every node's listing of `prefix`, for a failure message.
std::string ShowAll(Cluster& c, const std::string& prefix) {
  std::string out;
  for (int i = 1; i <= kNodes; ++i) {
    std::optional<Listing> l = c.Ls(i, prefix);
    absl::StrAppend(&out, "--- ", NodeName(i), "\n",
                    l.has_value() ? Show(*l) : "(ls failed)\n");
  }
  return out;
}

// Waits until every node sees every other with replication_behind 0; the
// time it took, or nullopt.
std::optional<absl::Duration> WaitNoneBehind(Cluster& c, std::string* last) {
  return WaitFor(
      [&] {
        last->clear();
        bool ok = true;
        for (int i = 1; i <= kNodes; ++i) {
          auto members = c.Members(i);
          if (!members.has_value()) return false;
          for (int n = 1; n <= kNodes; ++n) {
            if (n == i) continue;
            auto it = members->find(NodeName(n));
            const int64_t behind =
                it == members->end() ? -2 : it->second.replication_behind();
            if (behind != 0) {
              ok = false;
              absl::StrAppend(last, NodeName(i), " says ", NodeName(n),
                              " is behind by ", behind, "\n");
            }
          }
        }
        return ok;
      },
      kBehindBound);
}

// The seq of a version "origin:seq@hlc", or -1.
int64_t SeqOf(const std::string& version) {
  absl::StatusOr<store::ObjectVersion> v =
      store::ObjectVersion::Parse(version, "version");
  return v.ok() ? v->seq : -1;
}

TEST_CASE("a write on one node is readable on all five") {
  Cluster& c = TheMesh();
  // One write from each node in turn; the first comes right after the
  // mesh formed.
  for (int from : {3, 1, 2, 4, 5}) {
    CAPTURE(from);
    const absl::Duration bound = from == 3 ? kFirstWriteBound : kVisibleBound;
    const std::string key = absl::StrCat("hello/", NodeName(from));
    const std::string value = absl::StrCat(R"({"from": ")", from, R"("})");
    testing::CommandResult put = c.Cli(from, {"state", "put", key, value});
    const absl::Time written = absl::Now();
    REQUIRE_MESSAGE(put.exit_code == 0, put.err);
    CHECK(put.out.rfind(NodeName(from) + ":", 0) == 0);
    // When each node first answered the value, polled as fast as the CLI
    // goes.
    std::map<int, absl::Duration> seen;
    std::optional<absl::Duration> everywhere = WaitFor(
        [&] {
          for (int i = 1; i <= kNodes; ++i) {
            if (seen.count(i)) continue;
            testing::CommandResult get = c.Cli(i, {"state", "get", key});
            if (get.exit_code == 0 && get.out == value + "\n") {
              seen[i] = absl::Now() - written;
            }
          }
          return seen.size() == kNodes;
        },
        bound);
    REQUIRE_MESSAGE(everywhere.has_value(), ShowAll(c, "hello/"));
    std::string each;
    for (const auto& [i, t] : seen) {
      absl::StrAppend(&each, " ", NodeName(i), " ", absl::FormatDuration(t));
    }
    MESSAGE("a put on ", NodeName(from), " was readable on all 5 after ",
            absl::FormatDuration(*everywhere), " (first read per node:", each,
            "; bound ", absl::FormatDuration(bound), ")");
  }
  // The same objects everywhere: values, versions and stamps.
  CHECK_MESSAGE(SameListing(c, {1, 2, 3, 4, 5}, "hello/", kNodes),
                ShowAll(c, "hello/"));
}

// One write a side makes during the partition.
struct Write {
  int node = 0;
  std::string key;
  std::string value;  // empty: a delete
  testing::CommandResult result;
};

// Runs `writes` in order (the CLI against each one's node), filling in
// their results.
void RunWrites(Cluster& c, std::vector<Write>* writes) {
  for (Write& w : *writes) {
    w.result = w.value.empty()
                   ? c.Cli(w.node, {"state", "del", w.key})
                   : c.Cli(w.node, {"state", "put", w.key, w.value});
  }
}

TEST_CASE("a partition: both sides take writes to the same keys, then agree") {
  Cluster& c = TheMesh();
  const std::vector<int> left = {1, 2};
  const std::vector<int> right = {3, 4, 5};
  const std::vector<int> all = {1, 2, 3, 4, 5};
  constexpr int kShared = 8;  // keys both sides write
  // Before: two keys everywhere, which the left side will delete (and the
  // right side will also write one of them).
  REQUIRE(c.Cli(1, {"state", "put", "p/gone", "\"before\""}).exit_code == 0);
  REQUIRE(c.Cli(1, {"state", "put", "p/clash", "\"before\""}).exit_code == 0);
  REQUIRE_MESSAGE(
      WaitFor([&] { return SameListing(c, all, "p/", 2); }, kVisibleBound)
          .has_value(),
      ShowAll(c, "p/"));

  std::vector<Write> left_writes;
  std::vector<Write> right_writes;
  for (int k = 0; k < kShared; ++k) {
    const std::string key = absl::StrCat("p/", k);
    // Each side spreads its writes over its nodes.
    left_writes.push_back({left[k % left.size()],
                           key,
                           absl::StrCat(R"({"side": "left", "k": )", k, "}"),
                           {}});
    right_writes.push_back({right[k % right.size()],
                            key,
                            absl::StrCat(R"({"side": "right", "k": )", k, "}"),
                            {}});
  }
  left_writes.push_back({2, "p/left-only", "\"left\"", {}});
  right_writes.push_back({4, "p/right-only", "\"right\"", {}});
  left_writes.push_back({1, "p/gone", "", {}});
  left_writes.push_back({2, "p/clash", "", {}});
  right_writes.push_back({5, "p/clash", "\"right\"", {}});

  Listing left_view;
  Listing right_view;
  uint64_t tombstone_hlc = 0;
  std::string tombstone_origin;
  absl::Time healed_at;
  {
    Partition cut(c.net(), right);
    const std::string cut_error = cut.Cut();
    REQUIRE_MESSAGE(cut_error.empty(), cut_error);
    // Each side notices (the others are suspect or dead to it) before
    // writing, so that no write gets across and replication treats the
    // other side as away.
    std::optional<absl::Duration> noticed = WaitFor(
        [&] {
          for (int i : left) {
            if (!c.Sees(i, right, false)) return false;
          }
          for (int i : right) {
            if (!c.Sees(i, left, false)) return false;
          }
          return true;
        },
        kNoticeBound);
    REQUIRE_MESSAGE(noticed.has_value(), c.Describe());
    MESSAGE(
        "partition {1,2} | {3,4,5}: each side saw the other not alive "
        "after ",
        absl::FormatDuration(*noticed));

    // Both sides write the same keys at the same time.
    {
      std::jthread left_writer([&] { RunWrites(c, &left_writes); });
      std::jthread right_writer([&] { RunWrites(c, &right_writes); });
    }
    // Offline operation: every write was accepted.
    for (const std::vector<Write>* side : {&left_writes, &right_writes}) {
      for (const Write& w : *side) {
        CHECK_MESSAGE(w.result.exit_code == 0, NodeName(w.node), " ",
                      w.value.empty() ? "del " : "put ", w.key, ": ",
                      w.result.err);
      }
    }
    // Each side converges on its own: left holds p/0-7, left-only and
    // nothing of the right; right holds p/0-7, right-only, p/clash (the
    // delete never reached it) and p/gone.
    std::optional<absl::Duration> sides = WaitFor(
        [&] {
          return SameListing(c, left, "p/", kShared + 1, &left_view) &&
                 SameListing(c, right, "p/", kShared + 3, &right_view);
        },
        kVisibleBound);
    REQUIRE_MESSAGE(sides.has_value(), ShowAll(c, "p/"));
    for (int k = 0; k < kShared; ++k) {
      const std::string key = absl::StrCat("p/", k);
      CHECK(left_view[key].value == left_writes[k].value);
      CHECK(right_view[key].value == right_writes[k].value);
    }
    CHECK(left_view.count("p/left-only") == 1);
    CHECK(right_view.count("p/left-only") == 0);
    CHECK(right_view.count("p/right-only") == 1);
    CHECK(right_view["p/clash"].value == "\"right\"");
    CHECK(right_view["p/gone"].value == "\"before\"");
    // The stamp of the left side's delete of p/clash, from its change log.
    const Write& del = left_writes.back();
    REQUIRE(del.key == "p/clash");
    const std::string version(absl::StripAsciiWhitespace(del.result.out));
    tombstone_origin = NodeName(del.node);
    REQUIRE(version.rfind(tombstone_origin + ":", 0) == 0);
    // (As text: an HLC has more bits than a JSON number keeps.)
    testing::CommandResult q = c.Cli(
        del.node,
        {"-o", "json", "query",
         absl::StrCat("SELECT CAST(hlc AS TEXT) AS hlc FROM changes WHERE "
                      "origin = '",
                      tombstone_origin, "' AND seq = ", SeqOf(version))});
    REQUIRE_MESSAGE(q.exit_code == 0, q.err);
    google::protobuf::ListValue rows;
    REQUIRE_MESSAGE(
        google::protobuf::util::JsonStringToMessage(q.out, &rows).ok(), q.out);
    REQUIRE_MESSAGE(rows.values_size() == 1, q.out);
    const auto& fields = rows.values(0).struct_value().fields();
    REQUIRE_MESSAGE(fields.count("hlc") == 1, q.out);
    REQUIRE(absl::SimpleAtoi(fields.at("hlc").string_value(), &tombstone_hlc));
    REQUIRE(tombstone_hlc > 0);

    const std::string error = cut.Heal();
    REQUIRE_MESSAGE(error.empty(), error);
    healed_at = absl::Now();
  }

  // After: all five hold the same objects, every key in it. (Each side
  // holds its own side's writes, so five identical listings can only be
  // the merge of both.)
  Listing merged;
  std::optional<absl::Duration> converged = WaitFor(
      [&] {
        std::optional<Listing> l = c.Ls(1, "p/");
        if (!l.has_value() || l->count("p/right-only") == 0) return false;
        return SameListing(c, all, "p/", l->size(), &merged);
      },
      kHealBound);
  REQUIRE_MESSAGE(converged.has_value(), ShowAll(c, "p/"), c.Describe());
  MESSAGE("after the partition ended, all 5 held identical state after ",
          absl::FormatDuration(absl::Now() - healed_at), " (bound ",
          absl::FormatDuration(kHealBound), ")");

  // Last writer wins on (HLC, origin): each key holds whichever of the two
  // writes has the higher stamp, on every node.
  int left_won = 0;
  int ties = 0;
  for (int k = 0; k < kShared; ++k) {
    const std::string key = absl::StrCat("p/", k);
    CAPTURE(key);
    const Entry& l = left_view[key];
    const Entry& r = right_view[key];
    const bool left_wins =
        std::tie(l.hlc, l.origin) > std::tie(r.hlc, r.origin);
    left_won += left_wins;
    ties += l.hlc == r.hlc;
    REQUIRE(merged.count(key) == 1);
    CHECK(merged[key] == (left_wins ? l : r));
  }
  MESSAGE("the left side's write won ", left_won, " of ", kShared,
          " contested keys (", ties,
          " of them stamped in the same "
          "millisecond by both sides, decided by the origin)");
  CHECK(merged["p/left-only"] == left_view["p/left-only"]);
  CHECK(merged["p/right-only"] == right_view["p/right-only"]);
  // Deleted on one side only: gone everywhere.
  CHECK(merged.count("p/gone") == 0);
  // Deleted on the left, written on the right: the later stamp wins.
  const Entry& put = right_view["p/clash"];
  const bool delete_wins =
      std::tie(tombstone_hlc, tombstone_origin) > std::tie(put.hlc, put.origin);
  MESSAGE("p/clash: the delete ", std::string(delete_wins ? "won" : "lost"),
          " against the put");
  if (delete_wins) {
    CHECK(merged.count("p/clash") == 0);
  } else {
    CHECK(merged["p/clash"] == put);
  }
  CHECK(merged.size() == kShared + 2 + (delete_wins ? 0 : 1));

  std::string behind;
  std::optional<absl::Duration> none_behind = WaitNoneBehind(c, &behind);
  CHECK_MESSAGE(none_behind.has_value(), behind);
  if (none_behind.has_value()) {
    MESSAGE("every member's replication_behind was 0 on every node ",
            absl::FormatDuration(*none_behind), " after that");
  }
}

TEST_CASE("kill -9 in a burst of writes loses no acknowledged write") {
  Cluster& c = TheMesh();
  constexpr int kX = 4;
  // Enough acknowledged puts that the kill lands in a stream of writes,
  // well after the first.
  constexpr int kBeforeKill = 40;
  constexpr int kMaxPuts = 2000;
  struct Acked {
    std::string key;
    std::string value;
    std::string version;
  };
  absl::Mutex mu;
  std::vector<Acked> acked;
  std::atomic<int> acks{0};
  testing::CommandResult failed;  // the first put that failed
  int attempts = 0;
  int killed = -1;
  {
    std::jthread writer([&](std::stop_token stop) {
      for (int i = 0; i < kMaxPuts && !stop.stop_requested(); ++i) {
        ++attempts;
        const std::string key = absl::StrCat("burst/", i);
        const std::string value = absl::StrCat(i);
        testing::CommandResult r = c.Cli(kX, {"state", "put", key, value});
        if (r.exit_code != 0) {
          failed = r;
          return;
        }
        absl::MutexLock lock(&mu);
        acked.push_back(
            {key, value, std::string(absl::StripAsciiWhitespace(r.out))});
        ++acks;
      }
    });
    std::optional<absl::Duration> going =
        WaitFor([&] { return acks >= kBeforeKill; }, absl::Seconds(60));
    REQUIRE(going.has_value());
    killed = c.daemon(kX).Signal(SIGKILL);
  }
  CHECK(killed == 128 + SIGKILL);
  // The writer stopped at a put that failed because the daemon was gone,
  // not because it ran out of puts.
  REQUIRE(attempts < kMaxPuts);
  CHECK(failed.exit_code != 0);
  int64_t last_acked_seq = 0;
  for (const Acked& a : acked) {
    REQUIRE(a.version.rfind(NodeName(kX) + ":", 0) == 0);
    last_acked_seq = std::max(last_acked_seq, SeqOf(a.version));
  }
  MESSAGE("node4 acknowledged ", acked.size(), " puts before kill -9 (",
          attempts, " attempted; the first failure: ",
          absl::StripAsciiWhitespace(failed.err), ")");

  // Restarted on the same state directory, it holds every acknowledged
  // put, at the version it acknowledged.
  REQUIRE_MESSAGE(c.daemon(kX).Start(), c.daemon(kX).Log());
  const absl::Time restarted = absl::Now();
  std::optional<Listing> mine = c.Ls(kX, "burst/");
  REQUIRE(mine.has_value());
  int survived = 0;
  for (const Acked& a : acked) {
    auto it = mine->find(a.key);
    const bool there = it != mine->end() && it->second.value == a.value &&
                       it->second.version == a.version;
    CHECK_MESSAGE(there, a.key, " (", a.version, ") lost on node4");
    survived += there;
  }
  MESSAGE(survived, " of ", acked.size(),
          " acknowledged puts were on node4 after its restart");
  // At most the one put in flight at the kill is there unacknowledged.
  CHECK(mine->size() <= acked.size() + 1);

  // And on every other node, once they converge.
  Listing everywhere;
  std::optional<absl::Duration> converged = WaitFor(
      [&] {
        return SameListing(c, {1, 2, 3, 4, 5}, "burst/", mine->size(),
                           &everywhere);
      },
      kCatchUpBound);
  REQUIRE_MESSAGE(converged.has_value(), ShowAll(c, "burst/"), c.Describe());
  CHECK(everywhere == *mine);
  MESSAGE("all 5 held the same ", everywhere.size(), " burst keys ",
          absl::FormatDuration(*converged), " after the restart");

  // Its next write takes a sequence number past every one it used before
  // (none reused), and reaches the others.
  REQUIRE(c.AllAlive(kCatchUpBound));
  testing::CommandResult after =
      c.Cli(kX, {"state", "put", "burst/after-restart", "true"});
  REQUIRE_MESSAGE(after.exit_code == 0, after.err);
  const std::string version(absl::StripAsciiWhitespace(after.out));
  int64_t highest_before = last_acked_seq;
  for (const auto& [key, e] : everywhere) {
    if (e.origin == NodeName(kX)) {
      highest_before = std::max(highest_before, e.seq);
    }
  }
  CHECK(version.rfind(NodeName(kX) + ":", 0) == 0);
  CHECK_MESSAGE(SeqOf(version) > highest_before, version, " reuses a seq (",
                highest_before, " was used before the kill)");
  std::optional<absl::Duration> reached = WaitFor(
      [&] {
        for (int i = 1; i <= kNodes; ++i) {
          std::optional<Listing> l = c.Ls(i, "burst/after-restart");
          if (!l.has_value() || l->size() != 1 ||
              l->begin()->second.version != version) {
            return false;
          }
        }
        return true;
      },
      kVisibleBound);
  CHECK_MESSAGE(reached.has_value(), ShowAll(c, "burst/after-restart"));
  MESSAGE(
      "node4's first put after its restart (", version, ") was on all 5 after ",
      reached.has_value() ? absl::FormatDuration(*reached) : "(never)", "; ",
      absl::FormatDuration(absl::Now() - restarted), " since the restart");
}

// Sends SIGCONT to a stopped daemon when it goes, so that a failed case
// does not leave it stopped.
class Continue {
 public:
  explicit Continue(pid_t pid) : pid_(pid) {}
  Continue(const Continue&) = delete;
  Continue& operator=(const Continue&) = delete;
  ~Continue() { Now(); }
  void Now() {
    if (pid_ > 0) kill(pid_, SIGCONT);
    pid_ = -1;
  }

 private:
  pid_t pid_;
};

TEST_CASE("a node stopped during 200 writes catches up once continued") {
  Cluster& c = TheMesh();
  constexpr int kY = 5;
  constexpr int kWriters = 4;  // nodes 1-4
  constexpr int kEach = 50;
  const pid_t pid = c.daemon(kY).pid();
  REQUIRE(pid > 0);
  REQUIRE(kill(pid, SIGSTOP) == 0);
  Continue resume(pid);
  const absl::Time stopped = absl::Now();

  // 200 puts, spread over the four others, all at once.
  std::vector<std::vector<Write>> writes(kWriters);
  for (int n = 1; n <= kWriters; ++n) {
    for (int j = 0; j < kEach; ++j) {
      writes[n - 1].push_back({n,
                               absl::StrCat("stop/", n, "/", j),
                               absl::StrCat(n * 1000 + j),
                               {}});
    }
  }
  {
    std::vector<std::jthread> writers;
    for (auto& w : writes) {
      writers.emplace_back([&c, &w] { RunWrites(c, &w); });
    }
  }
  const absl::Duration writing = absl::Now() - stopped;
  for (const auto& side : writes) {
    for (const Write& w : side) {
      CHECK_MESSAGE(w.result.exit_code == 0, NodeName(w.node), " put ", w.key,
                    ": ", w.result.err);
    }
  }
  // Stopped long enough that the four others noticed (node5 is away to
  // them, so they push it nothing), and that every push already sent to it
  // went past the transport's 5 s deadline: it must catch up by
  // anti-entropy, not from what waited in its sockets.
  const std::vector<int> others = {1, 2, 3, 4};
  std::optional<absl::Duration> noticed = WaitFor(
      [&] {
        for (int i : others) {
          if (!c.Sees(i, {kY}, false)) return false;
        }
        return absl::Now() - stopped > writing + absl::Seconds(6);
      },
      kNoticeBound);
  CHECK_MESSAGE(noticed.has_value(), c.Describe({kY}));
  resume.Now();
  const absl::Time continued = absl::Now();
  MESSAGE("node5 was stopped for ", absl::FormatDuration(continued - stopped),
          " (the 200 puts took ", absl::FormatDuration(writing), ")");

  Listing on_y;
  std::optional<absl::Duration> caught_up = WaitFor(
      [&] {
        std::optional<Listing> l = c.Ls(kY, "stop/");
        if (!l.has_value() || l->size() != kWriters * kEach) return false;
        on_y = std::move(*l);
        return true;
      },
      kCatchUpBound);
  REQUIRE_MESSAGE(caught_up.has_value(), ShowAll(c, "stop/"), c.Describe());
  MESSAGE("node5 held all 200 keys ", absl::FormatDuration(*caught_up),
          " after SIGCONT (bound ", absl::FormatDuration(kCatchUpBound), ")");
  for (const auto& side : writes) {
    for (const Write& w : side) {
      CHECK_MESSAGE(on_y[w.key].value == w.value, w.key);
      CHECK(on_y[w.key].version ==
            std::string(absl::StripAsciiWhitespace(w.result.out)));
    }
  }
  CHECK_MESSAGE(WaitFor(
                    [&] {
                      return SameListing(c, {1, 2, 3, 4, 5}, "stop/", 200);
                    },
                    kVisibleBound)
                    .has_value(),
                ShowAll(c, "stop/"));

  // The whole store (every case's keys) is the same on all five, and every
  // node says every member lacks nothing.
  std::optional<Listing> whole = c.Ls(1, "");
  REQUIRE(whole.has_value());
  CHECK_MESSAGE(WaitFor(
                    [&] {
                      return SameListing(c, {1, 2, 3, 4, 5}, "", whole->size());
                    },
                    kVisibleBound)
                    .has_value(),
                ShowAll(c, ""));
  std::string behind;
  std::optional<absl::Duration> none_behind = WaitNoneBehind(c, &behind);
  CHECK_MESSAGE(none_behind.has_value(), behind);
  if (none_behind.has_value()) {
    MESSAGE("every member's replication_behind was 0 on every node ",
            absl::FormatDuration(*none_behind), " later");
  }
}

}  // namespace
}  // namespace mycel
