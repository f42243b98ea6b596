// Executables: mycel exec | ps | stop | kill | logs | wait | run
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "cli/cell_flags.h"
#include "cli/cli.h"
#include "cli/flags.h"
#include "mycel/v1/cells.grpc.pb.h"
#include "proto/proto_time.h"

namespace mycel::cli {
namespace {

// `mycel run` exit codes for its own failures, as docker run's.
constexpr int kRunDaemonError = 125;
constexpr int kRunNotFound = 127;

// "UID" or "UID:GID" (numbers); the gid defaults to the uid.
absl::StatusOr<std::pair<uint32_t, uint32_t>> ParseUser(const std::string& u) {
  size_t colon = u.find(':');
  std::string uid = u.substr(0, colon);
  std::string gid = colon == std::string::npos ? uid : u.substr(colon + 1);
  uint32_t uv = 0, gv = 0;
  if (!absl::SimpleAtoi(uid, &uv) || !absl::SimpleAtoi(gid, &gv)) {
    return absl::InvalidArgumentError(
        "--user: want UID or UID:GID (numbers), got \"" + u + "\"");
  }
  return std::make_pair(uv, gv);
}

std::string StateText(const mycel::v1::ExecutableStatus& s) {
  switch (s.state()) {
    case mycel::v1::EXECUTABLE_STATE_RUNNING:
      return "running";
    case mycel::v1::EXECUTABLE_STATE_RESTARTING:
      return "restarting";
    case mycel::v1::EXECUTABLE_STATE_EXITED:
      return "exited";
    case mycel::v1::EXECUTABLE_STATE_FAILED:
      return "failed";
    default:
      return "unknown";
  }
}

std::string ExitText(const mycel::v1::ExecutableStatus& s) {
  if (s.oom_killed()) return "oom-killed";
  if (s.has_signal()) {
    const char* name = sigabbrev_np(s.signal());
    return name ? absl::StrCat("SIG", name)
                : absl::StrCat("signal ", s.signal());
  }
  if (s.has_exit_code()) return absl::StrCat(s.exit_code());
  if (s.exit_status_unknown()) return "unknown";
  return "-";
}

// The conventional shell encoding: the exit code, or 128+signal.
int ShellStatus(const mycel::v1::ExecutableStatus& s) {
  if (s.has_signal()) return 128 + s.signal();
  if (s.has_exit_code()) return s.exit_code();
  return kRunDaemonError;
}

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
  for (const auto& c : a->rest) spec->add_command(c);
  if (a->values.count("--env")) {
    for (const auto& e : a->values.at("--env")) spec->add_env(e);
  }
  spec->set_cwd(a->get("--cwd"));
  if (a->has("--user")) {
    auto ids = ParseUser(a->get("--user"));
    if (!ids.ok()) return ctx.Fail(ids.status());
    spec->set_uid(ids->first);
    spec->set_gid(ids->second);
  }
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
  auto channel = ctx.Channel();
  if (!channel.ok()) return ctx.Fail(channel.status());
  mycel::v1::Executable exe;
  grpc::Status st = mycel::v1::Executables::NewStub(*channel)->Start(
      ctx.NewCall().get(), req, &exe);
  if (!st.ok()) return ctx.Fail(st);
  if (ctx.options().output == Output::kJson) return ctx.PrintJson(exe);
  printf("%s/%s\n", exe.spec().cell().c_str(), exe.spec().name().c_str());
  return kExitOk;
}

int Ps(Context& ctx, const std::vector<std::string>& args) {
  if (args.size() > 1) {
    fprintf(stderr, "usage: mycel ps [CELL]\n");
    return kExitUsage;
  }
  mycel::v1::ListExecutablesRequest req;
  if (!args.empty()) req.set_cell(args[0]);
  auto channel = ctx.Channel();
  if (!channel.ok()) return ctx.Fail(channel.status());
  mycel::v1::ListExecutablesResponse resp;
  grpc::Status st = mycel::v1::Executables::NewStub(*channel)->List(
      ctx.NewCall().get(), req, &resp);
  if (!st.ok()) return ctx.Fail(st);
  if (ctx.options().output == Output::kJson) return ctx.PrintJson(resp);
  std::vector<std::vector<std::string>> rows;
  for (const auto& e : resp.executables()) {
    const auto& s = e.status();
    rows.push_back({e.spec().cell(), e.spec().name(), StateText(s),
                    s.pid() ? absl::StrCat(s.pid()) : "-", ExitText(s),
                    absl::StrCat(s.restarts()),
                    absl::StrJoin(e.spec().command(), " ").substr(0, 40)});
  }
  PrintTable({"CELL", "NAME", "STATE", "PID", "EXIT", "RESTARTS", "COMMAND"},
             rows);
  return kExitOk;
}

int PrintExe(Context& ctx, const mycel::v1::Executable& exe) {
  if (ctx.options().output == Output::kJson) return ctx.PrintJson(exe);
  printf("%s/%s %s %s\n", exe.spec().cell().c_str(), exe.spec().name().c_str(),
         StateText(exe.status()).c_str(), ExitText(exe.status()).c_str());
  return kExitOk;
}

int Stop(Context& ctx, const std::vector<std::string>& args) {
  auto a = ParseArgs(args, {"--grace"}, {}, {{"-t", "--grace"}});
  if (!a.ok()) return ctx.Fail(a.status());
  if (a->positional.size() != 1) {
    fprintf(stderr, "usage: mycel stop CELL/EXE [--grace 10s]\n");
    return kExitUsage;
  }
  auto ref = ParseExeRef(a->positional[0]);
  if (!ref.ok()) return ctx.Fail(ref.status());
  mycel::v1::StopRequest req;
  req.set_cell(ref->first);
  req.set_name(ref->second);
  if (a->has("--grace")) {
    auto d = ParseDurationFlag("--grace", a->get("--grace"));
    if (!d.ok()) return ctx.Fail(d.status());
    ToProto(*d, req.mutable_grace());
  }
  auto channel = ctx.Channel();
  if (!channel.ok()) return ctx.Fail(channel.status());
  mycel::v1::Executable exe;
  auto call = ctx.NewCall();
  grpc::Status st =
      mycel::v1::Executables::NewStub(*channel)->Stop(call.get(), req, &exe);
  if (!st.ok()) return ctx.Fail(st);
  return PrintExe(ctx, exe);
}

int Kill(Context& ctx, const std::vector<std::string>& args) {
  auto a = ParseArgs(args, {"--signal"}, {}, {{"-s", "--signal"}});
  if (!a.ok()) return ctx.Fail(a.status());
  if (a->positional.size() != 1) {
    fprintf(stderr, "usage: mycel kill CELL/EXE [--signal SIG]\n");
    return kExitUsage;
  }
  auto ref = ParseExeRef(a->positional[0]);
  if (!ref.ok()) return ctx.Fail(ref.status());
  auto sig = ParseSignal(a->get("--signal", "KILL"));
  if (!sig.ok()) return ctx.Fail(sig.status());
  mycel::v1::SignalRequest req;
  req.set_cell(ref->first);
  req.set_name(ref->second);
  req.set_signal(*sig);
  auto channel = ctx.Channel();
  if (!channel.ok()) return ctx.Fail(channel.status());
  mycel::v1::Executable exe;
  grpc::Status st = mycel::v1::Executables::NewStub(*channel)->Signal(
      ctx.NewCall().get(), req, &exe);
  if (!st.ok()) return ctx.Fail(st);
  return PrintExe(ctx, exe);
}

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
  auto channel = ctx.Channel();
  if (!channel.ok()) return ctx.Fail(channel.status());
  mycel::v1::Executable exe;
  grpc::ClientContext call;  // no deadline: it waits as long as it runs
  grpc::Status st =
      mycel::v1::Executables::NewStub(*channel)->Wait(&call, req, &exe);
  if (!st.ok()) return ctx.Fail(st);
  int rc = PrintExe(ctx, exe);
  return rc != kExitOk ? rc : ShellStatus(exe.status());
}

int Logs(Context& ctx, const std::vector<std::string>& args) {
  auto a = ParseArgs(args, {"--tail"}, {"--follow"},
                     {{"-f", "--follow"}, {"-n", "--tail"}});
  if (!a.ok()) return ctx.Fail(a.status());
  if (a->positional.size() != 1) {
    fprintf(stderr, "usage: mycel logs CELL/EXE [-f] [--tail N]\n");
    return kExitUsage;
  }
  auto ref = ParseExeRef(a->positional[0]);
  if (!ref.ok()) return ctx.Fail(ref.status());
  mycel::v1::LogsRequest req;
  req.set_cell(ref->first);
  req.set_name(ref->second);
  req.set_follow(a->has("--follow"));
  if (a->has("--tail")) {
    int n = 0;
    if (!absl::SimpleAtoi(a->get("--tail"), &n) || n < 0) {
      return ctx.Fail(
          absl::InvalidArgumentError("--tail: want a number of lines"));
    }
    req.set_tail_lines(n);
  }
  auto channel = ctx.Channel();
  if (!channel.ok()) return ctx.Fail(channel.status());
  grpc::ClientContext call;  // following has no deadline
  if (!req.follow()) {
    call.set_deadline(std::chrono::system_clock::now() +
                      std::chrono::seconds(ctx.options().timeout_seconds));
  }
  auto reader = mycel::v1::Executables::NewStub(*channel)->Logs(&call, req);
  mycel::v1::LogChunk chunk;
  while (reader->Read(&chunk)) {
    fwrite(chunk.data().data(), 1, chunk.data().size(), stdout);
    fflush(stdout);
  }
  grpc::Status st = reader->Finish();
  if (!st.ok()) return ctx.Fail(st);
  return kExitOk;
}

bool WriteAll(int fd, const std::string& data) {
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = write(fd, data.data() + off, data.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

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
  for (const auto& c : a->rest) req.add_command(c);
  if (a->values.count("--env")) {
    for (const auto& e : a->values.at("--env")) req.add_env(e);
  }
  req.set_cwd(a->get("--cwd"));
  if (a->has("--user")) {
    auto ids = ParseUser(a->get("--user"));
    if (!ids.ok()) {
      ctx.Fail(ids.status());
      return kRunDaemonError;
    }
    req.set_uid(ids->first);
    req.set_gid(ids->second);
  }

  auto channel = ctx.Channel();
  if (!channel.ok()) {
    ctx.Fail(channel.status());
    return kRunDaemonError;
  }
  grpc::ClientContext call;  // runs as long as the command does
  auto reader = mycel::v1::Cells::NewStub(*channel)->Run(&call, req);
  mycel::v1::RunEvent ev;
  std::optional<mycel::v1::ExecutableStatus> exit;
  while (reader->Read(&ev)) {
    if (ev.has_exit()) {
      exit = ev.exit();
    } else if (ev.event_case() == mycel::v1::RunEvent::kStdout) {
      WriteAll(STDOUT_FILENO, ev.stdout());
    } else if (ev.event_case() == mycel::v1::RunEvent::kStderr) {
      WriteAll(STDERR_FILENO, ev.stderr());
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
constexpr Command kPs[] = {{"", "[CELL]", "list executables", "", Ps}};
constexpr Command kStop[] = {
    {"", "CELL/EXE [--grace D]", "stop an executable: SIGTERM, grace, SIGKILL",
     "Returns once it has exited. It is not restarted, whatever its policy.\n",
     Stop}};
constexpr Command kKill[] = {{"", "CELL/EXE [-s SIGNAL]",
                              "send a signal to an executable (default KILL)",
                              "", Kill}};
constexpr Command kLogs[] = {
    {"", "CELL/EXE [-f] [--tail N]", "print an executable's output",
     "-f follows the output until the executable ends for good.\n", Logs}};
constexpr Command kWait[] = {
    {"", "CELL/EXE", "wait until an executable ends; exit with its status", "",
     Wait}};
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

const Group kExecGroup = {"exec", "start an executable in a cell", kExec};
const Group kPsGroup = {"ps", "list executables", kPs};
const Group kStopGroup = {"stop", "stop an executable", kStop};
const Group kKillGroup = {"kill", "signal an executable", kKill};
const Group kLogsGroup = {"logs", "print an executable's output", kLogs};
const Group kWaitGroup = {"wait", "wait for an executable to end", kWait};
const Group kRunGroup = {"run", "run a command in a throwaway cell", kRun};

}  // namespace mycel::cli
