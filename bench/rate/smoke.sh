#!/usr/bin/env bash
# Smoke test of pollux-bench-rate (ctest: bench_rate_smoke). Checks what does not depend on
# timing: flag handling and exit statuses, a rejected strategy reported and skipped, and that
# tiny points over shm and UDP deliver every message and write well-formed output.
#   bench/rate/smoke.sh path/to/pollux-bench-rate
set -euo pipefail
BIN=$1
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "bench_rate_smoke: FAIL: $*" >&2; exit 1; }

"$BIN" --help >"$T/help" || fail "--help exited $?"
grep -q -- "--strategies" "$T/help" || fail "--help does not describe --strategies"
set +e
"$BIN" --no-such-flag >/dev/null 2>"$T/err"; rc=$?
set -e
[ $rc -eq 64 ] || fail "unknown flag exited $rc, want 64"
grep -q "unknown flag" "$T/err" || fail "unknown flag not named: $(cat "$T/err")"

# --drain: generous, the subscriber stops as soon as everything arrived.
tiny=(--rates 1k --duration 0.05 --warmup 0.01 --drain 10)
set +e
"$BIN" "${tiny[@]}" --transports shm --modes inline --strategies not-a-strategy,yield \
  --json "$T/r.json" >"$T/out" 2>"$T/err"; rc=$?
set -e
[ $rc -eq 1 ] || fail "rejected strategy exited $rc, want 1"
grep -q 'strategy "not-a-strategy" skipped' "$T/err" || fail "rejection not reported: $(cat "$T/err")"
grep -q 'runtime.idle' "$T/err" || fail "the config's message (runtime.idle) not passed on: $(cat "$T/err")"
"$BIN" "${tiny[@]}" --transports shm --modes inline --strategies not-a-strategy,yield --allow-missing \
  >/dev/null 2>&1 || fail "--allow-missing still exits nonzero"

"$BIN" "${tiny[@]}" --transports shm,udp --modes inline,dedicated --strategies yield \
  --json "$T/r.json" >"$T/out" || fail "sweep exited $?: $(cat "$T/out")"
[ "$(grep -c '"kind": "rate"' "$T/r.json")" -eq 4 ] || fail "want 4 JSON points: $(cat "$T/r.json")"
grep -q '"error": ""' "$T/r.json" || fail "points failed: $(cat "$T/r.json")"
! grep -q '"error": "[^"]' "$T/r.json" || fail "a point failed: $(grep '"error": "[^"]' "$T/r.json")"
# Every point: sent == received == 60 (50 measured + 10 warm-up), nothing lost or unsent.
while read -r line; do
  for kv in '"sent": 60,' '"received": 60,' '"measured": 50,' '"lost": 0,' '"unsent": 0,'; do
    case "$line" in *"$kv"*) ;; *) fail "point without $kv: $line" ;; esac
  done
done <"$T/r.json"
if command -v python3 >/dev/null; then
  python3 -c 'import json,sys; [json.loads(l) for l in open(sys.argv[1])]' "$T/r.json" || fail "JSON does not parse"
fi

"$BIN" --rtt --rtt-duration 0.05 --warmup 0.01 --rtt-timeout-ms 20000 --transports shm --strategies yield --json "$T/t.json" \
  >"$T/out" || fail "rtt exited $?: $(cat "$T/out")"
grep -q '"kind": "rtt"' "$T/t.json" || fail "no rtt point: $(cat "$T/t.json")"
grep -q '"replies": 12,' "$T/t.json" || fail "want 12 replies (10 measured + 2 warm-up): $(cat "$T/t.json")"

# --idle: one message, then silence; the subscriber must have got it (else the point errors)
# and nothing after it; inline mode is refused (it has no poller to measure).
"$BIN" --idle 0.2 --transports shm,udp --strategies interrupt --set runtime.sleep_timer_ms=20 --json "$T/i.json" \
  >"$T/out" || fail "idle exited $?: $(cat "$T/out")"
[ "$(grep -c '"kind": "idle"' "$T/i.json")" = 2 ] || fail "want 2 idle points: $(cat "$T/i.json")"
grep -q '"stray_messages": 0,' "$T/i.json" || fail "stray messages in an idle window: $(cat "$T/i.json")"
[ "$(grep -c '"error": ""' "$T/i.json")" = 2 ] || fail "idle point failed: $(cat "$T/i.json")"
"$BIN" --idle 1 --modes inline >/dev/null 2>&1 && fail "--idle with inline mode accepted"
"$BIN" --set nodot=1 >/dev/null 2>&1 && fail "--set without SECTION.KEY accepted"
if command -v python3 >/dev/null; then
  python3 "$(dirname "$0")/targets.py" "$T/r.json" >"$T/targets" || fail "targets.py failed on the sweep's JSON"
  grep -q "summary" "$T/targets" || fail "targets.py printed no summary: $(cat "$T/targets")"
fi

if command -v gnuplot >/dev/null; then
  "$BIN" "${tiny[@]}" --transports shm --modes inline --strategies yield,busy-spin --plot "$T/plots" \
    >/dev/null || fail "--plot exited $?"
  [ -s "$T/plots/rate-shm-inline.png" ] || fail "no PNG written"
fi
echo "bench_rate_smoke: ok"
