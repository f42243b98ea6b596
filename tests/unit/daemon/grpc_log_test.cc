// gRPC's log lines through the daemon's logger (daemon/server/grpc_log.h).
#include "daemon/server/grpc_log.h"

#include <doctest/doctest.h>
#include <grpc/grpc.h>
#include <grpc/support/log.h>
#include <unistd.h>

#include <string>

#include "runtime/log.h"

namespace mycel {
namespace {

// What the logger wrote while `fn` ran, at `level`.
template <typename Fn>
std::string Captured(log::Level level, Fn fn) {
  // gRPC drops its lines until it is initialised (the daemon's first
  // channel or server does it).
  grpc_init();
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  log::SetSink(fds[1], /*kmsg=*/false);
  log::SetLevel(level);
  fn();
  log::SetSink(STDERR_FILENO, false);
  log::SetLevel(log::Level::kInfo);
  close(fds[1]);
  std::string got;
  char buf[1024];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof(buf))) > 0) got.append(buf, n);
  close(fds[0]);
  grpc_shutdown();
  return got;
}

TEST_CASE("gRPC's errors come out as the daemon's lines, with their source") {
  RouteGrpcLogs();
  std::string got = Captured(log::Level::kInfo, [] {
    gpr_log(GPR_ERROR, "handshake failed: %s", "bad record");
  });
  CHECK(got.rfind("ts=", 0) == 0);
  CHECK(got.find("level=error") != std::string::npos);
  CHECK(got.find("msg=\"grpc: handshake failed: bad record\"") !=
        std::string::npos);
  CHECK(got.find("source=grpc_log_test.cc:") != std::string::npos);
  // Not gRPC's own format ("E1205 12:00:00.000 ...").
  CHECK(got.find("]") == std::string::npos);
}

TEST_CASE(
    "the host name mismatch of a peer named by SPIFFE ID only is debug, "
    "not an error") {
  RouteGrpcLogs();
  CHECK(GrpcLineLevel(log::Level::kError,
                      "No match found for server name: 127.0.0.1.") ==
        log::Level::kDebug);
  CHECK(GrpcLineLevel(log::Level::kError, "Handshake failed") ==
        log::Level::kError);
  CHECK(GrpcLineLevel(log::Level::kInfo, "connected") == log::Level::kInfo);
  const char* kLine = "No match found for server name: 10.1.2.3.";
  CHECK(Captured(log::Level::kInfo, [&] {
          gpr_log(GPR_ERROR, "%s", kLine);
        }).empty());
  std::string debug =
      Captured(log::Level::kDebug, [&] { gpr_log(GPR_ERROR, "%s", kLine); });
  CHECK(debug.find("level=debug") != std::string::npos);
  CHECK(debug.find("10.1.2.3") != std::string::npos);
}

}  // namespace
}  // namespace mycel
