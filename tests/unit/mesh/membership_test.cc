// The membership state machine driven by hand: every message and every
// tick is chosen by the test, so each protocol rule and each bad input is
// checked on its own.
#include "mesh/membership/membership.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "mesh/membership/codec.h"
#include "mesh/membership/fake_signer.h"

namespace mycel::membership {
namespace {

constexpr uint64_t kRealm = 42;

class Fixture {
 public:
  absl::Time now = absl::FromUnixSeconds(1700000000);
  FakeVerifier verifier{kRealm};

  AliveSigner* Signer(const std::string& name) {
    std::unique_ptr<FakeSigner>& s = signers_[name];
    if (!s) s = std::make_unique<FakeSigner>(kRealm, name);
    return s.get();
  }

  AliveRef Record(const std::string& name, uint64_t inc, bool leaving = false) {
    Alive a;
    a.name = name;
    a.incarnation = inc;
    a.meta.addresses = {name + ":7946"};
    a.leaving = leaving;
    REQUIRE(Signer(name)->Sign(&a).ok());
    return std::make_shared<const Alive>(std::move(a));
  }

  MemberSnapshot Stored(const std::string& name, uint64_t inc,
                        MemberState state = MemberState::kAlive) {
    return MemberSnapshot{
        name, state, inc, Record(name, inc), now, absl::InfinitePast()};
  }

  MembershipOptions Options(const std::string& name,
                            const std::vector<std::string>& peers,
                            uint64_t inc = 100) {
    MembershipOptions o;
    o.name = name;
    o.incarnation = inc;
    o.meta.addresses = {name + ":7946"};
    o.random_seed = std::hash<std::string>()(name);
    o.signer = Signer(name);
    o.verifier = &verifier;
    for (const std::string& p : peers) o.members.push_back(Stored(p, 100));
    o.rejoin_on_start = false;
    return o;
  }

  std::unique_ptr<Membership> Node(const std::string& name,
                                   const std::vector<std::string>& peers,
                                   uint64_t inc = 100) {
    absl::StatusOr<std::unique_ptr<Membership>> m =
        Membership::Create(Options(name, peers, inc), now);
    REQUIRE(m.ok());
    return *std::move(m);
  }

  // Runs `m` alone until `until`, handing each message it sends to
  // `on_send` (which may answer by calling into `m`).
  void Run(Membership* m, absl::Time until,
           const std::function<void(Outbound&)>& on_send) {
    for (;;) {
      const absl::Time t = m->NextDeadline();
      if (t > until) break;
      now = std::max(now, t);
      m->Tick(now);
      for (Outbound& out : m->TakeOutbox()) on_send(out);
    }
    now = until;
  }

 private:
  std::map<std::string, std::unique_ptr<FakeSigner>> signers_;
};

Message From(const std::string& peer, Body body,
             std::vector<Update> updates = {}) {
  Message m;
  m.from = peer;
  m.body = std::move(body);
  m.updates = std::move(updates);
  return m;
}

// Delivers messages between nodes (no delay, no loss) until all are quiet.
void Pump(Fixture& f, const std::map<std::string, Membership*>& nodes) {
  for (bool busy = true; busy;) {
    busy = false;
    for (const auto& [name, m] : nodes) {
      for (Outbound& out : m->TakeOutbox()) {
        busy = true;
        std::string to = out.to;
        if (to.empty()) to = out.address.substr(0, out.address.find(':'));
        auto it = nodes.find(to);
        if (it != nodes.end()) {
          (void)it->second->HandleMessage(name, out.message, f.now);
        }
      }
    }
  }
}

bool HasEvent(const std::vector<MemberEvent>& events, MemberEventKind kind,
              const std::string& name) {
  for (const MemberEvent& e : events) {
    if (e.kind == kind && e.name == name) return true;
  }
  return false;
}

TEST_CASE("Create checks its inputs and signs a record it can verify") {
  Fixture f;
  MembershipOptions o = f.Options("a", {});
  o.signer = nullptr;
  CHECK(Membership::Create(o, f.now).status().code() ==
        absl::StatusCode::kInvalidArgument);
  o = f.Options("a", {});
  o.name = "";
  CHECK_FALSE(Membership::Create(o, f.now).ok());
  // A signer holding another node's certificate is caught at start.
  o = f.Options("a", {});
  o.signer = f.Signer("b");
  CHECK(Membership::Create(o, f.now).status().code() ==
        absl::StatusCode::kInvalidArgument);
  std::unique_ptr<Membership> a = f.Node("a", {"b"}, 777);
  CHECK(a->incarnation() == 777);
  CHECK(*f.verifier.Verify(*a->record()) == "a");
  CHECK(a->CountIn(MemberState::kAlive) == 2);
}

TEST_CASE("a forged alive (wrong signer) is rejected and counted") {
  Fixture f;
  std::unique_ptr<Membership> a = f.Node("a", {"b"});
  // b signs a record claiming to be c, with its own certificate.
  Alive forged;
  forged.name = "c";
  forged.incarnation = 5;
  forged.meta.addresses = {"evil:1"};
  REQUIRE(f.Signer("b")->Sign(&forged).ok());
  CHECK(a->HandleMessage("b",
                         From("b", std::monostate(),
                              {std::make_shared<const Alive>(forged)}),
                         f.now)
            .ok());
  CHECK(a->stats().alive_rejected_name == 1);
  // b signs with its key but attaches c's certificate.
  forged.certificate = FakeCertificate(kRealm, "c");
  CHECK(a->HandleMessage("b",
                         From("b", std::monostate(),
                              {std::make_shared<const Alive>(forged)}),
                         f.now)
            .ok());
  CHECK(a->stats().alive_rejected_signature == 1);
  CHECK_FALSE(a->Find("c").has_value());
  // c's own record, relayed by b, is accepted: relaying is allowed.
  CHECK(a->HandleMessage("b", From("b", std::monostate(), {f.Record("c", 5)}),
                         f.now)
            .ok());
  CHECK(a->StateOf("c") == MemberState::kAlive);
  CHECK(HasEvent(a->TakeEvents(), MemberEventKind::kJoined, "c"));
}

TEST_CASE("a record forging our own name, or a tampered one, changes nothing") {
  Fixture f;
  std::unique_ptr<Membership> a = f.Node("a", {"b"});
  Alive fake;
  fake.name = "a";
  fake.incarnation = 1000;
  REQUIRE(f.Signer("b")->Sign(&fake).ok());
  (void)a->HandleMessage(
      "b", From("b", std::monostate(), {std::make_shared<const Alive>(fake)}),
      f.now);
  CHECK(a->incarnation() == 100);  // no refutation over a forgery
  CHECK(a->stats().alive_rejected_name == 1);
  Alive tampered = *f.Record("b", 200);
  tampered.meta.addresses = {"evil:1"};
  (void)a->HandleMessage(
      "b",
      From("b", std::monostate(), {std::make_shared<const Alive>(tampered)}),
      f.now);
  CHECK(a->stats().alive_rejected_signature == 1);
  CHECK(a->Find("b")->incarnation == 100);
  CHECK(a->Find("b")->record->meta.addresses[0] == "b:7946");
}

TEST_CASE("a message whose sender is not the authenticated peer is rejected") {
  Fixture f;
  std::unique_ptr<Membership> a = f.Node("a", {"b", "c"});
  absl::Status s = a->HandleMessage("b", From("c", Ping{1, "a"}), f.now);
  CHECK(s.code() == absl::StatusCode::kPermissionDenied);
  // Nor may anyone speak as us.
  s = a->HandleMessage("a", From("a", Ping{1, "a"}), f.now);
  CHECK(s.code() == absl::StatusCode::kPermissionDenied);
  CHECK(a->stats().rejected_sender_mismatch == 2);
  CHECK(a->TakeOutbox().empty());  // no ack for either
  CHECK(a->HandleMessage("b", From("b", Ping{1, "a"}), f.now).ok());
  CHECK(a->TakeOutbox().size() == 1);
}

TEST_CASE("oversized and malformed messages are rejected and counted") {
  Fixture f;
  std::unique_ptr<Membership> a = f.Node("a", {"b"});
  const std::string huge(a->config().max_message_bytes + 1, '\0');
  CHECK(a->HandleBytes("b", huge, f.now).code() ==
        absl::StatusCode::kResourceExhausted);
  CHECK(a->stats().rejected_oversized == 1);
  CHECK(a->HandleBytes("b", "\x0a\xff\xff\xff\xff", f.now).code() ==
        absl::StatusCode::kInvalidArgument);
  // Well-formed protobuf that breaks the rules: a suspect with no name.
  CHECK(a->HandleBytes(
             "b",
             EncodeMessage(From("b", std::monostate(), {Suspect{"", 1, "b"}})),
             f.now)
            .code() == absl::StatusCode::kInvalidArgument);
  CHECK(a->stats().rejected_malformed == 2);
  // Bytes of a good message work.
  CHECK(
      a->HandleBytes("b", EncodeMessage(From("b", Ping{9, "a"})), f.now).ok());
  std::vector<Outbound> out = a->TakeOutbox();
  REQUIRE(out.size() == 1);
  CHECK(std::get<Ack>(out[0].message.body).seq == 9);
}

TEST_CASE("an alive with a lower incarnation than known is ignored") {
  Fixture f;
  std::unique_ptr<Membership> a = f.Node("a", {"b"});  // b at 100
  (void)a->HandleMessage("b", From("b", std::monostate(), {f.Record("b", 50)}),
                         f.now);
  (void)a->HandleMessage("b", From("b", std::monostate(), {f.Record("b", 100)}),
                         f.now);
  CHECK(a->stats().stale_updates == 2);
  CHECK(a->Find("b")->incarnation == 100);
  CHECK(a->TakeEvents().empty());
  (void)a->HandleMessage("b", From("b", std::monostate(), {f.Record("b", 101)}),
                         f.now);
  CHECK(a->Find("b")->incarnation == 101);
}

TEST_CASE("a misdirected ping is not answered") {
  Fixture f;
  std::unique_ptr<Membership> a = f.Node("a", {"b"});
  CHECK(a->HandleMessage("b", From("b", Ping{1, "someone-else"}), f.now).ok());
  CHECK(a->TakeOutbox().empty());
  CHECK(a->stats().misdirected_pings == 1);
}

TEST_CASE("messages leave out what the transport authenticates") {
  Fixture f;
  std::unique_ptr<Membership> a = f.Node("a", {"b"});
  std::unique_ptr<Membership> b = f.Node("b", {"a"});
  // a's probe of b names neither a nor b: the transport says who sent it
  // and reaches only the member it names.
  std::optional<Outbound> ping;
  f.Run(a.get(), f.now + absl::Seconds(2), [&](Outbound& out) {
    if (std::holds_alternative<Ping>(out.message.body) && !ping) ping = out;
  });
  REQUIRE(ping.has_value());
  CHECK(ping->to == "b");
  CHECK(ping->message.from.empty());
  CHECK(std::get<Ping>(ping->message.body).target.empty());
  // b answers it, and its ack names no sender either.
  CHECK(b->HandleBytes("a", EncodeMessage(ping->message), f.now).ok());
  std::vector<Outbound> out = b->TakeOutbox();
  REQUIRE(out.size() == 1);
  CHECK(out[0].to == "a");
  CHECK(out[0].message.from.empty());
  CHECK(std::get<Ack>(out[0].message.body).seq ==
        std::get<Ping>(ping->message.body).seq);
  // A sender that names itself is still accepted, and one that names
  // another member is refused (the forged-sender case).
  CHECK(b->HandleMessage("a", From("a", Ping{7, ""}), f.now).ok());
  CHECK(b->HandleMessage("a", From("c", Ping{8, ""}), f.now).code() ==
        absl::StatusCode::kPermissionDenied);
  CHECK(b->stats().rejected_sender_mismatch == 1);
}

// Gossips to `m` for 10 s of rounds, with a new member's record arriving
// from p00 at each round so that there is always news to send. Per round:
// the members `m` had sent to or heard from before it, the gossip targets
// among the others, and the gossip messages sent.
struct GossipRounds {
  std::vector<int> linked;
  std::vector<int> fresh;
  std::vector<int> sent;
};
GossipRounds RunGossip(Fixture& f, Membership* m) {
  std::set<std::string> contacted = {"p00"};
  GossipRounds out;
  for (int round = 0; round < 50; ++round) {
    Alive joiner = *f.Record(absl::StrCat("new", round), 1);
    (void)m->HandleMessage(
        "p00",
        From("p00", std::monostate(),
             {std::make_shared<const Alive>(std::move(joiner))}),
        f.now);
    f.now += absl::Milliseconds(200);
    m->Tick(f.now);
    int fresh = 0, sent = 0;
    std::vector<std::string> to;
    for (Outbound& o : m->TakeOutbox()) {
      to.push_back(o.to);
      if (!std::holds_alternative<std::monostate>(o.message.body)) continue;
      ++sent;
      if (!contacted.contains(o.to)) ++fresh;
    }
    out.linked.push_back(static_cast<int>(contacted.size()));
    out.fresh.push_back(fresh);
    out.sent.push_back(sent);
    contacted.insert(to.begin(), to.end());
  }
  return out;
}

TEST_CASE("gossip goes over connections it has, adding one a round until 3") {
  Fixture f;
  std::vector<std::string> peers;
  for (int i = 0; i < 40; ++i) peers.push_back(absl::StrFormat("p%02d", i));
  MembershipOptions o = f.Options("a", peers);
  o.config.probe_interval = absl::Hours(1);  // gossip only
  o.config.probe_timeout = absl::Minutes(1);
  o.config.delivery_timeout = absl::Minutes(1);
  o.config.push_pull_interval = absl::Hours(1);
  std::unique_ptr<Membership> a = *Membership::Create(o, f.now);
  const GossipRounds r = RunGossip(f, a.get());
  for (size_t i = 0; i < r.fresh.size(); ++i) {
    CAPTURE(i);
    CAPTURE(r.linked[i]);
    // At most gossip_new_links (1) new connection a round, and none once
    // it has gossip_nodes (3).
    CHECK(r.fresh[i] <= (r.linked[i] < 3 ? 1 : 0));
    CHECK(r.sent[i] >= 1);  // the news always goes somewhere
    if (r.linked[i] >= 3) CHECK(r.sent[i] == 3);
  }
  CHECK(r.linked.back() == 3);

  // memberlist's choice, uniform over all members, opens several a round.
  o.config.gossip_over_links = false;
  std::unique_ptr<Membership> b = *Membership::Create(o, f.now);
  const GossipRounds u = RunGossip(f, b.get());
  CHECK(*std::max_element(u.fresh.begin(), u.fresh.end()) >= 2);
  CHECK(u.linked.back() >= 30);

  o.config.gossip_new_links = 0;
  CHECK(Membership::Create(o, f.now).status().message().find(
            "gossip_new_links") != std::string::npos);
}

TEST_CASE("a flood from one peer is cut to its rate; probing carries on") {
  Fixture f;
  std::unique_ptr<Membership> a = f.Node("a", {"b", "c"});
  const Config& c = a->config();
  // x is any authenticated peer (a mesh certificate), not a member.
  int accepted = 0;
  for (int i = 0; i < 10000; ++i) {
    accepted += a->HandleMessage("x", From("x", Ping{1, "a"}), f.now).ok();
  }
  // The bucket starts full: exactly the burst gets through at one instant.
  CHECK(accepted == static_cast<int>(c.peer_burst));
  CHECK(a->stats().rejected_rate_limited == 10000 - c.peer_burst);
  CHECK(a->TakeOutbox().size() == static_cast<size_t>(c.peer_burst));
  // x keeps flooding (100 pings every 100 ms) while a probes b and c, who
  // answer. A probe a second, nobody suspected, health untouched.
  const uint64_t probes_before = a->stats().probes;
  const absl::Time end = f.now + absl::Seconds(10);
  absl::Time next_flood = f.now;
  f.Run(a.get(), end, [&](Outbound& out) {
    while (next_flood <= f.now) {
      for (int i = 0; i < 100; ++i) {
        (void)a->HandleMessage("x", From("x", Ping{1, "a"}), f.now);
      }
      next_flood += absl::Milliseconds(100);
    }
    if (const Ping* p = std::get_if<Ping>(&out.message.body)) {
      (void)a->HandleMessage(out.to, From(out.to, Ack{p->seq}), f.now);
    }
  });
  CHECK(a->stats().probes - probes_before >= 9);
  CHECK(a->stats().probes_failed == 0);
  CHECK(a->CountIn(MemberState::kAlive) == 3);
  CHECK(a->health_score() == 0);
  CHECK(a->stats().rejected_rate_limited > 10000);
}

// a knows b, c and d. b never answers; c and d answer a's pings, and when
// asked to reach b, they cannot either and say so (nack).
struct SilentPeerRun {
  absl::Time probe_started = absl::InfinitePast();
  absl::Time suspected = absl::InfinitePast();
  absl::Time dead = absl::InfinitePast();
  int indirect_requests = 0;  // before the suspicion
};

SilentPeerRun RunWithSilentPeer(Fixture& f, Membership* a, bool relays_nack) {
  SilentPeerRun run;
  f.Run(a, f.now + absl::Seconds(60), [&](Outbound& out) {
    const Message& msg = out.message;
    if (const Ping* p = std::get_if<Ping>(&msg.body)) {
      if (out.to == "b") {
        if (run.probe_started == absl::InfinitePast()) {
          run.probe_started = f.now;
        }
        return;  // dropped
      }
      (void)a->HandleMessage(out.to, From(out.to, Ack{p->seq}), f.now);
    } else if (const IndirectPing* ip = std::get_if<IndirectPing>(&msg.body)) {
      CHECK(ip->target == "b");
      CHECK(ip->nack);
      if (run.suspected == absl::InfinitePast()) ++run.indirect_requests;
      if (relays_nack) {
        (void)a->HandleMessage(out.to, From(out.to, Nack{ip->seq}), f.now);
      }
    }
    for (const MemberEvent& e : a->TakeEvents()) {
      if (e.name != "b") continue;
      if (e.kind == MemberEventKind::kSuspected) run.suspected = e.at;
      if (e.kind == MemberEventKind::kFailed) run.dead = e.at;
    }
  });
  for (const MemberEvent& e : a->TakeEvents()) {
    if (e.name == "b" && e.kind == MemberEventKind::kFailed) run.dead = e.at;
  }
  return run;
}

TEST_CASE("a peer that never answers: timeout, indirect, suspect, dead") {
  Fixture f;
  std::unique_ptr<Membership> a = f.Node("a", {"b", "c", "d"});
  const SilentPeerRun run = RunWithSilentPeer(f, a.get(), true);
  REQUIRE(run.probe_started != absl::InfinitePast());
  // Both other members were asked (indirect_checks is 3, only 2 qualify).
  CHECK(run.indirect_requests == 2);
  // Suspected when the probe period ends: probe_interval after the ping.
  CHECK(run.suspected - run.probe_started == absl::Seconds(1));
  // n = 4, so k = suspicion_mult - 2 = 2 confirmations are expected and none
  // came: the timeout stays at its maximum, 6 * (4 * max(1, log10 4) * 1 s).
  CHECK(run.dead - run.suspected == absl::Seconds(24));
  CHECK(a->StateOf("b") == MemberState::kDead);
  CHECK(a->stats().deaths_declared == 1);
  // Every relay nacked: the fault is b's, not ours, so health is intact.
  CHECK(a->health_score() == 0);
  // The dead are not probed.
  const uint64_t probes = a->stats().probes_failed;
  RunWithSilentPeer(f, a.get(), true);
  CHECK(a->stats().probes_failed == probes);
}

TEST_CASE("missing nacks raise our own health score (Lifeguard)") {
  Fixture f;
  std::unique_ptr<Membership> a = f.Node("a", {"b", "c", "d"});
  // c and d answer pings but never nack: from a's side, its requests for
  // help vanished, so a is the likely culprit.
  int score_at_suspicion = -1;
  const absl::Time end = f.now + absl::Seconds(10);
  while (score_at_suspicion < 0 && a->NextDeadline() <= end) {
    f.now = std::max(f.now, a->NextDeadline());
    a->Tick(f.now);
    for (const MemberEvent& e : a->TakeEvents()) {
      if (e.name == "b" && e.kind == MemberEventKind::kSuspected) {
        score_at_suspicion = a->health_score();
      }
    }
    for (Outbound& out : a->TakeOutbox()) {
      if (const Ping* p = std::get_if<Ping>(&out.message.body)) {
        if (out.to != "b") {
          (void)a->HandleMessage(out.to, From(out.to, Ack{p->seq}), f.now);
        }
      }
    }
  }
  // Two relays asked, two nacks missing: +2 (from 0; earlier successful
  // probes cannot take it below 0).
  CHECK(score_at_suspicion == 2);
}

TEST_CASE(
    "buddy system: a suspect is told on the ping and refutes in the ack") {
  Fixture f;
  std::unique_ptr<Membership> a = f.Node("a", {"b"});
  std::unique_ptr<Membership> b = f.Node("b", {"a"});
  (void)a->HandleMessage(
      "c", From("c", std::monostate(), {Suspect{"b", 100, "c"}}), f.now);
  REQUIRE(a->StateOf("b") == MemberState::kSuspect);
  CHECK(HasEvent(a->TakeEvents(), MemberEventKind::kSuspected, "b"));
  a->TakeOutbox();
  // Run a until it probes b.
  std::optional<Message> ping;
  f.Run(a.get(), f.now + absl::Seconds(2), [&](Outbound& out) {
    if (std::holds_alternative<Ping>(out.message.body) && !ping) {
      ping = out.message;
    }
  });
  REQUIRE(ping.has_value());
  REQUIRE_FALSE(ping->updates.empty());
  const Suspect* told = std::get_if<Suspect>(&ping->updates[0]);
  REQUIRE(told != nullptr);
  CHECK(told->name == "b");
  // b refutes before answering; its ack leads with the new record.
  CHECK(b->HandleMessage("a", *ping, f.now).ok());
  CHECK(b->incarnation() == 101);
  CHECK(b->health_score() == 1);
  std::vector<Outbound> out = b->TakeOutbox();
  REQUIRE(out.size() == 1);
  REQUIRE(std::holds_alternative<Ack>(out[0].message.body));
  const AliveRef* refutation =
      std::get_if<AliveRef>(&out[0].message.updates[0]);
  REQUIRE(refutation != nullptr);
  CHECK((*refutation)->incarnation == 101);
  CHECK(a->HandleMessage("b", out[0].message, f.now).ok());
  CHECK(a->StateOf("b") == MemberState::kAlive);
  CHECK(HasEvent(a->TakeEvents(), MemberEventKind::kRecovered, "b"));
}

TEST_CASE(
    "a notice cannot name an incarnation beyond the signed record: a forged "
    "2^64-1 leaves no member unable to refute") {
  Fixture f;
  constexpr uint64_t kTop = UINT64_MAX;
  // c, a member, accuses b at the top incarnation, in each unsigned form:
  // a suspect notice, a dead notice, a push-pull summary and a push-pull
  // state beside b's own (signed, incarnation 100) record.
  std::unique_ptr<Membership> a = f.Node("a", {"b", "c"});
  REQUIRE(
      a->HandleMessage(
           "c", From("c", std::monostate(), {Suspect{"b", kTop, "c"}}), f.now)
          .ok());
  REQUIRE(a->HandleMessage(
               "c", From("c", std::monostate(), {Dead{"b", kTop, "c"}}), f.now)
              .ok());
  PushPull summary{1};
  summary.summaries = {MemberSummary{"b", 100, MemberState::kDead, kTop}};
  REQUIRE(a->HandleMessage("c", From("c", summary), f.now).ok());
  PushPull state{2,
                 false,
                 false,
                 {MemberDigest{f.Record("b", 100), MemberState::kDead, kTop}}};
  REQUIRE(a->HandleMessage("c", From("c", state), f.now).ok());
  CHECK(a->StateOf("b") == MemberState::kAlive);
  CHECK(a->Find("b")->incarnation == 100);
  // A member a never knew, reported dead at the top incarnation, is kept
  // dead at its record's incarnation, so that it can come back.
  PushPull unknown{
      3,
      false,
      false,
      {MemberDigest{f.Record("d", 100), MemberState::kDead, kTop}}};
  REQUIRE(a->HandleMessage("c", From("c", unknown), f.now).ok());
  REQUIRE(a->StateOf("d") == MemberState::kDead);
  CHECK(a->Find("d")->incarnation == 100);
  REQUIRE(a->HandleMessage(
               "d", From("d", std::monostate(), {f.Record("d", 101)}), f.now)
              .ok());
  CHECK(a->StateOf("d") == MemberState::kAlive);
  // b, told so about itself, does not refute past the top (which would
  // wrap to 0): its incarnation stays where it was.
  std::unique_ptr<Membership> b = f.Node("b", {"a", "c"});
  REQUIRE(
      b->HandleMessage(
           "c", From("c", std::monostate(), {Suspect{"b", kTop, "c"}}), f.now)
          .ok());
  CHECK(b->incarnation() == 100);
  CHECK(b->StateOf("b") == MemberState::kAlive);
  CHECK(a->stats().stale_updates + b->stats().stale_updates >= 5);
}

TEST_CASE("a suspicion of a member we hold dead gets the death back") {
  Fixture f;
  std::unique_ptr<Membership> a = f.Node("a", {"b", "d"});
  (void)a->HandleMessage(
      "b", From("b", std::monostate(), {Dead{"d", 100, "b"}}), f.now);
  REQUIRE(a->StateOf("d") == MemberState::kDead);
  // Let the death's own retransmits run out.
  for (int i = 0; i < 50; ++i) {
    (void)a->HandleMessage("b", From("b", Ping{uint64_t(i + 1), "a"}), f.now);
    (void)a->TakeOutbox();
  }
  auto dead_sent = [&] {
    (void)a->HandleMessage("b", From("b", Ping{999, "a"}), f.now);
    for (const Outbound& out : a->TakeOutbox()) {
      for (const Update& u : out.message.updates) {
        const Dead* d = std::get_if<Dead>(&u);
        if (d != nullptr && d->name == "d" && d->incarnation == 100) {
          return true;
        }
      }
    }
    return false;
  };
  CHECK_FALSE(dead_sent());
  // b missed the death, probed d itself and suspects it: a tells it again.
  (void)a->HandleMessage(
      "b", From("b", std::monostate(), {Suspect{"d", 100, "b"}}), f.now);
  CHECK(a->StateOf("d") == MemberState::kDead);
  CHECK(dead_sent());
  // Spend that copy too.
  for (int i = 0; i < 50; ++i) {
    (void)a->HandleMessage("b", From("b", Ping{uint64_t(i + 1), "a"}), f.now);
    (void)a->TakeOutbox();
  }
  REQUIRE_FALSE(dead_sent());
  // A full-state sync from a peer that holds d dead too is no news: the
  // death is not gossiped again (every 30 s, for as long as d is kept).
  PushPull sync{7,
                false,
                false,
                {MemberDigest{f.Record("d", 100), MemberState::kDead, 100}}};
  REQUIRE(a->HandleMessage("b", From("b", sync), f.now).ok());
  CHECK(a->StateOf("d") == MemberState::kDead);
  CHECK_FALSE(dead_sent());
  // Nor is a periodic sync's summary of it.
  PushPull summary{8};
  summary.summaries = {MemberSummary{"d", 100, MemberState::kDead, 100}};
  REQUIRE(a->HandleMessage("b", From("b", summary), f.now).ok());
  CHECK(a->StateOf("d") == MemberState::kDead);
  CHECK_FALSE(dead_sent());
  // A sync from a peer that still suspects d is: it missed the death.
  summary.summaries[0].state = MemberState::kSuspect;
  REQUIRE(a->HandleMessage("b", From("b", summary), f.now).ok());
  CHECK(a->StateOf("d") == MemberState::kDead);
  CHECK(dead_sent());
}

TEST_CASE("a stale suspicion gets the refuting record back, to its sender") {
  Fixture f;
  std::vector<std::string> peers = {"b", "c", "d"};
  for (int i = 0; i < 10; ++i) peers.push_back(absl::StrCat("m", i));
  std::unique_ptr<Membership> a = f.Node("a", peers);
  // a holds d (and m0..m9) refuted: alive at 101, where the others still
  // know 100.
  std::vector<Update> refuted = {f.Record("d", 101)};
  for (int i = 0; i < 10; ++i) {
    refuted.push_back(f.Record(absl::StrCat("m", i), 101));
  }
  REQUIRE(
      a->HandleMessage("c", From("c", std::monostate(), refuted), f.now).ok());
  REQUIRE(a->Find("d")->incarnation == 101);
  // Let those records' own retransmits run out, so that whatever a sends
  // below is the answer alone.
  for (int i = 0; i < 200 && a->queued_updates() > 0; ++i) {
    (void)a->HandleMessage("b", From("b", Ping{uint64_t(i + 1), "a"}), f.now);
    (void)a->TakeOutbox();
  }
  REQUIRE(a->queued_updates() == 0);
  // What a sends for one message of b's: (peer, names of the records).
  auto answer = [&](const std::vector<Update>& updates) {
    REQUIRE(a->HandleMessage("b", From("b", std::monostate(), updates), f.now)
                .ok());
    std::vector<std::pair<std::string, std::vector<std::string>>> out;
    for (const Outbound& o : a->TakeOutbox()) {
      std::vector<std::string> names;
      for (const Update& u : o.message.updates) {
        const AliveRef* r = std::get_if<AliveRef>(&u);
        REQUIRE(r != nullptr);
        // The record a holds: newer than the suspicion, which it refutes.
        CHECK((*r)->incarnation == a->Find((*r)->name)->record->incarnation);
        names.push_back((*r)->name);
      }
      out.emplace_back(o.to, names);
    }
    return out;
  };
  using Sent = std::vector<std::pair<std::string, std::vector<std::string>>>;
  // b relays c's suspicion of d at 100: both missed the refutation, and
  // each would declare d dead when its suspicion ran out. b, whom the
  // transport vouches for, gets d's record; c, named only in the notice,
  // gets nothing from a.
  CHECK(answer({Suspect{"d", 100, "c"}}) == Sent{{"b", {"d"}}});
  CHECK(a->StateOf("d") == MemberState::kAlive);
  CHECK(a->stats().stale_accusations_corrected == 1);
  // The same again within a probe interval: no second copy.
  CHECK(answer({Suspect{"d", 100, "c"}}).empty());
  f.now += a->config().probe_interval;
  CHECK(answer({Suspect{"d", 100, "b"}}) == Sent{{"b", {"d"}}});
  // Many stale suspicions in one message: one answer of at most 8 records.
  std::vector<Update> many;
  for (int i = 0; i < 10; ++i) {
    many.push_back(Suspect{absl::StrCat("m", i), 100, "b"});
  }
  const Sent batch = answer(many);
  REQUIRE(batch.size() == 1);
  CHECK(batch[0].first == "b");
  CHECK(batch[0].second.size() == 8);
  // A stale suspicion of a itself: its own record, and no refutation (its
  // incarnation already outbids the suspicion).
  const uint64_t inc = a->incarnation();
  f.now += a->config().probe_interval;
  CHECK(answer({Suspect{"a", inc - 1, "c"}}) == Sent{{"b", {"a"}}});
  CHECK(a->incarnation() == inc);
  CHECK(a->stats().refutations == 0);
  // Riding on a ping, the record goes on the ack: one message.
  f.now += a->config().probe_interval;
  REQUIRE(a->HandleMessage(
               "b", From("b", Ping{77, "a"}, {Suspect{"d", 100, "c"}}), f.now)
              .ok());
  std::vector<Outbound> acked = a->TakeOutbox();
  REQUIRE(acked.size() == 1);
  CHECK(std::holds_alternative<Ack>(acked[0].message.body));
  REQUIRE_FALSE(acked[0].message.updates.empty());
  const AliveRef* first = std::get_if<AliveRef>(&acked[0].message.updates[0]);
  REQUIRE(first != nullptr);
  CHECK((*first)->name == "d");
  CHECK((*first)->incarnation == 101);
  // A suspicion that is not stale is no occasion: a suspects d at 101 now.
  f.now += a->config().probe_interval;
  const uint64_t corrected = a->stats().stale_accusations_corrected;
  (void)a->HandleMessage(
      "b", From("b", std::monostate(), {Suspect{"d", 101, "b"}}), f.now);
  CHECK(a->StateOf("d") == MemberState::kSuspect);
  CHECK(a->stats().stale_accusations_corrected == corrected);
}

TEST_CASE(
    "a member repeating a suspicion of a member held dead re-arms one death, "
    "not one per suspicion") {
  Fixture f;
  std::unique_ptr<Membership> a = f.Node("a", {"b", "d"});
  (void)a->HandleMessage(
      "b", From("b", std::monostate(), {Dead{"d", 100, "b"}}), f.now);
  REQUIRE(a->StateOf("d") == MemberState::kDead);
  auto drain = [&] {
    // Counts the copies of d's death a sends until its queue is empty.
    int copies = 0;
    for (int i = 0; i < 200 && a->queued_updates() > 0; ++i) {
      (void)a->HandleMessage("b", From("b", Ping{uint64_t(i + 1), "a"}), f.now);
      for (const Outbound& out : a->TakeOutbox()) {
        for (const Update& u : out.message.updates) {
          const Dead* d = std::get_if<Dead>(&u);
          copies += d != nullptr && d->name == "d" ? 1 : 0;
        }
      }
    }
    return copies;
  };
  auto suspect = [&] {
    CHECK(
        a->HandleMessage(
             "b", From("b", std::monostate(), {Suspect{"d", 100, "b"}}), f.now)
            .ok());
    CHECK(a->queued_updates() == 1);
  };
  REQUIRE(drain() > 0);
  REQUIRE(a->queued_updates() == 0);
  // One suspicion: the death goes out again, a bounded number of times.
  suspect();
  const int once = drain();
  CHECK(once == RetransmitLimit(a->config().join_retransmit_mult, 3));
  // A compromised b sends the same suspicion 100 times: the queue holds
  // one update per member, so each re-arms the one queued death.
  for (int i = 0; i < 100; ++i) suspect();
  CHECK(a->StateOf("d") == MemberState::kDead);
  // What goes out is one death's retransmissions, not 100 of them.
  CHECK(drain() == once);
  CHECK(a->queued_updates() == 0);
}

TEST_CASE("a node told it is dead refutes with a higher incarnation") {
  Fixture f;
  std::unique_ptr<Membership> b = f.Node("b", {"a"});
  (void)b->HandleMessage(
      "a", From("a", std::monostate(), {Dead{"b", 100, "a"}}), f.now);
  CHECK(b->incarnation() == 101);
  CHECK(b->stats().refutations == 1);
  CHECK(b->StateOf("b") == MemberState::kAlive);
}

TEST_CASE("a restarted node is no ghost: its new incarnation beats its death") {
  Fixture f;
  std::unique_ptr<Membership> a = f.Node("a", {"b"});
  (void)a->HandleMessage(
      "c", From("c", std::monostate(), {Dead{"b", 100, "c"}}), f.now);
  REQUIRE(a->StateOf("b") == MemberState::kDead);
  // The old instance's record, replayed by anyone, cannot bring it back.
  (void)a->HandleMessage("c", From("c", std::monostate(), {f.Record("b", 100)}),
                         f.now);
  CHECK(a->StateOf("b") == MemberState::kDead);
  // The restarted b starts from the wall clock, far above 100.
  const uint64_t restarted = absl::ToUnixMicros(f.now);
  std::unique_ptr<Membership> b = f.Node("b", {"a"}, restarted);
  a->TakeEvents();
  (void)a->HandleMessage("b", From("b", std::monostate(), {b->record()}),
                         f.now);
  CHECK(a->StateOf("b") == MemberState::kAlive);
  CHECK(a->Find("b")->incarnation == restarted);
  CHECK(HasEvent(a->TakeEvents(), MemberEventKind::kJoined, "b"));
  // A late death notice about the old instance changes nothing.
  (void)a->HandleMessage(
      "c", From("c", std::monostate(), {Dead{"b", 100, "c"}}), f.now);
  CHECK(a->StateOf("b") == MemberState::kAlive);
}

TEST_CASE("graceful leave: a signed leaving record, gossiped until done") {
  Fixture f;
  std::unique_ptr<Membership> a = f.Node("a", {"b"});
  std::unique_ptr<Membership> b = f.Node("b", {"a"});
  CHECK(b->Leave(f.now).ok());
  CHECK(b->Leave(f.now).code() == absl::StatusCode::kFailedPrecondition);
  CHECK_FALSE(b->leave_done());
  f.Run(b.get(), f.now + absl::Seconds(5), [&](Outbound& out) {
    CHECK(out.to == "a");
    (void)a->HandleMessage("b", out.message, f.now);
  });
  CHECK(b->leave_done());
  CHECK(a->StateOf("b") == MemberState::kLeft);
  CHECK(HasEvent(a->TakeEvents(), MemberEventKind::kLeft, "b"));
  CHECK(b->stats().probes == 0);  // a leaving node does not probe
  // Nobody else can make b leave: a leaving record must be b's own.
  std::unique_ptr<Membership> c = f.Node("c", {"b"});
  Alive fake;
  fake.name = "b";
  fake.incarnation = 500;
  fake.leaving = true;
  REQUIRE(f.Signer("a")->Sign(&fake).ok());
  (void)c->HandleMessage(
      "a", From("a", std::monostate(), {std::make_shared<const Alive>(fake)}),
      f.now);
  CHECK(c->StateOf("b") == MemberState::kAlive);
}

TEST_CASE("join through a seed; labels and capacity travel with alive") {
  Fixture f;
  MembershipOptions ao = f.Options("a", {});
  ao.meta.labels = {{"zone", "z1"}, {"gpu", "h100"}};
  ao.meta.capacity = {{"cpu_millicores", 16000}};
  std::unique_ptr<Membership> a = *Membership::Create(ao, f.now);
  std::unique_ptr<Membership> b = f.Node("b", {});
  b->Join({std::string("a:7946")}, f.now);
  Pump(f, {{"a", a.get()}, {"b", b.get()}});
  CHECK(a->StateOf("b") == MemberState::kAlive);
  CHECK(b->StateOf("a") == MemberState::kAlive);
  const MemberSnapshot seen = *b->Find("a");
  CHECK(seen.record->meta.labels ==
        std::vector<std::pair<std::string, std::string>>{{"gpu", "h100"},
                                                         {"zone", "z1"}});
  CHECK(seen.record->meta.capacity[0].second == 16000);
  CHECK(seen.last_heard == f.now);
  CHECK(b->seeds() == std::vector<std::string>{"a:7946"});
  // Labels change: a new signed record, and b learns it.
  NodeMeta meta = a->record()->meta;
  meta.labels = {{"zone", "z2"}};
  CHECK(a->UpdateMeta(meta, f.now).ok());
  f.Run(a.get(), f.now + absl::Seconds(1), [&](Outbound& out) {
    (void)b->HandleMessage("a", out.message, f.now);
  });
  CHECK(b->Find("a")->record->meta.labels[0].second == "z2");
  CHECK(HasEvent(b->TakeEvents(), MemberEventKind::kUpdated, "a"));
}

TEST_CASE(
    "a joined node syncs once with a member soon after the seed answers") {
  // The syncs b sends a (not the join itself, not answers) within 2 s of
  // a's answer to its join, with `delay`: before a, which the test no
  // longer answers, can be held dead and retried. The periodic sync is an
  // hour away (from a random phase, as every node starts).
  auto syncs_after_join = [](absl::Duration delay) {
    Fixture f;
    MembershipOptions o = f.Options("b", {});
    o.config.push_pull_interval = absl::Hours(1);
    o.config.join_sync_delay = delay;
    std::unique_ptr<Membership> a = f.Node("a", {});
    std::unique_ptr<Membership> b = *Membership::Create(o, f.now);
    b->Join({std::string("a:7946")}, f.now);
    Pump(f, {{"a", a.get()}, {"b", b.get()}});
    REQUIRE(b->StateOf("a") == MemberState::kAlive);
    const absl::Time answered = f.now;
    std::vector<absl::Duration> syncs;
    f.Run(b.get(), answered + absl::Seconds(2), [&](Outbound& out) {
      const PushPull* pp = std::get_if<PushPull>(&out.message.body);
      if (pp != nullptr && !pp->reply && !pp->join && out.to == "a") {
        syncs.push_back(f.now - answered);
      }
    });
    return syncs;
  };
  // join_sync_delay (500 ms by default) jittered x0.5 to x1.5, once.
  std::vector<absl::Duration> on = syncs_after_join(absl::Milliseconds(500));
  REQUIRE(on.size() == 1);
  CHECK(on[0] >= absl::Milliseconds(250));
  CHECK(on[0] < absl::Milliseconds(750));
  CHECK(Config::Lan().join_sync_delay == absl::Milliseconds(500));
  // Zero turns it off.
  CHECK(syncs_after_join(absl::ZeroDuration()).empty());
  Config bad = Config::Lan();
  bad.join_sync_delay = absl::Milliseconds(-1);
  CHECK(ValidateConfig(bad).message() == "join_sync_delay: must be >= 0");
}

TEST_CASE("an unanswered seed is retried with growing, capped backoff") {
  Fixture f;
  std::unique_ptr<Membership> a = f.Node("a", {});
  a->Join({std::string("nowhere:1")}, f.now);
  std::vector<absl::Time> attempts = {f.now};
  a->TakeOutbox();
  f.Run(a.get(), f.now + absl::Minutes(10), [&](Outbound& out) {
    if (out.address == "nowhere:1") attempts.push_back(f.now);
  });
  REQUIRE(attempts.size() >= 8);
  // A node that knows no live member has not joined: it retries from
  // join_retry_interval (1 s), doubling, up to reconnect_interval (10 s),
  // each attempt at the first jittered reconnect tick (<= 1.5 s) after
  // the wait. (It used to back off like a dead member, up to 5 minutes.)
  for (size_t i = 1; i < attempts.size(); ++i) {
    const absl::Duration wait =
        std::min(absl::Seconds(1) * (1 << std::min<size_t>(i - 1, 10)),
                 absl::Seconds(10));
    const absl::Duration gap = attempts[i] - attempts[i - 1];
    CHECK(gap >= wait);
    CHECK(gap <= wait + absl::Milliseconds(1500));
  }
  CHECK(attempts.back() - attempts[attempts.size() - 2] >= absl::Seconds(10));
}

TEST_CASE("persisted members restore a node that rejoins without a seed") {
  Fixture f;
  std::unique_ptr<Membership> a = f.Node("a", {"b", "c", "d"});
  (void)a->HandleMessage("b", From("b", Ping{1, "a"}), f.now);
  (void)a->HandleMessage(
      "b", From("b", std::monostate(), {Suspect{"c", 100, "b"}}), f.now);
  (void)a->HandleMessage(
      "b", From("b", std::monostate(), {Dead{"d", 100, "b"}}), f.now);
  std::vector<MemberSnapshot> stored = a->Snapshot();
  REQUIRE(stored.size() == 4);
  const MemberSnapshot b_snap = *a->Find("b");
  CHECK(b_snap.last_heard == f.now);
  CHECK(b_snap.record->meta.addresses[0] == "b:7946");
  // The driver keeps records as bytes; they come back intact.
  for (MemberSnapshot& s : stored) {
    s.record =
        std::make_shared<const Alive>(*DecodeAlive(EncodeAlive(*s.record)));
  }
  MembershipOptions o = f.Options("a", {}, absl::ToUnixMicros(f.now));
  o.members = stored;
  o.rejoin_on_start = true;
  f.now += absl::Minutes(1);
  std::unique_ptr<Membership> again = *Membership::Create(o, f.now);
  CHECK(again->StateOf("b") == MemberState::kAlive);
  CHECK(again->StateOf("c") == MemberState::kAlive);  // suspects: re-probed
  CHECK(again->StateOf("d") == MemberState::kDead);
  CHECK(again->Find("b")->last_heard == b_snap.last_heard);
  // It pushes its state to a live member at once.
  again->Tick(f.now);
  bool pushed = false;
  for (const Outbound& out : again->TakeOutbox()) {
    if (const PushPull* pp = std::get_if<PushPull>(&out.message.body)) {
      pushed = !pp->reply && (out.to == "b" || out.to == "c");
    }
  }
  CHECK(pushed);
}

// The push-pull a node sends at its next tick after a rejoin (to a live
// member), taken from its outbox.
Outbound TakePushPull(Membership* m, absl::Time now) {
  m->Tick(now);
  for (Outbound& out : m->TakeOutbox()) {
    if (std::holds_alternative<PushPull>(out.message.body)) return out;
  }
  FAIL("no push-pull sent");
  return {};
}

std::unique_ptr<Membership> Rejoining(Fixture& f, const std::string& name,
                                      std::vector<MemberSnapshot> members,
                                      uint64_t seed = 1) {
  MembershipOptions o = f.Options(name, {});
  o.members = std::move(members);
  o.rejoin_on_start = true;
  o.random_seed = seed;
  return *Membership::Create(o, f.now);
}

TEST_CASE("push-pull between settled members: a fingerprint, no summaries") {
  Fixture f;
  std::map<std::string, std::unique_ptr<Membership>> nodes;
  nodes["a"] = f.Node("a", {"b", "c"});
  nodes["b"] = f.Node("b", {"a", "c"});
  nodes["c"] = f.Node("c", {"a", "b"});
  // Two push-pull intervals, every message delivered at once; a's requests,
  // the replies to them, and any fill are kept once the records are no
  // longer fresh (6 suspicion timeouts of a 3-node mesh, 24 s: until then
  // a node's own new record also goes whole).
  std::vector<Message> requests, replies, fills;
  const absl::Time settled = f.now + absl::Seconds(25);
  const absl::Time end = f.now + absl::Seconds(65);
  while (f.now < end) {
    f.now += absl::Milliseconds(50);
    for (auto& [name, m] : nodes) m->Tick(f.now);
    for (bool busy = true; busy;) {
      busy = false;
      for (auto& [name, m] : nodes) {
        for (Outbound& out : m->TakeOutbox()) {
          busy = true;
          const PushPull* pp = std::get_if<PushPull>(&out.message.body);
          if (pp != nullptr && f.now >= settled) {
            if (pp->fill) fills.push_back(out.message);
            if (name == "a" && !pp->reply && !pp->fill) {
              requests.push_back(out.message);
            }
            if (out.to == "a" && pp->reply) replies.push_back(out.message);
          }
          REQUIRE(
              nodes.at(out.to)->HandleMessage(name, out.message, f.now).ok());
        }
      }
    }
  }
  REQUIRE(requests.size() >= 1);
  for (const Message& r : requests) {
    const PushPull& pp = std::get<PushPull>(r.body);
    // The three hold the same view, and a's request says so in 8 bytes:
    // no summary (a few bytes a member) and no record (most of a kilobyte
    // with its certificate and signature in the daemon).
    CHECK(pp.members.empty());
    CHECK(pp.summaries.empty());
    CHECK(pp.fingerprint == nodes["a"]->Fingerprint());
    CHECK(EncodedSize(r) < 24);
  }
  CHECK(nodes["a"]->Fingerprint() == nodes["b"]->Fingerprint());
  CHECK(nodes["a"]->Fingerprint() == nodes["c"]->Fingerprint());
  REQUIRE(replies.size() == requests.size());
  for (const Message& r : replies) {
    CHECK(std::get<PushPull>(r.body).members.empty());
    CHECK(std::get<PushPull>(r.body).want.empty());
    CHECK_FALSE(std::get<PushPull>(r.body).mismatch);
  }
  CHECK(fills.empty());
  CHECK(nodes["a"]->stats().push_pulls_by_fingerprint >= requests.size());
  for (auto& [name, m] : nodes) CHECK(m->stats().fingerprint_mismatches == 0);
}

TEST_CASE("push-pull by fingerprint: views that differ sync by summaries") {
  Fixture f;
  std::unique_ptr<Membership> a = f.Node("a", {"b"});
  std::unique_ptr<Membership> b = f.Node("b", {"a", "e"});
  CHECK(a->Fingerprint() != b->Fingerprint());
  // Once their own records are settled, a's periodic sync (b is its only
  // member) is a fingerprint.
  f.now += absl::Seconds(40);
  Outbound req = TakePushPull(a.get(), f.now);
  REQUIRE(req.to == "b");
  const PushPull& pp = std::get<PushPull>(req.message.body);
  CHECK(pp.summaries.empty());
  CHECK(pp.members.empty());
  CHECK(pp.fingerprint == a->Fingerprint());
  // b holds e, which a does not: the fingerprints differ, and b says so.
  REQUIRE(b->HandleMessage("a", req.message, f.now).ok());
  std::vector<Outbound> out = b->TakeOutbox();
  REQUIRE(out.size() == 1);
  const PushPull& reply = std::get<PushPull>(out[0].message.body);
  CHECK(reply.reply);
  CHECK(reply.mismatch);
  CHECK(reply.members.empty());
  CHECK(b->stats().fingerprint_mismatches == 1);
  // a syncs again at once, by summaries, and learns e from the answer.
  REQUIRE(a->HandleMessage("b", out[0].message, f.now).ok());
  out = a->TakeOutbox();
  REQUIRE(out.size() == 1);
  CHECK(out[0].to == "b");
  const PushPull& full = std::get<PushPull>(out[0].message.body);
  CHECK(full.fingerprint == 0);
  CHECK(full.summaries.size() == 2);
  REQUIRE(b->HandleMessage("a", out[0].message, f.now).ok());
  out = b->TakeOutbox();
  REQUIRE(out.size() == 1);
  REQUIRE(std::get<PushPull>(out[0].message.body).members.size() == 1);
  REQUIRE(a->HandleMessage("b", out[0].message, f.now).ok());
  CHECK(a->StateOf("e") == MemberState::kAlive);
  // The same view now, the same fingerprint: the next sync needs nothing.
  CHECK(a->Fingerprint() == b->Fingerprint());
  PushPull again{99};
  again.fingerprint = a->Fingerprint();
  REQUIRE(b->HandleMessage("a", From("a", again), f.now).ok());
  out = b->TakeOutbox();
  REQUIRE(out.size() == 1);
  CHECK_FALSE(std::get<PushPull>(out[0].message.body).mismatch);
  CHECK(b->stats().fingerprint_mismatches == 1);
  // A member held suspect is another view: the fingerprint changes.
  const uint64_t before = a->Fingerprint();
  REQUIRE(
      a->HandleMessage(
           "b", From("b", std::monostate(), {Suspect{"e", 100, "b"}}), f.now)
          .ok());
  REQUIRE(a->StateOf("e") == MemberState::kSuspect);
  CHECK(a->Fingerprint() != before);
}

TEST_CASE("a record that changed lately goes whole in a push-pull") {
  Fixture f;
  std::unique_ptr<Membership> a = f.Node("a", {"b", "c"});
  // b refutes (a new incarnation); a learns it now.
  REQUIRE(a->HandleMessage(
               "b", From("b", std::monostate(), {f.Record("b", 101)}), f.now)
              .ok());
  REQUIRE(a->Find("b")->incarnation == 101);
  // a's next sync names c and itself (unchanged since the start) but
  // carries b's new record whole, so that a member still suspecting the
  // old incarnation learns it from this one message.
  Outbound req;
  f.Run(a.get(), f.now + absl::Seconds(40), [&](Outbound& out) {
    const PushPull* pp = std::get_if<PushPull>(&out.message.body);
    if (pp != nullptr && !pp->reply && req.to.empty()) req = out;
  });
  REQUIRE_FALSE(req.to.empty());
  const PushPull& pp = std::get<PushPull>(req.message.body);
  REQUIRE(pp.members.size() >= 1);
  bool b_whole = false;
  for (const MemberDigest& d : pp.members) {
    b_whole |= d.alive->name == "b" && d.alive->incarnation == 101;
  }
  CHECK(b_whole);
  for (const MemberSummary& x : pp.summaries) CHECK(x.name != "b");
}

TEST_CASE(
    "a member's first record goes whole for one suspicion timeout; a record "
    "that replaced another for the longer while") {
  Fixture f;
  std::unique_ptr<Membership> a = f.Node("a", {"b"});
  // b refutes (its record replaces the one a held), and a first hears of c.
  REQUIRE(a->HandleMessage("b",
                           From("b", std::monostate(),
                                {f.Record("b", 101), f.Record("c", 100)}),
                           f.now)
              .ok());
  REQUIRE(a->Find("b")->incarnation == 101);
  REQUIRE(a->StateOf("c") == MemberState::kAlive);
  // Three members: a suspicion timeout is 4 s (4 x max(1, log10 3) x 1 s),
  // and a replaced record goes whole for 6 of them (24 s). A reply that
  // says the views differ makes a sync by summaries at once.
  const absl::Time start = f.now;
  auto sync_at = [&](absl::Duration after) {
    f.now = start + after;
    PushPull differ{7};
    differ.reply = true;
    differ.mismatch = true;
    REQUIRE(a->HandleMessage("b", From("b", differ), f.now).ok());
    for (Outbound& out : a->TakeOutbox()) {
      const PushPull* pp = std::get_if<PushPull>(&out.message.body);
      if (pp != nullptr && !pp->reply && !pp->fill) return *pp;
    }
    FAIL("no push-pull sent");
    return PushPull{};
  };
  auto whole = [](const PushPull& pp, const std::string& name) {
    return std::any_of(
        pp.members.begin(), pp.members.end(),
        [&](const MemberDigest& d) { return d.alive->name == name; });
  };
  auto summarized = [](const PushPull& pp, const std::string& name) {
    return std::any_of(pp.summaries.begin(), pp.summaries.end(),
                       [&](const MemberSummary& x) { return x.name == name; });
  };
  const PushPull soon = sync_at(absl::Seconds(2));
  CHECK(whole(soon, "b"));
  CHECK(whole(soon, "c"));
  // Past one suspicion timeout: c's first record is named, not sent, and
  // b's replacing record still goes whole.
  const PushPull later = sync_at(absl::Seconds(6));
  CHECK(whole(later, "b"));
  CHECK_FALSE(whole(later, "c"));
  CHECK(summarized(later, "c"));
  // Past the longer while, both are named.
  const PushPull settled = sync_at(absl::Seconds(25));
  CHECK_FALSE(whole(settled, "b"));
  CHECK(summarized(settled, "b"));
  CHECK(summarized(settled, "c"));
}

TEST_CASE("push-pull by digest: each side gets the records it lacks") {
  Fixture f;
  // a holds c's newer record and knows d; b knows e, which a does not.
  std::unique_ptr<Membership> a;
  Outbound req;
  // The rejoin push goes to a random live member: pick a seed that makes
  // it b.
  for (uint64_t seed = 1; req.to != "b"; ++seed) {
    REQUIRE(seed < 64);
    a = Rejoining(f, "a",
                  {f.Stored("b", 100), f.Stored("c", 105),
                   f.Stored("d", 100, MemberState::kDead)},
                  seed);
    req = TakePushPull(a.get(), f.now);
  }
  std::unique_ptr<Membership> b = f.Node("b", {"a", "c", "e"});
  REQUIRE(b->HandleMessage("a", req.message, f.now).ok());
  std::vector<Outbound> replies = b->TakeOutbox();
  REQUIRE(replies.size() == 1);
  const PushPull& reply = std::get<PushPull>(replies[0].message.body);
  // b sends only e (a lacks it); it asks for c (older here) and d (unknown).
  REQUIRE(reply.members.size() == 1);
  CHECK(reply.members[0].alive->name == "e");
  CHECK(reply.want == std::vector<std::string>{"c", "d"});
  REQUIRE(a->HandleMessage("b", replies[0].message, f.now).ok());
  CHECK(a->StateOf("e") == MemberState::kAlive);
  std::vector<Outbound> fills = a->TakeOutbox();
  REQUIRE(fills.size() == 1);
  CHECK(fills[0].to == "b");
  const PushPull& fill = std::get<PushPull>(fills[0].message.body);
  CHECK(fill.fill);
  REQUIRE(fill.members.size() == 2);
  REQUIRE(b->HandleMessage("a", fills[0].message, f.now).ok());
  CHECK(b->Find("c")->incarnation == 105);
  CHECK(b->StateOf("d") == MemberState::kDead);
  // A fill gets no answer.
  CHECK(b->TakeOutbox().empty());
  // Both now hold the same view of every member.
  for (const std::string name : {"a", "b", "c", "d", "e"}) {
    CAPTURE(name);
    CHECK(a->StateOf(name) == b->StateOf(name));
    CHECK(a->Find(name)->incarnation == b->Find(name)->incarnation);
  }
}

TEST_CASE("a summary accusing the receiver is refuted in the reply") {
  Fixture f;
  std::unique_ptr<Membership> b = f.Node("b", {"a"});
  PushPull pp{7};
  pp.summaries = {MemberSummary{"a", 100, MemberState::kAlive, 100},
                  MemberSummary{"b", 100, MemberState::kSuspect, 100}};
  REQUIRE(b->HandleMessage("a", From("a", pp), f.now).ok());
  CHECK(b->incarnation() == 101);
  std::vector<Outbound> replies = b->TakeOutbox();
  REQUIRE(replies.size() == 1);
  const PushPull& reply = std::get<PushPull>(replies[0].message.body);
  REQUIRE(reply.members.size() == 1);
  CHECK(reply.members[0].alive->name == "b");
  CHECK(reply.members[0].alive->incarnation == 101);
  // An accusation of another member becomes our own suspicion.
  std::unique_ptr<Membership> c = f.Node("c", {"a", "b"});
  pp.summaries[1] = MemberSummary{"b", 100, MemberState::kDead, 100};
  REQUIRE(c->HandleMessage("a", From("a", pp), f.now).ok());
  CHECK(c->StateOf("b") == MemberState::kSuspect);
}

TEST_CASE("bad push-pull digests are refused; a fill answers a want once") {
  Fixture f;
  std::unique_ptr<Membership> a = f.Node("a", {"b"});
  auto code = [&](const PushPull& pp) {
    return a->HandleMessage("b", From("b", pp), f.now).code();
  };
  PushPull want_in_request{1};
  want_in_request.want = {"a"};
  CHECK(code(want_in_request) == absl::StatusCode::kInvalidArgument);
  PushPull fill_with_want{2, false, false, {}, {}, {"a"}, true};
  CHECK(code(fill_with_want) == absl::StatusCode::kInvalidArgument);
  PushPull older{3};
  older.summaries = {MemberSummary{"b", 9, MemberState::kSuspect, 8}};
  CHECK(code(older) == absl::StatusCode::kInvalidArgument);
  PushPull unnamed{4};
  unnamed.summaries = {MemberSummary{"", 1, MemberState::kAlive, 1}};
  CHECK(code(unnamed) == absl::StatusCode::kInvalidArgument);
  PushPull bad_state{5};
  bad_state.summaries = {MemberSummary{"b", 1, static_cast<MemberState>(9), 1}};
  CHECK(code(bad_state) == absl::StatusCode::kInvalidArgument);
  CHECK(a->TakeOutbox().empty());
  // A reply that names a record a thousand times, and names that we do not
  // know, gets each record we hold once: no amplification.
  PushPull reply{6, false, true};
  reply.want.assign(1000, "a");
  reply.want.push_back("nobody");
  REQUIRE(a->HandleMessage("b", From("b", reply), f.now).ok());
  std::vector<Outbound> fills = a->TakeOutbox();
  REQUIRE(fills.size() == 1);
  const PushPull& fill = std::get<PushPull>(fills[0].message.body);
  REQUIRE(fill.members.size() == 1);
  CHECK(fill.members[0].alive->name == "a");
  // On the wire the incarnation is its excess over the record's; one that
  // overflows is refused, naming the field.
  Message m = From("b", older);
  absl::StatusOr<Message> decoded = DecodeMessage(EncodeMessage(m), 1 << 20);
  REQUIRE_FALSE(decoded.ok());
  CHECK(decoded.status().message() ==
        "push_pull.summaries.incarnation_above_record: overflows");
}

}  // namespace
}  // namespace mycel::membership
