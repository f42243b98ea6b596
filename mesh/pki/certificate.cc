#include "mesh/pki/certificate.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "runtime/status.h"

namespace mycel::pki {

using internal::ErrorScope;

absl::StatusOr<Certificate> Certificate::FromPem(absl::string_view pem) {
  ASSIGN_OR_RETURN(std::string der,
                   internal::DecodePem(pem, "CERTIFICATE", "certificate"));
  return FromDer(der);
}

absl::StatusOr<Certificate> Certificate::FromDer(absl::string_view der) {
  ErrorScope errors;
  ASSIGN_OR_RETURN(internal::UniqueX509 x509,
                   internal::ParseX509Der(der, "certificate"));
  return FromX509(std::move(x509));
}

absl::StatusOr<Certificate> Certificate::Parse(absl::string_view pem_or_der) {
  if (pem_or_der.empty()) {
    return absl::InvalidArgumentError("certificate: empty");
  }
  if (internal::LooksLikePem(pem_or_der)) return FromPem(pem_or_der);
  return FromDer(pem_or_der);
}

absl::StatusOr<Certificate> Certificate::FromX509(internal::UniqueX509 x509) {
  ErrorScope errors;
  if (x509 == nullptr) return absl::InvalidArgumentError("certificate: null");
  Certificate cert;
  ASSIGN_OR_RETURN(cert.der_, internal::X509ToDer(x509.get()));
  cert.fingerprint_ = internal::Hex(internal::Sha256(cert.der_));
  absl::StatusOr<std::string> serial =
      internal::SerialToHex(X509_get0_serialNumber(x509.get()));
  if (!serial.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("certificate: ", serial.status().message()));
  }
  cert.serial_ = *std::move(serial);
  absl::StatusOr<absl::Time> not_before =
      internal::Asn1TimeToTime(X509_get0_notBefore(x509.get()));
  absl::StatusOr<absl::Time> not_after =
      internal::Asn1TimeToTime(X509_get0_notAfter(x509.get()));
  if (!not_before.ok() || !not_after.ok()) {
    return absl::InvalidArgumentError("certificate: malformed validity");
  }
  cert.not_before_ = *not_before;
  cert.not_after_ = *not_after;
  cert.x509_ = std::move(x509);
  return cert;
}

Certificate Certificate::Clone() const {
  Certificate copy;
  X509_up_ref(x509_.get());
  copy.x509_.reset(x509_.get());
  copy.der_ = der_;
  copy.fingerprint_ = fingerprint_;
  copy.serial_ = serial_;
  copy.not_before_ = not_before_;
  copy.not_after_ = not_after_;
  return copy;
}

absl::StatusOr<std::string> Certificate::ToPem() const {
  return internal::EncodePem(der_, "CERTIFICATE");
}

absl::StatusOr<std::string> Certificate::KeyId() const {
  const X509_PUBKEY* spki = X509_get_X509_PUBKEY(x509_.get());
  unsigned char* der = nullptr;
  const int len = spki == nullptr ? -1 : i2d_X509_PUBKEY(spki, &der);
  if (len <= 0) {
    ERR_clear_error();
    return absl::InvalidArgumentError("certificate: no public key to name");
  }
  std::string bytes(reinterpret_cast<const char*>(der),
                    static_cast<size_t>(len));
  OPENSSL_free(der);
  return internal::Hex(internal::Sha256(bytes)).substr(0, kKeyIdDigits);
}

absl::Status Certificate::CheckKeyMatches(const PrivateKey& key) const {
  if (X509_check_private_key(x509_.get(), key.evp()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(
        "the certificate is not for this private key");
  }
  return absl::OkStatus();
}

}  // namespace mycel::pki
