// ReactorState: how the daemon's gRPC callback reactors stay safe without
// locks. Everything a reactor does (reacting to a cell's events, writing,
// finishing) runs on the daemon's event loop; gRPC's own callbacks
// (OnCancel, OnWriteDone, OnDone) only post work there. The reactor is
// deleted on the loop too, after gRPC's OnDone, and work posted for it
// after that (an executable that ends after its waiter went away) finds it
// gone and does nothing.
//
// The loop must keep running until the gRPC server has shut down (see
// Daemon::Stop), or calls could not finish.
#ifndef MYCEL_DAEMON_SERVER_REACTOR_STATE_H_
#define MYCEL_DAEMON_SERVER_REACTOR_STATE_H_

#include <grpcpp/support/server_callback.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <functional>
#include <memory>

namespace mycel {

template <typename Reactor>
class ReactorState
    : public std::enable_shared_from_this<ReactorState<Reactor>> {
 public:
  ReactorState(boost::asio::io_context* io, Reactor* reactor)
      : io_(io), reactor_(reactor) {}

  // Runs fn(reactor) on the loop, unless by then the reactor has finished
  // the call or is gone. Callable from any thread.
  void Post(std::function<void(Reactor*)> fn) {
    boost::asio::post(*io_,
                      [self = this->shared_from_this(), fn = std::move(fn)] {
                        if (self->reactor_ != nullptr && !self->finished_)
                          fn(self->reactor_);
                      });
  }

  // On the loop: true the first time, when the caller is to finish the
  // call; false when it was finished already.
  bool TakeFinish() {
    if (finished_) return false;
    finished_ = true;
    return true;
  }

  // From OnDone (any thread): deletes the reactor on the loop.
  void Release() {
    boost::asio::post(*io_, [self = this->shared_from_this()] {
      Reactor* r = self->reactor_;
      self->reactor_ = nullptr;
      delete r;
    });
  }

  boost::asio::io_context* io() const { return io_; }

 private:
  boost::asio::io_context* const io_;
  // Touched on the loop only.
  Reactor* reactor_;
  bool finished_ = false;
};

// A server stream that fails at once with `status` (a call refused before
// anything started).
template <typename Response>
class FailedWriteReactor final : public grpc::ServerWriteReactor<Response> {
 public:
  explicit FailedWriteReactor(const grpc::Status& status) {
    this->Finish(status);
  }
  void OnDone() override { delete this; }
};

}  // namespace mycel

#endif  // MYCEL_DAEMON_SERVER_REACTOR_STATE_H_
