// mycel run
#include <stdio.h>
#include <unistd.h>

#include <optional>

#include "cli/call.h"
#include "cli/cell_flags.h"
#include "cli/cli.h"
#include "cli/executable.h"
#include "mycel/v1/cells.grpc.pb.h"
#include "runtime/fs.h"

namespace mycel::cli {
namespace {

// `mycel run` exits 127 when the command does not exist, as docker run.
constexpr int kRunNotFound = 127;

int Run(Context& ctx, const std::vector<std::string>& args) {
  std::set<std::string> values = CellValueFlags();
  values.insert({"--env", "--cwd", "--user", "--name"});
  auto a = ParseArgs(args, values, CellBoolFlags(),
                     {{"-e", "--env"}, {"-w", "--cwd"}, {"-u", "--user"}});
  if (!a.ok()) {
    ctx.Fail(a.status());
    return kRunDaemonError;
  }
  if (!a->positional.empty() || a->rest.empty()) {
    fprintf(stderr, "usage: mycel run [options] -- COMMAND [ARGS...]\n");
    return kRunDaemonError;
  }
  mycel::v1::RunRequest req;
  req.mutable_cell()->set_name(a->get("--name"));
  if (absl::Status s = FillCellSpec(*a, req.mutable_cell()); !s.ok()) {
    ctx.Fail(s);
    return kRunDaemonError;
  }
  if (absl::Status s = FillProcess(*a, &req); !s.ok()) {
    ctx.Fail(s);
    return kRunDaemonError;
  }

  if (absl::Status utf8 = CheckUtf8Fields(req); !utf8.ok()) {
    ctx.Fail(utf8);
    return kRunDaemonError;
  }
  int unused = kExitOk;
  auto stub = Connect<mycel::v1::Cells::Stub>(ctx, &unused);
  if (stub == nullptr) return kRunDaemonError;
  grpc::ClientContext call;  // runs as long as the command does
  auto reader = stub->Run(&call, req);
  mycel::v1::RunEvent ev;
  std::optional<mycel::v1::ExecutableStatus> exit;
  while (reader->Read(&ev)) {
    if (ev.has_exit()) {
      exit = ev.exit();
    } else if (ev.event_case() == mycel::v1::RunEvent::kStdout) {
      // A closed stdout (`mycel run ... | head`) loses the rest of the
      // output; the command runs on and its exit code still counts.
      WriteAll(STDOUT_FILENO, ev.stdout(), "stdout").IgnoreError();
    } else if (ev.event_case() == mycel::v1::RunEvent::kStderr) {
      WriteAll(STDERR_FILENO, ev.stderr(), "stderr").IgnoreError();
    }
  }
  grpc::Status st = reader->Finish();
  if (!st.ok()) {
    ctx.Fail(st);
    return st.error_code() == grpc::StatusCode::NOT_FOUND ? kRunNotFound
                                                          : kRunDaemonError;
  }
  if (!exit.has_value()) {
    fprintf(stderr, "mycel: run ended without an exit status\n");
    return kRunDaemonError;
  }
  if (exit->oom_killed())
    fprintf(stderr, "mycel: %s\n", exit->message().c_str());
  return ShellStatus(*exit);
}

constexpr Command kRun[] = {
    {"", "[limits] [isolation] [-e K=V] [-w DIR] [-u UID] -- COMMAND [ARGS...]",
     "run a command in a throwaway cell, attached",
     "Creates a cell with the given limits and isolation, runs the command\n"
     "with its stdout and stderr on this terminal, deletes the cell, and "
     "exits\n"
     "with the command's exit code, or 128+N if signal N killed it.\n"
     "Exit 125 means mycel itself failed, 127 that the command was not "
     "found.\n\n",
     Run}};

}  // namespace

const Group kRunGroup = {"run", "run a command in a throwaway cell", kRun};

}  // namespace mycel::cli
