// What an RDMA device offers, asked of the device itself: attributes (ibv_query_device_ex:
// completion timestamps, CQ moderation), ports (state, link layer, MTU, GID table) and the
// largest inline send a QP accepts (a throw-away QP: the only way to learn max_inline_data).
// For the tools (pollux-doctor's RDMA section, pollux-latency's notes); control path only, it
// opens and closes the device on every call and never touches a transport's resources.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "transport/rdma/verbs_errors.h"

namespace pollux::transport::rdma {

struct PortInfo {
  std::uint8_t port = 1;
  int state = 0;       // IBV_PORT_* (port_state_name())
  int phys_state = 0;  // 5 = LinkUp
  int link_layer = 0;  // IBV_LINK_LAYER_ETHERNET / _INFINIBAND
  std::uint32_t active_mtu_bytes = 0;
  int gid_table_len = 0;
  std::vector<GidEntry> gids;
  std::string netdev;  // interface of the first GID that names one ("" when none does)
};

// max_inline_data as the device grants it, probed with throw-away QPs of one type.
struct InlineProbe {
  bool ran = false;
  std::string error;          // why it did not run (no PD/CQ/QP could be made), else ""
  std::uint32_t max = 0;      // the largest max_inline_data a QP was granted
  std::uint32_t asked = 0;    // the configured rdma.inline_threshold ...
  std::uint32_t granted = 0;  // ... and what a QP asking for it gets (halving on refusal, as create_qp does)
};

struct DeviceInfo {
  std::string name;
  std::string fw_ver;
  int phys_port_cnt = 0;
  int max_qp_wr = 0, max_cqe = 0, max_srq = 0;
  bool attr_ex = false;       // ibv_query_device_ex answered
  std::string attr_ex_error;  // ... or why not
  std::uint64_t completion_timestamp_mask = 0;
  std::uint64_t hca_core_clock_khz = 0;
  std::uint16_t max_cq_moderation_count = 0;  // 0/0: the device cannot moderate CQ events
  std::uint16_t max_cq_moderation_period_us = 0;
  bool mlx5dv = false;  // mlx5dv_is_supported() (false when built without mlx5dv)
  std::vector<PortInfo> ports;
  InlineProbe inline_probe;  // only when asked for (query_device_info's probe_qp_type)
};

// Names of the verbs devices (ibv_get_device_list), in name order: rdma_device_names().
// Opens `name`, fills DeviceInfo, closes it. `probe_qp_type` = IBV_QPT_RC or IBV_QPT_UD probes
// max_inline_data with QPs of that type (asking `inline_threshold` first), nullopt skips it.
// NotFound / the open error with its remedy when the device cannot be opened.
absl::StatusOr<DeviceInfo> query_device_info(std::string_view name, std::optional<ibv_qp_type> probe_qp_type,
                                             std::uint32_t inline_threshold);

// One line: "rxe0 port 1 ACTIVE Ethernet mtu 1024, 2 GIDs, max_inline_data 400, CQ moderation no".
std::string describe(const DeviceInfo& d);

}  // namespace pollux::transport::rdma
