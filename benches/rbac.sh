#!/usr/bin/env bash
# RBAC engine benchmark (issue 4): tiphys's engine against Casbin (peer-go rbac-bench) on the same
# generated Argo CD style policies, in one run:
#  - benches/rbac_policy_gen.py writes a 1,000-line and a 10,000-line policy, the 50 groups of the
#    benchmark user, and 500 requests (about half allowed);
#  - the cargo example rbac_bench (benches/rbac_bench.rs) reports compile (reload) time and RSS,
#    then per-decision latency: uncached and cached, for the user with 50 groups (the server's
#    path) and for the peer's plain subject;
#  - peer-go rbac-bench --enforcer both (casbin.NewCachedEnforcer and casbin.NewEnforcer) on the
#    same policy text plus the same built-in roles, with its peak RSS (/usr/bin/time -v, or
#    /proc polling), and its load time and load RSS from runs with one request, minus a run on the
#    peer's 14-line sample policy.
#
#   bash benches/rbac.sh
#
# Environment: RBAC_SIZES="1000 10000", RBAC_SECONDS=3 (per measurement, both tools),
# RBAC_REQUESTS=500, RBAC_GROUPS=50, RBAC_LOADS=7, RBAC_LOAD_RUNS=5 (peer load-time runs),
# PEER_GO=~/.cache/peer-go/peer-go, BENCH_SKIP_BUILD=1, RBAC_KEEP=1 (keep the temp dir).
# The peer is optional: without its binary only tiphys is measured. Only processes started here
# are stopped, by PID. About 1-4 minutes with the peer (its uncached passes are slow), 30 s without.
# The servers a benchmark starts stop at once (no --shutdown-delay drain).
export TIPHYS_SHUTDOWN_DELAY=0
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
cd "$repo"
sizes="${RBAC_SIZES:-1000 10000}"
seconds="${RBAC_SECONDS:-3}"
nreq="${RBAC_REQUESTS:-500}"
ngroups="${RBAC_GROUPS:-50}"
loads="${RBAC_LOADS:-7}"
load_runs="${RBAC_LOAD_RUNS:-5}"
peer="${PEER_GO:-$HOME/.cache/peer-go/peer-go}"
peer_dir="${PEER_GO_DIR:-$repo/../shared/peers/peer-go}"
builtin="$repo/src/rbac/builtin-policy.csv"

say() { echo "== $*" >&2; }

if [ "${BENCH_SKIP_BUILD:-0}" != 1 ]; then
  cargo build --release --example rbac_bench >&2
fi
target="${CARGO_TARGET_DIR:-$repo/target}/$(rustc -vV | sed -n 's/^host: //p')/release"
ours="$target/examples/rbac_bench"
[ -x "$ours" ] || { echo "rbac.sh: $ours not built" >&2; exit 1; }
have_peer=1
if [ ! -x "$peer" ]; then
  have_peer=0
  say "peer-go not found at $peer (build it with SKIP_APT=1 $peer_dir/build.sh): measuring tiphys only"
fi

tmp="$(mktemp -d "${TMPDIR:-/tmp}/tiphys-rbac.XXXXXX")"
child=""
cleanup() {
  if [ -n "$child" ]; then kill "$child" 2>/dev/null || true; wait "$child" 2>/dev/null || true; fi
  if [ "${RBAC_KEEP:-0}" = 1 ]; then say "kept $tmp"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT

# busy_pct: share of CPU time (all CPUs) not idle over one second.
busy_pct() {
  local a b
  a="$(head -1 /proc/stat)"
  sleep 1
  b="$(head -1 /proc/stat)"
  printf '%s\n%s\n' "$a" "$b" | awk '{ idle = $5 + $6; tot = 0; for (i = 2; i <= NF; i++) tot += $i; t[NR] = tot; d[NR] = idle }
    END { dt = t[2] - t[1]; b = 0; if (dt > 0) b = 100 * (dt - (d[2] - d[1])) / dt; printf "%d", b }'
}

# measured OUT ERR CMD...: runs CMD with stdout to OUT, stderr to ERR; prints
# "<wall ms> <peak RSS kB>" (peak from /usr/bin/time -v, else the last VmHWM polled from /proc).
measured() {
  local out="$1" err="$2" t0 t1 rss
  shift 2
  t0="$(date +%s%N)"
  if [ -x /usr/bin/time ]; then
    /usr/bin/time -v -o "$err.time" "$@" >"$out" 2>"$err"
    t1="$(date +%s%N)"
    rss="$(sed -n 's/.*Maximum resident set size (kbytes): *//p' "$err.time")"
  else
    "$@" >"$out" 2>"$err" &
    child=$!
    rss=0
    while kill -0 "$child" 2>/dev/null; do
      v="$(sed -n 's/^VmHWM: *\([0-9]*\) kB/\1/p' "/proc/$child/status" 2>/dev/null || true)"
      [ -n "$v" ] && rss="$v"
      sleep 0.05
    done
    wait "$child"
    child=""
    t1="$(date +%s%N)"
  fi
  echo "$(( (t1 - t0) / 1000000 )) ${rss:-0}"
}

busy="$(busy_pct)"
if [ "$busy" -gt 20 ]; then
  say "WARNING: the CPUs are ${busy}% busy before the run: numbers will be low and noisy"
fi

for n in $sizes; do
  python3 "$repo/benches/rbac_policy_gen.py" --lines "$n" --groups "$ngroups" --requests "$nreq" --out "$tmp/$n" >"$tmp/$n.meta"
done
# The peer's load-time probe: one request for a subject without roles.
echo "nobody,applications,get,proj-0/app-0" >"$tmp/one.csv"
if [ "$have_peer" = 1 ] && [ -f "$peer_dir/testdata/policy.csv" ]; then
  cp "$peer_dir/testdata/policy.csv" "$tmp/tiny.csv"
else
  echo "p, role:x, applications, get, */*, allow" >"$tmp/tiny.csv"
fi

peer_load() { # POLICY LABEL: one line per run: {"label", "wall_ms", "max_rss_kb"}
  local policy="$1" label="$2" i res
  for i in $(seq "$load_runs"); do
    res="$(measured "$tmp/load.out" "$tmp/load.err" "$peer" rbac-bench --enforcer plain --duration 0s --max-passes 1 \
      --builtin "$builtin" --policy "$policy" --requests "$tmp/one.csv")"
    echo "{\"tool\":\"peer-go load\",\"label\":\"$label\",\"wall_ms\":${res% *},\"max_rss_kb\":${res#* }}"
  done
}

if [ "$have_peer" = 1 ]; then
  say "peer-go baseline (its 14-line sample policy + built-in roles, one request)"
  peer_load "$tmp/tiny.csv" tiny >"$tmp/peer-base.jsonl"
fi
for n in $sizes; do
  d="$tmp/$n"
  say "$n lines: tiphys rbac_bench"
  res="$(measured "$d/ours.jsonl" "$d/ours.err" "$ours" --policy "$d/policy.csv" --requests "$d/requests.csv" \
    --groups "$d/groups.txt" --seconds "$seconds" --loads "$loads")"
  echo "{\"tool\":\"tiphys process\",\"wall_ms\":${res% *},\"max_rss_kb\":${res#* }}" >>"$d/ours.jsonl"
  if [ "$have_peer" = 1 ]; then
    say "$n lines: peer-go rbac-bench --enforcer both --duration ${seconds}s"
    res="$(measured "$d/peer.jsonl" "$d/peer.err" "$peer" rbac-bench --enforcer both --duration "${seconds}s" \
      --builtin "$builtin" --policy "$d/policy.csv" --requests "$d/requests.csv")"
    echo "{\"tool\":\"peer-go process\",\"wall_ms\":${res% *},\"max_rss_kb\":${res#* }}" >>"$d/peer.jsonl"
    say "$n lines: peer-go load time and RSS ($load_runs runs, one request)"
    peer_load "$d/policy.csv" "$n" >>"$d/peer.jsonl"
  fi
done

busy_after="$(busy_pct)"
for n in $sizes; do
  echo "### $n lines: raw JSON"
  cat "$tmp/$n.meta" "$tmp/$n/ours.jsonl"
  [ "$have_peer" = 1 ] && cat "$tmp/$n/peer.jsonl"
done
echo

python3 - "$tmp" "$busy" "$busy_after" "$have_peer" $sizes <<'EOF'
import json, os, statistics, sys

tmp, busy, busy_after, have_peer, sizes = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "1", sys.argv[5:]

def lines(path):
    if not os.path.exists(path):
        return []
    return [json.loads(l) for l in open(path) if l.strip().startswith("{")]

def us(ns):
    return f"{ns / 1000:.2f} µs" if ns < 100_000 else f"{ns / 1e6:.2f} ms"

def mb(b):
    return f"{b / 1e6:.1f} MB"

base = lines(os.path.join(tmp, "peer-base.jsonl"))
base_ms = statistics.median(r["wall_ms"] for r in base) if base else None
base_kb = statistics.median(r["max_rss_kb"] for r in base) if base else None

print("| Policy | Engine | Decisions/s | p50 | p99 | max | allowed/500 | Reload (compile) | Memory |")
print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
summary = {}
for n in sizes:
    ours = {r.get("measure") or r["tool"]: r for r in lines(os.path.join(tmp, n, "ours.jsonl"))}
    peer_rows = lines(os.path.join(tmp, n, "peer.jsonl"))
    peer = {r["enforcer"]: r for r in peer_rows if r["tool"] == "peer-go rbac-bench"}
    proc = next((r for r in peer_rows if r["tool"] == "peer-go process"), None)
    loadruns = [r for r in peer_rows if r["tool"] == "peer-go load"]
    c = ours["compile"]
    reload = f"{c['median_ms']:.1f} ms (min {c['min_ms']:.1f}, {c['loads']} loads)"
    mem = (f"+{mb(c['rss_growth_one_load_bytes'])} RSS for one policy; +{mb(c['rss_growth_after_loads_one_alive_bytes'])} "
           f"after {c['loads']} loads (1 alive); process peak {ours['tiphys process']['max_rss_kb'] / 1000:.1f} MB")
    s = summary[n] = {"compile_ms": c["median_ms"], "rss_one": c["rss_growth_one_load_bytes"],
                      "rss_loads": c["rss_growth_after_loads_one_alive_bytes"]}
    first = True
    for key, label in [("cached_groups", "tiphys cached, user + 50 groups"),
                       ("uncached_groups", "tiphys uncached, user + 50 groups"),
                       ("cached_plain", "tiphys cached, peer's plain subject"),
                       ("uncached_plain", "tiphys uncached, peer's plain subject")]:
        r = ours[key]
        s[key] = r
        print(f"| {n} | {label} | {r['decisions_per_sec']:,.0f} | {us(r['p50_ns'])} | {us(r['p99_ns'])} | {us(r['max_ns'])} "
              f"| {r['allowed_per_pass']} | {reload if first else ''} | {mem if first else ''} |")
        first = False
    if peer:
        if loadruns and base_ms is not None:
            lw = statistics.median(r["wall_ms"] for r in loadruns)
            lk = statistics.median(r["max_rss_kb"] for r in loadruns)
            preload = f"≈ {lw - base_ms:.0f} ms (process {lw:.0f} − baseline {base_ms:.0f} ms, median of {len(loadruns)})"
            pmem = (f"load: +{(lk - base_kb) / 1000:.1f} MB peak RSS over baseline ({lk / 1000:.1f} − {base_kb / 1000:.1f}); "
                    f"whole run peak {proc['max_rss_kb'] / 1000:.1f} MB")
            s["peer_load_ms"], s["peer_load_mb"] = lw - base_ms, (lk - base_kb) / 1000
        else:
            preload, pmem = "", ""
        first = True
        for kind, label in [("cached", "peer-go cached (NewCachedEnforcer)"), ("plain", "peer-go plain (NewEnforcer)")]:
            r = peer[kind]
            s["peer_" + kind] = r
            print(f"| {n} | {label} | {r['enforcements_per_sec']:,.0f} | — | — | — | {r['allowed_per_pass']} "
                  f"| {preload if first else ''} | {pmem if first else ''} |")
            first = False

print()
print("Peer columns: no per-call latency (rbac-bench reports only the mean); mean = 1/rate.")
print(f"CPU busy (1 s sample) before the run: {busy}%, after: {busy_after}%.")
print()
if have_peer:
    print("| Policy | ours uncached (groups) / peer plain | ours uncached (plain subject) / peer plain | ours cached (groups) / peer cached | ours cached (plain) / peer cached | peer load / ours compile |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for n in sizes:
        s = summary[n]
        if "peer_plain" not in s:
            continue
        pp, pc = s["peer_plain"]["enforcements_per_sec"], s["peer_cached"]["enforcements_per_sec"]
        rl = f"{s['peer_load_ms'] / s['compile_ms']:.1f}×" if "peer_load_ms" in s else "n/a"
        print(f"| {n} | {s['uncached_groups']['decisions_per_sec'] / pp:,.0f}× | {s['uncached_plain']['decisions_per_sec'] / pp:,.0f}× "
              f"| {s['cached_groups']['decisions_per_sec'] / pc:.2f}× | {s['cached_plain']['decisions_per_sec'] / pc:.2f}× | {rl} |")
    print()
big = max(sizes, key=int)
s = summary[big]
def verdict(ok):
    return "met" if ok else "NOT met"
print(f"Targets ({big} lines):")
print(f"- uncached p99 ≤ 20 µs: {us(s['uncached_groups']['p99_ns'])} (user + 50 groups) → {verdict(s['uncached_groups']['p99_ns'] <= 20_000)}")
print(f"- cached p99 ≤ 2 µs: {us(s['cached_groups']['p99_ns'])} (user + 50 groups) → {verdict(s['cached_groups']['p99_ns'] <= 2_000)}")
print(f"- reload ≤ 100 ms: median {s['compile_ms']:.1f} ms → {verdict(s['compile_ms'] <= 100)}")
print(f"- reload ≤ 50 MB: +{mb(s['rss_one'])} RSS for one policy, +{mb(s['rss_loads'])} after several loads → {verdict(max(s['rss_one'], s['rss_loads']) <= 50e6)}")
EOF
