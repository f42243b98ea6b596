#include "runtime/log.h"

#include <doctest/doctest.h>
#include <unistd.h>

namespace mycel::log {
namespace {

TEST_CASE("a log line is logfmt with ts, level, msg and fields") {
  std::string line = Format(Level::kWarn, "removed stale socket",
                            {{"socket", "/run/x.sock"}, {"n", 3}});
  CHECK(line.rfind("ts=", 0) == 0);
  CHECK(line.find(" level=warn msg=\"removed stale socket\" socket=/run/x.sock "
                  "n=3\n") != std::string::npos);
  CHECK(line.back() == '\n');
  CHECK(std::count(line.begin(), line.end(), '\n') == 1);
}

TEST_CASE("values with spaces, quotes and newlines are quoted and escaped") {
  std::string line =
      Format(Level::kInfo, "m", {{"v", "a \"b\"\nc"}, {"e", ""}});
  CHECK(line.find("v=\"a \\\"b\\\"\\nc\"") != std::string::npos);
  CHECK(line.find("e=\"\"") != std::string::npos);
}

TEST_CASE("levels parse, and unknown names are an error naming the field") {
  CHECK(*ParseLevel("DEBUG") == Level::kDebug);
  CHECK(*ParseLevel("warning") == Level::kWarn);
  auto bad = ParseLevel("loud");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message().find("log_level") != absl::string_view::npos);
}

TEST_CASE("events below the level are dropped; kmsg lines carry a priority") {
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  SetSink(fds[1], /*kmsg=*/true);
  SetLevel(Level::kWarn);
  Info("dropped");
  Error("kept", {{"k", "v"}});
  SetSink(STDERR_FILENO, false);
  SetLevel(Level::kInfo);
  close(fds[1]);
  char buf[512] = {};
  ssize_t n = read(fds[0], buf, sizeof(buf) - 1);
  close(fds[0]);
  std::string got(buf, n > 0 ? n : 0);
  CHECK(got.rfind("<3>myceld: ts=", 0) == 0);
  CHECK(got.find("dropped") == std::string::npos);
  CHECK(got.find("msg=kept k=v") != std::string::npos);
}

}  // namespace
}  // namespace mycel::log
