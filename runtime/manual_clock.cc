#include "runtime/manual_clock.h"

namespace mycel {

absl::Time ManualClock::Now() const {
  absl::MutexLock lock(&mu_);
  return now_;
}

void ManualClock::RunAfter(absl::Duration delay, std::function<void()> fn) {
  if (delay < absl::ZeroDuration()) delay = absl::ZeroDuration();
  absl::MutexLock lock(&mu_);
  timers_.emplace(std::make_pair(now_ + delay, ++serial_), std::move(fn));
}

void ManualClock::Advance(absl::Duration d) {
  absl::Time until;
  {
    absl::MutexLock lock(&mu_);
    until = now_ + d;
  }
  for (;;) {
    std::function<void()> fn;
    {
      absl::MutexLock lock(&mu_);
      auto it = timers_.begin();
      if (it == timers_.end() || it->first.first > until) {
        now_ = until;
        return;
      }
      now_ = it->first.first;
      fn = std::move(it->second);
      timers_.erase(it);
    }
    fn();
  }
}

size_t ManualClock::pending() const {
  absl::MutexLock lock(&mu_);
  return timers_.size();
}

absl::Time ManualClock::next_deadline() const {
  absl::MutexLock lock(&mu_);
  return timers_.empty() ? absl::InfiniteFuture()
                         : timers_.begin()->first.first;
}

}  // namespace mycel
