// The mycel.v1.Cells and mycel.v1.Executables gRPC services: a thin layer
// over CellManager that turns absl::Status into gRPC status codes.
#ifndef MYCEL_DAEMON_SERVER_CELLS_SERVICE_H_
#define MYCEL_DAEMON_SERVER_CELLS_SERVICE_H_

#include "cells/cell_manager.h"
#include "mycel/v1/cells.grpc.pb.h"

namespace mycel {

// Thread-safe. `manager` must outlive the service.
class CellsService final : public mycel::v1::Cells::Service {
 public:
  // `manager` is an error when cells are unavailable on this node (for
  // example no cgroup hierarchy); every call then answers with it.
  explicit CellsService(absl::StatusOr<cells::CellManager*> manager)
      : manager_(std::move(manager)) {}

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
  grpc::Status Run(grpc::ServerContext*, const mycel::v1::RunRequest*,
                   grpc::ServerWriter<mycel::v1::RunEvent>*) override;

 private:
  const absl::StatusOr<cells::CellManager*> manager_;
};

// Thread-safe. `manager` must outlive the service.
class ExecutablesService final : public mycel::v1::Executables::Service {
 public:
  explicit ExecutablesService(absl::StatusOr<cells::CellManager*> manager)
      : manager_(std::move(manager)) {}

  grpc::Status Start(grpc::ServerContext*, const mycel::v1::StartRequest*,
                     mycel::v1::Executable*) override;
  grpc::Status Stop(grpc::ServerContext*, const mycel::v1::StopRequest*,
                    mycel::v1::Executable*) override;
  grpc::Status Signal(grpc::ServerContext*, const mycel::v1::SignalRequest*,
                      mycel::v1::Executable*) override;
  grpc::Status Get(grpc::ServerContext*, const mycel::v1::ExecutableRef*,
                   mycel::v1::Executable*) override;
  grpc::Status List(grpc::ServerContext*,
                    const mycel::v1::ListExecutablesRequest*,
                    mycel::v1::ListExecutablesResponse*) override;
  grpc::Status Wait(grpc::ServerContext*, const mycel::v1::ExecutableRef*,
                    mycel::v1::Executable*) override;
  grpc::Status Logs(grpc::ServerContext*, const mycel::v1::LogsRequest*,
                    grpc::ServerWriter<mycel::v1::LogChunk>*) override;

 private:
  const absl::StatusOr<cells::CellManager*> manager_;
};

}  // namespace mycel

#endif  // MYCEL_DAEMON_SERVER_CELLS_SERVICE_H_
