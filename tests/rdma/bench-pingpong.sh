#!/usr/bin/env bash
# tests/rdma/bench-pingpong.sh - the RDMA latency benchmark: Pollux RC ping-pong
# (build/bin/pollux-bench-rdma-pingpong) next to perftest's ib_send_lat, rxe0 -> rxe1 over the
# veth wire, interleaved in ONE VM boot (the floor moves ~1.5x between boots). Runs INSIDE the VM:
#     tests/rdma/run-in-vm.sh 'tests/rdma/bench-pingpong.sh 3'
# Each round: ib_send_lat (2-byte SEND ping-pong, -n ITERS), then Pollux inline, then Pollux
# dedicated. Both report half the round trip (ib_send_lat's t_typical is the median of RTT/2);
# the figure that matters is the ratio of medians, Pollux / ib_send_lat, per round.
# Knobs: ITERS=5000, SIZE=2, BUILD=<repo>/build, DEDICATED_IDLE=yield (busy-spin pollers would
# need 4 vCPUs: 2 processes x (application thread + poller) on the VM's 2). DEDICATED_IDLE may
# list several modes ("yield interrupt"): one dedicated column per mode, e.g. interrupt-mode
# pollers (woken by the CQ's completion channel) next to polling ones and to inline, where the
# application thread busy-polls the CQ itself (the busy-spin reference on 2 vCPUs).
set -u
export LC_ALL=C
ROUNDS="${1:-3}"; ITERS="${ITERS:-5000}"; SIZE="${SIZE:-2}"; T="${T:-300}"
HERE="$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)"
BUILD="${BUILD:-$HERE/../../build}"
PP="$BUILD/bin/pollux-bench-rdma-pingpong"
IDLE="${DEDICATED_IDLE:-yield}"
[ -e /sys/class/infiniband/rxe1 ] || { echo "run me inside the rxe VM (tests/rdma/run-in-vm.sh)" >&2; exit 2; }
[ -x "$PP" ] || { echo "missing $PP (build it: cmake --build build --target pollux-bench-rdma-pingpong)" >&2; exit 2; }
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
port=7600

floor() { # one ib_send_lat run -> t_typical (median of RTT/2) from a side with finite numbers
  timeout "$T" ib_send_lat -d rxe1 -x 1 -F -n "$ITERS" -s "$SIZE" > "$tmp/s" 2>&1 & local sp=$!
  sleep 1
  timeout "$T" ib_send_lat -d rxe0 -x 1 -F -n "$ITERS" -s "$SIZE" 10.0.0.2 > "$tmp/c" 2>&1
  wait "$sp"
  local f v
  for f in "$tmp/c" "$tmp/s"; do
    v="$(awk '/t_typical/{h=1; next} h && $1 ~ /^[0-9]+$/ && NF >= 9 { if ($5 ~ /^[0-9.]+$/) print $5; exit }' "$f")"
    [ -n "$v" ] && { echo "$v"; return 0; }
  done
  echo "n/a"; tail -n 3 "$tmp/c" "$tmp/s" >&2
}

pollux() { # pollux <threading> [idle] -> half-RTT median (us), full RESULT line to stderr
  local th="$1" IDLE="${2:-yield}" s=$((port)) c=$((port + 1)) pin_s=() pin_c=(); port=$((port + 2))
  # Dedicated: each process keeps its application thread and its poller on one vCPU.
  [ "$th" = dedicated ] && { pin_s=(--cpu 1 --poller-cpu 1); pin_c=(--cpu 0 --poller-cpu 0); }
  timeout "$T" "$PP" server --threading "$th" --idle "$IDLE" --device rxe1 --listen "$s" --peer "10.0.0.1:$c" \
    --iters "$ITERS" --size "$SIZE" "${pin_s[@]}" > "$tmp/ps" 2>&1 & local sp=$!
  timeout "$T" "$PP" client --threading "$th" --idle "$IDLE" --device rxe0 --listen "$c" --peer "10.0.0.2:$s" \
    --iters "$ITERS" --size "$SIZE" "${pin_c[@]}" > "$tmp/pc" 2>&1
  wait "$sp"
  local line; line="$(grep '^RESULT' "$tmp/pc")"
  if [ -z "$line" ]; then echo "n/a"; tail -n 5 "$tmp/pc" "$tmp/ps" >&2; return; fi
  echo "$line" >&2
  [ "${VERBOSE:-0}" = 1 ] && cat "$tmp/pc" >&2
  sed -n 's/.*half_rtt_p50_us=\([0-9.]*\).*/\1/p' <<<"$line"
}

echo "RDMA ping-pong, $(nproc) vCPU, kernel $(uname -r), $ITERS iterations, $SIZE-byte payload; dedicated pollers idle=$IDLE"
hdr="$(printf '%-6s %12s %12s' round ib_send_lat inline)"
for m in $IDLE; do hdr+="$(printf ' %12s' "ded-$m")"; done
hdr+="$(printf ' %9s' inline/x)"
for m in $IDLE; do hdr+="$(printf ' %9s' "$m/x")"; done
echo "$hdr"
ratio() { [ "$1" != n/a ] && [ "$2" != n/a ] && awk -v a="$1" -v b="$2" 'BEGIN{printf "%.2f", a/b}' || echo n/a; }
for r in $(seq 1 "$ROUNDS"); do
  f="$(floor)"; i="$(pollux inline)"; ds=()
  for m in $IDLE; do ds+=("$(pollux dedicated "$m")"); done
  line="$(printf '%-6s %12s %12s' "$r" "$f" "$i")"
  for d in "${ds[@]}"; do line+="$(printf ' %12s' "$d")"; done
  line+="$(printf ' %9s' "$(ratio "$i" "$f")")"
  for d in "${ds[@]}"; do line+="$(printf ' %9s' "$(ratio "$d" "$f")")"; done
  echo "$line"
done
echo "(medians of RTT/2 in usec; ratio = Pollux / ib_send_lat in the same round)"
