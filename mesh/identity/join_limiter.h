// JoinLimiter: bounds how fast one source can guess join tokens. A source
// is the caller's SourceBlockOfPeer (runtime/source_address.h): its IPv4
// address, or its IPv6 /64, so that a guesser cannot reset its bucket by
// reconnecting from another port or another address of its block.
// A token's secret has 256 random bits, so guessing is hopeless anyway; the
// limit keeps a guesser from burning an authority's CPU (each attempt costs
// a TLS handshake and a hash) and makes the attempts visible in the log.
//
// Each source has a bucket of `burst` failures that refills one failure
// every `refill`. While a source's bucket is empty, every join from it is
// refused before the token is looked at, a correct one included, so a
// guesser gains nothing by interleaving a token it knows.
#ifndef MYCEL_MESH_IDENTITY_JOIN_LIMITER_H_
#define MYCEL_MESH_IDENTITY_JOIN_LIMITER_H_

#include <cstddef>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace mycel::identity {

// Thread-safe.
class JoinLimiter {
 public:
  struct Options {
    int burst = 10;
    absl::Duration refill = absl::Seconds(6);
    // Sources remembered; beyond, the fullest buckets are forgotten first
    // (a forgotten source starts full again, which only helps a guesser
    // that spreads over this many addresses).
    size_t max_sources = 4096;
  };

  JoinLimiter() : JoinLimiter(Options{}) {}
  explicit JoinLimiter(Options options) : options_(options) {}

  // OK when `source` may attempt a join at `now`; else RESOURCE_EXHAUSTED
  // "too many failed joins from SOURCE; retry in Ns".
  absl::Status Check(absl::string_view source, absl::Time now)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Takes one failure from the bucket of `source`.
  void RecordFailure(absl::string_view source, absl::Time now)
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Bucket {
    double tokens = 0;
    absl::Time updated;
  };
  // Refills `b` up to `now`.
  void RefillLocked(Bucket& b, absl::Time now) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, Bucket> buckets_ ABSL_GUARDED_BY(mu_);
};

}  // namespace mycel::identity

#endif  // MYCEL_MESH_IDENTITY_JOIN_LIMITER_H_
