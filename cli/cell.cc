// mycel cell create | ls | get | rm | stats
#include <stdio.h>
#include <string.h>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "cli/call.h"
#include "cli/cell_flags.h"
#include "cli/cli.h"
#include "mycel/v1/cells.grpc.pb.h"

namespace mycel::cli {
namespace {

std::string NamespacesText(const mycel::v1::CellSpec& spec) {
  std::vector<std::string> names;
  for (int ns : spec.isolate()) {
    std::string n =
        mycel::v1::Namespace_Name(static_cast<mycel::v1::Namespace>(ns));
    names.push_back(absl::AsciiStrToLower(n.substr(strlen("NAMESPACE_"))));
  }
  return names.empty() ? "-" : absl::StrJoin(names, ",");
}

std::string Bytes(int64_t b) {
  if (b >= (1LL << 30)) return absl::StrFormat("%.1fG", b / double(1LL << 30));
  if (b >= (1LL << 20)) return absl::StrFormat("%.1fM", b / double(1LL << 20));
  if (b >= (1LL << 10)) return absl::StrFormat("%.1fK", b / double(1LL << 10));
  return absl::StrCat(b);
}

std::string LimitsText(const mycel::v1::Limits& l) {
  std::vector<std::string> parts;
  if (l.has_cpu_max()) parts.push_back(absl::StrFormat("cpu=%g", l.cpu_max()));
  if (l.has_memory_max()) parts.push_back("mem=" + Bytes(l.memory_max()));
  if (l.has_pids_max()) parts.push_back(absl::StrCat("pids=", l.pids_max()));
  return parts.empty() ? "-" : absl::StrJoin(parts, ",");
}

int Create(Context& ctx, const std::vector<std::string>& args) {
  auto parsed = ParseArgs(args, CellValueFlags(), CellBoolFlags());
  if (!parsed.ok()) return ctx.Fail(parsed.status());
  if (parsed->positional.size() != 1) {
    fprintf(stderr, "mycel cell create: want exactly one NAME\n");
    return kExitUsage;
  }
  mycel::v1::CreateCellRequest req;
  req.mutable_spec()->set_name(parsed->positional[0]);
  if (absl::Status s = FillCellSpec(*parsed, req.mutable_spec()); !s.ok()) {
    return ctx.Fail(s);
  }
  return CallAndPrint(ctx, &mycel::v1::Cells::Stub::Create, req,
                      [](const mycel::v1::Cell& cell) {
                        printf("%s\n", cell.spec().name().c_str());
                        return kExitOk;
                      });
}

int List(Context& ctx, const std::vector<std::string>& args) {
  if (!args.empty()) {
    fprintf(stderr, "mycel cell ls: unexpected argument \"%s\"\n",
            args[0].c_str());
    return kExitUsage;
  }
  return CallAndPrint(
      ctx, &mycel::v1::Cells::Stub::List, mycel::v1::ListCellsRequest(),
      [](const mycel::v1::ListCellsResponse& resp) {
        std::vector<std::vector<std::string>> rows;
        for (const auto& c : resp.cells()) {
          rows.push_back(
              {c.spec().name(), NamespacesText(c.spec()),
               LimitsText(c.spec().limits()),
               c.spec().seccomp().empty() ? "default" : c.spec().seccomp(),
               absl::StrCat(c.status().executables_running(), "/",
                            c.status().executables_total())});
        }
        PrintTable({"NAME", "ISOLATE", "LIMITS", "SECCOMP", "RUNNING"}, rows);
        return kExitOk;
      });
}

int PrintCell(const mycel::v1::Cell& c) {
  PrintKeyValues({
      {"NAME", c.spec().name()},
      {"ISOLATE", NamespacesText(c.spec())},
      {"LIMITS", LimitsText(c.spec().limits())},
      {"SECCOMP", c.spec().seccomp().empty() ? "default" : c.spec().seccomp()},
      {"ROOTFS", c.spec().rootfs().empty() ? "-" : c.spec().rootfs()},
      {"INIT PID",
       c.status().init_pid() ? absl::StrCat(c.status().init_pid()) : "-"},
      {"CGROUP DRIVER", c.status().cgroup_driver()},
      {"EXECUTABLES",
       absl::StrCat(c.status().executables_running(), " running of ",
                    c.status().executables_total())},
      {"SECURITY", c.status().security_boundary()
                       ? "boundary"
                       : "not a boundary; it shares with the host:"},
  });
  for (const std::string& e : c.status().exposures()) {
    printf("  - %s\n", e.c_str());
  }
  return kExitOk;
}

int Get(Context& ctx, const std::vector<std::string>& args) {
  if (args.size() != 1) {
    fprintf(stderr, "mycel cell get: want exactly one NAME\n");
    return kExitUsage;
  }
  mycel::v1::GetCellRequest req;
  req.set_name(args[0]);
  return CallAndPrint(ctx, &mycel::v1::Cells::Stub::Get, req, PrintCell);
}

int Remove(Context& ctx, const std::vector<std::string>& args) {
  auto parsed = ParseArgs(args, {}, {"--force"}, {{"-f", "--force"}});
  if (!parsed.ok()) return ctx.Fail(parsed.status());
  if (parsed->positional.empty()) {
    fprintf(stderr, "mycel cell rm: want at least one NAME\n");
    return kExitUsage;
  }
  // A channel that cannot be made fails once, not once per name.
  int rc = kExitOk;
  if (Connect<mycel::v1::Cells::Stub>(ctx, &rc) == nullptr) return rc;
  for (const std::string& name : parsed->positional) {
    mycel::v1::DeleteCellRequest req;
    req.set_name(name);
    req.set_force(parsed->has("--force"));
    mycel::v1::DeleteCellResponse resp;
    if (int failed = Call(ctx, &mycel::v1::Cells::Stub::Delete, req, &resp);
        failed != kExitOk) {
      rc = failed;
      continue;
    }
    if (ctx.options().output == Output::kTable) printf("%s\n", name.c_str());
  }
  return rc;
}

int Stats(Context& ctx, const std::vector<std::string>& args) {
  if (args.size() != 1) {
    fprintf(stderr, "mycel cell stats: want exactly one NAME\n");
    return kExitUsage;
  }
  mycel::v1::GetCellRequest req;
  req.set_name(args[0]);
  return CallAndPrint(
      ctx, &mycel::v1::Cells::Stub::Stats, req,
      [](const mycel::v1::CellStats& s) {
        PrintKeyValues({
            {"CPU", absl::StrFormat("%.3fs", s.cpu_usage_usec() / 1e6)},
            {"MEMORY", Bytes(s.memory_current())},
            {"MEMORY PEAK", s.memory_peak() ? Bytes(s.memory_peak()) : "-"},
            {"PIDS", absl::StrCat(s.pids_current())},
            {"OOM KILLS", absl::StrCat(s.oom_kills())},
        });
        return kExitOk;
      });
}

const std::string kCreateDetails =
    std::string(
        "Creates a cell: a cgroup with limits and, optionally, its own "
        "namespaces,\n"
        "seccomp profile and capabilities. Executables started in it share "
        "them.\n\n") +
    kCellFlagsHelp;

const Command kCommands[] = {
    {"create", "NAME [limits] [isolation]", "create a cell",
     kCreateDetails.c_str(), Create},
    {"ls", "", "list cells", "", List},
    {"get", "NAME", "show a cell", "", Get},
    {"rm", "NAME... [--force]", "delete cells",
     "A cell with running executables is deleted only with --force, which\n"
     "kills them first.\n",
     Remove},
    {"stats", "NAME", "resource usage of a cell (from its cgroup)", "", Stats},
};

}  // namespace

const Group kCellGroup = {"cell", "create, list, inspect and delete cells",
                          kCommands};

}  // namespace mycel::cli
