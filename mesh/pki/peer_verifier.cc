#include "mesh/pki/peer_verifier.h"

#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>

#include <memory>
#include <optional>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "mesh/pki/certificate_authority.h"
#include "runtime/status.h"

namespace mycel::pki {
namespace {

using internal::TimeString;

absl::Status Refuse(absl::string_view reason) {
  return absl::UnauthenticatedError(reason);
}

// Leaf usage rules (SPIFFE X509-SVID 5.2 plus our EKU split).
absl::Status CheckLeafUsage(X509* leaf, IdentityKind kind) {
  uint32_t flags = X509_get_extension_flags(leaf);
  if ((flags & EXFLAG_INVALID) != 0) {
    return Refuse("certificate has invalid extensions");
  }
  if ((flags & EXFLAG_CA) != 0 || X509_check_ca(leaf) != 0) {
    return Refuse("certificate is a CA, not a leaf");
  }
  if ((flags & EXFLAG_KUSAGE) == 0) return Refuse("keyUsage missing");
  uint32_t ku = X509_get_key_usage(leaf);
  if ((ku & KU_DIGITAL_SIGNATURE) == 0) {
    return Refuse("keyUsage digitalSignature missing");
  }
  if ((ku & (KU_KEY_CERT_SIGN | KU_CRL_SIGN)) != 0) {
    return Refuse("keyUsage keyCertSign/cRLSign not allowed on a leaf");
  }
  if ((flags & EXFLAG_XKUSAGE) == 0) {
    return Refuse("extendedKeyUsage missing");
  }
  uint32_t xku = X509_get_extended_key_usage(leaf);
  if ((xku & XKU_ANYEKU) != 0) {
    return Refuse("extendedKeyUsage anyExtendedKeyUsage not allowed");
  }
  bool server = (xku & XKU_SSL_SERVER) != 0;
  bool client = (xku & XKU_SSL_CLIENT) != 0;
  if (!client) return Refuse("extendedKeyUsage clientAuth missing");
  if (kind == IdentityKind::kNode && !server) {
    return Refuse("extendedKeyUsage serverAuth missing on a node certificate");
  }
  if (kind == IdentityKind::kUser && server) {
    return Refuse(
        "extendedKeyUsage serverAuth not allowed on a user "
        "certificate");
  }
  return absl::OkStatus();
}

// Entries kept before the cache starts over; each is a few hundred bytes.
constexpr size_t kMaxCachedCertificates = 4096;

std::string CacheKey(PeerSide side, absl::string_view fingerprint) {
  return absl::StrCat(side == PeerSide::kClient ? "c" : "s", fingerprint);
}

}  // namespace

struct PeerVerifier::Cache {
  absl::Mutex mu;
  absl::flat_hash_map<std::string, PeerIdentity> verified ABSL_GUARDED_BY(mu);
};

PeerVerifier::PeerVerifier(std::string mesh, Certificate ca,
                           internal::UniqueX509Store store)
    : mesh_(std::move(mesh)),
      ca_(std::move(ca)),
      store_(std::move(store)),
      cache_(std::make_unique<Cache>()) {}
PeerVerifier::PeerVerifier(PeerVerifier&&) = default;
PeerVerifier& PeerVerifier::operator=(PeerVerifier&&) = default;
PeerVerifier::~PeerVerifier() = default;

absl::StatusOr<PeerVerifier> PeerVerifier::Create(const Certificate& ca) {
  internal::ErrorScope errors;
  ASSIGN_OR_RETURN(std::string mesh, MeshOfCaCertificate(ca));
  internal::UniqueX509Store store(X509_STORE_new());
  if (store == nullptr || X509_STORE_add_cert(store.get(), ca.x509()) != 1) {
    return internal::OpenSslError(absl::StatusCode::kInternal,
                                  "certificate store");
  }
  return PeerVerifier(std::move(mesh), ca.Clone(), std::move(store));
}

absl::StatusOr<PeerVerifier> PeerVerifier::Create(absl::string_view ca) {
  ASSIGN_OR_RETURN(Certificate cert, Certificate::Parse(ca));
  return Create(cert);
}

absl::StatusOr<PeerIdentity> PeerVerifier::Verify(
    absl::string_view leaf, PeerSide side, const RevocationList& revocations,
    absl::Time now) const {
  std::string der;
  if (internal::LooksLikePem(leaf)) {
    absl::StatusOr<std::string> decoded =
        internal::DecodePem(leaf, "CERTIFICATE", "certificate");
    if (!decoded.ok()) {
      return Refuse(absl::StrCat("peer ", decoded.status().message()));
    }
    der = *std::move(decoded);
  } else if (leaf.size() > internal::kMaxInputBytes) {
    return Refuse("peer certificate: too large");
  } else {
    der = std::string(leaf);
  }
  // The key hashes the bytes received, so a hit needs no parsing at all.
  std::string key = CacheKey(side, internal::Hex(internal::Sha256(der)));
  std::optional<PeerIdentity> known;
  {
    absl::MutexLock lock(&cache_->mu);
    auto it = cache_->verified.find(key);
    if (it != cache_->verified.end()) known = it->second;
  }
  if (known.has_value()) {
    RETURN_IF_ERROR(CheckNow(*known, revocations, now));
    return *std::move(known);
  }
  absl::StatusOr<Certificate> cert = Certificate::FromDer(der);
  if (!cert.ok()) {
    return Refuse(absl::StrCat("peer ", cert.status().message()));
  }
  return Remember(key, VerifyOnce(*cert, side, now), revocations, now);
}

absl::StatusOr<PeerIdentity> PeerVerifier::Verify(
    const Certificate& leaf, PeerSide side, const RevocationList& revocations,
    absl::Time now) const {
  std::string key = CacheKey(side, leaf.fingerprint());
  std::optional<PeerIdentity> known;
  {
    absl::MutexLock lock(&cache_->mu);
    auto it = cache_->verified.find(key);
    if (it != cache_->verified.end()) known = it->second;
  }
  if (known.has_value()) {
    RETURN_IF_ERROR(CheckNow(*known, revocations, now));
    return *std::move(known);
  }
  return Remember(key, VerifyOnce(leaf, side, now), revocations, now);
}

absl::StatusOr<PeerIdentity> PeerVerifier::Remember(
    const std::string& key, absl::StatusOr<PeerIdentity> peer,
    const RevocationList& revocations, absl::Time now) const {
  if (!peer.ok()) return peer.status();
  {
    absl::MutexLock lock(&cache_->mu);
    if (cache_->verified.size() >= kMaxCachedCertificates) {
      cache_->verified.clear();
    }
    cache_->verified.emplace(key, *peer);
  }
  RETURN_IF_ERROR(CheckNow(*peer, revocations, now));
  return peer;
}

absl::Status PeerVerifier::CheckNow(const PeerIdentity& peer,
                                    const RevocationList& revocations,
                                    absl::Time now) const {
  if (now < peer.not_before) {
    return Refuse(absl::StrCat("certificate not valid before ",
                               TimeString(peer.not_before)));
  }
  if (now > peer.not_after) {
    return Refuse(
        absl::StrCat("certificate expired at ", TimeString(peer.not_after)));
  }
  if (now > ca_.not_after()) {
    return Refuse(absl::StrCat("CA certificate expired at ",
                               TimeString(ca_.not_after())));
  }
  if (now < ca_.not_before()) {
    return Refuse(absl::StrCat("CA certificate not valid before ",
                               TimeString(ca_.not_before())));
  }
  return revocations.Check(peer);
}

absl::StatusOr<PeerIdentity> PeerVerifier::VerifyOnce(const Certificate& leaf,
                                                      PeerSide side,
                                                      absl::Time now) const {
  // Path validation checks the CA's signature too, so a certificate that
  // passes it is the CA's and its fields can be read. That is the common
  // case, and checking the signature on its own first as well cost each
  // new certificate a second ECDSA verification (0.14 ms here, and a node
  // of a 50-node mesh checks 49 of them as it joins). A certificate that
  // fails goes through the checks one by one, for the clearest reason.
  internal::ErrorScope errors;
  int depth = 0;
  if (Chain(leaf.x509(), side, now, &depth) != X509_V_OK) {
    return Diagnose(leaf, side, now);
  }
  return CheckFields(leaf, side, now);
}

int PeerVerifier::Chain(X509* leaf, PeerSide side, absl::Time now,
                        int* depth) const {
  // RFC 5280 path validation as the authority: strict mode, name
  // constraints, the TLS purpose, the validity at `now`.
  internal::UniqueX509StoreCtx ctx(X509_STORE_CTX_new());
  if (ctx == nullptr ||
      X509_STORE_CTX_init(ctx.get(), store_.get(), leaf, nullptr) != 1) {
    *depth = 0;
    return X509_V_ERR_OUT_OF_MEM;
  }
  X509_VERIFY_PARAM* param = X509_STORE_CTX_get0_param(ctx.get());
  X509_VERIFY_PARAM_set_time(param, absl::ToTimeT(now));
  X509_VERIFY_PARAM_set_flags(param, X509_V_FLAG_X509_STRICT);
  // Leaves are issued directly by the root.
  X509_VERIFY_PARAM_set_depth(param, 0);
  X509_STORE_CTX_set_purpose(ctx.get(), side == PeerSide::kClient
                                            ? X509_PURPOSE_SSL_CLIENT
                                            : X509_PURPOSE_SSL_SERVER);
  const int ok = X509_verify_cert(ctx.get());
  *depth = X509_STORE_CTX_get_error_depth(ctx.get());
  if (ok == 1) return X509_V_OK;
  const int err = X509_STORE_CTX_get_error(ctx.get());
  return err == X509_V_OK ? X509_V_ERR_UNSPECIFIED : err;
}

absl::StatusOr<PeerIdentity> PeerVerifier::Diagnose(const Certificate& leaf,
                                                    PeerSide side,
                                                    absl::Time now) const {
  internal::ErrorScope errors;
  X509* x = leaf.x509();
  // The signature first of all, so nothing else is read from a certificate
  // that this CA did not sign.
  EVP_PKEY* ca_key = X509_get0_pubkey(ca_.x509());
  if (X509_verify(x, ca_key) != 1) return Refuse("issued by another CA");
  ASSIGN_OR_RETURN(PeerIdentity peer, CheckFields(leaf, side, now));
  int depth = 0;
  const int err = Chain(x, side, now, &depth);
  if (err == X509_V_OK) return peer;
  if (err == X509_V_ERR_OUT_OF_MEM) {
    return internal::OpenSslError(absl::StatusCode::kInternal,
                                  "verification context");
  }
  return Refuse(
      absl::StrCat("chain rejected: ", X509_verify_cert_error_string(err),
                   " (depth ", depth, ")"));
}

absl::StatusOr<PeerIdentity> PeerVerifier::CheckFields(const Certificate& leaf,
                                                       PeerSide side,
                                                       absl::Time now) const {
  internal::ErrorScope errors;
  X509* x = leaf.x509();
  if (!internal::IsP256(X509_get0_pubkey(x))) {
    return Refuse("certificate key is not ECDSA P-256");
  }
  absl::StatusOr<PeerIdentity> peer = ParsePeerIdentity(leaf);
  if (!peer.ok()) return Refuse(peer.status().message());
  // Time first among the rest, so an expired certificate says so.
  RETURN_IF_ERROR(CheckNow(*peer, RevocationList(), now));
  RETURN_IF_ERROR(CheckLeafUsage(x, peer->kind));
  if (side == PeerSide::kServer && peer->kind != IdentityKind::kNode) {
    return Refuse("a user certificate cannot serve");
  }
  if (peer->mesh != mesh_) {
    return Refuse(absl::StrCat("certificate is for mesh \"", peer->mesh,
                               "\", not \"", mesh_, "\""));
  }
  return peer;
}

}  // namespace mycel::pki
