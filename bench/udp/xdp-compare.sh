#!/usr/bin/env bash
# The floor of the AF_XDP and kernel-socket UDP datapaths over a veth pair between two network
# namespaces (pollux-bench-xdp-floor, one process per namespace), in interleaved rounds:
#   socket-pingpong, xdp-pingpong         RTT of 32-byte datagrams (p50/p99 per round)
#   socket-tput, xdp-tput                 one-way 64-byte datagrams, batches of 32: msgs/s at the sink
#   pollux-socket, pollux-xdp             pollux-latency over UDP (pong side in B by --peer-netns),
#   pollux-socket-poller, pollux-xdp-poller  udp.datapath = socket / xdp, inline busy-spin and with a
#                                         dedicated poller (pollux_latency_round below)
#   pollux-{socket,xdp}-tput[-poller]     one-way 64-byte messages through Pollux (pollux-test-peer
#                                         pub in A, sub in B, every message checked; inline: none
#                                         lost, poller rows report their loss):
#                                         msgs delivered per second of the publisher's offer loop (pollux_tput_round)
# Output: one JSON line per run (stdout and --out FILE), then a summary table: the median over
# the rounds of p50, p99 and msgs/s, and the ratios: bare xdp/socket, pollux-xdp/pollux-socket
# (targets p50 <= 0.7, p99 <= 0.8) and pollux-xdp/bare-xdp (target p50 <= 1.15).
#
# Needs root (namespaces, XDP). The namespaces and the veth pair get names unique to this run
# and are deleted on exit. With 2 or more CPUs the two sides are pinned to CPUs 0 and 1.
# `ip netns exec` hides bpffs: harmless, libxdp works without it.
#
#   bench/udp/xdp-compare.sh [--rounds 5] [--count 100000] [--warmup 10000] [--seconds 3]
#                            [--bin build/bin] [--out FILE] [--cases pingpong,tput,pollux,pollux-tput]
#                            [--messages 1000000] [--coalesce-us 0] [--allow-loss]
set -euo pipefail

SCRIPT=xdp-compare.sh
HERE=$(cd "$(dirname "$0")" && pwd)
ROUNDS=5
COUNT=100000
WARMUP=10000
SECONDS_TPUT=3
BIN="$HERE/../../build/bin"
OUT=""
CASES="pingpong,tput,pollux,pollux-tput"
MESSAGES=1000000
COALESCE_US=0
ALLOW_LOSS=0

usage() {
  sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'
  cat <<EOF

Flags:
  --rounds N     interleaved rounds of every case (default $ROUNDS)
  --count N      measured round trips per ping-pong run (default $COUNT)
  --warmup N     round trips before measuring (default $WARMUP)
  --seconds S    length of each throughput run (default $SECONDS_TPUT)
  --bin DIR      where pollux-bench-xdp-floor and pollux-latency are (default build/bin)
  --out FILE     also write the JSON lines to FILE
  --cases LIST   comma-separated subset of pingpong,tput,pollux,pollux-tput (default all)
  --messages N   messages per pollux-tput run (default $MESSAGES)
  --coalesce-us U  udp.coalesce_us of the pollux-tput publishers (default $COALESCE_US: a datagram per message)
  --allow-loss   the inline pollux-tput rows report a loss instead of failing on it (the smoke
                 test: on a busy machine an inline subscriber can be preempted long enough to
                 lose what the retransmit buffer cannot repair)
EOF
}

while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --allow-loss) ALLOW_LOSS=1; shift ;;
    --rounds|--count|--warmup|--seconds|--bin|--out|--cases|--messages|--coalesce-us)
      [ $# -ge 2 ] || { echo "$SCRIPT: $1 needs a value (see --help)" >&2; exit 64; }
      case "$1" in
        --rounds) ROUNDS=$2 ;; --count) COUNT=$2 ;; --warmup) WARMUP=$2 ;; --seconds) SECONDS_TPUT=$2 ;;
        --bin) BIN=$2 ;; --out) OUT=$2 ;; --cases) CASES=$2 ;; --messages) MESSAGES=$2 ;;
        --coalesce-us) COALESCE_US=$2 ;;
      esac
      shift 2 ;;
    *) echo "$SCRIPT: unknown argument '$1' (see --help)" >&2; exit 64 ;;
  esac
done
[[ $COALESCE_US =~ ^[0-9]+$ ]] || { echo "$SCRIPT: --coalesce-us must be a non-negative integer" >&2; exit 64; }
for v in ROUNDS COUNT WARMUP SECONDS_TPUT MESSAGES; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "$SCRIPT: ${v,,} must be a positive integer" >&2; exit 64; }
done
for c in ${CASES//,/ }; do
  case "$c" in pingpong|tput|pollux|pollux-tput) ;; *) echo "$SCRIPT: --cases: unknown case '$c'" >&2; exit 64 ;; esac
done
has_case() { [[ ",$CASES," == *",$1,"* ]]; }

FLOOR="$BIN/pollux-bench-xdp-floor"
LATENCY="$BIN/pollux-latency"
PEER="$BIN/pollux-test-peer"
[ -x "$FLOOR" ] || { echo "$SCRIPT: $FLOOR not found (build it: cmake --build build --target pollux-bench-xdp-floor; needs POLLUX_HAVE_XDP)" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || { echo "$SCRIPT: needs root (CAP_SYS_ADMIN for network namespaces, CAP_NET_ADMIN/CAP_BPF for XDP)" >&2; exit 1; }
command -v ip >/dev/null || { echo "$SCRIPT: needs iproute2 (ip)" >&2; exit 1; }
command -v python3 >/dev/null || { echo "$SCRIPT: needs python3 (summary)" >&2; exit 1; }

# ---- namespaces ---------------------------------------------------------------------------------
TAG="xc$$"
NS_A="$TAG-a" NS_B="$TAG-b"
IF_A="${TAG}a" IF_B="${TAG}b"  # interface names: at most 15 characters
ADDR_A=10.213.0.1 ADDR_B=10.213.0.2
PORT=47000
WORK=$(mktemp -d)
PIDS=()

# shellcheck disable=SC2317  # reached through the trap
cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  ip netns del "$NS_A" 2>/dev/null || true
  ip netns del "$NS_B" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if ! { ip netns add "$NS_A" && ip netns add "$NS_B"; } 2>"$WORK/netns.err"; then
  echo "$SCRIPT: cannot create network namespaces: $(cat "$WORK/netns.err")" >&2
  exit 1
fi
ip -n "$NS_A" link add "$IF_A" type veth peer name "$IF_B" netns "$NS_B"
ip -n "$NS_A" addr add "$ADDR_A/24" dev "$IF_A"
ip -n "$NS_B" addr add "$ADDR_B/24" dev "$IF_B"
for ns in "$NS_A" "$NS_B"; do ip -n "$ns" link set lo up; done
ip -n "$NS_A" link set "$IF_A" up
ip -n "$NS_B" link set "$IF_B" up

if [ "$(nproc)" -ge 2 ]; then
  PIN_A=(taskset -c 0) PIN_B=(taskset -c 1)
else
  PIN_A=() PIN_B=()
fi

# side_a / side_b ARGS...: pollux-bench-xdp-floor in namespace A / B, pinned, addressed to the other.
side_a() { ip netns exec "$NS_A" "${PIN_A[@]}" "$FLOOR" --interface "$IF_A" --peer-addr "$ADDR_B" --port "$PORT" "$@"; }
side_b() { ip netns exec "$NS_B" "${PIN_B[@]}" "$FLOOR" --interface "$IF_B" --peer-addr "$ADDR_A" --port "$PORT" "$@"; }

# emit CASE ROUND JSON [EXTRA]: one result line, tagged with the case and the round.
emit() {
  local line="{\"case\": \"$1\", \"round\": $2, ${3#\{}"
  [ -z "${4:-}" ] || line="${line%\}}, $4}"
  echo "$line"
  [ -z "$OUT" ] || echo "$line" >>"$OUT"
  echo "$line" >>"$WORK/all.jsonl"
}

# pair CASE ROUND MODE RECV_ROLE SEND_ROLE ARGS...: the receiving side in B (background), the
# sending side in A; prints the result line (ping's, or sink's with the source's send rate).
pair() {
  local name=$1 round=$2 mode=$3 recv=$4 send=$5
  shift 5
  side_b --mode "$mode" --role "$recv" --json "$@" >"$WORK/recv.json" 2>"$WORK/recv.err" &
  local pid=$!
  PIDS+=("$pid")
  local rc=0
  side_a --mode "$mode" --role "$send" --json "$@" >"$WORK/send.json" 2>"$WORK/send.err" || rc=$?
  local rrc=0
  wait "$pid" || rrc=$?
  PIDS=("${PIDS[@]/$pid}")
  if [ $rc -ne 0 ] || [ $rrc -ne 0 ]; then
    echo "$SCRIPT: $name round $round failed: $(cat "$WORK/send.err" "$WORK/recv.err")" >&2
    return 1
  fi
  if [ "$send" = ping ]; then
    emit "$name" "$round" "$(cat "$WORK/send.json")"
  else
    local rate
    rate=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["send_msgs_per_s"])' "$WORK/send.json")
    emit "$name" "$round" "$(cat "$WORK/recv.json")" "\"source_msgs_per_s\": $rate"
  fi
}

# ---- pollux-latency across the namespaces ------------------------------------------------------
#
# pollux-latency in namespace A (ping side), its pong process in B (--peer-netns), over the
# multicast group POLLUX_GROUP: each side's udp.interface is its end of the veth pair (--set for
# A, --peer-set for B). Four cases per round, socket and xdp alternating:
#   pollux-socket, pollux-xdp                runtime.threading = inline, runtime.idle = busy-spin
#   pollux-socket-poller, pollux-xdp-poller  a dedicated poller per process next to its application
#                                            thread on the same CPU (idle = yield: two spinning
#                                            threads on one CPU would take turns by the scheduler's tick)
# udp.xdp_mode = copy: native attach, copy bind, the same as pollux-bench-xdp-floor's default, so
# pollux-xdp and xdp-pingpong run the same XDP mode. The figures are the untraced stream's RTT/2
# percentiles doubled (round trips, comparable with the bare ones; Pollux's echo carries 72 bytes
# against the bare 32).
POLLUX_GROUP=239.255.213.1
POLLUX_SKIP=""
pollux_latency_check() {
  if [ ! -x "$LATENCY" ]; then
    POLLUX_SKIP="$LATENCY not found"
  # The help is read whole first: grep -q in a pipe would stop reading at its match, and
  # pollux-latency's SIGPIPE would fail the pipeline (pipefail).
  elif ! [[ $("$LATENCY" --help 2>/dev/null) == *--peer-netns* ]]; then
    POLLUX_SKIP="this pollux-latency has no --peer-netns: it cannot cross the veth pair"
  elif ! "$LATENCY" --set transport.kind=udp --set udp.datapath=xdp --print-config >/dev/null 2>"$WORK/lat.err"; then
    POLLUX_SKIP="pollux-latency refuses --set udp.datapath=xdp: $(head -1 "$WORK/lat.err")"
  fi
}
# pollux_latency_run CASE ROUND DATAPATH THREADING IDLE
pollux_latency_run() {
  local name=$1 round=$2 d=$3 threading=$4 idle=$5
  rm -f "$WORK/lat.json"
  if ! ip netns exec "$NS_A" "$LATENCY" --peer-netns "$NS_B" --cpus 0,1 --count "$COUNT" --warmup "$WARMUP" \
    --set transport.kind=udp --set udp.address="$POLLUX_GROUP" --set udp.datapath="$d" --set udp.xdp_mode=copy \
    --set runtime.threading="$threading" --set runtime.idle="$idle" \
    --set udp.interface="$IF_A" --peer-set udp.interface="$IF_B" --json "$WORK/lat.json" >"$WORK/lat.out" 2>&1; then
    echo "$SCRIPT: $name round $round failed: $(tail -5 "$WORK/lat.out")" >&2
    return 1
  fi
  cp "$WORK/lat.out" "$WORK/$name-$round.txt"
  emit "$name" "$round" "$(python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
u = r["untraced"]
f = r.get("floor") or {}
absent = {s["name"]: s.get("note") for s in r["stages"] if s.get("note")}
print(json.dumps({"datapath": sys.argv[2], "threading": r["threading"], "idle": r["idle"], "count": u["count"],
                  "p50_ns": 2 * u["p50_ns"], "p99_ns": 2 * u["p99_ns"], "rtt_from": "2 x untraced RTT/2",
                  "floor_p50_ns": 2 * f["rtt_half_p50_ns"] if f else None, "timeouts": r.get("timeouts"),
                  "kernel_rx_note": absent.get("kernel_rx")}))' "$WORK/lat.json" "$d")"
}
pollux_latency_round() {
  local round=$1 failed=0
  pollux_latency_run pollux-socket "$round" socket inline busy-spin || failed=1
  pollux_latency_run pollux-xdp "$round" xdp inline busy-spin || failed=1
  pollux_latency_run pollux-socket-poller "$round" socket dedicated yield || failed=1
  pollux_latency_run pollux-xdp-poller "$round" xdp dedicated yield || failed=1
  return $failed
}

# ---- one-way throughput through Pollux across the namespaces ---------------------------------
#
# pollux-test-peer sub in B (pinned to CPU 1) and pub in A (CPU 0), one stream over the multicast
# group, MESSAGES messages of 64 bytes. msgs/s = messages delivered / the publisher's offer-loop
# seconds; the subscriber checks every message (payload, order, every hole reported as a gap).
# Inline busy-spin (the offer() and poll() calls drive the sockets; the subscriber must lose
# nothing), and a dedicated poller per process on its application thread's CPU (idle yield).
# The UDP protocol has no flow control (docs/PROTOCOL.md, section 5): a publisher's poller can
# outrun the subscriber's on 2 vCPUs, and what the retransmit buffer cannot repair is lost - the
# poller rows report that loss (the "lost" column) instead of failing on it.
pollux_tput_config() {  # DATAPATH THREADING IDLE IFACE
  printf '%s\n' "[runtime]" "threading = \"$2\"" "idle = \"$3\"" "pollers = 1" "poller_cores = []" \
    "counters = false" "[transport]" "kind = \"udp\"" "[udp]" "address = \"$POLLUX_GROUP\"" "port = 47100" \
    "interface = \"$4\"" "datapath = \"$1\"" "xdp_mode = \"copy\"" "coalesce_us = $COALESCE_US" \
    "linger_ms = 2000" "[[streams]]" "topic = \"tput\"" "id = 1"
}
pollux_tput_run() {  # CASE ROUND DATAPATH THREADING IDLE
  local name=$1 round=$2 d=$3 threading=$4 idle=$5 no_loss=()
  [ "$threading" = dedicated ] || [ "$ALLOW_LOSS" = 1 ] || no_loss=(--no-loss)
  pollux_tput_config "$d" "$threading" "$idle" "$IF_A" >"$WORK/pub.toml"
  pollux_tput_config "$d" "$threading" "$idle" "$IF_B" >"$WORK/sub.toml"
  ip netns exec "$NS_B" "${PIN_B[@]}" "$PEER" sub --config "$WORK/sub.toml" --topic tput --count "$MESSAGES" \
    --size 64 "${no_loss[@]}" --timeout 60 >"$WORK/sub.out" 2>&1 &
  local pid=$!
  PIDS+=("$pid")
  local rc=0 rrc=0
  ip netns exec "$NS_A" "${PIN_A[@]}" "$PEER" pub --config "$WORK/pub.toml" --topic tput --count "$MESSAGES" \
    --size 64 --timeout 60 >"$WORK/pub.out" 2>&1 || rc=$?
  wait "$pid" || rrc=$?
  PIDS=("${PIDS[@]/$pid}")
  if [ $rc -ne 0 ] || [ $rrc -ne 0 ]; then
    echo "$SCRIPT: $name round $round failed (pub $rc, sub $rrc): $(tail -n 3 "$WORK/pub.out" "$WORK/sub.out")" >&2
    return 1
  fi
  emit "$name" "$round" "$(python3 -c '
import json, re, sys
pub = open(sys.argv[1]).read(); sub = open(sys.argv[2]).read()
p = re.search(r"pub done sent=(\d+) back_pressured=(\d+) seconds=([\d.]+)", pub)
s = re.search(r"sub done received=(\d+) lost=(\d+)", sub)
print(json.dumps({"datapath": sys.argv[3], "threading": sys.argv[4], "coalesce_us": int(sys.argv[5]),
                  "messages": int(p.group(1)), "seconds": float(p.group(3)),
                  "msgs_per_s": int(s.group(1)) / float(p.group(3)), "received": int(s.group(1)),
                  "lost": int(s.group(2))}))' "$WORK/pub.out" "$WORK/sub.out" "$d" "$threading" "$COALESCE_US")"
}
pollux_tput_round() {
  local round=$1 failed=0
  pollux_tput_run pollux-socket-tput "$round" socket inline busy-spin || failed=1
  pollux_tput_run pollux-xdp-tput "$round" xdp inline busy-spin || failed=1
  pollux_tput_run pollux-socket-tput-poller "$round" socket dedicated yield || failed=1
  pollux_tput_run pollux-xdp-tput-poller "$round" xdp dedicated yield || failed=1
  return $failed
}

# ---- rounds ----------------------------------------------------------------------------------
echo "# $SCRIPT: $ROUNDS rounds, $NS_A/$IF_A ($ADDR_A) <-> $NS_B/$IF_B ($ADDR_B), pinned: ${PIN_A[*]:-no} / ${PIN_B[*]:-no}" >&2
if has_case pollux; then
  pollux_latency_check
  [ -z "$POLLUX_SKIP" ] || echo "# pollux-socket / pollux-xdp skipped: $POLLUX_SKIP" >&2
fi
failed=0
for round in $(seq 1 "$ROUNDS"); do
  if has_case pingpong; then
    pair socket-pingpong "$round" socket pong ping --count "$COUNT" --warmup "$WARMUP" || failed=1
    pair xdp-pingpong "$round" xdp pong ping --count "$COUNT" --warmup "$WARMUP" || failed=1
  fi
  if has_case tput; then
    pair socket-tput "$round" socket sink source --seconds "$SECONDS_TPUT" --size 64 || failed=1
    pair xdp-tput "$round" xdp sink source --seconds "$SECONDS_TPUT" --size 64 || failed=1
  fi
  if has_case pollux && [ -z "$POLLUX_SKIP" ]; then
    pollux_latency_round "$round" || failed=1
  fi
  if has_case pollux-tput; then
    if [ -x "$PEER" ]; then
      pollux_tput_round "$round" || failed=1
    elif [ "$round" = 1 ]; then
      echo "# pollux-tput skipped: $PEER not found" >&2
    fi
  fi
done

# ---- summary ---------------------------------------------------------------------------------
[ -s "$WORK/all.jsonl" ] || { echo "$SCRIPT: no run succeeded" >&2; exit 1; }
python3 - "$WORK/all.jsonl" <<'EOF'
import json, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    runs.setdefault(r["case"], []).append(r)
def med(case, key):
    v = [r[key] for r in runs.get(case, []) if r.get(key) is not None]
    return statistics.median(v) if v else None
def fmt(v, digits=0):
    return "-" if v is None else f"{v:,.{digits}f}"
def ratio(a, b):
    return None if a is None or b is None or b == 0 else a / b
print()
print(f"{'case':<22}{'rounds':>7}{'p50 ns':>12}{'p99 ns':>12}{'msgs/s':>14}{'lost':>10}")
cases = ["socket-pingpong", "xdp-pingpong", "pollux-socket", "pollux-xdp", "pollux-socket-poller", "pollux-xdp-poller",
         "socket-tput", "xdp-tput", "pollux-socket-tput", "pollux-xdp-tput", "pollux-socket-tput-poller",
         "pollux-xdp-tput-poller"]
for case in cases:
    if case not in runs:
        continue
    print(f"{case:<22}{len(runs[case]):>7}{fmt(med(case, 'p50_ns')):>12}{fmt(med(case, 'p99_ns')):>12}"
          f"{fmt(med(case, 'msgs_per_s')):>14}{fmt(med(case, 'lost')):>10}")
print()
for case in ["xdp-pingpong", "pollux-xdp"]:
    if case in runs and runs[case][0].get("datapath"):
        print(f"{case} datapath: {runs[case][0]['datapath']}")
def ratio_line(what, x, s, key, target=None):
    if x not in runs or s not in runs:
        return
    v = ratio(med(x, key), med(s, key))
    verdict = "" if target is None or v is None else f"  (target <= {target}: {'met' if v <= target else 'missed'})"
    print(f"{what} {key[:3]}: {fmt(v, 3)}{verdict}")
ratio_line("bare xdp/socket ping-pong", "xdp-pingpong", "socket-pingpong", "p50_ns")
ratio_line("bare xdp/socket ping-pong", "xdp-pingpong", "socket-pingpong", "p99_ns")
for sfx, what in [("", "inline busy-spin"), ("-poller", "dedicated poller")]:
    ratio_line(f"pollux-xdp/pollux-socket ({what})", "pollux-xdp" + sfx, "pollux-socket" + sfx, "p50_ns", 0.7)
    ratio_line(f"pollux-xdp/pollux-socket ({what})", "pollux-xdp" + sfx, "pollux-socket" + sfx, "p99_ns", 0.8)
    ratio_line(f"pollux-xdp/bare-xdp ({what})", "pollux-xdp" + sfx, "xdp-pingpong", "p50_ns", 1.15)
    ratio_line(f"pollux-xdp/bare-xdp ({what})", "pollux-xdp" + sfx, "xdp-pingpong", "p99_ns")
    ratio_line(f"pollux-socket/bare-socket ({what})", "pollux-socket" + sfx, "socket-pingpong", "p50_ns")
if "xdp-tput" in runs and "socket-tput" in runs:
    print(f"xdp/socket one-way 64-byte throughput (bare): "
          f"{fmt(ratio(med('xdp-tput', 'msgs_per_s'), med('socket-tput', 'msgs_per_s')), 3)}")
for sfx, what in [("", "inline busy-spin"), ("-poller", "dedicated poller")]:
    x, s = "pollux-xdp-tput" + sfx, "pollux-socket-tput" + sfx
    if x in runs and s in runs:
        v = ratio(med(x, "msgs_per_s"), med(s, "msgs_per_s"))
        same = [a["msgs_per_s"] / b["msgs_per_s"] for a, b in zip(runs[x], runs[s])]
        print(f"pollux xdp/socket one-way 64-byte throughput ({what}, coalesce_us {runs[x][0]['coalesce_us']}): "
              f"{fmt(v, 3)} (per round: {', '.join(f'{r:.2f}' for r in same)}; target >= 2: "
              f"{'met' if v is not None and v >= 2 else 'missed'})")
EOF
exit $failed
