#!/usr/bin/env bash
# Instructions per offer() + poll() of one message on inline shm, per function, from callgrind
# (valgrind --tool=callgrind): deterministic and independent of the machine's load, so two
# builds can be compared on a busy machine where timings cannot. The workload
# (pollux-callgrind-shm-inline) runs twice, with --count A and --count B; each function's
# self instructions (Ir) of the two runs are subtracted and divided by B - A, so set-up and
# tear-down cancel and what remains is the per-message cost. Clones of one function
# ("[clone .part.0]", ".cold") are summed under its name.
#   bench/callgrind/shm-inline.sh [--bin PATH] [--a N] [--b N] [--size B] [--flow backpressure|lossy]
#                                 [--counters true|false] [--top N] [--json FILE] [--keep DIR]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/common.sh"
BIN="$here/../../build/bin/pollux-callgrind-shm-inline"
A=20000 B=120000 SIZE=32 FLOW=backpressure COUNTERS=true TOP=10 JSON="" KEEP=""
usage() {
  cat <<'U'
bench/callgrind/shm-inline.sh - instructions per offer()+poll() on inline shm, per function (callgrind)

Runs build/bin/pollux-callgrind-shm-inline under valgrind --tool=callgrind twice (--a and --b
iterations; one 32-byte offer() and one poll() delivering it per iteration) and prints, per
function, (self Ir at B - self Ir at A) / (B - A): the instructions each message costs there.
Deterministic (no timing); a busy machine only makes it slower (~10 s per 100k iterations).

  --bin PATH          the workload program (default build/bin/pollux-callgrind-shm-inline)
  --a N               iterations of the first run (default 20000)
  --b N               iterations of the second run (default 120000; must exceed --a)
  --size B            payload bytes (default 32)
  --flow F            shm.flow_control: backpressure (default) or lossy
  --counters T        runtime.counters: true (default) or false
  --top N             functions listed (default 10; the total always)
  --json FILE         JSON lines: the run object (program, machine, argv, date_utc), then one
                      object per function listed (case "shm-inline", function, ir_per_msg) and
                      one with function "TOTAL" (the whole program's difference)
  --keep DIR          keep the two callgrind.out files in DIR (for callgrind_annotate)
  --help              this text
U
}
SCRIPT=shm-inline.sh
VALUE_FLAGS="--bin --a --b --size --flow --counters --top --json --keep"
option() {
  case "$1" in
    --bin) BIN=$2 ;; --a) num "$1" "$2"; A=$2 ;; --b) num "$1" "$2"; B=$2 ;;
    --size) num "$1" "$2"; SIZE=$2 ;; --top) num "$1" "$2"; TOP=$2 ;;
    --flow) [[ "$2" = backpressure || "$2" = lossy ]] || die "--flow: \"$2\" is not backpressure or lossy"; FLOW=$2 ;;
    --counters) [[ "$2" = true || "$2" = false ]] || die "--counters: \"$2\" is not true or false"; COUNTERS=$2 ;;
    --json) JSON=$2 ;; --keep) KEEP=$2 ;;
    *) return 1 ;;
  esac
}
inline_start "$@"
need_program "$BIN" pollux-callgrind-shm-inline

work_dir
for n in "$A" "$B"; do
  if ! valgrind --tool=callgrind --callgrind-out-file="$T/cg.$n" "$BIN" --count "$n" --size "$SIZE" --flow "$FLOW" \
      --counters "$COUNTERS" >"$T/out.$n" 2>"$T/err.$n"; then
    cat "$T/err.$n" >&2
    echo "shm-inline.sh: the workload failed at --count $n" >&2
    exit 1
  fi
  grep -q " retries 0$" "$T/out.$n" || { echo "shm-inline.sh: iterations needed retries: $(cat "$T/out.$n")" >&2; exit 1; }
  callgrind_annotate --threshold=100 "$T/cg.$n" >"$T/ann.$n"
done
if [ -n "$KEEP" ]; then mkdir -p "$KEEP" && cp "$T/cg.$A" "$T/cg.$B" "$KEEP/"; fi
MACHINE=$("$BIN" --machine 2>/dev/null || echo "?")

CG_DIR="$here" PYTHONDONTWRITEBYTECODE=1 python3 - "$T/ann.$A" "$T/ann.$B" "$A" "$B" "$TOP" "$JSON" "$ARGV" "$MACHINE" "$SIZE" "$FLOW" "$COUNTERS" <<'PY'
import json, os, sys
sys.path.insert(0, os.environ["CG_DIR"])
from cg_diff import open_json, per_message, print_rows  # bench/callgrind/cg_diff.py
fa, fb, a, b, top, jpath, argv, machine, size, flow, counters = sys.argv[1:]
a, b, top = int(a), int(b), int(top)

rows, total = per_message(fa, fb, a, b, top)
print_rows(f"instructions per message (offer + poll, {size} B, {flow}, counters {counters}; "
           f"runs of {a} and {b} iterations, self Ir difference / {b - a}):",
           rows, total, "whole program, loop included")
if jpath:
    with open_json(jpath, "bench/callgrind/shm-inline.sh", machine, argv) as f:
        for v, k in rows + [(total, "TOTAL")]:
            f.write(json.dumps({"case": "shm-inline", "function": k, "ir_per_msg": round(v, 2), "size": int(size),
                                "flow": flow, "counters": counters == "true", "count_a": a, "count_b": b}) + "\n")
PY
