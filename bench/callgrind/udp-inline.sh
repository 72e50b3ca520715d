#!/usr/bin/env bash
# Instructions and system calls per offer() + poll() of one message on inline UDP (127.0.0.1),
# per function from callgrind (valgrind --tool=callgrind) and per system call from strace -c:
# counts, not times, so two builds can be compared on a busy machine where timings cannot. The
# workload (pollux-callgrind-udp-inline: publisher and subscriber of one stream in one thread)
# runs twice, with --count A and --count B; each function's self instructions (Ir), and each
# system call's count, of the two runs are subtracted and divided by B - A, so set-up and
# tear-down cancel and what remains is the per-message cost. Clones of one function
# ("[clone .part.0]", ".cold") are summed under its name. User-space instructions only: what
# the kernel does inside a system call is not counted (the syscall line shows how many).
#   bench/callgrind/udp-inline.sh [--bin PATH] [--a N] [--b N] [--size B] [--empty-polls N] [--bare] [--counters true|false]
#                                 [--top N] [--no-strace] [--json FILE] [--keep DIR]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/common.sh"
BIN="$here/../../build/bin/pollux-callgrind-udp-inline"
A=10000 B=60000 SIZE=32 EMPTY=1 BARE=false COUNTERS=true TOP=12 JSON="" KEEP="" STRACE=true
usage() {
  cat <<'U'
bench/callgrind/udp-inline.sh - instructions and system calls per offer()+poll() on inline UDP

Runs build/bin/pollux-callgrind-udp-inline (one publisher and one subscriber of one stream in
one thread, unicast 127.0.0.1; per iteration one poll() that finds nothing - a ping-pong side's
spin while its peer turns around - then one 32-byte offer() and one poll() delivering it)
under valgrind --tool=callgrind twice (--a and --b iterations) and prints, per function,
(self Ir at B - self Ir at A) / (B - A): the user-space instructions each message costs there.
Then (unless --no-strace) the same two runs under strace -f -c: system calls per message by
name, (calls at B - calls at A) / (B - A), failed ones (EAGAIN) in brackets.
Deterministic per-message counts (no timing), with one caveat: the publisher's control-message
poll (a recvmmsg at most every 250 us) and other timers run per unit of time, so under strace,
which slows every system call, they show up per message more often than in a normal run; the
callgrind counts include them at valgrind's speed. The bare-socket floor of the same
iteration is one send, one receive that finds nothing and one that returns the datagram
(bench/udp bare-busy: send, then recv(MSG_DONTWAIT) until data, at least one empty).

  --bin PATH          the workload program (default build/bin/pollux-callgrind-udp-inline)
  --a N               iterations of the first run (default 10000)
  --b N               iterations of the second run (default 60000; must exceed --a)
  --size B            payload bytes (default 32)
  --empty-polls N     polls that find nothing before each offer (default 1; 0: none)
  --bare              the floor: the same iteration over two bare connected UDP sockets
                      (recv that finds nothing, send, recv), no Pollux
  --counters T        runtime.counters: true (default) or false
  --top N             functions listed (default 12; the total always)
  --no-strace         skip the system-call counts (strace missing, or not wanted)
  --json FILE         JSON lines: the run object (program, machine, argv, date_utc), then one
                      object per function listed (case "udp-inline", or "udp-bare" with --bare; function, ir_per_msg), one
                      with function "TOTAL" (the whole program's difference), and one per system
                      call (case "udp-inline", syscall, calls_per_msg, errors_per_msg)
  --keep DIR          keep the two callgrind.out files and strace summaries in DIR
  --help              this text
U
}
SCRIPT=udp-inline.sh
VALUE_FLAGS="--bin --a --b --size --empty-polls --counters --top --json --keep"
option() {
  case "$1" in
    --no-strace) STRACE=false ;;
    --bare) BARE=true ;;
    --bin) BIN=$2 ;; --a) num "$1" "$2"; A=$2 ;; --b) num "$1" "$2"; B=$2 ;;
    --size) num "$1" "$2"; SIZE=$2 ;; --empty-polls) num "$1" "$2"; EMPTY=$2 ;; --top) num "$1" "$2"; TOP=$2 ;;
    --counters) [[ "$2" = true || "$2" = false ]] || die "--counters: \"$2\" is not true or false"; COUNTERS=$2 ;;
    --json) JSON=$2 ;; --keep) KEEP=$2 ;;
    *) return 1 ;;
  esac
}
inline_start "$@"
if $STRACE; then need strace "scripts/install-deps.sh installs it; or --no-strace"; fi
need_program "$BIN" pollux-callgrind-udp-inline

RETRIES=""
work_dir
run() {  # run <what> <n> <command...>
  local what=$1 n=$2
  shift 2
  if ! "$@" "$BIN" --count "$n" --size "$SIZE" --empty-polls "$EMPTY" --bare "$BARE" --counters "$COUNTERS" >"$T/out.$what.$n" 2>"$T/err.$what.$n"; then
    cat "$T/err.$what.$n" >&2
    echo "udp-inline.sh: the workload failed at --count $n ($what)" >&2
    exit 1
  fi
  # Loopback normally delivers inside sendto(); a kernel that defers it (softirqs pushed to
  # ksoftirqd on a loaded machine) costs a delivering poll that finds nothing: a few are noise,
  # many would dilute the per-message figures.
  local r
  r=$(sed -n 's/.* retries \([0-9]*\)$/\1/p' "$T/out.$what.$n")
  [ -n "$r" ] && [ "$r" -le $((n / 1000)) ] || { echo "udp-inline.sh: too many iterations needed retries ($what): $(cat "$T/out.$what.$n")" >&2; exit 1; }
  RETRIES="$RETRIES $what@$n:$r"
}
for n in "$A" "$B"; do
  run cg "$n" valgrind --tool=callgrind --callgrind-out-file="$T/cg.$n"
  callgrind_annotate --threshold=100 "$T/cg.$n" >"$T/ann.$n"
  if $STRACE; then run st "$n" strace -f -c -o "$T/st.$n"; else : >"$T/st.$n"; fi
done
if [ -n "$KEEP" ]; then mkdir -p "$KEEP" && cp "$T/cg.$A" "$T/cg.$B" "$T/st.$A" "$T/st.$B" "$KEEP/"; fi
MACHINE=$("$BIN" --machine 2>/dev/null || echo "?")

CG_DIR="$here" PYTHONDONTWRITEBYTECODE=1 python3 - "$T/ann.$A" "$T/ann.$B" "$T/st.$A" "$T/st.$B" "$A" "$B" "$TOP" "$JSON" "$ARGV" "$MACHINE" "$SIZE" "$COUNTERS" "$STRACE" "$EMPTY" "$RETRIES" "$BARE" <<'PY'
import json, os, re, sys
sys.path.insert(0, os.environ["CG_DIR"])
from cg_diff import open_json, per_message, print_rows  # bench/callgrind/cg_diff.py
fa, fb, sa, sb, a, b, top, jpath, argv, machine, size, counters, strace, empty, retries, bare = sys.argv[1:]
case = "udp-bare" if bare == "true" else "udp-inline"
a, b, top = int(a), int(b), int(top)

def load_strace(path):
    # strace -c rows: % time, seconds, usecs/call, calls, [errors,] syscall
    out = {}
    for line in open(path):
        f = line.split()
        if len(f) < 5 or not re.match(r"^[\d.]+$", f[0]) or f[-1] == "total":
            continue
        calls = int(f[3])
        errors = int(f[4]) if len(f) == 6 else 0
        out[f[-1]] = (calls, errors)
    return out

rows, total = per_message(fa, fb, a, b, top)
d = b - a
what = "bare sockets: recv + send + recv" if bare == "true" else f"offer + poll, counters {counters}"
print_rows(f"instructions per message ({case}, {empty} empty poll(s) + {what}, {size} B, unicast 127.0.0.1; "
           f"runs of {a} and {b} iterations, self Ir difference / {d}):",
           rows, total, "whole program, loop included; user space only")
sys_rows = []
if strace == "true":
    xa, xb = load_strace(sa), load_strace(sb)
    for k in sorted(set(xa) | set(xb)):
        ca, ea = xa.get(k, (0, 0))
        cb, eb = xb.get(k, (0, 0))
        c, e = (cb - ca) / d, (eb - ea) / d
        if abs(c) >= 0.0005:
            sys_rows.append((k, c, e))
    sys_rows.sort(key=lambda r: -r[1])
    tot = sum(r[1] for r in sys_rows)
    parts = "  ".join(f"{k} {c:.3f}" + (f" ({e:.3f} failed)" if e >= 0.0005 else "") for k, c, e in sys_rows)
    print(f"system calls per message (strace -f -c, same two counts): {tot:.3f} total: {parts}")
print(f"polls or offers repeated (run@count:retries):{retries}")
if jpath:
    with open_json(jpath, "bench/callgrind/udp-inline.sh", machine, argv) as f:
        for v, k in rows + [(total, "TOTAL")]:
            f.write(json.dumps({"case": case, "function": k, "ir_per_msg": round(v, 2), "size": int(size),
                                "counters": counters == "true", "empty_polls": int(empty), "count_a": a, "count_b": b}) + "\n")
        for k, c, e in sys_rows:
            f.write(json.dumps({"case": case, "syscall": k, "calls_per_msg": round(c, 4),
                                "errors_per_msg": round(e, 4), "empty_polls": int(empty), "count_a": a, "count_b": b}) + "\n")
PY
