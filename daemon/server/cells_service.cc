#include "daemon/server/cells_service.h"

#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cells/log_stream.h"
#include "cells/run_session.h"
#include "cells/spec_validation.h"
#include "daemon/server/reactor_state.h"
#include "daemon/server/status_convert.h"
#include "proto/proto_time.h"
#include "runtime/log.h"
#include "runtime/status.h"
#include "runtime/unique_fd.h"

namespace mycel {
namespace {

template <typename T>
grpc::Status Reply(absl::StatusOr<T> result, T* out) {
  if (!result.ok()) return ToGrpc(result.status());
  *out = *std::move(result);
  return grpc::Status::OK;
}

}  // namespace

grpc::Status CellsService::Create(grpc::ServerContext*,
                                  const mycel::v1::CreateCellRequest* req,
                                  mycel::v1::Cell* resp) {
  if (!manager_.ok()) return ToGrpc(manager_.status());
  return Reply((*manager_)->CreateCell(req->spec()), resp);
}

grpc::Status CellsService::Delete(grpc::ServerContext*,
                                  const mycel::v1::DeleteCellRequest* req,
                                  mycel::v1::DeleteCellResponse*) {
  if (!manager_.ok()) return ToGrpc(manager_.status());
  return ToGrpc((*manager_)->DeleteCell(req->name(), req->force()));
}

grpc::Status CellsService::Get(grpc::ServerContext*,
                               const mycel::v1::GetCellRequest* req,
                               mycel::v1::Cell* resp) {
  if (!manager_.ok()) return ToGrpc(manager_.status());
  return Reply((*manager_)->GetCell(req->name()), resp);
}

grpc::Status CellsService::List(grpc::ServerContext*,
                                const mycel::v1::ListCellsRequest*,
                                mycel::v1::ListCellsResponse* resp) {
  if (!manager_.ok()) return ToGrpc(manager_.status());
  for (auto& c : (*manager_)->ListCells()) *resp->add_cells() = std::move(c);
  return grpc::Status::OK;
}

grpc::Status CellsService::Stats(grpc::ServerContext*,
                                 const mycel::v1::GetCellRequest* req,
                                 mycel::v1::CellStats* resp) {
  if (!manager_.ok()) return ToGrpc(manager_.status());
  return Reply((*manager_)->Stats(req->name()), resp);
}

namespace {

// A unary call that ends when an executable does (Wait, Stop).
class EndReactor final : public grpc::ServerUnaryReactor {
 public:
  EndReactor(boost::asio::io_context* io, mycel::v1::Executable* response,
             std::optional<CallSlots::Slot> slot = std::nullopt)
      : state_(std::make_shared<ReactorState<EndReactor>>(io, this)),
        response_(response) {
    state_->Hold(std::move(slot));
  }

  // What the manager calls when the executable has ended (on any thread,
  // with its lock held): hand it to the loop.
  cells::Cells::EndCallback OnEnd() {
    return [state = state_](absl::StatusOr<mycel::v1::Executable> exe) {
      state->Post([exe = std::move(exe)](EndReactor* r) mutable {
        r->End(std::move(exe));
      });
    };
  }

  // For a cancelled call, the manager forgets the watch.
  void SetWatch(cells::Cells* manager, cells::Cells::EndWatch id) {
    state_->Post([manager, id](EndReactor* r) {
      r->manager_ = manager;
      r->watch_ = id;
    });
  }

  void FinishNow(const grpc::Status& status) {
    state_->Post([status](EndReactor* r) {
      if (r->state_->TakeFinish()) r->Finish(status);
    });
  }

  void OnCancel() override {
    state_->Post([](EndReactor* r) {
      if (r->manager_ != nullptr && r->watch_ != 0) {
        r->manager_->CancelEndWatch(r->watch_);
      }
      if (r->state_->TakeFinish()) {
        r->Finish(grpc::Status(grpc::StatusCode::CANCELLED,
                               "the client cancelled the call"));
      }
    });
  }
  void OnDone() override { state_->Release(); }

 private:
  void End(absl::StatusOr<mycel::v1::Executable> exe) {
    if (!state_->TakeFinish()) return;
    if (!exe.ok()) {
      Finish(ToGrpc(exe.status()));
      return;
    }
    *response_ = *std::move(exe);
    Finish(grpc::Status::OK);
  }

  std::shared_ptr<ReactorState<EndReactor>> state_;
  mycel::v1::Executable* const response_;
  cells::Cells* manager_ = nullptr;
  cells::Cells::EndWatch watch_ = 0;
};

using RunReactor = SessionReactor<cells::RunSession, cells::Cells,
                                  mycel::v1::RunRequest, mycel::v1::RunEvent>;
using LogsReactor = SessionReactor<cells::LogStream, cells::Cells,
                                   mycel::v1::LogsRequest, mycel::v1::LogChunk>;

}  // namespace

grpc::ServerWriteReactor<mycel::v1::RunEvent>* CellsService::Run(
    grpc::CallbackServerContext*, const mycel::v1::RunRequest* req) {
  if (!manager_.ok()) {
    return new FailedWriteReactor<mycel::v1::RunEvent>(
        ToGrpc(manager_.status()));
  }
  return new RunReactor(*manager_, io_, *req);
}

grpc::Status ExecutablesService::Start(grpc::ServerContext*,
                                       const mycel::v1::StartRequest* req,
                                       mycel::v1::Executable* resp) {
  if (!manager_.ok()) return ToGrpc(manager_.status());
  return Reply((*manager_)->Start(req->spec()), resp);
}

grpc::ServerUnaryReactor* ExecutablesService::Stop(
    grpc::CallbackServerContext*, const mycel::v1::StopRequest* req,
    mycel::v1::Executable* resp) {
  auto* r = new EndReactor(io_, resp);
  if (!manager_.ok()) {
    r->FinishNow(ToGrpc(manager_.status()));
    return r;
  }
  std::optional<absl::Duration> grace;
  if (req->has_grace()) {
    if (absl::Status s = cells::ValidateDuration("grace", req->grace());
        !s.ok()) {
      r->FinishNow(ToGrpc(s));
      return r;
    }
    grace = FromProto(req->grace());
  }
  (*manager_)->Stop(req->cell(), req->name(), grace, r->OnEnd());
  return r;
}

grpc::Status ExecutablesService::Signal(grpc::ServerContext*,
                                        const mycel::v1::SignalRequest* req,
                                        mycel::v1::Executable* resp) {
  if (!manager_.ok()) return ToGrpc(manager_.status());
  return Reply((*manager_)->Signal(req->cell(), req->name(), req->signal()),
               resp);
}

grpc::Status ExecutablesService::Get(grpc::ServerContext*,
                                     const mycel::v1::ExecutableRef* req,
                                     mycel::v1::Executable* resp) {
  if (!manager_.ok()) return ToGrpc(manager_.status());
  return Reply((*manager_)->Get(req->cell(), req->name()), resp);
}

grpc::Status ExecutablesService::List(
    grpc::ServerContext*, const mycel::v1::ListExecutablesRequest* req,
    mycel::v1::ListExecutablesResponse* resp) {
  if (!manager_.ok()) return ToGrpc(manager_.status());
  absl::StatusOr<std::vector<mycel::v1::Executable>> list =
      (*manager_)->List(req->cell());
  if (!list.ok()) return ToGrpc(list.status());
  for (auto& e : *list) *resp->add_executables() = std::move(e);
  return grpc::Status::OK;
}

grpc::ServerUnaryReactor* ExecutablesService::Wait(
    grpc::CallbackServerContext* ctx, const mycel::v1::ExecutableRef* req,
    mycel::v1::Executable* resp) {
  absl::StatusOr<CallSlots::Slot> slot =
      waits_->Take("wait", CallSlots::CallerOf(ctx));
  if (!slot.ok()) {
    auto* r = new EndReactor(io_, resp);
    r->FinishNow(ToGrpc(slot.status()));
    return r;
  }
  auto* r = new EndReactor(io_, resp, *std::move(slot));
  if (!manager_.ok()) {
    r->FinishNow(ToGrpc(manager_.status()));
    return r;
  }
  cells::Cells::EndWatch id =
      (*manager_)->WatchEnd(req->cell(), req->name(), r->OnEnd());
  if (id != 0) r->SetWatch(*manager_, id);
  return r;
}

grpc::ServerWriteReactor<mycel::v1::LogChunk>* ExecutablesService::Logs(
    grpc::CallbackServerContext* ctx, const mycel::v1::LogsRequest* req) {
  if (!manager_.ok()) {
    return new FailedWriteReactor<mycel::v1::LogChunk>(
        ToGrpc(manager_.status()));
  }
  absl::StatusOr<CallSlots::Slot> slot =
      log_streams_->Take("logs", CallSlots::CallerOf(ctx));
  if (!slot.ok()) {
    return new FailedWriteReactor<mycel::v1::LogChunk>(ToGrpc(slot.status()));
  }
  return new LogsReactor(*manager_, io_, *req, *std::move(slot));
}

}  // namespace mycel
