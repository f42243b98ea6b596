#include "mesh/pki/certificate_request.h"

#include <openssl/objects.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <algorithm>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "mesh/pki/internal/openssl.h"
#include "runtime/status.h"

namespace mycel::pki {
namespace {

using internal::ErrorScope;
using internal::OpenSslError;

absl::Status CsrError(absl::string_view reason) {
  return absl::InvalidArgumentError(absl::StrCat("csr: ", reason));
}

// A short name for an OID in messages: its long name, or the dotted form.
std::string OidName(const ASN1_OBJECT* obj) {
  char buf[128];
  int n = OBJ_obj2txt(buf, sizeof(buf), obj, 0);
  if (n <= 0) return "unknown";
  return std::string(buf, std::min(static_cast<size_t>(n), sizeof(buf) - 1));
}

// Extracts the one SPIFFE ID from a subjectAltName extension.
absl::StatusOr<std::string> SingleUri(X509_EXTENSION* ext) {
  internal::UniqueGeneralNames names(
      static_cast<GENERAL_NAMES*>(X509V3_EXT_d2i(ext)));
  if (names == nullptr) return CsrError("malformed subjectAltName");
  absl::StatusOr<std::string> uri = internal::OnlyUriName(names.get());
  if (!uri.ok()) return CsrError(uri.status().message());
  return uri;
}

}  // namespace

absl::StatusOr<CertificateRequest> CertificateRequest::Create(
    const SpiffeId& id, const PrivateKey& key) {
  ErrorScope errors;
  internal::UniqueX509Req req(X509_REQ_new());
  if (req == nullptr || X509_REQ_set_version(req.get(), 0) != 1) {
    return OpenSslError(absl::StatusCode::kInternal, "create CSR");
  }
  X509_NAME* subject = X509_REQ_get_subject_name(req.get());
  if (X509_NAME_add_entry_by_txt(
          subject, "CN", MBSTRING_UTF8,
          reinterpret_cast<const unsigned char*>(id.name().data()),
          static_cast<int>(id.name().size()), -1, 0) != 1) {
    return OpenSslError(absl::StatusCode::kInternal, "CSR subject");
  }
  if (X509_REQ_set_pubkey(req.get(), key.evp()) != 1) {
    return OpenSslError(absl::StatusCode::kInternal, "CSR public key");
  }
  internal::UniqueExtensionStack exts(sk_X509_EXTENSION_new_null());
  if (exts == nullptr) {
    return OpenSslError(absl::StatusCode::kInternal, "CSR extensions");
  }
  RETURN_IF_ERROR(internal::AppendUriSan(exts.get(), id.ToString()));
  if (X509_REQ_add_extensions(req.get(), exts.get()) != 1) {
    return OpenSslError(absl::StatusCode::kInternal, "CSR extensions");
  }
  if (X509_REQ_sign(req.get(), key.evp(), EVP_sha256()) <= 0) {
    return OpenSslError(absl::StatusCode::kInternal, "sign CSR");
  }
  ASSIGN_OR_RETURN(std::string der, internal::X509ReqToDer(req.get()));
  // Validate what was built with the same rules a CA applies.
  return Parse(der, id.mesh());
}

absl::StatusOr<CertificateRequest> CertificateRequest::Parse(
    absl::string_view pem_or_der, absl::string_view expected_mesh) {
  ErrorScope errors;
  if (pem_or_der.empty()) return CsrError("empty");
  std::string der;
  if (internal::LooksLikePem(pem_or_der)) {
    ASSIGN_OR_RETURN(
        der, internal::DecodePem(pem_or_der, "CERTIFICATE REQUEST", "csr"));
  } else {
    der = std::string(pem_or_der);
  }
  ASSIGN_OR_RETURN(internal::UniqueX509Req req,
                   internal::ParseX509ReqDer(der, "csr"));

  if (X509_REQ_get_version(req.get()) != 0) {
    return CsrError("version must be 1");
  }

  internal::UniqueEvpPkey raw_key(X509_REQ_get_pubkey(req.get()));
  if (raw_key == nullptr) return CsrError("malformed public key");
  // Check the key type before the signature: the signature check must only
  // ever run with an ECDSA P-256 key.
  absl::StatusOr<PublicKey> key = PublicKey::FromEvp(std::move(raw_key));
  if (!key.ok()) return CsrError(key.status().message());

  int sig_nid = X509_REQ_get_signature_nid(req.get());
  if (sig_nid != NID_ecdsa_with_SHA256) {
    return CsrError(
        absl::StrCat("signature algorithm must be ecdsa-with-SHA256, not ",
                     sig_nid == NID_undef ? "unknown" : OBJ_nid2ln(sig_nid)));
  }
  if (X509_REQ_verify(req.get(), key->evp()) != 1) {
    return CsrError("signature does not verify");
  }

  int ext_req_attrs = 0;
  for (int i = 0; i < X509_REQ_get_attr_count(req.get()); ++i) {
    X509_ATTRIBUTE* attr = X509_REQ_get_attr(req.get(), i);
    const ASN1_OBJECT* obj = X509_ATTRIBUTE_get0_object(attr);
    if (OBJ_obj2nid(obj) != NID_ext_req) {
      return CsrError(absl::StrCat("attribute ", OidName(obj), " not allowed"));
    }
    ++ext_req_attrs;
  }
  if (ext_req_attrs == 0) return CsrError("URI SAN missing (no extensions)");
  if (ext_req_attrs > 1) return CsrError("more than one extensionRequest");

  internal::UniqueExtensionStack exts(X509_REQ_get_extensions(req.get()));
  if (exts == nullptr) return CsrError("malformed extensionRequest");
  X509_EXTENSION* san = nullptr;
  for (int i = 0; i < sk_X509_EXTENSION_num(exts.get()); ++i) {
    X509_EXTENSION* ext = sk_X509_EXTENSION_value(exts.get(), i);
    const ASN1_OBJECT* obj = X509_EXTENSION_get_object(ext);
    if (OBJ_obj2nid(obj) != NID_subject_alt_name) {
      return CsrError(absl::StrCat("extension ", OidName(obj),
                                   " not allowed (only subjectAltName)"));
    }
    if (san != nullptr) return CsrError("more than one subjectAltName");
    san = ext;
  }
  if (san == nullptr) return CsrError("URI SAN missing");
  ASSIGN_OR_RETURN(std::string uri, SingleUri(san));
  absl::StatusOr<SpiffeId> id = SpiffeId::Parse(uri);
  if (!id.ok()) {
    return CsrError(absl::StrCat("URI SAN \"", absl::CHexEscape(uri),
                                 "\": ", id.status().message()));
  }
  if (id->mesh() != expected_mesh) {
    return CsrError(absl::StrCat("SPIFFE ID ", id->ToString(),
                                 " is for mesh \"", id->mesh(), "\", not \"",
                                 expected_mesh, "\""));
  }
  return CertificateRequest(*std::move(id), *std::move(key), std::move(der));
}

absl::StatusOr<std::string> CertificateRequest::ToPem() const {
  return internal::EncodePem(der_, "CERTIFICATE REQUEST");
}

absl::Status CertificateRequest::CheckAsksFor(const SpiffeId& granted) const {
  if (spiffe_id_ == granted) return absl::OkStatus();
  if (spiffe_id_.mesh() != granted.mesh()) {
    return CsrError(absl::StrCat("asks for mesh \"", spiffe_id_.mesh(),
                                 "\" but \"", granted.mesh(),
                                 "\" was granted"));
  }
  if (spiffe_id_.kind() != granted.kind()) {
    return CsrError(absl::StrCat(
        "asks for a ", IdentityKindName(spiffe_id_.kind()), " identity (",
        spiffe_id_.ToString(), ") but a ", IdentityKindName(granted.kind()),
        " identity was granted (", granted.ToString(), ")"));
  }
  return CsrError(absl::StrCat(
      "asks for ", IdentityKindName(spiffe_id_.kind()), " \"",
      spiffe_id_.name(), "\" but the caller authorised ",
      IdentityKindName(granted.kind()), " \"", granted.name(), "\""));
}

}  // namespace mycel::pki
