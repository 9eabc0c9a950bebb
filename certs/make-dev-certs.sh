#!/usr/bin/env bash
# Make a local development CA and a server certificate signed by it, with openssl.
#
#   certs/make-dev-certs.sh [-o DIR] [--rsa] [--days N] [NAME_OR_IP ...]
#
#   -o, --out DIR   where to write the files (default: ./dev-certs; never certs/ itself)
#   --rsa           RSA 2048 keys instead of ECDSA P-256
#   --days N        validity of the server certificate in days (default 397; the CA gets 3650)
#   NAME_OR_IP      extra subjectAltNames besides localhost, 127.0.0.1 and ::1
#                   (IPv4/IPv6 literals become IP SANs, anything else a DNS SAN; *.example.test works)
#
# Files written to DIR:
#   ca.crt      the CA certificate: give it to clients (tiphys --server-crt, curl --cacert, browsers)
#   ca.key      the CA private key (mode 600). Kept so that re-running the script re-uses the CA
#               and clients do not need to trust a new one. Delete the directory to start over.
#   server.crt  the server certificate (leaf only; tiphys server --tls-cert)
#   server.key  its private key (mode 600; tiphys server --tls-key)
#
# Private keys must never be committed: certs/.gitignore ignores *.key and dev-certs/.
set -euo pipefail

out="./dev-certs"
keytype="ec"
days=397
names=()
while [ $# -gt 0 ]; do
  case "$1" in
    -o|--out) [ $# -ge 2 ] || { echo "make-dev-certs: $1 needs a directory" >&2; exit 2; }; out="$2"; shift 2 ;;
    --out=*) out="${1#--out=}"; shift ;;
    --rsa) keytype="rsa"; shift ;;
    --days) [ $# -ge 2 ] || { echo "make-dev-certs: --days needs a number" >&2; exit 2; }; days="$2"; shift 2 ;;
    -h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    --) shift; names+=("$@"); break ;;
    -*) echo "make-dev-certs: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) names+=("$1"); shift ;;
  esac
done
case "$days" in ''|*[!0-9]*) echo "make-dev-certs: --days must be a positive number" >&2; exit 2 ;; esac
[ "$days" -gt 0 ] || { echo "make-dev-certs: --days must be a positive number" >&2; exit 2; }
command -v openssl >/dev/null || { echo "make-dev-certs: openssl not found (apt-get install openssl)" >&2; exit 1; }

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
mkdir -p "$out"
outabs="$(cd "$out" && pwd -P)"
if [ "$outabs" = "$here" ]; then
  echo "make-dev-certs: refusing to write keys into $here (the repository's certs/ folder); use -o DIR" >&2
  exit 2
fi

umask 077
newkey() { # newkey FILE
  if [ "$keytype" = rsa ]; then
    openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$1" 2>/dev/null
  else
    openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null
  fi
  chmod 600 "$1"
}

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# 1. The CA (re-used when both files are already there).
if [ -s "$outabs/ca.crt" ] && [ -s "$outabs/ca.key" ]; then
  echo "make-dev-certs: re-using the CA in $outabs (delete ca.crt and ca.key for a new one)"
else
  newkey "$outabs/ca.key"
  cat > "$tmp/ca.cnf" <<CNF
[req]
distinguished_name = dn
prompt = no
x509_extensions = v3_ca
[dn]
CN = tiphys dev CA $(hostname 2>/dev/null || echo local) $(date -u +%Y%m%d%H%M%S)
O = tiphys development
[v3_ca]
basicConstraints = critical, CA:TRUE, pathlen:0
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
CNF
  openssl req -new -x509 -config "$tmp/ca.cnf" -key "$outabs/ca.key" -sha256 -days 3650 -out "$outabs/ca.crt"
  chmod 644 "$outabs/ca.crt"
fi

# 2. The server certificate.
is_ip() { # IPv4 dotted quad or anything with a colon (IPv6)
  [[ "$1" =~ ^[0-9]{1,3}(\.[0-9]{1,3}){3}$ ]] || [[ "$1" == *:* ]]
}
sans="DNS:localhost, IP:127.0.0.1, IP:::1"
for n in ${names[@]+"${names[@]}"}; do
  n="${n#[}"; n="${n%]}"
  [ -n "$n" ] || continue
  case "$n" in localhost|127.0.0.1|::1) continue ;; esac
  if is_ip "$n"; then sans="$sans, IP:$n"; else sans="$sans, DNS:$n"; fi
done
usage="digitalSignature"
[ "$keytype" = rsa ] && usage="digitalSignature, keyEncipherment"
cat > "$tmp/server.cnf" <<CNF
[req]
distinguished_name = dn
prompt = no
[dn]
CN = localhost
O = tiphys development
[v3_server]
basicConstraints = critical, CA:FALSE
keyUsage = critical, $usage
extendedKeyUsage = serverAuth
subjectAltName = $sans
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
CNF
newkey "$outabs/server.key"
openssl req -new -config "$tmp/server.cnf" -key "$outabs/server.key" -out "$tmp/server.csr"
openssl x509 -req -in "$tmp/server.csr" -CA "$outabs/ca.crt" -CAkey "$outabs/ca.key" \
  -set_serial "0x$(openssl rand -hex 16)" -sha256 -days "$days" \
  -extfile "$tmp/server.cnf" -extensions v3_server -out "$outabs/server.crt" 2>/dev/null
chmod 644 "$outabs/server.crt"
openssl verify -CAfile "$outabs/ca.crt" "$outabs/server.crt" >/dev/null

echo "make-dev-certs: wrote $outabs/{ca.crt,ca.key,server.crt,server.key}"
echo "  SANs: $sans"
echo "  server: tiphys server --tls-cert $outabs/server.crt --tls-key $outabs/server.key"
echo "  client: tiphys version --server localhost:8080 --server-crt $outabs/ca.crt"
