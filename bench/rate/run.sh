#!/usr/bin/env bash
# Runs the fixed-rate sweep and the RTT mode of pollux-bench-rate and keeps everything in one
# directory: machine.txt (lscpu summary, kernel, date, load), sweep.txt/sweep.json, the PNGs
# (one per transport and mode), rtt.txt/rtt.json, idle.txt/idle.json (10 s without traffic
# per strategy), targets.txt (bench/rate/targets.py: the dominance / 100k verdicts).
#
#   bench/rate/run.sh [OUT_DIR] [flags for both runs, e.g. --quick --strategies busy-spin,yield]
#
# OUT_DIR defaults to build/rate-results; BIN overrides the binary (default
# build/bin/pollux-bench-rate). Extra flags go to both runs, so both accept the same ones;
# SWEEP_FLAGS / RTT_FLAGS / IDLE_FLAGS add flags to one run only (the idle run takes only
# IDLE_FLAGS, default "--idle 10"). Exit status: the first failing run's.
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${BIN:-build/bin/pollux-bench-rate}
OUT=build/rate-results
if [ $# -gt 0 ] && [ "${1#--}" = "$1" ]; then OUT=$1; shift; fi
[ -x "$BIN" ] || { echo "run.sh: $BIN not built (cmake --build build --target pollux-bench-rate)" >&2; exit 1; }
command -v gnuplot >/dev/null || echo "run.sh: gnuplot missing (scripts/install-deps.sh): no PNGs" >&2
mkdir -p "$OUT"
{
  echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  echo "kernel: $(uname -srm)"
  echo "load: $(cat /proc/loadavg)"
  lscpu | grep -E '^(Architecture|CPU\(s\)|On-line|Thread|Core|Socket|Model name|CPU MHz|L[123].? cache|NUMA node\(s\)|Hypervisor vendor|Virtualization type)' || true
  echo "command: $BIN $* ${SWEEP_FLAGS:-}  /  --rtt $* ${RTT_FLAGS:-}"
} > "$OUT/machine.txt"
cat "$OUT/machine.txt"
rc=0
# shellcheck disable=SC2086
"$BIN" --json "$OUT/sweep.json" --plot "$OUT" "$@" ${SWEEP_FLAGS:-} | tee "$OUT/sweep.txt" || rc=$?
# shellcheck disable=SC2086
"$BIN" --rtt --json "$OUT/rtt.json" "$@" ${RTT_FLAGS:-} | tee "$OUT/rtt.txt" || { [ $rc -ne 0 ] || rc=$?; }
# shellcheck disable=SC2086
"$BIN" --json "$OUT/idle.json" ${IDLE_FLAGS:---idle 10} | tee "$OUT/idle.txt" || { [ $rc -ne 0 ] || rc=$?; }
if command -v python3 >/dev/null; then
  python3 bench/rate/targets.py "$OUT/sweep.json" | tee "$OUT/targets.txt" || { [ $rc -ne 0 ] || rc=$?; }
fi
echo "results in $OUT"
exit $rc
