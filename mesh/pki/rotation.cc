#include "mesh/pki/rotation.h"

namespace mycel::pki {

RotationPlan PlanRotation(absl::Time not_before, absl::Time not_after,
                          absl::Time now) {
  RotationPlan plan;
  if (not_after <= not_before) {
    plan.renew_at = not_before;
    plan.due = true;
    return plan;
  }
  plan.renew_at = not_before + (not_after - not_before) * 2 / 3;
  plan.due = now >= plan.renew_at;
  return plan;
}

}  // namespace mycel::pki
