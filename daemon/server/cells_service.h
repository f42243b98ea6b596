// The mycel.v1.Cells and mycel.v1.Executables gRPC services: a thin layer
// over the node's Cells (cells/cells.h) that turns absl::Status into gRPC
// status codes.
//
// Calls that wait (Wait, Stop, Logs with follow, Run) use gRPC's callback
// API: they hold no server thread while they wait, so that they do not
// starve the other calls. Their reactors run their logic on the daemon's
// event loop (see reactor_state.h). Logs streams and Wait calls, which
// the `read` rule admits, are capped (CallSlots): each holds files or
// memory until its client lets it go.
#ifndef MYCEL_DAEMON_SERVER_CELLS_SERVICE_H_
#define MYCEL_DAEMON_SERVER_CELLS_SERVICE_H_

#include <boost/asio/io_context.hpp>

#include "cells/cells.h"
#include "daemon/server/call_slots.h"
#include "mycel/v1/cells.grpc.pb.h"

namespace mycel {

// Thread-safe. `manager` and `io` must outlive the service.
class CellsService final : public mycel::v1::Cells::WithCallbackMethod_Run<
                               mycel::v1::Cells::Service> {
 public:
  // `manager` is an error when cells are unavailable on this node (for
  // example no cgroup hierarchy); every call then answers with it.
  CellsService(absl::StatusOr<cells::Cells*> manager,
               boost::asio::io_context* io)
      : manager_(std::move(manager)), io_(io) {}

  grpc::Status Create(grpc::ServerContext*, const mycel::v1::CreateCellRequest*,
                      mycel::v1::Cell*) override;
  grpc::Status Delete(grpc::ServerContext*, const mycel::v1::DeleteCellRequest*,
                      mycel::v1::DeleteCellResponse*) override;
  grpc::Status Get(grpc::ServerContext*, const mycel::v1::GetCellRequest*,
                   mycel::v1::Cell*) override;
  grpc::Status List(grpc::ServerContext*, const mycel::v1::ListCellsRequest*,
                    mycel::v1::ListCellsResponse*) override;
  grpc::Status Stats(grpc::ServerContext*, const mycel::v1::GetCellRequest*,
                     mycel::v1::CellStats*) override;
  grpc::ServerWriteReactor<mycel::v1::RunEvent>* Run(
      grpc::CallbackServerContext*, const mycel::v1::RunRequest*) override;

 private:
  const absl::StatusOr<cells::Cells*> manager_;
  boost::asio::io_context* const io_;
};

// Thread-safe. `manager`, `io`, `log_streams` and `waits` must outlive the
// service; `log_streams` caps the Logs streams open at once and `waits` the
// Wait calls (both shared by the node's sockets).
class ExecutablesService final
    : public mycel::v1::Executables::WithCallbackMethod_Stop<
          mycel::v1::Executables::WithCallbackMethod_Wait<
              mycel::v1::Executables::WithCallbackMethod_Logs<
                  mycel::v1::Executables::Service>>> {
 public:
  ExecutablesService(absl::StatusOr<cells::Cells*> manager,
                     boost::asio::io_context* io, CallSlots* log_streams,
                     CallSlots* waits)
      : manager_(std::move(manager)),
        io_(io),
        log_streams_(log_streams),
        waits_(waits) {}

  grpc::Status Start(grpc::ServerContext*, const mycel::v1::StartRequest*,
                     mycel::v1::Executable*) override;
  grpc::ServerUnaryReactor* Stop(grpc::CallbackServerContext*,
                                 const mycel::v1::StopRequest*,
                                 mycel::v1::Executable*) override;
  grpc::Status Signal(grpc::ServerContext*, const mycel::v1::SignalRequest*,
                      mycel::v1::Executable*) override;
  grpc::Status Get(grpc::ServerContext*, const mycel::v1::ExecutableRef*,
                   mycel::v1::Executable*) override;
  grpc::Status List(grpc::ServerContext*,
                    const mycel::v1::ListExecutablesRequest*,
                    mycel::v1::ListExecutablesResponse*) override;
  grpc::ServerUnaryReactor* Wait(grpc::CallbackServerContext*,
                                 const mycel::v1::ExecutableRef*,
                                 mycel::v1::Executable*) override;
  grpc::ServerWriteReactor<mycel::v1::LogChunk>* Logs(
      grpc::CallbackServerContext*, const mycel::v1::LogsRequest*) override;

 private:
  const absl::StatusOr<cells::Cells*> manager_;
  boost::asio::io_context* const io_;
  CallSlots* const log_streams_;
  CallSlots* const waits_;
};

}  // namespace mycel

#endif  // MYCEL_DAEMON_SERVER_CELLS_SERVICE_H_
