// The clocks: the manual one runs timers in deadline order on Advance;
// the Asio one runs them on the event loop after their delay.
#include <doctest/doctest.h>

#include <boost/asio/io_context.hpp>
#include <string>
#include <vector>

#include "runtime/asio_clock.h"
#include "runtime/manual_clock.h"

namespace mycel {
namespace {

TEST_CASE("a manual clock runs timers in deadline order, at their deadline") {
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  ManualClock clock(t0);
  std::vector<std::string> ran;
  clock.RunAfter(absl::Seconds(3), [&] {
    ran.push_back("c");
    CHECK(clock.Now() == t0 + absl::Seconds(3));
  });
  clock.RunAfter(absl::Seconds(1), [&] {
    ran.push_back("a");
    CHECK(clock.Now() == t0 + absl::Seconds(1));
    // A timer set by a timer runs within the same Advance when it is due.
    clock.RunAfter(absl::Seconds(1), [&] { ran.push_back("b"); });
  });
  clock.RunAfter(absl::Seconds(3), [&] { ran.push_back("c2"); });  // ties: FIFO
  clock.RunAfter(-absl::Seconds(5), [&] { ran.push_back("now"); });
  CHECK(clock.pending() == 4);
  CHECK(clock.next_deadline() == t0);
  clock.Advance(absl::Milliseconds(500));
  CHECK(ran == std::vector<std::string>{"now"});
  CHECK(clock.Now() == t0 + absl::Milliseconds(500));
  clock.Advance(absl::Seconds(10));
  CHECK(ran == std::vector<std::string>{"now", "a", "b", "c", "c2"});
  CHECK(clock.Now() == t0 + absl::Milliseconds(10500));
  CHECK(clock.pending() == 0);
  CHECK(clock.next_deadline() == absl::InfiniteFuture());
}

TEST_CASE("an Asio clock fires its timers on the loop, not before") {
  boost::asio::io_context io;
  AsioClock clock(&io);
  std::vector<int> ran;
  const absl::Time start = clock.Now();
  clock.RunAfter(absl::Milliseconds(30), [&] { ran.push_back(2); });
  clock.RunAfter(absl::ZeroDuration(), [&] { ran.push_back(1); });
  CHECK(ran.empty());  // nothing runs outside the loop
  io.run();
  CHECK(ran == std::vector<int>{1, 2});
  CHECK(clock.Now() - start >= absl::Milliseconds(30));
}

}  // namespace
}  // namespace mycel
