// Join tokens, revocation lists and rotation.
#include <doctest/doctest.h>

#include <string>

#include "mesh/pki/join_token.h"
#include "mesh/pki/revocation_list.h"
#include "mesh/pki/rotation.h"
#include "runtime/fs.h"
#include "tests/unit/mesh/pki_test_util.h"

namespace mycel::pki {
namespace {

using testing::Fails;
using testing::MakeCa;
using testing::Must;
using testing::T0;
constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;
constexpr auto kUnauth = absl::StatusCode::kUnauthenticated;

const std::string kFingerprint(64, 'c');

// --- join tokens ------------------------------------------------------------

TEST_CASE("a join token is one shell-safe line and round trips") {
  JoinToken token = Must(JoinToken::Generate(kFingerprint));
  std::string text = token.ToString();
  CHECK(text.size() == 143);
  CHECK(text.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789.") ==
        std::string::npos);
  CHECK(absl::StartsWith(text, "mycel1." + token.id() + "."));
  CHECK(absl::EndsWith(text, "." + kFingerprint));
  CHECK(token.secret().size() == 32);
  CHECK(ValidateJoinTokenId(token.id()).ok());

  for (const std::string& pasted : {text, text + "\n", "  " + text + " \r\n"}) {
    JoinToken back = Must(JoinToken::Parse(pasted));
    CHECK(back.id() == token.id());
    CHECK(back.secret() == token.secret());
    CHECK(back.ca_fingerprint() == kFingerprint);
    CHECK(back.ToString() == text);
  }
  JoinToken other = Must(JoinToken::Generate(kFingerprint));
  CHECK(other.secret() != token.secret());
  CHECK(Fails(JoinToken::Generate("abc"), kInvalid,
              "CA fingerprint: 3 characters, expected 64"));
}

TEST_CASE("join token parse errors are specific and never echo the secret") {
  std::string text = Must(JoinToken::Generate(kFingerprint)).ToString();
  std::string secret = text.substr(14, 64);
  struct Case {
    std::string input;
    std::string error;
  };
  std::string upper = text;
  upper[20] = 'A';
  std::string bad_id = text;
  bad_id[8] = '_';
  Case cases[] = {
      {"", "join token: empty"},
      {"hello", "does not start with \"mycel1.\""},
      {"kubeadm.abcdef.0123456789abcdef", "does not start with"},
      {"mycel2" + text.substr(6), "version \"mycel2\" is not supported"},
      {"mycel1", "has 1 fields separated by '.', expected 4 (truncated?)"},
      {text.substr(0, 20), "has 3 fields"},
      {text.substr(0, text.size() - 65), "has 3 fields"},
      {text + ".x", "has 5 fields"},
      {text.substr(0, text.size() - 1),
       "CA fingerprint: 63 characters, expected 64 (truncated?)"},
      {text.substr(0, 13) + "." + secret.substr(1) + text.substr(78),
       "secret: 63 characters, expected 64 (truncated?)"},
      {upper, "secret: character 7 is not lower-case hex"},
      {bad_id, "id: character 2 is not in [a-z0-9]"},
      {"mycel1.abc." + secret + "." + kFingerprint,
       "id: 3 characters, expected 6"},
      {text.substr(0, 30) + " " + text.substr(31), "secret: character"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.input);
    absl::StatusOr<JoinToken> parsed = JoinToken::Parse(c.input);
    CHECK(Fails(parsed, kInvalid, c.error));
    CHECK(!absl::StrContains(parsed.status().message(), secret.substr(0, 16)));
  }
}

TEST_CASE("a presented token is checked against the stored hash") {
  JoinToken token = Must(JoinToken::Generate(kFingerprint));
  StoredJoinToken stored =
      token.ToStored(T0(), T0() + absl::Hours(24), /*uses=*/2);
  CHECK(stored.id == token.id());
  CHECK(stored.secret_hash == HashJoinSecret(token.secret()));
  CHECK(stored.secret_hash.size() == 64);
  CHECK(stored.secret_hash.find(internal::Hex(token.secret())) ==
        std::string::npos);

  CHECK(CheckJoinToken(stored, token, T0()).ok());
  CHECK(CheckJoinToken(stored, Must(JoinToken::Parse(token.ToString())),
                       T0() + absl::Hours(23))
            .ok());

  // Same id, another secret.
  std::string text = token.ToString();
  text[20] = text[20] == '0' ? '1' : '0';
  JoinToken forged = Must(JoinToken::Parse(text));
  CHECK(Fails(CheckJoinToken(stored, forged, T0()), kUnauth,
              "join token " + token.id() + ": wrong secret"));

  CHECK(Fails(CheckJoinToken(stored, token, T0() + absl::Hours(24)), kUnauth,
              "expired at 2030-06-02T12:00:00Z"));
  StoredJoinToken used = stored;
  used.uses_left = 0;
  CHECK(Fails(CheckJoinToken(used, token, T0()), kUnauth, "used up"));
  StoredJoinToken revoked = stored;
  revoked.revoked = true;
  CHECK(Fails(CheckJoinToken(revoked, token, T0()), kUnauth, "revoked"));

  // Without the secret, nothing about the token's state is revealed.
  StoredJoinToken dead = stored;
  dead.revoked = true;
  dead.uses_left = 0;
  CHECK(Fails(CheckJoinToken(dead, forged, T0() + absl::Hours(48)), kUnauth,
              "wrong secret"));

  JoinToken other = Must(JoinToken::Generate(kFingerprint));
  CHECK(Fails(CheckJoinToken(stored, other, T0()), kInvalid,
              "differs from the presented id"));
  StoredJoinToken corrupt = stored;
  corrupt.secret_hash = "zz";
  CHECK(Fails(CheckJoinToken(corrupt, token, T0()), absl::StatusCode::kInternal,
              "stored secret hash is malformed"));
}

TEST_CASE("the secret hash is SHA-256 hex") {
  CHECK(HashJoinSecret(std::string(32, '\0')) ==
        "66687aadf862bd776c8fc18b8e9f8e20089714856ee233b3902a591d0d5f2925");
}

TEST_CASE("secrets are compared with CRYPTO_memcmp") {
  // Timing cannot be asserted reliably in a unit test on shared cores, so
  // this pins down the two facts that make the comparison constant-time:
  // the helper's semantics, and that the token check goes through it.
  CHECK(internal::ConstantTimeEquals("abc", "abc"));
  CHECK(!internal::ConstantTimeEquals("abc", "abd"));
  CHECK(!internal::ConstantTimeEquals("xbc", "abc"));
  CHECK(!internal::ConstantTimeEquals("abc", "abcd"));
  CHECK(internal::ConstantTimeEquals("", ""));
  std::string helper = Must(ReadFile(std::string(MYCEL_SOURCE_DIR) +
                                     "/mesh/pki/internal/openssl.cc"));
  CHECK(absl::StrContains(helper, "CRYPTO_memcmp(a.data(), b.data()"));
  std::string token =
      Must(ReadFile(std::string(MYCEL_SOURCE_DIR) + "/mesh/pki/join_token.cc"));
  CHECK(absl::StrContains(token, "internal::ConstantTimeEquals("));
  CHECK(!absl::StrContains(token, "secret_hash =="));
  CHECK(!absl::StrContains(token, "== stored"));
}

TEST_CASE("a token pins the CA certificate") {
  CertificateAuthority ca = MakeCa();
  JoinToken token = Must(JoinToken::Generate(ca.fingerprint()));
  CHECK(token.CheckCa(ca.certificate()).ok());
  CertificateAuthority impostor = MakeCa();
  CHECK(Fails(token.CheckCa(impostor.certificate()), kUnauth,
              "does not match the join token's pin " + ca.fingerprint()));
}

TEST_CASE("token ids are validated for `token revoke ID`") {
  CHECK(ValidateJoinTokenId("a1b2c3").ok());
  CHECK(Fails(ValidateJoinTokenId("A1B2C3"), kInvalid, "character 1"));
  CHECK(Fails(ValidateJoinTokenId("abc"), kInvalid, "3 characters"));
  CHECK(Fails(ValidateJoinTokenId(""), kInvalid, "0 characters"));
}

// --- revocation list --------------------------------------------------------

TEST_CASE("serials are normalised for lookup") {
  CHECK(Must(NormalizeSerial("0A:1B:FF")) == "0a1bff");
  CHECK(Must(NormalizeSerial("00a1bff")) == "0a1bff");
  CHECK(Must(NormalizeSerial("a1bff")) == "0a1bff");
  CHECK(Must(NormalizeSerial("0")) == "00");
  CHECK(Fails(NormalizeSerial(""), kInvalid, "serial: empty"));
  CHECK(Fails(NormalizeSerial("xyz"), kInvalid, "serial"));
  CHECK(Fails(NormalizeSerial(std::string(42, 'f')), kInvalid,
              "longer than 20 bytes"));

  RevocationList list;
  REQUIRE(list.RevokeSerial("0A:1B:FF", T0()).ok());
  CHECK(list.SerialRevokedAt("0a1bff") == T0());
  CHECK(list.SerialRevokedAt("00:0a:1b:ff") == T0());
  CHECK(!list.SerialRevokedAt("0a1bfe").has_value());
  CHECK(!list.SerialRevokedAt("junk").has_value());
  CHECK(Fails(list.RevokeSerial("junk", T0()), kInvalid, "serial"));
  CHECK(Fails(list.RevokeIdentity(IdentityKind::kNode, "Bad", T0()), kInvalid,
              "name"));
}

TEST_CASE("each change bumps the generation; repeats keep the widest entry") {
  RevocationList list;
  CHECK(list.generation() == 0);
  CHECK(list.empty());
  REQUIRE(list.RevokeSerial("01", T0()).ok());
  CHECK(list.generation() == 1);
  REQUIRE(list.RevokeSerial("01", T0() + absl::Hours(1)).ok());
  CHECK(list.generation() == 1);  // no change: the earlier time stays
  CHECK(list.SerialRevokedAt("01") == T0());
  REQUIRE(list.RevokeIdentity(IdentityKind::kUser, "alice", T0()).ok());
  CHECK(list.generation() == 2);
  REQUIRE(
      list.RevokeIdentity(IdentityKind::kUser, "alice", T0() + absl::Hours(1))
          .ok());
  CHECK(list.generation() == 3);  // later covers more
  CHECK(list.IdentityRevokedAt(IdentityKind::kUser, "alice") ==
        T0() + absl::Hours(1));
  CHECK(!list.IdentityRevokedAt(IdentityKind::kNode, "alice").has_value());
}

TEST_CASE("Check refuses revoked serials and names issued before revocation") {
  PeerIdentity peer;
  peer.kind = IdentityKind::kNode;
  peer.name = "web-1";
  peer.serial = "0a1bff";
  peer.not_before = T0() - kNotBeforeBackdate;  // issued at T0
  RevocationList list;
  CHECK(list.Check(peer).ok());
  REQUIRE(
      list.RevokeIdentity(IdentityKind::kNode, "web-1", T0() - absl::Seconds(1))
          .ok());
  CHECK(list.Check(peer).ok());  // issued after the revocation
  REQUIRE(list.RevokeIdentity(IdentityKind::kNode, "web-1", T0()).ok());
  CHECK(Fails(list.Check(peer), kUnauth,
              "revoked: node web-1 at 2030-06-01T12:00:00Z"));
  RevocationList serials;
  REQUIRE(serials.RevokeSerial("0A1BFF", T0()).ok());
  CHECK(Fails(serials.Check(peer), kUnauth,
              "revoked: serial 0a1bff at 2030-06-01T12:00:00Z"));
}

RevocationList SampleList() {
  RevocationList list;
  REQUIRE(list.RevokeSerial("0a1bff", T0()).ok());
  REQUIRE(list.RevokeSerial("ff" + std::string(38, '1'), T0() + absl::Hours(1))
              .ok());
  REQUIRE(list.RevokeSerial("00", T0()).ok());
  REQUIRE(list.RevokeIdentity(IdentityKind::kNode, "web-1", T0()).ok());
  REQUIRE(list.RevokeIdentity(IdentityKind::kUser, "web-1", T0()).ok());
  REQUIRE(list.RevokeIdentity(IdentityKind::kUser, "alice",
                              absl::FromUnixSeconds(-5))
              .ok());
  return list;
}

TEST_CASE("the revocation list serialises and parses back exactly") {
  RevocationList list = SampleList();
  list.set_generation(1234567890123ull);
  std::string bytes = list.Serialize();
  CHECK(absl::StartsWith(bytes, "MYCELRVL\x00\x01"));
  RevocationList back = Must(RevocationList::Parse(bytes));
  CHECK(back == list);
  CHECK(back.Serialize() == bytes);
  CHECK(back.generation() == 1234567890123ull);
  CHECK(back.serials().size() == 3);
  CHECK(back.identities().size() == 3);

  RevocationList empty;
  CHECK(Must(RevocationList::Parse(empty.Serialize())) == empty);
  // Sub-second times are kept to the second.
  RevocationList frac;
  REQUIRE(frac.RevokeSerial("01", T0() + absl::Milliseconds(700)).ok());
  CHECK(Must(RevocationList::Parse(frac.Serialize())) == frac);
}

TEST_CASE("malformed revocation lists are refused") {
  std::string bytes = SampleList().Serialize();
  // Every strict prefix is truncated.
  for (size_t n = 0; n < bytes.size(); ++n) {
    CAPTURE(n);
    CHECK(RevocationList::Parse(bytes.substr(0, n)).status().code() ==
          kInvalid);
  }
  CHECK(Fails(RevocationList::Parse(""), kInvalid,
              "revocation list: truncated at byte 0"));
  CHECK(Fails(RevocationList::Parse(bytes + "x"), kInvalid,
              "1 unexpected bytes after the last entry"));
  std::string magic = bytes;
  magic[0] = 'X';
  CHECK(Fails(RevocationList::Parse(magic), kInvalid, "bad magic"));
  std::string version = bytes;
  version[9] = 2;
  CHECK(
      Fails(RevocationList::Parse(version), kInvalid, "unsupported version 2"));
  std::string count = bytes;
  count[18] = '\x7f';  // serial count 0x7f000003
  CHECK(Fails(RevocationList::Parse(count), kInvalid, "exceeds the data"));

  // Hand-built entries.
  auto header = [](uint32_t serials) {
    std::string h("MYCELRVL\x00\x01", 10);
    h += std::string(8, '\0');
    h += std::string("\x00\x00\x00", 3) + static_cast<char>(serials);
    return h;
  };
  std::string time(8, '\0');
  std::string no_identities(4, '\0');
  CHECK(Fails(RevocationList::Parse(header(1) + std::string(1, '\0') + time +
                                    no_identities),
              kInvalid, "serial entry 0: length 0"));
  CHECK(Fails(RevocationList::Parse(header(1) + "\x02" + std::string(1, '\0') +
                                    "\x01" + time + no_identities),
              kInvalid, "leading zero byte"));
  CHECK(Fails(RevocationList::Parse(header(2) + "\x01\x02" + time + "\x01\x01" +
                                    time + no_identities),
              kInvalid, "serial entry 1: not sorted or duplicate"));
  CHECK(Fails(RevocationList::Parse(header(2) + "\x01\x02" + time + "\x01\x02" +
                                    time + no_identities),
              kInvalid, "not sorted or duplicate"));
  std::string one_identity("\x00\x00\x00\x01", 4);
  CHECK(Fails(
      RevocationList::Parse(header(0) + one_identity + "\x03\x01" + "a" + time),
      kInvalid, "identity entry 0: unknown kind 3"));
  CHECK(Fails(
      RevocationList::Parse(header(0) + one_identity + "\x01\x01" + "A" + time),
      kInvalid, "identity entry 0: name"));
  CHECK(Fails(RevocationList::Parse(header(0) + one_identity +
                                    std::string("\x01\x00", 2) + time + "x"),
              kInvalid, "identity entry 0: name: empty"));
}

TEST_CASE("merging keeps every revocation from both copies") {
  RevocationList a;
  REQUIRE(a.RevokeSerial("01", T0()).ok());
  REQUIRE(a.RevokeIdentity(IdentityKind::kNode, "web-1", T0()).ok());
  REQUIRE(a.RevokeSerial("03", T0()).ok());
  RevocationList b;
  REQUIRE(b.RevokeSerial("01", T0() - absl::Hours(1)).ok());
  REQUIRE(b.RevokeSerial("02", T0()).ok());
  REQUIRE(b.RevokeIdentity(IdentityKind::kNode, "web-1", T0() + absl::Hours(1))
              .ok());
  RevocationList merged = a;
  merged.Merge(b);
  CHECK(merged.SerialRevokedAt("01") == T0() - absl::Hours(1));
  CHECK(merged.SerialRevokedAt("02") == T0());
  CHECK(merged.SerialRevokedAt("03") == T0());
  CHECK(merged.IdentityRevokedAt(IdentityKind::kNode, "web-1") ==
        T0() + absl::Hours(1));
  // Differs from both: newer than either.
  CHECK(merged.generation() == 4);
  // Merging in a subset changes nothing.
  RevocationList again = merged;
  again.Merge(a);
  CHECK(again == merged);
  // Merging into a subset takes the superset's generation.
  RevocationList sub = a;
  sub.Merge(merged);
  CHECK(sub == merged);
}

// --- rotation ---------------------------------------------------------------

TEST_CASE("certificates renew at two thirds of their life") {
  absl::Time nb = T0();
  absl::Time na = T0() + absl::Hours(24 * 30);
  RotationPlan early = PlanRotation(nb, na, T0() + absl::Hours(24 * 19));
  CHECK(early.renew_at == T0() + absl::Hours(24 * 20));
  CHECK(!early.due);
  CHECK(PlanRotation(nb, na, T0() + absl::Hours(24 * 20)).due);
  CHECK(PlanRotation(nb, na, na + absl::Hours(1)).due);
  RotationPlan broken = PlanRotation(na, nb, T0());
  CHECK(broken.due);
  CHECK(broken.renew_at == na);

  // On an issued certificate (notBefore backdated by five minutes).
  CertificateAuthority ca = MakeCa();
  PublicKey pub = Must(Must(PrivateKey::Generate()).GetPublicKey());
  Certificate cert =
      Must(ca.IssueForKey(pub, {testing::NodeId("web-1"), Role::kNode}, T0()));
  RotationPlan plan =
      PlanRotation(cert.not_before(), cert.not_after(), T0() + absl::Hours(1));
  CHECK(!plan.due);
  CHECK(plan.renew_at ==
        cert.not_before() + (cert.not_after() - cert.not_before()) * 2 / 3);
  CHECK(plan.renew_at > T0() + absl::Hours(24 * 19));
  CHECK(plan.renew_at < T0() + absl::Hours(24 * 20));
}

}  // namespace
}  // namespace mycel::pki
