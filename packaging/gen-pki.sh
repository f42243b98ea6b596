#!/usr/bin/env bash
# gen-pki.sh OUTDIR [SAN ...]
#
# Writes a throwaway PKI for one node or image into OUTDIR:
#   ca.crt ca.key          a self-signed CA (ECDSA P-256, 10 years)
#   server.crt server.key  myceld's TLS certificate, for the SANs given
#                          (default: DNS:localhost, IP:127.0.0.1)
#   client.crt client.key  an admin client certificate (CN=admin)
# Existing files are kept, so running it again is harmless. Keys are 0600.
set -euo pipefail

out=${1:?usage: gen-pki.sh OUTDIR [SAN ...]}
shift
sans=("$@")
[ ${#sans[@]} -gt 0 ] || sans=("DNS:localhost" "IP:127.0.0.1")
san_list=$(IFS=,; echo "${sans[*]}")

mkdir -p "$out"
cd "$out"
umask 077

if [ ! -f ca.key ]; then
  openssl ecparam -name prime256v1 -genkey -noout -out ca.key
  openssl req -x509 -new -key ca.key -sha256 -days 3650 -subj "/CN=mycel throwaway CA" \
    -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" -out ca.crt 2>/dev/null
fi

issue() {  # issue NAME CN EXTKEYUSAGE [SAN]
  local name=$1 cn=$2 eku=$3 san=${4:-}
  [ -f "$name.crt" ] && return 0
  openssl ecparam -name prime256v1 -genkey -noout -out "$name.key"
  openssl req -new -key "$name.key" -subj "/CN=$cn" -out "$name.csr" 2>/dev/null
  {
    echo "basicConstraints=critical,CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    echo "extendedKeyUsage=$eku"
    [ -n "$san" ] && echo "subjectAltName=$san"
  } > "$name.ext"
  openssl x509 -req -in "$name.csr" -CA ca.crt -CAkey ca.key -CAcreateserial \
    -days 825 -sha256 -extfile "$name.ext" -out "$name.crt" 2>/dev/null
  rm -f "$name.csr" "$name.ext"
}

issue server "myceld" serverAuth "$san_list"
issue client "admin" clientAuth
chmod 0644 ca.crt server.crt client.crt
