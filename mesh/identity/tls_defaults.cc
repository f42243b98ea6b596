#include "mesh/identity/tls_defaults.h"

#include <openssl/bio.h>
#include <openssl/conf.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <sys/stat.h>

#include <memory>

#include "absl/strings/str_cat.h"

namespace mycel::identity {
namespace {

struct ConfFree {
  void operator()(CONF* c) const { NCONF_free(c); }
};
using UniqueConf = std::unique_ptr<CONF, ConfFree>;

// The reason of OpenSSL's last error, and clears the queue.
std::string OpenSslError() {
  const unsigned long e = ERR_peek_last_error();
  ERR_clear_error();
  const char* reason = e == 0 ? nullptr : ERR_reason_error_string(e);
  return reason != nullptr ? reason : "unknown error";
}

// Read once into the ssl_conf module, whose "system_default" entry every
// SSL_CTX applies as it is made (SSL_CTX_new).
constexpr char kConfig[] =
    "mycel_openssl = mycel_init\n"
    "[mycel_init]\n"
    "ssl_conf = mycel_ssl\n"
    "[mycel_ssl]\n"
    "system_default = mycel_tls\n"
    "[mycel_tls]\n"
    "NumTickets = 0\n";

}  // namespace

absl::StatusOr<bool> ConfiguresSsl(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return false;
  UniqueConf conf(NCONF_new(nullptr));
  long line = 0;
  if (conf == nullptr || NCONF_load(conf.get(), path.c_str(), &line) != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": line ", line, ": cannot parse: ", OpenSslError()));
  }
  const char* init = NCONF_get_string(conf.get(), nullptr, "openssl_conf");
  if (init == nullptr) {
    ERR_clear_error();  // an absent key is an error on the queue
    return false;
  }
  const bool ssl = NCONF_get_string(conf.get(), init, "ssl_conf") != nullptr;
  ERR_clear_error();
  return ssl;
}

absl::Status DisableSessionTickets() {
  if (OPENSSL_init_ssl(OPENSSL_INIT_LOAD_CONFIG, nullptr) != 1) {
    return absl::InternalError(
        absl::StrCat("OpenSSL: cannot initialise: ", OpenSslError()));
  }
  char* file = CONF_get1_default_config_file();
  const std::string path = file != nullptr ? file : "";
  OPENSSL_free(file);
  absl::StatusOr<bool> system = ConfiguresSsl(path);
  if (!system.ok()) return system.status();
  if (*system) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, " sets a TLS policy (ssl_conf); it is kept as it is"));
  }
  UniqueConf conf(NCONF_new(nullptr));
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(
      BIO_new_mem_buf(kConfig, sizeof(kConfig) - 1), BIO_free);
  long line = 0;
  if (conf == nullptr || bio == nullptr ||
      NCONF_load_bio(conf.get(), bio.get(), &line) != 1 ||
      CONF_modules_load(conf.get(), "mycel_openssl", 0) <= 0) {
    return absl::InternalError(absl::StrCat(
        "OpenSSL: cannot load mycel's TLS defaults: ", OpenSslError()));
  }
  return absl::OkStatus();
}

}  // namespace mycel::identity
