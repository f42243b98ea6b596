#include "mesh/membership/driver.h"

#include <algorithm>
#include <atomic>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "mesh/membership/codec.h"
#include "runtime/log.h"
#include "runtime/random.h"
#include "runtime/status.h"

namespace mycel::membership {

absl::StatusOr<Config> ProfileByName(absl::string_view name) {
  if (name == "lan") return Config::Lan();
  if (name == "wan") return Config::Wan();
  return absl::InvalidArgumentError(absl::StrCat(
      "membership_profile: unknown profile \"", name, "\" (want lan or wan)"));
}

namespace {

MemberInfo ToInfo(const MemberSnapshot& s, absl::string_view self) {
  MemberInfo i;
  i.name = s.name;
  i.state = s.state;
  i.incarnation = s.incarnation;
  if (s.record != nullptr) {
    i.addresses = s.record->meta.addresses;
    i.labels = s.record->meta.labels;
    i.capacity = s.record->meta.capacity;
  }
  i.state_since = s.state_since;
  i.last_heard = s.last_heard;
  i.self = s.name == self;
  return i;
}

}  // namespace

// The shared state behind a driver. Work runs on `strand_` (one handler at
// a time) under `mu_`, which the queries also take; callbacks to the
// outside run after `mu_` is released. Posted handlers and timer callbacks
// hold a reference, so the Core outlives whatever is still queued; once
// stopped, they do nothing.
class MembershipDriver::Core : public std::enable_shared_from_this<Core> {
 public:
  Core(DriverOptions options, std::unique_ptr<Membership> m)
      : options_(std::move(options)),
        strand_(boost::asio::make_strand(*options_.io)),
        name_(m->name()),
        m_(std::move(m)),
        saved_incarnation_(m_->incarnation()),
        last_full_save_(options_.clock->Now()) {}

  // Runs `fn` on the strand under the lock, then sends, stores and re-arms
  // as the state machine asks. When the driver has stopped, runs
  // `if_stopped` instead (if given).
  void OnStrand(std::function<void(Core&)> fn,
                std::function<void()> if_stopped = nullptr) {
    boost::asio::post(strand_, [self = shared_from_this(), fn = std::move(fn),
                                if_stopped = std::move(if_stopped)] {
      std::vector<std::function<void()>> after;
      {
        absl::MutexLock lock(&self->mu_);
        if (self->stopped_) {
          if (if_stopped) after.push_back(if_stopped);
        } else {
          fn(*self);
          self->AfterCallLocked();
          after.swap(self->deferred_);
        }
      }
      for (auto& f : after) f();
    });
  }

  // A callback of the clock or the transport, which may run after the
  // driver is gone: it holds only a weak reference until it is posted.
  static std::function<void()> Later(std::weak_ptr<Core> weak,
                                     std::function<void(Core&)> fn) {
    return [weak = std::move(weak), fn = std::move(fn)] {
      if (std::shared_ptr<Core> self = weak.lock()) self->OnStrand(fn);
    };
  }

  void Deliver(std::string peer, std::string bytes) {
    if (queued_.fetch_add(1) >= options_.max_queued_deliveries) {
      queued_.fetch_sub(1);
      deliveries_dropped_.fetch_add(1);
      return;
    }
    OnStrand(
        [peer = std::move(peer), bytes = std::move(bytes)](Core& c) {
          c.mu_.AssertHeld();  // OnStrand holds it
          c.queued_.fetch_sub(1);
          c.HandleLocked(peer, bytes);
        },
        [this] { queued_.fetch_sub(1); });
  }

  // Calls its function exactly once: with the answer, or with "" when it is
  // dropped unanswered (a posted handler destroyed unrun at shutdown).
  class ReplyOnce {
   public:
    explicit ReplyOnce(std::function<void(std::string)> f) : f_(std::move(f)) {}
    ReplyOnce(const ReplyOnce&) = delete;
    ReplyOnce& operator=(const ReplyOnce&) = delete;
    ~ReplyOnce() { (*this)(""); }
    void operator()(std::string answer) {
      std::function<void(std::string)> f = std::move(f_);
      f_ = nullptr;
      if (f) f(std::move(answer));
    }

   private:
    std::function<void(std::string)> f_;
  };

  void DeliverWithReply(std::string peer, std::string bytes,
                        std::function<void(std::string)> answer) {
    auto reply = std::make_shared<ReplyOnce>(std::move(answer));
    if (queued_.fetch_add(1) >= options_.max_queued_deliveries) {
      queued_.fetch_sub(1);
      deliveries_dropped_.fetch_add(1);
      (*reply)("");
      return;
    }
    OnStrand(
        [peer = std::move(peer), bytes = std::move(bytes), reply](Core& c) {
          c.mu_.AssertHeld();  // OnStrand holds it
          c.queued_.fetch_sub(1);
          auto slot = std::make_shared<std::string>();
          c.reply_peer_ = peer;
          c.reply_slot_ = slot;
          c.HandleLocked(peer, bytes);
          // AfterCallLocked (next, on this strand) fills the slot; deferred
          // work runs after it.
          c.deferred_.push_back([slot, reply] { (*reply)(std::move(*slot)); });
        },
        [this, reply] {
          queued_.fetch_sub(1);
          (*reply)("");
        });
  }

  // Whether `out` is the direct answer to the message being handled for a
  // DeliverWithReply: an ack, or a push-pull answer, to its sender.
  bool IsDirectReplyLocked(const Outbound& out) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (reply_slot_ == nullptr || out.to != reply_peer_) return false;
    if (std::holds_alternative<Ack>(out.message.body)) return true;
    const PushPull* pp = std::get_if<PushPull>(&out.message.body);
    return pp != nullptr && pp->reply;
  }

  void HandleLocked(const std::string& peer, const std::string& bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (halted_) return;
    ++stats_.messages_received;
    stats_.bytes_received += bytes.size();
    absl::Status s = m_->HandleBytes(peer, bytes, options_.clock->Now());
    if (!s.ok()) {
      ++stats_.messages_rejected;
      log::Debug("membership: message rejected",
                 {{"peer", peer}, {"status", s}});
    }
  }

  void Leave(absl::Duration timeout, Done done) {
    OnStrand(
        [weak = weak_from_this(), timeout, done](Core& c) {
          c.mu_.AssertHeld();  // OnStrand holds it
          c.LeaveLocked(weak, timeout, done);
        },
        [done] { done(absl::FailedPreconditionError("membership stopped")); });
  }

  void LeaveLocked(std::weak_ptr<Core> weak, absl::Duration timeout, Done done)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (leave_done_ != nullptr) {
      deferred_.push_back([done] {
        done(absl::FailedPreconditionError("membership: already leaving"));
      });
      return;
    }
    absl::Status s = m_->Leave(options_.clock->Now());
    if (!s.ok()) {
      deferred_.push_back([done, s] { done(s); });
      return;
    }
    leave_done_ = std::move(done);
    options_.clock->RunAfter(timeout, Later(std::move(weak), [](Core& c) {
                               c.mu_.AssertHeld();  // OnStrand holds it
                               c.FinishLeaveLocked(absl::DeadlineExceededError(
                                   "membership: leave not fully gossiped "
                                   "within its timeout"));
                             }));
  }

  void FinishLeaveLocked(absl::Status s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (leave_done_ == nullptr) return;
    halted_ = true;
    FlushLocked();
    deferred_.push_back([done = std::move(leave_done_), s] { done(s); });
    leave_done_ = nullptr;
  }

  void UpdateMeta(NodeMeta meta, Done done) {
    OnStrand(
        [meta = std::move(meta), done](Core& c) {
          c.mu_.AssertHeld();  // OnStrand holds it
          absl::Status s =
              c.halted_ ? absl::FailedPreconditionError(
                              "membership: this node has left")
                        : c.m_->UpdateMeta(meta, c.options_.clock->Now());
          c.deferred_.push_back([done, s] { done(s); });
        },
        [done] { done(absl::FailedPreconditionError("membership stopped")); });
  }

  void Join(std::vector<std::string> seeds) {
    OnStrand([seeds = std::move(seeds)](Core& c) {
      c.mu_.AssertHeld();  // OnStrand holds it
      if (c.halted_) return;
      c.m_->Join(seeds, c.options_.clock->Now());
      c.seeds_dirty_ = true;
    });
  }

  void Subscribe(Subscriber s) {
    absl::MutexLock lock(&mu_);
    subscribers_.push_back(std::move(s));
  }

  std::vector<MemberInfo> Members() const {
    std::vector<MemberInfo> out;
    {
      absl::MutexLock lock(&mu_);
      for (const MemberSnapshot& s : m_->Snapshot()) {
        out.push_back(ToInfo(s, name_));
      }
    }
    std::sort(out.begin(), out.end(),
              [](const MemberInfo& a, const MemberInfo& b) {
                return a.name < b.name;
              });
    return out;
  }

  std::optional<MemberInfo> Find(absl::string_view name) const {
    absl::MutexLock lock(&mu_);
    std::optional<MemberSnapshot> s = m_->Find(name);
    if (!s.has_value()) return std::nullopt;
    return ToInfo(*s, name_);
  }

  std::optional<std::string> CertificateOf(absl::string_view name) const {
    absl::MutexLock lock(&mu_);
    std::optional<MemberSnapshot> s = m_->Find(name);
    if (!s.has_value() || s->record == nullptr) return std::nullopt;
    return s->record->certificate;
  }

  DriverStats Stats() const {
    absl::MutexLock lock(&mu_);
    DriverStats s = stats_;
    s.membership = m_->stats();
    s.health_score = m_->health_score();
    s.deliveries_dropped = deliveries_dropped_.load();
    return s;
  }

  uint64_t incarnation() const {
    absl::MutexLock lock(&mu_);
    return m_->incarnation();
  }

  void Stop(bool flush) {
    std::vector<std::function<void()>> after;
    {
      absl::MutexLock lock(&mu_);
      if (stopped_) return;
      if (flush) FlushLocked();
      if (leave_done_ != nullptr) {
        after.push_back([done = std::move(leave_done_)] {
          done(absl::CancelledError("membership stopped"));
        });
        leave_done_ = nullptr;
      }
      stopped_ = true;
      subscribers_.clear();
      deferred_.clear();
    }
    for (auto& f : after) f();
  }

  // The first run: sends what Create queued (the rejoin) and arms the timer.
  void Kick() {
    OnStrand([](Core&) {});
  }

  const std::string& name() const { return name_; }

 private:
  void AfterCallLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (Outbound& out : m_->TakeOutbox()) {
      if (IsDirectReplyLocked(out)) {
        std::string bytes = EncodeMessage(out.message);
        if (bytes.size() <= m_->config().max_message_bytes) {
          ++stats_.messages_sent;
          ++stats_.replies_in_response;
          stats_.bytes_sent += bytes.size();
          *reply_slot_ = std::move(bytes);
          reply_slot_ = nullptr;
          continue;
        }
      }
      SendLocked(std::move(out));
    }
    reply_slot_ = nullptr;
    std::vector<MemberEvent> events = m_->TakeEvents();
    for (const MemberEvent& e : events) {
      if (e.name == name_) continue;
      if (e.kind == MemberEventKind::kRemoved) {
        dirty_.erase(e.name);
        removed_.insert(e.name);
      } else {
        removed_.erase(e.name);
        dirty_.insert(e.name);
      }
    }
    if (!events.empty() && !subscribers_.empty()) {
      deferred_.push_back([subs = subscribers_, events = std::move(events)] {
        for (const MemberEvent& e : events) {
          for (const Subscriber& s : subs) s(e);
        }
      });
    }
    if (leave_done_ != nullptr && m_->leave_done()) {
      FinishLeaveLocked(absl::OkStatus());
    }
    const bool pending = !dirty_.empty() || !removed_.empty() || seeds_dirty_ ||
                         m_->incarnation() != saved_incarnation_;
    if (pending && !save_armed_ && options_.store != nullptr) {
      save_armed_ = true;
      options_.clock->RunAfter(options_.save_delay,
                               Later(weak_from_this(), [](Core& c) {
                                 c.mu_.AssertHeld();  // OnStrand holds it
                                 c.save_armed_ = false;
                                 c.FlushLocked();
                               }));
    }
    ArmLocked();
  }

  void SendLocked(Outbound out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (out.address.empty()) {
      ++stats_.send_drops;
      return;
    }
    int& in_flight = in_flight_[out.address];
    if (in_flight >= options_.max_in_flight_per_peer) {
      ++stats_.send_drops;
      return;
    }
    std::string bytes = EncodeMessage(out.message);
    if (bytes.size() > m_->config().max_message_bytes) {
      ++stats_.send_drops;
      log::Warn(
          "membership: outgoing message too large, dropped",
          {{"to", out.to}, {"bytes", static_cast<uint64_t>(bytes.size())}});
      return;
    }
    ++in_flight;
    ++stats_.sends_in_flight;
    ++stats_.messages_sent;
    stats_.bytes_sent += bytes.size();
    std::weak_ptr<Core> weak = weak_from_this();
    options_.transport->Send(
        out.to, out.address, std::move(bytes), DeadlineFor(out.message),
        AwaitsAnswer(out.message),
        [weak, address = out.address](absl::Status s, Transport::Reply reply) {
          if (std::shared_ptr<Core> self = weak.lock()) {
            self->OnStrand([address, s, reply = std::move(reply)](Core& c) {
              c.mu_.AssertHeld();  // OnStrand holds it
              c.SentLocked(address, s);
              // The peer's answer, as if it had sent it.
              if (!reply.bytes.empty()) {
                c.HandleLocked(reply.from, reply.bytes);
              }
            });
          }
        });
  }

  // Whether the receiver answers `m` directly, as it handles it: a ping
  // with an ack, a push-pull request with its answer (IsDirectReplyLocked,
  // at the other end). An indirect ping's ack comes later, as a message of
  // its own.
  static bool AwaitsAnswer(const Message& m) {
    if (std::holds_alternative<Ping>(m.body)) return true;
    const PushPull* pp = std::get_if<PushPull>(&m.body);
    return pp != nullptr && !pp->reply && !pp->fill;
  }

  // A probe's messages (ping, ack, nack, indirect ping) are useless after
  // the probe timeout, which Lifeguard stretches with the local health
  // score; gossip and push-pull are worth delivering late.
  absl::Duration DeadlineFor(const Message& m) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const Config& c = m_->config();
    const bool probe = std::holds_alternative<Ping>(m.body) ||
                       std::holds_alternative<Ack>(m.body) ||
                       std::holds_alternative<Nack>(m.body) ||
                       std::holds_alternative<IndirectPing>(m.body);
    if (!probe) return c.delivery_timeout;
    return c.probe_timeout * (m_->health_score() + 1);
  }

  void SentLocked(const std::string& address, const absl::Status& s)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = in_flight_.find(address);
    if (it != in_flight_.end() && --it->second <= 0) in_flight_.erase(it);
    --stats_.sends_in_flight;
    if (!s.ok()) ++stats_.send_failures;
  }

  // One timer, at NextDeadline(). The clock cannot cancel, so a timer that
  // a newer, earlier one replaced finds a stale id and does nothing.
  void ArmLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (halted_) return;
    const absl::Time next = m_->NextDeadline();
    if (next == absl::InfiniteFuture()) return;
    if (timer_armed_ && next >= armed_at_) return;
    timer_armed_ = true;
    armed_at_ = next;
    const uint64_t id = ++timer_id_;
    options_.clock->RunAfter(next - options_.clock->Now(),
                             Later(weak_from_this(), [id](Core& c) {
                               c.mu_.AssertHeld();  // OnStrand holds it
                               if (id != c.timer_id_ || c.halted_) return;
                               c.timer_armed_ = false;
                               ++c.stats_.ticks;
                               c.m_->Tick(c.options_.clock->Now());
                             }));
  }

  void FlushLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (options_.store == nullptr) return;
    MemberStoreBatch batch;
    const absl::Time now = options_.clock->Now();
    const bool full = now - last_full_save_ >= options_.full_save_interval;
    if (full) {
      for (MemberSnapshot& s : m_->Snapshot()) {
        if (s.name != name_) batch.upserts.push_back(std::move(s));
      }
    } else {
      for (const std::string& name : dirty_) {
        std::optional<MemberSnapshot> s = m_->Find(name);
        if (s.has_value()) batch.upserts.push_back(*std::move(s));
      }
    }
    batch.removed.assign(removed_.begin(), removed_.end());
    const uint64_t inc = m_->incarnation();
    if (inc != saved_incarnation_) batch.incarnation = inc;
    if (seeds_dirty_) batch.seeds = m_->seeds();
    if (batch.upserts.empty() && batch.removed.empty() &&
        !batch.incarnation.has_value() && !batch.seeds.has_value()) {
      return;
    }
    absl::Status s = options_.store->Save(batch);
    if (!s.ok()) {
      // Kept dirty: the next event, or the next full save, tries again.
      ++stats_.save_failures;
      log::Error("membership: saving members failed", {{"status", s}});
      return;
    }
    ++stats_.saves;
    if (full) last_full_save_ = now;
    dirty_.clear();
    removed_.clear();
    seeds_dirty_ = false;
    saved_incarnation_ = inc;
  }

  DriverOptions options_;
  boost::asio::strand<boost::asio::io_context::executor_type> strand_;
  const std::string name_;
  std::atomic<int> queued_{0};
  std::atomic<uint64_t> deliveries_dropped_{0};

  mutable absl::Mutex mu_;
  std::unique_ptr<Membership> m_ ABSL_GUARDED_BY(mu_);
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  // Left: no more ticks or deliveries.
  bool halted_ ABSL_GUARDED_BY(mu_) = false;
  DriverStats stats_ ABSL_GUARDED_BY(mu_);
  // While a DeliverWithReply is handled: its sender, and where its direct
  // answer goes instead of being sent (AfterCallLocked).
  std::string reply_peer_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<std::string> reply_slot_ ABSL_GUARDED_BY(mu_);
  std::vector<Subscriber> subscribers_ ABSL_GUARDED_BY(mu_);
  // Callbacks to run once the lock is released.
  std::vector<std::function<void()>> deferred_ ABSL_GUARDED_BY(mu_);
  Done leave_done_ ABSL_GUARDED_BY(mu_);

  absl::flat_hash_map<std::string, int> in_flight_ ABSL_GUARDED_BY(mu_);

  bool timer_armed_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time armed_at_ ABSL_GUARDED_BY(mu_);
  uint64_t timer_id_ ABSL_GUARDED_BY(mu_) = 0;

  // Not yet written to the store.
  absl::flat_hash_set<std::string> dirty_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<std::string> removed_ ABSL_GUARDED_BY(mu_);
  bool seeds_dirty_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t saved_incarnation_ ABSL_GUARDED_BY(mu_);
  bool save_armed_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time last_full_save_ ABSL_GUARDED_BY(mu_);
};

absl::StatusOr<std::unique_ptr<MembershipDriver>> MembershipDriver::Start(
    DriverOptions options) {
  if (options.clock == nullptr || options.io == nullptr ||
      options.transport == nullptr) {
    return absl::InvalidArgumentError(
        "membership driver: clock, io and transport are required");
  }
  if (options.max_in_flight_per_peer < 1 || options.max_queued_deliveries < 1) {
    return absl::InvalidArgumentError(
        "membership driver: max_in_flight_per_peer and max_queued_deliveries "
        "must be positive");
  }
  const absl::Time now = options.clock->Now();
  MembershipOptions& mo = options.membership;
  if (options.store != nullptr) {
    RETURN_IF_ERROR(options.store->Restore(now, &mo));
  } else {
    mo.incarnation =
        std::max(mo.incarnation, StartIncarnation(std::nullopt, now));
  }
  if (mo.random_seed == 0) mo.random_seed = RandomUint64();
  ASSIGN_OR_RETURN(std::unique_ptr<Membership> m, Membership::Create(mo, now));
  if (options.store != nullptr) {
    // Before anything is sent: an incarnation once used is never reused.
    MemberStoreBatch batch;
    batch.incarnation = m->incarnation();
    batch.seeds = m->seeds();
    RETURN_IF_ERROR(options.store->Save(batch));
  }
  log::Info("membership: started",
            {{"name", m->name()},
             {"incarnation", m->incarnation()},
             {"members", static_cast<uint64_t>(mo.members.size())}});
  auto core = std::make_shared<Core>(std::move(options), std::move(m));
  core->Kick();
  return std::unique_ptr<MembershipDriver>(
      new MembershipDriver(std::move(core)));
}

MembershipDriver::MembershipDriver(std::shared_ptr<Core> core)
    : core_(std::move(core)) {}

MembershipDriver::~MembershipDriver() { Stop(); }

void MembershipDriver::Deliver(std::string authenticated_peer,
                               std::string bytes) {
  core_->Deliver(std::move(authenticated_peer), std::move(bytes));
}
void MembershipDriver::DeliverWithReply(
    std::string authenticated_peer, std::string bytes,
    std::function<void(std::string)> reply) {
  core_->DeliverWithReply(std::move(authenticated_peer), std::move(bytes),
                          std::move(reply));
}
void MembershipDriver::Join(std::vector<std::string> seeds) {
  core_->Join(std::move(seeds));
}
void MembershipDriver::Leave(absl::Duration timeout, Done done) {
  core_->Leave(timeout, std::move(done));
}
void MembershipDriver::UpdateMeta(NodeMeta meta, Done done) {
  core_->UpdateMeta(std::move(meta), std::move(done));
}
void MembershipDriver::Subscribe(Subscriber subscriber) {
  core_->Subscribe(std::move(subscriber));
}
std::vector<MemberInfo> MembershipDriver::Members() const {
  return core_->Members();
}
std::optional<MemberInfo> MembershipDriver::Find(absl::string_view name) const {
  return core_->Find(name);
}
std::optional<std::string> MembershipDriver::CertificateOf(
    absl::string_view name) const {
  return core_->CertificateOf(name);
}
DriverStats MembershipDriver::Stats() const { return core_->Stats(); }
const std::string& MembershipDriver::name() const { return core_->name(); }
uint64_t MembershipDriver::incarnation() const { return core_->incarnation(); }
void MembershipDriver::Stop() { core_->Stop(/*flush=*/true); }
void MembershipDriver::Abort() { core_->Stop(/*flush=*/false); }

}  // namespace mycel::membership
