#include "cells/restart.h"

#include "absl/strings/str_cat.h"
#include "proto/proto_time.h"

namespace mycel::cells {

absl::StatusOr<RestartParams> ToRestartParams(const mycel::v1::Restart& r) {
  RestartParams p;
  if (!mycel::v1::RestartPolicy_IsValid(r.policy())) {
    return absl::InvalidArgumentError(
        absl::StrCat("restart.policy: unknown value ", r.policy()));
  }
  if (r.policy() != mycel::v1::RESTART_POLICY_UNSPECIFIED)
    p.policy = r.policy();
  if (r.has_restart_sec()) {
    p.restart_sec = FromProto(r.restart_sec());
    if (p.restart_sec < absl::ZeroDuration()) {
      return absl::InvalidArgumentError(
          "restart.restart_sec: must not be negative");
    }
  }
  if (r.start_limit_burst() < 0) {
    return absl::InvalidArgumentError(
        "restart.start_limit_burst: must not be negative");
  }
  if (r.start_limit_burst() > 0) p.start_limit_burst = r.start_limit_burst();
  if (r.has_start_limit_interval()) {
    p.start_limit_interval = FromProto(r.start_limit_interval());
    if (p.start_limit_interval < absl::ZeroDuration()) {
      return absl::InvalidArgumentError(
          "restart.start_limit_interval: must not be negative");
    }
  }
  return p;
}

RestartDecision DecideRestart(const RestartParams& params, const RunEnd& end,
                              RestartHistory* history) {
  RestartDecision d;
  if (end.stop_requested) return d;
  switch (params.policy) {
    case mycel::v1::RESTART_POLICY_ALWAYS:
      break;
    case mycel::v1::RESTART_POLICY_ON_FAILURE:
      if (end.clean) return d;
      break;
    default:
      return d;
  }
  // A long, healthy run resets the backoff.
  if (end.ended - end.started > params.start_limit_interval) {
    history->consecutive = 0;
  }
  absl::Time now = end.ended;
  while (!history->starts.empty() &&
         now - history->starts.front() > params.start_limit_interval) {
    history->starts.pop_front();
  }
  // systemd counts the starts in the interval, the first one included.
  if (static_cast<int>(history->starts.size()) >= params.start_limit_burst) {
    d.start_limit_hit = true;
    return d;
  }
  absl::Duration delay = params.restart_sec;
  for (int i = 0; i < history->consecutive && delay < params.max_delay; ++i) {
    delay *= 2;
  }
  d.restart = true;
  d.delay = std::min(delay, params.max_delay);
  ++history->consecutive;
  return d;
}

}  // namespace mycel::cells
