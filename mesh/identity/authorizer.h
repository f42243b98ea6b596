// Authorizer: the one place where myceld decides who may make a call. It is
// the gRPC AuthMetadataProcessor of an endpoint's server credentials, so
// gRPC runs it before every call on that endpoint (on connections already
// open too), and a call it refuses never reaches a handler: the client gets
// UNAUTHENTICATED (no valid identity) or PERMISSION_DENIED (an identity the
// rule does not admit), with a message naming the rule.
//
// Handlers ask the same object who their caller is (CallerOf), so that the
// decision and what a handler sees cannot disagree.
#ifndef MYCEL_MESH_IDENTITY_AUTHORIZER_H_
#define MYCEL_MESH_IDENTITY_AUTHORIZER_H_

#include <grpcpp/security/auth_context.h>
#include <grpcpp/security/auth_metadata_processor.h>
#include <grpcpp/server_context.h>

#include <atomic>
#include <cstdint>

#include "absl/status/statusor.h"
#include "mesh/identity/access_rules.h"
#include "mesh/identity/caller.h"
#include "mesh/identity/flood_guard.h"
#include "mesh/identity/trust.h"
#include "runtime/clock.h"

namespace mycel::identity {

// Thread-safe. `trust`, `rules` and `clock` must outlive it and every
// server it is installed in.
class Authorizer final : public grpc::AuthMetadataProcessor {
 public:
  enum class Endpoint {
    kLocal,  // the unix socket: every caller is Caller::Local()
    kTcp,    // mutual TLS: the caller is the client certificate's identity
  };

  Authorizer(Endpoint endpoint, const Trust* trust, const AccessRules* rules,
             const Clock* clock)
      : endpoint_(endpoint), trust_(trust), rules_(rules), clock_(clock) {}

  // The checks are in memory (a verified certificate is remembered by its
  // hash), so they run on gRPC's own thread.
  bool IsBlocking() const override { return false; }

  grpc::Status Process(const InputMetadata& metadata,
                       grpc::AuthContext* context, OutputMetadata* consumed,
                       OutputMetadata* response) override;

  // Who makes the call of `ctx` (served on this endpoint).
  absl::StatusOr<Caller> CallerOf(const grpc::ServerContextBase& ctx) const;
  absl::StatusOr<Caller> CallerOf(const grpc::AuthContext& auth) const;

  // The decision for `method` given `auth`, as Process makes it.
  absl::Status Decide(absl::string_view method,
                      const grpc::AuthContext& auth) const;

  // The trust's generation (identity::Trust::generation): it changes with
  // the CA and the revocation list.
  uint64_t trust_generation() const { return trust_->generation(); }

  // From now on every call on this endpoint is counted by `guard` first
  // (FloodGuard::Opened), and refused while its identity is banned. Set
  // before the server starts; `guard` must outlive the server.
  void set_flood_guard(FloodGuard* guard) { guard_ = guard; }

  // Calls refused so far.
  uint64_t denied() const { return denied_.load(std::memory_order_relaxed); }

 private:
  const Endpoint endpoint_;
  const Trust* const trust_;
  const AccessRules* const rules_;
  const Clock* const clock_;
  std::atomic<uint64_t> denied_{0};
  FloodGuard* guard_ = nullptr;
};

// The gRPC status for an absl::Status (same code and message).
grpc::Status ToGrpcStatus(const absl::Status& status);

}  // namespace mycel::identity

#endif  // MYCEL_MESH_IDENTITY_AUTHORIZER_H_
