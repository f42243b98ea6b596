// CallSlots: a cap on the calls of one kind that are open at once on the
// node, both sockets together, for the calls that hold something of the
// node's for as long as their client keeps them open: a Watch its place
// among the watchers, a Logs stream the log's files, a Wait the call's
// memory (about 6 KB each: 100,000 waits over one connection took a node
// from 15 to 625 MB). Without it, any caller the `read` rule admits could
// open them until the node ran out of descriptors or memory.
//
// Thread-safe. A slot may outlive its CallSlots (a reactor's state can be
// destroyed with the event loop, after the daemon's other members).
#ifndef MYCEL_DAEMON_SERVER_CALL_SLOTS_H_
#define MYCEL_DAEMON_SERVER_CALL_SLOTS_H_

#include <atomic>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mycel {

class CallSlots {
 public:
  // A slot taken: given back when destroyed. Move-only.
  class Slot {
   public:
    Slot(Slot&& other) noexcept = default;
    Slot& operator=(Slot&& other) noexcept {
      if (this != &other) {
        Release();
        open_ = std::move(other.open_);
      }
      return *this;
    }
    Slot(const Slot&) = delete;
    Slot& operator=(const Slot&) = delete;
    ~Slot() { Release(); }

   private:
    friend class CallSlots;
    explicit Slot(std::shared_ptr<std::atomic<int>> open)
        : open_(std::move(open)) {}
    void Release() {
      if (open_ != nullptr) open_->fetch_sub(1);
      open_.reset();
    }
    std::shared_ptr<std::atomic<int>> open_;
  };

  // At most `max` calls at once. `what` names them in the refusal ("log
  // streams") and `setting` the limit ("max_log_streams").
  CallSlots(int max, std::string what, std::string setting)
      : max_(max), what_(std::move(what)), setting_(std::move(setting)) {}
  CallSlots(const CallSlots&) = delete;
  CallSlots& operator=(const CallSlots&) = delete;

  // A slot for one call, or RESOURCE_EXHAUSTED naming the setting when
  // `max` are taken. `call` prefixes the message ("logs").
  absl::StatusOr<Slot> Take(absl::string_view call);

  int max() const { return max_; }
  int open() const { return open_->load(); }

 private:
  const int max_;
  const std::string what_;
  const std::string setting_;
  const std::shared_ptr<std::atomic<int>> open_ =
      std::make_shared<std::atomic<int>>(0);
};

}  // namespace mycel

#endif  // MYCEL_DAEMON_SERVER_CALL_SLOTS_H_
