// The parts of mesh/membership on their own: profiles, the Lifeguard
// formulas, the broadcast queue, the rate limiter, signing and the codec.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "mesh/membership/awareness.h"
#include "mesh/membership/broadcast_queue.h"
#include "mesh/membership/codec.h"
#include "mesh/membership/config.h"
#include "mesh/membership/fake_signer.h"
#include "mesh/membership/prng.h"
#include "mesh/membership/rate_limiter.h"
#include "mesh/membership/signing.h"
#include "mesh/membership/suspicion.h"

namespace mycel::membership {
namespace {

constexpr uint64_t kRealm = 42;

AliveRef SignedAlive(const std::string& name, uint64_t inc,
                     std::vector<std::pair<std::string, std::string>> labels = {
                         {"zone", "a"}}) {
  Alive a;
  a.name = name;
  a.incarnation = inc;
  a.meta.addresses = {name + ".example:7946"};
  a.meta.labels = std::move(labels);
  a.meta.capacity = {{"cpu_millicores", 4000}, {"memory_bytes", -1}};
  FakeSigner signer(kRealm, name);
  REQUIRE(signer.Sign(&a).ok());
  return std::make_shared<const Alive>(std::move(a));
}

TEST_CASE("profiles carry memberlist's LAN and WAN defaults") {
  const Config lan = Config::Lan();
  CHECK(lan.probe_interval == absl::Seconds(1));
  CHECK(lan.probe_timeout == absl::Milliseconds(500));
  CHECK(lan.indirect_checks == 3);
  CHECK(lan.suspicion_mult == 4);
  CHECK(lan.suspicion_max_timeout_mult == 6);
  CHECK(lan.retransmit_mult == 4);
  CHECK(lan.gossip_interval == absl::Milliseconds(200));
  CHECK(lan.gossip_nodes == 3);
  CHECK(lan.push_pull_interval == absl::Seconds(30));
  CHECK(lan.awareness_max_multiplier == 8);
  CHECK(lan.gossip_to_the_dead_time == absl::Seconds(30));
  const Config wan = Config::Wan();
  CHECK(wan.suspicion_mult == 6);
  CHECK(wan.push_pull_interval == absl::Seconds(60));
  CHECK(wan.probe_timeout == absl::Seconds(3));
  CHECK(wan.probe_interval == absl::Seconds(5));
  CHECK(wan.gossip_nodes == 4);
  CHECK(wan.gossip_interval == absl::Milliseconds(500));
  CHECK(wan.gossip_to_the_dead_time == absl::Seconds(60));
  CHECK(ValidateConfig(lan).ok());
  CHECK(ValidateConfig(wan).ok());
  CHECK(ConfigForProfile("wan")->probe_interval == absl::Seconds(5));
  CHECK(ConfigForProfile("moon").status().code() ==
        absl::StatusCode::kInvalidArgument);
  Config bad = lan;
  bad.probe_timeout = absl::Seconds(2);
  CHECK(ValidateConfig(bad).message().find("probe_timeout") !=
        std::string::npos);
  // memberlist's TCPTimeout, for what is not a probe.
  CHECK(lan.delivery_timeout == absl::Seconds(10));
  CHECK(wan.delivery_timeout == absl::Seconds(30));
  Config hasty = lan;
  hasty.delivery_timeout = absl::Milliseconds(100);
  CHECK(ValidateConfig(hasty).message().find("delivery_timeout") !=
        std::string::npos);
  // Not memberlist's: the news of a join goes out three times as often.
  CHECK(lan.join_retransmit_mult == 12);
  Config fewer = lan;
  fewer.join_retransmit_mult = 3;
  CHECK(ValidateConfig(fewer).message().find("join_retransmit_mult") !=
        std::string::npos);
  // Not memberlist's: one new connection a gossip round, in both profiles.
  CHECK(lan.gossip_new_links == 1);
  CHECK(wan.gossip_new_links == 1);
  Config greedy = wan;
  greedy.gossip_new_links = wan.gossip_nodes + 1;
  CHECK(ValidateConfig(greedy).message().find("gossip_new_links") !=
        std::string::npos);
}

TEST_CASE("a join update is sent join_limit times, others limit times") {
  BroadcastQueue q;
  q.Push("a", Dead{"a", 1, "x"}, 20);
  q.Push("b", Dead{"b", 1, "x"}, 20, /*urgent=*/false, /*join=*/true);
  int sent_a = 0, sent_b = 0;
  for (int round = 0; round < 20; ++round) {
    std::vector<Update> out;
    q.Take(1000, /*limit=*/2, /*join_limit=*/5, &out);
    for (const Update& u : out) {
      const Dead* d = std::get_if<Dead>(&u);
      REQUIRE(d != nullptr);
      (d->name == "a" ? sent_a : sent_b)++;
    }
  }
  CHECK(sent_a == 2);
  CHECK(sent_b == 5);
  CHECK(q.empty());
}

TEST_CASE("scaling formulas match memberlist's util.go") {
  // suspicionTimeout: 4 * max(1, log10(n)) * 1s.
  CHECK(SuspicionTimeout(4, 1, absl::Seconds(1)) == absl::Seconds(4));
  CHECK(SuspicionTimeout(4, 10, absl::Seconds(1)) == absl::Seconds(4));
  CHECK(SuspicionTimeout(4, 1000, absl::Seconds(1)) == absl::Seconds(12));
  CHECK(SuspicionTimeout(4, 10000, absl::Seconds(1)) == absl::Seconds(16));
  // retransmitLimit: 4 * ceil(log10(n + 1)).
  CHECK(RetransmitLimit(4, 0) == 0);
  CHECK(RetransmitLimit(4, 9) == 4);
  CHECK(RetransmitLimit(4, 10) == 8);
  CHECK(RetransmitLimit(4, 10000) == 20);
  // pushPullScale: x1 up to 32 nodes, then ceil(log2(n) - 5) + 1.
  CHECK(PushPullScale(absl::Seconds(30), 32) == absl::Seconds(30));
  CHECK(PushPullScale(absl::Seconds(30), 33) == absl::Seconds(60));
  CHECK(PushPullScale(absl::Seconds(30), 10000) == absl::Seconds(300));
}

TEST_CASE("a suspicion's timeout falls from max to min with confirmations") {
  const absl::Duration min = absl::Seconds(4), max = absl::Seconds(24);
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  Suspicion s("a", /*k=*/2, min, max, t0);
  CHECK(s.deadline() == t0 + max);
  CHECK_FALSE(s.Confirm("a"));  // the first accuser again
  CHECK(s.Confirm("b"));
  // 24 - 20 * log(2)/log(3) = 11.381 s, floored to the millisecond.
  CHECK(s.deadline() == t0 + absl::Milliseconds(11381));
  CHECK_FALSE(s.Confirm("b"));
  CHECK(s.Confirm("c"));
  CHECK(s.deadline() == t0 + min);
  CHECK_FALSE(s.Confirm("d"));  // k reached: no more re-gossip
  CHECK(s.confirmations() == 2);
  // Too few members to expect confirmations: the minimum at once.
  Suspicion small("a", 0, min, max, t0);
  CHECK(small.deadline() == t0 + min);
}

TEST_CASE("awareness scales timeouts by score + 1, clamped to [0, max-1]") {
  Awareness a(8);
  CHECK(a.Scale(absl::Seconds(1)) == absl::Seconds(1));
  a.ApplyDelta(3);
  CHECK(a.Scale(absl::Seconds(1)) == absl::Seconds(4));
  a.ApplyDelta(100);
  CHECK(a.score() == 7);
  a.ApplyDelta(-100);
  CHECK(a.score() == 0);
}

TEST_CASE("broadcast queue: least-sent then newest first, limited, replaced") {
  BroadcastQueue q;
  auto dead = [](const std::string& n) { return Update(Dead{n, 1, "x"}); };
  q.Push("a", dead("a"), 100);
  q.Push("b", dead("b"), 100);
  q.Push("c", dead("c"), 100);
  std::vector<Update> out;
  // Budget for two: the two newest go first.
  CHECK(q.Take(250, 2, &out) == 200);
  REQUIRE(out.size() == 2);
  CHECK(std::get<Dead>(out[0]).name == "c");
  CHECK(std::get<Dead>(out[1]).name == "b");
  out.clear();
  // "a" has never been sent, so it now goes before the others.
  q.Take(150, 2, &out);
  REQUIRE(out.size() == 1);
  CHECK(std::get<Dead>(out[0]).name == "a");
  out.clear();
  // Everything has been sent once; the limit of 2 drops each after this.
  q.Take(1000, 2, &out);
  CHECK(out.size() == 3);
  CHECK(q.empty());
  // A newer update about a member replaces the queued one.
  q.Push("a", dead("a"), 100);
  q.Push("a", Update(Suspect{"a", 2, "y"}), 50);
  CHECK(q.size() == 1);
  // Urgent (our own record) goes first even when older and sent more.
  q.Push("self", dead("self"), 100, /*urgent=*/true);
  q.Push("z", dead("z"), 100);
  out.clear();
  q.Take(120, 10, &out);
  REQUIRE(out.size() == 1);
  CHECK(std::get<Dead>(out[0]).name == "self");
}

TEST_CASE("rate limiter: a burst, then the rate; full buckets are pruned") {
  PeerRateLimiter limiter(10, 20);
  const absl::Time t0 = absl::FromUnixSeconds(100);
  int allowed = 0;
  for (int i = 0; i < 100; ++i) allowed += limiter.Allow("flood", t0);
  CHECK(allowed == 20);
  // One second refills 10 tokens.
  allowed = 0;
  for (int i = 0; i < 100; ++i) {
    allowed += limiter.Allow("flood", t0 + absl::Seconds(1));
  }
  CHECK(allowed == 10);
  // Looking takes nothing: an empty bucket, and one never seen (full).
  CHECK(limiter.Exhausted("flood", t0 + absl::Seconds(1)));
  CHECK(limiter.Available("flood", t0 + absl::Seconds(1.5)) ==
        doctest::Approx(5));
  CHECK(!limiter.Exhausted("flood", t0 + absl::Seconds(1.5)));
  CHECK(limiter.Available("other", t0) == 20);
  CHECK(limiter.tracked() == 1);
  CHECK(limiter.Allow("other", t0));
  CHECK(limiter.tracked() == 2);
  limiter.Prune(t0 + absl::Seconds(10));
  CHECK(limiter.tracked() == 0);
}

TEST_CASE("fake signatures: sizes as ECDSA P-256, bound to name and fields") {
  AliveRef a = SignedAlive("node-a", 7);
  CHECK(a->signature.size() == kFakeSignatureBytes);
  CHECK(a->certificate.size() == kFakeCertificateBytes);
  FakeVerifier verifier(kRealm);
  CHECK(*verifier.Verify(*a) == "node-a");
  // Any signed field changed: the signature no longer verifies.
  Alive tampered = *a;
  tampered.meta.labels[0].second = "b";
  CHECK_FALSE(verifier.Verify(tampered).ok());
  tampered = *a;
  tampered.incarnation = 8;
  CHECK_FALSE(verifier.Verify(tampered).ok());
  tampered = *a;
  tampered.leaving = true;
  CHECK_FALSE(verifier.Verify(tampered).ok());
  // Another realm (CA) does not accept it.
  FakeVerifier other(kRealm + 1);
  CHECK_FALSE(other.Verify(*a).ok());
}

TEST_CASE("canonical bytes cover every signed field and nothing else") {
  Alive a = *SignedAlive("n", 1);
  const std::string base = CanonicalAliveBytes(a);
  Alive b = a;
  b.signature = "x";
  b.certificate = "y";
  CHECK(CanonicalAliveBytes(b) == base);
  std::vector<Alive> variants(6, a);
  variants[0].name = "m";
  variants[1].incarnation = 2;
  variants[2].meta.addresses.push_back("z:1");
  variants[3].meta.labels.emplace_back("zz", "");
  variants[4].meta.capacity[0].second = 1;
  variants[5].leaving = true;
  for (const Alive& v : variants) CHECK(CanonicalAliveBytes(v) != base);
  // Length prefixes: moving a byte between fields changes the bytes.
  Alive c = a, d = a;
  c.meta.labels = {{"ab", "c"}};
  d.meta.labels = {{"a", "bc"}};
  CHECK(CanonicalAliveBytes(c) != CanonicalAliveBytes(d));
}

// Random messages of every kind, to hold EncodedSize to the real encoding.
Message RandomMessage(Prng* prng) {
  auto str = [&](size_t max) {
    std::string s(prng->Uniform(max + 1), 'x');
    for (char& c : s) c = static_cast<char>('a' + prng->Uniform(26));
    return s;
  };
  auto name = [&] { return "n" + str(300 % 40); };
  auto alive = [&] {
    Alive a;
    a.name = name();
    a.incarnation =
        prng->Uniform(3) == 0 ? 0 : prng->Next() >> prng->Uniform(64);
    for (uint64_t i = prng->Uniform(3); i > 0; --i) {
      a.meta.addresses.push_back("h" + str(200));
    }
    for (uint64_t i = prng->Uniform(4); i > 0; --i) {
      a.meta.labels.emplace_back("k" + std::to_string(i) + str(5), str(250));
    }
    for (uint64_t i = prng->Uniform(3); i > 0; --i) {
      a.meta.capacity.emplace_back(
          "c" + std::to_string(i),
          static_cast<int64_t>(prng->Next()) >> prng->Uniform(64));
    }
    REQUIRE(NormalizeMeta(&a.meta).ok());
    a.leaving = prng->Bernoulli(0.2);
    a.signature = "s" + str(100);
    a.certificate = "c" + str(600);
    return std::make_shared<const Alive>(std::move(a));
  };
  Message m;
  m.from = name();
  switch (prng->Uniform(6)) {
    case 0:
      break;
    case 1:
      m.body = Ping{prng->Next() >> prng->Uniform(64), name()};
      break;
    case 2:
      m.body = Ack{prng->Next() >> prng->Uniform(64)};
      break;
    case 3:
      m.body = Nack{prng->Uniform(2)};
      break;
    case 4:
      m.body = IndirectPing{prng->Next(), name(), prng->Bernoulli(0.5)};
      break;
    case 5: {
      PushPull pp{
          prng->Uniform(1000), prng->Bernoulli(0.5), prng->Bernoulli(0.5), {}};
      for (uint64_t i = prng->Uniform(5); i > 0; --i) {
        AliveRef a = alive();
        pp.members.push_back(
            MemberDigest{a, static_cast<MemberState>(1 + prng->Uniform(4)),
                         a->incarnation + prng->Uniform(2)});
      }
      if (prng->Bernoulli(0.2)) {
        pp.fill = true;  // a fill carries records only
        pp.join = pp.reply = false;
      } else {
        for (uint64_t i = prng->Uniform(5); i > 0; --i) {
          const uint64_t rec = prng->Next() >> (1 + prng->Uniform(63));
          pp.summaries.push_back(MemberSummary{
              name(), rec, static_cast<MemberState>(1 + prng->Uniform(4)),
              rec + prng->Uniform(3)});
        }
        for (uint64_t i = pp.reply ? prng->Uniform(4) : 0; i > 0; --i) {
          pp.want.push_back(name());
        }
        if (prng->Bernoulli(0.3)) {
          pp.fingerprint = prng->Next() >> prng->Uniform(64);
        }
        pp.mismatch = pp.reply && prng->Bernoulli(0.3);
      }
      m.body = std::move(pp);
      break;
    }
  }
  for (uint64_t i = prng->Uniform(5); i > 0; --i) {
    switch (prng->Uniform(3)) {
      case 0:
        m.updates.emplace_back(alive());
        break;
      case 1:
        m.updates.emplace_back(Suspect{name(), prng->Next(), name()});
        break;
      default:
        m.updates.emplace_back(Dead{name(), prng->Uniform(2), name()});
        break;
    }
  }
  return m;
}

bool SameUpdate(const Update& a, const Update& b) {
  if (a.index() != b.index()) return false;
  if (const AliveRef* x = std::get_if<AliveRef>(&a)) {
    return **x == *std::get<AliveRef>(b);
  }
  if (const Suspect* x = std::get_if<Suspect>(&a)) {
    return *x == std::get<Suspect>(b);
  }
  return std::get<Dead>(a) == std::get<Dead>(b);
}

bool SameMessage(const Message& a, const Message& b) {
  if (a.from != b.from || a.body.index() != b.body.index() ||
      a.updates.size() != b.updates.size()) {
    return false;
  }
  for (size_t i = 0; i < a.updates.size(); ++i) {
    if (!SameUpdate(a.updates[i], b.updates[i])) return false;
  }
  if (const Ping* p = std::get_if<Ping>(&a.body)) {
    return p->seq == std::get<Ping>(b.body).seq &&
           p->target == std::get<Ping>(b.body).target;
  }
  if (const Ack* p = std::get_if<Ack>(&a.body)) {
    return p->seq == std::get<Ack>(b.body).seq;
  }
  if (const Nack* p = std::get_if<Nack>(&a.body)) {
    return p->seq == std::get<Nack>(b.body).seq;
  }
  if (const IndirectPing* p = std::get_if<IndirectPing>(&a.body)) {
    const IndirectPing& q = std::get<IndirectPing>(b.body);
    return p->seq == q.seq && p->target == q.target && p->nack == q.nack;
  }
  if (const PushPull* p = std::get_if<PushPull>(&a.body)) {
    const PushPull& q = std::get<PushPull>(b.body);
    if (p->seq != q.seq || p->join != q.join || p->reply != q.reply ||
        p->fill != q.fill || p->summaries != q.summaries || p->want != q.want ||
        p->fingerprint != q.fingerprint || p->mismatch != q.mismatch ||
        p->members.size() != q.members.size()) {
      return false;
    }
    for (size_t i = 0; i < p->members.size(); ++i) {
      if (!(*p->members[i].alive == *q.members[i].alive) ||
          p->members[i].state != q.members[i].state ||
          p->members[i].incarnation != q.members[i].incarnation) {
        return false;
      }
    }
  }
  return true;
}

TEST_CASE("EncodedSize equals the serialized size; decoding round-trips") {
  Prng prng(7);
  for (int i = 0; i < 2000; ++i) {
    const Message m = RandomMessage(&prng);
    const std::string bytes = EncodeMessage(m);
    REQUIRE(EncodedSize(m) == bytes.size());
    absl::StatusOr<Message> back = DecodeMessage(bytes, 1 << 20);
    INFO(back.status().ToString());
    REQUIRE(back.ok());
    // Not byte-equal on re-encoding: protobuf maps serialize in no fixed
    // order. Equal in content.
    CHECK(SameMessage(*back, m));
  }
}

TEST_CASE("decoding rejects oversized, garbage and invalid messages") {
  Message m;
  m.from = "a";
  m.body = Ping{1, "b"};
  const std::string bytes = EncodeMessage(m);
  CHECK(DecodeMessage(bytes, bytes.size()).ok());
  CHECK(DecodeMessage(bytes, bytes.size() - 1).status().code() ==
        absl::StatusCode::kResourceExhausted);
  CHECK(DecodeMessage("\xff\xff\xff", 100).status().code() ==
        absl::StatusCode::kInvalidArgument);
  // Valid protobuf, invalid message: a sender's name with a NUL.
  m.from = std::string("a\0b", 3);
  CHECK(DecodeMessage(EncodeMessage(m), 100).status().message() ==
        "from: must be 1-253 bytes without NUL");
  // No sender and no target is what a direct ping looks like: the
  // receiver takes both from the transport.
  m.from = "";
  m.body = Ping{1, ""};
  absl::StatusOr<Message> bare = DecodeMessage(EncodeMessage(m), 100);
  REQUIRE(bare.ok());
  CHECK(bare->from.empty());
  CHECK(std::get<Ping>(bare->body).target.empty());
  CHECK(EncodeMessage(m).size() + 6 == bytes.size());
  // An update with nothing set.
  v1::GossipMessage proto;
  proto.set_from("a");
  proto.add_updates();
  CHECK(DecodeMessage(proto.SerializeAsString(), 100).status().message() ==
        "updates: empty update");
  // A record over the bounds.
  Alive big = *SignedAlive("n", 1);
  big.certificate.assign(kMaxCertificateBytes + 1, 'c');
  CHECK_FALSE(DecodeAlive(EncodeAlive(big)).ok());
  // A stored record round-trips, signature intact.
  AliveRef a = SignedAlive("n", 3);
  absl::StatusOr<Alive> back = DecodeAlive(EncodeAlive(*a));
  REQUIRE(back.ok());
  CHECK(*back == *a);
  CHECK(FakeVerifier(kRealm).Verify(*back).ok());
}

}  // namespace
}  // namespace mycel::membership
