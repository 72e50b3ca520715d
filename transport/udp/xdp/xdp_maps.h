// The maps shared by the XDP program (pollux_xdp.bpf.c) and user space (xsk.cc): their names and
// the layout of their keys and values. Plain C, read by clang -target bpf and by g++.
#ifndef POLLUX_TRANSPORT_UDP_XDP_XDP_MAPS_H_
#define POLLUX_TRANSPORT_UDP_XDP_XDP_MAPS_H_

#include <linux/types.h>

// The program's name (its function) and the names of its maps. The kernel keeps only the first
// 15 characters of a program's name (BPF_OBJ_NAME_LEN); kPolluxXdpProgKernelName is that prefix.
#define POLLUX_XDP_PROG_NAME "pollux_xsk_filter"
#define POLLUX_XDP_PROG_KERNEL_NAME "pollux_xsk_filt"
#define POLLUX_XDP_DESTS_MAP "pollux_dests"
#define POLLUX_XDP_XSKS_MAP "pollux_xsks"
#define POLLUX_XDP_OWNER_MAP "pollux_owner"

// Capacity of the maps: UDP destinations redirected, and rx queues with a socket.
#define POLLUX_XDP_MAX_DESTS 1024
#define POLLUX_XDP_MAX_QUEUES 64

// Key of pollux_dests: a UDP destination, both fields in network byte order. addr 0 matches any
// destination address on that port. The value (a __u32) is unused (1).
struct pollux_xdp_dest {
  __u32 addr;
  __u16 port;
  __u16 pad;
};

// The one entry of pollux_owner: the process that attached the program, so that the next open
// can tell a program left by a dead process (removed) from one a live process uses (refused).
// start_time is /proc/<pid>/stat's starttime (clock ticks since boot), which tells a reused pid.
struct pollux_xdp_owner {
  __u32 pid;
  __u32 pad;
  __u64 start_time;
};

#endif  // POLLUX_TRANSPORT_UDP_XDP_XDP_MAPS_H_
