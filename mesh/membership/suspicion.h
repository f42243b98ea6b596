// One Lifeguard suspicion: how long a member stays suspect before it is
// declared dead. The timeout starts at `max` and, as independent members
// confirm the suspicion, falls towards `min` (memberlist suspicion.go):
//
//   timeout(n) = max(min, max - (max - min) * log(n + 1) / log(k + 1))
//
// for n confirmations out of the k expected. Many accusers mean the member
// is likely down and it is declared dead sooner; a lone accuser (perhaps the
// one with the bad network) waits longest, giving the accused time to hear
// of it and refute.
#ifndef MYCEL_MESH_MEMBERSHIP_SUSPICION_H_
#define MYCEL_MESH_MEMBERSHIP_SUSPICION_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace mycel::membership {

// Not thread-safe; owned by one Membership.
class Suspicion {
 public:
  // `from` is the first accuser. With k < 1 the timeout is `min` at once.
  Suspicion(std::string from, int k, absl::Duration min, absl::Duration max,
            absl::Time start);

  // Counts an accusation from `from`. Returns true when it is new and
  // counted (the caller then re-gossips it); false for a repeat, or once k
  // confirmations are in.
  bool Confirm(absl::string_view from);

  // When the member is declared dead unless it refutes first.
  absl::Time deadline() const { return deadline_; }
  int confirmations() const { return n_; }

  // The formula above, millisecond precision as in memberlist.
  static absl::Duration Timeout(int n, int k, absl::Duration min,
                                absl::Duration max);

 private:
  int k_;
  int n_ = 0;
  absl::Duration min_;
  absl::Duration max_;
  absl::Time start_;
  absl::Time deadline_;
  std::vector<std::string> accusers_;
};

}  // namespace mycel::membership

#endif  // MYCEL_MESH_MEMBERSHIP_SUSPICION_H_
