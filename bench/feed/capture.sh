#!/usr/bin/env bash
# pollux-feed's packet capture, measured on this host (lo): what feed.capture costs the live
# handler, what it drops when pushed, and how fast a capture replays.
#   1. overhead: the live chain (pollux-exchange at --rate R -> pollux-feed live -> a shm
#      subscriber thread) with the capture off and on, alternating, --reps pairs; per run the
#      end-to-end rate and the handler's CPU per message and per datagram (its publishing
#      thread, which reads the sockets and feeds the capture ring; runtime.idle = backoff, so
#      it sleeps in poll() rather than spin when idle and its CPU time is its work), and the
#      capture's records and drops;
#   2. the highest rate: the exchange at --rate max with the capture on: records dropped by the
#      writer (capture_dropped) against records kept;
#   3. replay: the capture of run 2 through pollux-feed --set feed.source=pcap at max
#      (publisher -> a subscriber process over shm), --replay-reps times, each next to a replay
#      of the ITCH file itself (--itch, the same path to the same books): the end-to-end rate
#      (first offer to the last book update) and whether the books equal the live run's.
#   bench/feed/capture.sh [--messages N] [--symbols N] [--rate R] [--reps N] [--replay-reps N]
#                         [--bin DIR] [--json FILE]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/common.sh"
BIN="$here/../../build/bin"
MESSAGES=2000000 SYMBOLS=8000 RATE=max REPS=3 REPLAY_REPS=3 JSON=""
usage() {
  cat <<'U'
bench/feed/capture.sh - capture overhead, drops at the highest rate, replay speed (on lo)

  --messages N     generated messages (default 2000000; the file is made once in $TMPDIR)
  --symbols N      symbols of the generated feed (default 8000)
  --rate R|max     the exchange's pace for the overhead runs, messages/s (default max)
  --reps N         capture off/on pairs for the overhead (default 3; the order alternates)
  --replay-reps N  replays of the capture at max (default 3)
  --bin DIR        where pollux-feed, pollux-exchange and pollux-itch-gen are (default build/bin)
  --json FILE      append one JSON object per run
U
}
SCRIPT=capture.sh
FLAGS="--messages=MESSAGES --symbols=SYMBOLS --rate=RATE --reps=REPS --replay-reps=REPLAY_REPS --bin=BIN --json=JSON"
parse_flags "$@"
itch_file pollux-capture-bench
port=$((30000 + (RANDOM % 2000) * 4))
lines=(--set "feed.line_a=239.255.14.1:$port" --set "feed.line_b=239.255.14.2:$((port + 1))"
       --set "feed.rerequest=127.0.0.1:$((port + 2))")

# One live run: $1 label, $2 exchange rate, $3 capture path or "".
live() {
  local label=$1 rate=$2 cap=$3
  local extra=()
  [ -n "$cap" ] && extra=(--set "feed.capture=$cap")
  "$BIN/pollux-feed" --quiet --set feed.source=moldudp64 "${lines[@]}" --set feed.interface=lo \
    --set "runtime.name=capture-bench-$$" --set feed.subscriber_mode=thread --set feed.rcvbuf=67108864 \
    --set feed.expected_orders=4194304 --set runtime.idle=backoff "${extra[@]}" --book-out "$T/$label.books" --summary-json "$T/$label.json" \
    >"$T/$label.out" 2>&1 &
  local fh=$!
  wait_ready "$T/$label.out"
  "$BIN/pollux-exchange" --itch "$FILE" --line-a "239.255.14.1:$port" --line-b "239.255.14.2:$((port + 1))" \
    --rerequest-port $((port + 2)) --interface lo --rate "$rate" --linger-ms 1000 --summary-json "$T/$label.ex.json" \
    2>"$T/$label.ex.err"
  wait "$fh" || { echo "capture.sh: pollux-feed failed ($label):" >&2; tail -5 "$T/$label.out" >&2; exit 1; }
  FEED_DIR="$here" PYTHONDONTWRITEBYTECODE=1 python3 - "$T/$label.json" "$label" "$rate" "$cap" "$JSON" "$(cut -d' ' -f1-3 /proc/loadavg)" <<'PY'
import json, os, sys
sys.path.insert(0, os.environ["FEED_DIR"])
from feed_row import emit  # bench/feed/feed_row.py
path, label, rate, cap, out, load = sys.argv[1:7]
h = json.load(open(path)); L, p = h["live"], h["publisher"]
n = p["messages"]
r = {"run": label, "rate": rate, "capture": bool(cap), "loadavg": load, "messages": n,
     "handler_cpu_ns_per_msg": p["cpu_seconds"] / n * 1e9, "end_to_end_msg_per_s": h["end_to_end"]["messages_per_s"],
     "datagrams": L["packets_a"] + L["packets_b"] + L["replay_packets"],
     "handler_cpu_ns_per_datagram": p["cpu_seconds"] / max(1, L["packets_a"] + L["packets_b"] + L["replay_packets"]) * 1e9,
     "capture_records": L.get("capture_records", 0), "capture_dropped": L.get("capture_dropped", 0),
     "capture_bytes": L.get("capture_bytes", 0), "messages_unrecoverable": L["messages_unrecoverable"]}
emit(r, out, f"{label:>10}: rate {rate}, capture {'on ' if cap else 'off'}: handler cpu "
     f"{r['handler_cpu_ns_per_msg']:.1f} ns/msg {r['handler_cpu_ns_per_datagram']:.0f} ns/datagram, "
     f"{r['end_to_end_msg_per_s'] / 1e6:.2f} M msg/s end to end, {r['datagrams']} datagrams, captured "
     f"{r['capture_records']} ({r['capture_bytes'] / 1e6:.0f} MB), dropped {r['capture_dropped']}, "
     f"unrecoverable {r['messages_unrecoverable']}, load {load}")
PY
}

echo "== 1. capture overhead: $MESSAGES messages, $SYMBOLS symbols, exchange at $RATE msg/s"
for rep in $(seq 1 "$REPS"); do
  if [ $((rep % 2)) -eq 1 ]; then order="off on"; else order="on off"; fi
  for mode in $order; do
    if [ "$mode" = on ]; then live "on$rep" "$RATE" "$T/overhead.pcap"; else live "off$rep" "$RATE" ""; fi
    rm -f "$T/overhead.pcap"*
  done
done

echo "== 2. the highest rate: the exchange at --rate max, capture on"
live max max "$T/max.pcap"

echo "== 3. replay of that capture at max (publisher -> subscriber process over shm), next to the ITCH file's"
replay() {
  local label=$1; shift
  "$BIN/pollux-feed" --quiet "$@" --set "runtime.name=capture-replay-$$" --set feed.expected_orders=4194304 \
    --book-out "$T/$label.books" --summary-json "$T/$label.json" >"$T/$label.out" 2>&1 || { tail -5 "$T/$label.out" >&2; exit 1; }
  same=no
  cmp -s "$T/$label.books" "$T/max.books" && same=yes
  FEED_DIR="$here" PYTHONDONTWRITEBYTECODE=1 python3 - "$T/$label.json" "$label" "$same" "$JSON" "$(cut -d' ' -f1-3 /proc/loadavg)" <<'PY'
import json, os, sys
sys.path.insert(0, os.environ["FEED_DIR"])
from feed_row import emit  # bench/feed/feed_row.py
path, label, same, out, load = sys.argv[1:6]
h = json.load(open(path)); p = h["publisher"]; L = h.get("live", {})
r = {"run": label, "messages": p["messages"], "end_to_end_msg_per_s": h["end_to_end"]["messages_per_s"],
     "publisher_msg_per_s": p["messages_per_s"], "publisher_cpu_ns_per_msg": p["cpu_seconds"] / p["messages"] * 1e9,
     "subscriber_cpu_ns_per_msg": h["subscribers"][0]["cpu_seconds"] / p["messages"] * 1e9,
     "pcap_records": L.get("pcap_records", 0), "books_equal_live": same == "yes", "loadavg": load}
emit(r, out, f"{label:>10}: {r['messages']} msgs{' from %d records' % r['pcap_records'] if r['pcap_records'] else ''}: "
     f"{r['end_to_end_msg_per_s'] / 1e6:.2f} M msg/s end to end; cpu ns/msg publisher {r['publisher_cpu_ns_per_msg']:.1f} "
     f"subscriber {r['subscriber_cpu_ns_per_msg']:.1f}; books equal the live run's: {same}; load {load}")
PY
}
for rep in $(seq 1 "$REPLAY_REPS"); do
  replay "pcap$rep" --set feed.source=pcap --set "feed.pcap=$T/max.pcap" "${lines[@]}"
  replay "file$rep" --itch "$FILE"
done
