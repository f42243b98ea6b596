// Keys, key files, SPIFFE IDs and roles.
#include <dirent.h>
#include <doctest/doctest.h>
#include <openssl/pem.h>
#include <sys/stat.h>

#include <algorithm>
#include <string>
#include <vector>

#include "mesh/pki/private_key.h"
#include "mesh/pki/public_key.h"
#include "mesh/pki/role.h"
#include "mesh/pki/spiffe_id.h"
#include "runtime/fs.h"
#include "tests/testing/process.h"
#include "tests/unit/mesh/pki_test_util.h"

namespace mycel::pki {
namespace {

using testing::Fails;
using testing::Must;
constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;

std::string PemOf(EVP_PKEY* key) {
  internal::UniqueBio bio(BIO_new(BIO_s_mem()));
  REQUIRE(PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr,
                                   nullptr) == 1);
  return internal::BioContents(bio.get());
}

std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = opendir(dir.c_str());
  REQUIRE(d != nullptr);
  while (struct dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  closedir(d);
  return names;
}

TEST_CASE("a generated key is P-256 and survives PKCS#8 PEM") {
  PrivateKey key = Must(PrivateKey::Generate());
  CHECK(internal::IsP256(key.evp()));
  std::string pem = Must(key.ToPem());
  CHECK(absl::StartsWith(pem, "-----BEGIN PRIVATE KEY-----\n"));
  PrivateKey back = Must(PrivateKey::FromPem(pem));
  CHECK(Must(Must(back.GetPublicKey()).ToDer()) ==
        Must(Must(key.GetPublicKey()).ToDer()));
  // Two keys differ.
  PrivateKey other = Must(PrivateKey::Generate());
  CHECK(Must(Must(other.GetPublicKey()).ToDer()) !=
        Must(Must(key.GetPublicKey()).ToDer()));
}

TEST_CASE("private key PEM: garbage, truncation and other key types fail") {
  PrivateKey key = Must(PrivateKey::Generate());
  std::string pem = Must(key.ToPem());
  CHECK(Fails(PrivateKey::FromPem(""), kInvalid, "private key: not PEM"));
  CHECK(Fails(PrivateKey::FromPem("hello"), kInvalid, "not PEM"));
  CHECK(Fails(PrivateKey::FromPem(pem.substr(0, pem.size() / 2)), kInvalid,
              "malformed or truncated PEM"));
  CHECK(Fails(PrivateKey::FromPem(pem + "extra"), kInvalid,
              "unexpected data after the PEM block"));
  CHECK(Fails(PrivateKey::FromPem(pem + pem), kInvalid,
              "unexpected data after the PEM block"));
  // Whitespace around the block is fine.
  CHECK(PrivateKey::FromPem("\n  " + pem + "\n\n").ok());

  // Legacy "EC PRIVATE KEY".
  internal::UniqueBio bio(BIO_new(BIO_s_mem()));
  REQUIRE(PEM_write_bio_PrivateKey_traditional(bio.get(), key.evp(), nullptr,
                                               nullptr, 0, nullptr,
                                               nullptr) == 1);
  CHECK(Fails(PrivateKey::FromPem(internal::BioContents(bio.get())), kInvalid,
              "\"EC PRIVATE KEY\", expected \"PRIVATE KEY\""));

  // Encrypted PKCS#8: refused, and never a passphrase prompt.
  internal::UniqueBio enc(BIO_new(BIO_s_mem()));
  REQUIRE(PEM_write_bio_PKCS8PrivateKey(enc.get(), key.evp(), EVP_aes_256_cbc(),
                                        nullptr, 0, nullptr,
                                        const_cast<char*>("pw")) == 1);
  CHECK(Fails(PrivateKey::FromPem(internal::BioContents(enc.get())), kInvalid,
              "ENCRYPTED PRIVATE KEY"));

  auto rsa = testing::GenerateRsa();
  CHECK(Fails(PrivateKey::FromPem(PemOf(rsa.get())), kInvalid,
              "must be ECDSA on the named curve P-256"));
  auto p384 = testing::GenerateEc("P-384");
  CHECK(Fails(PrivateKey::FromPem(PemOf(p384.get())), kInvalid,
              "must be ECDSA on the named curve P-256"));
}

TEST_CASE("public key DER and PEM round trip; other keys and junk fail") {
  PrivateKey key = Must(PrivateKey::Generate());
  PublicKey pub = Must(key.GetPublicKey());
  std::string der = Must(pub.ToDer());
  std::string pem = Must(pub.ToPem());
  CHECK(absl::StartsWith(pem, "-----BEGIN PUBLIC KEY-----\n"));
  CHECK(Must(Must(PublicKey::FromDer(der)).ToDer()) == der);
  CHECK(Must(Must(PublicKey::FromPem(pem)).ToDer()) == der);
  CHECK(Fails(PublicKey::FromDer(""), kInvalid, "public key: empty"));
  CHECK(Fails(PublicKey::FromDer(der.substr(0, 20)), kInvalid,
              "malformed or truncated"));
  CHECK(Fails(PublicKey::FromDer(der + "x"), kInvalid, "unexpected bytes"));
  auto rsa = testing::GenerateRsa();
  internal::UniqueBio bio(BIO_new(BIO_s_mem()));
  PEM_write_bio_PUBKEY(bio.get(), rsa.get());
  CHECK(Fails(PublicKey::FromPem(internal::BioContents(bio.get())), kInvalid,
              "must be ECDSA"));
}

TEST_CASE("a key file is written atomically with mode 0600") {
  mycel::testing::TempDir dir;
  std::string path = dir.Sub("node.key");
  PrivateKey key = Must(PrivateKey::Generate());

  // A permissive umask must not widen the mode, and an existing world-
  // readable file is replaced, not rewritten in place.
  REQUIRE(WriteFile(path, "old", 0644).ok());
  struct stat before;
  REQUIRE(stat(path.c_str(), &before) == 0);
  mode_t old_umask = umask(0);
  absl::Status written = key.WriteToFile(path);
  umask(old_umask);
  REQUIRE_MESSAGE(written.ok(), written.ToString());

  struct stat st;
  REQUIRE(stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0600);
  CHECK(st.st_ino != before.st_ino);
  std::string pem = Must(ReadFile(path));
  CHECK(Must(Must(PrivateKey::FromPem(pem)).ToPem()) == Must(key.ToPem()));
  // No temporary file is left behind.
  CHECK(ListDir(dir.path()) == std::vector<std::string>{"node.key"});

  // A restrictive umask does not narrow it either.
  old_umask = umask(0077);
  REQUIRE(key.WriteToFile(dir.Sub("second.key")).ok());
  umask(old_umask);
  REQUIRE(stat(dir.Sub("second.key").c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0600);
}

TEST_CASE("a key file in a missing directory fails and leaves nothing") {
  mycel::testing::TempDir dir;
  PrivateKey key = Must(PrivateKey::Generate());
  absl::Status s = key.WriteToFile(dir.Sub("missing/node.key"));
  CHECK(s.code() == absl::StatusCode::kNotFound);
  CHECK(absl::StrContains(s.message(), dir.Sub("missing/")));
  CHECK(ListDir(dir.path()).empty());
  CHECK(Fails(mycel::WriteFileAtomic(dir.path() + "/", "x", 0600), kInvalid,
              "does not name a file"));
}

TEST_CASE("a failed write removes its temporary file and keeps the old one") {
  mycel::testing::TempDir dir;
  std::string path = dir.Sub("node.key");
  REQUIRE(WriteFile(path, "old", 0600).ok());
  // rename() of a file over a non-empty directory fails after the temporary
  // file was written.
  REQUIRE(MakeDirs(dir.Sub("busy/child"), 0755).ok());
  absl::Status s = mycel::WriteFileAtomic(dir.Sub("busy"), "new", 0600);
  CHECK(!s.ok());
  CHECK(absl::StrContains(s.message(), "rename"));
  std::vector<std::string> names = ListDir(dir.path());
  std::sort(names.begin(), names.end());
  CHECK(names == std::vector<std::string>{"busy", "node.key"});
  CHECK(Must(ReadFile(path)) == "old");
}

TEST_CASE("SPIFFE IDs: node and user round trip") {
  SpiffeId node = Must(SpiffeId::Parse("spiffe://prod/node/web-1"));
  CHECK(node.kind() == IdentityKind::kNode);
  CHECK(node.mesh() == "prod");
  CHECK(node.name() == "web-1");
  CHECK(node.ToString() == "spiffe://prod/node/web-1");
  SpiffeId user = Must(SpiffeId::Parse("spiffe://eu.example-1/user/alice_b.c"));
  CHECK(user.kind() == IdentityKind::kUser);
  CHECK(user.mesh() == "eu.example-1");
  CHECK(user.name() == "alice_b.c");
  CHECK(Must(SpiffeId::Create(IdentityKind::kUser, "eu.example-1",
                              "alice_b.c")) == user);
  CHECK(node != user);
  std::string longest(63, 'a');
  CHECK(SpiffeId::Parse("spiffe://m/node/" + longest).ok());
  CHECK(SpiffeId::Parse("spiffe://m/node/0").ok());
  CHECK(TrustDomainId("prod") == "spiffe://prod");
}

TEST_CASE("SPIFFE IDs: everything else is refused") {
  const char* bad[] = {
      "",
      "http://prod/node/a",
      "SPIFFE://prod/node/a",
      "spiffe:/prod/node/a",
      "spiffe:///node/a",
      "spiffe://Prod/node/a",
      "spiffe://prod:443/node/a",
      "spiffe://user@prod/node/a",
      "spiffe://prod_x/node/a",
      "spiffe://.prod/node/a",
      "spiffe://prod./node/a",
      "spiffe://-prod/node/a",
      "spiffe://pr..od/node/a",
      "spiffe://prod",
      "spiffe://prod/",
      "spiffe://prod/node",
      "spiffe://prod/node/",
      "spiffe://prod//node/a",
      "spiffe://prod/pod/a",
      "spiffe://prod/Node/a",
      "spiffe://prod/node/A",
      "spiffe://prod/node/_a",
      "spiffe://prod/node/.a",
      "spiffe://prod/node/a/",
      "spiffe://prod/node/a/b",
      "spiffe://prod/node/a?x=1",
      "spiffe://prod/node/a#f",
      "spiffe://prod/node/%61",
      "spiffe://prod/node/a b",
      "spiffe://prod/node/a\n",
      "spiffe://prod/node/..",
  };
  for (const char* uri : bad) {
    CAPTURE(uri);
    CHECK(SpiffeId::Parse(uri).status().code() == kInvalid);
  }
  CHECK(Fails(SpiffeId::Parse(std::string("spiffe://prod/node/a\0b", 22)),
              kInvalid, "name: character 2"));
  CHECK(Fails(SpiffeId::Parse("spiffe://prod/node/" + std::string(64, 'a')),
              kInvalid, "longer than 63"));
  CHECK(Fails(SpiffeId::Parse("spiffe://prod/pod/a"), kInvalid,
              "path must be /node/NAME or /user/NAME"));
  CHECK(Fails(ValidateMeshName(std::string(254, 'a')), kInvalid,
              "longer than 253"));
  CHECK(Fails(ValidateMeshName("Prod"), kInvalid,
              "character 1 'P' is not in [a-z0-9.-]"));
  CHECK(Fails(SpiffeId::Create(IdentityKind::kNode, "prod", ""), kInvalid,
              "name: empty"));
}

TEST_CASE("roles live in the subject Organization and fit their kind") {
  CHECK(RoleOrganization(Role::kNode) == "mycel:node");
  CHECK(RoleOrganization(Role::kAdmin) == "mycel:admin");
  CHECK(RoleOrganization(Role::kViewer) == "mycel:viewer");
  for (Role role : {Role::kNode, Role::kAdmin, Role::kViewer}) {
    CHECK(Must(RoleFromOrganization(RoleOrganization(role))) == role);
    CHECK(Must(ParseRole(RoleName(role))) == role);
  }
  CHECK(Fails(RoleFromOrganization("mycel:root"), kInvalid, "subject O"));
  CHECK(Fails(ParseRole("root"), kInvalid, "role"));
  CHECK(CheckRoleFitsKind(IdentityKind::kNode, Role::kNode).ok());
  CHECK(CheckRoleFitsKind(IdentityKind::kUser, Role::kAdmin).ok());
  CHECK(CheckRoleFitsKind(IdentityKind::kUser, Role::kViewer).ok());
  CHECK(Fails(CheckRoleFitsKind(IdentityKind::kNode, Role::kAdmin), kInvalid,
              "admin cannot be held by a node"));
  CHECK(Fails(CheckRoleFitsKind(IdentityKind::kUser, Role::kNode), kInvalid,
              "node cannot be held by a user"));
}

}  // namespace
}  // namespace mycel::pki
