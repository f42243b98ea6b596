#include "mesh/pki/certificate_authority.h"

#include <openssl/objects.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <algorithm>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "mesh/pki/internal/openssl.h"
#include "runtime/status.h"

namespace mycel::pki {
namespace {

using internal::ErrorScope;
using internal::OpenSslError;

constexpr int kSerialBytes = 16;

// A uniformly random 128-bit positive, non-zero serial (RFC 5280 allows up
// to 20 octets; DER adds a leading zero octet when the top bit is set).
absl::StatusOr<internal::UniqueAsn1Integer> RandomSerial() {
  for (;;) {
    ASSIGN_OR_RETURN(std::string bytes, internal::RandomBytes(kSerialBytes));
    if (bytes.find_first_not_of('\0') == std::string::npos) continue;
    internal::UniqueBignum bn(
        BN_bin2bn(reinterpret_cast<const unsigned char*>(bytes.data()),
                  kSerialBytes, nullptr));
    internal::UniqueAsn1Integer serial(
        bn == nullptr ? nullptr : BN_to_ASN1_INTEGER(bn.get(), nullptr));
    if (serial == nullptr) {
      return OpenSslError(absl::StatusCode::kInternal, "serial number");
    }
    return serial;
  }
}

absl::Status AddNameEntry(X509_NAME* name, const char* field,
                          absl::string_view value) {
  if (X509_NAME_add_entry_by_txt(
          name, field, MBSTRING_UTF8,
          reinterpret_cast<const unsigned char*>(value.data()),
          static_cast<int>(value.size()), -1, 0) != 1) {
    return OpenSslError(absl::StatusCode::kInternal,
                        absl::StrCat("subject ", field));
  }
  return absl::OkStatus();
}

// Adds an extension given in OpenSSL's configuration syntax. Only fixed
// strings and validated mesh names reach here, never free text.
absl::Status AddExtension(X509* cert, X509V3_CTX* ctx, int nid,
                          const std::string& value) {
  internal::UniqueX509Ext ext(
      X509V3_EXT_conf_nid(nullptr, ctx, nid, value.c_str()));
  if (ext == nullptr || X509_add_ext(cert, ext.get(), -1) != 1) {
    return OpenSslError(absl::StatusCode::kInternal,
                        absl::StrCat("extension ", OBJ_nid2ln(nid)));
  }
  return absl::OkStatus();
}

absl::Status AddUriSan(X509* cert, absl::string_view uri) {
  internal::UniqueExtensionStack exts(sk_X509_EXTENSION_new_null());
  if (exts == nullptr) {
    return OpenSslError(absl::StatusCode::kInternal, "subjectAltName");
  }
  RETURN_IF_ERROR(internal::AppendUriSan(exts.get(), uri));
  if (X509_add_ext(cert, sk_X509_EXTENSION_value(exts.get(), 0), -1) != 1) {
    return OpenSslError(absl::StatusCode::kInternal, "subjectAltName");
  }
  return absl::OkStatus();
}

// The parts every certificate shares: version 3, serial, validity, key.
absl::StatusOr<internal::UniqueX509> NewCertificate(EVP_PKEY* key,
                                                    absl::Time not_before,
                                                    absl::Time not_after) {
  internal::UniqueX509 cert(X509_new());
  if (cert == nullptr || X509_set_version(cert.get(), X509_VERSION_3) != 1) {
    return OpenSslError(absl::StatusCode::kInternal, "new certificate");
  }
  ASSIGN_OR_RETURN(internal::UniqueAsn1Integer serial, RandomSerial());
  if (X509_set_serialNumber(cert.get(), serial.get()) != 1) {
    return OpenSslError(absl::StatusCode::kInternal, "serial number");
  }
  RETURN_IF_ERROR(
      internal::SetAsn1Time(X509_getm_notBefore(cert.get()), not_before));
  RETURN_IF_ERROR(
      internal::SetAsn1Time(X509_getm_notAfter(cert.get()), not_after));
  if (X509_set_pubkey(cert.get(), key) != 1) {
    return OpenSslError(absl::StatusCode::kInternal, "public key");
  }
  return cert;
}

absl::Status CaError(absl::string_view reason) {
  return absl::InvalidArgumentError(absl::StrCat("CA certificate: ", reason));
}

}  // namespace

absl::StatusOr<std::string> MeshOfCaCertificate(const Certificate& ca) {
  ErrorScope errors;
  X509* x = ca.x509();
  EVP_PKEY* key = X509_get0_pubkey(x);
  if (!internal::IsP256(key)) {
    return CaError("key must be ECDSA on the named curve P-256");
  }
  if (X509_NAME_cmp(X509_get_subject_name(x), X509_get_issuer_name(x)) != 0 ||
      X509_verify(x, key) != 1) {
    return CaError("not self-signed");
  }
  uint32_t flags = X509_get_extension_flags(x);
  if ((flags & EXFLAG_INVALID) != 0) return CaError("invalid extensions");
  if ((flags & EXFLAG_BCONS) == 0 || (flags & EXFLAG_CA) == 0) {
    return CaError("basicConstraints CA:TRUE missing");
  }
  if ((flags & EXFLAG_KUSAGE) == 0 ||
      (X509_get_key_usage(x) & KU_KEY_CERT_SIGN) == 0) {
    return CaError("keyUsage keyCertSign missing");
  }
  int crit = 0;
  internal::UniqueGeneralNames names(static_cast<GENERAL_NAMES*>(
      X509_get_ext_d2i(x, NID_subject_alt_name, &crit, nullptr)));
  if (names == nullptr) {
    return CaError(crit == -2 ? "more than one subjectAltName"
                              : "URI SAN missing");
  }
  absl::StatusOr<std::string> uri = internal::OnlyUriName(names.get());
  if (!uri.ok()) return CaError(uri.status().message());
  constexpr absl::string_view kScheme = "spiffe://";
  if (!absl::StartsWith(*uri, kScheme)) {
    return CaError(absl::StrCat("URI SAN \"", absl::CHexEscape(*uri),
                                "\" is not a SPIFFE trust domain ID"));
  }
  std::string mesh = uri->substr(kScheme.size());
  absl::Status mesh_ok = ValidateMeshName(mesh);
  if (!mesh_ok.ok()) {
    return CaError(absl::StrCat("URI SAN \"", absl::CHexEscape(*uri),
                                "\": ", mesh_ok.message()));
  }
  return mesh;
}

absl::StatusOr<CertificateAuthority> CertificateAuthority::Create(
    absl::string_view mesh, absl::Time now, const CaOptions& options) {
  ErrorScope errors;
  RETURN_IF_ERROR(ValidateMeshName(mesh));
  if (options.validity <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("CA validity: must be positive");
  }
  ASSIGN_OR_RETURN(PrivateKey key, PrivateKey::Generate());
  ASSIGN_OR_RETURN(internal::UniqueX509 cert,
                   NewCertificate(key.evp(), now - kNotBeforeBackdate,
                                  now + options.validity));
  X509_NAME* name = X509_get_subject_name(cert.get());
  RETURN_IF_ERROR(AddNameEntry(name, "O", "mycel"));
  RETURN_IF_ERROR(AddNameEntry(name, "CN", absl::StrCat("mycel mesh ", mesh)));
  if (X509_set_issuer_name(cert.get(), name) != 1) {
    return OpenSslError(absl::StatusCode::kInternal, "CA issuer");
  }
  X509V3_CTX ctx;
  X509V3_set_ctx(&ctx, cert.get(), cert.get(), nullptr, nullptr, 0);
  RETURN_IF_ERROR(AddExtension(cert.get(), &ctx, NID_basic_constraints,
                               "critical,CA:TRUE,pathlen:0"));
  RETURN_IF_ERROR(AddExtension(cert.get(), &ctx, NID_key_usage,
                               "critical,keyCertSign,cRLSign"));
  RETURN_IF_ERROR(
      AddExtension(cert.get(), &ctx, NID_subject_key_identifier, "hash"));
  RETURN_IF_ERROR(AddUriSan(cert.get(), TrustDomainId(mesh)));
  if (options.name_constraints) {
    // RFC 5280 4.2.1.10: a URI constraint names the host part of the URI.
    RETURN_IF_ERROR(
        AddExtension(cert.get(), &ctx, NID_name_constraints,
                     absl::StrCat("critical,permitted;URI:", mesh)));
  }
  if (X509_sign(cert.get(), key.evp(), EVP_sha256()) <= 0) {
    return OpenSslError(absl::StatusCode::kInternal, "sign CA certificate");
  }
  ASSIGN_OR_RETURN(Certificate certificate,
                   Certificate::FromX509(std::move(cert)));
  ASSIGN_OR_RETURN(std::string checked_mesh, MeshOfCaCertificate(certificate));
  return CertificateAuthority(std::move(checked_mesh), std::move(certificate),
                              std::move(key));
}

absl::StatusOr<CertificateAuthority> CertificateAuthority::Load(
    absl::string_view certificate, absl::string_view private_key_pem) {
  ErrorScope errors;
  ASSIGN_OR_RETURN(Certificate cert, Certificate::Parse(certificate));
  ASSIGN_OR_RETURN(std::string mesh, MeshOfCaCertificate(cert));
  ASSIGN_OR_RETURN(PrivateKey key, PrivateKey::FromPem(private_key_pem));
  if (X509_check_private_key(cert.x509(), key.evp()) != 1) {
    return absl::InvalidArgumentError(
        "CA private key: does not match the CA certificate");
  }
  return CertificateAuthority(std::move(mesh), std::move(cert), std::move(key));
}

absl::StatusOr<Certificate> CertificateAuthority::Issue(
    const CertificateRequest& csr, const Grant& grant, absl::Time now) const {
  RETURN_IF_ERROR(csr.CheckAsksFor(grant.id));
  return IssueForKey(csr.public_key(), grant, now);
}

absl::StatusOr<Certificate> CertificateAuthority::IssueFromCsr(
    absl::string_view csr, const Grant& grant, absl::Time now) const {
  ASSIGN_OR_RETURN(CertificateRequest request,
                   CertificateRequest::Parse(csr, mesh_));
  return Issue(request, grant, now);
}

absl::StatusOr<Certificate> CertificateAuthority::IssueForKey(
    const PublicKey& key, const Grant& grant, absl::Time now) const {
  ErrorScope errors;
  const SpiffeId& id = grant.id;
  if (id.mesh() != mesh_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "grant: ", id.ToString(), " is not in mesh \"", mesh_, "\""));
  }
  RETURN_IF_ERROR(CheckRoleFitsKind(id.kind(), grant.role));
  absl::Duration validity = grant.validity;
  if (validity == absl::ZeroDuration()) {
    validity = id.kind() == IdentityKind::kNode ? kDefaultNodeValidity
                                                : kDefaultUserValidity;
  }
  if (validity < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("grant validity: must be positive");
  }
  if (now >= certificate_.not_after()) {
    return absl::FailedPreconditionError(
        absl::StrCat("mesh CA certificate expired at ",
                     internal::TimeString(certificate_.not_after())));
  }
  if (now < certificate_.not_before()) {
    return absl::FailedPreconditionError(
        absl::StrCat("mesh CA certificate is not valid before ",
                     internal::TimeString(certificate_.not_before())));
  }
  absl::Time not_after = std::min(now + validity, certificate_.not_after());

  ASSIGN_OR_RETURN(
      internal::UniqueX509 cert,
      NewCertificate(key.evp(), now - kNotBeforeBackdate, not_after));
  X509* ca = certificate_.x509();
  if (X509_set_issuer_name(cert.get(), X509_get_subject_name(ca)) != 1) {
    return OpenSslError(absl::StatusCode::kInternal, "issuer");
  }
  X509_NAME* subject = X509_get_subject_name(cert.get());
  RETURN_IF_ERROR(AddNameEntry(subject, "O", RoleOrganization(grant.role)));
  RETURN_IF_ERROR(AddNameEntry(subject, "CN", id.name()));

  X509V3_CTX ctx;
  X509V3_set_ctx(&ctx, ca, cert.get(), nullptr, nullptr, 0);
  RETURN_IF_ERROR(AddExtension(cert.get(), &ctx, NID_basic_constraints,
                               "critical,CA:FALSE"));
  RETURN_IF_ERROR(AddExtension(cert.get(), &ctx, NID_key_usage,
                               "critical,digitalSignature"));
  RETURN_IF_ERROR(AddExtension(cert.get(), &ctx, NID_ext_key_usage,
                               id.kind() == IdentityKind::kNode
                                   ? "serverAuth,clientAuth"
                                   : "clientAuth"));
  RETURN_IF_ERROR(
      AddExtension(cert.get(), &ctx, NID_subject_key_identifier, "hash"));
  RETURN_IF_ERROR(AddExtension(cert.get(), &ctx, NID_authority_key_identifier,
                               "keyid:always"));
  RETURN_IF_ERROR(AddUriSan(cert.get(), id.ToString()));
  if (X509_sign(cert.get(), key_.evp(), EVP_sha256()) <= 0) {
    return OpenSslError(absl::StatusCode::kInternal, "sign certificate");
  }
  return Certificate::FromX509(std::move(cert));
}

}  // namespace mycel::pki
