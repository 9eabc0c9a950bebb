#!/usr/bin/env bash
# Soak: one tiphys server under a mixed load (logins, reads, writes, watches that come and go, slow
# readers, abandoned connections) for SECONDS, its RSS and open fds sampled every 2 s; fails unless
# both are flat after the warm-up and the fds return to the idle baseline once the load stops.
#
#   bash benches/soak.sh [SECONDS] [OUT_DIR]      # default 600 s; CI runs 60 (tests/e2e/test_soak.py)
#
# OUT_DIR (default: a new soak-<date> directory under $TMPDIR or /tmp) receives samples.csv,
# soak.png, summary.json, the load's report (soak.txt) and the server's log; its path is printed.
# benches/soak.py is the load, the sampler and the checks; `python benches/soak.py check
# OUT_DIR/samples.csv` runs the checks again on a saved run.
#
# Environment (optional):
#   TIPHYS_RELEASE_BIN, else TIPHYS_BIN   the server binary (default: the release build under
#                                        $CARGO_TARGET_DIR or target/); measure a release build
#   SOAK_PYTHON     a Python with tests/e2e/requirements.txt installed (default: the e2e virtualenv
#                   .ci/test-all makes under the target dir, else python3)
#   SOAK_INTERVAL   seconds between samples (2)
#   SOAK_MIX        only these parts of the load, comma-separated (default all: logins, reads,
#                   writes, watches, slow, abandoned), to find out which one makes memory grow
#   SOAK_KEEP=1     keep the server's temporary data dir
#
# Only 127.0.0.1 is used; the only process stopped is the server this script started, by PID.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
seconds="${1:-600}"
interval="${SOAK_INTERVAL:-2}"

die() { printf 'soak.sh: %s\n' "$*" >&2; exit 2; }

[[ "$seconds" =~ ^[0-9]+$ ]] && [ "$seconds" -ge 10 ] || die "SECONDS must be a whole number of seconds, at least 10"

target_dir="${CARGO_TARGET_DIR:-$repo/target}"
case "$target_dir" in /*) ;; *) target_dir="$repo/$target_dir" ;; esac
bin="${TIPHYS_RELEASE_BIN:-${TIPHYS_BIN:-}}"
if [ -z "$bin" ]; then
  triple="$(rustc -vV 2>/dev/null | sed -n 's/^host: //p' || true)"
  for candidate in "$target_dir/$triple/release/tiphys" "$target_dir/release/tiphys"; do
    if [ -x "$candidate" ]; then bin="$candidate"; break; fi
  done
fi
[ -n "$bin" ] && [ -x "$bin" ] || die "no tiphys binary: build with \`cargo build --release\` or set TIPHYS_RELEASE_BIN"

python="${SOAK_PYTHON:-}"
if [ -z "$python" ]; then
  python=python3
  [ -x "$target_dir/e2e-venv/bin/python" ] && python="$target_dir/e2e-venv/bin/python"
fi
"$python" -c 'import grpc, grpc_tools, httpx, h2, matplotlib' 2>/dev/null \
  || die "$python lacks the test clients: $python -m pip install -r tests/e2e/requirements.txt"

out="${2:-${TMPDIR:-/tmp}/soak-$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$out"
out="$(cd "$out" && pwd -P)"

tmp="$(mktemp -d "${TMPDIR:-/tmp}/tiphys-soak.XXXXXX")"
server_pid=""
# shellcheck disable=SC2329 # run by the EXIT trap below
cleanup() {
  if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
    kill -KILL "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  if [ "${SOAK_KEEP:-0}" = 1 ]; then echo "soak.sh: kept $tmp" >&2; else rm -rf "$tmp"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# A local account besides admin, for logins over gRPC (its password is set through the API).
mkdir -p "$tmp/config" "$tmp/data"
cat >"$tmp/config/argocd-cm.yaml" <<'EOF'
apiVersion: v1
kind: ConfigMap
metadata:
  name: argocd-cm
data:
  accounts.soak: "login"
  # The soak measures the server under sustained load, not the limiter that would refuse it.
  tiphys.ratelimit.enabled: "false"
EOF

# The server's settings are the flags below: no TIPHYS_* variable of the caller's reaches it.
while read -r var; do unset "$var"; done < <(compgen -e | grep '^TIPHYS_' || true)

# TLS mode (the default) with the generated certificate: handshakes are part of what is soaked.
# No shutdown delay: the server stops at once when the run ends.
env NO_COLOR=1 RUST_LOG=info TIPHYS_SHUTDOWN_DELAY=0 \
  "$bin" server --address 127.0.0.1 --port 0 --metrics-address 127.0.0.1 --metrics-port 0 \
  --data-dir "$tmp/data" --config-dir "$tmp/config" --ready-file "$tmp/ready.json" \
  </dev/null >"$out/server.log" 2>&1 &
server_pid=$!

for ((i = 0; i < 300; i++)); do
  [ -s "$tmp/ready.json" ] && [ -s "$tmp/data/initial-admin-password" ] && break
  kill -0 "$server_pid" 2>/dev/null || die "the server exited at start: $(tail -5 "$out/server.log")"
  sleep 0.1
done
[ -s "$tmp/ready.json" ] || die "the server wrote no ready file within 30 s"
port="$("$python" -c 'import json, sys; print(json.load(open(sys.argv[1]))["port"])' "$tmp/ready.json")"
metrics_port="$("$python" -c 'import json, sys; print(json.load(open(sys.argv[1]))["metrics_port"])' "$tmp/ready.json")"

echo "soak.sh: $bin (pid $server_pid) on 127.0.0.1:$port for $seconds s; output in $out"
status=0
"$python" "$repo/benches/soak.py" load --pid "$server_pid" --port "$port" --metrics-port "$metrics_port" \
  --data-dir "$tmp/data" --seconds "$seconds" --interval "$interval" --out "$out" \
  --mix "${SOAK_MIX:-logins,reads,writes,watches,slow,abandoned}" \
  2>&1 | tee "$out/soak.txt" || status=1

# The server must still stop cleanly (SIGTERM, exit 0 within 25 s) and must not have panicked.
kill -TERM "$server_pid" 2>/dev/null || true
for ((i = 0; i < 250; i++)); do
  kill -0 "$server_pid" 2>/dev/null || break
  sleep 0.1
done
if kill -0 "$server_pid" 2>/dev/null; then
  echo "soak.sh: FAIL: the server did not exit within 25 s of SIGTERM" | tee -a "$out/soak.txt"
  status=1
else
  server_status=0
  wait "$server_pid" || server_status=$?
  server_pid=""
  if [ "$server_status" -ne 0 ]; then
    echo "soak.sh: FAIL: the server exited with $server_status after SIGTERM" | tee -a "$out/soak.txt"
    status=1
  fi
fi
if grep -q 'panicked' "$out/server.log"; then
  echo "soak.sh: FAIL: the server panicked: $(grep -m1 'panicked' "$out/server.log")" | tee -a "$out/soak.txt"
  status=1
fi

echo "soak.sh: $([ "$status" -eq 0 ] && echo PASSED || echo FAILED); output in $out"
exit "$status"
