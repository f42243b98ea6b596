#include "daemon/server/call_slots.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "mesh/identity/flood_guard.h"

namespace mycel {

void CallSlots::Slot::Release() {
  if (counts_ == nullptr) return;
  {
    absl::MutexLock lock(&counts_->mu);
    --counts_->open;
    auto it = counts_->by_caller.find(caller_);
    if (it != counts_->by_caller.end() && --it->second <= 0) {
      counts_->by_caller.erase(it);
    }
  }
  counts_.reset();
}

absl::StatusOr<CallSlots::Slot> CallSlots::Take(absl::string_view call,
                                                absl::string_view caller) {
  absl::MutexLock lock(&counts_->mu);
  if (counts_->open >= max_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        call, ": ", max_, " ", what_, " are open on this node already (",
        setting_, "); close one, or retry later"));
  }
  const bool local = caller.empty();
  const int room = local ? max_ : max_ - reserve_;
  if (counts_->open >= room) {
    return absl::ResourceExhaustedError(
        absl::StrCat(call, ": ", counts_->open, " of the node's ", max_, " ",
                     what_, " are open, and the other ", max_ - counts_->open,
                     " are kept for its local socket (", setting_,
                     "); close one, or retry later"));
  }
  auto it = counts_->by_caller.find(caller);
  const int mine = it == counts_->by_caller.end() ? 0 : it->second;
  const int others = counts_->open - mine;
  const int left = room - others;
  const int share = left <= 0 ? 0 : std::max(1, left / 2);
  if (mine >= share) {
    return absl::ResourceExhaustedError(absl::StrCat(
        call, ": this caller holds ", mine, " of the node's ", max_, " ", what_,
        " already, the most one caller may while others hold ", others,
        " (half of what they leave of ", setting_,
        "); close one, or retry later"));
  }
  if (it == counts_->by_caller.end()) {
    it = counts_->by_caller.emplace(std::string(caller), 0).first;
  }
  ++it->second;
  ++counts_->open;
  return Slot(counts_, std::string(caller));
}

std::string CallSlots::CallerOf(const grpc::CallbackServerContext* ctx) {
  return identity::FloodGuard::IdentityOf(ctx->auth_context().get());
}

int CallSlots::open() const {
  absl::MutexLock lock(&counts_->mu);
  return counts_->open;
}

}  // namespace mycel
