# Shared by the benchmark scripts (sourced, not run).

# cpu_ticks PID: utime + stime, in clock ticks, of the process and its children (nginx's worker).
cpu_ticks() {
  local pid="$1" p t=0
  for p in "$pid" $(pgrep -P "$pid" 2>/dev/null || true); do
    t=$((t + $(awk '{ print $14 + $15 }' "/proc/$p/stat" 2>/dev/null || echo 0)))
  done
  echo "$t"
}

# cpu_us_per_request TICKS REQUESTS: µs of CPU per request, two decimals (nothing if REQUESTS is 0).
cpu_us_per_request() {
  awk -v t="$1" -v n="$2" -v hz="$(getconf CLK_TCK)" 'BEGIN { if (n > 0) printf "%.2f", t / hz * 1e6 / n }'
}

# h2load_rps LOG: the req/s h2load reported; h2load_succeeded LOG: how many requests succeeded.
h2load_rps() { sed -n 's/^finished in [^,]*, \([0-9.]*\) req\/s.*/\1/p' "$1" | head -1; }
h2load_succeeded() { sed -n 's/^requests:.* \([0-9]*\) succeeded.*/\1/p' "$1" | head -1; }
