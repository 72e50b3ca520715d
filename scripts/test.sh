#!/usr/bin/env bash
# The second quick-start command: installs what is missing, builds, and runs every test
# through ctest (unit, multi-process, network-namespace and - in a Soft-RoCE VM - RDMA tests),
# then the same suite under ASan+UBSan, the concurrency tests under TSan, and every libFuzzer
# harness for a bounded time. CI (.ci/run) runs exactly this. With CI=true warnings are errors.
#
#   scripts/test.sh [--stages LIST] [--fuzz-seconds N] [-- CTEST-ARGS...]
#
# Stages (default: all, in this order; each has its own build folder):
#   format   every C/C++ source file matches .clang-format (scripts/check-format.sh; seconds)
#   release  build/       Release build, every test (the RDMA VM suite included; install_shared also
#                         compiles a shared libpollux in build/install-test/shared-build)
#   asan     build-asan/  ASan+UBSan build, every test except the VM suite, the install tests
#                         and the malloc-interposing data-path probe (reasons in their CMakeLists)
#   tsan     build-tsan/  TSan build of the threaded programs: rings, pool, shm, API, UDP, the exchange,
#                         the feed handler's capture writer, the recorder's thread, late join
#   fuzz     build-fuzz/  clang libFuzzer harnesses (tests/fuzz), N seconds each (default 30)
# A sanitizer report aborts the test that triggered it, so the stage fails.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; }
stages="format,release,asan,tsan,fuzz"
fuzz_seconds=30
ctest_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --stages) stages="${2:?--stages needs a list, e.g. release,asan}"; shift 2 ;;
    --stages=*) stages="${1#*=}"; shift ;;
    --fuzz-seconds) fuzz_seconds="${2:?--fuzz-seconds needs a number}"; shift 2 ;;
    --fuzz-seconds=*) fuzz_seconds="${1#*=}"; shift ;;
    --) shift; ctest_args=("$@"); break ;;
    *) echo "test.sh: unknown argument '$1' (ctest arguments go after --; see --help)" >&2; exit 64 ;;
  esac
done
IFS=',' read -r -a stage_list <<<"$stages"
for s in "${stage_list[@]}"; do
  case "$s" in format|release|asan|tsan|fuzz) ;; *) echo "test.sh: unknown stage '$s' (format, release, asan, tsan, fuzz)" >&2; exit 64 ;; esac
done

bash scripts/install-deps.sh --test
werror=OFF
if [ "${CI:-}" = "true" ]; then werror=ON; fi
jobs=$(nproc 2>/dev/null || echo 2)

# Sanitizer reports end the process with a non-zero status and a stack; leaks are reports too.
export ASAN_OPTIONS="${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
export TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}"

# Programs the TSan stage builds and runs (their ctest label is the program name).
TSAN_PROGRAMS=(ring_test pool_test poller_test controller_test clock_topology_test shm_log_test shm_segment_test shm_ipc_test
               shm_hardening_test api_test udp_transport_test udp_reliability_test exchange_test contract_test
               feed_pcap_test recording_test late_join_test)

failed=()
stage_time() { printf '[test] stage %s: %s in %d s\n' "$1" "$2" "$(( $(date +%s) - $3 ))"; }

run_stage() {
  local s=$1
  echo "[test] ===== stage $s ====="
  case "$s" in
    format)
      bash scripts/check-format.sh ;;
    release)
      bash scripts/build.sh -DPOLLUX_WERROR="$werror"
      # Serial: several tests run two or three busy processes, and the machine may have 2 cores.
      ctest --test-dir build --output-on-failure --timeout 2400 "${ctest_args[@]}" ;;
    asan)
      cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Release -DPOLLUX_WERROR="$werror" \
            -DPOLLUX_SANITIZE=address,undefined -DPOLLUX_BUILD_BENCH=OFF >/dev/null
      cmake --build build-asan -j"$jobs"
      ctest --test-dir build-asan --output-on-failure --timeout 2400 "${ctest_args[@]}" ;;
    tsan)
      cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=Release -DPOLLUX_WERROR="$werror" \
            -DPOLLUX_SANITIZE=thread -DPOLLUX_BUILD_BENCH=OFF -DPOLLUX_WITH_RDMA=OFF >/dev/null
      cmake --build build-tsan -j"$jobs" --target "${TSAN_PROGRAMS[@]}" pollux-test-peer
      local re
      re="^($(IFS='|'; echo "${TSAN_PROGRAMS[*]}"))\$"
      ctest --test-dir build-tsan --output-on-failure --timeout 2400 -L "$re" "${ctest_args[@]}" ;;
    fuzz)
      bash scripts/fuzz.sh --seconds "$fuzz_seconds" ;;
  esac
}

for s in "${stage_list[@]}"; do
  t0=$(date +%s)
  if run_stage "$s"; then stage_time "$s" passed "$t0"; else stage_time "$s" FAILED "$t0"; failed+=("$s"); fi
done
if [ ${#failed[@]} -ne 0 ]; then
  echo "[test] FAILED stages: ${failed[*]}"
  exit 1
fi
echo "[test] all stages passed: ${stages}"
