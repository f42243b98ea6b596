#include "mesh/replication/driver.h"

#include <atomic>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "runtime/log.h"

namespace mycel::replication {

// Work runs on `strand_` under `mu_`, which the queries also take. Posted
// handlers and timer callbacks hold a reference (the clock's and the
// transport's only a weak one until posted), so the Core outlives whatever
// is queued; once stopped, they do nothing.
class ReplicationDriver::Core : public std::enable_shared_from_this<Core> {
 public:
  Core(ReplicationDriverOptions options, std::unique_ptr<Replicator> r)
      : options_(std::move(options)),
        strand_(boost::asio::make_strand(*options_.io)),
        r_(std::move(r)) {}

  void OnStrand(std::function<void(Core&)> fn,
                std::function<void()> if_stopped = nullptr) {
    boost::asio::post(strand_, [self = shared_from_this(), fn = std::move(fn),
                                if_stopped = std::move(if_stopped)] {
      absl::MutexLock lock(&self->mu_);
      if (self->stopped_) {
        if (if_stopped) if_stopped();
        return;
      }
      fn(*self);
      self->AfterCallLocked();
    });
  }

  static std::function<void()> Later(std::weak_ptr<Core> weak,
                                     std::function<void(Core&)> fn) {
    return [weak = std::move(weak), fn = std::move(fn)] {
      if (std::shared_ptr<Core> self = weak.lock()) self->OnStrand(fn);
    };
  }

  absl::Status Deliver(std::string peer, std::string bytes) {
    {
      absl::MutexLock lock(&deliver_mu_);
      if (auto q = quarantined_until_.find(peer);
          q != quarantined_until_.end()) {
        if (options_.clock->Now() < q->second) {
          ++deliveries_quarantined_;
          return absl::ResourceExhaustedError(absl::StrCat(
              "replication: ", peer,
              " sent too many changes this node refused; its messages are "
              "dropped for now"));
        }
        quarantined_until_.erase(q);
      }
      // One peer may fill only its share of the queue: a flood from one
      // member must not crowd out the others.
      int& mine = queued_by_peer_[peer];
      if (queued_ >= options_.max_queued_deliveries ||
          mine >= options_.max_queued_per_peer) {
        if (mine == 0) queued_by_peer_.erase(peer);
        ++deliveries_dropped_;
        return absl::ResourceExhaustedError(
            queued_ >= options_.max_queued_deliveries
                ? std::string("replication: too many messages waiting; "
                              "dropped")
                : absl::StrCat("replication: too many messages from ", peer,
                               " waiting; dropped"));
      }
      ++mine;
      ++queued_;
    }
    auto dequeued = [this, peer] {
      absl::MutexLock lock(&deliver_mu_);
      --queued_;
      if (auto it = queued_by_peer_.find(peer);
          it != queued_by_peer_.end() && --it->second <= 0) {
        queued_by_peer_.erase(it);
      }
    };
    OnStrand(
        [peer, bytes = std::move(bytes), dequeued](Core& c) {
          c.mu_.AssertHeld();  // OnStrand holds it
          dequeued();
          ++c.stats_.messages_received;
          v1::ReplicationMessage m;
          if (bytes.size() > c.options_.max_message_bytes ||
              !m.ParseFromString(bytes)) {
            ++c.stats_.messages_rejected;
            log::Debug("replication: undecodable message", {{"peer", peer}});
            return;
          }
          const absl::Time now = c.options_.clock->Now();
          absl::Status s = c.r_->HandleMessage(peer, m, now);
          if (!s.ok()) {
            ++c.stats_.messages_rejected;
            log::Debug("replication: message refused",
                       {{"peer", peer}, {"status", s}});
          }
          c.MaybeQuarantineLocked(peer, now);
          c.MaybeLogOwnBehindLocked(peer);
        },
        dequeued);
    return absl::OkStatus();
  }

  void OnLocalChange(store::ObjectChange change) {
    OnStrand([change = std::move(change)](Core& c) {
      c.mu_.AssertHeld();  // OnStrand holds it
      c.r_->OnLocalChange(change, c.options_.clock->Now());
    });
  }

  void OnDurable(int64_t seq) {
    OnStrand([seq](Core& c) {
      c.mu_.AssertHeld();  // OnStrand holds it
      c.r_->OnDurable(seq, c.options_.clock->Now());
    });
  }

  void SetMembers(std::vector<ReplicationPeer> live,
                  std::vector<std::string> away) {
    OnStrand([live = std::move(live), away = std::move(away)](Core& c) {
      c.mu_.AssertHeld();  // OnStrand holds it
      std::vector<std::string> names;
      c.addresses_.clear();
      for (const ReplicationPeer& p : live) {
        names.push_back(p.name);
        c.addresses_[p.name] = p.address;
      }
      c.r_->SetMembers(std::move(names), away, c.options_.clock->Now());
    });
  }

  ReplicationDriverStats Stats() const {
    absl::MutexLock lock(&mu_);
    ReplicationDriverStats s = stats_;
    s.replicator = r_->stats();
    absl::MutexLock deliver(&deliver_mu_);
    s.deliveries_dropped = deliveries_dropped_;
    s.deliveries_quarantined = deliveries_quarantined_;
    return s;
  }

  store::VersionVector Versions() const {
    absl::MutexLock lock(&mu_);
    return r_->versions();
  }

  std::vector<PeerLag> Lag() const {
    absl::MutexLock lock(&mu_);
    std::vector<PeerLag> out;
    const store::VersionVector& mine = r_->versions();
    for (const auto& [name, address] : addresses_) {
      PeerLag lag;
      lag.name = name;
      auto it = r_->peer_versions().find(name);
      if (it != r_->peer_versions().end()) {
        lag.known = true;
        for (const auto& [origin, seq] : mine) {
          auto theirs = it->second.find(origin);
          int64_t held = theirs == it->second.end() ? 0 : theirs->second;
          // Not a revoked origin's changes: nobody takes them.
          if (seq > held && !r_->OriginRefused(origin)) {
            lag.changes_behind += seq - held;
          }
        }
      }
      out.push_back(std::move(lag));
    }
    std::sort(out.begin(), out.end(), [](const PeerLag& a, const PeerLag& b) {
      return a.name < b.name;
    });
    return out;
  }

  void Stop() {
    absl::MutexLock lock(&mu_);
    stopped_ = true;
    ReleaseHoldLocked();
  }

  // At Start: whatever the hold, said (a hold set before, by the daemon,
  // is replaced or released).
  void ReportHold() {
    absl::MutexLock lock(&mu_);
    hold_reported_ = absl::InfiniteFuture();
    ReportHoldLocked();
  }

  void Kick() {
    OnStrand([](Core&) {});
  }

 private:
  void AfterCallLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (Outbound& out : r_->TakeOutbox()) SendLocked(std::move(out));
    ReportHoldLocked();
    ArmLocked();
  }

  // Tells hold_own_writes when the Replicator's hold of this node's writes
  // starts, moves or ends.
  void ReportHoldLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const absl::Time until = r_->OwnWritesHeldUntil();
    if (until == hold_reported_) return;
    const bool was_held = hold_reported_ != absl::InfinitePast();
    hold_reported_ = until;
    const ReplicatorStats& st = r_->stats();
    if (until == absl::InfinitePast()) {
      if (options_.hold_own_writes)
        options_.hold_own_writes(absl::ZeroDuration());
      if (st.own_changes_taken_back > 0) {
        const bool late = st.own_hold_expired > 0;
        log::Write(
            late ? log::Level::kError : log::Level::kWarn,
            late ? "replication: took back some of the changes of this node "
                   "that its database had lost (restored from an older "
                   "copy?), but not all in time; its writes go on, and may "
                   "reuse the numbers of the rest"
                 : "replication: took back changes of this node that its "
                   "database had lost and peers held (restored from an "
                   "older copy?); its writes go on past them",
            {{"changes", st.own_changes_taken_back},
             {"seq", store::SeqAt(r_->versions(), r_->origin())}});
      } else if (st.own_hold_expired > 0) {
        log::Info(
            "replication: this node's writes were held as long as they may "
            "be without a peer saying what it holds of this node's changes, "
            "or sending back those this node lacks; they go on",
            {{"waited",
              absl::FormatDuration(options_.replicator.own_writes_hold)}});
      } else {
        log::Debug("replication: peers hold no change of this node it lacks");
      }
      return;
    }
    if (options_.hold_own_writes) {
      options_.hold_own_writes(until - options_.clock->Now() +
                               absl::Seconds(1));
    }
    if (!was_held) {
      log::Debug("replication: this node's writes wait for a peer's word");
    }
  }

  // Stop: writes held go on.
  void ReleaseHoldLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (hold_reported_ == absl::InfinitePast()) return;
    hold_reported_ = absl::InfinitePast();
    if (options_.hold_own_writes)
      options_.hold_own_writes(absl::ZeroDuration());
  }

  void SendLocked(Outbound out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto addr = addresses_.find(out.to);
    if (addr == addresses_.end() || addr->second.empty()) {
      ++stats_.send_drops;
      return;
    }
    int& in_flight = in_flight_[out.to];
    if (in_flight >= options_.max_in_flight_per_peer) {
      ++stats_.send_drops;
      return;
    }
    std::string bytes = out.message.SerializeAsString();
    if (bytes.size() > options_.max_message_bytes) {
      ++stats_.send_drops;
      log::Warn(
          "replication: outgoing message too large, dropped",
          {{"to", out.to}, {"bytes", static_cast<uint64_t>(bytes.size())}});
      return;
    }
    ++in_flight;
    ++stats_.messages_sent;
    stats_.bytes_sent += bytes.size();
    std::weak_ptr<Core> weak = weak_from_this();
    options_.transport->Send(
        out.to, addr->second, std::move(bytes),
        [weak, peer = out.to](absl::Status s) {
          if (std::shared_ptr<Core> self = weak.lock()) {
            self->OnStrand([peer, s](Core& c) {
              c.mu_.AssertHeld();  // OnStrand holds it
              auto it = c.in_flight_.find(peer);
              if (it != c.in_flight_.end() && --it->second <= 0) {
                c.in_flight_.erase(it);
              }
              if (!s.ok()) ++c.stats_.send_failures;
            });
          }
        });
  }

  // One timer, at NextDeadline(); a timer an earlier one replaced finds a
  // stale id and does nothing.
  void ArmLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const absl::Time next = r_->NextDeadline();
    if (next == absl::InfiniteFuture()) return;
    if (timer_armed_ && next >= armed_at_) return;
    timer_armed_ = true;
    armed_at_ = next;
    const uint64_t id = ++timer_id_;
    options_.clock->RunAfter(next - options_.clock->Now(),
                             Later(weak_from_this(), [id](Core& c) {
                               c.mu_.AssertHeld();  // OnStrand holds it
                               if (id != c.timer_id_) return;
                               c.timer_armed_ = false;
                               c.r_->Tick(c.options_.clock->Now());
                             }));
  }

  // Once `peer` spent its allowance of refused changes, Deliver drops its
  // messages before they queue, until a token is back; said once, at
  // warning level, each time it happens.
  void MaybeQuarantineLocked(const std::string& peer, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!r_->Quarantined(peer, now)) return;
    const absl::Time until =
        now + absl::Seconds(1.0 / options_.replicator.refusals_per_second);
    {
      absl::MutexLock lock(&deliver_mu_);
      auto [it, inserted] = quarantined_until_.insert_or_assign(peer, until);
      if (!inserted) return;
    }
    log::Warn(
        "replication: a peer sent too many changes this node refused; its "
        "messages are dropped until its allowance comes back",
        {{"peer", peer},
         {"refused", static_cast<int64_t>(r_->stats().refusals_charged)}});
  }

  // Says so, at error level and at most every kOwnBehindLogInterval, when
  // `peer`'s digest showed more of this node's own changes than its
  // database holds (ReplicatorStats::own_sequence_behind).
  void MaybeLogOwnBehindLocked(const std::string& peer)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const uint64_t behind = r_->stats().own_sequence_behind;
    if (behind == own_behind_seen_) return;
    own_behind_seen_ = behind;
    const absl::Time now = options_.clock->Now();
    if (now - own_behind_logged_ < kOwnBehindLogInterval) return;
    own_behind_logged_ = now;
    const std::string& self = r_->origin();
    auto theirs = r_->peer_versions().find(peer);
    const int64_t peer_holds = theirs == r_->peer_versions().end()
                                   ? 0
                                   : store::SeqAt(theirs->second, self);
    const int64_t holds = store::SeqAt(r_->versions(), self);
    if (r_->OwnWritesHeldUntil() != absl::InfinitePast()) {
      log::Warn(
          "replication: a peer holds more of this node's own changes than "
          "this node's database does (restored from an older copy?); taking "
          "them back before this node writes",
          {{"peer", peer},
           {"peer_holds", peer_holds},
           {"this_node_holds", holds}});
      return;
    }
    log::Error(
        "replication: a peer holds more of this node's own changes than this "
        "node's database does (restored from an older copy?), and this "
        "node's writes were not held: a change it made since may have taken "
        "one of their sequence numbers, and then does not reach that peer",
        {{"peer", peer},
         {"peer_holds", peer_holds},
         {"this_node_holds", holds}});
  }

  static constexpr absl::Duration kOwnBehindLogInterval = absl::Minutes(10);

  const ReplicationDriverOptions options_;
  boost::asio::strand<boost::asio::io_context::executor_type> strand_;
  // Deliveries waiting for the strand, in all and by peer; peers whose
  // messages are dropped unread until then.
  mutable absl::Mutex deliver_mu_ ABSL_ACQUIRED_AFTER(mu_);
  int queued_ ABSL_GUARDED_BY(deliver_mu_) = 0;
  absl::flat_hash_map<std::string, int> queued_by_peer_
      ABSL_GUARDED_BY(deliver_mu_);
  absl::flat_hash_map<std::string, absl::Time> quarantined_until_
      ABSL_GUARDED_BY(deliver_mu_);
  uint64_t deliveries_dropped_ ABSL_GUARDED_BY(deliver_mu_) = 0;
  uint64_t deliveries_quarantined_ ABSL_GUARDED_BY(deliver_mu_) = 0;

  mutable absl::Mutex mu_;
  std::unique_ptr<Replicator> r_ ABSL_GUARDED_BY(mu_);
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  ReplicationDriverStats stats_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::string> addresses_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, int> in_flight_ ABSL_GUARDED_BY(mu_);
  bool timer_armed_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time armed_at_ ABSL_GUARDED_BY(mu_);
  uint64_t timer_id_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t own_behind_seen_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time hold_reported_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  absl::Time own_behind_logged_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

absl::StatusOr<std::unique_ptr<ReplicationDriver>> ReplicationDriver::Start(
    ReplicationDriverOptions options) {
  if (options.clock == nullptr || options.io == nullptr ||
      options.transport == nullptr || options.log == nullptr) {
    return absl::InvalidArgumentError(
        "replication driver: clock, io, transport and log are required");
  }
  absl::StatusOr<std::unique_ptr<Replicator>> r =
      Replicator::Create(options.replicator, options.log, options.clock->Now());
  if (!r.ok()) return r.status();
  auto core = std::make_shared<Core>(std::move(options), *std::move(r));
  // Before any write this node makes after Start returns.
  core->ReportHold();
  core->Kick();
  return std::unique_ptr<ReplicationDriver>(
      new ReplicationDriver(std::move(core)));
}

ReplicationDriver::~ReplicationDriver() { Stop(); }

void ReplicationDriver::OnLocalChange(store::ObjectChange change) {
  core_->OnLocalChange(std::move(change));
}
void ReplicationDriver::OnDurable(int64_t seq) { core_->OnDurable(seq); }
absl::Status ReplicationDriver::Deliver(std::string peer, std::string bytes) {
  return core_->Deliver(std::move(peer), std::move(bytes));
}
void ReplicationDriver::SetMembers(std::vector<ReplicationPeer> live,
                                   std::vector<std::string> away) {
  core_->SetMembers(std::move(live), std::move(away));
}
ReplicationDriverStats ReplicationDriver::Stats() const {
  return core_->Stats();
}
store::VersionVector ReplicationDriver::Versions() const {
  return core_->Versions();
}
std::vector<PeerLag> ReplicationDriver::Lag() const { return core_->Lag(); }
void ReplicationDriver::Stop() { core_->Stop(); }

}  // namespace mycel::replication
