#include "mesh/identity/authorizer.h"

#include <grpc/grpc_security_constants.h>

#include <string>

#include "runtime/log.h"

namespace mycel::identity {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

absl::StatusOr<Caller> Authorizer::CallerOf(
    const grpc::AuthContext& auth) const {
  if (endpoint_ == Endpoint::kLocal) return Caller::Local();
  std::vector<grpc::string_ref> pems =
      auth.FindPropertyValues(GRPC_X509_PEM_CERT_PROPERTY_NAME);
  if (pems.empty()) return Caller{};
  return trust_->Identify(absl::string_view(pems[0].data(), pems[0].size()),
                          clock_->Now());
}

absl::StatusOr<Caller> Authorizer::CallerOf(
    const grpc::ServerContextBase& ctx) const {
  std::shared_ptr<const grpc::AuthContext> auth = ctx.auth_context();
  if (auth == nullptr) {
    if (endpoint_ == Endpoint::kLocal) return Caller::Local();
    return Caller{};
  }
  return CallerOf(*auth);
}

absl::Status Authorizer::Decide(absl::string_view method,
                                const grpc::AuthContext& auth) const {
  absl::StatusOr<Caller> caller = CallerOf(auth);
  if (!caller.ok()) {
    // A certificate was presented and refused (another CA, expired,
    // revoked): only what anyone may call is still open to it, as to a
    // caller with none.
    const Access* access = rules_->Find(method);
    if (access != nullptr && *access == Access::kAnyone) {
      return absl::OkStatus();
    }
    return caller.status();
  }
  return rules_->Check(method, *caller);
}

grpc::Status Authorizer::Process(const InputMetadata& metadata,
                                 grpc::AuthContext* context,
                                 OutputMetadata* /*consumed*/,
                                 OutputMetadata* /*response*/) {
  auto path = metadata.find(":path");
  absl::string_view method;
  if (path != metadata.end()) {
    method = absl::string_view(path->second.data(), path->second.size());
  }
  if (guard_ != nullptr && !guard_->Opened(FloodGuard::IdentityOf(context))) {
    denied_.fetch_add(1, std::memory_order_relaxed);
    return grpc::Status(
        grpc::StatusCode::RESOURCE_EXHAUSTED,
        "this certificate opened too many calls that never reached this "
        "node (HTTP/2 streams reset at once?); it is refused for a while");
  }
  absl::Status s = Decide(method, *context);
  if (s.ok()) return grpc::Status::OK;
  denied_.fetch_add(1, std::memory_order_relaxed);
  log::Debug("call denied", {{"method", std::string(method)}, {"error", s}});
  return ToGrpcStatus(s);
}

}  // namespace mycel::identity
