#!/usr/bin/env bash
# Private test network for the UDP transport: network namespaces joined by veth pairs to a
# bridge that lives in its own namespace, so nothing is created in (or routed through) the
# host's namespace. Addresses are 10.<net>.0.0/24 (private), multicast stays on the bridge
# (TTL 1 in the tests).
#
#   netns.sh up   <prefix> <net> <host>...   creates <prefix>br (bridge) and <prefix><host>
#                                            (one per host, eth0 = 10.<net>.0.<index+1>)
#   netns.sh loss <prefix><host> dport|sport <port> <percent>   drops <percent>% of the UDP
#                                            datagrams to (dport) or from (sport) <port> on their
#                                            way into that namespace (nftables); 100 = partition
#   netns.sh unloss <prefix><host>           removes that namespace's loss rules
#   netns.sh bridgeloss <prefix> <port> <percent>   drops <percent>% of the UDP datagrams to or
#                                            from <port> crossing the bridge (nftables, bridge
#                                            family): the wire loss AF_XDP peers see, since XDP
#                                            takes frames before nftables in their namespaces
#                                            (remove with `unloss <prefix>br`)
#   netns.sh dup  <prefix><host> <port> <percent> <group>  duplicates <percent>% of UDP datagrams
#                                            that namespace sends to <group>:<port>
#   netns.sh down <prefix>                   deletes every namespace named <prefix>*
set -euo pipefail

cmd=${1:-}
case "$cmd" in
  up)
    prefix=$2 net=$3
    shift 3
    ip netns add "${prefix}br"
    ip -n "${prefix}br" link set lo up
    ip -n "${prefix}br" link add br0 type bridge mcast_snooping 0
    ip -n "${prefix}br" link set br0 up
    i=1
    for h in "$@"; do
      ns="${prefix}${h}"
      ip netns add "$ns"
      ip -n "$ns" link set lo up
      # Create the pair inside the host namespace's view of the new namespace only: both ends
      # are created in $ns, then one end moves to the bridge namespace.
      ip -n "$ns" link add eth0 type veth peer name "p${i}"
      ip -n "$ns" link set "p${i}" netns "${prefix}br"
      ip -n "${prefix}br" link set "p${i}" master br0
      ip -n "${prefix}br" link set "p${i}" up
      ip -n "$ns" addr add "10.${net}.0.${i}/24" dev eth0
      ip -n "$ns" link set eth0 up
      i=$((i + 1))
    done
    ;;
  loss)
    ns=$2 dir=$3 port=$4 pct=$5
    case "$dir" in dport|sport) ;; *) echo "loss: expected dport|sport, got $dir" >&2; exit 2 ;; esac
    rule="udp ${dir} ${port} numgen random mod 100 < ${pct} counter drop"
    if [ "$pct" -ge 100 ]; then rule="udp ${dir} ${port} counter drop"; fi
    ip netns exec "$ns" nft -f - <<NFT
table ip pollux_loss {
  chain in {
    type filter hook prerouting priority raw; policy accept;
    ${rule}
  }
}
NFT
    ;;
  bridgeloss)
    prefix=$2 port=$3 pct=$4
    ip netns exec "${prefix}br" nft -f - <<NFT
table bridge pollux_loss {
  chain lossy {
    type filter hook forward priority 0; policy accept;
    ether type ip udp dport ${port} numgen random mod 100 < ${pct} counter drop
    ether type ip udp sport ${port} numgen random mod 100 < ${pct} counter drop
  }
}
NFT
    ;;
  unloss)
    ip netns exec "$2" nft delete table ip pollux_loss 2>/dev/null || true
    ip netns exec "$2" nft delete table bridge pollux_loss 2>/dev/null || true
    ;;
  counters)
    # Packets matched by the loss/dup rules: "<drops> <dups>".
    d=$(ip netns exec "$2" nft list ruleset 2>/dev/null | awk '/counter packets/ && / drop/ {for (i = 1; i <= NF; i++) if ($i == "packets") s += $(i+1)} END {print s+0}')
    u=$(ip netns exec "$2" nft list ruleset 2>/dev/null | awk '/counter packets/ && /dup to/ {for (i = 1; i <= NF; i++) if ($i == "packets") s += $(i+1)} END {print s+0}')
    echo "$d $u"
    ;;
  dup)
    ns=$2 port=$3 pct=$4 group=$5
    ip netns exec "$ns" nft -f - <<NFT
table ip pollux_dup {
  chain out {
    type filter hook postrouting priority 0; policy accept;
    ip daddr ${group} udp dport ${port} numgen random mod 100 < ${pct} counter dup to ${group} device eth0
  }
}
NFT
    ;;
  down)
    prefix=$2
    for ns in $(ip netns list | awk '{print $1}' | grep "^${prefix}" || true); do
      ip netns del "$ns" || true
    done
    ;;
  *)
    echo "usage: $0 up|loss|bridgeloss|unloss|dup|counters|down ..." >&2
    exit 2
    ;;
esac
