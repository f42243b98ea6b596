// mesh/identity/tls_defaults.h: whether a system OpenSSL configuration
// sets a TLS policy, and the session tickets every SSL_CTX sends once
// mycel's defaults are loaded.
#include "mesh/identity/tls_defaults.h"

#include <doctest/doctest.h>
#include <openssl/conf.h>
#include <openssl/crypto.h>
#include <openssl/ssl.h>

#include <string>

#include "absl/strings/match.h"
#include "runtime/fs.h"
#include "tests/testing/process.h"

namespace mycel::identity {
namespace {

TEST_CASE("ConfiguresSsl: an ssl_conf entry is a system TLS policy") {
  testing::TempDir dir;
  auto with = [&](const std::string& name, const std::string& text) {
    const std::string path = dir.Sub(name);
    REQUIRE(WriteFileAtomic(path, text, 0644).ok());
    return ConfiguresSsl(path);
  };
  CHECK(*ConfiguresSsl(dir.Sub("absent.cnf")) == false);
  CHECK(*with("empty.cnf", "") == false);
  // Debian 12's: an openssl_init section with nothing in it.
  CHECK(*with("debian.cnf",
              "HOME = .\nopenssl_conf = openssl_init\n[openssl_init]\n") ==
        false);
  CHECK(*with("providers.cnf",
              "openssl_conf = init\n[init]\nproviders = p\n[p]\n"
              "default = d\n[d]\nactivate = 1\n") == false);
  CHECK(*with("policy.cnf",
              "openssl_conf = init\n[init]\nssl_conf = s\n[s]\n"
              "system_default = d\n[d]\nMinProtocol = TLSv1.3\n") == true);
  absl::StatusOr<bool> bad = with("bad.cnf", "[unclosed\n");
  CHECK(absl::IsInvalidArgument(bad.status()));
  CHECK(absl::StrContains(bad.status().message(), "bad.cnf: line 1"));
}

TEST_CASE("once the defaults are loaded, a new SSL_CTX sends no tickets") {
  SSL_CTX* before = SSL_CTX_new(TLS_server_method());
  REQUIRE(before != nullptr);
  CHECK(SSL_CTX_get_num_tickets(before) == 2);  // OpenSSL's default
  SSL_CTX_free(before);
  absl::Status s = DisableSessionTickets();
  if (absl::IsFailedPrecondition(s)) {
    // The host's own TLS policy is kept; this host is not Debian 12's.
    char* file = CONF_get1_default_config_file();
    CHECK(*ConfiguresSsl(file) == true);
    OPENSSL_free(file);
    MESSAGE("skipped: ", s.message());
    return;
  }
  REQUIRE_MESSAGE(s.ok(), s);
  SSL_CTX* after = SSL_CTX_new(TLS_server_method());
  REQUIRE(after != nullptr);
  CHECK(SSL_CTX_get_num_tickets(after) == 0);
  // Nothing else changes: TLS 1.3 is still the most a context offers.
  CHECK(SSL_CTX_get_max_proto_version(after) == 0);
  SSL_CTX_free(after);
  // Again: still none, and no error.
  CHECK(DisableSessionTickets().ok());
  SSL_CTX* again = SSL_CTX_new(TLS_server_method());
  CHECK(SSL_CTX_get_num_tickets(again) == 0);
  SSL_CTX_free(again);
}

}  // namespace
}  // namespace mycel::identity
