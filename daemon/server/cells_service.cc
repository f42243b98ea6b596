#include "daemon/server/cells_service.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cells/log_file.h"
#include "cells/log_file_compat.h"
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
  EndReactor(boost::asio::io_context* io, mycel::v1::Executable* response)
      : state_(std::make_shared<ReactorState<EndReactor>>(io, this)),
        response_(response) {}

  // What the manager calls when the executable has ended (on any thread,
  // with its lock held): hand it to the loop.
  cells::CellManager::EndCallback OnEnd() {
    return [state = state_](absl::StatusOr<mycel::v1::Executable> exe) {
      state->Post([exe = std::move(exe)](EndReactor* r) mutable {
        r->End(std::move(exe));
      });
    };
  }

  // For a cancelled call, the manager forgets the watch.
  void SetWatch(cells::CellManager* manager, cells::CellManager::EndWatch id) {
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
  cells::CellManager* manager_ = nullptr;
  cells::CellManager::EndWatch watch_ = 0;
};

// Cells.Run: adapts a RunSession (cells/run_session.h) to a server stream.
class RunReactor final : public grpc::ServerWriteReactor<mycel::v1::RunEvent>,
                         public cells::RunSession::Sink {
 public:
  RunReactor(cells::CellManager* manager, boost::asio::io_context* io,
             const mycel::v1::RunRequest& request)
      : state_(std::make_shared<ReactorState<RunReactor>>(io, this)) {
    absl::StatusOr<std::shared_ptr<cells::RunSession>> session =
        cells::RunSession::Start(manager, io, request, this);
    if (!session.ok()) {
      const grpc::Status status = ToGrpc(session.status());
      state_->Post([status](RunReactor* r) {
        if (r->state_->TakeFinish()) r->Finish(status);
      });
      return;
    }
    // The session is touched on the loop only; it starts reading there.
    state_->Post([session = *std::move(session)](RunReactor* r) {
      r->session_ = session;
    });
  }

  // RunSession::Sink, on the loop.
  void Output(mycel::v1::RunEvent event) override {
    event_ = std::move(event);
    StartWrite(&event_);
  }
  void End(absl::StatusOr<mycel::v1::RunEvent> last) override {
    if (!state_->TakeFinish()) return;
    if (!last.ok()) {
      Finish(ToGrpc(last.status()));
      return;
    }
    event_ = *std::move(last);
    // Sent together with the status, in one write instead of two.
    StartWriteAndFinish(&event_, grpc::WriteOptions(), grpc::Status::OK);
  }

  void OnWriteDone(bool ok) override {
    state_->Post([ok](RunReactor* r) {
      if (ok) {
        if (r->session_ != nullptr) r->session_->Resume();
        return;
      }
      r->Abandon("the client stopped reading");
    });
  }
  void OnCancel() override {
    state_->Post([](RunReactor* r) { r->Abandon("the client went away"); });
  }
  void OnDone() override {
    // The session (and with it the cell) goes on the loop, with the
    // reactor: ReactorState::Release deletes it there.
    state_->Release();
  }

 private:
  void Abandon(absl::string_view why) {
    if (session_ != nullptr) session_->Cancel();
    if (state_->TakeFinish()) {
      Finish(grpc::Status(grpc::StatusCode::CANCELLED, std::string(why)));
    }
  }

  std::shared_ptr<ReactorState<RunReactor>> state_;
  std::shared_ptr<cells::RunSession> session_;
  mycel::v1::RunEvent event_;
};

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
    grpc::CallbackServerContext*, const mycel::v1::ExecutableRef* req,
    mycel::v1::Executable* resp) {
  auto* r = new EndReactor(io_, resp);
  if (!manager_.ok()) {
    r->FinishNow(ToGrpc(manager_.status()));
    return r;
  }
  cells::CellManager::EndWatch id =
      (*manager_)->WatchEnd(req->cell(), req->name(), r->OnEnd());
  if (id != 0) r->SetWatch(*manager_, id);
  return r;
}

grpc::Status ExecutablesService::Logs(
    grpc::ServerContext* ctx, const mycel::v1::LogsRequest* req,
    grpc::ServerWriter<mycel::v1::LogChunk>* writer) {
  if (!manager_.ok()) return ToGrpc(manager_.status());
  if (req->tail_lines() < 0) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "tail_lines: must not be negative");
  }
  absl::StatusOr<mycel::v1::Executable> exe =
      (*manager_)->Get(req->cell(), req->name());
  if (!exe.ok()) return ToGrpc(exe.status());
  std::string path = (*manager_)->LogPath(req->cell(), req->name());
  absl::StatusOr<std::string> head =
      cells::compat::ReadTail(path, req->tail_lines());
  if (!head.ok()) return ToGrpc(head.status());
  if (!head->empty()) {
    mycel::v1::LogChunk chunk;
    chunk.set_data(*head);
    if (!writer->Write(chunk)) return grpc::Status::OK;
  }
  if (!req->follow()) return grpc::Status::OK;
  // Follow: poll the file for growth until the executable has ended for
  // good and everything it wrote was sent. A rotation shrinks the file;
  // start over from its beginning then.
  struct stat st;
  off_t offset = stat(path.c_str(), &st) == 0 ? st.st_size : 0;
  char buf[65536];
  for (;;) {
    if (ctx->IsCancelled()) return grpc::Status::OK;
    exe = (*manager_)->Get(req->cell(), req->name());
    bool ended = !exe.ok() ||
                 exe->status().state() == mycel::v1::EXECUTABLE_STATE_EXITED ||
                 exe->status().state() == mycel::v1::EXECUTABLE_STATE_FAILED;
    UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (fd && fstat(fd.get(), &st) == 0) {
      if (st.st_size < offset) offset = 0;
      while (offset < st.st_size) {
        ssize_t n = pread(fd.get(), buf, sizeof(buf), offset);
        if (n <= 0) break;
        offset += n;
        mycel::v1::LogChunk chunk;
        chunk.set_data(buf, n);
        if (!writer->Write(chunk)) return grpc::Status::OK;
      }
    }
    if (ended) return grpc::Status::OK;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

}  // namespace mycel
