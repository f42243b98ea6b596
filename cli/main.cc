// mycel: the command-line client of myceld.
#include <stdio.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "cli/cli.h"
#include "proto/daemon_defaults.h"

namespace mycel::cli {
namespace {

constexpr const Group* kGroups[] = {
    &kNodeGroup,  &kCellGroup,  &kRunGroup,       &kExecGroup, &kPsGroup,
    &kStopGroup,  &kKillGroup,  &kLogsGroup,      &kWaitGroup, &kMeshGroup,
    &kStateGroup, &kQueryGroup, &kCompletionGroup};

// myceld's default socket, as config.proto writes it. Read only when no
// socket is given: reading it builds the schema's descriptors.
const std::string& DefaultSocket() {
  return DaemonDefault(mycel::v1::DaemonConfig::kSocketFieldNumber);
}

void PrintUsage(FILE* out) {
  fprintf(out, "usage: mycel [global options] COMMAND [ARGS]\n\ncommands:\n");
  for (const Group* g : kGroups) {
    fprintf(out, "  %-12s %s\n", g->name, g->summary);
  }
  fprintf(out,
          R"(
global options (before or after the command; after it, a flag of the
command's own of the same name is the command's):
  --socket PATH        myceld's unix socket (default %s,
                       or $MYCEL_SOCKET)
  --node HOST:PORT     talk to a remote node over TCP with mutual TLS, with
                       the credentials of $MYCEL_CONFIG, else of
                       $XDG_CONFIG_HOME/mycel/config.json, unless --tls-* given
  --tls-ca FILE        CA certificate that the node's certificate chains to
  --tls-cert FILE      client certificate
  --tls-key FILE       client private key
  -o, --output FORMAT  table (default) or json
  --timeout SECONDS    deadline for each call (default 30)
  -h, --help           help for mycel or for a command

Run 'mycel COMMAND --help' for its options.
)",
          DefaultSocket().c_str());
}

// The command that `words` (the group, then the command's name) name, or
// null while they name none yet.
const Command* FindCommand(const std::vector<std::string>& words) {
  if (words.empty()) return nullptr;
  for (const Group* g : kGroups) {
    if (words[0] != g->name) continue;
    if (g->commands.size() == 1 && g->commands[0].name[0] == '\0') {
      return &g->commands[0];
    }
    if (words.size() < 2) return nullptr;
    for (const Command& c : g->commands) {
      if (words[1] == c.name) return &c;
    }
  }
  return nullptr;
}

// Whether `c`'s synopsis names the flag `name` (as in "[--node|--user]"):
// after the command's name, the flag is the command's, not the global one
// (`mycel mesh revoke b --node` revokes the node b).
bool OwnsFlag(const Command* c, const std::string& name) {
  if (c == nullptr) return false;
  const std::string args = c->args;
  for (size_t at = args.find(name); at != std::string::npos;
       at = args.find(name, at + 1)) {
    const size_t end = at + name.size();
    const bool starts = at == 0 || args[at - 1] == ' ' || args[at - 1] == '[' ||
                        args[at - 1] == '|';
    const bool ends = end == args.size() || args[end] == ' ' ||
                      args[end] == ']' || args[end] == '|';
    if (starts && ends) return true;
  }
  return false;
}

// Pulls the global options out of `args` (anywhere before "--") and leaves
// the rest in order; a flag the command itself names is left to it.
// Returns false after printing an error.
bool ParseGlobals(std::vector<std::string>& args, GlobalOptions* opts) {
  bool socket_given = false;
  if (const char* env = getenv("MYCEL_SOCKET"); env != nullptr && *env) {
    opts->socket = env;
    socket_given = true;
  }
  std::vector<std::string> rest;
  std::vector<std::string> words;  // the group and command names seen
  const Command* command = nullptr;
  bool passthrough = false;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string a = args[i];
    if (passthrough || a == "--") {
      passthrough = true;
      rest.push_back(a);
      continue;
    }
    std::string name = a, value;
    bool has_value = false;
    if (a.rfind("--", 0) == 0 && a.find('=') != std::string::npos) {
      name = a.substr(0, a.find('='));
      value = a.substr(a.find('=') + 1);
      has_value = true;
    }
    std::string* target = nullptr;
    if (name == "--socket") target = &opts->socket;
    if (name == "--node") target = &opts->node;
    if (name == "--tls-ca") target = &opts->tls_ca;
    if (name == "--tls-cert") target = &opts->tls_cert;
    if (name == "--tls-key") target = &opts->tls_key;
    bool is_output = name == "-o" || name == "--output";
    bool is_timeout = name == "--timeout";
    if ((target == nullptr && !is_output && !is_timeout) ||
        OwnsFlag(command, name)) {
      rest.push_back(a);
      if (command == nullptr && a.rfind("-", 0) != 0 && words.size() < 2) {
        words.push_back(a);
        command = FindCommand(words);
      }
      continue;
    }
    if (!has_value) {
      if (i + 1 >= args.size()) {
        fprintf(stderr, "mycel: %s: missing value\n", name.c_str());
        return false;
      }
      value = args[++i];
    }
    if (target != nullptr) {
      *target = value;
      socket_given |= target == &opts->socket;
    } else if (is_output) {
      if (value == "table") {
        opts->output = Output::kTable;
      } else if (value == "json") {
        opts->output = Output::kJson;
      } else {
        fprintf(stderr, "mycel: --output: want table or json, got \"%s\"\n",
                value.c_str());
        return false;
      }
    } else if (!absl::SimpleAtoi(value, &opts->timeout_seconds) ||
               opts->timeout_seconds <= 0) {
      fprintf(
          stderr,
          "mycel: --timeout: want a positive number of seconds, got \"%s\"\n",
          value.c_str());
      return false;
    }
  }
  if (!socket_given) opts->socket = DefaultSocket();
  args = std::move(rest);
  return true;
}

}  // namespace

std::span<const Group> Groups() {
  static const std::vector<Group> groups = [] {
    std::vector<Group> v;
    for (const Group* g : kGroups) v.push_back(*g);
    return v;
  }();
  return groups;
}

}  // namespace mycel::cli

int main(int argc, char** argv) {
  using namespace mycel::cli;
  std::vector<std::string> args(argv + 1, argv + argc);
  GlobalOptions opts;
  if (!ParseGlobals(args, &opts)) return kExitUsage;
  if (args.empty()) {
    PrintUsage(stderr);
    return kExitUsage;
  }
  if (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
    PrintUsage(stdout);
    return kExitOk;
  }
  if (args[0] == "--version" || args[0] == "version") {
    printf("mycel %s\n", MYCEL_VERSION);
    return kExitOk;
  }
  for (const Group* g : kGroups) {
    if (args[0] != g->name) continue;
    Context ctx(opts);
    int rc = Dispatch(ctx, *g,
                      std::vector<std::string>(args.begin() + 1, args.end()));
    // Exit without tearing gRPC down. Destroying the channel quiesces its
    // event engine's threads, and there abseil's Mutex can take its first
    // timed wait, which measures the CPU's frequency by sleeping: 3 ms in
    // about half the runs here, more than the RPC. Every call has finished;
    // only stdio has anything left to write.
    fflush(stdout);
    fflush(stderr);
    _exit(rc);
  }
  fprintf(stderr, "mycel: unknown command group \"%s\"\n\n", args[0].c_str());
  PrintUsage(stderr);
  return kExitUsage;
}
