// mycel exec
#include <stdio.h>
#include <string.h>

#include "absl/strings/numbers.h"
#include "cli/call.h"
#include "cli/cli.h"
#include "cli/executable.h"
#include "cli/flags.h"
#include "mycel/v1/cells.grpc.pb.h"
#include "proto/proto_time.h"

namespace mycel::cli {
namespace {

int Exec(Context& ctx, const std::vector<std::string>& args) {
  auto a = ParseArgs(
      args,
      {"--name", "--restart", "--restart-sec", "--start-limit-burst",
       "--start-limit-interval", "--env", "--cwd", "--user", "--stop-grace"},
      {}, {{"-e", "--env"}, {"-w", "--cwd"}, {"-u", "--user"}});
  if (!a.ok()) return ctx.Fail(a.status());
  if (a->positional.size() != 1 || a->rest.empty()) {
    fprintf(stderr, "usage: mycel exec CELL [options] -- COMMAND [ARGS...]\n");
    return kExitUsage;
  }
  mycel::v1::StartRequest req;
  auto* spec = req.mutable_spec();
  spec->set_cell(a->positional[0]);
  spec->set_name(a->get("--name"));
  if (absl::Status s = FillProcess(*a, spec); !s.ok()) return ctx.Fail(s);
  std::string policy = a->get("--restart", "never");
  if (policy == "never") {
    spec->mutable_restart()->set_policy(mycel::v1::RESTART_POLICY_NEVER);
  } else if (policy == "on-failure") {
    spec->mutable_restart()->set_policy(mycel::v1::RESTART_POLICY_ON_FAILURE);
  } else if (policy == "always") {
    spec->mutable_restart()->set_policy(mycel::v1::RESTART_POLICY_ALWAYS);
  } else {
    return ctx.Fail(absl::InvalidArgumentError(
        "--restart: want never, on-failure or always, got \"" + policy + "\""));
  }
  for (const char* flag :
       {"--restart-sec", "--start-limit-interval", "--stop-grace"}) {
    if (!a->has(flag)) continue;
    auto d = ParseDurationFlag(flag, a->get(flag));
    if (!d.ok()) return ctx.Fail(d.status());
    if (strcmp(flag, "--restart-sec") == 0) {
      ToProto(*d, spec->mutable_restart()->mutable_restart_sec());
    } else if (strcmp(flag, "--start-limit-interval") == 0) {
      ToProto(*d, spec->mutable_restart()->mutable_start_limit_interval());
    } else {
      ToProto(*d, spec->mutable_stop_grace());
    }
  }
  if (a->has("--start-limit-burst")) {
    int n = 0;
    if (!absl::SimpleAtoi(a->get("--start-limit-burst"), &n) || n < 1) {
      return ctx.Fail(absl::InvalidArgumentError(
          "--start-limit-burst: want a positive number of starts"));
    }
    spec->mutable_restart()->set_start_limit_burst(n);
  }
  return CallAndPrint(ctx, &mycel::v1::Executables::Stub::Start, req,
                      [](const mycel::v1::Executable& exe) {
                        printf("%s/%s\n", exe.spec().cell().c_str(),
                               exe.spec().name().c_str());
                        return kExitOk;
                      });
}

constexpr Command kExec[] = {
    {"", "CELL [options] -- COMMAND [ARGS...]", "start an executable in a cell",
     "options:\n"
     "  --name NAME              executable name (default: the program's "
     "name)\n"
     "  --restart POLICY         never (default), on-failure or always\n"
     "  --restart-sec D          delay before a restart (default 100ms; "
     "doubles\n"
     "                           with each restart in a row, up to 30s)\n"
     "  --start-limit-burst N    give up after N starts ...\n"
     "  --start-limit-interval D ... within D (default 5 within 10s)\n"
     "  -e, --env KEY=VALUE      environment (repeatable)\n"
     "  -w, --cwd DIR            working directory\n"
     "  -u, --user UID[:GID]     run as this user\n"
     "  --stop-grace D           SIGTERM to SIGKILL delay on stop (default "
     "10s)\n"
     "The command runs directly, without a shell. Its stdout and stderr go\n"
     "to a log file; read it with 'mycel logs CELL/NAME'.\n",
     Exec}};

}  // namespace

const Group kExecGroup = {"exec", "start an executable in a cell", kExec};

}  // namespace mycel::cli
