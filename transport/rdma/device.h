// One opened RDMA device: its verbs context (the one rdma_cm uses, so QPs made here can be
// connected by rdma_cm), the port and GID the transport runs on, one protection domain, and the
// buffer pool registered once in that PD.
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/buffer_pool.h"
#include "core/config.h"
#include "transport/rdma/rdma_config.h"
#include "transport/rdma/verbs_errors.h"

namespace pollux::transport::rdma {

// RDMA devices librdmacm/libibverbs see, in name order.
std::vector<std::string> rdma_device_names();
// The device rdma.device = "auto" resolves to: runtime.device if it names an RDMA device, else
// the first device whose rdma.port is ACTIVE with a RoCEv2 IPv4 GID, else the first device.
// NotFound (with the remedy) when there is none.
absl::StatusOr<std::string> resolve_device_name(const rdma::RdmaConfig& cfg, std::string_view runtime_device);

// The GID table of one port (ibv_query_gid_table; per index on kernels without it): index,
// GID, type and Ethernet interface of every valid entry.
std::vector<GidEntry> query_gid_table(ibv_context* ctx, std::uint8_t port, int table_len);

class Device {
 public:
  static absl::StatusOr<std::unique_ptr<Device>> open(const rdma::RdmaConfig& cfg, std::string_view runtime_device);
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  // Registers the whole pool once (the only ibv_reg_mr this transport makes). A second call for
  // the same pool is a no-op.
  absl::Status register_pool(core::BufferPool& pool);

  ibv_context* context() const noexcept { return ctx_; }
  ibv_pd* pd() const noexcept { return pd_; }
  std::uint32_t lkey() const noexcept { return mr_ != nullptr ? mr_->lkey : 0; }
  const std::string& name() const noexcept { return name_; }
  std::uint8_t port() const noexcept { return port_; }
  int gid_index() const noexcept { return gid_index_; }
  const ibv_gid& gid() const noexcept { return gid_; }
  std::uint32_t ipv4() const noexcept { return ipv4_; }  // host byte order
  std::uint32_t mtu_bytes() const noexcept { return mtu_bytes_; }
  const ibv_device_attr& attr() const noexcept { return attr_; }
  bool srq_supported() const noexcept { return attr_.max_srq > 0 && attr_.max_srq_wr > 0; }
  bool mlx5dv_supported() const noexcept { return mlx5dv_; }
  // How many times this transport has called ibv_reg_mr (the data path never does: tests check it).
  std::uint64_t registrations() const noexcept { return registrations_.load(std::memory_order_relaxed); }
  std::string describe() const;

 private:
  Device() = default;
  ibv_context** list_ = nullptr;  // rdma_get_devices()
  ibv_context* ctx_ = nullptr;
  ibv_pd* pd_ = nullptr;
  ibv_mr* mr_ = nullptr;
  const core::BufferPool* registered_ = nullptr;
  std::string name_;
  std::uint8_t port_ = 1;
  int gid_index_ = -1;
  ibv_gid gid_{};
  std::uint32_t ipv4_ = 0;
  std::uint32_t mtu_bytes_ = 1024;
  ibv_device_attr attr_{};
  bool mlx5dv_ = false;
  std::atomic<std::uint64_t> registrations_{0};
};

}  // namespace pollux::transport::rdma
