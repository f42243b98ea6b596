// mycel stop
#include "cli/call.h"
#include "cli/cli.h"
#include "cli/executable.h"
#include "cli/flags.h"
#include "mycel/v1/cells.grpc.pb.h"
#include "proto/proto_time.h"

namespace mycel::cli {
namespace {

int Stop(Context& ctx, const std::vector<std::string>& args) {
  int rc = kExitOk;
  auto a = ParseExeArgs(ctx, args, {"--grace"}, {}, {{"-t", "--grace"}},
                        "usage: mycel stop CELL/EXE [--grace 10s]\n", &rc);
  if (!a.has_value()) return rc;
  mycel::v1::StopRequest req;
  req.set_cell(a->cell);
  req.set_name(a->name);
  if (a->flags.has("--grace")) {
    auto d = ParseDurationFlag("--grace", a->flags.get("--grace"));
    if (!d.ok()) return ctx.Fail(d.status());
    ToProto(*d, req.mutable_grace());
  }
  mycel::v1::Executable exe;
  rc = Call(ctx, &mycel::v1::Executables::Stub::Stop, req, &exe);
  return rc != kExitOk ? rc : PrintExe(ctx, exe);
}

constexpr Command kStop[] = {
    {"", "CELL/EXE [--grace D]", "stop an executable: SIGTERM, grace, SIGKILL",
     "Returns once it has exited. It is not restarted, whatever its policy.\n",
     Stop}};

}  // namespace

const Group kStopGroup = {"stop", "stop an executable", kStop};

}  // namespace mycel::cli
