// LogStream: one Executables.Logs call: an executable's log read in chunks
// through a LogReader (bounded memory, whatever the log's size), and, when
// following, what it writes afterwards until it has ended for good and all
// of it was sent.
//
// Threading: Start runs on any thread; the sink is called, and Resume and
// Cancel must be called, on the io_context's thread, where the stream must
// also be destroyed. The manager and the io_context must outlive it.
#ifndef MYCEL_CELLS_LOG_STREAM_H_
#define MYCEL_CELLS_LOG_STREAM_H_

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "cells/cells.h"
#include "cells/log_reader.h"
#include "cells/stream_sink.h"
#include "mycel/v1/cells.pb.h"

namespace mycel::cells {

class LogStream : public std::enable_shared_from_this<LogStream> {
 public:
  // Receives the log in chunks, then End(OK) once everything was sent.
  using Sink = StreamSink<mycel::v1::LogChunk>;

  // Largest chunk in one Output call (well below gRPC's 4 MiB message
  // limit).
  static constexpr size_t kChunkBytes = 64 * 1024;
  // How often a follower looks for new output.
  static constexpr absl::Duration kPollInterval = absl::Milliseconds(100);

  // NOT_FOUND for an unknown executable, INVALID_ARGUMENT for a negative
  // tail_lines.
  static absl::StatusOr<std::shared_ptr<LogStream>> Start(
      Cells* manager, boost::asio::io_context* io,
      const mycel::v1::LogsRequest& request, Sink* sink);

  LogStream(const LogStream&) = delete;
  LogStream& operator=(const LogStream&) = delete;

  void Resume();
  void Cancel();

 private:
  LogStream(Cells* manager, boost::asio::io_context* io, Sink* sink,
            mycel::v1::LogsRequest request, LogReader reader);

  // Sends the next chunk, or, caught up, ends or waits for more.
  void Pump();
  bool Ended();

  Cells* const manager_;
  Sink* const sink_;
  const mycel::v1::LogsRequest request_;
  LogReader reader_;
  boost::asio::steady_timer timer_;
  uint64_t lost_reported_ = 0;
  // The executable had ended for good and its last output was flushed:
  // what the reader still has is the end.
  bool draining_ = false;
  bool cancelled_ = false;
};

}  // namespace mycel::cells

#endif  // MYCEL_CELLS_LOG_STREAM_H_
