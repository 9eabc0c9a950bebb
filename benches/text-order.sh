#!/usr/bin/env bash
# Regenerates benches/text-order.txt: the functions a server runs while it starts and serves the
# common requests, which build.rs asks the linker to place side by side.
#
#   bash benches/text-order.sh
#
# Why: the kernel maps a binary's code into a process in whole blocks (64 KiB of fault-around,
# or a whole large folio), so code that runs is paid for with its neighbours. Left to the
# linker's default order, the ~3.5 MB a server runs lie scattered over the 14 MB text and nearly
# all of it ended up resident (idle RSS 18.7 MB). Side by side, about 6 MB is (12.3 MB).
#
# How: the release binary runs under valgrind's callgrind, which records every function that
# executes, while this script starts it in TLS mode and sends it health checks, REST over
# HTTP/1.1 and HTTP/2, a plaintext redirect, native gRPC, gRPC-Web (binary and text), the UI, a
# failed and a good login, authenticated lists and a metrics scrape. The names found in the
# binary's symbol table are written sorted, which also keeps each crate's functions together.
#
# The file lists mangled names, so it belongs to one compiler, one Cargo.lock and one set of
# dependency features. Build the binary alone (`cargo build --release --bin tiphys`, as here, in
# CI and for users): in a build that includes examples or tests, cargo turns on the
# dev-dependencies' features, and every name's hash changes. A name that no longer exists is
# ignored by the linker; `benches/run.sh` prints how many still match. Rerun this after a
# toolchain update, a dependency update, or any change to the code that runs: fat LTO gives the
# local copies of a function that several crates instantiate `.N` suffixes numbered across the
# whole program, so even a small change renumbers some (a builder added to the gRPC service
# table left 125 of 3,104 names unmatched, and idle RSS rose from 9.8 to 12.7 MB).
#
# Environment: BENCH_SKIP_BUILD=1 uses the release binary as built under $CARGO_TARGET_DIR (or
# target/); TIPHYS_BIN=PATH profiles that binary instead (with BENCH_SKIP_BUILD=1).
# Needs: cargo, valgrind, openssl, curl, h2load (nghttp2-client), python3, nm (binutils).
# Only loopback addresses are used; only the process this script started is stopped, by PID.
# The servers a benchmark starts stop at once (no --shutdown-delay drain).
export TIPHYS_SHUTDOWN_DELAY=0
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
cd "$repo"
out="$repo/benches/text-order.txt"
bin="${TIPHYS_BIN:-${CARGO_TARGET_DIR:-$repo/target}/x86_64-unknown-linux-gnu/release/tiphys}"
host=127.0.0.1

say() { printf '== %s\n' "$*" >&2; }
die() { printf 'text-order.sh: %s\n' "$*" >&2; exit 1; }
for tool in valgrind openssl curl h2load python3 nm; do
  command -v "$tool" >/dev/null || die "$tool not found (Debian: apt-get install valgrind openssl curl nghttp2-client python3 binutils)"
done

if [ "${BENCH_SKIP_BUILD:-0}" != 1 ]; then
  say "building the release binary"
  cargo build --release --bin tiphys
fi
[ -x "$bin" ] || die "no release binary at $bin"

tmp="$(mktemp -d "${TMPDIR:-/tmp}/tiphys-order.XXXXXX")"
server_pid=""
cleanup() {
  if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
    kill -TERM "$server_pid" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -sha256 -days 2 \
  -subj "/CN=localhost" -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" \
  -keyout "$tmp/key.pem" -out "$tmp/cert.pem" 2>/dev/null
printf '\x00\x00\x00\x00\x00' >"$tmp/grpc-empty.bin"

say "starting the server under callgrind"
valgrind --tool=callgrind --demangle=no --callgrind-out-file="$tmp/callgrind.out" \
  "$bin" server --address "$host" --port 0 --metrics-address "$host" --metrics-port 0 \
  --tls-cert "$tmp/cert.pem" --tls-key "$tmp/key.pem" --data-dir "$tmp/data" \
  --ready-file "$tmp/ready.json" >"$tmp/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 1 300); do [ -s "$tmp/ready.json" ] && break; sleep 0.2; done
[ -s "$tmp/ready.json" ] || { cat "$tmp/server.log" >&2; die "the server did not become ready"; }
read -r port metrics_port < <(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(r["port"], r["metrics_port"])' "$tmp/ready.json")
base="https://$host:$port"

say "sending the common requests to port $port"
c() { curl -sk -o /dev/null --max-time 30 "$@"; }
c "$base/healthz"
c --http1.1 "$base/api/version"
c --http2 "$base/api/v1/settings"
c "http://$host:$port/applications?x=1" # plaintext: the redirect
c -H 'accept: text/html' "$base/"
c -H 'accept: text/html' "$base/applications/argocd/guestbook"
asset="$(curl -sk --max-time 30 -H 'accept: text/html' "$base/" | sed -n 's/.*src="\([^"]*\.js\)".*/\1/p' | head -1)"
[ -z "$asset" ] || c "$base/${asset#/}"
h2=(h2load -n 200 -c 4 -m 4 -t 1)
"${h2[@]}" "$base/api/version" >/dev/null
h2load --h1 -n 200 -c 4 -t 1 "$base/api/version" >/dev/null
"${h2[@]}" -H 'content-type: application/grpc' -H 'te: trailers' -d "$tmp/grpc-empty.bin" \
  "$base/version.VersionService/Version" >/dev/null
"${h2[@]}" -H 'content-type: application/grpc-web+proto' -d "$tmp/grpc-empty.bin" \
  "$base/version.VersionService/Version" >/dev/null
h2load --h1 -n 50 -c 2 -t 1 -H 'content-type: application/grpc-web-text' -d "$tmp/grpc-empty.bin" \
  "$base/version.VersionService/Version" >/dev/null
c -X POST -H 'content-type: application/json' -d '{"username":"nobody","password":"wrong-password"}' \
  "$base/api/v1/session"
password="$(cat "$tmp/data/initial-admin-password")"
token="$(curl -sk --max-time 30 -X POST -H 'content-type: application/json' \
  -d "{\"username\":\"admin\",\"password\":\"$password\"}" "$base/api/v1/session" |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])')"
for path in session/userinfo applications projects clusters repositories account; do
  c -H "authorization: Bearer $token" "$base/api/v1/$path"
done
c "http://$host:$metrics_port/metrics"

say "stopping the server"
kill -INT "$server_pid"
for _ in $(seq 1 300); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.1; done
wait "$server_pid" 2>/dev/null || true
server_pid=""
[ -s "$tmp/callgrind.out" ] || die "callgrind wrote no profile"

python3 - "$tmp/callgrind.out" "$bin" "$out" <<'EOF'
import re, subprocess, sys

profile, binary, out = sys.argv[1:]
ran = set()
for line in open(profile, encoding="utf-8", errors="replace"):
    # "fn=(id) name" names a function the first time it appears; "'N" marks recursion depth.
    m = re.match(r"^c?fn=\(\d+\) (.+)$", line.rstrip("\n"))
    if m:
        ran.add(re.sub(r"'\d+$", "", m.group(1)))
symbols = {}
for line in subprocess.run(["nm", "-S", binary], capture_output=True, text=True, check=True).stdout.splitlines():
    parts = line.split()
    if len(parts) == 4 and parts[2] in "tTwW":
        symbols[parts[3]] = int(parts[1], 16)
names = sorted(n for n in ran if n in symbols)
text = sum(symbols.values())
with open(out, "w", encoding="utf-8") as f:
    f.write("\n".join(names) + "\n")
print(f"{len(names)} functions, {sum(symbols[n] for n in names) / 1e6:.2f} MB of {text / 1e6:.2f} MB of code -> {out}")
EOF
