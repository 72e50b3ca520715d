#!/usr/bin/env bash
# tests/rdma/latency-decomposition.sh - the RDMA side of pollux-latency (docs/BENCHMARKS.md,
# "RDMA decomposition (Soft-RoCE VM)"). Runs INSIDE the VM, in one boot:
#     RXEVM_APPEND="clocksource=tsc tsc=reliable" RXEVM_SHARE_DIR=<host dir> \
#       tests/rdma/run-in-vm.sh tests/rdma/latency-decomposition.sh
# In order: the ib_send_lat floor (send-lat-floor.sh), pollux-latency over RC (rxe0 -> rxe0,
# both processes on one host, one clock) inline then dedicated, the seed's A/B switches
# (pollux-latency --seed) inline then dedicated, the pre-registered pool vs ibv_reg_mr per
# message harness (pollux-bench-rdma-pingpong --reg-per-message, rxe0 <-> rxe1 over the veth
# wire), and the floor again. JSON files go to $RXEVM_SHARE (the host directory) or /tmp.
# Knobs: COUNT=3000 (round trips per variant), SEED_COUNT=1500 (per A/B run), PAIRS=3,
# REG_ITERS=2000, REG_PAIRS=5, STEPS="floor0 floor single seed reg floor0 floor" (a subset to run;
# also "burst": dedicated --burst 16 --ab rdma.post_batch=1,32 alone;
# floor0 = ib_send_lat rxe0 -> rxe0, the like-for-like floor of pollux-latency's rxe0 loopback).
# Emulation (TCG) makes everything ~30x slower than hardware: read ratios and shares only.
set -u
export LC_ALL=C
HERE="$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)"
BUILD="${BUILD:-$HERE/../../build}"
OUT="${RXEVM_SHARE:-/tmp}"
COUNT="${COUNT:-3000}"; SEED_COUNT="${SEED_COUNT:-1500}"; PAIRS="${PAIRS:-3}"; REG_ITERS="${REG_ITERS:-2000}"; REG_PAIRS="${REG_PAIRS:-5}"
STEPS="${STEPS:-floor0 floor single seed reg floor0 floor}"
L="$BUILD/bin/pollux-latency"
PP="$BUILD/bin/pollux-bench-rdma-pingpong"
[ -e /sys/class/infiniband/rxe0 ] || { echo "run me inside the rxe VM (tests/rdma/run-in-vm.sh)" >&2; exit 2; }
[ -x "$L" ] && [ -x "$PP" ] || { echo "build pollux-latency and pollux-bench-rdma-pingpong first" >&2; exit 2; }
RDMA=(--set transport.kind=rdma --set rdma.device=rxe0 --set 'rdma.peers=["10.0.0.1:7471"]')
n=0
step() { n=$((n + 1)); echo; echo "######## $n: $*"; }
for s in $STEPS; do
  case "$s" in
    floor)
      step "ib_send_lat floor rxe0 -> rxe1 over the veth wire (send-lat-floor.sh 3)"
      "$HERE/send-lat-floor.sh" 3 ;;
    floor0)
      step "ib_send_lat floor rxe0 -> rxe0 (LOOPBACK=1 send-lat-floor.sh 3: the device pollux-latency's two processes share)"
      LOOPBACK=1 "$HERE/send-lat-floor.sh" 3 ;;
    single)
      for th in inline dedicated; do
        step "pollux-latency RC $th, --count $COUNT"
        "$L" "${RDMA[@]}" --set runtime.threading=$th --count "$COUNT" --warmup 300 \
          --json "$OUT/rdma-$th-$n.json" --hgrm "$OUT/rdma-$th-$n.hgrm" 2>&1 | grep -v '^pollux rdma: stream'
      done ;;
    seed)
      for th in inline dedicated; do
        step "pollux-latency RC $th --seed, --count $SEED_COUNT, --pairs $PAIRS"
        "$L" "${RDMA[@]}" --set runtime.threading=$th --seed --count "$SEED_COUNT" --warmup 200 --pairs "$PAIRS" \
          --json "$OUT/rdma-seed-$th-$n.json" 2>&1 | grep -v '^pollux rdma: stream'
      done ;;
    burst)
      step "pollux-latency RC dedicated --burst 16 --ab rdma.post_batch=1,32, --count $SEED_COUNT, --pairs $PAIRS"
      "$L" "${RDMA[@]}" --set runtime.threading=dedicated --burst 16 --ab rdma.post_batch=1,32 --count "$SEED_COUNT" \
        --warmup 200 --pairs "$PAIRS" --json "$OUT/rdma-burst-dedicated-$n.json" 2>&1 | grep -v '^pollux rdma: stream' ;;
    reg)
      step "pre-registered pool vs ibv_reg_mr per message (pollux-bench-rdma-pingpong --reg-per-message)"
      p=7700
      for th in inline; do
        timeout 600 "$PP" server --threading $th --device rxe1 --listen $p --peer "10.0.0.1:$((p + 1))" \
          --iters "$REG_ITERS" --warmup 500 --reg-per-message --pairs "$REG_PAIRS" > /tmp/reg-server.out 2>&1 & sp=$!
        timeout 600 "$PP" client --threading $th --device rxe0 --listen $((p + 1)) --peer "10.0.0.2:$p" \
          --iters "$REG_ITERS" --warmup 500 --reg-per-message --pairs "$REG_PAIRS" --json "$OUT/rdma-reg-$th-$n.json" 2>&1 |
          grep -v '^pollux rdma: stream'
        wait "$sp" || { echo "server:"; tail -n 5 /tmp/reg-server.out; }
        p=$((p + 2))
      done ;;
    *) echo "unknown step $s" >&2; exit 64 ;;
  esac
done
