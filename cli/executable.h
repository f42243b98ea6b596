// What the commands on executables share (exec, ps, stop, kill, logs,
// wait, run): how an executable's status is shown, and how CELL/EXE is
// read from the command line.
#ifndef MYCEL_CLI_EXECUTABLE_H_
#define MYCEL_CLI_EXECUTABLE_H_

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "cli/cli.h"
#include "cli/flags.h"
#include "mycel/v1/cells.pb.h"

namespace mycel::cli {

// `mycel run` exits 125 when mycel itself failed, as docker run does.
inline constexpr int kRunDaemonError = 125;

// running, restarting, exited, failed.
std::string StateText(const mycel::v1::ExecutableStatus& s);

// The EXIT column: a code, SIGNAME, oom-killed, unknown, or "-".
std::string ExitText(const mycel::v1::ExecutableStatus& s);

// The conventional shell encoding: the exit code, or 128+signal;
// kRunDaemonError when the status has neither.
int ShellStatus(const mycel::v1::ExecutableStatus& s);

// Prints "CELL/NAME STATE EXIT", or the executable as JSON with -o json.
int PrintExe(const Context& ctx, const mycel::v1::Executable& exe);

// What `mycel exec` and `mycel run` say about the process: the command
// (after "--"), -e/--env, -w/--cwd, -u/--user, into `process` (an
// ExecutableSpec or a RunRequest). An error names the flag.
template <typename Process>
absl::Status FillProcess(const ParsedArgs& args, Process* process) {
  for (const auto& c : args.rest) process->add_command(c);
  if (args.values.count("--env")) {
    for (const auto& e : args.values.at("--env")) process->add_env(e);
  }
  process->set_cwd(args.get("--cwd"));
  if (args.has("--user")) {
    absl::StatusOr<std::pair<uint32_t, uint32_t>> ids =
        ParseUser(args.get("--user"));
    if (!ids.ok()) return ids.status();
    process->set_uid(ids->first);
    process->set_gid(ids->second);
  }
  return absl::OkStatus();
}

// The arguments of `mycel stop|kill|logs CELL/EXE [flags]`.
struct ExeArgs {
  ParsedArgs flags;
  std::string cell;
  std::string name;
};

// Parses `args` as ParseArgs does, then wants exactly one CELL/EXE. When
// they are not that, prints `usage` (for the wrong number of words) or the
// error, stores the exit code in `*exit_code` and returns nullopt.
std::optional<ExeArgs> ParseExeArgs(
    const Context& ctx, const std::vector<std::string>& args,
    const std::set<std::string>& with_value,
    const std::set<std::string>& booleans,
    const std::map<std::string, std::string>& aliases, const char* usage,
    int* exit_code);

}  // namespace mycel::cli

#endif  // MYCEL_CLI_EXECUTABLE_H_
