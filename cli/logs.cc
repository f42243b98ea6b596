// mycel logs
#include <stdio.h>

#include "absl/strings/numbers.h"
#include "cli/call.h"
#include "cli/cli.h"
#include "cli/executable.h"
#include "mycel/v1/cells.grpc.pb.h"

namespace mycel::cli {
namespace {

int Logs(Context& ctx, const std::vector<std::string>& args) {
  int rc = kExitOk;
  auto a = ParseExeArgs(ctx, args, {"--tail"}, {"--follow"},
                        {{"-f", "--follow"}, {"-n", "--tail"}},
                        "usage: mycel logs CELL/EXE [-f] [--tail N]\n", &rc);
  if (!a.has_value()) return rc;
  mycel::v1::LogsRequest req;
  req.set_cell(a->cell);
  req.set_name(a->name);
  req.set_follow(a->flags.has("--follow"));
  if (a->flags.has("--tail")) {
    int n = 0;
    if (!absl::SimpleAtoi(a->flags.get("--tail"), &n) || n < 0) {
      return ctx.Fail(
          absl::InvalidArgumentError("--tail: want a number of lines"));
    }
    req.set_tail_lines(n);
  }
  if (absl::Status utf8 = CheckUtf8Fields(req); !utf8.ok()) {
    fprintf(stderr, "mycel: %s\n", std::string(utf8.message()).c_str());
    return kExitFailure;
  }
  auto stub = Connect<mycel::v1::Executables::Stub>(ctx, &rc);
  if (stub == nullptr) return rc;
  // Following has no deadline.
  std::unique_ptr<grpc::ClientContext> call =
      req.follow() ? std::make_unique<grpc::ClientContext>() : ctx.NewCall();
  auto reader = stub->Logs(call.get(), req);
  mycel::v1::LogChunk chunk;
  while (reader->Read(&chunk)) {
    fwrite(chunk.data().data(), 1, chunk.data().size(), stdout);
    fflush(stdout);
  }
  grpc::Status st = reader->Finish();
  if (!st.ok()) return ctx.Fail(st);
  return kExitOk;
}

constexpr Command kLogs[] = {
    {"", "CELL/EXE [-f] [--tail N]", "print an executable's output",
     "-f follows the output until the executable ends for good.\n", Logs}};

}  // namespace

const Group kLogsGroup = {"logs", "print an executable's output", kLogs};

}  // namespace mycel::cli
