#include "cli/executable.h"

#include <stdio.h>
#include <string.h>

#include "absl/strings/str_cat.h"
#include "cli/call.h"
#include "cli/flags.h"

namespace mycel::cli {

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

int ShellStatus(const mycel::v1::ExecutableStatus& s) {
  if (s.has_signal()) return 128 + s.signal();
  if (s.has_exit_code()) return s.exit_code();
  return kRunDaemonError;
}

int PrintExe(const Context& ctx, const mycel::v1::Executable& exe) {
  return Print(ctx, exe, [&] {
    printf("%s/%s %s %s\n", exe.spec().cell().c_str(),
           exe.spec().name().c_str(), StateText(exe.status()).c_str(),
           ExitText(exe.status()).c_str());
    return kExitOk;
  });
}

std::optional<ExeArgs> ParseExeArgs(
    const Context& ctx, const std::vector<std::string>& args,
    const std::set<std::string>& with_value,
    const std::set<std::string>& booleans,
    const std::map<std::string, std::string>& aliases, const char* usage,
    int* exit_code) {
  auto parsed = ParseArgs(args, with_value, booleans, aliases);
  if (!parsed.ok()) {
    *exit_code = ctx.Fail(parsed.status());
    return std::nullopt;
  }
  if (parsed->positional.size() != 1) {
    fprintf(stderr, "%s", usage);
    *exit_code = kExitUsage;
    return std::nullopt;
  }
  auto ref = ParseExeRef(parsed->positional[0]);
  if (!ref.ok()) {
    *exit_code = ctx.Fail(ref.status());
    return std::nullopt;
  }
  return ExeArgs{*std::move(parsed), ref->first, ref->second};
}

}  // namespace mycel::cli
