// replication_fuzz: replication messages from peers into the Replicator
// (mesh/replication) over a real SQLite replica (daemon/store's
// ObjectStore), as a compromised member or a buggy one could send them,
// between local writes and ticks of the clock. Signatures are not checked
// (no OriginVerifier), so that the fuzzer reaches the merge itself.
//
// An input is a list of operations:
//   op % 4 == 0: a message, Input::Bytes() parsed as the driver does (bytes
//                that do not parse are dropped there, and here), from peer
//                r<(op / 4) % 6>: r0 is this node, r1-r3 live members, r4
//                away, r5 a stranger;
//   op % 4 == 1: the clock moves (op / 4) * 50 ms, and what is due runs;
//   op % 4 == 2: a local write (a delete when op / 4 is odd) of key
//                k<Byte() % 8> in kv, or of this node's status;
//   op % 4 == 3: what it wants sent is taken and checked.
// Checked after each: the replicator's version vector is the store's; no
// object owned by a node carries a change of another origin; the HLC of
// every object is within the max offset of the clock; every message it
// sends serializes.
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/store/objects.h"
#include "daemon/store/store.h"
#include "mesh/replication/codec.h"
#include "mesh/replication/replica_log.h"
#include "mesh/replication/replicator.h"
#include "runtime/manual_clock.h"
#include "tests/fuzz/fuzz_target.h"

namespace mycel::replication {
namespace {

constexpr absl::Time kStart = absl::FromUnixSeconds(1'800'000'000);
constexpr int kPeers = 6;

std::string Peer(int i) { return absl::StrCat("r", i); }

// The database of this process, under /dev/shm when there is one. Each
// input starts from a copy of an empty, migrated database made once: the
// migrations would otherwise be most of an input's time.
class Databases {
 public:
  Databases() {
    std::string dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    dir += "/mycel-fuzz.XXXXXX";
    FUZZ_CHECK(mkdtemp(dir.data()) != nullptr, dir);
    dir_ = dir;
    {
      auto s = store::Store::Open(Path("empty.db"), {.origin = "r0"});
      FUZZ_CHECK(s.ok(), s.status().ToString());
    }  // closed: the WAL is checkpointed into the file and removed
    std::ifstream in(Path("empty.db"), std::ios::binary);
    empty_.assign(std::istreambuf_iterator<char>(in), {});
    FUZZ_CHECK(!empty_.empty(), Path("empty.db"));
  }
  ~Databases() {
    Clear();
    unlink(Path("empty.db").c_str());
    rmdir(dir_.c_str());
  }

  // A fresh copy of the empty database, for one input.
  std::string Fresh() {
    Clear();
    std::ofstream out(Path("r0.db"), std::ios::binary);
    out.write(empty_.data(), static_cast<std::streamsize>(empty_.size()));
    out.close();
    FUZZ_CHECK(out.good(), Path("r0.db"));
    return Path("r0.db");
  }

 private:
  std::string Path(const char* name) const { return dir_ + "/" + name; }
  void Clear() {
    for (const char* suffix : {"", "-wal", "-shm"}) {
      unlink((Path("r0.db") + suffix).c_str());
    }
  }

  std::string dir_;
  std::string empty_;
};

Databases& TheDatabases() {
  static Databases databases;
  return databases;
}

store::HlcTime Hlc(absl::Time t) {
  return store::MakeHlc(absl::ToUnixMillis(t), 0);
}

v1::ReplicationChange Change(const std::string& origin, int64_t seq,
                             absl::Time at, const std::string& ns,
                             const std::string& key, const char* value) {
  store::ObjectChange c;
  c.stamp = {.origin = origin, .seq = seq, .hlc = Hlc(at)};
  c.ns = ns;
  c.key = key;
  if (value != nullptr) c.value = value;
  return ToProto(c);
}

struct World {
  World() : clock(kStart) {
    auto s = store::Store::Open(
        TheDatabases().Fresh(),
        {.integrity_check = false, .origin = "r0", .clock = &clock});
    FUZZ_CHECK(s.ok(), s.status().ToString());
    db = *std::move(s);
    objects = std::make_unique<store::ObjectStore>(db.get());
    log = std::make_unique<ObjectStoreLog>(objects.get());
    // Two refusals: an input reaches a peer cut off, and the peer's
    // allowance coming back (1 a second), in a few operations.
    auto r =
        Replicator::Create({.name = "r0", .refusal_burst = 2, .random_seed = 1},
                           log.get(), clock.Now());
    FUZZ_CHECK(r.ok(), r.status().ToString());
    replicator = *std::move(r);
    replicator->SetMembers({"r0", "r1", "r2", "r3"}, {"r4"}, clock.Now());
  }

  void Check() {
    absl::StatusOr<store::VersionVector> held = objects->Versions();
    FUZZ_CHECK(held.ok(), held.status().ToString());
    FUZZ_CHECK(*held == replicator->versions(), "the vectors differ");
    absl::StatusOr<std::vector<store::Object>> rows = objects->Dump();
    FUZZ_CHECK(rows.ok(), rows.status().ToString());
    // A stamp's counter can carry it a millisecond on.
    const int64_t ahead =
        absl::ToUnixMillis(clock.Now() + objects->options().max_offset) + 1;
    for (const store::Object& o : *rows) {
      absl::StatusOr<std::string> owner =
          store::ObjectStore::OwnerOf(o.ns, o.key);
      FUZZ_CHECK(owner.ok(), owner.status().ToString());
      FUZZ_CHECK(*owner == o.owner, absl::StrCat(o.ns, "/", o.key));
      FUZZ_CHECK(o.owner.empty() || o.owner == o.stamp.origin,
                 absl::StrCat(o.ns, "/", o.key, " owned by ", o.owner,
                              " written by ", o.stamp.origin));
      FUZZ_CHECK(store::HlcMillis(o.stamp.hlc) <= ahead,
                 absl::StrCat(o.ns, "/", o.key));
    }
  }

  void CheckOutbox() {
    for (Outbound& o : replicator->TakeOutbox()) {
      FUZZ_CHECK(o.to != "r0" && !o.to.empty(), o.to);
      std::string bytes;
      FUZZ_CHECK(o.message.SerializeToString(&bytes), o.to);
    }
  }

  ManualClock clock;
  std::unique_ptr<store::Store> db;
  std::unique_ptr<store::ObjectStore> objects;
  std::unique_ptr<ObjectStoreLog> log;
  std::unique_ptr<Replicator> replicator;
};

}  // namespace
}  // namespace mycel::replication

namespace mycel::fuzz {

std::vector<std::string> Seeds() {
  using namespace mycel::replication;
  auto bytes = [](const v1::ReplicationMessage& m) {
    return m.SerializeAsString();
  };
  std::vector<v1::ReplicationMessage> messages;
  const absl::Time t = kStart - absl::Seconds(1);
  {  // changes of two peers, a delete, and another node's object forged
    v1::ReplicationMessage m;
    v1::ReplicationPush* p = m.mutable_push();
    *p->add_changes() = Change("r1", 1, t, "kv", "k1", "\"one\"");
    *p->add_changes() = Change("r1", 2, t, "kv", "k2", "2");
    *p->add_changes() = Change("r1", 3, t, "kv", "k1", nullptr);
    *p->add_changes() = Change("r2", 1, t, "node.status", "r2/disk", "{}");
    *p->add_changes() = Change("r2", 2, t, "node.status", "r1/disk", "{}");
    *p->add_changes() = Change("r3", 2, t, "kv", "gap", "1");  // ahead
    *p->add_changes() =
        Change("r3", 1, t + absl::Hours(1), "kv", "future", "1");
    p->set_hops(2);
    messages.push_back(m);
  }
  {  // a digest that asks for everything, one that claims more than held
    v1::ReplicationMessage m;
    v1::ReplicationDigest* d = m.mutable_digest();
    v1::ReplicationVersion* v = d->add_versions();
    v->set_origin("r1");
    v->set_seq(0);
    d->set_reply(true);
    messages.push_back(m);
    v->set_seq(1000);
    v1::ReplicationVersion* own = d->add_versions();
    own->set_origin("r0");
    own->set_seq(5);
    messages.push_back(m);
    v1::ReplicationMessage f;
    f.mutable_digest()->set_by_fingerprint(true);
    f.mutable_digest()->set_fingerprint(12345);
    f.mutable_digest()->set_reply(true);
    messages.push_back(f);
  }
  {  // a stream's chunk of changes, and a snapshot in two chunks
    v1::ReplicationMessage m;
    v1::ReplicationChunk* c = m.mutable_chunk();
    c->set_stream(1);
    c->set_index(0);
    *c->add_changes() = Change("r2", 1, t, "kv", "s1", "[1,2]");
    *c->add_changes() = Change("r2", 2, t, "kv", "s2", "{\"a\":1}");
    c->set_last(true);
    messages.push_back(m);
    v1::ReplicationMessage s;
    v1::ReplicationChunk* s0 = s.mutable_chunk();
    s0->set_stream(2);
    s0->set_index(0);
    s0->set_snapshot(true);
    s0->set_last_namespace("kv");
    s0->set_last_key("m");
    *s0->add_rows() = Change("r1", 4, t, "kv", "a", "1");
    *s0->add_rows() = Change("r3", 1, t, "kv", "b", nullptr);
    v1::ReplicationVersion* v = s0->add_versions();
    v->set_origin("r1");
    v->set_seq(4);
    *s0->add_proofs() = Change("r1", 4, t, "kv", "a", "1");
    messages.push_back(s);
    v1::ReplicationMessage s1;
    v1::ReplicationChunk* c1 = s1.mutable_chunk();
    c1->set_stream(2);
    c1->set_index(1);
    c1->set_snapshot(true);
    c1->set_after_namespace("kv");
    c1->set_after_key("m");
    *c1->add_rows() = Change("r1", 3, t, "kv", "z", "\"z\"");
    c1->set_last(true);
    messages.push_back(s1);
  }
  {  // acks, certificate requests and answers
    v1::ReplicationMessage a;
    a.mutable_ack()->set_stream(1);
    a.mutable_ack()->set_index(0);
    messages.push_back(a);
    v1::ReplicationMessage q;
    q.mutable_certificate_request()->add_origins("r1");
    q.mutable_certificate_request()->add_origins("r0");
    messages.push_back(q);
    v1::ReplicationMessage c;
    c.mutable_certificates()->add_certificates("not a certificate");
    messages.push_back(c);
  }
  std::vector<std::string> seeds;
  for (size_t i = 0; i < messages.size(); ++i) {
    InputBuilder b;
    b.Byte(2).Byte(static_cast<uint8_t>(i));  // a local write first
    b.Byte(static_cast<uint8_t>(4 * (1 + i % 3))).Bytes(bytes(messages[i]));
    b.Byte(4 * 10 + 1).Byte(3);               // 500 ms on, then the outbox
    b.Byte(4 * 5).Bytes(bytes(messages[i]));  // from a stranger
    b.Byte(4 * 60 + 1).Byte(3);               // 3 s on: anti-entropy
    seeds.push_back(b.Take());
  }
  InputBuilder all;
  for (const v1::ReplicationMessage& m : messages) {
    all.Byte(4 * 1).Bytes(bytes(m)).Byte(4 * 3 + 2).Byte(7);
  }
  for (int i = 0; i < 5; ++i) all.Byte(4 * 60 + 1).Byte(3);
  seeds.push_back(all.Take());
  return seeds;
}

}  // namespace mycel::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mycel::replication;
  mycel::fuzz::Input in(data, size);
  World w;
  while (!in.empty()) {
    const uint8_t op = in.Byte();
    const absl::Time now = w.clock.Now();
    switch (op % 4) {
      case 0: {
        const std::string bytes = in.Bytes();
        mycel::v1::ReplicationMessage m;
        if (m.ParseFromString(bytes)) {
          const std::string peer = Peer((op / 4) % kPeers);
          const bool cut_off =
              peer != "r0" && w.replicator->Quarantined(peer, now);
          const mycel::store::VersionVector before = w.replicator->versions();
          // Any status: the driver logs it and goes on.
          absl::Status s = w.replicator->HandleMessage(peer, m, now);
          // A peer that spent its refusals is not read at all.
          if (cut_off) {
            FUZZ_CHECK(absl::IsResourceExhausted(s), s.ToString());
            FUZZ_CHECK(w.replicator->versions() == before, peer);
          }
        }
        break;
      }
      case 1:
        w.clock.Advance(absl::Milliseconds(50) * (op / 4));
        if (w.clock.Now() >= w.replicator->NextDeadline()) {
          w.replicator->Tick(w.clock.Now());
        }
        break;
      case 2: {
        const uint8_t k = in.Byte();
        const bool del = (op / 4) % 2 == 1;
        const bool status = k % 16 >= 8;
        const std::string key = status ? "r0/disk" : absl::StrCat("k", k % 8);
        absl::StatusOr<mycel::store::ObjectChange> c = w.objects->Write(
            status ? "node.status" : "kv", key,
            del ? std::nullopt : std::optional<absl::string_view>("1"));
        FUZZ_CHECK(c.ok(), c.status().ToString());
        w.replicator->OnLocalChange(*c, w.clock.Now());
        break;
      }
      case 3:
        w.CheckOutbox();
        break;
    }
    w.Check();
  }
  w.CheckOutbox();
  return 0;
}
