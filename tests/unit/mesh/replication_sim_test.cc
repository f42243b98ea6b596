// Replication in a simulated mesh: N replicas, each a real SQLite store in a
// temp dir with its own Replicator, exchanging serialized messages over a
// simulated network (loss, latency, partitions) in virtual time on one
// ManualClock. One seed drives everything; a failing case prints its seed,
// and MYCEL_REPLICATION_SEED=<seed> replays exactly that one.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <queue>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "daemon/store/objects.h"
#include "daemon/store/store.h"
#include "mesh/membership/prng.h"
#include "mesh/replication/codec.h"
#include "mesh/replication/replicator.h"
#include "mesh/sim/network.h"
#include "runtime/manual_clock.h"
#include "tests/testing/power_loss_vfs.h"
#include "tests/testing/process.h"

namespace mycel::replication {
namespace {

using store::HlcTime;
using store::ObjectChange;

constexpr absl::Time kStart = absl::FromUnixSeconds(1'800'000'000);

// A clock ahead of the mesh's by a fixed offset (a node with skew).
class SkewedClock final : public Clock {
 public:
  SkewedClock(const Clock* base, absl::Duration skew)
      : base_(base), skew_(skew) {}
  absl::Time Now() const override { return base_->Now() + skew_; }
  void RunAfter(absl::Duration, std::function<void()>) override {
    FAIL("no timers");
  }

 private:
  const Clock* base_;
  absl::Duration skew_;
};

struct MeshOptions {
  int nodes = 3;
  uint64_t seed = 1;
  sim::NetworkOptions network;
  ReplicatorOptions replicator;
  // Stores on the power-loss VFS (PowerLoss).
  bool power_loss = false;
  // Each write is synced at once (Sync), as the daemon's committer does
  // after each commit; off, a test syncs when it wants.
  bool sync_writes = true;
};

// Every stamp of an acknowledged write, and what the key must hold in the
// end: the write with the highest (hlc, origin).
class Reference {
 public:
  void Acked(const ObjectChange& c) {
    auto& slot = keys_[{c.ns, c.key}];
    if (!slot.has_value() ||
        std::tie(c.stamp.hlc, c.stamp.origin) >
            std::tie(slot->stamp.hlc, slot->stamp.origin)) {
      slot = c;
    }
  }
  // Live (namespace, key) -> value.
  std::map<std::pair<std::string, std::string>, std::string> Live() const {
    std::map<std::pair<std::string, std::string>, std::string> out;
    for (const auto& [k, c] : keys_) {
      if (c->value.has_value()) out[k] = *c->value;
    }
    return out;
  }

 private:
  std::map<std::pair<std::string, std::string>, std::optional<ObjectChange>>
      keys_;
};

class Mesh {
 public:
  struct Node {
    std::string name;
    std::string path;
    std::unique_ptr<SkewedClock> skewed;
    std::unique_ptr<store::Store> store;
    std::unique_ptr<store::ObjectStore> objects;
    std::unique_ptr<ObjectStoreLog> log;
    std::unique_ptr<Replicator> rep;
    int restarts = 0;
    bool up() const { return rep != nullptr; }
  };

  explicit Mesh(MeshOptions options)
      : options_(std::move(options)),
        clock_(kStart),
        network_(options_.network),
        prng_(options_.seed) {
    for (int i = 0; i < options_.nodes; ++i) {
      Node& n = nodes_.emplace_back();
      n.name = absl::StrFormat("n%02d", i);
      n.path = dir_.Sub(n.name + ".db");
    }
    for (int i = 0; i < options_.nodes; ++i) Start(i);
    UpdateMembers();
  }

  // Gives node i a clock `skew` ahead (from its next start).
  void Skew(int i, absl::Duration skew) {
    nodes_[i].skewed = std::make_unique<SkewedClock>(&clock_, skew);
  }

  void Start(int i) {
    Node& n = nodes_[i];
    const Clock* clock = n.skewed ? static_cast<const Clock*>(n.skewed.get())
                                  : static_cast<const Clock*>(&clock_);
    store::Store::Options so{.origin = n.name, .clock = clock};
    if (options_.power_loss) {
      testing::RegisterPowerLossVfs();
      so.vfs = testing::kPowerLossVfs;
    }
    auto s = store::Store::Open(n.path, so);
    REQUIRE_MESSAGE(s.ok(), s.status().ToString());
    n.store = *std::move(s);
    n.objects = std::make_unique<store::ObjectStore>(n.store.get());
    n.log = std::make_unique<ObjectStoreLog>(n.objects.get());
    ReplicatorOptions ro = options_.replicator;
    ro.name = n.name;
    uint64_t seed = options_.seed * 1000003 + i * 7919 + n.restarts;
    ro.random_seed = membership::SplitMix64(&seed);
    auto r = Replicator::Create(ro, n.log.get(), clock_.Now());
    REQUIRE_MESSAGE(r.ok(), r.status().ToString());
    n.rep = *std::move(r);
    // As NodeReplication starts it: what the store holds on disk.
    n.rep->OnDurable(n.store->durable_seq(), clock_.Now());
  }
  // Syncs node i's store and tells its replicator, as the store's durable
  // listener does after a commit in the daemon.
  void Sync(int i) {
    Node& n = nodes_[i];
    absl::StatusOr<int64_t> seq = n.store->Sync();
    REQUIRE_MESSAGE(seq.ok(), seq.status());
    n.rep->OnDurable(*seq, clock_.Now());
    Flush(i);
  }
  // Stops node i as a power loss would: only what its store synced
  // survives (MeshOptions::power_loss).
  void PowerLoss(int i) {
    REQUIRE(options_.power_loss);
    Node& n = nodes_[i];
    n.rep.reset();
    n.log.reset();
    n.objects.reset();
    // Not closed (closing checkpoints and syncs); SimulatePowerLoss puts
    // new files in place of those the leaked connection holds.
    (void)n.store.release();
    absl::Status s = testing::SimulatePowerLoss(n.path);
    REQUIRE_MESSAGE(s.ok(), s);
    ++n.restarts;
    UpdateMembers();
  }
  // Stops node i as kill -9 would: only what SQLite committed survives.
  void Crash(int i) {
    Node& n = nodes_[i];
    n.rep.reset();
    n.log.reset();
    n.objects.reset();
    n.store.reset();
    ++n.restarts;
  }
  void Restart(int i) {
    Start(i);
    UpdateMembers();
  }
  void CrashAndUpdate(int i) {
    Crash(i);
    UpdateMembers();
  }

  // Membership as the daemon would pass it: running nodes are live, the
  // others away (not yet forgotten).
  void UpdateMembers() {
    std::vector<std::string> live, away;
    for (const Node& n : nodes_) (n.up() ? live : away).push_back(n.name);
    for (int i = 0; i < static_cast<int>(nodes_.size()); ++i) {
      if (!nodes_[i].up()) continue;
      nodes_[i].rep->SetMembers(live, away, clock_.Now());
      Flush(i);
    }
  }

  // A local write on node i; nullopt value: a delete. Returns the change
  // when it was acknowledged (committed).
  std::optional<ObjectChange> Write(int i, const std::string& ns,
                                    const std::string& key,
                                    std::optional<std::string> value) {
    Node& n = nodes_[i];
    REQUIRE(n.up());
    // The daemon's store queues a write while replication holds them
    // (Store::HoldLocalWrites); here the client is refused.
    if (n.rep->OwnWritesHeldUntil() > clock_.Now()) return std::nullopt;
    auto c = n.objects->Write(ns, key, value);
    if (!c.ok()) return std::nullopt;
    reference_.Acked(*c);
    n.rep->OnLocalChange(*c, clock_.Now());
    Flush(i);
    if (options_.sync_writes) Sync(i);
    return *c;
  }

  // Runs the mesh for `d` of virtual time.
  void RunFor(absl::Duration d) {
    const absl::Time end = clock_.Now() + d;
    for (;;) {
      absl::Time next = end;
      if (!queue_.empty()) next = std::min(next, queue_.top().at);
      for (const Node& n : nodes_) {
        if (n.up()) next = std::min(next, n.rep->NextDeadline());
      }
      if (next > clock_.Now()) clock_.Advance(next - clock_.Now());
      const absl::Time now = clock_.Now();
      while (!queue_.empty() && queue_.top().at <= now) {
        InFlight m = queue_.top();
        queue_.pop();
        Node& to = nodes_[m.to];
        if (!to.up() || !network_.Connected(m.from, m.to)) continue;
        v1::ReplicationMessage msg;
        if (!msg.ParseFromString(m.bytes)) FAIL("unparsable message");
        if (observer_) observer_(m.from, m.to, msg);
        to.rep->HandleMessage(nodes_[m.from].name, msg, now).IgnoreError();
        Flush(m.to);
      }
      for (int i = 0; i < static_cast<int>(nodes_.size()); ++i) {
        if (nodes_[i].up() && nodes_[i].rep->NextDeadline() <= now) {
          nodes_[i].rep->Tick(now);
          Flush(i);
        }
      }
      if (now >= end) return;
    }
  }

  // The last seq of `origin` that node i's store holds (0: none).
  int64_t Seq(int i, const std::string& origin) {
    auto v = nodes_[i].objects->Versions();
    REQUIRE(v.ok());
    auto it = v->find(origin);
    return it == v->end() ? int64_t{0} : it->second;
  }

  // Live rows of node i: (namespace, key) -> value.
  std::map<std::pair<std::string, std::string>, std::string> Live(int i) {
    auto rows = nodes_[i].objects->Dump();
    REQUIRE(rows.ok());
    std::map<std::pair<std::string, std::string>, std::string> out;
    for (const store::Object& o : *rows) {
      if (o.value.has_value()) out[{o.ns, o.key}] = *o.value;
    }
    return out;
  }
  // Every row with its stamp, tombstones included.
  std::vector<store::Object> Rows(int i) {
    auto rows = nodes_[i].objects->Dump();
    REQUIRE(rows.ok());
    return *rows;
  }
  // The live rows with their stamps.
  std::vector<store::Object> LiveRows(int i) {
    std::vector<store::Object> out;
    for (store::Object& o : Rows(i)) {
      if (o.value.has_value()) out.push_back(std::move(o));
    }
    return out;
  }
  std::optional<std::string> Value(int i, const std::string& ns,
                                   const std::string& key) {
    auto live = Live(i);
    auto it = live.find({ns, key});
    if (it == live.end()) return std::nullopt;
    return it->second;
  }

  // Sends raw bytes from node `from` as if its replicator had (a forged
  // or skewed message).
  void Inject(int from, int to, const v1::ReplicationMessage& m) {
    queue_.push({clock_.Now(), serial_++, from, to, m.SerializeAsString()});
  }

  Node& node(int i) { return nodes_[i]; }
  sim::Network& network() { return network_; }
  ManualClock& clock() { return clock_; }
  const Reference& reference() const { return reference_; }
  membership::Prng& prng() { return prng_; }
  uint64_t bytes_sent() const { return bytes_sent_; }
  void set_observer(
      std::function<void(int, int, const v1::ReplicationMessage&)> f) {
    observer_ = std::move(f);
  }

 private:
  struct InFlight {
    absl::Time at;
    uint64_t serial;
    int from;
    int to;
    std::string bytes;
    bool operator>(const InFlight& o) const {
      return std::tie(at, serial) > std::tie(o.at, o.serial);
    }
  };

  int IndexOf(const std::string& name) const {
    for (size_t i = 0; i < nodes_.size(); ++i) {
      if (nodes_[i].name == name) return static_cast<int>(i);
    }
    FAIL("unknown node ", name);
    return -1;
  }

  void Flush(int from) {
    Node& n = nodes_[from];
    if (!n.up()) return;
    for (Outbound& out : n.rep->TakeOutbox()) {
      const int to = IndexOf(out.to);
      std::string bytes = out.message.SerializeAsString();
      bytes_sent_ += bytes.size();
      absl::Duration delay;
      if (!network_.Connected(from, to) ||
          !network_.Deliver(from, to, &prng_, &delay)) {
        continue;
      }
      queue_.push(
          {clock_.Now() + delay, serial_++, from, to, std::move(bytes)});
    }
  }

  MeshOptions options_;
  testing::TempDir dir_;
  ManualClock clock_;
  sim::Network network_;
  membership::Prng prng_;
  std::vector<Node> nodes_;
  std::priority_queue<InFlight, std::vector<InFlight>, std::greater<>> queue_;
  uint64_t serial_ = 0;
  uint64_t bytes_sent_ = 0;
  Reference reference_;
  std::function<void(int, int, const v1::ReplicationMessage&)> observer_;
};

// Checks that every running replica holds the same live objects, equal to
// the reference model of every acknowledged write.
void CheckConverged(Mesh& mesh, int nodes) {
  const auto want = mesh.reference().Live();
  for (int i = 0; i < nodes; ++i) {
    if (!mesh.node(i).up()) continue;
    const auto got = mesh.Live(i);
    CHECK_MESSAGE(got.size() == want.size(), "node ", i, " holds ", got.size(),
                  " live objects, the model ", want.size());
    int shown = 0;
    for (const auto& [k, v] : want) {
      auto it = got.find(k);
      const bool same = it != got.end() && it->second == v;
      if (!same && shown++ < 5) {
        FAIL_CHECK("node ", i, " ", k.first, "/", k.second, " is ",
                   it == got.end() ? std::string("absent") : it->second,
                   ", the model says ", v);
      }
    }
  }
}

std::vector<uint64_t> Seeds(uint64_t first, int count) {
  if (const char* env = std::getenv("MYCEL_REPLICATION_SEED")) {
    return {std::strtoull(env, nullptr, 10)};
  }
  std::vector<uint64_t> seeds;
  for (int i = 0; i < count; ++i) seeds.push_back(first + i);
  return seeds;
}

MeshOptions Defaults(int nodes, uint64_t seed) {
  MeshOptions o;
  o.nodes = nodes;
  o.seed = seed;
  o.replicator.anti_entropy_interval = absl::Seconds(1);
  o.replicator.max_chunk_bytes = 4096;
  o.replicator.gc_interval = absl::Minutes(1);
  // As the daemon runs it (Write syncs each write).
  o.replicator.await_durable = true;
  return o;
}

TEST_CASE("a write on one node reaches every node by push alone") {
  Mesh mesh(Defaults(8, 1));
  auto c = mesh.Write(3, "kv", "greeting", "hello");
  REQUIRE(c.has_value());
  // Well before the first anti-entropy round could have carried it.
  mesh.RunFor(absl::Milliseconds(50));
  for (int i = 0; i < 8; ++i) {
    CHECK_MESSAGE(mesh.Value(i, "kv", "greeting") == "hello", "node ", i);
  }
  // Gossip is bounded: each node passes a change on once at most.
  uint64_t pushes = 0;
  for (int i = 0; i < 8; ++i) pushes += mesh.node(i).rep->stats().pushes_sent;
  CHECK(pushes <= 8 * 3);
}

TEST_CASE(
    "at 50 nodes a push alone reaches every node, directly or by gossip") {
  constexpr int kNodes = 50;
  constexpr int kSeeds = 20;
  // Pushes one write per seed with anti-entropy out of the way; returns
  // the mean and the fewest nodes reached, and checks the messages.
  auto run = [&](size_t direct_push_max, uint64_t max_pushes) {
    size_t fewest = kNodes;
    size_t total = 0;
    for (uint64_t seed = 1; seed <= kSeeds; ++seed) {
      MeshOptions o = Defaults(kNodes, seed);
      o.replicator.anti_entropy_interval = absl::Minutes(10);
      o.replicator.direct_push_max = direct_push_max;
      Mesh mesh(o);
      const int writer = static_cast<int>(seed % kNodes);
      REQUIRE(mesh.Write(writer, "kv", "k", "v").has_value());
      mesh.RunFor(absl::Milliseconds(100));
      size_t have = 0;
      uint64_t pushes = 0;
      for (int i = 0; i < kNodes; ++i) {
        if (mesh.Value(i, "kv", "k") == "v") ++have;
        pushes += mesh.node(i).rep->stats().pushes_sent;
      }
      fewest = std::min(fewest, have);
      total += have;
      CHECK(pushes <= max_pushes);
    }
    return std::make_pair(static_cast<double>(total) / kSeeds, fewest);
  };
  // Up to direct_push_max (64 by default) the writer sends to every live
  // member: 49 messages, every node reached.
  auto [direct_mean, direct_fewest] = run(64, kNodes - 1);
  CHECK(direct_fewest == kNodes);
  // Gossip (what larger meshes use): the hop budget grows with log(N);
  // with the old fixed 2 hops a push reached at most 3 + 9 + 27 nodes (28.4
  // on average here). Each node passes a change to 3 others once (push
  // rumor spreading), which leaves about e^-3 of the nodes (5%) for
  // anti-entropy.
  auto [gossip_mean, gossip_fewest] = run(0, kNodes * 3);
  MESSAGE("gossip alone reached ", gossip_mean, " of 50 nodes on average, ",
          gossip_fewest, " at least");
  CHECK(gossip_mean >= 45.0);
  CHECK(gossip_fewest >= 40);
}

TEST_CASE("writes on both sides of a partition converge after it heals") {
  for (uint64_t seed : Seeds(100, 5)) {
    CAPTURE(seed);
    MeshOptions o = Defaults(5, seed);
    o.network.loss = 0.05;
    Mesh mesh(o);
    for (int i = 0; i < 20; ++i) {
      mesh.Write(static_cast<int>(mesh.prng().Uniform(5)), "kv",
                 "k" + std::to_string(i), "before");
    }
    mesh.RunFor(absl::Seconds(5));
    mesh.network().Partition({0, 0, 1, 1, 1});
    // Both sides write the same keys, and delete some.
    for (int round = 0; round < 50; ++round) {
      const int side_a = static_cast<int>(mesh.prng().Uniform(2));
      const int side_b = 2 + static_cast<int>(mesh.prng().Uniform(3));
      const std::string key = "k" + std::to_string(mesh.prng().Uniform(25));
      mesh.Write(side_a, "kv", key, "a" + std::to_string(round));
      if (mesh.prng().Bernoulli(0.2)) {
        mesh.Write(side_b, "kv", key, std::nullopt);
      } else {
        mesh.Write(side_b, "kv", key, "b" + std::to_string(round));
      }
      mesh.RunFor(absl::Milliseconds(mesh.prng().Uniform(300)));
    }
    mesh.RunFor(absl::Seconds(10));
    // Partitioned: each side has its own writes only.
    CHECK(mesh.Live(0) != mesh.Live(2));
    mesh.network().Heal();
    mesh.RunFor(absl::Seconds(30));
    CheckConverged(mesh, 5);
    // The same winners, stamps and all.
    for (int i = 1; i < 5; ++i) CHECK(mesh.LiveRows(i) == mesh.LiveRows(0));
  }
}

// Random writes, deletes, crashes and restarts, partitions and heals, then
// every node up, the network healed and lossless, and time to converge.
void RandomRun(Mesh& mesh, int nodes, int steps) {
  membership::Prng& rnd = mesh.prng();
  for (int step = 0; step < steps; ++step) {
    const uint64_t what = rnd.Uniform(100);
    const int i = static_cast<int>(rnd.Uniform(nodes));
    if (what < 70) {
      if (!mesh.node(i).up()) continue;
      const std::string key = "k" + std::to_string(rnd.Uniform(40));
      if (rnd.Bernoulli(0.25)) {
        mesh.Write(i, "kv", key, std::nullopt);
      } else {
        mesh.Write(i, "kv", key,
                   std::string(rnd.Uniform(200), 'v') + std::to_string(step));
      }
    } else if (what < 76) {
      if (mesh.node(i).up()) {
        mesh.CrashAndUpdate(i);
      } else {
        mesh.Restart(i);
      }
    } else if (what < 80) {
      std::vector<int> groups;
      for (int n = 0; n < nodes; ++n) {
        groups.push_back(static_cast<int>(rnd.Uniform(2)));
      }
      mesh.network().Partition(groups);
    } else if (what < 85) {
      mesh.network().Heal();
    }
    mesh.RunFor(absl::Milliseconds(rnd.Uniform(500)));
  }
  for (int i = 0; i < nodes; ++i) {
    if (!mesh.node(i).up()) mesh.Restart(i);
  }
  mesh.network().Heal();
  mesh.network().set_loss(0);
  mesh.RunFor(absl::Seconds(60));
}

MeshOptions Lossy(uint64_t seed) {
  MeshOptions o = Defaults(5, seed);
  o.network.loss = 0.1;
  o.replicator.max_chunk_bytes = 1024;
  o.replicator.window = 2;
  return o;
}

TEST_CASE("random writes, deletes, partitions, loss and restarts converge") {
  // The property test: at the end every replica equals the reference
  // last-writer-wins model of every acknowledged write.
  for (uint64_t seed : Seeds(1000, 12)) {
    CAPTURE(seed);
    Mesh mesh(Lossy(seed));
    RandomRun(mesh, 5, 300);
    CheckConverged(mesh, 5);
  }
}

TEST_CASE("a seed replays exactly") {
  auto run = [](uint64_t seed) {
    Mesh mesh(Lossy(seed));
    RandomRun(mesh, 5, 120);
    std::vector<std::vector<store::Object>> rows;
    for (int i = 0; i < 5; ++i) rows.push_back(mesh.Rows(i));
    return std::make_pair(mesh.bytes_sent(), rows);
  };
  const auto first = run(4242);
  CHECK(first == run(4242));
  CHECK(first.first != run(4243).first);
}

TEST_CASE("a replica offline for days gets only the changes it lacks") {
  MeshOptions o = Defaults(3, 7);
  o.replicator.tombstone_max_age = absl::Hours(24 * 30);
  // Fewer rounds make three virtual days cheap to run.
  o.replicator.anti_entropy_interval = absl::Seconds(20);
  Mesh mesh(o);
  for (int i = 0; i < 400; ++i) {
    mesh.Write(i % 3, "kv", "old" + std::to_string(i), "x");
  }
  mesh.RunFor(absl::Seconds(60));
  CheckConverged(mesh, 3);
  mesh.CrashAndUpdate(2);
  auto before = mesh.node(0).objects->Versions();
  REQUIRE(before.ok());
  // Three days of writes, a few an hour, while node 2 is away.
  int written = 0;
  for (int hour = 0; hour < 72; ++hour) {
    for (int k = 0; k < 4; ++k) {
      mesh.Write(hour % 2, "kv", "new" + std::to_string(written++), "y");
    }
    mesh.RunFor(absl::Hours(1));
  }
  // Node 2 is away, not forgotten: nothing it lacks was collected.
  CHECK(mesh.node(0).objects->Floors()->at("n00") <= before->at("n00"));

  std::set<std::pair<std::string, int64_t>> sent_to_2;
  int stale = 0;
  mesh.set_observer([&](int from, int to, const v1::ReplicationMessage& m) {
    if (to != 2) return;
    const auto& changes =
        m.has_chunk() ? m.chunk().changes() : m.push().changes();
    for (const v1::ReplicationChange& c : changes) {
      auto had = before->find(c.origin());
      if (had != before->end() &&
          static_cast<int64_t>(c.seq()) <= had->second) {
        ++stale;
      }
      sent_to_2.insert({c.origin(), c.seq()});
    }
    CHECK_FALSE(m.chunk().snapshot());
  });
  mesh.Restart(2);
  mesh.RunFor(absl::Seconds(60));
  CheckConverged(mesh, 3);
  CHECK(stale == 0);  // nothing it had
  CHECK(sent_to_2.size() == static_cast<size_t>(written));
  CHECK(mesh.node(2).rep->stats().resyncs_completed == 0);
}

TEST_CASE("a delete is not undone by a replica back after the GC horizon") {
  MeshOptions o = Defaults(3, 11);
  o.replicator.tombstone_max_age = absl::Hours(1);
  o.replicator.max_chunk_bytes = 512;
  Mesh mesh(o);
  for (int i = 0; i < 50; ++i) {
    mesh.Write(0, "kv", "k" + std::to_string(i), "v");
  }
  mesh.RunFor(absl::Seconds(5));
  REQUIRE(mesh.Value(2, "kv", "k7") == "v");
  mesh.CrashAndUpdate(2);
  mesh.Write(1, "kv", "k7", std::nullopt);
  mesh.Write(0, "kv", "k8", std::nullopt);
  mesh.Write(1, "kv", "k9", "changed");
  mesh.RunFor(absl::Hours(3));
  // The tombstones are gone everywhere that was up.
  for (int i : {0, 1}) {
    for (const store::Object& row : mesh.Rows(i)) {
      CHECK_MESSAGE(row.value.has_value(), "tombstone ", row.key);
    }
  }
  mesh.Restart(2);
  mesh.RunFor(absl::Seconds(20));
  CHECK_FALSE(mesh.Value(2, "kv", "k7").has_value());
  CHECK_FALSE(mesh.Value(2, "kv", "k8").has_value());
  CHECK(mesh.Value(2, "kv", "k9") == "changed");
  CHECK(mesh.node(2).rep->stats().resyncs_completed >= 1);
  uint64_t snapshots = 0;
  for (int i : {0, 1}) {
    snapshots += mesh.node(i).rep->stats().snapshots_started;
  }
  CHECK(snapshots >= 1);
  CheckConverged(mesh, 3);
  // And k7 does not come back to the others from node 2 either.
  mesh.RunFor(absl::Seconds(20));
  for (int i = 0; i < 3; ++i) {
    CHECK_FALSE(mesh.Value(i, "kv", "k7").has_value());
  }
}

TEST_CASE("equal clocks: the higher origin wins on every replica") {
  Mesh mesh(Defaults(3, 5));
  mesh.network().Partition({0, 1, 1});
  // The same instant on fresh clocks: both stamps are (now, 0).
  auto low = mesh.Write(0, "kv", "tie", "from n00");
  auto high = mesh.Write(2, "kv", "tie", "from n02");
  REQUIRE(low.has_value());
  REQUIRE(high.has_value());
  CHECK(low->stamp.hlc == high->stamp.hlc);
  mesh.RunFor(absl::Seconds(2));
  CHECK(mesh.Value(0, "kv", "tie") == "from n00");
  mesh.network().Heal();
  mesh.RunFor(absl::Seconds(10));
  for (int i = 0; i < 3; ++i) CHECK(mesh.Value(i, "kv", "tie") == "from n02");
}

TEST_CASE("a node-owned object changed by another node is refused") {
  Mesh mesh(Defaults(3, 9));
  REQUIRE(mesh.Write(0, "node.status", "n00", "ready").has_value());
  // Node 1 cannot write it locally.
  auto local = mesh.node(1).objects->Write("node.status", "n00", "down");
  CHECK(local.status().code() == absl::StatusCode::kPermissionDenied);
  mesh.RunFor(absl::Seconds(2));
  // A forged change: node 1 claims a change of its own to n00's status.
  v1::ReplicationMessage forged;
  ObjectChange bad{.stamp = {.origin = "n01", .seq = 1, .hlc = 0},
                   .ns = "node.status",
                   .key = "n00",
                   .value = "down"};
  bad.stamp.hlc = store::MakeHlc(absl::ToUnixMillis(mesh.clock().Now()), 9);
  *forged.mutable_push()->add_changes() = ToProto(bad);
  forged.mutable_push()->set_hops(2);
  mesh.Inject(1, 2, forged);
  mesh.RunFor(absl::Seconds(2));
  CHECK(mesh.node(2).rep->stats().changes_refused == 1);
  for (int i = 0; i < 3; ++i) {
    CHECK(mesh.Value(i, "node.status", "n00") == "ready");
  }
}

TEST_CASE("a node whose clock runs ahead has its changes refused until then") {
  MeshOptions o = Defaults(3, 13);
  Mesh mesh(o);
  mesh.Crash(2);
  mesh.Skew(2, absl::Seconds(30));
  mesh.Restart(2);
  REQUIRE(mesh.Write(2, "kv", "skewed", "from the future").has_value());
  mesh.RunFor(absl::Seconds(5));
  for (int i : {0, 1}) {
    CHECK_FALSE(mesh.Value(i, "kv", "skewed").has_value());
    CHECK(mesh.node(i).rep->stats().changes_refused >= 1);
  }
  // Once real time reaches the stamp (within the offset), it is taken.
  mesh.RunFor(absl::Seconds(30));
  for (int i : {0, 1}) {
    CHECK(mesh.Value(i, "kv", "skewed") == "from the future");
  }
}

TEST_CASE("a large backlog streams in bounded chunks and live writes pass") {
  MeshOptions o = Defaults(3, 21);
  o.replicator.max_chunk_bytes = 2048;
  o.replicator.window = 2;
  o.network.latency = absl::Milliseconds(20);
  o.network.jitter = absl::Milliseconds(1);
  Mesh mesh(o);
  mesh.CrashAndUpdate(1);
  for (int i = 0; i < 600; ++i) {
    mesh.Write(0, "kv", "bulk" + std::to_string(i), std::string(500, 'b'));
  }
  mesh.RunFor(absl::Seconds(5));
  size_t max_chunk = 0;
  std::map<int, int> in_flight;  // chunks delivered to node 1, not acked
  int max_in_flight = 0;
  mesh.set_observer([&](int from, int to, const v1::ReplicationMessage& m) {
    if (m.has_chunk() && to == 1) {
      max_chunk = std::max(max_chunk, m.ByteSizeLong());
      max_in_flight = std::max(max_in_flight, ++in_flight[from]);
    }
    if (m.has_ack() && from == 1) --in_flight[to];
  });
  mesh.Restart(1);
  mesh.RunFor(absl::Milliseconds(300));
  // Mid-backlog, a live write of another origin goes straight through.
  const size_t partway = mesh.Live(1).size();
  CHECK(partway > 0);
  CHECK(partway < 550);
  REQUIRE(mesh.Write(2, "kv", "live", "now").has_value());
  mesh.RunFor(absl::Milliseconds(30));
  CHECK(mesh.Value(1, "kv", "live") == "now");
  CHECK(mesh.Live(1).size() < 600);
  mesh.RunFor(absl::Seconds(30));
  CheckConverged(mesh, 3);
  CHECK(max_chunk <= 2048 + 600);  // the budget, plus one change's overrun
  CHECK(max_in_flight <= 2);       // the window, per sending peer
  CHECK(max_in_flight >= 1);
}

TEST_CASE("bad options and malformed messages are INVALID_ARGUMENT") {
  Mesh mesh(Defaults(3, 3));
  ObjectStoreLog& log = *mesh.node(0).log;
  ReplicatorOptions bad;
  bad.name = "x";
  bad.fanout = 0;
  auto r = Replicator::Create(bad, &log, kStart);
  CHECK(r.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(r.status().message() == "fanout: must be at least 1");
  bad.fanout = 1;
  bad.window = 0;
  CHECK(Replicator::Create(bad, &log, kStart).status().message() ==
        "window: must be at least 1");

  Replicator& rep = *mesh.node(0).rep;
  rep.TakeOutbox();
  auto empty = rep.HandleMessage("n01", v1::ReplicationMessage(), kStart);
  CHECK(empty.code() == absl::StatusCode::kInvalidArgument);
  CHECK(empty.message() == "body: a replication message from n01 has none");
  v1::ReplicationMessage m;
  v1::ReplicationChange* c = m.mutable_push()->add_changes();
  c->set_origin("n01");
  c->set_seq(0);
  auto seq0 = rep.HandleMessage("n01", m, kStart);
  CHECK(seq0.code() == absl::StatusCode::kInvalidArgument);
  CHECK(seq0.message().substr(0, 4) == "seq:");
  c->set_seq(1);
  c->set_deleted(true);
  c->set_value("x");
  CHECK(rep.HandleMessage("n01", m, kStart).message().substr(0, 6) == "value:");
  c->set_deleted(false);
  c->set_signature(std::string(513, 's'));
  CHECK(rep.HandleMessage("n01", m, kStart).message().substr(0, 10) ==
        "signature:");
  c->clear_signature();
  CHECK(rep.stats().malformed == 4);
  // A snapshot chunk with a malformed proof is refused whole.
  v1::ReplicationMessage chunk;
  chunk.mutable_chunk()->set_snapshot(true);
  chunk.mutable_chunk()->set_last(true);
  chunk.mutable_chunk()->add_proofs()->set_origin("n01");  // seq 0
  auto proof = rep.HandleMessage("n01", chunk, kStart);
  CHECK(proof.code() == absl::StatusCode::kInvalidArgument);
  CHECK(proof.message().substr(0, 4) == "seq:");
  CHECK(rep.stats().malformed == 5);
  CHECK(rep.stats().resyncs_completed == 0);
  rep.TakeOutbox();

  // A sender cannot make a change travel further than this node would.
  c->set_namespace_("kv");
  c->set_key("k");
  c->set_value("v");
  c->set_deleted(false);
  c->set_hlc(store::MakeHlc(absl::ToUnixMillis(mesh.clock().Now()), 0));
  m.mutable_push()->set_hops(1000);
  REQUIRE(rep.HandleMessage("n01", m, mesh.clock().Now()).ok());
  auto out = rep.TakeOutbox();
  REQUIRE(out.size() == 1);  // fanout 3, but only n02 is neither us nor n01
  CHECK(out[0].to == "n02");
  CHECK(out[0].message.push().hops() ==
        static_cast<uint32_t>(rep.options().push_hops));
}

TEST_CASE("a peer's vector is kept only for the origins this node holds") {
  Mesh mesh(Defaults(3, 21));
  mesh.Write(0, "kv", "a", "1");
  mesh.Write(1, "kv", "b", "1");
  mesh.RunFor(absl::Seconds(3));
  Replicator& rep = *mesh.node(0).rep;
  rep.TakeOutbox();
  // n01 claims 10,000 origins nobody holds, and to lack n00's change.
  v1::ReplicationMessage m;
  for (int i = 0; i < 10000; ++i) {
    v1::ReplicationVersion* v = m.mutable_digest()->add_versions();
    v->set_origin(absl::StrCat("ghost-", i));
    v->set_seq(5);
  }
  v1::ReplicationVersion* theirs = m.mutable_digest()->add_versions();
  theirs->set_origin("n01");
  theirs->set_seq(1);
  const absl::Time now = mesh.clock().Now();
  REQUIRE(rep.HandleMessage("n01", m, now).ok());
  const store::VersionVector& kept = rep.peer_versions().at("n01");
  CHECK(kept.size() == 1);
  CHECK(kept.at("n01") == 1);
  // What it lacks still goes to it.
  bool streamed = false;
  for (const Outbound& out : rep.TakeOutbox()) {
    streamed |= out.to == "n01" && out.message.has_chunk();
  }
  CHECK(streamed);
}

TEST_CASE(
    "a node restored from an older copy takes its changes back from peers "
    "before it writes again") {
  // Without the hold its first writes reuse the numbers of the changes it
  // lost, and the peers that hold those take the new ones as duplicates:
  // the test's control.
  for (bool hold : {true, false}) {
    CAPTURE(hold);
    MeshOptions o = Defaults(3, 17);
    if (hold) o.replicator.own_writes_hold = absl::Seconds(3);
    Mesh mesh(o);
    auto own_at = [&](int i) { return mesh.Seq(i, "n00"); };
    // A node that has just started waits for a peer's word, not long.
    CHECK(mesh.Write(0, "kv", "a0", "1").has_value() == !hold);
    mesh.RunFor(absl::Milliseconds(100));
    CHECK(mesh.node(0).rep->OwnWritesHeldUntil() == absl::InfinitePast());
    for (int i = 0; i < 3; ++i) {
      REQUIRE(mesh.Write(0, "kv", "a" + std::to_string(i), "1"));
    }
    mesh.RunFor(absl::Seconds(3));
    mesh.CrashAndUpdate(0);
    const std::string db = mesh.node(0).path;
    std::filesystem::copy_file(db, db + ".bak");
    mesh.Restart(0);
    mesh.RunFor(absl::Milliseconds(100));
    for (int i = 0; i < 3; ++i) {
      REQUIRE(mesh.Write(0, "kv", "b" + std::to_string(i), "1"));
    }
    mesh.RunFor(absl::Seconds(3));
    const int64_t before = own_at(1);
    CHECK(own_at(2) == before);
    // Back to the copy taken before the b writes.
    mesh.CrashAndUpdate(0);
    std::filesystem::copy_file(
        db + ".bak", db, std::filesystem::copy_options::overwrite_existing);
    std::filesystem::remove(db + "-wal");
    mesh.Restart(0);
    CHECK(own_at(0) == before - 3);
    CHECK(mesh.node(0).rep->stats().own_sequence_behind == 0);
    // A write at once: held (refused here) until the node has its own
    // changes back; without the hold it takes a number a peer holds.
    const bool written_at_once = mesh.Write(0, "kv", "c0", "2").has_value();
    CHECK(written_at_once == !hold);
    mesh.RunFor(absl::Seconds(1));
    CHECK(mesh.node(0).rep->stats().own_sequence_behind >= 1);
    CHECK(mesh.node(1).rep->stats().own_sequence_behind == 0);
    if (hold) {
      CHECK(own_at(0) == before);
      CHECK(mesh.node(0).rep->stats().own_changes_taken_back == 3);
      CHECK(mesh.node(0).rep->stats().own_hold_expired == 0);
      CHECK(mesh.Value(0, "kv", "b2") == "1");
      REQUIRE(mesh.Write(0, "kv", "c0", "2"));
    }
    mesh.RunFor(absl::Seconds(5));
    const bool same = mesh.LiveRows(1) == mesh.LiveRows(0) &&
                      mesh.LiveRows(2) == mesh.LiveRows(0);
    if (hold) {
      CHECK(same);
      CHECK(own_at(0) == before + 1);
      CHECK(own_at(1) == before + 1);
      CHECK(mesh.Value(1, "kv", "c0") == "2");
      CHECK(mesh.Value(2, "kv", "b0") == "1");
    } else {
      // n00's c0 went out under the number of b0, which the peers hold.
      CHECK_FALSE(same);
      CHECK(mesh.Value(1, "kv", "c0") == std::nullopt);
    }
  }
}

TEST_CASE("a node held from writing goes on alone, or when cut off") {
  MeshOptions o = Defaults(1, 5);
  o.replicator.own_writes_hold = absl::Seconds(3);
  {
    // Alone in its mesh: nobody to ask.
    Mesh alone(o);
    CHECK(alone.Write(0, "kv", "k", "1").has_value());
  }
  o.nodes = 3;
  Mesh mesh(o);
  mesh.RunFor(absl::Seconds(1));
  REQUIRE(mesh.Write(0, "kv", "k", "1"));
  mesh.RunFor(absl::Seconds(1));
  // Cut off from both peers, it restarts: held until the hold runs out.
  mesh.network().Partition({0, 1, 1});
  mesh.CrashAndUpdate(0);
  mesh.Restart(0);
  CHECK_FALSE(mesh.Write(0, "kv", "k", "2").has_value());
  mesh.RunFor(absl::Milliseconds(2900));
  CHECK_FALSE(mesh.Write(0, "kv", "k", "2").has_value());
  mesh.RunFor(absl::Milliseconds(200));
  CHECK(mesh.node(0).rep->stats().own_hold_expired == 1);
  CHECK(mesh.Write(0, "kv", "k", "2").has_value());
  mesh.network().Heal();
  mesh.RunFor(absl::Seconds(5));
  CHECK(mesh.Value(1, "kv", "k") == "2");
}

TEST_CASE(
    "a power loss takes back no change a peer holds: an origin publishes only "
    "what is durable, and its reused numbers converge") {
  // Without await_durable the same run diverges for good: the test's
  // control, showing the power loss it simulates is real.
  for (bool await_durable : {true, false}) {
    CAPTURE(await_durable);
    MeshOptions o = Defaults(3, 41);
    o.power_loss = true;
    o.sync_writes = false;
    o.replicator.await_durable = await_durable;
    Mesh mesh(o);
    auto own_at = [&](int i) { return mesh.Seq(i, "n00"); };
    // n02 is cut off while n00 writes, so that it later catches up by a
    // stream rather than by pushes.
    mesh.network().Partition({0, 0, 1});
    for (int i = 0; i < 5; ++i) mesh.Write(0, "kv", absl::StrCat("a", i), "1");
    mesh.Sync(0);
    mesh.RunFor(absl::Seconds(3));
    CHECK(own_at(1) == 5);
    // Three more, committed and acknowledged but not yet synced.
    for (int i = 0; i < 3; ++i) mesh.Write(0, "kv", absl::StrCat("b", i), "1");
    mesh.network().Heal();
    mesh.RunFor(absl::Seconds(5));
    CHECK(own_at(0) == 8);
    if (await_durable) {
      // Neither the pushes, nor the digests, nor n02's catch-up stream
      // carried them.
      CHECK(own_at(1) == 5);
      CHECK(own_at(2) == 5);
    } else {
      CHECK(own_at(1) == 8);
    }
    mesh.PowerLoss(0);
    mesh.Restart(0);
    CHECK(own_at(0) == 5);
    // The lost numbers go to new writes.
    for (int i = 0; i < 3; ++i) mesh.Write(0, "kv", absl::StrCat("c", i), "2");
    mesh.Sync(0);
    mesh.RunFor(absl::Seconds(10));
    CHECK(own_at(0) == 8);
    CHECK(own_at(1) == 8);
    CHECK(own_at(2) == 8);
    const bool same = mesh.LiveRows(1) == mesh.LiveRows(0) &&
                      mesh.LiveRows(2) == mesh.LiveRows(0);
    if (await_durable) {
      CHECK(same);
      CHECK(mesh.Value(1, "kv", "c0") == "2");
      CHECK(mesh.Value(1, "kv", "b0") == std::nullopt);
      CHECK(mesh.node(0).rep->stats().own_sequence_behind == 0);
    } else {
      // The peers took n00:6-8 (the c keys) as duplicates of the b keys.
      CHECK_FALSE(same);
      CHECK(mesh.Value(1, "kv", "b0") == "1");
      CHECK(mesh.Value(1, "kv", "c0") == std::nullopt);
    }
  }
}

TEST_CASE(
    "at rest anti-entropy sends fingerprints; a mismatch starts a full one") {
  Mesh mesh(Defaults(3, 23));
  for (int i = 0; i < 4; ++i)
    mesh.Write(i % 3, "kv", "k" + std::to_string(i), "1");
  mesh.RunFor(absl::Seconds(10));
  CheckConverged(mesh, 3);
  uint64_t in_sync = 0;
  for (int i = 0; i < 3; ++i)
    in_sync += mesh.node(i).rep->stats().digests_in_sync;
  mesh.RunFor(absl::Seconds(20));
  uint64_t later = 0;
  for (int i = 0; i < 3; ++i) {
    later += mesh.node(i).rep->stats().digests_in_sync;
    // A matching fingerprint, and its answer, record that the peer holds
    // what we hold: every node's view of every other is current.
    CHECK(mesh.node(i).rep->peer_versions().size() == 2);
    for (const auto& [peer, v] : mesh.node(i).rep->peer_versions()) {
      CHECK(v == mesh.node(i).rep->versions());
    }
  }
  // One fingerprint per node every 2 s, each found in sync, and answered.
  CHECK(later - in_sync >= 50);

  Replicator& rep = *mesh.node(0).rep;
  rep.TakeOutbox();
  const uint64_t ours = Replicator::Fingerprint(rep.versions());
  v1::ReplicationMessage m;
  m.mutable_digest()->set_by_fingerprint(true);
  // A matching fingerprint that asks for an answer gets ours back, which
  // asks for none; an answer gets nothing.
  m.mutable_digest()->set_fingerprint(ours);
  m.mutable_digest()->set_reply(true);
  REQUIRE(rep.HandleMessage("n01", m, mesh.clock().Now()).ok());
  std::vector<Outbound> out = rep.TakeOutbox();
  REQUIRE(out.size() == 1);
  CHECK(out[0].to == "n01");
  CHECK(out[0].message.digest().by_fingerprint());
  CHECK(out[0].message.digest().fingerprint() == ours);
  CHECK_FALSE(out[0].message.digest().reply());
  m.mutable_digest()->set_reply(false);
  REQUIRE(rep.HandleMessage("n01", m, mesh.clock().Now()).ok());
  CHECK(rep.TakeOutbox().empty());
  // One that differs starts the full exchange.
  m.mutable_digest()->set_fingerprint(ours ^ 1);
  m.mutable_digest()->set_reply(true);
  REQUIRE(rep.HandleMessage("n01", m, mesh.clock().Now()).ok());
  out = rep.TakeOutbox();
  REQUIRE(out.size() == 1);
  CHECK(out[0].to == "n01");
  CHECK(out[0].message.digest().reply());
  CHECK_FALSE(out[0].message.digest().by_fingerprint());
  CHECK(out[0].message.digest().versions_size() == 3);
  // A flood of differing fingerprints from one peer gets one vector per
  // min_digest_gap (500 ms), not one each.
  for (int i = 0; i < 100; ++i) {
    REQUIRE(rep.HandleMessage("n01", m, mesh.clock().Now()).ok());
  }
  CHECK(rep.TakeOutbox().empty());
  REQUIRE(
      rep.HandleMessage("n01", m, mesh.clock().Now() + absl::Milliseconds(500))
          .ok());
  CHECK(rep.TakeOutbox().size() == 1);
  // A fingerprint with versions is malformed.
  m.mutable_digest()->add_versions()->set_origin("n01");
  absl::Status bad = rep.HandleMessage("n01", m, mesh.clock().Now());
  CHECK(bad.code() == absl::StatusCode::kInvalidArgument);
  CHECK(bad.message() == "digest: a fingerprint comes without versions");
  CHECK(rep.TakeOutbox().empty());
  // The fingerprint tells vectors apart, including by where names end.
  CHECK(Replicator::Fingerprint({{"ab", 1}}) !=
        Replicator::Fingerprint({{"a", 1}}));
  CHECK(Replicator::Fingerprint({{"a", 1}, {"b", 2}}) !=
        Replicator::Fingerprint({{"a", 2}, {"b", 1}}));
  CHECK(Replicator::Fingerprint({}) != Replicator::Fingerprint({{"a", 0}}));
}

}  // namespace
}  // namespace mycel::replication
