// gossip_fuzz: bytes from authenticated peers into the membership state
// machine (mesh/membership), as a compromised member or a buggy one could
// send them, between ticks of its clock.
//
// An input is a list of operations:
//   op % 3 == 0: a message, Input::Bytes(), from peer n<(op / 3) % 6>: n0
//                is this node itself, n1-n4 are members it knows, n5 a
//                stranger;
//   op % 3 == 1: the clock moves (op / 3) * 40 ms, and the timers due run;
//   op % 3 == 2: what it wants sent is taken and checked.
// Checked after each: HandleBytes answers only the codes it documents; the
// member counts add up; this node is alive with its own record; every
// member's record is its own, signed by it (whichever path brought it:
// gossip, push-pull, a fill) and no newer than its incarnation; and every
// message it sends encodes to EncodedSize bytes and decodes back to the
// same bytes.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "mesh/membership/codec.h"
#include "mesh/membership/fake_signer.h"
#include "mesh/membership/membership.h"
#include "tests/fuzz/fuzz_target.h"

namespace mycel::membership {
namespace {

constexpr uint64_t kRealm = 7;
constexpr absl::Time kStart = absl::FromUnixSeconds(1'800'000'000);
constexpr int kPeers = 6;

std::string Peer(int i) { return absl::StrCat("n", i); }

class World {
 public:
  AliveSigner* Signer(const std::string& name) {
    std::unique_ptr<FakeSigner>& s = signers_[name];
    if (!s) s = std::make_unique<FakeSigner>(kRealm, name);
    return s.get();
  }
  AliveRef Record(const std::string& name, uint64_t incarnation,
                  bool leaving = false) {
    Alive a;
    a.name = name;
    a.incarnation = incarnation;
    a.meta.addresses = {absl::StrCat(name, ".test:7946")};
    a.meta.labels = {{"zone", "a"}};
    a.meta.capacity = {{"cpu", 2}};
    a.leaving = leaving;
    FUZZ_CHECK(Signer(name)->Sign(&a).ok(), name);
    return std::make_shared<const Alive>(std::move(a));
  }
  AliveVerifier* verifier() { return &verifier_; }
  std::unique_ptr<Membership> Node(absl::Time now) {
    MembershipOptions o;
    o.name = "n0";
    o.incarnation = 100;
    o.meta.addresses = {"n0.test:7946"};
    o.random_seed = 1;
    o.signer = Signer("n0");
    o.verifier = &verifier_;
    for (int i = 1; i <= 4; ++i) {
      o.members.push_back(MemberSnapshot{Peer(i), MemberState::kAlive, 100,
                                         Record(Peer(i), 100), now,
                                         absl::InfinitePast()});
    }
    o.rejoin_on_start = false;
    absl::StatusOr<std::unique_ptr<Membership>> m =
        Membership::Create(std::move(o), now);
    FUZZ_CHECK(m.ok(), m.status().ToString());
    return *std::move(m);
  }

 private:
  FakeVerifier verifier_{kRealm};
  std::map<std::string, std::unique_ptr<FakeSigner>> signers_;
};

void CheckMembers(const Membership& m, AliveVerifier* verifier) {
  const std::vector<MemberSnapshot> members = m.Snapshot();
  int counted = 0;
  for (MemberState s : {MemberState::kAlive, MemberState::kSuspect,
                        MemberState::kDead, MemberState::kLeft}) {
    counted += m.CountIn(s);
  }
  FUZZ_CHECK(counted == static_cast<int>(members.size()),
             absl::StrCat(counted, " counted, ", members.size(), " listed"));
  bool self = false;
  for (const MemberSnapshot& s : members) {
    FUZZ_CHECK(s.record != nullptr, s.name);
    FUZZ_CHECK(s.record->name == s.name, s.name);
    FUZZ_CHECK(s.incarnation >= s.record->incarnation, s.name);
    absl::StatusOr<std::string> signer = verifier->Verify(*s.record);
    FUZZ_CHECK(signer.ok() && *signer == s.name,
               absl::StrCat(s.name, ": ", signer.status().ToString()));
    if (s.name == m.name()) {
      self = true;
      // Nothing a peer says makes this node anything but alive.
      FUZZ_CHECK(s.state == MemberState::kAlive,
                 std::string(MemberStateName(s.state)));
      FUZZ_CHECK(s.incarnation == m.incarnation(), "");
    }
  }
  FUZZ_CHECK(self, "this node is not among its members");
}

void CheckOutbox(Membership& m) {
  for (const Outbound& o : m.TakeOutbox()) {
    FUZZ_CHECK(!o.to.empty() || !o.address.empty(), "nowhere to send");
    const std::string bytes = EncodeMessage(o.message);
    FUZZ_CHECK(bytes.size() == EncodedSize(o.message),
               absl::StrCat(bytes.size(), " encoded, ", EncodedSize(o.message),
                            " computed"));
    absl::StatusOr<Message> back = DecodeMessage(bytes, bytes.size());
    FUZZ_CHECK(back.ok(), back.status().ToString());
    FUZZ_CHECK(EncodeMessage(*back) == bytes, "no round trip");
  }
  m.TakeEvents();
}

}  // namespace
}  // namespace mycel::membership

namespace mycel::fuzz {

std::vector<std::string> Seeds() {
  using namespace mycel::membership;
  World w;
  auto msg = [](Message m) { return EncodeMessage(m); };
  std::vector<Message> messages;
  messages.push_back({.body = Ping{.seq = 5}});
  messages.push_back({.body = Ping{.seq = 6, .target = "n2"}});
  messages.push_back({.body = Ack{.seq = 1}});
  messages.push_back({.body = Nack{.seq = 1}});
  messages.push_back({.body = IndirectPing{.seq = 7, .target = "n3"}});
  // A stranger joins with its record and news of others.
  PushPull join{.seq = 9, .join = true};
  join.members.push_back({w.Record("n5", 3), MemberState::kAlive, 3});
  join.members.push_back({w.Record("n1", 101), MemberState::kSuspect, 102});
  messages.push_back({.body = join});
  PushPull sync{.seq = 10};
  sync.summaries.push_back({"n1", 100, MemberState::kAlive, 100});
  sync.summaries.push_back({"n2", 100, MemberState::kDead, 104});
  sync.summaries.push_back({"n0", 99, MemberState::kAlive, 99});
  sync.want = {"n3", "n0"};
  messages.push_back({.body = sync});
  PushPull fill{.seq = 11, .reply = true, .fill = true};
  fill.members.push_back({w.Record("n4", 100, true), MemberState::kLeft, 100});
  messages.push_back({.body = fill});
  // Gossip: this node suspected (it must refute), a death, a new record,
  // a leave, and a record of this node that it did not sign this life.
  Message gossip;
  gossip.updates.push_back(Suspect{"n0", 100, "n1"});
  gossip.updates.push_back(Dead{"n2", 100, "n1"});
  gossip.updates.push_back(w.Record("n3", 150));
  gossip.updates.push_back(w.Record("n4", 101, true));
  gossip.updates.push_back(w.Record("n0", 400));
  messages.push_back(gossip);
  Message ping_with_news{.body = Ping{.seq = 12}};
  ping_with_news.updates.push_back(Suspect{"n1", 100, "n2"});
  ping_with_news.updates.push_back(Dead{"n0", 100, "n3"});
  messages.push_back(ping_with_news);

  std::vector<std::string> seeds;
  for (size_t i = 0; i < messages.size(); ++i) {
    const int from = 1 + static_cast<int>(i % 4);
    InputBuilder b;
    b.Byte(static_cast<uint8_t>(from * 3)).Bytes(msg(messages[i]));
    b.Byte(3 * 5 + 1).Byte(2);  // 200 ms on, then the outbox
    b.Byte(static_cast<uint8_t>(5 * 3)).Bytes(msg(messages[i]));  // stranger
    b.Byte(3 * 50 + 1).Byte(2);  // 2 s on: probes, suspicions
    seeds.push_back(b.Take());
  }
  // Everything from one peer, then a long wait: deaths declared.
  InputBuilder all;
  for (const Message& m : messages) all.Byte(3).Bytes(msg(m));
  for (int i = 0; i < 10; ++i) all.Byte(3 * 80 + 1).Byte(2);
  seeds.push_back(all.Take());
  return seeds;
}

}  // namespace mycel::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mycel::membership;
  mycel::fuzz::Input in(data, size);
  World w;
  absl::Time now = kStart;
  std::unique_ptr<Membership> m = w.Node(now);
  while (!in.empty()) {
    const uint8_t op = in.Byte();
    switch (op % 3) {
      case 0: {
        const std::string peer = Peer((op / 3) % kPeers);
        absl::Status s = m->HandleBytes(peer, in.Bytes(), now);
        FUZZ_CHECK(s.ok() || absl::IsInvalidArgument(s) ||
                       absl::IsPermissionDenied(s) ||
                       absl::IsResourceExhausted(s),
                   s.ToString());
        break;
      }
      case 1:
        now += absl::Milliseconds(40) * (op / 3);
        if (now >= m->NextDeadline()) m->Tick(now);
        FUZZ_CHECK(m->NextDeadline() > now, "a timer due was left");
        break;
      case 2:
        CheckOutbox(*m);
        break;
    }
    CheckMembers(*m, w.verifier());
  }
  CheckOutbox(*m);
  return 0;
}
