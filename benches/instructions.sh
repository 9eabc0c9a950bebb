#!/usr/bin/env bash
# Instructions per request of one tiphys binary, counted by callgrind: steadier than timing on a
# shared machine, and a profile to read (`callgrind_annotate --inclusive=yes --tree=calling`).
#
#   bash benches/instructions.sh BINARY grpc|rest|token|anonymous [REQUESTS]
#
# grpc: unary VersionService/Version over TLS h2; rest: GET /api/version over TLS h2; token: GET
# /api/v1/session/userinfo with the admin's bearer token, and anonymous: the same request with the
# token's bytes in a header the server ignores (token - anonymous is what verifying costs). The counters
# are zeroed once the server answers, so start-up is not counted; the profile is kept in
# $OUT_DIR (default: a temporary directory, printed). Needs valgrind, h2load, curl, openssl.
# Only loopback addresses are used; only the process this script started is stopped, by PID.
# The servers a benchmark starts stop at once (no --shutdown-delay drain).
export TIPHYS_SHUTDOWN_DELAY=0
set -euo pipefail

[ $# -ge 2 ] || { echo "usage: bash benches/instructions.sh BINARY grpc|rest|token|anonymous [REQUESTS]" >&2; exit 2; }
bin="$1" mode="$2" n="${3:-20000}"
case "$mode" in grpc | rest | token | anonymous) ;; *) echo "mode must be grpc, rest, token or anonymous" >&2; exit 2 ;; esac
for tool in valgrind callgrind_control callgrind_annotate h2load curl openssl; do
  command -v "$tool" >/dev/null || { echo "instructions.sh: needs $tool" >&2; exit 1; }
done
out="${OUT_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/tiphys-instr.XXXXXX")}"
mkdir -p "$out/data"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=localhost \
  -keyout "$out/key.pem" -out "$out/cert.pem" 2>/dev/null
port=$((20000 + RANDOM % 20000))
valgrind --tool=callgrind --callgrind-out-file="$out/callgrind.out" \
  "$bin" server --address 127.0.0.1 --port "$port" --metrics-port 0 --metrics-address 127.0.0.1 \
  --tls-cert "$out/cert.pem" --tls-key "$out/key.pem" --data-dir "$out/data" >"$out/server.log" 2>&1 &
pid=$!
trap 'kill -TERM "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true' EXIT
for _ in $(seq 1 120); do
  curl -sfk "https://127.0.0.1:$port/api/version" >/dev/null && break
  sleep 1
done
# A first start generates the admin password (a bcrypt hash, on another thread): let it finish.
for _ in $(seq 1 60); do
  grep -q 'initial password' "$out/server.log" && break
  sleep 1
done
sleep 1
token=""
if [ "$mode" = token ] || [ "$mode" = anonymous ]; then
  password="$(cat "$out/data/initial-admin-password")"
  token="$(curl -sfk -H 'content-type: application/json' \
    -d "{\"username\":\"admin\",\"password\":\"$password\"}" "https://127.0.0.1:$port/api/v1/session" |
    sed -n 's/.*"token":"\([^"]*\)".*/\1/p')"
  [ -n "$token" ] || { echo "instructions.sh: login failed" >&2; exit 1; }
fi
callgrind_control --zero "$pid" >/dev/null 2>&1
case "$mode" in
  grpc)
    printf '\0\0\0\0\0' >"$out/empty.bin"
    h2load -n "$n" -c 4 -m 10 -d "$out/empty.bin" -H 'content-type: application/grpc' -H 'te: trailers' \
      "https://127.0.0.1:$port/version.VersionService/Version" | grep -E '^requests:' ;;
  rest) h2load -n "$n" -c 4 -m 10 "https://127.0.0.1:$port/api/version" | grep -E '^requests:' ;;
  token) h2load -n "$n" -c 4 -m 10 -H "authorization: Bearer $token" \
      "https://127.0.0.1:$port/api/v1/session/userinfo" | grep -E '^requests:' ;;
  anonymous) h2load -n "$n" -c 4 -m 10 -H "x-ignored: Bearer $token" \
      "https://127.0.0.1:$port/api/v1/session/userinfo" | grep -E '^requests:' ;;
esac
callgrind_control --dump=load "$pid" >/dev/null 2>&1
sleep 2
profile=$(ls -t "$out"/callgrind.out.* | head -1)
total=$(callgrind_annotate "$profile" 2>/dev/null | sed -n 's/^ *\([0-9,]*\) .*PROGRAM TOTALS.*/\1/p' | tr -d ,)
echo "instructions per request: $((total / n)) ($mode, $n requests; profile: $profile)"
