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
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "cells/stream_sink.h"
#include "daemon/server/call_slots.h"
#include "daemon/server/status_convert.h"

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
  // call; false when it was finished already. The call's slot goes then,
  // before its client can hear the end and call again.
  bool TakeFinish() {
    if (finished_) return false;
    finished_ = true;
    slot_.reset();
    return true;
  }

  // In the reactor's constructor: the call's place among those of its kind
  // (CallSlots), held until the call is finished.
  void Hold(std::optional<CallSlots::Slot> slot) { slot_ = std::move(slot); }

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
  std::optional<CallSlots::Slot> slot_;
};

// A server stream fed by a cells/ session (RunSession, LogStream): the
// session's StreamSink on one side, gRPC's write reactor on the other,
// with one message in flight at a time. `Session` has
//   static absl::StatusOr<std::shared_ptr<Session>> Start(
//       Manager*, boost::asio::io_context*, const Request&, Sink*);
//   void Resume();  void Cancel();
// and is touched, and destroyed, on the loop only. `slot`, when given, is
// the call's place among those of its kind (CallSlots), held until the
// call is finished.
template <typename Session, typename Manager, typename Request,
          typename Response>
class SessionReactor final : public grpc::ServerWriteReactor<Response>,
                             public cells::StreamSink<Response> {
 public:
  SessionReactor(Manager* manager, boost::asio::io_context* io,
                 const Request& request,
                 std::optional<CallSlots::Slot> slot = std::nullopt)
      : state_(std::make_shared<ReactorState<SessionReactor>>(io, this)) {
    state_->Hold(std::move(slot));
    absl::StatusOr<std::shared_ptr<Session>> session =
        Session::Start(manager, io, request, this);
    if (!session.ok()) {
      const grpc::Status status = ToGrpc(session.status());
      state_->Post([status](SessionReactor* r) {
        if (r->state_->TakeFinish()) r->Finish(status);
      });
      return;
    }
    state_->Post([session = *std::move(session)](SessionReactor* r) {
      r->session_ = session;
    });
  }

  // cells::StreamSink, on the loop.
  void Output(Response message) override {
    message_ = std::move(message);
    this->StartWrite(&message_);
  }
  void End(absl::Status status, std::optional<Response> last) override {
    if (!state_->TakeFinish()) return;
    if (!status.ok()) {
      this->Finish(ToGrpc(status));
    } else if (last.has_value()) {
      message_ = *std::move(last);
      // Sent together with the status, in one write instead of two.
      this->StartWriteAndFinish(&message_, grpc::WriteOptions(),
                                grpc::Status::OK);
    } else {
      this->Finish(grpc::Status::OK);
    }
  }

  void OnWriteDone(bool ok) override {
    state_->Post([ok](SessionReactor* r) {
      if (!ok) {
        r->Abandon("the client stopped reading");
      } else if (r->session_ != nullptr) {
        r->session_->Resume();
      }
    });
  }
  void OnCancel() override {
    state_->Post([](SessionReactor* r) { r->Abandon("the client went away"); });
  }
  // The session goes with the reactor, on the loop.
  void OnDone() override { state_->Release(); }

 private:
  void Abandon(absl::string_view why) {
    if (session_ != nullptr) session_->Cancel();
    if (state_->TakeFinish()) {
      this->Finish(grpc::Status(grpc::StatusCode::CANCELLED, std::string(why)));
    }
  }

  std::shared_ptr<ReactorState<SessionReactor>> state_;
  std::shared_ptr<Session> session_;
  Response message_;
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
