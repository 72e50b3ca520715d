#!/usr/bin/env bash
# The live chain on this host: pollux-exchange (a generated ITCH file, MoldUDP64 on
# two multicast lines on lo) -> pollux-feed live mode (A/B arbitration, re-requests) -> books in
# a Pollux shm subscriber (a thread of the handler's process). One line per repetition: the
# end-to-end rate (first offer to the last book update), the CPU each stage spent per message
# (exchange: user + sys of its process; handler: its publishing thread; subscriber: its polling
# thread), packet-in-to-book and publish-to-book latency, and what was lost or re-requested.
#   bench/feed/live-chain.sh [--messages N] [--symbols N] [--mtu BYTES] [--rate R|max] [--reps N]
#                            [--idle yield|busy-spin|backoff] [--bin DIR] [--json FILE]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/common.sh"
BIN="$here/../../build/bin"
MESSAGES=5000000 SYMBOLS=100 MTU=1400 RATE=max REPS=3 IDLE=yield JSON=""
usage() {
  cat <<'U'
bench/feed/live-chain.sh - pollux-exchange -> pollux-feed live mode -> shm subscriber, on lo

  --messages N   generated messages (default 5000000; the file is made once in $TMPDIR)
  --symbols N    symbols of the generated feed (default 100)
  --mtu BYTES    the exchange's packet budget (default 1400; lo takes up to 65507)
  --rate R|max   the exchange's pace in messages/s (default max)
  --reps N       repetitions (default 3)
  --idle KIND    runtime.idle of the handler and subscriber (default yield)
  --bin DIR      where pollux-feed, pollux-exchange and pollux-itch-gen are (default build/bin)
  --json FILE    append one JSON object per repetition
U
}
SCRIPT=live-chain.sh
FLAGS="--messages=MESSAGES --symbols=SYMBOLS --mtu=MTU --rate=RATE --reps=REPS --idle=IDLE --bin=BIN --json=JSON"
parse_flags "$@"
itch_file pollux-live-chain
for rep in $(seq 1 "$REPS"); do
  port=$((30000 + (RANDOM % 2000) * 4))
  "$BIN/pollux-feed" --quiet --set feed.source=moldudp64 --set "feed.line_a=239.255.13.1:$port" \
    --set "feed.line_b=239.255.13.2:$((port + 1))" --set "feed.rerequest=127.0.0.1:$((port + 2))" \
    --set feed.interface=lo --set "runtime.name=live-chain-$$" --set feed.subscriber_mode=thread \
    --set feed.rcvbuf=67108864 --set "runtime.idle=$IDLE" --summary-json "$T/h.json" >"$T/h.out" 2>&1 &
  fh=$!
  wait_ready "$T/h.out"
  /usr/bin/time -f "%U %S" -o "$T/ex.time" "$BIN/pollux-exchange" --itch "$FILE" --line-a "239.255.13.1:$port" \
    --line-b "239.255.13.2:$((port + 1))" --rerequest-port $((port + 2)) --interface lo --rate "$RATE" \
    --mtu "$MTU" --linger-ms 1000 --summary-json "$T/ex.json" 2>"$T/ex.err"
  wait "$fh"
  FEED_DIR="$here" PYTHONDONTWRITEBYTECODE=1 python3 - "$T" "$rep" "$MTU" "$RATE" "$(cut -d' ' -f1-3 /proc/loadavg)" "$JSON" <<'PY'
import json, os, sys
sys.path.insert(0, os.environ["FEED_DIR"])
from feed_row import emit  # bench/feed/feed_row.py
d, rep, mtu, rate, load, out = sys.argv[1:7]
h = json.load(open(f"{d}/h.json")); e = json.load(open(f"{d}/ex.json"))
u, s = map(float, open(f"{d}/ex.time").read().split())
L, p, sub = h["live"], h["publisher"], h["subscribers"][0]
n = p["messages"]
r = {"rep": int(rep), "mtu": int(mtu), "rate": rate, "loadavg": load, "messages": n,
     "end_to_end_msg_per_s": h["end_to_end"]["messages_per_s"],
     "cpu_ns_per_msg": {"exchange": (u + s) / n * 1e9, "handler": p["cpu_seconds"] / n * 1e9,
                        "subscriber": sub["cpu_seconds"] / n * 1e9},
     "packet_in_to_book_ns": sub["wire_latency_ns"], "publish_to_book_ns": sub["latency_ns"],
     "exchange_packets_a": e["packets_a"], "packets_a": L["packets_a"], "packets_b": L["packets_b"],
     "rerequests_sent": L["rerequests_sent"], "messages_recovered": L["messages_recovered"],
     "messages_unrecoverable": L["messages_unrecoverable"], "out_of_order_packets": L["out_of_order_packets"]}
c = r["cpu_ns_per_msg"]; w = r["packet_in_to_book_ns"]
emit(r, out, f"rep {rep}: load {load}; {n} msgs, {r['end_to_end_msg_per_s'] / 1e6:.2f} M msg/s end to end; "
     f"cpu ns/msg exchange {c['exchange']:.0f} handler {c['handler']:.0f} subscriber {c['subscriber']:.0f}; "
     f"packet-in-to-book p50 {w['p50'] / 1e3:.1f} p99 {w['p99'] / 1e3:.1f} us; line A "
     f"{r['packets_a']}/{r['exchange_packets_a'] + 3} datagrams, re-requests {r['rerequests_sent']}, "
     f"unrecoverable {r['messages_unrecoverable']}")
PY
done
