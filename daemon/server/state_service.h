// The mycel.v1.State gRPC service: the user key/value namespace of the
// replicated store on this node (daemon/store/state_store.h).
//
// Watch is a callback-API server stream: it holds no server thread while
// it waits for changes. Its reactor runs on the daemon's event loop
// (reactor_state.h), reads the store there a batch at a time, with one
// message in flight, and when it is caught up waits on StateWatchers.
#ifndef MYCEL_DAEMON_SERVER_STATE_SERVICE_H_
#define MYCEL_DAEMON_SERVER_STATE_SERVICE_H_

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <functional>
#include <memory>
#include <vector>

#include "daemon/server/call_slots.h"
#include "daemon/store/state_store.h"
#include "mycel/v1/state.grpc.pb.h"

namespace mycel {

// Wakes watchers that are caught up when the kv revision moves: at once
// after a write through this node's API (Notify), and otherwise within
// kPollInterval (changes received from peers), polling only while someone
// waits. Used on the event loop only, except Notify (any thread).
// `state` and `io` must outlive it.
class StateWatchers {
 public:
  static constexpr absl::Duration kPollInterval = absl::Milliseconds(100);

  // At most `max_open` Watch streams at once (Open).
  StateWatchers(store::StateStore* state, boost::asio::io_context* io,
                int max_open = 4096)
      : state_(state),
        io_(io),
        timer_(*io),
        slots_(max_open, "watches", "max_watches") {}
  StateWatchers(const StateWatchers&) = delete;
  StateWatchers& operator=(const StateWatchers&) = delete;

  // On the loop: calls `wake` once, on the loop, when the revision is
  // past `revision`. `alive` false by then: dropped unheard.
  void Wait(int64_t revision, std::shared_ptr<bool> alive,
            std::function<void()> wake);
  // Any thread: a write happened; check now. Notifications that come
  // before the loop has run the last one's check share it, and with no
  // watch waiting there is nothing to check: the loop is not woken (a put
  // would otherwise wake it once each).
  void Notify();
  // Any thread: the object store's listener for changes that came another
  // way (a peer's, applied by replication): a change of the user's
  // namespace notifies, so a caught-up watch hears of it now rather than
  // at its next poll.
  void OnChange(const store::ObjectChange& change);

  // Any thread: a place for one Watch stream of `caller`
  // (CallSlots::CallerOf), held until the stream ends; RESOURCE_EXHAUSTED
  // when `max_open` are open already, or half of them by `caller`.
  absl::StatusOr<CallSlots::Slot> Open(absl::string_view caller) {
    return slots_.Take("watch", caller);
  }
  // Watch streams open now.
  int open() const { return slots_.open(); }

 private:
  struct Waiter {
    int64_t revision;
    std::shared_ptr<bool> alive;
    std::function<void()> wake;
  };
  void Check();
  void Arm();

  store::StateStore* const state_;
  boost::asio::io_context* const io_;
  boost::asio::steady_timer timer_;
  bool armed_ = false;
  std::vector<Waiter> waiters_;
  // waiters_.size(), for Notify on other threads. Stored before Wait checks
  // the revision: a write that Notify skipped (it saw none waiting) had
  // committed before that check reads the store, under the store's lock.
  std::atomic<size_t> waiting_{0};
  // A check is posted and has not started yet.
  std::atomic<bool> notified_{false};
  CallSlots slots_;
};

// Thread-safe. `state`, `watchers` and `io` must outlive it.
// Put and Delete use the callback API: a write waits for its group commit
// (Store::SubmitReplicated) without holding a thread, so concurrent writers
// share commits instead of threads.
class StateService final : public mycel::v1::State::WithCallbackMethod_Put<
                               mycel::v1::State::WithCallbackMethod_Delete<
                                   mycel::v1::State::WithCallbackMethod_Watch<
                                       mycel::v1::State::Service>>> {
 public:
  StateService(store::StateStore* state, StateWatchers* watchers,
               boost::asio::io_context* io)
      : state_(state), watchers_(watchers), io_(io) {}

  grpc::Status Get(grpc::ServerContext*, const mycel::v1::GetStateRequest*,
                   mycel::v1::StateObject*) override;
  grpc::ServerUnaryReactor* Put(grpc::CallbackServerContext*,
                                const mycel::v1::PutStateRequest*,
                                mycel::v1::StateObject*) override;
  grpc::ServerUnaryReactor* Delete(grpc::CallbackServerContext*,
                                   const mycel::v1::DeleteStateRequest*,
                                   mycel::v1::DeleteStateResponse*) override;
  grpc::Status List(grpc::ServerContext*, const mycel::v1::ListStateRequest*,
                    mycel::v1::ListStateResponse*) override;
  grpc::ServerWriteReactor<mycel::v1::StateEvent>* Watch(
      grpc::CallbackServerContext*,
      const mycel::v1::WatchStateRequest*) override;

 private:
  store::StateStore* const state_;
  StateWatchers* const watchers_;
  boost::asio::io_context* const io_;
};

}  // namespace mycel

#endif  // MYCEL_DAEMON_SERVER_STATE_SERVICE_H_
