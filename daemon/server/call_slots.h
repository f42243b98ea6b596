// CallSlots: a cap on the calls of one kind that are open at once on the
// node, both sockets together, for the calls that hold something of the
// node's for as long as their client keeps them open: a Watch its place
// among the watchers, a Logs stream the log's files, a Wait the call's
// memory (about 6 KB each: 100,000 waits over one connection took a node
// from 15 to 625 MB). Without it, any caller the `read` rule admits could
// open them until the node ran out of descriptors or memory.
//
// A caller (a client certificate's identity, or the local socket) may hold
// at most half of the slots the other callers leave (at least one while
// any is left): alone, half of them; a second caller, half of the rest;
// and so on. A caller that leaks its calls, or holds them on purpose,
// leaves the others room, and it takes about log2(max) callers together
// to hold every slot. The last eighth is kept for the local socket
// (root on the host): callers over TCP, however many, never take it, so
// that the node's operator can always follow a log or wait for a call.
//
// Thread-safe. A slot may outlive its CallSlots (a reactor's state can be
// destroyed with the event loop, after the daemon's other members).
#ifndef MYCEL_DAEMON_SERVER_CALL_SLOTS_H_
#define MYCEL_DAEMON_SERVER_CALL_SLOTS_H_

#include <grpcpp/server_context.h>

#include <memory>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace mycel {

class CallSlots {
 private:
  struct Counts {
    absl::Mutex mu;
    int open ABSL_GUARDED_BY(mu) = 0;
    absl::flat_hash_map<std::string, int> by_caller ABSL_GUARDED_BY(mu);
  };

 public:
  // A slot taken: given back when destroyed. Move-only.
  class Slot {
   public:
    Slot(Slot&& other) noexcept = default;
    Slot& operator=(Slot&& other) noexcept {
      if (this != &other) {
        Release();
        counts_ = std::move(other.counts_);
        caller_ = std::move(other.caller_);
      }
      return *this;
    }
    Slot(const Slot&) = delete;
    Slot& operator=(const Slot&) = delete;
    ~Slot() { Release(); }

   private:
    friend class CallSlots;
    Slot(std::shared_ptr<Counts> counts, std::string caller)
        : counts_(std::move(counts)), caller_(std::move(caller)) {}
    void Release();
    std::shared_ptr<Counts> counts_;
    std::string caller_;
  };

  // At most `max` calls at once, shared as above. `what` names them in the
  // refusal ("log streams") and `setting` the limit ("max_log_streams").
  CallSlots(int max, std::string what, std::string setting)
      : max_(max),
        reserve_(max / 8),
        what_(std::move(what)),
        setting_(std::move(setting)) {}
  CallSlots(const CallSlots&) = delete;
  CallSlots& operator=(const CallSlots&) = delete;

  // A slot for one call of `caller`, or RESOURCE_EXHAUSTED naming the
  // setting when `max` are taken, when only the local socket's are left
  // and `caller` is not it, or when `caller` holds its share. `call`
  // prefixes the message ("logs").
  absl::StatusOr<Slot> Take(absl::string_view call, absl::string_view caller);

  // The caller of a call, as Take counts it: its client certificate's
  // SPIFFE ID, or "" (the local socket).
  static std::string CallerOf(const grpc::CallbackServerContext* ctx);

  int max() const { return max_; }
  // Slots only the local socket may take.
  int reserve() const { return reserve_; }
  int open() const;

 private:
  const int max_;
  const int reserve_;
  const std::string what_;
  const std::string setting_;
  const std::shared_ptr<Counts> counts_ = std::make_shared<Counts>();
};

}  // namespace mycel

#endif  // MYCEL_DAEMON_SERVER_CALL_SLOTS_H_
