#include "mesh/identity/join_limiter.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace mycel::identity {

void JoinLimiter::RefillLocked(Bucket& b, absl::Time now) const {
  if (now > b.updated) {
    b.tokens = std::min<double>(
        options_.burst,
        b.tokens + absl::FDivDuration(now - b.updated, options_.refill));
    b.updated = now;
  }
}

absl::Status JoinLimiter::Check(absl::string_view source, absl::Time now) {
  absl::MutexLock lock(&mu_);
  auto it = buckets_.find(source);
  if (it == buckets_.end()) return absl::OkStatus();
  RefillLocked(it->second, now);
  if (it->second.tokens >= 1) return absl::OkStatus();
  absl::Duration wait = options_.refill * (1 - it->second.tokens);
  return absl::ResourceExhaustedError(absl::StrCat(
      "too many failed joins from ", source, "; retry in ",
      static_cast<int64_t>(std::ceil(absl::ToDoubleSeconds(wait))), "s"));
}

void JoinLimiter::RecordFailure(absl::string_view source, absl::Time now) {
  absl::MutexLock lock(&mu_);
  auto it = buckets_.find(source);
  if (it == buckets_.end()) {
    if (buckets_.size() >= options_.max_sources) {
      // Forget the source that has failed least lately.
      auto fullest = buckets_.begin();
      for (auto i = buckets_.begin(); i != buckets_.end(); ++i) {
        RefillLocked(i->second, now);
        if (i->second.tokens > fullest->second.tokens) fullest = i;
      }
      buckets_.erase(fullest);
    }
    it = buckets_
             .emplace(std::string(source),
                      Bucket{static_cast<double>(options_.burst), now})
             .first;
  }
  RefillLocked(it->second, now);
  it->second.tokens = std::max(0.0, it->second.tokens - 1);
}

}  // namespace mycel::identity
