// The supervisor's restart, start-limit and stop behaviour, driven by a
// ManualClock and a fake host: no process is started, no real time passes,
// and every delay is asserted exactly.
#include "cells/supervisor.h"

#include <signal.h>

#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "doctest/doctest.h"
#include "runtime/manual_clock.h"

namespace mycel::cells {
namespace {

using mycel::v1::EXECUTABLE_STATE_EXITED;
using mycel::v1::EXECUTABLE_STATE_FAILED;
using mycel::v1::EXECUTABLE_STATE_RESTARTING;
using mycel::v1::EXECUTABLE_STATE_RUNNING;

struct FakeRun final : Run {
  pid_t p;
  std::vector<int>* signals;
  bool oom = false;
  bool gone = false;
  FakeRun(pid_t pid, std::vector<int>* s) : p(pid), signals(s) {}
  pid_t pid() const override { return p; }
  absl::Status Signal(int sig) override {
    if (gone) return absl::NotFoundError("reaped");
    signals->push_back(sig);
    return absl::OkStatus();
  }
  bool OomKilled() const override { return oom; }
  void Kill(absl::Duration) override { signals->push_back(SIGKILL); }
};

// Records what the supervisor asks of its host, and runs its timers on the
// manual clock, as the cell manager runs them on the real one.
class FakeHost final : public Supervisor::Host {
 public:
  explicit FakeHost(ManualClock* clock) : clock_(clock) {}

  absl::StatusOr<std::unique_ptr<Run>> Launch(const Supervisor&,
                                              uint64_t generation,
                                              const StartOptions&) override {
    launches.push_back(clock_->Now());
    if (fail_launch) return absl::InternalError("exec failed");
    last_generation = generation;
    return std::make_unique<FakeRun>(1000 + launches.size(), &signals);
  }
  absl::Status Record(const Supervisor& s) override {
    records.push_back(s.status().state());
    return fail_record ? absl::ResourceExhaustedError("disk full")
                       : absl::OkStatus();
  }
  void After(absl::Duration delay, const Supervisor&,
             std::function<void(Supervisor&)> fn) override {
    delays.push_back(delay);
    Supervisor** target = &supervisor;
    clock_->RunAfter(delay, [target, fn] {
      if (*target != nullptr) fn(**target);
    });
  }
  void Changed(const Supervisor&) override { ++changes; }

  // Ends the current run with exit code `code` (or by signal `sig`).
  void Exit(int code, int sig = 0) {
    ChildExit e;
    e.code = sig == 0 ? CLD_EXITED : CLD_KILLED;
    e.status = sig == 0 ? code : sig;
    supervisor->Exited(last_generation, e);
  }

  ManualClock* clock_;
  Supervisor* supervisor = nullptr;
  std::vector<absl::Time> launches;
  std::vector<absl::Duration> delays;
  std::vector<int> signals;
  std::vector<mycel::v1::ExecutableState> records;
  uint64_t last_generation = 0;
  int changes = 0;
  bool fail_launch = false;
  bool fail_record = false;
};

mycel::v1::ExecutableSpec Spec() {
  mycel::v1::ExecutableSpec s;
  s.set_cell("c");
  s.set_name("e");
  s.add_command("/bin/true");
  return s;
}

RestartParams Params(mycel::v1::RestartPolicy policy, int burst = 5) {
  RestartParams p;
  p.policy = policy;
  p.restart_sec = absl::Milliseconds(100);
  p.start_limit_burst = burst;
  p.start_limit_interval = absl::Seconds(10);
  return p;
}

struct Fixture {
  ManualClock clock{absl::FromUnixSeconds(1'000'000)};
  FakeHost host{&clock};
  std::unique_ptr<Supervisor> sup;

  void Make(RestartParams p, mycel::v1::ExecutableSpec spec = Spec()) {
    sup = std::make_unique<Supervisor>(&host, &clock, spec, p);
    host.supervisor = sup.get();
  }
};

TEST_CASE("on-failure: restarts with doubling delays until the start limit") {
  Fixture f;
  f.Make(Params(mycel::v1::RESTART_POLICY_ON_FAILURE, /*burst=*/3));
  REQUIRE(f.sup->Start({}).ok());
  CHECK(f.sup->status().state() == EXECUTABLE_STATE_RUNNING);
  CHECK(f.sup->status().pid() == 1001);

  f.host.Exit(1);
  CHECK(f.sup->status().state() == EXECUTABLE_STATE_RESTARTING);
  CHECK(f.sup->status().restarts() == 1);
  CHECK(f.sup->status().exit_code() == 1);
  // Nothing happens a moment before the delay; the restart comes exactly at
  // it.
  f.clock.Advance(absl::Milliseconds(99));
  CHECK(f.host.launches.size() == 1);
  f.clock.Advance(absl::Milliseconds(1));
  REQUIRE(f.host.launches.size() == 2);
  CHECK(f.sup->status().state() == EXECUTABLE_STATE_RUNNING);
  CHECK(f.sup->status().pid() == 1002);

  f.host.Exit(2);
  f.clock.Advance(absl::Milliseconds(200));
  REQUIRE(f.host.launches.size() == 3);

  // The third start within 10 s was the last the burst allows.
  f.host.Exit(3);
  CHECK(f.sup->status().state() == EXECUTABLE_STATE_FAILED);
  CHECK(f.sup->status().restarts() == 2);
  CHECK(f.sup->status().message().find("start limit hit") != std::string::npos);
  CHECK(f.host.delays == std::vector<absl::Duration>{absl::Milliseconds(100),
                                                     absl::Milliseconds(200)});
  f.clock.Advance(absl::Minutes(5));
  CHECK(f.host.launches.size() == 3);
  CHECK(f.sup->final());
}

TEST_CASE("on-failure: a clean exit is final") {
  Fixture f;
  f.Make(Params(mycel::v1::RESTART_POLICY_ON_FAILURE));
  REQUIRE(f.sup->Start({}).ok());
  f.host.Exit(0);
  CHECK(f.sup->status().state() == EXECUTABLE_STATE_EXITED);
  CHECK(f.sup->status().exit_code() == 0);
  CHECK(f.host.delays.empty());
  CHECK(f.clock.pending() == 0);
}

TEST_CASE("never: a failed run is not restarted") {
  Fixture f;
  f.Make(Params(mycel::v1::RESTART_POLICY_NEVER));
  REQUIRE(f.sup->Start({}).ok());
  f.host.Exit(0, SIGSEGV);
  CHECK(f.sup->status().state() == EXECUTABLE_STATE_EXITED);
  CHECK(f.sup->status().signal() == SIGSEGV);
  CHECK(f.sup->status().restarts() == 0);
  CHECK(f.clock.pending() == 0);
}

TEST_CASE("always: clean exits restart too, and the backoff is capped") {
  Fixture f;
  RestartParams p = Params(mycel::v1::RESTART_POLICY_ALWAYS, /*burst=*/100);
  p.start_limit_interval = absl::Hours(1);
  p.max_delay = absl::Milliseconds(700);
  f.Make(p);
  REQUIRE(f.sup->Start({}).ok());
  for (int i = 0; i < 5; ++i) {
    f.host.Exit(0);
    f.clock.Advance(f.host.delays.back());
  }
  CHECK(f.host.delays == std::vector<absl::Duration>{
                             absl::Milliseconds(100), absl::Milliseconds(200),
                             absl::Milliseconds(400), absl::Milliseconds(700),
                             absl::Milliseconds(700)});
  CHECK(f.host.launches.size() == 6);
  CHECK(f.sup->status().restarts() == 5);
}

TEST_CASE("a run longer than the start-limit interval resets the backoff") {
  Fixture f;
  f.Make(Params(mycel::v1::RESTART_POLICY_ALWAYS, /*burst=*/5));
  REQUIRE(f.sup->Start({}).ok());
  f.host.Exit(1);
  f.clock.Advance(absl::Milliseconds(100));
  f.host.Exit(1);
  f.clock.Advance(absl::Milliseconds(200));
  // This run stays up for 11 s, longer than the 10 s interval.
  f.clock.Advance(absl::Seconds(11));
  f.host.Exit(1);
  CHECK(f.host.delays.back() == absl::Milliseconds(100));
  CHECK(f.sup->status().state() == EXECUTABLE_STATE_RESTARTING);
}

TEST_CASE("stop: SIGTERM now, SIGKILL exactly at the grace period") {
  Fixture f;
  mycel::v1::ExecutableSpec spec = Spec();
  spec.mutable_stop_grace()->set_seconds(3);
  f.Make(Params(mycel::v1::RESTART_POLICY_ALWAYS), spec);
  REQUIRE(f.sup->Start({}).ok());

  absl::StatusOr<bool> ending = f.sup->Stop(std::nullopt);
  REQUIRE(ending.ok());
  CHECK(*ending);
  CHECK(f.host.signals == std::vector<int>{SIGTERM});
  f.clock.Advance(absl::Seconds(3) - absl::Nanoseconds(1));
  CHECK(f.host.signals == std::vector<int>{SIGTERM});
  f.clock.Advance(absl::Nanoseconds(1));
  CHECK(f.host.signals == std::vector<int>{SIGTERM, SIGKILL});

  // A stopped run is not restarted, even under "always".
  f.host.Exit(0, SIGKILL);
  CHECK(f.sup->status().state() == EXECUTABLE_STATE_EXITED);
  f.clock.Advance(absl::Minutes(1));
  CHECK(f.host.launches.size() == 1);
}

TEST_CASE("stop: a run that exits within the grace period gets no SIGKILL") {
  Fixture f;
  f.Make(Params(mycel::v1::RESTART_POLICY_NEVER));
  REQUIRE(f.sup->Start({}).ok());
  REQUIRE(f.sup->Stop(absl::Seconds(2)).ok());
  f.clock.Advance(absl::Seconds(1));
  f.host.Exit(0, SIGTERM);
  f.clock.Advance(absl::Seconds(5));
  CHECK(f.host.signals == std::vector<int>{SIGTERM});
}

TEST_CASE("stop: cancels a pending restart") {
  Fixture f;
  f.Make(Params(mycel::v1::RESTART_POLICY_ON_FAILURE));
  REQUIRE(f.sup->Start({}).ok());
  f.host.Exit(1);
  REQUIRE(f.sup->status().state() == EXECUTABLE_STATE_RESTARTING);
  absl::StatusOr<bool> ending = f.sup->Stop(std::nullopt);
  REQUIRE(ending.ok());
  CHECK_FALSE(*ending);
  CHECK(f.sup->status().state() == EXECUTABLE_STATE_EXITED);
  f.clock.Advance(absl::Seconds(1));
  CHECK(f.host.launches.size() == 1);
}

TEST_CASE("signal: refused when nothing runs") {
  Fixture f;
  f.Make(Params(mycel::v1::RESTART_POLICY_NEVER));
  REQUIRE(f.sup->Start({}).ok());
  CHECK(f.sup->Signal(SIGUSR1).ok());
  f.host.Exit(0);
  absl::Status s = f.sup->Signal(SIGUSR1);
  CHECK(absl::IsFailedPrecondition(s));
  CHECK(s.message().find("c/e") != absl::string_view::npos);
}

TEST_CASE("a run that cannot be recorded is killed, and the error returned") {
  Fixture f;
  f.Make(Params(mycel::v1::RESTART_POLICY_ALWAYS));
  f.host.fail_record = true;
  absl::Status s = f.sup->Start({});
  CHECK(absl::IsResourceExhausted(s));
  CHECK(f.host.signals == std::vector<int>{SIGKILL});
  CHECK(f.sup->status().state() == EXECUTABLE_STATE_FAILED);
  CHECK(f.sup->run() == nullptr);
  // Its exit, when the reaper reports it, changes nothing.
  f.host.fail_record = false;
  f.host.Exit(0, SIGKILL);
  CHECK(f.sup->status().state() == EXECUTABLE_STATE_FAILED);
  CHECK(f.clock.pending() == 0);
}

TEST_CASE("a restart that cannot launch fails the executable") {
  Fixture f;
  f.Make(Params(mycel::v1::RESTART_POLICY_ON_FAILURE));
  REQUIRE(f.sup->Start({}).ok());
  f.host.fail_launch = true;
  f.host.Exit(1);
  f.clock.Advance(absl::Milliseconds(100));
  CHECK(f.sup->status().state() == EXECUTABLE_STATE_FAILED);
  CHECK(f.sup->status().message() == "restart failed: exec failed");
}

TEST_CASE("an exit of an earlier generation is ignored") {
  Fixture f;
  f.Make(Params(mycel::v1::RESTART_POLICY_ON_FAILURE));
  REQUIRE(f.sup->Start({}).ok());
  const uint64_t first = f.host.last_generation;
  f.host.Exit(1);
  f.clock.Advance(absl::Milliseconds(100));
  ChildExit late;
  late.code = CLD_EXITED;
  late.status = 7;
  f.sup->Exited(first, late);
  CHECK(f.sup->status().state() == EXECUTABLE_STATE_RUNNING);
  CHECK_FALSE(f.sup->status().has_exit_code());
}

TEST_CASE("an OOM kill is reported as such") {
  Fixture f;
  f.Make(Params(mycel::v1::RESTART_POLICY_NEVER));
  REQUIRE(f.sup->Start({}).ok());
  static_cast<FakeRun*>(f.sup->run())->oom = true;
  f.host.Exit(0, SIGKILL);
  CHECK(f.sup->status().oom_killed());
  CHECK(f.sup->status().message().find("OOM") != std::string::npos);
}

TEST_CASE("recover: a recorded run whose process is gone counts as failed") {
  Fixture f;
  f.Make(Params(mycel::v1::RESTART_POLICY_ON_FAILURE));
  mycel::v1::ExecutableStatus recorded;
  recorded.set_state(EXECUTABLE_STATE_RUNNING);
  recorded.set_pid(4242);
  f.sup->Recover(recorded, nullptr);
  // It is started again at once, as a restart.
  CHECK(f.host.launches.size() == 1);
  CHECK(f.sup->status().state() == EXECUTABLE_STATE_RUNNING);
  CHECK(f.sup->status().restarts() == 1);

  Fixture g;
  g.Make(Params(mycel::v1::RESTART_POLICY_NEVER));
  g.sup->Recover(recorded, nullptr);
  CHECK(g.host.launches.empty());
  CHECK(g.sup->status().state() == EXECUTABLE_STATE_EXITED);
  CHECK(g.sup->status().exit_status_unknown());
}

TEST_CASE("recover: a live process is supervised again") {
  Fixture f;
  f.Make(Params(mycel::v1::RESTART_POLICY_NEVER));
  mycel::v1::ExecutableStatus recorded;
  recorded.set_state(EXECUTABLE_STATE_RUNNING);
  recorded.set_pid(4242);
  std::vector<int> signals;
  f.sup->Recover(recorded, std::make_unique<FakeRun>(4242, &signals));
  CHECK(f.host.launches.empty());
  CHECK(f.sup->running());
  CHECK(f.sup->Signal(SIGHUP).ok());
  CHECK(signals == std::vector<int>{SIGHUP});
}

TEST_CASE("shutdown: SIGTERM, no restart after, and KillForShutdown kills") {
  Fixture f;
  f.Make(Params(mycel::v1::RESTART_POLICY_ALWAYS));
  REQUIRE(f.sup->Start({}).ok());
  CHECK(f.sup->StopForShutdown());
  f.sup->KillForShutdown();
  CHECK(f.host.signals == std::vector<int>{SIGTERM, SIGKILL});
  f.host.Exit(0, SIGKILL);
  f.clock.Advance(absl::Minutes(1));
  CHECK(f.host.launches.size() == 1);
  CHECK_FALSE(f.sup->StopForShutdown());
}

}  // namespace
}  // namespace mycel::cells
