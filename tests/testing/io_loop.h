// IoLoop: a Boost.Asio io_context run by a few threads, with a clock whose
// timers run on it: the event loop of the in-process nodes of tests and
// benchmarks (the daemon runs its own on its main thread).
#ifndef MYCEL_TESTS_TESTING_IO_LOOP_H_
#define MYCEL_TESTS_TESTING_IO_LOOP_H_

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <thread>
#include <vector>

#include "runtime/asio_clock.h"

namespace mycel::testing {

class IoLoop {
 public:
  explicit IoLoop(int threads = 2) : guard_(boost::asio::make_work_guard(io)) {
    for (int i = 0; i < threads; ++i) {
      threads_.emplace_back([this] { io.run(); });
    }
  }
  // Stops the loop (handlers not yet run are dropped) and joins.
  ~IoLoop() {
    guard_.reset();
    io.stop();
    for (std::thread& t : threads_) t.join();
  }
  IoLoop(const IoLoop&) = delete;
  IoLoop& operator=(const IoLoop&) = delete;

  boost::asio::io_context io;
  AsioClock clock{&io};

 private:
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type>
      guard_;
  std::vector<std::thread> threads_;
};

}  // namespace mycel::testing

#endif  // MYCEL_TESTS_TESTING_IO_LOOP_H_
