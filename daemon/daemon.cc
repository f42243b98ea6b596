#include "daemon/daemon.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/post.hpp>

#include "absl/strings/str_cat.h"
#include "runtime/fs.h"
#include "runtime/host_info.h"
#include "runtime/log.h"
#include "runtime/status.h"

namespace mycel {

Daemon::Daemon(mycel::v1::DaemonConfig config)
    : config_(std::move(config)),
      started_(absl::Now()),
      signals_(io_, SIGINT, SIGTERM) {}

Daemon::~Daemon() = default;

absl::Status Daemon::PrepareStateDir() {
  const std::string& dir = config_.state_dir();
  RETURN_IF_ERROR(Annotate(MakeDirs(dir, 0700), "state_dir"));
  // Listing the directory proves it is readable; taking the lock (which
  // creates a file) proves it is writable.
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) {
    return PosixError(absl::StrCat("state_dir: cannot read ", dir), errno);
  }
  closedir(d);
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
  struct stat st;
  if (lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      return absl::FailedPreconditionError(
          absl::StrCat("socket: ", path,
                       " exists and is not a socket; refusing to remove it"));
    }
    if (unlink(path.c_str()) != 0) {
      return PosixError(absl::StrCat("socket: remove stale ", path), errno);
    }
    log::Warn("removed stale socket", {{"socket", path}});
  }
  return absl::OkStatus();
}

absl::Status Daemon::Start() {
  RETURN_IF_ERROR(PrepareStateDir());
  std::string db_path = config_.state_dir() + "/mycel.db";
  ASSIGN_OR_RETURN(store_, store::Store::Open(db_path));
  RETURN_IF_ERROR(store_->Transaction([&](sqlite3* db) -> absl::Status {
    ASSIGN_OR_RETURN(store::Stmt stmt,
                     store::Stmt::Prepare(db,
                                          "INSERT INTO boots(started_at, "
                                          "version, pid) VALUES(?, ?, ?)"));
    stmt.Bind(1, absl::ToUnixSeconds(started_))
        .Bind(2, absl::string_view(MYCEL_VERSION))
        .Bind(3, static_cast<int64_t>(getpid()));
    return stmt.Run();
  }));
  RETURN_IF_ERROR(PrepareSocket());

  HostInfo host = ProbeHost();
  log::Debug("host probed", {{"kernel", host.kernel_release},
                             {"cgroup_mode", CgroupModeName(host.cgroup_mode)},
                             {"seccomp", host.seccomp},
                             {"bpf", host.bpf},
                             {"btf", host.btf},
                             {"kvm", host.kvm},
                             {"user_namespaces", host.user_namespaces}});
  NodeService::Params params;
  params.node_name = config_.node_name();
  params.state_dir = config_.state_dir();
  params.schema_version = store_->schema_version();
  params.host = host;
  params.started = started_;
  params.on_shutdown = [this](mycel::v1::ShutdownMode) {
    boost::asio::post(io_, [this] { RequestStop("api"); });
  };
  node_service_ = std::make_unique<NodeService>(std::move(params));
  ASSIGN_OR_RETURN(server_, ApiServer::Start(config_, {node_service_.get()}));

  log::Info(
      "myceld ready",
      {{"version", MYCEL_VERSION},
       {"node", config_.node_name()},
       {"pid", static_cast<int64_t>(getpid())},
       {"socket", config_.socket()},
       {"tcp_port", server_->tcp_port()},
       {"state_dir", config_.state_dir()},
       {"schema_version", store_->schema_version()},
       {"cgroup_mode", CgroupModeName(host.cgroup_mode)},
       {"startup_ms", absl::ToDoubleMilliseconds(absl::Now() - started_)}});
  return absl::OkStatus();
}

void Daemon::RequestStop(absl::string_view why) {
  if (stopping_) return;
  stopping_ = true;
  log::Info("stopping", {{"reason", why}});
  Stop();
  io_.stop();
}

void Daemon::Stop() {
  if (server_ != nullptr) server_->Shutdown(std::chrono::seconds(5));
  if (store_ != nullptr) {
    absl::Status s = store_->Checkpoint();
    if (!s.ok()) log::Warn("checkpoint failed", {{"error", s}});
  }
}

int Daemon::Run() {
  signals_.async_wait([this](const boost::system::error_code& ec, int sig) {
    if (ec) return;
    RequestStop(sig == SIGINT ? "SIGINT" : "SIGTERM");
  });
  io_.run();
  log::Info("myceld stopped");
  return 0;
}

}  // namespace mycel
