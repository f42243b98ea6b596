#include "daemon/server/state_service.h"

#include <deque>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "daemon/server/reactor_state.h"
#include "daemon/server/status_convert.h"
#include "daemon/store/json_text.h"
#include "runtime/status.h"

namespace mycel {
namespace {

constexpr int kDefaultPageSize = 1000;
constexpr int kMaxPageSize = 10000;
// Rows a watch reads from the store at a time.
constexpr int kWatchBatch = 256;

void ToProto(const store::Object& o, mycel::v1::StateObject* out) {
  out->set_key(o.key);
  if (o.value.has_value()) out->set_value(*o.value);
  out->set_version(store::ObjectVersion::Of(o.stamp).ToString());
  out->set_origin(o.stamp.origin);
  out->set_seq(o.stamp.seq);
  out->set_hlc(o.stamp.hlc);
}

void ToProto(const store::ObjectChange& c, mycel::v1::StateObject* out) {
  out->set_key(c.key);
  if (c.value.has_value()) out->set_value(*c.value);
  out->set_version(store::ObjectVersion::Of(c.stamp).ToString());
  out->set_origin(c.stamp.origin);
  out->set_seq(c.stamp.seq);
  out->set_hlc(c.stamp.hlc);
}

// A JSON text of any kind, at most max_bytes long.
absl::Status ValidateJson(const std::string& value, size_t max_bytes) {
  if (value.size() > max_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "value: ", value.size(), " bytes is over the limit of ", max_bytes));
  }
  return Annotate(store::CheckJsonText(value), "value");
}

// One Watch call. Touched on the loop only (see reactor_state.h).
class WatchReactor final
    : public grpc::ServerWriteReactor<mycel::v1::StateEvent> {
 public:
  WatchReactor(store::StateStore* state, StateWatchers* watchers,
               boost::asio::io_context* io,
               const mycel::v1::WatchStateRequest& req, CallSlots::Slot slot)
      : state_(std::make_shared<ReactorState<WatchReactor>>(io, this)),
        store_(state),
        watchers_(watchers),
        prefix_(req.prefix()),
        alive_(std::make_shared<bool>(true)) {
    state_->Hold(std::move(slot));
    if (req.has_from_revision()) {
      revision_ = req.from_revision();
      phase_ = Phase::kCatchUp;
    }
    state_->Post([](WatchReactor* r) { r->Pump(); });
  }
  ~WatchReactor() override { *alive_ = false; }

  void OnWriteDone(bool ok) override {
    state_->Post([ok](WatchReactor* r) {
      r->writing_ = false;
      if (!ok) {
        r->End(absl::CancelledError("the client stopped reading"));
        return;
      }
      r->Pump();
    });
  }
  void OnCancel() override {
    state_->Post([](WatchReactor* r) {
      r->End(absl::CancelledError("the client went away"));
    });
  }
  void OnDone() override { state_->Release(); }

 private:
  enum class Phase {
    kListing,  // sending every live key, a page at a time
    kCatchUp,  // sending the changes after from_revision
    kLive,     // synced; sending changes as they come
  };

  void End(const absl::Status& status) {
    if (state_->TakeFinish()) Finish(ToGrpc(status));
  }

  // Writes the next event, reading more from the store when none is
  // queued, or waits for a change when caught up.
  void Pump() {
    if (writing_) return;
    if (queue_.empty()) {
      absl::Status s = Fill();
      if (!s.ok()) {
        End(s);
        return;
      }
    }
    if (queue_.empty()) {
      std::weak_ptr<ReactorState<WatchReactor>> weak = state_;
      watchers_->Wait(revision_, alive_, [weak] {
        if (auto s = weak.lock()) s->Post([](WatchReactor* r) { r->Pump(); });
      });
      return;
    }
    message_ = std::move(queue_.front());
    queue_.pop_front();
    writing_ = true;
    StartWrite(&message_);
  }

  void Synced() {
    mycel::v1::StateEvent e;
    e.set_type(mycel::v1::StateEvent::TYPE_SYNCED);
    e.set_revision(revision_);
    queue_.push_back(std::move(e));
    phase_ = Phase::kLive;
  }

  absl::Status Fill() {
    if (phase_ == Phase::kListing) {
      absl::StatusOr<store::StatePage> page =
          store_->List(prefix_, after_, kWatchBatch);
      if (!page.ok()) return page.status();
      // The first page's revision: later pages may hold changes after it,
      // which are then sent again from the log (the final state is right).
      if (!listed_any_) revision_ = page->revision;
      listed_any_ = true;
      for (const store::Object& o : page->objects) {
        mycel::v1::StateEvent e;
        e.set_type(mycel::v1::StateEvent::TYPE_PUT);
        e.set_revision(revision_);
        e.set_initial(true);
        ToProto(o, e.mutable_object());
        queue_.push_back(std::move(e));
      }
      after_ = page->next_after;
      if (after_.empty()) Synced();
      return absl::OkStatus();
    }
    absl::StatusOr<store::StateChanges> changes =
        store_->ChangesSince(prefix_, revision_, kWatchBatch);
    if (!changes.ok()) return changes.status();
    for (const store::StateChange& c : changes->changes) {
      mycel::v1::StateEvent e;
      e.set_revision(c.revision);
      const bool live = c.object.has_value() && c.object->value.has_value();
      e.set_type(live ? mycel::v1::StateEvent::TYPE_PUT
                      : mycel::v1::StateEvent::TYPE_DELETE);
      if (c.object.has_value()) {
        ToProto(*c.object, e.mutable_object());
      } else {
        e.mutable_object()->set_key(c.key);
      }
      queue_.push_back(std::move(e));
    }
    revision_ = changes->revision;
    if (phase_ == Phase::kCatchUp &&
        changes->changes.size() < static_cast<size_t>(kWatchBatch)) {
      Synced();
    }
    return absl::OkStatus();
  }

  std::shared_ptr<ReactorState<WatchReactor>> state_;
  store::StateStore* const store_;
  StateWatchers* const watchers_;
  const std::string prefix_;
  std::shared_ptr<bool> alive_;
  Phase phase_ = Phase::kListing;
  int64_t revision_ = 0;
  std::string after_;  // kListing: the last key sent
  bool listed_any_ = false;
  bool writing_ = false;
  std::deque<mycel::v1::StateEvent> queue_;
  mycel::v1::StateEvent message_;
};

}  // namespace

void StateWatchers::Wait(int64_t revision, std::shared_ptr<bool> alive,
                         std::function<void()> wake) {
  waiters_.push_back({revision, std::move(alive), std::move(wake)});
  waiting_ = waiters_.size();
  // A write that committed since the caller read the revision may have
  // found no one waiting (Notify) and posted no check.
  Check();
}

void StateWatchers::Notify() {
  if (waiting_.load() == 0) return;
  if (notified_.exchange(true)) return;
  boost::asio::post(*io_, [this] {
    // Cleared before the check reads the revision: a write after this
    // point posts a check of its own.
    notified_ = false;
    Check();
  });
}

void StateWatchers::OnChange(const store::ObjectChange& change) {
  if (change.ns == store::kStateNamespace) Notify();
}

void StateWatchers::Arm() {
  if (armed_ || waiters_.empty()) return;
  armed_ = true;
  timer_.expires_after(absl::ToChronoNanoseconds(kPollInterval));
  timer_.async_wait([this](const boost::system::error_code& ec) {
    // Cancelled: the watchers are going away with the daemon; touch
    // nothing.
    if (ec) return;
    armed_ = false;
    Check();
  });
}

void StateWatchers::Check() {
  if (waiters_.empty()) return;
  absl::StatusOr<int64_t> now = state_->Revision();
  std::vector<Waiter> keep;
  std::vector<std::function<void()>> wake;
  for (Waiter& w : waiters_) {
    if (!*w.alive) continue;
    // On an error, wake them all: each reads again and fails the call with
    // the error.
    if (!now.ok() || *now > w.revision) {
      wake.push_back(std::move(w.wake));
    } else {
      keep.push_back(std::move(w));
    }
  }
  waiters_ = std::move(keep);
  waiting_ = waiters_.size();
  for (auto& fn : wake) fn();
  Arm();
}

grpc::Status StateService::Get(grpc::ServerContext*,
                               const mycel::v1::GetStateRequest* req,
                               mycel::v1::StateObject* resp) {
  if (req->key().empty()) {
    return ToGrpc(absl::InvalidArgumentError("key: empty"));
  }
  absl::StatusOr<store::Object> o = state_->Get(req->key());
  if (!o.ok()) {
    if (absl::IsNotFound(o.status())) {
      return ToGrpc(absl::NotFoundError(absl::StrCat("key ", req->key())));
    }
    return ToGrpc(o.status());
  }
  ToProto(*o, resp);
  return grpc::Status::OK;
}

grpc::ServerUnaryReactor* StateService::Put(
    grpc::CallbackServerContext* ctx, const mycel::v1::PutStateRequest* req,
    mycel::v1::StateObject* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  absl::Status valid =
      req->key().empty()
          ? absl::InvalidArgumentError("key: empty")
          : ValidateJson(req->value(), state_->limits().max_value_bytes);
  std::optional<store::ObjectVersion> if_version;
  if (valid.ok() && req->has_if_version()) {
    absl::StatusOr<store::ObjectVersion> v =
        store::ObjectVersion::Parse(req->if_version(), "if_version");
    if (v.ok()) {
      if_version = *std::move(v);
    } else {
      valid = v.status();
    }
  }
  if (!valid.ok()) {
    reactor->Finish(ToGrpc(valid));
    return reactor;
  }
  state_->PutAsync(
      req->key(), req->value(), std::move(if_version),
      [this, reactor, resp](absl::StatusOr<store::ObjectChange> c) {
        if (!c.ok()) {
          reactor->Finish(ToGrpc(c.status()));
          return;
        }
        watchers_->Notify();
        ToProto(*c, resp);
        reactor->Finish(grpc::Status::OK);
      });
  return reactor;
}

grpc::ServerUnaryReactor* StateService::Delete(
    grpc::CallbackServerContext* ctx, const mycel::v1::DeleteStateRequest* req,
    mycel::v1::DeleteStateResponse* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  if (req->key().empty()) {
    reactor->Finish(ToGrpc(absl::InvalidArgumentError("key: empty")));
    return reactor;
  }
  state_->DeleteAsync(
      req->key(), [this, reactor, resp](absl::StatusOr<store::ObjectChange> c) {
        if (!c.ok()) {
          reactor->Finish(ToGrpc(c.status()));
          return;
        }
        watchers_->Notify();
        resp->set_version(store::ObjectVersion::Of(c->stamp).ToString());
        reactor->Finish(grpc::Status::OK);
      });
  return reactor;
}

grpc::Status StateService::List(grpc::ServerContext*,
                                const mycel::v1::ListStateRequest* req,
                                mycel::v1::ListStateResponse* resp) {
  if (req->page_size() < 0 || req->page_size() > kMaxPageSize) {
    return ToGrpc(absl::InvalidArgumentError(
        absl::StrCat("page_size: want 0 (default ", kDefaultPageSize, ") to ",
                     kMaxPageSize, ", got ", req->page_size())));
  }
  const int size = req->page_size() > 0 ? req->page_size() : kDefaultPageSize;
  absl::StatusOr<store::StatePage> page =
      state_->List(req->prefix(), req->page_token(), size);
  if (!page.ok()) return ToGrpc(page.status());
  for (const store::Object& o : page->objects) ToProto(o, resp->add_objects());
  resp->set_next_page_token(page->next_after);
  resp->set_revision(page->revision);
  return grpc::Status::OK;
}

grpc::ServerWriteReactor<mycel::v1::StateEvent>* StateService::Watch(
    grpc::CallbackServerContext* ctx, const mycel::v1::WatchStateRequest* req) {
  if (req->has_from_revision() && req->from_revision() < 0) {
    return new FailedWriteReactor<mycel::v1::StateEvent>(
        ToGrpc(absl::InvalidArgumentError(absl::StrCat(
            "from_revision: must be 0 or more, got ", req->from_revision()))));
  }
  absl::StatusOr<CallSlots::Slot> slot =
      watchers_->Open(CallSlots::CallerOf(ctx));
  if (!slot.ok()) {
    return new FailedWriteReactor<mycel::v1::StateEvent>(ToGrpc(slot.status()));
  }
  return new WatchReactor(state_, watchers_, io_, *req, *std::move(slot));
}

}  // namespace mycel
