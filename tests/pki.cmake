# Tests for mesh/pki (unit: no privileges, no network; the interop cases run
# the openssl tool and an in-memory TLS handshake).
mycel_test(pki_test
  SRCS
    unit/mesh/pki_keys_test.cc
    unit/mesh/pki_ca_test.cc
    unit/mesh/pki_verify_test.cc
    unit/mesh/pki_token_test.cc
    unit/mesh/pki_interop_test.cc
  DEPS mycel_pki mycel_testing)
