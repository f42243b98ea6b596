// Daemon: one running myceld. Owns the locks, the store, the reaper, the
// API server and the event loop, and tears them down in order.
#ifndef MYCEL_DAEMON_DAEMON_H_
#define MYCEL_DAEMON_DAEMON_H_

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cells/cell_manager.h"
#include "daemon/init/pid1.h"
#include "daemon/server/api_server.h"
#include "daemon/server/cells_service.h"
#include "daemon/server/gossip_service.h"
#include "daemon/server/membership_service.h"
#include "daemon/server/mesh_service.h"
#include "daemon/server/node_service.h"
#include "daemon/server/query_service.h"
#include "daemon/server/replication_service.h"
#include "daemon/server/state_service.h"
#include "daemon/store/store.h"
#include "mesh/identity/authorizer.h"
#include "mesh/identity/mesh_node.h"
#include "mesh/identity/peer_calls.h"
#include "mesh/identity/trust.h"
#include "mesh/membership/node_membership.h"
#include "mesh/replication/node_replication.h"
#include "mesh/replication/origin_verifier.h"
#include "mycel/v1/config.pb.h"
#include "runtime/asio_clock.h"
#include "runtime/host_info.h"
#include "runtime/pid_lock.h"
#include "runtime/reaper.h"

namespace mycel {

// CLOCK_BOOTTIME now: time since the kernel booted, suspend included.
absl::Duration BootClockNow();

// Not thread-safe: Start(), Run() and the signal handlers run on the main
// thread. RPC handlers reach it through io_.post().
class Daemon {
 public:
  // `main_entered` is CLOCK_BOOTTIME when main() began.
  Daemon(mycel::v1::DaemonConfig config, InitRole role,
         absl::Duration main_entered);
  ~Daemon();

  // Prepares the state directory and socket, opens the store and starts
  // serving. As PID 1 of a machine it first brings the system up. Every
  // failure names the path or setting at fault.
  absl::Status Start();

  // After Start() failed as PID 1: keep reaping, and serve the Node API
  // (reporting `reason`) if the socket or TCP port can still be bound.
  void EnterSafeMode(const absl::Status& reason);

  // Runs the event loop until a signal or the Shutdown RPC stops it, then
  // shuts down in order (workloads, API, store checkpoint). In safe mode it
  // runs until a stop signal or RPC as well.
  void Run();

  // What the stop asked for: poweroff, reboot or halt.
  mycel::v1::ShutdownMode shutdown_mode() const { return shutdown_mode_; }

 private:
  absl::Status PrepareStateDir();
  absl::Status PrepareSocket();
  // The services one endpoint serves (a gRPC service object can be
  // registered with one server only).
  struct ServiceSet {
    std::unique_ptr<NodeService> node;
    std::unique_ptr<CellsService> cells;
    std::unique_ptr<ExecutablesService> executables;
    std::unique_ptr<MeshService> mesh;  // null in safe mode
    std::unique_ptr<MembershipService> membership;
    std::unique_ptr<GossipService> gossip;            // the TCP endpoint's only
    std::unique_ptr<ReplicationService> replication;  // TCP only
    std::unique_ptr<StateService> state;              // null without a store
    std::unique_ptr<QueryService> query;              // null without a store
    std::vector<grpc::Service*> all() const {
      std::vector<grpc::Service*> out = {node.get(), cells.get(),
                                         executables.get()};
      if (mesh != nullptr) out.push_back(mesh.get());
      if (membership != nullptr) out.push_back(membership.get());
      if (gossip != nullptr) out.push_back(gossip.get());
      if (replication != nullptr) out.push_back(replication.get());
      if (state != nullptr) out.push_back(state.get());
      if (query != nullptr) out.push_back(query.get());
      return out;
    }
  };
  // The services of one endpoint, whose callers `authz` identifies.
  std::unique_ptr<ServiceSet> MakeServices(const HostInfo& host,
                                           int schema_version,
                                           const std::string& safe_mode,
                                           const identity::Authorizer* authz);
  absl::Status StartApi(const HostInfo& host, int schema_version,
                        const std::string& safe_mode);
  // The TCP endpoint of --listen: with the --tls-* files when given, else
  // with the node's mesh certificate; nullopt (and a log line) when it has
  // neither.
  absl::StatusOr<std::optional<ApiServer::Endpoint>> TcpEndpoint(
      const HostInfo& host, int schema_version, const std::string& safe_mode);
  // After `mycel mesh init` or a join: starts serving --listen with the
  // node's new certificate, if it was not served yet. On the event loop.
  void OnMeshJoined();
  // Collects the change log and tombstones of a node outside a mesh, which
  // has no replicator to do it (every change is seen by all its members:
  // itself), every GcInterval; reschedules itself (event loop only).
  void CollectGarbageAlone();
  // Serves the mesh on --listen; retried with backoff while it cannot
  // (event loop only).
  void ServeMeshOverTcp();
  absl::Status StartMeshServer();
  // Says why --listen is not served (MeshInfo.listen_error, the log) and
  // tries again after the next backoff (event loop only).
  void RetryMeshServer(const absl::Status& why);
  // What the local socket's health service answers for mycel.v1.Gossip:
  // SERVING while this node serves the mesh on --listen.
  void SetMeshHealth(bool serving);
  // Starts renewing the node certificate, once the node is in a mesh.
  void StartRotation();
  // Whether this node serves joins now (MeshNode::AdmitsJoins): then, and
  // only then, the TCP listener takes clients without a certificate.
  bool ServesJoins() { return mesh_ != nullptr && mesh_->AdmitsJoins(); }
  // Starts membership once TCP is served on `tcp_port` (the bound port,
  // advertised when --advertise says port 0) with mesh credentials; a
  // failure is logged, and the API keeps serving without membership.
  void StartMembership(int tcp_port);
  // Starts replicating the shared objects once membership runs with the
  // node's mesh certificate.
  void StartReplication();
  // Whether a node named `name` is known here beyond this node's own
  // admissions (identity::MeshNode::Options::name_in_use).
  // An error when the replicated store cannot be read (the join is then
  // refused).
  absl::StatusOr<bool> NameInUse(const std::string& name) const;
  // The mesh's shared state this node keeps in the replicated store, on
  // the event loop: its own status (node.status), re-published when it
  // changes; on an authority, its signed revocation list; and every
  // authority's list merged in as it arrives (OnRemoteChange).
  void PublishNodeStatus();
  void PublishRevocations();
  void MergePublishedRevocations(const std::string& authority,
                                 const std::string& value);
  // On an authority: the token's signed copy, unless the store holds one
  // with the same uses and revocation already.
  void PublishToken(const std::string& id);
  // Writes one of the objects the node publishes (its status, a join
  // token, its revocation list) without waiting on the event loop:
  // replication may hold this node's writes after a start until a peer has
  // answered on this same loop (Store::HoldLocalWrites). `done` runs on
  // the loop with the write's status.
  void WritePublished(absl::string_view ns, absl::string_view key,
                      std::optional<std::string> value,
                      absl::AnyInvocable<void(absl::Status)> done);
  void MergePublishedToken(const std::string& id, const std::string& value);
  // Every token_sweep_interval_: deletes the join tokens expired for longer
  // than --token-retention (MeshNode::CollectExpiredTokens) and, on an
  // authority, their published copies.
  void CollectExpiredTokens();
  void OnRemoteChange(const store::ObjectChange& change);
  std::string CgroupSubtree() const;
  void StartCells(const HostInfo& host);
  void ArmSignals();
  void OnSignal(int sig);
  // SIGUSR1: one log line with the daemon's vital counts.
  void LogStatus();
  void RequestStop(absl::string_view why, mycel::v1::ShutdownMode mode);
  void Stop();

  // First, so that it outlives everything that posts to it or waits on it.
  boost::asio::io_context io_;
  // The time and the timers of everything above runtime/.
  AsioClock clock_{&io_};
  mycel::v1::DaemonConfig config_;
  const InitRole role_;
  absl::Time started_;
  absl::Duration boot_to_start_;
  std::optional<PidLock> state_lock_;
  std::optional<PidLock> socket_lock_;
  std::unique_ptr<store::Store> store_;
  // Checks the origin's signature on every change received (set when
  // replication starts); declared before objects_, which calls it.
  std::unique_ptr<replication::OriginVerifier> origin_verifier_;
  // The user key/value namespace (State), shared by every endpoint.
  std::unique_ptr<store::ObjectStore> objects_;
  std::unique_ptr<store::StateStore> state_;
  std::unique_ptr<StateWatchers> state_watchers_;
  // Executables.Logs streams and Wait calls open at once, both sockets
  // (max_log_streams, max_waits); made with the first service set.
  std::unique_ptr<CallSlots> log_streams_;
  std::unique_ptr<CallSlots> waits_;
  Reaper reaper_;
  std::unique_ptr<cells::LogKeeperClient> log_keeper_;
  std::unique_ptr<cells::CellManager> cells_;
  absl::Status cells_unavailable_;
  // What this node trusts, and who may call what on each endpoint
  // (mesh/identity); the server holds the authorizers too.
  identity::Trust trust_;
  std::shared_ptr<identity::Authorizer> local_authz_;
  std::shared_ptr<identity::Authorizer> tcp_authz_;
  // Counts the calls each TCP client opens and never uses (HTTP/2 rapid
  // reset), and bans a client that floods (identity::FloodGuard).
  std::unique_ptr<identity::FloodGuard> flood_guard_;
  // The guard's on_flood, on the event loop.
  // Sets the daemon's OOM score adjustment to the oom_score_adj setting,
  // and remembers the one it had for its workloads. A failure is logged.
  void ProtectFromOomKiller();
  void OnCallFlood(const std::string& identity, int64_t unstarted);
  // The node's counters (Node.GetStats), read on the event loop;
  // UNAVAILABLE when it does not answer within 2 s (the daemon stops).
  absl::StatusOr<std::vector<std::pair<std::string, int64_t>>> Counters();
  std::vector<std::pair<std::string, int64_t>> CountersOnLoop();
  std::unique_ptr<identity::MeshNode> mesh_;
  // Renews the node certificate at two thirds of its life (started once
  // the node is in a mesh).
  std::unique_ptr<identity::CertificateRotator> rotator_;
  // Before the services and servers that call into it, so it outlives
  // them.
  membership::NodeMembership membership_;
  // The replicated store's gossip, over the mesh's peer channels, to the
  // members membership knows.
  replication::NodeReplication replication_;
  std::vector<std::unique_ptr<ServiceSet>> services_;
  std::unique_ptr<ApiServer> server_;
  // The TCP listener started after the node entered a mesh (see
  // OnMeshJoined), or after a start that could not have --listen; before
  // that, TCP is part of server_ or not served.
  std::unique_ptr<ApiServer> mesh_server_;
  bool tcp_serving_ = false;
  // Why --listen is not served yet, after a join or at start
  // (MeshInfo.listen_error), and the wait before the next attempt (event
  // loop only).
  absl::Mutex listen_mu_;
  std::string listen_error_ ABSL_GUARDED_BY(listen_mu_);
  absl::Duration listen_retry_ = absl::Seconds(1);
  // The last node.status value written (event loop only).
  std::string published_status_;
  absl::Duration token_sweep_interval_ = absl::Minutes(5);
  HostInfo host_;
  int schema_version_ = 0;
  std::string safe_mode_;
  // The soft open-file limit the daemon was started with, which its
  // workloads get back (0: unknown, they keep the daemon's).
  rlim_t open_file_limit_ = 0;
  // The daemon's own, once raised (RLIM_INFINITY when unlimited; 0 when
  // unknown).
  rlim_t open_files_ = 0;
  // The OOM score adjustment workloads get: the daemon's before it set its
  // own (oom_score_adj); unset when it did not change it.
  std::optional<int> workload_oom_score_adj_;
  boost::asio::signal_set signals_;
  bool stopping_ = false;
  // Compiles the default seccomp profile off the start-up path; joined
  // before the daemon goes away.
  std::thread precompile_;
  // Shuts the API server down while the loop runs on (see Stop); joined
  // by Run.
  std::thread stopper_;
  mycel::v1::ShutdownMode shutdown_mode_ = mycel::v1::SHUTDOWN_MODE_POWEROFF;
};

}  // namespace mycel

#endif  // MYCEL_DAEMON_DAEMON_H_
