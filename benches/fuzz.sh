#!/usr/bin/env bash
# Fuzzing (issue 20, item 9): runs every cargo-fuzz target of fuzz/ (or those named) for a set
# time each, starting from its committed seed corpus, and prints a summary: how long each ran,
# how many inputs it executed, how many new inputs it kept, and what it found.
#
#   bash benches/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]      # default 60 s, every target
#
# Needs the nightly toolchain (installed with rustup if missing) and cargo-fuzz (installed from
# crates.io if missing). New inputs go to fuzz/runs/<target>/ and failures to
# fuzz/artifacts/<target>/ (both ignored by git), never into fuzz/corpus/, which holds only the
# seeds and the inputs that once failed (copy a fixed artifact there: the corpus replay test,
# tests/it/fuzz_corpus.rs, then keeps it fixed). libFuzzer stops a target at its first failure.
#
# Environment: FUZZ_TARGET_DIR (default target/fuzz; its own dir, since fuzz builds are
# instrumented), FUZZ_SANITIZER (default none: tiphys forbids unsafe code, and without ASan
# each target runs several times faster; `address` to check dependencies' unsafe code too),
# FUZZ_TIMEOUT (seconds one input may take before it counts as a failure, default 10),
# FUZZ_RSS_LIMIT_MB (default 2048), FUZZ_MAX_LEN (largest input tried, default 16384),
# FUZZ_SUMMARY (default fuzz/runs/summary.txt). The build runs build.rs, which builds the
# dashboard with npm unless TIPHYS_WEB_DIST names a built one.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
cd "$repo"
seconds="${1:-60}"
shift || true
target_dir="${FUZZ_TARGET_DIR:-$repo/target/fuzz}"
sanitizer="${FUZZ_SANITIZER:-none}"
timeout="${FUZZ_TIMEOUT:-10}"
rss="${FUZZ_RSS_LIMIT_MB:-2048}"
max_len="${FUZZ_MAX_LEN:-16384}"
summary="${FUZZ_SUMMARY:-$repo/fuzz/runs/summary.txt}"

if ! rustup toolchain list | grep -q '^nightly'; then
    rustup toolchain install nightly --profile minimal
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked
fi

if [ "$#" -gt 0 ]; then
    targets=("$@")
else
    mapfile -t targets < <(cargo +nightly fuzz list --fuzz-dir fuzz)
fi

build=(--fuzz-dir fuzz --sanitizer "$sanitizer" --target-dir "$target_dir")
cargo +nightly fuzz build "${build[@]}"

mkdir -p "$(dirname "$summary")"
{
    echo "# benches/fuzz.sh $seconds, sanitizer $sanitizer, $(date -u +%Y-%m-%dT%H:%MZ), commit $(git rev-parse --short HEAD)"
    printf '%-16s %8s %14s %10s %8s %s\n' target seconds executions exec/s new found
} | tee "$summary"
failed=0
for target in "${targets[@]}"; do
    work="fuzz/runs/$target"
    artifacts="fuzz/artifacts/$target"
    mkdir -p "$work" "$artifacts"
    log="$work.log"
    before=$(find "$artifacts" -type f | wc -l)
    start=$(date +%s)
    status=0
    # The first corpus directory receives what libFuzzer finds; the seeds are only read.
    cargo +nightly fuzz run "${build[@]}" "$target" "$work" "fuzz/corpus/$target" -- \
        -max_total_time="$seconds" -timeout="$timeout" -rss_limit_mb="$rss" \
        -max_len="$max_len" -print_final_stats=1 >"$log" 2>&1 || status=$?
    ran=$(($(date +%s) - start))
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
    added=$(sed -n 's/^stat::new_units_added: *//p' "$log" | tail -1)
    found=$(($(find "$artifacts" -type f | wc -l) - before))
    what="none"
    if [ "$status" -ne 0 ] || [ "$found" -gt 0 ]; then
        failed=1
        what="$found input(s) in $artifacts (exit $status; see $log)"
    fi
    printf '%-16s %8s %14s %10s %8s %s\n' "$target" "$ran" "${execs:-?}" "${rate:-?}" "${added:-?}" "$what" |
        tee -a "$summary"
done
echo "summary: $summary"
exit "$failed"
