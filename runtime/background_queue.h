// BackgroundQueue: one thread that runs, in order, work nobody waits for.
//
// Some cleanup blocks the thread that does it for longer than the request
// that caused it should take. Two examples from deleting a cell:
//   - closing the last reference to a mount namespace unmounts everything
//     in it and then waits for an expedited RCU grace period
//     (namespace_unlock); a cell's init holds that reference when it dies,
//     and the deletion waits for the init's death, unless the daemon keeps
//     a reference and drops it here;
//   - removing a directory on a filesystem mounted with `discard` waits for
//     the discard of its blocks to reach the disk.
// Each took about half a millisecond on this project's build machines.
#ifndef MYCEL_RUNTIME_BACKGROUND_QUEUE_H_
#define MYCEL_RUNTIME_BACKGROUND_QUEUE_H_

#include <cstdint>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"
#include "runtime/unique_fd.h"

namespace mycel {

// Thread-safe. The destructor runs whatever is still queued, then joins.
class BackgroundQueue {
 public:
  using Work = absl::AnyInvocable<void() &&>;

  enum class Priority {
    kNormal,
    // nice 19 for the queue's thread (and for processes it starts), so that
    // the work waits for a CPU that nothing else wants.
    kLow,
  };

  explicit BackgroundQueue(Priority priority = Priority::kNormal);
  ~BackgroundQueue();
  BackgroundQueue(const BackgroundQueue&) = delete;
  BackgroundQueue& operator=(const BackgroundQueue&) = delete;

  // Queues `work`; returns at once.
  void Post(Work work) ABSL_LOCKS_EXCLUDED(mu_);

  // Queues the close of `fd` (an invalid fd is ignored).
  void Close(UniqueFd fd) ABSL_LOCKS_EXCLUDED(mu_);

  // Blocks until everything queued before the call has run.
  void Flush() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Run(Priority priority);

  absl::Mutex mu_;
  std::vector<Work> queue_ ABSL_GUARDED_BY(mu_);
  uint64_t queued_ ABSL_GUARDED_BY(mu_) = 0;  // ever queued
  uint64_t done_ ABSL_GUARDED_BY(mu_) = 0;    // ever run
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: starts once the members above exist
};

}  // namespace mycel

#endif  // MYCEL_RUNTIME_BACKGROUND_QUEUE_H_
