#!/usr/bin/env bash
# A/B comparison of two tiphys binaries, with the references of run.sh beside them, in
# alternating rounds so that drift of the shared machine hits both alike.
#
#   bash benches/ab.sh OLD_BINARY NEW_BINARY
#
# Per round and scenario: A, B and the reference, 5 s each (AB_DURATION) after 1 s of warm-up:
# unary gRPC over TLS h2 (reference: bare tonic), REST GET /api/version over TLS h2 and over
# HTTP/1.1 (reference: nginx, one worker); AB_SCENARIOS="grpc rest-h2 rest-h1" picks. AB_ROUNDS=3 rounds. Prints each round's req/s, each
# binary's ratio to the reference, and each server's CPU time per request (µs, all its threads;
# steadier than req/s on a shared machine); compare ratios, not absolute figures.
#
# Needs what run.sh needs; bare_tonic must be built (cargo build --release --example bare_tonic;
# it is looked for under $CARGO_TARGET_DIR or target/, or TONIC_BIN=PATH).
# Only loopback addresses are used; only processes this script started are stopped, by PID.
# The servers a benchmark starts stop at once (no --shutdown-delay drain).
export TIPHYS_SHUTDOWN_DELAY=0
set -euo pipefail

[ $# -eq 2 ] || { echo "usage: bash benches/ab.sh OLD_BINARY NEW_BINARY" >&2; exit 2; }
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
a_bin="$1" b_bin="$2"
tonic_bin="${TONIC_BIN:-${CARGO_TARGET_DIR:-$repo/target}/x86_64-unknown-linux-gnu/release/examples/bare_tonic}"
nginx_bin="$(command -v nginx || echo /usr/sbin/nginx)"
duration="${AB_DURATION:-5}"
rounds="${AB_ROUNDS:-3}"
scenarios="${AB_SCENARIOS:-grpc rest-h2 rest-h1}"
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
declare -A pid_of=() # server -> PID, for its CPU time
start_tiphys() { # BINARY PORT NAME
  "$1" server --address "$host" --port "$2" --metrics-address "$host" --metrics-port 0 \
    --tls-cert "$tmp/cert.pem" --tls-key "$tmp/key.pem" --data-dir "$tmp/$3" >"$tmp/$3.log" 2>&1 &
  pids+=($!)
  pid_of[$3]=$!
}
start_tiphys "$a_bin" "$a_port" a
start_tiphys "$b_bin" "$b_port" b
"$tonic_bin" --addr "$host:$tonic_port" --cert "$tmp/cert.pem" --key "$tmp/key.pem" >"$tmp/tonic.log" 2>&1 &
pids+=($!)
pid_of[tonic]=$!
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
pid_of[nginx]=$!
for port in "$a_port" "$b_port" "$nginx_port"; do
  for _ in $(seq 1 100); do curl -sk -o /dev/null "https://$host:$port/api/version" && break; sleep 0.1; done
done
sleep 1

# shellcheck source=benches/lib.sh
. "$repo/benches/lib.sh"
# load SERVER PORT PATH [h2load args]: prints "REQ/S CPU" (µs of the server's CPU per request,
# over the measured window after the 1 s warm-up).
load() {
  local server="$1" port="$2" path="$3" t0 t1 pid
  shift 3
  h2load -c 20 -t 1 -D "$duration" --warm-up-time 1 "$@" "https://$host:$port$path" >"$tmp/load.log" 2>&1 &
  pid=$!
  sleep 1
  t0="$(cpu_ticks "${pid_of[$server]}")"
  wait "$pid" || true
  t1="$(cpu_ticks "${pid_of[$server]}")"
  echo "$(h2load_rps "$tmp/load.log") $(cpu_us_per_request $((t1 - t0)) "$(h2load_succeeded "$tmp/load.log")")"
}
grpc() { load "$1" "$2" /version.VersionService/Version -m 10 -H 'content-type: application/grpc' -H 'te: trailers' -d "$tmp/grpc-empty.bin"; }
rest_h2() { load "$1" "$2" /api/version -m 10; }
rest_h1() { load "$1" "$2" /api/version --h1; }
row() { # NAME REFERENCE "A_RPS A_CPU" "B_RPS B_CPU" "REF_RPS REF_CPU"
  awk -v n="$1" -v r="$2" -v a="$3" -v b="$4" -v c="$5" 'BEGIN {
    split(a, x, " "); split(b, y, " "); split(c, z, " ")
    printf "%-8s A %7.0f  B %7.0f  %-10s %7.0f  A/ref %.3f  B/ref %.3f | CPU us/req A %5.2f  B %5.2f  ref %5.2f  B/A %.3f\n",
      n, x[1], y[1], r, z[1], x[1] / z[1], y[1] / z[1], x[2], y[2], z[2], (x[2] > 0) ? y[2] / x[2] : 0 }'
}
# measure FN REF REF_PORT: A, B (their order alternates by round), then the reference.
measure() {
  if ((round % 2)); then
    res_a="$("$1" a "$a_port")" res_b="$("$1" b "$b_port")"
  else
    res_b="$("$1" b "$b_port")" res_a="$("$1" a "$a_port")"
  fi
  res_ref="$("$1" "$2" "$3")"
}
for round in $(seq 1 "$rounds"); do
  echo "round $round"
  for scenario in $scenarios; do
    case "$scenario" in
      grpc) measure grpc tonic "$tonic_port" && row grpc "bare tonic" "$res_a" "$res_b" "$res_ref" ;;
      rest-h2) measure rest_h2 nginx "$nginx_port" && row rest-h2 nginx "$res_a" "$res_b" "$res_ref" ;;
      rest-h1) measure rest_h1 nginx "$nginx_port" && row rest-h1 nginx "$res_a" "$res_b" "$res_ref" ;;
      *) echo "ab.sh: unknown scenario $scenario (grpc, rest-h2, rest-h1)" >&2; exit 2 ;;
    esac
  done
done
