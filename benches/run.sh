#!/usr/bin/env bash
# Side-by-side benchmark of tiphys against a bare tonic server, the Go peer (argocd-server's
# connection layer) and nginx, all on loopback with the same ECDSA P-256 certificate.
#
#   bash benches/run.sh
#
# Environment (all optional):
#   BENCH_ROUNDS=5       rounds; each measures every scenario on every server once (order rotated)
#   BENCH_DURATION=4     seconds measured per scenario and server (h2load -D), after BENCH_WARMUP=1 s
#   BENCH_REQUESTS=N     use a fixed request count (h2load -n N) instead of a duration
#   BENCH_CLIENTS=20     connections; BENCH_STREAMS=10 concurrent streams per connection (h2)
#   BENCH_THREADS=1      h2load threads
#   BENCH_PIN=1          pin every server to CPU 0 and h2load to CPU 1 (taskset); default: unpinned
#   BENCH_STARTS=5       start-up measurements (median reported)
#   BENCH_SKIP_BUILD=1   use the binaries already built under $CARGO_TARGET_DIR or target/
#                        (TIPHYS_BIN=PATH, TONIC_BIN=PATH: those binaries)
#   BENCH_KEEP=1         keep the temporary directory (logs, certificate, nginx.conf)
#   PEER_GO_DIR          the Go peer's sources (default ../shared/peers/peer-go); skipped if missing
#   PEER_GO_OUT          where build.sh puts peer-go (default ~/.cache/peer-go)
#
# Needs: cargo, openssl, curl, h2load (nghttp2-client), nginx (optional: skipped if missing).
# Only loopback addresses are used; only processes this script started are stopped, by PID.
# The servers a benchmark starts stop at once (no --shutdown-delay drain).
export TIPHYS_SHUTDOWN_DELAY=0
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
cd "$repo"

duration="${BENCH_DURATION:-4}"
warmup="${BENCH_WARMUP:-1}"
rounds="${BENCH_ROUNDS:-5}"
requests="${BENCH_REQUESTS:-}"
clients="${BENCH_CLIENTS:-20}"
streams="${BENCH_STREAMS:-10}"
threads="${BENCH_THREADS:-1}"
starts="${BENCH_STARTS:-5}"
peer_dir="${PEER_GO_DIR:-$repo/../shared/peers/peer-go}"
peer_out="${PEER_GO_OUT:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/peer-go}"
host=127.0.0.1

say() { printf '== %s\n' "$*" >&2; }
die() { printf 'run.sh: %s\n' "$*" >&2; exit 1; }

for tool in openssl curl h2load ss; do
  command -v "$tool" >/dev/null || die "$tool not found (Debian: apt-get install openssl curl nghttp2-client iproute2)"
done

srv_pin=() gen_pin=()
if [ "${BENCH_PIN:-0}" = 1 ]; then
  command -v taskset >/dev/null || die "BENCH_PIN=1 needs taskset (util-linux)"
  srv_pin=(taskset -c 0) gen_pin=(taskset -c 1)
fi

tmp="$(mktemp -d "${TMPDIR:-/tmp}/tiphys-bench.XXXXXX")"
chmod 755 "$tmp" # nginx workers may run as another user
pids=()
cleanup() {
  local pid
  for pid in ${pids[@]+"${pids[@]}"}; do stop_pid "$pid"; done
  if [ "${BENCH_KEEP:-0}" = 1 ]; then echo "run.sh: kept $tmp" >&2; else rm -rf "$tmp"; fi
}
# stop_pid PID: SIGTERM, wait at most 5 s, then SIGKILL (only our own children).
stop_pid() {
  local pid="$1" i
  kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < 50; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# free_port: a loopback TCP port nobody listens on (bounded number of tries).
declare -A used_ports=()
free_port() {
  local i p
  for ((i = 0; i < 200; i++)); do
    p=$((20000 + (RANDOM * 32768 + RANDOM) % 40000))
    [ -n "${used_ports[$p]:-}" ] && continue
    if [ -z "$(ss -Hltn "sport = :$p" 2>/dev/null)" ]; then used_ports[$p]=1; echo "$p"; return 0; fi
  done
  die "no free port found"
}

# wait_http URL [TRIES]: poll until curl gets any 2xx (at most TRIES × 50 ms).
wait_http() {
  local url="$1" tries="${2:-200}" i
  for ((i = 0; i < tries; i++)); do
    curl -skf --max-time 1 -o /dev/null "$url" && return 0
    sleep 0.05
  done
  return 1
}

# ---------------------------------------------------------------- build
# The binaries' paths come from cargo itself: .cargo/config.toml may set a build target, which
# moves them to target/<triple>/release/.
tiphys_bin="" tonic_bin=""
if [ "${BENCH_SKIP_BUILD:-0}" != 1 ]; then
  say "building tiphys and the bare_tonic example (release)"
  # Two builds: with an example in the same build, cargo turns on the dev-dependencies' features,
  # which changes the symbol names of the binary and so defeats benches/text-order.txt.
  timeout 1800 cargo build --release --bin tiphys \
    --message-format=json-render-diagnostics >"$tmp/cargo-build.json"
  timeout 1800 cargo build --release --example bare_tonic \
    --message-format=json-render-diagnostics >>"$tmp/cargo-build.json"
  exe() { grep -o "\"executable\":\"[^\"]*/$1\"" "$tmp/cargo-build.json" | tail -1 | sed 's/^"executable":"//; s/"$//'; }
  tiphys_bin="$(exe tiphys)"
  tonic_bin="$(exe bare_tonic)"
else
  # Missing paths are expected here (no build yet); the checks below say what is missing.
  newest() { ls -t "$@" 2>/dev/null | head -1 || true; }
  target="${CARGO_TARGET_DIR:-$repo/target}"
  tiphys_bin="${TIPHYS_BIN:-$(newest "$target"/release/tiphys "$target"/*/release/tiphys)}"
  tonic_bin="${TONIC_BIN:-$(newest "$target"/release/examples/bare_tonic "$target"/*/release/examples/bare_tonic)}"
fi
[ -n "$tiphys_bin" ] && [ -x "$tiphys_bin" ] ||
  die "release tiphys binary not found (build it: cargo build --release --bin tiphys; or set TIPHYS_BIN)"
[ -n "$tonic_bin" ] && [ -x "$tonic_bin" ] ||
  die "release bare_tonic binary not found (build it: cargo build --release --example bare_tonic; or set TONIC_BIN)"
say "tiphys: $tiphys_bin ($(file -b "$tiphys_bin" 2>/dev/null | cut -d, -f1-5 || true))"

peer_bin=""
if [ -f "$peer_dir/build.sh" ]; then
  say "building peer-go ($peer_dir/build.sh)"
  if PEER_GO_OUT="$peer_out" timeout 1200 bash "$peer_dir/build.sh" >&2; then
    peer_bin="$peer_out/peer-go"
  else
    say "peer-go build failed: the peer-go columns are skipped"
  fi
else
  say "no Go peer at $peer_dir: the peer-go columns are skipped"
fi

nginx_bin="$(command -v nginx || true)"
[ -n "$nginx_bin" ] || [ ! -x /usr/sbin/nginx ] || nginx_bin=/usr/sbin/nginx
[ -n "$nginx_bin" ] || say "nginx not found: the nginx columns are skipped"

# ---------------------------------------------------------------- certificate + request bodies
say "generating one ECDSA P-256 certificate for every server"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -sha256 -days 2 \
  -subj "/CN=localhost" -addext "subjectAltName=DNS:localhost,IP:127.0.0.1,IP:::1" \
  -keyout "$tmp/key.pem" -out "$tmp/cert.pem" 2>/dev/null
chmod 644 "$tmp/key.pem" # throw-away, in a private temp dir; nginx's master reads it anyway
printf '\x00\x00\x00\x00\x00' > "$tmp/grpc-empty.bin" # one gRPC frame: uncompressed, length 0

# ---------------------------------------------------------------- servers
# busy_pct: share of CPU time (all CPUs) spent on anything but idle/iowait over one second.
busy_pct() {
  local a b
  a="$(head -1 /proc/stat)"
  sleep 1
  b="$(head -1 /proc/stat)"
  printf '%s\n%s\n' "$a" "$b" | awk '{ idle = $5 + $6; tot = 0; for (i = 2; i <= NF; i++) tot += $i; t[NR] = tot; d[NR] = idle }
    END { dt = t[2] - t[1]; b = 0; if (dt > 0) b = 100 * (dt - (d[2] - d[1])) / dt; printf "%d", b }'
}
busy_before="$(busy_pct)"
if [ "$busy_before" -gt 20 ]; then
  say "WARNING: the CPUs are ${busy_before}% busy before the run: something else is running; numbers will be low and noisy"
fi
tiphys_port="$(free_port)"
tonic_port="$(free_port)"
tonicweb_port="$(free_port)"
peer_port="$(free_port)"
nginx_port="$(free_port)"

declare -A pid_of=() # server -> PID, for its CPU time
say "starting tiphys on $host:$tiphys_port"
mkdir -p "$tmp/tiphys-data"
"${srv_pin[@]}" "$tiphys_bin" server --address "$host" --port "$tiphys_port" \
  --metrics-address "$host" --metrics-port 0 --tls-cert "$tmp/cert.pem" --tls-key "$tmp/key.pem" \
  --data-dir "$tmp/tiphys-data" --ready-file "$tmp/tiphys-data/ready.json" >"$tmp/tiphys.log" 2>&1 &
tiphys_pid=$!
pid_of[tiphys]=$tiphys_pid
pids+=("$tiphys_pid")
wait_http "https://$host:$tiphys_port/healthz" || { cat "$tmp/tiphys.log" >&2; die "tiphys did not come up"; }
sleep 1
tiphys_rss_idle="$(awk '/^VmRSS:/ {print $2}' "/proc/$tiphys_pid/status")" # kB
# The two parts of it: memory of the process's own (heap, stacks) and pages of the binary mapped in.
tiphys_rss_anon="$(awk '/^RssAnon:/ {print $2}' "/proc/$tiphys_pid/status")"
tiphys_rss_file="$(awk '/^RssFile:/ {print $2}' "/proc/$tiphys_pid/status")"

say "starting bare_tonic on $host:$tonic_port"
"${srv_pin[@]}" "$tonic_bin" --addr "$host:$tonic_port" --cert "$tmp/cert.pem" --key "$tmp/key.pem" \
  >"$tmp/bare_tonic.log" 2>&1 &
pids+=($!)
pid_of[tonic]=$!
say "starting bare_tonic --grpc-web on $host:$tonicweb_port"
"${srv_pin[@]}" "$tonic_bin" --addr "$host:$tonicweb_port" --cert "$tmp/cert.pem" --key "$tmp/key.pem" --grpc-web \
  >"$tmp/bare_tonic-web.log" 2>&1 &
pids+=($!)
pid_of[tonicweb]=$!

if [ -n "$peer_bin" ]; then
  say "starting peer-go on $host:$peer_port"
  "${srv_pin[@]}" "$peer_bin" --addr "$host:$peer_port" --cert "$tmp/cert.pem" --key "$tmp/key.pem" \
    --alpn h2,http/1.1 --version-string v0.1.0 --quiet >"$tmp/peer-go.log" 2>&1 &
  pids+=($!)
  pid_of[peer]=$!
  wait_http "https://$host:$peer_port/healthz" || { cat "$tmp/peer-go.log" >&2; say "peer-go did not come up: skipped"; peer_bin=""; }
fi

if [ -n "$nginx_bin" ]; then
  say "starting nginx (one worker) on $host:$nginx_port"
  mkdir -p "$tmp/nginx"
  nginx_user=""
  [ "$(id -u)" = 0 ] && nginx_user="user root;"
  cat >"$tmp/nginx/nginx.conf" <<EOF
$nginx_user
worker_processes 1;
daemon off;
pid $tmp/nginx/nginx.pid;
error_log $tmp/nginx/error.log warn;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path $tmp/nginx/body;
  proxy_temp_path $tmp/nginx/proxy;
  fastcgi_temp_path $tmp/nginx/fastcgi;
  uwsgi_temp_path $tmp/nginx/uwsgi;
  scgi_temp_path $tmp/nginx/scgi;
  keepalive_requests 100000000;
  keepalive_timeout 300s;
  server {
    listen $host:$nginx_port ssl http2;
    ssl_certificate $tmp/cert.pem;
    ssl_certificate_key $tmp/key.pem;
    ssl_protocols TLSv1.2 TLSv1.3;
    location = /api/version { default_type application/json; return 200 '{"Version":"v0.1.0"}'; }
    location = /healthz { default_type text/plain; return 200 "ok\n"; }
  }
}
EOF
  "${srv_pin[@]}" "$nginx_bin" -p "$tmp/nginx" -c "$tmp/nginx/nginx.conf" >"$tmp/nginx/stdout.log" 2>&1 &
  pids+=($!)
  pid_of[nginx]=$!
  wait_http "https://$host:$nginx_port/healthz" || { cat "$tmp/nginx/error.log" >&2; say "nginx did not come up: skipped"; nginx_bin=""; }
fi

wait_grpc() { # wait_grpc PORT PATH: the server answers a gRPC call with grpc-status 0
  local i out
  for ((i = 0; i < 100; i++)); do
    out="$(curl -sk --http2 --max-time 2 -o /dev/null -D - -X POST --data-binary @"$tmp/grpc-empty.bin" \
      -H 'content-type: application/grpc' -H 'te: trailers' "https://$host:$1$2" 2>/dev/null || true)"
    printf '%s' "$out" | tr -d '\r' | grep -qi '^grpc-status: 0$' && return 0
    sleep 0.05
  done
  return 1
}

say "checking every endpoint once"
check_failed=0
checks=("tiphys gRPC:$tiphys_port:/version.VersionService/Version" "bare_tonic gRPC:$tonic_port:/version.VersionService/Version")
[ -n "$peer_bin" ] && checks+=("peer-go gRPC:$peer_port:/bench.Bench/Version")
for c in "${checks[@]}"; do
  IFS=: read -r name port path <<<"$c"
  wait_grpc "$port" "$path" || { say "CHECK FAILED: $name $path"; check_failed=1; }
done
# tonic's own TLS acceptor offers only h2 in ALPN, so bare_tonic's gRPC-Web is checked and measured
# over h2 only; an HTTP/1.1-only client (h2load --h1) cannot complete the handshake with it.
web_checks=("tiphys:$tiphys_port:/version.VersionService/Version:--http2 --http1.1"
  "bare_tonic:$tonicweb_port:/version.VersionService/Version:--http2")
[ -n "$peer_bin" ] && web_checks+=("peer-go:$peer_port:/bench.Bench/Version:--http2 --http1.1")
for c in "${web_checks[@]}"; do
  IFS=: read -r name port path versions <<<"$c"
  for v in $versions; do
    rm -f "$tmp/web-check.bin"
    curl -sk "$v" --max-time 2 -o "$tmp/web-check.bin" -X POST --data-binary @"$tmp/grpc-empty.bin" \
      -H 'content-type: application/grpc-web+proto' -H 'x-grpc-web: 1' "https://$host:$port$path" 2>/dev/null || true
    grep -aqi 'grpc-status: *0' "$tmp/web-check.bin" 2>/dev/null || { say "CHECK FAILED: $name gRPC-Web $v $path"; check_failed=1; }
  done
done
rest_ports=("tiphys:$tiphys_port")
[ -n "$peer_bin" ] && rest_ports+=("peer-go:$peer_port")
[ -n "$nginx_bin" ] && rest_ports+=("nginx:$nginx_port")
for c in "${rest_ports[@]}"; do
  IFS=: read -r name port <<<"$c"
  body="$(curl -sk --http2 --max-time 2 "https://$host:$port/api/version" || true)"
  printf '%s' "$body" | grep -q '"Version":"v0.1.0' || { say "CHECK FAILED: $name /api/version -> $body"; check_failed=1; }
done
[ "$check_failed" = 0 ] || say "some checks failed; their numbers below are not comparable"

# ---------------------------------------------------------------- load
# Rounds: every scenario runs once per server in each round, and the order of the servers rotates
# from round to round, so drift of the shared machine and the position in a round hit all alike.
# The report gives medians over rounds: of each server's req/s, and of the ratios, which are taken
# within one round (measurements seconds apart). Beside req/s, each measurement records the
# server's CPU time per request (all its threads and child processes, from /proc/PID/stat over
# the measured window), which the client's share of the two cores does not move.
declare -A rps=() cpu=() note=() # KEY.ROUND -> req/s, µs of server CPU per request; KEY -> failure
# shellcheck source=benches/lib.sh
. "$repo/benches/lib.sh"
# bench KEY SERVER ROUND PORT PATH [h2load args...]: h2load against https://127.0.0.1:PORT/PATH.
bench() {
  local key="$1" server="$2" round="$3" port="$4" path="$5" out log="$tmp/h2load-$1.$3.log" limit
  shift 5
  local mode=(-D "$duration" --warm-up-time "$warmup")
  limit=$((duration + warmup + 30))
  if [ -n "$requests" ]; then mode=(-n "$requests"); limit=120; fi
  timeout "$limit" "${gen_pin[@]}" h2load "${mode[@]}" -c "$clients" -t "$threads" "$@" \
    "https://$host:$port$path" >"$log" 2>&1 &
  local load_pid=$! t0 t1
  # The CPU window starts after the warm-up, when h2load starts counting.
  [ -n "$requests" ] || sleep "$warmup"
  t0="$(cpu_ticks "${pid_of[$server]}")"
  wait "$load_pid" || true
  t1="$(cpu_ticks "${pid_of[$server]}")"
  out="$(h2load_rps "$log")"
  local summary codes failed errored non2xx succeeded
  summary="$(grep -m1 '^requests:' "$log" || true)"
  codes="$(grep -m1 '^status codes:' "$log" || true)"
  failed="$(printf '%s' "$summary" | sed -n 's/.* \([0-9]*\) failed.*/\1/p')"
  errored="$(printf '%s' "$summary" | sed -n 's/.* \([0-9]*\) errored.*/\1/p')"
  non2xx="$(printf '%s' "$codes" | awk -F'[:,]' '{n=0; for (i=3;i<=NF;i++) {split($i,a," "); n+=a[1]} print n}')"
  succeeded="$(h2load_succeeded "$log")"
  rps[$key.$round]="${out:-}"
  cpu[$key.$round]="$(cpu_us_per_request $((t1 - t0)) "${succeeded:-0}")"
  if [ "${failed:-0}" != 0 ] || [ "${errored:-0}" != 0 ] || [ "${non2xx:-0}" != 0 ] || [ -z "$out" ] \
    || [ "${succeeded:-0}" = 0 ]; then
    note[$key]="failed=${failed:-?} errored=${errored:-?} non-2xx=${non2xx:-?} (round $round)"
    say "WARNING $key: $summary / $codes (see $log)"
  fi
  say "$(printf 'round %s %-14s %10s req/s %8s µs CPU/req  %s' "$round" "$key" "${out:-n/a}" "${cpu[$key.$round]:-n/a}" "$summary")"
}

grpc_args=(-m "$streams" -d "$tmp/grpc-empty.bin" -H 'content-type: application/grpc' -H 'te: trailers')
web_args=(-m "$streams" -d "$tmp/grpc-empty.bin" -H 'content-type: application/grpc-web+proto' -H 'x-grpc-web: 1')
h1web_args=(--h1 -d "$tmp/grpc-empty.bin" -H 'content-type: application/grpc-web+proto' -H 'x-grpc-web: 1')
tiphys_rpc=/version.VersionService/Version peer_rpc=/bench.Bench/Version

# scenario PREFIX ROUND ENTRY...: one measurement per ENTRY (SERVER:PORT:PATH), in rotated order.
scenario() {
  local prefix="$1" round="$2" n i server port path
  shift 2
  local entries=("$@")
  n="${#entries[@]}"
  for ((i = 0; i < n; i++)); do
    IFS=: read -r server port path <<<"${entries[$(((i + round) % n))]}"
    bench "$prefix.$server" "$server" "$round" "$port" "$path" "${scenario_args[@]}"
  done
}
with_peer() { [ -n "$peer_bin" ] && echo "peer:$peer_port:$1"; }
with_nginx() { [ -n "$nginx_bin" ] && echo "nginx:$nginx_port:$1"; }

say "load: $rounds rounds; $clients connections x $streams streams, $([ -n "$requests" ] && echo "$requests requests" || echo "${duration}s + ${warmup}s warm-up") per measurement"
for ((round = 1; round <= rounds; round++)); do
  scenario_args=("${grpc_args[@]}")
  # shellcheck disable=SC2046 # one word per entry
  scenario grpc "$round" "tiphys:$tiphys_port:$tiphys_rpc" "tonic:$tonic_port:$tiphys_rpc" $(with_peer "$peer_rpc")
  scenario_args=(-m "$streams")
  # shellcheck disable=SC2046
  scenario rest2 "$round" "tiphys:$tiphys_port:/api/version" $(with_peer /api/version) $(with_nginx /api/version)
  scenario_args=(--h1)
  # shellcheck disable=SC2046
  scenario rest1 "$round" "tiphys:$tiphys_port:/api/version" $(with_peer /api/version) $(with_nginx /api/version)
  scenario_args=("${web_args[@]}")
  # shellcheck disable=SC2046
  scenario web2 "$round" "tiphys:$tiphys_port:$tiphys_rpc" "tonicweb:$tonicweb_port:$tiphys_rpc" $(with_peer "$peer_rpc")
  scenario_args=("${h1web_args[@]}")
  # shellcheck disable=SC2046
  scenario web1 "$round" "tiphys:$tiphys_port:$tiphys_rpc" $(with_peer "$peer_rpc")
done

tiphys_rss_after="$(awk '/^VmRSS:/ {print $2}' "/proc/$tiphys_pid/status" 2>/dev/null || echo '')"
tiphys_alive=yes
kill -0 "$tiphys_pid" 2>/dev/null || tiphys_alive="NO (see $tmp/tiphys.log)"

# Stop the long-running servers before the start-up measurements.
for pid in "${pids[@]}"; do stop_pid "$pid"; done
pids=()

# ---------------------------------------------------------------- start-up time
# Spawn tiphys with a fresh data directory and poll GET /healthz with curl until it answers.
# The figure includes curl's own process start per poll (a few ms), so it is an upper bound.
say "start-to-first-served-request, $starts runs"
start_ms=()
for ((run = 1; run <= starts; run++)); do
  port="$(free_port)"
  data="$tmp/start-$run"
  mkdir -p "$data"
  t0="$(date +%s%N)"
  "${srv_pin[@]}" "$tiphys_bin" server --address "$host" --port "$port" --metrics-address "$host" --metrics-port 0 \
    --tls-cert "$tmp/cert.pem" --tls-key "$tmp/key.pem" --data-dir "$data" >"$tmp/start-$run.log" 2>&1 &
  spid=$!
  pids+=("$spid")
  ok=0
  for ((i = 0; i < 2000; i++)); do # at most 2000 polls, and 10 s
    if curl -skf --max-time 1 -o /dev/null "https://$host:$port/healthz" 2>/dev/null; then ok=1; break; fi
    [ $(( ($(date +%s%N) - t0) / 1000000 )) -lt 10000 ] || break
    kill -0 "$spid" 2>/dev/null || break
  done
  t1="$(date +%s%N)"
  stop_pid "$spid"
  pids=()
  if [ "$ok" = 1 ]; then
    start_ms+=($(( (t1 - t0) / 1000000 )))
    say "run $run: $(( (t1 - t0) / 1000000 )) ms ($i failed polls before)"
  else
    say "run $run: tiphys did not answer /healthz within 10 s (see $tmp/start-$run.log)"
  fi
done
start_median=""
if [ "${#start_ms[@]}" -gt 0 ]; then
  start_median="$(printf '%s\n' "${start_ms[@]}" | sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : int((a[NR/2]+a[NR/2+1])/2)}')"
fi

# ---------------------------------------------------------------- report
# median: the median of the numbers on stdin (one per line), or nothing when there are none.
median() { sort -g | awk '{ a[NR] = $1 } END { if (NR) printf "%.2f", (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
# series MAP KEY: the values of MAP[KEY.1..rounds], one per line.
series() {
  local -n map="$1"
  local r
  for ((r = 1; r <= rounds; r++)); do [ -z "${map[$2.$r]:-}" ] || echo "${map[$2.$r]}"; done
}
# ratios MAP A B [INVERT]: A/B within each round where both were measured (B/A with INVERT=1).
ratios() {
  local -n map="$1"
  local r
  for ((r = 1; r <= rounds; r++)); do
    [ -n "${map[$2.$r]:-}" ] && [ -n "${map[$3.$r]:-}" ] || continue
    awk -v a="${map[$2.$r]}" -v b="${map[$3.$r]}" -v inv="${4:-0}" \
      'BEGIN { if (inv) { t = a; a = b; b = t } if (b > 0) printf "%.4f\n", a / b }'
  done
}
# spread: "median (min–max)" of the numbers on stdin, or "—".
spread() {
  local v
  v="$(cat)"
  [ -n "$v" ] || { echo "—"; return; }
  printf '%s (%s–%s)' "$(printf '%s\n' "$v" | median)" \
    "$(printf '%s\n' "$v" | sort -g | head -1 | awk '{ printf "%.2f", $1 }')" \
    "$(printf '%s\n' "$v" | sort -g | tail -1 | awk '{ printf "%.2f", $1 }')"
}
fmt_rps() { # KEY -> median req/s, marked when requests failed
  local v
  v="$(series rps "$1" | median)"
  [ -n "$v" ] || { echo "—"; return; }
  printf '%.0f%s' "$v" "${note[$1]:+ (!)}"
}
fmt_cpu() { local v; v="$(series cpu "$1" | median)"; echo "${v:-—}"; }

echo
echo "## Results ($(date -u +%Y-%m-%dT%H:%MZ), $(nproc) CPUs, $rounds rounds, h2load -c $clients -m $streams -t $threads, $([ -n "$requests" ] && echo "-n $requests" || echo "-D $duration --warm-up-time $warmup")$([ "${BENCH_PIN:-0}" = 1 ] && echo ', servers pinned to CPU 0, h2load to CPU 1'))"
echo
echo "Requests per second: the median over the rounds. Ratios: the median of the ratios taken within each round, with the lowest and highest round in brackets."
echo
echo "| Scenario | tiphys req/s | bare tonic | peer-go | nginx | tiphys/bare tonic | tiphys/peer-go | tiphys/nginx |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
# table MAP FORMAT INVERT: one row per scenario; medians of MAP and of its ratios within rounds.
table() {
  local map="$1" fmt="$2" inv="$3" label p t
  while IFS='|' read -r label p t; do
    echo "| $label | $("$fmt" "$p.tiphys") | $("$fmt" "$p.$t") | $("$fmt" "$p.peer") | $("$fmt" "$p.nginx") | $(ratios "$map" "$p.tiphys" "$p.$t" "$inv" | spread) | $(ratios "$map" "$p.tiphys" "$p.peer" "$inv" | spread) | $(ratios "$map" "$p.tiphys" "$p.nginx" "$inv" | spread) |"
  done <<'ROWS'
gRPC unary, TLS h2|grpc|tonic
REST GET /api/version, TLS h2|rest2|tonic
REST GET /api/version, TLS HTTP/1.1|rest1|tonic
gRPC-Web, TLS h2|web2|tonicweb
gRPC-Web, TLS HTTP/1.1|web1|tonicweb
ROWS
}
table rps fmt_rps 0
echo
echo "Server CPU time per request in µs (median over the rounds), and how many times more the reference spends (its µs over tiphys's, per round; median and range):"
echo
echo "| Scenario | tiphys µs | bare tonic | peer-go | nginx | bare tonic/tiphys | peer-go/tiphys | nginx/tiphys |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
table cpu fmt_cpu 1
echo
echo "| tiphys | value |"
echo "| --- | ---: |"
echo "| idle RSS after start (VmRSS) | $(awk -v k="$tiphys_rss_idle" 'BEGIN { printf "%.1f MB", k / 1024 }') |"
echo "| … of which anonymous (RssAnon: heap, stacks) | $(awk -v k="$tiphys_rss_anon" 'BEGIN { printf "%.1f MB", k / 1024 }') |"
echo "| … of which the binary's mapped pages (RssFile) | $(awk -v k="$tiphys_rss_file" 'BEGIN { printf "%.1f MB", k / 1024 }') |"
# How much of benches/text-order.txt (see text-order.sh) still names functions of this binary.
if [ -s benches/text-order.txt ] && command -v nm >/dev/null; then
  order_total="$(wc -l <benches/text-order.txt)"
  order_found="$(nm "$tiphys_bin" | awk 'NR == FNR { want[$1] = 1; next } ($3 in want) && !seen[$3]++ { n++ } END { print n + 0 }' benches/text-order.txt -)"
  echo "| functions of benches/text-order.txt found in the binary | $order_found of $order_total |"
fi
[ -n "$tiphys_rss_after" ] && echo "| RSS after the load runs | $(awk -v k="$tiphys_rss_after" 'BEGIN { printf "%.1f MB", k / 1024 }') |"
echo "| start to first served request (median of ${#start_ms[@]}) | ${start_median:-n/a} ms (runs: ${start_ms[*]:-none}) |"
echo "| still alive after the load runs | $tiphys_alive |"
if [ "${#note[@]}" -gt 0 ]; then
  echo
  echo "(!) requests failed in:"
  for k in "${!note[@]}"; do echo "- $k: ${note[$k]}"; done
fi
echo
echo "CPU busy (all CPUs, 1 s sample) before the servers started: ${busy_before}%."
echo "gRPC-Web rows: the bare tonic column is a second bare_tonic with tonic-web's GrpcWebLayer (--grpc-web);"
echo "over HTTP/1.1 it has no figure, because tonic's TLS acceptor offers only h2 in ALPN."
echo "h2load counts HTTP 2xx as success; each gRPC and gRPC-Web endpoint was checked once for grpc-status 0 before the load."
echo
echo "Targets: tiphys/bare tonic ≥ 0.95 (gRPC); tiphys/peer-go ≥ 1.5 (gRPC), ≥ 3 (REST); tiphys/nginx ≥ 0.80 (REST); idle RSS ≤ 15 MB; start ≤ 100 ms."
