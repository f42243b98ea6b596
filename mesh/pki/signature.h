// Detached signatures with mesh keys: ECDSA P-256 over SHA-256, the DER
// signature as OpenSSL writes it. Membership signs its Alive records with
// a node key; authorities sign the revocation list they publish in the
// replicated store with the CA key, so that whoever relays it, a receiver
// checks who made it.
//
// Callers put a context string at the start of what they sign (a record
// kind and version), so that a signature made for one purpose is never
// valid for another.
#ifndef MYCEL_MESH_PKI_SIGNATURE_H_
#define MYCEL_MESH_PKI_SIGNATURE_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "mesh/pki/certificate.h"
#include "mesh/pki/private_key.h"

namespace mycel::pki {

// The signature of `data` with `key`. INTERNAL when OpenSSL fails.
absl::StatusOr<std::string> SignSha256(const PrivateKey& key,
                                       absl::string_view data);

// OK when `signature` is the signature of `data` by the key of
// `certificate`; INVALID_ARGUMENT otherwise. It checks the signature
// only: the certificate's own trust is the caller's business.
absl::Status VerifySha256(const Certificate& certificate,
                          absl::string_view data, absl::string_view signature);

}  // namespace mycel::pki

#endif  // MYCEL_MESH_PKI_SIGNATURE_H_
