#!/usr/bin/env bash
# bench/run-all.sh - runs the benchmark suite and keeps everything in one dated folder.
# docs/BENCHMARKS.md ("How to run the suite and read its results") explains the folder.
set -uo pipefail
export LC_ALL=C
HERE="$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)"
REPO="$(cd "$HERE/.." && pwd)"
STEPS="ring shm udp shm-wakeup udp-wakeup rate feed itch rdma latency"

usage() {
  cat <<EOF
Usage: bench/run-all.sh [--preset small|full] [--out DIR] [--build DIR] [--only LIST] [--skip LIST]

Runs every benchmark program of build/bin, each next to the floor it measures in the same run,
and writes one folder: machine.txt, STEP.txt (stdout) / STEP.err (stderr) / STEP.json of every
step, the rate sweep's and pollux-latency's PNGs, steps.tsv and summary.md (the headline
figures with their floors and ratios).

  --preset small|full  small (default): short counts, one run per case, the RDMA VM left out:
                       a few minutes, for a quick look or a CI-sized check. full: every
                       program's default (documented reference) counts and runs, RDMA in
                       the Soft-RoCE VM (roughly 30-60 minutes on a 2-vCPU machine)
  --out DIR            the results folder (default: results/<UTC date-time>, not committed)
  --build DIR          the build folder whose bin/ holds the programs (default: build)
  --only LIST          run only these steps (comma-separated)
  --skip LIST          leave these steps out (comma-separated)
  --help               this text

Steps: ${STEPS// /, }
  ring        pollux-bench-ring: SPSC rings, throughput and round trip; floor: bare cache line
  shm         pollux-bench-shm: shm RTT inline/dedicated, throughput; floor: bare cache line
  udp         pollux-bench-udp: UDP RTT (API, endpoints, poller source), multicast throughput;
              floors: bare sockets (busy, blocking, epoll)
  shm-wakeup  pollux-bench-shm-wakeup: interrupt-mode wakeups; floors: bare futex ping-pong/chain
  udp-wakeup  pollux-bench-udp-wakeup: interrupt-mode poller wakeup; floors: bare epoll wakeups
  rate        bench/rate/run.sh: open-loop fixed-rate sweep + RTT mode, CPU%, PNGs (no floor)
  feed        pollux-bench-feed: pollux-feed end to end, replay rate and publish-to-book latency
  itch        pollux-bench-itch: ITCH parse and book throughput, one core
  rdma        Pollux RC ping-pong next to ib_send_lat (the floor), in the Soft-RoCE VM
              (tests/rdma/run-in-vm.sh); full preset or --only rdma; skipped when the VM image
              is not prepared (tests/rdma/run-in-vm.sh --setup)
  latency     pollux-latency (the stage decomposition) on shm and UDP, when it is built
A step still running after STEP_TIMEOUT seconds (environment; default 150 in small, 3600 in
full) is stopped and reported as failed.
Exit status: 0 when every step that ran succeeded, 1 otherwise (summary.md lists them); 64 for
a bad command line.
EOF
}

die_usage() { echo "run-all.sh: $* (see --help)" >&2; exit 64; }

ARGS="$*"
PRESET=small OUT="" BUILD="$REPO/build" ONLY="" SKIP=""
while [ $# -gt 0 ]; do
  flag=$1 val=""
  case "$flag" in
    --help|-h) usage; exit 0 ;;
    --*=*) val=${flag#*=}; flag=${flag%%=*} ;;
    --preset|--out|--build|--only|--skip)
      [ $# -ge 2 ] || die_usage "$flag needs a value"
      val=$2; shift ;;
    *) die_usage "unknown flag \"$flag\"" ;;
  esac
  shift
  [ -n "$val" ] || die_usage "$flag: empty value"
  case "$flag" in
    --preset) case "$val" in small|full) PRESET=$val ;; *) die_usage "--preset: small or full, got \"$val\"" ;; esac ;;
    --out) OUT=$val ;;
    --build) BUILD=$val ;;
    --only) ONLY=$val ;;
    --skip) SKIP=$val ;;
    *) die_usage "unknown flag \"$flag\"" ;;
  esac
done
for l in "$ONLY" "$SKIP"; do
  for s in ${l//,/ }; do
    case " $STEPS " in *" $s "*) ;; *) die_usage "unknown step \"$s\" (steps: ${STEPS// /,})" ;; esac
  done
done
BIN="$(cd "$BUILD" 2>/dev/null && pwd)/bin" || die_usage "--build: no folder $BUILD"
[ -d "$BIN" ] || { echo "run-all.sh: $BIN does not exist (build first: cmake --build build)" >&2; exit 1; }
command -v python3 >/dev/null || { echo "run-all.sh: python3 missing (scripts/install-deps.sh)" >&2; exit 1; }
[ -n "$OUT" ] || OUT="$REPO/results/$(date -u +%Y-%m-%dT%H%M%SZ)"
mkdir -p "$OUT" || exit 1
OUT="$(cd "$OUT" && pwd)"

wanted() { # wanted STEP: in --only (when given) and not in --skip
  [ -z "$ONLY" ] || case ",$ONLY," in *",$1,"*) ;; *) return 1 ;; esac
  case ",$SKIP," in *",$1,"*) return 1 ;; esac
}
small() { [ "$PRESET" = small ]; }
if small; then STEP_TIMEOUT=${STEP_TIMEOUT:-150}; else STEP_TIMEOUT=${STEP_TIMEOUT:-3600}; fi

# ---- machine.txt ---------------------------------------------------------------------------
{
  echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  echo "preset: $PRESET"
  echo "command: $0 $ARGS"
  echo "commit: $(git -C "$REPO" rev-parse HEAD 2>/dev/null || echo '?')$(git -C "$REPO" diff --quiet HEAD 2>/dev/null || echo ' (uncommitted changes)')"
  echo "build: $BIN"
  echo "load before: $(cat /proc/loadavg)"
  echo "uname -a: $(uname -a)"
  echo "kernel cmdline: $(cat /proc/cmdline 2>/dev/null)"
  gov=$(cat /sys/devices/system/cpu/cpu*/cpufreq/scaling_governor 2>/dev/null | sort | uniq -c | awk '{printf "%s%s x%s", (NR > 1 ? ", " : ""), $2, $1}')
  echo "governor: ${gov:-none (no cpufreq interface: a VM, or no frequency driver)}"
  if [ -x "$BIN/pollux-bench-ring" ]; then
    echo "machine_description: $("$BIN/pollux-bench-ring" --machine 2>&1)"
  fi
  echo "--- busiest processes before the run (%CPU over their lifetime)"
  ps -eo pcpu,pid,comm --sort=-pcpu 2>/dev/null | head -n 6
  echo "--- lscpu"
  lscpu 2>&1
} > "$OUT/machine.txt"
sed -n '1,11p' "$OUT/machine.txt"
printf 'step\tstatus\tseconds\tnote\n' > "$OUT/steps.tsv"
failed=0

# note STEP STATUS SECONDS NOTE
note() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >> "$OUT/steps.tsv"; }
skip() { echo "=== $1: skipped: $2"; note "$1" skipped 0 "$2"; }

# run STEP CMD...: stdout to STEP.txt (and the terminal), stderr to STEP.err.
run() {
  local step=$1; shift
  echo "=== $step: $*"
  local t0 rc
  t0=$(date +%s.%N)
  # Line-buffered stdout, so a step's progress shows through the pipe; a step that hangs is
  # stopped (with the processes it forked) after STEP_TIMEOUT seconds and reported.
  timeout -k 10 "$STEP_TIMEOUT" stdbuf -oL "$@" 2>"$OUT/$step.err" | tee "$OUT/$step.txt"
  rc=${PIPESTATUS[0]}
  local secs
  secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')
  if [ -s "$OUT/$step.err" ]; then
    echo "--- $step stderr (last lines; all in $step.err):"
    tail -n 20 "$OUT/$step.err"
  else
    rm -f "$OUT/$step.err"
  fi
  if [ "$rc" -eq 0 ]; then
    note "$step" ok "$secs" ""
  elif [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    note "$step" failed "$secs" "timed out after $STEP_TIMEOUT s (stopped; see $step.txt)"
    echo "=== $step: TIMED OUT after $STEP_TIMEOUT s"
    failed=1
  else
    note "$step" failed "$secs" "exit status $rc (see $step.err)"
    echo "=== $step: FAILED (exit status $rc)"
    failed=1
  fi
  return 0
}

# bench STEP PROGRAM ARGS...: a benchmark program of $BIN, with --json STEP.json.
bench() {
  local step=$1 prog=$2; shift 2
  wanted "$step" || return 0
  [ -x "$BIN/$prog" ] || { skip "$step" "$BIN/$prog not built"; return 0; }
  run "$step" "$BIN/$prog" "$@" --json "$OUT/$step.json"
}

if small; then
  bench ring pollux-bench-ring --count 2000000 --runs 1
  bench shm pollux-bench-shm --count 50000 --runs 1
  # ep-busy and ep-block (inline endpoints without the API) are left out: they can hang, both
  # processes waiting with nothing in flight (seen 2026-12-01, cause not found; docs/BENCHMARKS.md);
  # in the full preset the step timeout catches that.
  bench udp pollux-bench-udp --count 20000 --warmup 2000 --runs 1 --tput-count 2000000 \
    --cases bare-busy,api-busy,src-busy,bare-block,bare-epoll,src-block,tput-inline,tput-dedicated
  bench shm-wakeup pollux-bench-shm-wakeup --count 10000
  bench udp-wakeup pollux-bench-udp-wakeup --count 2000 --runs 1
else
  bench ring pollux-bench-ring --count 20000000 --runs 3
  bench shm pollux-bench-shm --count 300000 --runs 3
  bench udp pollux-bench-udp
  bench shm-wakeup pollux-bench-shm-wakeup
  bench udp-wakeup pollux-bench-udp-wakeup
fi

if wanted rate; then
  if [ -x "$BIN/pollux-bench-rate" ]; then
    # run.sh writes rate/{machine.txt,sweep.txt,sweep.json,rtt.txt,rtt.json,*.png}.
    if small; then
      # (IDLE_FLAGS: run.sh's idle run, where run.sh has one: 1 s per point instead of 10.)
      run rate env BIN="$BIN/pollux-bench-rate" RTT_FLAGS="--strategies busy-spin,interrupt,adaptive" \
        IDLE_FLAGS="--idle 1 --strategies busy-spin,interrupt,adaptive" "$REPO/bench/rate/run.sh" "$OUT/rate" --quick
    else
      run rate env BIN="$BIN/pollux-bench-rate" "$REPO/bench/rate/run.sh" "$OUT/rate"
    fi
  else
    skip rate "$BIN/pollux-bench-rate not built"
  fi
fi

if small; then
  bench feed pollux-bench-feed --messages 2000000 --reps 1 --latency-messages 1000000
  bench itch pollux-bench-itch --messages 1000000 --min-time 0.1
else
  bench feed pollux-bench-feed
  bench itch pollux-bench-itch
fi

if wanted rdma; then
  vm_work=${RXEVM_WORK:-$REPO/build/rxevm}
  if small && [ -z "$ONLY" ]; then
    skip rdma "not in the small preset (it boots the Soft-RoCE VM: minutes under emulation); --preset full or --only rdma"
  elif [ ! -x "$BIN/pollux-bench-rdma-pingpong" ]; then
    skip rdma "$BIN/pollux-bench-rdma-pingpong not built (the RDMA transport is configured out)"
  elif [ ! -s "$vm_work/ready" ]; then
    skip rdma "the Soft-RoCE VM image is not prepared ($vm_work/ready missing: tests/rdma/run-in-vm.sh --setup)"
  elif ! command -v ib_send_lat >/dev/null; then
    skip rdma "perftest's ib_send_lat (the floor) is not installed (scripts/install-deps.sh --test)"
  else
    if small; then rounds=1 iters=1000; else rounds=3 iters=5000; fi
    # The guest sees the host's / read-only: its stdout is what comes back (bench-pingpong.sh's
    # table), turned into rdma.json below.
    run rdma env RXEVM_QUIET=1 "$REPO/tests/rdma/run-in-vm.sh" \
      "BUILD='$(dirname "$BIN")' ITERS=$iters '$REPO/tests/rdma/bench-pingpong.sh' $rounds"
    python3 "$HERE/run-all-summary.py" --rdma-json "$OUT/rdma.txt" > "$OUT/rdma.json" || rm -f "$OUT/rdma.json"
  fi
fi

if wanted latency; then
  if [ -x "$BIN/pollux-latency" ]; then
    if small; then n=20000; else n=200000; fi
    for t in shm udp; do
      mkdir -p "$OUT/latency-$t"
      run "latency-$t" "$BIN/pollux-latency" --set "transport.kind=$t" --count "$n" \
        --json "$OUT/latency-$t.json" --hgrm "$OUT/latency-$t.hgrm" --plot "$OUT/latency-$t"
    done
    if ! small; then
      # UDP busy-poll vs blocking receive (the switch between them), interleaved pairs in one invocation.
      # Inline mode: the application thread is the receiver, so busy-spin is user-space polling
      # of the socket and interrupt is a blocking epoll wait. (With dedicated pollers a
      # busy-spinning poller and its application thread share a CPU on 2 cores and take turns by
      # scheduler time slices: milliseconds per hop, which measures the scheduler.)
      mkdir -p "$OUT/latency-udp-ab"
      run latency-udp-ab "$BIN/pollux-latency" --set transport.kind=udp --set runtime.threading=inline \
        --count 50000 --ab runtime.idle=busy-spin,interrupt --json "$OUT/latency-udp-ab.json" --plot "$OUT/latency-udp-ab"
    fi
  else
    skip latency "$BIN/pollux-latency is not built (tools/latency; cmake --build build --target pollux-latency)"
  fi
fi

echo "load after: $(cat /proc/loadavg)" >> "$OUT/machine.txt"
python3 "$HERE/run-all-summary.py" "$OUT" > "$OUT/summary.md" || { echo "run-all.sh: summary.md failed" >&2; failed=1; }
echo "=== results in $OUT (summary.md)"
exit $failed
