// Pure pieces of the cells layer: names, restart decisions, log files.
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "absl/status/status.h"
#include "cells/log_file.h"
#include "cells/names.h"
#include "cells/restart.h"
#include "runtime/fs.h"
#include "tests/testing/process.h"

namespace mycel::cells {
namespace {

TEST_CASE("names: what may become a cgroup directory or a log file") {
  for (const char* ok : {"web", "a", "x1", "db-0", "a_b.c", "0abc"}) {
    CHECK_MESSAGE(ValidateName("name", ok).ok(), ok);
  }
  struct Bad {
    const char* name;
    const char* why;
  } bad[] = {{"", "must not be empty"},   {"..", "must start with"},
             {"a/b", "may contain only"}, {"a..b", "must not contain \"..\""},
             {"Web", "must start with"},  {"-x", "must start with"},
             {"a b", "may contain only"}};
  for (const Bad& b : bad) {
    absl::Status s = ValidateName("name", b.name);
    CHECK(s.code() == absl::StatusCode::kInvalidArgument);
    CHECK_MESSAGE(s.message().find(b.why) != absl::string_view::npos,
                  s.message());
    CHECK(s.message().rfind("name: ", 0) == 0);
  }
  CHECK_FALSE(ValidateName("name", std::string(64, 'a')).ok());
  CHECK(ValidateName("name", std::string(63, 'a')).ok());
}

RestartParams Policy(mycel::v1::RestartPolicy p) {
  RestartParams r;
  r.policy = p;
  return r;
}

TEST_CASE("restart: never, on-failure and always mean what systemd means") {
  absl::Time t0 = absl::FromUnixSeconds(1000);
  RunEnd fail{false, false, t0, t0 + absl::Seconds(1)};
  RunEnd clean{true, false, t0, t0 + absl::Seconds(1)};
  RunEnd stopped{false, true, t0, t0 + absl::Seconds(1)};
  RestartHistory h;
  CHECK_FALSE(
      DecideRestart(Policy(mycel::v1::RESTART_POLICY_NEVER), fail, &h).restart);
  CHECK(DecideRestart(Policy(mycel::v1::RESTART_POLICY_ON_FAILURE), fail, &h)
            .restart);
  h = {};
  CHECK_FALSE(
      DecideRestart(Policy(mycel::v1::RESTART_POLICY_ON_FAILURE), clean, &h)
          .restart);
  CHECK(DecideRestart(Policy(mycel::v1::RESTART_POLICY_ALWAYS), clean, &h)
            .restart);
  h = {};
  CHECK_FALSE(
      DecideRestart(Policy(mycel::v1::RESTART_POLICY_ALWAYS), stopped, &h)
          .restart);
}

TEST_CASE("restart: the delay doubles, caps, and resets after a long run") {
  RestartParams p = Policy(mycel::v1::RESTART_POLICY_ALWAYS);
  p.restart_sec = absl::Seconds(1);
  p.start_limit_burst = 100;
  p.max_delay = absl::Seconds(5);
  RestartHistory h;
  absl::Time t = absl::FromUnixSeconds(1000);
  std::vector<double> delays;
  for (int i = 0; i < 5; ++i) {
    RestartDecision d = DecideRestart(p, {false, false, t, t}, &h);
    delays.push_back(absl::ToDoubleSeconds(d.delay));
  }
  CHECK(delays == std::vector<double>{1, 2, 4, 5, 5});
  // A run longer than the start-limit interval (10 s) starts over.
  RestartDecision d =
      DecideRestart(p, {false, false, t, t + absl::Seconds(60)}, &h);
  CHECK(absl::ToDoubleSeconds(d.delay) == 1);
}

TEST_CASE("restart: StartLimitBurst starts within StartLimitIntervalSec") {
  RestartParams p = Policy(mycel::v1::RESTART_POLICY_ON_FAILURE);
  p.start_limit_burst = 3;
  p.start_limit_interval = absl::Seconds(10);
  RestartHistory h;
  absl::Time t = absl::FromUnixSeconds(1000);
  h.starts.push_back(t);  // the first start
  int restarts = 0;
  for (int i = 0; i < 10; ++i) {
    RestartDecision d = DecideRestart(p, {false, false, t, t}, &h);
    if (!d.restart) {
      CHECK(d.start_limit_hit);
      break;
    }
    ++restarts;
    h.starts.push_back(t);  // the caller records each start
  }
  CHECK(restarts == 2);  // 3 starts in all
  // Starts older than the interval no longer count.
  absl::Time later = t + absl::Seconds(11);
  CHECK(DecideRestart(p, {false, false, later, later}, &h).restart);
}

TEST_CASE("restart: bad parameters name their field") {
  mycel::v1::Restart r;
  r.set_start_limit_burst(-1);
  CHECK(ToRestartParams(r).status().message().find(
            "restart.start_limit_burst") == 0);
  r = {};
  r.mutable_restart_sec()->set_seconds(-1);
  CHECK(ToRestartParams(r).status().message().find("restart.restart_sec") == 0);
  r = {};
  r.set_policy(static_cast<mycel::v1::RestartPolicy>(99));
  CHECK(ToRestartParams(r).status().code() ==
        absl::StatusCode::kInvalidArgument);
  auto d = ToRestartParams({});
  REQUIRE(d.ok());
  CHECK(d->policy == mycel::v1::RESTART_POLICY_NEVER);
  CHECK(d->start_limit_burst == 5);
}

// A log file with `data`, as the keeper would leave it.
void WriteLog(const std::string& path, const std::string& data) {
  REQUIRE(MakeDirs(path.substr(0, path.rfind('/')), 0700).ok());
  REQUIRE(WriteFile(path, data, 0600).ok());
}

bool IsDirectory(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

TEST_CASE("log files: a deleted cell's logs move to the trash, then go") {
  testing::TempDir dir;
  for (const char* exe : {"a", "b"}) {
    WriteLog(LogPath(dir.path(), "c", exe), "x\n");
  }
  absl::StatusOr<std::string> trash = MoveLogDirToTrash(dir.path(), "c");
  REQUIRE(trash.ok());
  // The cell's name is free at once: a new cell of that name has no logs.
  CHECK(!IsDirectory(LogDir(dir.path(), "c")));
  CHECK(absl::IsNotFound(ReadFile(LogPath(dir.path(), "c", "a")).status()));
  // The trash is in logs/, under a name no cell can have.
  CHECK(trash->rfind(dir.path() + "/logs/.", 0) == 0);
  CHECK(*ReadFile(*trash + "/a.log") == "x\n");
  absl::Status valid =
      ValidateName("name", trash->substr(trash->rfind('/') + 1));
  CHECK(absl::IsInvalidArgument(valid));

  // Deleting twice: the second finds nothing.
  CHECK(absl::IsNotFound(MoveLogDirToTrash(dir.path(), "c").status()));
  RemoveLogDir(*trash);
  CHECK(!IsDirectory(*trash));
  RemoveLogDir(*trash);  // already gone: nothing to do, no crash

  // A daemon that died before removing its trash: the next one empties it,
  // and leaves the logs of live cells alone.
  WriteLog(LogPath(dir.path(), "c", "a"), "");
  WriteLog(LogPath(dir.path(), "d", "a"), "");
  absl::StatusOr<std::string> first = MoveLogDirToTrash(dir.path(), "c");
  REQUIRE(first.ok());
  WriteLog(LogPath(dir.path(), "c", "a"), "");
  absl::StatusOr<std::string> second = MoveLogDirToTrash(dir.path(), "c");
  REQUIRE(second.ok());
  CHECK(*first != *second);
  EmptyLogTrash(dir.path());
  CHECK(!IsDirectory(*first));
  CHECK(!IsDirectory(*second));
  CHECK(IsDirectory(LogDir(dir.path(), "d")));
  EmptyLogTrash(dir.Sub("nothing-here"));  // no logs directory at all
}

}  // namespace
}  // namespace mycel::cells
