// Shared plumbing over the OpenSSL 3 C API for mesh/pki: owning handles,
// error conversion, PEM/DER framing, time conversion and small encodings.
// Only mesh/pki uses this header.
#ifndef MYCEL_MESH_PKI_INTERNAL_OPENSSL_H_
#define MYCEL_MESH_PKI_INTERNAL_OPENSSL_H_

#include <openssl/asn1.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace mycel::pki::internal {

// Owning handles. Each deleter is the object's own *_free function.
template <auto kFree>
struct Deleter {
  template <typename T>
  void operator()(T* p) const {
    kFree(p);
  }
};
using UniqueEvpPkey = std::unique_ptr<EVP_PKEY, Deleter<EVP_PKEY_free>>;
using UniqueEvpPkeyCtx =
    std::unique_ptr<EVP_PKEY_CTX, Deleter<EVP_PKEY_CTX_free>>;
using UniqueX509 = std::unique_ptr<X509, Deleter<X509_free>>;
using UniqueX509Req = std::unique_ptr<X509_REQ, Deleter<X509_REQ_free>>;
using UniqueX509Name = std::unique_ptr<X509_NAME, Deleter<X509_NAME_free>>;
using UniqueX509Ext =
    std::unique_ptr<X509_EXTENSION, Deleter<X509_EXTENSION_free>>;
using UniqueX509Store = std::unique_ptr<X509_STORE, Deleter<X509_STORE_free>>;
using UniqueX509StoreCtx =
    std::unique_ptr<X509_STORE_CTX, Deleter<X509_STORE_CTX_free>>;
using UniqueBio = std::unique_ptr<BIO, Deleter<BIO_free_all>>;
using UniqueBignum = std::unique_ptr<BIGNUM, Deleter<BN_free>>;
using UniqueAsn1Integer =
    std::unique_ptr<ASN1_INTEGER, Deleter<ASN1_INTEGER_free>>;
using UniqueGeneralNames =
    std::unique_ptr<GENERAL_NAMES, Deleter<GENERAL_NAMES_free>>;
using UniqueGeneralName =
    std::unique_ptr<GENERAL_NAME, Deleter<GENERAL_NAME_free>>;
using UniqueExtendedKeyUsage =
    std::unique_ptr<EXTENDED_KEY_USAGE, Deleter<EXTENDED_KEY_USAGE_free>>;
using UniqueBasicConstraints =
    std::unique_ptr<BASIC_CONSTRAINTS, Deleter<BASIC_CONSTRAINTS_free>>;
using UniqueAsn1BitString =
    std::unique_ptr<ASN1_BIT_STRING, Deleter<ASN1_BIT_STRING_free>>;
struct ExtensionStackDeleter {
  void operator()(STACK_OF(X509_EXTENSION) * p) const {
    sk_X509_EXTENSION_pop_free(p, X509_EXTENSION_free);
  }
};
using UniqueExtensionStack =
    std::unique_ptr<STACK_OF(X509_EXTENSION), ExtensionStackDeleter>;

// Sets an error mark on this thread's OpenSSL error queue and, on
// destruction, drops every error queued after it. Public functions of
// mesh/pki open one so that they never leave errors behind for an unrelated
// caller (gRPC's TLS code reads the same per-thread queue).
class ErrorScope {
 public:
  ErrorScope() { ERR_set_mark(); }
  ~ErrorScope() { ERR_pop_to_mark(); }
  ErrorScope(const ErrorScope&) = delete;
  ErrorScope& operator=(const ErrorScope&) = delete;
};

// A Status with `code` and the message "<what>: <OpenSSL's reason>", the
// reason being the most recent error on this thread's queue (or "unknown
// OpenSSL error" when the queue is empty).
absl::Status OpenSslError(absl::StatusCode code, absl::string_view what);

// Inputs larger than this are refused before OpenSSL sees them: a CSR,
// certificate or key of this mesh is well under 4 KiB.
inline constexpr size_t kMaxInputBytes = 64 * 1024;

// Whether `data` (after leading ASCII whitespace) starts a PEM block.
bool LooksLikePem(absl::string_view data);

// Decodes exactly one PEM block labelled `label` ("CERTIFICATE") from
// `data` and returns its DER bytes. Text other than ASCII whitespace before
// or after the block, a different label, PEM headers (legacy encryption) or
// a second block are INVALID_ARGUMENT, the message starting with `what`.
absl::StatusOr<std::string> DecodePem(absl::string_view data,
                                      absl::string_view label,
                                      absl::string_view what);

// Encodes DER bytes as one PEM block labelled `label`.
absl::StatusOr<std::string> EncodePem(absl::string_view der,
                                      absl::string_view label);

// DER parsers that refuse trailing bytes; `what` starts the error message.
absl::StatusOr<UniqueX509> ParseX509Der(absl::string_view der,
                                        absl::string_view what);
absl::StatusOr<UniqueX509Req> ParseX509ReqDer(absl::string_view der,
                                              absl::string_view what);

// DER encoders.
absl::StatusOr<std::string> X509ToDer(const X509* x509);
absl::StatusOr<std::string> X509ReqToDer(const X509_REQ* req);

// The contents of a memory BIO.
std::string BioContents(BIO* bio);

// Lower-case hex of `bytes`.
std::string Hex(absl::string_view bytes);

// Decodes lower- or upper-case hex. An odd length or a non-hex character is
// INVALID_ARGUMENT naming `what`.
absl::StatusOr<std::string> Unhex(absl::string_view hex,
                                  absl::string_view what);

// SHA-256 of `data`, raw 32 bytes.
std::string Sha256(absl::string_view data);

// Cryptographically random bytes (RAND_bytes).
absl::StatusOr<std::string> RandomBytes(size_t n);

// Compares two byte strings in time that depends only on their lengths
// (CRYPTO_memcmp). Unequal lengths compare unequal; lengths are not secret.
bool ConstantTimeEquals(absl::string_view a, absl::string_view b);

// Converts between ASN1_TIME and absl::Time (whole seconds, UTC).
absl::StatusOr<absl::Time> Asn1TimeToTime(const ASN1_TIME* t);
absl::Status SetAsn1Time(ASN1_TIME* t, absl::Time time);

// RFC 3339 text for messages: "2025-01-31T12:00:00Z".
std::string TimeString(absl::Time t);

// The canonical text of a certificate serial: lower-case hex of its
// big-endian magnitude, without leading zero bytes ("0a1f...", two digits
// per byte). Negative serials are INVALID_ARGUMENT.
absl::StatusOr<std::string> SerialToHex(const ASN1_INTEGER* serial);

// Whether `key` is an ECDSA key on the named curve P-256 (prime256v1).
// Explicit curve parameters are refused even when they describe P-256.
bool IsP256(const EVP_PKEY* key);

// The single URI in a subjectAltName, for SPIFFE: exactly one name, of
// type URI, without NUL bytes. INVALID_ARGUMENT otherwise ("URI SAN
// missing", "DNS SAN not allowed (only one URI SAN)", "2 URI SANs ...").
absl::StatusOr<std::string> OnlyUriName(const GENERAL_NAMES* names);

// Adds a URI subjectAltName holding `uri` to `exts` (non-critical).
absl::Status AppendUriSan(STACK_OF(X509_EXTENSION) * exts,
                          absl::string_view uri);

}  // namespace mycel::pki::internal

#endif  // MYCEL_MESH_PKI_INTERNAL_OPENSSL_H_
