#include "mesh/replication/origin_verifier.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/store/objects.h"
#include "daemon/store/store.h"
#include "mesh/identity/caller.h"
#include "mesh/pki/peer_verifier.h"
#include "mesh/pki/signature.h"
#include "mesh/replication/replica_log.h"
#include "runtime/status.h"

namespace mycel::replication {
namespace {

std::string Describe(const store::ObjectChange& c) {
  return absl::StrCat("change ", c.stamp.origin, ":", c.stamp.seq);
}

// A node name, or NAME~KEYID with a KEYID of kKeyIdDigits lower-case hex
// digits: "b~" or "~x" would pass for another form of a node's origin.
bool WellFormed(absl::string_view origin) {
  const size_t at = origin.find(store::kOriginKeySeparator);
  if (at == absl::string_view::npos) return !origin.empty();
  const absl::string_view key = origin.substr(at + 1);
  return at > 0 && key.size() == pki::kKeyIdDigits &&
         key.find_first_not_of("0123456789abcdef") == absl::string_view::npos;
}

}  // namespace

absl::StatusOr<std::string> OriginVerifier::NodeOf(
    const pki::Certificate& cert) {
  // The chain and the revocation list, not the dates: see the header.
  // (OpenSSL takes a certificate as expired at its notAfter second.)
  const absl::Time first = cert.not_before() + absl::Seconds(1);
  const absl::Time last = std::max(first, cert.not_after() - absl::Seconds(1));
  const absl::Time at = std::clamp(clock_->Now(), first, last);
  absl::StatusOr<identity::Caller> caller =
      trust_->Identify(cert, at, pki::PeerSide::kClient);
  {
    absl::MutexLock lock(&mu_);
    ++certificate_checks_;
  }
  if (!caller.ok())
    return absl::PermissionDeniedError(caller.status().message());
  if (caller->kind != identity::CallerKind::kNode) {
    return absl::PermissionDeniedError(
        absl::StrCat("it is ", caller->Describe(), "'s, not a node's"));
  }
  return caller->name;
}

std::string OriginVerifier::Kept(absl::string_view origin) {
  {
    absl::MutexLock lock(&mu_);
    auto it = kept_.find(origin);
    if (it != kept_.end()) return it->second;
  }
  // Not cached when Memory has none: the names of changes that fail are
  // the sender's to choose.
  if (!memory_.recall) return {};
  std::string der = memory_.recall(origin);
  if (der.empty()) return der;
  absl::MutexLock lock(&mu_);
  return kept_.try_emplace(std::string(origin), std::move(der)).first->second;
}

void OriginVerifier::Keep(absl::string_view origin, const std::string& der) {
  {
    absl::MutexLock lock(&mu_);
    auto [it, inserted] = kept_.try_emplace(std::string(origin), der);
    if (!inserted) {
      if (it->second == der) return;
      it->second = der;
    }
  }
  if (memory_.keep) memory_.keep(origin, der);
}

bool OriginVerifier::PlainOriginRevoked(absl::string_view origin) const {
  return store::OriginKeyId(origin).empty() &&
         trust_->IdentityRevoked(pki::IdentityKind::kNode, origin);
}

std::string OriginVerifier::MemberCertificate(absl::string_view origin) {
  // A node admitted again under a revoked node's name writes as NAME~KEYID
  // (store::OriginNode), and membership knows only the latest certificate
  // of a name: it is not the plain origin's once the name was revoked.
  if (PlainOriginRevoked(origin)) return {};
  return certificates_(store::OriginNode(origin));
}

absl::Status OriginVerifier::CheckLineage(absl::string_view origin,
                                          const pki::Certificate& cert) {
  const absl::string_view want = store::OriginKeyId(origin);
  if (want.empty()) return absl::OkStatus();
  absl::StatusOr<std::string> key = cert.KeyId();
  if (!key.ok()) return absl::PermissionDeniedError(key.status().message());
  if (*key != want) {
    return absl::PermissionDeniedError(
        absl::StrCat("the certificate known for it has key ", *key));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const pki::Certificate>> OriginVerifier::Check(
    absl::string_view origin, const std::string& der) {
  absl::StatusOr<pki::Certificate> cert = pki::Certificate::FromDer(der);
  if (!cert.ok()) {
    return absl::PermissionDeniedError(absl::StrCat(
        "origin ", origin, ": certificate: ", cert.status().message()));
  }
  absl::StatusOr<std::string> node = NodeOf(*cert);
  if (!node.ok()) {
    return absl::PermissionDeniedError(absl::StrCat(
        "origin ", origin, ": certificate: ", node.status().message()));
  }
  if (*node != store::OriginNode(origin)) {
    return absl::PermissionDeniedError(
        absl::StrCat("origin ", origin,
                     ": the certificate known for it is node ", *node, "'s"));
  }
  if (absl::Status s = CheckLineage(origin, *cert); !s.ok()) {
    return absl::PermissionDeniedError(
        absl::StrCat("origin ", origin, ": ", s.message()));
  }
  return std::make_shared<const pki::Certificate>(*std::move(cert));
}

absl::StatusOr<std::shared_ptr<const pki::Certificate>>
OriginVerifier::CertificateOf(absl::string_view origin) {
  const uint64_t generation = trust_->generation();
  const std::string member = MemberCertificate(origin);
  {
    absl::MutexLock lock(&mu_);
    auto it = refused_.find(origin);
    if (it != refused_.end()) {
      if (it->second.generation == generation && it->second.member == member) {
        return it->second.error;
      }
      refused_.erase(it);
    }
  }
  absl::StatusOr<std::shared_ptr<const pki::Certificate>> cert =
      FindCertificate(origin, member, generation);
  if (absl::IsPermissionDenied(cert.status())) {
    absl::MutexLock lock(&mu_);
    // Only origins with a certificate known here get this far (a name
    // with none is UNAVAILABLE): bounded by the origins held and kept.
    if (refused_.size() >= 4096) refused_.clear();
    refused_.insert_or_assign(std::string(origin),
                              Refused{generation, member, cert.status()});
  }
  return cert;
}

absl::StatusOr<std::shared_ptr<const pki::Certificate>>
OriginVerifier::FindCertificate(absl::string_view origin,
                                const std::string& member,
                                uint64_t generation) {
  // The certificate checked before for `der`, if it still holds.
  auto cached =
      [&](const std::string& der) -> std::shared_ptr<const pki::Certificate> {
    if (der.empty()) return nullptr;
    absl::MutexLock lock(&mu_);
    auto it = checked_.find(origin);
    if (it == checked_.end() || it->second.generation != generation ||
        (it->second.der != der && it->second.passed_over != der)) {
      return nullptr;
    }
    return it->second.certificate;
  };
  if (std::shared_ptr<const pki::Certificate> c = cached(member)) return c;
  // Membership's certificate of the node first, unless it is of another of
  // the name's lineages (another key: a later admission); then the one kept.
  std::string passed_over;
  std::string der = member;
  if (!der.empty() && !store::OriginKeyId(origin).empty()) {
    absl::StatusOr<pki::Certificate> parsed = pki::Certificate::FromDer(der);
    if (parsed.ok() && !CheckLineage(origin, *parsed).ok()) {
      passed_over = std::move(der);
      der.clear();
    }
  }
  if (der.empty()) {
    der = Kept(origin);
    if (std::shared_ptr<const pki::Certificate> c = cached(der)) return c;
  }
  if (der.empty() && PlainOriginRevoked(origin)) {
    return absl::PermissionDeniedError(absl::StrCat(
        "origin ", origin, ": node ", origin,
        " is revoked, and no certificate of its own is known here"));
  }
  if (der.empty()) {
    absl::Status unknown = absl::UnavailableError(absl::StrCat(
        "no certificate of origin ", origin,
        " is known here (membership does not know it, and no peer has "
        "handed it over)"));
    unknown.SetPayload(kUnknownOriginPayload, absl::Cord(origin));
    return unknown;
  }
  ASSIGN_OR_RETURN(std::shared_ptr<const pki::Certificate> cert,
                   Check(origin, der));
  // Kept, so that it outlives membership's copy.
  Keep(origin, der);
  absl::MutexLock lock(&mu_);
  checked_.insert_or_assign(
      std::string(origin),
      Checked{std::move(der), cert, generation, std::move(passed_over)});
  return cert;
}

bool OriginVerifier::Refuses(absl::string_view origin) {
  absl::StatusOr<std::shared_ptr<const pki::Certificate>> cert =
      CertificateOf(origin);
  return !cert.ok() && absl::IsPermissionDenied(cert.status());
}

bool OriginVerifier::Knows(absl::string_view origin) {
  return !CertificateFor(origin).empty();
}

std::string OriginVerifier::CertificateFor(absl::string_view origin) {
  std::string der = MemberCertificate(origin);
  if (!der.empty() && !store::OriginKeyId(origin).empty()) {
    absl::StatusOr<pki::Certificate> parsed = pki::Certificate::FromDer(der);
    if (!parsed.ok() || !CheckLineage(origin, *parsed).ok()) der.clear();
  }
  if (der.empty()) der = Kept(origin);
  return der;
}

absl::StatusOr<std::string> OriginVerifier::Offer(
    absl::string_view der,
    const std::function<bool(absl::string_view origin)>& wanted) {
  constexpr size_t kMaxCertificateBytes = 16 << 10;
  if (der.empty() || der.size() > kMaxCertificateBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("certificate: ", der.size(),
                     " bytes (must be 1 to 16384 bytes of DER)"));
  }
  absl::StatusOr<pki::Certificate> cert = pki::Certificate::FromDer(der);
  if (!cert.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("certificate: ", cert.status().message()));
  }
  absl::StatusOr<std::string> checked = NodeOf(*cert);
  if (!checked.ok()) return Annotate(checked.status(), "certificate offered");
  const std::string& node = *checked;
  absl::StatusOr<std::string> key = cert->KeyId();
  if (!key.ok()) return Annotate(key.status(), "certificate offered");
  // The origin it is for: the node's lineage of this key (NAME~KEYID), or
  // the plain name, which a certificate issued after the name was revoked
  // is never for.
  const std::string lineage =
      absl::StrCat(node, std::string(1, store::kOriginKeySeparator), *key);
  std::string origin;
  if (wanted && wanted(lineage)) {
    origin = lineage;
  } else if ((!wanted || wanted(node)) && !PlainOriginRevoked(node)) {
    origin = node;
  } else {
    return absl::FailedPreconditionError(
        absl::StrCat("certificate offered: node ", node, "'s (key ", *key,
                     ") was not asked for"));
  }
  if (Knows(origin)) {
    return absl::AlreadyExistsError(absl::StrCat(
        "certificate offered: one of node ", node,
        origin == node ? "" : absl::StrCat(" (origin ", origin, ")"),
        " is known here already"));
  }
  Keep(origin, std::string(der));
  return origin;
}

absl::Status OriginVerifier::Verify(const store::ObjectChange& change,
                                    absl::string_view bytes) {
  if (change.stamp.signature.empty()) {
    return absl::PermissionDeniedError(
        absl::StrCat(Describe(change), ": unsigned (signature: empty)"));
  }
  if (!WellFormed(change.stamp.origin)) {
    return absl::PermissionDeniedError(absl::StrCat(
        Describe(change), ": origin: not a node name nor NAME~KEYID"));
  }
  absl::StatusOr<std::shared_ptr<const pki::Certificate>> cert =
      CertificateOf(change.stamp.origin);
  if (!cert.ok()) {
    absl::Status s = Annotate(cert.status(), Describe(change));
    // The certificate known for the origin is refused (revoked since):
    // whoever sends the change took it in good faith.
    if (absl::IsPermissionDenied(s)) {
      s.SetPayload(store::kRefusedOriginPayload,
                   absl::Cord(change.stamp.origin));
    }
    return s;
  }
  if (!pki::VerifySha256(**cert, bytes, change.stamp.signature).ok()) {
    return absl::PermissionDeniedError(
        absl::StrCat(Describe(change), ": signature: not made by the key of ",
                     change.stamp.origin, "'s certificate"));
  }
  return absl::OkStatus();
}

uint64_t OriginVerifier::certificate_checks() const {
  absl::MutexLock lock(&mu_);
  return certificate_checks_;
}

store::ChangeSigner NodeKeySigner(std::shared_ptr<const pki::PrivateKey> key) {
  return [key = std::move(key)](absl::string_view bytes) {
    return pki::SignSha256(*key, bytes);
  };
}

}  // namespace mycel::replication
