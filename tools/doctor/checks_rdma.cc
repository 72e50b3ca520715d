// rdma: the devices verbs sees (ports, link layer, GIDs, max_inline_data, CQ moderation,
// completion timestamps, NUMA node) as `ibv_devinfo -v` and `lstopo` would show them, judged
// against the configuration; and memory/memlock, which only an RDMA registration needs.
#include <sys/resource.h>

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/buffer_pool.h"
#include "tools/doctor/checks.h"

#if defined(POLLUX_HAVE_RDMA)
#include "transport/rdma/device.h"
#include "transport/rdma/device_info.h"
#include "transport/rdma/rdma_config.h"
#include "transport/rdma/verbs_errors.h"
#endif

namespace pollux::doctor {
namespace {

using V = Verdict;

// Used only where the verbs libraries are built in.
[[maybe_unused]] std::string kib(std::uint64_t bytes) {
  if (bytes == std::numeric_limits<std::uint64_t>::max()) return "unlimited";
  return absl::StrCat(bytes >> 10);
}

}  // namespace

void check_memlock(const Host& h, Report& r) {
  const core::PoolOptions po = pool_options(h.cfg);
  const std::size_t pool =
      std::max(core::BufferPool::mapping_bytes(po, false), core::BufferPool::mapping_bytes(po, true));
#if !defined(POLLUX_HAVE_RDMA)
  rlimit rl{};
  (void)getrlimit(RLIMIT_MEMLOCK, &rl);
  r.add("memory", "memlock", V::kInfo,
        absl::StrFormat("%s KiB (`ulimit -l`): only the RDMA transport pins memory, and this build has none",
                        rl.rlim_cur == RLIM_INFINITY ? std::string("unlimited") : absl::StrCat(rl.rlim_cur >> 10)));
  (void)pool;
#else
  namespace rdma = transport::rdma;
  const rdma::MemlockLimit lim = rdma::current_memlock();
  const std::string value =
      absl::StrFormat("%s%s (`ulimit -l`), hard limit %s%s, CAP_IPC_LOCK %s; an RDMA context pins its %.0f MiB pool",
                      kib(lim.soft_bytes), lim.soft_bytes == std::numeric_limits<std::uint64_t>::max() ? "" : " KiB",
                      kib(lim.hard_bytes), lim.hard_bytes == std::numeric_limits<std::uint64_t>::max() ? "" : " KiB",
                      lim.cap_ipc_lock ? "yes" : "no", static_cast<double>(pool) / (1 << 20));
  const absl::Status s = rdma::check_memlock(pool, lim, transport::rdma::config(h.cfg).device);
  const bool devices = !h.fs.list("/sys/class/infiniband").empty();
  if (s.ok()) {
    r.add("memory", "memlock", V::kOk, value);
  } else if (h.config_given && h.cfg.transport == core::TransportKind::kRdma) {
    r.add("memory", "memlock", V::kFail, absl::StrCat(value, ": registering the pool will fail"),
          std::string(s.message()));
  } else if (!h.config_given && devices) {
    r.add("memory", "memlock", V::kWarn, absl::StrCat(value, ": an RDMA context could not register its pool"),
          std::string(s.message()));
  } else {
    r.add("memory", "memlock", V::kInfo,
          absl::StrCat(value,
                       ": too low for RDMA, which this host or configuration "
                       "does not use"),
          std::string(s.message()));
  }
#endif
}

void check_rdma(const Host& h, Report& r) {
  const bool judged = h.judged(core::TransportKind::kRdma);
  const bool configured = h.config_given && h.cfg.transport == core::TransportKind::kRdma;
  std::vector<std::string> sys_names = h.fs.list("/sys/class/infiniband");
#if !defined(POLLUX_HAVE_RDMA)
  r.add("rdma", "devices", configured ? V::kFail : V::kInfo,
        absl::StrFormat("this build has no RDMA transport (POLLUX_WITH_RDMA=OFF); /sys/class/infiniband lists %s",
                        sys_names.empty() ? "none" : absl::StrJoin(sys_names, ", ")),
        configured ? "rebuild with libibverbs-dev and librdmacm-dev installed" : "");
  (void)judged;
#else
  namespace rdma = transport::rdma;
  if (!h.fs.real()) {
    // A fabricated tree: verbs would ask this machine's devices, not the tree's.
    r.add("rdma", "devices", V::kInfo,
          absl::StrCat("/sys/class/infiniband: ", sys_names.empty() ? "none" : absl::StrJoin(sys_names, ", "),
                       " (not queried under --root)"));
    return;
  }
  const std::vector<std::string> names = rdma::rdma_device_names();
  if (names.empty()) {
    r.add("rdma", "devices", configured ? V::kFail : V::kInfo,
          sys_names.empty() ? "no RDMA devices"
                            : absl::StrCat("verbs lists no device although /sys/class/infiniband has ",
                                           absl::StrJoin(sys_names, ", ")),
          configured || !sys_names.empty()
              ? "load the NIC's RDMA driver (mlx5_ib, ...) and ibverbs-providers, or Soft-RoCE over an Ethernet "
                "interface: modprobe rdma_rxe && rdma link add rxe0 type rxe netdev eth0"
              : "");
    return;
  }
  // The device a context would open (rdma.device, "auto" resolved as the transport does).
  std::string chosen;
  if (absl::StatusOr<std::string> n = rdma::resolve_device_name(transport::rdma::config(h.cfg), h.cfg.runtime.device);
      n.ok()) {
    chosen = *n;
  } else if (configured) {
    r.add("rdma", "rdma.device", V::kFail, std::string(n.status().message()));
  }
  r.add("rdma", "devices", V::kInfo,
        absl::StrFormat("%s%s", absl::StrJoin(names, ", "),
                        chosen.empty() ? ""
                                       : absl::StrFormat("; rdma.device = \"%s\" opens %s",
                                                         transport::rdma::config(h.cfg).device, chosen)));
  const std::vector<int> pinned = h.pinned_cpus();
  const ibv_qp_type qpt =
      transport::rdma::config(h.cfg).mode == transport::rdma::RdmaMode::kUdMulticast ? IBV_QPT_UD : IBV_QPT_RC;
  for (const std::string& name : names) {
    // Findings about the device a context of this configuration opens are judged; the others' are facts.
    const bool mine = judged && name == chosen;
    const V bad = mine ? (configured ? V::kFail : V::kWarn) : V::kInfo;
    absl::StatusOr<rdma::DeviceInfo> d =
        rdma::query_device_info(name, h.probe_qps ? std::optional<ibv_qp_type>(qpt) : std::nullopt,
                                transport::rdma::config(h.cfg).inline_threshold);
    if (!d.ok()) {
      r.add("rdma", name, bad, std::string(d.status().message()));
      continue;
    }
    int node = -1;
    if (h.topo != nullptr) {
      if (auto loc = h.topo->locate_device(name); loc.ok()) node = loc->numa_node;
    }
    std::string netdevs;
    for (const rdma::PortInfo& p : d->ports) {
      if (!p.netdev.empty()) netdevs = netdevs.empty() ? p.netdev : absl::StrCat(netdevs, ",", p.netdev);
    }
    r.add("rdma", name, V::kInfo,
          absl::StrFormat("fw %s, %d port%s, NUMA node %s, netdev %s, max_qp_wr %d, max_cqe %d, SRQ %s, mlx5dv %s%s",
                          d->fw_ver.empty() ? "?" : d->fw_ver, d->phys_port_cnt, d->phys_port_cnt == 1 ? "" : "s",
                          node >= 0 ? absl::StrCat(node) : std::string("none"), netdevs.empty() ? "none" : netdevs,
                          d->max_qp_wr, d->max_cqe, d->max_srq > 0 ? "yes" : "no", d->mlx5dv ? "yes" : "no",
                          name == chosen ? "; the device this configuration opens" : ""));
    for (const rdma::PortInfo& p : d->ports) {
      const bool the_port = p.port == transport::rdma::config(h.cfg).port;
      const V pbad = the_port ? bad : V::kInfo;
      const bool eth = p.link_layer == IBV_LINK_LAYER_ETHERNET;
      const std::string pname = absl::StrFormat("%s port %u", name, p.port);
      const std::string pval =
          absl::StrFormat("%s (phys state %d), link layer %s, active MTU %u", rdma::port_state_name(p.state),
                          p.phys_state, eth ? "Ethernet" : "InfiniBand", p.active_mtu_bytes);
      if (p.state != IBV_PORT_ACTIVE) {
        r.add("rdma", pname, pbad, pval,
              absl::StrFormat("bring the link up: ip link set %s up (`rdma link show`)",
                              p.netdev.empty() ? std::string("<netdev>") : p.netdev));
      } else if (!eth) {
        r.add("rdma", pname, pbad, pval, "Pollux speaks RoCE (Ethernet link layer) only; InfiniBand is not supported");
      } else {
        r.add("rdma", pname, mine && the_port ? V::kOk : V::kInfo, pval);
      }
      std::vector<std::string> gids;
      for (const rdma::GidEntry& g : p.gids) {
        const auto v4 = rdma::gid_ipv4(g.gid);
        gids.push_back(absl::StrFormat("[%d] %s %s%s", g.index, rdma::format_gid(g.gid), rdma::gid_type_name(g.type),
                                       v4 ? " IPv4-mapped" : ""));
      }
      const int pick = rdma::pick_roce_v2_ipv4(p.gids);
      const std::string gval = gids.empty() ? "no GIDs" : absl::StrJoin(gids, ", ");
      if (pick >= 0) {
        r.add("rdma", absl::StrCat(pname, " gids"), mine && the_port ? V::kOk : V::kInfo,
              absl::StrFormat("%s; rdma.gid_index = -1 picks %d", gval, pick));
      } else {
        r.add("rdma", absl::StrCat(pname, " gids"), pbad, absl::StrCat(gval, "; no RoCE v2 IPv4-mapped GID"),
              absl::StrFormat("rdma_cm and UD multicast need one: give %s an IPv4 address (ip addr add A.B.C.D/N dev "
                              "%s)",
                              p.netdev.empty() ? std::string("the netdev") : p.netdev,
                              p.netdev.empty() ? std::string("IF") : p.netdev));
      }
    }
    // max_inline_data.
    const rdma::InlineProbe& ip = d->inline_probe;
    const std::string qps = qpt == IBV_QPT_UD ? "UD" : "RC";
    if (!h.probe_qps) {
      r.add("rdma", absl::StrCat(name, " max_inline_data"), V::kInfo, "not probed (--no-probe)");
    } else if (!ip.ran) {
      r.add("rdma", absl::StrCat(name, " max_inline_data"), mine ? V::kWarn : V::kInfo,
            absl::StrCat("could not create a probe QP: ", ip.error),
            "the transport creates the same QPs: check `ulimit -l` and the device's permissions (/dev/infiniband)");
    } else if (ip.granted < ip.asked) {
      r.add("rdma", absl::StrCat(name, " max_inline_data"), mine ? V::kWarn : V::kInfo,
            absl::StrFormat("%u (%s QP); rdma.inline_threshold = %u gets %u: frames of %u-%u bytes are DMA-read "
                            "instead",
                            ip.max, qps, ip.asked, ip.granted, ip.granted + 1, ip.asked),
            absl::StrFormat("set rdma.inline_threshold = %u", ip.max));
    } else {
      r.add("rdma", absl::StrCat(name, " max_inline_data"), mine ? V::kOk : V::kInfo,
            absl::StrFormat("%u (%s QP); rdma.inline_threshold = %u is granted", ip.max, qps, ip.asked));
    }
    // CQ moderation and completion timestamps (ibv_query_device_ex).
    const bool wants_mod = transport::rdma::config(h.cfg).cq_moderation_count != 0 ||
                           transport::rdma::config(h.cfg).cq_moderation_usec != 0;
    if (!d->attr_ex) {
      r.add("rdma", absl::StrCat(name, " cq moderation"), V::kInfo, d->attr_ex_error);
    } else if (d->max_cq_moderation_count == 0) {
      r.add("rdma", absl::StrCat(name, " cq moderation"), mine && wants_mod ? V::kWarn : V::kInfo,
            "not supported (cq_mod_caps 0/0): in interrupt mode every armed completion raises an event",
            mine && wants_mod ? "rdma.cq_moderation_count/usec have no effect on this device: remove them" : "");
    } else {
      r.add("rdma", absl::StrCat(name, " cq moderation"), V::kInfo,
            absl::StrFormat("supported: up to %u completions / %u us per event", d->max_cq_moderation_count,
                            d->max_cq_moderation_period_us));
    }
    r.add("rdma", absl::StrCat(name, " timestamps"), V::kInfo,
          d->completion_timestamp_mask == 0 ? std::string("no completion timestamps (completion_timestamp_mask 0)")
                                            : absl::StrFormat("completion timestamps: mask 0x%x, hca_core_clock %u kHz",
                                                              d->completion_timestamp_mask, d->hca_core_clock_khz));
    // NUMA: the pollers near the device (multi-node hosts).
    if (mine && node >= 0 && h.topo != nullptr && h.topo->numa_nodes() > 1 && !pinned.empty()) {
      std::vector<int> node_cpus = h.topo->cpus_on_node(node);
      std::vector<int> remote;
      for (int c : pinned) {
        bool local = false;
        for (const core::CoreInfo& ci : h.topo->cores()) {
          local |= ci.numa_node == node &&
                   std::find(ci.pu_os_indexes.begin(), ci.pu_os_indexes.end(), c) != ci.pu_os_indexes.end();
        }
        if (!local) remote.push_back(c);
      }
      if (!remote.empty()) {
        r.add("rdma", absl::StrCat(name, " numa"), V::kWarn,
              absl::StrFormat("the pollers' CPU %s are not on %s's NUMA node %d", format_cpu_list(remote), name, node),
              absl::StrFormat("runtime.poller_cores on node %d (CPU %s), or leave it empty for automatic placement",
                              node, format_cpu_list(node_cpus)));
      }
    }
    // Interrupts: those of a device with a netdev are listed under net.
    if (netdevs.empty()) check_irqs(h, r, "rdma", name, sysfs_device_irqs(h.fs, "/sys/class/infiniband/" + name));
  }
#endif
}

}  // namespace pollux::doctor
