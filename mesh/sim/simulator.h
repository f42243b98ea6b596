// A deterministic single-process simulator for mesh/membership. Thousands of
// Membership instances (the same code the daemon runs) exchange messages
// over a simulated Network on a virtual-time event queue. One seed drives
// everything: the network's draws and, through derived seeds, every node's
// own Prng; nothing reads a clock and nothing iterates a hash map, so a
// seed replays exactly.
//
// Messages travel as structs, sharing the signed records they carry, which
// is what lets 10,000 nodes fit in memory; their size is counted as the
// serialized protobuf size (codec.h EncodedSize). With `wire` set, every
// message is encoded to bytes and decoded at the receiver instead: slower,
// and it must give the same results.
#ifndef MYCEL_MESH_SIM_SIMULATOR_H_
#define MYCEL_MESH_SIM_SIMULATOR_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "mesh/membership/config.h"
#include "mesh/membership/fake_signer.h"
#include "mesh/membership/membership.h"
#include "mesh/membership/prng.h"
#include "mesh/sim/network.h"

namespace mycel::sim {

struct SimOptions {
  membership::Config config = membership::Config::Lan();
  NetworkOptions network;
  uint64_t seed = 1;
  bool wire = false;
};

// Messages and bytes one node has sent (lost ones included).
struct Traffic {
  uint64_t messages = 0;
  uint64_t bytes = 0;
};

// Not thread-safe. Node indices are stable; names are "node-00042".
class Simulator {
 public:
  // Called for each membership event, with the index of the node that saw
  // it.
  using EventHook =
      std::function<void(int node, const membership::MemberEvent& event)>;

  explicit Simulator(SimOptions options);
  ~Simulator();

  // Starts `n` nodes that already know each other, all alive, as if they
  // had been running for a while (no start-up announcements).
  absl::Status Bootstrap(int n);

  // Starts a new node that knows nobody and joins through `seed_node`.
  // Returns its index.
  absl::StatusOr<int> AddJoiningNode(int seed_node);

  // Stops node i at once (no leave), keeping what it would have persisted.
  void Crash(int i);
  // Starts node i again, restored from what it persisted at the crash, with
  // an incarnation taken from the (virtual) wall clock, and no seeds.
  absl::Status Restart(int i);

  void RunUntil(absl::Time t);
  void RunFor(absl::Duration d) { RunUntil(now_ + d); }
  // Runs until `done()` holds (checked every `step`) or `limit` passes.
  // Returns whether it held.
  bool RunUntilTrue(const std::function<bool()>& done, absl::Duration step,
                    absl::Duration limit);

  void set_event_hook(EventHook hook) { hook_ = std::move(hook); }

  absl::Time now() const { return now_; }
  absl::Time start() const { return start_; }
  int size() const { return static_cast<int>(nodes_.size()); }
  bool up(int i) const { return nodes_[i].up; }
  const std::string& name(int i) const { return nodes_[i].name; }
  // -1 for a name no node has.
  int IndexOf(absl::string_view name) const {
    auto it = by_name_.find(name);
    return it == by_name_.end() ? -1 : it->second;
  }
  membership::Membership* node(int i) { return nodes_[i].m.get(); }
  Network& network() { return network_; }
  membership::Prng& prng() { return prng_; }
  const Traffic& traffic(int i) const { return nodes_[i].traffic; }
  const SimOptions& options() const { return options_; }
  uint64_t events_processed() const { return events_processed_; }
  // Pairs of nodes that have opened a connection (a delivered message
  // between two nodes with none), counted again after a crash of either.
  uint64_t connections_opened() const { return connections_opened_; }

 private:
  struct Node {
    std::string name;
    std::string address;
    std::unique_ptr<membership::FakeSigner> signer;
    std::unique_ptr<membership::Membership> m;
    bool up = false;
    int64_t wake_us = INT64_MAX;  // the latest wake-up queued
    std::vector<membership::MemberSnapshot> persisted;
    std::vector<std::string> seeds;
    Traffic traffic;
    // Bumped at each crash: connections opened before are gone.
    uint32_t epoch = 0;
  };
  struct Delivery {
    int from;
    membership::Message message;
    std::string bytes;  // wire mode only
  };
  struct Event {
    int64_t when_us;
    uint64_t order;
    int node;
    std::unique_ptr<Delivery> delivery;  // null: a wake-up
    bool operator>(const Event& o) const {
      return when_us != o.when_us ? when_us > o.when_us : order > o.order;
    }
  };

  int NewNode();
  absl::Status StartNode(int i, membership::MembershipOptions options);
  membership::MembershipOptions BaseOptions(int i);
  // Sends what node i produced, reports its events, re-arms its wake-up.
  void AfterCall(int i);
  void Push(absl::Time when, int node, std::unique_ptr<Delivery> delivery);
  // Whether a and b had no live connection; opens one.
  bool Connect(int a, int b);

  SimOptions options_;
  membership::Prng prng_;
  Network network_;
  membership::FakeVerifier verifier_;
  uint64_t realm_secret_;
  absl::Time start_;
  absl::Time now_;
  std::vector<Node> nodes_;
  absl::flat_hash_map<std::string, int> by_name_;
  absl::flat_hash_map<std::string, int> by_address_;
  std::vector<Event> queue_;  // a min-heap
  uint64_t order_ = 0;
  uint64_t events_processed_ = 0;
  // (low index << 32 | high index) -> both nodes' epochs when it opened.
  absl::flat_hash_map<uint64_t, std::pair<uint32_t, uint32_t>> connections_;
  uint64_t connections_opened_ = 0;
  EventHook hook_;
};

}  // namespace mycel::sim

#endif  // MYCEL_MESH_SIM_SIMULATOR_H_
