// StateStore: the user key/value namespace ("kv") of the replicated store,
// as State (daemon/server/state_service.h) serves it on one node: reads,
// writes through ObjectStore (so that every write is stamped and logged),
// pages of a listing, and the changes a watch needs.
//
// Revisions: every change to a kv key, whatever its path (a local write, a
// change received from a peer, a row of a full resync), gives the key a new
// node-local revision (table kv_changes, kept by triggers of migration 8).
// Revisions only grow and are never reused, so a watcher that saw revision
// R resumes with the changes after R. Only the latest change of each key is
// kept: changes to one key between two reads coalesce into its latest
// value. When a key's tombstone is collected its revision is gone, and the
// floor (kv_floor) rises to it; a resume from below the floor is
// OUT_OF_RANGE, since a delete may have been missed.
//
// Thread-safe (the Store serialises). `objects` and `store` must outlive it.
#ifndef MYCEL_DAEMON_STORE_STATE_STORE_H_
#define MYCEL_DAEMON_STORE_STATE_STORE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "daemon/store/objects.h"
#include "daemon/store/store.h"

namespace mycel::store {

// The namespace of the user's keys.
inline constexpr absl::string_view kStateNamespace = "kv";

// A key as a watch reports it: its revision and its row now (no value when
// deleted; no stamp either when even its tombstone is gone).
struct StateChange {
  int64_t revision = 0;
  std::string key;
  std::optional<Object> object;  // nullopt or no value: deleted
};

struct StatePage {
  std::vector<Object> objects;
  // The last key of the page when more may follow, else empty.
  std::string next_after;
  // The revision the page was read at.
  int64_t revision = 0;
};

struct StateChanges {
  std::vector<StateChange> changes;
  // The revision read up to: the next read starts after it.
  int64_t revision = 0;
};

class StateStore {
 public:
  StateStore(ObjectStore* objects, Store* store)
      : objects_(objects), store_(store) {}
  StateStore(const StateStore&) = delete;
  StateStore& operator=(const StateStore&) = delete;

  const ObjectStore::Options& limits() const { return objects_->options(); }

  // As ObjectStore's, in the kv namespace.
  absl::StatusOr<Object> Get(absl::string_view key);
  absl::StatusOr<ObjectChange> Put(absl::string_view key,
                                   absl::string_view value,
                                   std::optional<ObjectVersion> if_version);
  absl::StatusOr<ObjectChange> Delete(absl::string_view key);
  // As ObjectStore::WriteAsync, in the kv namespace.
  void PutAsync(absl::string_view key, absl::string_view value,
                std::optional<ObjectVersion> if_version,
                ObjectStore::WriteDone done);
  void DeleteAsync(absl::string_view key, ObjectStore::WriteDone done);

  // Live keys starting with `prefix` and after `after`, in key order, at
  // most `limit` of them, read in one transaction with the revision.
  absl::StatusOr<StatePage> List(absl::string_view prefix,
                                 absl::string_view after, int limit);

  // The latest revision (0 before the first change).
  absl::StatusOr<int64_t> Revision();

  // Keys starting with `prefix` changed after revision `after`, in
  // revision order, at most `limit`. OUT_OF_RANGE when `after` is below
  // the floor (changes after it were compacted: list again and watch from
  // the listing's revision), or above the latest revision (a revision
  // this node never gave).
  absl::StatusOr<StateChanges> ChangesSince(absl::string_view prefix,
                                            int64_t after, int limit);

 private:
  ObjectStore* const objects_;
  Store* const store_;
};

}  // namespace mycel::store

#endif  // MYCEL_DAEMON_STORE_STATE_STORE_H_
