// Hlc: a hybrid logical clock (Kulkarni et al., 2014), the time every
// change to replicated state is stamped with. A timestamp is a physical
// time in milliseconds and a logical counter for events within the same
// millisecond (or while the wall clock lags the highest time seen), packed
// into one 64-bit integer that orders like the pair: 48 bits of
// milliseconds since the epoch (until the year 10889) and 16 of counter.
// It never goes backwards, even when the wall clock does, and it moves
// past every time it receives, so that causally later changes always have
// later stamps.
#ifndef MYCEL_DAEMON_STORE_HLC_H_
#define MYCEL_DAEMON_STORE_HLC_H_

#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "runtime/clock.h"

namespace mycel::store {

using HlcTime = uint64_t;

inline constexpr int kHlcCounterBits = 16;

inline HlcTime MakeHlc(int64_t millis, uint32_t counter) {
  return (static_cast<uint64_t>(millis) << kHlcCounterBits) |
         (counter & ((1u << kHlcCounterBits) - 1));
}
inline int64_t HlcMillis(HlcTime t) {
  return static_cast<int64_t>(t >> kHlcCounterBits);
}
inline uint32_t HlcCounter(HlcTime t) {
  return static_cast<uint32_t>(t & ((1u << kHlcCounterBits) - 1));
}

// Thread-safe. `clock` must outlive it; null means the wall clock.
class Hlc {
 public:
  // `floor`: the highest time stamped before (after a restart, from the
  // store), so that no stamp repeats even if the wall clock went back.
  Hlc(const Clock* clock, HlcTime floor) : clock_(clock), last_(floor) {}

  // A stamp for a local event: later than every stamp before.
  HlcTime Now() ABSL_LOCKS_EXCLUDED(mu_);

  // Takes in a time received from another node and returns a stamp later
  // than both it and every local stamp. A time more than `max_offset`
  // ahead of this node's wall clock is refused (FAILED_PRECONDITION, with
  // both times), as CockroachDB refuses one past its maximum offset: taking
  // it in would drag every later stamp of this node into the future.
  absl::StatusOr<HlcTime> Receive(HlcTime remote, absl::Duration max_offset)
      ABSL_LOCKS_EXCLUDED(mu_);

  HlcTime last() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  absl::Time WallNow() const;
  HlcTime Advance(HlcTime at_least) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Clock* const clock_;
  mutable absl::Mutex mu_;
  HlcTime last_ ABSL_GUARDED_BY(mu_);
};

}  // namespace mycel::store

#endif  // MYCEL_DAEMON_STORE_HLC_H_
