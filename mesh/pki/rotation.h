// When a certificate should be renewed.
#ifndef MYCEL_MESH_PKI_ROTATION_H_
#define MYCEL_MESH_PKI_ROTATION_H_

#include "absl/time/time.h"

namespace mycel::pki {

// When to renew, and whether that time has come.
struct RotationPlan {
  absl::Time renew_at;
  bool due = false;
};

// A certificate valid from `not_before` to `not_after` is renewed at two
// thirds of its life: renew_at = not_before + 2/3 (not_after - not_before);
// due when now >= renew_at. A 30-day node certificate is renewed after 20
// days, leaving 10 days to retry through outages. An empty or inverted
// validity is due at once.
RotationPlan PlanRotation(absl::Time not_before, absl::Time not_after,
                          absl::Time now);

}  // namespace mycel::pki

#endif  // MYCEL_MESH_PKI_ROTATION_H_
