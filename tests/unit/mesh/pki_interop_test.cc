// Interoperability: the certificates and keys this library writes are
// accepted by the `openssl` tool and by a real mutual-TLS handshake through
// libssl, the TLS stack under Debian's gRPC.
#include <doctest/doctest.h>
#include <openssl/ssl.h>
#include <unistd.h>

#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_replace.h"
#include "mesh/pki/certificate_authority.h"
#include "mesh/pki/certificate_request.h"
#include "mesh/pki/peer_verifier.h"
#include "runtime/fs.h"
#include "tests/testing/process.h"
#include "tests/unit/mesh/pki_test_util.h"

namespace mycel::pki {
namespace {

using mycel::testing::CommandResult;
using mycel::testing::Shell;
using mycel::testing::TempDir;
using testing::Must;
using testing::NodeId;
using testing::UserId;

// Real time: the openssl tool verifies against its own clock.
absl::Time Now() { return absl::Now(); }

struct Files {
  TempDir dir;
  CertificateAuthority ca = Must(CertificateAuthority::Create("prod", Now()));

  std::string Write(const std::string& name, const std::string& data) {
    REQUIRE(WriteFile(dir.Sub(name), data).ok());
    return dir.Sub(name);
  }
  CommandResult Openssl(const std::string& args) {
    REQUIRE_MESSAGE(access("/usr/bin/openssl", X_OK) == 0,
                    "the openssl tool is needed (apt-get install openssl)");
    CommandResult r =
        Shell("cd " + dir.path() + " && /usr/bin/openssl " + args);
    INFO("openssl ", args, " -> ", r.exit_code, "\n", r.out, r.err);
    return r;
  }
};

TEST_CASE("openssl verify accepts our leaves under our CA") {
  Files f;
  f.Write("ca.pem", Must(f.ca.certificate().ToPem()));

  PrivateKey node_key = Must(PrivateKey::Generate());
  REQUIRE(node_key.WriteToFile(f.dir.Sub("node.key")).ok());
  std::string csr =
      Must(Must(CertificateRequest::Create(NodeId("web-1"), node_key)).ToPem());
  f.Write("node.csr", csr);
  f.Write(
      "node.pem",
      Must(Must(f.ca.IssueFromCsr(csr, {NodeId("web-1"), Role::kNode}, Now()))
               .ToPem()));
  PublicKey user_pub = Must(Must(PrivateKey::Generate()).GetPublicKey());
  f.Write("user.pem",
          Must(Must(f.ca.IssueForKey(user_pub, {UserId("alice"), Role::kAdmin},
                                     Now()))
                   .ToPem()));

  CommandResult r = f.Openssl(
      "verify -x509_strict -CAfile ca.pem -purpose sslclient node.pem");
  CHECK(r.exit_code == 0);
  CHECK(r.out == "node.pem: OK\n");
  CHECK(f.Openssl("verify -x509_strict -CAfile ca.pem -purpose sslserver "
                  "node.pem")
            .exit_code == 0);
  CHECK(f.Openssl("verify -x509_strict -CAfile ca.pem -purpose sslclient "
                  "user.pem")
            .exit_code == 0);
  // A user certificate cannot serve, for openssl either.
  CHECK(f.Openssl("verify -x509_strict -CAfile ca.pem -purpose sslserver "
                  "user.pem")
            .exit_code != 0);
  // The key file and the CSR are standard too.
  CHECK(f.Openssl("pkey -in node.key -noout").exit_code == 0);
  CHECK(f.Openssl("req -in node.csr -noout -verify").exit_code == 0);
  CHECK(f.Openssl("x509 -in node.pem -noout -checkend 0").exit_code == 0);
}

TEST_CASE("openssl refuses another CA's leaf and a leaf outside the mesh") {
  Files f;
  f.Write("ca.pem", Must(f.ca.certificate().ToPem()));
  CertificateAuthority other =
      Must(CertificateAuthority::Create("prod", Now()));
  PublicKey pub = Must(Must(PrivateKey::Generate()).GetPublicKey());
  f.Write(
      "other.pem",
      Must(Must(other.IssueForKey(pub, {NodeId("web-1"), Role::kNode}, Now()))
               .ToPem()));
  CHECK(f.Openssl("verify -CAfile ca.pem other.pem").exit_code != 0);

  // Signed by this CA's key but for mesh "dev": the name constraint, checked
  // by openssl itself, refuses it.
  auto key = testing::GenerateEc("P-256");
  Certificate outside =
      testing::BuildLeaf({.issuer = f.ca.certificate().x509(),
                          .signer = f.ca.private_key().evp(),
                          .key = key.get(),
                          .sans = {{GEN_URI, "spiffe://dev/node/web-1"}},
                          .not_before = Now() - absl::Hours(1),
                          .not_after = Now() + absl::Hours(1)});
  f.Write("outside.pem", Must(outside.ToPem()));
  CommandResult r = f.Openssl("verify -CAfile ca.pem outside.pem");
  CHECK(r.exit_code != 0);
  CHECK(absl::StrContains(r.out + r.err, "permitted subtree violation"));
}

TEST_CASE("the pin equals openssl's SHA-256 fingerprint; extensions print") {
  Files f;
  f.Write("ca.pem", Must(f.ca.certificate().ToPem()));
  CommandResult fp = f.Openssl("x509 -in ca.pem -noout -fingerprint -sha256");
  REQUIRE(fp.exit_code == 0);
  std::string hex = fp.out.substr(fp.out.find('=') + 1);
  hex = absl::AsciiStrToLower(
      absl::StrReplaceAll(absl::StripAsciiWhitespace(hex), {{":", ""}}));
  CHECK(hex == f.ca.fingerprint());

  CommandResult text = f.Openssl("x509 -in ca.pem -noout -text");
  REQUIRE(text.exit_code == 0);
  CHECK(absl::StrContains(text.out, "X509v3 Name Constraints: critical"));
  CHECK(absl::StrContains(text.out, "URI:prod"));
  CHECK(absl::StrContains(text.out, "CA:TRUE, pathlen:0"));
  CHECK(absl::StrContains(text.out, "Certificate Sign, CRL Sign"));
  CHECK(absl::StrContains(text.out, "URI:spiffe://prod"));
}

TEST_CASE("a CSR made by openssl req is accepted and issued") {
  Files f;
  f.Write("ca.pem", Must(f.ca.certificate().ToPem()));
  CommandResult r = f.Openssl(
      "req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes "
      "-keyout k.pem -subj /CN=whatever "
      "-addext subjectAltName=URI:spiffe://prod/node/db-1 -out r.pem");
  REQUIRE(r.exit_code == 0);
  std::string csr = Must(ReadFile(f.dir.Sub("r.pem")));
  Certificate cert =
      Must(f.ca.IssueFromCsr(csr, {NodeId("db-1"), Role::kNode}, Now()));
  f.Write("db.pem", Must(cert.ToPem()));
  CHECK(f.Openssl("verify -x509_strict -CAfile ca.pem db.pem").exit_code == 0);
  PeerVerifier verifier = Must(PeerVerifier::Create(f.ca.certificate()));
  PeerIdentity id =
      Must(verifier.Verify(cert, PeerSide::kServer, RevocationList(), Now()));
  CHECK(id.name == "db-1");
}

// --- a real mutual-TLS handshake through libssl ------------------------------

using UniqueSslCtx = std::unique_ptr<SSL_CTX, internal::Deleter<SSL_CTX_free>>;
using UniqueSsl = std::unique_ptr<SSL, internal::Deleter<SSL_free>>;

UniqueSslCtx MakeCtx(bool server, const Certificate& cert,
                     const PrivateKey& key, const Certificate& ca) {
  UniqueSslCtx ctx(
      SSL_CTX_new(server ? TLS_server_method() : TLS_client_method()));
  REQUIRE(ctx != nullptr);
  REQUIRE(SSL_CTX_set_min_proto_version(ctx.get(), TLS1_3_VERSION) == 1);
  REQUIRE(SSL_CTX_use_certificate(ctx.get(), cert.x509()) == 1);
  REQUIRE(SSL_CTX_use_PrivateKey(ctx.get(), key.evp()) == 1);
  REQUIRE(X509_STORE_add_cert(SSL_CTX_get_cert_store(ctx.get()), ca.x509()) ==
          1);
  SSL_CTX_set_verify(
      ctx.get(), SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  return ctx;
}

// Runs a handshake over an in-memory BIO pair. Returns the PEM of the
// client certificate the server saw, or "" when the handshake failed.
std::string Handshake(SSL_CTX* server_ctx, SSL_CTX* client_ctx) {
  UniqueSsl server(SSL_new(server_ctx));
  UniqueSsl client(SSL_new(client_ctx));
  BIO* server_bio = nullptr;
  BIO* client_bio = nullptr;
  REQUIRE(BIO_new_bio_pair(&server_bio, 0, &client_bio, 0) == 1);
  SSL_set_bio(server.get(), server_bio, server_bio);
  SSL_set_bio(client.get(), client_bio, client_bio);
  SSL_set_accept_state(server.get());
  SSL_set_connect_state(client.get());
  bool server_done = false;
  bool client_done = false;
  for (int i = 0; i < 100 && !(server_done && client_done); ++i) {
    for (auto [ssl, done] : {std::pair{client.get(), &client_done},
                             std::pair{server.get(), &server_done}}) {
      if (*done) continue;
      int rc = SSL_do_handshake(ssl);
      if (rc == 1) {
        *done = true;
        continue;
      }
      int err = SSL_get_error(ssl, rc);
      if (err != SSL_ERROR_WANT_READ && err != SSL_ERROR_WANT_WRITE) {
        ERR_clear_error();
        return "";
      }
    }
  }
  // In TLS 1.3 the client finishes first; the server has verified the
  // client certificate once its own handshake returns 1.
  if (!server_done || !client_done) return "";
  X509* peer = SSL_get0_peer_certificate(server.get());
  if (peer == nullptr || SSL_get_verify_result(server.get()) != X509_V_OK) {
    return "";
  }
  X509_up_ref(peer);
  return Must(Must(Certificate::FromX509(internal::UniqueX509(peer))).ToPem());
}

TEST_CASE("mutual TLS between a node, a user and the mesh CA") {
  CertificateAuthority ca = Must(CertificateAuthority::Create("prod", Now()));
  PrivateKey node_key = Must(PrivateKey::Generate());
  Certificate node = Must(ca.IssueForKey(
      Must(node_key.GetPublicKey()), {NodeId("web-1"), Role::kNode}, Now()));
  PrivateKey peer_key = Must(PrivateKey::Generate());
  Certificate peer = Must(ca.IssueForKey(
      Must(peer_key.GetPublicKey()), {NodeId("web-2"), Role::kNode}, Now()));
  PrivateKey user_key = Must(PrivateKey::Generate());
  Certificate user = Must(ca.IssueForKey(
      Must(user_key.GetPublicKey()), {UserId("alice"), Role::kViewer}, Now()));
  PeerVerifier verifier = Must(PeerVerifier::Create(ca.certificate()));
  UniqueSslCtx server = MakeCtx(true, node, node_key, ca.certificate());

  // Node to node: the server then re-checks the client's PEM, as the
  // authorization interceptor will with gRPC's x509_pem_cert.
  UniqueSslCtx node_client = MakeCtx(false, peer, peer_key, ca.certificate());
  std::string seen = Handshake(server.get(), node_client.get());
  REQUIRE(!seen.empty());
  PeerIdentity id =
      Must(verifier.Verify(seen, PeerSide::kClient, RevocationList(), Now()));
  CHECK(id.spiffe_id == "spiffe://prod/node/web-2");

  // A user as the client.
  UniqueSslCtx user_client = MakeCtx(false, user, user_key, ca.certificate());
  seen = Handshake(server.get(), user_client.get());
  REQUIRE(!seen.empty());
  id = Must(verifier.Verify(seen, PeerSide::kClient, RevocationList(), Now()));
  CHECK(id.role == Role::kViewer);

  // A client of another CA does not get through the handshake.
  CertificateAuthority other =
      Must(CertificateAuthority::Create("prod", Now()));
  PrivateKey other_key = Must(PrivateKey::Generate());
  Certificate stranger = Must(other.IssueForKey(
      Must(other_key.GetPublicKey()), {NodeId("web-3"), Role::kNode}, Now()));
  UniqueSslCtx stranger_client =
      MakeCtx(false, stranger, other_key, other.certificate());
  CHECK(Handshake(server.get(), stranger_client.get()).empty());

  // A user certificate cannot serve: the client refuses it.
  UniqueSslCtx user_server = MakeCtx(true, user, user_key, ca.certificate());
  CHECK(Handshake(user_server.get(), node_client.get()).empty());
}

}  // namespace
}  // namespace mycel::pki
