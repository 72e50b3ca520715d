// Checks made before an AF_XDP socket is opened, shared by the users of xdp::Xsk (the UDP
// transport's port, the datagram receiver): what would make the open fail, said with the fix.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace pollux::transport::udp::xdp {

// The interface's RX queue count from sysfs (0: unknown, sysfs not mounted for this namespace).
std::uint32_t rx_queue_count(const std::string& ifname);

// The RX queues to bind on `ifname`: `requested` when it names any (each must exist and appear
// once), else every RX queue of the interface (queue 0 when sysfs does not say how many). Errors
// name `key` (the setting that lists them) and the interface's queues.
absl::StatusOr<std::vector<std::uint32_t>> select_queues(const std::string& ifname,
                                                         const std::vector<std::uint32_t>& requested,
                                                         const std::string& key);

// Why opening an AF_XDP socket on `ifname` with a UMEM of `umem_bytes` will fail, before anything
// is attached: the capabilities and the locked-memory limit. "" = nothing known against it.
// `instead` names the setting that avoids AF_XDP (`udp.datapath = "socket"`), `frames_key` the one
// that sizes the UMEM.
std::string preflight(const std::string& ifname, std::uint64_t umem_bytes, const std::string& instead,
                      const std::string& frames_key);

}  // namespace pollux::transport::udp::xdp
