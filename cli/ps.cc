// mycel ps
#include <stdio.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cli/call.h"
#include "cli/cli.h"
#include "cli/executable.h"
#include "mycel/v1/cells.grpc.pb.h"

namespace mycel::cli {
namespace {

int Ps(Context& ctx, const std::vector<std::string>& args) {
  if (args.size() > 1) {
    fprintf(stderr, "usage: mycel ps [CELL]\n");
    return kExitUsage;
  }
  mycel::v1::ListExecutablesRequest req;
  if (!args.empty()) req.set_cell(args[0]);
  return CallAndPrint(
      ctx, &mycel::v1::Executables::Stub::List, req,
      [](const mycel::v1::ListExecutablesResponse& resp) {
        std::vector<std::vector<std::string>> rows;
        for (const auto& e : resp.executables()) {
          const auto& s = e.status();
          rows.push_back(
              {e.spec().cell(), e.spec().name(), StateText(s),
               s.pid() ? absl::StrCat(s.pid()) : "-", ExitText(s),
               absl::StrCat(s.restarts()),
               absl::StrJoin(e.spec().command(), " ").substr(0, 40)});
        }
        PrintTable(
            {"CELL", "NAME", "STATE", "PID", "EXIT", "RESTARTS", "COMMAND"},
            rows);
        return kExitOk;
      });
}

constexpr Command kPs[] = {{"", "[CELL]", "list executables", "", Ps}};

}  // namespace

const Group kPsGroup = {"ps", "list executables", kPs};

}  // namespace mycel::cli
