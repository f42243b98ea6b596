// TLS settings of this process that gRPC has no option for. OpenSSL applies
// its "system_default" configuration to every SSL_CTX it makes, gRPC's
// included; mycel sets one that turns off TLS 1.3 session tickets.
//
// A gRPC 1.51 server sends two tickets after each handshake, and nothing
// in mycel resumes a session (gRPC clients do only with a session cache,
// which mycel's channels do not ask for). Each ticket is a copy of the
// session, the client's certificate included, encrypted: about 1.5 KB of
// the 3.9 KB a server sends to open a link, and a certificate encoded and
// parsed again on the server, about 5% of a 50-node mesh's CPU as it forms
// (docs/performance.md).
#ifndef MYCEL_MESH_IDENTITY_TLS_DEFAULTS_H_
#define MYCEL_MESH_IDENTITY_TLS_DEFAULTS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace mycel::identity {

// Whether the OpenSSL configuration file at `path` configures the ssl_conf
// module (an "ssl_conf" entry in its openssl_conf section): a system TLS
// policy, such as a distribution's crypto policy. False when the file does
// not exist. An error when it exists and cannot be parsed.
absl::StatusOr<bool> ConfiguresSsl(const std::string& path);

// Makes every SSL_CTX made from now on send no session tickets. Loads the
// system's OpenSSL configuration first (as OpenSSL's first use would), so
// that it cannot replace this later. FAILED_PRECONDITION, changing
// nothing, when that configuration has a TLS policy of its own
// (ConfiguresSsl): it is left as it is. Call it before the first TLS
// server is made (an SSL_CTX made before keeps its tickets); calling it
// again changes nothing.
absl::Status DisableSessionTickets();

}  // namespace mycel::identity

#endif  // MYCEL_MESH_IDENTITY_TLS_DEFAULTS_H_
