// MeshStore: the mesh identity's rows in the state database (tables mesh,
// join_tokens, revocations; see daemon/store/migrations.cc). The one file
// of this subsystem that holds SQL.
#ifndef MYCEL_MESH_IDENTITY_MESH_STORE_H_
#define MYCEL_MESH_IDENTITY_MESH_STORE_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/store/store.h"
#include "mesh/pki/join_token.h"
#include "mesh/pki/revocation_list.h"

namespace mycel::identity {

// This node's membership of a mesh.
struct MeshRow {
  std::string name;
  std::string node;
  bool authority = false;
  absl::Time joined;
};

// Another node this node knows directly (table mesh_peers).
struct PeerRow {
  std::string name;
  std::string address;
  bool authority = false;
  std::string serial;  // of the certificate this node issued it, if any
  absl::Time admitted;
};

// Thread-safe (the Store is). `store` must outlive it.
class MeshStore {
 public:
  explicit MeshStore(store::Store* store) : store_(store) {}

  // The mesh this node is in; nullopt when none.
  absl::StatusOr<std::optional<MeshRow>> GetMesh();
  // Records the mesh; ALREADY_EXISTS when the node is in one.
  absl::Status InsertMesh(const MeshRow& row);

  absl::Status InsertToken(const pki::StoredJoinToken& token);
  // NOT_FOUND "join token ID does not exist".
  absl::StatusOr<pki::StoredJoinToken> GetToken(const std::string& id);
  absl::StatusOr<std::vector<pki::StoredJoinToken>> ListTokens();
  // NOT_FOUND when there is no such token.
  absl::Status RevokeToken(const std::string& id);
  // Takes in another authority's copy of a token: inserted when new, else
  // uses_left becomes the smaller and revoked the larger of the two (so a
  // merge never gives a use back). True when it changed the row.
  absl::StatusOr<bool> MergeToken(const pki::StoredJoinToken& token);
  // Takes one use of the token `id`, only if it still has one:
  // UNAUTHENTICATED "join token ID: used up" when another join took the
  // last use since it was checked.
  absl::Status ConsumeToken(const std::string& id);
  // Deletes every token that expired before `before`; returns their ids.
  absl::StatusOr<std::vector<std::string>> DeleteTokensExpiredBefore(
      absl::Time before);

  // Inserts or replaces the peer of that name.
  absl::Status PutPeer(const PeerRow& peer);
  absl::StatusOr<std::optional<PeerRow>> GetPeer(const std::string& name);
  absl::StatusOr<std::vector<PeerRow>> ListPeers();

  // The revocation list; empty when none was stored.
  absl::StatusOr<pki::RevocationList> GetRevocations();
  absl::Status PutRevocations(const pki::RevocationList& list);

 private:
  store::Store* const store_;
};

}  // namespace mycel::identity

#endif  // MYCEL_MESH_IDENTITY_MESH_STORE_H_
