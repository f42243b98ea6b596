#include "mesh/identity/peer_calls.h"

#include <grpcpp/client_context.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/tls_certificate_verifier.h>
#include <grpcpp/security/tls_credentials_options.h>

#include <atomic>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "mesh/pki/certificate_authority.h"
#include "mycel/v1/mesh.grpc.pb.h"
#include "runtime/log.h"
#include "runtime/status.h"

namespace mycel::identity {
namespace {

namespace gx = grpc::experimental;
using mycel::v1::Mesh;

absl::Status FromGrpc(const grpc::Status& s, absl::string_view where) {
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                      absl::StrCat(where, ": ", s.error_message()));
}

void SetDeadline(grpc::ClientContext* ctx, absl::Duration timeout) {
  ctx->set_deadline(std::chrono::system_clock::now() +
                    absl::ToChronoMilliseconds(timeout));
}

// TLS that trusts nothing yet: only for fetching the CA, whose hash the
// caller then compares with its pin. Nothing sent on it is secret.
std::shared_ptr<grpc::ChannelCredentials> UnverifiedTls() {
  gx::TlsChannelCredentialsOptions tls;
  tls.set_verify_server_certs(false);
  tls.set_check_call_host(false);
  tls.set_certificate_verifier(std::make_shared<gx::NoOpCertificateVerifier>());
  return gx::TlsCredentials(tls);
}

}  // namespace

absl::Status JoinMesh(MeshNode* node, const JoinOptions& options) {
  ASSIGN_OR_RETURN(pki::JoinToken token, pki::JoinToken::Parse(options.token));
  if (options.advertise.empty()) {
    return absl::FailedPreconditionError(
        "join: this node does not serve the mesh on TCP: start myceld with "
        "--listen HOST:PORT, where the other members will reach it");
  }
  if (node->Status().mesh.size() > 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("this node is already in the mesh ", node->Status().mesh));
  }
  // 1. The CA, from a server not yet trusted.
  std::string ca_pem;
  {
    auto stub =
        Mesh::NewStub(grpc::CreateChannel(options.address, UnverifiedTls()));
    grpc::ClientContext ctx;
    SetDeadline(&ctx, options.timeout);
    mycel::v1::GetCaRequest req;
    mycel::v1::GetCaResponse resp;
    grpc::Status s = stub->GetCa(&ctx, req, &resp);
    if (!s.ok()) {
      absl::Status st = FromGrpc(
          s,
          absl::StrCat("join: asking ", options.address, " for the mesh CA"));
      if (st.code() != absl::StatusCode::kUnavailable) return st;
      // A node that serves no joins closes a connection without a client
      // certificate as soon as the TLS handshake ends, which the client
      // sees as an unavailable server.
      return absl::UnavailableError(absl::StrCat(
          st.message(), " (is ", options.address,
          " up, an authority of the mesh, and is the token still valid? Only "
          "an authority that holds a join token still valid serves joins; "
          "other nodes close connections that carry no mesh certificate)"));
    }
    ca_pem = resp.ca_certificate();
  }
  absl::StatusOr<pki::Certificate> ca = pki::Certificate::FromPem(ca_pem);
  if (!ca.ok()) {
    return absl::UnauthenticatedError(
        absl::StrCat("join: ", options.address,
                     " sent a CA certificate that does not "
                     "parse (",
                     ca.status().message(),
                     "); the join is aborted and "
                     "nothing secret was sent"));
  }
  if (absl::Status pin = token.CheckCa(*ca); !pin.ok()) {
    return absl::UnauthenticatedError(absl::StrCat(
        "join: ", options.address, ": ", pin.message(),
        "; the join is aborted and nothing secret was sent (is the address "
        "right, and the token from this mesh?)"));
  }
  ASSIGN_OR_RETURN(std::string mesh, pki::MeshOfCaCertificate(*ca));
  // 2. This node's key and request.
  ASSIGN_OR_RETURN(auto prepared, node->PrepareJoin(mesh));
  // 3. The token and the request, to a node of the pinned mesh only.
  Admission admitted;
  {
    auto stub = Mesh::NewStub(grpc::CreateChannel(
        options.address,
        PinnedCaCredentials(ca_pem,
                            absl::StrCat("spiffe://", mesh, "/node/"))));
    grpc::ClientContext ctx;
    SetDeadline(&ctx, options.timeout);
    mycel::v1::AdmitRequest req;
    req.set_token_id(token.id());
    req.set_secret(token.secret());
    req.set_csr(prepared.second);
    req.set_address(options.advertise);
    req.set_authority(options.authority);
    mycel::v1::AdmitResponse resp;
    grpc::Status s = stub->Admit(&ctx, req, &resp);
    if (!s.ok()) {
      return FromGrpc(s, absl::StrCat("join via ", options.address));
    }
    admitted.mesh = resp.mesh();
    admitted.cert_pem = resp.certificate();
    admitted.ca_pem = resp.ca_certificate();
    admitted.ca_key_pem = resp.ca_key();
    admitted.revocations = resp.revocations();
    admitted.admitted_by = resp.admitted_by();
    for (const mycel::v1::Peer& p : resp.authorities()) {
      admitted.authorities.push_back(
          {p.name(), p.address(), true, "",
           absl::FromUnixSeconds(p.admitted().seconds())});
    }
  }
  if (admitted.ca_pem != ca_pem) {
    return absl::UnauthenticatedError(
        absl::StrCat("join via ", options.address,
                     ": the admission carries another CA than the pinned one"));
  }
  if (options.authority && admitted.ca_key_pem.empty()) {
    return absl::InternalError(
        absl::StrCat("join via ", options.address,
                     ": admitted as an authority without the CA key"));
  }
  // 4. In.
  return Annotate(
      node->CompleteJoin(std::move(prepared.first), admitted, options.address),
      "join");
}

namespace {

struct PushState {
  absl::Mutex mu;
  PushOutcome outcome ABSL_GUARDED_BY(mu);
  int pending ABSL_GUARDED_BY(mu) = 0;
  absl::Notification done;
};

struct PushCall {
  std::unique_ptr<Mesh::Stub> stub;
  grpc::ClientContext ctx;
  mycel::v1::PushRevocationsRequest req;
  mycel::v1::PushRevocationsResponse resp;
};

std::shared_ptr<PushState> StartPush(MeshNode* node,
                                     const pki::RevocationList& list,
                                     const std::vector<std::string>& skip,
                                     absl::Duration timeout) {
  auto state = std::make_shared<PushState>();
  PeerChannels* channels = node->channels();
  absl::StatusOr<std::vector<PeerRow>> peers = node->Peers();
  if (channels == nullptr || !peers.ok()) {
    state->done.Notify();
    return state;
  }
  const std::string blob = list.Serialize();
  std::vector<PeerRow> targets;
  for (PeerRow& p : *peers) {
    bool skipped = false;
    for (const std::string& s : skip) skipped |= s == p.name;
    if (!skipped && !p.address.empty()) targets.push_back(std::move(p));
  }
  {
    absl::MutexLock lock(&state->mu);
    state->pending = static_cast<int>(targets.size());
  }
  if (targets.empty()) state->done.Notify();
  for (const PeerRow& p : targets) {
    auto call = std::make_shared<PushCall>();
    call->stub = Mesh::NewStub(channels->Get(p.name, p.address));
    SetDeadline(&call->ctx, timeout);
    call->req.set_list(blob);
    std::string name = p.name;
    call->stub->async()->PushRevocations(
        &call->ctx, &call->req, &call->resp,
        [state, call, name](grpc::Status s) {
          absl::MutexLock lock(&state->mu);
          if (s.ok()) {
            state->outcome.pushed.push_back(name);
          } else {
            state->outcome.failed.push_back(
                absl::StrCat(name, ": ", s.error_message()));
          }
          if (--state->pending == 0) state->done.Notify();
        });
  }
  return state;
}

}  // namespace

PushOutcome PushRevocations(MeshNode* node, const pki::RevocationList& list,
                            const std::vector<std::string>& skip,
                            absl::Duration timeout) {
  std::shared_ptr<PushState> state = StartPush(node, list, skip, timeout);
  // Each call ends by its deadline; the margin covers the callbacks.
  state->done.WaitForNotificationWithTimeout(timeout + absl::Seconds(1));
  absl::MutexLock lock(&state->mu);
  return state->outcome;
}

void PushRevocationsInBackground(MeshNode* node,
                                 const pki::RevocationList& list,
                                 std::vector<std::string> skip,
                                 absl::Duration timeout) {
  // The calls keep the state alive; nothing waits for them.
  StartPush(node, list, skip, timeout);
}

// -- Rotation. --

struct CertificateRotator::State {
  MeshNode* node;
  Clock* clock;
  std::atomic<bool> stopped{false};
  std::atomic<bool> started{false};
  std::atomic<int64_t> renewed{0};
  std::atomic<int64_t> failures{0};
  size_t next_authority = 0;  // used only on the clock's thread

  static void Check(const std::shared_ptr<State>& self);
  static void Retry(const std::shared_ptr<State>& self);
};

namespace {

absl::Duration RetryDelay(MeshNode* node) {
  return RefreshIntervalFor(node->node_validity());
}

struct RenewCall {
  std::unique_ptr<Mesh::Stub> stub;
  grpc::ClientContext ctx;
  mycel::v1::RenewRequest req;
  mycel::v1::RenewResponse resp;
};

}  // namespace

void CertificateRotator::State::Retry(const std::shared_ptr<State>& self) {
  self->failures.fetch_add(1);
  self->clock->RunAfter(RetryDelay(self->node), [self] { Check(self); });
}

void CertificateRotator::State::Check(const std::shared_ptr<State>& self) {
  if (self->stopped.load()) return;
  MeshNode* node = self->node;
  pki::RotationPlan plan = node->Rotation();
  if (!plan.due) {
    // Not in a mesh yet (renew_at is the infinite future), or not yet due:
    // look again then, and at least hourly (a clock that jumped).
    absl::Duration wait =
        std::min(plan.renew_at - self->clock->Now(), absl::Hours(1));
    self->clock->RunAfter(wait, [self] { Check(self); });
    return;
  }
  MeshStatus status = node->Status();
  if (status.authority) {
    absl::Status s = node->RenewSelf();
    if (!s.ok()) {
      log::Warn("cannot renew the node certificate", {{"error", s}});
      Retry(self);
      return;
    }
    self->renewed.fetch_add(1);
    log::Info(
        "node certificate renewed",
        {{"by", status.node},
         {"expires", absl::FormatTime(node->Status().certificate_expires)}});
    Check(self);
    return;
  }
  absl::StatusOr<std::vector<PeerRow>> peers = node->Peers();
  std::vector<PeerRow> authorities;
  if (peers.ok()) {
    for (PeerRow& p : *peers) {
      if (p.authority) authorities.push_back(std::move(p));
    }
  }
  absl::StatusOr<std::string> csr = node->RenewalCsr();
  if (authorities.empty() || !csr.ok() || node->channels() == nullptr) {
    log::Warn("cannot renew the node certificate: no authority known",
              {{"expires", absl::FormatTime(status.certificate_expires)}});
    Retry(self);
    return;
  }
  const PeerRow& to = authorities[self->next_authority++ % authorities.size()];
  auto call = std::make_shared<RenewCall>();
  call->stub = Mesh::NewStub(node->channels()->Get(to.name, to.address));
  SetDeadline(&call->ctx, absl::Seconds(10));
  call->req.set_csr(*csr);
  std::string by = to.name;
  call->stub->async()->Renew(
      &call->ctx, &call->req, &call->resp, [self, call, by](grpc::Status s) {
        // On a gRPC thread: back to the clock's before touching more.
        absl::Status installed =
            s.ok()
                ? self->node->InstallNodeCertificate(call->resp.certificate())
                : FromGrpc(s, absl::StrCat("renewal by ", by));
        if (!installed.ok()) {
          log::Warn("cannot renew the node certificate",
                    {{"authority", by}, {"error", installed}});
          Retry(self);
          return;
        }
        self->renewed.fetch_add(1);
        log::Info("node certificate renewed",
                  {{"by", by},
                   {"expires", absl::FormatTime(
                                   self->node->Status().certificate_expires)}});
        self->clock->RunAfter(absl::ZeroDuration(), [self] { Check(self); });
      });
}

CertificateRotator::CertificateRotator(MeshNode* node, Clock* clock)
    : state_(std::make_shared<State>()) {
  state_->node = node;
  state_->clock = clock;
}

CertificateRotator::~CertificateRotator() { state_->stopped.store(true); }

void CertificateRotator::Start() {
  if (state_->started.exchange(true)) return;
  std::shared_ptr<State> self = state_;
  state_->clock->RunAfter(absl::ZeroDuration(), [self] { State::Check(self); });
}

int64_t CertificateRotator::renewed() const { return state_->renewed.load(); }
int64_t CertificateRotator::failures() const { return state_->failures.load(); }

}  // namespace mycel::identity
