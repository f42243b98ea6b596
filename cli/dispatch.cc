#include <stdio.h>
#include <string.h>

#include <algorithm>

#include "cli/cli.h"

namespace mycel::cli {
namespace {

void PrintGroupUsage(FILE* out, const Group& group) {
  fprintf(out, "usage: mycel %s COMMAND [ARGS]\n\n%s\n\ncommands:\n",
          group.name, group.summary);
  // The summaries start in one column, one space past the longest name.
  int width = 10;
  for (const Command& c : group.commands) {
    width = std::max(width, static_cast<int>(strlen(c.name)));
  }
  for (const Command& c : group.commands) {
    fprintf(out, "  %-*s %s\n", width, c.name, c.summary);
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

std::string ParsedArgs::get(const std::string& flag,
                            const std::string& fallback) const {
  auto it = values.find(flag);
  return it == values.end() || it->second.empty() ? fallback
                                                  : it->second.back();
}

absl::StatusOr<ParsedArgs> ParseArgs(
    const std::vector<std::string>& args,
    const std::set<std::string>& with_value,
    const std::set<std::string>& booleans,
    const std::map<std::string, std::string>& aliases) {
  ParsedArgs out;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string a = args[i];
    if (a == "--") {
      out.rest.assign(args.begin() + i + 1, args.end());
      break;
    }
    if (a.size() < 2 || a[0] != '-') {
      out.positional.push_back(a);
      continue;
    }
    std::string value;
    bool inline_value = false;
    if (size_t eq = a.find('='); eq != std::string::npos) {
      value = a.substr(eq + 1);
      a = a.substr(0, eq);
      inline_value = true;
    }
    if (auto al = aliases.find(a); al != aliases.end()) a = al->second;
    if (booleans.count(a) != 0 && !inline_value) {
      out.bools.insert(a);
    } else if (with_value.count(a) != 0) {
      if (!inline_value) {
        if (i + 1 >= args.size()) {
          return absl::InvalidArgumentError(a + ": missing value");
        }
        value = args[++i];
      }
      out.values[a].push_back(value);
    } else {
      return absl::InvalidArgumentError("unknown flag " + a + " (see --help)");
    }
  }
  return out;
}

int Dispatch(Context& ctx, const Group& group,
             const std::vector<std::string>& args) {
  // A top-level command: `mycel run ...`.
  if (group.commands.size() == 1 && group.commands[0].name[0] == '\0') {
    const Command& c = group.commands[0];
    if (WantsHelp(args)) {
      printf("usage: mycel %s%s%s\n\n%s\n", group.name, c.args[0] ? " " : "",
             c.args, c.summary);
      if (c.details[0]) printf("\n%s", c.details);
      return kExitOk;
    }
    return c.fn(ctx, args);
  }
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
