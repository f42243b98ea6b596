// ReplicaLog: the local replica as the Replicator sees it, the seam between
// the I/O-free state machine and the store. ObjectStoreLog is the one
// implementation over daemon/store's ObjectStore (SQLite); tests may supply
// their own.
#ifndef MYCEL_MESH_REPLICATION_REPLICA_LOG_H_
#define MYCEL_MESH_REPLICATION_REPLICA_LOG_H_

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "daemon/store/objects.h"
#include "mesh/replication/origin_verifier.h"

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
  virtual absl::StatusOr<size_t> ApplySnapshot(
      const store::SnapshotChunk& chunk, absl::string_view sender,
      size_t max_refused, store::HlcTime remove_before) = 0;
  virtual absl::Status FinishResync(
      const store::VersionVector& base,
      const std::vector<store::ObjectChange>& proofs,
      absl::string_view sender) = 0;
  virtual absl::StatusOr<store::GcResult> CollectGarbage(
      const store::VersionVector& seen_by_all, store::HlcTime cutoff) = 0;

  // Origin certificates (signed changes; OriginVerifier). A log that checks
  // no signatures knows every origin and has no certificates.
  //
  // Whether this node can check `origin`'s changes: it has a certificate
  // for it.
  virtual bool KnowsOrigin(absl::string_view origin) { return true; }
  // The certificate (DER) this node holds for `origin`, to hand to a peer
  // that lacks it; empty when none.
  virtual std::string CertificateFor(absl::string_view origin) { return {}; }
  // Whether this node now refuses `origin`'s changes whoever sends them
  // (its certificate revoked since they were taken): every node refuses
  // them, so they are not streamed to a peer that lacks them, nor counted
  // in its lag.
  virtual bool OriginRefused(absl::string_view origin) { return false; }
  // A certificate a peer handed over: the origin it is for, once checked
  // and kept. FAILED_PRECONDITION when `wanted` refuses that origin;
  // ALREADY_EXISTS when this node has one for it (it keeps its own);
  // PERMISSION_DENIED when the mesh CA did not issue it to a node, or
  // revoked it; INVALID_ARGUMENT when it is not a certificate.
  virtual absl::StatusOr<std::string> OfferCertificate(
      absl::string_view der,
      const std::function<bool(absl::string_view origin)>& wanted) {
    return absl::UnimplementedError("this log checks no certificates");
  }
};

// The payload an UNAVAILABLE from Apply, ApplySnapshot or FinishResync
// carries when the origin named (as the payload's bytes) has no certificate
// here: the Replicator asks the sender for it.
inline constexpr absl::string_view kUnknownOriginPayload =
    "type.mycel.dev/mycel.replication.UnknownOrigin";

// Over an ObjectStore, which must outlive it, and the OriginVerifier that
// checks its changes' signatures (null: none checked), which must too.
class ObjectStoreLog final : public ReplicaLog {
 public:
  explicit ObjectStoreLog(store::ObjectStore* objects,
                          OriginVerifier* verifier = nullptr)
      : objects_(objects), verifier_(verifier) {}

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
  absl::StatusOr<size_t> ApplySnapshot(const store::SnapshotChunk& chunk,
                                       absl::string_view sender,
                                       size_t max_refused,
                                       store::HlcTime remove_before) override {
    return objects_->ApplySnapshot(chunk, sender, max_refused, remove_before);
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
  bool KnowsOrigin(absl::string_view origin) override {
    return verifier_ == nullptr || verifier_->Knows(origin);
  }
  std::string CertificateFor(absl::string_view origin) override {
    return verifier_ == nullptr ? std::string()
                                : verifier_->CertificateFor(origin);
  }
  bool OriginRefused(absl::string_view origin) override {
    return verifier_ != nullptr && verifier_->Refuses(origin);
  }
  absl::StatusOr<std::string> OfferCertificate(
      absl::string_view der,
      const std::function<bool(absl::string_view origin)>& wanted) override {
    if (verifier_ == nullptr) {
      return ReplicaLog::OfferCertificate(der, wanted);
    }
    return verifier_->Offer(der, wanted);
  }

 private:
  store::ObjectStore* const objects_;
  OriginVerifier* const verifier_;
};

}  // namespace mycel::replication

#endif  // MYCEL_MESH_REPLICATION_REPLICA_LOG_H_
