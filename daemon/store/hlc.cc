#include "daemon/store/hlc.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace mycel::store {

absl::Time Hlc::WallNow() const {
  return clock_ != nullptr ? clock_->Now() : absl::Now();
}

HlcTime Hlc::Advance(HlcTime at_least) {
  const HlcTime wall = MakeHlc(absl::ToUnixMillis(WallNow()), 0);
  // The wall clock if it is ahead; otherwise one tick past the highest
  // time known (the counter carries into the milliseconds when full).
  last_ = std::max(wall, std::max(last_, at_least) + 1);
  return last_;
}

HlcTime Hlc::Now() {
  absl::MutexLock lock(&mu_);
  return Advance(0);
}

absl::StatusOr<HlcTime> Hlc::Receive(HlcTime remote,
                                     absl::Duration max_offset) {
  const absl::Time now = WallNow();
  const absl::Time remote_time = absl::FromUnixMillis(HlcMillis(remote));
  if (remote_time - now > max_offset) {
    return absl::FailedPreconditionError(absl::StrCat(
        "clock skew: a time stamped ", absl::FormatTime(remote_time),
        " is more than ", absl::FormatDuration(max_offset),
        " ahead of this node's clock (", absl::FormatTime(now), ")"));
  }
  absl::MutexLock lock(&mu_);
  return Advance(remote);
}

HlcTime Hlc::last() const {
  absl::MutexLock lock(&mu_);
  return last_;
}

}  // namespace mycel::store
