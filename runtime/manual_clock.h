// ManualClock: a clock whose time moves only when Advance is called, for
// tests and the simulator. Timers run inside Advance, in deadline order
// (ties in the order they were set), each with Now() equal to its
// deadline, so that a run is the same every time.
#ifndef MYCEL_RUNTIME_MANUAL_CLOCK_H_
#define MYCEL_RUNTIME_MANUAL_CLOCK_H_

#include <cstdint>
#include <functional>
#include <map>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "runtime/clock.h"

namespace mycel {

// Thread-safe; callbacks run on the thread that calls Advance, without the
// clock's lock, so they may set new timers (which run within the same
// Advance when they are due).
class ManualClock final : public Clock {
 public:
  explicit ManualClock(absl::Time start = absl::UnixEpoch()) : now_(start) {}
  ManualClock(const ManualClock&) = delete;
  ManualClock& operator=(const ManualClock&) = delete;

  absl::Time Now() const override ABSL_LOCKS_EXCLUDED(mu_);
  void RunAfter(absl::Duration delay, std::function<void()> fn) override
      ABSL_LOCKS_EXCLUDED(mu_);

  // Moves time forward by `d`, running every timer due by then.
  void Advance(absl::Duration d) ABSL_LOCKS_EXCLUDED(mu_);
  // Runs the timers that are due now (after a callback set one with no
  // delay, say), without moving time.
  void RunDue() ABSL_LOCKS_EXCLUDED(mu_) { Advance(absl::ZeroDuration()); }
  // Timers not run yet.
  size_t pending() const ABSL_LOCKS_EXCLUDED(mu_);
  // The deadline of the next timer; InfiniteFuture when there is none.
  absl::Time next_deadline() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
  uint64_t serial_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::pair<absl::Time, uint64_t>, std::function<void()>> timers_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace mycel

#endif  // MYCEL_RUNTIME_MANUAL_CLOCK_H_
