// mycel kill
#include "cli/call.h"
#include "cli/cli.h"
#include "cli/executable.h"
#include "cli/flags.h"
#include "mycel/v1/cells.grpc.pb.h"

namespace mycel::cli {
namespace {

int Kill(Context& ctx, const std::vector<std::string>& args) {
  int rc = kExitOk;
  auto a = ParseExeArgs(ctx, args, {"--signal"}, {}, {{"-s", "--signal"}},
                        "usage: mycel kill CELL/EXE [--signal SIG]\n", &rc);
  if (!a.has_value()) return rc;
  auto sig = ParseSignal(a->flags.get("--signal", "KILL"));
  if (!sig.ok()) return ctx.Fail(sig.status());
  mycel::v1::SignalRequest req;
  req.set_cell(a->cell);
  req.set_name(a->name);
  req.set_signal(*sig);
  mycel::v1::Executable exe;
  rc = Call(ctx, &mycel::v1::Executables::Stub::Signal, req, &exe);
  return rc != kExitOk ? rc : PrintExe(ctx, exe);
}

constexpr Command kKill[] = {{"", "CELL/EXE [-s SIGNAL]",
                              "send a signal to an executable (default KILL)",
                              "", Kill}};

}  // namespace

const Group kKillGroup = {"kill", "signal an executable", kKill};

}  // namespace mycel::cli
