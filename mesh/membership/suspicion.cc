#include "mesh/membership/suspicion.h"

#include <algorithm>
#include <cmath>

namespace mycel::membership {

Suspicion::Suspicion(std::string from, int k, absl::Duration min,
                     absl::Duration max, absl::Time start)
    : k_(k), min_(min), max_(max), start_(start) {
  accusers_.push_back(std::move(from));
  deadline_ = start + (k < 1 ? min : max);
}

absl::Duration Suspicion::Timeout(int n, int k, absl::Duration min,
                                  absl::Duration max) {
  if (k < 1) return min;
  const double frac = std::log(n + 1.0) / std::log(k + 1.0);
  const double raw =
      absl::ToDoubleSeconds(max) - frac * absl::ToDoubleSeconds(max - min);
  const absl::Duration timeout =
      absl::Milliseconds(static_cast<int64_t>(std::floor(1000.0 * raw)));
  return std::max(timeout, min);
}

bool Suspicion::Confirm(absl::string_view from) {
  if (n_ >= k_) return false;
  if (std::find(accusers_.begin(), accusers_.end(), from) != accusers_.end()) {
    return false;
  }
  accusers_.emplace_back(from);
  ++n_;
  deadline_ = start_ + Timeout(n_, k_, min_, max_);
  return true;
}

}  // namespace mycel::membership
