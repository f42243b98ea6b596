// MembershipDriver on a ManualClock with the in-process transport and a
// real state database per node: five nodes join through one seed and
// converge; a crashed node is declared dead by all; restarted from its
// store without a seed it is alive again at a higher incarnation, not a
// ghost; a graceful leave shows as left everywhere. Time is virtual, so the
// LAN profile runs as is and every figure is exact.
#include <doctest/doctest.h>

#include <boost/asio/io_context.hpp>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/store/store.h"
#include "mesh/membership/driver.h"
#include "mesh/membership/driver_loopback.h"
#include "mesh/membership/fake_signer.h"
#include "mesh/membership/member_store.h"
#include "runtime/manual_clock.h"
#include "tests/testing/process.h"

namespace mycel::membership {
namespace {

constexpr uint64_t kRealm = 3;

struct Node {
  std::string name;
  std::string address;
  std::unique_ptr<FakeSigner> signer;
  std::unique_ptr<store::Store> db;
  std::unique_ptr<MemberStore> members;
  std::unique_ptr<Transport> transport;
  std::unique_ptr<MembershipDriver> driver;
  // Events this node's driver reported, in order.
  std::vector<MemberEvent> events;
};

class Cluster {
 public:
  explicit Cluster(int n) : nodes_(n) {
    for (int i = 0; i < n; ++i) {
      Node& node = nodes_[i];
      node.name = absl::StrCat("node-", i);
      node.address = absl::StrCat("10.0.0.", i + 1, ":7946");
      node.signer = std::make_unique<FakeSigner>(kRealm, node.name);
    }
  }
  ~Cluster() {
    for (Node& n : nodes_) Crash(n);
  }

  ManualClock clock{absl::FromUnixSeconds(1'800'000'000)};
  boost::asio::io_context io;
  LoopbackNetwork net;

  Node& node(int i) { return nodes_[i]; }
  MembershipDriver& d(int i) { return *nodes_[i].driver; }
  int size() const { return static_cast<int>(nodes_.size()); }
  bool up(int i) const { return nodes_[i].driver != nullptr; }

  // Starts node i (again), restored from its store.
  void Start(int i) {
    Node& n = nodes_[i];
    absl::StatusOr<std::unique_ptr<store::Store>> db =
        store::Store::Open(dir_.Sub(n.name + ".db"));
    REQUIRE_MESSAGE(db.ok(), db.status().ToString());
    n.db = *std::move(db);
    n.members = std::make_unique<MemberStore>(n.db.get());
    n.transport = net.Endpoint(n.name, n.address);
    DriverOptions o;
    o.membership.config = Config::Lan();
    o.membership.name = n.name;
    o.membership.meta.addresses = {n.address};
    o.membership.meta.labels = {{"zone", absl::StrCat("z", i % 2)}};
    o.membership.random_seed = 1000 + i;
    o.membership.signer = n.signer.get();
    o.membership.verifier = &verifier_;
    o.clock = &clock;
    o.io = &io;
    o.transport = n.transport.get();
    o.store = n.members.get();
    absl::StatusOr<std::unique_ptr<MembershipDriver>> d =
        MembershipDriver::Start(std::move(o));
    REQUIRE_MESSAGE(d.ok(), d.status().ToString());
    n.driver = *std::move(d);
    n.driver->Subscribe([&n](const MemberEvent& e) { n.events.push_back(e); });
    MembershipDriver* driver = n.driver.get();
    net.SetCut(n.address, false);
    net.Attach(n.address, [driver](std::string from, std::string bytes) {
      driver->Deliver(std::move(from), std::move(bytes));
    });
  }

  // As a crash: the network drops everything to and from it, and nothing
  // more is written to its store.
  void Crash(Node& n) {
    if (n.driver == nullptr) return;
    net.SetCut(n.address, true);
    net.Detach(n.address);
    n.driver->Abort();
    n.driver.reset();
    n.transport.reset();
    n.members.reset();
    n.db.reset();
  }
  void Crash(int i) { Crash(nodes_[i]); }

  // Runs every timer and handler due up to now + d, each at its own time.
  void RunFor(absl::Duration d) {
    const absl::Time end = clock.Now() + d;
    for (;;) {
      io.restart();
      io.poll();
      const absl::Time next = clock.next_deadline();
      if (next > end) break;
      clock.Advance(std::max(absl::ZeroDuration(), next - clock.Now()));
    }
    clock.Advance(end - clock.Now());
    io.restart();
    io.poll();
  }

  // Runs in steps of 10 ms until `done` holds; returns the virtual time
  // it took, or nullopt after `limit`.
  std::optional<absl::Duration> RunUntil(const std::function<bool()>& done,
                                         absl::Duration limit) {
    const absl::Time start = clock.Now();
    while (clock.Now() - start <= limit) {
      if (done()) return clock.Now() - start;
      RunFor(absl::Milliseconds(10));
    }
    return std::nullopt;
  }

  // What node i holds about `name`.
  std::optional<MemberInfo> View(int i, const std::string& name) {
    return nodes_[i].driver->Find(name);
  }

  // Every up node sees every up node alive, at its current incarnation.
  bool Converged() {
    for (int i = 0; i < size(); ++i) {
      if (!up(i)) continue;
      for (int j = 0; j < size(); ++j) {
        if (!up(j)) continue;
        std::optional<MemberInfo> v = View(i, nodes_[j].name);
        if (!v.has_value() || v->state != MemberState::kAlive ||
            v->incarnation != d(j).incarnation()) {
          return false;
        }
      }
    }
    return true;
  }

  // Every up node other than `who` holds it in `state`.
  bool AllSee(int who, MemberState state) {
    for (int i = 0; i < size(); ++i) {
      if (i == who || !up(i)) continue;
      std::optional<MemberInfo> v = View(i, nodes_[who].name);
      if (!v.has_value() || v->state != state) return false;
    }
    return true;
  }

  bool AnySees(int who, MemberState state) {
    for (int i = 0; i < size(); ++i) {
      if (i == who || !up(i)) continue;
      std::optional<MemberInfo> v = View(i, nodes_[who].name);
      if (v.has_value() && v->state == state) return true;
    }
    return false;
  }

  int CountEvents(int i, MemberEventKind kind, const std::string& name) {
    int n = 0;
    for (const MemberEvent& e : nodes_[i].events) {
      n += e.kind == kind && e.name == name;
    }
    return n;
  }

  // Node 0 starts alone; the others join through it.
  void StartAndJoin() {
    Start(0);
    for (int i = 1; i < size(); ++i) {
      Start(i);
      d(i).Join({nodes_[0].address});
    }
  }

 private:
  testing::TempDir dir_;
  FakeVerifier verifier_{kRealm};
  std::vector<Node> nodes_;
};

TEST_CASE("profiles: lan and wan are memberlist's, anything else is refused") {
  absl::StatusOr<Config> lan = ProfileByName("lan");
  REQUIRE(lan.ok());
  CHECK(lan->probe_interval == absl::Seconds(1));
  CHECK(lan->probe_timeout == absl::Milliseconds(500));
  CHECK(lan->indirect_checks == 3);
  CHECK(lan->suspicion_mult == 4);
  CHECK(lan->gossip_interval == absl::Milliseconds(200));
  CHECK(lan->gossip_nodes == 3);
  CHECK(lan->push_pull_interval == absl::Seconds(30));
  CHECK(lan->retransmit_mult == 4);
  absl::StatusOr<Config> wan = ProfileByName("wan");
  REQUIRE(wan.ok());
  CHECK(wan->probe_interval == absl::Seconds(5));
  CHECK(wan->probe_timeout == absl::Seconds(3));
  CHECK(wan->suspicion_mult == 6);
  CHECK(wan->gossip_interval == absl::Milliseconds(500));
  CHECK(wan->gossip_nodes == 4);
  CHECK(wan->push_pull_interval == absl::Seconds(60));
  CHECK(wan->gossip_to_the_dead_time == absl::Seconds(60));
  CHECK(ValidateConfig(*wan).ok());
  absl::StatusOr<Config> bad = ProfileByName("LAN ");
  CHECK(bad.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(bad.status().message().find("membership_profile") != std::string::npos);
}

TEST_CASE("the driver refuses missing clock, io or transport") {
  DriverOptions o;
  absl::StatusOr<std::unique_ptr<MembershipDriver>> d =
      MembershipDriver::Start(std::move(o));
  CHECK(d.status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("deliveries are bounded and bad bytes are counted, not fatal") {
  ManualClock clock(absl::FromUnixSeconds(1'800'000'000));
  boost::asio::io_context io;
  LoopbackNetwork net;
  std::unique_ptr<Transport> transport = net.Endpoint("self", "self:1");
  FakeSigner signer(kRealm, "self");
  FakeVerifier verifier(kRealm);
  DriverOptions o;
  o.membership.name = "self";
  o.membership.meta.addresses = {"self:1"};
  o.membership.signer = &signer;
  o.membership.verifier = &verifier;
  o.clock = &clock;
  o.io = &io;
  o.transport = transport.get();
  o.max_queued_deliveries = 100;
  absl::StatusOr<std::unique_ptr<MembershipDriver>> d =
      MembershipDriver::Start(std::move(o));
  REQUIRE(d.ok());
  io.poll();
  // A flood while the loop is busy: only the first 100 wait for it.
  for (int i = 0; i < 150; ++i) (*d)->Deliver("peer", "\xff\xff not a message");
  CHECK((*d)->Stats().deliveries_dropped == 50);
  io.restart();
  io.poll();
  const DriverStats s = (*d)->Stats();
  CHECK(s.messages_received == 100);
  CHECK(s.messages_rejected == 100);
  CHECK(s.membership.rejected_malformed == 100);
  // The queue drained: new messages are taken again.
  (*d)->Deliver("peer", "junk");
  io.restart();
  io.poll();
  CHECK((*d)->Stats().messages_received == 101);
  CHECK((*d)->Stats().deliveries_dropped == 50);
  CHECK((*d)->Members().size() == 1);
}

TEST_CASE("five drivers join through one seed and converge") {
  Cluster c(5);
  c.StartAndJoin();
  std::optional<absl::Duration> took =
      c.RunUntil([&] { return c.Converged(); }, absl::Seconds(10));
  REQUIRE(took.has_value());
  // The join push-pull gives each joiner the seed's view at once; the seed
  // gossips the later joiners to the earlier ones (every 200 ms, to 3).
  CHECK(*took <= absl::Seconds(2));
  MESSAGE("converged in " << absl::FormatDuration(*took));
  // Long enough for every node to probe each of its 4 members once.
  c.RunFor(absl::Seconds(5));
  REQUIRE(c.Converged());
  for (int i = 0; i < c.size(); ++i) {
    std::vector<MemberInfo> members = c.d(i).Members();
    REQUIRE(members.size() == 5);
    for (int j = 0; j < 5; ++j) {
      CHECK(members[j].name == c.node(j).name);
      CHECK(members[j].self == (i == j));
      REQUIRE(members[j].addresses.size() == 1);
      CHECK(members[j].addresses[0] == c.node(j).address);
      CHECK(members[j].labels ==
            std::vector<std::pair<std::string, std::string>>{
                {"zone", absl::StrCat("z", j % 2)}});
      // Each member's certificate, as its own signed record carries it.
      std::optional<std::string> cert = c.d(i).CertificateOf(c.node(j).name);
      REQUIRE(cert.has_value());
      CHECK(cert->size() == kFakeCertificateBytes);
      CHECK(cert == c.d(j).CertificateOf(c.node(j).name));
      if (i != j) {
        // Heard from directly within the last few probe periods.
        CHECK(members[j].last_heard > c.clock.Now() - absl::Seconds(5));
      }
    }
    CHECK_FALSE(c.d(i).CertificateOf("nobody").has_value());
    const DriverStats s = c.d(i).Stats();
    CHECK(s.messages_sent > 0);
    CHECK(s.messages_received > 0);
    CHECK(s.send_drops == 0);
    CHECK(s.messages_rejected == 0);
    // Gossip every 200 ms, a probe every second: at least 25 ticks.
    CHECK(s.ticks >= 25);
    CHECK(s.sends_in_flight == 0);
  }
  // Each joined event reached each node once per member.
  for (int i = 1; i < 5; ++i) {
    CHECK(c.CountEvents(0, MemberEventKind::kJoined, c.node(i).name) == 1);
  }
  // The stores were written, in batches: a restart would find the members.
  const uint64_t saves = c.d(2).Stats().saves;
  CHECK(saves >= 1);
  CHECK(saves <= 12);
  absl::StatusOr<PersistedMembership> p = c.node(2).members->Load();
  REQUIRE(p.ok());
  CHECK(p->members.size() == 4);
  CHECK(p->incarnation == std::optional<uint64_t>(c.d(2).incarnation()));
  CHECK(p->seeds == std::vector<std::string>{c.node(0).address});
}

TEST_CASE(
    "a crashed node is declared dead, and restarts from its store "
    "alive at a higher incarnation, not a ghost") {
  Cluster c(5);
  c.StartAndJoin();
  REQUIRE(c.RunUntil([&] { return c.Converged(); }, absl::Seconds(10)));
  c.RunFor(absl::Seconds(5));  // let the stores catch up
  const uint64_t old_inc = c.d(4).incarnation();

  c.Crash(4);
  // Nobody may call it dead before a probe has failed and the minimum
  // suspicion timeout (4 * max(1, log10 5) * 1 s = 4 s) has run.
  std::optional<absl::Duration> first_dead = c.RunUntil(
      [&] { return c.AnySees(4, MemberState::kDead); }, absl::Seconds(60));
  REQUIRE(first_dead.has_value());
  std::optional<absl::Duration> rest = c.RunUntil(
      [&] { return c.AllSee(4, MemberState::kDead); }, absl::Seconds(60));
  REQUIRE(rest.has_value());
  const absl::Duration all_dead = *first_dead + *rest;
  MESSAGE("first declared dead after " << absl::FormatDuration(*first_dead)
                                       << ", by all after "
                                       << absl::FormatDuration(all_dead));
  CHECK(*first_dead > absl::Seconds(4));
  // Probed within two rounds of 4 members (8 s), suspected, dead after the
  // suspicion timeout (at most 6 x 4 s, less with confirmations), then
  // gossiped at once.
  CHECK(all_dead < absl::Seconds(30));
  for (int i = 0; i < 4; ++i) {
    CHECK(c.CountEvents(i, MemberEventKind::kFailed, c.node(4).name) == 1);
    // The healthy ones stayed alive.
    for (int j = 0; j < 4; ++j) {
      CHECK(c.View(i, c.node(j).name)->state == MemberState::kAlive);
    }
  }

  // Back, from its store alone: no seed.
  c.RunFor(absl::Seconds(10));
  c.Start(4);
  const uint64_t new_inc = c.d(4).incarnation();
  CHECK(new_inc > old_inc);
  // Its members came back from its store, before any message.
  std::vector<MemberInfo> restored = c.d(4).Members();
  REQUIRE(restored.size() == 5);
  for (const MemberInfo& m : restored) {
    if (!m.self) CHECK(m.state == MemberState::kAlive);
  }
  std::optional<absl::Duration> back = c.RunUntil(
      [&] {
        if (!c.Converged()) return false;
        for (int i = 0; i < 4; ++i) {
          if (c.View(i, c.node(4).name)->incarnation != new_inc) return false;
        }
        return true;
      },
      absl::Seconds(10));
  REQUIRE(back.has_value());
  MESSAGE("alive again everywhere after " << absl::FormatDuration(*back));
  // It announces itself on start: no need to wait for a probe.
  CHECK(*back <= absl::Seconds(2));
  CHECK(c.d(4).Stats().membership.refutations == 0);
  // Not a ghost: nothing brings the old death back.
  c.RunFor(absl::Seconds(60));
  CHECK(c.Converged());
  for (int i = 0; i < 4; ++i) {
    CHECK(c.CountEvents(i, MemberEventKind::kFailed, c.node(4).name) == 1);
    CHECK(c.CountEvents(i, MemberEventKind::kJoined, c.node(4).name) == 2);
    CHECK(c.View(i, c.node(4).name)->incarnation == new_inc);
  }
}

TEST_CASE("a graceful leave shows as left everywhere, never dead") {
  Cluster c(5);
  c.StartAndJoin();
  REQUIRE(c.RunUntil([&] { return c.Converged(); }, absl::Seconds(10)));

  std::optional<absl::Status> left;
  c.d(2).Leave(absl::Seconds(5), [&](absl::Status s) { left = s; });
  std::optional<absl::Duration> took =
      c.RunUntil([&] { return left.has_value(); }, absl::Seconds(10));
  REQUIRE(took.has_value());
  CHECK_MESSAGE(left->ok(), left->ToString());
  CHECK(*took < absl::Seconds(5));
  REQUIRE(c.RunUntil([&] { return c.AllSee(2, MemberState::kLeft); },
                     absl::Seconds(2)));
  const uint64_t ticks = c.d(2).Stats().ticks;
  c.RunFor(absl::Seconds(60));
  CHECK(c.AllSee(2, MemberState::kLeft));
  for (int i = 0; i < 5; ++i) {
    if (i == 2) continue;
    CHECK(c.CountEvents(i, MemberEventKind::kLeft, c.node(2).name) == 1);
    CHECK(c.CountEvents(i, MemberEventKind::kFailed, c.node(2).name) == 0);
  }
  // The left node halted: no more ticks, and a second leave is refused.
  CHECK(c.d(2).Stats().ticks == ticks);
  std::optional<absl::Status> again;
  c.d(2).Leave(absl::Seconds(1), [&](absl::Status s) { again = s; });
  c.RunFor(absl::Milliseconds(10));
  REQUIRE(again.has_value());
  CHECK(again->code() == absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace mycel::membership
