// The mesh CA, CSRs and issuing.
#include <doctest/doctest.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/x509v3.h>

#include <cstring>
#include <set>
#include <string>

#include "mesh/pki/certificate_authority.h"
#include "mesh/pki/certificate_request.h"
#include "mesh/pki/peer_identity.h"
#include "tests/unit/mesh/pki_test_util.h"

namespace mycel::pki {
namespace {

using testing::BuildCsrDer;
using testing::Fails;
using testing::MakeCa;
using testing::Must;
using testing::NodeId;
using testing::RawCsr;
using testing::T0;
using testing::UserId;
constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;

// The extension `nid` of `x`, decoded, and whether it is critical.
template <typename T>
std::unique_ptr<T, void (*)(T*)> Ext(X509* x, int nid, int* critical,
                                     void (*free)(T*)) {
  return {static_cast<T*>(X509_get_ext_d2i(x, nid, critical, nullptr)), free};
}

TEST_CASE("the CA certificate has the extensions a mesh root needs") {
  CertificateAuthority ca = MakeCa("prod");
  CHECK(ca.mesh() == "prod");
  X509* x = ca.certificate().x509();
  CHECK(X509_get_version(x) == X509_VERSION_3);

  int crit = 0;
  auto bc = Ext(x, NID_basic_constraints, &crit, BASIC_CONSTRAINTS_free);
  REQUIRE(bc != nullptr);
  CHECK(crit == 1);
  CHECK(bc->ca != 0);
  CHECK(ASN1_INTEGER_get(bc->pathlen) == 0);

  auto ku = Ext(x, NID_key_usage, &crit, ASN1_BIT_STRING_free);
  REQUIRE(ku != nullptr);
  CHECK(crit == 1);
  CHECK(X509_get_key_usage(x) == (KU_KEY_CERT_SIGN | KU_CRL_SIGN));

  CHECK(X509_get0_subject_key_id(x) != nullptr);

  auto nc = Ext(x, NID_name_constraints, &crit, NAME_CONSTRAINTS_free);
  REQUIRE(nc != nullptr);
  CHECK(crit == 1);
  REQUIRE(sk_GENERAL_SUBTREE_num(nc->permittedSubtrees) == 1);
  CHECK(nc->excludedSubtrees == nullptr);
  GENERAL_NAME* base = sk_GENERAL_SUBTREE_value(nc->permittedSubtrees, 0)->base;
  REQUIRE(base->type == GEN_URI);
  CHECK(std::string(
            reinterpret_cast<const char*>(
                ASN1_STRING_get0_data(base->d.uniformResourceIdentifier)),
            ASN1_STRING_length(base->d.uniformResourceIdentifier)) == "prod");

  // Subject names the mesh; self-issued.
  CHECK(X509_NAME_cmp(X509_get_subject_name(x), X509_get_issuer_name(x)) == 0);
  char cn[64] = {};
  X509_NAME_get_text_by_NID(X509_get_subject_name(x), NID_commonName, cn,
                            sizeof(cn));
  CHECK(std::string(cn) == "mycel mesh prod");

  // Default validity: ten years from five minutes before creation.
  absl::Time created = T0() - absl::Hours(24 * 365);
  CHECK(ca.certificate().not_before() == created - kNotBeforeBackdate);
  CHECK(ca.certificate().not_after() == created + kDefaultCaValidity);
  CHECK(Must(MeshOfCaCertificate(ca.certificate())) == "prod");
}

TEST_CASE("CA options: validity and name constraints") {
  CertificateAuthority ca = Must(CertificateAuthority::Create(
      "m", T0(), {.validity = absl::Hours(48), .name_constraints = false}));
  CHECK(ca.certificate().not_after() == T0() + absl::Hours(48));
  CHECK(X509_get_ext_by_NID(ca.certificate().x509(), NID_name_constraints, -1) <
        0);
  CHECK(Fails(CertificateAuthority::Create("Bad_Mesh", T0()), kInvalid,
              "mesh name"));
  CHECK(Fails(
      CertificateAuthority::Create("m", T0(), {.validity = -absl::Hours(1)}),
      kInvalid, "CA validity"));
}

TEST_CASE("the CA fingerprint is the SHA-256 of its DER and is stable") {
  CertificateAuthority ca = MakeCa();
  const std::string& fp = ca.fingerprint();
  CHECK(fp.size() == 64);
  CHECK(fp.find_first_not_of("0123456789abcdef") == std::string::npos);

  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  const std::string& der = ca.certificate().der();
  REQUIRE(EVP_Digest(der.data(), der.size(), md, &len, EVP_sha256(), nullptr) ==
          1);
  CHECK(fp == internal::Hex(std::string(reinterpret_cast<char*>(md), len)));

  // Through PEM, DER and Load, the pin does not change.
  std::string pem = Must(ca.certificate().ToPem());
  CHECK(Must(Certificate::FromPem(pem)).fingerprint() == fp);
  CHECK(Must(Certificate::FromDer(der)).fingerprint() == fp);
  CertificateAuthority loaded =
      Must(CertificateAuthority::Load(pem, Must(ca.private_key().ToPem())));
  CHECK(loaded.fingerprint() == fp);
  CHECK(loaded.mesh() == "prod");
  // Another CA, even for the same mesh, has another pin.
  CHECK(MakeCa().fingerprint() != fp);
}

TEST_CASE("loading a CA checks the key and the certificate") {
  CertificateAuthority ca = MakeCa();
  CertificateAuthority other = MakeCa();
  std::string pem = Must(ca.certificate().ToPem());
  CHECK(
      Fails(CertificateAuthority::Load(pem, Must(other.private_key().ToPem())),
            kInvalid, "does not match the CA certificate"));
  // A leaf is not a CA.
  PrivateKey key = Must(PrivateKey::Generate());
  Certificate leaf = Must(ca.IssueForKey(Must(key.GetPublicKey()),
                                         {NodeId("web-1"), Role::kNode}, T0()));
  CHECK(Fails(CertificateAuthority::Load(Must(leaf.ToPem()), Must(key.ToPem())),
              kInvalid, "CA certificate: not self-signed"));
  CHECK(Fails(MeshOfCaCertificate(leaf), kInvalid, "CA certificate"));
  CHECK(Fails(CertificateAuthority::Load("", Must(key.ToPem())), kInvalid,
              "certificate: empty"));
}

TEST_CASE("issuing a node certificate from a CSR") {
  CertificateAuthority ca = MakeCa();
  PrivateKey key = Must(PrivateKey::Generate());
  CertificateRequest csr =
      Must(CertificateRequest::Create(NodeId("web-1"), key));
  std::string csr_pem = Must(csr.ToPem());
  CHECK(absl::StartsWith(csr_pem, "-----BEGIN CERTIFICATE REQUEST-----\n"));

  Certificate cert =
      Must(ca.IssueFromCsr(csr_pem, {NodeId("web-1"), Role::kNode}, T0()));
  X509* x = cert.x509();
  CHECK(X509_get_version(x) == X509_VERSION_3);
  CHECK(cert.not_before() == T0() - absl::Minutes(5));
  CHECK(cert.not_after() == T0() + absl::Hours(24 * 30));
  CHECK(X509_check_private_key(x, key.evp()) == 1);
  CHECK(X509_check_issued(ca.certificate().x509(), x) == X509_V_OK);

  int crit = 0;
  auto bc = Ext(x, NID_basic_constraints, &crit, BASIC_CONSTRAINTS_free);
  REQUIRE(bc != nullptr);
  CHECK(crit == 1);
  CHECK(bc->ca == 0);
  REQUIRE(Ext(x, NID_key_usage, &crit, ASN1_BIT_STRING_free) != nullptr);
  CHECK(crit == 1);
  CHECK(X509_get_key_usage(x) == KU_DIGITAL_SIGNATURE);
  CHECK(X509_get_extended_key_usage(x) == (XKU_SSL_SERVER | XKU_SSL_CLIENT));
  CHECK(X509_get0_authority_key_id(x) != nullptr);
  CHECK(ASN1_OCTET_STRING_cmp(
            X509_get0_authority_key_id(x),
            X509_get0_subject_key_id(ca.certificate().x509())) == 0);
  CHECK(X509_get_signature_nid(x) == NID_ecdsa_with_SHA256);

  PeerIdentity id = Must(ParsePeerIdentity(cert));
  CHECK(id.kind == IdentityKind::kNode);
  CHECK(id.mesh == "prod");
  CHECK(id.name == "web-1");
  CHECK(id.role == Role::kNode);
  CHECK(id.spiffe_id == "spiffe://prod/node/web-1");
  CHECK(id.serial == cert.serial());
  CHECK(id.fingerprint == cert.fingerprint());
  CHECK(id.not_before == cert.not_before());
  CHECK(id.not_after == cert.not_after());
}

TEST_CASE("issuing user certificates for a daemon-generated key") {
  CertificateAuthority ca = MakeCa();
  PrivateKey key = Must(PrivateKey::Generate());
  PublicKey pub = Must(key.GetPublicKey());
  Certificate admin =
      Must(ca.IssueForKey(pub, {UserId("alice"), Role::kAdmin}, T0()));
  CHECK(X509_get_extended_key_usage(admin.x509()) == XKU_SSL_CLIENT);
  CHECK(admin.not_after() == T0() + kDefaultUserValidity);
  PeerIdentity a = Must(ParsePeerIdentity(Must(admin.ToPem())));
  CHECK(a.kind == IdentityKind::kUser);
  CHECK(a.role == Role::kAdmin);
  CHECK(a.name == "alice");
  CHECK(a.spiffe_id == "spiffe://prod/user/alice");

  Certificate viewer = Must(ca.IssueForKey(
      pub, {UserId("bob"), Role::kViewer, absl::Hours(2)}, T0()));
  PeerIdentity b = Must(ParsePeerIdentity(viewer.der()));
  CHECK(b.role == Role::kViewer);
  CHECK(b.not_after == T0() + absl::Hours(2));
  char org[64] = {};
  X509_NAME_get_text_by_NID(X509_get_subject_name(viewer.x509()),
                            NID_organizationName, org, sizeof(org));
  CHECK(std::string(org) == "mycel:viewer");
}

TEST_CASE("serials are random, positive and at most 128 bits") {
  CertificateAuthority ca = MakeCa();
  PublicKey pub = Must(Must(PrivateKey::Generate()).GetPublicKey());
  std::set<std::string> serials;
  for (int i = 0; i < 20; ++i) {
    Certificate c =
        Must(ca.IssueForKey(pub, {NodeId("web-1"), Role::kNode}, T0()));
    const ASN1_INTEGER* serial = X509_get0_serialNumber(c.x509());
    CHECK(ASN1_STRING_type(serial) == V_ASN1_INTEGER);  // not negative
    CHECK(c.serial().size() <= 32);
    CHECK(c.serial().size() >= 2);
    serials.insert(c.serial());
  }
  CHECK(serials.size() == 20);
}

TEST_CASE("the issuer refuses grants it must not sign") {
  CertificateAuthority ca = MakeCa();
  PublicKey pub = Must(Must(PrivateKey::Generate()).GetPublicKey());
  CHECK(Fails(ca.IssueForKey(pub, {NodeId("web-1"), Role::kAdmin}, T0()),
              kInvalid, "admin cannot be held by a node"));
  CHECK(Fails(ca.IssueForKey(pub, {UserId("alice"), Role::kNode}, T0()),
              kInvalid, "node cannot be held by a user"));
  CHECK(Fails(ca.IssueForKey(pub, {NodeId("web-1", "dev"), Role::kNode}, T0()),
              kInvalid, "is not in mesh \"prod\""));
  CHECK(Fails(ca.IssueForKey(
                  pub, {NodeId("web-1"), Role::kNode, -absl::Hours(1)}, T0()),
              kInvalid, "validity"));
  // Not after the CA expired, not before it is valid.
  absl::Time ca_end = ca.certificate().not_after();
  CHECK(Fails(ca.IssueForKey(pub, {NodeId("web-1"), Role::kNode}, ca_end),
              absl::StatusCode::kFailedPrecondition,
              "mesh CA certificate expired at"));
  CHECK(Fails(ca.IssueForKey(pub, {NodeId("web-1"), Role::kNode},
                             ca.certificate().not_before() - absl::Seconds(1)),
              absl::StatusCode::kFailedPrecondition, "not valid before"));
  // Near the CA's end, the leaf is cut to the CA's lifetime.
  Certificate late = Must(ca.IssueForKey(pub, {NodeId("web-1"), Role::kNode},
                                         ca_end - absl::Hours(24)));
  CHECK(late.not_after() == ca_end);
}

// --- CSR validation -------------------------------------------------------

TEST_CASE("a CSR round trips through PEM and DER") {
  PrivateKey key = Must(PrivateKey::Generate());
  CertificateRequest csr =
      Must(CertificateRequest::Create(UserId("alice"), key));
  CertificateRequest from_der =
      Must(CertificateRequest::Parse(csr.der(), "prod"));
  CertificateRequest from_pem =
      Must(CertificateRequest::Parse(Must(csr.ToPem()), "prod"));
  CHECK(from_der.spiffe_id() == UserId("alice"));
  CHECK(from_pem.spiffe_id() == UserId("alice"));
  CHECK(Must(from_pem.public_key().ToDer()) ==
        Must(Must(key.GetPublicKey()).ToDer()));
}

TEST_CASE("garbage, truncated and empty CSRs are INVALID_ARGUMENT") {
  PrivateKey key = Must(PrivateKey::Generate());
  CertificateRequest csr = Must(CertificateRequest::Create(NodeId("a"), key));
  std::string der = csr.der();
  std::string pem = Must(csr.ToPem());
  CHECK(Fails(CertificateRequest::Parse("", "prod"), kInvalid, "csr: empty"));
  CHECK(Fails(CertificateRequest::Parse("hello world", "prod"), kInvalid,
              "csr: malformed or truncated DER"));
  CHECK(Fails(CertificateRequest::Parse(std::string(300, '\x30'), "prod"),
              kInvalid, "csr: malformed"));
  for (size_t cut : {size_t{1}, size_t{10}, der.size() / 2, der.size() - 1}) {
    CAPTURE(cut);
    CHECK(Fails(CertificateRequest::Parse(der.substr(0, cut), "prod"), kInvalid,
                "csr: malformed or truncated DER"));
  }
  CHECK(Fails(CertificateRequest::Parse(der + "x", "prod"), kInvalid,
              "csr: 1 unexpected bytes after the DER"));
  CHECK(Fails(CertificateRequest::Parse(pem.substr(0, pem.size() / 2), "prod"),
              kInvalid, "csr: malformed or truncated PEM"));
  CHECK(Fails(CertificateRequest::Parse("-----BEGIN CERTIFICATE REQUEST-----\n"
                                        "-----END CERTIFICATE REQUEST-----\n",
                                        "prod"),
              kInvalid, "csr:"));
  std::string wrong_label = pem;
  for (const char* from :
       {"BEGIN CERTIFICATE REQUEST", "END CERTIFICATE REQUEST"}) {
    size_t at = wrong_label.find(from);
    wrong_label.replace(at, strlen(from),
                        std::string(from).substr(0, strlen(from) - 8));
  }
  CHECK(Fails(CertificateRequest::Parse(wrong_label, "prod"), kInvalid,
              "expected \"CERTIFICATE REQUEST\""));
  CHECK(Fails(CertificateRequest::Parse(std::string(70000, 'a'), "prod"),
              kInvalid, "larger than"));
}

TEST_CASE("CSR SAN rules: exactly one URI, nothing else") {
  auto key = testing::GenerateEc("P-256");
  auto parse = [&](std::vector<testing::SanEntry> sans) {
    return CertificateRequest::Parse(
        BuildCsrDer(RawCsr{.key = key.get(), .sans = std::move(sans)}), "prod");
  };
  CHECK(parse({{GEN_URI, "spiffe://prod/node/a"}}).ok());
  CHECK(Fails(parse({{GEN_URI, "spiffe://prod/node/a"},
                     {GEN_URI, "spiffe://prod/node/b"}}),
              kInvalid, "csr: 2 URI SANs"));
  CHECK(Fails(
      parse({{GEN_URI, "spiffe://prod/node/a"}, {GEN_DNS, "a.example.com"}}),
      kInvalid, "csr: DNS SAN not allowed"));
  CHECK(Fails(parse({{GEN_DNS, "a.example.com"}}), kInvalid,
              "csr: DNS SAN not allowed"));
  CHECK(Fails(parse({{GEN_IPADD, std::string("\x0a\x00\x00\x01", 4)},
                     {GEN_URI, "spiffe://prod/node/a"}}),
              kInvalid, "csr: IP SAN not allowed"));
  CHECK(Fails(parse({{GEN_EMAIL, "a@example.com"}}), kInvalid,
              "csr: e-mail SAN not allowed"));
  CHECK(Fails(parse({}), kInvalid, "csr: URI SAN missing"));
  CHECK(Fails(parse({{GEN_URI, "spiffe://dev/node/a"}}), kInvalid,
              "csr: SPIFFE ID spiffe://dev/node/a is for mesh \"dev\", not "
              "\"prod\""));
  CHECK(Fails(parse({{GEN_URI, "spiffe://prod/node/A"}}), kInvalid,
              "csr: URI SAN \"spiffe://prod/node/A\": SPIFFE ID: name"));
  CHECK(Fails(parse({{GEN_URI, "https://prod/node/a"}}), kInvalid,
              "does not start with \"spiffe://\""));
  CHECK(Fails(parse({{GEN_URI, std::string("spiffe://prod/node/a\0b", 22)}}),
              kInvalid, "csr: URI SAN \"spiffe://prod/node/a\\x00"));
}

TEST_CASE("CSR key, signature, extension and attribute rules") {
  auto ec = testing::GenerateEc("P-256");
  std::vector<testing::SanEntry> san = {{GEN_URI, "spiffe://prod/node/a"}};

  auto rsa = testing::GenerateRsa();
  CHECK(Fails(CertificateRequest::Parse(
                  BuildCsrDer({.key = rsa.get(), .sans = san}), "prod"),
              kInvalid,
              "csr: public key: must be ECDSA on the named curve "
              "P-256"));
  auto p384 = testing::GenerateEc("P-384");
  CHECK(Fails(CertificateRequest::Parse(
                  BuildCsrDer({.key = p384.get(), .sans = san}), "prod"),
              kInvalid, "csr: public key: must be ECDSA"));

  // Signed by a key other than the one it carries.
  auto other = testing::GenerateEc("P-256");
  CHECK(Fails(
      CertificateRequest::Parse(
          BuildCsrDer({.key = ec.get(), .sign_key = other.get(), .sans = san}),
          "prod"),
      kInvalid, "csr: signature does not verify"));
  // A flipped bit in the signed part.
  std::string der = BuildCsrDer({.key = ec.get(), .sans = san});
  size_t at = der.find("spiffe://prod/node/a");
  REQUIRE(at != std::string::npos);
  der[at + 19] = 'b';
  CHECK(Fails(CertificateRequest::Parse(der, "prod"), kInvalid,
              "csr: signature does not verify"));

  CHECK(Fails(CertificateRequest::Parse(
                  BuildCsrDer({.key = ec.get(), .md = EVP_sha1(), .sans = san}),
                  "prod"),
              kInvalid, "signature algorithm must be ecdsa-with-SHA256"));

  CHECK(Fails(CertificateRequest::Parse(
                  BuildCsrDer({.key = ec.get(),
                               .sans = san,
                               .extra_extensions = {{NID_basic_constraints,
                                                     "critical,CA:TRUE"}}}),
                  "prod"),
              kInvalid, "csr: extension X509v3 Basic Constraints not allowed"));
  CHECK(Fails(
      CertificateRequest::Parse(
          BuildCsrDer({.key = ec.get(),
                       .extra_extensions = {{NID_key_usage, "keyCertSign"}}}),
          "prod"),
      kInvalid, "not allowed (only subjectAltName)"));
  CHECK(
      Fails(CertificateRequest::Parse(
                BuildCsrDer(
                    {.key = ec.get(), .sans = san, .challenge_password = true}),
                "prod"),
            kInvalid, "csr: attribute challengePassword not allowed"));
}

TEST_CASE("the issuer grants only the identity the caller authorised") {
  CertificateAuthority ca = MakeCa();
  PrivateKey key = Must(PrivateKey::Generate());
  std::string for_b =
      Must(Must(CertificateRequest::Create(NodeId("web-2"), key)).ToPem());
  CHECK(Fails(ca.IssueFromCsr(for_b, {NodeId("web-1"), Role::kNode}, T0()),
              kInvalid,
              "csr: asks for node \"web-2\" but the caller authorised node "
              "\"web-1\""));
  std::string user =
      Must(Must(CertificateRequest::Create(UserId("web-1"), key)).ToPem());
  CHECK(Fails(ca.IssueFromCsr(user, {NodeId("web-1"), Role::kNode}, T0()),
              kInvalid,
              "csr: asks for a user identity (spiffe://prod/user/web-1) but a "
              "node identity was granted"));
  std::string other_mesh = Must(
      Must(CertificateRequest::Create(NodeId("web-1", "dev"), key)).ToPem());
  CHECK(Fails(ca.IssueFromCsr(other_mesh, {NodeId("web-1"), Role::kNode}, T0()),
              kInvalid, "is for mesh \"dev\", not \"prod\""));
  CHECK(Fails(ca.IssueFromCsr("", {NodeId("web-1"), Role::kNode}, T0()),
              kInvalid, "csr: empty"));
  // A validated CSR object is checked the same way.
  CertificateRequest parsed = Must(CertificateRequest::Parse(for_b, "prod"));
  CHECK(Fails(ca.Issue(parsed, {NodeId("web-1"), Role::kNode}, T0()), kInvalid,
              "asks for node \"web-2\""));
  CHECK(ca.Issue(parsed, {NodeId("web-2"), Role::kNode}, T0()).ok());
}

TEST_CASE("failed calls leave OpenSSL's per-thread error queue as it was") {
  // gRPC's TLS code reads the same queue; stale errors there confuse it.
  CertificateAuthority ca = MakeCa();
  std::string key_pem = Must(Must(PrivateKey::Generate()).ToPem());
  std::string cert_pem = Must(ca.certificate().ToPem());
  ERR_clear_error();
  ERR_raise(ERR_LIB_USER, ERR_R_INTERNAL_ERROR);  // someone else's error
  unsigned long theirs = ERR_peek_last_error();
  REQUIRE(theirs != 0);

  CHECK(!PrivateKey::FromPem("junk").ok());
  CHECK(!PrivateKey::FromPem(key_pem.substr(0, 100)).ok());
  CHECK(!PublicKey::FromDer("\x30\x03\x02\x01").ok());
  CHECK(!Certificate::Parse("\x30\x82\x01").ok());
  CHECK(!Certificate::FromPem(cert_pem.substr(0, cert_pem.size() / 2)).ok());
  CHECK(!CertificateRequest::Parse("\x30\x10garbage", "prod").ok());
  CHECK(!CertificateAuthority::Load(cert_pem, key_pem).ok());
  CHECK(!MeshOfCaCertificate(
             Must(ca.IssueForKey(
                 Must(Must(PrivateKey::Generate()).GetPublicKey()),
                 {NodeId("a"), Role::kNode}, T0())))
             .ok());

  CHECK(ERR_get_error() == theirs);
  CHECK(ERR_peek_error() == 0);
}

}  // namespace
}  // namespace mycel::pki
