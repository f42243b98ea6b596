// Signed changes (mesh/replication/origin_verifier.h): a change signed by
// its origin's node key verifies; each forgery a relaying member could try
// is refused with the reason: no signature, its own key in another node's
// name, a value changed after signing, a certificate of another name or
// another CA, a revoked origin. An unknown origin is UNAVAILABLE (refused
// for now, taken when it comes again), and an expired certificate still
// vouches for what its key signed. A certificate checked once is kept
// beyond membership, and one a peer hands over is taken only when the mesh
// CA issued it to a node and none is known for that node.
#include "mesh/replication/origin_verifier.h"

#include <doctest/doctest.h>

#include <map>
#include <memory>
#include <string>

#include "daemon/store/objects.h"
#include "mesh/identity/trust.h"
#include "mesh/pki/certificate.h"
#include "mesh/pki/certificate_authority.h"
#include "mesh/pki/private_key.h"
#include "mesh/replication/replica_log.h"
#include "runtime/manual_clock.h"
#include "tests/unit/mesh/pki_test_util.h"

namespace mycel::replication {
namespace {

using pki::testing::Must;
using pki::testing::T0;

struct Identity {
  std::string cert_der;
  std::shared_ptr<const pki::PrivateKey> key;
};

Identity Issue(const pki::CertificateAuthority& ca, const std::string& name,
               absl::Duration validity = absl::ZeroDuration(),
               absl::Time at = T0()) {
  auto key =
      std::make_shared<pki::PrivateKey>(Must(pki::PrivateKey::Generate()));
  pki::SpiffeId id =
      Must(pki::SpiffeId::Create(pki::IdentityKind::kNode, ca.mesh(), name));
  pki::Certificate cert =
      Must(ca.IssueForKey(Must(key->GetPublicKey()),
                          pki::Grant{id, pki::Role::kNode, validity}, at));
  return {cert.der(), std::move(key)};
}

store::ObjectChange Change(const std::string& origin,
                           const std::string& value) {
  store::ObjectChange c;
  c.stamp.origin = origin;
  c.stamp.seq = 3;
  c.stamp.hlc = store::MakeHlc(absl::ToUnixMillis(T0()), 0);
  c.ns = "kv";
  c.key = "app/config";
  c.value = value;
  return c;
}

// Signs `c` with `key`, as a node's store does.
void Sign(const Identity& signer, store::ObjectChange* c) {
  c->stamp.signature =
      Must(NodeKeySigner(signer.key)(store::ObjectStore::SigningBytes(*c)));
}

struct Fixture {
  Fixture() {
    REQUIRE(trust.SetCa(Must(ca.certificate().ToPem())).ok());
    ids["a"] = Issue(ca, "a");
    ids["b"] = Issue(ca, "b");
  }
  absl::Status Verify(const store::ObjectChange& c) {
    return verifier.Verify(c, store::ObjectStore::SigningBytes(c));
  }
  pki::CertificateAuthority ca = pki::testing::MakeCa("prod");
  identity::Trust trust;
  ManualClock clock{T0() + absl::Hours(1)};
  // What membership holds: a name's certificate.
  std::map<std::string, Identity> ids;
  std::map<std::string, std::string> known_as;  // overrides, name -> DER
  // What the store keeps (origin_certificates), and how often it was told.
  std::map<std::string, std::string> kept;
  int keeps = 0;
  std::string Membership(absl::string_view name) {
    auto o = known_as.find(std::string(name));
    if (o != known_as.end()) return o->second;
    auto it = ids.find(std::string(name));
    return it == ids.end() ? std::string() : it->second.cert_der;
  }
  OriginVerifier::Memory Store() {
    return {[this](absl::string_view name) {
              auto it = kept.find(std::string(name));
              return it == kept.end() ? std::string() : it->second;
            },
            [this](absl::string_view name, absl::string_view der) {
              ++keeps;
              kept[std::string(name)] = std::string(der);
            }};
  }
  OriginVerifier verifier{
      &trust, &clock,
      [this](absl::string_view name) { return Membership(name); }, Store()};
};

bool Refused(const absl::Status& s, absl::StatusCode code,
             const std::string& words) {
  INFO(s.ToString());
  return s.code() == code && s.message().find(words) != std::string::npos;
}

TEST_CASE("a change signed by its origin verifies; the check is cached") {
  Fixture f;
  store::ObjectChange c = Change("a", "\"v1\"");
  Sign(f.ids["a"], &c);
  CHECK(f.Verify(c).ok());
  store::ObjectChange d = Change("a", "\"v2\"");
  d.stamp.seq = 4;
  Sign(f.ids["a"], &d);
  CHECK(f.Verify(d).ok());
  CHECK(f.verifier.certificate_checks() == 1);
  // A deletion is signed too (no value).
  store::ObjectChange del = Change("a", "");
  del.value.reset();
  Sign(f.ids["a"], &del);
  CHECK(f.Verify(del).ok());
}

TEST_CASE("forgeries a relaying member could try are refused") {
  Fixture f;
  SUBCASE("no signature") {
    CHECK(Refused(f.Verify(Change("a", "1")),
                  absl::StatusCode::kPermissionDenied, "unsigned"));
  }
  SUBCASE("b signs a change in a's name") {
    store::ObjectChange c = Change("a", "1");
    Sign(f.ids["b"], &c);
    CHECK(Refused(f.Verify(c), absl::StatusCode::kPermissionDenied,
                  "not made by the key of a's certificate"));
  }
  SUBCASE("the value changed after signing") {
    store::ObjectChange c = Change("a", "1");
    Sign(f.ids["a"], &c);
    c.value = "2";
    CHECK(
        Refused(f.Verify(c), absl::StatusCode::kPermissionDenied, "signature"));
  }
  SUBCASE("the sequence number changed after signing") {
    store::ObjectChange c = Change("a", "1");
    Sign(f.ids["a"], &c);
    c.stamp.seq += 100;
    CHECK(
        Refused(f.Verify(c), absl::StatusCode::kPermissionDenied, "signature"));
  }
  SUBCASE("a delete turned into a put, or the key moved") {
    store::ObjectChange c = Change("a", "");
    c.value.reset();
    Sign(f.ids["a"], &c);
    store::ObjectChange put = c;
    put.value = "";
    CHECK(!f.Verify(put).ok());
    store::ObjectChange moved = c;
    moved.key = "app/other";
    CHECK(!f.Verify(moved).ok());
    store::ObjectChange other_ns = c;
    other_ns.ns = "node.status";
    CHECK(!f.Verify(other_ns).ok());
  }
  SUBCASE("a certificate of another name offered for the origin") {
    f.known_as["a"] = f.ids["b"].cert_der;
    store::ObjectChange c = Change("a", "1");
    Sign(f.ids["b"], &c);
    CHECK(Refused(f.Verify(c), absl::StatusCode::kPermissionDenied,
                  "the certificate known for it is node b's"));
  }
  SUBCASE("a certificate of another mesh's CA") {
    pki::CertificateAuthority other = pki::testing::MakeCa("prod");
    Identity rogue = Issue(other, "a");
    f.known_as["a"] = rogue.cert_der;
    store::ObjectChange c = Change("a", "1");
    Sign(rogue, &c);
    CHECK(Refused(f.Verify(c), absl::StatusCode::kPermissionDenied,
                  "origin a: certificate"));
  }
  SUBCASE("garbage for a certificate") {
    f.known_as["a"] = "not a certificate";
    store::ObjectChange c = Change("a", "1");
    Sign(f.ids["a"], &c);
    CHECK(Refused(f.Verify(c), absl::StatusCode::kPermissionDenied,
                  "origin a: certificate"));
  }
}

TEST_CASE("an origin not known here yet is UNAVAILABLE, not forged") {
  Fixture f;
  f.ids["c"] = Issue(f.ca, "c");
  store::ObjectChange c = Change("c", "1");
  Sign(f.ids["c"], &c);
  const std::string der = f.ids["c"].cert_der;
  f.ids.erase("c");
  absl::Status unknown = f.Verify(c);
  CHECK(Refused(unknown, absl::StatusCode::kUnavailable,
                "no certificate of origin c"));
  // The replicator reads the origin from it, to ask the sender.
  auto payload = unknown.GetPayload(kUnknownOriginPayload);
  REQUIRE(payload.has_value());
  CHECK(std::string(*payload) == "c");
  CHECK_FALSE(f.verifier.Knows("c"));
  CHECK(f.verifier.CertificateFor("c").empty());
  f.known_as["c"] = der;  // membership learns of it
  CHECK(f.Verify(c).ok());
}

TEST_CASE("a revoked origin's changes are refused, even those cached") {
  Fixture f;
  store::ObjectChange c = Change("a", "1");
  Sign(f.ids["a"], &c);
  REQUIRE(f.Verify(c).ok());
  pki::RevocationList revoked;
  REQUIRE(revoked.RevokeIdentity(pki::IdentityKind::kNode, "a", T0()).ok());
  f.trust.SetRevocations(std::move(revoked));
  absl::Status s = f.Verify(c);
  CHECK(Refused(s, absl::StatusCode::kPermissionDenied, "revoked"));
  // Not the sender's doing (it took the change before the revocation); and
  // checked once while the list and membership's certificate stay.
  CHECK(s.GetPayload(store::kRefusedOriginPayload).has_value());
  CHECK(f.verifier.Refuses("a"));
  const uint64_t checks = f.verifier.certificate_checks();
  for (int i = 0; i < 100; ++i) CHECK(!f.Verify(c).ok());
  CHECK(f.verifier.certificate_checks() == checks);
  // A forgery of a live origin is the sender's doing: no such payload.
  store::ObjectChange forged = Change("b", "1");
  Sign(f.ids["a"], &forged);
  absl::Status f2 = f.Verify(forged);
  CHECK(absl::IsPermissionDenied(f2));
  CHECK_FALSE(f2.GetPayload(store::kRefusedOriginPayload).has_value());
  CHECK_FALSE(f.verifier.Refuses("b"));
  CHECK_FALSE(f.verifier.Refuses("stranger"));
}

// A node revoked and admitted again under its name writes as origin
// NAME~KEYID (store::OriginNode): checked against the certificate with that
// key, never against the plain name's lineage, which stays revoked.
TEST_CASE("a node admitted again under a revoked name is origin NAME~KEYID") {
  Fixture f;
  store::ObjectChange old = Change("b", "1");
  Sign(f.ids["b"], &old);
  REQUIRE(f.Verify(old).ok());
  pki::RevocationList revoked;
  REQUIRE(revoked
              .RevokeIdentity(pki::IdentityKind::kNode, "b",
                              T0() + absl::Minutes(1))
              .ok());
  f.trust.SetRevocations(revoked);
  Identity b2 = Issue(f.ca, "b", absl::ZeroDuration(), T0() + absl::Minutes(2));
  const std::string origin =
      "b~" + Must(Must(pki::Certificate::FromDer(b2.cert_der)).KeyId());
  CHECK(origin.size() == 2 + pki::kKeyIdDigits);
  f.known_as["b"] = b2.cert_der;  // membership has the new node
  store::ObjectChange fresh = Change(origin, "2");
  Sign(b2, &fresh);
  absl::Status s = f.Verify(fresh);
  CHECK_MESSAGE(s.ok(), s.ToString());
  CHECK(f.kept[origin] == b2.cert_der);
  // The plain name is the revoked lineage: its changes are refused, and
  // the new node's key is not taken for it.
  CHECK(Refused(f.Verify(old), absl::StatusCode::kPermissionDenied, "revoked"));
  store::ObjectChange claim = Change("b", "3");
  Sign(b2, &claim);
  CHECK(!f.Verify(claim).ok());
  CHECK(f.kept["b"] == f.ids["b"].cert_der);
  // Other spellings of b's origins: refused as the sender's doing, never
  // checked as b's plain name.
  for (const std::string& bad :
       {std::string("b~"), std::string("~") + origin.substr(2), origin + "0",
        std::string("b~0123456789AB"), std::string("b~0123456789a~")}) {
    CAPTURE(bad);
    store::ObjectChange spelled = Change(bad, "1");
    Sign(b2, &spelled);
    absl::Status refused = f.Verify(spelled);
    CHECK(Refused(refused, absl::StatusCode::kPermissionDenied, "origin: not"));
    CHECK_FALSE(refused.GetPayload(store::kRefusedOriginPayload).has_value());
  }
  // A key id that no certificate of b has: unknown, not b2's.
  store::ObjectChange wrong = Change("b~000000000000", "4");
  Sign(b2, &wrong);
  CHECK(f.Verify(wrong).code() == absl::StatusCode::kUnavailable);
  // Membership moves on to a third node of the name: b2's changes still
  // check, against the certificate kept for its origin.
  Identity b3 = Issue(f.ca, "b", absl::ZeroDuration(), T0() + absl::Minutes(3));
  f.known_as["b"] = b3.cert_der;
  store::ObjectChange later = Change(origin, "5");
  later.stamp.seq = 4;
  Sign(b2, &later);
  CHECK(f.Verify(later).ok());
  CHECK(f.verifier.CertificateFor(origin) == b2.cert_der);
  CHECK(f.verifier.CertificateFor("b") == f.ids["b"].cert_der);

  // A node that never knew b2 (membership has no b, nothing kept) takes its
  // certificate from a peer for the origin it asked about, never for the
  // plain (revoked) name.
  OriginVerifier g(&f.trust, &f.clock,
                   [](absl::string_view) { return std::string(); });
  auto verify = [&](const store::ObjectChange& c) {
    return g.Verify(c, store::ObjectStore::SigningBytes(c));
  };
  REQUIRE(verify(fresh).code() == absl::StatusCode::kUnavailable);
  // The plain name's changes: refused as revoked, though no certificate of
  // it is known here; no certificate is asked for them.
  absl::Status revoked_plain = verify(old);
  CHECK(Refused(revoked_plain, absl::StatusCode::kPermissionDenied,
                "node b is revoked"));
  CHECK(revoked_plain.GetPayload(store::kRefusedOriginPayload).has_value());
  CHECK(g.Refuses("b"));
  CHECK_FALSE(g.Refuses(origin));
  auto plain = [](absl::string_view o) { return o == "b"; };
  CHECK(Refused(g.Offer(b2.cert_der, plain).status(),
                absl::StatusCode::kFailedPrecondition, "not asked for"));
  CHECK(Refused(g.Offer(b2.cert_der).status(),
                absl::StatusCode::kFailedPrecondition, "not asked for"));
  auto lineage = [&](absl::string_view o) { return o == origin; };
  absl::StatusOr<std::string> taken = g.Offer(b2.cert_der, lineage);
  REQUIRE_MESSAGE(taken.ok(), taken.status().ToString());
  CHECK(*taken == origin);
  CHECK(verify(fresh).ok());
  CHECK(Refused(g.Offer(b2.cert_der, lineage).status(),
                absl::StatusCode::kAlreadyExists, "(origin b~"));
}

TEST_CASE("an expired certificate still vouches for what its key signed") {
  Fixture f;
  f.ids["old"] = Issue(f.ca, "old", absl::Hours(2));
  store::ObjectChange c = Change("old", "1");
  Sign(f.ids["old"], &c);
  f.clock.Advance(absl::Hours(24 * 400));
  absl::Status s = f.Verify(c);
  CHECK_MESSAGE(s.ok(), s.ToString());
  // Its key still cannot sign for another name.
  store::ObjectChange forged = Change("a", "1");
  Sign(f.ids["old"], &forged);
  CHECK(!f.Verify(forged).ok());
}

TEST_CASE("a certificate checked once is kept beyond membership") {
  Fixture f;
  store::ObjectChange c = Change("a", "1");
  Sign(f.ids["a"], &c);
  REQUIRE(f.Verify(c).ok());
  CHECK(f.kept["a"] == f.ids["a"].cert_der);
  CHECK(f.keeps == 1);
  const std::string der = f.ids["a"].cert_der;
  // Membership forgets "a" (a day after it left): still checked, and the
  // certificate can still be handed on.
  f.ids.erase("a");
  CHECK(f.Verify(c).ok());
  CHECK(f.verifier.Knows("a"));
  CHECK(f.verifier.CertificateFor("a") == der);
  // After a restart, from the store.
  OriginVerifier again(
      &f.trust, &f.clock,
      [&f](absl::string_view name) { return f.Membership(name); }, f.Store());
  CHECK(again.Verify(c, store::ObjectStore::SigningBytes(c)).ok());
  CHECK(f.keeps == 1);  // the same certificate is not written again
  // What is kept is checked like membership's: a forgery still fails.
  store::ObjectChange altered = c;
  altered.value = "2";
  CHECK(
      Refused(again.Verify(altered, store::ObjectStore::SigningBytes(altered)),
              absl::StatusCode::kPermissionDenied, "signature"));
}

TEST_CASE("a certificate a peer hands over: taken only as vouched for") {
  Fixture f;
  Identity gone = Issue(f.ca, "gone");
  store::ObjectChange c = Change("gone", "1");
  Sign(gone, &c);
  REQUIRE(f.Verify(c).code() == absl::StatusCode::kUnavailable);

  SUBCASE("a node certificate of the mesh CA is taken, kept, and used") {
    absl::StatusOr<std::string> taken = f.verifier.Offer(gone.cert_der);
    REQUIRE_MESSAGE(taken.ok(), taken.status().ToString());
    CHECK(*taken == "gone");
    CHECK(f.kept["gone"] == gone.cert_der);
    CHECK(f.Verify(c).ok());
    // A second one for the same node (another key) does not replace it.
    Identity other_key = Issue(f.ca, "gone");
    CHECK(Refused(f.verifier.Offer(other_key.cert_der).status(),
                  absl::StatusCode::kAlreadyExists, "node gone"));
    CHECK(f.kept["gone"] == gone.cert_der);
    CHECK(f.Verify(c).ok());
  }
  SUBCASE("only for a node asked about") {
    auto only_x = [](absl::string_view node) { return node == "x"; };
    CHECK(Refused(f.verifier.Offer(gone.cert_der, only_x).status(),
                  absl::StatusCode::kFailedPrecondition, "not asked for"));
    CHECK(f.kept.empty());
    auto gone_too = [](absl::string_view node) { return node == "gone"; };
    CHECK(f.verifier.Offer(gone.cert_der, gone_too).ok());
    CHECK(f.Verify(c).ok());
  }
  SUBCASE("nor can one replace membership's") {
    Identity other_key = Issue(f.ca, "a");
    CHECK(Refused(f.verifier.Offer(other_key.cert_der).status(),
                  absl::StatusCode::kAlreadyExists, "node a"));
    CHECK(f.kept.count("a") == 0);
  }
  SUBCASE("another CA's, for the same name, is refused") {
    pki::CertificateAuthority other = pki::testing::MakeCa("prod");
    Identity rogue = Issue(other, "gone");
    CHECK(Refused(f.verifier.Offer(rogue.cert_der).status(),
                  absl::StatusCode::kPermissionDenied, "certificate offered"));
    CHECK(f.kept.empty());
    CHECK(f.Verify(c).code() == absl::StatusCode::kUnavailable);
  }
  SUBCASE("a user's certificate is not a node's") {
    auto key = Must(pki::PrivateKey::Generate());
    pki::Certificate user = Must(
        f.ca.IssueForKey(Must(key.GetPublicKey()),
                         pki::Grant{pki::testing::UserId("gone"),
                                    pki::Role::kAdmin, absl::ZeroDuration()},
                         T0()));
    CHECK(Refused(f.verifier.Offer(user.der()).status(),
                  absl::StatusCode::kPermissionDenied, "not a node's"));
    CHECK(f.kept.empty());
  }
  SUBCASE("a revoked node's is refused") {
    pki::RevocationList revoked;
    REQUIRE(
        revoked.RevokeIdentity(pki::IdentityKind::kNode, "gone", T0()).ok());
    f.trust.SetRevocations(std::move(revoked));
    CHECK(Refused(f.verifier.Offer(gone.cert_der).status(),
                  absl::StatusCode::kPermissionDenied, "revoked"));
  }
  SUBCASE("bytes that are not a certificate, or too many of them") {
    CHECK(Refused(f.verifier.Offer("not a certificate").status(),
                  absl::StatusCode::kInvalidArgument, "certificate"));
    CHECK(Refused(f.verifier.Offer("").status(),
                  absl::StatusCode::kInvalidArgument, "0 bytes"));
    CHECK(Refused(f.verifier.Offer(std::string(20000, 'x')).status(),
                  absl::StatusCode::kInvalidArgument, "20000 bytes"));
    CHECK(f.kept.empty());
  }
}

}  // namespace
}  // namespace mycel::replication
