// MembershipDriver in real time: AsioClock on a real io_context run by its
// own threads, the in-process transport, a fast profile. Five drivers
// converge and detect a crash within seconds on real timers; a transport
// that never completes its sends costs bounded memory and never blocks the
// strand (the driver keeps ticking and counts what it drops).
#include <doctest/doctest.h>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "daemon/store/store.h"
#include "mesh/membership/codec.h"
#include "mesh/membership/driver.h"
#include "mesh/membership/driver_loopback.h"
#include "mesh/membership/fake_signer.h"
#include "mesh/membership/member_store.h"
#include "runtime/asio_clock.h"
#include "tests/testing/io_loop.h"
#include "tests/testing/process.h"

namespace mycel::membership {
namespace {

constexpr uint64_t kRealm = 5;

// Ten times faster than LAN: probe every 100 ms, suspicion from 400 ms.
Config FastProfile() {
  Config c = Config::Lan();
  c.probe_interval = absl::Milliseconds(100);
  c.probe_timeout = absl::Milliseconds(50);
  c.gossip_interval = absl::Milliseconds(20);
  c.push_pull_interval = absl::Seconds(3);
  c.reconnect_interval = absl::Seconds(1);
  c.reconnect_max_backoff = absl::Seconds(4);
  REQUIRE(ValidateConfig(c).ok());
  return c;
}

// An io_context run by two threads.
using Loop = testing::IoLoop;

// Polls `done` every 10 ms of real time; the time it took, or nullopt.
std::optional<absl::Duration> WaitFor(const std::function<bool()>& done,
                                      absl::Duration limit) {
  const absl::Time start = absl::Now();
  while (absl::Now() - start < limit) {
    if (done()) return absl::Now() - start;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return std::nullopt;
}

struct Node {
  std::string name;
  std::string address;
  std::unique_ptr<FakeSigner> signer;
  std::unique_ptr<store::Store> db;
  std::unique_ptr<MemberStore> members;
  std::unique_ptr<Transport> transport;
  std::unique_ptr<MembershipDriver> driver;
};

TEST_CASE("five drivers on real timers converge and detect a crash") {
  testing::TempDir dir;
  FakeVerifier verifier(kRealm);
  LoopbackNetwork net;
  Loop loop;
  std::vector<Node> nodes(5);
  for (int i = 0; i < 5; ++i) {
    Node& n = nodes[i];
    n.name = absl::StrCat("node-", i);
    n.address = absl::StrCat("127.0.0.1:", 7000 + i);
    n.signer = std::make_unique<FakeSigner>(kRealm, n.name);
    absl::StatusOr<std::unique_ptr<store::Store>> db =
        store::Store::Open(dir.Sub(n.name + ".db"));
    REQUIRE(db.ok());
    n.db = *std::move(db);
    n.members = std::make_unique<MemberStore>(n.db.get());
    n.transport = net.Endpoint(n.name, n.address);
    DriverOptions o;
    o.membership.config = FastProfile();
    o.membership.name = n.name;
    o.membership.meta.addresses = {n.address};
    o.membership.signer = n.signer.get();
    o.membership.verifier = &verifier;
    o.clock = &loop.clock;
    o.io = &loop.io;
    o.transport = n.transport.get();
    o.store = n.members.get();
    absl::StatusOr<std::unique_ptr<MembershipDriver>> d =
        MembershipDriver::Start(std::move(o));
    REQUIRE_MESSAGE(d.ok(), d.status().ToString());
    n.driver = *std::move(d);
    MembershipDriver* driver = n.driver.get();
    net.Attach(n.address, [driver](std::string from, std::string bytes) {
      driver->Deliver(std::move(from), std::move(bytes));
    });
  }
  for (int i = 1; i < 5; ++i) nodes[i].driver->Join({nodes[0].address});

  auto sees = [&](int i, int j, MemberState state) {
    std::optional<MemberInfo> v = nodes[i].driver->Find(nodes[j].name);
    return v.has_value() && v->state == state;
  };
  std::optional<absl::Duration> converged = WaitFor(
      [&] {
        for (int i = 0; i < 5; ++i) {
          for (int j = 0; j < 5; ++j) {
            if (!sees(i, j, MemberState::kAlive)) return false;
          }
        }
        return true;
      },
      absl::Seconds(5));
  REQUIRE(converged.has_value());
  MESSAGE("converged in " << absl::FormatDuration(*converged));
  CHECK(*converged < absl::Seconds(3));

  // Crash node 4: cut off, and its driver stops without a word.
  net.SetCut(nodes[4].address, true);
  nodes[4].driver->Abort();
  std::optional<absl::Duration> dead = WaitFor(
      [&] {
        for (int i = 0; i < 4; ++i) {
          if (!sees(i, 4, MemberState::kDead)) return false;
        }
        return true;
      },
      absl::Seconds(10));
  REQUIRE(dead.has_value());
  MESSAGE("declared dead by all in " << absl::FormatDuration(*dead));
  // Two probe rounds (0.8 s) plus at most 6 x 0.4 s of suspicion.
  CHECK(*dead < absl::Seconds(5));
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 4; ++j) CHECK(sees(i, j, MemberState::kAlive));
    const DriverStats s = nodes[i].driver->Stats();
    CHECK(s.ticks > 20);
    CHECK(s.messages_rejected == 0);
  }
  for (Node& n : nodes) n.driver->Stop();
}

// Accepts every send and never completes one, like a peer that accepts
// the connection and never reads.
class BlackHole final : public Transport {
 public:
  void Send(absl::string_view, absl::string_view, std::string bytes,
            absl::Duration deadline, bool awaits_answer,
            SendDone done) override {
    absl::StatusOr<Message> m =
        DecodeMessage(bytes, Config::Lan().max_message_bytes);
    absl::MutexLock lock(&mu_);
    pending_.push_back(std::move(done));
    if (!m.ok()) return;
    const bool probe = std::holds_alternative<Ping>(m->body) ||
                       std::holds_alternative<IndirectPing>(m->body);
    (probe ? probe_deadlines_ : other_deadlines_).push_back(deadline);
    // What the driver says awaits a direct answer, by kind of message.
    const PushPull* pp = std::get_if<PushPull>(&m->body);
    const std::string kind =
        std::holds_alternative<Ping>(m->body)           ? "ping"
        : std::holds_alternative<IndirectPing>(m->body) ? "indirect ping"
        : pp != nullptr && !pp->reply && !pp->fill      ? "push-pull request"
        : pp != nullptr                                 ? "push-pull other"
                                                        : "other";
    awaits_[kind].insert(awaits_answer);
  }
  // For each kind of message sent, the values of awaits_answer it had.
  std::map<std::string, std::set<bool>> awaits() {
    absl::MutexLock lock(&mu_);
    return awaits_;
  }
  size_t pending() {
    absl::MutexLock lock(&mu_);
    return pending_.size();
  }
  // The deadlines the driver asked for: of pings and indirect pings, and of
  // everything else (gossip, push-pull).
  std::vector<absl::Duration> probe_deadlines() {
    absl::MutexLock lock(&mu_);
    return probe_deadlines_;
  }
  std::vector<absl::Duration> other_deadlines() {
    absl::MutexLock lock(&mu_);
    return other_deadlines_;
  }

 private:
  absl::Mutex mu_;
  std::vector<SendDone> pending_ ABSL_GUARDED_BY(mu_);
  std::vector<absl::Duration> probe_deadlines_ ABSL_GUARDED_BY(mu_);
  std::vector<absl::Duration> other_deadlines_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::set<bool>> awaits_ ABSL_GUARDED_BY(mu_);
};

TEST_CASE("a transport that never completes sends never blocks the strand") {
  FakeVerifier verifier(kRealm);
  BlackHole hole;
  Loop loop;
  const absl::Time now = absl::Now();
  DriverOptions o;
  o.membership.config = FastProfile();
  o.membership.name = "self";
  o.membership.meta.addresses = {"127.0.0.1:7100"};
  FakeSigner self_signer(kRealm, "self");
  o.membership.signer = &self_signer;
  o.membership.verifier = &verifier;
  // Four peers it believes alive, restored as from a store.
  for (int i = 0; i < 4; ++i) {
    const std::string name = absl::StrCat("peer-", i);
    FakeSigner signer(kRealm, name);
    Alive a;
    a.name = name;
    a.incarnation = 1;
    a.meta.addresses = {absl::StrCat("127.0.0.1:", 7200 + i)};
    REQUIRE(signer.Sign(&a).ok());
    o.membership.members.push_back(
        MemberSnapshot{name, MemberState::kAlive, 1,
                       std::make_shared<const Alive>(std::move(a)), now,
                       absl::InfinitePast()});
  }
  constexpr int kMaxInFlight = 2;
  o.max_in_flight_per_peer = kMaxInFlight;
  o.clock = &loop.clock;
  o.io = &loop.io;
  o.transport = &hole;
  absl::StatusOr<std::unique_ptr<MembershipDriver>> d =
      MembershipDriver::Start(std::move(o));
  REQUIRE(d.ok());
  MembershipDriver& driver = **d;

  absl::SleepFor(absl::Seconds(1));
  const DriverStats s1 = driver.Stats();
  absl::SleepFor(absl::Seconds(1));
  const DriverStats s2 = driver.Stats();
  // Bounded: exactly the cap per peer is outstanding, the rest dropped.
  CHECK(s2.sends_in_flight == 4 * kMaxInFlight);
  CHECK(hole.pending() == 4 * kMaxInFlight);
  CHECK(s2.send_drops > s1.send_drops);
  CHECK(s1.send_drops > 0);
  // Still ticking at its pace: a probe every 100 ms, gossip every 20 ms.
  CHECK(s2.ticks > s1.ticks + 20);
  // Its probes fail, so it goes on to suspect its peers, then declare them
  // dead: the state machine runs on.
  CHECK(s2.membership.probes_failed > 0);
  CHECK(s2.membership.suspicions > 0);
  // And the strand answers at once.
  absl::Notification updated;
  absl::Status update_status = absl::UnknownError("not called");
  const absl::Time asked = absl::Now();
  NodeMeta meta;
  meta.addresses = {"127.0.0.1:7101"};
  driver.UpdateMeta(meta, [&](absl::Status st) {
    update_status = st;
    updated.Notify();
  });
  REQUIRE(updated.WaitForNotificationWithTimeout(absl::Seconds(2)));
  CHECK(update_status.ok());
  CHECK(absl::Now() - asked < absl::Milliseconds(500));
  CHECK(driver.Find("self")->addresses ==
        std::vector<std::string>{"127.0.0.1:7101"});
  // A probe's sends expire with the probe timeout, stretched by the local
  // health score (which failing probes raise); gossip and push-pull get
  // the delivery timeout, so that a slow connection delays them rather
  // than losing them.
  const Config c = FastProfile();
  const std::vector<absl::Duration> probes = hole.probe_deadlines();
  const std::vector<absl::Duration> others = hole.other_deadlines();
  REQUIRE_FALSE(probes.empty());
  REQUIRE_FALSE(others.empty());
  CHECK(probes.front() == c.probe_timeout);
  for (absl::Duration d : probes) {
    CHECK(d >= c.probe_timeout);
    CHECK(d <= c.probe_timeout * c.awareness_max_multiplier);
  }
  CHECK(driver.Stats().membership.probes_failed > 0);
  for (absl::Duration d : others) CHECK(d == c.delivery_timeout);
  // Pings and push-pull requests are answered directly, so a transport
  // may watch for answers only then; nothing else is marked so. (Which
  // kinds reach this transport depends on what filled the cap of sends in
  // flight first; each one that did is checked.)
  const std::map<std::string, std::set<bool>> awaits = hole.awaits();
  REQUIRE_FALSE(awaits.empty());
  for (const auto& entry : awaits) {
    const std::string& kind = entry.first;
    CAPTURE(kind);
    if (kind == "ping" || kind == "push-pull request") {
      CHECK(entry.second == std::set<bool>{true});
    } else {
      CHECK(entry.second == std::set<bool>{false});
    }
  }
  driver.Stop();
}

}  // namespace
}  // namespace mycel::membership
