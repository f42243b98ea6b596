#include "cells/log_stream.h"

#include <boost/asio/post.hpp>

#include "absl/strings/str_cat.h"
#include "runtime/status.h"

namespace mycel::cells {
namespace {

bool IsFinal(const mycel::v1::Executable& exe) {
  return exe.status().state() == mycel::v1::EXECUTABLE_STATE_EXITED ||
         exe.status().state() == mycel::v1::EXECUTABLE_STATE_FAILED;
}

}  // namespace

absl::StatusOr<std::shared_ptr<LogStream>> LogStream::Start(
    Cells* manager, boost::asio::io_context* io,
    const mycel::v1::LogsRequest& request, Sink* sink) {
  if (request.tail_lines() < 0) {
    return absl::InvalidArgumentError("tail_lines: must not be negative");
  }
  ASSIGN_OR_RETURN(mycel::v1::Executable exe,
                   manager->Get(request.cell(), request.name()));
  // What the executable wrote so far may still sit in its pipe.
  RETURN_IF_ERROR(manager->FlushLog(request.cell(), request.name()));
  ASSIGN_OR_RETURN(
      LogReader reader,
      LogReader::Open(manager->LogPath(request.cell(), request.name()),
                      request.tail_lines()));
  std::shared_ptr<LogStream> stream(
      new LogStream(manager, io, sink, request, std::move(reader)));
  // Not following, or following one that has ended: what is there is all.
  stream->draining_ = !request.follow() || IsFinal(exe);
  boost::asio::post(*io, [weak = std::weak_ptr<LogStream>(stream)] {
    if (auto self = weak.lock()) self->Pump();
  });
  return stream;
}

LogStream::LogStream(Cells* manager, boost::asio::io_context* io, Sink* sink,
                     mycel::v1::LogsRequest request, LogReader reader)
    : manager_(manager),
      sink_(sink),
      request_(std::move(request)),
      reader_(std::move(reader)),
      timer_(*io) {}

void LogStream::Resume() { Pump(); }

void LogStream::Cancel() {
  cancelled_ = true;
  timer_.cancel();
}

bool LogStream::Ended() {
  absl::StatusOr<mycel::v1::Executable> exe =
      manager_->Get(request_.cell(), request_.name());
  return !exe.ok() || IsFinal(*exe);
}

void LogStream::Pump() {
  if (cancelled_) return;
  mycel::v1::LogChunk chunk;
  if (reader_.lost_bytes() > lost_reported_) {
    // The follower fell more than a rotation behind: say what it missed
    // rather than splice two parts of the output together silently.
    chunk.set_data(
        absl::StrCat("[mycel: ", reader_.lost_bytes() - lost_reported_,
                     " bytes of output were rotated away before "
                     "they could be sent]\n"));
    lost_reported_ = reader_.lost_bytes();
    sink_->Output(std::move(chunk));
    return;
  }
  std::string* data = chunk.mutable_data();
  data->resize(kChunkBytes);
  absl::StatusOr<size_t> n = reader_.Read(data->data(), data->size());
  if (!n.ok()) {
    sink_->End(n.status(), std::nullopt);
    return;
  }
  if (*n > 0) {
    data->resize(*n);
    sink_->Output(std::move(chunk));
    return;
  }
  if (draining_) {
    sink_->End(absl::OkStatus(), std::nullopt);
    return;
  }
  if (Ended()) {
    // Its last output may still be in the pipe: flush it, then send what
    // is left and end.
    absl::Status flushed = manager_->FlushLog(request_.cell(), request_.name());
    if (!flushed.ok()) {
      sink_->End(flushed, std::nullopt);
      return;
    }
    draining_ = true;
    Pump();
    return;
  }
  timer_.expires_after(absl::ToChronoNanoseconds(kPollInterval));
  timer_.async_wait(
      [weak = weak_from_this()](const boost::system::error_code& ec) {
        auto self = weak.lock();
        if (self && !ec) self->Pump();
      });
}

}  // namespace mycel::cells
