// The control protocol between myceld (the controller) and its log keeper
// (cells/log_keeper.h), over the unix SOCK_SEQPACKET socket
// <state-dir>/logkeeper.sock.
//
// Every message is one datagram of a fixed size: the controller sends a
// KeeperRequest and reads one KeeperReply before it sends the next request
// (a LIST reply is a KeeperReply followed, in the same datagram, by `count`
// KeeperListEntry). SEQPACKET keeps datagram boundaries, so the receiver
// sees exactly what was sent or learns that it was cut (MSG_TRUNC); a
// datagram of any other size is malformed. Fixed sizes make every message
// checkable by its length and every string by a NUL inside its field, and
// bound what either side ever holds. Both sides are the same binary's
// build of this header, on the same host: fields are in host byte order.
//
// A connection starts with HELLO; anything else before it is refused. Each
// malformed or refused request gets a reply with a non-OK `code` and a
// `message`, and the keeper goes on serving; a controller that sends a
// zero-length datagram (which reads as end of file) or does not read its
// replies is disconnected.
//
// Requests:
//   HELLO  version             → version (the one both speak), pid
//   OPEN   id, path, cap_bytes → the stream's pipe write end (SCM_RIGHTS),
//                                 bytes_written, bytes_dropped
//   FLUSH  id                  → bytes_written, bytes_dropped, after the
//                                 keeper copied what the pipe held
//   CLOSE  id                  → the same, then the stream is gone
//   LIST   id (a cursor)       → count entries with ids after the cursor,
//                                 in id order; `more` when some remain
#ifndef MYCEL_CELLS_LOG_KEEPER_PROTOCOL_H_
#define MYCEL_CELLS_LOG_KEEPER_PROTOCOL_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <type_traits>

#include "absl/strings/string_view.h"

namespace mycel::cells {

// "MLKP" in memory on little-endian hosts; a datagram that does not start
// with it is not ours.
inline constexpr uint32_t kKeeperMagic = 0x504b4c4d;
inline constexpr uint32_t kKeeperProtocolVersion = 1;

// Field sizes, each including the terminating NUL. An id is
// "<cell>/<exe>" (names are at most 63 bytes each, cells/names.h).
inline constexpr size_t kKeeperIdBytes = 128;
inline constexpr size_t kKeeperPathBytes = 1024;
inline constexpr size_t kKeeperMessageBytes = 256;
// Entries per LIST reply (about 37 KiB with the reply).
inline constexpr uint32_t kKeeperListEntries = 32;

// Limits the keeper enforces. A cap below the minimum would rotate on
// every line; the maximum only guards against nonsense.
inline constexpr uint64_t kMinLogCapBytes = 4096;
inline constexpr uint64_t kMaxLogCapBytes = uint64_t{1} << 40;
// Each stream holds three descriptors and up to kKeeperPipeBytes of kernel
// memory in its pipe. Fewer where RLIMIT_NOFILE's hard limit is lower.
inline constexpr size_t kMaxKeeperStreams = 4096;

enum class KeeperOp : uint32_t {
  kHello = 1,
  kOpen = 2,
  kFlush = 3,
  kClose = 4,
  kList = 5,
};

struct KeeperRequest {
  uint32_t magic;
  uint32_t op;         // KeeperOp
  uint32_t version;    // HELLO: the protocol version the controller speaks
  uint32_t reserved;   // 0
  uint64_t cap_bytes;  // OPEN: the most bytes one file of the stream holds
  // OPEN, FLUSH, CLOSE: the stream. LIST: list the ids after this one
  // ("" lists from the first).
  char id[kKeeperIdBytes];
  // OPEN: the log file, absolute, below <state-dir>/logs/.
  char path[kKeeperPathBytes];
};

struct KeeperReply {
  uint32_t magic;
  uint32_t op;       // the request's op; 0 when the request was unreadable
  int32_t code;      // absl::StatusCode
  uint32_t version;  // HELLO: the version both sides speak from now on
  // The stream's output written to its files, and the output dropped
  // because a write failed (a full disk), since the keeper opened it.
  uint64_t bytes_written;
  uint64_t bytes_dropped;
  uint32_t count;  // LIST: entries that follow
  uint32_t more;   // LIST: 1 when more entries remain after the last one
  int32_t pid;     // HELLO: the keeper's pid
  uint32_t reserved;
  char message[kKeeperMessageBytes];  // why, when code is not OK
};

struct KeeperListEntry {
  uint64_t cap_bytes;
  uint64_t bytes_written;
  uint64_t bytes_dropped;
  char id[kKeeperIdBytes];
  char path[kKeeperPathBytes];
};

// The largest datagram either side sends.
inline constexpr size_t kKeeperMaxReplyBytes =
    sizeof(KeeperReply) + kKeeperListEntries * sizeof(KeeperListEntry);

static_assert(std::is_trivially_copyable_v<KeeperRequest>);
static_assert(std::is_trivially_copyable_v<KeeperReply>);
static_assert(std::is_trivially_copyable_v<KeeperListEntry>);
static_assert(sizeof(KeeperRequest) == 24 + kKeeperIdBytes + kKeeperPathBytes);
static_assert(sizeof(KeeperReply) == 48 + kKeeperMessageBytes);
static_assert(sizeof(KeeperListEntry) % 8 == 0);

// Copies `value` into a fixed field with its NUL; false (and the field
// empty) when it does not fit or holds a NUL itself.
template <size_t N>
bool SetKeeperField(char (&field)[N], absl::string_view value) {
  memset(field, 0, N);
  if (value.size() >= N || value.find('\0') != absl::string_view::npos) {
    return false;
  }
  memcpy(field, value.data(), value.size());
  return true;
}

// The string in a fixed field; nullopt when the field holds no NUL (a
// peer's field is never trusted to end).
template <size_t N>
std::optional<absl::string_view> GetKeeperField(const char (&field)[N]) {
  const void* nul = memchr(field, '\0', N);
  if (nul == nullptr) return std::nullopt;
  return absl::string_view(field, static_cast<const char*>(nul) - field);
}

}  // namespace mycel::cells

#endif  // MYCEL_CELLS_LOG_KEEPER_PROTOCOL_H_
