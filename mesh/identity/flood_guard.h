// FloodGuard: cuts off a TLS client that opens calls and never uses them.
//
// HTTP/2 lets a client open a stream and reset it at once, without end
// (CVE-2023-44487, "rapid reset"). Debian's gRPC 1.51 bounds neither the
// streams reset nor the calls they leave queued for the server: 4 s of it
// over one connection, from a client with a valid certificate, took a node
// from 17 MB to 3.2 GB and 33 s of CPU (docs/security.md). gRPC gives the
// application two places to see a call: the AuthMetadataProcessor, which
// runs for every stream whose headers arrive, and a server interceptor,
// which runs when the call reaches its handler. A call reset at once gets
// the first and never the second. So the guard counts, per identity (the
// client certificate's SPIFFE ID, or none), the calls the authorizer let
// through that have not reached a handler; the count halves every
// `half_life`, so that the few calls an honest client cancels early fade.
// An identity with `max_unstarted` such calls is flooding: it is banned for
// `ban` (`ban_without_certificate` for a client without one; its calls are
// refused, and so are its TLS handshakes) and
// `on_flood` runs, once per ban; the daemon then shuts down every TCP
// connection it holds, the flooder's among them (gRPC does not say which
// connection a call came on), and the others reconnect; for a flooder
// without a certificate, only the connections taken while the node served
// joins, the only ones such a client can hold, and their sources are
// refused new connections while joins are served, for `ban`.
//
// Thread-safe.
#ifndef MYCEL_MESH_IDENTITY_FLOOD_GUARD_H_
#define MYCEL_MESH_IDENTITY_FLOOD_GUARD_H_

#include <grpcpp/security/auth_context.h>
#include <grpcpp/support/server_interceptor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "runtime/clock.h"

namespace mycel::identity {

class FloodGuard {
 public:
  struct Options {
    int64_t max_unstarted = 4096;
    absl::Duration half_life = absl::Seconds(10);
    absl::Duration ban = absl::Minutes(5);
    // The ban of the identity without a certificate (""), which every such
    // client shares: the daemon keeps it short and refuses the flood's
    // sources at its listener instead, so that one flooder does not keep
    // everyone else's joins out (docs/security.md).
    absl::Duration ban_without_certificate = absl::Minutes(5);
    // Borrowed; must outlive the guard.
    const Clock* clock = nullptr;
    // Runs on the thread that saw the call that crossed the limit, with no
    // lock held; must not block.
    std::function<void(const std::string& identity, int64_t unstarted)>
        on_flood;
  };

  explicit FloodGuard(Options options);
  FloodGuard(const FloodGuard&) = delete;
  FloodGuard& operator=(const FloodGuard&) = delete;

  // The authorizer let a call of `identity` through. False when the
  // identity is banned (the call is to be refused).
  bool Opened(absl::string_view identity) ABSL_LOCKS_EXCLUDED(mu_);
  // A call of `identity` reached its handler.
  void Started(absl::string_view identity) ABSL_LOCKS_EXCLUDED(mu_);
  // Whether `identity` is banned now.
  bool Banned(absl::string_view identity) ABSL_LOCKS_EXCLUDED(mu_);

  // Identities banned so far.
  uint64_t bans() ABSL_LOCKS_EXCLUDED(mu_);
  // How long a ban lasts (Options::ban).
  absl::Duration ban() const { return options_.ban; }

  // The interceptor that calls Started; one factory per server.
  std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
  InterceptorFactory();

  // The identity a flood is counted under: the SPIFFE ID of a TLS peer's
  // certificate, or "" for a peer with none.
  static std::string IdentityOf(const grpc::AuthContext* auth);

 private:
  void DecayLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, int64_t> unstarted_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, absl::Time> banned_until_
      ABSL_GUARDED_BY(mu_);
  absl::Time last_decay_ ABSL_GUARDED_BY(mu_);
  uint64_t bans_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace mycel::identity

#endif  // MYCEL_MESH_IDENTITY_FLOOD_GUARD_H_
