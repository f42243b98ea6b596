#include "mesh/pki/signature.h"

#include <openssl/evp.h>
#include <openssl/x509.h>

#include <memory>

namespace mycel::pki {
namespace {

struct MdCtxFree {
  void operator()(EVP_MD_CTX* ctx) const { EVP_MD_CTX_free(ctx); }
};
using UniqueMdCtx = std::unique_ptr<EVP_MD_CTX, MdCtxFree>;

const unsigned char* Bytes(absl::string_view s) {
  return reinterpret_cast<const unsigned char*>(s.data());
}

}  // namespace

absl::StatusOr<std::string> SignSha256(const PrivateKey& key,
                                       absl::string_view data) {
  UniqueMdCtx ctx(EVP_MD_CTX_new());
  size_t size = 0;
  if (ctx == nullptr ||
      EVP_DigestSignInit(ctx.get(), nullptr, EVP_sha256(), nullptr,
                         key.evp()) != 1 ||
      EVP_DigestSign(ctx.get(), nullptr, &size, Bytes(data), data.size()) !=
          1) {
    return absl::InternalError("sign: EVP_DigestSign failed");
  }
  std::string signature(size, '\0');
  if (EVP_DigestSign(ctx.get(), reinterpret_cast<unsigned char*>(&signature[0]),
                     &size, Bytes(data), data.size()) != 1) {
    return absl::InternalError("sign: EVP_DigestSign failed");
  }
  signature.resize(size);
  return signature;
}

absl::Status VerifySha256(const Certificate& certificate,
                          absl::string_view data, absl::string_view signature) {
  UniqueMdCtx ctx(EVP_MD_CTX_new());
  if (ctx == nullptr ||
      EVP_DigestVerifyInit(ctx.get(), nullptr, EVP_sha256(), nullptr,
                           X509_get0_pubkey(certificate.x509())) != 1 ||
      EVP_DigestVerify(ctx.get(), Bytes(signature), signature.size(),
                       Bytes(data), data.size()) != 1) {
    return absl::InvalidArgumentError(
        "signature: not made by the certificate's key over this data");
  }
  return absl::OkStatus();
}

}  // namespace mycel::pki
