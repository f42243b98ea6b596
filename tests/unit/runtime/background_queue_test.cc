// BackgroundQueue: order, Flush, closing fds, draining at destruction.
#include "runtime/background_queue.h"

#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"

namespace mycel {
namespace {

TEST_CASE("background queue: work runs in order, off the caller's thread") {
  BackgroundQueue queue;
  std::vector<int> ran;  // written by the queue's thread only
  std::thread::id caller = std::this_thread::get_id();
  bool other_thread = true;
  for (int i = 0; i < 100; ++i) {
    queue.Post([&, i] {
      ran.push_back(i);
      other_thread &= std::this_thread::get_id() != caller;
    });
  }
  queue.Flush();
  REQUIRE(ran.size() == 100);
  for (int i = 0; i < 100; ++i) CHECK(ran[i] == i);
  CHECK(other_thread);
}

TEST_CASE("background queue: Post returns while earlier work still runs") {
  BackgroundQueue queue;
  absl::Notification release, second_ran;
  queue.Post([&] { release.WaitForNotification(); });
  queue.Post([&] { second_ran.Notify(); });
  // The first item blocks the queue, yet Post came back; the second waits.
  CHECK(!second_ran.WaitForNotificationWithTimeout(absl::Milliseconds(50)));
  release.Notify();
  queue.Flush();
  CHECK(second_ran.HasBeenNotified());
}

TEST_CASE("background queue: Close closes the fd; invalid fds are ignored") {
  int fds[2];
  REQUIRE(pipe2(fds, O_CLOEXEC) == 0);
  UniqueFd read_end(fds[0]);
  BackgroundQueue queue;
  queue.Close(UniqueFd(fds[1]));
  queue.Close(UniqueFd());
  queue.Flush();
  // The only write end is closed: the reader sees end of file.
  char c;
  CHECK(read(read_end.get(), &c, 1) == 0);
}

TEST_CASE("background queue: destruction runs what is still queued") {
  int count = 0;
  {
    BackgroundQueue queue;
    for (int i = 0; i < 10; ++i) queue.Post([&] { ++count; });
  }
  CHECK(count == 10);
}

TEST_CASE("background queue: low priority is nice 19 for its thread only") {
  int before = getpriority(PRIO_PROCESS, 0);
  int normal = -100, low = -100;
  {
    BackgroundQueue queue;
    queue.Post([&] { normal = getpriority(PRIO_PROCESS, 0); });
  }
  {
    BackgroundQueue queue(BackgroundQueue::Priority::kLow);
    queue.Post([&] { low = getpriority(PRIO_PROCESS, 0); });
  }
  CHECK(normal == before);
  CHECK(low == 19);
  // The caller's thread keeps its own.
  CHECK(getpriority(PRIO_PROCESS, 0) == before);
}

}  // namespace
}  // namespace mycel
