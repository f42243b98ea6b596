// MeshNode: this node's identity in its mesh. It creates a mesh (`mycel
// mesh init`: the CA, the node's key and certificate, an administrator),
// keeps the keys and certificates under <state-dir>/mesh/ (keys 0600),
// records the membership in the store, issues users and join tokens when it
// is an authority, and keeps Trust (what the authorizer verifies against)
// in step with all of it, at start-up too.
#ifndef MYCEL_MESH_IDENTITY_MESH_NODE_H_
#define MYCEL_MESH_IDENTITY_MESH_NODE_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/store/store.h"
#include "mesh/identity/mesh_store.h"
#include "mesh/identity/trust.h"
#include "mesh/pki/certificate_authority.h"
#include "mesh/pki/join_token.h"
#include "mesh/pki/role.h"
#include "runtime/clock.h"

namespace mycel::identity {

// A user's credentials, returned to the caller and kept nowhere.
struct UserCredentials {
  std::string mesh;
  std::string user;
  pki::Role role = pki::Role::kViewer;
  std::string ca_pem;
  std::string cert_pem;
  std::string key_pem;
};

// What this node is in its mesh.
struct MeshStatus {
  std::string mesh;  // empty: not in a mesh
  std::string node;
  std::string spiffe_id;
  std::string ca_fingerprint;
  std::string ca_pem;
  bool authority = false;
  absl::Time certificate_expires;
};

// The node's TLS material for serving and dialing in its mesh.
struct NodeCredentials {
  std::string ca_pem;
  std::string cert_pem;
  std::string key_pem;
};

// Thread-safe. The store, trust and clock must outlive it.
class MeshNode {
 public:
  struct Options {
    std::string state_dir;
    std::string node_name;
    store::Store* store = nullptr;
    Trust* trust = nullptr;
    const Clock* clock = nullptr;
    absl::Duration node_validity = pki::kDefaultNodeValidity;
  };

  // Loads the membership (if any) from the store and <state-dir>/mesh/,
  // and makes `trust` trust its CA and revocation list. A membership whose
  // files are missing or do not match is DATA_LOSS naming the file.
  static absl::StatusOr<std::unique_ptr<MeshNode>> Open(Options options);

  MeshNode(const MeshNode&) = delete;
  MeshNode& operator=(const MeshNode&) = delete;

  // The directory of the keys and certificates.
  std::string dir() const { return options_.state_dir + "/mesh"; }
  // How long the node certificates this node issues (and asks for) live.
  absl::Duration node_validity() const { return options_.node_validity; }

  // Creates the mesh `mesh` (ValidateMeshName) with this node as its first
  // member and authority, and issues `admin` (ValidateIdentityName) an admin
  // user certificate. FAILED_PRECONDITION when the node is in a mesh;
  // INVALID_ARGUMENT naming the bad name.
  absl::StatusOr<UserCredentials> Init(const std::string& mesh,
                                       const std::string& admin)
      ABSL_LOCKS_EXCLUDED(mu_);

  MeshStatus Status() const ABSL_LOCKS_EXCLUDED(mu_);
  // The node's credentials; nullopt when not in a mesh.
  std::optional<NodeCredentials> Credentials() const ABSL_LOCKS_EXCLUDED(mu_);

  // Issues a user certificate (a fresh key, returned). Needs an authority:
  // FAILED_PRECONDITION otherwise.
  absl::StatusOr<UserCredentials> AddUser(const std::string& name,
                                          pki::Role role)
      ABSL_LOCKS_EXCLUDED(mu_);

  // A new join token valid for `ttl` and `uses` joins: its text (returned
  // once, never stored) and what is stored.
  absl::StatusOr<std::pair<std::string, pki::StoredJoinToken>> CreateToken(
      absl::Duration ttl, int64_t uses) ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<std::vector<pki::StoredJoinToken>> ListTokens();
  absl::Status RevokeToken(const std::string& id);

 private:
  explicit MeshNode(Options options)
      : options_(std::move(options)), store_(options_.store) {}
  // Reads the files of the membership `row`.
  absl::Status LoadLocked(const MeshRow& row)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<UserCredentials> IssueUserLocked(const std::string& name,
                                                  pki::Role role)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status RequireMeshLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  MeshStore store_;
  mutable absl::Mutex mu_;
  std::optional<MeshRow> row_ ABSL_GUARDED_BY(mu_);
  std::optional<pki::CertificateAuthority> ca_ ABSL_GUARDED_BY(mu_);
  std::optional<pki::Certificate> ca_cert_ ABSL_GUARDED_BY(mu_);
  std::optional<NodeCredentials> node_ ABSL_GUARDED_BY(mu_);
  absl::Time node_expires_ ABSL_GUARDED_BY(mu_);
};

}  // namespace mycel::identity

#endif  // MYCEL_MESH_IDENTITY_MESH_NODE_H_
