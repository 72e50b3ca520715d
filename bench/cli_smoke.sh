#!/usr/bin/env bash
# Smoke test of the benchmark programs' command lines (ctest: bench_cli_smoke). Not a benchmark
# run, and nothing here depends on timing: for every program, --help exits 0 without running
# anything and describes every flag; an unknown flag, a missing value and a bad value exit 64
# with a message naming the flag; the quickest case at its smallest count writes --json lines
# that parse, with the fields docs/BENCHMARKS.md promises (floor and ratio where there is one).
#   bench/cli_smoke.sh NAME=PATH...      (NAME: ring shm udp feed itch rdma-pingpong)
# ring, shm, udp and itch must be given; feed (needs pollux-feed) and rdma-pingpong (needs the
# RDMA transport; its run needs devices, so only its flags are checked here) are optional.
set -euo pipefail
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "bench_cli_smoke: FAIL: $*" >&2; exit 1; }
command -v python3 >/dev/null || fail "python3 missing (scripts/install-deps.sh installs it)"
declare -A BIN
for a in "$@"; do BIN[${a%%=*}]=${a#*=}; done
for need in ring shm udp itch; do [ -n "${BIN[$need]:-}" ] || fail "no path given for $need"; done

# The flags each program's --help must describe.
declare -A FLAGS=(
  [ring]="--count --runs --json"
  [shm]="--count --runs --cases --rt --json floor inline32 inline256 dedicated32 dedicated256 tput"
  [udp]="--count --warmup --runs --tput-count --cases --json bare-busy bare-block bare-epoll api-busy ep-busy ep-block src-busy src-block tput-inline tput-dedicated"
  [feed]="--messages --symbols --reps --rate --latency-messages --idle --threading --streams --batch-bytes --itch --feed-bin --skip-rate --skip-latency --json"
  [itch]="--messages --filter --min-time --cpu --json --benchmark_"
  [rdma-pingpong]="--threading --idle --device --peer --listen --poller-cpu --cpu --iters --warmup --size --json"
)
# A value-taking flag to give a bad value, and the bad value.
declare -A BAD=(
  [ring]="--count x12" [shm]="--cases floor,nope" [udp]="--runs -1" [feed]="--idle sleepy"
  [itch]="--messages 10k" [rdma-pingpong]="--size 999999"
)
# rdma-pingpong takes its role first.
declare -A PRE=([rdma-pingpong]="client")

# expect_usage NAME WHAT ARGS...: exit 64 and the message names WHAT.
expect_usage() {
  local name=$1 what=$2; shift 2
  local rc=0
  "${BIN[$name]}" "$@" >"$T/out" 2>"$T/err" || rc=$?
  [ $rc -eq 64 ] || fail "$name $*: exited $rc, want 64 (stderr: $(cat "$T/err"))"
  grep -q -- "$what" "$T/err" || fail "$name $*: the message does not name $what: $(cat "$T/err")"
  ! grep -q '^machine:' "$T/out" || fail "$name $*: ran anyway"
}

for name in ring shm udp feed itch rdma-pingpong; do
  bin=${BIN[$name]:-}
  if [ -z "$bin" ]; then echo "bench_cli_smoke: $name not built: skipped"; continue; fi
  [ -x "$bin" ] || fail "$bin is not an executable (build it first)"
  rc=0
  "$bin" --help >"$T/help" 2>&1 || rc=$?
  [ $rc -eq 0 ] || fail "$name --help exited $rc"
  ! grep -q '^machine:' "$T/help" || fail "$name --help started a run"
  for f in ${FLAGS[$name]}; do grep -q -- "$f" "$T/help" || fail "$name --help does not describe $f"; done
  # shellcheck disable=SC2086
  expect_usage "$name" "--no-such-flag" ${PRE[$name]:-} --no-such-flag
  # shellcheck disable=SC2086
  expect_usage "$name" "--json" ${PRE[$name]:-} --json
  bad=${BAD[$name]}
  # shellcheck disable=SC2086
  expect_usage "$name" "${bad%% *}" ${PRE[$name]:-} $bad
done
if [ -n "${BIN[rdma-pingpong]:-}" ]; then expect_usage rdma-pingpong "role" --iters 10; fi
expect_usage ring "unexpected argument" 1000 2 3

# check_json FILE PROGRAM CASE[:FIELD,FIELD...]...: every line parses, the first describes the
# run, and each CASE is there with its FIELDs (not null).
check_json() {
  python3 - "$@" <<'EOF' || fail "JSON check of $1: see above"
import json, sys
path, program, wants = sys.argv[1], sys.argv[2], sys.argv[3:]
lines = [json.loads(l) for l in open(path) if l.strip()]
assert lines and lines[0].get("program") == program and lines[0].get("machine"), f"{path}: no header line: {lines[:1]}"
cases = {}
for o in lines[1:]:
    assert "case" in o or "ratio" in o, f"{path}: neither case nor ratio: {o}"
    if "case" in o:
        cases.setdefault(o["case"], o)
for w in wants:
    name, _, fields = w.partition(":")
    assert name in cases, f"{path}: no case {name} (have {sorted(cases)})"
    for f in filter(None, fields.split(",")):
        assert cases[name].get(f) is not None, f"{path}: case {name} has no {f}: {cases[name]}"
EOF
}
LAT=count,p50_ns,p90_ns,p99_ns,p99_9_ns,max_ns
FLOOR=floor,floor_p50_ns,ratio_p50

"${BIN[ring]}" --count 2000 --runs 1 --json "$T/ring.json" >"$T/out" || fail "ring run: $(cat "$T/out")"
check_json "$T/ring.json" pollux-bench-ring spsc-single:msgs_per_s,count boost-burst32:msgs_per_s \
  floor:$LAT spsc-rtt:$LAT,$FLOOR boost-rtt:$LAT,$FLOOR
grep -q 'SpscRing round trip' "$T/out" || fail "ring: the human output changed: $(cat "$T/out")"

"${BIN[shm]}" --cases floor,inline32 --count 200 --runs 1 --json "$T/shm.json" >"$T/out" ||
  fail "shm run: $(cat "$T/out")"
check_json "$T/shm.json" pollux-bench-shm floor:$LAT inline32:$LAT,$FLOOR
grep -q 'p50/floor p50' "$T/out" || fail "shm: no ratio line: $(cat "$T/out")"

"${BIN[udp]}" --cases bare-busy,api-busy --count 100 --warmup 10 --runs 1 --json "$T/udp.json" >"$T/out" ||
  fail "udp run: $(cat "$T/out")"
check_json "$T/udp.json" pollux-bench-udp bare-busy:$LAT,run_p50_ns api-busy:$LAT,$FLOOR
grep -q '"ratio": "api-busy / bare-busy"' "$T/udp.json" || fail "udp: no ratio object: $(cat "$T/udp.json")"

"${BIN[itch]}" --messages 20000 --filter 'BM_Frame$' --min-time 0.01 --json "$T/itch.json" >"$T/out" ||
  fail "itch run: $(cat "$T/out")"
check_json "$T/itch.json" pollux-bench-itch BM_Frame:msgs_per_s,ns_per_iteration,iterations,count

if [ -n "${BIN[feed]:-}" ]; then
  TMPDIR=$T "${BIN[feed]}" --messages 20000 --symbols 10 --reps 1 --latency-messages 20000 --rate 200000 \
    --json "$T/feed.json" >"$T/out" 2>&1 || fail "feed run: $(cat "$T/out")"
  check_json "$T/feed.json" pollux-bench-feed replay:msgs_per_s,count replay-median:msgs_per_s \
    publish-to-book:p50_ns,p99_ns,max_ns publisher-lag:p50_ns
fi
# The suite runner's command line, and its summary of the JSON written above.
RUNALL=$(dirname "$0")/run-all.sh
"$RUNALL" --help >"$T/out" || fail "run-all.sh --help exited $?"
grep -q -- "--preset" "$T/out" || fail "run-all.sh --help does not describe --preset"
for args in "--bogus" "--preset tiny" "--only nosuchstep" "--out"; do
  rc=0
  # shellcheck disable=SC2086
  "$RUNALL" $args >/dev/null 2>"$T/err" || rc=$?
  [ $rc -eq 64 ] || fail "run-all.sh $args exited $rc, want 64"
done
mkdir "$T/sum"
for s in ring shm udp itch feed; do [ ! -f "$T/$s.json" ] || cp "$T/$s.json" "$T/sum/"; done
printf 'step\tstatus\tseconds\tnote\nshm\tok\t1.0\t\n' >"$T/sum/steps.tsv"
python3 "$(dirname "$0")/run-all-summary.py" "$T/sum" >"$T/summary.md" || fail "run-all-summary.py exited $?"
for want in "## Headline figures" "| udp | api-busy |" "| shm | inline32 |" "| ring | spsc-rtt |" "BM_Frame" "p50 / floor"; do
  grep -qF -- "$want" "$T/summary.md" || fail "summary.md lacks \"$want\": $(cat "$T/summary.md")"
done
! grep -q "## Not read" "$T/summary.md" || fail "summary.md could not read a file: $(cat "$T/summary.md")"
echo "bench_cli_smoke: ok"
