// Turning verbs failures into messages a user can act on. Pure functions of their inputs (no
// device needed), so every message is unit-tested on the host (tests/rdma/verbs_unit_test.cc).
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"

namespace pollux::transport::rdma {

// RLIMIT_MEMLOCK as the process sees it, plus whether CAP_IPC_LOCK lifts it.
struct MemlockLimit {
  std::uint64_t soft_bytes = 0;  // UINT64_MAX = unlimited
  std::uint64_t hard_bytes = 0;
  bool cap_ipc_lock = false;
};
MemlockLimit current_memlock();

// Status for a failed ibv_reg_mr of `bytes` bytes: a memlock limit names the `ulimit -l` value
// to set (in KiB, as the shell takes it), the systemd and limits.conf equivalents.
absl::Status reg_mr_error(int err, std::uint64_t bytes, const MemlockLimit& limit, std::string_view device);
// Checked before registering, so the message comes before the kernel's opaque ENOMEM.
absl::Status check_memlock(std::uint64_t bytes, const MemlockLimit& limit, std::string_view device);

// Status for a device that cannot be opened (permissions, missing uverbs module).
absl::Status open_device_error(int err, std::string_view device);

// No RDMA device at all, or not the one configured.
absl::Status no_device_error(std::string_view wanted, const std::vector<std::string>& available);

std::string_view port_state_name(int state);
absl::Status port_down_error(std::string_view device, std::uint32_t port, int state, int phys_state);

// "::ffff:10.0.0.1" style text; IPv4 of an IPv4-mapped GID (host byte order).
std::string format_gid(const ibv_gid& gid);
std::optional<std::uint32_t> gid_ipv4(const ibv_gid& gid);
std::string format_ipv4(std::uint32_t host_order);
// The RoCEv2 multicast GID for an IPv4 group: ::ffff:<group>.
ibv_gid multicast_gid(std::uint32_t group_host_order);

struct GidEntry {
  int index;
  ibv_gid gid;
  bool roce_v2;
  std::uint32_t type = IBV_GID_TYPE_ROCE_V2;  // IBV_GID_TYPE_IB, _ROCE_V1 or _ROCE_V2 (as the device says)
  std::uint32_t ndev_ifindex = 0;             // the Ethernet interface the GID belongs to (0: none)
};
// "IB", "RoCE v1", "RoCE v2".
std::string_view gid_type_name(std::uint32_t type);
// bad index: lists the valid entries and how to pick one.
absl::Status bad_gid_error(std::string_view device, std::uint32_t port, int index, std::string_view why,
                           const std::vector<GidEntry>& valid);
// Index of the RoCEv2 IPv4-mapped GID (what gid_index = -1 picks), or -1.
int pick_roce_v2_ipv4(const std::vector<GidEntry>& entries);

// What a failed work completion most likely means, for logs and Status messages.
std::string_view wc_status_hint(ibv_wc_status status);

// "a.b.c.d:port" -> address and port (host byte order). False on anything else.
bool parse_ip_port(std::string_view s, std::uint32_t* ip, std::uint16_t* port);
bool parse_ipv4(std::string_view s, std::uint32_t* ip);

}  // namespace pollux::transport::rdma
