#!/usr/bin/env bash
# tiphys beside upstream argocd-server (issue 36; BENCHMARKS.md, "tiphys beside upstream
# argocd-server"): builds the release binary and the example, then runs it once.
#
#   bash benches/argocd_peer.sh [OUT_FILE]
#
# Needs the upstream parts built (bash tools/upstream/build.sh; TIPHYS_UPSTREAM_BIN overrides),
# Debian's etcd-server, redis-server and kubernetes-client (kubectl), h2load (nghttp2-client), and
# root for the mount namespace that gives argocd-server its in-cluster files (controlplane.py).
# Knobs: PEER_ROUNDS, PEER_SLOW_ROUNDS, PEER_STARTS, PEER_DURATION, PEER_WATCHERS, PEER_CONNS, PEER_TIPHYS_KUBE,
# PEER_TIMEOUT (benches/argocd_peer.rs); BENCH_SKIP_BUILD=1 with TIPHYS_BIN and PEER_BIN uses
# binaries already built. Only loopback is used; the processes it starts are stopped by PID.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
cd "$repo"
out="${1:-/dev/null}"
for tool in h2load kubectl etcd redis-server; do
  command -v "$tool" >/dev/null || { echo "argocd_peer.sh: $tool is not installed" >&2; exit 1; }
done
release="${CARGO_TARGET_DIR:-$repo/target}/x86_64-unknown-linux-gnu/release"
if [ "${BENCH_SKIP_BUILD:-0}" != 1 ]; then
  cargo build --release --locked --bin tiphys --example argocd_peer
fi
tiphys="${TIPHYS_BIN:-$release/tiphys}"
peer="${PEER_BIN:-$release/examples/argocd_peer}"
echo "$(date -u +%Y-%m-%dT%H:%MZ) $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$out"
ulimit -n "$(ulimit -Hn)"
"$peer" "$tiphys" 2>&1 | tee -a "$out"
