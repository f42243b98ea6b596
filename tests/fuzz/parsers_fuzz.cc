// parsers_fuzz: the parsers of text and bytes that arrive from outside:
// a join token (typed by an operator, presented by a joining node), a
// SPIFFE ID (from a peer's certificate), the revocation list (from a peer),
// an object version (a compare-and-set's if_version, from a client), a
// JSON value (State.Put, from a client), a certificate request (from a node
// that joins, before it is anyone) and a peer's certificate (in gossip and
// replication records). The first byte picks the parser (% 7), the rest is
// its input.
//
// Checked: what parses round-trips (a SPIFFE ID and a revocation list are
// strict formats, so they print back to the very input); every refusal is
// INVALID_ARGUMENT; a JSON text the check accepts is one that nlohmann's
// own parser accepts, in valid UTF-8, with no NUL; a request or certificate
// that parses names what it was issued for, and parses again from its DER.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "daemon/store/json_text.h"
#include "daemon/store/objects.h"
#include "mesh/pki/certificate.h"
#include "mesh/pki/certificate_authority.h"
#include "mesh/pki/certificate_request.h"
#include "mesh/pki/join_token.h"
#include "mesh/pki/peer_identity.h"
#include "mesh/pki/private_key.h"
#include "mesh/pki/revocation_list.h"
#include "mesh/pki/spiffe_id.h"
#include "tests/fuzz/fuzz_target.h"

namespace mycel::fuzz {
namespace {

enum Parser : uint8_t {
  kJoinToken,
  kSpiffeId,
  kRevocationList,
  kObjectVersion,
  kJson,
  kCertificateRequest,
  kPeerCertificate,
  kParsers
};

void CheckRefusal(const absl::Status& s) {
  FUZZ_CHECK(absl::IsInvalidArgument(s), s.ToString());
}

void JoinToken(const std::string& text) {
  absl::StatusOr<pki::JoinToken> t = pki::JoinToken::Parse(text);
  if (!t.ok()) return CheckRefusal(t.status());
  absl::StatusOr<pki::JoinToken> again = pki::JoinToken::Parse(t->ToString());
  FUZZ_CHECK(again.ok(), again.status().ToString());
  FUZZ_CHECK(again->id() == t->id() && again->secret() == t->secret() &&
                 again->ca_fingerprint() == t->ca_fingerprint(),
             "no round trip");
}

void SpiffeId(const std::string& text) {
  absl::StatusOr<pki::SpiffeId> id = pki::SpiffeId::Parse(text);
  if (!id.ok()) return CheckRefusal(id.status());
  FUZZ_CHECK(id->ToString() == text, id->ToString());
}

void RevocationList(const std::string& data) {
  absl::StatusOr<pki::RevocationList> list = pki::RevocationList::Parse(data);
  if (!list.ok()) return CheckRefusal(list.status());
  FUZZ_CHECK(list->Serialize() == data, "not the bytes it came from");
}

void ObjectVersion(const std::string& text) {
  absl::StatusOr<store::ObjectVersion> v =
      store::ObjectVersion::Parse(text, "if_version");
  if (!v.ok()) {
    CheckRefusal(v.status());
    FUZZ_CHECK(absl::StrContains(v.status().message(), "if_version"),
               v.status().ToString());
    return;
  }
  absl::StatusOr<store::ObjectVersion> again =
      store::ObjectVersion::Parse(v->ToString(), "if_version");
  FUZZ_CHECK(again.ok(), again.status().ToString());
  FUZZ_CHECK(*again == *v, v->ToString());
}

void Json(const std::string& text) {
  absl::Status s = store::CheckJsonText(text);
  if (!s.ok()) return CheckRefusal(s);
  FUZZ_CHECK(nlohmann::json::accept(text), "nlohmann refuses it");
  FUZZ_CHECK(store::CheckUtf8(text).ok(), "not UTF-8");
  FUZZ_CHECK(text.find('\0') == std::string::npos, "a NUL");
}

void CertificateRequest(const std::string& data) {
  absl::StatusOr<pki::CertificateRequest> csr =
      pki::CertificateRequest::Parse(data, "prod");
  if (!csr.ok()) {
    CheckRefusal(csr.status());
    FUZZ_CHECK(absl::StartsWith(csr.status().message(), "csr: "),
               csr.status().ToString());
    return;
  }
  FUZZ_CHECK(csr->spiffe_id().mesh() == "prod", csr->spiffe_id().ToString());
  absl::StatusOr<pki::CertificateRequest> again =
      pki::CertificateRequest::Parse(csr->der(), "prod");
  FUZZ_CHECK(again.ok(), again.status().ToString());
  FUZZ_CHECK(again->spiffe_id() == csr->spiffe_id(), "");
}

void PeerCertificate(const std::string& data) {
  absl::StatusOr<pki::PeerIdentity> id = pki::ParsePeerIdentity(data);
  if (!id.ok()) return CheckRefusal(id.status());
  absl::StatusOr<pki::SpiffeId> spiffe = pki::SpiffeId::Parse(id->spiffe_id);
  FUZZ_CHECK(spiffe.ok(), spiffe.status().ToString());
  FUZZ_CHECK(spiffe->name() == id->name && spiffe->mesh() == id->mesh &&
                 spiffe->kind() == id->kind,
             id->spiffe_id);
}

}  // namespace

std::vector<std::string> Seeds() {
  auto seed = [](Parser p, const std::string& s) {
    return std::string(1, static_cast<char>(p)) + s;
  };
  std::vector<std::string> seeds;
  absl::StatusOr<pki::JoinToken> token =
      pki::JoinToken::Generate(std::string(64, 'a'));
  FUZZ_CHECK(token.ok(), token.status().ToString());
  seeds.push_back(seed(kJoinToken, token->ToString()));
  seeds.push_back(seed(kJoinToken, " " + token->ToString() + "\n"));
  seeds.push_back(seed(kSpiffeId, "spiffe://prod/node/n1"));
  seeds.push_back(seed(kSpiffeId, "spiffe://prod.example/user/alice"));
  pki::RevocationList list;
  list.set_generation(7);
  FUZZ_CHECK(list.RevokeSerial("01:0a:ff", absl::FromUnixSeconds(1000)).ok(),
             "");
  FUZZ_CHECK(list.RevokeSerial("7f", absl::FromUnixSeconds(2000)).ok(), "");
  FUZZ_CHECK(list.RevokeIdentity(pki::IdentityKind::kNode, "n2",
                                 absl::FromUnixSeconds(3000))
                 .ok(),
             "");
  FUZZ_CHECK(list.RevokeIdentity(pki::IdentityKind::kUser, "bob",
                                 absl::FromUnixSeconds(4000))
                 .ok(),
             "");
  seeds.push_back(seed(kRevocationList, list.Serialize()));
  seeds.push_back(seed(kRevocationList, pki::RevocationList().Serialize()));
  seeds.push_back(seed(kObjectVersion, "n1:42@18c0a1b2c3d40000"));
  seeds.push_back(seed(kObjectVersion, "none"));
  for (const char* json :
       {"{\"a\":[1,-2.5e3,true,false,null,\"\\u00e9\\ud83d\\ude00\"]}",
        " [ {}, [], \"\" ] ", "1e300", "\"\xc3\xa9\"", "[[[[[[[[1]]]]]]]]"}) {
    seeds.push_back(seed(kJson, json));
  }
  // A node's request and the certificate issued for it.
  const absl::Time now = absl::FromUnixSeconds(1'800'000'000);
  absl::StatusOr<pki::CertificateAuthority> ca =
      pki::CertificateAuthority::Create("prod", now);
  FUZZ_CHECK(ca.ok(), ca.status().ToString());
  absl::StatusOr<pki::PrivateKey> key = pki::PrivateKey::Generate();
  FUZZ_CHECK(key.ok(), key.status().ToString());
  absl::StatusOr<pki::SpiffeId> id =
      pki::SpiffeId::Create(pki::IdentityKind::kNode, "prod", "n1");
  FUZZ_CHECK(id.ok(), id.status().ToString());
  absl::StatusOr<pki::CertificateRequest> csr =
      pki::CertificateRequest::Create(*id, *key);
  FUZZ_CHECK(csr.ok(), csr.status().ToString());
  seeds.push_back(seed(kCertificateRequest, csr->der()));
  absl::StatusOr<std::string> csr_pem = csr->ToPem();
  FUZZ_CHECK(csr_pem.ok(), csr_pem.status().ToString());
  seeds.push_back(seed(kCertificateRequest, *csr_pem));
  absl::StatusOr<pki::Certificate> cert =
      ca->Issue(*csr, {.id = *id, .role = pki::Role::kNode}, now);
  FUZZ_CHECK(cert.ok(), cert.status().ToString());
  seeds.push_back(seed(kPeerCertificate, cert->der()));
  absl::StatusOr<std::string> cert_pem = cert->ToPem();
  FUZZ_CHECK(cert_pem.ok(), cert_pem.status().ToString());
  seeds.push_back(seed(kPeerCertificate, *cert_pem));
  // The CA's own certificate is no peer's.
  seeds.push_back(seed(kPeerCertificate, ca->certificate().der()));
  return seeds;
}

}  // namespace mycel::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mycel::fuzz;
  if (size == 0) return 0;
  const std::string rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % kParsers) {
    case kJoinToken:
      JoinToken(rest);
      break;
    case kSpiffeId:
      SpiffeId(rest);
      break;
    case kRevocationList:
      RevocationList(rest);
      break;
    case kObjectVersion:
      ObjectVersion(rest);
      break;
    case kJson:
      Json(rest);
      break;
    case kCertificateRequest:
      CertificateRequest(rest);
      break;
    case kPeerCertificate:
      PeerCertificate(rest);
      break;
  }
  return 0;
}
