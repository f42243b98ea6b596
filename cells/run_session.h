// RunSession: one `mycel run` (Cells.Run): a throwaway cell, one command
// in it whose stdout and stderr are pipes read on the daemon's event loop
// and handed to a sink, and the command's exit status at the end. The cell
// is deleted, with anything still running in it, when the session goes.
//
// Threading: Start runs on any thread. The sink is called, and Resume and
// Cancel must be called, on the io_context's thread; the session must be
// destroyed there too. The manager and the io_context must outlive it.
#ifndef MYCEL_CELLS_RUN_SESSION_H_
#define MYCEL_CELLS_RUN_SESSION_H_

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "cells/cells.h"
#include "cells/stream_sink.h"
#include "mycel/v1/cells.pb.h"

namespace mycel::cells {

class RunSession : public std::enable_shared_from_this<RunSession> {
 public:
  // Receives the command's output (stdout or stderr chunks, at most
  // kChunkBytes each) and, at the end, its exit event once its pipes are
  // closed and its exit is known; on the io_context's thread.
  using Sink = StreamSink<mycel::v1::RunEvent>;

  // Largest chunk of output in one Output call.
  static constexpr size_t kChunkBytes = 64 * 1024;

  // Creates the cell (ephemeral: removed after a daemon restart), starts the
  // command with its output on pipes, and starts reading them. Errors are
  // those of CreateCell and Start (INVALID_ARGUMENT naming the field,
  // NOT_FOUND for a missing command), with nothing left behind. `sink` must
  // outlive the session, or until Cancel().
  static absl::StatusOr<std::shared_ptr<RunSession>> Start(
      Cells* manager, boost::asio::io_context* io,
      const mycel::v1::RunRequest& request, Sink* sink);

  RunSession(const RunSession&) = delete;
  RunSession& operator=(const RunSession&) = delete;
  // Deletes the cell (killing what still runs in it).
  ~RunSession();

  // The sink has written the last Output: read on.
  void Resume();
  // Stops reading and watching; the sink is not called again. The cell is
  // deleted when the session is destroyed.
  void Cancel();

  const std::string& cell() const { return cell_; }

 private:
  RunSession(Cells* manager, boost::asio::io_context* io, Sink* sink,
             std::string cell);

  // Reads one chunk from pipe `i` (0: stdout, 1: stderr) when it is
  // readable.
  void ReadFrom(int i);
  void OnReadable(int i);
  // Both pipes are closed: waits for the command's exit and ends.
  void MaybeFinish();
  // Deletes the cell (once).
  void RemoveCell();

  Cells* const manager_;
  boost::asio::io_context* const io_;
  Sink* sink_;
  const std::string cell_;
  std::unique_ptr<boost::asio::posix::stream_descriptor> pipes_[2];
  bool open_[2] = {false, false};
  // The pipe whose chunk the sink is writing (-1: none).
  int delivering_ = -1;
  // A pipe that turned readable while a chunk was out.
  bool waiting_[2] = {false, false};
  Cells::EndWatch end_watch_ = 0;
  bool watching_end_ = false;
  bool cancelled_ = false;
  bool removed_ = false;
};

}  // namespace mycel::cells

#endif  // MYCEL_CELLS_RUN_SESSION_H_
