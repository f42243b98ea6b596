// The simulated network between nodes: one-way latency with jitter,
// independent message loss, and partitions (groups that cannot reach each
// other). Every random draw comes from the simulator's one Prng.
#ifndef MYCEL_MESH_SIM_NETWORK_H_
#define MYCEL_MESH_SIM_NETWORK_H_

#include <vector>

#include "absl/time/time.h"
#include "mesh/membership/prng.h"

namespace mycel::sim {

struct NetworkOptions {
  // One-way delay: latency + uniform [0, jitter).
  absl::Duration latency = absl::Milliseconds(2);
  absl::Duration jitter = absl::Milliseconds(1);
  // Probability that any one message is lost.
  double loss = 0;
  // Extra delay of a message between two nodes with no connection yet
  // (myceld: TCP and a TLS 1.3 handshake, about 2 round trips and the CPU
  // of both ends). The connection stays until either node crashes.
  absl::Duration connect = absl::ZeroDuration();
};

// Not thread-safe.
class Network {
 public:
  explicit Network(NetworkOptions options) : options_(options) {}

  // Puts node i in group groups[i]; nodes in different groups cannot reach
  // each other. Nodes beyond the vector are in group 0.
  void Partition(std::vector<int> groups) { groups_ = std::move(groups); }
  void Heal() { groups_.clear(); }
  bool partitioned() const { return !groups_.empty(); }
  bool Connected(int a, int b) const { return Group(a) == Group(b); }
  int Group(int node) const {
    return node < static_cast<int>(groups_.size()) ? groups_[node] : 0;
  }

  void set_loss(double loss) { options_.loss = loss; }
  const NetworkOptions& options() const { return options_; }

  // Whether a message from `from` to `to` is delivered, and after how long.
  // Draws loss first, then delay, always in that order, so that runs replay.
  bool Deliver(int from, int to, membership::Prng* prng,
               absl::Duration* delay) const;

 private:
  NetworkOptions options_;
  std::vector<int> groups_;
};

}  // namespace mycel::sim

#endif  // MYCEL_MESH_SIM_NETWORK_H_
