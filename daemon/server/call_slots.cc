#include "daemon/server/call_slots.h"

#include "absl/strings/str_cat.h"

namespace mycel {

absl::StatusOr<CallSlots::Slot> CallSlots::Take(absl::string_view call) {
  if (open_->fetch_add(1) >= max_) {
    open_->fetch_sub(1);
    return absl::ResourceExhaustedError(absl::StrCat(
        call, ": ", max_, " ", what_, " are open on this node already (",
        setting_, "); close one, or retry later"));
  }
  return Slot(open_);
}

}  // namespace mycel
