#include "cells/cell_manager.h"

#include <sched.h>
#include <signal.h>

#include <chrono>
#include <thread>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "cells/confinement.h"
#include "cells/names.h"
#include "cells/spec_validation.h"
#include "runtime/host_info.h"
#include "runtime/log.h"
#include "runtime/process.h"
#include "runtime/status.h"

namespace mycel::cells {
namespace {

// Cgroups of deleted cells, renamed out of the way until removed. Cell names
// cannot start with '.'.
constexpr char kDeletedCgroupPrefix[] = ".deleted-";

absl::Status CellNotFound(const std::string& name) {
  return absl::NotFoundError(absl::StrCat("cell \"", name, "\" not found"));
}

}  // namespace

// ---------------------------------------------------------------------------
// CellState

Supervisor* CellManager::CellState::Find(const std::string& exe) {
  if (gone) return nullptr;
  auto it = exes.find(exe);
  return it == exes.end() ? nullptr : it->second.get();
}

absl::StatusOr<Supervisor*> CellManager::CellState::FindOrError(
    const std::string& exe) {
  if (gone) return CellNotFound(name());
  Supervisor* s = Find(exe);
  if (s == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("executable \"", name(), "/", exe, "\" not found"));
  }
  return s;
}

mycel::v1::Cell CellManager::CellState::ToProto() const {
  CellCounts counts;
  counts.init_pid = init.has_value() ? init->pid() : 0;
  for (const auto& [n, exe] : exes) counts.running += exe->running();
  counts.total = static_cast<int>(exes.size());
  return CellToProto(prepared.spec, created_us, counts,
                     manager_->cgroups_->name());
}

Reaper::Callback CellManager::CellState::ExitCallback(const std::string& exe,
                                                      uint64_t generation) {
  return [weak = weak_from_this(), exe, generation](const ChildExit& e) {
    if (CellRef cell = weak.lock()) cell->OnExit(exe, generation, e);
  };
}

void CellManager::CellState::OnExit(const std::string& exe, uint64_t generation,
                                    const std::optional<ChildExit>& exit) {
  absl::MutexLock lock(&mu);
  if (Supervisor* s = Find(exe)) s->Exited(generation, exit);
}

Reaper::Callback CellManager::CellState::InitExitCallback() {
  return [weak = weak_from_this()](const ChildExit& e) {
    CellRef cell = weak.lock();
    if (cell == nullptr) return;
    absl::MutexLock lock(&cell->mu);
    if (cell->gone || !cell->init.has_value() || cell->init->pid() != e.pid) {
      return;
    }
    log::Warn("cell init exited; the cell's namespaces are gone",
              {{"cell", cell->name()}});
    cell->init.reset();
  };
}

absl::StatusOr<std::unique_ptr<Run>> CellManager::CellState::Launch(
    const Supervisor& s, uint64_t generation, const StartOptions& options) {
  mu.AssertHeld();
  const std::string& exe = s.spec().name();
  // Output goes to the log keeper's pipe for this executable (the same
  // pipe across restarts), which copies it into its capped log files.
  UniqueFd log_fd;
  if (options.stdout_fd < 0 || options.stderr_fd < 0) {
    absl::StatusOr<UniqueFd> pipe = manager_->log_keeper_->Open(
        LogStreamId(name(), exe), manager_->LogPath(name(), exe),
        static_cast<uint64_t>(manager_->log_cap_bytes_));
    if (!pipe.ok()) return Annotate(pipe.status(), "log keeper");
    log_fd = *std::move(pipe);
    keeper_streams.insert(exe);
  }
  absl::StatusOr<uint64_t> oom_before = manager_->cgroups_->OomKills(name());
  ASSIGN_OR_RETURN(
      Child child,
      manager_->spawner_->SpawnExecutable(
          prepared, init.has_value() ? &*init : nullptr, s.spec(),
          options.stdout_fd >= 0 ? options.stdout_fd : log_fd.get(),
          options.stderr_fd >= 0 ? options.stderr_fd : log_fd.get(),
          ExitCallback(exe, generation)));
  return std::make_unique<ChildRun>(std::move(child), manager_->cgroups_.get(),
                                    name(), oom_before.ok() ? *oom_before : 0);
}

absl::Status CellManager::CellState::Record(const Supervisor& s) {
  mu.AssertHeld();
  ExecutableRow row;
  row.spec = s.spec();
  row.status = s.status();
  if (s.run() != nullptr) {
    row.start_time =
        static_cast<const ChildRun*>(s.run())->child().start_time();
  }
  absl::Status st = manager_->store_.PutExecutable(row);
  if (!st.ok()) {
    log::Error("cannot record executable status",
               {{"cell", name()}, {"exe", s.spec().name()}, {"error", st}});
  }
  return st;
}

void CellManager::CellState::After(absl::Duration delay, const Supervisor& s,
                                   std::function<void(Supervisor&)> fn) {
  manager_->clock_->RunAfter(
      delay, [weak = weak_from_this(), exe = s.spec().name(), target = &s,
              fn = std::move(fn)] {
        CellRef cell = weak.lock();
        if (cell == nullptr) return;
        absl::MutexLock lock(&cell->mu);
        Supervisor* s = cell->Find(exe);
        // Another supervisor of the same name stands in for a replaced one.
        if (s == target) fn(*s);
      });
}

void CellManager::CellState::Changed(const Supervisor&) {
  mu.AssertHeld();
  manager_->FireEndWatches(*this);
}

// ---------------------------------------------------------------------------
// CellManager

CellManager::CellManager(Options options, CellStore store,
                         std::unique_ptr<CellSpawner> spawner)
    : state_dir_(std::move(options.state_dir)),
      reaper_(options.reaper),
      io_(options.io),
      clock_(options.clock),
      cgroups_(std::move(options.cgroups)),
      log_keeper_(options.log_keeper),
      log_cap_bytes_(options.log_cap_bytes),
      store_(std::move(store)),
      spawner_(std::move(spawner)) {
  host_shape_.num_cpus = OnlineCpus();
  host_shape_.num_memory_nodes = PossibleMemoryNodes();
  host_shape_.protected_pids = options.protected_pids.empty()
                                   ? DefaultProtectedPids()
                                   : std::move(options.protected_pids);
  pool_.emplace(BlankPool::Options{
      .size = options.pool_size,
      .cheap_cgroup_moves = options.cheap_cgroup_moves,
      .cgroups = cgroups_.get(),
      .spawner = spawner_.get(),
      .reaper = reaper_,
      .background = &background_,
  });
}

CellManager::~CellManager() = default;

std::vector<pid_t> CellManager::DefaultProtectedPids() {
  std::vector<pid_t> pids = {1};
  const pid_t self = CurrentPid();
  if (self != 1) pids.push_back(self);
  // kill(-pgid) reaches the daemon too when it is not its group's leader
  // (started from a script, say). 0: a group in an ancestor pid namespace,
  // which a cell below this daemon cannot name either.
  const pid_t group = CurrentProcessGroup();
  if (group > 1 && group != self) pids.push_back(group);
  return pids;
}

absl::StatusOr<std::unique_ptr<CellManager>> CellManager::Create(
    Options options) {
  ASSIGN_OR_RETURN(
      std::unique_ptr<CellSpawner> spawner,
      CellSpawner::Create({
          .cgroups = options.cgroups.get(),
          .reaper = options.reaper,
          .hidden_paths =
              DaemonPathsToHide(options.state_dir, options.admin_socket),
          .workload_open_file_limit = options.workload_open_file_limit,
          .workload_oom_score_adj = options.workload_oom_score_adj,
      }));
  CellStore store(options.store);
  std::unique_ptr<CellManager> m(
      new CellManager(std::move(options), store, std::move(spawner)));
  RETURN_IF_ERROR(m->Recover());
  return m;
}

std::string CellManager::LogPath(const std::string& cell,
                                 const std::string& name) const {
  return cells::LogPath(state_dir_, cell, name);
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
                                  const std::set<std::string>& names) {
  for (const std::string& name : names) {
    absl::Status s = log_keeper_->Close(LogStreamId(cell, name)).status();
    if (!s.ok() && !absl::IsNotFound(s)) {
      log::Warn("cannot close a log stream",
                {{"cell", cell}, {"exe", name}, {"error", s}});
    }
  }
}

absl::StatusOr<CellManager::CellRef> CellManager::FindCell(
    const std::string& name) {
  absl::MutexLock lock(&mu_);
  auto it = cells_.find(name);
  if (it == cells_.end()) return CellNotFound(name);
  return it->second;
}

std::vector<CellManager::CellRef> CellManager::AllCells() {
  absl::MutexLock lock(&mu_);
  std::vector<CellRef> out;
  out.reserve(cells_.size());
  for (const auto& [name, cell] : cells_) out.push_back(cell);
  return out;
}

absl::Status CellManager::StartInit(CellState* cell) {
  if (cell->prepared.ns_flags == 0) return absl::OkStatus();
  absl::StatusOr<Child> init = spawner_->SpawnInit(
      cell->name(), cell->prepared, cell->name(), cell->InitExitCallback());
  if (!init.ok()) return Annotate(init.status(), "cell init");
  cell->init.emplace(*std::move(init));
  return absl::OkStatus();
}

absl::Status CellManager::Build(CellState* cell, bool* from_pool) {
  const std::string& name = cell->name();
  // The cgroup and the init first, then the whole record in one write: a
  // cell that could not be recorded (a full disk) is undone before the
  // error is answered, and resources that a crash leaves without a record
  // are removed when the daemon starts again (Recover).
  *from_pool = false;
  if (pool_->Poolable(cell->prepared)) {
    ASSIGN_OR_RETURN(std::optional<Child> init,
                     pool_->Take(cell->prepared, cell->InitExitCallback()));
    if (init.has_value()) {
      cell->init = std::move(init);
      *from_pool = true;
    }
  }
  if (!*from_pool) {
    absl::Status s = cgroups_->Create(name, cell->prepared.limits);
    if (s.code() == absl::StatusCode::kAlreadyExists) {
      // Left behind by a crash between creating it and recording the cell.
      cgroups_->KillAll(name).IgnoreError();
      s = cgroups_->Destroy(name);
      if (s.ok()) s = cgroups_->Create(name, cell->prepared.limits);
    }
    if (s.ok()) {
      s = StartInit(cell);
      if (!s.ok()) cgroups_->Destroy(name).IgnoreError();
    }
    RETURN_IF_ERROR(s);
  }
  CellRow row;
  row.spec = cell->prepared.spec;
  row.created_us = cell->created_us;
  row.ephemeral = cell->ephemeral;
  if (cell->init.has_value()) {
    row.init_pid = cell->init->pid();
    row.init_start_time = cell->init->start_time();
  }
  if (absl::Status s = store_.InsertCell(row); !s.ok()) {
    if (cell->init.has_value()) {
      reaper_->Unwatch(cell->init->pid());
      cell->init->Signal(SIGKILL).IgnoreError();
      cell->init.reset();
    }
    RemoveCgroup(cgroups_.get(), name);
    return Annotate(s, "record the cell");
  }
  return absl::OkStatus();
}

absl::StatusOr<mycel::v1::Cell> CellManager::CreateCell(
    const mycel::v1::CellSpec& spec, const CreateOptions& options) {
  ASSIGN_OR_RETURN(PreparedCell prepared, PrepareCell(spec, host_shape_));
  auto cell = std::make_shared<CellState>(this, std::move(prepared),
                                          absl::ToUnixMicros(clock_->Now()),
                                          options.ephemeral);
  // Held until the cell is made (or undone): a caller that finds it in the
  // registry meanwhile waits, and so does its init's exit.
  absl::MutexLock lock(&cell->mu);
  {
    absl::MutexLock registry(&mu_);
    if (!cells_.emplace(spec.name(), cell).second) {
      return absl::AlreadyExistsError(
          absl::StrCat("cell \"", spec.name(), "\" already exists"));
    }
  }
  bool from_pool = false;
  if (absl::Status s = Build(cell.get(), &from_pool); !s.ok()) {
    cell->gone = true;
    absl::MutexLock registry(&mu_);
    cells_.erase(spec.name());
    return s;
  }
  log::Info("cell created", {{"cell", spec.name()},
                             {"init_pid", cell->init ? cell->init->pid() : 0},
                             {"from_pool", from_pool}});
  return cell->ToProto();
}

absl::Status CellManager::DeleteCell(const std::string& name, bool force) {
  ASSIGN_OR_RETURN(CellRef cell, FindCell(name));
  std::vector<pid_t> to_unwatch;
  UniqueFd mount_ns;
  absl::StatusOr<std::string> trash;
  {
    absl::MutexLock lock(&cell->mu);
    if (cell->gone) return CellNotFound(name);
    int running = 0;
    for (const auto& [n, exe] : cell->exes) running += exe->running();
    if (running > 0 && !force) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cell \"", name, "\" has ", running,
          " running executable(s); stop them first, or delete with force"));
    }
    // The record goes first: if it cannot (a full disk), nothing changes.
    // Processes and a cgroup that a crash leaves without a record are
    // removed when the daemon starts again (Recover).
    RETURN_IF_ERROR(store_.DeleteCell(name));
    cell->gone = true;
    for (auto& [n, exe] : cell->exes) {
      exe->Abandon();
      if (exe->run() != nullptr) to_unwatch.push_back(exe->run()->pid());
    }
    if (cell->init.has_value()) {
      // The init holds the last reference to the cell's mount namespace, so
      // it would tear the mounts down as it dies (an expedited RCU grace
      // period), and the cgroup would empty only after that. Holding a
      // reference of our own moves the teardown to background_. An init
      // that has already exited has no namespace left to hold.
      if (cell->prepared.ns_flags & CLONE_NEWNS) {
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
    // Otherwise, and if the rename fails, it is done here; a cgroup that is
    // already gone (removed by hand, or lost with a host reboot) does not
    // matter, and one that cannot be removed now is left to the
    // background.
    std::string doomed;
    if (cgroups_->can_rename()) {
      doomed = absl::StrCat(kDeletedCgroupPrefix, name, "-", CurrentPid(), "-",
                            ++deleted_serial_);
      if (!cgroups_->Rename(name, doomed).ok()) doomed.clear();
    }
    if (doomed.empty()) {
      absl::Status s = cgroups_->KillAll(name);
      if (s.ok()) s = cgroups_->Destroy(name);
      if (!s.ok() && !absl::IsNotFound(s)) {
        log::Warn("cannot remove a deleted cell's cgroup yet; retrying",
                  {{"cell", name}, {"error", s}});
        doomed = name;
      }
    }
    if (!doomed.empty()) {
      background_.Post(
          [this, doomed] { RemoveCgroup(cgroups_.get(), doomed); });
    }
    // The logs go with the cell. Renamed now, under the lock, so that a new
    // cell of the same name starts with none; removed in the background,
    // because removing files waits for the disk where the filesystem
    // discards freed blocks. The keeper lets go of the cell's log files
    // first, or its next write would recreate them under the cell's name.
    CloseLogStreams(name, cell->keeper_streams);
    trash = MoveLogDirToTrash(state_dir_, name);
    FireEndWatches(*cell);
  }
  {
    absl::MutexLock registry(&mu_);
    auto it = cells_.find(name);
    if (it != cells_.end() && it->second == cell) cells_.erase(it);
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

absl::StatusOr<mycel::v1::Cell> CellManager::GetCell(const std::string& name) {
  ASSIGN_OR_RETURN(CellRef cell, FindCell(name));
  absl::MutexLock lock(&cell->mu);
  if (cell->gone) return CellNotFound(name);
  return cell->ToProto();
}

std::vector<mycel::v1::Cell> CellManager::ListCells() {
  std::vector<mycel::v1::Cell> out;
  for (const CellRef& cell : AllCells()) {
    absl::MutexLock lock(&cell->mu);
    if (!cell->gone) out.push_back(cell->ToProto());
  }
  return out;
}

absl::StatusOr<mycel::v1::CellStats> CellManager::Stats(
    const std::string& name) {
  RETURN_IF_ERROR(FindCell(name).status());
  ASSIGN_OR_RETURN(CgroupStats s, cgroups_->Stats(name));
  return StatsToProto(name, s);
}

absl::StatusOr<mycel::v1::Executable> CellManager::Start(
    const mycel::v1::ExecutableSpec& spec, const StartOptions& options) {
  RETURN_IF_ERROR(ValidateExecutableSpec(spec));
  mycel::v1::ExecutableSpec s = spec;
  ASSIGN_OR_RETURN(RestartParams restart, ToRestartParams(s.restart()));
  ASSIGN_OR_RETURN(CellRef cell, FindCell(s.cell()));
  absl::MutexLock lock(&cell->mu);
  if (cell->gone) return CellNotFound(s.cell());
  RETURN_IF_ERROR(CheckIdsMapped(cell->prepared, s));
  if (s.name().empty()) {
    absl::flat_hash_set<std::string> taken;
    for (const auto& [n, unused] : cell->exes) taken.insert(n);
    s.set_name(DefaultExecutableName(
        s.command(0), [&](const std::string& n) { return taken.contains(n); }));
  }
  RETURN_IF_ERROR(ValidateName("name", s.name()));
  if (Supervisor* old = cell->Find(s.name()); old != nullptr && !old->final()) {
    return absl::AlreadyExistsError(absl::StrCat(
        "executable \"", s.cell(), "/", s.name(), "\" is already running"));
  }
  auto exe = std::make_unique<Supervisor>(cell.get(), clock_, s, restart);
  RETURN_IF_ERROR(exe->Start(options));
  Supervisor* raw = exe.get();
  cell->exes[s.name()] = std::move(exe);
  log::Info(
      "executable started",
      {{"cell", s.cell()}, {"exe", s.name()}, {"pid", raw->status().pid()}});
  return raw->ToProto();
}

void CellManager::Stop(const std::string& cell_name, const std::string& name,
                       std::optional<absl::Duration> grace, EndCallback done) {
  absl::StatusOr<CellRef> cell = FindCell(cell_name);
  if (!cell.ok()) {
    done(cell.status());
    return;
  }
  absl::MutexLock lock(&(*cell)->mu);
  absl::StatusOr<Supervisor*> exe = (*cell)->FindOrError(name);
  if (!exe.ok()) {
    done(exe.status());
    return;
  }
  absl::StatusOr<bool> ending = (*exe)->Stop(grace);
  if (!ending.ok()) {
    done(ending.status());
  } else if (!*ending) {
    done((*exe)->ToProto());
  } else {
    // A stopped executable is not restarted, so it ends for good; its exit
    // needs this cell's lock, so it cannot come before the watch.
    AddEndWatch(**cell, name, std::move(done));
  }
}

absl::StatusOr<mycel::v1::Executable> CellManager::Signal(
    const std::string& cell_name, const std::string& name, int sig) {
  if (sig <= 0 || sig >= NSIG) {
    return absl::InvalidArgumentError(absl::StrCat(
        "signal: ", sig, " is not a signal number (1..", NSIG - 1, ")"));
  }
  ASSIGN_OR_RETURN(CellRef cell, FindCell(cell_name));
  absl::MutexLock lock(&cell->mu);
  ASSIGN_OR_RETURN(Supervisor * exe, cell->FindOrError(name));
  RETURN_IF_ERROR(exe->Signal(sig));
  return exe->ToProto();
}

absl::StatusOr<mycel::v1::Executable> CellManager::Get(
    const std::string& cell_name, const std::string& name) {
  ASSIGN_OR_RETURN(CellRef cell, FindCell(cell_name));
  absl::MutexLock lock(&cell->mu);
  ASSIGN_OR_RETURN(Supervisor * exe, cell->FindOrError(name));
  return exe->ToProto();
}

absl::StatusOr<std::vector<mycel::v1::Executable>> CellManager::List(
    const std::string& cell_name) {
  std::vector<CellRef> cells;
  if (cell_name.empty()) {
    cells = AllCells();
  } else {
    ASSIGN_OR_RETURN(CellRef cell, FindCell(cell_name));
    cells.push_back(std::move(cell));
  }
  std::vector<mycel::v1::Executable> out;
  for (const CellRef& cell : cells) {
    absl::MutexLock lock(&cell->mu);
    if (cell->gone) {
      if (!cell_name.empty()) return CellNotFound(cell_name);
      continue;
    }
    for (const auto& [n, exe] : cell->exes) out.push_back(exe->ToProto());
  }
  return out;
}

Cells::EndWatch CellManager::WatchEnd(const std::string& cell_name,
                                      const std::string& name,
                                      EndCallback done) {
  absl::StatusOr<CellRef> cell = FindCell(cell_name);
  if (!cell.ok()) {
    done(cell.status());
    return 0;
  }
  absl::MutexLock lock(&(*cell)->mu);
  absl::StatusOr<Supervisor*> exe = (*cell)->FindOrError(name);
  if (!exe.ok()) {
    done(exe.status());
    return 0;
  }
  if ((*exe)->final()) {
    done((*exe)->ToProto());
    return 0;
  }
  return AddEndWatch(**cell, name, std::move(done));
}

Cells::EndWatch CellManager::AddEndWatch(const CellState& cell,
                                         const std::string& exe,
                                         EndCallback done) {
  absl::MutexLock lock(&watch_mu_);
  const EndWatch id = ++end_watch_serial_;
  end_watches_[id] = {&cell, exe, std::move(done)};
  return id;
}

void CellManager::CancelEndWatch(EndWatch id) {
  absl::MutexLock lock(&watch_mu_);
  end_watches_.erase(id);
}

void CellManager::FireEndWatches(const CellState& cell) {
  absl::MutexLock lock(&watch_mu_);
  for (auto it = end_watches_.begin(); it != end_watches_.end();) {
    if (it->second.cell != &cell) {
      ++it;
      continue;
    }
    auto found = cell.gone ? cell.exes.end() : cell.exes.find(it->second.exe);
    if (found != cell.exes.end() && !found->second->final()) {
      ++it;
      continue;
    }
    EndCallback done = std::move(it->second.done);
    const std::string exe = std::move(it->second.exe);
    it = end_watches_.erase(it);
    if (found != cell.exes.end()) {
      done(found->second->ToProto());
    } else {
      done(absl::NotFoundError(absl::StrCat("executable \"", cell.name(), "/",
                                            exe, "\" not found")));
    }
  }
}

void CellManager::StopAll(absl::Duration grace) {
  const std::vector<CellRef> cells = AllCells();
  int signalled = 0;
  for (const CellRef& cell : cells) {
    absl::MutexLock lock(&cell->mu);
    for (auto& [n, exe] : cell->exes) signalled += exe->StopForShutdown();
  }
  log::Info("stopping workloads", {{"executables", signalled},
                                   {"grace", absl::FormatDuration(grace)}});
  auto any_running = [&] {
    for (const CellRef& cell : cells) {
      absl::MutexLock lock(&cell->mu);
      for (const auto& [n, exe] : cell->exes) {
        if (exe->running() && exe->run() != nullptr) return true;
      }
    }
    return false;
  };
  const absl::Time deadline = clock_->Now() + grace;
  while (any_running() && clock_->Now() < deadline) {
    reaper_->ReapAll();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (const CellRef& cell : cells) {
    absl::MutexLock lock(&cell->mu);
    for (auto& [n, exe] : cell->exes) exe->KillForShutdown();
    if (cell->init.has_value()) cell->init->Signal(SIGKILL).IgnoreError();
  }
  for (int i = 0; i < 50 && any_running(); ++i) {
    reaper_->ReapAll();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  reaper_->ReapAll();
}

}  // namespace mycel::cells
