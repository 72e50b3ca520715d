#include "transport/rdma/device.h"

#include <rdma/rdma_cma.h>
#if POLLUX_HAVE_MLX5DV
#include <infiniband/mlx5dv.h>
#endif

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_format.h"
#include "transport/rdma/rdma_config.h"
#include "transport/rdma/verbs_errors.h"

namespace pollux::transport::rdma {
namespace {

bool usable(ibv_context* ctx, std::uint8_t port) {
  ibv_port_attr pa{};
  if (ibv_query_port(ctx, port, &pa) != 0 || pa.state != IBV_PORT_ACTIVE) return false;
  return pick_roce_v2_ipv4(query_gid_table(ctx, port, pa.gid_tbl_len)) >= 0;
}

}  // namespace

std::vector<GidEntry> query_gid_table(ibv_context* ctx, std::uint8_t port, int table_len) {
  std::vector<GidEntry> out;
  auto entry = [](int index, const ibv_gid_entry& e) {
    GidEntry g{index, {}, e.gid_type == IBV_GID_TYPE_ROCE_V2, e.gid_type, e.ndev_ifindex};
    std::memcpy(g.gid.raw, e.gid.raw, sizeof g.gid.raw);
    return g;
  };
  std::vector<ibv_gid_entry> tab(static_cast<std::size_t>(std::max(table_len, 1)) * 4);  // all ports
  const ssize_t n = ibv_query_gid_table(ctx, tab.data(), tab.size(), 0);
  if (n >= 0) {
    for (ssize_t i = 0; i < n; ++i) {
      const ibv_gid_entry& e = tab[static_cast<std::size_t>(i)];
      if (e.port_num == port) out.push_back(entry(static_cast<int>(e.gid_index), e));
    }
    return out;
  }
  // Older kernels: one query per index.
  for (int i = 0; i < table_len && i < 256; ++i) {
    ibv_gid_entry e{};
    if (ibv_query_gid_ex(ctx, port, static_cast<std::uint32_t>(i), &e, 0) != 0) continue;
    out.push_back(entry(i, e));
  }
  return out;
}

std::vector<std::string> rdma_device_names() {
  std::vector<std::string> names;
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  for (int i = 0; list != nullptr && i < n; ++i) names.emplace_back(ibv_get_device_name(list[i]));
  if (list != nullptr) ibv_free_device_list(list);
  std::sort(names.begin(), names.end());
  return names;
}

absl::StatusOr<std::string> resolve_device_name(const rdma::RdmaConfig& cfg, std::string_view runtime_device) {
  const std::vector<std::string> names = rdma_device_names();
  if (cfg.device != "auto") {
    if (std::find(names.begin(), names.end(), cfg.device) == names.end()) return no_device_error(cfg.device, names);
    return cfg.device;
  }
  if (names.empty()) return no_device_error("auto", names);
  if (!runtime_device.empty() && std::find(names.begin(), names.end(), runtime_device) != names.end()) {
    return std::string(runtime_device);
  }
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  std::string pick;
  std::vector<std::pair<std::string, ibv_device*>> devs;
  for (int i = 0; list != nullptr && i < n; ++i) devs.emplace_back(ibv_get_device_name(list[i]), list[i]);
  std::sort(devs.begin(), devs.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& [name, dev] : devs) {
    ibv_context* ctx = ibv_open_device(dev);
    if (ctx == nullptr) continue;
    const bool ok = usable(ctx, static_cast<std::uint8_t>(cfg.port));
    ibv_close_device(ctx);
    if (ok) {
      pick = name;
      break;
    }
  }
  if (list != nullptr) ibv_free_device_list(list);
  // None usable: open the first anyway so the user gets the precise error (port down, no GID).
  return pick.empty() ? names.front() : pick;
}

absl::StatusOr<std::unique_ptr<Device>> Device::open(const rdma::RdmaConfig& cfg, std::string_view runtime_device) {
  auto name = resolve_device_name(cfg, runtime_device);
  if (!name.ok()) return name.status();
  std::unique_ptr<Device> d(new Device());
  d->name_ = *name;
  d->port_ = static_cast<std::uint8_t>(cfg.port);

  // rdma_cm's own contexts: a PD and QPs made on them can be connected by rdma_cm.
  int n = 0;
  errno = 0;
  d->list_ = rdma_get_devices(&n);
  if (d->list_ == nullptr) {
    const int err = errno;
    if (err == ENOENT || err == ENODEV) {
      return absl::NotFoundError(absl::StrFormat(
          "rdma: librdmacm cannot open /dev/infiniband/rdma_cm (%s): load the rdma_ucm module (`modprobe rdma_ucm`)",
          std::strerror(err)));
    }
    return open_device_error(err, d->name_);
  }
  for (int i = 0; i < n; ++i) {
    if (d->name_ == ibv_get_device_name(d->list_[i]->device)) d->ctx_ = d->list_[i];
  }
  if (d->ctx_ == nullptr) {
    return absl::NotFoundError(absl::StrFormat(
        "rdma: %s is a verbs device but librdmacm does not list it (is it bound to an IP-capable netdev? `rdma link "
        "show`)",
        d->name_));
  }
  if (ibv_query_device(d->ctx_, &d->attr_) != 0) return open_device_error(errno, d->name_);
  if (cfg.port > d->attr_.phys_port_cnt) {
    return absl::InvalidArgumentError(
        absl::StrFormat("rdma.port = %u: %s has %u port(s)", cfg.port, d->name_, d->attr_.phys_port_cnt));
  }
  ibv_port_attr pa{};
  if (ibv_query_port(d->ctx_, d->port_, &pa) != 0) return open_device_error(errno, d->name_);
  if (pa.state != IBV_PORT_ACTIVE) return port_down_error(d->name_, d->port_, pa.state, pa.phys_state);
  if (pa.link_layer != IBV_LINK_LAYER_ETHERNET) {
    return absl::UnimplementedError(absl::StrFormat(
        "rdma: %s port %u is InfiniBand; this transport speaks RoCE (Ethernet link layer) only", d->name_, d->port_));
  }
  d->mtu_bytes_ = 128u << pa.active_mtu;  // IBV_MTU_256 = 1

  const std::vector<GidEntry> gids = query_gid_table(d->ctx_, d->port_, pa.gid_tbl_len);
  if (cfg.gid_index < 0) {
    d->gid_index_ = pick_roce_v2_ipv4(gids);
    if (d->gid_index_ < 0) return bad_gid_error(d->name_, d->port_, -1, "has no RoCEv2 IPv4-mapped GID", gids);
  } else {
    d->gid_index_ = cfg.gid_index;
    auto it = std::find_if(gids.begin(), gids.end(), [&](const GidEntry& e) { return e.index == cfg.gid_index; });
    if (it == gids.end()) {
      return bad_gid_error(d->name_, d->port_, cfg.gid_index,
                           absl::StrFormat("has no GID at index %d (table size %d)", cfg.gid_index, pa.gid_tbl_len),
                           gids);
    }
    if (!gid_ipv4(it->gid).has_value()) {
      return bad_gid_error(d->name_, d->port_, cfg.gid_index,
                           absl::StrFormat("GID %d is %s, not an IPv4-mapped address (rdma_cm and UD multicast here "
                                           "need RoCEv2 over IPv4)",
                                           cfg.gid_index, format_gid(it->gid)),
                           gids);
    }
  }
  for (const GidEntry& e : gids) {
    if (e.index == d->gid_index_) d->gid_ = e.gid;
  }
  d->ipv4_ = *gid_ipv4(d->gid_);

  d->pd_ = ibv_alloc_pd(d->ctx_);
  if (d->pd_ == nullptr) return open_device_error(errno, d->name_);
#if POLLUX_HAVE_MLX5DV
  d->mlx5dv_ = cfg.mlx5dv == rdma::RdmaMlx5::kAuto && mlx5dv_is_supported(d->ctx_->device);
#endif
  return d;
}

Device::~Device() {
  if (mr_ != nullptr) ibv_dereg_mr(mr_);
  if (pd_ != nullptr) ibv_dealloc_pd(pd_);
  if (list_ != nullptr) rdma_free_devices(list_);
}

absl::Status Device::register_pool(core::BufferPool& pool) {
  if (registered_ == &pool) return absl::OkStatus();
  if (mr_ != nullptr) {
    return absl::FailedPreconditionError("rdma: a second buffer pool cannot be registered (one pool per context)");
  }
  const MemlockLimit lim = current_memlock();
  if (absl::Status s = check_memlock(pool.bytes(), lim, name_); !s.ok()) return s;
  errno = 0;
  mr_ = ibv_reg_mr(pd_, pool.base(), pool.bytes(), IBV_ACCESS_LOCAL_WRITE);
  registrations_.fetch_add(1, std::memory_order_relaxed);
  if (mr_ == nullptr) return reg_mr_error(errno != 0 ? errno : ENOMEM, pool.bytes(), lim, name_);
  registered_ = &pool;
  pool.add_registration({this, mr_, mr_->lkey});
  return absl::OkStatus();
}

std::string Device::describe() const {
  return absl::StrFormat("%s port %u gid[%d] %s (%s), mtu %u, srq %s, mlx5dv %s", name_, port_, gid_index_,
                         format_gid(gid_), format_ipv4(ipv4_), mtu_bytes_, srq_supported() ? "yes" : "no",
                         mlx5dv_ ? "yes" : "no");
}

}  // namespace pollux::transport::rdma
