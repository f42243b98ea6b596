#include "mesh/pki/internal/openssl.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/ec.h>
#include <openssl/objects.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/sha.h>
#include <time.h>

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/civil_time.h"

namespace mycel::pki::internal {
namespace {

bool IsAllWhitespace(absl::string_view s) {
  for (char c : s) {
    if (!absl::ascii_isspace(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

struct OpenSslFreeDeleter {
  void operator()(void* p) const { OPENSSL_free(p); }
};
using OpenSslChars = std::unique_ptr<char, OpenSslFreeDeleter>;
using OpenSslBytes = std::unique_ptr<unsigned char, OpenSslFreeDeleter>;

UniqueBio MemBio(absl::string_view data) {
  return UniqueBio(BIO_new_mem_buf(data.data(), static_cast<int>(data.size())));
}

}  // namespace

absl::Status OpenSslError(absl::StatusCode code, absl::string_view what) {
  unsigned long err = ERR_peek_last_error();
  const char* reason = err != 0 ? ERR_reason_error_string(err) : nullptr;
  if (reason == nullptr) reason = "unknown OpenSSL error";
  return absl::Status(code, absl::StrCat(what, ": ", reason));
}

bool LooksLikePem(absl::string_view data) {
  data = absl::StripLeadingAsciiWhitespace(data);
  return absl::StartsWith(data, "-----BEGIN ");
}

absl::StatusOr<std::string> DecodePem(absl::string_view data,
                                      absl::string_view label,
                                      absl::string_view what) {
  ErrorScope errors;
  if (data.size() > kMaxInputBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": larger than ", kMaxInputBytes, " bytes"));
  }
  if (!LooksLikePem(data)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": not PEM (no \"-----BEGIN\" line)"));
  }
  UniqueBio bio = MemBio(absl::StripLeadingAsciiWhitespace(data));
  if (bio == nullptr) return OpenSslError(absl::StatusCode::kInternal, what);
  char* raw_name = nullptr;
  char* raw_header = nullptr;
  unsigned char* raw_data = nullptr;
  long len = 0;
  int ok = PEM_read_bio(bio.get(), &raw_name, &raw_header, &raw_data, &len);
  OpenSslChars name(raw_name);
  OpenSslChars header(raw_header);
  OpenSslBytes der(raw_data);
  if (ok != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": malformed or truncated PEM"));
  }
  if (label != name.get()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": PEM block is \"", absl::CHexEscape(name.get()),
                     "\", expected \"", label, "\""));
  }
  if (header != nullptr && header.get()[0] != '\0') {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": PEM headers (legacy encryption) are not supported"));
  }
  char* rest = nullptr;
  long rest_len = BIO_get_mem_data(bio.get(), &rest);
  if (rest_len > 0 && !IsAllWhitespace(absl::string_view(
                          rest, static_cast<size_t>(rest_len)))) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": unexpected data after the PEM block"));
  }
  std::string out(reinterpret_cast<const char*>(der.get()),
                  static_cast<size_t>(len));
  // The block may be a private key: clear OpenSSL's copy before freeing it.
  OPENSSL_cleanse(der.get(), static_cast<size_t>(len));
  return out;
}

absl::StatusOr<std::string> EncodePem(absl::string_view der,
                                      absl::string_view label) {
  ErrorScope errors;
  // secmem: the buffer is cleared when freed, which matters for keys.
  UniqueBio bio(BIO_new(BIO_s_secmem()));
  std::string label_str(label);
  if (bio == nullptr ||
      PEM_write_bio(bio.get(), label_str.c_str(), "",
                    reinterpret_cast<const unsigned char*>(der.data()),
                    static_cast<long>(der.size())) <= 0) {
    return OpenSslError(absl::StatusCode::kInternal,
                        absl::StrCat("encode PEM ", label));
  }
  return BioContents(bio.get());
}

namespace {

// One DER object, all of `der` and nothing after it, by `d2i` (d2i_X509,
// d2i_X509_REQ).
template <typename Unique, typename D2i>
absl::StatusOr<Unique> ParseDer(absl::string_view der, absl::string_view what,
                                D2i d2i) {
  ErrorScope errors;
  if (der.empty())
    return absl::InvalidArgumentError(absl::StrCat(what, ": empty"));
  if (der.size() > kMaxInputBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": larger than ", kMaxInputBytes, " bytes"));
  }
  const unsigned char* p = reinterpret_cast<const unsigned char*>(der.data());
  const unsigned char* end = p + der.size();
  Unique parsed(d2i(nullptr, &p, static_cast<long>(der.size())));
  if (parsed == nullptr) {
    return OpenSslError(absl::StatusCode::kInvalidArgument,
                        absl::StrCat(what, ": malformed or truncated DER"));
  }
  if (p != end) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", end - p, " unexpected bytes after the DER"));
  }
  return parsed;
}

}  // namespace

absl::StatusOr<UniqueX509> ParseX509Der(absl::string_view der,
                                        absl::string_view what) {
  return ParseDer<UniqueX509>(der, what, d2i_X509);
}

absl::StatusOr<UniqueX509Req> ParseX509ReqDer(absl::string_view der,
                                              absl::string_view what) {
  return ParseDer<UniqueX509Req>(der, what, d2i_X509_REQ);
}

absl::StatusOr<std::string> X509ToDer(const X509* x509) {
  ErrorScope errors;
  int len = i2d_X509(x509, nullptr);
  if (len <= 0)
    return OpenSslError(absl::StatusCode::kInternal, "encode certificate");
  std::string out(static_cast<size_t>(len), '\0');
  unsigned char* p = reinterpret_cast<unsigned char*>(out.data());
  if (i2d_X509(x509, &p) != len) {
    return OpenSslError(absl::StatusCode::kInternal, "encode certificate");
  }
  return out;
}

absl::StatusOr<std::string> X509ReqToDer(const X509_REQ* req) {
  ErrorScope errors;
  int len = i2d_X509_REQ(req, nullptr);
  if (len <= 0) return OpenSslError(absl::StatusCode::kInternal, "encode CSR");
  std::string out(static_cast<size_t>(len), '\0');
  unsigned char* p = reinterpret_cast<unsigned char*>(out.data());
  if (i2d_X509_REQ(req, &p) != len) {
    return OpenSslError(absl::StatusCode::kInternal, "encode CSR");
  }
  return out;
}

std::string BioContents(BIO* bio) {
  char* data = nullptr;
  long len = BIO_get_mem_data(bio, &data);
  if (len <= 0 || data == nullptr) return std::string();
  return std::string(data, static_cast<size_t>(len));
}

std::string Hex(absl::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out.push_back(kDigits[c >> 4]);
    out.push_back(kDigits[c & 0xf]);
  }
  return out;
}

absl::StatusOr<std::string> Unhex(absl::string_view hex,
                                  absl::string_view what) {
  if (hex.size() % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": odd number of hex digits"));
  }
  auto value = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  out.reserve(hex.size() / 2);
  for (size_t i = 0; i < hex.size(); i += 2) {
    int hi = value(hex[i]);
    int lo = value(hex[i + 1]);
    if (hi < 0 || lo < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": character ", (hi < 0 ? i : i + 1) + 1, " is not hex"));
    }
    out.push_back(static_cast<char>((hi << 4) | lo));
  }
  return out;
}

std::string Sha256(absl::string_view data) {
  unsigned char md[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(), md);
  return std::string(reinterpret_cast<const char*>(md), sizeof(md));
}

absl::StatusOr<std::string> RandomBytes(size_t n) {
  ErrorScope errors;
  std::string out(n, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(out.data()),
                 static_cast<int>(n)) != 1) {
    return OpenSslError(absl::StatusCode::kInternal, "random bytes");
  }
  return out;
}

bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  if (a.size() != b.size()) return false;
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

absl::StatusOr<absl::Time> Asn1TimeToTime(const ASN1_TIME* t) {
  ErrorScope errors;
  struct tm tm = {};
  if (t == nullptr || ASN1_TIME_to_tm(t, &tm) != 1) {
    return absl::InvalidArgumentError("malformed ASN.1 time");
  }
  absl::CivilSecond civil(tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                          tm.tm_hour, tm.tm_min, tm.tm_sec);
  return absl::FromCivil(civil, absl::UTCTimeZone());
}

absl::Status SetAsn1Time(ASN1_TIME* t, absl::Time time) {
  ErrorScope errors;
  if (ASN1_TIME_set(t, absl::ToTimeT(time)) == nullptr) {
    return OpenSslError(absl::StatusCode::kInvalidArgument,
                        absl::StrCat("time ", TimeString(time),
                                     " cannot be encoded in a certificate"));
  }
  return absl::OkStatus();
}

std::string TimeString(absl::Time t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", t, absl::UTCTimeZone());
}

absl::StatusOr<std::string> SerialToHex(const ASN1_INTEGER* serial) {
  ErrorScope errors;
  UniqueBignum bn(ASN1_INTEGER_to_BN(serial, nullptr));
  if (bn == nullptr) return absl::InvalidArgumentError("malformed serial");
  if (BN_is_negative(bn.get())) {
    return absl::InvalidArgumentError("negative serial");
  }
  std::string bytes(static_cast<size_t>(BN_num_bytes(bn.get())), '\0');
  BN_bn2bin(bn.get(), reinterpret_cast<unsigned char*>(bytes.data()));
  if (bytes.empty()) return std::string("00");
  return Hex(bytes);
}

bool IsP256(const EVP_PKEY* key) {
  ErrorScope errors;
  if (key == nullptr || EVP_PKEY_is_a(key, "EC") != 1) return false;
  char group[64] = {};
  size_t len = 0;
  if (EVP_PKEY_get_utf8_string_param(key, OSSL_PKEY_PARAM_GROUP_NAME, group,
                                     sizeof(group), &len) != 1) {
    return false;
  }
  int nid = OBJ_sn2nid(group);
  if (nid == NID_undef) nid = EC_curve_nist2nid(group);
  if (nid != NID_X9_62_prime256v1) return false;
  char encoding[32] = {};
  if (EVP_PKEY_get_utf8_string_param(key, OSSL_PKEY_PARAM_EC_ENCODING, encoding,
                                     sizeof(encoding), &len) == 1 &&
      absl::string_view(encoding) != OSSL_PKEY_EC_ENCODING_GROUP) {
    return false;
  }
  return true;
}

namespace {

absl::string_view GeneralNameTypeName(int type) {
  switch (type) {
    case GEN_OTHERNAME:
      return "otherName";
    case GEN_EMAIL:
      return "e-mail";
    case GEN_DNS:
      return "DNS";
    case GEN_X400:
      return "X.400";
    case GEN_DIRNAME:
      return "directory name";
    case GEN_EDIPARTY:
      return "EDI party";
    case GEN_URI:
      return "URI";
    case GEN_IPADD:
      return "IP";
    case GEN_RID:
      return "registered ID";
  }
  return "unknown";
}

}  // namespace

absl::StatusOr<std::string> OnlyUriName(const GENERAL_NAMES* names) {
  std::string uri;
  int uris = 0;
  for (int i = 0; i < sk_GENERAL_NAME_num(names); ++i) {
    const GENERAL_NAME* name = sk_GENERAL_NAME_value(names, i);
    if (name->type != GEN_URI) {
      return absl::InvalidArgumentError(
          absl::StrCat(GeneralNameTypeName(name->type),
                       " SAN not allowed (only one URI SAN)"));
    }
    ++uris;
    const ASN1_IA5STRING* ia5 = name->d.uniformResourceIdentifier;
    uri.assign(reinterpret_cast<const char*>(ASN1_STRING_get0_data(ia5)),
               static_cast<size_t>(ASN1_STRING_length(ia5)));
  }
  if (uris == 0) return absl::InvalidArgumentError("URI SAN missing");
  if (uris > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(uris, " URI SANs (exactly one SPIFFE ID allowed)"));
  }
  return uri;
}

absl::Status AppendUriSan(STACK_OF(X509_EXTENSION) * exts,
                          absl::string_view uri) {
  ErrorScope errors;
  UniqueGeneralNames names(GENERAL_NAMES_new());
  UniqueGeneralName name(GENERAL_NAME_new());
  ASN1_IA5STRING* ia5 = ASN1_IA5STRING_new();
  if (names == nullptr || name == nullptr || ia5 == nullptr) {
    ASN1_IA5STRING_free(ia5);
    return OpenSslError(absl::StatusCode::kInternal, "subjectAltName");
  }
  if (ASN1_STRING_set(ia5, uri.data(), static_cast<int>(uri.size())) != 1) {
    ASN1_IA5STRING_free(ia5);
    return OpenSslError(absl::StatusCode::kInternal, "subjectAltName");
  }
  GENERAL_NAME_set0_value(name.get(), GEN_URI, ia5);
  if (sk_GENERAL_NAME_push(names.get(), name.get()) <= 0) {
    return OpenSslError(absl::StatusCode::kInternal, "subjectAltName");
  }
  name.release();  // owned by `names` now
  UniqueX509Ext ext(X509V3_EXT_i2d(NID_subject_alt_name, 0, names.get()));
  if (ext == nullptr || sk_X509_EXTENSION_push(exts, ext.get()) <= 0) {
    return OpenSslError(absl::StatusCode::kInternal, "subjectAltName");
  }
  ext.release();  // owned by `exts` now
  return absl::OkStatus();
}

}  // namespace mycel::pki::internal
