#!/usr/bin/env bash
# tests/rdma/run-vm-suite.sh - Pollux's RDMA test suite entry point (ctest test
# "rdma_vm_suite").  Boots ONE Soft-RoCE VM (tests/rdma/run-in-vm.sh) and runs
# every RDMA test program inside it:
#   * tests/rdma/smoke.sh                  (rxe devices, verbs, perftest, wire)
#   * <build>/bin/rdma_*_test              (GoogleTest binaries, if built)
#
# Usage:  run-vm-suite.sh [BUILD_DIR]       (default <repo>/build)
#
# Last line: "N passed, M failed, K skipped" (counted per test program).
# Exit: 0 all ran and passed, 1 something failed, 77 the VM cannot run on this
# host (probe failed: a loud "RDMA TESTS SKIPPED: <reason>" banner is printed;
# ctest reports the test as Skipped via SKIP_RETURN_CODE 77).
#
# Knobs (environment)
#   POLLUX_RDMA_REQUIRE=1       VM unavailable is a FAILURE (exit 1), not a skip
#   POLLUX_RDMA_SKIP=1          skip deliberately (still loud, exit 77)
#   POLLUX_RDMA_FILTER=<ERE>    only run programs whose name matches
#   POLLUX_RDMA_EXPECT="a b"    programs that must exist in <build>/bin (set by ctest)
#   POLLUX_RDMA_NOT_BUILT=1     the build has no RDMA transport: loud skip (set by ctest)
#   POLLUX_RDMA_TEST_TIMEOUT=900  seconds per program inside the VM
#   POLLUX_RDMA_GTEST_ARGS="--gtest_brief=1"  extra args for the gtest binaries
#   GTEST_FILTER etc. are passed into the guest; so is anything in RXEVM_PASSENV.
#   RXEVM_TIMEOUT (default here 2100 s, under ctest's 2400 s) and every other
#   RXEVM_* knob of run-in-vm.sh (RXEVM_WORK = setup cache, default <repo>/build/rxevm).
set -u -o pipefail
export LC_ALL=C
HERE="$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"

# ------------------------------------------------------------ guest side --
# run-vm-suite.sh --guest <results file> <name>=<program> ...   (inside the VM)
if [ "${1:-}" = --guest ]; then
  results="$2"; shift 2
  tt="${POLLUX_RDMA_TEST_TIMEOUT:-900}"
  out="$(mktemp)"; n=$#; i=0
  for spec in "$@"; do
    i=$((i+1)); name="${spec%%=*}"; prog="${spec#*=}"
    echo "================ [$i/$n] $name"
    t0=$(date +%s.%N)
    case "$prog" in
      *.sh) timeout -k 10 "$tt" bash "$prog" < /dev/null 2>&1 | tee "$out" ;;
      *)    # shellcheck disable=SC2086  # word-split the extra gtest args
            timeout -k 10 "$tt" "$prog" ${POLLUX_RDMA_GTEST_ARGS---gtest_brief=1} < /dev/null 2>&1 | tee "$out" ;;
    esac
    rc=${PIPESTATUS[0]}
    dt=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')
    detail=""
    # gtest's closing counts: "[  PASSED  ] 2 tests." "[  SKIPPED ] 1 test, listed below:"
    gp="$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$out" | tail -1)"
    gs="$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' "$out" | tail -1)"
    # (--gtest_brief=1 prints no FAILED count: count the per-test "[  FAILED  ] A.B (N ms)")
    gf="$(grep -cE '^\[  FAILED  \] [^ ]+ \([0-9]+ ms\)' "$out")"; [ "$gf" = 0 ] && gf=""
    gt=""; [ -n "$gp$gs$gf" ] && gt="gtest: ${gp:-0} passed, ${gf:-0} failed, ${gs:-0} skipped"
    if [ "$rc" = 0 ]; then
      verdict=PASS; detail="$gt"
      if [ "$gp" = 0 ]; then verdict=SKIP; detail="${gt}: no test passed"; fi
    elif [ "$rc" = 77 ]; then
      verdict=SKIP; detail="program exited 77"
    elif [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
      verdict=FAIL; detail="timed out after ${tt}s (POLLUX_RDMA_TEST_TIMEOUT)"
    else
      verdict=FAIL; detail="exit $rc${gt:+; $gt}"
    fi
    printf '%s\t%s\t%s\t%s\n' "$verdict" "$name" "$dt" "$detail" >> "$results"
    sync
    echo "================ $verdict $name (${dt}s${detail:+, $detail})"
  done
  rm -f "$out"
  exit 0
fi

# ------------------------------------------------------------- host side --
BUILD="${1:-$REPO/build}"
[ -d "$BUILD" ] && BUILD="$(cd "$BUILD" && pwd)"

if [ "${POLLUX_RDMA_NOT_BUILT:-0}" = 1 ]; then
  bar="###############################################################################"
  echo "$bar"
  echo "## RDMA TESTS SKIPPED: this build has no RDMA transport (POLLUX_WITH_RDMA=OFF, or"
  echo "## libibverbs-dev/librdmacm-dev missing at configure time): no rdma_*_test to run."
  echo "$bar"
  echo "0 passed, 0 failed, 1 skipped"
  exit 77
fi

names=(smoke); progs=("$HERE/smoke.sh")
for f in "$BUILD"/bin/rdma_*_test; do
  [ -f "$f" ] && [ -x "$f" ] || continue
  names+=("$(basename "$f")"); progs+=("$f")
done
# Programs the build promised (ctest sets this): one missing is a failure, not a smaller suite.
for want in ${POLLUX_RDMA_EXPECT:-}; do
  if [ ! -x "$BUILD/bin/$want" ]; then
    echo "RDMA TESTS: $BUILD/bin/$want was not built (expected by this build's configuration)"
    echo "0 passed, 1 failed, 0 skipped"
    exit 1
  fi
done
if [ -n "${POLLUX_RDMA_FILTER:-}" ]; then
  fn=(); fp=()
  for i in "${!names[@]}"; do
    [[ "${names[$i]}" =~ $POLLUX_RDMA_FILTER ]] && { fn+=("${names[$i]}"); fp+=("${progs[$i]}"); }
  done
  names=("${fn[@]}"); progs=("${fp[@]}")
fi
K=${#names[@]}
if [ "$K" = 0 ]; then
  echo "RDMA TESTS: POLLUX_RDMA_FILTER='$POLLUX_RDMA_FILTER' matches no test program"
  echo "0 passed, 0 failed, 1 skipped"
  exit 77
fi

skip() { # skip <reason>: loud banner, skip code (or failure if required)
  local bar="###############################################################################"
  echo "$bar"
  echo "## RDMA TESTS SKIPPED: $1"
  echo "## not run ($K): ${names[*]}"
  echo "## The RDMA tests need qemu-system-x86_64 + Debian's kernel (Soft-RoCE VM, see"
  echo "## tests/rdma/README.md).  POLLUX_RDMA_REQUIRE=1 turns this skip into a failure."
  echo "$bar"
  if [ "${POLLUX_RDMA_REQUIRE:-0}" = 1 ]; then
    echo "POLLUX_RDMA_REQUIRE=1: counting the RDMA tests as FAILED"
    echo "0 passed, $K failed, 0 skipped"
    exit 1
  fi
  echo "0 passed, 0 failed, $K skipped"
  exit 77
}

[ "${POLLUX_RDMA_SKIP:-0}" = 1 ] && skip "disabled by POLLUX_RDMA_SKIP=1"

tmp="$(mktemp -d "${TMPDIR:-/tmp}/pollux-rdma.XXXXXX")" || skip "mktemp failed"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/share"

# 1. can a VM run here?  (one-time setup incl. package install, then a quick boot)
echo "[rdma-suite] probing the Soft-RoCE VM (first run: one-time setup, ~1 min)"
t0=$(date +%s)
if ! RXEVM_REASON_FILE="$tmp/reason" "$HERE/run-in-vm.sh" --probe > "$tmp/probe.log" 2>&1; then
  echo "----- probe log (tail)"; tail -n 15 "$tmp/probe.log"; echo "-----"
  reason="$(head -c 1500 "$tmp/reason" 2>/dev/null)"
  skip "Soft-RoCE VM unavailable on this host: ${reason:-run-in-vm.sh --probe failed}"
fi
grep '^\[rxevm\] \(ready\|probe OK\)' "$tmp/probe.log"
echo "[rdma-suite] probe took $(( $(date +%s) - t0 ))s; running $K program(s) in one VM: ${names[*]}"

# 2. one VM, every program
args=()
for i in "${!names[@]}"; do args+=("${names[$i]}=${progs[$i]}"); done
cmd="$(printf '%q ' "$HERE/run-vm-suite.sh" --guest /rxevm/share/results "${args[@]}")"
RXEVM_SHARE_DIR="$tmp/share" \
RXEVM_TIMEOUT="${RXEVM_TIMEOUT:-2100}" \
RXEVM_PASSENV="${RXEVM_PASSENV:-} POLLUX_RDMA_TEST_TIMEOUT POLLUX_RDMA_GTEST_ARGS GTEST_FILTER GTEST_REPEAT GTEST_SHUFFLE GTEST_RANDOM_SEED GTEST_ALSO_RUN_DISABLED_TESTS" \
  "$HERE/run-in-vm.sh" "$cmd" &
vpid=$!
trap 'kill -TERM "$vpid" 2>/dev/null' INT TERM HUP   # run-in-vm.sh then stops qemu
wait "$vpid"; vmrc=$?
while kill -0 "$vpid" 2>/dev/null; do wait "$vpid"; vmrc=$?; done
trap - INT TERM HUP

# 3. tally (a program with no recorded result did not run: the VM died)
passed=0; failed=0; skipped=0
echo "================ RDMA suite summary"
for name in "${names[@]}"; do
  line="$(awk -F'\t' -v n="$name" '$2 == n' "$tmp/share/results" 2>/dev/null | tail -1)"
  if [ -z "$line" ]; then
    v=FAIL; dt="-"; d="no result: the VM exited with $vmrc before it ran"
    case "$vmrc" in 124) d="$d (RXEVM_TIMEOUT)";; 125) d="$d (VM/guest setup failure)";; esac
  else
    IFS=$'\t' read -r v _ dt d <<< "$line"
  fi
  case "$v" in PASS) passed=$((passed+1));; SKIP) skipped=$((skipped+1));; *) failed=$((failed+1));; esac
  printf '%-4s %-40s %8ss  %s\n' "$v" "$name" "$dt" "$d"
done
[ "$vmrc" = 0 ] || echo "run-in-vm.sh exited $vmrc"
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" = 0 ] && [ "$vmrc" = 0 ] || exit 1
[ "$passed" -gt 0 ] || exit 77   # everything skipped inside the VM
exit 0
