// ReplicaLog: the local replica as the Replicator sees it, the seam between
// the I/O-free state machine and the store. ObjectStoreLog is the one
// implementation over daemon/store's ObjectStore (SQLite); tests may supply
// their own.
#ifndef MYCEL_MESH_REPLICATION_REPLICA_LOG_H_
#define MYCEL_MESH_REPLICATION_REPLICA_LOG_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "daemon/store/objects.h"

namespace mycel::replication {

// The contracts are those of store::ObjectStore's methods of the same
// names.
class ReplicaLog {
 public:
  virtual ~ReplicaLog() = default;

  virtual absl::StatusOr<store::VersionVector> Versions() = 0;
  virtual absl::StatusOr<store::VersionVector> Floors() = 0;
  virtual absl::StatusOr<store::ApplyResult> Apply(
      const store::ObjectChange& change, absl::string_view sender) = 0;
  virtual absl::StatusOr<store::ChangeBatch> ReadChanges(
      absl::string_view origin, int64_t after, size_t max_bytes) = 0;
  virtual absl::StatusOr<store::SnapshotChunk> ReadSnapshot(
      const std::pair<std::string, std::string>& after, size_t max_bytes) = 0;
  virtual absl::Status ApplySnapshot(const store::SnapshotChunk& chunk,
                                     absl::string_view sender) = 0;
  virtual absl::Status FinishResync(
      const store::VersionVector& base,
      const std::vector<store::ObjectChange>& proofs,
      absl::string_view sender) = 0;
  virtual absl::StatusOr<store::GcResult> CollectGarbage(
      const store::VersionVector& seen_by_all, store::HlcTime cutoff) = 0;
};

// Over an ObjectStore, which must outlive it.
class ObjectStoreLog final : public ReplicaLog {
 public:
  explicit ObjectStoreLog(store::ObjectStore* objects) : objects_(objects) {}

  absl::StatusOr<store::VersionVector> Versions() override {
    return objects_->Versions();
  }
  absl::StatusOr<store::VersionVector> Floors() override {
    return objects_->Floors();
  }
  absl::StatusOr<store::ApplyResult> Apply(const store::ObjectChange& change,
                                           absl::string_view sender) override {
    return objects_->ApplyRemote(change, sender);
  }
  absl::StatusOr<store::ChangeBatch> ReadChanges(absl::string_view origin,
                                                 int64_t after,
                                                 size_t max_bytes) override {
    return objects_->ReadChanges(origin, after, max_bytes);
  }
  absl::StatusOr<store::SnapshotChunk> ReadSnapshot(
      const std::pair<std::string, std::string>& after,
      size_t max_bytes) override {
    return objects_->ReadSnapshot(after, max_bytes);
  }
  absl::Status ApplySnapshot(const store::SnapshotChunk& chunk,
                             absl::string_view sender) override {
    return objects_->ApplySnapshot(chunk, sender);
  }
  absl::Status FinishResync(const store::VersionVector& base,
                            const std::vector<store::ObjectChange>& proofs,
                            absl::string_view sender) override {
    return objects_->FinishResync(base, proofs, sender);
  }
  absl::StatusOr<store::GcResult> CollectGarbage(
      const store::VersionVector& seen_by_all, store::HlcTime cutoff) override {
    return objects_->CollectGarbage(seen_by_all, cutoff);
  }

 private:
  store::ObjectStore* const objects_;
};

}  // namespace mycel::replication

#endif  // MYCEL_MESH_REPLICATION_REPLICA_LOG_H_
