# Shared by the benchmark scripts (sourced, not run).

# cpu_ticks PID: utime + stime, in clock ticks, of the process and its children (nginx's worker).
cpu_ticks() {
  local pid="$1" p t=0
  for p in "$pid" $(pgrep -P "$pid" 2>/dev/null || true); do
    t=$((t + $(awk '{ print $14 + $15 }' "/proc/$p/stat" 2>/dev/null || echo 0)))
  done
  echo "$t"
}
