// mycel wait
#include <stdio.h>

#include "cli/call.h"
#include "cli/cli.h"
#include "cli/executable.h"
#include "cli/flags.h"
#include "mycel/v1/cells.grpc.pb.h"

namespace mycel::cli {
namespace {

int Wait(Context& ctx, const std::vector<std::string>& args) {
  if (args.size() != 1) {
    fprintf(stderr, "usage: mycel wait CELL/EXE\n");
    return kExitUsage;
  }
  auto ref = ParseExeRef(args[0]);
  if (!ref.ok()) return ctx.Fail(ref.status());
  mycel::v1::ExecutableRef req;
  req.set_cell(ref->first);
  req.set_name(ref->second);
  mycel::v1::Executable exe;
  // No deadline: it waits as long as the executable runs.
  int rc = Call(ctx, &mycel::v1::Executables::Stub::Wait, req, &exe,
                {.deadline = false});
  if (rc == kExitOk) rc = PrintExe(ctx, exe);
  return rc != kExitOk ? rc : ShellStatus(exe.status());
}

constexpr Command kWait[] = {
    {"", "CELL/EXE", "wait until an executable ends; exit with its status", "",
     Wait}};

}  // namespace

const Group kWaitGroup = {"wait", "wait for an executable to end", kWait};

}  // namespace mycel::cli
