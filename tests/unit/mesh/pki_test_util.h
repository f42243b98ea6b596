// Shared helpers for the mesh/pki tests: fixed times, a CA per test, and
// raw OpenSSL builders for the malformed CSRs and certificates that the
// library itself refuses to produce.
#ifndef MYCEL_TESTS_UNIT_MESH_PKI_TEST_UTIL_H_
#define MYCEL_TESTS_UNIT_MESH_PKI_TEST_UTIL_H_

#include <doctest/doctest.h>
#include <openssl/evp.h>
#include <openssl/rsa.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/time/civil_time.h"
#include "absl/time/time.h"
#include "mesh/pki/certificate_authority.h"
#include "mesh/pki/internal/openssl.h"

namespace mycel::pki::testing {

// A fixed "now" so that tests do not depend on the wall clock.
inline absl::Time T0() {
  return absl::FromCivil(absl::CivilSecond(2030, 6, 1, 12, 0, 0),
                         absl::UTCTimeZone());
}

// Unwraps a StatusOr, failing the test (with the status) when it is an
// error.
template <typename T>
T Must(absl::StatusOr<T> v) {
  REQUIRE_MESSAGE(v.ok(), v.status().ToString());
  return *std::move(v);
}

// A CA for `mesh` created a year before T0, valid for ten years.
inline CertificateAuthority MakeCa(const std::string& mesh = "prod") {
  return Must(CertificateAuthority::Create(mesh, T0() - absl::Hours(24 * 365)));
}

inline SpiffeId NodeId(const std::string& name,
                       const std::string& mesh = "prod") {
  return Must(SpiffeId::Create(IdentityKind::kNode, mesh, name));
}
inline SpiffeId UserId(const std::string& name,
                       const std::string& mesh = "prod") {
  return Must(SpiffeId::Create(IdentityKind::kUser, mesh, name));
}

// Whether `status` has `code` and its message contains `text`; prints both
// when it does not.
inline bool Fails(const absl::Status& status, absl::StatusCode code,
                  const std::string& text) {
  bool ok = status.code() == code && absl::StrContains(status.message(), text);
  if (!ok) {
    MESSAGE("got: ", status.ToString(), " | want code ",
            absl::StatusCodeToString(code), " containing: ", text);
  }
  return ok;
}
template <typename T>
bool Fails(const absl::StatusOr<T>& v, absl::StatusCode code,
           const std::string& text) {
  return Fails(v.status(), code, text);
}

inline internal::UniqueEvpPkey GenerateEc(const char* curve) {
  return internal::UniqueEvpPkey(EVP_EC_gen(curve));
}
// An RSA key (one per process: key generation is slow).
inline internal::UniqueEvpPkey GenerateRsa() {
  static EVP_PKEY* const key = EVP_RSA_gen(1024);
  REQUIRE(key != nullptr);
  EVP_PKEY_up_ref(key);
  return internal::UniqueEvpPkey(key);
}

struct SanEntry {
  int type;  // GEN_URI, GEN_DNS, GEN_IPADD, GEN_EMAIL
  std::string value;
};

inline GENERAL_NAMES* MakeNames(const std::vector<SanEntry>& sans) {
  GENERAL_NAMES* names = GENERAL_NAMES_new();
  for (const SanEntry& san : sans) {
    GENERAL_NAME* name = GENERAL_NAME_new();
    ASN1_STRING* value = ASN1_STRING_type_new(
        san.type == GEN_IPADD ? V_ASN1_OCTET_STRING : V_ASN1_IA5STRING);
    ASN1_STRING_set(value, san.value.data(),
                    static_cast<int>(san.value.size()));
    GENERAL_NAME_set0_value(name, san.type, value);
    sk_GENERAL_NAME_push(names, name);
  }
  return names;
}

// A CSR built field by field with OpenSSL, for inputs the library's own
// CertificateRequest::Create would never produce.
struct RawCsr {
  EVP_PKEY* key = nullptr;       // the key in the CSR
  EVP_PKEY* sign_key = nullptr;  // signs it; defaults to `key`
  const EVP_MD* md = EVP_sha256();
  std::vector<SanEntry> sans;  // empty: no subjectAltName extension
  // Further extensions in OpenSSL config syntax: {nid, "critical,CA:TRUE"}.
  std::vector<std::pair<int, std::string>> extra_extensions;
  bool challenge_password = false;
};

inline std::string BuildCsrDer(const RawCsr& spec) {
  internal::UniqueX509Req req(X509_REQ_new());
  X509_REQ_set_version(req.get(), 0);
  X509_NAME_add_entry_by_txt(
      X509_REQ_get_subject_name(req.get()), "CN", MBSTRING_UTF8,
      reinterpret_cast<const unsigned char*>("x"), 1, -1, 0);
  X509_REQ_set_pubkey(req.get(), spec.key);
  internal::UniqueExtensionStack exts(sk_X509_EXTENSION_new_null());
  if (!spec.sans.empty()) {
    GENERAL_NAMES* names = MakeNames(spec.sans);
    sk_X509_EXTENSION_push(exts.get(),
                           X509V3_EXT_i2d(NID_subject_alt_name, 0, names));
    GENERAL_NAMES_free(names);
  }
  for (const auto& [nid, value] : spec.extra_extensions) {
    sk_X509_EXTENSION_push(
        exts.get(), X509V3_EXT_conf_nid(nullptr, nullptr, nid, value.c_str()));
  }
  if (sk_X509_EXTENSION_num(exts.get()) > 0) {
    X509_REQ_add_extensions(req.get(), exts.get());
  }
  if (spec.challenge_password) {
    X509_REQ_add1_attr_by_NID(req.get(), NID_pkcs9_challengePassword,
                              MBSTRING_ASC,
                              reinterpret_cast<const unsigned char*>("pw"), 2);
  }
  REQUIRE(X509_REQ_sign(req.get(), spec.sign_key ? spec.sign_key : spec.key,
                        spec.md) > 0);
  return Must(internal::X509ReqToDer(req.get()));
}

// A leaf certificate built field by field and signed with `signer` (usually
// a CA's key), for certificates the library's issuer would refuse to make.
struct RawLeaf {
  X509* issuer = nullptr;      // issuer certificate (name, AKI)
  EVP_PKEY* signer = nullptr;  // issuer key
  EVP_PKEY* key = nullptr;     // subject key
  std::string organization = "mycel:node";
  std::string common_name = "web-1";
  std::vector<SanEntry> sans = {{GEN_URI, "spiffe://prod/node/web-1"}};
  std::string basic_constraints = "critical,CA:FALSE";
  std::string key_usage = "critical,digitalSignature";
  std::string ext_key_usage = "serverAuth,clientAuth";
  absl::Time not_before = T0() - absl::Hours(1);
  absl::Time not_after = T0() + absl::Hours(24);
};

inline Certificate BuildLeaf(const RawLeaf& spec) {
  internal::UniqueX509 x(X509_new());
  X509_set_version(x.get(), X509_VERSION_3);
  ASN1_INTEGER_set(X509_get_serialNumber(x.get()), 4242);
  X509_set_issuer_name(x.get(), X509_get_subject_name(spec.issuer));
  X509_NAME* name = X509_get_subject_name(x.get());
  X509_NAME_add_entry_by_txt(
      name, "O", MBSTRING_UTF8,
      reinterpret_cast<const unsigned char*>(spec.organization.data()),
      static_cast<int>(spec.organization.size()), -1, 0);
  X509_NAME_add_entry_by_txt(
      name, "CN", MBSTRING_UTF8,
      reinterpret_cast<const unsigned char*>(spec.common_name.data()),
      static_cast<int>(spec.common_name.size()), -1, 0);
  REQUIRE(internal::SetAsn1Time(X509_getm_notBefore(x.get()), spec.not_before)
              .ok());
  REQUIRE(
      internal::SetAsn1Time(X509_getm_notAfter(x.get()), spec.not_after).ok());
  X509_set_pubkey(x.get(), spec.key);
  X509V3_CTX ctx;
  X509V3_set_ctx(&ctx, spec.issuer, x.get(), nullptr, nullptr, 0);
  auto add = [&](int nid, const std::string& value) {
    if (value.empty()) return;
    X509_EXTENSION* ext =
        X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str());
    REQUIRE(ext != nullptr);
    X509_add_ext(x.get(), ext, -1);
    X509_EXTENSION_free(ext);
  };
  add(NID_basic_constraints, spec.basic_constraints);
  add(NID_key_usage, spec.key_usage);
  add(NID_ext_key_usage, spec.ext_key_usage);
  add(NID_subject_key_identifier, "hash");
  add(NID_authority_key_identifier, "keyid:always");
  if (!spec.sans.empty()) {
    GENERAL_NAMES* names = MakeNames(spec.sans);
    X509_add1_ext_i2d(x.get(), NID_subject_alt_name, names, 0,
                      X509V3_ADD_DEFAULT);
    GENERAL_NAMES_free(names);
  }
  REQUIRE(X509_sign(x.get(), spec.signer, EVP_sha256()) > 0);
  return Must(Certificate::FromX509(std::move(x)));
}

}  // namespace mycel::pki::testing

#endif  // MYCEL_TESTS_UNIT_MESH_PKI_TEST_UTIL_H_
