#include "mesh/membership/grpc_transport.h"

#include <grpc/grpc_security_constants.h>
#include <grpcpp/client_context.h>
#include <grpcpp/security/auth_context.h>
#include <grpcpp/support/client_callback.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/random/random.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "mycel/v1/gossip.grpc.pb.h"

namespace mycel::membership {
namespace {

using mycel::v1::GossipFrame;

absl::Status FromGrpc(const grpc::Status& s) {
  return s.ok() ? absl::OkStatus()
                : absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                               s.error_message());
}

// The node name in the server's SPIFFE ID (spiffe://MESH/node/NAME), which
// the channel's verifier already checked is a node of this mesh; "" if none.
std::string ServerNodeName(const grpc::ClientContext& context) {
  std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  if (auth == nullptr) return "";
  for (const grpc::string_ref& ref :
       auth->FindPropertyValues(GRPC_PEER_SPIFFE_ID_PROPERTY_NAME)) {
    absl::string_view id(ref.data(), ref.size());
    if (!absl::ConsumePrefix(&id, "spiffe://")) continue;
    const size_t slash = id.find("/node/");
    if (slash == absl::string_view::npos) continue;
    absl::string_view name = id.substr(slash + 6);
    if (!name.empty() && name.find('/') == absl::string_view::npos) {
      return std::string(name);
    }
  }
  return "";
}

// The peer's leaf certificate (PEM) as the handshake gave it; "" if none.
std::string PeerCertificate(const grpc::AuthContext* auth) {
  if (auth == nullptr) return "";
  std::vector<grpc::string_ref> pems =
      auth->FindPropertyValues(GRPC_X509_PEM_CERT_PROPERTY_NAME);
  return pems.empty() ? "" : std::string(pems[0].data(), pems[0].size());
}

// A channel that failed connects again now rather than after gRPC's
// reconnect backoff (up to two minutes): the protocol paces what it sends
// to an unreachable member itself, and a member that restarts must be
// reachable at its first message, often the only one for a while.
void ResetBackoffIfFailed(grpc::Channel* channel) {
  if (channel->GetState(false) == GRPC_CHANNEL_TRANSIENT_FAILURE) {
    grpc::experimental::ChannelResetConnectionBackoff(channel);
  }
}

// A dialed link's id, random so that the streams of a restarted node's new
// link never pair with those of its old one at the server.
uint64_t NewLinkId() {
  thread_local absl::BitGen gen;
  uint64_t id = 0;
  while (id == 0) id = absl::Uniform<uint64_t>(gen);
  return id;
}

}  // namespace

class GossipLink;

// Links kept with one peer: the one it dialed and the one this node did.
constexpr size_t kMaxLinksPerPeer = 2;

// The metadata that pairs a link's streams (proto: Gossip.Link).
constexpr char kLinkIdKey[] = "mycel-link-id";
constexpr char kLinkForKey[] = "mycel-link-for";
constexpr char kLinkPairsKey[] = "mycel-link-pairs";

// What one stream of a link is to this node.
enum class Role {
  // The link's only stream: both nodes write their messages and answers
  // on it, and read it at all times.
  kShared,
  // Of a pair, the one this node writes its own messages on. The peer
  // writes only answers on it, so it is read only while one is awaited.
  kMine,
  // Of a pair, the one the peer writes its messages on: read at all times,
  // and this node's answers to them go back on it.
  kTheirs,
};

absl::string_view RoleName(Role role) {
  switch (role) {
    case Role::kShared:
      return "";
    case Role::kMine:
      return " mine";
    case Role::kTheirs:
      return " theirs";
  }
  return "";
}

// A frame's answer_to for the frame at `place` (from 1) of a stream.
uint32_t AnswerTo(uint64_t place) {
  return static_cast<uint32_t>(1 + (place - 1) % 127);
}

// What a frame is to the link: whether its sender awaits an answer, and
// which frame it answers, if it is one.
struct Mark {
  bool awaits = false;
  uint32_t answer_to = 0;
};

struct GrpcTransport::Hub {
  explicit Hub(const Options& o)
      : clock(o.clock),
        max_links(std::max<size_t>(1, o.max_links)),
        max_queued(std::max<size_t>(1, o.max_queued_per_link)),
        reply_deadline(o.reply_deadline),
        stuck_timeout(o.stuck_timeout),
        trust(o.trust),
        recheck_interval(o.recheck_interval),
        inbound(o.inbound) {}
  // Adds a link under `name` (or, when empty, under `address`), and returns
  // the link to close for max_links, if any.
  std::shared_ptr<GossipLink> AddLocked(const std::shared_ptr<GossipLink>& link,
                                        const std::string& name,
                                        const std::string& address)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  void Name(GossipLink* link, const std::string& name) ABSL_LOCKS_EXCLUDED(mu);
  // OnDone: the link leaves the maps for `finished`.
  void Finished(GossipLink* link) ABSL_LOCKS_EXCLUDED(mu);
  // Frees the finished links; never on a gRPC thread (see `finished`).
  void Reap() ABSL_LOCKS_EXCLUDED(mu);
  std::shared_ptr<GossipLink> FindLocked(const std::string& name,
                                         const std::string& address)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Whether `link` is closing, or picked to close by an AddLocked whose
  // caller has not closed it yet.
  bool LeavingLocked(GossipLink* link) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

  Clock* const clock;
  const size_t max_links;
  const size_t max_queued;
  const absl::Duration reply_deadline;
  const absl::Duration stuck_timeout;
  const identity::Trust* const trust;
  const absl::Duration recheck_interval;

  // Held (shared) while a frame is handed on, so that Shutdown, which
  // clears `inbound`, returns only when no delivery is under way.
  absl::Mutex deliver_mu;
  Inbound inbound ABSL_GUARDED_BY(deliver_mu);

  absl::Mutex mu;
  bool closed ABSL_GUARDED_BY(mu) = false;
  // Every open link, and by the peer's name; a link dialed to an address
  // only (a seed) is also found by that address.
  absl::flat_hash_map<GossipLink*, std::shared_ptr<GossipLink>> all
      ABSL_GUARDED_BY(mu);
  absl::flat_hash_map<std::string, std::vector<GossipLink*>> by_name
      ABSL_GUARDED_BY(mu);
  absl::flat_hash_map<std::string, GossipLink*> by_address ABSL_GUARDED_BY(mu);
  // Links AddLocked picked to close. Its caller closes them after the
  // lock, and until then another AddLocked (an accept on another thread)
  // must not count them as open, nor pick them again.
  absl::flat_hash_set<GossipLink*> evicting ABSL_GUARDED_BY(mu);
  // The streams of pairs that sends do not use (a dialer's second stream,
  // a server's first once paired): in `all`, not in by_name nor counted as
  // links. Each ends with its companion.
  absl::flat_hash_set<GossipLink*> secondary ABSL_GUARDED_BY(mu);
  // Links done, kept until Reap. A client link holds its channel, and the
  // last reference to a channel must not go on a gRPC callback thread: the
  // channel's destructor may then shut down and join gRPC's callback
  // threads from one of them (gRPC 1.51 aborts).
  std::vector<std::shared_ptr<GossipLink>> finished ABSL_GUARDED_BY(mu);
  // Addresses whose server has no Link method: unary Exchange there.
  absl::flat_hash_set<std::string> unary ABSL_GUARDED_BY(mu);

  std::atomic<int64_t> links_dialed{0};
  std::atomic<int64_t> links_accepted{0};
  std::atomic<int64_t> links_stuck{0};
  std::atomic<int64_t> links_evicted{0};
  std::atomic<int64_t> links_refused{0};
  std::atomic<int64_t> frames_written{0};
  std::atomic<int64_t> frames_received{0};
  std::atomic<int64_t> frames_expired{0};
  std::atomic<int64_t> unary_sends{0};
  std::atomic<int64_t> links_paired{0};
};

// One Gossip.Link stream, either end. The reactor (ClientLink, ServerLink)
// supplies the gRPC operations; this class keeps the frames waiting, their
// deadlines, and the rule that the reactor's end (a client's last hold, a
// server's Finish) comes only when no write is outstanding, so no write is
// ever started on a reactor that is done.
class GossipLink : public std::enable_shared_from_this<GossipLink> {
 public:
  // `ready`: the stream is established (a server's end); a client's is
  // once the server's headers arrive (Ready), and frames wait until then,
  // so that one past its deadline is dropped rather than sent late.
  // `link_id` pairs the streams of one link (0: none); `role` is what this
  // stream is to this node.
  GossipLink(std::shared_ptr<GrpcTransport::Hub> hub, std::string peer,
             std::string address, bool ready, uint64_t link_id, Role role)
      : hub_(std::move(hub)),
        address_(std::move(address)),
        link_id_(link_id),
        created_(hub_->clock->Now()),
        peer_(std::move(peer)),
        ready_(ready),
        last_used_(created_),
        role_(role) {}
  virtual ~GossipLink() = default;
  GossipLink(const GossipLink&) = delete;
  GossipLink& operator=(const GossipLink&) = delete;

  // Queues `bytes` for the peer; `done` (may be empty) gets the outcome
  // once. False, with `bytes` and `done` untouched, when the link is
  // closing: the caller should use another. A message that is not an
  // answer, written to the stream of a pair that the peer writes on, goes
  // on the other stream.
  bool Write(std::string& bytes, absl::Time deadline, Transport::SendDone& done,
             Mark mark = {}) ABSL_LOCKS_EXCLUDED(mu_) {
    Transport::SendDone refused;
    Next next;
    std::shared_ptr<GossipLink> forward;
    {
      absl::MutexLock lock(&mu_);
      if (ended_ || closing_) return false;
      if (role_ == Role::kTheirs && mark.answer_to == 0) {
        forward = companion_.lock();
        if (forward == nullptr) return false;
      } else if (queue_.size() >= hub_->max_queued) {
        refused = std::move(done);
      } else {
        auto p = std::make_unique<Pending>();
        p->frame.set_message(std::move(bytes));
        p->frame.set_answer_to(mark.answer_to);
        p->awaits = mark.awaits;
        p->deadline = deadline;
        p->done = std::move(done);
        queue_.push_back(std::move(p));
        last_used_ = hub_->clock->Now();
        ArmLocked(deadline);
        if (!ready_) ArmLocked(created_ + hub_->stuck_timeout);
        next = NextLocked();
      }
    }
    if (forward != nullptr) return forward->Write(bytes, deadline, done, mark);
    if (refused) {
      refused(absl::ResourceExhaustedError(
                  absl::StrCat("link to ", peer(), ": ", hub_->max_queued,
                               " frames already wait")),
              {});
    }
    StartNext(next);
    return true;
  }

  // Ends the stream; what waits fails with `why`.
  // `graceful`: what was written still reaches the peer (a client
  // half-closes once its last write is done; a server finishes then), for
  // a link closed only to make room. Otherwise the stream is cancelled.
  void Close(const absl::Status& why, bool graceful = false)
      ABSL_LOCKS_EXCLUDED(mu_) {
    std::vector<Transport::SendDone> failed;
    bool act = false;
    {
      absl::MutexLock lock(&mu_);
      if (closing_) return;
      closing_ = true;
      close_status_ = why;
      failed = TakeQueuedLocked();
      // A reactor already released may be gone (a server's context is
      // gRPC's): act only on one that is not, and keep it so meanwhile.
      // A link between a frame and its answer has no read outstanding
      // (Received), and needs none to end: the stream's end completes the
      // reactor either way.
      if (!released_) {
        if (graceful && writing_ != nullptr) {
          half_close_pending_ = true;  // WriteDone half-closes
        } else {
          act = true;
          ++in_reactor_;
        }
      }
    }
    Fail(failed, why);
    // The streams of a pair end together: a node whose peer writes on the
    // one left would not be reading it.
    if (std::shared_ptr<GossipLink> other = companion()) {
      other->Close(why, graceful);
    }
    if (!act) return;
    if (graceful) {
      DoHalfClose();
    } else {
      DoCancel();
    }
    LeaveReactor();
  }

  std::string peer() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return peer_;
  }
  absl::Time last_used() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return last_used_;
  }
  bool closing() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return closing_ || ended_;
  }
  const std::string& address() const { return address_; }
  uint64_t link_id() const { return link_id_; }

  std::shared_ptr<GossipLink> companion() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return companion_.lock();
  }
  // Makes this stream one of a pair, with `other`, as `role`.
  void Pair(const std::shared_ptr<GossipLink>& other, Role role)
      ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    companion_ = other;
    role_ = role;
  }
  // A server's first stream, paired with `mine` (its second): takes the
  // role kTheirs and hands `mine` what waits to be written here, except the
  // answers, which the peer awaits on this stream.
  void HandOver(const std::shared_ptr<GossipLink>& mine)
      ABSL_LOCKS_EXCLUDED(mu_) {
    std::deque<std::unique_ptr<Pending>> moved;
    {
      absl::MutexLock lock(&mu_);
      companion_ = mine;
      role_ = Role::kTheirs;
      for (auto it = queue_.begin(); it != queue_.end();) {
        if ((*it)->frame.answer_to() == 0) {
          moved.push_back(std::move(*it));
          it = queue_.erase(it);
        } else {
          ++it;
        }
      }
    }
    if (!moved.empty()) mine->Adopt(std::move(moved));
  }

  std::string Describe() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return absl::StrCat(
        peer_.empty() ? "?" : peer_, address_.empty() ? " accepted" : " dialed",
        RoleName(role_), ready_ ? "" : " unready", reading_ ? " reading" : "",
        held_ ? " held" : "",
        awaited_.empty() ? "" : absl::StrCat(" awaiting=", awaited_.size()),
        writing_ != nullptr ? " writing" : "", closing_ ? " closing" : "",
        ended_ ? " ended" : "", released_ ? " released" : "",
        in_reactor_ > 0 ? absl::StrCat(" in_reactor=", in_reactor_) : "",
        half_close_pending_ ? " half_close_pending" : "",
        queue_.empty() ? "" : absl::StrCat(" queued=", queue_.size()));
  }

 protected:
  // The reactor's operations. DoStartWrite is never called with another
  // write outstanding nor after DoRelease; DoRelease is called once.
  virtual void DoStartWrite(const GossipFrame* frame) = 0;
  virtual void DoStartRead() = 0;  // never with another read outstanding
  virtual void DoCancel() = 0;
  virtual void DoHalfClose() = 0;  // no more writes from this end
  virtual void DoRelease() = 0;

  // OnWriteDone.
  void WriteDone(bool ok) ABSL_LOCKS_EXCLUDED(mu_) {
    Transport::SendDone done;
    Next next;
    bool release = false;
    bool half_close = false;
    {
      absl::MutexLock lock(&mu_);
      done = std::move(writing_->done);
      writing_.reset();
      if (ok) {
        hub_->frames_written.fetch_add(1);
        next = NextLocked();
      } else {
        ended_ = true;  // a write fails only when the stream is over
      }
      if (half_close_pending_) {
        half_close_pending_ = false;
        half_close = true;
        ++in_reactor_;  // holds the release until it is done
      }
      release = ReleaseLocked();
    }
    if (half_close) {
      DoHalfClose();
      absl::MutexLock lock(&mu_);
      --in_reactor_;
      release = ReleaseLocked();
    }
    if (done) {
      done(ok ? absl::OkStatus()
              : absl::UnavailableError(absl::StrCat("link to ", peer(),
                                                    " ended before the "
                                                    "frame was sent")),
           {});
    }
    StartNext(next);
    if (release) DoRelease();
  }

  // What OnReadDone does next.
  enum class AfterRead {
    kReadNow,     // start the next read
    kReadLater,   // the frame's answer starts it (ResumeReads)
    kReadsEnded,  // the read side is over
  };

  // OnReadDone(true): hands the frame on.
  //
  // A frame handed to `inbound` is answered (an ack to a ping, a push-pull
  // answer) or not, and only then does the link read again: the answer is
  // written first. That saves a TLS record per answered frame. gRPC 1.51
  // sends a window update as soon as a read is started on a stream that
  // has taken in data since its last update; started after the answer, the
  // read finds the window already restored by the answer's own write pass,
  // which carries the update. It also bounds what one peer has queued at
  // this node to one frame per link.
  //
  // On a stream of this node's (Role::kMine), an answer takes its frame off
  // the awaited; a frame that is no answer says the peer still writes its
  // messages here (a pair not yet set up at its end), so reads go on.
  AfterRead Received(GossipFrame* frame) ABSL_LOCKS_EXCLUDED(mu_) {
    std::string peer;
    uint32_t answer_to = 0;
    {
      absl::MutexLock lock(&mu_);
      if (ended_ || closing_) return AfterRead::kReadsEnded;
      peer = peer_;
      last_used_ = hub_->clock->Now();
      answer_to = AnswerTo(++read_);
      const uint32_t answers = frame->answer_to();
      stray_ = answers == 0;
      auto it = std::find_if(awaited_.begin(), awaited_.end(),
                             [&](const auto& a) { return a.first == answers; });
      if (answers != 0 && it != awaited_.end()) awaited_.erase(it);
    }
    if (!Recheck()) return AfterRead::kReadsEnded;
    hub_->frames_received.fetch_add(1);
    // The reactor's buffer is free before the answer can start a read
    // into it.
    std::string bytes = std::move(*frame->mutable_message());
    frame->Clear();
    absl::ReaderMutexLock deliver(&hub_->deliver_mu);
    // A client learns the server's name before any frame arrives (the
    // server sends its headers first); a frame without one is dropped.
    if (!hub_->inbound || peer.empty()) return AfterRead::kReadNow;
    std::weak_ptr<GossipLink> weak = weak_from_this();
    std::shared_ptr<GrpcTransport::Hub> hub = hub_;
    // Who starts the next read: the answer, when it comes after `inbound`
    // returned; this reaction, when `inbound` answered at once (a dropped
    // frame), so that no read is started from inside `inbound`.
    enum class Phase { kDelivering, kAnswered, kReturned };
    struct Turn {
      std::atomic<bool> answered{false};  // the answer came (once)
      std::atomic<Phase> phase{Phase::kDelivering};
    };
    auto turn = std::make_shared<Turn>();
    hub_->inbound(
        std::move(peer), std::move(bytes),
        [weak, hub, turn, answer_to](std::string answer) {
          if (turn->answered.exchange(true)) return;
          std::shared_ptr<GossipLink> link = weak.lock();
          if (link != nullptr && !answer.empty()) {
            Transport::SendDone none;
            link->Write(answer, hub->clock->Now() + hub->reply_deadline, none,
                        Mark{.answer_to = answer_to});
          }
          if (turn->phase.exchange(Phase::kAnswered) == Phase::kReturned &&
              link != nullptr) {
            link->ResumeReads();
          }
        });
    return turn->phase.exchange(Phase::kReturned) == Phase::kAnswered
               ? AfterRead::kReadNow
               : AfterRead::kReadLater;
  }

  // OnReadDone: true when the reactor should read again now. Otherwise
  // the read side is over, the frame's answer restarts it, or (a stream of
  // this node's) no answer is awaited, and the next frame that awaits one
  // restarts it.
  bool ReadAgain(bool ok, GossipFrame* frame) ABSL_LOCKS_EXCLUDED(mu_) {
    {
      absl::MutexLock lock(&mu_);
      reading_ = false;
      held_ = true;  // no read is started meanwhile (NextLocked)
    }
    const AfterRead next = ok ? Received(frame) : AfterRead::kReadsEnded;
    if (next == AfterRead::kReadLater) return false;  // held until answered
    {
      absl::MutexLock lock(&mu_);
      held_ = false;
      if (next == AfterRead::kReadNow && !ended_ && WantReadLocked()) {
        reading_ = true;
        return true;
      }
    }
    if (next == AfterRead::kReadsEnded) ReadsEnded();
    return false;
  }

  // Starts the next read once a frame is answered, unless the link is
  // over or closing by then, or no answer is awaited on a stream of this
  // node's.
  void ResumeReads() ABSL_LOCKS_EXCLUDED(mu_) {
    {
      absl::MutexLock lock(&mu_);
      held_ = false;
      if (ended_ || released_ || reading_ || !WantReadLocked()) return;
      reading_ = true;
      ++in_reactor_;
    }
    DoStartRead();
    LeaveReactor();
  }

  // The read side is over (the peer ended the stream, or it broke). What
  // waits fails at Done, with the stream's status.
  void ReadsEnded() ABSL_LOCKS_EXCLUDED(mu_) {
    bool release = false;
    {
      absl::MutexLock lock(&mu_);
      ended_ = true;
      release = ReleaseLocked();
    }
    if (release) DoRelease();
  }

  // OnDone: nothing more happens on the stream.
  void Done(const absl::Status& status) ABSL_LOCKS_EXCLUDED(mu_) {
    std::vector<Transport::SendDone> failed;
    {
      absl::MutexLock lock(&mu_);
      ended_ = true;
      failed = TakeQueuedLocked();
    }
    const std::string who = peer();
    const absl::Status ended(
        status.ok() ? absl::StatusCode::kUnavailable : status.code(),
        absl::StrCat("link to ", who.empty() ? address_ : who,
                     " ended: ", status.message()));
    Fail(failed, ended);
    if (std::shared_ptr<GossipLink> other = companion()) other->Close(ended);
    hub_->Finished(this);
  }

  // A client link is established: the server's headers name whom it
  // reached (a link dialed to an address only learns the name here), and
  // `cert_pem` is its certificate.
  void Ready(const std::string& name, std::string cert_pem)
      ABSL_LOCKS_EXCLUDED(mu_) {
    bool named = false;
    {
      absl::MutexLock lock(&mu_);
      cert_pem_ = std::move(cert_pem);
      if (peer_.empty() && !name.empty()) {
        peer_ = name;
        named = true;
      }
    }
    // The handshake has just chained the server's certificate to the CA,
    // checked its validity and that it names this node: only a revocation
    // is left to check, which needs no parse unless the list could apply.
    const identity::Trust* trust = hub_->trust;
    if (trust != nullptr) {
      const uint64_t generation = trust->generation();
      const std::string who = peer();
      if (!who.empty() && !trust->CouldRevoke(pki::IdentityKind::kNode, who)) {
        MarkChecked(generation);
      }
    }
    if (!Recheck()) return;
    Next next;
    {
      absl::MutexLock lock(&mu_);
      ready_ = true;
      next = NextLocked();
    }
    if (named) hub_->Name(this, name);
    StartNext(next);
  }

  // Whether the peer still passes the trust (Options::trust); closes the
  // link when it does not.
  bool Recheck() ABSL_LOCKS_EXCLUDED(mu_) {
    const identity::Trust* trust = hub_->trust;
    if (trust == nullptr) return true;
    const absl::Time now = hub_->clock->Now();
    const uint64_t generation = trust->generation();
    std::string pem, peer;
    {
      absl::MutexLock lock(&mu_);
      if (checked_ && checked_generation_ == generation &&
          now - checked_at_ < hub_->recheck_interval) {
        return true;
      }
      pem = cert_pem_;
      peer = peer_;
    }
    absl::StatusOr<identity::Caller> caller = trust->Identify(
        pem, now,
        address_.empty() ? pki::PeerSide::kClient : pki::PeerSide::kServer);
    absl::Status refused;
    if (!caller.ok()) {
      refused = absl::PermissionDeniedError(
          absl::StrCat("link with ", peer, ": ", caller.status().message()));
    } else if (caller->kind != identity::CallerKind::kNode ||
               caller->name != peer) {
      refused = absl::PermissionDeniedError(
          absl::StrCat("link with ", peer, ": the certificate is ",
                       caller->Describe(), ", not that node"));
    }
    if (!refused.ok()) {
      hub_->links_refused.fetch_add(1);
      Close(refused);
      return false;
    }
    absl::MutexLock lock(&mu_);
    checked_ = true;
    checked_generation_ = generation;
    checked_at_ = now;
    return true;
  }

  // The peer's certificate, accepted at `generation` of the trust now.
  void Checked(std::string cert_pem, uint64_t generation)
      ABSL_LOCKS_EXCLUDED(mu_) {
    {
      absl::MutexLock lock(&mu_);
      cert_pem_ = std::move(cert_pem);
    }
    MarkChecked(generation);
  }
  void MarkChecked(uint64_t generation) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    checked_ = true;
    checked_generation_ = generation;
    checked_at_ = hub_->clock->Now();
  }

  grpc::Status CloseStatus() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    if (close_status_.ok()) return grpc::Status::OK;
    return grpc::Status(static_cast<grpc::StatusCode>(close_status_.raw_code()),
                        std::string(close_status_.message()));
  }

  const std::shared_ptr<GrpcTransport::Hub> hub_;

 private:
  struct Pending {
    GossipFrame frame;
    bool awaits = false;  // the peer answers it (on this stream)
    absl::Time deadline;
    Transport::SendDone done;  // empty once reported
  };

  // What to start after the lock: a write, and a read for its answer.
  struct Next {
    const GossipFrame* write = nullptr;
    bool read = false;  // counted in in_reactor_ until started
  };

  // The next frame to write, if none is being written; and, when it awaits
  // an answer on a stream not being read, the read for it. The write is
  // started first: its pass carries the window update that the last
  // answer left owed (gRPC sends it with any write on the stream), which
  // the read, started first, would send alone.
  Next NextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    Next next;
    if (writing_ != nullptr || queue_.empty() || ended_ || !ready_) {
      return next;
    }
    writing_ = std::move(queue_.front());
    queue_.pop_front();
    writing_since_ = hub_->clock->Now();
    ArmLocked(writing_since_ + hub_->stuck_timeout);
    ++written_;
    if (writing_->awaits) {
      // Answers that never came (a peer that does not name them, or did not
      // answer) are forgotten at their frames' deadlines.
      PruneAwaitedLocked();
      awaited_.emplace_back(AnswerTo(written_), writing_->deadline);
      if (!reading_ && !held_ && !closing_ && !released_ && WantReadLocked()) {
        reading_ = true;
        ++in_reactor_;
        next.read = true;
      }
    }
    next.write = &writing_->frame;
    return next;
  }

  void StartNext(const Next& next) ABSL_LOCKS_EXCLUDED(mu_) {
    if (next.write != nullptr) DoStartWrite(next.write);
    if (!next.read) return;
    DoStartRead();
    LeaveReactor();
  }

  // A reactor operation counted in in_reactor_ has returned: the reactor
  // may end now.
  void LeaveReactor() ABSL_LOCKS_EXCLUDED(mu_) {
    bool release = false;
    {
      absl::MutexLock lock(&mu_);
      --in_reactor_;
      release = ReleaseLocked();
    }
    if (release) DoRelease();
  }

  // Whether this stream is to be read now: always, but for a stream of
  // this node's in a pair, which only while an answer is awaited on it (or
  // the peer still writes other frames there). An answer that does not
  // come frees its place at its frame's deadline.
  bool WantReadLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (role_ != Role::kMine || stray_) return true;
    PruneAwaitedLocked();
    return !awaited_.empty();
  }
  void PruneAwaitedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const absl::Time now = hub_->clock->Now();
    awaited_.erase(
        std::remove_if(awaited_.begin(), awaited_.end(),
                       [&](const auto& a) { return a.second <= now; }),
        awaited_.end());
  }

  // HandOver: frames the first stream of a pair had waiting.
  void Adopt(std::deque<std::unique_ptr<Pending>> frames)
      ABSL_LOCKS_EXCLUDED(mu_) {
    std::vector<Transport::SendDone> failed;
    Next next;
    {
      absl::MutexLock lock(&mu_);
      if (ended_ || closing_) {
        for (auto& p : frames) {
          if (p->done) failed.push_back(std::move(p->done));
        }
      } else {
        for (auto& p : frames) {
          ArmLocked(p->deadline);
          queue_.push_back(std::move(p));
        }
        next = NextLocked();
      }
    }
    Fail(failed,
         absl::UnavailableError(absl::StrCat("link to ", peer(), " closed")));
    StartNext(next);
  }

  // The reactor may end once the stream is over or closing and no write is
  // outstanding.
  bool ReleaseLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (released_ || in_reactor_ > 0 || writing_ != nullptr ||
        !(ended_ || closing_)) {
      return false;
    }
    released_ = true;
    return true;
  }

  std::vector<Transport::SendDone> TakeQueuedLocked()
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::vector<Transport::SendDone> out;
    for (auto& p : queue_) {
      if (p->done) out.push_back(std::move(p->done));
    }
    queue_.clear();
    return out;
  }

  static void Fail(std::vector<Transport::SendDone>& dones,
                   const absl::Status& why) {
    for (Transport::SendDone& d : dones) d(why, {});
  }

  void ArmLocked(absl::Time at) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (at >= armed_) return;
    armed_ = at;
    std::weak_ptr<GossipLink> weak = weak_from_this();
    hub_->clock->RunAfter(
        std::max(absl::ZeroDuration(), at - hub_->clock->Now()), [weak] {
          if (std::shared_ptr<GossipLink> link = weak.lock()) link->Check();
        });
  }

  // The timer: fails frames past their deadline, and closes the link when
  // the frame in writing has waited stuck_timeout (the peer stopped
  // reading, or the connection never came up).
  void Check() ABSL_LOCKS_EXCLUDED(mu_) {
    std::vector<Transport::SendDone> expired;
    bool stuck = false;
    {
      absl::MutexLock lock(&mu_);
      const absl::Time now = hub_->clock->Now();
      armed_ = absl::InfiniteFuture();
      if (ended_ || closing_) return;
      absl::Time next = absl::InfiniteFuture();
      if (!ready_) {
        if (now - created_ >= hub_->stuck_timeout) {
          stuck = true;
        } else {
          next = created_ + hub_->stuck_timeout;
        }
      }
      if (writing_ != nullptr) {
        if (writing_->done && writing_->deadline <= now) {
          expired.push_back(std::move(writing_->done));
        }
        if (now - writing_since_ >= hub_->stuck_timeout) {
          stuck = true;
        } else {
          next = std::min(next, writing_since_ + hub_->stuck_timeout);
          if (writing_->done) next = std::min(next, writing_->deadline);
        }
      }
      for (auto it = queue_.begin(); it != queue_.end();) {
        if ((*it)->deadline <= now) {
          if ((*it)->done) expired.push_back(std::move((*it)->done));
          it = queue_.erase(it);
        } else {
          next = std::min(next, (*it)->deadline);
          ++it;
        }
      }
      if (!stuck && next != absl::InfiniteFuture()) ArmLocked(next);
    }
    hub_->frames_expired.fetch_add(static_cast<int64_t>(expired.size()));
    const std::string who = peer();
    Fail(expired, absl::DeadlineExceededError(
                      absl::StrCat("gossip to ", who.empty() ? address_ : who,
                                   ": not sent within its deadline")));
    if (stuck) {
      hub_->links_stuck.fetch_add(1);
      Close(absl::DeadlineExceededError(absl::StrCat(
          "link to ", who.empty() ? address_ : who, ": nothing sent for ",
          absl::FormatDuration(hub_->stuck_timeout))));
    }
  }

  const std::string address_;  // dialed; empty for an accepted link
  const uint64_t link_id_;
  const absl::Time created_;
  mutable absl::Mutex mu_;
  std::string peer_ ABSL_GUARDED_BY(mu_);
  bool ready_ ABSL_GUARDED_BY(mu_);
  // The peer's certificate, and when the trust last accepted it.
  std::string cert_pem_ ABSL_GUARDED_BY(mu_);
  bool checked_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t checked_generation_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time checked_at_ ABSL_GUARDED_BY(mu_);
  std::deque<std::unique_ptr<Pending>> queue_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<Pending> writing_ ABSL_GUARDED_BY(mu_);
  absl::Time writing_since_ ABSL_GUARDED_BY(mu_);
  absl::Time armed_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  absl::Time last_used_ ABSL_GUARDED_BY(mu_);
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  bool released_ ABSL_GUARDED_BY(mu_) = false;
  // Reactor operations started outside mu_ and not yet returned (a
  // cancel, a half-close, a read resumed): the release waits for them.
  int in_reactor_ ABSL_GUARDED_BY(mu_) = 0;
  // A read is outstanding, or about to be started by whoever set this:
  // false between a frame and its answer (Received). The reactors start
  // the first read themselves (Bind, Start).
  bool reading_ ABSL_GUARDED_BY(mu_) = true;
  // Between a frame and its answer (Received): the answer starts the next
  // read, and nothing else may.
  bool held_ ABSL_GUARDED_BY(mu_) = false;
  bool half_close_pending_ ABSL_GUARDED_BY(mu_) = false;
  Role role_ ABSL_GUARDED_BY(mu_);
  // The other stream of the pair, if this is one.
  std::weak_ptr<GossipLink> companion_ ABSL_GUARDED_BY(mu_);
  // Frames written and read on this stream, for answer_to.
  uint64_t written_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t read_ ABSL_GUARDED_BY(mu_) = 0;
  // The frames written here whose answers are awaited here: answer_to and
  // the frame's deadline.
  std::deque<std::pair<uint32_t, absl::Time>> awaited_ ABSL_GUARDED_BY(mu_);
  // The last frame read here was no answer.
  bool stray_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status close_status_ ABSL_GUARDED_BY(mu_);
};

namespace {

// The dialing end. A hold keeps OnDone away until GossipLink allows it.
class ClientLink final
    : public GossipLink,
      public grpc::ClientBidiReactor<GossipFrame, GossipFrame> {
 public:
  // A link's first stream, or (`first` set) the second of the link whose
  // first it is, which opens once the server said it pairs.
  ClientLink(std::shared_ptr<GrpcTransport::Hub> hub, std::string peer,
             std::string address, std::shared_ptr<grpc::Channel> channel,
             uint64_t link_id, std::weak_ptr<ClientLink> first = {})
      : GossipLink(std::move(hub), std::move(peer), std::move(address),
                   /*ready=*/false, link_id,
                   first.expired() ? Role::kShared : Role::kTheirs),
        channel_(std::move(channel)),
        stub_(mycel::v1::Gossip::NewStub(channel_)),
        first_(std::move(first)) {
    // Waits for the connection rather than failing while the channel
    // reconnects; frames waiting too long fail by their deadlines.
    context_.set_wait_for_ready(true);
    context_.AddMetadata(first_.expired() ? kLinkIdKey : kLinkForKey,
                         absl::StrCat(absl::Hex(link_id)));
  }

  // Binds the reactor, so that writes may be started from now on. Then
  // Start. The hub keeps the link alive until OnDone.
  void Bind() {
    stub_->async()->Link(&context_, this);
    AddHold();
    StartRead(&in_);
  }
  void Start() { StartCall(); }

  void OnReadInitialMetadataDone(bool ok) override {
    // Not ok: the stream failed, and OnReadDone says so.
    if (!ok) return;
    const std::string name = ServerNodeName(context_);
    Ready(name, PeerCertificate(context_.auth_context().get()));
    if (closing()) return;
    if (!first_.expired()) {
      PairedUp(name);
    } else if (context_.GetServerInitialMetadata().count(kLinkPairsKey) > 0) {
      OpenSecond();
    }
  }
  void OnReadDone(bool ok) override {
    if (ReadAgain(ok, &in_)) StartRead(&in_);
  }
  void OnWriteDone(bool ok) override { WriteDone(ok); }
  void OnDone(const grpc::Status& s) override {
    if (s.error_code() == grpc::StatusCode::UNIMPLEMENTED) {
      absl::MutexLock lock(&hub_->mu);
      hub_->unary.insert(address());
    }
    Done(FromGrpc(s));
  }

 private:
  void DoStartWrite(const GossipFrame* frame) override { StartWrite(frame); }
  void DoStartRead() override { StartRead(&in_); }
  void DoCancel() override { context_.TryCancel(); }
  void DoHalfClose() override { StartWritesDone(); }
  void DoRelease() override { RemoveHold(); }

  // The server paired its first stream with this one (its headers came):
  // from now on it writes its messages here, and the first stream is read
  // only for answers.
  void PairedUp(const std::string& name) {
    std::shared_ptr<ClientLink> first = first_.lock();
    std::shared_ptr<GossipLink> self = shared_from_this();
    if (first == nullptr || first->closing() || first->peer() != name) {
      Close(absl::AbortedError("the link this stream pairs with is gone"));
      return;
    }
    Pair(first, Role::kTheirs);
    first->Pair(self, Role::kMine);
    hub_->links_paired.fetch_add(1);
    // Closed meanwhile, it did not see this companion: end this one too.
    if (first->closing()) Close(absl::AbortedError("the link closed"));
  }

  // Opens the link's second stream, over the same connection.
  void OpenSecond() {
    auto second = std::make_shared<ClientLink>(
        hub_, peer(), address(), channel_, link_id(),
        std::static_pointer_cast<ClientLink>(shared_from_this()));
    {
      absl::MutexLock lock(&hub_->mu);
      if (hub_->closed || !hub_->all.contains(this) ||
          hub_->LeavingLocked(this)) {
        return;
      }
      second->Bind();
      hub_->all.emplace(second.get(), second);
      hub_->secondary.insert(second.get());
    }
    second->Start();
  }

  const std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<mycel::v1::Gossip::Stub> stub_;
  grpc::ClientContext context_;
  GossipFrame in_;
  const std::weak_ptr<ClientLink> first_;  // of a second stream
};

// The accepting end: Finish is its end.
class ServerLink final
    : public GossipLink,
      public grpc::ServerBidiReactor<GossipFrame, GossipFrame> {
 public:
  ServerLink(std::shared_ptr<GrpcTransport::Hub> hub,
             grpc::CallbackServerContext* context, std::string peer,
             uint64_t link_id, Role role)
      : GossipLink(std::move(hub), std::move(peer), "", /*ready=*/true, link_id,
                   role),
        context_(context) {}

  // The caller's certificate, accepted by the trust at `generation`.
  void Admitted(uint64_t generation) {
    Checked(PeerCertificate(context_->auth_context().get()), generation);
  }

  void Start() {
    // The dialer learns from the headers whom it reached, before any frame.
    StartSendInitialMetadata();
    StartRead(&in_);
  }

  void OnReadDone(bool ok) override {
    if (ReadAgain(ok, &in_)) StartRead(&in_);
  }
  void OnWriteDone(bool ok) override { WriteDone(ok); }
  void OnCancel() override { ReadsEnded(); }
  void OnDone() override { Done(absl::UnavailableError("closed")); }

 private:
  void DoStartWrite(const GossipFrame* frame) override { StartWrite(frame); }
  void DoStartRead() override { StartRead(&in_); }
  void DoCancel() override { context_->TryCancel(); }
  void DoHalfClose() override {}  // Finish, at the release, ends it
  void DoRelease() override { Finish(CloseStatus()); }

  grpc::CallbackServerContext* const context_;
  GossipFrame in_;
};

// Ends a link at once with its status.
class RefusedLink final
    : public grpc::ServerBidiReactor<GossipFrame, GossipFrame> {
 public:
  explicit RefusedLink(grpc::Status status) { Finish(std::move(status)); }
  void OnDone() override { delete this; }
};

}  // namespace

grpc::ServerBidiReactor<GossipFrame, GossipFrame>* GrpcTransport::Refuse(
    grpc::Status status) {
  return new RefusedLink(std::move(status));
}

std::shared_ptr<GossipLink> GrpcTransport::Hub::AddLocked(
    const std::shared_ptr<GossipLink>& link, const std::string& name,
    const std::string& address) {
  all.emplace(link.get(), link);
  if (!name.empty()) {
    std::vector<GossipLink*>& mine = by_name[name];
    mine.push_back(link.get());
    // One link each way is all a pair of nodes needs: a peer that opens
    // more (a member flooding this node with streams) loses its own oldest,
    // never another member's link.
    size_t open = 0;
    GossipLink* oldest = nullptr;
    for (GossipLink* l : mine) {
      if (LeavingLocked(l)) continue;
      ++open;
      if (oldest == nullptr && l != link.get()) oldest = l;
    }
    if (open > kMaxLinksPerPeer && oldest != nullptr) {
      links_evicted.fetch_add(1);
      evicting.insert(oldest);
      return all.at(oldest);
    }
  } else {
    by_address[address] = link.get();
  }
  if (all.size() - secondary.size() <= max_links) return nullptr;
  // Links on their way out do not count, nor the second streams of pairs
  // (each ends with its link).
  size_t open = 0;
  std::shared_ptr<GossipLink> oldest;
  absl::Time when = absl::InfiniteFuture();
  for (const auto& [raw, l] : all) {
    if (LeavingLocked(raw) || secondary.contains(raw)) continue;
    ++open;
    if (raw == link.get()) continue;
    // A pair was used when either of its streams was.
    absl::Time t = l->last_used();
    if (std::shared_ptr<GossipLink> other = l->companion()) {
      t = std::max(t, other->last_used());
    }
    if (t < when) {
      when = t;
      oldest = l;
    }
  }
  if (open <= max_links || oldest == nullptr) return nullptr;
  links_evicted.fetch_add(1);
  evicting.insert(oldest.get());
  return oldest;
}

bool GrpcTransport::Hub::LeavingLocked(GossipLink* link) {
  return evicting.contains(link) || link->closing();
}

void GrpcTransport::Hub::Name(GossipLink* link, const std::string& name) {
  absl::MutexLock lock(&mu);
  if (!all.contains(link)) return;
  by_name[name].push_back(link);
}

void GrpcTransport::Hub::Reap() {
  std::vector<std::shared_ptr<GossipLink>> done;  // freed after the lock
  absl::MutexLock lock(&mu);
  done.swap(finished);
}

void GrpcTransport::Hub::Finished(GossipLink* link) {
  absl::MutexLock lock(&mu);
  auto it = all.find(link);
  if (it == all.end()) return;
  finished.push_back(std::move(it->second));
  all.erase(it);
  evicting.erase(link);
  secondary.erase(link);
  for (auto n = by_name.begin(); n != by_name.end();) {
    std::vector<GossipLink*>& v = n->second;
    v.erase(std::remove(v.begin(), v.end(), link), v.end());
    if (v.empty()) {
      by_name.erase(n++);
    } else {
      ++n;
    }
  }
  auto a = by_address.find(link->address());
  if (a != by_address.end() && a->second == link) by_address.erase(a);
}

std::shared_ptr<GossipLink> GrpcTransport::Hub::FindLocked(
    const std::string& name, const std::string& address) {
  GossipLink* found = nullptr;
  if (!name.empty()) {
    auto it = by_name.find(name);
    // The newest open one.
    if (it != by_name.end()) {
      for (auto l = it->second.rbegin(); l != it->second.rend(); ++l) {
        if (!LeavingLocked(*l)) {
          found = *l;
          break;
        }
      }
    }
  } else {
    auto it = by_address.find(address);
    if (it != by_address.end() && !LeavingLocked(it->second)) {
      found = it->second;
    }
  }
  if (found == nullptr) return nullptr;
  return all.at(found);
}

GrpcTransport::GrpcTransport(Options options)
    : options_(std::move(options)), hub_(std::make_shared<Hub>(options_)) {}

GrpcTransport::~GrpcTransport() { Shutdown(); }

void GrpcTransport::Shutdown() {
  std::vector<std::shared_ptr<GossipLink>> open;
  {
    absl::MutexLock lock(&hub_->mu);
    hub_->closed = true;
    for (const auto& [raw, link] : hub_->all) open.push_back(link);
  }
  {
    absl::MutexLock lock(&hub_->deliver_mu);
    hub_->inbound = nullptr;
  }
  for (const auto& link : open) {
    link->Close(absl::CancelledError("the node stops gossiping"));
  }
  open.clear();
  // Each link leaves the hub at its OnDone, soon after the cancel. Wait for
  // that (boundedly), so that no reaction runs into what the owner frees
  // next, nor into gRPC's shutdown at exit.
  {
    absl::MutexLock lock(&hub_->mu);
    hub_->mu.AwaitWithTimeout(absl::Condition(
                                  +[](Hub* h) ABSL_EXCLUSIVE_LOCKS_REQUIRED(
                                       h->mu) { return h->all.empty(); },
                                  hub_.get()),
                              absl::Seconds(5));
  }
  hub_->Reap();
}

GrpcTransport::Stats GrpcTransport::stats() const {
  Stats s;
  {
    absl::MutexLock lock(&hub_->mu);
    s.links_open =
        static_cast<int64_t>(hub_->all.size() - hub_->secondary.size());
  }
  s.links_dialed = hub_->links_dialed.load();
  s.links_accepted = hub_->links_accepted.load();
  s.links_stuck = hub_->links_stuck.load();
  s.links_evicted = hub_->links_evicted.load();
  s.links_refused = hub_->links_refused.load();
  s.frames_written = hub_->frames_written.load();
  s.frames_received = hub_->frames_received.load();
  s.frames_expired = hub_->frames_expired.load();
  s.unary_sends = hub_->unary_sends.load();
  s.links_paired = hub_->links_paired.load();
  return s;
}

std::string GrpcTransport::DescribeLinks() const {
  std::vector<std::shared_ptr<GossipLink>> links;
  {
    absl::MutexLock lock(&hub_->mu);
    for (const auto& [raw, link] : hub_->all) links.push_back(link);
  }
  std::string out;
  for (const auto& link : links) absl::StrAppend(&out, link->Describe(), "\n");
  return out;
}

namespace {

// The link id in the client's metadata under `key`; 0 if none.
uint64_t LinkIdFrom(const grpc::CallbackServerContext& context,
                    absl::string_view key) {
  auto it =
      context.client_metadata().find(grpc::string_ref(key.data(), key.size()));
  if (it == context.client_metadata().end()) return 0;
  uint64_t id = 0;
  if (!absl::SimpleHexAtoi(
          absl::string_view(it->second.data(), it->second.size()), &id)) {
    return 0;
  }
  return id;
}

}  // namespace

grpc::ServerBidiReactor<GossipFrame, GossipFrame>* GrpcTransport::Accept(
    grpc::CallbackServerContext* context, std::string peer,
    uint64_t admitted_at) {
  if (const uint64_t first = LinkIdFrom(*context, kLinkForKey); first != 0) {
    return AcceptSecond(context, std::move(peer), admitted_at, first);
  }
  const uint64_t link_id = LinkIdFrom(*context, kLinkIdKey);
  auto link =
      std::make_shared<ServerLink>(hub_, context, peer, link_id, Role::kShared);
  link->Admitted(admitted_at);
  // A dialer that names its link can pair it.
  if (link_id != 0) context->AddInitialMetadata(kLinkPairsKey, "1");
  std::shared_ptr<GossipLink> evict;
  {
    absl::MutexLock lock(&hub_->mu);
    if (hub_->closed) {
      return Refuse(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                 "this node stopped gossiping"));
    }
    // Started before anyone can find it: the next accept may evict it,
    // and nothing may be started on a reactor once it is finished. The
    // reactor is not bound yet, so gRPC only records these operations.
    link->Start();
    evict = hub_->AddLocked(link, peer, "");
  }
  hub_->links_accepted.fetch_add(1);
  if (evict != nullptr) {
    evict->Close(absl::ResourceExhaustedError("too many links"),
                 /*graceful=*/true);
  }
  return link.get();
}

grpc::ServerBidiReactor<GossipFrame, GossipFrame>* GrpcTransport::AcceptSecond(
    grpc::CallbackServerContext* context, std::string peer,
    uint64_t admitted_at, uint64_t link_id) {
  auto second =
      std::make_shared<ServerLink>(hub_, context, peer, link_id, Role::kMine);
  second->Admitted(admitted_at);
  std::shared_ptr<GossipLink> first;
  {
    absl::MutexLock lock(&hub_->mu);
    if (hub_->closed) {
      return Refuse(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                 "this node stopped gossiping"));
    }
    // The peer's own link of that id, open and not paired yet.
    auto it = hub_->by_name.find(peer);
    if (it != hub_->by_name.end()) {
      for (GossipLink*& l : it->second) {
        if (l->link_id() != link_id || !l->address().empty() ||
            hub_->LeavingLocked(l) || l->companion() != nullptr) {
          continue;
        }
        first = hub_->all.at(l);
        l = second.get();  // sends to the peer go on the second from now
        break;
      }
    }
    if (first == nullptr) {
      return Refuse(grpc::Status(
          grpc::StatusCode::FAILED_PRECONDITION,
          absl::StrCat("no open link ", absl::Hex(link_id), " from ", peer,
                       " to pair this stream with")));
    }
    second->Pair(first, Role::kMine);
    second->Start();
    hub_->all.emplace(second.get(), second);
    hub_->secondary.insert(first.get());
  }
  first->HandOver(second);
  // Closed meanwhile, the first did not see this companion: end this one
  // too (the reactor is gRPC's to finish once returned).
  if (first->closing()) {
    second->Close(absl::AbortedError("the link closed"));
  }
  hub_->links_paired.fetch_add(1);
  return second.get();
}

void GrpcTransport::Send(absl::string_view peer, absl::string_view address,
                         std::string bytes, absl::Duration deadline,
                         bool awaits_answer, SendDone done) {
  hub_->Reap();
  const std::string name(peer);
  const std::string addr(address);
  const absl::Time due = hub_->clock->Now() + deadline;
  // Twice at most: a link found may be closing, and then one is dialed.
  for (int attempt = 0; attempt < 2; ++attempt) {
    enum { kLink, kUnary, kClosed, kNoChannel } what = kLink;
    std::shared_ptr<GossipLink> link;
    std::shared_ptr<ClientLink> dialed;
    std::shared_ptr<GossipLink> evict;
    {
      absl::MutexLock lock(&hub_->mu);
      if (hub_->closed) {
        what = kClosed;
      } else if (hub_->unary.contains(addr)) {
        what = kUnary;
      } else if (attempt == 0) {
        link = hub_->FindLocked(name, addr);
      }
      if (what == kLink && link == nullptr) {
        std::shared_ptr<grpc::Channel> channel =
            options_.channels ? options_.channels(peer, address) : nullptr;
        if (channel == nullptr) {
          what = kNoChannel;
        } else {
          ResetBackoffIfFailed(channel.get());
          dialed = std::make_shared<ClientLink>(
              hub_, name, addr, std::move(channel), NewLinkId());
          // Bound before anyone can find it and write to it.
          dialed->Bind();
          evict = hub_->AddLocked(dialed, name, addr);
          link = dialed;
        }
      }
    }
    switch (what) {
      case kLink:
        break;
      case kUnary:
        SendUnary(peer, address, std::move(bytes), deadline, std::move(done));
        return;
      case kClosed:
        done(absl::UnavailableError(
                 absl::StrCat("gossip to ", name.empty() ? addr : name,
                              ": this node stopped gossiping")),
             {});
        return;
      case kNoChannel:
        done(absl::UnavailableError(absl::StrCat(
                 "gossip to ", name.empty() ? "seed" : name, " at ", addr,
                 ": no channel (the node's credentials cannot be read)")),
             {});
        return;
    }
    if (dialed != nullptr) hub_->links_dialed.fetch_add(1);
    if (evict != nullptr) {
      evict->Close(absl::ResourceExhaustedError("too many links"),
                   /*graceful=*/true);
    }
    // A dialed link takes the frame before it starts: refused at its
    // handshake (a revoked server), it fails the frame with the reason,
    // rather than closing first and leaving this loop to dial again.
    const bool written =
        link->Write(bytes, due, done, Mark{.awaits = awaits_answer});
    if (dialed != nullptr) dialed->Start();
    if (written) return;
  }
  done(absl::UnavailableError(absl::StrCat("gossip to ",
                                           name.empty() ? addr : name,
                                           ": the link closed at once")),
       {});
}

namespace {

// Everything one unary call needs until gRPC completes it.
struct Call {
  std::string peer;
  std::unique_ptr<mycel::v1::Gossip::Stub> stub;
  grpc::ClientContext context;
  GossipFrame request;
  mycel::v1::GossipFrameAck response;
  Transport::SendDone done;
  std::shared_ptr<std::atomic<int64_t>> in_flight;
};

}  // namespace

void GrpcTransport::SendUnary(absl::string_view peer, absl::string_view address,
                              std::string bytes, absl::Duration deadline,
                              SendDone done) {
  std::shared_ptr<grpc::Channel> channel =
      options_.channels ? options_.channels(peer, address) : nullptr;
  if (channel == nullptr) {
    done(absl::UnavailableError(absl::StrCat(
             "gossip to ", peer.empty() ? "seed" : peer, " at ", address,
             ": no channel (the node's credentials cannot be read)")),
         {});
    return;
  }
  hub_->unary_sends.fetch_add(1);
  ResetBackoffIfFailed(channel.get());
  auto call = std::make_shared<Call>();
  call->context.set_wait_for_ready(true);
  call->stub = mycel::v1::Gossip::NewStub(std::move(channel));
  call->context.set_deadline(absl::ToChronoTime(absl::Now() + deadline));
  call->peer = std::string(peer);
  call->request.set_message(std::move(bytes));
  call->done = std::move(done);
  call->in_flight = in_flight_;
  in_flight_->fetch_add(1);
  // The callback holds the call, so its state outlives this frame and the
  // transport; gRPC runs it exactly once.
  Call* raw = call.get();
  raw->stub->async()->Exchange(
      &raw->context, &raw->request, &raw->response,
      [call = std::move(call)](grpc::Status s) mutable {
        call->in_flight->fetch_sub(1);
        SendDone finish = std::move(call->done);
        Reply reply;
        if (s.ok() && !call->response.reply().empty()) {
          // A seed known only by its address answers as whichever node
          // its certificate names.
          reply.from =
              call->peer.empty() ? ServerNodeName(call->context) : call->peer;
          if (!reply.from.empty()) {
            reply.bytes = std::move(*call->response.mutable_reply());
          }
        }
        // The call (its context and stub) may be freed on this thread only
        // after gRPC has finished with it, which it has when this runs.
        call.reset();
        finish(FromGrpc(s), std::move(reply));
      });
}

}  // namespace mycel::membership
