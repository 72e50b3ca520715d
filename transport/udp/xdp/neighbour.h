// The destination MAC of an IPv4 datagram sent through an XSK: the kernel's neighbour table for
// unicast (netlink RTM_GETNEIGH), the 01:00:5e mapping for multicast. Control path (allocates).
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"

namespace pollux::transport::udp::xdp {

struct MacAddress {
  std::uint8_t bytes[6];
};

// The MAC of IPv4 multicast group `group` (network byte order): 01:00:5e + its low 23 bits.
MacAddress multicast_mac(std::uint32_t group);

// Where the kernel's routing table sends `addr` (network byte order) out of interface `ifindex`:
// the route's gateway, or `addr` itself when it is on the link (RTM_GETROUTE). Control path.
absl::StatusOr<std::uint32_t> next_hop(int ifindex, std::uint32_t addr);

// The link-layer address the kernel holds for `addr` (network byte order) on interface `ifindex`,
// in the calling thread's network namespace: an entry in any state that carries one (REACHABLE,
// STALE, DELAY, PROBE, PERMANENT, NOARP). NotFound when there is none (INCOMPLETE or FAILED
// entries included): resolving it (sending through a normal socket first) is the caller's part.
absl::StatusOr<MacAddress> lookup_neighbour(int ifindex, std::uint32_t addr);

}  // namespace pollux::transport::udp::xdp
