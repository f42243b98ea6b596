// Verifying peers: the checks a server runs on every handshake and call.
#include <doctest/doctest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "mesh/pki/certificate_authority.h"
#include "mesh/pki/certificate_request.h"
#include "mesh/pki/peer_verifier.h"
#include "mesh/pki/revocation_list.h"
#include "tests/unit/mesh/pki_test_util.h"

namespace mycel::pki {
namespace {

using testing::BuildLeaf;
using testing::Fails;
using testing::MakeCa;
using testing::Must;
using testing::NodeId;
using testing::RawLeaf;
using testing::T0;
using testing::UserId;
constexpr auto kUnauth = absl::StatusCode::kUnauthenticated;

struct Mesh {
  CertificateAuthority ca = MakeCa("prod");
  PeerVerifier verifier = Must(PeerVerifier::Create(ca.certificate()));
  RevocationList revoked;

  std::string NodePem(const std::string& name, absl::Time now = T0()) {
    PrivateKey key = Must(PrivateKey::Generate());
    std::string csr =
        Must(Must(CertificateRequest::Create(NodeId(name), key)).ToPem());
    return Must(
        Must(ca.IssueFromCsr(csr, {NodeId(name), Role::kNode}, now)).ToPem());
  }
  std::string UserPem(const std::string& name, Role role) {
    PublicKey pub = Must(Must(PrivateKey::Generate()).GetPublicKey());
    return Must(Must(ca.IssueForKey(pub, {UserId(name), role}, T0())).ToPem());
  }
};

TEST_CASE("issue and verify round trip: node as client and as server") {
  Mesh m;
  CHECK(m.verifier.mesh() == "prod");
  std::string pem = m.NodePem("web-1");
  for (PeerSide side : {PeerSide::kClient, PeerSide::kServer}) {
    PeerIdentity id = Must(m.verifier.Verify(pem, side, m.revoked, T0()));
    CHECK(id.kind == IdentityKind::kNode);
    CHECK(id.name == "web-1");
    CHECK(id.role == Role::kNode);
    CHECK(id.mesh == "prod");
  }
  // Still fine a second before expiry, and right at notBefore.
  PeerIdentity id =
      Must(m.verifier.Verify(pem, PeerSide::kClient, m.revoked, T0()));
  CHECK(m.verifier
            .Verify(pem, PeerSide::kClient, m.revoked,
                    id.not_after - absl::Seconds(1))
            .ok());
  CHECK(
      m.verifier.Verify(pem, PeerSide::kClient, m.revoked, id.not_before).ok());
}

TEST_CASE("issue and verify round trip: users are clients only") {
  Mesh m;
  std::string admin = m.UserPem("alice", Role::kAdmin);
  PeerIdentity a =
      Must(m.verifier.Verify(admin, PeerSide::kClient, m.revoked, T0()));
  CHECK(a.kind == IdentityKind::kUser);
  CHECK(a.role == Role::kAdmin);
  CHECK(a.spiffe_id == "spiffe://prod/user/alice");
  PeerIdentity v = Must(m.verifier.Verify(m.UserPem("bob", Role::kViewer),
                                          PeerSide::kClient, m.revoked, T0()));
  CHECK(v.role == Role::kViewer);
  CHECK(Fails(m.verifier.Verify(admin, PeerSide::kServer, m.revoked, T0()),
              kUnauth, "a user certificate cannot serve"));
}

TEST_CASE("a certificate from another CA is refused") {
  Mesh m;
  Mesh other_mesh;  // another CA for a mesh with the same name
  CHECK(Fails(m.verifier.Verify(other_mesh.NodePem("web-1"), PeerSide::kClient,
                                m.revoked, T0()),
              kUnauth, "issued by another CA"));
  CertificateAuthority dev = MakeCa("dev");
  PublicKey pub = Must(Must(PrivateKey::Generate()).GetPublicKey());
  std::string dev_pem = Must(
      Must(dev.IssueForKey(pub, {NodeId("web-1", "dev"), Role::kNode}, T0()))
          .ToPem());
  CHECK(Fails(m.verifier.Verify(dev_pem, PeerSide::kClient, m.revoked, T0()),
              kUnauth, "issued by another CA"));
  // The CA certificate itself is not a peer.
  CHECK(Fails(
      m.verifier.Verify(m.ca.certificate(), PeerSide::kClient, m.revoked, T0()),
      kUnauth, "URI SAN"));
}

TEST_CASE("expired and not-yet-valid certificates are refused") {
  Mesh m;
  std::string expired = m.NodePem("web-1", T0() - absl::Hours(24 * 60));
  CHECK(Fails(m.verifier.Verify(expired, PeerSide::kClient, m.revoked, T0()),
              kUnauth, "certificate expired at 2030-05-02T12:00:00Z"));
  std::string future = m.NodePem("web-1", T0() + absl::Hours(24));
  CHECK(Fails(m.verifier.Verify(future, PeerSide::kClient, m.revoked, T0()),
              kUnauth, "certificate not valid before 2030-06-02T11:55:00Z"));
  // Five minutes of skew are tolerated.
  CHECK(m.verifier
            .Verify(m.NodePem("web-1", T0() + absl::Minutes(4)),
                    PeerSide::kClient, m.revoked, T0())
            .ok());
}

TEST_CASE("an expired CA fails its leaves") {
  CertificateAuthority ca = Must(CertificateAuthority::Create(
      "prod", T0() - absl::Hours(48), {.validity = absl::Hours(48)}));
  PeerVerifier verifier = Must(PeerVerifier::Create(ca.certificate()));
  PublicKey pub = Must(Must(PrivateKey::Generate()).GetPublicKey());
  Certificate leaf = Must(ca.IssueForKey(pub, {NodeId("web-1"), Role::kNode},
                                         T0() - absl::Hours(1)));
  // The leaf was capped at the CA's end, so it expires with it.
  CHECK(leaf.not_after() == ca.certificate().not_after());
  CHECK(verifier.Verify(leaf, PeerSide::kClient, {}, T0() - absl::Minutes(1))
            .ok());
  CHECK(Fails(
      verifier.Verify(leaf, PeerSide::kClient, {}, T0() + absl::Seconds(1)),
      kUnauth, "expired at"));
}

TEST_CASE("a revoked serial and a revoked name are refused") {
  Mesh m;
  std::string pem = m.NodePem("web-1");
  PeerIdentity id =
      Must(m.verifier.Verify(pem, PeerSide::kClient, m.revoked, T0()));

  RevocationList by_serial;
  REQUIRE(by_serial.RevokeSerial(id.serial, T0()).ok());
  CHECK(Fails(m.verifier.Verify(pem, PeerSide::kClient, by_serial, T0()),
              kUnauth, "revoked: serial " + id.serial));
  // Other certificates of the same node are unaffected by a serial.
  CHECK(
      m.verifier.Verify(m.NodePem("web-1"), PeerSide::kClient, by_serial, T0())
          .ok());

  RevocationList by_name;
  REQUIRE(
      by_name
          .RevokeIdentity(IdentityKind::kNode, "web-1", T0() + absl::Minutes(1))
          .ok());
  CHECK(Fails(m.verifier.Verify(pem, PeerSide::kClient, by_name,
                                T0() + absl::Minutes(2)),
              kUnauth, "revoked: node web-1 at 2030-06-01T12:01:00Z"));
  // A user of the same name is another identity.
  CHECK(m.verifier
            .Verify(m.UserPem("web-1", Role::kAdmin), PeerSide::kClient,
                    by_name, T0())
            .ok());
  // A certificate issued after the revocation lets the node back in.
  std::string reissued = m.NodePem("web-1", T0() + absl::Minutes(2));
  CHECK(
      m.verifier
          .Verify(reissued, PeerSide::kClient, by_name, T0() + absl::Minutes(3))
          .ok());
}

TEST_CASE("garbage and truncated peer certificates are UNAUTHENTICATED") {
  Mesh m;
  std::string pem = m.NodePem("web-1");
  CHECK(Fails(m.verifier.Verify("", PeerSide::kClient, m.revoked, T0()),
              kUnauth, "peer certificate: empty"));
  CHECK(Fails(m.verifier.Verify("garbage", PeerSide::kClient, m.revoked, T0()),
              kUnauth, "peer certificate: malformed"));
  CHECK(Fails(m.verifier.Verify(pem.substr(0, pem.size() - 40),
                                PeerSide::kClient, m.revoked, T0()),
              kUnauth, "peer certificate: malformed or truncated PEM"));
}

TEST_CASE("leaves this CA signed but that break the rules are refused") {
  Mesh m;
  X509* ca = m.ca.certificate().x509();
  EVP_PKEY* ca_key = m.ca.private_key().evp();
  auto key = testing::GenerateEc("P-256");
  auto verify = [&](const RawLeaf& spec, PeerSide side = PeerSide::kClient) {
    return m.verifier.Verify(BuildLeaf(spec), side, m.revoked, T0());
  };
  RawLeaf good{.issuer = ca, .signer = ca_key, .key = key.get()};
  CHECK(verify(good).ok());

  RawLeaf no_san = good;
  no_san.sans = {};
  CHECK(Fails(verify(no_san), kUnauth, "URI SAN missing"));

  RawLeaf dns = good;
  dns.sans.push_back({GEN_DNS, "web-1.example.com"});
  CHECK(Fails(verify(dns), kUnauth, "DNS SAN not allowed"));

  RawLeaf two = good;
  two.sans.push_back({GEN_URI, "spiffe://prod/node/web-2"});
  CHECK(Fails(verify(two), kUnauth, "2 URI SANs"));

  RawLeaf other_mesh = good;
  other_mesh.sans = {{GEN_URI, "spiffe://dev/node/web-1"}};
  CHECK(Fails(verify(other_mesh), kUnauth,
              "certificate is for mesh \"dev\", not \"prod\""));

  RawLeaf cn = good;
  cn.common_name = "web-2";
  CHECK(Fails(verify(cn), kUnauth, "subject CN \"web-2\" differs"));

  RawLeaf admin_node = good;
  admin_node.organization = "mycel:admin";
  CHECK(Fails(verify(admin_node), kUnauth, "admin cannot be held by a node"));

  RawLeaf no_role = good;
  no_role.organization = "system:masters";
  CHECK(Fails(verify(no_role), kUnauth, "subject O"));

  RawLeaf ca_leaf = good;
  ca_leaf.basic_constraints = "critical,CA:TRUE";
  ca_leaf.key_usage = "critical,digitalSignature,keyCertSign";
  CHECK(Fails(verify(ca_leaf), kUnauth, "certificate is a CA"));

  RawLeaf signer = good;
  signer.key_usage = "critical,digitalSignature,cRLSign";
  CHECK(Fails(verify(signer), kUnauth, "keyCertSign/cRLSign not allowed"));

  RawLeaf no_ku = good;
  no_ku.key_usage = "";
  CHECK(Fails(verify(no_ku), kUnauth, "keyUsage missing"));

  RawLeaf client_only = good;
  client_only.ext_key_usage = "clientAuth";
  CHECK(Fails(verify(client_only), kUnauth, "serverAuth missing"));

  RawLeaf server_only = good;
  server_only.ext_key_usage = "serverAuth";
  CHECK(Fails(verify(server_only), kUnauth, "clientAuth missing"));

  RawLeaf serving_user = good;
  serving_user.organization = "mycel:admin";
  serving_user.sans = {{GEN_URI, "spiffe://prod/user/web-1"}};
  CHECK(
      Fails(verify(serving_user), kUnauth, "serverAuth not allowed on a user"));

  RawLeaf any = good;
  any.ext_key_usage = "serverAuth,clientAuth,anyExtendedKeyUsage";
  CHECK(Fails(verify(any), kUnauth, "anyExtendedKeyUsage"));

  auto rsa = testing::GenerateRsa();
  RawLeaf rsa_leaf = good;
  rsa_leaf.key = rsa.get();
  CHECK(Fails(verify(rsa_leaf), kUnauth, "not ECDSA P-256"));

  // Signed with this CA's key but naming another CA as its issuer: the
  // signature and every field pass, path validation does not.
  CertificateAuthority other = MakeCa("dev");
  RawLeaf misnamed = good;
  misnamed.issuer = other.certificate().x509();
  CHECK(Fails(verify(misnamed), kUnauth,
              "chain rejected: unable to get local issuer certificate"));
}

TEST_CASE("a verifier needs a mesh CA certificate") {
  Mesh m;
  CHECK(PeerVerifier::Create(Must(m.ca.certificate().ToPem())).ok());
  CHECK(Fails(PeerVerifier::Create(m.NodePem("web-1")),
              absl::StatusCode::kInvalidArgument, "CA certificate"));
  CHECK(Fails(PeerVerifier::Create(""), absl::StatusCode::kInvalidArgument,
              "certificate: empty"));
}

TEST_CASE("ParsePeerIdentity reads a node and a user without trusting them") {
  Mesh m;
  PeerIdentity node = Must(ParsePeerIdentity(m.NodePem("db-3")));
  CHECK(node.kind == IdentityKind::kNode);
  CHECK(node.role == Role::kNode);
  CHECK(node.name == "db-3");
  PeerIdentity viewer =
      Must(ParsePeerIdentity(m.UserPem("carol", Role::kViewer)));
  CHECK(viewer.kind == IdentityKind::kUser);
  CHECK(viewer.role == Role::kViewer);
  CHECK(viewer.name == "carol");
  CHECK(viewer.serial.size() >= 2);
  CHECK(viewer.fingerprint.size() == 64);
  CHECK(Fails(ParsePeerIdentity("nope"), absl::StatusCode::kInvalidArgument,
              "certificate: malformed"));
}

TEST_CASE("a verified certificate is re-checked for time and revocation") {
  Mesh m;
  std::string node = m.NodePem("web-1");
  PeerIdentity id =
      Must(m.verifier.Verify(node, PeerSide::kClient, m.revoked, T0()));
  // Remembered, but never past its validity or its revocation.
  CHECK(Fails(m.verifier.Verify(node, PeerSide::kClient, m.revoked,
                                T0() + absl::Hours(24 * 31)),
              kUnauth, "certificate expired at"));
  CHECK(Fails(m.verifier.Verify(node, PeerSide::kClient, m.revoked,
                                T0() - absl::Hours(1)),
              kUnauth, "certificate not valid before"));
  RevocationList revoked;
  REQUIRE(revoked.RevokeSerial(id.serial, T0()).ok());
  CHECK(Fails(m.verifier.Verify(node, PeerSide::kClient, revoked, T0()),
              kUnauth, "revoked: serial"));
  CHECK(Fails(m.verifier.Verify(Must(Certificate::FromPem(node)),
                                PeerSide::kClient, revoked, T0()),
              kUnauth, "revoked: serial"));
  CHECK(m.verifier.Verify(node, PeerSide::kClient, m.revoked, T0()).ok());
  // Past the CA's own end.
  CHECK(Fails(
      m.verifier.Verify(node, PeerSide::kClient, m.revoked,
                        m.ca.certificate().not_after() + absl::Seconds(1)),
      kUnauth, "expired at"));

  // The side is part of what was verified.
  std::string user = m.UserPem("alice", Role::kAdmin);
  CHECK(m.verifier.Verify(user, PeerSide::kClient, m.revoked, T0()).ok());
  CHECK(Fails(m.verifier.Verify(user, PeerSide::kServer, m.revoked, T0()),
              kUnauth, "cannot serve"));
  CHECK(m.verifier.Verify(user, PeerSide::kClient, m.revoked, T0()).ok());

  // A refusal is not remembered: once valid, the same bytes pass.
  std::string future = m.NodePem("web-2", T0() + absl::Hours(1));
  CHECK(Fails(m.verifier.Verify(future, PeerSide::kClient, m.revoked, T0()),
              kUnauth, "not valid before"));
  CHECK(m.verifier
            .Verify(future, PeerSide::kClient, m.revoked, T0() + absl::Hours(1))
            .ok());
}

TEST_CASE("one verifier serves many threads") {
  Mesh m;
  std::vector<std::string> pems;
  for (int i = 0; i < 8; ++i) pems.push_back(m.NodePem(absl::StrCat("n", i)));
  RevocationList revoked;
  PeerIdentity victim = Must(ParsePeerIdentity(pems[3]));
  REQUIRE(revoked.RevokeSerial(victim.serial, T0()).ok());
  std::atomic<int> ok{0};
  std::atomic<int> refused{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i) {
        bool good =
            m.verifier
                .Verify(pems[i % pems.size()], PeerSide::kClient, revoked, T0())
                .ok();
        (good ? ok : refused)++;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  CHECK(ok == 700);
  CHECK(refused == 100);
}

}  // namespace
}  // namespace mycel::pki
