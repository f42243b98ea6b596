// mycel node info | stats | health | shutdown
#include <stdio.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "cli/call.h"
#include "cli/cli.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "mycel/v1/node.grpc.pb.h"

namespace mycel::cli {
namespace {

std::string Yes(bool b) { return b ? "yes" : "no"; }

std::string CgroupModeText(mycel::v1::CgroupMode m) {
  switch (m) {
    case mycel::v1::CGROUP_MODE_V2:
      return "v2";
    case mycel::v1::CGROUP_MODE_HYBRID:
      return "hybrid";
    case mycel::v1::CGROUP_MODE_V1:
      return "v1";
    case mycel::v1::CGROUP_MODE_NONE:
      return "none";
    default:
      return "unknown";
  }
}

std::string FormatUptime(const google::protobuf::Duration& d) {
  int64_t s = d.seconds();
  if (s >= 86400)
    return absl::StrFormat("%dd%dh%dm", s / 86400, s % 86400 / 3600,
                           s % 3600 / 60);
  if (s >= 3600)
    return absl::StrFormat("%dh%dm%ds", s / 3600, s % 3600 / 60, s % 60);
  if (s >= 60) return absl::StrFormat("%dm%ds", s / 60, s % 60);
  return absl::StrFormat("%.1fs", s + d.nanos() / 1e9);
}

int PrintInfo(const mycel::v1::NodeInfo& info) {
  const auto& f = info.features();
  std::vector<std::string> v1(f.cgroup_v1_controllers().begin(),
                              f.cgroup_v1_controllers().end());
  std::vector<std::string> v2(f.cgroup_v2_controllers().begin(),
                              f.cgroup_v2_controllers().end());
  PrintKeyValues({
      {"NAME", info.name()},
      {"VERSION", info.version()},
      {"UPTIME", FormatUptime(info.uptime())},
      {"PID", absl::StrCat(info.pid(), info.pid1() ? " (PID 1)" : "")},
      {"KERNEL", info.kernel_release()},
      {"CGROUP MODE", CgroupModeText(info.cgroup_mode())},
      {"CGROUP V1", v1.empty() ? "-" : absl::StrJoin(v1, ",")},
      {"CGROUP V2", v2.empty() ? "-" : absl::StrJoin(v2, ",")},
      {"FAVORDYNMODS", Yes(f.cgroup_favordynmods())},
      {"SECCOMP", Yes(f.seccomp())},
      {"BPF", Yes(f.bpf())},
      {"BTF", Yes(f.btf())},
      {"KVM", Yes(f.kvm())},
      {"USER NAMESPACES", Yes(f.user_namespaces())},
      {"STATE DIR", info.state_dir()},
      {"SCHEMA", absl::StrCat(info.schema_version())},
      {"INIT ROLE", info.init_role()},
      {"START TO READY",
       absl::StrFormat("%.1f ms", info.start_to_ready().seconds() * 1e3 +
                                      info.start_to_ready().nanos() / 1e6)},
      {"ORPHANS REAPED", absl::StrCat(info.orphans_reaped())},
  });
  if (!info.safe_mode().empty()) {
    printf("SAFE MODE: %s\n", info.safe_mode().c_str());
  }
  return kExitOk;
}

int Info(Context& ctx, const std::vector<std::string>& args) {
  if (!args.empty()) {
    fprintf(stderr, "mycel node info: unexpected argument \"%s\"\n",
            args[0].c_str());
    return kExitUsage;
  }
  return CallAndPrint(ctx, &mycel::v1::Node::Stub::GetInfo,
                      mycel::v1::GetInfoRequest(), PrintInfo);
}

int Stats(Context& ctx, const std::vector<std::string>& args) {
  mycel::v1::GetStatsRequest req;
  if (args.size() > 1) {
    fprintf(stderr, "mycel node stats: unexpected argument \"%s\"\n",
            args[1].c_str());
    return kExitUsage;
  }
  if (!args.empty()) req.set_prefix(args[0]);
  return CallAndPrint(ctx, &mycel::v1::Node::Stub::GetStats, req,
                      [](const mycel::v1::NodeStats& stats) {
                        std::vector<std::vector<std::string>> rows;
                        for (const mycel::v1::Counter& c : stats.counters()) {
                          rows.push_back({c.name(), absl::StrCat(c.value())});
                        }
                        PrintTable({"COUNTER", "VALUE"}, rows);
                        return kExitOk;
                      });
}

int Health(Context& ctx, const std::vector<std::string>& args) {
  std::string service;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--service" && i + 1 < args.size()) {
      service = args[++i];
    } else {
      fprintf(stderr, "mycel node health: unexpected argument \"%s\"\n",
              args[i].c_str());
      return kExitUsage;
    }
  }
  grpc::health::v1::HealthCheckRequest req;
  req.set_service(service);
  grpc::health::v1::HealthCheckResponse resp;
  CallOptions options;
  options.on_error = [&](const grpc::Status& st) {
    if (st.error_code() != grpc::StatusCode::NOT_FOUND) return ctx.Fail(st);
    fprintf(stderr, "mycel: health: service \"%s\" is not known to myceld\n",
            service.c_str());
    return kExitFailure;
  };
  int rc =
      Call(ctx, &grpc::health::v1::Health::Stub::Check, req, &resp, options);
  if (rc == kExitOk) {
    rc = Print(ctx, resp, [&] {
      printf("%s\n", grpc::health::v1::HealthCheckResponse::ServingStatus_Name(
                         resp.status())
                         .c_str());
      return kExitOk;
    });
  }
  if (rc != kExitOk) return rc;
  return resp.status() == grpc::health::v1::HealthCheckResponse::SERVING
             ? kExitOk
             : kExitFailure;
}

int Shutdown(Context& ctx, const std::vector<std::string>& args) {
  mycel::v1::ShutdownRequest req;
  req.set_mode(mycel::v1::SHUTDOWN_MODE_POWEROFF);
  for (const auto& a : args) {
    if (a == "--reboot") {
      req.set_mode(mycel::v1::SHUTDOWN_MODE_REBOOT);
    } else if (a == "--halt") {
      req.set_mode(mycel::v1::SHUTDOWN_MODE_HALT);
    } else if (a == "--poweroff") {
      req.set_mode(mycel::v1::SHUTDOWN_MODE_POWEROFF);
    } else {
      fprintf(stderr, "mycel node shutdown: unexpected argument \"%s\"\n",
              a.c_str());
      return kExitUsage;
    }
  }
  return CallAndPrint(ctx, &mycel::v1::Node::Stub::Shutdown, req,
                      [](const mycel::v1::ShutdownResponse&) {
                        printf("shutdown requested\n");
                        return kExitOk;
                      });
}

constexpr Command kCommands[] = {
    {"info", "", "show the node's identity, kernel and host features", "",
     Info},
    {"stats", "[PREFIX]",
     "show the node's counters: gossip, replication, listeners, API guards",
     "Counters since the daemon started, sorted by name: membership.*\n"
     "(probes, suspicions, push-pulls, messages and payload bytes, messages\n"
     "refused and why), gossip.* (links to peers), replication.*,\n"
     "listener.unix.* and listener.tcp.* (connections accepted and refused),\n"
     "api.* (streams and waits open, flood bans). PREFIX keeps the counters\n"
     "whose name starts with it: mycel node stats membership.\n",
     Stats},
    {"health", "[--service NAME]",
     "check the daemon's gRPC health; exits 0 when SERVING", "", Health},
    {"shutdown", "[--reboot|--halt|--poweroff]", "stop the daemon gracefully",
     "The daemon stops its workloads and exits. When it is PID 1 of a\n"
     "machine it then powers the machine off, or reboots or halts it.\n",
     Shutdown},
};

}  // namespace

const Group kNodeGroup = {"node", "inspect and control the node", kCommands};

}  // namespace mycel::cli
