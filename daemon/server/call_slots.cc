#include "daemon/server/call_slots.h"

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
  int& mine = counts_->by_caller[caller];
  if (mine >= max_per_caller_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        call, ": this caller holds ", mine, " of the node's ", max_, " ", what_,
        " already, the most one caller may (half of ", setting_,
        "); close one, or retry later"));
  }
  ++mine;
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
