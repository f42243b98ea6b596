// Clock: the time, and one-shot timers, for the code above runtime/ that
// must also run on simulated time (the cell supervisor's restart delays
// and grace periods; the mesh's state machines in the simulator). Passed
// in through constructors, never reached through a global.
//
// Two implementations: AsioClock (runtime/asio_clock.h), the wall clock
// with timers on the daemon's Boost.Asio event loop, and ManualClock
// (runtime/manual_clock.h), whose time moves only when a test or the
// simulator advances it.
#ifndef MYCEL_RUNTIME_CLOCK_H_
#define MYCEL_RUNTIME_CLOCK_H_

#include <functional>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace mycel {

// Thread-safe.
class Clock {
 public:
  virtual ~Clock() = default;

  virtual absl::Time Now() const = 0;

  // Runs `fn` once, `delay` from now, on the clock's executor (the event
  // loop's thread for AsioClock; the thread that advances a ManualClock).
  // A negative delay is zero. There is no cancellation: a callback that
  // may have become stale checks, when it runs, whether it still applies
  // (the supervisor compares generations).
  virtual void RunAfter(absl::Duration delay, std::function<void()> fn) = 0;
};

}  // namespace mycel

#endif  // MYCEL_RUNTIME_CLOCK_H_
