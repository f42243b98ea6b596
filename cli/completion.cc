// mycel completion bash
#include <stdio.h>

#include <string>

#include "cli/cli.h"

namespace mycel::cli {
namespace {

int Bash(Context&, const std::vector<std::string>& args) {
  if (!args.empty()) {
    fprintf(stderr, "mycel completion bash: unexpected argument \"%s\"\n",
            args[0].c_str());
    return kExitUsage;
  }
  std::string groups;
  std::string cases;
  for (const Group& g : Groups()) {
    if (!groups.empty()) groups += ' ';
    groups += g.name;
    std::string cmds;
    for (const Command& c : g.commands) {
      if (!cmds.empty()) cmds += ' ';
      cmds += c.name;
    }
    cases += "    " + std::string(g.name) + ") words=\"" + cmds + "\" ;;\n";
  }
  printf(
      R"(# bash completion for mycel; load with: source <(mycel completion bash)
_mycel() {
  local cur prev group i words
  cur="${COMP_WORDS[COMP_CWORD]}"
  prev="${COMP_WORDS[COMP_CWORD-1]}"
  case "$prev" in
    --socket|--tls-ca|--tls-cert|--tls-key) COMPREPLY=($(compgen -f -- "$cur")); return ;;
    -o|--output) COMPREPLY=($(compgen -W "table json" -- "$cur")); return ;;
    --node) return ;;
  esac
  group=""
  for ((i=1; i<COMP_CWORD; i++)); do
    case "${COMP_WORDS[i]}" in
      --socket|--node|--tls-ca|--tls-cert|--tls-key|-o|--output|--timeout) ((i++)) ;;
      -*) ;;
      *) group="${COMP_WORDS[i]}"; break ;;
    esac
  done
  if [[ "$cur" == -* ]]; then
    COMPREPLY=($(compgen -W "--socket --node --tls-ca --tls-cert --tls-key -o --output --timeout --help" -- "$cur"))
    return
  fi
  if [[ -z "$group" ]]; then
    COMPREPLY=($(compgen -W "%s" -- "$cur"))
    return
  fi
  if [[ $((i+1)) -eq $COMP_CWORD ]]; then
    case "$group" in
%s      *) words="" ;;
    esac
    COMPREPLY=($(compgen -W "$words" -- "$cur"))
  fi
}
complete -F _mycel mycel
)",
      groups.c_str(), cases.c_str());
  return kExitOk;
}

constexpr Command kCommands[] = {
    {"bash", "", "print a bash completion script",
     "Load it in the current shell with: source <(mycel completion bash)\n",
     Bash},
};

}  // namespace

const Group kCompletionGroup = {"completion", "shell completion scripts",
                                kCommands};

}  // namespace mycel::cli
