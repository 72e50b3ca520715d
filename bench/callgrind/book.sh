#!/usr/bin/env bash
# Instructions and simulated cache misses per ITCH message of book building (BookSet::ApplyAll)
# at a full market, from callgrind with its cache simulator: counts, not times, so two builds can
# be compared on a busy machine where timings cannot. The workload (pollux-callgrind-book)
# generates a feed, applies --warm messages (the market fills up), and the rest inside
# MeasuredApply(), the only function collected. Reported per measured message: Ir
# (instructions), D1 misses (reads + writes) and LL misses, where the simulated "LL" is the
# size given by --ll (default 2 MiB: this machine's per-core L2, the last private level), so
# LL misses approximate what has to come from the shared L3 or DRAM. No TLB model.
#   bench/callgrind/book.sh [--bin PATH] [--symbols S] [--messages N] [--warm W] [--ll BYTES] [--json FILE]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
BIN="$here/../../build/bin/pollux-callgrind-book"
SYMBOLS=8000 MESSAGES=2000000 WARM=1500000 LL=2097152 JSON=""
usage() {
  cat <<'U'
bench/callgrind/book.sh - instructions and simulated cache misses per message of BookSet::ApplyAll

Runs build/bin/pollux-callgrind-book under valgrind --tool=callgrind --cache-sim=yes, collecting
only inside MeasuredApply() (the messages after the warm-up), and prints per measured message:
instructions (Ir), D1 read and write misses, and LL read and write misses, with the simulated
LL cache of --ll bytes (16-way, 64-byte lines). Deterministic; ~1-3 minutes at the defaults.

  --bin PATH          the workload program (default build/bin/pollux-callgrind-book)
  --symbols S         symbols of the generated feed (default 8000)
  --messages N        messages generated, seed 1 (default 2000000)
  --warm W            messages applied before the measured part (default 1500000)
  --ll BYTES          simulated last-level cache size (default 2097152 = 2 MiB, a power of 2)
  --json FILE         one JSON line: symbols, messages, ir_per_msg, d1_miss_per_msg, ll_miss_per_msg
  --help              this text
U
}
SCRIPT=book.sh
VALUE_FLAGS="--bin --symbols --messages --warm --ll --json"
option() {
  case "$1" in
    --bin) BIN=$2 ;; --symbols) num "$1" "$2"; SYMBOLS=$2 ;; --messages) num "$1" "$2"; MESSAGES=$2 ;;
    --warm) num "$1" "$2"; WARM=$2 ;; --ll) num "$1" "$2"; LL=$2 ;; --json) JSON=$2 ;;
    *) return 1 ;;
  esac
}
. "$here/common.sh"
ARGV="$0 $*"
parse_options "$@"
[ "$MESSAGES" -gt "$WARM" ] || die "--messages ($MESSAGES) must be larger than --warm ($WARM)"
need valgrind "scripts/install-deps.sh installs it"
need_program "$BIN" pollux-callgrind-book

work_dir
if ! valgrind --tool=callgrind --cache-sim=yes --LL="$LL,16,64" --collect-atstart=no \
    --toggle-collect='*MeasuredApply*' --callgrind-out-file="$T/cg" \
    "$BIN" --symbols "$SYMBOLS" --messages "$MESSAGES" --warm "$WARM" >"$T/out" 2>"$T/err"; then
  cat "$T/err" >&2
  echo "book.sh: the workload failed" >&2
  exit 1
fi
read -r _ measured _ live _ mismatch <"$T/out"
[ "$mismatch" = 0 ] || { echo "book.sh: the books disagreed with the order map ($mismatch level mismatches)" >&2; exit 1; }
# The "summary:" line of the callgrind output holds the totals of the collected events.
EVENTS=$(grep '^events:' "$T/cg" | cut -d' ' -f2-)
SUMMARY=$(grep '^summary:' "$T/cg" | cut -d' ' -f2-)
python3 - "$EVENTS" "$SUMMARY" "$measured" "$live" "$SYMBOLS" "$LL" "$JSON" "$ARGV" <<'PY'
import json, sys, time
events, summary, measured, live, symbols, ll, jpath, argv = sys.argv[1:]
e = dict(zip(events.split(), map(int, summary.split())))
n = int(measured)
ir = e["Ir"] / n
d1 = (e["D1mr"] + e["D1mw"]) / n
llm = (e["DLmr"] + e["DLmw"]) / n
print(f"{symbols} symbols, {live} live orders, {n} measured messages, LL {int(ll) >> 10} KiB:")
print(f"  Ir {ir:.1f}  D1 misses {d1:.3f} (read {e['D1mr'] / n:.3f}, write {e['D1mw'] / n:.3f})"
      f"  LL misses {llm:.3f} (read {e['DLmr'] / n:.3f}, write {e['DLmw'] / n:.3f}) per message")
if jpath:
    with open(jpath, "w") as f:
        f.write(json.dumps({"program": "bench/callgrind/book.sh", "argv": argv,
                            "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                            "case": "book", "symbols": int(symbols), "live_orders": int(live),
                            "messages": n, "ll_bytes": int(ll), "ir_per_msg": round(ir, 2),
                            "d1_miss_per_msg": round(d1, 4), "ll_miss_per_msg": round(llm, 4)}) + "\n")
PY
