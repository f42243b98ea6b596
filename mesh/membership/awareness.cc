#include "mesh/membership/awareness.h"

#include <algorithm>

namespace mycel::membership {

void Awareness::ApplyDelta(int delta) {
  score_ = std::clamp(score_ + delta, 0, max_ - 1);
}

}  // namespace mycel::membership
