#include "cells/cell_spawner.h"

#include <sched.h>
#include <signal.h>

#include "absl/strings/str_cat.h"
#include "cells/confinement.h"
#include "cells/exposures.h"
#include "runtime/landlock.h"
#include "runtime/log.h"
#include "runtime/spawn/command.h"
#include "runtime/spawn/spawn.h"
#include "runtime/status.h"

namespace mycel::cells {
namespace {

constexpr char kDefaultPath[] =
    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

void AddCgroupJoin(const CgroupJoin& join, SpawnRequest* req) {
  for (const UniqueFd& fd : join.procs_fds) {
    req->cgroup_procs_fds.push_back(fd.get());
  }
  req->cgroup_dir_fd = join.dir_fd.get();
}

}  // namespace

CellSpawner::CellSpawner(Options options)
    : cgroups_(options.cgroups),
      reaper_(options.reaper),
      hidden_paths_(std::move(options.hidden_paths)),
      workload_open_file_limit_(options.workload_open_file_limit),
      workload_oom_score_adj_(options.workload_oom_score_adj) {}

absl::StatusOr<std::unique_ptr<CellSpawner>> CellSpawner::Create(
    Options options) {
  std::unique_ptr<CellSpawner> spawner(new CellSpawner(std::move(options)));
  // The host view: a mount namespace that a short-lived process sets up,
  // held by host_view_ after it is gone.
  Confinement confined = CellConfinement({}, spawner->hidden_paths_);
  SpawnRequest req;
  req.cell_init = true;
  req.new_namespaces = CLONE_NEWNS;
  req.slave_mounts = true;
  req.readonly_paths = std::move(confined.readonly_paths);
  req.masked_paths = std::move(confined.masked_paths);
  // Not watched: the reaper collects it as an orphan once it is killed.
  absl::StatusOr<Child> holder = Spawn(req);
  if (!holder.ok()) return Annotate(holder.status(), "confined host view");
  absl::StatusOr<UniqueFd> ns = holder->OpenMountNamespace();
  holder->Signal(SIGKILL).IgnoreError();
  if (!ns.ok()) return Annotate(ns.status(), "confined host view");
  spawner->host_view_ = *std::move(ns);
  return spawner;
}

bool CellSpawner::InHostView(const PreparedCell& cell) {
  return (cell.ns_flags & CLONE_NEWNS) == 0 &&
         !cell.spec.writable_system_paths() && !UnprivilegedOnHost(cell.spec);
}

absl::StatusOr<Child> CellSpawner::SpawnInit(const std::string& cgroup,
                                             const PreparedCell& cell,
                                             const std::string& hostname,
                                             Reaper::Callback on_exit) {
  ASSIGN_OR_RETURN(CgroupJoin join, cgroups_->OpenJoin(cgroup));
  SpawnRequest req;
  req.cell_init = true;
  req.new_namespaces = cell.ns_flags;
  req.oom_score_adj = workload_oom_score_adj_;
  AddCgroupJoin(join, &req);
  req.rootfs = cell.spec.rootfs();
  req.readonly_rootfs = cell.spec.readonly_rootfs();
  if (cell.ns_flags & CLONE_NEWNS) {
    Confinement confined = CellConfinement(cell.spec, hidden_paths_);
    req.readonly_paths = std::move(confined.readonly_paths);
    req.masked_paths = std::move(confined.masked_paths);
  } else if (InHostView(cell)) {
    req.join_mount_ns_fd = host_view_.get();
  }
  req.mount_proc =
      (cell.ns_flags & CLONE_NEWPID) && (cell.ns_flags & CLONE_NEWNS);
  if (cell.ns_flags & CLONE_NEWUTS) req.hostname = hostname;
  req.loopback_up = (cell.ns_flags & CLONE_NEWNET) != 0;
  if (cell.ns_flags & CLONE_NEWUSER) {
    req.uid_map =
        cell.spec.uid_map().empty() ? kDefaultIdMap : cell.spec.uid_map();
    req.gid_map =
        cell.spec.gid_map().empty() ? kDefaultIdMap : cell.spec.gid_map();
  }
  if (!on_exit) return Spawn(req);
  return reaper_->SpawnWatched([&] { return Spawn(req); }, std::move(on_exit));
}

absl::StatusOr<Child> CellSpawner::SpawnExecutable(
    const PreparedCell& cell, const Child* init,
    const mycel::v1::ExecutableSpec& spec, int stdout_fd, int stderr_fd,
    Reaper::Callback on_exit) {
  std::vector<std::string> env(spec.env().begin(), spec.env().end());
  bool has_path = false;
  for (const auto& e : env) has_path |= e.rfind("PATH=", 0) == 0;
  if (!has_path) env.push_back(kDefaultPath);
  ASSIGN_OR_RETURN(std::string program,
                   ResolveCommand(spec.command(0), env, cell.spec.rootfs()));
  ASSIGN_OR_RETURN(CgroupJoin join, cgroups_->OpenJoin(cell.spec.name()));

  SpawnRequest req;
  req.argv.assign(spec.command().begin(), spec.command().end());
  req.argv[0] = program;
  req.env = std::move(env);
  req.cwd = spec.cwd();
  if (workload_open_file_limit_ > 0) {
    req.open_file_limit = workload_open_file_limit_;
  }
  req.oom_score_adj = workload_oom_score_adj_;
  if (spec.has_uid()) req.uid = spec.uid();
  if (spec.has_gid()) req.gid = spec.gid();
  req.stdout_fd = stdout_fd;
  req.stderr_fd = stderr_fd;
  if (init != nullptr) {
    // An init in the host view has joined it: its mount namespace is it.
    req.join_pidfd = init->pidfd();
    req.join_namespaces = cell.ns_flags | (InHostView(cell) ? CLONE_NEWNS : 0);
  } else if (InHostView(cell)) {
    req.join_mount_ns_fd = host_view_.get();
  }
  AddCgroupJoin(join, &req);
  // As root, the capability sets are set before the uid change; a non-root
  // workload then keeps only the bounding set, as in Docker (the kernel
  // clears its permitted, effective and ambient sets at setresuid).
  // A cell that shares the host's pids may signal none of the host's
  // processes, where the kernel can enforce it (Landlock's signal scope):
  // the seccomp filter protects PID 1 and myceld by pid, but not the ids
  // of myceld's threads, which reach the whole daemon.
  static constexpr LandlockScope kSignalScope{kLandlockScopeSignal};
  if ((cell.ns_flags & CLONE_NEWPID) == 0 &&
      LandlockAbi() >= kLandlockScopesAbi) {
    req.pre_exec.push_back({"landlock signal scope", ApplyLandlockScopeStep,
                            &kSignalScope, /*before_credentials=*/true});
  }
  req.pre_exec.push_back({"capabilities", ApplyCapabilitiesStep, &cell.caps,
                          /*before_credentials=*/true});
  req.pre_exec.push_back({"seccomp", ApplySeccompStep, &cell.seccomp});
  return reaper_->SpawnWatched([&] { return Spawn(req); }, std::move(on_exit));
}

bool ChildRun::OomKilled() const {
  absl::StatusOr<uint64_t> kills = cgroups_->OomKills(cell_);
  return kills.ok() && *kills > oom_baseline_;
}

void ChildRun::Kill(absl::Duration timeout) {
  child_.Signal(SIGKILL).IgnoreError();  // it may have exited already
  // Once the pidfd turns readable it is dead, and the reaper collects it
  // (its watch names a generation no run has any more).
  if (!child_.WaitExited(timeout)) {
    log::Warn("a killed process has not exited in time",
              {{"pid", static_cast<int64_t>(child_.pid())},
               {"waited", absl::FormatDuration(timeout)}});
  }
}

void RemoveCgroup(CgroupDriver* cgroups, const std::string& cgroup) {
  absl::Status s;
  // A second round for a process that joined after the first listing.
  for (int round = 0; round < 2; ++round) {
    s = cgroups->KillAll(cgroup);
    if (s.ok()) s = cgroups->Destroy(cgroup);
    if (!absl::IsFailedPrecondition(s)) break;
  }
  if (!s.ok() && !absl::IsNotFound(s)) {
    log::Warn("cannot remove a cgroup no cell uses any more",
              {{"cgroup", cgroup}, {"error", s}});
  }
}

}  // namespace mycel::cells
