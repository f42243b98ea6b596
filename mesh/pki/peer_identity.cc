#include "mesh/pki/peer_identity.h"

#include <openssl/crypto.h>
#include <openssl/objects.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <optional>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "mesh/pki/internal/openssl.h"
#include "runtime/status.h"

namespace mycel::pki {
namespace {

absl::Status CertError(absl::string_view reason) {
  return absl::InvalidArgumentError(absl::StrCat("certificate: ", reason));
}

absl::StatusOr<std::string> EntryText(const X509_NAME_ENTRY* entry) {
  unsigned char* utf8 = nullptr;
  int len = ASN1_STRING_to_UTF8(&utf8, X509_NAME_ENTRY_get_data(entry));
  if (len < 0) return CertError("malformed subject");
  std::string out(reinterpret_cast<const char*>(utf8),
                  static_cast<size_t>(len));
  OPENSSL_free(utf8);
  return out;
}

}  // namespace

absl::StatusOr<PeerIdentity> ParsePeerIdentity(const Certificate& cert) {
  internal::ErrorScope errors;
  X509* x = cert.x509();

  int crit = 0;
  internal::UniqueGeneralNames names(static_cast<GENERAL_NAMES*>(
      X509_get_ext_d2i(x, NID_subject_alt_name, &crit, nullptr)));
  if (names == nullptr) {
    return CertError(crit == -2 ? "more than one subjectAltName"
                                : "URI SAN missing");
  }
  absl::StatusOr<std::string> uri = internal::OnlyUriName(names.get());
  if (!uri.ok()) return CertError(uri.status().message());
  absl::StatusOr<SpiffeId> id = SpiffeId::Parse(*uri);
  if (!id.ok()) {
    return CertError(absl::StrCat("URI SAN \"", absl::CHexEscape(*uri),
                                  "\": ", id.status().message()));
  }

  const X509_NAME* subject = X509_get_subject_name(x);
  std::optional<std::string> organization;
  std::optional<std::string> common_name;
  for (int i = 0; i < X509_NAME_entry_count(subject); ++i) {
    const X509_NAME_ENTRY* entry = X509_NAME_get_entry(subject, i);
    int nid = OBJ_obj2nid(X509_NAME_ENTRY_get_object(entry));
    std::optional<std::string>* slot = nid == NID_organizationName
                                           ? &organization
                                       : nid == NID_commonName ? &common_name
                                                               : nullptr;
    if (slot == nullptr) {
      return CertError("subject may hold only O and CN");
    }
    if (slot->has_value()) {
      return CertError(absl::StrCat("subject has more than one ",
                                    nid == NID_commonName ? "CN" : "O"));
    }
    ASSIGN_OR_RETURN(*slot, EntryText(entry));
  }
  if (!organization.has_value()) return CertError("subject O (role) missing");
  if (!common_name.has_value()) return CertError("subject CN missing");
  absl::StatusOr<Role> role = RoleFromOrganization(*organization);
  if (!role.ok()) return CertError(role.status().message());
  if (*common_name != id->name()) {
    return CertError(absl::StrCat(
        "subject CN \"", absl::CHexEscape(*common_name),
        "\" differs from the SPIFFE ID's name \"", id->name(), "\""));
  }
  absl::Status fits = CheckRoleFitsKind(id->kind(), *role);
  if (!fits.ok()) return CertError(fits.message());

  PeerIdentity peer;
  peer.kind = id->kind();
  peer.mesh = id->mesh();
  peer.name = id->name();
  peer.role = *role;
  peer.serial = cert.serial();
  peer.not_before = cert.not_before();
  peer.not_after = cert.not_after();
  peer.spiffe_id = id->ToString();
  peer.fingerprint = cert.fingerprint();
  return peer;
}

absl::StatusOr<PeerIdentity> ParsePeerIdentity(absl::string_view pem_or_der) {
  ASSIGN_OR_RETURN(Certificate cert, Certificate::Parse(pem_or_der));
  return ParsePeerIdentity(cert);
}

}  // namespace mycel::pki
