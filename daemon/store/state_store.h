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

#include <atomic>
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
  // `quota_bytes` (0: none) bounds the database a put may find: see Put.
  StateStore(ObjectStore* objects, Store* store, int64_t quota_bytes = 0)
      : objects_(objects), store_(store), quota_bytes_(quota_bytes) {}
  StateStore(const StateStore&) = delete;
  StateStore& operator=(const StateStore&) = delete;

  const ObjectStore::Options& limits() const { return objects_->options(); }
  int64_t quota_bytes() const { return quota_bytes_; }
  // Writes (puts, deletes) refused for the quota so far.
  uint64_t refused_over_quota() const { return refused_over_quota_.load(); }

  // As ObjectStore's, in the kv namespace. While the database holds
  // `quota_bytes` or more (Store::UsedBytes), a put is refused with
  // RESOURCE_EXHAUSTED naming state_quota, and so is a delete of a key
  // that holds no value here (it would only add a tombstone); a delete
  // that frees a value is not.
  absl::StatusOr<Object> Get(absl::string_view key);
  absl::StatusOr<ObjectChange> Put(absl::string_view key,
                                   absl::string_view value,
                                   std::optional<ObjectVersion> if_version);
  absl::StatusOr<ObjectChange> Delete(absl::string_view key);
  // As ObjectStore::WriteAsync, in the kv namespace; a write refused for
  // the quota is answered at once, on this thread.
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
  // The database's bytes in use when they reach the quota; nullopt when
  // they do not, or there is none.
  absl::StatusOr<std::optional<int64_t>> OverQuota();
  // RESOURCE_EXHAUSTED naming state_quota: `what` stops at the quota.
  absl::Status QuotaError(int64_t used, absl::string_view what);
  // OK when a put, or a delete of `key`, may go ahead; else why not.
  absl::Status CheckPut();
  absl::Status CheckDelete(absl::string_view key);

  ObjectStore* const objects_;
  Store* const store_;
  const int64_t quota_bytes_;
  std::atomic<uint64_t> refused_over_quota_{0};
};

}  // namespace mycel::store

#endif  // MYCEL_DAEMON_STORE_STATE_STORE_H_
