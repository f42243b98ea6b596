#include "daemon/daemon.h"

#include <dirent.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <future>
#include <initializer_list>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "daemon/config.h"
#include "daemon/server/credentials.h"
#include "daemon/server/local_peer.h"
#include "google/protobuf/util/json_util.h"
#include "mesh/identity/peer_channels.h"
#include "mesh/pki/private_key.h"
#include "mycel/v1/mesh.pb.h"
#include "mycel/v1/node.pb.h"
#include "runtime/fs.h"
#include "runtime/host_info.h"
#include "runtime/log.h"
#include "runtime/process.h"
#include "runtime/resource_limits.h"
#include "runtime/signals.h"
#include "runtime/spawn/spawn.h"
#include "runtime/status.h"

namespace mycel {

absl::Duration BootClockNow() {
  struct timespec ts;
  clock_gettime(CLOCK_BOOTTIME, &ts);
  return absl::DurationFromTimespec(ts);
}

namespace {

// Where each node publishes its status in the replicated store (key: its
// name; the `nodes` view of `mycel query`), and how often it looks whether
// the status changed.
constexpr absl::string_view kNodeStatusNamespace = "node.status";
constexpr absl::Duration kNodeStatusInterval = absl::Seconds(30);
// The longest wait between two attempts to serve --listen after a join.
constexpr absl::Duration kListenRetryMax = absl::Seconds(30);
// The health service name (on the local socket) that says whether this
// node serves the mesh on --listen: `mycel node health --service
// mycel.v1.Gossip`.
constexpr absl::string_view kMeshHealthService = "mycel.v1.Gossip";

// The signals myceld handles, and what they mean (systemd's meanings).
struct SignalMeaning {
  int sig;
  const char* name;
  mycel::v1::ShutdownMode mode;
};

std::vector<SignalMeaning> StopSignals() {
  using mycel::v1::SHUTDOWN_MODE_HALT;
  using mycel::v1::SHUTDOWN_MODE_POWEROFF;
  using mycel::v1::SHUTDOWN_MODE_REBOOT;
  return {
      {SIGINT, "SIGINT", SHUTDOWN_MODE_REBOOT},  // ctrl-alt-del
      {SIGTERM, "SIGTERM", SHUTDOWN_MODE_POWEROFF},
      {SIGQUIT, "SIGQUIT", SHUTDOWN_MODE_POWEROFF},
      {SIGPWR, "SIGPWR", SHUTDOWN_MODE_POWEROFF},
      {SIGRTMIN + 3, "SIGRTMIN+3", SHUTDOWN_MODE_HALT},
      {SIGRTMIN + 4, "SIGRTMIN+4", SHUTDOWN_MODE_POWEROFF},
      {SIGRTMIN + 5, "SIGRTMIN+5", SHUTDOWN_MODE_REBOOT},
  };
}

// Signals whose default action would end or stop the daemon and that mean
// nothing to it: each arrival is logged and otherwise ignored (see
// docs/pid1.md, "Signals"). Handled rather than SIG_IGN, so that the
// processes the daemon starts do not inherit an ignored disposition.
std::vector<int> IgnoredSignals() {
  std::vector<int> out = {SIGUSR2, SIGALRM,   SIGVTALRM, SIGPROF,
                          SIGIO,   SIGSTKFLT, SIGXCPU,   SIGXFSZ,
                          SIGTSTP, SIGTTIN,   SIGTTOU};
  for (int sig = SIGRTMIN; sig <= SIGRTMAX; ++sig) {
    if (sig < SIGRTMIN + 3 || sig > SIGRTMIN + 5) out.push_back(sig);
  }
  return out;
}

std::string SignalName(int sig) {
  if (sig >= SIGRTMIN && sig <= SIGRTMAX) {
    return absl::StrCat("SIGRTMIN+", sig - SIGRTMIN);
  }
  const char* abbrev = sigabbrev_np(sig);
  return abbrev != nullptr ? absl::StrCat("SIG", abbrev)
                           : absl::StrCat("signal ", sig);
}

}  // namespace

Daemon::Daemon(mycel::v1::DaemonConfig config, InitRole role,
               absl::Duration main_entered)
    : config_(std::move(config)),
      role_(role),
      started_(absl::Now()),
      // From main(), not from the task's creation in /proc/self/stat: the
      // kernel creates PID 1 long before it execs /init (and /proc may not
      // be mounted yet), and a process that was exec'd by a shell keeps
      // the shell's start time.
      boot_to_start_(main_entered),
      signals_(io_) {
  // Register the handlers before anything can fail, so that as PID 1 a
  // poweroff request is honoured even in safe mode.
  signals_.add(SIGCHLD);
  signals_.add(SIGHUP);
  signals_.add(SIGUSR1);
  for (const SignalMeaning& m : StopSignals()) signals_.add(m.sig);
  for (int sig : IgnoredSignals()) signals_.add(sig);
  ArmSignals();
}

Daemon::~Daemon() {
  // Nothing runs the loop any more (Run returned, or was never called):
  // say so, so that the listeners close without waiting for it.
  io_.stop();
  if (precompile_.joinable()) {
    HurrySeccompPrecompiles();
    precompile_.join();
  }
}

absl::Status Daemon::PrepareStateDir() {
  const std::string& dir = config_.state_dir();
  RETURN_IF_ERROR(Annotate(MakeDirs(dir, 0700), "state_dir"));
  // The state directory holds the database (executables' environments,
  // and later the mesh's keys) and every workload's output: the daemon's
  // alone. A directory someone else owns could be swapped under us.
  absl::StatusOr<FileInfo> st = Stat(dir);
  RETURN_IF_ERROR(Annotate(st.status(), "state_dir"));
  if (st->uid != EffectiveUid()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "state_dir: ", dir, " is owned by uid ", st->uid, "; myceld (uid ",
        EffectiveUid(), ") must own its state directory"));
  }
  absl::StatusOr<bool> tightened = TightenMode(dir, 0700);
  RETURN_IF_ERROR(Annotate(tightened.status(), "state_dir"));
  if (*tightened) {
    log::Warn("state directory was open to others; now 0700",
              {{"state_dir", dir},
               {"was", absl::StrFormat("%04o", st->mode & 07777)}});
  }
  // Listing the directory proves it is readable; taking the lock (which
  // creates a file) proves it is writable.
  RETURN_IF_ERROR(Annotate(ListDir(dir).status(),
                           absl::StrCat("state_dir: cannot read ", dir)));
  absl::StatusOr<PidLock> lock = PidLock::Acquire(dir + "/myceld.lock");
  if (!lock.ok()) {
    if (lock.status().code() == absl::StatusCode::kFailedPrecondition) {
      return lock.status();
    }
    return Annotate(lock.status(),
                    absl::StrCat("state_dir: ", dir, " is not writable"));
  }
  state_lock_.emplace(*std::move(lock));
  return absl::OkStatus();
}

absl::Status Daemon::PrepareSocket() {
  const std::string& path = config_.socket();
  size_t slash = path.rfind('/');
  if (slash != std::string::npos && slash > 0) {
    RETURN_IF_ERROR(Annotate(MakeDirs(path.substr(0, slash), 0755), "socket"));
  }
  ASSIGN_OR_RETURN(PidLock lock, PidLock::Acquire(path + ".lock"));
  socket_lock_.emplace(std::move(lock));
  // We hold the socket's lock, so whatever is at the path was left by a
  // daemon that died without cleaning up.
  if (absl::StatusOr<FileInfo> st = LinkStat(path); st.ok()) {
    if (!S_ISSOCK(st->mode)) {
      return absl::FailedPreconditionError(
          absl::StrCat("socket: ", path,
                       " exists and is not a socket; refusing to remove it"));
    }
    RETURN_IF_ERROR(Annotate(RemoveFile(path), "socket: remove stale"));
    log::Warn("removed stale socket", {{"socket", path}});
  }
  return absl::OkStatus();
}

std::unique_ptr<Daemon::ServiceSet> Daemon::MakeServices(
    const HostInfo& host, int schema_version, const std::string& safe_mode,
    const identity::Authorizer* authz) {
  NodeService::Params params;
  params.node_name = config_.node_name();
  params.state_dir = config_.state_dir();
  params.schema_version = schema_version;
  params.host = host;
  params.started = started_;
  params.init_role = std::string(InitRoleName(role_));
  params.safe_mode = safe_mode;
  params.boot_to_start = boot_to_start_;
  params.on_shutdown = [this](mycel::v1::ShutdownMode mode) {
    boost::asio::post(io_, [this, mode] { RequestStop("api", mode); });
  };
  params.orphans_reaped = [this] { return reaper_.orphans_reaped(); };
  params.counters = [this] { return Counters(); };
  absl::StatusOr<cells::Cells*> manager =
      cells_ != nullptr ? absl::StatusOr<cells::Cells*>(cells_.get())
                        : absl::StatusOr<cells::Cells*>(
                              cells_unavailable_.ok()
                                  ? absl::FailedPreconditionError(
                                        "cells are not running on this node "
                                        "(safe mode)")
                                  : cells_unavailable_);
  auto set = std::make_unique<ServiceSet>();
  set->node = std::make_unique<NodeService>(std::move(params));
  set->cells = std::make_unique<CellsService>(manager, &io_);
  if (log_streams_ == nullptr) {
    // A log stream holds up to two descriptors (the log and its rotated
    // part): they may take half of the daemon's, no more, whatever the
    // setting says.
    int max_log_streams = config_.max_log_streams();
    if (open_files_ != 0 && open_files_ != RLIM_INFINITY &&
        static_cast<rlim_t>(max_log_streams) > open_files_ / 4) {
      max_log_streams = std::max<int>(1, static_cast<int>(open_files_ / 4));
      log::Warn(
          "max_log_streams lowered to fit the open file limit (each log "
          "stream holds up to two descriptors)",
          {{"max_log_streams", static_cast<int64_t>(config_.max_log_streams())},
           {"now", static_cast<int64_t>(max_log_streams)},
           {"open_file_limit", static_cast<uint64_t>(open_files_)}});
    }
    log_streams_ = std::make_unique<CallSlots>(max_log_streams, "log streams",
                                               "max_log_streams");
    waits_ =
        std::make_unique<CallSlots>(config_.max_waits(), "waits", "max_waits");
  }
  set->executables = std::make_unique<ExecutablesService>(
      manager, &io_, log_streams_.get(), waits_.get());
  set->membership =
      std::make_unique<MembershipService>(&membership_, &replication_);
  if (mesh_ != nullptr) {
    set->mesh = std::make_unique<MeshService>(
        mesh_.get(), authz, config_.listen(),
        [this] {
          // Runs on a gRPC thread: the listener is started on the loop, and
          // the answer to init waits for it (briefly), so that the caller
          // can use --listen as soon as init returns.
          auto done = std::make_shared<std::promise<void>>();
          std::future<void> started = done->get_future();
          boost::asio::post(io_, [this, done] {
            OnMeshJoined();
            done->set_value();
          });
          started.wait_for(std::chrono::seconds(5));
        },
        [this] {
          absl::MutexLock lock(&listen_mu_);
          return listen_error_;
        });
  }
  if (store_ != nullptr) {
    if (state_ == nullptr) {
      objects_ = std::make_unique<store::ObjectStore>(store_.get());
      // Before any write: every local change is pushed to the peers.
      objects_->SetChangeListener([this](const store::ObjectChange& c) {
        replication_.OnLocalChange(c);
      });
      objects_->SetRemoteChangeListener(
          [this](const store::ObjectChange& c) { OnRemoteChange(c); });
      // Checked when the config was read; the default otherwise.
      state_ = std::make_unique<store::StateStore>(
          objects_.get(), store_.get(),
          StateQuota(config_).value_or(int64_t{2} << 30));
      state_watchers_ = std::make_unique<StateWatchers>(state_.get(), &io_,
                                                        config_.max_watches());
    }
    set->state = std::make_unique<StateService>(state_.get(),
                                                state_watchers_.get(), &io_);
    set->query = std::make_unique<QueryService>(store_.get());
  }
  return set;
}

absl::Status Daemon::StartApi(const HostInfo& host, int schema_version,
                              const std::string& safe_mode) {
  log::Debug("host probed", {{"kernel", host.kernel_release},
                             {"cgroup_mode", CgroupModeName(host.cgroup_mode)},
                             {"seccomp", host.seccomp},
                             {"bpf", host.bpf},
                             {"btf", host.btf},
                             {"kvm", host.kvm},
                             {"user_namespaces", host.user_namespaces}});
  std::vector<ApiServer::Endpoint> endpoints;
  // The local admin socket: its file mode admits the host's administrators
  // (root, and the socket's group), and every connection is checked so
  // that no process of a cell is served.
  ASSIGN_OR_RETURN(ListeningSocket unix_socket,
                   ListenUnix(config_.socket(), 0660));
  local_authz_ = std::make_shared<identity::Authorizer>(
      identity::Authorizer::Endpoint::kLocal, &trust_,
      &identity::AccessRules::Builtin(), &clock_);
  tcp_authz_ = std::make_shared<identity::Authorizer>(
      identity::Authorizer::Endpoint::kTcp, &trust_,
      &identity::AccessRules::Builtin(), &clock_);
  if (flood_guard_ == nullptr) {
    flood_guard_ =
        std::make_unique<identity::FloodGuard>(identity::FloodGuard::Options{
            // Until the flood's connections are shut and their sources
            // refused (OnCallFlood); then others may join again.
            .ban_without_certificate = absl::Seconds(2),
            .clock = &clock_,
            .on_flood = [this](const std::string& identity, int64_t unstarted) {
              boost::asio::post(io_, [this, identity, unstarted] {
                OnCallFlood(identity, unstarted);
              });
            }});
  }
  tcp_authz_->set_flood_guard(flood_guard_.get());
  services_.push_back(
      MakeServices(host, schema_version, safe_mode, local_authz_.get()));
  {
    ApiServer::Endpoint e;
    e.name = "unix";
    e.socket = std::move(unix_socket);
    // gRPC runs no AuthMetadataProcessor on insecure credentials: every
    // caller here is the host's administrator (Caller::Local), which the
    // rule table admits to everything but the peer protocol, and gRPC
    // itself refuses methods that are not served (UNIMPLEMENTED).
    e.credentials = grpc::InsecureServerCredentials();
    e.services = services_.back()->all();
    e.admit = [subtree = CgroupSubtree()](int fd) {
      return AdmitLocalPeer(fd, subtree);
    };
    endpoints.push_back(std::move(e));
  }
  host_ = host;
  schema_version_ = schema_version;
  safe_mode_ = safe_mode;
  absl::StatusOr<std::optional<ApiServer::Endpoint>> tcp =
      TcpEndpoint(host, schema_version, safe_mode);
  // A member of a mesh whose --listen cannot be had at start (its port
  // held for a while by another process) starts anyway and retries, as
  // after a join: its cells and its local API go on, and it rejoins the
  // mesh once it serves. Anything else that cannot serve TCP stops here.
  const bool retry_tcp = !tcp.ok() && config_.tls_cert().empty() &&
                         mesh_ != nullptr && safe_mode.empty() &&
                         !mesh_->Status().mesh.empty();
  if (!tcp.ok() && !retry_tcp) return tcp.status();
  if (tcp.ok() && tcp->has_value()) {
    endpoints.push_back(**std::move(tcp));
    tcp_serving_ = true;
  }
  // A member's writes wait from the first one the API could take until
  // replication, started below, has asked its peers what they hold of this
  // node's changes (NodeReplication::Options::own_writes_hold); replication
  // then holds or releases them. If it does not start, they go on after
  // this.
  if (objects_ != nullptr && mesh_ != nullptr && safe_mode.empty() &&
      tcp_serving_ && !mesh_->Status().mesh.empty() &&
      config_.tls_cert().empty() && !replication_.running()) {
    objects_->HoldLocalWrites(
        replication::NodeReplication::Options{}.own_writes_hold +
        absl::Seconds(1));
  }
  ASSIGN_OR_RETURN(server_, ApiServer::Start(&io_, std::move(endpoints)));
  SetMeshHealth(tcp_serving_);
  if (retry_tcp) RetryMeshServer(tcp.status());
  if (objects_ != nullptr) {
    // Checked when the config was read.
    clock_.RunAfter(replication::GcInterval(
                        TombstoneRetention(config_).value_or(absl::Hours(72))),
                    [this] { CollectGarbageAlone(); });
  }
  if (tcp_serving_ && safe_mode.empty()) StartMembership(server_->port("tcp"));
  absl::Duration start_to_ready = BootClockNow() - boot_to_start_;
  for (auto& set : services_) set->node->SetStartToReady(start_to_ready);

  log::Info("myceld ready", {{"version", MYCEL_VERSION},
                             {"node", config_.node_name()},
                             {"pid", static_cast<int64_t>(CurrentPid())},
                             {"init_role", InitRoleName(role_)},
                             {"socket", config_.socket()},
                             {"tcp_port", server_->port("tcp")},
                             {"state_dir", config_.state_dir()},
                             {"schema_version", schema_version},
                             {"cgroup_mode", CgroupModeName(host.cgroup_mode)},
                             {"start_to_ready_ms",
                              absl::ToDoubleMilliseconds(start_to_ready)}});
  return absl::OkStatus();
}

absl::StatusOr<std::optional<ApiServer::Endpoint>> Daemon::TcpEndpoint(
    const HostInfo& host, int schema_version, const std::string& safe_mode) {
  if (config_.listen().empty()) return std::nullopt;
  TlsFiles files;
  if (!config_.tls_cert().empty()) {
    ASSIGN_OR_RETURN(files, ReadTlsFiles(config_));
    // The CA that signs client certificates is the mesh this node trusts:
    // every call's certificate is verified against it (chain, validity,
    // revocation) and authorized by its role.
    RETURN_IF_ERROR(Annotate(trust_.SetCa(files.ca), "tls_ca"));
  } else if (std::optional<identity::NodeCredentials> node =
                 mesh_ != nullptr ? mesh_->Credentials() : std::nullopt;
             node.has_value()) {
    files.cert = node->cert_pem;
    files.key = node->key_pem;
    files.ca = node->ca_pem;
    files.cert_file = mesh_->dir() + "/node.crt";
    files.key_file = mesh_->dir() + "/node.key";
    files.ca_file = mesh_->dir() + "/ca.crt";
  } else {
    log::Warn(
        "tcp listener disabled: --listen serves the node's mesh certificate "
        "(mycel mesh init, or mycel mesh join) or the --tls-cert, --tls-key "
        "and --tls-ca files (TCP is never served in plaintext)",
        {{"listen", config_.listen()}});
    return std::nullopt;
  }
  // Re-read often enough that a renewed node certificate (at two thirds of
  // its life) is served long before the old one expires.
  std::shared_ptr<grpc::ServerCredentials> creds = MtlsServerCredentials(
      files,
      identity::RefreshIntervalFor(mesh_ != nullptr
                                       ? mesh_->node_validity()
                                       : pki::kDefaultNodeValidity),
      // Only an authority with a join token open serves clients without a
      // certificate (joins).
      [this] { return ServesJoins(); },
      // Nor a client banned for flooding the node with calls.
      [guard = flood_guard_.get()](absl::string_view identity) {
        return guard->Banned(identity);
      });
  creds->SetAuthMetadataProcessor(tcp_authz_);
  ASSIGN_OR_RETURN(ListeningSocket tcp, ListenTcp(config_.listen()));
  services_.push_back(
      MakeServices(host, schema_version, safe_mode, tcp_authz_.get()));
  services_.back()->gossip =
      std::make_unique<GossipService>(tcp_authz_.get(), &membership_);
  services_.back()->replication =
      std::make_unique<ReplicationService>(tcp_authz_.get(), &replication_);
  ApiServer::Endpoint e;
  e.name = "tcp";
  e.socket = std::move(tcp);
  e.credentials = std::move(creds);
  e.per_source_burst = config_.connections_per_source();
  e.per_source_open = config_.open_connections_per_source();
  // A client without a certificate that connected while joins were served
  // must not keep its connection once they are not: every connection taken
  // then is shut down when the window closes (peers reconnect).
  e.window = [this] { return ServesJoins(); };
  e.services = services_.back()->all();
  e.interceptors.push_back(flood_guard_->InterceptorFactory());
  return e;
}

void Daemon::ProtectFromOomKiller() {
  const int want = config_.oom_score_adj();
  absl::StatusOr<int> before = GetOomScoreAdj();
  if (!before.ok()) {
    log::Warn("cannot read the OOM score adjustment",
              {{"error", before.status()}});
    return;
  }
  if (*before == want) return;
  if (absl::Status s = SetOomScoreAdj(want); !s.ok()) {
    log::Warn(
        "cannot set the OOM score adjustment (lowering it needs "
        "CAP_SYS_RESOURCE); the OOM killer may choose myceld over a "
        "workload",
        {{"oom_score_adj", static_cast<int64_t>(want)}, {"error", s}});
    return;
  }
  // Cell inits and executables get the value the daemon was started with.
  workload_oom_score_adj_ = *before;
  log::Info("set the OOM score adjustment",
            {{"from", static_cast<int64_t>(*before)},
             {"to", static_cast<int64_t>(want)}});
}

void Daemon::OnCallFlood(const std::string& identity, int64_t unstarted) {
  // gRPC does not say which connection the calls came on. A client without
  // a certificate can only be on a connection taken while joins were
  // served: those are shut down, and the members connected before keep
  // their links. A certificate holder may be on any.
  const bool certless = identity.empty();
  size_t closed = 0;
  for (ApiServer* server : {server_.get(), mesh_server_.get()}) {
    if (server == nullptr) continue;
    closed +=
        certless ? server->ShutdownWindowConnections("tcp", flood_guard_->ban())
                 : server->ShutdownConnections("tcp");
  }
  log::Error(
      certless
          ? "a TCP client without a certificate opened calls that never "
            "reached this node (HTTP/2 streams reset at once?): the "
            "connections taken while joins were served were shut down (the "
            "others stay), and their sources are refused while joins are "
            "served, for a while"
          : "a TCP client opened calls that never reached this node (HTTP/2 "
            "streams reset at once?): its certificate is refused for a "
            "while, and every TCP connection was shut down (the others "
            "reconnect)",
      {{"identity", certless ? "(no certificate)" : identity},
       {"calls", unstarted},
       {"refused_for", absl::FormatDuration(flood_guard_->ban())},
       {"connections_closed", static_cast<uint64_t>(closed)}});
}

absl::StatusOr<std::vector<std::pair<std::string, int64_t>>>
Daemon::Counters() {
  // On the event loop: the TCP server of a mesh is made there.
  auto done = std::make_shared<
      std::promise<std::vector<std::pair<std::string, int64_t>>>>();
  std::future<std::vector<std::pair<std::string, int64_t>>> counters =
      done->get_future();
  boost::asio::post(io_, [this, done] { done->set_value(CountersOnLoop()); });
  if (counters.wait_for(std::chrono::seconds(2)) != std::future_status::ready) {
    return absl::UnavailableError(
        "stats: the daemon's event loop did not answer within 2 s (is the "
        "daemon stopping?)");
  }
  return counters.get();
}

std::vector<std::pair<std::string, int64_t>> Daemon::CountersOnLoop() {
  std::vector<std::pair<std::string, int64_t>> out;
  auto add =
      [&out](absl::string_view prefix,
             std::initializer_list<std::pair<const char*, int64_t>> counters) {
        for (const auto& [name, value] : counters) {
          out.emplace_back(absl::StrCat(prefix, name), value);
        }
      };
  auto n = [](uint64_t v) { return static_cast<int64_t>(v); };
  if (absl::StatusOr<membership::DriverStats> d = membership_.Stats(); d.ok()) {
    const membership::MembershipStats& m = d->membership;
    add("membership.",
        {{"messages_sent", n(d->messages_sent)},
         {"bytes_sent", n(d->bytes_sent)},
         {"messages_received", n(d->messages_received)},
         {"bytes_received", n(d->bytes_received)},
         {"messages_rejected", n(d->messages_rejected)},
         {"deliveries_dropped", n(d->deliveries_dropped)},
         {"send_drops", n(d->send_drops)},
         {"send_failures", n(d->send_failures)},
         {"replies_in_response", n(d->replies_in_response)},
         {"health_score", d->health_score},
         {"probes", n(m.probes)},
         {"probes_indirect", n(m.probes_indirect)},
         {"probes_failed", n(m.probes_failed)},
         {"suspicions", n(m.suspicions)},
         {"deaths_declared", n(m.deaths_declared)},
         {"refutations", n(m.refutations)},
         {"push_pulls_sent", n(m.push_pulls_sent)},
         {"push_pulls_received", n(m.push_pulls_received)},
         {"push_pulls_by_fingerprint", n(m.push_pulls_by_fingerprint)},
         {"fingerprint_mismatches", n(m.fingerprint_mismatches)},
         {"reconnect_attempts", n(m.reconnect_attempts)},
         {"stale_updates", n(m.stale_updates)},
         {"rejected_malformed", n(m.rejected_malformed)},
         {"rejected_oversized", n(m.rejected_oversized)},
         {"rejected_sender_mismatch", n(m.rejected_sender_mismatch)},
         {"rejected_rate_limited", n(m.rejected_rate_limited)},
         {"alive_rejected_signature", n(m.alive_rejected_signature)},
         {"alive_rejected_name", n(m.alive_rejected_name)}});
  }
  if (absl::StatusOr<membership::GrpcTransport::Stats> t =
          membership_.TransportStats();
      t.ok()) {
    add("gossip.", {{"links_open", t->links_open},
                    {"links_dialed", t->links_dialed},
                    {"links_accepted", t->links_accepted},
                    {"links_stuck", t->links_stuck},
                    {"links_evicted", t->links_evicted},
                    {"links_refused", t->links_refused},
                    {"frames_written", t->frames_written},
                    {"frames_received", t->frames_received},
                    {"frames_expired", t->frames_expired}});
  }
  if (absl::StatusOr<replication::ReplicationDriverStats> d =
          replication_.Stats();
      d.ok()) {
    const replication::ReplicatorStats& r = d->replicator;
    add("replication.",
        {{"messages_sent", n(d->messages_sent)},
         {"bytes_sent", n(d->bytes_sent)},
         {"messages_received", n(d->messages_received)},
         {"messages_rejected", n(d->messages_rejected)},
         {"deliveries_dropped", n(d->deliveries_dropped)},
         {"deliveries_quarantined", n(d->deliveries_quarantined)},
         {"send_drops", n(d->send_drops)},
         {"send_failures", n(d->send_failures)},
         {"pushes_sent", n(r.pushes_sent)},
         {"changes_received", n(r.changes_received)},
         {"changes_applied", n(r.changes_applied)},
         {"changes_lost", n(r.changes_lost)},
         {"duplicates", n(r.duplicates)},
         {"changes_refused", n(r.changes_refused)},
         {"digests_sent", n(r.digests_sent)},
         {"digests_in_sync", n(r.digests_in_sync)},
         {"snapshots_started", n(r.snapshots_started)},
         {"snapshots_refused", n(r.snapshots_refused)},
         {"resyncs_completed", n(r.resyncs_completed)},
         {"malformed", n(r.malformed)},
         {"from_self", n(r.from_self)},
         {"store_errors", n(r.store_errors)}});
  }
  if (state_ != nullptr) {
    add("state.",
        {{"quota_bytes", state_->quota_bytes()},
         {"writes_refused_over_quota", n(state_->refused_over_quota())}});
    if (absl::StatusOr<int64_t> used = store_->UsedBytes(); used.ok()) {
      add("state.", {{"used_bytes", *used}});
    } else {
      log::Warn("stats: cannot measure the state database",
                {{"error", used.status()}});
    }
  }
  auto listener = [&](const ApiServer* server, absl::string_view name) {
    if (server == nullptr) return;
    // No TCP endpoint here (port 0); the unix one has no port but exists.
    if (name == "tcp" && server->port(name) == 0) return;
    const Listener::Stats l = server->listener_stats(name);
    add(absl::StrCat("listener.", name, "."),
        {{"accepted", n(l.accepted)},
         {"refused_admission", n(l.refused_admission)},
         {"refused_no_fds", n(l.refused_no_fds)},
         {"refused_rate", n(l.refused_rate)},
         {"refused_open", n(l.refused_open)},
         {"accept_failures", n(l.accept_failures)},
         {"closed_after_window", n(l.closed_after_window)},
         {"refused_banned", n(l.refused_banned)}});
  };
  listener(server_.get(), "unix");
  listener(mesh_server_ != nullptr ? mesh_server_.get() : server_.get(), "tcp");
  add("api.",
      {{"log_streams_open", log_streams_ != nullptr ? log_streams_->open() : 0},
       {"waits_open", waits_ != nullptr ? waits_->open() : 0},
       {"watches_open",
        state_watchers_ != nullptr ? state_watchers_->open() : 0},
       {"flood_bans", flood_guard_ != nullptr ? n(flood_guard_->bans()) : 0}});
  return out;
}

void Daemon::StartRotation() {
  if (mesh_ == nullptr || rotator_ != nullptr) return;
  if (mesh_->Status().mesh.empty()) return;
  rotator_ =
      std::make_unique<identity::CertificateRotator>(mesh_.get(), &clock_);
  rotator_->Start();
}

void Daemon::OnMeshJoined() {
  StartRotation();
  ServeMeshOverTcp();
}

void Daemon::ServeMeshOverTcp() {
  if (tcp_serving_ || stopping_) return;
  absl::Status s = StartMeshServer();
  if (s.ok()) {
    {
      absl::MutexLock lock(&listen_mu_);
      listen_error_.clear();
    }
    SetMeshHealth(tcp_serving_);
    return;
  }
  RetryMeshServer(s);
}

void Daemon::SetMeshHealth(bool serving) {
  if (server_ != nullptr) {
    server_->SetServingStatus("unix", std::string(kMeshHealthService), serving);
  }
}

void Daemon::RetryMeshServer(const absl::Status& why) {
  {
    absl::MutexLock lock(&listen_mu_);
    listen_error_ = std::string(why.message());
  }
  SetMeshHealth(false);
  // The node is in the mesh but unreachable until it serves: a port held
  // by another process for a while (a client's ephemeral port, a previous
  // daemon still closing) must not leave it so for good.
  log::Error("cannot serve the mesh over TCP; will retry",
             {{"listen", config_.listen()},
              {"error", why},
              {"retry_in", absl::FormatDuration(listen_retry_)}});
  clock_.RunAfter(listen_retry_, [this] { ServeMeshOverTcp(); });
  listen_retry_ = std::min(listen_retry_ * 2, kListenRetryMax);
}

absl::Status Daemon::StartMeshServer() {
  ASSIGN_OR_RETURN(std::optional<ApiServer::Endpoint> tcp,
                   TcpEndpoint(host_, schema_version_, safe_mode_));
  if (!tcp.has_value()) return absl::OkStatus();  // nothing to serve
  std::vector<ApiServer::Endpoint> endpoints;
  endpoints.push_back(*std::move(tcp));
  absl::StatusOr<std::unique_ptr<ApiServer>> server =
      ApiServer::Start(&io_, std::move(endpoints));
  if (!server.ok()) {
    services_.pop_back();  // TcpEndpoint's, served by nothing
    return server.status();
  }
  mesh_server_ = *std::move(server);
  tcp_serving_ = true;
  StartMembership(mesh_server_->port("tcp"));
  log::Info(
      "serving the mesh over TCP",
      {{"listen", config_.listen()}, {"tcp_port", mesh_server_->port("tcp")}});
  return absl::OkStatus();
}

void Daemon::StartMembership(int tcp_port) {
  membership::NodeMembership::Options o;
  o.name = config_.node_name();
  o.profile = config_.membership_profile();
  // Checked when the config was read.
  o.dead_retention = MembershipDeadRetention(config_).value_or(absl::Hours(24));
  o.advertise = config_.advertise();
  if (absl::EndsWith(o.advertise, ":0") && tcp_port > 0) {
    o.advertise =
        absl::StrCat(o.advertise.substr(0, o.advertise.size() - 1), tcp_port);
  }
  o.seeds.assign(config_.seeds().begin(), config_.seeds().end());
  // A node that joined with `mycel mesh join` knows the authority it
  // joined through (and those it admitted): they are seeds too, so that a
  // join needs no --seed.
  if (mesh_ != nullptr) {
    absl::StatusOr<std::vector<identity::PeerRow>> peers = mesh_->Peers();
    if (peers.ok()) {
      for (const identity::PeerRow& p : *peers) {
        if (!p.address.empty()) o.seeds.push_back(p.address);
      }
    }
  }
  if (!config_.tls_cert().empty()) {
    o.ca_file = config_.tls_ca();
    o.cert_file = config_.tls_cert();
    o.key_file = config_.tls_key();
  } else {
    const std::string dir = mesh_->dir();
    o.ca_file = dir + "/ca.crt";
    o.cert_file = dir + "/node.crt";
    o.key_file = dir + "/node.key";
    // The mesh's channels, from the same files: gossip links, replication
    // and the identity calls to a peer share its connection.
    o.channels = mesh_->channels();
  }
  o.refresh = identity::RefreshIntervalFor(
      mesh_ != nullptr ? mesh_->node_validity() : pki::kDefaultNodeValidity);
  o.trust = &trust_;
  o.clock = &clock_;
  o.io = &io_;
  o.store = store_.get();
  absl::Status s = membership_.Start(std::move(o));
  if (!s.ok()) {
    log::Error("membership not started", {{"error", s}});
    return;
  }
  StartReplication();
}

absl::StatusOr<bool> Daemon::NameInUse(const std::string& name) const {
  // Membership knows the members it heard of (for a day after they left),
  // the replicated store every origin whose changes reached this node.
  if (membership_.CertificateOf(name).ok()) return true;
  if (objects_ == nullptr) return false;
  ASSIGN_OR_RETURN(store::VersionVector versions, objects_->Versions());
  return versions.contains(name);
}

void Daemon::StartReplication() {
  identity::PeerChannels* channels =
      mesh_ != nullptr ? mesh_->channels() : nullptr;
  if (channels == nullptr || objects_ == nullptr) {
    log::Warn(
        "replicated state is not gossiped: the node serves with --tls-* "
        "files rather than a mesh certificate (mycel mesh init or join)");
    return;
  }
  // Every change this node makes is signed with its node key, and a change
  // received is applied only when its origin signed it (docs/security.md).
  std::optional<identity::NodeCredentials> node = mesh_->Credentials();
  if (!node.has_value()) {
    log::Error("replication not started: this node has no mesh credentials");
    return;
  }
  absl::StatusOr<pki::PrivateKey> key = pki::PrivateKey::FromPem(node->key_pem);
  if (!key.ok()) {
    log::Error("replication not started: the node key",
               {{"error", key.status()}});
    return;
  }
  // A node admitted under a revoked node's name writes as another origin
  // than its name (MeshNode::OriginOf): what it wrote before it joined is
  // renamed to it here, before it is signed.
  absl::StatusOr<std::string> origin =
      identity::MeshNode::OriginOf(config_.state_dir(), config_.node_name());
  if (absl::Status s =
          origin.ok() ? store_->AdoptOrigin(*origin) : origin.status();
      !s.ok()) {
    log::Error("replication not started: this node's origin", {{"error", s}});
    return;
  }
  if (*origin != config_.node_name()) {
    log::Info(
        "replication: this node's changes carry the origin of its key, "
        "its name having been revoked before it joined",
        {{"origin", *origin}});
  }
  store_->SetChangeSigner(replication::NodeKeySigner(
      std::make_shared<const pki::PrivateKey>(*std::move(key))));
  // Changes written before the node had a key (before it joined) are
  // signed now, before they can travel.
  absl::StatusOr<int64_t> signed_now = objects_->SignOwnUnsigned();
  if (!signed_now.ok()) {
    log::Error("replication not started: cannot sign this node's changes",
               {{"error", signed_now.status()}});
    return;
  }
  if (*signed_now > 0) {
    log::Info("signed this node's changes made before it had a mesh key",
              {{"changes", *signed_now}});
  }
  if (origin_verifier_ == nullptr) {  // once: objects_ keeps a pointer
    // Membership's certificate of an origin first; the one kept in the
    // store once membership has forgotten the origin.
    replication::OriginVerifier::Memory memory;
    memory.recall = [this](absl::string_view name) {
      absl::StatusOr<std::string> der = objects_->OriginCertificate(name);
      if (!der.ok()) {
        log::Warn("replication: cannot read a kept origin certificate",
                  {{"origin", name}, {"error", der.status()}});
        return std::string();
      }
      return *std::move(der);
    };
    memory.keep = [this](absl::string_view name, absl::string_view der) {
      if (absl::Status s = objects_->RememberOriginCertificate(name, der);
          !s.ok()) {
        log::Warn("replication: cannot keep an origin certificate",
                  {{"origin", name}, {"error", s}});
      }
    };
    origin_verifier_ = std::make_unique<replication::OriginVerifier>(
        &trust_, &clock_,
        [this](absl::string_view name) {
          absl::StatusOr<std::string> der = membership_.CertificateOf(name);
          return der.ok() ? *std::move(der) : std::string();
        },
        std::move(memory));
    objects_->SetChangeVerifier(
        [v = origin_verifier_.get()](const store::ObjectChange& c,
                                     absl::string_view bytes) {
          return v->Verify(c, bytes);
        });
  }
  // Checked when the config was read.
  absl::StatusOr<absl::Duration> tombstone_retention =
      TombstoneRetention(config_);
  if (!tombstone_retention.ok()) {
    log::Error("replication not started",
               {{"error", tombstone_retention.status()}});
    return;
  }
  replication::NodeReplication::Options o;
  o.name = config_.node_name();
  o.origin = *origin;
  o.tombstone_max_age = *tombstone_retention;
  // Checked when the config was read.
  o.forgotten_after =
      MembershipDeadRetention(config_).value_or(absl::Hours(24));
  o.objects = objects_.get();
  o.verifier = origin_verifier_.get();
  o.clock = &clock_;
  o.io = &io_;
  o.channels = [channels](absl::string_view name, absl::string_view address) {
    return channels->Get(name, address);
  };
  o.members = [this](std::vector<replication::ReplicationPeer>* live,
                     std::vector<std::string>* away) {
    absl::StatusOr<std::vector<membership::MemberInfo>> members =
        membership_.Members();
    if (!members.ok()) return;
    for (const membership::MemberInfo& m : *members) {
      if (m.self) continue;
      if (m.state == membership::MemberState::kAlive && !m.addresses.empty()) {
        live->push_back({m.name, m.addresses.front()});
      } else if (m.state == membership::MemberState::kSuspect ||
                 m.state == membership::MemberState::kDead) {
        away->push_back(m.name);
      }
    }
  };
  absl::Status s = replication_.Start(std::move(o));
  if (!s.ok()) {
    log::Error("replication not started", {{"error", s}});
    return;
  }
  // This node's changes reach peers once on disk: from now on the
  // committer syncs after each commit (under --durability normal) and says
  // so. Not before: a node outside a mesh pays no sync. What was committed
  // before the listener was set is synced here.
  store_->SetDurableListener(
      [this](int64_t seq) { replication_.OnDurable(seq); });
  if (absl::StatusOr<int64_t> durable = store_->Sync(); durable.ok()) {
    replication_.OnDurable(*durable);
  } else {
    log::Warn("state database: cannot sync the WAL",
              {{"status", durable.status()}});
  }
  boost::asio::post(io_, [this] {
    // Lists that arrived while this node was down, or before it knew the
    // CA, are merged now; then this node's own are published.
    absl::StatusOr<std::vector<store::Object>> lists =
        objects_->List(identity::kRevocationsNamespace, "");
    if (lists.ok()) {
      for (const store::Object& o : *lists) {
        if (o.value.has_value()) MergePublishedRevocations(o.key, *o.value);
      }
    }
    PublishRevocations();
    absl::StatusOr<std::vector<store::Object>> tokens =
        objects_->List(identity::kTokensNamespace, "");
    if (tokens.ok()) {
      for (const store::Object& o : *tokens) {
        if (o.value.has_value()) MergePublishedToken(o.key, *o.value);
      }
    }
    // Tokens made before this node gossiped state (right after mesh init).
    if (mesh_->Status().authority) {
      absl::StatusOr<std::vector<pki::StoredJoinToken>> mine =
          mesh_->ListTokens();
      if (mine.ok()) {
        const absl::Time now = clock_.Now();
        for (const pki::StoredJoinToken& t : *mine) {
          if (t.expires > now) PublishToken(t.id);  // expired admit nobody
        }
      }
    }
    PublishNodeStatus();
  });
}

void Daemon::OnRemoteChange(const store::ObjectChange& change) {
  if (state_watchers_ != nullptr) state_watchers_->OnChange(change);
  if (!change.value.has_value()) return;
  if (change.ns == identity::kRevocationsNamespace) {
    boost::asio::post(io_, [this, key = change.key, value = *change.value] {
      MergePublishedRevocations(key, value);
    });
  } else if (change.ns == identity::kTokensNamespace) {
    boost::asio::post(io_, [this, key = change.key, value = *change.value] {
      MergePublishedToken(key, value);
    });
  }
}

void Daemon::MergePublishedToken(const std::string& id,
                                 const std::string& value) {
  if (mesh_ == nullptr) return;
  absl::StatusOr<bool> changed = mesh_->MergeSignedToken(id, value);
  if (!changed.ok()) {
    log::Warn("refused a published join token",
              {{"token", id}, {"error", changed.status()}});
  } else if (*changed) {
    log::Debug("join token received", {{"token", id}});
    // An authority passes on what it learnt (a use, a revocation), so that
    // the copy under the key is the merged one.
    if (mesh_->Status().authority) PublishToken(id);
  }
}

void Daemon::PublishToken(const std::string& id) {
  if (mesh_ == nullptr || objects_ == nullptr) return;
  if (!mesh_->Status().authority) return;
  absl::StatusOr<pki::StoredJoinToken> token = mesh_->GetToken(id);
  if (!token.ok()) {
    log::Error("cannot publish a join token",
               {{"token", id}, {"error", token.status()}});
    return;
  }
  // The same uses and revocation again would be a write (and a signature)
  // for nothing.
  absl::StatusOr<store::Object> held =
      objects_->Get(identity::kTokensNamespace, id);
  if (held.ok() && held->value.has_value()) {
    v1::SignedJoinToken was;
    if (google::protobuf::util::JsonStringToMessage(*held->value, &was).ok() &&
        was.uses_left() == token->uses_left &&
        was.revoked() == token->revoked) {
      return;
    }
  }
  absl::StatusOr<std::string> value = mesh_->SignedToken(id);
  if (!value.ok()) {
    log::Error("cannot publish a join token",
               {{"token", id}, {"error", value.status()}});
    return;
  }
  WritePublished(identity::kTokensNamespace, id, *std::move(value),
                 [id](absl::Status s) {
                   if (!s.ok()) {
                     log::Error("cannot publish a join token",
                                {{"token", id}, {"error", s}});
                   }
                 });
}

void Daemon::WritePublished(absl::string_view ns, absl::string_view key,
                            std::optional<std::string> value,
                            absl::AnyInvocable<void(absl::Status)> done) {
  // The value is copied by PrepareWrite before WriteAsync returns.
  std::optional<absl::string_view> v;
  if (value.has_value()) v = *value;
  objects_->WriteAsync(ns, key, v, std::nullopt,
                       [this, done = std::move(done)](
                           absl::StatusOr<store::ObjectChange> change) mutable {
                         boost::asio::post(
                             io_, [done = std::move(done),
                                   s = change.status()]() mutable { done(s); });
                       });
}

void Daemon::MergePublishedRevocations(const std::string& authority,
                                       const std::string& value) {
  if (mesh_ == nullptr) return;
  absl::StatusOr<bool> changed =
      mesh_->MergeSignedRevocations(authority, value);
  if (!changed.ok()) {
    log::Warn("refused a published revocation list",
              {{"authority", authority}, {"error", changed.status()}});
  } else if (*changed) {
    log::Info("revocations received",
              {{"from", authority},
               {"generation", mesh_->Revocations().generation()}});
  }
}

void Daemon::PublishRevocations() {
  // Written to the store even before replication runs: the change log
  // keeps it for the first exchange.
  if (mesh_ == nullptr || objects_ == nullptr) return;
  if (!mesh_->Status().authority) return;
  const std::string self = config_.node_name();
  const uint64_t generation = mesh_->Revocations().generation();
  // The same list again would be a write for nothing (the signature
  // differs each time; the list would not).
  absl::StatusOr<store::Object> held =
      objects_->Get(identity::kRevocationsNamespace, self);
  if (held.ok() && held->value.has_value()) {
    v1::SignedRevocations was;
    if (google::protobuf::util::JsonStringToMessage(*held->value, &was).ok() &&
        was.generation() == generation) {
      return;
    }
  } else if (mesh_->Revocations().empty()) {
    return;
  }
  absl::StatusOr<std::string> value = mesh_->SignedRevocations();
  if (!value.ok()) {
    log::Error("cannot publish the revocation list",
               {{"error", value.status()}});
    return;
  }
  WritePublished(
      identity::kRevocationsNamespace, self, *std::move(value),
      [generation](absl::Status s) {
        if (!s.ok()) {
          log::Error("cannot publish the revocation list", {{"error", s}});
          return;
        }
        log::Info("revocation list published", {{"generation", generation}});
      });
}

void Daemon::PublishNodeStatus() {
  if (objects_ == nullptr || !replication_.running()) return;
  v1::NodeStatus status;
  status.set_name(config_.node_name());
  status.set_version(MYCEL_VERSION);
  status.set_kernel_release(host_.kernel_release);
  status.set_cpus(OnlineCpus());
  status.set_memory_bytes(PhysicalMemoryBytes());
  status.set_cells(cells_ != nullptr ? cells_->ListCells().size() : 0);
  status.set_started(
      absl::FormatTime(absl::RFC3339_sec, started_, absl::UTCTimeZone()));
  status.set_authority(mesh_ != nullptr && mesh_->Status().authority);
  absl::StatusOr<std::vector<membership::MemberInfo>> members =
      membership_.Members();
  if (members.ok()) {
    for (const membership::MemberInfo& m : *members) {
      if (!m.self) continue;
      for (const std::string& a : m.addresses) status.add_addresses(a);
      for (const auto& [k, v] : m.labels) (*status.mutable_labels())[k] = v;
      for (const auto& [k, v] : m.capacity) {
        (*status.mutable_capacity())[k] = v;
      }
    }
  }
  std::string json;
  google::protobuf::util::JsonPrintOptions po;
  po.preserve_proto_field_names = true;
  if (!google::protobuf::util::MessageToJsonString(status, &json, po).ok()) {
    log::Warn("cannot publish the node status",
              {{"error", "node status: cannot encode as JSON"}});
  } else if (json != published_status_) {
    WritePublished(
        kNodeStatusNamespace, config_.node_name(), json,
        [this, json](absl::Status s) {
          if (s.ok()) {
            published_status_ = json;
          } else {
            log::Warn("cannot publish the node status", {{"error", s}});
          }
        });
  }
  clock_.RunAfter(kNodeStatusInterval, [this] { PublishNodeStatus(); });
}

void Daemon::CollectGarbageAlone() {
  if (stopping_) return;
  const absl::Duration retention =
      TombstoneRetention(config_).value_or(absl::Hours(72));
  const bool in_mesh = mesh_ != nullptr && !mesh_->Status().mesh.empty();
  if (!in_mesh && !replication_.running()) {
    // Kept, as a replicator keeps them: each origin's last change, and
    // what peers will need is theirs by a full resync once this node
    // joins (its floor rose).
    const store::HlcTime cutoff =
        store::MakeHlc(absl::ToUnixMillis(clock_.Now() - retention), 0);
    absl::StatusOr<store::VersionVector> held = objects_->Versions();
    absl::StatusOr<store::GcResult> r =
        held.ok() ? objects_->CollectGarbage(*held, cutoff)
                  : absl::StatusOr<store::GcResult>(held.status());
    if (!r.ok()) {
      log::Warn("cannot collect the change log", {{"error", r.status()}});
    } else if (r->log_changes > 0 || r->tombstones > 0) {
      log::Debug("change log collected",
                 {{"changes", r->log_changes}, {"tombstones", r->tombstones}});
    }
  }
  clock_.RunAfter(replication::GcInterval(retention),
                  [this] { CollectGarbageAlone(); });
}

void Daemon::CollectExpiredTokens() {
  absl::StatusOr<std::vector<std::string>> gone = mesh_->CollectExpiredTokens();
  if (!gone.ok()) {
    log::Warn("cannot delete expired join tokens", {{"error", gone.status()}});
  } else if (!gone->empty()) {
    log::Info("expired join tokens deleted",
              {{"tokens", absl::StrJoin(*gone, ",")}});
  }
  // An authority also deletes their published copies (any authority's):
  // a tombstone each, which replication carries to every node.
  if (objects_ != nullptr && replication_.running() &&
      mesh_->Status().authority) {
    absl::StatusOr<std::vector<store::Object>> published =
        objects_->List(identity::kTokensNamespace, "");
    if (!published.ok()) {
      log::Warn("cannot list published join tokens",
                {{"error", published.status()}});
    } else {
      for (const store::Object& o : *published) {
        v1::SignedJoinToken t;
        if (!o.value.has_value() ||
            !google::protobuf::util::JsonStringToMessage(*o.value, &t).ok() ||
            !mesh_->TokenCollectable(absl::FromUnixMicros(t.expires_us()))) {
          continue;
        }
        WritePublished(identity::kTokensNamespace, o.key, std::nullopt,
                       [key = o.key](absl::Status s) {
                         if (!s.ok()) {
                           log::Warn("cannot delete a published join token",
                                     {{"token", key}, {"error", s}});
                         }
                       });
      }
    }
  }
  clock_.RunAfter(token_sweep_interval_, [this] { CollectExpiredTokens(); });
}

std::string Daemon::CgroupSubtree() const {
  return config_.cgroup_subtree().empty() ? std::string(kDefaultCgroupSubtree)
                                          : config_.cgroup_subtree();
}

absl::Status Daemon::Start() {
  if (role_ == InitRole::kMachine) {
    std::vector<std::string> warnings;
    absl::Status s = SetUpMachine(config_, &warnings);
    for (const std::string& w : warnings)
      log::Warn("system setup", {{"error", w}});
    RETURN_IF_ERROR(Annotate(s, "system setup"));
  } else {
    // Orphans of our workloads come back to us rather than to the host's
    // init, so that the reaper sees them. (PID 1 gets them anyway.)
    BecomeChildSubreaper().IgnoreError();
  }
  absl::StatusOr<OpenFileLimit> files = RaiseOpenFileLimit();
  if (files.ok()) {
    open_file_limit_ = files->soft_before;
    open_files_ = files->soft;
    if (files->soft != files->soft_before) {
      log::Info("raised the open file limit",
                {{"from", static_cast<uint64_t>(files->soft_before)},
                 {"to", static_cast<uint64_t>(files->soft)}});
    }
  } else {
    log::Warn("cannot raise the open file limit", {{"error", files.status()}});
  }
  ProtectFromOomKiller();
  RETURN_IF_ERROR(PrepareStateDir());
  std::string db_path = config_.state_dir() + "/mycel.db";
  ASSIGN_OR_RETURN(
      const std::string origin,
      identity::MeshNode::OriginOf(config_.state_dir(), config_.node_name()));
  ASSIGN_OR_RETURN(store_, store::Store::Open(
                               db_path, {.origin = origin,
                                         .clock = &clock_,
                                         .synchronous_full =
                                             config_.durability() == "full"}));
  RETURN_IF_ERROR(store_->RecordBoot(started_, MYCEL_VERSION, CurrentPid()));
  ASSIGN_OR_RETURN(absl::Duration node_validity, CertLifetime(config_));
  ASSIGN_OR_RETURN(absl::Duration token_retention, TokenRetention(config_));
  ASSIGN_OR_RETURN(mesh_, identity::MeshNode::Open(
                              {.state_dir = config_.state_dir(),
                               .node_name = config_.node_name(),
                               .store = store_.get(),
                               .trust = &trust_,
                               .clock = &clock_,
                               .node_validity = node_validity,
                               .token_retention = token_retention,
                               .name_in_use = [this](const std::string& name) {
                                 return NameInUse(name);
                               }}));
  token_sweep_interval_ =
      std::clamp(token_retention / 4, absl::Seconds(1), absl::Minutes(5));
  clock_.RunAfter(token_sweep_interval_, [this] { CollectExpiredTokens(); });
  // A revocation made here goes into the replicated store, which carries
  // it to every member, including those away now.
  mesh_->SetRevokedListener(
      [this] { boost::asio::post(io_, [this] { PublishRevocations(); }); });
  // So do the join tokens it makes, uses and revokes.
  mesh_->SetTokenListener([this](const std::string& id) {
    boost::asio::post(io_, [this, id] { PublishToken(id); });
  });
  RETURN_IF_ERROR(PrepareSocket());
  HostInfo host = ProbeHost();
  StartCells(host);
  RETURN_IF_ERROR(StartApi(host, store_->schema_version(), ""));
  StartRotation();
  // The default seccomp profile takes tens of milliseconds to compile;
  // compile it (it is cached) off the start-up path, before the first cell:
  // as cells with a pid namespace get it, and as those without one do
  // (CellManager::Options::protected_pids, left to its default here). At
  // the lowest priority: on a busy host (50 nodes starting on 2 CPUs) it
  // took a third of the CPU from the nodes' first seconds of gossip. An
  // error here is the first cell's too, and that reports it. Only with a
  // cell pool: a node that keeps no blank cells ready (--cell-pool 0) does
  // not ask for a fast first cell, and compiles the profile then. (At nice
  // 19 the compiles still took a fifth of all CPU samples in the first
  // seconds of the 50-node race, tests/bench/memberlist_bench.sh.)
  if (!config_.has_cell_pool() || config_.cell_pool() > 0) {
    precompile_ = std::thread([] {
      PrecompileSeccomp({}).IgnoreError();
      SeccompOptions shared_pids;
      shared_pids.protected_pids = cells::CellManager::DefaultProtectedPids();
      shared_pids.deny_broadcast_signals = true;
      PrecompileSeccomp(shared_pids).IgnoreError();
    });
  }
  return absl::OkStatus();
}

void Daemon::StartCells(const HostInfo& host) {
  absl::StatusOr<std::unique_ptr<CgroupDriver>> driver =
      NewCgroupDriver(host.cgroup_mode, "/sys/fs/cgroup", CgroupSubtree());
  absl::Status s = driver.status();
  if (s.ok()) {
    // The log keeper outlives the daemon (it holds the workloads' output
    // pipes); it is started through the reaper, which collects it if it
    // ends while this daemon runs, and only once an executable needs it.
    cells::LogKeeperClient::Options keeper;
    keeper.state_dir = config_.state_dir();
    keeper.connect_now = false;
    keeper.spawn =
        [this](const std::vector<std::string>& argv) -> absl::StatusOr<pid_t> {
      // The keeper keeps the daemon's OOM score adjustment: it is part of
      // the daemon, not a workload.
      SpawnRequest req;
      req.argv = argv;
      req.stderr_fd = STDERR_FILENO;
      ASSIGN_OR_RETURN(Child keeper,
                       reaper_.SpawnWatched(
                           [&] { return Spawn(req); },
                           [](const ChildExit& e) {
                             log::Info("log keeper exited",
                                       {{"pid", static_cast<int64_t>(e.pid)},
                                        {"status", e.status},
                                        {"signaled", e.signaled()}});
                           }));
      return keeper.pid();
    };
    absl::StatusOr<std::unique_ptr<cells::LogKeeperClient>> client =
        cells::LogKeeperClient::Connect(std::move(keeper));
    if (!client.ok()) {
      s = Annotate(client.status(), "log keeper");
    } else {
      log_keeper_ = *std::move(client);
    }
  }
  if (s.ok()) {
    cells::CellManager::Options opts;
    opts.log_keeper = log_keeper_.get();
    opts.state_dir = config_.state_dir();
    opts.store = store_.get();
    opts.reaper = &reaper_;
    opts.io = &io_;
    opts.clock = &clock_;
    opts.cgroups = *std::move(driver);
    if (config_.has_cell_pool()) opts.pool_size = config_.cell_pool();
    opts.cheap_cgroup_moves = host.cgroup_favordynmods;
    opts.workload_open_file_limit = open_file_limit_;
    opts.workload_oom_score_adj = workload_oom_score_adj_;
    opts.admin_socket = config_.socket();
    const bool v1 = host.cgroup_mode == CgroupMode::kV1 ||
                    host.cgroup_mode == CgroupMode::kHybrid;
    if (v1 && !host.cgroup_favordynmods && !host.cgroup2_mount.empty()) {
      // Every executable's start moves it into its cell's v1 cgroups.
      log::Warn(
          "each start of an executable waits for an RCU grace period (about "
          "10 ms) when starts are sporadic; mounting cgroup2 with "
          "favordynmods avoids it (see docs/performance.md)",
          {{"remount", absl::StrCat("mount -o remount,favordynmods ",
                                    host.cgroup2_mount)}});
    }
    absl::StatusOr<std::unique_ptr<cells::CellManager>> m =
        cells::CellManager::Create(std::move(opts));
    if (m.ok()) {
      cells_ = *std::move(m);
      return;
    }
    s = m.status();
  }
  cells_unavailable_ = absl::FailedPreconditionError(
      absl::StrCat("cells are unavailable on this node: ", s.message()));
  log::Error("cells unavailable", {{"error", s}});
}

void Daemon::EnterSafeMode(const absl::Status& reason) {
  std::string why(reason.message());
  log::Error("entering safe mode: reaping and serving diagnostics only",
             {{"reason", why}});
  if (server_ != nullptr) return;  // the API is already up
  absl::Status s =
      socket_lock_.has_value() ? absl::OkStatus() : PrepareSocket();
  if (s.ok()) s = StartApi(ProbeHost(), 0, why);
  if (!s.ok()) log::Error("safe mode without an API", {{"error", s}});
}

void Daemon::ArmSignals() {
  signals_.async_wait([this](const boost::system::error_code& ec, int sig) {
    if (ec) return;
    OnSignal(sig);
    ArmSignals();
  });
}

void Daemon::OnSignal(int sig) {
  if (sig == SIGCHLD) {
    reaper_.ReapAll();
    return;
  }
  if (sig == SIGHUP) {
    log::Info("SIGHUP ignored (nothing to reload)");
    return;
  }
  if (sig == SIGUSR1) {
    LogStatus();
    return;
  }
  for (const SignalMeaning& m : StopSignals()) {
    if (m.sig != sig) continue;
    // A container's init and an ordinary daemon stop; only a machine's init
    // distinguishes poweroff, reboot and halt.
    RequestStop(m.name, m.mode);
    return;
  }
  log::Info("signal ignored", {{"signal", SignalName(sig)}});
}

void Daemon::LogStatus() {
  int64_t fds = OpenFdCount().value_or(0);
  int64_t cells = 0, running = 0;
  if (cells_ != nullptr) {
    for (const mycel::v1::Cell& c : cells_->ListCells()) {
      ++cells;
      running += c.status().executables_running();
    }
  }
  log::Info("status", {{"pid", static_cast<int64_t>(CurrentPid())},
                       {"uptime", absl::FormatDuration(absl::Now() - started_)},
                       {"cells", cells},
                       {"executables_running", running},
                       {"orphans_reaped", reaper_.orphans_reaped()},
                       {"open_fds", fds},
                       {"fault_signals_ignored", IgnoredFaultSignals()}});
}

void Daemon::RequestStop(absl::string_view why, mycel::v1::ShutdownMode mode) {
  if (stopping_) return;
  stopping_ = true;
  if (mode == mycel::v1::SHUTDOWN_MODE_UNSPECIFIED) {
    mode = mycel::v1::SHUTDOWN_MODE_POWEROFF;
  }
  shutdown_mode_ = mode;
  log::Info("stopping", {{"reason", why},
                         {"mode", mycel::v1::ShutdownMode_Name(mode)},
                         {"init_role", InitRoleName(role_)}});
  Stop();
}

void Daemon::Stop() {
  // Workloads outlive an ordinary daemon (it adopts them again when it
  // restarts); as PID 1 the daemon is the last thing standing, so it stops
  // them in order.
  if (cells_ != nullptr && role_ != InitRole::kNone) {
    cells_->StopAll(absl::Seconds(10));
  }
  // The server's shutdown waits for calls in flight, and the calls that
  // wait (Wait, Logs -f, Run) finish on the event loop, so the loop keeps
  // running meanwhile; the shutdown runs on a thread of its own and stops
  // the loop when it is done.
  stopper_ = std::thread([this] {
    // Peers see this node stop answering, as after a crash; a graceful
    // departure is `mycel mesh leave`.
    membership_.Stop();
    replication_.Stop();
    if (mesh_server_ != nullptr) {
      mesh_server_->Shutdown(std::chrono::seconds(5));
    }
    if (server_ != nullptr) {
      server_->Shutdown(std::chrono::seconds(5));
      RemoveFile(config_.socket()).IgnoreError();
    }
    boost::asio::post(io_, [this] {
      if (store_ != nullptr) {
        absl::Status s = store_->Checkpoint();
        if (!s.ok()) log::Warn("checkpoint failed", {{"error", s}});
      }
      io_.stop();
    });
  });
}

void Daemon::Run() {
  io_.run();
  if (stopper_.joinable()) stopper_.join();
  reaper_.ReapAll();
  log::Info("myceld stopped");
}

}  // namespace mycel
