// pollux-doctor's checks, one function per area. Each reads the host through HostFs (so a
// test can feed a fabricated /sys and /proc), judges what it finds against the configuration
// Pollux would run with, and adds Checks to the report (tools/doctor/report.h).
//
// Without --config nothing says which transport will run, so every transport's checks are
// judged (a UDP sysctl too small is a warning); with --config only the configured transport's
// are, the others' findings become info.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/buffer_pool.h"
#include "core/config.h"
#include "core/topology.h"
#include "tools/doctor/host_fs.h"
#include "tools/doctor/report.h"

namespace pollux::doctor {

struct Host {
  HostFs fs;
  core::Config cfg;
  bool config_given = false;
  std::string shm_dir;                   // counters files of running processes
  bool probe_qps = true;                 // rdma: create throw-away QPs for max_inline_data
  std::unique_ptr<core::Topology> topo;  // hwloc (under the root); null when it failed
  std::string topo_error;

  // Filled by plan_pollers():
  std::string placement_device;  // runtime.device, else the transport's device, else ""
  int device_node = -1;          // its NUMA node (-1: none or unknown)
  std::vector<int> poller_cpus;  // core::poller_cpus(): -1 = unpinned
  std::vector<int> online;       // online CPUs (/sys/devices/system/cpu/online)

  // Whether findings about transport `k` are judged (warn/fail) or only reported (info).
  bool judged(core::TransportKind k) const { return !config_given || cfg.transport == k; }
  // The pinned poller CPUs (no -1), sorted, unique.
  std::vector<int> pinned_cpus() const;
};

// Where the configuration's pollers would run (what Context::start() would pin).
void plan_pollers(Host& h);

// The buffer pool a context of this configuration would map.
core::PoolOptions pool_options(const core::Config& cfg);

void check_cpu(const Host& h, Report& r);
void check_memory(const Host& h, Report& r);
void check_network(const Host& h, Report& r);
void check_memlock(const Host& h, Report& r);  // (checks_rdma.cc: only RDMA pins memory)
void check_rdma(const Host& h, Report& r);
void check_processes(const Host& h, Report& r);
void check_xdp(const Host& h, Report& r);  // AF_XDP (udp.datapath = "xdp"): caps, limits, kernel, interfaces

// The interface udp.interface names: itself, or the one holding that IPv4 address (this host
// only; "" when none does).
std::string udp_interface_name(const Host& h);

// NUMA node of a device under /sys/class/{net,infiniband}/NAME (-1: none), walking up its
// device path; and the MSI IRQs of the PCI function behind it.
int sysfs_device_node(const HostFs& fs, const std::string& class_dir);
std::vector<int> sysfs_device_irqs(const HostFs& fs, const std::string& class_dir);
// One check per device: which CPUs its IRQs may be delivered to, against the pinned pollers.
void check_irqs(const Host& h, Report& r, const std::string& area, const std::string& device,
                const std::vector<int>& irqs);

}  // namespace pollux::doctor
