#include "transport/rdma/device_info.h"

#include <net/if.h>
#if POLLUX_HAVE_MLX5DV
#include <infiniband/mlx5dv.h>
#endif

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_format.h"
#include "transport/rdma/device.h"

namespace pollux::transport::rdma {
namespace {

// The QP create_qp would make, minus the transport: one send and one receive request, one
// SGE, asking for `inl` bytes inline. Returns the granted max_inline_data, or nullopt when the
// device refuses the request (errno says why).
std::optional<std::uint32_t> try_inline(ibv_pd* pd, ibv_cq* cq, ibv_qp_type type, std::uint32_t inl) {
  ibv_qp_init_attr a{};
  a.qp_type = type;
  a.send_cq = cq;
  a.recv_cq = cq;
  a.cap.max_send_wr = 1;
  a.cap.max_recv_wr = 1;
  a.cap.max_send_sge = 1;
  a.cap.max_recv_sge = 1;
  a.cap.max_inline_data = inl;
  errno = 0;
  ibv_qp* qp = ibv_create_qp(pd, &a);
  if (qp == nullptr) return std::nullopt;
  const std::uint32_t granted = a.cap.max_inline_data;
  (void)ibv_destroy_qp(qp);
  return granted;
}

InlineProbe probe_inline(ibv_context* ctx, ibv_qp_type type, std::uint32_t threshold) {
  InlineProbe p;
  p.asked = threshold;
  ibv_pd* pd = ibv_alloc_pd(ctx);
  if (pd == nullptr) {
    p.error = absl::StrFormat("ibv_alloc_pd: %s", std::strerror(errno));
    return p;
  }
  ibv_cq* cq = ibv_create_cq(ctx, 4, nullptr, nullptr, 0);
  if (cq == nullptr) {
    p.error = absl::StrFormat("ibv_create_cq: %s (`ulimit -l`?)", std::strerror(errno));
    (void)ibv_dealloc_pd(pd);
    return p;
  }
  // What the transport gets for rdma.inline_threshold: create_qp halves a refused request.
  for (std::uint32_t inl = threshold;; inl /= 2) {
    if (auto g = try_inline(pd, cq, type, inl)) {
      p.granted = *g;
      p.ran = true;
      break;
    }
    if (inl == 0) {
      p.error = absl::StrFormat("ibv_create_qp(%s, no inline data): %s", type == IBV_QPT_UD ? "UD" : "RC",
                                std::strerror(errno));
      break;
    }
  }
  if (p.ran) {
    // The device's limit: double until refused (or 64 KiB), then bisect between the largest
    // request granted and the smallest refused. About 20 QPs; each is created and destroyed.
    std::uint32_t lo = p.granted, hi = 0;
    for (std::uint32_t ask = std::max<std::uint32_t>(64, lo * 2); ask <= (64u << 10); ask *= 2) {
      if (auto g = try_inline(pd, cq, type, ask)) {
        lo = std::max(lo, *g);
      } else {
        hi = ask;
        break;
      }
    }
    while (hi != 0 && lo + 1 < hi) {
      const std::uint32_t mid = lo + (hi - lo) / 2;
      if (auto g = try_inline(pd, cq, type, mid)) {
        lo = std::max(mid, *g);
      } else {
        hi = mid;
      }
    }
    p.max = lo;
  }
  (void)ibv_destroy_cq(cq);
  (void)ibv_dealloc_pd(pd);
  return p;
}

std::string ifname(std::uint32_t ifindex) {
  char buf[IF_NAMESIZE] = {};
  if (ifindex == 0 || if_indextoname(ifindex, buf) == nullptr) return "";
  return buf;
}

}  // namespace

absl::StatusOr<DeviceInfo> query_device_info(std::string_view name, std::optional<ibv_qp_type> probe_qp_type,
                                             std::uint32_t inline_threshold) {
  int n = 0;
  errno = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list == nullptr) return open_device_error(errno != 0 ? errno : ENODEV, name);
  ibv_device* dev = nullptr;
  std::vector<std::string> names;
  for (int i = 0; i < n; ++i) {
    names.emplace_back(ibv_get_device_name(list[i]));
    if (names.back() == name) dev = list[i];
  }
  if (dev == nullptr) {
    ibv_free_device_list(list);
    std::sort(names.begin(), names.end());
    return no_device_error(name, names);
  }
  DeviceInfo d;
  d.name = std::string(name);
#if POLLUX_HAVE_MLX5DV
  d.mlx5dv = mlx5dv_is_supported(dev);
#endif
  ibv_context* ctx = ibv_open_device(dev);
  const int open_err = errno;
  ibv_free_device_list(list);
  if (ctx == nullptr) return open_device_error(open_err != 0 ? open_err : ENODEV, name);

  ibv_device_attr_ex ax{};
  if (const int rc = ibv_query_device_ex(ctx, nullptr, &ax); rc == 0) {
    d.attr_ex = true;
    d.completion_timestamp_mask = ax.completion_timestamp_mask;
    d.hca_core_clock_khz = ax.hca_core_clock;
    d.max_cq_moderation_count = ax.cq_mod_caps.max_cq_count;
    d.max_cq_moderation_period_us = ax.cq_mod_caps.max_cq_period;
  } else {
    d.attr_ex_error = absl::StrFormat("ibv_query_device_ex: %s", std::strerror(rc));
    if (ibv_query_device(ctx, &ax.orig_attr) != 0) {
      const int err = errno;
      (void)ibv_close_device(ctx);
      return open_device_error(err, name);
    }
  }
  const ibv_device_attr& a = ax.orig_attr;
  d.fw_ver = a.fw_ver;
  d.phys_port_cnt = a.phys_port_cnt;
  d.max_qp_wr = a.max_qp_wr;
  d.max_cqe = a.max_cqe;
  d.max_srq = a.max_srq;
  for (int p = 1; p <= a.phys_port_cnt && p <= 255; ++p) {
    PortInfo pi;
    pi.port = static_cast<std::uint8_t>(p);
    ibv_port_attr pa{};
    if (ibv_query_port(ctx, pi.port, &pa) != 0) continue;
    pi.state = pa.state;
    pi.phys_state = pa.phys_state;
    pi.link_layer = pa.link_layer;
    pi.active_mtu_bytes = 128u << pa.active_mtu;  // IBV_MTU_256 = 1
    pi.gid_table_len = pa.gid_tbl_len;
    pi.gids = query_gid_table(ctx, pi.port, pa.gid_tbl_len);
    for (const GidEntry& g : pi.gids) {
      if (pi.netdev.empty()) pi.netdev = ifname(g.ndev_ifindex);
    }
    d.ports.push_back(std::move(pi));
  }
  if (probe_qp_type.has_value()) d.inline_probe = probe_inline(ctx, *probe_qp_type, inline_threshold);
  (void)ibv_close_device(ctx);
  return d;
}

std::string describe(const DeviceInfo& d) {
  std::string s = d.name;
  for (const PortInfo& p : d.ports) {
    absl::StrAppendFormat(&s, " port %u %s %s mtu %u, %zu GIDs;", p.port, port_state_name(p.state),
                          p.link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet" : "InfiniBand", p.active_mtu_bytes,
                          p.gids.size());
  }
  if (d.inline_probe.ran) absl::StrAppendFormat(&s, " max_inline_data %u;", d.inline_probe.max);
  absl::StrAppendFormat(&s, " CQ moderation %s", d.max_cq_moderation_count > 0 ? "yes" : "no");
  return s;
}

}  // namespace pollux::transport::rdma
