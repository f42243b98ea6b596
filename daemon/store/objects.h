// ObjectStore: the mesh's replicated objects (table `objects`), keys with
// opaque values in namespaces, over one Store. It is the store half of
// replication (mesh/replication drives it): local writes, changes received
// from other origins, the version vector, reading the change log for a
// peer, full snapshots for a peer too far behind, and garbage collection.
//
// The merge rule: every change carries its origin node, that origin's
// gap-free sequence number and a hybrid logical clock time. A key holds the
// change with the highest (hlc, origin); a losing change is still logged,
// so that the version vector advances and the log can be relayed. A delete
// is a change with no value (a tombstone), collected once every live member
// has seen it or after a maximum age. A peer whose version vector is below
// the log's floor (what GC or a full resync left out) must resync in full.
//
// Node-owned objects: a namespace starting with "node." holds objects of
// one node each, named by the key up to its first '/' ("node.status" key
// "n1" or "n1/disk" belongs to n1). Only that node may change them: its
// local writes are refused elsewhere, and so is a received change whose
// origin is not the owner.
//
// Signed changes: each change carries its origin's signature (ChangeStamp),
// made by the Store's signer when this node writes. With a verifier set, a
// change from another origin is applied only when its signature is that
// origin's: a member that relays changes cannot forge one in another
// member's name, nor take another origin's sequence numbers.
//
// Thread-safe (the Store serialises). `store` must outlive it.
#ifndef MYCEL_DAEMON_STORE_OBJECTS_H_
#define MYCEL_DAEMON_STORE_OBJECTS_H_

#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "daemon/store/hlc.h"
#include "daemon/store/store.h"

namespace mycel::store {

// Per origin, the highest sequence number held with none missing below.
using VersionVector = std::map<std::string, int64_t, std::less<>>;

// `origin`'s entry in `v`: 0 when it has none.
int64_t SeqAt(const VersionVector& v, absl::string_view origin);

// One change to an object, as logged and as sent to peers.
struct ObjectChange {
  ChangeStamp stamp;
  std::string ns;
  std::string key;
  std::optional<std::string> value;  // nullopt: deleted

  friend bool operator==(const ObjectChange&, const ObjectChange&) = default;
};

// An object's row: its value and the stamp of the change that wrote it.
struct Object {
  std::string ns;
  std::string key;
  std::optional<std::string> value;  // nullopt: a tombstone
  ChangeStamp stamp;
  std::string owner;  // empty: shared

  friend bool operator==(const Object&, const Object&) = default;
};

// Which write a compare-and-set expects to replace: the origin, sequence
// and HLC time of the change that wrote the value read. seq 0: the key
// must not exist (or be deleted).
//
// The time is part of it because the sequence alone can name two changes:
// under durability `normal`, a power loss takes back commits that were
// already answered, and the node stamps their numbers again on new
// changes. Those carry a later time, so a version read before the loss
// matches neither.
struct ObjectVersion {
  std::string origin;
  int64_t seq = 0;
  HlcTime hlc = 0;

  // "origin:seq@hlc", the HLC in hexadecimal: what the State API returns
  // and takes. "none" for seq 0.
  std::string ToString() const;
  // The inverse of ToString; INVALID_ARGUMENT naming `field` otherwise.
  static absl::StatusOr<ObjectVersion> Parse(absl::string_view text,
                                             absl::string_view field);
  static ObjectVersion Of(const ChangeStamp& stamp) {
    return {stamp.origin, stamp.seq, stamp.hlc};
  }

  friend bool operator==(const ObjectVersion&, const ObjectVersion&) = default;
};

enum class ApplyResult {
  kApplied,    // new, and it won its key
  kLost,       // new, logged, but the key holds a later change
  kDuplicate,  // already held; nothing changed
};

// A run of changes of one origin, in sequence order.
struct ChangeBatch {
  std::vector<ObjectChange> changes;
  size_t bytes = 0;
  bool more = false;  // the log holds later changes of that origin
};

// A range of the objects table, read in one transaction: every row (and
// tombstone) with a (namespace, key) after `after` and up to `last`, or to
// the end when `done`. `versions` is the sender's vector when it was read.
struct SnapshotChunk {
  std::pair<std::string, std::string> after;
  std::pair<std::string, std::string> last;
  bool done = false;
  std::vector<Object> rows;
  VersionVector versions;
  // In the first chunk (`after` empty): for each origin of `versions`, its
  // change at that seq from the log, signed by the origin: the proof of the
  // vector that FinishResync asks for.
  std::vector<ObjectChange> proofs;
  size_t bytes = 0;
};

struct GcResult {
  int64_t tombstones = 0;   // tombstones removed from objects
  int64_t log_changes = 0;  // changes removed from the change log
};

// The payload of a verifier's PERMISSION_DENIED (ObjectStore::
// ChangeVerifier) for a change whose origin this node refuses whoever sends
// it: its certificate was revoked after the change was made, so a peer that
// took the change before passes it on in good faith.
inline constexpr absl::string_view kRefusedOriginPayload =
    "type.mycel.dev/mycel.replication.RefusedOrigin";

class ObjectStore {
 public:
  struct Options {
    // A value larger than this is refused (INVALID_ARGUMENT, field value).
    size_t max_value_bytes = 1 << 20;
    size_t max_key_bytes = 1024;
    // A received change stamped further ahead of this node's clock is
    // refused (CockroachDB's max offset).
    absl::Duration max_offset = absl::Milliseconds(500);
  };

  explicit ObjectStore(Store* store) : ObjectStore(store, Options{}) {}
  ObjectStore(Store* store, Options options)
      : store_(store), options_(options) {}
  ObjectStore(const ObjectStore&) = delete;
  ObjectStore& operator=(const ObjectStore&) = delete;

  std::string origin() const { return store_->origin(); }
  // The store's Store::durable_seq.
  int64_t durable_seq() const { return store_->durable_seq(); }
  // Store::HoldLocalWrites and ReleaseLocalWrites: this node's writes wait
  // while replication takes back its own changes from peers.
  void HoldLocalWrites(absl::Duration at_most) {
    store_->HoldLocalWrites(at_most);
  }
  void ReleaseLocalWrites() { store_->ReleaseLocalWrites(); }
  const Options& options() const { return options_; }

  // Called after each local Write commits, with the change, on the
  // writer's thread (replication pushes it to peers). Set before the first
  // write; it must not block.
  void SetChangeListener(std::function<void(const ObjectChange&)> listener) {
    listener_ = std::move(listener);
  }
  // Called after a change made by another origin commits and wins its key
  // (ApplyRemote's kApplied, or a snapshot row that replaced ours), with
  // the change, on the replication thread. Subsystems whose state rides on
  // the store (the revocation list) learn of it here. Set before
  // replication starts; it must not block, and must not write to the store
  // from within (post the work elsewhere).
  void SetRemoteChangeListener(
      std::function<void(const ObjectChange&)> listener) {
    remote_listener_ = std::move(listener);
  }

  // Checks that `change` was signed by its origin: `bytes` are its
  // SigningBytes, `change.stamp.signature` the signature. PERMISSION_DENIED
  // for a missing or wrong signature, or for an origin this node refuses
  // whoever sends its changes (its certificate revoked since they were
  // made), which carries kRefusedOriginPayload: not the sender's doing;
  // UNAVAILABLE when the origin's key is not known here yet (the change is
  // refused now and taken when it comes again).
  using ChangeVerifier = std::function<absl::Status(const ObjectChange& change,
                                                    absl::string_view bytes)>;
  // Set before replication starts. Without one, received changes are not
  // checked (tests, and a node outside a mesh, which receives none).
  void SetChangeVerifier(ChangeVerifier verifier) {
    verifier_ = std::move(verifier);
  }
  // The bytes its origin signs for `change` (ChangeSigningBytes).
  static std::string SigningBytes(const ObjectChange& change);

  // Signs every change of this node that has no signature (written before
  // it had a mesh key), in the log and on the objects they wrote (also
  // those whose log entry was collected), with the Store's signer. Returns
  // how many changes it signed; FAILED_PRECONDITION without a signer.
  absl::StatusOr<int64_t> SignOwnUnsigned();

  // The owner of (ns, key): empty for a shared object. INVALID_ARGUMENT
  // for a node-owned namespace whose key names no node.
  static absl::StatusOr<std::string> OwnerOf(absl::string_view ns,
                                             absl::string_view key);

  // --- Local reads and writes ---

  // The live object; NOT_FOUND (naming it) when absent or deleted.
  absl::StatusOr<Object> Get(absl::string_view ns, absl::string_view key);
  // Live objects of `ns` whose key starts with `prefix`, in key order.
  absl::StatusOr<std::vector<Object>> List(absl::string_view ns,
                                           absl::string_view prefix);
  // Every row, tombstones included, in (namespace, key) order.
  absl::StatusOr<std::vector<Object>> Dump();

  // Writes (value) or deletes (nullopt) through Store::WriteReplicated.
  // With `if_version`, only when the key holds that version now
  // (FAILED_PRECONDITION naming both versions otherwise): a compare-and-set
  // local to this node. INVALID_ARGUMENT names the bad field (namespace,
  // key, value); PERMISSION_DENIED for another node's object. Returns the
  // change, with its stamp.
  absl::StatusOr<ObjectChange> Write(
      absl::string_view ns, absl::string_view key,
      std::optional<absl::string_view> value,
      std::optional<ObjectVersion> if_version = std::nullopt);

  // Write without waiting: `done` gets what Write would return, on the
  // store's committer thread once the commit is durable (see
  // Store::SubmitReplicated for what `done` may do), or at once, on this
  // thread, when the arguments are refused before any commit. This object
  // must outlive the answers of the writes it queued: the Store answers
  // every queued write before it closes, so stop the writers (the server)
  // first.
  using WriteDone = absl::AnyInvocable<void(absl::StatusOr<ObjectChange>) &&>;
  void WriteAsync(absl::string_view ns, absl::string_view key,
                  std::optional<absl::string_view> value,
                  std::optional<ObjectVersion> if_version, WriteDone done);

  // --- Replication ---

  // Applies a change made by another origin and sent by `sender` (the
  // identity the transport authenticated), in one transaction, logging it
  // with its own stamp. A change of this node's own origin past what it
  // holds is one its database lost (restored from an older copy) and a
  // peer kept: it is taken back the same way, its signature checked with
  // this node's certificate, and this node's next change is stamped past
  // it (Transaction::TakeBackOwnSequence). Errors, after which nothing
  // changed:
  //  - INVALID_ARGUMENT: a malformed change (names the field);
  //  - PERMISSION_DENIED: a node-owned object changed by another origin, or
  //    (with a verifier) a change its origin did not sign;
  //  - UNAVAILABLE: the origin's key is not known yet (verifier);
  //  - FAILED_PRECONDITION: the seq is not the next of its origin (the
  //    caller buffers it or fetches the ones missing), or its time is more
  //    than max_offset ahead of this node's clock ("clock skew", logged).
  absl::StatusOr<ApplyResult> ApplyRemote(const ObjectChange& change,
                                          absl::string_view sender);

  absl::StatusOr<VersionVector> Versions();
  // Per origin, the seq at or below which the log may lack changes.
  absl::StatusOr<VersionVector> Floors();

  // Changes of `origin` after seq `after`, in order, at most `max_bytes`
  // (and at least one when there is one). OUT_OF_RANGE when some of them
  // are no longer in the log (`after` is below the floor): the peer must
  // resync in full.
  absl::StatusOr<ChangeBatch> ReadChanges(absl::string_view origin,
                                          int64_t after, size_t max_bytes);

  // Rows after `after` (in (namespace, key) order), at most `max_bytes`
  // (at least one row).
  absl::StatusOr<SnapshotChunk> ReadSnapshot(
      const std::pair<std::string, std::string>& after, size_t max_bytes);
  // Merges a chunk of `sender`'s snapshot: each row by the merge rule (with
  // a verifier, a row its origin did not sign is skipped, and a row whose
  // origin's key is unknown fails the chunk with UNAVAILABLE), and
  // a row of ours in the chunk's range that the chunk lacks is removed when
  // the sender had seen its change (it was superseded there and collected).
  // Returns the rows skipped as the sender's doing (not signed by their
  // origin, or another node's object). Rows of an origin the verifier
  // refuses whoever sends them (kRefusedOriginPayload) are skipped and not
  // counted. Once more than `max_refused` rows fail
  // their signature check, it stops checking and applies nothing:
  // RESOURCE_EXHAUSTED (a sender of forged rows costs a check each). Rows
  // of ours stamped at or after `remove_before` are never removed: what
  // the sender's vector says is only its word.
  absl::StatusOr<size_t> ApplySnapshot(
      const SnapshotChunk& chunk, absl::string_view sender,
      size_t max_refused = SIZE_MAX,
      HlcTime remove_before = std::numeric_limits<HlcTime>::max());
  // Ends a full resync from `sender` whose first chunk carried `base` and
  // `proofs`: this node now holds every change up to it, and its log lacks
  // the ones it skipped. An origin's entry counts only up to a proof, its
  // change at exactly that seq (signed by it, with a verifier; a forged
  // one is ignored, UNAVAILABLE for an unknown origin): a sender cannot
  // make this node take as held, and drop, changes an origin never made.
  // The proofs join the log.
  absl::Status FinishResync(const VersionVector& base,
                            const std::vector<ObjectChange>& proofs,
                            absl::string_view sender);

  // Removes tombstones and log entries that every live member has seen
  // (seq at or below `seen_by_all[origin]`) or stamped before `cutoff`,
  // keeping each origin's last log entry; raises the floors to match.
  absl::StatusOr<GcResult> CollectGarbage(const VersionVector& seen_by_all,
                                          HlcTime cutoff);

  // A change's size as counted against chunk budgets.
  static size_t SizeOf(const ObjectChange& c);

  // The certificate (DER) this node checked `origin`'s changes with, kept
  // (node-local) for when membership no longer knows the origin. Writes only
  // when it differs from the one kept.
  absl::Status RememberOriginCertificate(absl::string_view origin,
                                         absl::string_view der);
  // The one kept for `origin`; empty when none.
  absl::StatusOr<std::string> OriginCertificate(absl::string_view origin);

 private:
  absl::Status Validate(absl::string_view ns, absl::string_view key,
                        const std::optional<std::string>& value) const;
  // A local write checked and ready to commit (Write and WriteAsync).
  struct PreparedWrite {
    ObjectChange change;
    std::string owner;
    std::optional<ObjectVersion> if_version;
  };
  absl::StatusOr<PreparedWrite> PrepareWrite(
      absl::string_view ns, absl::string_view key,
      std::optional<absl::string_view> value,
      std::optional<ObjectVersion> if_version) const;
  // Its statements, in the group commit's transaction.
  static absl::Status ApplyWrite(Transaction& tx, const ChangeStamp& stamp,
                                 const PreparedWrite& w);

  Store* const store_;
  const Options options_;
  std::function<void(const ObjectChange&)> listener_;
  std::function<void(const ObjectChange&)> remote_listener_;
  ChangeVerifier verifier_;
};

}  // namespace mycel::store

#endif  // MYCEL_DAEMON_STORE_OBJECTS_H_
