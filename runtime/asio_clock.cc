#include "runtime/asio_clock.h"

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <memory>

namespace mycel {

void AsioClock::RunAfter(absl::Duration delay, std::function<void()> fn) {
  if (delay < absl::ZeroDuration()) delay = absl::ZeroDuration();
  // The timer is made on the loop's thread: Boost.Asio's objects are not
  // for concurrent use, and this is called from any thread.
  boost::asio::post(*io_, [io = io_, delay, fn = std::move(fn)]() mutable {
    auto timer = std::make_shared<boost::asio::steady_timer>(
        *io, absl::ToChronoNanoseconds(delay));
    timer->async_wait(
        [timer, fn = std::move(fn)](const boost::system::error_code& ec) {
          if (!ec) fn();
        });
  });
}

}  // namespace mycel
