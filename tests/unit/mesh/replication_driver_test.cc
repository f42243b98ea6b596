// ReplicationDriver on a ManualClock with an in-process transport and a
// real state database per node: a write on one node reaches the others by
// push; a node cut off keeps accepting writes, and after the cut heals
// every replica converges with nothing lost; a node restarted from its
// database catches up by anti-entropy; with signed changes, a node that
// joins after an origin left gets the origin's certificate from the peer
// that sends it the changes. Time is virtual.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "daemon/store/objects.h"
#include "daemon/store/store.h"
#include "mesh/identity/trust.h"
#include "mesh/pki/certificate_authority.h"
#include "mesh/pki/private_key.h"
#include "mesh/replication/codec.h"
#include "mesh/replication/driver.h"
#include "mesh/replication/origin_verifier.h"
#include "runtime/fs.h"
#include "runtime/log.h"
#include "runtime/manual_clock.h"
#include "tests/testing/process.h"
#include "tests/unit/mesh/pki_test_util.h"

namespace mycel::replication {
namespace {

class Cluster;

// Delivers through the io_context, as a network would: never inline.
class LoopTransport final : public Transport {
 public:
  LoopTransport(Cluster* cluster, std::string from)
      : cluster_(cluster), from_(std::move(from)) {}
  void Send(absl::string_view peer, absl::string_view address,
            std::string bytes, SendDone done) override;

 private:
  Cluster* cluster_;
  std::string from_;
};

struct Node {
  std::string name;
  std::unique_ptr<store::Store> db;
  std::unique_ptr<store::ObjectStore> objects;
  std::unique_ptr<OriginVerifier> verifier;  // with signed changes
  std::unique_ptr<ObjectStoreLog> log;
  std::unique_ptr<LoopTransport> transport;
  std::unique_ptr<ReplicationDriver> driver;
};

// Signed changes: a mesh CA, each node's key and certificate, and what
// each node's membership no longer knows.
struct Pki {
  Pki() {
    REQUIRE(trust.SetCa(pki::testing::Must(ca.certificate().ToPem())).ok());
  }
  struct Identity {
    std::string der;
    std::shared_ptr<const pki::PrivateKey> key;
  };
  const Identity& Of(const std::string& name) {
    auto it = ids.find(name);
    if (it != ids.end()) return it->second;
    auto key = std::make_shared<const pki::PrivateKey>(
        pki::testing::Must(pki::PrivateKey::Generate()));
    pki::Certificate cert = pki::testing::Must(
        ca.IssueForKey(pki::testing::Must(key->GetPublicKey()),
                       pki::Grant{pki::testing::NodeId(name), pki::Role::kNode,
                                  absl::ZeroDuration()},
                       pki::testing::T0()));
    return ids[name] = Identity{cert.der(), std::move(key)};
  }
  pki::CertificateAuthority ca = pki::testing::MakeCa("prod");
  identity::Trust trust;
  std::map<std::string, Identity> ids;
  std::map<std::string, std::set<std::string>> forgotten;  // node -> names
};

class Cluster {
 public:
  // `own_writes_hold`: ReplicatorOptions::own_writes_hold, the hold applied
  // to each node's store.
  explicit Cluster(int n, bool signed_changes = false,
                   absl::Duration own_writes_hold = absl::ZeroDuration())
      : own_writes_hold_(own_writes_hold), nodes_(n) {
    if (signed_changes) pki_ = std::make_unique<Pki>();
    for (int i = 0; i < n; ++i) {
      nodes_[i].name = absl::StrCat("node-", i);
      Start(i);
    }
    SetMembers();
  }
  ~Cluster() {
    for (Node& n : nodes_) Stop(n);
  }

  ManualClock clock{absl::FromUnixSeconds(1'800'000'000)};
  boost::asio::io_context io;
  std::set<std::string> cut;  // nodes cut off from every other

  Node& node(int i) { return nodes_[i]; }
  std::string db_path(int i) const { return dir_.Sub(nodes_[i].name + ".db"); }

  void Start(int i) {
    Node& n = nodes_[i];
    auto db =
        store::Store::Open(db_path(i), {.origin = n.name, .clock = &clock});
    REQUIRE_MESSAGE(db.ok(), db.status().ToString());
    n.db = *std::move(db);
    n.objects = std::make_unique<store::ObjectStore>(n.db.get());
    if (pki_ != nullptr) Sign(n);
    n.log = std::make_unique<ObjectStoreLog>(n.objects.get(), n.verifier.get());
    n.transport = std::make_unique<LoopTransport>(this, n.name);
    ReplicationDriverOptions o;
    o.replicator.name = n.name;
    o.replicator.random_seed = 77 + i;
    o.clock = &clock;
    o.io = &io;
    o.transport = n.transport.get();
    o.log = n.log.get();
    o.replicator.own_writes_hold = own_writes_hold_;
    o.hold_own_writes = [objects = n.objects.get()](absl::Duration at_most) {
      if (at_most > absl::ZeroDuration()) {
        objects->HoldLocalWrites(at_most);
      } else {
        objects->ReleaseLocalWrites();
      }
    };
    auto d = ReplicationDriver::Start(std::move(o));
    REQUIRE_MESSAGE(d.ok(), d.status().ToString());
    n.driver = *std::move(d);
  }
  void Stop(Node& n) {
    if (n.driver == nullptr) return;
    n.driver->Stop();
    n.driver.reset();
    n.transport.reset();
    n.log.reset();
    n.objects.reset();
    n.verifier.reset();
    n.db.reset();
  }

  // Every running node sees every other running node as live.
  void SetMembers() {
    for (Node& n : nodes_) {
      if (n.driver == nullptr) continue;
      std::vector<ReplicationPeer> live;
      for (const Node& m : nodes_) {
        if (m.driver != nullptr && m.name != n.name) {
          live.push_back({m.name, m.name + ":7000"});
        }
      }
      n.driver->SetMembers(std::move(live), {});
    }
  }

  void Put(int i, const std::string& key, const std::string& value) {
    auto c = nodes_[i].objects->Write("kv", key, value);
    REQUIRE_MESSAGE(c.ok(), c.status().ToString());
    nodes_[i].driver->OnLocalChange(*c);
  }

  std::optional<std::string> Get(int i, const std::string& key) {
    auto o = nodes_[i].objects->Get("kv", key);
    if (!o.ok()) return std::nullopt;
    return o->value;
  }

  void Route(const std::string& from, const std::string& to, std::string bytes,
             Transport::SendDone done) {
    boost::asio::post(io, [this, from, to, bytes = std::move(bytes),
                           done = std::move(done)]() mutable {
      ++sent;
      Node* target = nullptr;
      for (Node& n : nodes_) {
        if (n.name == to && n.driver != nullptr) target = &n;
      }
      if (target == nullptr || cut.count(from) || cut.count(to)) {
        done(absl::UnavailableError("unreachable"));
        return;
      }
      done(target->driver->Deliver(from, std::move(bytes)));
    });
  }

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

  bool Converged(const std::string& key, const std::string& value) {
    for (int i = 0; i < static_cast<int>(nodes_.size()); ++i) {
      if (nodes_[i].driver != nullptr && Get(i, key) != value) return false;
    }
    return true;
  }

  uint64_t sent = 0;
  Pki& pki() { return *pki_; }

 private:
  // As the daemon does: signs with the node's key, checks with the origin's
  // certificate from membership, else the one the store kept.
  void Sign(Node& n) {
    store::ObjectStore* objects = n.objects.get();
    n.db->SetChangeSigner(NodeKeySigner(pki_->Of(n.name).key));
    OriginVerifier::Memory memory;
    memory.recall = [objects](absl::string_view origin) {
      return objects->OriginCertificate(origin).value_or("");
    };
    memory.keep = [objects](absl::string_view origin, absl::string_view der) {
      REQUIRE(objects->RememberOriginCertificate(origin, der).ok());
    };
    n.verifier = std::make_unique<OriginVerifier>(
        &pki_->trust, &clock,
        [this, name = n.name](absl::string_view origin) {
          if (pki_->forgotten[name].count(std::string(origin)))
            return std::string();
          auto it = pki_->ids.find(std::string(origin));
          return it == pki_->ids.end() ? std::string() : it->second.der;
        },
        std::move(memory));
    objects->SetChangeVerifier(
        [v = n.verifier.get()](const store::ObjectChange& c,
                               absl::string_view bytes) {
          return v->Verify(c, bytes);
        });
  }

  std::unique_ptr<Pki> pki_;
  testing::TempDir dir_;
  const absl::Duration own_writes_hold_;
  std::vector<Node> nodes_;
};

void LoopTransport::Send(absl::string_view peer, absl::string_view,
                         std::string bytes, SendDone done) {
  cluster_->Route(from_, std::string(peer), std::move(bytes), std::move(done));
}

TEST_CASE("a write reaches every replica by push, well before anti-entropy") {
  Cluster c(5);
  c.RunFor(absl::Milliseconds(10));
  c.Put(0, "greeting", "\"hello\"");
  c.RunFor(absl::Milliseconds(50));
  CHECK(c.Converged("greeting", "\"hello\""));
  ReplicationDriverStats s = c.node(0).driver->Stats();
  CHECK(s.replicator.pushes_sent >= 1);
  CHECK(s.messages_sent >= 3);
}

TEST_CASE("a node cut off keeps writing; after the cut, nothing is lost") {
  Cluster c(3);
  c.RunFor(absl::Milliseconds(10));
  c.cut.insert("node-2");
  // Both sides write: the cut-off node to its own keys and to a shared one.
  for (int i = 0; i < 20; ++i) {
    c.Put(0, absl::StrCat("a/", i), absl::StrCat(i));
    c.Put(2, absl::StrCat("b/", i), absl::StrCat(i));
  }
  c.Put(0, "shared", "\"from 0\"");
  c.RunFor(absl::Milliseconds(5));
  c.Put(2, "shared", "\"from 2\"");  // later: wins by HLC
  c.RunFor(absl::Seconds(1));
  CHECK(c.Get(1, "a/19") == "19");
  CHECK_FALSE(c.Get(1, "b/19").has_value());
  CHECK(c.Get(2, "b/19") == "19");  // served locally, offline
  // The lag query says how far node-2 is behind, once digests came back.
  c.cut.clear();
  c.RunFor(absl::Seconds(10));
  for (int i = 0; i < 20; ++i) {
    for (int n = 0; n < 3; ++n) {
      CHECK(c.Get(n, absl::StrCat("a/", i)) == absl::StrCat(i));
      CHECK(c.Get(n, absl::StrCat("b/", i)) == absl::StrCat(i));
    }
  }
  CHECK(c.Converged("shared", "\"from 2\""));
  for (const PeerLag& lag : c.node(0).driver->Lag()) {
    CHECK(lag.known);
    CHECK(lag.changes_behind == 0);
  }
  CHECK(c.node(0).driver->Versions() == c.node(2).driver->Versions());
}

TEST_CASE("a node restarted from its database catches up by anti-entropy") {
  Cluster c(3);
  c.RunFor(absl::Milliseconds(10));
  c.Put(1, "before", "1");
  c.RunFor(absl::Milliseconds(100));
  CHECK(c.Converged("before", "1"));
  c.Stop(c.node(2));
  c.SetMembers();
  for (int i = 0; i < 50; ++i) c.Put(0, absl::StrCat("while/", i), "2");
  c.RunFor(absl::Milliseconds(100));
  c.Start(2);
  c.SetMembers();
  CHECK(c.Get(2, "before") == "1");  // kept across the restart
  CHECK_FALSE(c.Get(2, "while/49").has_value());
  c.RunFor(absl::Seconds(10));
  for (int i = 0; i < 50; ++i)
    CHECK(c.Get(2, absl::StrCat("while/", i)) == "2");
  // A write from the restarted node continues its sequence.
  c.Put(2, "after", "3");
  c.RunFor(absl::Milliseconds(100));
  CHECK(c.Converged("after", "3"));
}

// Restores node 0 of `c` (two nodes) from a copy of its database taken
// after three writes, once it has made three more that node 1 holds.
void RestoreOlderCopy(Cluster& c) {
  c.RunFor(absl::Milliseconds(10));
  for (int i = 0; i < 3; ++i) c.Put(0, absl::StrCat("a/", i), "1");
  c.RunFor(absl::Milliseconds(100));
  c.Stop(c.node(0));
  const std::string db = c.db_path(0);
  std::filesystem::copy_file(db, db + ".bak");
  c.Start(0);
  c.SetMembers();
  c.RunFor(absl::Milliseconds(10));
  for (int i = 0; i < 3; ++i) c.Put(0, absl::StrCat("b/", i), "1");
  c.RunFor(absl::Milliseconds(100));
  REQUIRE(c.node(1).driver->Versions().at("node-0") == 6);
  c.Stop(c.node(0));
  std::filesystem::copy_file(db + ".bak", db,
                             std::filesystem::copy_options::overwrite_existing);
  std::filesystem::remove(db + "-wal");
  std::filesystem::remove(db + "-shm");
  c.Start(0);
}

// The lines of `logged` that contain `part`.
std::vector<std::string> LinesWith(const std::string& logged,
                                   absl::string_view part) {
  std::vector<std::string> lines;
  for (absl::string_view l : absl::StrSplit(logged, '\n')) {
    if (absl::StrContains(l, part)) lines.emplace_back(l);
  }
  return lines;
}

TEST_CASE(
    "a node restored from an older copy of its database holds its writes "
    "until it has taken its own changes back") {
  Cluster c(2, /*signed_changes=*/false, absl::Seconds(5));
  RestoreOlderCopy(c);
  // Held from Start, before membership has said who the peers are.
  CHECK(c.node(0).db->holding_local_writes());
  testing::TempDir dir;
  const std::string path = dir.Sub("log");
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  REQUIRE(fd >= 0);
  log::SetSink(fd, false);
  c.SetMembers();
  c.RunFor(absl::Seconds(1));
  log::SetSink(STDERR_FILENO, false);
  close(fd);
  CHECK_FALSE(c.node(0).db->holding_local_writes());
  const ReplicatorStats st = c.node(0).driver->Stats().replicator;
  CHECK(st.own_changes_taken_back == 3);
  CHECK(st.own_hold_expired == 0);
  CHECK(st.own_sequence_behind >= 1);
  CHECK(c.node(0).driver->Versions().at("node-0") == 6);
  CHECK(c.Get(0, "b/2") == "1");
  const std::string logged = *ReadFile(path);
  const std::vector<std::string> behind =
      LinesWith(logged, "holds more of this node's own changes");
  REQUIRE_MESSAGE(behind.size() == 1, logged);
  CHECK(absl::StrContains(behind[0], "level=warn"));
  CHECK(absl::StrContains(behind[0], "taking them back"));
  CHECK(absl::StrContains(behind[0], "peer_holds=6"));
  CHECK(absl::StrContains(behind[0], "this_node_holds=3"));
  const std::vector<std::string> took =
      LinesWith(logged, "took back changes of this node");
  REQUIRE_MESSAGE(took.size() == 1, logged);
  CHECK(absl::StrContains(took[0], "changes=3"));
  // Its next write goes past them, and reaches the peer.
  c.Put(0, "c", "1");
  c.RunFor(absl::Milliseconds(100));
  CHECK(c.Get(1, "c") == "1");
  CHECK(c.node(1).driver->Versions().at("node-0") == 7);
}

TEST_CASE(
    "without the hold, a restored node's first write takes a number the "
    "peer holds; it says so at error level, once") {
  Cluster c(2);
  RestoreOlderCopy(c);
  c.SetMembers();
  c.Put(0, "c", "1");  // node-0:4, the number of b/0 on node-1
  testing::TempDir dir;
  const std::string path = dir.Sub("log");
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  REQUIRE(fd >= 0);
  log::SetSink(fd, false);
  c.RunFor(absl::Seconds(20));
  log::SetSink(STDERR_FILENO, false);
  close(fd);
  CHECK(c.node(0).driver->Stats().replicator.own_sequence_behind >= 1);
  const std::vector<std::string> lines =
      LinesWith(*ReadFile(path), "holds more of this node's own changes");
  REQUIRE(lines.size() == 1);
  CHECK(absl::StrContains(lines[0], "level=error"));
  CHECK(absl::StrContains(lines[0], "writes were not held"));
  CHECK(absl::StrContains(lines[0], "peer=node-1"));
  CHECK(absl::StrContains(lines[0], "peer_holds=6"));
  // node-1 took node-0:4 for b/0, which it holds: c never reaches it.
  CHECK(c.Get(1, "c") == std::nullopt);
  CHECK(c.Get(0, "b/0") == std::nullopt);
}

// Membership forgets a member a day after it left; a node that joins later
// gets the member's changes from a peer, and their certificate with them.
TEST_CASE(
    "a node that joins after an origin left takes the origin's changes, with "
    "its certificate from the peer") {
  Cluster c(3, /*signed_changes=*/true);
  c.Stop(c.node(2));  // joins later
  c.SetMembers();
  c.RunFor(absl::Milliseconds(10));
  for (int i = 0; i < 20; ++i) c.Put(0, absl::StrCat("gone/", i), "1");
  c.RunFor(absl::Milliseconds(100));
  REQUIRE(c.Get(1, "gone/19") == "1");
  // node-0 leaves, and is forgotten by every membership; node-1 restarts,
  // so what it knows of node-0's certificate is what its store kept.
  c.Stop(c.node(0));
  c.pki().forgotten["node-1"].insert("node-0");
  c.pki().forgotten["node-2"].insert("node-0");
  c.Stop(c.node(1));
  c.Start(1);
  bool resync = false;
  std::string value = "1";
  SUBCASE("from the log") {}
  SUBCASE("in a full resync, after node-1 collected node-0's log") {
    resync = true;
    c.SetMembers();
    c.RunFor(absl::Minutes(3));  // node-1 alone: GC runs every minute
  }
  SUBCASE("in a full resync where only the proof is node-0's") {
    // node-1 writes every key again: the snapshot has no row of node-0,
    // only its last change, which proves node-1's vector and comes in the
    // first of several chunks (values of 8 KB, chunks of 64 KiB).
    resync = true;
    value = absl::StrCat("\"", std::string(8000, 'x'), "\"");
    c.SetMembers();
    for (int i = 0; i < 20; ++i) c.Put(1, absl::StrCat("gone/", i), value);
    c.RunFor(absl::Minutes(3));
  }
  c.Start(2);
  c.SetMembers();
  c.RunFor(absl::Seconds(10));
  for (int i = 0; i < 20; ++i) {
    CHECK(c.Get(2, absl::StrCat("gone/", i)) == value);
  }
  const ReplicatorStats asker = c.node(2).driver->Stats().replicator;
  const ReplicatorStats sender = c.node(1).driver->Stats().replicator;
  CHECK(asker.certificates_asked >= 1);
  CHECK(asker.certificates_taken == 1);
  CHECK(asker.certificates_refused == 0);
  CHECK(sender.certificates_sent >= 1);
  if (resync) {
    CHECK(sender.snapshots_started >= 1);
    CHECK(asker.resyncs_completed == 1);
  } else {
    CHECK(sender.snapshots_started == 0);
  }
  CHECK(c.node(2).driver->Versions().at("node-0") == 20);
  // node-2 keeps it too, and can hand it on.
  CHECK(c.node(2).objects->OriginCertificate("node-0").value_or("") ==
        c.pki().ids.at("node-0").der);
}

// Every node refuses a revoked origin's changes from the revocation on
// (docs/replication.md), so a peer does not stream them to a node that
// lacks them, again at every round, nor count them in its lag.
TEST_CASE("a revoked origin's changes are not streamed, nor counted as lag") {
  Cluster c(3, /*signed_changes=*/true);
  c.Stop(c.node(2));  // joins later
  c.SetMembers();
  c.RunFor(absl::Milliseconds(10));
  for (int i = 0; i < 20; ++i) c.Put(0, absl::StrCat("gone/", i), "1");
  c.Put(1, "kept", "1");
  c.RunFor(absl::Milliseconds(100));
  REQUIRE(c.Get(1, "gone/19") == "1");
  c.Stop(c.node(0));
  pki::RevocationList revoked;
  REQUIRE(revoked
              .RevokeIdentity(pki::IdentityKind::kNode, "node-0",
                              pki::testing::T0() + absl::Minutes(1))
              .ok());
  c.pki().trust.SetRevocations(revoked);
  c.Start(2);
  c.SetMembers();
  c.RunFor(absl::Seconds(30));
  CHECK(c.Get(2, "kept") == "1");
  CHECK(c.Get(2, "gone/0") == std::nullopt);
  const ReplicatorStats receiver = c.node(2).driver->Stats().replicator;
  CHECK(receiver.changes_refused == 0);
  CHECK(receiver.certificates_asked == 0);
  std::vector<PeerLag> lag = c.node(1).driver->Lag();
  REQUIRE(lag.size() == 1);
  CHECK(lag[0].name == "node-2");
  CHECK(lag[0].known);
  CHECK(lag[0].changes_behind == 0);
  // node-1 keeps what it took.
  CHECK(c.Get(1, "gone/19") == "1");
}

TEST_CASE("certificates a peer was not asked for are not even parsed") {
  Cluster c(2, /*signed_changes=*/true);
  v1::ReplicationMessage m;
  m.mutable_certificates()->add_certificates(c.pki().Of("stranger").der);
  CHECK(c.node(0).driver->Deliver("node-1", m.SerializeAsString()).ok());
  // More origins than a request may name.
  v1::ReplicationMessage ask;
  for (int i = 0; i < 65; ++i) {
    ask.mutable_certificate_request()->add_origins(absl::StrCat("n", i));
  }
  CHECK(c.node(0).driver->Deliver("node-1", ask.SerializeAsString()).ok());
  c.RunFor(absl::Milliseconds(10));
  ReplicationDriverStats s = c.node(0).driver->Stats();
  CHECK(s.replicator.certificates_unsolicited == 1);
  CHECK(s.replicator.certificates_taken == 0);
  CHECK(s.replicator.certificates_sent == 0);
  CHECK(s.replicator.malformed == 1);
  CHECK(s.messages_rejected == 1);
  CHECK(c.node(0).objects->OriginCertificate("stranger").value_or("x").empty());
}

TEST_CASE("garbage from a peer is refused and counted, not applied") {
  Cluster c(2);
  CHECK(c.node(0).driver->Deliver("node-1", "\xff\xff not a message").ok());
  c.RunFor(absl::Milliseconds(10));
  ReplicationDriverStats s = c.node(0).driver->Stats();
  CHECK(s.messages_received == 1);
  CHECK(s.messages_rejected == 1);
}

TEST_CASE("a message under this node's own name is refused, not answered") {
  Cluster c(2);
  v1::ReplicationMessage m;
  m.mutable_digest()->set_reply(true);  // asks for an answer
  const std::string bytes = m.SerializeAsString();
  const uint64_t sent = c.node(0).driver->Stats().replicator.digests_sent;
  CHECK(c.node(0).driver->Deliver("node-0", bytes).ok());
  c.RunFor(absl::Milliseconds(10));
  ReplicationDriverStats s = c.node(0).driver->Stats();
  CHECK(s.messages_received == 1);
  CHECK(s.messages_rejected == 1);
  CHECK(s.replicator.from_self == 1);
  CHECK(s.replicator.digests_sent == sent);
  // The same from the peer is answered.
  CHECK(c.node(0).driver->Deliver("node-1", bytes).ok());
  c.RunFor(absl::Milliseconds(10));
  s = c.node(0).driver->Stats();
  CHECK(s.messages_rejected == 1);
  CHECK(s.replicator.digests_sent > sent);
}

// A push from `from` of `n` changes in its own name, each the next of its
// sequence at a receiver that holds none, none signed by its key.
std::string ForgedPush(const std::string& from, int n, absl::Time now) {
  v1::ReplicationMessage m;
  m.mutable_push()->set_hops(0);
  for (int i = 0; i < n; ++i) {
    store::ObjectChange c;
    c.stamp.origin = from;
    c.stamp.seq = 1;
    c.stamp.hlc = store::MakeHlc(absl::ToUnixMillis(now), 0);
    c.stamp.signature = std::string(72, 'x');
    c.ns = "kv";
    c.key = absl::StrCat("forged-", i);
    c.value = "1";
    *m.mutable_push()->add_changes() = ToProto(c);
  }
  return m.SerializeAsString();
}

TEST_CASE("a peer that sends forged changes is cut off; the others carry on") {
  Cluster c(3, /*signed_changes=*/true);
  // 500 changes whose signatures node-1's key did not make: each would cost
  // a signature check and a warning. The allowance (32) is spent, the rest
  // of the message dropped unread.
  REQUIRE(
      c.node(0)
          .driver->Deliver("node-1", ForgedPush("node-1", 500, c.clock.Now()))
          .ok());
  c.RunFor(absl::Milliseconds(10));
  ReplicationDriverStats s = c.node(0).driver->Stats();
  CHECK(s.replicator.changes_refused == 32);
  CHECK(s.replicator.refusals_charged == 32);
  CHECK(s.replicator.changes_quarantined == 500 - 32);
  CHECK(!c.Get(0, "forged-0").has_value());
  // Its next messages are refused before they queue, and say why.
  absl::Status next = c.node(0).driver->Deliver(
      "node-1", ForgedPush("node-1", 1, c.clock.Now()));
  CHECK(next.code() == absl::StatusCode::kResourceExhausted);
  CHECK(absl::StrContains(next.message(), "node-1"));
  CHECK(c.node(0).driver->Stats().deliveries_quarantined == 1);
  CHECK(c.node(0).driver->Stats().replicator.changes_refused == 32);
  // Another peer's writes still arrive.
  c.Put(2, "honest", "1");
  c.RunFor(absl::Milliseconds(100));
  CHECK(c.Get(0, "honest") == "1");
  // A token a second comes back: node-1's real changes are taken again.
  c.RunFor(absl::Seconds(2));
  c.Put(1, "later", "1");
  c.RunFor(absl::Milliseconds(100));
  CHECK(c.Get(0, "later") == "1");
  CHECK(c.node(0).driver->Stats().replicator.changes_refused == 32);
}

TEST_CASE("one peer fills only its share of the delivery queue") {
  Cluster c(3);
  v1::ReplicationMessage m;
  m.mutable_digest()->set_reply(false);
  const std::string bytes = m.SerializeAsString();
  // Nothing runs the strand meanwhile: every delivery waits in the queue.
  int queued = 0;
  absl::Status last;
  for (int i = 0; i < 1100; ++i) {
    last = c.node(0).driver->Deliver("node-1", bytes);
    if (!last.ok()) break;
    ++queued;
  }
  CHECK(queued == 1024);
  CHECK(last.code() == absl::StatusCode::kResourceExhausted);
  CHECK(absl::StrContains(last.message(), "from node-1"));
  CHECK(c.node(0).driver->Deliver("node-2", bytes).ok());
  c.RunFor(absl::Milliseconds(10));
  CHECK(c.node(0).driver->Stats().messages_received == 1025);
  CHECK(c.node(0).driver->Stats().deliveries_dropped == 1);
  // Once handled, the share is free again.
  CHECK(c.node(0).driver->Deliver("node-1", bytes).ok());
}

// A push from `from` of `n` changes of `origin`, from seq `first` on, each
// value `value_bytes` long.
std::string PushAhead(const std::string& origin, int64_t first, int n,
                      size_t value_bytes, absl::Time now) {
  v1::ReplicationMessage m;
  for (int i = 0; i < n; ++i) {
    store::ObjectChange c;
    c.stamp.origin = origin;
    c.stamp.seq = first + i;
    c.stamp.hlc = store::MakeHlc(absl::ToUnixMillis(now), 0);
    c.ns = "kv";
    c.key = absl::StrCat("ahead-", first + i);
    c.value = std::string(value_bytes, 'v');
    *m.mutable_push()->add_changes() = ToProto(c);
  }
  return m.SerializeAsString();
}

TEST_CASE(
    "changes far ahead of any gap take at most a sender's share of the "
    "buffer, and expire") {
  Cluster c(3);
  // node-1 sends 5,000 changes of an origin that will never fill the gap
  // before them: a quarter of the 16,384 places are its share.
  REQUIRE(
      c.node(0)
          .driver
          ->Deliver("node-1", PushAhead("ghost", 1000, 5000, 16, c.clock.Now()))
          .ok());
  c.RunFor(absl::Milliseconds(10));
  ReplicatorStats s = c.node(0).driver->Stats().replicator;
  CHECK(s.changes_buffered == 4096);
  CHECK(s.pending_dropped == 5000 - 4096);
  // Another sender still has its own share.
  REQUIRE(
      c.node(0)
          .driver
          ->Deliver("node-2", PushAhead("ghost", 9000, 1, 16, c.clock.Now()))
          .ok());
  c.RunFor(absl::Milliseconds(10));
  CHECK(c.node(0).driver->Stats().replicator.changes_buffered == 4097);
  // Bytes count too: values of 900 KB, 4 to a message, hit the sender's
  // 16 MiB (a quarter of 64) after 18 of them, not the count.
  for (int i = 0; i < 6; ++i) {
    REQUIRE(c.node(0)
                .driver
                ->Deliver("node-2", PushAhead("big", 100 + 4 * i, 4, 900 << 10,
                                              c.clock.Now()))
                .ok());
  }
  c.RunFor(absl::Milliseconds(10));
  s = c.node(0).driver->Stats().replicator;
  CHECK(s.changes_buffered == 4097 + 18);
  CHECK(s.pending_dropped == 5000 - 4096 + 6);
  // Nothing fills those gaps: after pending_timeout (30 s) they are gone.
  c.RunFor(absl::Seconds(31));
  s = c.node(0).driver->Stats().replicator;
  CHECK(s.pending_expired == 4097 + 18);
  // The shares are free again.
  REQUIRE(
      c.node(0)
          .driver
          ->Deliver("node-1", PushAhead("ghost", 20000, 10, 16, c.clock.Now()))
          .ok());
  c.RunFor(absl::Milliseconds(10));
  CHECK(c.node(0).driver->Stats().replicator.changes_buffered ==
        4097 + 18 + 10);
}

TEST_CASE(
    "a snapshot chunk nobody asked for cannot remove rows written lately") {
  Cluster c(2);
  c.Put(0, "mine", "1");
  c.Put(1, "theirs", "2");
  c.RunFor(absl::Seconds(1));
  REQUIRE(c.Converged("mine", "1"));
  REQUIRE(c.Converged("theirs", "2"));
  // node-1 claims, in a snapshot of nothing, to have seen every change up
  // to a million of both origins: node-0's rows would be "superseded there
  // and collected".
  v1::ReplicationMessage m;
  v1::ReplicationChunk* chunk = m.mutable_chunk();
  chunk->set_stream(99);
  chunk->set_index(0);
  chunk->set_snapshot(true);
  chunk->set_last(true);
  ToProto(store::VersionVector{{"node-0", 1'000'000}, {"node-1", 1'000'000}},
          chunk->mutable_versions());
  REQUIRE(c.node(0).driver->Deliver("node-1", m.SerializeAsString()).ok());
  c.RunFor(absl::Milliseconds(10));
  // A resync takes out only rows older than a member stays remembered
  // while away (24 h by default): these were written a second ago.
  CHECK(c.Get(0, "mine") == "1");
  CHECK(c.Get(0, "theirs") == "2");
}

TEST_CASE("a peer may have two snapshots open at a node, not more") {
  Cluster c(2);
  auto chunk0 = [](uint64_t stream) {
    v1::ReplicationMessage m;
    m.mutable_chunk()->set_stream(stream);
    m.mutable_chunk()->set_index(0);
    m.mutable_chunk()->set_snapshot(true);
    m.mutable_chunk()->set_last_key("a");  // more chunks to come
    return m.SerializeAsString();
  };
  for (uint64_t stream : {1, 2, 3}) {
    REQUIRE(c.node(0).driver->Deliver("node-1", chunk0(stream)).ok());
  }
  c.RunFor(absl::Milliseconds(10));
  CHECK(c.node(0).driver->Stats().replicator.snapshots_refused == 1);
  // Another chunk of an open one is taken.
  REQUIRE(c.node(0).driver->Deliver("node-1", chunk0(2)).ok());
  c.RunFor(absl::Milliseconds(10));
  CHECK(c.node(0).driver->Stats().replicator.snapshots_refused == 1);
  // Stalled snapshots are dropped after twice the stream timeout (10 s):
  // a new one is taken then.
  c.RunFor(absl::Seconds(11));
  REQUIRE(c.node(0).driver->Deliver("node-1", chunk0(4)).ok());
  c.RunFor(absl::Milliseconds(10));
  CHECK(c.node(0).driver->Stats().replicator.snapshots_refused == 1);
}

TEST_CASE("changes taken from the buffer give their sender's share back") {
  Cluster c(2);
  auto send = [&](int64_t first, int n) {
    REQUIRE(
        c.node(0)
            .driver
            ->Deliver("node-1", PushAhead("far", first, n, 16, c.clock.Now()))
            .ok());
    c.RunFor(absl::Milliseconds(10));
  };
  // node-1 fills its share with changes 2..4097 of an origin, then sends
  // change 1: all of them are applied, in order, out of the buffer.
  send(2, 4096);
  CHECK(c.node(0).driver->Stats().replicator.changes_buffered == 4096);
  send(1, 1);
  CHECK(c.Get(0, "ahead-4097") == std::string(16, 'v'));
  // Its share is whole again: changes ahead of the next gap are buffered.
  send(5000, 10);
  ReplicatorStats s = c.node(0).driver->Stats().replicator;
  CHECK(s.changes_buffered == 4096 + 10);
  CHECK(s.pending_dropped == 0);
}

}  // namespace
}  // namespace mycel::replication
