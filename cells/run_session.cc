#include "cells/run_session.h"

#include <errno.h>

#include <boost/asio/post.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/fd.h"
#include "runtime/log.h"
#include "runtime/random.h"
#include "runtime/status.h"
#include "runtime/syscalls.h"
#include "runtime/unique_fd.h"

namespace mycel::cells {

absl::StatusOr<std::shared_ptr<RunSession>> RunSession::Start(
    Cells* manager, boost::asio::io_context* io,
    const mycel::v1::RunRequest& request, Sink* sink) {
  mycel::v1::CellSpec spec = request.cell();
  if (spec.name().empty()) {
    spec.set_name(
        absl::StrFormat("run-%08x", static_cast<uint32_t>(RandomUint64())));
  }
  RETURN_IF_ERROR(manager->CreateCell(spec, {.ephemeral = true}).status());
  auto remove_cell = [&] {
    absl::Status s = manager->DeleteCell(spec.name(), /*force=*/true);
    if (!s.ok()) {
      log::Warn("run: cannot delete cell",
                {{"cell", spec.name()}, {"error", s}});
    }
  };
  // The command's output is streamed, so it goes to pipes rather than to
  // the log; the daemon keeps only the read ends, non-blocking.
  UniqueFd read_end[2], write_end[2];
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<Pipe> p = MakePipe();
    if (!p.ok()) {
      remove_cell();
      return p.status();
    }
    read_end[i] = std::move(p->read_end);
    write_end[i] = std::move(p->write_end);
    if (absl::Status s = SetNonBlocking(read_end[i].get(), true); !s.ok()) {
      remove_cell();
      return s;
    }
  }
  mycel::v1::ExecutableSpec exe;
  exe.set_cell(spec.name());
  exe.set_name("main");
  *exe.mutable_command() = request.command();
  *exe.mutable_env() = request.env();
  exe.set_cwd(request.cwd());
  if (request.has_uid()) exe.set_uid(request.uid());
  if (request.has_gid()) exe.set_gid(request.gid());
  absl::StatusOr<mycel::v1::Executable> started =
      manager->Start(exe, {write_end[0].get(), write_end[1].get()});
  if (!started.ok()) {
    remove_cell();
    return started.status();
  }
  // Only the command (and what it starts) holds the write ends now, so the
  // pipes close when they are done with them.
  write_end[0].reset();
  write_end[1].reset();
  std::shared_ptr<RunSession> session(
      new RunSession(manager, io, sink, spec.name()));
  for (int i = 0; i < 2; ++i) {
    session->pipes_[i] =
        std::make_unique<boost::asio::posix::stream_descriptor>(
            *io, read_end[i].release());
    session->open_[i] = true;
  }
  boost::asio::post(*io, [weak = std::weak_ptr<RunSession>(session)] {
    if (auto self = weak.lock()) {
      self->ReadFrom(0);
      self->ReadFrom(1);
    }
  });
  return session;
}

RunSession::RunSession(Cells* manager, boost::asio::io_context* io, Sink* sink,
                       std::string cell)
    : manager_(manager), io_(io), sink_(sink), cell_(std::move(cell)) {}

RunSession::~RunSession() {
  if (watching_end_ && end_watch_ != 0) manager_->CancelEndWatch(end_watch_);
  RemoveCell();
}

void RunSession::RemoveCell() {
  if (removed_) return;
  removed_ = true;
  absl::Status s = manager_->DeleteCell(cell_, /*force=*/true);
  if (!s.ok() && !absl::IsNotFound(s)) {
    log::Warn("run: cannot delete cell", {{"cell", cell_}, {"error", s}});
  }
}

void RunSession::ReadFrom(int i) {
  if (cancelled_ || !open_[i]) return;
  pipes_[i]->async_wait(
      boost::asio::posix::stream_descriptor::wait_read,
      [weak = weak_from_this(), i](const boost::system::error_code& ec) {
        auto self = weak.lock();
        if (!self || ec) return;
        self->OnReadable(i);
      });
}

void RunSession::OnReadable(int i) {
  if (cancelled_ || !open_[i]) return;
  if (delivering_ != -1) {
    waiting_[i] = true;
    return;
  }
  mycel::v1::RunEvent event;
  std::string* data = i == 0 ? event.mutable_stdout() : event.mutable_stderr();
  data->resize(kChunkBytes);
  ssize_t n;
  do {
    n = sys::Read(pipes_[i]->native_handle(), data->data(), data->size());
  } while (n < 0 && errno == EINTR);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
    ReadFrom(i);
    return;
  }
  if (n <= 0) {
    if (n < 0) {
      log::Warn("run: cannot read the command's output",
                {{"cell", cell_}, {"error", PosixError("read", errno)}});
    }
    open_[i] = false;
    boost::system::error_code ignored;
    pipes_[i]->close(ignored);
    MaybeFinish();
    return;
  }
  data->resize(static_cast<size_t>(n));
  delivering_ = i;
  sink_->Output(std::move(event));
}

void RunSession::Resume() {
  if (cancelled_) return;
  const int delivered = delivering_;
  delivering_ = -1;
  // Each pipe is always in one of three states: waited on, waiting for its
  // turn (readable while a chunk was out), or being delivered. The one
  // just delivered is waited on again; a waiting one is read now.
  if (delivered >= 0) ReadFrom(delivered);
  for (int j : {0, 1}) {
    if (!waiting_[j]) continue;
    waiting_[j] = false;
    OnReadable(j);
    if (delivering_ != -1) return;
  }
}

void RunSession::MaybeFinish() {
  if (open_[0] || open_[1] || watching_end_ || cancelled_) return;
  watching_end_ = true;
  // The pipes close when the command and everything it started have
  // closed them; its own exit may still be on its way through the reaper.
  end_watch_ = manager_->WatchEnd(
      cell_, "main",
      [weak = weak_from_this(),
       io = io_](absl::StatusOr<mycel::v1::Executable> exe) {
        boost::asio::post(*io, [weak, exe = std::move(exe)] {
          auto self = weak.lock();
          if (!self || self->cancelled_) return;
          self->end_watch_ = 0;
          // As `docker run --rm`: the cell is gone by the time the client
          // learns how the command ended.
          self->RemoveCell();
          if (!exe.ok()) {
            self->sink_->End(exe.status(), std::nullopt);
            return;
          }
          mycel::v1::RunEvent last;
          *last.mutable_exit() = exe->status();
          self->sink_->End(absl::OkStatus(), std::move(last));
        });
      });
}

void RunSession::Cancel() {
  if (cancelled_) return;
  cancelled_ = true;
  for (auto& pipe : pipes_) {
    if (pipe == nullptr) continue;
    boost::system::error_code ignored;
    pipe->close(ignored);
  }
  if (watching_end_ && end_watch_ != 0) {
    manager_->CancelEndWatch(end_watch_);
    end_watch_ = 0;
  }
}

}  // namespace mycel::cells
