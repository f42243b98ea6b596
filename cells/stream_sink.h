// StreamSink: where a long-lived call's session (RunSession, LogStream)
// sends its messages, one at a time: the session sends nothing more until
// it is resumed, so a slow client slows the source instead of growing the
// daemon's memory.
#ifndef MYCEL_CELLS_STREAM_SINK_H_
#define MYCEL_CELLS_STREAM_SINK_H_

#include <optional>

#include "absl/status/status.h"

namespace mycel::cells {

template <typename Message>
class StreamSink {
 public:
  virtual ~StreamSink() = default;
  // One message; the session waits for its Resume() before the next.
  virtual void Output(Message message) = 0;
  // The last call: OK, with the stream's last message if it ends with one
  // (Run's exit status), or an error.
  virtual void End(absl::Status status, std::optional<Message> last) = 0;
};

}  // namespace mycel::cells

#endif  // MYCEL_CELLS_STREAM_SINK_H_
