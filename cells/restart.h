// Restart decisions for executables, with systemd's meanings: Restart=
// never|on-failure|always, RestartSec=, StartLimitBurst= and
// StartLimitIntervalSec=. Pure logic, so that it is tested on its own.
#ifndef MYCEL_CELLS_RESTART_H_
#define MYCEL_CELLS_RESTART_H_

#include <deque>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "mycel/v1/cells.pb.h"

namespace mycel::cells {

// The Restart message with its defaults filled in.
struct RestartParams {
  mycel::v1::RestartPolicy policy = mycel::v1::RESTART_POLICY_NEVER;
  absl::Duration restart_sec = absl::Milliseconds(100);
  int start_limit_burst = 5;
  absl::Duration start_limit_interval = absl::Seconds(10);
  absl::Duration max_delay = absl::Seconds(30);
};

// Fills defaults and checks ranges; INVALID_ARGUMENT names the field.
absl::StatusOr<RestartParams> ToRestartParams(const mycel::v1::Restart& r);

// How a run ended, for the decision.
struct RunEnd {
  bool clean = false;           // exit code 0
  bool stop_requested = false;  // the user stopped it
  absl::Time started;
  absl::Time ended;
};

struct RestartDecision {
  bool restart = false;
  absl::Duration delay;
  // The start limit was hit: give up, and say so.
  bool start_limit_hit = false;
};

// Per-executable history the decision needs. Owned by the caller.
struct RestartHistory {
  std::deque<absl::Time> starts;  // within the start-limit interval
  int consecutive = 0;            // restarts in a row, for the backoff
};

// Decides whether to start again and after what delay. The delay doubles
// with each restart in a row (RestartSec, 2×, 4×, ... up to max_delay) and
// goes back to RestartSec after a run that lasted longer than the
// start-limit interval. The caller records every start (the first one
// included) in `history->starts`.
RestartDecision DecideRestart(const RestartParams& params, const RunEnd& end,
                              RestartHistory* history);

}  // namespace mycel::cells

#endif  // MYCEL_CELLS_RESTART_H_
