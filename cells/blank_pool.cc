#include "cells/blank_pool.h"

#include <sched.h>

#include "absl/strings/str_cat.h"
#include "runtime/log.h"
#include "runtime/process.h"
#include "runtime/resource_limits.h"
#include "runtime/spawn/spawn.h"
#include "runtime/status.h"

namespace mycel::cells {
namespace {

// Namespace sets the pool keeps blanks for, at most: a node whose cells ask
// for many different sets gets blanks for the first ones only.
constexpr size_t kMaxShapes = 4;

}  // namespace

BlankPool::BlankPool(Options options)
    : size_(std::max(0, options.size)),
      cheap_cgroup_moves_(options.cheap_cgroup_moves),
      cgroups_(options.cgroups),
      spawner_(options.spawner),
      reaper_(options.reaper),
      background_(options.background) {}

BlankPool::~BlankPool() {
  // Blanks are the daemon's own; cells outlive it.
  std::vector<std::unique_ptr<Blank>> blanks;
  {
    absl::MutexLock lock(&mu_);
    closing_ = true;
    for (auto& [flags, ready] : ready_) {
      for (auto& b : ready) blanks.push_back(std::move(b));
    }
    ready_.clear();
  }
  for (const auto& b : blanks) Remove(b->cgroup);
}

void BlankPool::Remove(const std::string& cgroup) {
  RemoveCgroup(cgroups_, cgroup);
}

bool BlankPool::Poolable(const PreparedCell& cell) const {
  // Not with a user namespace (its id maps are the cell's), a rootfs (the
  // cell's), or a cgroup namespace (rooted at the cgroup the init was in,
  // which on v2 is not the one the cell ends up with); on v2, not unless
  // moving the blank's init is cheap (see Options::cheap_cgroup_moves).
  return size_ > 0 && cell.ns_flags != 0 &&
         (cgroups_->can_rename() || cheap_cgroup_moves_) &&
         (cell.ns_flags & (CLONE_NEWUSER | CLONE_NEWCGROUP)) == 0 &&
         cell.spec.rootfs().empty() && !cell.spec.writable_system_paths();
}

std::unique_ptr<BlankPool::Blank> BlankPool::Pop(int ns_flags) {
  absl::MutexLock lock(&mu_);
  auto it = ready_.find(ns_flags);
  if (it == ready_.end() || it->second.empty()) return nullptr;
  std::unique_ptr<Blank> blank = std::move(it->second.back());
  it->second.pop_back();
  return blank;
}

absl::StatusOr<std::optional<Child>> BlankPool::Take(const PreparedCell& cell,
                                                     Reaper::Callback on_exit) {
  std::unique_ptr<Blank> blank = Pop(cell.ns_flags);
  Refill(cell.ns_flags);
  if (blank == nullptr) return std::nullopt;
  const std::string& name = cell.spec.name();
  const pid_t pid = blank->init->pid();
  // A blank's init is not watched: if it died, the reaper collected it as an
  // orphan. From now on its exit is the cell's; if it has not exited once
  // the watch is in place, the watch is its own (its pid cannot have been
  // reused while it lives).
  reaper_->Watch(pid, std::move(on_exit));
  if (blank->init->WaitExited(absl::ZeroDuration())) {
    reaper_->Unwatch(pid);
    background_->Post([this, cg = blank->cgroup] { Remove(cg); });
    return std::nullopt;
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
    background_->Post([this, cg = blank->cgroup] { Remove(cg); });
  }
  if (!s.ok()) {
    // Made from scratch instead (which also clears a cgroup of that name
    // that a crash left).
    reaper_->Unwatch(pid);
    log::Warn("cannot use a pooled cell", {{"cell", name}, {"error", s}});
    return std::nullopt;
  }
  s = Annotate(cgroups_->ApplyToNew(name, cell.limits), "limits");
  if (s.ok() && (cell.ns_flags & CLONE_NEWUTS)) {
    s = SetHostnameOf(blank->init->pidfd(), name);
  }
  // The blank's init inherited the background thread's nice value.
  if (s.ok()) s = Annotate(SetNice(pid, 0), "cell init");
  if (s.ok()) return std::move(blank->init);
  reaper_->Unwatch(pid);
  Remove(name);
  return s;
}

void BlankPool::Refill(int ns_flags) {
  absl::MutexLock lock(&mu_);
  if (ready_.count(ns_flags) == 0 && ready_.size() >= kMaxShapes) return;
  int& pending = pending_[ns_flags];
  while (!closing_ && ready_[ns_flags].size() + static_cast<size_t>(pending) <
                          static_cast<size_t>(size_)) {
    ++pending;
    background_->Post([this, ns_flags] { Make(ns_flags); });
  }
}

void BlankPool::Make(int ns_flags) {
  auto blank = std::make_unique<Blank>();
  {
    absl::MutexLock lock(&mu_);
    --pending_[ns_flags];
    if (closing_) return;
    blank->cgroup =
        absl::StrCat(kPoolCgroupPrefix, CurrentPid(), "-", ++serial_);
  }
  absl::Status s = cgroups_->Create(blank->cgroup, {});
  if (s.ok()) {
    PreparedCell shape;
    shape.ns_flags = ns_flags;
    absl::StatusOr<Child> init = spawner_->SpawnInit(
        blank->cgroup, shape, /*hostname=*/"", /*on_exit=*/nullptr);
    if (init.ok()) {
      blank->init.emplace(*std::move(init));
    } else {
      s = init.status();
    }
  }
  if (!s.ok()) {
    log::Warn("cannot make a pooled cell", {{"error", s}});
    if (!absl::IsAlreadyExists(s)) Remove(blank->cgroup);
    return;
  }
  // An init that died while it was made (killed from outside; this thread
  // runs at low priority and may wait long between the clone and here)
  // never enters the pool: nothing would take it out but a cell that asks
  // for these namespaces.
  if (blank->init->WaitExited(absl::ZeroDuration())) {
    log::Warn("a pooled cell's init died before it was ready",
              {{"cgroup", blank->cgroup}});
    Remove(blank->cgroup);
    return;
  }
  {
    absl::MutexLock lock(&mu_);
    if (!closing_) {
      ready_[ns_flags].push_back(std::move(blank));
      return;
    }
  }
  Remove(blank->cgroup);
}

}  // namespace mycel::cells
