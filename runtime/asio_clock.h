// AsioClock: the wall clock, with timers on a Boost.Asio io_context.
#ifndef MYCEL_RUNTIME_ASIO_CLOCK_H_
#define MYCEL_RUNTIME_ASIO_CLOCK_H_

#include <boost/asio/io_context.hpp>

#include "runtime/clock.h"

namespace mycel {

// Thread-safe. The io_context must outlive the clock; timers fire while a
// thread runs it, and are dropped (not run) if it stops first.
class AsioClock final : public Clock {
 public:
  explicit AsioClock(boost::asio::io_context* io) : io_(io) {}
  AsioClock(const AsioClock&) = delete;
  AsioClock& operator=(const AsioClock&) = delete;

  absl::Time Now() const override { return absl::Now(); }
  void RunAfter(absl::Duration delay, std::function<void()> fn) override;

 private:
  boost::asio::io_context* const io_;
};

}  // namespace mycel

#endif  // MYCEL_RUNTIME_ASIO_CLOCK_H_
