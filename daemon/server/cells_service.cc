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
#include "cells/log_file_compat.h"
#include "cells/spec_validation.h"
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

std::string RandomSuffix() {
  uint32_t r = 0;
  if (getrandom(&r, sizeof(r), 0) != sizeof(r))
    r = static_cast<uint32_t>(getpid());
  return absl::StrFormat("%08x", r);
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

grpc::Status CellsService::Run(
    grpc::ServerContext* ctx, const mycel::v1::RunRequest* req,
    grpc::ServerWriter<mycel::v1::RunEvent>* writer) {
  if (!manager_.ok()) return ToGrpc(manager_.status());
  mycel::v1::CellSpec spec = req->cell();
  if (spec.name().empty()) spec.set_name("run-" + RandomSuffix());
  absl::StatusOr<mycel::v1::Cell> cell =
      (*manager_)->CreateCell(spec, {.ephemeral = true});
  if (!cell.ok()) return ToGrpc(cell.status());
  const std::string& name = spec.name();
  auto cleanup = [&] {
    absl::Status s = (*manager_)->DeleteCell(name, /*force=*/true);
    if (!s.ok())
      log::Warn("run: cannot delete cell", {{"cell", name}, {"error", s}});
  };

  // The command's output is streamed, so it goes to pipes rather than to
  // the log file; the daemon keeps only the read ends.
  int out_pipe[2], err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0) {
    cleanup();
    return ToGrpc(PosixError("pipe2", errno));
  }
  UniqueFd out_r(out_pipe[0]), out_w(out_pipe[1]);
  UniqueFd err_r(err_pipe[0]), err_w(err_pipe[1]);
  mycel::v1::ExecutableSpec exe;
  exe.set_cell(name);
  exe.set_name("main");
  *exe.mutable_command() = req->command();
  *exe.mutable_env() = req->env();
  exe.set_cwd(req->cwd());
  if (req->has_uid()) exe.set_uid(req->uid());
  if (req->has_gid()) exe.set_gid(req->gid());
  absl::StatusOr<mycel::v1::Executable> started =
      (*manager_)->Start(exe, {out_w.get(), err_w.get()});
  out_w.reset();
  err_w.reset();
  if (!started.ok()) {
    cleanup();
    return ToGrpc(started.status());
  }

  pollfd fds[2] = {{out_r.get(), POLLIN, 0}, {err_r.get(), POLLIN, 0}};
  int open_fds = 2;
  char buf[65536];
  bool client_gone = false;
  while (open_fds > 0) {
    int n = poll(fds, 2, 200);
    if (n < 0 && errno != EINTR) break;
    if (ctx->IsCancelled()) {
      client_gone = true;
      break;
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 ||
          (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) {
        continue;
      }
      ssize_t r = read(fds[i].fd, buf, sizeof(buf));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) {
        fds[i].fd = -1;
        --open_fds;
        continue;
      }
      mycel::v1::RunEvent ev;
      if (i == 0) {
        ev.set_stdout(buf, r);
      } else {
        ev.set_stderr(buf, r);
      }
      if (!writer->Write(ev)) client_gone = true;
    }
    if (client_gone) break;
  }
  if (client_gone) {
    cleanup();
    return grpc::Status(grpc::StatusCode::CANCELLED, "client went away");
  }
  // The pipes close when the command and everything it started have closed
  // them; its own exit may still be on its way through the reaper.
  absl::StatusOr<mycel::v1::Executable> done =
      (*manager_)->Wait(name, "main", [ctx] { return ctx->IsCancelled(); });
  cleanup();
  if (!done.ok()) return ToGrpc(done.status());
  mycel::v1::RunEvent last;
  *last.mutable_exit() = done->status();
  // Sent together with the status, in one write instead of two.
  writer->WriteLast(last, grpc::WriteOptions());
  return grpc::Status::OK;
}

grpc::Status ExecutablesService::Start(grpc::ServerContext*,
                                       const mycel::v1::StartRequest* req,
                                       mycel::v1::Executable* resp) {
  if (!manager_.ok()) return ToGrpc(manager_.status());
  return Reply((*manager_)->Start(req->spec()), resp);
}

grpc::Status ExecutablesService::Stop(grpc::ServerContext*,
                                      const mycel::v1::StopRequest* req,
                                      mycel::v1::Executable* resp) {
  if (!manager_.ok()) return ToGrpc(manager_.status());
  std::optional<absl::Duration> grace;
  if (req->has_grace()) {
    if (absl::Status s = cells::ValidateDuration("grace", req->grace());
        !s.ok()) {
      return ToGrpc(s);
    }
    grace = FromProto(req->grace());
  }
  return Reply((*manager_)->Stop(req->cell(), req->name(), grace), resp);
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

grpc::Status ExecutablesService::Wait(grpc::ServerContext* ctx,
                                      const mycel::v1::ExecutableRef* req,
                                      mycel::v1::Executable* resp) {
  if (!manager_.ok()) return ToGrpc(manager_.status());
  return Reply((*manager_)->Wait(req->cell(), req->name(),
                                 [ctx] { return ctx->IsCancelled(); }),
               resp);
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
