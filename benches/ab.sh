#!/usr/bin/env bash
# A/B comparison of two tiphys binaries, with the references of run.sh beside them, in
# alternating rounds so that drift of the shared machine hits both alike.
#
#   bash benches/ab.sh OLD_BINARY NEW_BINARY
#
# Per round and scenario: A, B and the reference, 5 s each (AB_DURATION) after 1 s of warm-up:
# unary gRPC over TLS h2 (reference: bare tonic), REST GET /api/version over TLS h2 and over
# HTTP/1.1 (reference: nginx, one worker). AB_ROUNDS=3 rounds. Prints each round's req/s and
# each binary's ratio to the reference; compare ratios, not absolute figures.
#
# Needs what run.sh needs; bare_tonic must be built (cargo build --release --example bare_tonic).
# Only loopback addresses are used; only processes this script started are stopped, by PID.
set -euo pipefail

[ $# -eq 2 ] || { echo "usage: bash benches/ab.sh OLD_BINARY NEW_BINARY" >&2; exit 2; }
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
a_bin="$1" b_bin="$2"
tonic_bin="$repo/target/x86_64-unknown-linux-gnu/release/examples/bare_tonic"
nginx_bin="$(command -v nginx || echo /usr/sbin/nginx)"
duration="${AB_DURATION:-5}"
rounds="${AB_ROUNDS:-3}"
host=127.0.0.1
for f in "$a_bin" "$b_bin" "$tonic_bin" "$nginx_bin"; do
  [ -x "$f" ] || { echo "ab.sh: not found or not executable: $f" >&2; exit 1; }
done

tmp="$(mktemp -d "${TMPDIR:-/tmp}/tiphys-ab.XXXXXX")"
chmod 755 "$tmp" # nginx workers may run as another user
pids=()
cleanup() {
  local pid
  for pid in ${pids[@]+"${pids[@]}"}; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in ${pids[@]+"${pids[@]}"}; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -sha256 -days 2 \
  -subj "/CN=localhost" -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" \
  -keyout "$tmp/key.pem" -out "$tmp/cert.pem" 2>/dev/null
chmod 644 "$tmp/key.pem" # throw-away, in a private temp dir; nginx's master reads it anyway
printf '\x00\x00\x00\x00\x00' >"$tmp/grpc-empty.bin"

a_port="$(free_port)" b_port="$(free_port)" tonic_port="$(free_port)" nginx_port="$(free_port)"
start_tiphys() { # BINARY PORT NAME
  "$1" server --address "$host" --port "$2" --metrics-address "$host" --metrics-port 0 \
    --tls-cert "$tmp/cert.pem" --tls-key "$tmp/key.pem" --data-dir "$tmp/$3" >"$tmp/$3.log" 2>&1 &
  pids+=($!)
}
start_tiphys "$a_bin" "$a_port" a
start_tiphys "$b_bin" "$b_port" b
"$tonic_bin" --addr "$host:$tonic_port" --cert "$tmp/cert.pem" --key "$tmp/key.pem" >"$tmp/tonic.log" 2>&1 &
pids+=($!)
cat >"$tmp/nginx.conf" <<EOF
worker_processes 1; daemon off; pid $tmp/nginx.pid; error_log $tmp/nginx-error.log warn;
events { worker_connections 1024; }
http {
  access_log off; keepalive_requests 100000000; keepalive_timeout 300s;
  client_body_temp_path $tmp/b; proxy_temp_path $tmp/p; fastcgi_temp_path $tmp/f; uwsgi_temp_path $tmp/u; scgi_temp_path $tmp/s;
  server {
    listen $host:$nginx_port ssl http2; ssl_certificate $tmp/cert.pem; ssl_certificate_key $tmp/key.pem;
    location = /api/version { default_type application/json; return 200 '{"Version":"v0.1.0"}'; }
  }
}
EOF
"$nginx_bin" -p "$tmp" -c "$tmp/nginx.conf" >"$tmp/nginx.log" 2>&1 &
pids+=($!)
for port in "$a_port" "$b_port" "$nginx_port"; do
  for _ in $(seq 1 100); do curl -sk -o /dev/null "https://$host:$port/api/version" && break; sleep 0.1; done
done
sleep 1

rate() { sed -n 's/^finished in .*, \([0-9.]*\) req\/s.*/\1/p' | head -1; }
load() { h2load -c 20 -t 1 -D "$duration" --warm-up-time 1 "$@" 2>/dev/null | rate; }
grpc() { load -m 10 -H 'content-type: application/grpc' -H 'te: trailers' -d "$tmp/grpc-empty.bin" "https://$host:$1/version.VersionService/Version"; }
rest_h2() { load -m 10 "https://$host:$1/api/version"; }
rest_h1() { load --h1 "https://$host:$1/api/version"; }
row() { # NAME REFERENCE A B REF
  awk -v n="$1" -v r="$2" -v a="$3" -v b="$4" -v c="$5" \
    'BEGIN { printf "%-8s A %7.0f  B %7.0f  %-10s %7.0f  A/ref %.3f  B/ref %.3f\n", n, a, b, r, c, a / c, b / c }'
}
for round in $(seq 1 "$rounds"); do
  echo "round $round"
  row grpc "bare tonic" "$(grpc "$a_port")" "$(grpc "$b_port")" "$(grpc "$tonic_port")"
  row rest-h2 nginx "$(rest_h2 "$a_port")" "$(rest_h2 "$b_port")" "$(rest_h2 "$nginx_port")"
  row rest-h1 nginx "$(rest_h1 "$a_port")" "$(rest_h1 "$b_port")" "$(rest_h1 "$nginx_port")"
done
