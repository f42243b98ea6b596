// Joining, renewal and revocation between MeshNodes, without the network:
// each node has its own state database and directory, and the calls the
// daemon's Mesh service would make are made directly. The wire (the CA pin,
// mTLS, the rate limit per source) is tested in
// tests/integration/mesh/join_test.cc.
#include <doctest/doctest.h>

#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "daemon/config.h"
#include "daemon/store/store.h"
#include "google/protobuf/util/json_util.h"
#include "mesh/identity/join_limiter.h"
#include "mesh/identity/mesh_node.h"
#include "mesh/identity/trust.h"
#include "mesh/pki/certificate.h"
#include "mesh/pki/certificate_request.h"
#include "mesh/pki/peer_identity.h"
#include "mycel/v1/mesh.pb.h"
#include "runtime/fs.h"
#include "runtime/manual_clock.h"
#include "tests/testing/process.h"

namespace mycel::identity {
namespace {

using testing::TempDir;

ManualClock& Clock() {
  static ManualClock* clock = new ManualClock(absl::Now());
  return *clock;
}

struct TestNode {
  explicit TestNode(std::string name,
                    absl::Duration validity = pki::kDefaultNodeValidity,
                    JoinLimiter::Options limits = {},
                    absl::Duration token_retention = absl::Hours(1),
                    std::function<absl::StatusOr<bool>(const std::string&)>
                        name_in_use = nullptr)
      : name(std::move(name)) {
    store = *store::Store::Open(dir.Sub("mycel.db"));
    node = *MeshNode::Open({.state_dir = dir.path(),
                            .node_name = this->name,
                            .store = store.get(),
                            .trust = &trust,
                            .clock = &Clock(),
                            .node_validity = validity,
                            .join_limits = limits,
                            .token_retention = token_retention,
                            .name_in_use = std::move(name_in_use)});
  }
  // Reopens the node from its directory and database, as a restart does.
  void Restart() {
    node.reset();
    store.reset();
    store = *store::Store::Open(dir.Sub("mycel.db"));
    node = *MeshNode::Open({.state_dir = dir.path(),
                            .node_name = name,
                            .store = store.get(),
                            .trust = &trust,
                            .clock = &Clock()});
  }

  std::string name;
  TempDir dir;
  Trust trust;
  std::unique_ptr<store::Store> store;
  std::unique_ptr<MeshNode> node;
};

// The token's id and secret, as the joining node sends them.
AdmitRequest Request(const std::string& token_text, const std::string& csr,
                     const std::string& address = "127.0.0.1:7001") {
  pki::JoinToken token = *pki::JoinToken::Parse(token_text);
  return {.token_id = token.id(),
          .secret = token.secret(),
          .csr = csr,
          .address = address,
          .source = "10.0.0.9"};
}

// Joins `joiner` to `authority`'s mesh with a fresh token.
absl::Status Join(TestNode& authority, TestNode& joiner, bool as_authority,
                  bool token_allows_authority = false) {
  auto token =
      authority.node->CreateToken(absl::Hours(1), 1, token_allows_authority);
  if (!token.ok()) return token.status();
  auto prepared = joiner.node->PrepareJoin(authority.node->Status().mesh);
  if (!prepared.ok()) return prepared.status();
  AdmitRequest req = Request(token->first, prepared->second);
  req.authority = as_authority;
  absl::StatusOr<Admission> a = authority.node->Admit(req);
  if (!a.ok()) return a.status();
  return joiner.node->CompleteJoin(std::move(prepared->first), *a,
                                   "127.0.0.1:7000");
}

TEST_CASE("a node joins with a token, and stays a member across a restart") {
  TestNode a("a"), b("b");
  REQUIRE(a.node->Init("test", "admin").ok());
  REQUIRE(Join(a, b, false).ok());
  MeshStatus s = b.node->Status();
  CHECK(s.mesh == "test");
  CHECK(s.spiffe_id == "spiffe://test/node/b");
  CHECK_FALSE(s.authority);
  CHECK(s.ca_fingerprint == a.node->Status().ca_fingerprint);
  // The key was made by b and never left it: only b's directory holds it.
  CHECK(ReadFile(b.dir.Sub("mesh/node.key")).ok());
  CHECK_FALSE(ReadFile(b.dir.Sub("mesh/ca.key")).ok());
  // Both sides recorded the other.
  auto a_peers = *a.node->Peers();
  REQUIRE(a_peers.size() == 1);
  CHECK(a_peers[0].name == "b");
  CHECK_FALSE(a_peers[0].authority);
  auto b_peers = *b.node->Peers();
  REQUIRE(b_peers.size() == 1);
  CHECK(b_peers[0].name == "a");
  CHECK(b_peers[0].authority);
  // A restart keeps it all, without the token.
  b.Restart();
  CHECK(b.node->Status().mesh == "test");
  CHECK(b.node->Credentials().has_value());
  CHECK(b.trust.mesh() == "test");
  // And it cannot join again.
  CHECK(b.node->PrepareJoin("test").status().code() ==
        absl::StatusCode::kFailedPrecondition);
}

TEST_CASE("bad tokens are refused and take no use") {
  TestNode a("a"), b("b");
  REQUIRE(a.node->Init("test", "admin").ok());
  auto csr = *b.node->PrepareJoin("test");

  SUBCASE("wrong secret") {
    auto token = *a.node->CreateToken(absl::Hours(1), 1);
    AdmitRequest req = Request(token.first, csr.second);
    req.secret[0] ^= 1;
    absl::Status s = a.node->Admit(req).status();
    CHECK(s.code() == absl::StatusCode::kUnauthenticated);
    CHECK(s.message().find("wrong secret") != absl::string_view::npos);
    CHECK((*a.node->ListTokens())[0].uses_left == 1);
  }
  SUBCASE("revoked") {
    auto token = *a.node->CreateToken(absl::Hours(1), 1);
    REQUIRE(a.node->RevokeToken(token.second.id).ok());
    absl::Status s = a.node->Admit(Request(token.first, csr.second)).status();
    CHECK(s.code() == absl::StatusCode::kUnauthenticated);
    CHECK(s.message().find("revoked") != absl::string_view::npos);
  }
  SUBCASE("expired") {
    auto token = *a.node->CreateToken(absl::Seconds(30), 1);
    Clock().Advance(absl::Seconds(31));
    absl::Status s = a.node->Admit(Request(token.first, csr.second)).status();
    CHECK(s.code() == absl::StatusCode::kUnauthenticated);
    CHECK(s.message().find("expired") != absl::string_view::npos);
  }
  SUBCASE("used up") {
    auto token = *a.node->CreateToken(absl::Hours(1), 1);
    REQUIRE(a.node->Admit(Request(token.first, csr.second)).ok());
    TestNode c("c");
    auto csr_c = *c.node->PrepareJoin("test");
    absl::Status s = a.node->Admit(Request(token.first, csr_c.second)).status();
    CHECK(s.code() == absl::StatusCode::kUnauthenticated);
    CHECK(s.message().find("used up") != absl::string_view::npos);
  }
  SUBCASE("a token of another mesh") {
    TestNode other("o");
    REQUIRE(other.node->Init("other", "admin").ok());
    auto token = *other.node->CreateToken(absl::Hours(1), 1);
    absl::Status s = a.node->Admit(Request(token.first, csr.second)).status();
    CHECK(s.code() == absl::StatusCode::kUnauthenticated);
    CHECK(s.message().find("is not known to node a") !=
          absl::string_view::npos);
  }
  SUBCASE("a truncated secret") {
    auto token = *a.node->CreateToken(absl::Hours(1), 1);
    AdmitRequest req = Request(token.first, csr.second);
    req.secret.resize(10);
    CHECK(a.node->Admit(req).status().code() ==
          absl::StatusCode::kInvalidArgument);
  }
  // b never got in.
  CHECK(b.node->Status().mesh.empty());
}

TEST_CASE("bad CSRs are refused, and keep the token's use") {
  TestNode a("a"), b("b");
  REQUIRE(a.node->Init("test", "admin").ok());
  auto token = *a.node->CreateToken(absl::Hours(1), 1);
  auto csr = *b.node->PrepareJoin("test");
  auto admit = [&](const std::string& pem) {
    return a.node->Admit(Request(token.first, pem)).status();
  };

  SUBCASE("garbage") {
    absl::Status s = admit("not a CSR at all");
    CHECK(s.code() == absl::StatusCode::kInvalidArgument);
    CHECK(s.message().find("csr") != absl::string_view::npos);
  }
  SUBCASE("truncated") {
    absl::Status s = admit(csr.second.substr(0, csr.second.size() / 2));
    CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  }
  SUBCASE("another node's name: the authority itself") {
    TestNode impostor("a");
    auto other = *impostor.node->PrepareJoin("test");
    absl::Status s = admit(other.second);
    CHECK(s.code() == absl::StatusCode::kAlreadyExists);
    CHECK(s.message().find("node a is already a member") !=
          absl::string_view::npos);
  }
  SUBCASE("a member's name") {
    TestNode c("c");
    REQUIRE(Join(a, c, false).ok());
    TestNode impostor("c");
    auto other = *impostor.node->PrepareJoin("test");
    absl::Status s = admit(other.second);
    CHECK(s.code() == absl::StatusCode::kAlreadyExists);
  }
  SUBCASE("a user identity") {
    pki::PrivateKey key = *pki::PrivateKey::Generate();
    auto id = *pki::SpiffeId::Create(pki::IdentityKind::kUser, "test", "eve");
    std::string pem = *pki::CertificateRequest::Create(id, key)->ToPem();
    absl::Status s = admit(pem);
    CHECK(s.code() == absl::StatusCode::kInvalidArgument);
    CHECK(s.message().find("nodes only") != absl::string_view::npos);
  }
  SUBCASE("another mesh") {
    auto other = *b.node->PrepareJoin("elsewhere");
    CHECK(admit(other.second).code() == absl::StatusCode::kInvalidArgument);
  }
  SUBCASE("no address") {
    AdmitRequest req = Request(token.first, csr.second, "");
    absl::Status s = a.node->Admit(req).status();
    CHECK(s.code() == absl::StatusCode::kInvalidArgument);
    CHECK(s.message().find("address") != absl::string_view::npos);
  }
  std::vector<pki::StoredJoinToken> tokens = *a.node->ListTokens();
  for (const pki::StoredJoinToken& t : tokens) {
    if (t.id == token.second.id) CHECK(t.uses_left == 1);
  }
}

TEST_CASE("authorities: only they admit, only with a token that allows it") {
  TestNode a("a"), b("b"), c("c"), d("d");
  REQUIRE(a.node->Init("test", "admin").ok());
  // A plain token does not make an authority.
  absl::Status s = Join(a, b, /*as_authority=*/true);
  CHECK(s.code() == absl::StatusCode::kPermissionDenied);
  CHECK(s.message().find("--authority") != absl::string_view::npos);
  REQUIRE(Join(a, b, false).ok());
  // b is not an authority: it admits no one, and names the one it knows.
  s = b.node->CreateToken(absl::Hours(1), 1).status();
  CHECK(s.code() == absl::StatusCode::kFailedPrecondition);
  auto prepared = *c.node->PrepareJoin("test");
  s = b.node
          ->Admit(Request("mycel1.aaaaaa." + std::string(64, '0') + "." +
                              std::string(64, '0'),
                          prepared.second))
          .status();
  CHECK(s.code() == absl::StatusCode::kFailedPrecondition);
  CHECK(s.message().find("authorities it knows: a (127.0.0.1:7000)") !=
        absl::string_view::npos);
  // c joins as an authority and receives the CA key; d joins through c.
  REQUIRE(Join(a, c, true, true).ok());
  CHECK(c.node->Status().authority);
  CHECK(ReadFile(c.dir.Sub("mesh/ca.key")).ok());
  REQUIRE(Join(c, d, false).ok());
  CHECK(d.node->Status().ca_fingerprint == a.node->Status().ca_fingerprint);
}

TEST_CASE("renewal: an authority signs a node's own name only") {
  TestNode a("a"), b("b", absl::Hours(3));
  REQUIRE(a.node->Init("test", "admin").ok());
  REQUIRE(Join(a, b, false).ok());
  absl::Time expires = b.node->Status().certificate_expires;
  CHECK_FALSE(b.node->Rotation().due);
  std::string csr = *b.node->RenewalCsr();
  // b's CSR for another node's name is refused.
  CHECK(a.node->RenewFor("c", csr).status().code() ==
        absl::StatusCode::kInvalidArgument);
  Clock().Advance(absl::Hours(24 * 21));
  CHECK(b.node->Rotation().due);
  std::string pem = *a.node->RenewFor("b", csr);
  REQUIRE(b.node->InstallNodeCertificate(pem).ok());
  CHECK(b.node->Status().certificate_expires > expires);
  CHECK_FALSE(b.node->Rotation().due);
  CHECK(*ReadFile(b.dir.Sub("mesh/node.crt")) == pem);
  // A certificate for another key is not installed.
  TestNode c("b");
  auto other = *c.node->PrepareJoin("test");
  std::string foreign = *a.node->RenewFor("b", other.second);
  CHECK(b.node->InstallNodeCertificate(foreign).code() ==
        absl::StatusCode::kInvalidArgument);
  // An authority renews itself.
  Clock().Advance(absl::Hours(24 * 21));
  CHECK(a.node->Rotation().due);
  REQUIRE(a.node->RenewSelf().ok());
  CHECK_FALSE(a.node->Rotation().due);
}

TEST_CASE("revocation: authorities revoke, members take lists only from them") {
  TestNode a("a"), b("b"), c("c");
  REQUIRE(a.node->Init("test", "admin").ok());
  REQUIRE(Join(a, b, false).ok());
  REQUIRE(Join(a, c, false).ok());
  // b is not an authority.
  CHECK(b.node->Revoke("c", "").status().code() ==
        absl::StatusCode::kFailedPrecondition);
  CHECK(a.node->Revoke("a", "").status().code() ==
        absl::StatusCode::kFailedPrecondition);
  CHECK(a.node->Revoke("Bad Name", "node").status().code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(a.node->Revoke("c", "group").status().code() ==
        absl::StatusCode::kInvalidArgument);
  pki::RevocationList list = *a.node->Revoke("c", "");
  CHECK(list.IdentityRevokedAt(pki::IdentityKind::kNode, "c").has_value());
  // From a (an authority b knows): taken, once.
  CHECK(*b.node->MergeRevocations(list, "a"));
  CHECK_FALSE(*b.node->MergeRevocations(list, "a"));
  CHECK(b.trust.revocations()
            .IdentityRevokedAt(pki::IdentityKind::kNode, "c")
            .has_value());
  // From c (not an authority): refused, and nothing changes.
  pki::RevocationList forged;
  REQUIRE(
      forged.RevokeIdentity(pki::IdentityKind::kNode, "a", Clock().Now()).ok());
  CHECK(b.node->MergeRevocations(forged, "c").status().code() ==
        absl::StatusCode::kPermissionDenied);
  CHECK_FALSE(b.trust.revocations()
                  .IdentityRevokedAt(pki::IdentityKind::kNode, "a")
                  .has_value());
  // A serial: 16 or more hex digits.
  std::string serial = (*a.node->Peers())[0].serial;
  list = *a.node->Revoke(serial, "");
  CHECK(list.SerialRevokedAt(serial).has_value());
  // The list survives a restart.
  b.Restart();
  CHECK(b.trust.revocations()
            .IdentityRevokedAt(pki::IdentityKind::kNode, "c")
            .has_value());
  // A revoked name may join again, with a new certificate, at once: the
  // list keeps times to the second, and the certificate issued within the
  // second of the revocation is not refused with the old ones.
  TestNode c2("c");
  auto token = a.node->CreateToken(absl::Hours(1), 1, false);
  REQUIRE(token.ok());
  auto prepared = c2.node->PrepareJoin(a.node->Status().mesh);
  REQUIRE(prepared.ok());
  absl::StatusOr<Admission> admitted =
      a.node->Admit(Request(token->first, prepared->second));
  REQUIRE_MESSAGE(admitted.ok(), admitted.status());
  absl::StatusOr<pki::PeerIdentity> c2_id =
      pki::ParsePeerIdentity(admitted->cert_pem);
  REQUIRE(c2_id.ok());
  CHECK_MESSAGE(a.node->Revocations().Check(*c2_id).ok(),
                a.node->Revocations().Check(*c2_id));
  CHECK(b.trust.revocations().Check(*c2_id).ok());
  CHECK(c2.node
            ->CompleteJoin(std::move(prepared->first), *admitted,
                           "127.0.0.1:7000")
            .ok());
  // Its replicated changes carry the origin of its key (c's are revoked),
  // read from its state directory before its store opens; b's is its name.
  const std::string key =
      *pki::Certificate::FromPem(admitted->cert_pem)->KeyId();
  CHECK(*MeshNode::OriginOf(c2.dir.path(), "c") == "c~" + key);
  CHECK(*MeshNode::OriginOf(b.dir.path(), "b") == "b");
  REQUIRE(WriteFile(c2.dir.Sub("mesh/origin"), "d~" + key + "\n").ok());
  absl::StatusOr<std::string> bad = MeshNode::OriginOf(c2.dir.path(), "c");
  CHECK(bad.status().code() == absl::StatusCode::kDataLoss);
  CHECK(absl::StrContains(bad.status().message(), "not an origin of node c"));
  // The same for a user revoked and added again.
  absl::StatusOr<UserCredentials> bob =
      a.node->AddUser("bob", pki::Role::kViewer);
  REQUIRE(bob.ok());
  REQUIRE(a.node->Revoke("bob", "user").ok());
  absl::StatusOr<pki::PeerIdentity> old_bob =
      pki::ParsePeerIdentity(bob->cert_pem);
  REQUIRE(old_bob.ok());
  CHECK(a.node->Revocations().Check(*old_bob).code() ==
        absl::StatusCode::kUnauthenticated);
  bob = a.node->AddUser("bob", pki::Role::kViewer);
  REQUIRE(bob.ok());
  absl::StatusOr<pki::PeerIdentity> new_bob =
      pki::ParsePeerIdentity(bob->cert_pem);
  REQUIRE(new_bob.ok());
  CHECK(a.node->Revocations().Check(*new_bob).ok());
}

TEST_CASE(
    "revocations in the replicated store: only the CA's signature counts") {
  TestNode a("a"), b("b"), c("c"), other("x");
  REQUIRE(a.node->Init("test", "admin").ok());
  REQUIRE(other.node->Init("test", "admin").ok());  // same name, another CA
  REQUIRE(Join(a, b, false).ok());
  REQUIRE(Join(a, c, false).ok());
  int listened = 0;
  a.node->SetRevokedListener([&] { ++listened; });
  REQUIRE(a.node->Revoke("c", "").ok());
  CHECK(listened == 1);
  CHECK(a.node->Revoke("Bad Name", "node").status().code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(listened == 1);  // only a change is published
  // Only a holder of the CA key publishes.
  CHECK(b.node->SignedRevocations().status().code() ==
        absl::StatusCode::kFailedPrecondition);
  std::string value = *a.node->SignedRevocations();
  CHECK(value.find("\"by\":\"a\"") != std::string::npos);
  // b takes it whoever relayed it, once; it names no sender.
  CHECK(*b.node->MergeSignedRevocations("a", value));
  CHECK_FALSE(*b.node->MergeSignedRevocations("a", value));
  CHECK(b.trust.revocations()
            .IdentityRevokedAt(pki::IdentityKind::kNode, "c")
            .has_value());
  // Published under another authority's key: refused.
  CHECK(b.node->MergeSignedRevocations("b", value).status().code() ==
        absl::StatusCode::kInvalidArgument);
  // Signed by another mesh's CA (a mesh of the same name): refused, and
  // nothing changes.
  REQUIRE(other.node->Revoke("a", "node").ok());
  absl::StatusOr<bool> foreign =
      b.node->MergeSignedRevocations("x", *other.node->SignedRevocations());
  CHECK(foreign.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(absl::StrContains(foreign.status().message(), "not signed by the CA"));
  CHECK_FALSE(b.trust.revocations()
                  .IdentityRevokedAt(pki::IdentityKind::kNode, "a")
                  .has_value());
  // A list altered in transit (one entry added, signature kept): refused.
  mycel::v1::SignedRevocations msg;
  REQUIRE(google::protobuf::util::JsonStringToMessage(value, &msg).ok());
  pki::RevocationList tampered = *pki::RevocationList::Parse(msg.list());
  REQUIRE(tampered.RevokeIdentity(pki::IdentityKind::kNode, "a", Clock().Now())
              .ok());
  msg.set_list(tampered.Serialize());
  std::string altered;
  REQUIRE(google::protobuf::util::MessageToJsonString(msg, &altered).ok());
  CHECK(b.node->MergeSignedRevocations("a", altered).status().code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK_FALSE(b.trust.revocations()
                  .IdentityRevokedAt(pki::IdentityKind::kNode, "a")
                  .has_value());
  // Garbage: INVALID_ARGUMENT naming the key.
  absl::StatusOr<bool> garbage = b.node->MergeSignedRevocations("a", "{]");
  CHECK(garbage.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(absl::StrContains(garbage.status().message(), "revocations of a"));
}

TEST_CASE(
    "join tokens in the replicated store: any authority admits, uses and "
    "revocations merge, and only the CA's signature counts") {
  TestNode a("a"), b("b"), c("c"), d("d"), other("x");
  REQUIRE(a.node->Init("test", "admin").ok());
  REQUIRE(other.node->Init("test", "admin").ok());
  REQUIRE(Join(a, b, true, true).ok());  // b: a second authority
  std::vector<std::string> published;
  a.node->SetTokenListener(
      [&](const std::string& id) { published.push_back("a:" + id); });
  b.node->SetTokenListener(
      [&](const std::string& id) { published.push_back("b:" + id); });
  // Made on a, one use; b learns it from a's signed copy.
  auto made = a.node->CreateToken(absl::Hours(1), 1, false);
  REQUIRE(made.ok());
  const std::string id = made->second.id;
  CHECK(published == std::vector<std::string>{"a:" + id});
  CHECK(b.node->SignedToken("nope0000").status().code() ==
        absl::StatusCode::kNotFound);
  const std::string from_a = *a.node->SignedToken(id);
  CHECK(*b.node->MergeSignedToken(id, from_a));
  CHECK_FALSE(*b.node->MergeSignedToken(id, from_a));
  // b admits c with it, and says so.
  auto prepared = c.node->PrepareJoin("test");
  REQUIRE(prepared.ok());
  auto admitted = b.node->Admit(Request(made->first, prepared->second));
  REQUIRE_MESSAGE(admitted.ok(), admitted.status().ToString());
  CHECK(published.back() == "b:" + id);
  // a takes b's copy: the use is spent there too, and a refuses d.
  CHECK(*a.node->MergeSignedToken(id, *b.node->SignedToken(id)));
  auto d_prepared = d.node->PrepareJoin("test");
  REQUIRE(d_prepared.ok());
  auto refused = a.node->Admit(Request(made->first, d_prepared->second));
  CHECK(refused.status().code() == absl::StatusCode::kUnauthenticated);
  // a's older copy (one use left) replayed: it gives nothing back.
  CHECK_FALSE(*b.node->MergeSignedToken(id, from_a));
  auto uses_left = [](TestNode& n, const std::string& token) -> int64_t {
    auto tokens = n.node->ListTokens();
    REQUIRE(tokens.ok());
    for (const pki::StoredJoinToken& t : *tokens) {
      if (t.id == token) return t.uses_left;
    }
    return -1;
  };
  CHECK(uses_left(b, id) == 0);

  // Revoked on b (made on a): a takes it, and a replayed unrevoked copy
  // does not undo it.
  auto second = a.node->CreateToken(absl::Hours(1), 5, false);
  REQUIRE(second.ok());
  const std::string id2 = second->second.id;
  const std::string unrevoked = *a.node->SignedToken(id2);
  REQUIRE(*b.node->MergeSignedToken(id2, unrevoked));
  REQUIRE(b.node->RevokeToken(id2).ok());
  CHECK(published.back() == "b:" + id2);
  CHECK(*a.node->MergeSignedToken(id2, *b.node->SignedToken(id2)));
  CHECK_FALSE(*a.node->MergeSignedToken(id2, unrevoked));
  auto d_again = a.node->Admit(Request(second->first, d_prepared->second));
  CHECK(d_again.status().code() == absl::StatusCode::kUnauthenticated);
  CHECK(absl::StrContains(d_again.status().message(), "revoked"));

  // Refused: another CA's token, a copy with more uses than signed, one
  // filed under another id, garbage; nothing changes.
  auto foreign = other.node->CreateToken(absl::Hours(1), 1, true);
  REQUIRE(foreign.ok());
  auto f = b.node->MergeSignedToken(
      foreign->second.id, *other.node->SignedToken(foreign->second.id));
  CHECK(f.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(absl::StrContains(f.status().message(), "not signed by the CA"));
  mycel::v1::SignedJoinToken msg;
  REQUIRE(google::protobuf::util::JsonStringToMessage(from_a, &msg).ok());
  msg.set_uses_left(1000);
  std::string more;
  REQUIRE(google::protobuf::util::MessageToJsonString(msg, &more).ok());
  CHECK(b.node->MergeSignedToken(id, more).status().code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(b.node->MergeSignedToken(id2, from_a).status().code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(b.node->MergeSignedToken(id, "[]").status().code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(b.node->ListTokens()->size() == 2);
  CHECK(uses_left(b, id) == 0);
  CHECK(uses_left(b, id2) == 5);
  // Only an authority signs one.
  CHECK(c.node->SignedToken(id).status().code() ==
        absl::StatusCode::kFailedPrecondition);
}

// AdmitsJoins is asked at every TCP accept and every handshake without a
// certificate; its answer is kept until a token changes or expires. Every
// change must show at once.
TEST_CASE(
    "a name known elsewhere in the mesh is refused; one not checkable too") {
  // The daemon tells the authority of names that membership or the
  // replicated store know (Options::name_in_use); a store it cannot read
  // refuses the join rather than admit a second node under a name.
  TestNode a("a", pki::kDefaultNodeValidity, {}, absl::Hours(1),
             [](const std::string& name) -> absl::StatusOr<bool> {
               if (name == "broken") {
                 return absl::UnavailableError("the store is away");
               }
               return name == "known";
             });
  REQUIRE(a.node->Init("test", "admin").ok());
  auto token = a.node->CreateToken(absl::Hours(1), 1, false);
  REQUIRE(token.ok());
  auto admit = [&](const std::string& name) {
    TestNode joiner(name);
    auto prepared = joiner.node->PrepareJoin("test");
    REQUIRE(prepared.ok());
    return a.node->Admit(Request(token->first, prepared->second)).status();
  };
  absl::Status known = admit("known");
  CHECK(known.code() == absl::StatusCode::kAlreadyExists);
  CHECK(absl::StrContains(known.message(), "node known is already a member"));
  absl::Status broken = admit("broken");
  CHECK(broken.code() == absl::StatusCode::kUnavailable);
  CHECK(absl::StrContains(broken.message(),
                          "checking whether node broken is in the mesh"));
  // Neither took the token's one use.
  CHECK(admit("fresh").ok());
}

TEST_CASE("an authority admits joins exactly while a token is open") {
  TestNode a("a"), b("b"), c("c");
  CHECK_FALSE(a.node->AdmitsJoins());  // not in a mesh
  REQUIRE(a.node->Init("test", "admin").ok());
  CHECK_FALSE(a.node->AdmitsJoins());  // no token
  CHECK_FALSE(a.node->AdmitsJoins());
  auto one_use = a.node->CreateToken(absl::Hours(1), 1, true);
  REQUIRE(one_use.ok());
  CHECK(a.node->AdmitsJoins());
  CHECK(a.node->AdmitsJoins());
  // Its one use taken by a join: closed.
  auto prepared = b.node->PrepareJoin("test");
  REQUIRE(prepared.ok());
  AdmitRequest req = Request(one_use->first, prepared->second);
  req.authority = true;
  absl::StatusOr<Admission> admitted = a.node->Admit(req);
  REQUIRE(admitted.ok());
  REQUIRE(b.node
              ->CompleteJoin(std::move(prepared->first), *admitted,
                             "127.0.0.1:7000")
              .ok());
  CHECK_FALSE(a.node->AdmitsJoins());
  // A short one: open until it expires.
  auto brief = a.node->CreateToken(absl::Seconds(10), 5, false);
  REQUIRE(brief.ok());
  CHECK(a.node->AdmitsJoins());
  Clock().Advance(absl::Seconds(9));
  CHECK(a.node->AdmitsJoins());
  Clock().Advance(absl::Seconds(2));
  CHECK_FALSE(a.node->AdmitsJoins());
  // Revoked: closed.
  auto revoked = a.node->CreateToken(absl::Hours(1), 5, false);
  REQUIRE(revoked.ok());
  CHECK(a.node->AdmitsJoins());
  REQUIRE(a.node->RevokeToken(revoked->second.id).ok());
  CHECK_FALSE(a.node->AdmitsJoins());
  // Another authority's token, merged from the replicated store: open on
  // b, which made none; closed there when its revocation is merged.
  CHECK_FALSE(b.node->AdmitsJoins());
  auto shared = a.node->CreateToken(absl::Hours(1), 5, false);
  REQUIRE(shared.ok());
  const std::string id = shared->second.id;
  REQUIRE(*b.node->MergeSignedToken(id, *a.node->SignedToken(id)));
  CHECK(b.node->AdmitsJoins());
  REQUIRE(a.node->RevokeToken(id).ok());
  REQUIRE(*b.node->MergeSignedToken(id, *a.node->SignedToken(id)));
  CHECK_FALSE(b.node->AdmitsJoins());
  // c is no authority: never.
  REQUIRE(Join(a, c, false).ok());
  CHECK_FALSE(c.node->AdmitsJoins());
}

TEST_CASE("join limiter: a source's failures are bounded, per source") {
  JoinLimiter limiter({.burst = 3, .refill = absl::Seconds(10)});
  absl::Time t = absl::UnixEpoch();
  for (int i = 0; i < 3; ++i) {
    CHECK(limiter.Check("10.0.0.1", t).ok());
    limiter.RecordFailure("10.0.0.1", t);
  }
  absl::Status s = limiter.Check("10.0.0.1", t);
  CHECK(s.code() == absl::StatusCode::kResourceExhausted);
  CHECK(s.message() == "too many failed joins from 10.0.0.1; retry in 10s");
  CHECK(limiter.Check("10.0.0.2", t).ok());
  CHECK(limiter.Check("10.0.0.1", t + absl::Seconds(10)).ok());
}

TEST_CASE("the limiter guards Admit: a right token is refused once exhausted") {
  TestNode a("a", pki::kDefaultNodeValidity,
             {.burst = 2, .refill = absl::Hours(1)});
  TestNode b("b");
  REQUIRE(a.node->Init("test", "admin").ok());
  auto token = *a.node->CreateToken(absl::Hours(1), 1);
  auto csr = *b.node->PrepareJoin("test");
  AdmitRequest wrong = Request(token.first, csr.second);
  wrong.secret[5] ^= 0x40;
  CHECK(a.node->Admit(wrong).status().code() ==
        absl::StatusCode::kUnauthenticated);
  CHECK(a.node->Admit(wrong).status().code() ==
        absl::StatusCode::kUnauthenticated);
  CHECK(a.node->Admit(Request(token.first, csr.second)).status().code() ==
        absl::StatusCode::kResourceExhausted);
  AdmitRequest elsewhere = Request(token.first, csr.second);
  elsewhere.source = "10.0.0.10";
  CHECK(a.node->Admit(elsewhere).ok());
}

TEST_CASE("cert_lifetime: parsed, bounded, named in errors") {
  mycel::v1::DaemonConfig config;
  CHECK(*CertLifetime(config) == absl::Hours(720));
  config.set_cert_lifetime("90s");
  CHECK(*CertLifetime(config) == absl::Seconds(90));
  for (const char* bad : {"5s", "9000h", "soon", "-1h"}) {
    config.set_cert_lifetime(bad);
    absl::Status s = CertLifetime(config).status();
    CHECK(s.code() == absl::StatusCode::kInvalidArgument);
    CHECK(s.message().find("cert_lifetime") != absl::string_view::npos);
  }
}

TEST_CASE("expired join tokens are deleted after their retention, for good") {
  TestNode a("a", pki::kDefaultNodeValidity, {}, absl::Seconds(2));
  TestNode b("b");
  REQUIRE(a.node->Init("test", "admin").ok());
  REQUIRE(Join(a, b, true, true).ok());
  auto brief = *a.node->CreateToken(absl::Seconds(1), 1, false);
  auto lasting = *a.node->CreateToken(absl::Hours(1), 1, false);
  const std::string signed_copy = *a.node->SignedToken(brief.second.id);
  const size_t before = a.node->ListTokens()->size();
  // Expired, but within its retention: still listed.
  Clock().Advance(absl::Seconds(2));
  CHECK(a.node->CollectExpiredTokens()->empty());
  CHECK(a.node->GetToken(brief.second.id).ok());
  // Past it: deleted, and only it.
  Clock().Advance(absl::Seconds(2));
  CHECK(*a.node->CollectExpiredTokens() ==
        std::vector<std::string>{brief.second.id});
  CHECK(a.node->GetToken(brief.second.id).status().code() ==
        absl::StatusCode::kNotFound);
  CHECK(a.node->GetToken(lasting.second.id).ok());
  CHECK(a.node->ListTokens()->size() == before - 1);
  CHECK(a.node->CollectExpiredTokens()->empty());
  // A copy published before, arriving late, does not bring it back.
  CHECK_FALSE(*a.node->MergeSignedToken(brief.second.id, signed_copy));
  CHECK(a.node->GetToken(brief.second.id).status().code() ==
        absl::StatusCode::kNotFound);
  // b keeps the default retention (1 h): the same copy is still taken in.
  CHECK(*b.node->MergeSignedToken(brief.second.id, signed_copy));
}

TEST_CASE("token_retention: parsed, bounded, named in errors") {
  mycel::v1::DaemonConfig config;
  CHECK(*TokenRetention(config) == absl::Hours(1));
  config.set_token_retention("0s");
  CHECK(*TokenRetention(config) == absl::ZeroDuration());
  for (const char* bad : {"9000h", "later", "-1s"}) {
    config.set_token_retention(bad);
    absl::Status s = TokenRetention(config).status();
    CHECK(s.code() == absl::StatusCode::kInvalidArgument);
    CHECK(s.message() ==
          absl::StrCat("token_retention: want a duration in 0s..8760h such "
                       "as 1h, got \"",
                       bad, "\""));
  }
}

}  // namespace
}  // namespace mycel::identity
