// Machine topology and placement through hwloc: NUMA nodes, cores, the NUMA node of a named
// network or RDMA device, thread pinning and node-bound memory.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/config.h"

namespace pollux::core {

struct CoreInfo {
  int core_index;                  // logical index of the core (hwloc)
  int first_pu_os_index;           // OS CPU number of its first hardware thread (what pin_thread takes)
  int numa_node;                   // OS index of its NUMA node (0 on single-node machines)
  std::vector<int> pu_os_indexes;  // OS CPU numbers of all its hardware threads (SMT siblings)
};

struct DeviceLocation {
  std::string name;
  std::string kind;    // "net" or "rdma"
  int numa_node;       // -1 when the device has no NUMA affinity (virtual devices, 1-node hosts)
  std::string source;  // "hwloc" or "/sys/class/..." - where the answer came from
};

class Topology {
 public:
  static absl::StatusOr<std::unique_ptr<Topology>> load();
  ~Topology();

  int numa_nodes() const noexcept { return numa_nodes_; }
  const std::vector<CoreInfo>& cores() const noexcept { return cores_; }
  std::vector<int> cpus_on_node(int node) const;  // OS CPU numbers, one per core

  // NUMA node of a network interface ("eth0", "veth1") or RDMA device ("mlx5_0", "rxe0").
  // NotFound with the places searched when no such device exists.
  absl::StatusOr<DeviceLocation> locate_device(std::string_view name) const;
  // All RDMA devices hwloc or sysfs know of, in name order.
  std::vector<std::string> rdma_devices() const;

  // Pins the calling thread to one OS CPU.
  absl::Status pin_current_thread(int os_cpu) const;
  // Lets the calling thread run on any of `os_cpus` (none: leaves it as it is).
  absl::Status pin_current_thread(const std::vector<int>& os_cpus) const;

  // Binds [addr, addr+len) to a NUMA node (-1 = leave it to the kernel's first-touch policy).
  absl::Status bind_memory(void* addr, std::size_t len, int numa_node) const;

  // One line per node/core, for logs and `--print-config`.
  std::string describe() const;

 private:
  Topology() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int numa_nodes_ = 1;
  std::vector<CoreInfo> cores_;
};

// The OS CPU each poller of `rt` is pinned to, in poller order (-1: not pinned). Dedicated mode:
// runtime.poller_cores when set, else the highest-numbered of `node_cpus` (one CPU per core of
// the placement device's NUMA node, Topology::cpus_on_node: CPU 0 usually takes the OS's
// interrupts), wrapping when there are more pollers than cores. Shared mode: one unpinned
// poller. Inline mode: none. What pollux-doctor checks, and the preference Context::start()
// starts from: automatic cores are then claimed in runtime.shm_dir (core/placement.h), so a
// second process on the host gets the next unclaimed cores (and a poller with none left runs
// unpinned) instead of these.
std::vector<int> poller_cpus(const RuntimeConfig& rt, const std::vector<int>& node_cpus);

// Process-wide topology, loaded on first use (hwloc discovery takes a few ms).
const Topology& topology();

}  // namespace pollux::core
