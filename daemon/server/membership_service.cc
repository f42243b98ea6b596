#include "daemon/server/membership_service.h"

#include "absl/container/flat_hash_map.h"
#include "daemon/server/status_convert.h"
#include "proto/proto_time.h"

namespace mycel {
namespace {

mycel::v1::MemberState ToProto(membership::MemberState state) {
  switch (state) {
    case membership::MemberState::kAlive:
      return mycel::v1::MEMBER_STATE_ALIVE;
    case membership::MemberState::kSuspect:
      return mycel::v1::MEMBER_STATE_SUSPECT;
    case membership::MemberState::kDead:
      return mycel::v1::MEMBER_STATE_DEAD;
    case membership::MemberState::kLeft:
      return mycel::v1::MEMBER_STATE_LEFT;
  }
  return mycel::v1::MEMBER_STATE_UNSPECIFIED;
}

}  // namespace

grpc::ServerUnaryReactor* MembershipService::ListMembers(
    grpc::CallbackServerContext* ctx, const mycel::v1::ListMembersRequest*,
    mycel::v1::ListMembersResponse* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  absl::StatusOr<std::vector<membership::MemberInfo>> members =
      membership_->Members();
  if (!members.ok()) {
    reactor->Finish(ToGrpc(members.status()));
    return reactor;
  }
  absl::flat_hash_map<std::string, int64_t> behind;
  if (replication_ != nullptr) {
    absl::StatusOr<std::vector<replication::PeerLag>> lag = replication_->Lag();
    if (lag.ok()) {
      for (const replication::PeerLag& l : *lag) {
        if (l.known) behind[l.name] = l.changes_behind;
      }
    }
  }
  // This node's health score, for its own entry.
  int health_score = 0;
  if (absl::StatusOr<membership::DriverStats> st = membership_->Stats();
      st.ok()) {
    health_score = st->health_score;
  }
  for (const membership::MemberInfo& m : *members) {
    mycel::v1::Member* out = resp->add_members();
    if (m.self) out->set_health_score(health_score);
    auto lag = behind.find(m.name);
    out->set_replication_behind(lag == behind.end() ? -1 : lag->second);
    out->set_name(m.name);
    for (const std::string& a : m.addresses) out->add_addresses(a);
    out->set_state(ToProto(m.state));
    out->set_incarnation(m.incarnation);
    for (const auto& [k, v] : m.labels) (*out->mutable_labels())[k] = v;
    for (const auto& [k, v] : m.capacity) (*out->mutable_capacity())[k] = v;
    if (m.state_since != absl::InfinitePast()) {
      mycel::ToProto(m.state_since, out->mutable_state_since());
    }
    if (m.last_heard != absl::InfinitePast()) {
      mycel::ToProto(m.last_heard, out->mutable_last_heard());
    }
    out->set_self(m.self);
  }
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* MembershipService::Leave(
    grpc::CallbackServerContext* ctx, const mycel::v1::LeaveRequest* req,
    mycel::v1::LeaveResponse*) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  constexpr uint32_t kMaxTimeoutMs = 60'000;
  if (req->timeout_ms() > kMaxTimeoutMs) {
    reactor->Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                 "timeout_ms: at most 60000"));
    return reactor;
  }
  absl::Duration timeout = req->timeout_ms() == 0
                               ? absl::Seconds(5)
                               : absl::Milliseconds(req->timeout_ms());
  // The reactor is finished exactly once, by the driver's callback (or at
  // once when membership is not running).
  membership_->Leave(timeout,
                     [reactor](absl::Status s) { reactor->Finish(ToGrpc(s)); });
  return reactor;
}

}  // namespace mycel
