// Per-peer token buckets. The transport authenticates every peer, so a flood
// is charged to a name; a flooding peer is cut to its rate while everyone
// else (and our own probing) carries on.
#ifndef MYCEL_MESH_MEMBERSHIP_RATE_LIMITER_H_
#define MYCEL_MESH_MEMBERSHIP_RATE_LIMITER_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace mycel::membership {

// Not thread-safe; owned by one Membership (or one driver strand).
class PeerRateLimiter {
 public:
  // `rate` tokens a second, at most `burst` saved up; a message costs one.
  PeerRateLimiter(double rate, double burst) : rate_(rate), burst_(burst) {}

  // Takes a token from `peer`'s bucket; false when it is empty.
  bool Allow(absl::string_view peer, absl::Time now);
  // The tokens in `peer`'s bucket now (`burst` for a peer never seen).
  // Takes nothing.
  double Available(absl::string_view peer, absl::Time now) const;
  // Whether its next Allow would be false.
  bool Exhausted(absl::string_view peer, absl::Time now) const {
    return Available(peer, now) < 1;
  }

  // Forgets buckets that have refilled: they behave exactly like new ones,
  // so memory follows the peers active in the last burst/rate seconds.
  void Prune(absl::Time now);

  size_t tracked() const { return buckets_.size(); }

 private:
  struct Bucket {
    double tokens;
    int64_t last_us;
  };
  double Refilled(const Bucket& b, int64_t now_us) const;

  double rate_;
  double burst_;
  absl::flat_hash_map<std::string, Bucket> buckets_;
};

}  // namespace mycel::membership

#endif  // MYCEL_MESH_MEMBERSHIP_RATE_LIMITER_H_
