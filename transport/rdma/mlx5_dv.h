// The mlx5 direct-verbs send path (ConnectX): chosen at run time only when
// mlx5dv_is_supported() says the device is an mlx5 (rdma.mlx5dv = "auto"); everywhere else -
// Soft-RoCE included - the plain verbs path runs.
//
// What it does differently from ibv_post_send:
//  - QPs are created with mlx5dv_create_qp on a parent domain with their own thread domain, so
//    the provider gives each a dedicated BlueFlame register and takes no lock for it;
//  - each QP keeps a pre-built WQE template (control segment with QPN and segment count,
//    datagram segment for UD, data segment with the pool's lkey); per message only the WQE index,
//    the signal bit and the address/length (or the inline bytes) are written;
//  - the doorbell is the doorbell record plus a BlueFlame write of the whole WQE when the burst
//    is one WQE (a 64-bit doorbell write otherwise), with rdma-core's barrier sequence;
//  - because no provider bookkeeping (wr_id table) sees those WQEs, their completions go to a
//    separate per-poller send CQ that is polled directly (CQE owner bit, wqe_counter), never
//    through ibv_poll_cq and never armed.
//
// The WQE/CQE layout code (WqeWriter, parse of a CQE) works on plain memory and is unit-tested on
// the host (tests/rdma/verbs_unit_test.cc). It has NOT run against mlx5 hardware in this project:
// see docs/RDMA.md.
#pragma once

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"

namespace pollux::transport::rdma::mlx5 {

// rdma-core's DMA/MMIO barriers (util/udma_barrier.h is not installed): x86-64 and AArch64.
#if defined(__x86_64__)
inline void udma_to_device_barrier() noexcept { asm volatile("" ::: "memory"); }
inline void udma_from_device_barrier() noexcept { asm volatile("lfence" ::: "memory"); }
inline void mmio_flush_writes() noexcept { asm volatile("sfence" ::: "memory"); }
#elif defined(__aarch64__)
inline void udma_to_device_barrier() noexcept { asm volatile("dmb oshst" ::: "memory"); }
inline void udma_from_device_barrier() noexcept { asm volatile("dmb oshld" ::: "memory"); }
inline void mmio_flush_writes() noexcept { asm volatile("dsb st" ::: "memory"); }
#else
inline void udma_to_device_barrier() noexcept { __sync_synchronize(); }
inline void udma_from_device_barrier() noexcept { __sync_synchronize(); }
inline void mmio_flush_writes() noexcept { __sync_synchronize(); }
#endif
inline void mmio_wc_start() noexcept { mmio_flush_writes(); }

// A send queue as mlx5dv_init_obj() describes it (or, in unit tests, plain memory).
struct SqLayout {
  std::byte* buf = nullptr;        // WQE ring
  std::uint32_t wqe_cnt = 0;       // in 64-byte basic blocks, power of two
  std::uint32_t* dbrec = nullptr;  // the QP's doorbell record pair; [1] is the send counter
  std::byte* bf_reg = nullptr;     // BlueFlame register (write-combining MMIO)
  std::uint32_t bf_size = 0;       // bytes per BlueFlame half (two halves, used alternately)
};

// Writes SEND WQEs from a pre-built template and rings the doorbell. Pure memory writes: the
// only MMIO is the BlueFlame/doorbell store in ring().
class WqeWriter {
 public:
  static constexpr std::uint32_t kBasicBlock = 64;
  static constexpr std::uint32_t kAvBytes = 48;  // struct mlx5_wqe_av (UD datagram segment)

  // av: the 48-byte address vector for UD (null for RC). The QPN is the QP's own number.
  void init(const SqLayout& sq, std::uint32_t qpn, std::uint32_t lkey, const void* av, std::uint32_t max_inline);

  // One SEND at the producer index. inline_data: copy `len` bytes from `data` into the WQE
  // (len <= max_inline); otherwise a data segment points at [addr, addr+len) under the pool's
  // lkey. Returns false when the queue has no room (the caller counts WRs, so this is a bug guard).
  bool send(const void* data, std::uint32_t len, bool inline_data, bool signaled, std::uint64_t wr_id) noexcept;
  // Publishes the WQEs written since the last ring(): doorbell record, then BlueFlame (one
  // WQE that fits the BlueFlame half) or the 64-bit doorbell (the last WQE's first 8 bytes).
  void ring() noexcept;
  // A completion for the WQE at `wqe_counter`: its wr_id, and the queue space up to it is free.
  std::uint64_t complete(std::uint16_t wqe_counter) noexcept;

  std::uint32_t producer() const noexcept { return pi_; }
  std::uint32_t consumer() const noexcept { return ci_; }
  std::uint32_t bf_offset() const noexcept { return bf_offset_; }
  const std::byte* templ() const noexcept { return tmpl_; }
  std::uint32_t template_ds() const noexcept { return tmpl_ds_; }

 private:
  std::byte* bb(std::uint32_t index) const noexcept { return sq_.buf + (index & (sq_.wqe_cnt - 1)) * kBasicBlock; }
  void copy_to_bf(const std::byte* wqe, std::uint32_t bytes) noexcept;

  SqLayout sq_;
  std::uint32_t qpn_ = 0;
  std::uint32_t max_inline_ = 0;
  bool ud_ = false;
  alignas(64) std::byte tmpl_[128]{};  // ctrl (+ av) (+ data segment) of a non-inline SEND
  std::uint32_t tmpl_ds_ = 0;          // its size in 16-byte units
  std::uint32_t pi_ = 0;               // producer index (basic blocks)
  std::uint32_t ci_ = 0;               // consumer index (basic blocks)
  std::uint32_t bf_offset_ = 0;
  std::uint32_t pending_ = 0;     // WQEs since the last ring()
  std::uint32_t last_index_ = 0;  // first basic block of the last WQE
  std::uint32_t last_bytes_ = 0;  // its size
  struct Meta {
    std::uint64_t wr_id;
    std::uint32_t bbs;
  };
  std::vector<Meta> meta_;  // by basic-block index: wr_id and size of the WQE starting there
};

// One CQE as the direct poller reads it.
struct DvCompletion {
  std::uint32_t qp_num;
  std::uint16_t wqe_counter;
  bool ok;
  std::uint8_t opcode;
  std::uint8_t syndrome;
};
// Parses the 64-byte CQE at `cqe64` for consumer index `ci` of a CQ with `cqe_cnt` entries;
// false when hardware still owns it.
bool parse_cqe(const std::byte* cqe64, std::uint32_t ci, std::uint32_t cqe_cnt, DvCompletion* out) noexcept;

// The fast-path state of one QP.
class DvSendQueue {
 public:
  // Reads the QP's (and for UD the AH's) layout with mlx5dv_init_obj.
  static absl::StatusOr<std::unique_ptr<DvSendQueue>> attach(ibv_qp* qp, ibv_ah* ah, std::uint32_t lkey,
                                                             std::uint32_t max_inline);
  WqeWriter& writer() noexcept { return w_; }
  std::uint64_t wr_id_of(std::uint16_t wqe_counter) noexcept { return w_.complete(wqe_counter); }

 private:
  WqeWriter w_;
};

// A CQ polled directly (send completions of fast-path QPs). Never armed: its consumer index
// lives here, not in the provider, so ibv_req_notify_cq/ibv_poll_cq must not touch it.
class DvCq {
 public:
  static absl::StatusOr<std::unique_ptr<DvCq>> create(ibv_context* ctx, int depth);
  ~DvCq();
  ibv_cq* cq() const noexcept { return cq_; }
  std::uint32_t poll(DvCompletion* out, std::uint32_t max) noexcept;

 private:
  ibv_cq* cq_ = nullptr;
  std::byte* buf_ = nullptr;
  std::uint32_t* dbrec_ = nullptr;
  std::uint32_t cqe_cnt_ = 0;
  std::uint32_t cqe_size_ = 64;
  std::uint32_t ci_ = 0;
};

// Creates an RC or UD QP through mlx5dv_create_qp on a parent domain with its own thread domain
// (dedicated BlueFlame register, no provider lock). `owned` receives the td/parent domain to
// release after the QP.
struct DvQpResources {
  ibv_td* td = nullptr;
  ibv_pd* parent = nullptr;
  ~DvQpResources();
};
absl::StatusOr<ibv_qp*> create_qp(ibv_context* ctx, ibv_pd* pd, ibv_qp_init_attr* attr, DvQpResources* owned);

}  // namespace pollux::transport::rdma::mlx5
