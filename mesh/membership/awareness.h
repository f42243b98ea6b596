// Lifeguard's local health multiplier (memberlist's "awareness"). A node
// that misses acks and nacks is more likely to be the slow or lossy one, so
// it stretches its own probe periods instead of accusing others.
#ifndef MYCEL_MESH_MEMBERSHIP_AWARENESS_H_
#define MYCEL_MESH_MEMBERSHIP_AWARENESS_H_

#include "absl/time/time.h"

namespace mycel::membership {

// Not thread-safe; owned by one Membership.
class Awareness {
 public:
  // Scores run from 0 (healthy) to max_multiplier - 1.
  explicit Awareness(int max_multiplier) : max_(max_multiplier) {}

  // Adds `delta` and clamps. +1 for a failed probe with no nacks expected
  // (or one per missing nack), +1 for having to refute a suspicion of
  // ourselves, -1 for a successful probe.
  void ApplyDelta(int delta);

  int score() const { return score_; }

  // timeout * (score + 1).
  absl::Duration Scale(absl::Duration timeout) const {
    return timeout * (score_ + 1);
  }

 private:
  int max_;
  int score_ = 0;
};

}  // namespace mycel::membership

#endif  // MYCEL_MESH_MEMBERSHIP_AWARENESS_H_
