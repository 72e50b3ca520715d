#!/usr/bin/env bash
# Builds the libFuzzer harnesses (tests/fuzz/, clang + ASan + UBSan) and runs them.
#
#   scripts/fuzz.sh [options] [harness...]      (no harness: all of them)
#
# Each harness first replays its committed inputs (tests/fuzz/corpus/<h>/ and
# tests/fuzz/regressions/<h>/), then fuzzes for --seconds over a COPY of its seed corpus in a
# work folder (nothing generated is written into the repository). Exit status: 0 when no
# harness crashed, leaked, timed out, ran out of memory or produced a sanitizer report;
# 1 otherwise, with each crash input's path and the command that reproduces it.
set -euo pipefail
cd "$(dirname "$0")/.."

ALL=(itch_reader config udp_receiver reliability_control receive_window shm_reader rdma_ud_source counters_reader arbiter pcap_frame frame archive_segment)

usage() {
  cat <<EOF
usage: scripts/fuzz.sh [options] [harness...]

harnesses: ${ALL[*]}

options:
  --seconds N       fuzz each harness N seconds (default: 30 with CI=true, else 300)
  --jobs J          run up to J harnesses at the same time (default 1)
  --timeout S       an input running longer than S seconds is a failure (default 10)
  --rss-limit MB    memory limit per harness process (default 2048)
  --regressions     only replay the committed inputs (corpus + regressions), no fuzzing
  --pending         also replay tests/fuzz/regressions/pending/<h>/ (crashes waiting for a
                    fix: a failure there is reported, not fatal, unless --strict-pending)
  --strict-pending  a pending input that still crashes makes the run fail
  --work DIR        work folder (corpus copies, crash inputs, logs); default: a new one
                    under \${TMPDIR:-/tmp}, kept after the run
  --build-dir DIR   fuzz build folder (default build-fuzz)
  --no-build        use the binaries already in the build folder
  --make-seeds      rewrite tests/fuzz/corpus/ and tests/fuzz/config.dict from the
                    product's encoders (fuzz_make_seeds), then exit
  --list            print the harness names and exit
  -h, --help        this text
EOF
}

seconds=""
jobs=1
timeout=10
rss=2048
mode=fuzz
pending=0
strict_pending=0
work=""
build_dir=build-fuzz
build=1
harnesses=()
need_arg() { [ $# -ge 2 ] && [ -n "$2" ] || { echo "fuzz.sh: $1 needs a value (see --help)" >&2; exit 2; }; }
need_num() { [[ "$2" =~ ^[0-9]+$ ]] || { echo "fuzz.sh: $1 wants a number, got '$2'" >&2; exit 2; }; }
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) need_arg "$@"; need_num "$1" "$2"; seconds=$2; shift 2 ;;
    --jobs) need_arg "$@"; need_num "$1" "$2"; jobs=$2; shift 2 ;;
    --timeout) need_arg "$@"; need_num "$1" "$2"; timeout=$2; shift 2 ;;
    --rss-limit) need_arg "$@"; need_num "$1" "$2"; rss=$2; shift 2 ;;
    --regressions) mode=replay; shift ;;
    --pending) pending=1; shift ;;
    --strict-pending) pending=1; strict_pending=1; shift ;;
    --work) need_arg "$@"; work=$2; shift 2 ;;
    --build-dir) need_arg "$@"; build_dir=$2; shift 2 ;;
    --no-build) build=0; shift ;;
    --make-seeds) mode=seeds; shift ;;
    --list) printf '%s\n' "${ALL[@]}"; exit 0 ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "fuzz.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    *)
      found=0
      for h in "${ALL[@]}"; do [ "$h" = "$1" ] && found=1; done
      [ $found = 1 ] || { echo "fuzz.sh: unknown harness '$1' (known: ${ALL[*]})" >&2; exit 2; }
      harnesses+=("$1"); shift ;;
  esac
done
[ ${#harnesses[@]} -gt 0 ] || harnesses=("${ALL[@]}")
if [ -z "$seconds" ]; then
  if [ "${CI:-}" = "true" ]; then seconds=30; else seconds=300; fi
fi
[ "$jobs" -ge 1 ] || jobs=1

# ---- build --------------------------------------------------------------------------------------
if [ $build = 1 ]; then
  command -v clang++ >/dev/null || { echo "fuzz.sh: clang++ not found (apt-get install clang libclang-rt-14-dev)" >&2; exit 1; }
  if [ ! -f "$build_dir/CMakeCache.txt" ]; then
    CC=clang CXX=clang++ cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPOLLUX_FUZZ=ON \
      -DPOLLUX_BUILD_TESTS=OFF -DPOLLUX_BUILD_BENCH=OFF -DPOLLUX_BUILD_EXAMPLES=OFF -DPOLLUX_WITH_RDMA=OFF \
      -DPOLLUX_WERROR="$([ "${CI:-}" = "true" ] && echo ON || echo OFF)" >/dev/null
  fi
  targets=()
  if [ $mode = seeds ]; then targets=(fuzz_make_seeds); else for h in "${harnesses[@]}"; do targets+=("fuzz_$h"); done; fi
  cmake --build "$build_dir" -j"$(nproc)" --target "${targets[@]}"
fi
bin="$(cd "$build_dir" && pwd)/bin"

if [ $mode = seeds ]; then
  "$bin/fuzz_make_seeds" tests/fuzz/corpus tests/data/itch_gen_s3_m5000_seed42.itch
  exit 0
fi

# ---- run ----------------------------------------------------------------------------------------
if [ -z "$work" ]; then work=$(mktemp -d "${TMPDIR:-/tmp}/pollux-fuzz.XXXXXX"); fi
mkdir -p "$work"
work=$(cd "$work" && pwd)
# Leaks are failures; UBSan is fatal and prints a stack; an abort (FUZZ_CHECK) is a crash.
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:symbolize=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
flags=(-timeout="$timeout" -rss_limit_mb="$rss" -malloc_limit_mb="$rss" -detect_leaks=1 -print_final_stats=1)

# Replays the inputs of `dir` one process per file list; 0 = all passed.
replay() {  # harness dir log
  local h=$1 dir=$2 log=$3
  local files=()
  [ -d "$dir" ] || return 0
  while IFS= read -r -d '' f; do files+=("$f"); done < <(find "$dir" -maxdepth 1 -type f ! -name ".*" -print0 | sort -z)
  [ ${#files[@]} -gt 0 ] || return 0
  "$bin/fuzz_$h" "${flags[@]}" "${files[@]}" >"$log" 2>&1
}

# One harness: replay, then fuzz. Writes $work/<h>/status (ok|failed) and a summary line.
run_one() {
  local h=$1 d="$work/$1"
  mkdir -p "$d/corpus" "$d/crashes"
  local status=ok
  : >"$d/report"
  if ! replay "$h" "tests/fuzz/corpus/$h" "$d/replay-corpus.log"; then
    status=failed; echo "$h: a seed input fails: see $d/replay-corpus.log" >>"$d/report"
  fi
  if ! replay "$h" "tests/fuzz/regressions/$h" "$d/replay-regressions.log"; then
    status=failed; echo "$h: a committed regression input fails again: see $d/replay-regressions.log" >>"$d/report"
  fi
  if [ $pending = 1 ] && [ -d "tests/fuzz/regressions/pending/$h" ]; then
    local pd="tests/fuzz/regressions/pending/$h"
    while IFS= read -r -d '' f; do
      if "$bin/fuzz_$h" "${flags[@]}" "$f" >"$d/pending-$(basename "$f").log" 2>&1; then
        echo "$h: pending $f passes now: move it to tests/fuzz/regressions/$h/" >>"$d/report"
      else
        echo "$h: pending $f still fails (see $d/pending-$(basename "$f").log)" >>"$d/report"
        [ $strict_pending = 1 ] && status=failed
      fi
    done < <(find "$pd" -maxdepth 1 -type f ! -name '.*' -print0 | sort -z)
  fi
  if [ $mode = fuzz ]; then
    cp -r "tests/fuzz/corpus/$h/." "$d/corpus/"
    local dict=()
    [ -f "tests/fuzz/$h.dict" ] && dict=(-dict="tests/fuzz/$h.dict")
    if ! "$bin/fuzz_$h" "${flags[@]}" "${dict[@]}" -max_total_time="$seconds" -artifact_prefix="$d/crashes/" \
         "$d/corpus" >"$d/fuzz.log" 2>&1; then
      status=failed
    fi
    local stats
    stats=$(grep -E '^#[0-9]+' "$d/fuzz.log" | tail -1 || true)
    echo "$h: $(echo "$stats" | grep -oE 'cov: [0-9]+ ft: [0-9]+' || echo 'no coverage line') $(echo "$stats" | grep -oE 'exec/s: [0-9]+' || true) (log $d/fuzz.log)" >"$d/summary"
  fi
  while IFS= read -r -d '' a; do
    status=failed
    {
      echo "$h: $(basename "$a" | cut -d- -f1) input: $a"
      echo "    reproduce:   $bin/fuzz_$h $a"
      echo "    keep it:     cp $a tests/fuzz/regressions/$h/   (or regressions/pending/$h/ until fixed)"
    } >>"$d/report"
  done < <(find "$d/crashes" -maxdepth 1 -type f -print0 2>/dev/null | sort -z)
  if [ $status = failed ] && ! [ -s "$d/report" ]; then
    echo "$h: the fuzzer failed without a crash input (see $d/fuzz.log)" >>"$d/report"
  fi
  echo $status >"$d/status"
}

echo "fuzz.sh: ${harnesses[*]} - $([ $mode = fuzz ] && echo "${seconds}s each" || echo "replay only"), work folder $work"
running=0
for h in "${harnesses[@]}"; do
  run_one "$h" &
  running=$((running + 1))
  if [ $running -ge "$jobs" ]; then wait -n || true; running=$((running - 1)); fi
done
wait || true

rc=0
for h in "${harnesses[@]}"; do
  [ -f "$work/$h/summary" ] && cat "$work/$h/summary"
  [ -s "$work/$h/report" ] && cat "$work/$h/report"
  [ "$(cat "$work/$h/status" 2>/dev/null)" = ok ] || rc=1
done
if [ $rc = 0 ]; then echo "fuzz.sh: no crash, leak or sanitizer report"; else echo "fuzz.sh: FAILED (see above)"; fi
exit $rc
