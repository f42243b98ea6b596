// MemberStore: the rows behind membership in the state database, so that a
// restarted node rejoins without a seed and with an incarnation above
// anything it said before (docs/membership.md, "Persistence").
//
// Table `members` holds one row per member this node knows (not itself):
// its state and incarnation as this node holds them, its newest signed
// record as EncodeAlive writes it, and when its state began and when it was
// last heard from. This node's own last incarnation and its seed addresses
// live in `meta` (keys "membership.incarnation", "membership.seeds").
#ifndef MYCEL_MESH_MEMBERSHIP_MEMBER_STORE_H_
#define MYCEL_MESH_MEMBERSHIP_MEMBER_STORE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "daemon/store/store.h"
#include "mesh/membership/membership.h"

namespace mycel::membership {

// What a node persisted about membership.
struct PersistedMembership {
  std::vector<MemberSnapshot> members;
  std::vector<std::string> seeds;
  // The highest incarnation this node has used; nullopt when none stored.
  std::optional<uint64_t> incarnation;
  // Rows that could not be read back (bad record bytes, a record naming
  // another member, an unknown state); each was skipped with a logged error.
  int skipped = 0;
};

// One batch of changes, written in one transaction.
struct MemberStoreBatch {
  // Inserted or replaced, by name.
  std::vector<MemberSnapshot> upserts;
  // Deleted (forgotten after their retention).
  std::vector<std::string> removed;
  std::optional<uint64_t> incarnation;
  std::optional<std::vector<std::string>> seeds;
};

// The incarnation a starting node must use: above the one it persisted and
// at least the wall clock in microseconds, so that it overrides whatever
// the mesh remembers of its previous life even when its store was lost.
uint64_t StartIncarnation(std::optional<uint64_t> persisted, absl::Time now);

// Thread-safe (the Store serialises access). `store` must outlive it.
class MemberStore {
 public:
  explicit MemberStore(store::Store* store) : store_(store) {}
  MemberStore(const MemberStore&) = delete;
  MemberStore& operator=(const MemberStore&) = delete;

  // Reads everything back. A row that cannot be decoded is skipped and
  // logged, not an error: one bad row must not keep a node out of the mesh.
  // Errors are the store's (the database itself failing).
  absl::StatusOr<PersistedMembership> Load();

  // Applies `batch` in one transaction (all or nothing).
  absl::Status Save(const MemberStoreBatch& batch);

  // Load, then fill options->members, ->seeds (when the caller gave none)
  // and ->incarnation (StartIncarnation of the stored one and `now`, or the
  // caller's when higher).
  absl::Status Restore(absl::Time now, MembershipOptions* options);

 private:
  store::Store* const store_;
};

}  // namespace mycel::membership

#endif  // MYCEL_MESH_MEMBERSHIP_MEMBER_STORE_H_
