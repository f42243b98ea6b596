#include "mesh/membership/rate_limiter.h"

#include <algorithm>

namespace mycel::membership {

double PeerRateLimiter::Refilled(const Bucket& b, int64_t now_us) const {
  const double elapsed = std::max<int64_t>(0, now_us - b.last_us) / 1e6;
  return std::min(burst_, b.tokens + elapsed * rate_);
}

bool PeerRateLimiter::Allow(absl::string_view peer, absl::Time now) {
  const int64_t now_us = absl::ToUnixMicros(now);
  auto [it, inserted] = buckets_.try_emplace(peer, Bucket{burst_, now_us});
  Bucket& b = it->second;
  b.tokens = Refilled(b, now_us);
  b.last_us = now_us;
  if (b.tokens < 1) return false;
  b.tokens -= 1;
  return true;
}

double PeerRateLimiter::Available(absl::string_view peer,
                                  absl::Time now) const {
  auto it = buckets_.find(peer);
  return it == buckets_.end() ? burst_
                              : Refilled(it->second, absl::ToUnixMicros(now));
}

void PeerRateLimiter::Prune(absl::Time now) {
  const int64_t now_us = absl::ToUnixMicros(now);
  absl::erase_if(buckets_, [&](const auto& kv) {
    return Refilled(kv.second, now_us) >= burst_;
  });
}

}  // namespace mycel::membership
