#include "mesh/replication/node_replication.h"

#include <algorithm>
#include <atomic>

namespace mycel::replication {

absl::Duration GcInterval(absl::Duration tombstone_max_age) {
  return std::clamp(tombstone_max_age / 4, absl::Seconds(1), absl::Minutes(1));
}

// Polls the members on the clock and hands them to the driver; stops when
// told to (the clock cannot cancel a timer).
struct NodeReplication::Poller : std::enable_shared_from_this<Poller> {
  Clock* clock = nullptr;
  ReplicationDriver* driver = nullptr;
  MemberSource members;
  absl::Duration every;
  std::atomic<bool> stopped{false};
  // What the driver was told last (Run is never concurrent with itself).
  std::vector<ReplicationPeer> last_live;
  std::vector<std::string> last_away;
  bool told = false;

  void Run() {
    if (stopped.load()) return;
    std::vector<ReplicationPeer> live;
    std::vector<std::string> away;
    members(&live, &away);
    if (!told || live != last_live || away != last_away) {
      told = true;
      last_live = live;
      last_away = away;
      driver->SetMembers(std::move(live), std::move(away));
    }
    clock->RunAfter(every, [self = shared_from_this()] { self->Run(); });
  }
};

absl::Status NodeReplication::Start(Options o) {
  absl::MutexLock lock(&mu_);
  if (driver_ != nullptr || stopped_) {
    return absl::AlreadyExistsError("replication: already started");
  }
  if (o.objects == nullptr || !o.members) {
    return absl::InvalidArgumentError(
        "replication: objects and members are required");
  }
  log_ = std::make_unique<ObjectStoreLog>(o.objects, o.verifier);
  transport_ =
      std::make_unique<GrpcTransport>(std::move(o.channels), o.call_deadline);
  ReplicationDriverOptions d;
  d.replicator.name = o.name;
  d.replicator.origin = o.origin;
  d.replicator.random_seed = absl::ToUnixNanos(o.clock->Now());
  d.replicator.await_durable = true;
  d.replicator.tombstone_max_age = o.tombstone_max_age;
  d.replicator.forgotten_after = o.forgotten_after;
  d.replicator.gc_interval = GcInterval(o.tombstone_max_age);
  d.replicator.own_writes_hold = o.own_writes_hold;
  d.hold_own_writes = [objects = o.objects](absl::Duration at_most) {
    if (at_most > absl::ZeroDuration()) {
      objects->HoldLocalWrites(at_most);
    } else {
      objects->ReleaseLocalWrites();
    }
  };
  d.clock = o.clock;
  d.io = o.io;
  d.transport = transport_.get();
  d.log = log_.get();
  absl::StatusOr<std::unique_ptr<ReplicationDriver>> driver =
      ReplicationDriver::Start(std::move(d));
  if (!driver.ok()) return driver.status();
  driver_ = *std::move(driver);
  // What is on disk now; OnDurable tells of each later sync.
  driver_->OnDurable(o.objects->durable_seq());
  poller_ = std::make_shared<Poller>();
  poller_->clock = o.clock;
  poller_->driver = driver_.get();
  poller_->members = std::move(o.members);
  poller_->every = o.member_poll;
  poller_->Run();
  return absl::OkStatus();
}

bool NodeReplication::running() const {
  absl::MutexLock lock(&mu_);
  return driver_ != nullptr && !stopped_;
}

absl::Status NodeReplication::Deliver(std::string peer, std::string bytes) {
  absl::MutexLock lock(&mu_);
  if (driver_ == nullptr || stopped_) {
    return absl::FailedPreconditionError(
        "this node does not replicate (it serves no mesh yet)");
  }
  return driver_->Deliver(std::move(peer), std::move(bytes));
}

void NodeReplication::OnLocalChange(const store::ObjectChange& change) {
  absl::MutexLock lock(&mu_);
  if (driver_ != nullptr && !stopped_) driver_->OnLocalChange(change);
}

void NodeReplication::OnDurable(int64_t seq) {
  absl::MutexLock lock(&mu_);
  if (driver_ != nullptr && !stopped_) driver_->OnDurable(seq);
}

absl::StatusOr<std::vector<PeerLag>> NodeReplication::Lag() const {
  absl::MutexLock lock(&mu_);
  if (driver_ == nullptr) {
    return absl::FailedPreconditionError("this node does not replicate");
  }
  return driver_->Lag();
}

absl::StatusOr<ReplicationDriverStats> NodeReplication::Stats() const {
  absl::MutexLock lock(&mu_);
  if (driver_ == nullptr) {
    return absl::FailedPreconditionError("this node does not replicate");
  }
  return driver_->Stats();
}

void NodeReplication::Stop() {
  absl::MutexLock lock(&mu_);
  if (stopped_) return;
  stopped_ = true;
  if (poller_ != nullptr) poller_->stopped.store(true);
  if (driver_ != nullptr) driver_->Stop();
}

}  // namespace mycel::replication
