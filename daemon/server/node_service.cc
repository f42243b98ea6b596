#include "daemon/server/node_service.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "daemon/server/status_convert.h"
#include "proto/proto_time.h"
#include "runtime/log.h"
#include "runtime/process.h"

namespace mycel {
namespace {

mycel::v1::CgroupMode ToProto(CgroupMode mode) {
  switch (mode) {
    case CgroupMode::kV2:
      return mycel::v1::CGROUP_MODE_V2;
    case CgroupMode::kHybrid:
      return mycel::v1::CGROUP_MODE_HYBRID;
    case CgroupMode::kV1:
      return mycel::v1::CGROUP_MODE_V1;
    case CgroupMode::kNone:
      return mycel::v1::CGROUP_MODE_NONE;
  }
  return mycel::v1::CGROUP_MODE_UNSPECIFIED;
}

}  // namespace

grpc::Status NodeService::GetInfo(grpc::ServerContext*,
                                  const mycel::v1::GetInfoRequest*,
                                  mycel::v1::NodeInfo* resp) {
  resp->set_name(params_.node_name);
  resp->set_version(MYCEL_VERSION);
  ToProto(absl::Now() - params_.started, resp->mutable_uptime());
  resp->set_kernel_release(params_.host.kernel_release);
  resp->set_cgroup_mode(ToProto(params_.host.cgroup_mode));
  mycel::v1::HostFeatures* f = resp->mutable_features();
  f->set_seccomp(params_.host.seccomp);
  f->set_bpf(params_.host.bpf);
  f->set_btf(params_.host.btf);
  f->set_kvm(params_.host.kvm);
  f->set_user_namespaces(params_.host.user_namespaces);
  f->set_cgroup_favordynmods(params_.host.cgroup_favordynmods);
  for (const auto& c : params_.host.cgroup_v1_controllers) {
    f->add_cgroup_v1_controllers(c);
  }
  for (const auto& c : params_.host.cgroup_v2_controllers) {
    f->add_cgroup_v2_controllers(c);
  }
  resp->set_pid(CurrentPid());
  resp->set_pid1(CurrentPid() == 1);
  resp->set_state_dir(params_.state_dir);
  resp->set_schema_version(params_.schema_version);
  ToProto(params_.boot_to_start, resp->mutable_boot_to_start());
  ToProto(absl::Nanoseconds(start_to_ready_ns_.load()),
          resp->mutable_start_to_ready());
  resp->set_safe_mode(params_.safe_mode);
  resp->set_init_role(params_.init_role);
  if (params_.orphans_reaped)
    resp->set_orphans_reaped(params_.orphans_reaped());
  return grpc::Status::OK;
}

grpc::Status NodeService::Shutdown(grpc::ServerContext* ctx,
                                   const mycel::v1::ShutdownRequest* req,
                                   mycel::v1::ShutdownResponse*) {
  if (!mycel::v1::ShutdownMode_IsValid(req->mode())) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("mode: unknown value ", req->mode()));
  }
  log::Info("shutdown requested",
            {{"peer", ctx->peer()},
             {"mode", mycel::v1::ShutdownMode_Name(req->mode())}});
  params_.on_shutdown(req->mode());
  return grpc::Status::OK;
}

grpc::Status NodeService::GetStats(grpc::ServerContext*,
                                   const mycel::v1::GetStatsRequest* req,
                                   mycel::v1::NodeStats* resp) {
  constexpr size_t kMaxPrefix = 256;
  if (req->prefix().size() > kMaxPrefix) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("prefix: ", req->prefix().size(),
                                     " bytes, more than ", kMaxPrefix));
  }
  if (!params_.counters) return grpc::Status::OK;
  absl::StatusOr<std::vector<std::pair<std::string, int64_t>>> counters =
      params_.counters();
  if (!counters.ok()) return ToGrpc(counters.status());
  std::sort(counters->begin(), counters->end());
  for (const auto& [name, value] : *counters) {
    if (!absl::StartsWith(name, req->prefix())) continue;
    mycel::v1::Counter* c = resp->add_counters();
    c->set_name(name);
    c->set_value(value);
  }
  return grpc::Status::OK;
}

}  // namespace mycel
