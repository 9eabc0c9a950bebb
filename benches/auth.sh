#!/usr/bin/env bash
# Costs of authentication, measured side by side in one run on loopback:
#  1. token verification per request: GET /api/v1/session/userinfo over h2c with a valid bearer token
#     against the same request carrying the same bytes in a header the server ignores (so that both
#     pay the same header transport and HPACK cost; h2load never indexes `authorization`);
#  2. p99 of GET /api/version at a fixed rate while 200 clients log in concurrently, against the same
#     without logins (benches/login_load.rs).
#
#   bash benches/auth.sh
#
# Environment: AUTH_REQUESTS=200000 (h2load requests per scenario), AUTH_SECONDS=8 (per login_load
# phase), AUTH_RATE=2000 (version requests/s), AUTH_ROUNDS=3 (quiet/loaded pairs per login_load
# run), AUTH_RUNS=3, BENCH_SKIP_BUILD=1.
# Needs h2load (nghttp2-client). Only processes started here are stopped, by PID.
# The servers a benchmark starts stop at once (no --shutdown-delay drain).
export TIPHYS_SHUTDOWN_DELAY=0
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
cd "$repo"
requests="${AUTH_REQUESTS:-200000}"
seconds="${AUTH_SECONDS:-8}"
rate="${AUTH_RATE:-2000}"
runs="${AUTH_RUNS:-3}"
command -v h2load >/dev/null || { echo "auth.sh: h2load not found (apt-get install nghttp2-client)" >&2; exit 1; }

if [ "${BENCH_SKIP_BUILD:-0}" != 1 ]; then
  # Separately: see run.sh on examples and benches/text-order.txt.
  cargo build --release --bin tiphys >&2
  cargo build --release --example login_load >&2
fi
target="${CARGO_TARGET_DIR:-$repo/target}/$(rustc -vV | sed -n 's/^host: //p')/release"
bin="$target/tiphys"
load="$target/examples/login_load"

tmp="$(mktemp -d "${TMPDIR:-/tmp}/tiphys-auth.XXXXXX")"
pid=""
cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT

"$bin" server --insecure --address 127.0.0.1 --port 0 --metrics-address 127.0.0.1 --metrics-port 0 \
  --data-dir "$tmp/data" --ready-file "$tmp/ready" 2>"$tmp/log" &
pid=$!
for _ in $(seq 100); do [ -s "$tmp/ready" ] && break; sleep 0.1; done
port="$(sed -n 's/.*"port":\([0-9]*\).*/\1/p' "$tmp/ready")"
password="$(cat "$tmp/data/initial-admin-password")"
token="$(curl -sf -H 'content-type: application/json' \
  -d "{\"username\":\"admin\",\"password\":\"$password\"}" "http://127.0.0.1:$port/api/v1/session" |
  sed -n 's/.*"token":"\([^"]*\)".*/\1/p')"
[ -n "$token" ] || { echo "auth.sh: login failed" >&2; exit 1; }

rps() { h2load -n "$requests" -c 10 -m 10 "$@" | sed -n 's/^finished in .*, \([0-9.]*\) req\/s.*/\1/p'; }
url="http://127.0.0.1:$port/api/v1/session/userinfo"
echo "== token verification (h2c, $requests requests, 10 connections x 10 streams)"
for run in $(seq "$runs"); do
  anon="$(rps -H "x-ignored: Bearer $token" "$url")"
  auth="$(rps -H "authorization: Bearer $token" "$url")"
  awk -v a="$anon" -v t="$auth" -v r="$run" 'BEGIN {
    printf "run %d: ignored header %.0f req/s, bearer token %.0f req/s, ratio %.3f, extra cost %.2f us/request\n",
      r, a, t, t / a, (1e6 / t - 1e6 / a) }'
done

echo "== GET /api/version p99 at $rate req/s, quiet vs 200 concurrent logins"
for run in $(seq "$runs"); do
  echo "run $run:"
  "$load" "127.0.0.1:$port" "$password" "$seconds" 200 "$rate" "${AUTH_ROUNDS:-3}"
done
