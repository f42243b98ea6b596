#include "mesh/pki/private_key.h"

#include <openssl/crypto.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "runtime/fs.h"
#include "runtime/status.h"

namespace mycel::pki {
namespace {

using internal::ErrorScope;
using internal::OpenSslError;

// Wipes a string that held key material when it goes out of scope.
class Wipe {
 public:
  explicit Wipe(std::string* s) : s_(s) {}
  ~Wipe() { OPENSSL_cleanse(s_->data(), s_->size()); }
  Wipe(const Wipe&) = delete;
  Wipe& operator=(const Wipe&) = delete;

 private:
  std::string* s_;
};

struct Pkcs8Deleter {
  void operator()(PKCS8_PRIV_KEY_INFO* p) const { PKCS8_PRIV_KEY_INFO_free(p); }
};

}  // namespace

absl::StatusOr<PrivateKey> PrivateKey::Generate() {
  ErrorScope errors;
  internal::UniqueEvpPkeyCtx ctx(
      EVP_PKEY_CTX_new_from_name(nullptr, "EC", nullptr));
  EVP_PKEY* raw = nullptr;
  if (ctx == nullptr || EVP_PKEY_keygen_init(ctx.get()) != 1 ||
      EVP_PKEY_CTX_set_group_name(ctx.get(), "P-256") != 1 ||
      EVP_PKEY_generate(ctx.get(), &raw) != 1) {
    return OpenSslError(absl::StatusCode::kInternal,
                        "generate ECDSA P-256 key");
  }
  return PrivateKey(internal::UniqueEvpPkey(raw));
}

absl::StatusOr<PrivateKey> PrivateKey::FromPem(absl::string_view pem) {
  ErrorScope errors;
  ASSIGN_OR_RETURN(std::string der,
                   internal::DecodePem(pem, "PRIVATE KEY", "private key"));
  Wipe wipe(&der);
  const unsigned char* p = reinterpret_cast<const unsigned char*>(der.data());
  const unsigned char* end = p + der.size();
  std::unique_ptr<PKCS8_PRIV_KEY_INFO, Pkcs8Deleter> info(
      d2i_PKCS8_PRIV_KEY_INFO(nullptr, &p, static_cast<long>(der.size())));
  if (info == nullptr) {
    return OpenSslError(absl::StatusCode::kInvalidArgument,
                        "private key: malformed or truncated PKCS#8");
  }
  if (p != end) {
    return absl::InvalidArgumentError(
        "private key: unexpected bytes after the PKCS#8 DER");
  }
  internal::UniqueEvpPkey key(EVP_PKCS82PKEY(info.get()));
  if (key == nullptr) {
    return OpenSslError(absl::StatusCode::kInvalidArgument,
                        "private key: unsupported PKCS#8 content");
  }
  if (!internal::IsP256(key.get())) {
    return absl::InvalidArgumentError(
        "private key: must be ECDSA on the named curve P-256");
  }
  internal::UniqueEvpPkeyCtx ctx(
      EVP_PKEY_CTX_new_from_pkey(nullptr, key.get(), nullptr));
  if (ctx == nullptr || EVP_PKEY_check(ctx.get()) != 1) {
    return OpenSslError(absl::StatusCode::kInvalidArgument,
                        "private key: inconsistent key");
  }
  return PrivateKey(std::move(key));
}

absl::StatusOr<std::string> PrivateKey::ToPem() const {
  ErrorScope errors;
  // secmem: OpenSSL's copy is cleared when the BIO is freed.
  internal::UniqueBio bio(BIO_new(BIO_s_secmem()));
  if (bio == nullptr ||
      PEM_write_bio_PrivateKey(bio.get(), key_.get(), nullptr, nullptr, 0,
                               nullptr, nullptr) != 1) {
    return OpenSslError(absl::StatusCode::kInternal, "encode private key");
  }
  return internal::BioContents(bio.get());
}

absl::StatusOr<PublicKey> PrivateKey::GetPublicKey() const {
  ErrorScope errors;
  int len = i2d_PUBKEY(key_.get(), nullptr);
  if (len <= 0) {
    return OpenSslError(absl::StatusCode::kInternal, "encode public key");
  }
  std::string der(static_cast<size_t>(len), '\0');
  unsigned char* p = reinterpret_cast<unsigned char*>(der.data());
  if (i2d_PUBKEY(key_.get(), &p) != len) {
    return OpenSslError(absl::StatusCode::kInternal, "encode public key");
  }
  return PublicKey::FromDer(der);
}

absl::Status PrivateKey::WriteToFile(const std::string& path) const {
  ASSIGN_OR_RETURN(std::string pem, ToPem());
  Wipe wipe(&pem);
  return WriteFileAtomic(path, pem, 0600);
}

}  // namespace mycel::pki
