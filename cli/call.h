// How a command calls myceld: make the channel, call, on error print why
// and pick the exit code, else print the answer as a table or as JSON.
// Every command goes through these, so that they fail and print alike.
#ifndef MYCEL_CLI_CALL_H_
#define MYCEL_CLI_CALL_H_

#include <grpcpp/grpcpp.h>
#include <stdio.h>

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "cli/cli.h"
#include "google/protobuf/message.h"

namespace mycel::cli {

// A unary method of a generated stub: &mycel::v1::Node::Stub::GetInfo.
template <typename Stub, typename Request, typename Response>
using UnaryMethod = grpc::Status (Stub::*)(grpc::ClientContext*, const Request&,
                                           Response*);

struct CallOptions {
  // The --timeout deadline; off for a call that lasts as long as what it
  // waits for (Wait).
  bool deadline = true;
  // Handles a failed call instead of Context::Fail; returns the exit code.
  std::function<int(const grpc::Status&)> on_error;
};

// OK, or INVALID_ARGUMENT "<field>: not UTF-8: ..." for the first string
// field of `request` (nested ones too: "cell.process.args[2]") that is not
// UTF-8. gRPC 1.51 would refuse such a request with UNIMPLEMENTED and no
// message (proto3 strings must be UTF-8; a Unix argument need not be).
absl::Status CheckUtf8Fields(const google::protobuf::Message& request);

// A stub of `Stub`'s service on the context's channel. When the channel
// cannot be made (an unreadable TLS file), prints why (Context::Fail),
// stores the exit code in `*exit_code` and returns null. Streaming calls
// use it directly; unary ones go through Call.
template <typename Stub>
std::unique_ptr<Stub> Connect(Context& ctx, int* exit_code) {
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = ctx.Channel();
  if (!channel.ok()) {
    *exit_code = ctx.Fail(channel.status());
    return nullptr;
  }
  return std::make_unique<Stub>(*channel);
}

// Calls `method` with `request`. Returns kExitOk with `*response` filled
// in, or prints why the call failed and returns that exit code.
template <typename Stub, typename Request, typename Response>
int Call(Context& ctx, UnaryMethod<Stub, Request, Response> method,
         const Request& request, Response* response,
         const CallOptions& options = {}) {
  if (absl::Status utf8 = CheckUtf8Fields(request); !utf8.ok()) {
    fprintf(stderr, "mycel: %s\n", std::string(utf8.message()).c_str());
    return kExitFailure;
  }
  int exit_code = kExitOk;
  std::unique_ptr<Stub> stub = Connect<Stub>(ctx, &exit_code);
  if (stub == nullptr) return exit_code;
  std::unique_ptr<grpc::ClientContext> call =
      options.deadline ? ctx.NewCall()
                       : std::make_unique<grpc::ClientContext>();
  grpc::Status status = ((*stub).*method)(call.get(), request, response);
  if (status.ok()) return kExitOk;
  return options.on_error ? options.on_error(status) : ctx.Fail(status);
}

// Prints `msg` as JSON with -o json; otherwise runs `table`, which prints
// it for people. Returns the exit code.
template <typename Table>
int Print(const Context& ctx, const google::protobuf::Message& msg,
          Table table) {
  if (ctx.options().output == Output::kJson) return ctx.PrintJson(msg);
  return table();
}

// Call, then Print: `table(response)` prints the answer for people and
// returns the exit code.
template <typename Stub, typename Request, typename Response, typename Table>
int CallAndPrint(Context& ctx, UnaryMethod<Stub, Request, Response> method,
                 const Request& request, Table table,
                 const CallOptions& options = {}) {
  Response response;
  int exit_code = Call(ctx, method, request, &response, options);
  if (exit_code != kExitOk) return exit_code;
  return Print(ctx, response, [&] { return table(response); });
}

}  // namespace mycel::cli

#endif  // MYCEL_CLI_CALL_H_
