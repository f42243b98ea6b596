#include "runtime/background_queue.h"

#include <errno.h>
#include <sys/resource.h>
#include <unistd.h>

#include <utility>

#include "runtime/log.h"
#include "runtime/status.h"

namespace mycel {

BackgroundQueue::BackgroundQueue(Priority priority)
    : thread_([this, priority] { Run(priority); }) {}

BackgroundQueue::~BackgroundQueue() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

void BackgroundQueue::Post(Work work) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(std::move(work));
  ++queued_;
}

void BackgroundQueue::Close(UniqueFd fd) {
  if (!fd) return;
  Post([fd = std::move(fd)]() mutable { fd.reset(); });
}

void BackgroundQueue::Flush() {
  absl::MutexLock lock(&mu_);
  struct Target {
    const BackgroundQueue* self;
    uint64_t done;
  } target{this, queued_};
  mu_.Await(absl::Condition(
      +[](Target* t)
           ABSL_NO_THREAD_SAFETY_ANALYSIS { return t->self->done_ >= t->done; },
      &target));
}

void BackgroundQueue::Run(Priority priority) {
  // On Linux a thread has a nice value of its own.
  if (priority == Priority::kLow &&
      setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), 19) != 0) {
    log::Warn("background thread keeps its priority",
              {{"error", PosixError("setpriority", errno)}});
  }
  for (;;) {
    std::vector<Work> batch;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](BackgroundQueue* self) ABSL_NO_THREAD_SAFETY_ANALYSIS {
            return self->stopping_ || !self->queue_.empty();
          },
          this));
      if (queue_.empty()) return;  // stopping, and nothing is left
      batch.swap(queue_);
    }
    for (Work& work : batch) std::move(work)();
    const uint64_t ran = batch.size();
    batch.clear();  // destroys the work items (and what they own) here too
    absl::MutexLock lock(&mu_);
    done_ += ran;
  }
}

}  // namespace mycel
