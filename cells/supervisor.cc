#include "cells/supervisor.h"

#include <signal.h>

#include <atomic>

#include "absl/strings/str_cat.h"
#include "proto/proto_time.h"
#include "runtime/log.h"
#include "runtime/status.h"

namespace mycel::cells {
namespace {

using mycel::v1::ExecutableState;

// How long a run that was started but could not be recorded is given to
// die after its SIGKILL.
constexpr absl::Duration kUnrecordedKillWait = absl::Seconds(1);

}  // namespace

Supervisor::Supervisor(Host* host, const Clock* clock,
                       mycel::v1::ExecutableSpec spec, RestartParams restart)
    : host_(host),
      clock_(clock),
      spec_(std::move(spec)),
      restart_(restart),
      generation_(NextGeneration()) {}

uint64_t Supervisor::NextGeneration() {
  static std::atomic<uint64_t> serial{0};
  return serial.fetch_add(1, std::memory_order_relaxed) + 1;
}

mycel::v1::Executable Supervisor::ToProto() const {
  mycel::v1::Executable out;
  *out.mutable_spec() = spec_;
  *out.mutable_status() = status_;
  return out;
}

bool Supervisor::running() const {
  return status_.state() == mycel::v1::EXECUTABLE_STATE_RUNNING;
}

bool Supervisor::final() const {
  return status_.state() == mycel::v1::EXECUTABLE_STATE_EXITED ||
         status_.state() == mycel::v1::EXECUTABLE_STATE_FAILED;
}

absl::Status Supervisor::Start(const StartOptions& options) {
  return Launch(options);
}

absl::Status Supervisor::Launch(const StartOptions& options) {
  const uint64_t generation = generation_ = NextGeneration();
  absl::StatusOr<std::unique_ptr<Run>> run =
      host_->Launch(*this, generation, options);
  if (!run.ok()) return run.status();
  run_ = *std::move(run);
  started_ = clock_->Now();
  stop_requested_ = false;
  status_.set_state(mycel::v1::EXECUTABLE_STATE_RUNNING);
  status_.set_pid(run_->pid());
  status_.clear_exit_code();
  status_.clear_signal();
  status_.set_oom_killed(false);
  status_.set_exit_status_unknown(false);
  status_.clear_finished_at();
  status_.clear_message();
  mycel::ToProto(started_, status_.mutable_started_at());
  // The run is acknowledged only once it is recorded: a process the store
  // does not know would outlive a restart unadopted and unsupervised. On a
  // full disk, say, it is killed and the caller gets the store's error.
  if (absl::Status recorded = host_->Record(*this); !recorded.ok()) {
    run_->Kill(kUnrecordedKillWait);
    run_.reset();
    generation_ = NextGeneration();  // its exit is nobody's business
    status_.set_state(mycel::v1::EXECUTABLE_STATE_FAILED);
    status_.set_message(
        absl::StrCat("could not be recorded: ", recorded.message()));
    return Annotate(recorded, "record the started executable");
  }
  history_.starts.push_back(started_);
  host_->Changed(*this);
  return absl::OkStatus();
}

void Supervisor::Exited(uint64_t generation,
                        const std::optional<ChildExit>& exit) {
  if (generation != generation_ || run_ == nullptr) return;
  // This run is over: a timer that still names its generation (a stop's
  // SIGKILL) is stale.
  generation_ = NextGeneration();
  bool clean = false;
  if (!exit.has_value()) {
    status_.set_exit_status_unknown(true);
    status_.set_message("exited after myceld adopted it; exit status unknown");
  } else if (exit->exited()) {
    status_.set_exit_code(exit->status);
    clean = exit->status == 0;
  } else {
    status_.set_signal(exit->status);
    if (exit->status == SIGKILL && run_->OomKilled()) {
      status_.set_oom_killed(true);
      status_.set_message(
          "killed by the OOM killer: the cell's memory limit was reached");
    }
  }
  const absl::Time now = clock_->Now();
  mycel::ToProto(now, status_.mutable_finished_at());
  run_.reset();
  AfterRun(clean, now);
  log::Info(
      "executable ended",
      {{"cell", spec_.cell()},
       {"exe", spec_.name()},
       {"exit_code", status_.has_exit_code() ? status_.exit_code() : -1},
       {"signal", status_.has_signal() ? status_.signal() : 0},
       {"oom_killed", status_.oom_killed()},
       {"restart", status_.state() == mycel::v1::EXECUTABLE_STATE_RESTARTING}});
}

void Supervisor::AfterRun(bool clean, absl::Time now) {
  RunEnd end{clean, stop_requested_ || shutting_down_, started_, now};
  RestartDecision d = DecideRestart(restart_, end, &history_);
  if (d.restart) {
    status_.set_state(mycel::v1::EXECUTABLE_STATE_RESTARTING);
    status_.set_restarts(status_.restarts() + 1);
    const uint64_t gen = generation_ = NextGeneration();
    host_->After(d.delay, *this, [gen](Supervisor& s) { s.Restart(gen); });
  } else if (d.start_limit_hit) {
    status_.set_state(mycel::v1::EXECUTABLE_STATE_FAILED);
    status_.set_message(absl::StrCat(
        "start limit hit: ", restart_.start_limit_burst, " starts within ",
        absl::FormatDuration(restart_.start_limit_interval)));
  } else {
    status_.set_state(mycel::v1::EXECUTABLE_STATE_EXITED);
  }
  host_->Record(*this).IgnoreError();  // logged
  host_->Changed(*this);
}

void Supervisor::Restart(uint64_t generation) {
  if (generation != generation_ || shutting_down_) return;
  absl::Status s = Launch({});
  if (!s.ok()) {
    status_.set_state(mycel::v1::EXECUTABLE_STATE_FAILED);
    status_.set_message(absl::StrCat("restart failed: ", s.message()));
    host_->Record(*this).IgnoreError();  // logged
    host_->Changed(*this);
  }
}

absl::StatusOr<bool> Supervisor::Stop(std::optional<absl::Duration> grace) {
  if (status_.state() == mycel::v1::EXECUTABLE_STATE_RESTARTING) {
    generation_ = NextGeneration();  // cancels the pending restart
    status_.set_state(mycel::v1::EXECUTABLE_STATE_EXITED);
    host_->Record(*this).IgnoreError();  // logged
    host_->Changed(*this);
    return false;
  }
  if (!running() || run_ == nullptr) return false;
  const absl::Duration g =
      grace.value_or(spec_.has_stop_grace() ? FromProto(spec_.stop_grace())
                                            : absl::Seconds(10));
  stop_requested_ = true;
  // NOT_FOUND: it exited and was reaped a moment ago; its exit is on its
  // way, so it is waited for like any other.
  if (absl::Status s = run_->Signal(SIGTERM); !s.ok() && !absl::IsNotFound(s)) {
    return s;
  }
  const uint64_t gen = generation_;
  host_->After(g, *this, [gen](Supervisor& s) {
    if (s.generation_ == gen && s.run_ != nullptr) {
      s.run_->Signal(SIGKILL).IgnoreError();  // it may have exited
    }
  });
  return true;
}

absl::Status Supervisor::Signal(int sig) {
  if (!running() || run_ == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "executable \"", spec_.cell(), "/", spec_.name(), "\" is not running"));
  }
  return run_->Signal(sig);
}

void Supervisor::Abandon() {
  generation_ = NextGeneration();  // cancels pending restarts and exits
  if (run_ != nullptr) run_->Signal(SIGKILL).IgnoreError();  // may be gone
}

bool Supervisor::StopForShutdown() {
  shutting_down_ = true;
  if (status_.state() == mycel::v1::EXECUTABLE_STATE_RESTARTING) {
    generation_ = NextGeneration();  // no restart now
  }
  if (!running() || run_ == nullptr) return false;
  stop_requested_ = true;
  run_->Signal(SIGTERM).IgnoreError();  // it may have exited
  return true;
}

void Supervisor::KillForShutdown() {
  if (run_ != nullptr) run_->Signal(SIGKILL).IgnoreError();
}

void Supervisor::Recover(const mycel::v1::ExecutableStatus& recorded,
                         std::unique_ptr<Run> run) {
  status_ = recorded;
  const ExecutableState state = status_.state();
  if (state != mycel::v1::EXECUTABLE_STATE_RUNNING &&
      state != mycel::v1::EXECUTABLE_STATE_RESTARTING) {
    return;
  }
  const absl::Time now = clock_->Now();
  if (state == mycel::v1::EXECUTABLE_STATE_RUNNING) {
    if (run != nullptr) {
      run_ = std::move(run);
      started_ = now;
      generation_ = NextGeneration();
      return;
    }
    // It ended while no myceld was watching.
    status_.set_exit_status_unknown(true);
    status_.set_message("exited while myceld was not running");
    mycel::ToProto(now, status_.mutable_finished_at());
  }
  RunEnd end{false, false, now, now};
  RestartDecision d = DecideRestart(restart_, end, &history_);
  if (d.restart) {
    status_.set_restarts(status_.restarts() + 1);
    absl::Status s = Launch({});
    if (!s.ok()) {
      status_.set_state(mycel::v1::EXECUTABLE_STATE_FAILED);
      status_.set_message(absl::StrCat("restart failed: ", s.message()));
    }
  } else {
    status_.set_state(mycel::v1::EXECUTABLE_STATE_EXITED);
  }
  host_->Record(*this).IgnoreError();  // logged
}

}  // namespace mycel::cells
