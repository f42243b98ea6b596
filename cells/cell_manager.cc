#include "cells/cell_manager.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cells/confinement.h"
#include "cells/exposures.h"
#include "cells/names.h"
#include "cells/spec_validation.h"
#include "proto/proto_time.h"
#include "runtime/fs.h"
#include "runtime/landlock.h"
#include "runtime/log.h"
#include "runtime/status.h"

namespace mycel::cells {
namespace {

using mycel::v1::ExecutableState;

constexpr char kDefaultPath[] =
    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
constexpr char kDefaultIdMap[] = "0 100000 65536";
// Cgroups of deleted cells, renamed out of the way until removed. Cell names
// cannot start with '.'.
constexpr char kDeletedCgroupPrefix[] = ".deleted-";
// Cgroups of blank cells (see CellManager::Blank).
constexpr char kPoolCgroupPrefix[] = ".pool-";
// Namespace sets the pool keeps blanks for, at most: a node whose cells ask
// for many different sets gets blanks for the first ones only.
constexpr size_t kMaxPoolShapes = 4;
// An adopted process that exited is reaped by its parent (the host's init,
// or a subreaper), not by us; its status is polled for this long.
constexpr int kAdoptedExitPolls = 200;
constexpr absl::Duration kAdoptedExitPollInterval = absl::Milliseconds(10);

// Sets the hostname in the UTS namespace of the process behind `pidfd`.
absl::Status SetHostnameOf(int pidfd, const std::string& hostname) {
  return InNamespaceOf(pidfd, CLONE_NEWUTS, [&] {
    if (sethostname(hostname.data(), hostname.size()) != 0) {
      return PosixError(absl::StrCat("sethostname ", hostname), errno);
    }
    return absl::OkStatus();
  });
}

int64_t NowMicros() { return absl::ToUnixMicros(absl::Now()); }

// In a user namespace, setresuid/setresgid take only ids its maps cover;
// say so before spawning rather than report the kernel's EINVAL.
absl::Status CheckIdsMapped(int ns_flags, const mycel::v1::CellSpec& cell,
                            const mycel::v1::ExecutableSpec& spec) {
  if ((ns_flags & CLONE_NEWUSER) == 0) return absl::OkStatus();
  struct Id {
    const char* field;
    bool set;
    uint32_t id;
    const std::string& map;
    const char* map_field;
  };
  for (const Id& id :
       {Id{"uid", spec.has_uid(), spec.uid(), cell.uid_map(), "uid_map"},
        Id{"gid", spec.has_gid(), spec.gid(), cell.gid_map(), "gid_map"}}) {
    if (!id.set) continue;
    ASSIGN_OR_RETURN(
        std::vector<IdMapRange> ranges,
        ParseIdMap(id.map_field, id.map.empty() ? kDefaultIdMap : id.map));
    if (!IdMapped(ranges, id.id)) {
      return absl::InvalidArgumentError(absl::StrCat(
          id.field, ": ", id.id, " is not mapped by the cell's ", id.map_field,
          " (\"", id.map.empty() ? kDefaultIdMap : id.map, "\")"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<int> NamespaceFlags(const mycel::v1::CellSpec& spec) {
  int flags = 0;
  for (int i = 0; i < spec.isolate_size(); ++i) {
    switch (spec.isolate(i)) {
      case mycel::v1::NAMESPACE_PID:
        flags |= CLONE_NEWPID;
        break;
      case mycel::v1::NAMESPACE_MOUNT:
        flags |= CLONE_NEWNS;
        break;
      case mycel::v1::NAMESPACE_UTS:
        flags |= CLONE_NEWUTS;
        break;
      case mycel::v1::NAMESPACE_IPC:
        flags |= CLONE_NEWIPC;
        break;
      case mycel::v1::NAMESPACE_NET:
        flags |= CLONE_NEWNET;
        break;
      case mycel::v1::NAMESPACE_USER:
        flags |= CLONE_NEWUSER;
        break;
      case mycel::v1::NAMESPACE_CGROUP:
        flags |= CLONE_NEWCGROUP;
        break;
      default:
        return absl::InvalidArgumentError(absl::StrCat(
            "isolate[", i, "]: unknown namespace ", spec.isolate(i)));
    }
  }
  return flags;
}

CgroupLimits ToCgroupLimits(const mycel::v1::Limits& l) {
  CgroupLimits c;
  if (l.has_cpu_max()) c.cpu_max = l.cpu_max();
  if (l.has_cpu_weight()) c.cpu_weight = l.cpu_weight();
  if (l.has_memory_max()) c.memory_max = l.memory_max();
  if (l.has_memory_high()) c.memory_high = l.memory_high();
  if (l.has_memory_swap_max()) c.memory_swap_max = l.memory_swap_max();
  if (l.has_pids_max()) c.pids_max = l.pids_max();
  c.cpuset_cpus = l.cpuset_cpus();
  c.cpuset_mems = l.cpuset_mems();
  return c;
}

// A process that has exited but was not yet reaped by its new parent still
// has a pid (and a pidfd can be opened for it); it is not running.
bool IsZombie(pid_t pid) {
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/stat", pid);
  absl::StatusOr<std::string> stat = ReadFile(path);
  if (!stat.ok()) return true;
  size_t paren = stat->rfind(')');
  return paren == std::string::npos || paren + 2 >= stat->size() ||
         (*stat)[paren + 2] == 'Z' || (*stat)[paren + 2] == 'X';
}

bool IsRunning(const mycel::v1::ExecutableStatus& s) {
  return s.state() == mycel::v1::EXECUTABLE_STATE_RUNNING;
}

bool IsFinal(const mycel::v1::ExecutableStatus& s) {
  return s.state() == mycel::v1::EXECUTABLE_STATE_EXITED ||
         s.state() == mycel::v1::EXECUTABLE_STATE_FAILED;
}

}  // namespace

CellManager::CellManager(Options options, CellStore store)
    : state_dir_(std::move(options.state_dir)),
      reaper_(options.reaper),
      io_(options.io),
      cgroups_(std::move(options.cgroups)),
      log_keeper_(options.log_keeper),
      log_cap_bytes_(options.log_cap_bytes),
      num_cpus_(static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN))),
      num_memory_nodes_(PossibleMemoryNodes()),
      protected_pids_(std::move(options.protected_pids)),
      store_(std::move(store)),
      pool_size_(std::max(0, options.pool_size)),
      cheap_cgroup_moves_(options.cheap_cgroup_moves),
      workload_open_file_limit_(options.workload_open_file_limit),
      hidden_paths_(DaemonPathsToHide(state_dir_, options.admin_socket)) {}

CellManager::~CellManager() {
  // Blanks are the daemon's own; cells outlive it. A blank being made now
  // sees shutting_down_ and removes itself.
  std::vector<std::unique_ptr<Blank>> blanks;
  {
    absl::MutexLock lock(&mu_);
    shutting_down_ = true;
    for (auto& [flags, ready] : pool_) {
      for (auto& b : ready) blanks.push_back(std::move(b));
    }
    pool_.clear();
  }
  for (const auto& b : blanks) RemoveCgroup(b->cgroup);
}

std::vector<pid_t> CellManager::DefaultProtectedPids() {
  std::vector<pid_t> pids = {1};
  if (getpid() != 1) pids.push_back(getpid());
  // kill(-pgid) reaches the daemon too when it is not its group's leader
  // (started from a script, say). 0: a group in an ancestor pid namespace,
  // which a cell below this daemon cannot name either.
  const pid_t group = getpgrp();
  if (group > 1 && group != getpid()) pids.push_back(group);
  return pids;
}

absl::StatusOr<std::unique_ptr<CellManager>> CellManager::Create(
    Options options) {
  CellStore store(options.store);
  std::unique_ptr<CellManager> m(new CellManager(std::move(options), store));
  RETURN_IF_ERROR(Annotate(m->MakeHostView(), "confined host view"));
  RETURN_IF_ERROR(m->Recover());
  return m;
}

std::string CellManager::LogPath(const std::string& cell,
                                 const std::string& name) const {
  return cells::LogPath(state_dir_, cell, name);
}

void CellManager::RunAfter(absl::Duration delay, std::function<void()> fn) {
  boost::asio::post(*io_, [this, delay, fn = std::move(fn)]() mutable {
    auto timer = std::make_shared<boost::asio::steady_timer>(
        *io_, absl::ToChronoNanoseconds(delay));
    timer->async_wait(
        [timer, fn = std::move(fn)](const boost::system::error_code& ec) {
          if (!ec) fn();
        });
  });
}

absl::Status CellManager::FlushLog(const std::string& cell,
                                   const std::string& name) {
  absl::StatusOr<LogStreamCounts> flushed =
      log_keeper_->Flush(LogStreamId(cell, name));
  // NOT_FOUND: no stream (the executable never started, or its keeper
  // went away): what is on disk is all there is.
  if (absl::IsNotFound(flushed.status())) return absl::OkStatus();
  return flushed.status();
}

void CellManager::CloseLogStreams(const std::string& cell,
                                  const std::vector<std::string>& names) {
  for (const std::string& name : names) {
    absl::Status s = log_keeper_->Close(LogStreamId(cell, name)).status();
    if (!s.ok() && !absl::IsNotFound(s)) {
      log::Warn("cannot close a log stream",
                {{"cell", cell}, {"exe", name}, {"error", s}});
    }
  }
}

absl::StatusOr<std::unique_ptr<CellManager::Cell>> CellManager::Prepare(
    const mycel::v1::CellSpec& spec) {
  auto cell = std::make_unique<Cell>();
  cell->spec = spec;
  RETURN_IF_ERROR(ValidateCellSpec(spec));
  ASSIGN_OR_RETURN(cell->ns_flags, NamespaceFlags(spec));
  cell->limits = ToCgroupLimits(spec.limits());
  RETURN_IF_ERROR(
      Annotate(ValidateCgroupLimits(cell->limits, num_cpus_, num_memory_nodes_),
               "limits"));
  if (!spec.rootfs().empty()) {
    if ((cell->ns_flags & CLONE_NEWNS) == 0) {
      return absl::InvalidArgumentError(
          "rootfs: needs its own mount namespace (isolate mount)");
    }
    struct stat st, host_root;
    if (spec.rootfs()[0] != '/' || stat(spec.rootfs().c_str(), &st) != 0 ||
        !S_ISDIR(st.st_mode)) {
      return absl::InvalidArgumentError(
          absl::StrCat("rootfs: \"", spec.rootfs(),
                       "\" is not an absolute path to a directory"));
    }
    // pivot_root cannot make the root its own new root, and a cell that
    // "pivots" into the host's root would only pretend to be confined.
    if (stat("/", &host_root) == 0 && st.st_dev == host_root.st_dev &&
        st.st_ino == host_root.st_ino) {
      return absl::InvalidArgumentError(
          absl::StrCat("rootfs: \"", spec.rootfs(),
                       "\" is the host's root directory; give the cell a "
                       "directory of its own"));
    }
  } else if (spec.readonly_rootfs()) {
    return absl::InvalidArgumentError("readonly_rootfs: needs rootfs");
  }
  ASSIGN_OR_RETURN(
      SeccompProfileKind kind,
      ParseSeccompProfile(spec.seccomp().empty() ? "default" : spec.seccomp()));
  SeccompOptions so;
  so.profile = kind;
  so.extra_deny.assign(spec.seccomp_deny().begin(), spec.seccomp_deny().end());
  if ((cell->ns_flags & CLONE_NEWPID) == 0) {
    // The cell sees the host's pids: keep it off PID 1 and the daemon
    // (runtime/seccomp/README.md, "Cells without a pid namespace").
    so.protected_pids = protected_pids_;
    if (so.protected_pids.empty()) so.protected_pids = DefaultProtectedPids();
    so.deny_broadcast_signals = true;
  }
  ASSIGN_OR_RETURN(cell->seccomp, CompileSeccomp(so));
  CapabilitySet caps = DefaultCapabilities();
  if (spec.capabilities_size() > 0) {
    ASSIGN_OR_RETURN(
        caps, ParseCapabilities(std::vector<std::string>(
                  spec.capabilities().begin(), spec.capabilities().end())));
  }
  ASSIGN_OR_RETURN(cell->caps, PrepareCapabilities(caps));
  return cell;
}

absl::StatusOr<Child> CellManager::SpawnInit(
    const std::string& cgroup, const Cell& cell, const std::string& hostname,
    std::function<void(const ChildExit&)> on_exit) {
  ASSIGN_OR_RETURN(CgroupJoin join, cgroups_->OpenJoin(cgroup));
  SpawnRequest req;
  req.cell_init = true;
  req.new_namespaces = cell.ns_flags;
  for (const UniqueFd& fd : join.procs_fds)
    req.cgroup_procs_fds.push_back(fd.get());
  req.cgroup_dir_fd = join.dir_fd.get();
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
  // Without a watch, nothing needs the reaper held while the init starts
  // (about half a millisecond, which a Start would otherwise wait out).
  if (!on_exit) return Spawn(req);
  return reaper_->Spawning([&]() -> absl::StatusOr<Child> {
    reaper_->mu()->AssertHeld();
    absl::StatusOr<Child> c = Spawn(req);
    if (c.ok()) reaper_->WatchLocked(c->pid(), std::move(on_exit));
    return c;
  });
}

absl::Status CellManager::StartInit(Cell* cell) {
  if (cell->ns_flags == 0) return absl::OkStatus();
  std::string name = cell->spec.name();
  absl::StatusOr<Child> init =
      SpawnInit(name, *cell, name,
                [this, name](const ChildExit& e) { OnInitExit(name, e.pid); });
  if (!init.ok()) return Annotate(init.status(), "cell init");
  cell->init_start_time = init->start_time();
  cell->init.emplace(*std::move(init));
  return absl::OkStatus();
}

absl::StatusOr<mycel::v1::Cell> CellManager::CreateCell(
    const mycel::v1::CellSpec& spec, const CreateOptions& options) {
  ASSIGN_OR_RETURN(std::unique_ptr<Cell> cell, Prepare(spec));
  cell->ephemeral = options.ephemeral;
  absl::MutexLock lock(&mu_);
  if (cells_.count(spec.name()) != 0) {
    return absl::AlreadyExistsError(
        absl::StrCat("cell \"", spec.name(), "\" already exists"));
  }
  cell->created_us = NowMicros();
  // The cgroup and the init first, then the whole record in one write: a
  // cell that could not be recorded (a full disk) is undone before the
  // error is answered, and resources that a crash leaves without a record
  // are removed when the daemon starts again (Recover).
  bool from_pool = false;
  if (Poolable(*cell)) {
    absl::StatusOr<bool> took = TakeBlank(cell.get());
    RefillPool(cell->ns_flags);
    if (!took.ok()) return took.status();
    from_pool = *took;
  }
  if (!from_pool) {
    absl::Status s = cgroups_->Create(spec.name(), cell->limits);
    if (s.code() == absl::StatusCode::kAlreadyExists) {
      // Left behind by a crash between creating it and recording the cell.
      cgroups_->KillAll(spec.name()).IgnoreError();
      s = cgroups_->Destroy(spec.name());
      if (s.ok()) s = cgroups_->Create(spec.name(), cell->limits);
    }
    if (s.ok()) {
      s = StartInit(cell.get());
      if (!s.ok()) cgroups_->Destroy(spec.name()).IgnoreError();
    }
    if (!s.ok()) return s;
  }
  CellRow row;
  row.spec = spec;
  row.created_us = cell->created_us;
  row.ephemeral = cell->ephemeral;
  if (cell->init.has_value()) {
    row.init_pid = cell->init->pid();
    row.init_start_time = cell->init_start_time;
  }
  if (absl::Status s = store_.InsertCell(row); !s.ok()) {
    if (cell->init.has_value()) {
      reaper_->Unwatch(cell->init->pid());
      cell->init->Signal(SIGKILL).IgnoreError();
    }
    RemoveCgroup(spec.name());
    return Annotate(s, "record the cell");
  }
  Cell* raw = cell.get();
  cells_[spec.name()] = std::move(cell);
  log::Info("cell created", {{"cell", spec.name()},
                             {"init_pid", raw->init ? raw->init->pid() : 0},
                             {"from_pool", from_pool}});
  return ToProto(*raw);
}

absl::Status CellManager::MakeHostView() {
  Confinement confined = CellConfinement({}, hidden_paths_);
  SpawnRequest req;
  req.cell_init = true;
  req.new_namespaces = CLONE_NEWNS;
  req.slave_mounts = true;
  req.readonly_paths = std::move(confined.readonly_paths);
  req.masked_paths = std::move(confined.masked_paths);
  // Not watched: the reaper collects it as an orphan once it is killed.
  ASSIGN_OR_RETURN(Child holder, Spawn(req));
  absl::StatusOr<UniqueFd> ns = holder.OpenMountNamespace();
  holder.Signal(SIGKILL).IgnoreError();
  RETURN_IF_ERROR(ns.status());
  host_view_ = *std::move(ns);
  return absl::OkStatus();
}

bool CellManager::InHostView(const Cell& cell) const {
  return (cell.ns_flags & CLONE_NEWNS) == 0 &&
         !cell.spec.writable_system_paths() && !UnprivilegedOnHost(cell.spec);
}

bool CellManager::Poolable(const Cell& cell) const {
  // Not with a user namespace (its id maps are the cell's), a rootfs (the
  // cell's), or a cgroup namespace (rooted at the cgroup the init was in,
  // which on v2 is not the one the cell ends up with); on v2, not unless
  // moving the blank's init is cheap (see Options::cheap_cgroup_moves).
  return pool_size_ > 0 && cell.ns_flags != 0 &&
         (cgroups_->can_rename() || cheap_cgroup_moves_) &&
         (cell.ns_flags & (CLONE_NEWUSER | CLONE_NEWCGROUP)) == 0 &&
         cell.spec.rootfs().empty() && !cell.spec.writable_system_paths();
}

absl::StatusOr<bool> CellManager::TakeBlank(Cell* cell) {
  auto it = pool_.find(cell->ns_flags);
  if (it == pool_.end() || it->second.empty()) return false;
  std::unique_ptr<Blank> blank = std::move(it->second.back());
  it->second.pop_back();
  const std::string& name = cell->spec.name();
  const pid_t pid = blank->init->pid();
  // A blank's init is not watched: if it died, the reaper collected it as an
  // orphan. From now on its exit is the cell's; if it has not exited once
  // the watch is in place, the watch is its own (its pid cannot have been
  // reused while it lives).
  reaper_->Watch(pid,
                 [this, name](const ChildExit& e) { OnInitExit(name, e.pid); });
  pollfd exited = {blank->init->pidfd(), POLLIN, 0};
  if (poll(&exited, 1, 0) != 0) {
    reaper_->Unwatch(pid);
    background_.Post([this, cg = blank->cgroup] { RemoveCgroup(cg); });
    return false;
  }
  // v1 renames the blank's cgroup; v2 cannot, so there the cell gets a new
  // cgroup and the init moves into it.
  const bool rename = cgroups_->can_rename();
  absl::Status s;
  if (rename) {
    s = cgroups_->Rename(blank->cgroup, name);
  } else {
    s = cgroups_->Create(name, {});
    if (s.ok()) {
      s = cgroups_->AddProcess(name, pid);
      if (!s.ok()) cgroups_->Destroy(name).IgnoreError();
    }
  }
  // The blank's cgroup is left behind empty (v2), or with its init if the
  // cell could not take it.
  if (!rename || !s.ok()) {
    background_.Post([this, cg = blank->cgroup] { RemoveCgroup(cg); });
  }
  if (!s.ok()) {
    // Made from scratch instead (which also clears a cgroup of that name
    // that a crash left).
    log::Warn("cannot use a pooled cell", {{"cell", name}, {"error", s}});
    return false;
  }
  s = Annotate(cgroups_->ApplyToNew(name, cell->limits), "limits");
  if (s.ok() && (cell->ns_flags & CLONE_NEWUTS)) {
    s = SetHostnameOf(blank->init->pidfd(), name);
  }
  // The blank's init inherited the background thread's nice value.
  if (s.ok() && setpriority(PRIO_PROCESS, static_cast<id_t>(pid), 0) != 0) {
    s = PosixError("setpriority of the cell init", errno);
  }
  if (s.ok()) {
    cell->init_start_time = blank->init->start_time();
    cell->init.emplace(*std::move(blank->init));
    return true;
  }
  reaper_->Unwatch(pid);
  RemoveCgroup(name);
  return s;
}

void CellManager::RefillPool(int ns_flags) {
  if (pool_.count(ns_flags) == 0 && pool_.size() >= kMaxPoolShapes) return;
  int& pending = pool_pending_[ns_flags];
  while (!shutting_down_ &&
         pool_[ns_flags].size() + static_cast<size_t>(pending) <
             static_cast<size_t>(pool_size_)) {
    ++pending;
    background_.Post([this, ns_flags] { MakeBlank(ns_flags); });
  }
}

void CellManager::MakeBlank(int ns_flags) {
  auto blank = std::make_unique<Blank>();
  blank->ns_flags = ns_flags;
  {
    absl::MutexLock lock(&mu_);
    --pool_pending_[ns_flags];
    if (shutting_down_) return;
    blank->cgroup =
        absl::StrCat(kPoolCgroupPrefix, getpid(), "-", ++pool_serial_);
  }
  absl::Status s = cgroups_->Create(blank->cgroup, {});
  if (s.ok()) {
    Cell shape;
    shape.ns_flags = ns_flags;
    absl::StatusOr<Child> init =
        SpawnInit(blank->cgroup, shape, /*hostname=*/"", /*on_exit=*/nullptr);
    if (init.ok()) {
      blank->init.emplace(*std::move(init));
    } else {
      s = init.status();
    }
  }
  if (!s.ok()) {
    log::Warn("cannot make a pooled cell", {{"error", s}});
    if (!absl::IsAlreadyExists(s)) RemoveCgroup(blank->cgroup);
    return;
  }
  {
    absl::MutexLock lock(&mu_);
    if (!shutting_down_) {
      pool_[ns_flags].push_back(std::move(blank));
      return;
    }
  }
  RemoveCgroup(blank->cgroup);
}

absl::StatusOr<CellManager::Cell*> CellManager::FindCell(
    const std::string& name) {
  auto it = cells_.find(name);
  if (it == cells_.end()) {
    return absl::NotFoundError(absl::StrCat("cell \"", name, "\" not found"));
  }
  return it->second.get();
}

absl::StatusOr<CellManager::Exe*> CellManager::FindExe(
    const std::string& cell, const std::string& name) {
  ASSIGN_OR_RETURN(Cell * c, FindCell(cell));
  auto it = c->exes.find(name);
  if (it == c->exes.end()) {
    return absl::NotFoundError(
        absl::StrCat("executable \"", cell, "/", name, "\" not found"));
  }
  return it->second.get();
}

absl::Status CellManager::DeleteCell(const std::string& name, bool force) {
  std::vector<pid_t> to_unwatch;
  UniqueFd mount_ns;
  absl::StatusOr<std::string> trash;
  {
    absl::MutexLock lock(&mu_);
    ASSIGN_OR_RETURN(Cell * cell, FindCell(name));
    int running = 0;
    for (const auto& [n, exe] : cell->exes) running += IsRunning(exe->status);
    if (running > 0 && !force) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cell \"", name, "\" has ", running,
          " running executable(s); stop them first, or delete with force"));
    }
    for (auto& [n, exe] : cell->exes) {
      exe->generation = NextGeneration();  // cancels pending restarts and exits
      if (exe->child.has_value()) {
        exe->child->Signal(SIGKILL).IgnoreError();  // it may be gone already
        to_unwatch.push_back(exe->child->pid());
      }
    }
    if (cell->init.has_value()) {
      // The init holds the last reference to the cell's mount namespace, so
      // it would tear the mounts down as it dies (an expedited RCU grace
      // period), and the cgroup would empty only after that. Holding a
      // reference of our own moves the teardown to background_. An
      // init that has already exited has no namespace left to hold.
      if (cell->ns_flags & CLONE_NEWNS) {
        absl::StatusOr<UniqueFd> ns = cell->init->OpenMountNamespace();
        if (ns.ok()) mount_ns = *std::move(ns);
      }
      cell->init->Signal(SIGKILL).IgnoreError();
      to_unwatch.push_back(cell->init->pid());
    }
    // Where the driver can rename (v1), the cgroup moves out of the cell's
    // name at once and the background empties and removes it: waiting for
    // the killed processes to finish exiting, and the rmdirs, are most of
    // a delete's time. The ".deleted-" name cannot be a cell's, and a
    // restarted daemon removes what a crash left behind (Recover).
    // Otherwise, and if the rename fails, it is done here.
    std::string doomed;
    if (cgroups_->can_rename()) {
      doomed = absl::StrCat(kDeletedCgroupPrefix, name, "-", getpid(), "-",
                            ++deleted_serial_);
      if (!cgroups_->Rename(name, doomed).ok()) doomed.clear();
    }
    if (!doomed.empty()) {
      background_.Post([this, doomed] { RemoveCgroup(doomed); });
    } else {
      // A cgroup that is already gone (removed by hand, or lost with a host
      // reboot) must not keep the cell from being deleted.
      absl::Status s = cgroups_->KillAll(name);
      if (s.ok()) s = cgroups_->Destroy(name);
      if (!s.ok() && s.code() != absl::StatusCode::kNotFound) return s;
    }
    RETURN_IF_ERROR(store_.DeleteCell(name));
    // The logs go with the cell. Renamed now, under the lock, so that a new
    // cell of the same name starts with none; removed in the background,
    // because removing files waits for the disk where the filesystem
    // discards freed blocks.
    // The keeper lets go of the cell's log files first, or its next write
    // would recreate them under the cell's name.
    std::vector<std::string> exe_names;
    for (const auto& [n, exe] : cell->exes) {
      if (exe->keeper_stream) exe_names.push_back(n);
    }
    CloseLogStreams(name, exe_names);
    trash = MoveLogDirToTrash(state_dir_, name);
    cells_.erase(name);
    Changed();
  }
  background_.Close(std::move(mount_ns));
  // Their exits no longer matter; the reaper collects them as orphans.
  for (pid_t pid : to_unwatch) reaper_->Unwatch(pid);
  if (trash.ok()) {
    background_.Post([dir = *std::move(trash)] { RemoveLogDir(dir); });
  } else if (!absl::IsNotFound(trash.status())) {
    log::Warn("cannot remove the cell's logs",
              {{"cell", name}, {"error", trash.status()}});
  }
  log::Info("cell deleted", {{"cell", name}, {"force", force}});
  return absl::OkStatus();
}

mycel::v1::Cell CellManager::ToProto(const Cell& cell) const {
  mycel::v1::Cell out;
  *out.mutable_spec() = cell.spec;
  auto* st = out.mutable_status();
  st->set_state(mycel::v1::CELL_STATE_READY);
  mycel::ToProto(absl::FromUnixMicros(cell.created_us),
                 st->mutable_created_at());
  st->set_init_pid(cell.init ? cell.init->pid() : 0);
  int running = 0;
  for (const auto& [n, exe] : cell.exes) running += IsRunning(exe->status);
  st->set_executables_running(running);
  st->set_executables_total(static_cast<int32_t>(cell.exes.size()));
  st->set_cgroup_driver(std::string(cgroups_->name()));
  std::vector<std::string> exposures = Exposures(cell.spec);
  st->set_security_boundary(exposures.empty());
  for (std::string& e : exposures) st->add_exposures(std::move(e));
  return out;
}

mycel::v1::Executable CellManager::ToProto(const Exe& exe) const {
  mycel::v1::Executable out;
  *out.mutable_spec() = exe.spec;
  *out.mutable_status() = exe.status;
  return out;
}

absl::StatusOr<mycel::v1::Cell> CellManager::GetCell(const std::string& name) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(Cell * cell, FindCell(name));
  return ToProto(*cell);
}

std::vector<mycel::v1::Cell> CellManager::ListCells() {
  absl::MutexLock lock(&mu_);
  std::vector<mycel::v1::Cell> out;
  for (const auto& [n, cell] : cells_) out.push_back(ToProto(*cell));
  return out;
}

absl::StatusOr<mycel::v1::CellStats> CellManager::Stats(
    const std::string& name) {
  {
    absl::MutexLock lock(&mu_);
    RETURN_IF_ERROR(FindCell(name).status());
  }
  ASSIGN_OR_RETURN(CgroupStats s, cgroups_->Stats(name));
  mycel::v1::CellStats out;
  out.set_name(name);
  out.set_cpu_usage_usec(s.cpu_usage_usec);
  out.set_memory_current(s.memory_current);
  out.set_memory_peak(s.memory_peak);
  out.set_pids_current(s.pids_current);
  out.set_oom_kills(s.oom_kills);
  return out;
}

absl::Status CellManager::Persist(const Exe& exe) {
  ExecutableRow row;
  row.spec = exe.spec;
  row.status = exe.status;
  row.start_time = exe.start_time;
  absl::Status s = store_.PutExecutable(row);
  if (!s.ok()) {
    log::Error(
        "cannot record executable status",
        {{"cell", exe.spec.cell()}, {"exe", exe.spec.name()}, {"error", s}});
  }
  return s;
}

absl::Status CellManager::Launch(Cell* cell, Exe* exe,
                                 const StartOptions& options) {
  const std::string& rootfs = cell->spec.rootfs();
  std::vector<std::string> env(exe->spec.env().begin(), exe->spec.env().end());
  bool has_path = false;
  for (const auto& e : env) has_path |= e.rfind("PATH=", 0) == 0;
  if (!has_path) env.push_back(kDefaultPath);
  ASSIGN_OR_RETURN(std::string program,
                   ResolveCommand(exe->spec.command(0), env, rootfs));

  // Output goes to the log keeper's pipe for this executable (the same
  // pipe across restarts), which copies it into its capped log files.
  UniqueFd log_fd;
  if (options.stdout_fd < 0 || options.stderr_fd < 0) {
    const std::string& cname = cell->spec.name();
    const std::string& ename = exe->spec.name();
    absl::StatusOr<UniqueFd> pipe =
        log_keeper_->Open(LogStreamId(cname, ename), LogPath(cname, ename),
                          static_cast<uint64_t>(log_cap_bytes_));
    if (!pipe.ok()) return Annotate(pipe.status(), "log keeper");
    log_fd = *std::move(pipe);
    exe->keeper_stream = true;
  }
  ASSIGN_OR_RETURN(CgroupJoin join, cgroups_->OpenJoin(cell->spec.name()));

  SpawnRequest req;
  req.argv.assign(exe->spec.command().begin(), exe->spec.command().end());
  req.argv[0] = program;
  req.env = std::move(env);
  req.cwd = exe->spec.cwd();
  if (workload_open_file_limit_ > 0) {
    req.open_file_limit = workload_open_file_limit_;
  }
  if (exe->spec.has_uid()) req.uid = exe->spec.uid();
  if (exe->spec.has_gid()) req.gid = exe->spec.gid();
  req.stdout_fd = options.stdout_fd >= 0 ? options.stdout_fd : log_fd.get();
  req.stderr_fd = options.stderr_fd >= 0 ? options.stderr_fd : log_fd.get();
  if (cell->init.has_value()) {
    // An init in the host view has joined it: its mount namespace is it.
    req.join_pidfd = cell->init->pidfd();
    req.join_namespaces =
        cell->ns_flags | (InHostView(*cell) ? CLONE_NEWNS : 0);
  } else if (InHostView(*cell)) {
    req.join_mount_ns_fd = host_view_.get();
  }
  for (const UniqueFd& fd : join.procs_fds)
    req.cgroup_procs_fds.push_back(fd.get());
  req.cgroup_dir_fd = join.dir_fd.get();
  // As root, the capability sets are set before the uid change; a non-root
  // workload then keeps only the bounding set, as in Docker (the kernel
  // clears its permitted, effective and ambient sets at setresuid).
  // A cell that shares the host's pids may signal none of the host's
  // processes, where the kernel can enforce it (Landlock's signal scope):
  // the seccomp filter protects PID 1 and myceld by pid, but not the ids
  // of myceld's threads, which reach the whole daemon.
  static constexpr LandlockScope kSignalScope{kLandlockScopeSignal};
  if ((cell->ns_flags & CLONE_NEWPID) == 0 &&
      LandlockAbi() >= kLandlockScopesAbi) {
    req.pre_exec.push_back({"landlock signal scope", ApplyLandlockScopeStep,
                            &kSignalScope, /*before_credentials=*/true});
  }
  req.pre_exec.push_back({"capabilities", ApplyCapabilitiesStep, &cell->caps,
                          /*before_credentials=*/true});
  req.pre_exec.push_back({"seccomp", ApplySeccompStep, &cell->seccomp});

  absl::StatusOr<uint64_t> before = cgroups_->OomKills(cell->spec.name());
  exe->oom_baseline = before.ok() ? *before : 0;
  const uint64_t generation = exe->generation = NextGeneration();
  std::string cname = cell->spec.name(), ename = exe->spec.name();
  absl::StatusOr<Child> child =
      reaper_->Spawning([&]() -> absl::StatusOr<Child> {
        reaper_->mu()->AssertHeld();
        absl::StatusOr<Child> c = Spawn(req);
        if (c.ok()) {
          reaper_->WatchLocked(
              c->pid(), [this, cname, ename, generation](const ChildExit& e) {
                OnExit(cname, ename, generation, &e);
              });
        }
        return c;
      });
  if (!child.ok()) return child.status();
  exe->started = absl::Now();
  exe->start_time = child->start_time();
  exe->adopted = false;
  exe->stop_requested = false;
  exe->status.set_state(mycel::v1::EXECUTABLE_STATE_RUNNING);
  exe->status.set_pid(child->pid());
  exe->status.clear_exit_code();
  exe->status.clear_signal();
  exe->status.set_oom_killed(false);
  exe->status.set_exit_status_unknown(false);
  exe->status.clear_finished_at();
  exe->status.clear_message();
  mycel::ToProto(exe->started, exe->status.mutable_started_at());
  exe->child.emplace(*std::move(child));
  // The run is acknowledged only once it is recorded: a process the store
  // does not know would outlive a restart unadopted and unsupervised. On a
  // full disk, say, it is killed and the caller gets the store's error.
  if (absl::Status recorded = Persist(*exe); !recorded.ok()) {
    KillUnrecorded(&*exe->child);
    exe->child.reset();
    exe->generation = NextGeneration();  // its exit is nobody's business
    exe->status.set_state(mycel::v1::EXECUTABLE_STATE_FAILED);
    exe->status.set_message(
        absl::StrCat("could not be recorded: ", recorded.message()));
    return Annotate(recorded, "record the started executable");
  }
  exe->history.starts.push_back(exe->started);
  Changed();
  return absl::OkStatus();
}

void CellManager::KillUnrecorded(Child* child) {
  child->Signal(SIGKILL).IgnoreError();  // it may have exited already
  // Our child: once the pidfd turns readable it is dead, and the reaper
  // collects it (its watch names a generation no executable has).
  pollfd exited = {child->pidfd(), POLLIN, 0};
  if (poll(&exited, 1, 1000) <= 0) {
    log::Warn("a killed, unrecorded process has not exited after 1 s",
              {{"pid", static_cast<int64_t>(child->pid())}});
  }
}

absl::StatusOr<mycel::v1::Executable> CellManager::Start(
    const mycel::v1::ExecutableSpec& spec, const StartOptions& options) {
  RETURN_IF_ERROR(ValidateExecutableSpec(spec));
  mycel::v1::ExecutableSpec s = spec;
  ASSIGN_OR_RETURN(RestartParams restart, ToRestartParams(s.restart()));

  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(Cell * cell, FindCell(s.cell()));
  RETURN_IF_ERROR(CheckIdsMapped(cell->ns_flags, cell->spec, s));
  if (s.name().empty()) {
    // Default: the program's base name, made unique in the cell.
    std::string base = s.command(0).substr(s.command(0).rfind('/') + 1);
    std::string name;
    for (char c : base) {
      char l = static_cast<char>(tolower(static_cast<unsigned char>(c)));
      name.push_back(
          isalnum(static_cast<unsigned char>(l)) || l == '-' || l == '_' ? l
                                                                         : '-');
    }
    if (name.empty() || !isalnum(static_cast<unsigned char>(name[0]))) {
      name = "exe" + name;
    }
    name = name.substr(0, 48);
    std::string candidate = name;
    for (int i = 2; cell->exes.count(candidate) != 0; ++i) {
      candidate = absl::StrCat(name, "-", i);
    }
    s.set_name(candidate);
  }
  RETURN_IF_ERROR(ValidateName("name", s.name()));
  auto it = cell->exes.find(s.name());
  if (it != cell->exes.end() && !IsFinal(it->second->status)) {
    return absl::AlreadyExistsError(absl::StrCat(
        "executable \"", s.cell(), "/", s.name(), "\" is already running"));
  }
  auto exe = std::make_unique<Exe>();
  exe->spec = s;
  exe->restart = restart;
  Exe* raw = exe.get();
  RETURN_IF_ERROR(Launch(cell, raw, options));
  cell->exes[s.name()] = std::move(exe);
  log::Info(
      "executable started",
      {{"cell", s.cell()}, {"exe", s.name()}, {"pid", raw->status.pid()}});
  return ToProto(*raw);
}

void CellManager::OnExit(const std::string& cname, const std::string& ename,
                         uint64_t generation, const ChildExit* exit) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<Exe*> found = FindExe(cname, ename);
  if (!found.ok()) return;  // deleted meanwhile
  if ((*found)->generation != generation) return;
  HandleExit(cname, ename, *found, exit);
}

void CellManager::HandleExit(const std::string& cname, const std::string& ename,
                             Exe* exe, const ChildExit* exit) {
  // This run is over: a timer that still names its generation (a stop's
  // SIGKILL) is stale.
  exe->generation = NextGeneration();
  absl::Time now = absl::Now();
  auto& st = exe->status;
  bool clean = false;
  if (exit == nullptr) {
    // An adopted process ended, and the kernel could not tell how (see
    // CollectAdoptedExit).
    st.set_exit_status_unknown(true);
    st.set_message("exited after myceld adopted it; exit status unknown");
  } else if (exit->exited()) {
    st.set_exit_code(exit->status);
    clean = exit->status == 0;
  } else {
    st.set_signal(exit->status);
    absl::StatusOr<uint64_t> oom_kills = cgroups_->OomKills(cname);
    if (exit->status == SIGKILL && oom_kills.ok() &&
        *oom_kills > exe->oom_baseline) {
      st.set_oom_killed(true);
      st.set_message(
          "killed by the OOM killer: the cell's memory limit was reached");
    }
  }
  mycel::ToProto(now, st.mutable_finished_at());
  exe->child.reset();
  exe->adopted = false;
  RunEnd end{clean, exe->stop_requested || shutting_down_, exe->started, now};
  RestartDecision d = DecideRestart(exe->restart, end, &exe->history);
  if (d.restart) {
    st.set_state(mycel::v1::EXECUTABLE_STATE_RESTARTING);
    st.set_restarts(st.restarts() + 1);
    const uint64_t gen = exe->generation = NextGeneration();
    RunAfter(d.delay, [this, cname, ename, gen] {
      absl::MutexLock lock(&mu_);
      absl::StatusOr<Exe*> e = FindExe(cname, ename);
      if (!e.ok() || (*e)->generation != gen || shutting_down_) return;
      absl::StatusOr<Cell*> c = FindCell(cname);
      absl::Status s = Launch(*c, *e, {});
      if (!s.ok()) {
        (*e)->status.set_state(mycel::v1::EXECUTABLE_STATE_FAILED);
        (*e)->status.set_message(absl::StrCat("restart failed: ", s.message()));
        Persist(**e).IgnoreError();  // logged
        Changed();
      }
    });
  } else if (d.start_limit_hit) {
    st.set_state(mycel::v1::EXECUTABLE_STATE_FAILED);
    st.set_message(absl::StrCat(
        "start limit hit: ", exe->restart.start_limit_burst, " starts within ",
        absl::FormatDuration(exe->restart.start_limit_interval)));
  } else {
    st.set_state(mycel::v1::EXECUTABLE_STATE_EXITED);
  }
  Persist(*exe).IgnoreError();  // logged
  Changed();
  log::Info("executable ended",
            {{"cell", cname},
             {"exe", ename},
             {"exit_code", st.has_exit_code() ? st.exit_code() : -1},
             {"signal", st.has_signal() ? st.signal() : 0},
             {"oom_killed", st.oom_killed()},
             {"restart", d.restart}});
}

void CellManager::OnInitExit(const std::string& cname, pid_t pid) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<Cell*> cell = FindCell(cname);
  if (!cell.ok() || !(*cell)->init.has_value() || (*cell)->init->pid() != pid)
    return;
  log::Warn("cell init exited; the cell's namespaces are gone",
            {{"cell", cname}});
  (*cell)->init.reset();
  Changed();
}

void CellManager::WatchAdopted(const std::string& cname,
                               const std::string& ename, uint64_t generation,
                               int pidfd) {
  // A pidfd turns readable when its process exits.
  int dup = fcntl(pidfd, F_DUPFD_CLOEXEC, 0);
  if (dup < 0) return;
  boost::asio::post(*io_, [this, cname, ename, generation, dup] {
    auto sd =
        std::make_shared<boost::asio::posix::stream_descriptor>(*io_, dup);
    sd->async_wait(
        boost::asio::posix::stream_descriptor::wait_read,
        [this, sd, cname, ename, generation](const boost::system::error_code&) {
          // The pidfd stays open until the exit status is read through it.
          CollectAdoptedExit(cname, ename, generation,
                             std::make_shared<UniqueFd>(sd->release()), 0);
        });
  });
}

void CellManager::CollectAdoptedExit(const std::string& cname,
                                     const std::string& ename,
                                     uint64_t generation,
                                     std::shared_ptr<UniqueFd> pidfd,
                                     int attempt) {
  absl::StatusOr<ExitStatus> s = ReapedExitStatus(pidfd->get());
  if (absl::IsUnavailable(s.status()) && attempt < kAdoptedExitPolls) {
    RunAfter(kAdoptedExitPollInterval,
             [this, cname, ename, generation, pidfd, attempt] {
               CollectAdoptedExit(cname, ename, generation, pidfd, attempt + 1);
             });
    return;
  }
  if (!s.ok() || (!s->exited && !s->signaled)) {
    OnExit(cname, ename, generation, nullptr);
    return;
  }
  ChildExit exit;
  exit.code = s->exited ? CLD_EXITED : s->core_dumped ? CLD_DUMPED : CLD_KILLED;
  exit.status = s->exited ? s->code : s->signal;
  OnExit(cname, ename, generation, &exit);
}

void CellManager::Stop(const std::string& cell, const std::string& name,
                       std::optional<absl::Duration> grace, EndCallback done) {
  {
    absl::MutexLock lock(&mu_);
    absl::StatusOr<Exe*> found = FindExe(cell, name);
    if (!found.ok()) {
      done(found.status());
      return;
    }
    Exe* exe = *found;
    if (exe->status.state() == mycel::v1::EXECUTABLE_STATE_RESTARTING) {
      exe->generation = NextGeneration();  // cancels the pending restart
      exe->status.set_state(mycel::v1::EXECUTABLE_STATE_EXITED);
      Persist(*exe).IgnoreError();  // logged
      Changed();
    }
    if (IsRunning(exe->status) && exe->child.has_value()) {
      absl::Duration g = grace.value_or(exe->spec.has_stop_grace()
                                            ? FromProto(exe->spec.stop_grace())
                                            : absl::Seconds(10));
      exe->stop_requested = true;
      const uint64_t gen = exe->generation;
      // NOT_FOUND: it exited and was reaped a moment ago; its exit is on
      // its way through the reaper, so wait for it like for any other.
      if (absl::Status s = exe->child->Signal(SIGTERM);
          !s.ok() && s.code() != absl::StatusCode::kNotFound) {
        done(s);
        return;
      }
      RunAfter(g, [this, cell, name, gen] {
        absl::MutexLock lock(&mu_);
        absl::StatusOr<Exe*> e = FindExe(cell, name);
        if (e.ok() && (*e)->generation == gen && (*e)->child.has_value()) {
          (*e)->child->Signal(SIGKILL).IgnoreError();  // it may have exited
        }
      });
    } else if (!IsFinal(exe->status)) {
      // Running, but adopted without a process to signal: nothing to stop.
      done(ToProto(*exe));
      return;
    }
  }
  // A stopped executable is not restarted, so it ends for good.
  WatchEnd(cell, name, std::move(done));
}

absl::StatusOr<mycel::v1::Executable> CellManager::Signal(
    const std::string& cell, const std::string& name, int sig) {
  if (sig <= 0 || sig >= NSIG) {
    return absl::InvalidArgumentError(absl::StrCat(
        "signal: ", sig, " is not a signal number (1..", NSIG - 1, ")"));
  }
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(Exe * exe, FindExe(cell, name));
  if (!IsRunning(exe->status) || !exe->child.has_value()) {
    return absl::FailedPreconditionError(
        absl::StrCat("executable \"", cell, "/", name, "\" is not running"));
  }
  RETURN_IF_ERROR(exe->child->Signal(sig));
  return ToProto(*exe);
}

absl::StatusOr<mycel::v1::Executable> CellManager::Get(
    const std::string& cell, const std::string& name) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(Exe * exe, FindExe(cell, name));
  return ToProto(*exe);
}

absl::StatusOr<std::vector<mycel::v1::Executable>> CellManager::List(
    const std::string& cell) {
  absl::MutexLock lock(&mu_);
  std::vector<mycel::v1::Executable> out;
  for (const auto& [cname, c] : cells_) {
    if (!cell.empty() && cname != cell) continue;
    for (const auto& [n, exe] : c->exes) out.push_back(ToProto(*exe));
  }
  if (!cell.empty() && cells_.count(cell) == 0) {
    return absl::NotFoundError(absl::StrCat("cell \"", cell, "\" not found"));
  }
  return out;
}

CellManager::EndWatch CellManager::WatchEnd(const std::string& cell,
                                            const std::string& name,
                                            EndCallback done) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<Exe*> exe = FindExe(cell, name);
  if (!exe.ok()) {
    done(exe.status());
    return 0;
  }
  if (IsFinal((*exe)->status)) {
    done(ToProto(**exe));
    return 0;
  }
  const EndWatch id = ++end_watch_serial_;
  end_watches_[id] = {cell, name, std::move(done)};
  return id;
}

void CellManager::CancelEndWatch(EndWatch id) {
  absl::MutexLock lock(&mu_);
  end_watches_.erase(id);
}

void CellManager::Changed() {
  changed_.SignalAll();
  for (auto it = end_watches_.begin(); it != end_watches_.end();) {
    absl::StatusOr<Exe*> exe = FindExe(it->second.cell, it->second.name);
    if (exe.ok() && !IsFinal((*exe)->status)) {
      ++it;
      continue;
    }
    EndCallback done = std::move(it->second.done);
    it = end_watches_.erase(it);
    if (exe.ok()) {
      done(ToProto(**exe));
    } else {
      done(exe.status());
    }
  }
}

void CellManager::StopAll(absl::Duration grace) {
  std::vector<std::pair<std::string, std::string>> running;
  {
    absl::MutexLock lock(&mu_);
    shutting_down_ = true;
    for (auto& [cname, cell] : cells_) {
      for (auto& [ename, exe] : cell->exes) {
        if (!exe->child.has_value() || !IsRunning(exe->status)) continue;
        exe->stop_requested = true;
        exe->child->Signal(SIGTERM).IgnoreError();
        running.emplace_back(cname, ename);
      }
    }
  }
  log::Info("stopping workloads",
            {{"executables", static_cast<int64_t>(running.size())},
             {"grace", absl::FormatDuration(grace)}});
  absl::Time deadline = absl::Now() + grace;
  auto any_running = [&] {
    absl::MutexLock lock(&mu_);
    for (const auto& [c, n] : running) {
      absl::StatusOr<Exe*> e = FindExe(c, n);
      if (e.ok() && IsRunning((*e)->status) && (*e)->child.has_value())
        return true;
    }
    return false;
  };
  while (any_running() && absl::Now() < deadline) {
    reaper_->ReapAll();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  {
    absl::MutexLock lock(&mu_);
    for (auto& [cname, cell] : cells_) {
      for (auto& [ename, exe] : cell->exes) {
        if (exe->child.has_value()) exe->child->Signal(SIGKILL).IgnoreError();
      }
      if (cell->init.has_value()) cell->init->Signal(SIGKILL).IgnoreError();
    }
  }
  for (int i = 0; i < 50 && any_running(); ++i) {
    reaper_->ReapAll();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  reaper_->ReapAll();
}

void CellManager::RemoveCgroup(const std::string& cgroup) {
  absl::Status s;
  // A second round for a process that joined after the first listing.
  for (int round = 0; round < 2; ++round) {
    s = cgroups_->KillAll(cgroup);
    if (s.ok()) s = cgroups_->Destroy(cgroup);
    if (!absl::IsFailedPrecondition(s)) break;
  }
  if (!s.ok() && !absl::IsNotFound(s)) {
    log::Warn("cannot remove a cgroup no cell uses any more",
              {{"cgroup", cgroup}, {"error", s}});
  }
}

absl::Status CellManager::Recover() {
  background_.Post([dir = state_dir_] { EmptyLogTrash(dir); });
  ASSIGN_OR_RETURN(std::vector<CellRow> all_rows, store_.LoadCells());
  ASSIGN_OR_RETURN(std::vector<ExecutableRow> exe_rows,
                   store_.LoadExecutables());
  // Throwaway cells of Cells.Run whose daemon went away mid-run: their
  // clients are gone with it, so nobody will read their output or delete
  // them. They go now, with what runs in them.
  std::vector<CellRow> rows;
  std::set<std::string> recorded;
  for (CellRow& row : all_rows) {
    if (!row.ephemeral) {
      recorded.insert(row.spec.name());
      rows.push_back(std::move(row));
      continue;
    }
    const std::string& name = row.spec.name();
    RemoveCgroup(name);
    absl::Status s = store_.DeleteCell(name);
    // Its streams, if any, are closed with the other stale ones below.
    absl::StatusOr<std::string> trash = MoveLogDirToTrash(state_dir_, name);
    if (trash.ok()) {
      background_.Post([dir = *std::move(trash)] { RemoveLogDir(dir); });
    }
    log::Info("removed a throwaway cell whose client is gone",
              {{"cell", name}, {"recorded_removal", s}});
  }
  // Cgroups of deleted cells that a crash left behind (see DeleteCell), the
  // blanks of an earlier daemon, and cells that a crash left between
  // making their cgroup and recording them (see CreateCell): the subtree is
  // this daemon's alone, so a cgroup that no record names is nobody's.
  absl::StatusOr<std::vector<std::string>> cgroups = cgroups_->List();
  if (!cgroups.ok()) {
    log::Warn("cannot list cell cgroups", {{"error", cgroups.status()}});
  } else {
    for (const std::string& cgroup : *cgroups) {
      if (recorded.count(cgroup) != 0) continue;
      if (!absl::StartsWith(cgroup, kDeletedCgroupPrefix) &&
          !absl::StartsWith(cgroup, kPoolCgroupPrefix)) {
        log::Warn("removing a cgroup that no cell record names",
                  {{"cgroup", cgroup}});
      }
      background_.Post([this, cgroup] { RemoveCgroup(cgroup); });
    }
  }
  absl::MutexLock lock(&mu_);
  for (CellRow& row : rows) {
    absl::StatusOr<std::unique_ptr<Cell>> prepared = Prepare(row.spec);
    if (!prepared.ok()) {
      log::Error("cannot recover cell",
                 {{"cell", row.spec.name()}, {"error", prepared.status()}});
      continue;
    }
    std::unique_ptr<Cell> cell = *std::move(prepared);
    cell->created_us = row.created_us;
    const std::string& name = row.spec.name();
    absl::StatusOr<bool> exists = cgroups_->Exists(name);
    if (exists.ok() && !*exists) {
      absl::Status s = cgroups_->Create(name, cell->limits);
      if (!s.ok())
        log::Error("cannot recreate cgroup", {{"cell", name}, {"error", s}});
    }
    if (row.init_pid > 0) {
      absl::StatusOr<Child> init =
          Child::Adopt(static_cast<pid_t>(row.init_pid), row.init_start_time);
      if (init.ok() && IsZombie(init->pid())) {
        init = absl::NotFoundError("cell init has exited");
      }
      if (init.ok()) {
        cell->init_start_time = row.init_start_time;
        cell->init.emplace(*std::move(init));
        // Its exit is seen by whoever is its parent now; if it is us (the
        // daemon was re-executed), the reaper reports it.
      } else {
        log::Warn("cell init is gone; starting a new one",
                  {{"cell", name}, {"error", init.status()}});
      }
    }
    if (cell->ns_flags != 0 && !cell->init.has_value()) {
      absl::Status s = StartInit(cell.get());
      if (s.ok()) {
        s = store_.SetCellInit(name, cell->init->pid(), cell->init_start_time);
      }
      if (!s.ok())
        log::Error("cannot start cell init", {{"cell", name}, {"error", s}});
    }
    cells_[name] = std::move(cell);
  }
  int adopted = 0, lost = 0;
  for (ExecutableRow& row : exe_rows) {
    auto cit = cells_.find(row.spec.cell());
    if (cit == cells_.end()) continue;
    Cell* cell = cit->second.get();
    auto exe = std::make_unique<Exe>();
    exe->spec = row.spec;
    exe->status = row.status;
    exe->start_time = row.start_time;
    absl::StatusOr<RestartParams> rp = ToRestartParams(row.spec.restart());
    exe->restart = rp.ok() ? *rp : RestartParams{};
    // Run's executables (with pipes instead) are in throwaway cells, which
    // are gone by now: every recorded one logs through the keeper.
    exe->keeper_stream = true;
    Exe* raw = exe.get();
    cell->exes[row.spec.name()] = std::move(exe);
    auto state = raw->status.state();
    if (state != mycel::v1::EXECUTABLE_STATE_RUNNING &&
        state != mycel::v1::EXECUTABLE_STATE_RESTARTING) {
      continue;
    }
    if (state == mycel::v1::EXECUTABLE_STATE_RUNNING) {
      absl::StatusOr<Child> child =
          Child::Adopt(static_cast<pid_t>(raw->status.pid()), raw->start_time);
      if (child.ok() && !IsZombie(child->pid())) {
        raw->child.emplace(*std::move(child));
        raw->adopted = true;
        absl::StatusOr<uint64_t> oom_kills =
            cgroups_->OomKills(cell->spec.name());
        raw->oom_baseline = oom_kills.ok() ? *oom_kills : 0;
        raw->started = absl::Now();
        const uint64_t gen = raw->generation = NextGeneration();
        WatchAdopted(cell->spec.name(), raw->spec.name(), gen,
                     raw->child->pidfd());
        ++adopted;
        continue;
      }
      // It ended while no myceld was watching.
      ++lost;
      raw->status.set_exit_status_unknown(true);
      raw->status.set_message("exited while myceld was not running");
      mycel::ToProto(absl::Now(), raw->status.mutable_finished_at());
    }
    RunEnd end{false, false, absl::Now(), absl::Now()};
    RestartDecision d = DecideRestart(raw->restart, end, &raw->history);
    if (d.restart) {
      raw->status.set_restarts(raw->status.restarts() + 1);
      absl::Status s = Launch(cell, raw, {});
      if (!s.ok()) {
        raw->status.set_state(mycel::v1::EXECUTABLE_STATE_FAILED);
        raw->status.set_message(absl::StrCat("restart failed: ", s.message()));
      }
    } else {
      raw->status.set_state(mycel::v1::EXECUTABLE_STATE_EXITED);
    }
    Persist(*raw).IgnoreError();  // logged
  }
  // Streams the keeper still serves for executables that are gone (their
  // cell was deleted while no daemon ran, or was a throwaway one) end.
  absl::StatusOr<std::vector<LogStreamInfo>> streams =
      log_keeper_->ListIfRunning();
  if (streams.ok()) {
    for (const LogStreamInfo& stream : *streams) {
      const size_t slash = stream.id.find('/');
      absl::StatusOr<Exe*> exe =
          slash == std::string::npos
              ? absl::StatusOr<Exe*>(absl::NotFoundError(stream.id))
              : FindExe(stream.id.substr(0, slash),
                        stream.id.substr(slash + 1));
      if (exe.ok()) continue;
      absl::Status s = log_keeper_->Close(stream.id).status();
      if (!s.ok() && !absl::IsNotFound(s)) {
        log::Warn("cannot close a stale log stream",
                  {{"stream", stream.id}, {"error", s}});
      }
    }
  } else {
    log::Warn("cannot list the log keeper's streams",
              {{"error", streams.status()}});
  }
  log::Info("cells recovered", {{"cells", static_cast<int64_t>(cells_.size())},
                                {"executables_adopted", adopted},
                                {"executables_ended_while_down", lost}});
  return absl::OkStatus();
}

}  // namespace mycel::cells
