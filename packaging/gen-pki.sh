#!/usr/bin/env bash
# gen-pki.sh OUTDIR [SAN ...]
#
# Writes a throwaway mesh PKI for one node or image into OUTDIR, in the form
# `mycel mesh init` makes (mesh/pki/README.md), for myceld's --tls-* flags:
#   ca.crt ca.key          a mesh CA (ECDSA P-256, 10 years) for the mesh
#                          $MYCEL_MESH (default "local"): URI SAN
#                          spiffe://MESH, URI name constraint MESH
#   server.crt server.key  myceld's node certificate: spiffe://MESH/node/NODE
#                          ($MYCEL_NODE, default "myceld"), O=mycel:node,
#                          plus the SANs given (default: DNS:localhost,
#                          IP:127.0.0.1) for clients that check host names
#   client.crt client.key  an admin user: spiffe://MESH/user/admin,
#                          O=mycel:admin
# Existing files are kept, so running it again is harmless; a CA of the
# older, non-mesh form is replaced with everything it signed. Keys are 0600.
set -euo pipefail

out=${1:?usage: gen-pki.sh OUTDIR [SAN ...]}
shift
mesh=${MYCEL_MESH:-local}
node=${MYCEL_NODE:-myceld}
sans=("$@")
[ ${#sans[@]} -gt 0 ] || sans=("DNS:localhost" "IP:127.0.0.1")
san_list=$(IFS=,; echo "${sans[*]}")

mkdir -p "$out"
cd "$out"
umask 077

if [ -f ca.crt ] && ! openssl x509 -in ca.crt -noout -ext subjectAltName 2>/dev/null |
    grep -q "URI:spiffe://"; then
  echo "gen-pki.sh: $out/ca.crt is not a mesh CA; making a new PKI" >&2
  rm -f ca.crt ca.key ca.srl server.crt server.key client.crt client.key
fi

if [ ! -f ca.key ]; then
  openssl ecparam -name prime256v1 -genkey -noout -out ca.key.sec1
  openssl pkcs8 -topk8 -nocrypt -in ca.key.sec1 -out ca.key
  rm -f ca.key.sec1
  openssl req -x509 -new -key ca.key -sha256 -days 3650 \
    -subj "/O=mycel/CN=mycel mesh $mesh" \
    -addext "basicConstraints=critical,CA:TRUE,pathlen:0" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -addext "subjectAltName=URI:spiffe://$mesh" \
    -addext "nameConstraints=critical,permitted;URI:$mesh" -out ca.crt 2>/dev/null
fi

issue() {  # issue FILE KIND NAME ROLE EXTKEYUSAGE [EXTRA-SANS]
  local file=$1 kind=$2 name=$3 role=$4 eku=$5 extra=${6:-}
  [ -f "$file.crt" ] && return 0
  openssl ecparam -name prime256v1 -genkey -noout -out "$file.key.sec1"
  openssl pkcs8 -topk8 -nocrypt -in "$file.key.sec1" -out "$file.key"
  rm -f "$file.key.sec1"
  openssl req -new -key "$file.key" -subj "/O=mycel:$role/CN=$name" \
    -out "$file.csr" 2>/dev/null
  {
    echo "basicConstraints=critical,CA:FALSE"
    echo "keyUsage=critical,digitalSignature"
    echo "extendedKeyUsage=$eku"
    echo "subjectKeyIdentifier=hash"
    echo "authorityKeyIdentifier=keyid"
    echo "subjectAltName=URI:spiffe://$mesh/$kind/$name${extra:+,$extra}"
  } > "$file.ext"
  openssl x509 -req -in "$file.csr" -CA ca.crt -CAkey ca.key -CAcreateserial \
    -days 825 -sha256 -extfile "$file.ext" -out "$file.crt" 2>/dev/null
  rm -f "$file.csr" "$file.ext"
}

issue server node "$node" node serverAuth,clientAuth "$san_list"
issue client user admin admin clientAuth
chmod 0644 ca.crt server.crt client.crt
