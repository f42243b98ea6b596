// CellManager::Recover: what a restarted daemon finds. Cells and
// executables recorded in the store are adopted: running processes are
// identified by pid and start time and supervised again; those that ended
// while no myceld ran are recorded as such, and restarted if their policy
// says so. What no record names (cgroups of deleted cells, blanks of an
// earlier daemon, Cells.Run's throwaway cells, log streams of gone
// executables) is removed.
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cells/cell_manager.h"
#include "runtime/fs.h"
#include "runtime/log.h"
#include "runtime/status.h"

namespace mycel::cells {
namespace {

// Cgroups of deleted cells (see CellManager::DeleteCell).
constexpr char kDeletedCgroupPrefix[] = ".deleted-";
// An adopted process that exited is reaped by its parent (the host's init,
// or a subreaper), not by us; its status is polled for this long.
constexpr int kAdoptedExitPolls = 200;
constexpr absl::Duration kAdoptedExitPollInterval = absl::Milliseconds(10);

// A process that has exited but was not yet reaped by its new parent still
// has a pid (and a pidfd can be opened for it); it is not running.
bool IsZombie(pid_t pid) {
  absl::StatusOr<std::string> stat =
      ReadFile(absl::StrCat("/proc/", pid, "/stat"));
  if (!stat.ok()) return true;
  size_t paren = stat->rfind(')');
  return paren == std::string::npos || paren + 2 >= stat->size() ||
         (*stat)[paren + 2] == 'Z' || (*stat)[paren + 2] == 'X';
}

// The process recorded as (pid, start time), if it still runs.
absl::StatusOr<Child> AdoptRunning(int64_t pid, uint64_t start_time) {
  absl::StatusOr<Child> child =
      Child::Adopt(static_cast<pid_t>(pid), start_time);
  if (child.ok() && IsZombie(child->pid())) {
    return absl::NotFoundError("it has exited");
  }
  return child;
}

}  // namespace

absl::Status CellManager::Recover() {
  background_.Post([dir = state_dir_] { EmptyLogTrash(dir); });
  ASSIGN_OR_RETURN(std::vector<CellRow> all_rows, store_.LoadCells());
  ASSIGN_OR_RETURN(std::vector<ExecutableRow> exe_rows,
                   store_.LoadExecutables());
  ASSIGN_OR_RETURN(std::vector<CellRow> rows,
                   DropLeftovers(std::move(all_rows)));
  for (const CellRow& row : rows) AdoptCell(row);
  int adopted = 0, lost = 0;
  for (const ExecutableRow& row : exe_rows) {
    switch (AdoptExecutable(row)) {
      case Adoption::kAdopted:
        ++adopted;
        break;
      case Adoption::kLost:
        ++lost;
        break;
      default:
        break;
    }
  }
  CloseStaleLogStreams();
  log::Info("cells recovered",
            {{"cells", static_cast<int64_t>(AllCells().size())},
             {"executables_adopted", adopted},
             {"executables_ended_while_down", lost}});
  return absl::OkStatus();
}

absl::StatusOr<std::vector<CellRow>> CellManager::DropLeftovers(
    std::vector<CellRow> all_rows) {
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
    RemoveCgroup(cgroups_.get(), name);
    absl::Status s = store_.DeleteCell(name);
    // Its streams, if any, are closed with the other stale ones.
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
    return rows;
  }
  for (const std::string& cgroup : *cgroups) {
    if (recorded.count(cgroup) != 0) continue;
    if (!absl::StartsWith(cgroup, kDeletedCgroupPrefix) &&
        !absl::StartsWith(cgroup, kPoolCgroupPrefix)) {
      log::Warn("removing a cgroup that no cell record names",
                {{"cgroup", cgroup}});
    }
    background_.Post([this, cgroup] { RemoveCgroup(cgroups_.get(), cgroup); });
  }
  return rows;
}

void CellManager::AdoptCell(const CellRow& row) {
  const std::string& name = row.spec.name();
  absl::StatusOr<PreparedCell> prepared = PrepareCell(row.spec, host_shape_);
  if (!prepared.ok()) {
    log::Error("cannot recover cell",
               {{"cell", name}, {"error", prepared.status()}});
    return;
  }
  auto cell = std::make_shared<CellState>(this, *std::move(prepared),
                                          row.created_us, row.ephemeral);
  absl::MutexLock lock(&cell->mu);
  absl::StatusOr<bool> exists = cgroups_->Exists(name);
  if (exists.ok() && !*exists) {
    absl::Status s = cgroups_->Create(name, cell->prepared.limits);
    if (!s.ok()) {
      log::Error("cannot recreate cgroup", {{"cell", name}, {"error", s}});
    }
  }
  if (row.init_pid > 0) {
    absl::StatusOr<Child> init =
        AdoptRunning(row.init_pid, row.init_start_time);
    if (init.ok()) {
      // Its exit is seen by whoever is its parent now; if it is us (the
      // daemon was re-executed), the reaper reports it.
      cell->init.emplace(*std::move(init));
    } else {
      log::Warn("cell init is gone; starting a new one",
                {{"cell", name}, {"error", init.status()}});
    }
  }
  if (cell->prepared.ns_flags != 0 && !cell->init.has_value()) {
    absl::Status s = StartInit(cell.get());
    if (s.ok()) {
      s = store_.SetCellInit(name, cell->init->pid(), cell->init->start_time());
    }
    if (!s.ok()) {
      log::Error("cannot start cell init", {{"cell", name}, {"error", s}});
    }
  }
  absl::MutexLock registry(&mu_);
  cells_[name] = std::move(cell);
}

CellManager::Adoption CellManager::AdoptExecutable(const ExecutableRow& row) {
  absl::StatusOr<CellRef> cell = FindCell(row.spec.cell());
  if (!cell.ok()) return Adoption::kNoCell;
  absl::MutexLock lock(&(*cell)->mu);
  absl::StatusOr<RestartParams> restart = ToRestartParams(row.spec.restart());
  auto exe = std::make_unique<Supervisor>(
      cell->get(), clock_, row.spec, restart.ok() ? *restart : RestartParams{});
  // Run's executables (with pipes instead) are in throwaway cells, which
  // are gone by now: every recorded one logs through the keeper.
  (*cell)->keeper_streams.insert(row.spec.name());
  std::unique_ptr<ChildRun> run;
  if (row.status.state() == mycel::v1::EXECUTABLE_STATE_RUNNING) {
    absl::StatusOr<Child> child =
        AdoptRunning(row.status.pid(), row.start_time);
    if (child.ok()) {
      absl::StatusOr<uint64_t> oom = cgroups_->OomKills(row.spec.cell());
      run = std::make_unique<ChildRun>(*std::move(child), cgroups_.get(),
                                       row.spec.cell(), oom.ok() ? *oom : 0);
    }
  }
  const bool adopted = run != nullptr;
  const bool lost =
      !adopted && row.status.state() == mycel::v1::EXECUTABLE_STATE_RUNNING;
  exe->Recover(row.status, std::move(run));
  if (adopted) {
    WatchAdopted(*cell, row.spec.name(), exe->generation(),
                 static_cast<const ChildRun*>(exe->run())->child());
  }
  (*cell)->exes[row.spec.name()] = std::move(exe);
  return adopted ? Adoption::kAdopted
         : lost  ? Adoption::kLost
                 : Adoption::kRecorded;
}

void CellManager::CloseStaleLogStreams() {
  // Streams the keeper still serves for executables that are gone (their
  // cell was deleted while no daemon ran, or was a throwaway one) end.
  absl::StatusOr<std::vector<LogStreamInfo>> streams =
      log_keeper_->ListIfRunning();
  if (!streams.ok()) {
    log::Warn("cannot list the log keeper's streams",
              {{"error", streams.status()}});
    return;
  }
  for (const LogStreamInfo& stream : *streams) {
    const size_t slash = stream.id.find('/');
    if (slash != std::string::npos) {
      absl::StatusOr<CellRef> cell = FindCell(stream.id.substr(0, slash));
      if (cell.ok()) {
        absl::MutexLock lock(&(*cell)->mu);
        if ((*cell)->Find(stream.id.substr(slash + 1)) != nullptr) continue;
      }
    }
    absl::Status s = log_keeper_->Close(stream.id).status();
    if (!s.ok() && !absl::IsNotFound(s)) {
      log::Warn("cannot close a stale log stream",
                {{"stream", stream.id}, {"error", s}});
    }
  }
}

void CellManager::WatchAdopted(const CellRef& cell, const std::string& exe,
                               uint64_t generation, const Child& child) {
  // A pidfd turns readable when its process exits.
  absl::StatusOr<UniqueFd> pidfd = child.DupPidfd();
  if (!pidfd.ok()) {
    log::Warn(
        "cannot watch an adopted executable",
        {{"cell", cell->name()}, {"exe", exe}, {"error", pidfd.status()}});
    return;
  }
  boost::asio::post(*io_, [this, weak = std::weak_ptr<CellState>(cell), exe,
                           generation, fd = pidfd->release()] {
    auto sd = std::make_shared<boost::asio::posix::stream_descriptor>(*io_, fd);
    sd->async_wait(
        boost::asio::posix::stream_descriptor::wait_read,
        [this, sd, weak, exe, generation](const boost::system::error_code&) {
          // The pidfd stays open until the exit status is read
          // through it.
          CollectAdoptedExit(weak, exe, generation,
                             std::make_shared<UniqueFd>(sd->release()), 0);
        });
  });
}

void CellManager::CollectAdoptedExit(std::weak_ptr<CellState> weak,
                                     std::string exe, uint64_t generation,
                                     std::shared_ptr<UniqueFd> pidfd,
                                     int attempt) {
  absl::StatusOr<ExitStatus> s = ReapedExitStatus(pidfd->get());
  if (absl::IsUnavailable(s.status()) && attempt < kAdoptedExitPolls) {
    clock_->RunAfter(kAdoptedExitPollInterval, [this, weak, exe, generation,
                                                pidfd, attempt] {
      CollectAdoptedExit(weak, exe, generation, pidfd, attempt + 1);
    });
    return;
  }
  CellRef cell = weak.lock();
  if (cell == nullptr) return;
  if (!s.ok() || (!s->exited && !s->signaled)) {
    cell->OnExit(exe, generation, std::nullopt);
    return;
  }
  ChildExit exit;
  exit.pid = 0;
  exit.code = s->exited ? CLD_EXITED : s->core_dumped ? CLD_DUMPED : CLD_KILLED;
  exit.status = s->exited ? s->code : s->signal;
  cell->OnExit(exe, generation, exit);
}

}  // namespace mycel::cells
