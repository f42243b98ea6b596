// Shared pieces of the mycel CLI: global options, the connection to a
// daemon, output formatting, and the command-group dispatch signature.
#ifndef MYCEL_CLI_CLI_H_
#define MYCEL_CLI_CLI_H_

#include <grpcpp/grpcpp.h>

#include <map>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "google/protobuf/message.h"
#include "mycel/v1/mesh.pb.h"

namespace mycel::cli {

enum class Output { kTable, kJson };

struct GlobalOptions {
  // --socket, else $MYCEL_SOCKET, else myceld's own default (main fills
  // it in).
  std::string socket;
  std::string node;  // HOST:PORT; when set, TCP + mTLS instead of the socket
  std::string tls_ca;
  std::string tls_cert;
  std::string tls_key;
  Output output = Output::kTable;
  int timeout_seconds = 30;
};

// Exit codes: 0 success, 1 the operation failed, 2 bad usage.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;

// Everything a command needs. Owned by main; lives for the whole command.
class Context {
 public:
  explicit Context(GlobalOptions opts) : opts_(std::move(opts)) {}

  const GlobalOptions& options() const { return opts_; }
  // The daemon's address as shown to users: unix:///run/... or host:port.
  std::string Target() const;
  // The channel to the daemon, created on first use. Errors (unreadable TLS
  // files) are reported with the flag that named them.
  absl::StatusOr<std::shared_ptr<grpc::Channel>> Channel();
  // A client context with the configured deadline.
  std::unique_ptr<grpc::ClientContext> NewCall() const;

  // Prints "mycel: <message>" for a failed RPC and returns the exit code.
  // UNAVAILABLE becomes "cannot reach myceld at <target>: is it running?".
  int Fail(const grpc::Status& status) const;
  int Fail(const absl::Status& status) const;

  // Prints `msg` as JSON (stable proto field names, defaults included) and
  // returns the exit code.
  int PrintJson(const google::protobuf::Message& msg) const;

 private:
  // The channel of --node with the credentials of the config file at
  // `path`.
  absl::StatusOr<std::shared_ptr<grpc::Channel>> ConfigChannel(
      const std::string& path, const mycel::v1::CliConfig& config,
      grpc::ChannelArguments args);

  GlobalOptions opts_;
  std::shared_ptr<grpc::Channel> channel_;
};

// One command of a group: `mycel GROUP NAME ARGS`. `fn` receives the
// arguments after NAME.
struct Command {
  const char* name;
  const char* args;     // synopsis of the arguments, for usage lines
  const char* summary;  // one line
  const char* details;  // further help text, may be empty
  int (*fn)(Context& ctx, const std::vector<std::string>& args);
};

// A command group, `mycel GROUP ...`, with its commands. A group with a
// single command named "" is a top-level command (`mycel run ...`).
struct Group {
  const char* name;
  const char* summary;
  std::span<const Command> commands;
};

// Flags of one command: "--name value", "--name=value", boolean "--name",
// positional words, and everything after "--".
struct ParsedArgs {
  std::map<std::string, std::vector<std::string>> values;
  std::set<std::string> bools;
  std::vector<std::string> positional;
  std::vector<std::string> rest;  // after "--"
  bool has(const std::string& flag) const {
    return bools.count(flag) != 0 || values.count(flag) != 0;
  }
  // The last value given for `flag`, or `fallback`.
  std::string get(const std::string& flag,
                  const std::string& fallback = "") const;
};

// Parses `args` for flags that take a value (`with_value`) and boolean ones
// (`booleans`); short aliases map to long names through `aliases` (e.g.
// {"-f", "--follow"}). An unknown flag is INVALID_ARGUMENT naming it.
absl::StatusOr<ParsedArgs> ParseArgs(
    const std::vector<std::string>& args,
    const std::set<std::string>& with_value,
    const std::set<std::string>& booleans,
    const std::map<std::string, std::string>& aliases = {});

// The dispatch table of every group (defined in main.cc).
std::span<const Group> Groups();

// Groups, one file each.
extern const Group kNodeGroup;
extern const Group kCellGroup;
extern const Group kExecGroup;
extern const Group kPsGroup;
extern const Group kStopGroup;
extern const Group kKillGroup;
extern const Group kLogsGroup;
extern const Group kWaitGroup;
extern const Group kRunGroup;
extern const Group kCompletionGroup;
extern const Group kMeshGroup;
extern const Group kStateGroup;
extern const Group kQueryGroup;

// Runs `args` (what follows the group's name) against `group`, handling
// --help for the group and for each command.
int Dispatch(Context& ctx, const Group& group,
             const std::vector<std::string>& args);

// Prints a table with a header row, columns padded to their widest cell.
void PrintTable(const std::vector<std::string>& header,
                const std::vector<std::vector<std::string>>& rows);

// Prints a two-column table of key/value rows.
void PrintKeyValues(
    const std::vector<std::pair<std::string, std::string>>& rows);

// True when `args` asks for help (-h/--help anywhere).
bool WantsHelp(const std::vector<std::string>& args);

}  // namespace mycel::cli

#endif  // MYCEL_CLI_CLI_H_
