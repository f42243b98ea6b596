#include <stdio.h>

#include "cli/cli.h"

namespace mycel::cli {
namespace {

void PrintGroupUsage(FILE* out, const Group& group) {
  fprintf(out, "usage: mycel %s COMMAND [ARGS]\n\n%s\n\ncommands:\n",
          group.name, group.summary);
  for (const Command& c : group.commands) {
    fprintf(out, "  %-10s %s\n", c.name, c.summary);
  }
  fprintf(out, "\nRun 'mycel %s COMMAND --help' for a command's options.\n",
          group.name);
}

void PrintCommandUsage(const Group& group, const Command& c) {
  printf("usage: mycel %s %s%s%s\n\n%s\n", group.name, c.name,
         c.args[0] ? " " : "", c.args, c.summary);
  if (c.details[0]) printf("\n%s", c.details);
}

}  // namespace

int Dispatch(Context& ctx, const Group& group,
             const std::vector<std::string>& args) {
  if (args.empty()) {
    PrintGroupUsage(stderr, group);
    return kExitUsage;
  }
  if (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
    PrintGroupUsage(stdout, group);
    return kExitOk;
  }
  for (const Command& c : group.commands) {
    if (args[0] != c.name) continue;
    std::vector<std::string> rest(args.begin() + 1, args.end());
    if (WantsHelp(rest)) {
      PrintCommandUsage(group, c);
      return kExitOk;
    }
    return c.fn(ctx, rest);
  }
  fprintf(stderr, "mycel %s: unknown command \"%s\"\n\n", group.name,
          args[0].c_str());
  PrintGroupUsage(stderr, group);
  return kExitUsage;
}

}  // namespace mycel::cli
