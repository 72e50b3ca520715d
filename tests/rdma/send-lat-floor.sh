#!/usr/bin/env bash
# tests/rdma/send-lat-floor.sh - the verbs latency floor Pollux's RDMA
# benchmark is compared against: perftest's ib_send_lat (RC SEND ping-pong,
# 2-byte messages) rxe0 -> rxe1 over the veth wire, repeated RUNS times in one
# VM boot.  Runs INSIDE the rxe VM:
#     tests/rdma/run-in-vm.sh 'tests/rdma/send-lat-floor.sh 3'
# Knobs: ITERS=2000 (-n), SIZE=2 (-s), EXTRA="" (more ib_send_lat flags), LOOPBACK=1 (both sides
# on rxe0, 10.0.0.1 -> 10.0.0.1: the floor of pollux-latency, whose two processes share rxe0).
# Prints one line per run and side: t_min t_typical(p50) t_avg p99 p99.9 (usec).
# A side whose TSC calibration failed under TCG (a row of inf) is marked n/a.
set -u
export LC_ALL=C
RUNS="${1:-3}"; ITERS="${ITERS:-2000}"; SIZE="${SIZE:-2}"; T="${T:-180}"
SDEV=rxe1; SADDR=10.0.0.2
[ "${LOOPBACK:-0}" = 1 ] && { SDEV=rxe0; SADDR=10.0.0.1; }
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
[ -e /sys/class/infiniband/rxe1 ] || { echo "run me inside the rxe VM (tests/rdma/run-in-vm.sh)" >&2; exit 2; }

row() { # row <file>: "t_min t_typical t_avg p99 p99.9" or n/a
  awk '/t_typical/{h=1; next}
       h && $1 ~ /^[0-9]+$/ && NF >= 9 {
         if ($5 ~ /^[0-9.]+$/) printf "t_min=%s t_typical=%s t_avg=%s p99=%s p99.9=%s", $3, $5, $6, $8, $9
         else printf "n/a (%s)", $5
         found=1; exit }
       END { if (!found) printf "n/a (no table)" }' "$1"
}

echo "ib_send_lat -x 1 -F -n $ITERS -s $SIZE ${EXTRA:-}: rxe0 (client, 10.0.0.1) -> $SDEV (server, $SADDR); $(nproc) vCPU, kernel $(uname -r)"
fail=0
for i in $(seq 1 "$RUNS"); do
  # shellcheck disable=SC2086
  timeout "$T" ib_send_lat -d "$SDEV" -x 1 -F -n "$ITERS" -s "$SIZE" ${EXTRA:-} > "$tmp/s" 2>&1 & sp=$!
  sleep 1
  # shellcheck disable=SC2086
  timeout "$T" ib_send_lat -d rxe0 -x 1 -F -n "$ITERS" -s "$SIZE" ${EXTRA:-} "$SADDR" > "$tmp/c" 2>&1; crc=$?
  wait "$sp"; src=$?
  echo "run $i client: $(row "$tmp/c")"
  echo "run $i server: $(row "$tmp/s")"
  if [ "$crc" != 0 ] || [ "$src" != 0 ]; then
    fail=1; echo "run $i FAILED (client rc=$crc, server rc=$src)"; tail -n 5 "$tmp/c" "$tmp/s"
  fi
  [ "${VERBOSE:-0}" = 1 ] && cat "$tmp/c" "$tmp/s"
done
exit "$fail"
