#include "tools/latency/rdma_caps.h"

#include <dirent.h>

#include <cstdlib>
#include <fstream>
#include <vector>

#include "absl/strings/str_format.h"

#if defined(POLLUX_HAVE_RDMA)
#include "transport/rdma/device.h"
#include "transport/rdma/device_info.h"
#include "transport/rdma/rdma_config.h"
#endif

namespace pollux::latency {

std::string rdma_completion_timestamp_note(const core::Config& cfg) {
#if !defined(POLLUX_HAVE_RDMA)
  (void)cfg;
  return "not measured by this version (built without the RDMA transport: no device to ask about completion "
         "timestamps)";
#else
  absl::StatusOr<std::string> name =
      transport::rdma::resolve_device_name(transport::rdma::config(cfg), cfg.runtime.device);
  if (!name.ok()) {
    return absl::StrFormat("not measured by this version (no RDMA device to ask about completion timestamps: %s)",
                           std::string(name.status().message()));
  }
  absl::StatusOr<transport::rdma::DeviceInfo> d = transport::rdma::query_device_info(*name, std::nullopt, 0);
  if (!d.ok()) return absl::StrFormat("not measured by this version (%s)", std::string(d.status().message()));
  if (!d->attr_ex) return absl::StrFormat("not measured by this version (%s(%s))", d->attr_ex_error, *name);
  if (d->completion_timestamp_mask == 0) {
    return absl::StrFormat(
        "device %s does not offer completion timestamps (completion_timestamp_mask = 0): host "
        "and NIC time cannot be split on it",
        *name);
  }
  return absl::StrFormat(
      "not measured by this version: device %s offers completion timestamps (mask 0x%x, "
      "hca_core_clock %d kHz) but the transport does not create its CQs with "
      "IBV_WC_EX_WITH_COMPLETION_TIMESTAMP yet",
      *name, d->completion_timestamp_mask, d->hca_core_clock_khz);
#endif
}

namespace {

std::string ReadLine(const std::string& path) {
  std::ifstream f(path);
  std::string line;
  if (!f || !std::getline(f, line)) return "";
  return line;
}

// First CPU of a sysfs cpulist ("0-3,8-11" -> 0), -1 if empty.
int FirstCpu(const std::string& list) {
  if (list.empty() || list[0] < '0' || list[0] > '9') return -1;
  return std::atoi(list.c_str());
}

}  // namespace

std::string rdma_mlx5dv_note(const core::Config& cfg, bool* present) {
  *present = false;
#if !defined(POLLUX_HAVE_RDMA)
  (void)cfg;
  return "mlx5dv: not present (built without the RDMA transport)";
#else
  absl::StatusOr<std::string> name =
      transport::rdma::resolve_device_name(transport::rdma::config(cfg), cfg.runtime.device);
  if (!name.ok()) {
    return absl::StrFormat("mlx5dv: not present (no RDMA device: %s)", std::string(name.status().message()));
  }
#if !POLLUX_HAVE_MLX5DV
  return absl::StrFormat("mlx5dv: not present (built without mlx5dv; device %s)", *name);
#else
  absl::StatusOr<transport::rdma::DeviceInfo> d = transport::rdma::query_device_info(*name, std::nullopt, 0);
  if (!d.ok()) return absl::StrFormat("mlx5dv: not present (%s)", std::string(d.status().message()));
  if (!d->mlx5dv)
    return absl::StrFormat("mlx5dv: not present (device %s is not mlx5: mlx5dv_is_supported() = 0)", *name);
  *present = true;
  return absl::StrFormat("mlx5dv: present (device %s is mlx5): measured as --ab rdma.mlx5dv=off,auto", *name);
#endif
#endif
}

NumaPlan numa_plan(const core::Config& cfg) {
  NumaPlan p;
  std::vector<int> nodes;
  if (DIR* d = opendir("/sys/devices/system/node")) {
    while (dirent* e = readdir(d)) {
      const std::string n = e->d_name;
      if (n.size() > 4 && n.compare(0, 4, "node") == 0 && n[4] >= '0' && n[4] <= '9')
        nodes.push_back(std::atoi(n.c_str() + 4));
    }
    closedir(d);
  }
  p.nodes = static_cast<int>(nodes.size());
  if (p.nodes <= 1) {
    p.note = absl::StrFormat("NUMA: single NUMA node: not measurable here (/sys/devices/system/node lists %d node%s)",
                             p.nodes, p.nodes == 1 ? "" : "s");
    return p;
  }
  std::string dev = "the first node (the transport's device has no node in sysfs)";
#if defined(POLLUX_HAVE_RDMA)
  if (cfg.transport == core::TransportKind::kRdma) {
    if (absl::StatusOr<std::string> name =
            transport::rdma::resolve_device_name(transport::rdma::config(cfg), cfg.runtime.device);
        name.ok()) {
      const std::string v = ReadLine("/sys/class/infiniband/" + *name + "/device/numa_node");
      if (!v.empty()) p.device_node = std::atoi(v.c_str());
      dev = absl::StrFormat("device %s's node %d", *name, p.device_node);
    }
  }
#else
  (void)cfg;
#endif
  const int local = p.device_node >= 0 ? p.device_node : nodes[0];
  p.local_cpu = FirstCpu(ReadLine(absl::StrFormat("/sys/devices/system/node/node%d/cpulist", local)));
  for (int n : nodes) {
    if (n == local) continue;
    p.remote_cpu = FirstCpu(ReadLine(absl::StrFormat("/sys/devices/system/node/node%d/cpulist", n)));
    if (p.remote_cpu >= 0) break;
  }
  if (p.local_cpu < 0 || p.remote_cpu < 0) {
    p.note = absl::StrFormat("NUMA: %d nodes, but no CPU found on %s and on another node: not measurable here", p.nodes,
                             dev);
    p.local_cpu = p.remote_cpu = -1;
  } else {
    p.note = absl::StrFormat(
        "NUMA: %d nodes; poller on %s (CPU %d) vs another node (CPU %d): measured as --ab "
        "runtime.poller_cores=[%d],[%d]",
        p.nodes, dev, p.local_cpu, p.remote_cpu, p.local_cpu, p.remote_cpu);
  }
  return p;
}

}  // namespace pollux::latency
