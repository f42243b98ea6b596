#include "mesh/identity/flood_guard.h"

#include <grpc/grpc_security_constants.h>
#include <grpcpp/security/auth_context.h>
#include <grpcpp/server_context.h>

#include <utility>
#include <vector>

namespace mycel::identity {
namespace {

namespace gx = grpc::experimental;

// Counts the call as started once its initial metadata has reached the
// server (the auth context is not set before that), and changes nothing.
class StartedInterceptor final : public gx::Interceptor {
 public:
  StartedInterceptor(FloodGuard* guard, gx::ServerRpcInfo* info)
      : guard_(guard), info_(info) {}
  void Intercept(gx::InterceptorBatchMethods* methods) override {
    if (!counted_ &&
        methods->QueryInterceptionHookPoint(
            gx::InterceptionHookPoints::POST_RECV_INITIAL_METADATA)) {
      counted_ = true;
      grpc::ServerContextBase* ctx = info_->server_context();
      std::shared_ptr<const grpc::AuthContext> auth =
          ctx != nullptr ? ctx->auth_context() : nullptr;
      guard_->Started(FloodGuard::IdentityOf(auth.get()));
    }
    methods->Proceed();
  }

 private:
  FloodGuard* const guard_;
  gx::ServerRpcInfo* const info_;
  bool counted_ = false;
};

class StartedFactory final : public gx::ServerInterceptorFactoryInterface {
 public:
  explicit StartedFactory(FloodGuard* guard) : guard_(guard) {}
  gx::Interceptor* CreateServerInterceptor(gx::ServerRpcInfo* info) override {
    return new StartedInterceptor(guard_, info);
  }

 private:
  FloodGuard* const guard_;
};

}  // namespace

FloodGuard::FloodGuard(Options options) : options_(std::move(options)) {
  last_decay_ = options_.clock->Now();
}

std::string FloodGuard::IdentityOf(const grpc::AuthContext* auth) {
  if (auth == nullptr) return "";
  std::vector<grpc::string_ref> ids =
      auth->FindPropertyValues(GRPC_PEER_SPIFFE_ID_PROPERTY_NAME);
  if (ids.empty()) return "";
  return std::string(ids[0].data(), ids[0].size());
}

void FloodGuard::DecayLocked(absl::Time now) {
  while (now - last_decay_ >= options_.half_life) {
    last_decay_ += options_.half_life;
    for (auto it = unstarted_.begin(); it != unstarted_.end();) {
      it->second /= 2;
      if (it->second == 0) {
        unstarted_.erase(it++);
      } else {
        ++it;
      }
    }
    if (unstarted_.empty()) {
      last_decay_ = now;
      break;
    }
  }
}

bool FloodGuard::Opened(absl::string_view identity) {
  int64_t count = 0;
  std::string who;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = options_.clock->Now();
    auto ban = banned_until_.find(identity);
    if (ban != banned_until_.end()) {
      if (now < ban->second) return false;
      banned_until_.erase(ban);
    }
    DecayLocked(now);
    int64_t& n = unstarted_[identity];
    if (++n < options_.max_unstarted) return true;
    count = n;
    unstarted_.erase(std::string(identity));
    banned_until_[identity] =
        now +
        (identity.empty() ? options_.ban_without_certificate : options_.ban);
    ++bans_;
    who = std::string(identity);
  }
  if (options_.on_flood) options_.on_flood(who, count);
  return false;
}

void FloodGuard::Started(absl::string_view identity) {
  absl::MutexLock lock(&mu_);
  auto it = unstarted_.find(identity);
  if (it == unstarted_.end()) return;
  if (--it->second <= 0) unstarted_.erase(it);
}

bool FloodGuard::Banned(absl::string_view identity) {
  absl::MutexLock lock(&mu_);
  auto ban = banned_until_.find(identity);
  return ban != banned_until_.end() && options_.clock->Now() < ban->second;
}

uint64_t FloodGuard::bans() {
  absl::MutexLock lock(&mu_);
  return bans_;
}

std::unique_ptr<gx::ServerInterceptorFactoryInterface>
FloodGuard::InterceptorFactory() {
  return std::make_unique<StartedFactory>(this);
}

}  // namespace mycel::identity
