// What the RDMA device of a configuration says about completion timestamps, asked for real
// (ibv_query_device_ex: completion_timestamp_mask, hca_core_clock), for pollux-latency's notes
// on the stages it cannot split yet.
#pragma once

#include <string>

#include "core/config.h"

namespace pollux::latency {

// One sentence: "device rxe0 does not offer completion timestamps (...)", or that it offers
// them and this version does not take them, or why the device could not be asked.
std::string rdma_completion_timestamp_note(const core::Config& cfg);

// The seed's switches that may not be measurable on this machine (pollux-latency --seed).
// mlx5dv / BlueFlame: `*present` is set when the configured device is an mlx5 (asked of the
// device, mlx5dv_is_supported()); the text says which device and why not otherwise.
std::string rdma_mlx5dv_note(const core::Config& cfg, bool* present);
// NUMA: the machine's node count (sysfs /sys/devices/system/node), the configured RDMA
// device's node (-1: unknown or not RDMA), and one CPU on that node and one on another
// (-1 when there is none). `note` says what was found.
struct NumaPlan {
  int nodes = 0;
  int device_node = -1;
  int local_cpu = -1, remote_cpu = -1;
  std::string note;
};
NumaPlan numa_plan(const core::Config& cfg);

}  // namespace pollux::latency
