#include "core/topology.h"

#include <dirent.h>
#include <unistd.h>

#include <hwloc.h>
#include <cstdio>
#include <cstdlib>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace pollux::core {

struct Topology::Impl {
  hwloc_topology_t topo = nullptr;
  ~Impl() {
    if (topo != nullptr) hwloc_topology_destroy(topo);
  }
};

Topology::~Topology() = default;

absl::StatusOr<std::unique_ptr<Topology>> Topology::load() {
  std::unique_ptr<Topology> t(new Topology());
  t->impl_ = std::make_unique<Impl>();
  if (hwloc_topology_init(&t->impl_->topo) != 0) return absl::InternalError("hwloc_topology_init failed");
  // Keep PCI/OS devices so network and RDMA devices can be placed on their NUMA node.
  hwloc_topology_set_io_types_filter(t->impl_->topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  if (hwloc_topology_load(t->impl_->topo) != 0) {
    return absl::InternalError(absl::StrCat("hwloc_topology_load failed: ", std::strerror(errno)));
  }
  hwloc_topology_t topo = t->impl_->topo;
  t->numa_nodes_ = std::max(1, hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE));
  const int ncores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
  for (int i = 0; i < ncores; ++i) {
    hwloc_obj_t core = hwloc_get_obj_by_type(topo, HWLOC_OBJ_CORE, static_cast<unsigned>(i));
    hwloc_obj_t pu = hwloc_get_obj_inside_cpuset_by_type(topo, core->cpuset, HWLOC_OBJ_PU, 0);
    if (pu == nullptr) continue;
    int node = 0;
    hwloc_obj_t n = hwloc_get_next_obj_covering_cpuset_by_type(topo, core->cpuset, HWLOC_OBJ_NUMANODE, nullptr);
    if (n != nullptr) node = static_cast<int>(n->os_index);
    CoreInfo info{i, static_cast<int>(pu->os_index), node, {}};
    for (hwloc_obj_t sib = pu; sib != nullptr;
         sib = hwloc_get_next_obj_inside_cpuset_by_type(topo, core->cpuset, HWLOC_OBJ_PU, sib)) {
      info.pu_os_indexes.push_back(static_cast<int>(sib->os_index));
    }
    t->cores_.push_back(std::move(info));
  }
  if (t->cores_.empty()) return absl::InternalError("hwloc found no cores");
  return t;
}

std::vector<int> Topology::cpus_on_node(int node) const {
  std::vector<int> out;
  for (const CoreInfo& c : cores_) {
    if (node < 0 || c.numa_node == node) out.push_back(c.first_pu_os_index);
  }
  return out;
}

namespace {
int read_sysfs_int(const std::string& path, bool* found) {
  std::ifstream f(path);
  int v = -1;
  *found = static_cast<bool>(f >> v);
  return v;
}
bool path_exists(const std::string& p) { return access(p.c_str(), F_OK) == 0; }

std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] != '.') out.emplace_back(e->d_name);
    }
    closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}
}  // namespace

absl::StatusOr<DeviceLocation> Topology::locate_device(std::string_view name) const {
  const std::string n(name);
  // hwloc knows PCI devices (and their OS names, e.g. mlx5_0, eth0) with their locality.
  hwloc_obj_t osdev = nullptr;
  while ((osdev = hwloc_get_next_osdev(impl_->topo, osdev)) != nullptr) {
    if (osdev->name == nullptr || n != osdev->name) continue;
    DeviceLocation loc{n, osdev->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS ? "rdma" : "net", -1, "hwloc"};
    hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(impl_->topo, osdev);
    if (anc != nullptr && numa_nodes_ > 1) {
      hwloc_obj_t node =
          hwloc_get_next_obj_covering_cpuset_by_type(impl_->topo, anc->cpuset, HWLOC_OBJ_NUMANODE, nullptr);
      if (node != nullptr) loc.numa_node = static_cast<int>(node->os_index);
    } else if (numa_nodes_ == 1) {
      loc.numa_node = 0;
    }
    return loc;
  }
  // Virtual devices (veth, rxe on a veth, loopback) are not PCI objects: ask sysfs.
  for (const auto& [kind, dir] : {std::pair{"rdma", "/sys/class/infiniband/"}, std::pair{"net", "/sys/class/net/"}}) {
    const std::string base = std::string(dir) + n;
    if (!path_exists(base)) continue;
    bool found = false;
    int node = read_sysfs_int(base + "/device/numa_node", &found);
    if (!found && numa_nodes_ == 1) node = 0;
    return DeviceLocation{n, kind, node, base};
  }
  std::vector<std::string> known = list_dir("/sys/class/net");
  for (auto& r : list_dir("/sys/class/infiniband")) known.push_back(r);
  return absl::NotFoundError(
      absl::StrFormat("device '%s' not found (searched hwloc OS devices, /sys/class/infiniband, /sys/class/net); "
                      "devices present: %s",
                      n, known.empty() ? "none" : absl::StrJoin(known, ", ")));
}

std::vector<std::string> Topology::rdma_devices() const { return list_dir("/sys/class/infiniband"); }

absl::Status Topology::pin_current_thread(int os_cpu) const {
  hwloc_bitmap_t set = hwloc_bitmap_alloc();
  hwloc_bitmap_only(set, static_cast<unsigned>(os_cpu));
  const int rc = hwloc_set_cpubind(impl_->topo, set, HWLOC_CPUBIND_THREAD);
  const int err = errno;
  hwloc_bitmap_free(set);
  if (rc != 0) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "cannot pin thread to CPU %d: %s (is the CPU in this process's cpuset?)", os_cpu, std::strerror(err)));
  }
  return absl::OkStatus();
}

absl::Status Topology::pin_current_thread(const std::vector<int>& os_cpus) const {
  if (os_cpus.empty()) return absl::OkStatus();
  if (os_cpus.size() == 1) return pin_current_thread(os_cpus.front());
  hwloc_bitmap_t set = hwloc_bitmap_alloc();
  for (const int c : os_cpus) hwloc_bitmap_set(set, static_cast<unsigned>(c));
  const int rc = hwloc_set_cpubind(impl_->topo, set, HWLOC_CPUBIND_THREAD);
  const int err = errno;
  hwloc_bitmap_free(set);
  if (rc != 0) {
    return absl::FailedPreconditionError(
        absl::StrFormat("cannot bind thread to CPUs %s: %s (are they in this process's cpuset?)",
                        absl::StrJoin(os_cpus, ","), std::strerror(err)));
  }
  return absl::OkStatus();
}

absl::Status Topology::bind_memory(void* addr, std::size_t len, int numa_node) const {
  if (numa_node < 0 || numa_nodes_ <= 1) return absl::OkStatus();  // nothing to choose from
  hwloc_obj_t node = hwloc_get_numanode_obj_by_os_index(impl_->topo, static_cast<unsigned>(numa_node));
  if (node == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrFormat("NUMA node %d does not exist (this host has %d)", numa_node, numa_nodes_));
  }
  if (hwloc_set_area_membind(impl_->topo, addr, len, node->nodeset, HWLOC_MEMBIND_BIND, HWLOC_MEMBIND_BYNODESET) != 0) {
    return absl::FailedPreconditionError(
        absl::StrFormat("cannot bind %zu bytes to NUMA node %d: %s", len, numa_node, std::strerror(errno)));
  }
  return absl::OkStatus();
}

std::string Topology::describe() const {
  std::string s = absl::StrFormat("%d NUMA node(s), %zu core(s):", numa_nodes_, cores_.size());
  for (const CoreInfo& c : cores_) absl::StrAppendFormat(&s, " cpu%d@node%d", c.first_pu_os_index, c.numa_node);
  return s;
}

std::vector<int> poller_cpus(const RuntimeConfig& rt, const std::vector<int>& node_cpus) {
  switch (rt.threading) {
    case ThreadingMode::kInline:
      return {};
    case ThreadingMode::kShared:
      return {-1};
    case ThreadingMode::kDedicated:
      break;
  }
  std::vector<int> out;
  for (std::uint32_t i = 0; i < rt.pollers; ++i) {
    if (!rt.poller_cores.empty()) {
      out.push_back(rt.poller_cores[i % rt.poller_cores.size()]);
    } else if (!node_cpus.empty()) {
      out.push_back(node_cpus[node_cpus.size() - 1 - i % node_cpus.size()]);
    } else {
      out.push_back(-1);
    }
  }
  return out;
}

const Topology& topology() {
  static std::once_flag once;
  static std::unique_ptr<Topology> topo;
  std::call_once(once, [] {
    auto t = Topology::load();
    if (!t.ok()) {
      // hwloc failing is not recoverable for placement; report once and abort loudly.
      std::fprintf(stderr, "pollux: %s\n", std::string(t.status().message()).c_str());
      std::abort();
    }
    topo = std::move(*t);
  });
  return *topo;
}

}  // namespace pollux::core
