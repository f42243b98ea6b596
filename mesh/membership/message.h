// The membership protocol's messages as the state machine sees them: plain
// structs, one per message of proto/mycel/v1/gossip.proto (codec.h converts).
// Signed alive records are immutable and shared (AliveRef), so a record that
// reaches thousands of members (or thousands of simulated nodes) exists once
// in memory.
#ifndef MYCEL_MESH_MEMBERSHIP_MESSAGE_H_
#define MYCEL_MESH_MEMBERSHIP_MESSAGE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace mycel::membership {

enum class MemberState : uint8_t {
  kAlive = 1,
  kSuspect = 2,
  kDead = 3,
  kLeft = 4,
};

// "alive", "suspect", "dead", "left".
absl::string_view MemberStateName(MemberState state);

// What a node says about itself besides its liveness.
struct NodeMeta {
  // "host:port", the preferred one first.
  std::vector<std::string> addresses;
  // Sorted by key, keys unique (NormalizeMeta).
  std::vector<std::pair<std::string, std::string>> labels;
  // Sorted by key, keys unique; e.g. {"cpu_millicores", 4000}.
  std::vector<std::pair<std::string, int64_t>> capacity;

  bool operator==(const NodeMeta&) const = default;
};

// A node's signed statement about itself (GossipAlive). `leaving` marks a
// graceful leave: only the node itself can say it.
struct Alive {
  std::string name;
  uint64_t incarnation = 0;
  NodeMeta meta;
  bool leaving = false;
  // Over CanonicalAliveBytes() (signing.h), with the key of `certificate`.
  std::string signature;
  // DER X.509 certificate naming `name`.
  std::string certificate;

  bool operator==(const Alive&) const = default;
};
using AliveRef = std::shared_ptr<const Alive>;

struct Suspect {
  std::string name;
  uint64_t incarnation = 0;
  std::string from;

  bool operator==(const Suspect&) const = default;
};

struct Dead {
  std::string name;
  uint64_t incarnation = 0;
  std::string from;

  bool operator==(const Dead&) const = default;
};

// One piggybacked update. An AliveRef in an Update is never null.
using Update = std::variant<AliveRef, Suspect, Dead>;

struct Ping {
  uint64_t seq = 0;
  // The member meant, or empty for the receiver itself: a ping sent
  // straight to its target leaves it out, since the transport delivers
  // only to the member named (its certificate's name).
  std::string target;
};
struct Ack {
  uint64_t seq = 0;
};
struct Nack {
  uint64_t seq = 0;
};
struct IndirectPing {
  uint64_t seq = 0;
  std::string target;
  bool nack = false;
};

// One member in a push-pull: its latest record and the state and
// incarnation the sender holds (at least the record's incarnation).
struct MemberDigest {
  AliveRef alive;
  MemberState state = MemberState::kAlive;
  uint64_t incarnation = 0;
};

// What a push-pull request says about a member without its record: enough
// for the receiver to tell whose view is newer (MemberDigest's fields, and
// the incarnation of the record the sender holds).
struct MemberSummary {
  std::string name;
  uint64_t record_incarnation = 0;
  MemberState state = MemberState::kAlive;
  uint64_t incarnation = 0;

  bool operator==(const MemberSummary&) const = default;
};

// The periodic full-state sync, by digest. A request (reply = false) lists
// every member the sender knows as a summary; a join request, from a node
// that knows few, carries full records instead. The receiver merges what it
// can, then replies with the full records of members the sender lacks or
// holds older, and names in `want` the members whose records it lacks or
// holds older. The sender answers `want` with a `fill` (the records, no
// reply). Between converged members a sync is one list of summaries and an
// empty reply, not every record and its certificate both ways.
struct PushPull {
  uint64_t seq = 0;
  bool join = false;
  bool reply = false;
  std::vector<MemberDigest> members;
  std::vector<MemberSummary> summaries;
  std::vector<std::string> want;
  bool fill = false;
  // A periodic request between settled members: a fingerprint of the
  // sender's view (Membership::Fingerprint) instead of summaries; the reply
  // says whether the receiver's differs (`mismatch`), and then the sender
  // syncs again by summaries. At rest the views agree, and a sync is a few
  // bytes each way instead of a summary per member.
  uint64_t fingerprint = 0;
  bool mismatch = false;
};

// No body (monostate) is plain gossip.
using Body =
    std::variant<std::monostate, Ping, Ack, Nack, IndirectPing, PushPull>;

struct Message {
  // The sender's name: empty (the state machine leaves it out, since the
  // transport authenticates the sender) or equal to the identity the
  // transport authenticated; anything else is refused.
  std::string from;
  Body body;
  std::vector<Update> updates;
};

// A message the driver must send. `to` is the member's name, or empty for a
// seed known only by address; `address` is where to dial.
struct Outbound {
  std::string to;
  std::string address;
  Message message;
};

// Bounds on what a peer may send; anything beyond is malformed.
inline constexpr size_t kMaxNameBytes = 253;
inline constexpr size_t kMaxAddresses = 8;
inline constexpr size_t kMaxAddressBytes = 255;
inline constexpr size_t kMaxLabels = 64;
inline constexpr size_t kMaxLabelKeyBytes = 128;
inline constexpr size_t kMaxLabelValueBytes = 256;
inline constexpr size_t kMaxCapacityEntries = 32;
inline constexpr size_t kMaxSignatureBytes = 512;
inline constexpr size_t kMaxCertificateBytes = 16 << 10;
inline constexpr size_t kMaxUpdatesPerMessage = 1024;

// Sorts labels and capacity by key. INVALID_ARGUMENT on a repeated key.
absl::Status NormalizeMeta(NodeMeta* meta);

// INVALID_ARGUMENT naming the field when the record breaks a bound above,
// has an empty name, or unsorted or repeated keys. Does not check the
// signature (that is the verifier's job).
absl::Status ValidateAlive(const Alive& alive);

// The same for a whole message, including every record it carries.
absl::Status ValidateMessage(const Message& message);

}  // namespace mycel::membership

#endif  // MYCEL_MESH_MEMBERSHIP_MESSAGE_H_
