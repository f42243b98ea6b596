// MeshNode: this node's identity in its mesh. It creates a mesh (`mycel
// mesh init`: the CA, the node's key and certificate, an administrator),
// keeps the keys and certificates under <state-dir>/mesh/ (keys 0600),
// records the membership in the store, issues users and join tokens when it
// is an authority, and keeps Trust (what the authorizer verifies against)
// in step with all of it, at start-up too.
#ifndef MYCEL_MESH_IDENTITY_MESH_NODE_H_
#define MYCEL_MESH_IDENTITY_MESH_NODE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/store/store.h"
#include "mesh/identity/join_limiter.h"
#include "mesh/identity/mesh_store.h"
#include "mesh/identity/peer_channels.h"
#include "mesh/identity/trust.h"
#include "mesh/pki/certificate_authority.h"
#include "mesh/pki/certificate_request.h"
#include "mesh/pki/join_token.h"
#include "mesh/pki/private_key.h"
#include "mesh/pki/revocation_list.h"
#include "mesh/pki/role.h"
#include "mesh/pki/rotation.h"
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
// The replicated store's namespace of the authorities' signed revocation
// lists (node-owned: the key is the authority's name).
inline constexpr absl::string_view kRevocationsNamespace = "node.revocations";
// ... and of the join tokens the authorities share (key: the token id).
inline constexpr absl::string_view kTokensNamespace = "mesh.tokens";

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

// What an authority asks of a node that joins (Mesh.Admit).
struct AdmitRequest {
  std::string token_id;
  std::string secret;   // raw bytes
  std::string csr;      // PEM
  std::string address;  // where the new node serves (HOST:PORT)
  bool authority = false;
  // The caller's source for the failure limit: SourceBlockOfPeer.
  std::string source;
};

// What an authority gives a node it admits.
struct Admission {
  std::string mesh;
  std::string cert_pem;
  std::string ca_pem;
  std::string ca_key_pem;   // only to a new authority
  std::string revocations;  // RevocationList::Serialize()
  std::string admitted_by;  // the authority's node name
  std::vector<PeerRow> authorities;
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
    JoinLimiter::Options join_limits;
    // How long an expired join token is kept (listed, and refused with
    // "expired") before CollectExpiredTokens deletes it.
    absl::Duration token_retention = absl::Hours(1);
    // Whether a node of this name is known in the mesh beyond the nodes
    // this node admitted or joined through (the daemon: membership knows
    // it, or the replicated store holds changes of that origin). An
    // authority admits a name in use only once the name is revoked, as it
    // does for the nodes it knows; an error refuses the join with it (the
    // token's use is kept). Called with the node's lock held; it must not
    // call back into this object. Null: no such check.
    std::function<absl::StatusOr<bool>(const std::string& name)> name_in_use;
  };

  // Loads the membership (if any) from the store and <state-dir>/mesh/,
  // and makes `trust` trust its CA and revocation list. A membership whose
  // files are missing or do not match is DATA_LOSS naming the file.
  static absl::StatusOr<std::unique_ptr<MeshNode>> Open(Options options);

  MeshNode(const MeshNode&) = delete;
  MeshNode& operator=(const MeshNode&) = delete;

  // The directory of the keys and certificates.
  std::string dir() const { return options_.state_dir + "/mesh"; }

  // The origin of the replicated changes of node `node_name` with state
  // directory `state_dir` (store::OriginNode): its name, unless it joined
  // a mesh under the name of a node revoked there, when CompleteJoin wrote
  // NAME~KEYID (its certificate's key) to <state-dir>/mesh/origin, so that
  // its changes never take the numbers its predecessor's hold. Readable
  // before the store opens. DATA_LOSS when that file does not name an
  // origin of `node_name`.
  static absl::StatusOr<std::string> OriginOf(const std::string& state_dir,
                                              const std::string& node_name);
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
  // Whether this node serves joins now: it holds the CA key and a join
  // token that can still admit someone (not revoked, not expired, uses
  // left), its own or another authority's. The TLS server asks at every
  // handshake without a client certificate (daemon/server/credentials.h).
  bool AdmitsJoins() ABSL_LOCKS_EXCLUDED(mu_);
  // The node's credentials; nullopt when not in a mesh.
  std::optional<NodeCredentials> Credentials() const ABSL_LOCKS_EXCLUDED(mu_);

  // Issues a user certificate (a fresh key, returned). Needs an authority:
  // FAILED_PRECONDITION otherwise.
  absl::StatusOr<UserCredentials> AddUser(const std::string& name,
                                          pki::Role role)
      ABSL_LOCKS_EXCLUDED(mu_);

  absl::StatusOr<std::vector<pki::StoredJoinToken>> ListTokens();
  // NOT_FOUND "join token ID does not exist".
  absl::StatusOr<pki::StoredJoinToken> GetToken(const std::string& id);
  absl::Status RevokeToken(const std::string& id);
  // Deletes the tokens that expired more than token_retention ago from
  // this node's table; returns their ids (an authority then deletes their
  // published copies). A copy that arrives later is not taken back in
  // (MergeSignedToken).
  absl::StatusOr<std::vector<std::string>> CollectExpiredTokens();
  // Whether a token expiring at `expires` is past its retention now.
  bool TokenCollectable(absl::Time expires) const {
    return expires < options_.clock->Now() - options_.token_retention;
  }
  // A new join token valid for `ttl` and `uses` joins, which admits
  // authorities when `authority`: its text (returned once, never stored)
  // and what is stored.
  absl::StatusOr<std::pair<std::string, pki::StoredJoinToken>> CreateToken(
      absl::Duration ttl, int64_t uses, bool authority = false)
      ABSL_LOCKS_EXCLUDED(mu_);

  // -- Joining: the authority's side. --

  // Admits a node that proves a join token: checks, in this order, the
  // source's failure budget (RESOURCE_EXHAUSTED), that this node is an
  // authority (FAILED_PRECONDITION naming the authorities it knows), the
  // token (UNAUTHENTICATED: unknown, wrong secret, revoked, expired, used
  // up), that a token without --authority does not make an authority
  // (PERMISSION_DENIED), the CSR (INVALID_ARGUMENT "csr: ..."; a user
  // identity or another mesh is refused), that the name is not a member
  // already (ALREADY_EXISTS), and the address. Only then is a use of the
  // token taken and the certificate issued. Token failures count against
  // the source (JoinLimiter).
  absl::StatusOr<Admission> Admit(const AdmitRequest& request)
      ABSL_LOCKS_EXCLUDED(mu_);

  // -- Joining: the new node's side (the network part is joiner.h). --

  // A fresh node key and a CSR (PEM) for spiffe://MESH/node/<node name>.
  // FAILED_PRECONDITION when this node is already in a mesh.
  absl::StatusOr<std::pair<pki::PrivateKey, std::string>> PrepareJoin(
      const std::string& mesh) ABSL_LOCKS_EXCLUDED(mu_);
  // Enters the mesh with what `via` (at `via_address`) admitted: checks the
  // certificate (chains to the CA, names this node, is for `key`), writes
  // the files, records the membership, the revocations and the
  // authorities, and trusts the CA. A crash before the membership row is
  // written leaves a node that is not in a mesh.
  absl::Status CompleteJoin(pki::PrivateKey key, const Admission& admitted,
                            const std::string& via_address)
      ABSL_LOCKS_EXCLUDED(mu_);

  // -- Certificate rotation. --

  // When this node's certificate is due for renewal (two thirds of its
  // life, counted from its issue time).
  pki::RotationPlan Rotation() const ABSL_LOCKS_EXCLUDED(mu_);
  // A CSR (PEM) for this node's own identity with its existing key.
  absl::StatusOr<std::string> RenewalCsr() const ABSL_LOCKS_EXCLUDED(mu_);
  // An authority renews the certificate of node `node` (the caller,
  // authenticated by its current certificate): the CSR must ask for that
  // node's identity. FAILED_PRECONDITION when this node is not an
  // authority.
  absl::StatusOr<std::string> RenewFor(const std::string& node,
                                       absl::string_view csr)
      ABSL_LOCKS_EXCLUDED(mu_);
  // An authority renews its own certificate.
  absl::Status RenewSelf() ABSL_LOCKS_EXCLUDED(mu_);
  // Installs a renewed certificate for this node's key: checked like a
  // joined one, written atomically in place of node.crt (the TLS
  // credentials re-read it), and used from then on.
  absl::Status InstallNodeCertificate(const std::string& pem)
      ABSL_LOCKS_EXCLUDED(mu_);

  // -- Revocation. --

  // Revokes `target` (a name, or a serial) as `kind` ("node", "user",
  // "serial", or empty: a serial when it is 16 or more hex digits, else a
  // node). Authorities only. Returns the new list, already in force here.
  absl::StatusOr<pki::RevocationList> Revoke(const std::string& target,
                                             const std::string& kind)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Merges a list pushed by the node `from`, which must be an authority
  // this node knows (PERMISSION_DENIED otherwise). True when it changed
  // this node's list.
  absl::StatusOr<bool> MergeRevocations(const pki::RevocationList& list,
                                        const std::string& from)
      ABSL_LOCKS_EXCLUDED(mu_);
  pki::RevocationList Revocations() const;

  // -- The revocation list in the replicated store. --
  //
  // Each authority publishes its list under kRevocationsNamespace, keyed by
  // its node name, signed with the mesh CA key (mycel.v1.SignedRevocations
  // as JSON); every node merges every such list it receives. Changes are
  // relayed, so the origin a change claims proves nothing: the CA
  // signature is what a receiver trusts, and a union never loses an entry,
  // so a stale copy replayed later takes nothing back.

  // The value this authority publishes now. FAILED_PRECONDITION on a node
  // that is not an authority (it holds no CA key).
  absl::StatusOr<std::string> SignedRevocations() const
      ABSL_LOCKS_EXCLUDED(mu_);
  // Merges a value published under `key`. INVALID_ARGUMENT when it is
  // malformed, not this mesh's CA's signature, or signed for another key.
  // True when it changed this node's list.
  absl::StatusOr<bool> MergeSignedRevocations(absl::string_view key,
                                              absl::string_view value)
      ABSL_LOCKS_EXCLUDED(mu_);
  // -- Join tokens in the replicated store. --
  //
  // An authority publishes each token it makes, revokes or uses under
  // kTokensNamespace (mycel.v1.SignedJoinToken as JSON, signed with the CA
  // key), and every node merges what it receives into its own table, so a
  // token made on one authority admits on any other, and a revocation made
  // on any authority holds on all. Uses are counted by merging: each copy
  // carries its publisher's uses_left, and the smaller wins; two joins with
  // one token at two authorities within one replication delay can both
  // pass (docs/security.md).

  // The value this authority publishes for token `id` now.
  // FAILED_PRECONDITION on a node that is not an authority; NOT_FOUND for
  // an unknown token.
  absl::StatusOr<std::string> SignedToken(const std::string& id) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // Merges a value published under `key` (the token id). INVALID_ARGUMENT
  // when malformed, not signed by this mesh's CA, or for another id. True
  // when it changed this node's copy.
  absl::StatusOr<bool> MergeSignedToken(absl::string_view key,
                                        absl::string_view value)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Called with a token's id after CreateToken, RevokeToken or a join that
  // used it (outside the lock, on the caller's thread), so that the daemon
  // publishes it. Set once, before serving.
  void SetTokenListener(std::function<void(const std::string&)> fn) {
    token_listener_ = std::move(fn);
  }

  // Called after Revoke changed the list (outside the lock, on the caller's
  // thread), so that the daemon publishes it. Set once, before serving.
  void SetRevokedListener(std::function<void()> fn) {
    revoked_listener_ = std::move(fn);
  }

  // The nodes this node knows directly (mesh_peers).
  absl::StatusOr<std::vector<PeerRow>> Peers();

  // Channels to the other nodes, with this node's credentials; null when
  // not in a mesh. Valid for the life of this object once set.
  PeerChannels* channels() const ABSL_LOCKS_EXCLUDED(mu_);

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
  absl::Status RequireAuthorityLocked(absl::string_view why) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // FAILED_PRECONDITION "node N is not an authority: only a holder of the
  // CA key <does>" on a node without the CA key.
  absl::Status RequireCaKeyLocked(absl::string_view does) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Checks a certificate issued to this node (`pem`) against `ca_pem`, this
  // node's name and `key`.
  absl::StatusOr<pki::Certificate> CheckOwnCertificate(
      const std::string& pem, const std::string& ca_pem,
      const pki::PrivateKey& key) const;
  // Admit, without telling the token listener.
  absl::StatusOr<Admission> AdmitHere(const AdmitRequest& request)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Revoke, without telling the listener.
  absl::StatusOr<pki::RevocationList> RevokeHere(const std::string& target,
                                                 const std::string& kind)
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status SetRevocationsLocked(const pki::RevocationList& list)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  std::function<void()> revoked_listener_;
  std::function<void(const std::string&)> token_listener_;
  MeshStore store_;
  // A token was made, used, revoked or merged here: AdmitsJoins reads the
  // table again.
  void TokensChanged() ABSL_LOCKS_EXCLUDED(admits_mu_);

  mutable absl::Mutex mu_;
  // AdmitsJoins's last answer, good while no token changed (`generation`
  // is token_generation_ then) and before `until`.
  struct AdmitsAnswer {
    uint64_t generation = UINT64_MAX;
    bool open = false;
    absl::Time until = absl::InfinitePast();
  };
  absl::Mutex admits_mu_ ABSL_ACQUIRED_AFTER(mu_);
  uint64_t token_generation_ ABSL_GUARDED_BY(admits_mu_) = 0;
  AdmitsAnswer admits_ ABSL_GUARDED_BY(admits_mu_);
  std::optional<MeshRow> row_ ABSL_GUARDED_BY(mu_);
  std::optional<pki::CertificateAuthority> ca_ ABSL_GUARDED_BY(mu_);
  std::optional<pki::Certificate> ca_cert_ ABSL_GUARDED_BY(mu_);
  std::optional<NodeCredentials> node_ ABSL_GUARDED_BY(mu_);
  std::optional<pki::PrivateKey> node_key_ ABSL_GUARDED_BY(mu_);
  absl::Time node_issued_ ABSL_GUARDED_BY(mu_);
  absl::Time node_expires_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<PeerChannels> channels_ ABSL_GUARDED_BY(mu_);
  JoinLimiter limiter_{options_.join_limits};
};

}  // namespace mycel::identity

#endif  // MYCEL_MESH_IDENTITY_MESH_NODE_H_
