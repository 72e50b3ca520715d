// SPDX-License-Identifier: GPL-2.0
// Pollux's XDP program for AF_XDP (docs/XDP.md): an IPv4/UDP datagram that is not a fragment and
// whose (destination address, destination port) is in pollux_dests goes to the AF_XDP socket of
// the rx queue it arrived on (pollux_xsks); everything else, and a queue without a socket, goes to
// the kernel's stack (XDP_PASS).
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/udp.h>

// libbpf's helpers need the kernel's types above.
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>
#include <xdp/xdp_helpers.h>

#include "xdp_maps.h"

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, POLLUX_XDP_MAX_DESTS);
  __type(key, struct pollux_xdp_dest);
  __type(value, __u32);
} pollux_dests SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_XSKMAP);
  __uint(max_entries, POLLUX_XDP_MAX_QUEUES);
  __type(key, __u32);
  __type(value, __u32);
} pollux_xsks SEC(".maps");

// Written by user space only (see struct pollux_xdp_owner); referenced below so that it belongs
// to the program and can be found from the program's id.
struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct pollux_xdp_owner);
} pollux_owner SEC(".maps");

// For libxdp's dispatcher, where the kernel allows it: run before lower priorities, and let the
// next program see what this one passes.
struct {
  __uint(priority, 10);
  __uint(XDP_PASS, 1);
} XDP_RUN_CONFIG(pollux_xsk_filter);

SEC("xdp")
int pollux_xsk_filter(struct xdp_md* ctx) {
  void* data = (void*)(long)ctx->data;
  void* end = (void*)(long)ctx->data_end;
  struct ethhdr* eth = data;
  if ((void*)(eth + 1) > end || eth->h_proto != bpf_htons(ETH_P_IP)) return XDP_PASS;
  struct iphdr* ip = (void*)(eth + 1);
  if ((void*)(ip + 1) > end || ip->version != 4 || ip->ihl < 5 || ip->protocol != IPPROTO_UDP) return XDP_PASS;
  // More-fragments flag or a fragment offset: the kernel reassembles.
  if (ip->frag_off & bpf_htons(0x3fff)) return XDP_PASS;
  // IP options are allowed: the UDP header starts after ihl 32-bit words.
  struct udphdr* udp = (void*)ip + ip->ihl * 4;
  if ((void*)(udp + 1) > end) return XDP_PASS;
  struct pollux_xdp_dest key = {.addr = ip->daddr, .port = udp->dest, .pad = 0};
  if (!bpf_map_lookup_elem(&pollux_dests, &key)) {
    key.addr = 0;
    if (!bpf_map_lookup_elem(&pollux_dests, &key)) return XDP_PASS;
  }
  // Keeps pollux_owner in the program's map list (never true: the array has one entry).
  __u32 owner_key = 1;
  if (bpf_map_lookup_elem(&pollux_owner, &owner_key)) return XDP_PASS;
  return bpf_redirect_map(&pollux_xsks, ctx->rx_queue_index, XDP_PASS);
}

char _license[] SEC("license") = "GPL";
