#include "transport/rdma/mlx5_dv.h"

#include <endian.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_format.h"

#if POLLUX_HAVE_MLX5DV
#include <infiniband/mlx5dv.h>
#endif

namespace pollux::transport::rdma::mlx5 {

#if POLLUX_HAVE_MLX5DV

namespace {
// Provider-internal constants (providers/mlx5), stable parts of the PRM.
constexpr std::uint32_t kExtendedUdAv = 0x80000000u;  // MLX5_EXTENDED_UD_AV: dqp_dct carries a full AV
constexpr std::uint32_t kCqSetCi = 0;                 // MLX5_CQ_SET_CI: dbrec[0] = consumer index
static_assert(sizeof(mlx5_wqe_ctrl_seg) == 16);
static_assert(sizeof(mlx5_wqe_data_seg) == 16);
static_assert(sizeof(mlx5_wqe_av) == WqeWriter::kAvBytes);
static_assert(sizeof(mlx5_cqe64) == 64);
static_assert(offsetof(mlx5_cqe64, sop_drop_qpn) == 56);
static_assert(offsetof(mlx5_cqe64, wqe_counter) == 60);
static_assert(offsetof(mlx5_cqe64, op_own) == 63);
static_assert(offsetof(mlx5_err_cqe, syndrome) == 55);
}  // namespace

void WqeWriter::init(const SqLayout& sq, std::uint32_t qpn, std::uint32_t lkey, const void* av,
                     std::uint32_t max_inline) {
  sq_ = sq;
  qpn_ = qpn;
  max_inline_ = max_inline;
  ud_ = av != nullptr;
  pi_ = ci_ = bf_offset_ = pending_ = 0;
  meta_.assign(sq.wqe_cnt, Meta{0, 1});
  std::memset(tmpl_, 0, sizeof tmpl_);
  // Control segment: opcode and QPN never change; the index, the signal bit (and for inline
  // sends the segment count) are patched per WQE.
  tmpl_ds_ = 1 + (ud_ ? kAvBytes / 16 : 0) + 1;
  mlx5dv_set_ctrl_seg(reinterpret_cast<mlx5_wqe_ctrl_seg*>(tmpl_), 0, MLX5_OPCODE_SEND, 0, qpn, 0,
                      static_cast<std::uint8_t>(tmpl_ds_), 0, 0);
  std::size_t off = sizeof(mlx5_wqe_ctrl_seg);
  if (ud_) {
    auto* dg = reinterpret_cast<mlx5_wqe_datagram_seg*>(tmpl_ + off);
    std::memcpy(&dg->av, av, kAvBytes);
    // Multicast destination and Q_Key (what the provider patches per UD work request).
    dg->av.dqp_dct = htobe32(0xffffffu | kExtendedUdAv);
    dg->av.key.qkey.qkey = htobe32(0x504c5831u);  // wire.h kUdQkey
    off += kAvBytes;
  }
  auto* ds = reinterpret_cast<mlx5_wqe_data_seg*>(tmpl_ + off);
  mlx5dv_set_data_seg(ds, 0, lkey, 0);
}

bool WqeWriter::send(const void* data, std::uint32_t len, bool inline_data, bool signaled,
                     std::uint64_t wr_id) noexcept {
  const std::uint32_t head = sizeof(mlx5_wqe_ctrl_seg) + (ud_ ? kAvBytes : 0);  // 16 or 64
  const std::uint32_t body = inline_data ? (4 + len + 15) / 16 * 16 : 16;
  const std::uint32_t bytes = head + body;
  const std::uint32_t bbs = (bytes + kBasicBlock - 1) / kBasicBlock;
  if (inline_data && len > max_inline_) return false;
  if (pi_ + bbs - ci_ > sq_.wqe_cnt) return false;
  std::byte* wqe = bb(pi_);
  // The template: control (+ datagram) segment, one 16- or 64-byte copy inside one basic block.
  std::memcpy(wqe, tmpl_, head);
  auto* ctrl = reinterpret_cast<mlx5_wqe_ctrl_seg*>(wqe);
  ctrl->opmod_idx_opcode = htobe32(((pi_ & 0xffffu) << 8) | MLX5_OPCODE_SEND);
  if (inline_data) ctrl->qpn_ds = htobe32((qpn_ << 8) | (bytes / 16));
  ctrl->fm_ce_se = signaled ? MLX5_WQE_CTRL_CQ_UPDATE : 0;
  // The body may start in the next basic block (UD) and run past the end of the ring.
  std::byte* const qend = sq_.buf + static_cast<std::size_t>(sq_.wqe_cnt) * kBasicBlock;
  std::byte* seg = head == kBasicBlock ? bb(pi_ + 1) : wqe + head;
  if (inline_data) {
    auto put = [&](const void* src, std::size_t n) {
      const auto* s = static_cast<const std::byte*>(src);
      while (n > 0) {
        const std::size_t k = std::min<std::size_t>(n, static_cast<std::size_t>(qend - seg));
        std::memcpy(seg, s, k);
        seg += k;
        s += k;
        n -= k;
        if (seg == qend) seg = sq_.buf;
      }
    };
    const std::uint32_t hdr = htobe32(len | MLX5_INLINE_SEG);
    put(&hdr, 4);
    put(data, len);
  } else {
    std::memcpy(seg, tmpl_ + head, 16);
    auto* ds = reinterpret_cast<mlx5_wqe_data_seg*>(seg);
    ds->byte_count = htobe32(len);
    ds->addr = htobe64(reinterpret_cast<std::uintptr_t>(data));
  }
  meta_[pi_ & (sq_.wqe_cnt - 1)] = Meta{wr_id, bbs};
  last_index_ = pi_;
  last_bytes_ = bytes;
  pi_ += bbs;
  ++pending_;
  return true;
}

void WqeWriter::copy_to_bf(const std::byte* wqe, std::uint32_t bytes) noexcept {
  // 64 bytes at a time with 64-bit stores, wrapping the source at the ring end; the write
  // combining buffer turns each block into one PCIe write.
  const std::byte* const qend = sq_.buf + static_cast<std::size_t>(sq_.wqe_cnt) * kBasicBlock;
  auto* dst = reinterpret_cast<volatile std::uint64_t*>(sq_.bf_reg + bf_offset_);
  const std::byte* src = wqe;
  for (std::uint32_t done = 0; done < bytes; done += kBasicBlock) {
    const auto* s = reinterpret_cast<const std::uint64_t*>(src);
    for (int i = 0; i < 8; ++i) *dst++ = s[i];
    src += kBasicBlock;
    if (src == qend) src = sq_.buf;
  }
}

void WqeWriter::ring() noexcept {
  if (pending_ == 0) return;
  // WQEs in memory before the doorbell record says they exist.
  udma_to_device_barrier();
  sq_.dbrec[MLX5_SND_DBR] = htobe32(pi_ & 0xffffu);
  // The doorbell record before the BlueFlame write.
  mmio_wc_start();
  const std::byte* last = bb(last_index_);
  if (pending_ == 1 && last_bytes_ <= sq_.bf_size) {
    copy_to_bf(last, (last_bytes_ + kBasicBlock - 1) / kBasicBlock * kBasicBlock);
  } else {
    std::uint64_t first8;
    std::memcpy(&first8, last, 8);
    *reinterpret_cast<volatile std::uint64_t*>(sq_.bf_reg + bf_offset_) = first8;
  }
  // Push the write-combining buffer out now (latency), and keep the next BlueFlame write from
  // merging with this one.
  mmio_flush_writes();
  bf_offset_ ^= sq_.bf_size;
  pending_ = 0;
}

std::uint64_t WqeWriter::complete(std::uint16_t wqe_counter) noexcept {
  const std::uint32_t index = ci_ + static_cast<std::uint16_t>(wqe_counter - static_cast<std::uint16_t>(ci_));
  const Meta& m = meta_[index & (sq_.wqe_cnt - 1)];
  ci_ = index + m.bbs;  // completions are in order: everything up to this WQE is done
  return m.wr_id;
}

bool parse_cqe(const std::byte* cqe64, std::uint32_t ci, std::uint32_t cqe_cnt, DvCompletion* out) noexcept {
  const auto* c = reinterpret_cast<const mlx5_cqe64*>(cqe64);
  const std::uint8_t op_own = c->op_own;
  const std::uint8_t opcode = op_own >> 4;
  const std::uint8_t sw_owner = (ci & cqe_cnt) != 0 ? 1 : 0;
  if (opcode == MLX5_CQE_INVALID || (op_own & MLX5_CQE_OWNER_MASK) != sw_owner) return false;
  // The CQE's other fields were written before its owner bit.
  udma_from_device_barrier();
  out->qp_num = be32toh(c->sop_drop_qpn) & 0xffffffu;
  out->wqe_counter = be16toh(c->wqe_counter);
  out->opcode = opcode;
  out->ok = opcode == MLX5_CQE_REQ;
  out->syndrome = out->ok ? 0 : reinterpret_cast<const mlx5_err_cqe*>(cqe64)->syndrome;
  return true;
}

absl::StatusOr<std::unique_ptr<DvSendQueue>> DvSendQueue::attach(ibv_qp* qp, ibv_ah* ah, std::uint32_t lkey,
                                                                 std::uint32_t max_inline) {
  mlx5dv_qp dq{};
  mlx5dv_ah da{};
  mlx5dv_obj obj{};
  obj.qp.in = qp;
  obj.qp.out = &dq;
  std::uint64_t types = MLX5DV_OBJ_QP;
  if (ah != nullptr) {
    obj.ah.in = ah;
    obj.ah.out = &da;
    types |= MLX5DV_OBJ_AH;
  }
  if (int rc = mlx5dv_init_obj(&obj, types); rc != 0) {
    return absl::InternalError(absl::StrFormat("rdma: mlx5dv_init_obj(qp %u): %s", qp->qp_num, std::strerror(rc)));
  }
  if (dq.sq.stride != WqeWriter::kBasicBlock || (dq.sq.wqe_cnt & (dq.sq.wqe_cnt - 1)) != 0) {
    return absl::InternalError(absl::StrFormat("rdma: mlx5 qp %u: unexpected send queue layout (stride %u, %u WQEBBs)",
                                               qp->qp_num, dq.sq.stride, dq.sq.wqe_cnt));
  }
  SqLayout sq;
  sq.buf = static_cast<std::byte*>(dq.sq.buf);
  sq.wqe_cnt = dq.sq.wqe_cnt;
  sq.dbrec = reinterpret_cast<std::uint32_t*>(dq.dbrec);
  sq.bf_reg = static_cast<std::byte*>(dq.bf.reg);
  sq.bf_size = dq.bf.size;
  auto q = std::make_unique<DvSendQueue>();
  q->w_.init(sq, qp->qp_num, lkey, ah != nullptr ? static_cast<const void*>(da.av) : nullptr, max_inline);
  return q;
}

absl::StatusOr<std::unique_ptr<DvCq>> DvCq::create(ibv_context* ctx, int depth) {
  auto q = std::make_unique<DvCq>();
  q->cq_ = ibv_create_cq(ctx, depth, nullptr, nullptr, 0);
  if (q->cq_ == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("rdma: mlx5 send CQ (%d entries): %s", depth, std::strerror(errno)));
  }
  mlx5dv_cq dc{};
  mlx5dv_obj obj{};
  obj.cq.in = q->cq_;
  obj.cq.out = &dc;
  if (int rc = mlx5dv_init_obj(&obj, MLX5DV_OBJ_CQ); rc != 0) {
    return absl::InternalError(absl::StrFormat("rdma: mlx5dv_init_obj(cq): %s", std::strerror(rc)));
  }
  q->buf_ = static_cast<std::byte*>(dc.buf);
  q->dbrec_ = reinterpret_cast<std::uint32_t*>(dc.dbrec);
  q->cqe_cnt_ = dc.cqe_cnt;
  q->cqe_size_ = dc.cqe_size;
  return q;
}

DvCq::~DvCq() {
  if (cq_ != nullptr) ibv_destroy_cq(cq_);
}

std::uint32_t DvCq::poll(DvCompletion* out, std::uint32_t max) noexcept {
  std::uint32_t n = 0;
  while (n < max) {
    const std::byte* cqe = buf_ + static_cast<std::size_t>(ci_ & (cqe_cnt_ - 1)) * cqe_size_;
    if (!parse_cqe(cqe_size_ == 64 ? cqe : cqe + 64, ci_, cqe_cnt_, &out[n])) break;
    ++ci_;
    ++n;
  }
  if (n > 0) dbrec_[kCqSetCi] = htobe32(ci_ & 0xffffffu);
  return n;
}

DvQpResources::~DvQpResources() {
  if (parent != nullptr) ibv_dealloc_pd(parent);
  if (td != nullptr) ibv_dealloc_td(td);
}

absl::StatusOr<ibv_qp*> create_qp(ibv_context* ctx, ibv_pd* pd, ibv_qp_init_attr* attr, DvQpResources* owned) {
  ibv_td_init_attr ta{};
  owned->td = ibv_alloc_td(ctx, &ta);
  if (owned->td == nullptr)
    return absl::ResourceExhaustedError(absl::StrFormat("rdma: ibv_alloc_td: %s", std::strerror(errno)));
  ibv_parent_domain_init_attr pa{};
  pa.pd = pd;
  pa.td = owned->td;
  owned->parent = ibv_alloc_parent_domain(ctx, &pa);
  if (owned->parent == nullptr) {
    return absl::ResourceExhaustedError(absl::StrFormat("rdma: ibv_alloc_parent_domain: %s", std::strerror(errno)));
  }
  ibv_qp_init_attr_ex ex{};
  ex.qp_type = attr->qp_type;
  ex.send_cq = attr->send_cq;
  ex.recv_cq = attr->recv_cq;
  ex.srq = attr->srq;
  ex.cap = attr->cap;
  ex.sq_sig_all = 0;
  ex.comp_mask = IBV_QP_INIT_ATTR_PD;
  ex.pd = owned->parent;
  mlx5dv_qp_init_attr dv{};
  ibv_qp* qp = mlx5dv_create_qp(ctx, &ex, &dv);
  if (qp == nullptr) return absl::InternalError(absl::StrFormat("rdma: mlx5dv_create_qp: %s", std::strerror(errno)));
  attr->cap = ex.cap;
  return qp;
}

#else  // !POLLUX_HAVE_MLX5DV: the fast path is compiled out; Device never selects it.

void WqeWriter::init(const SqLayout&, std::uint32_t, std::uint32_t, const void*, std::uint32_t) {}
bool WqeWriter::send(const void*, std::uint32_t, bool, bool, std::uint64_t) noexcept { return false; }
void WqeWriter::ring() noexcept {}
std::uint64_t WqeWriter::complete(std::uint16_t) noexcept { return 0; }
void WqeWriter::copy_to_bf(const std::byte*, std::uint32_t) noexcept {}
bool parse_cqe(const std::byte*, std::uint32_t, std::uint32_t, DvCompletion*) noexcept { return false; }
absl::StatusOr<std::unique_ptr<DvSendQueue>> DvSendQueue::attach(ibv_qp*, ibv_ah*, std::uint32_t, std::uint32_t) {
  return absl::UnimplementedError("rdma: built without mlx5dv.h");
}
absl::StatusOr<std::unique_ptr<DvCq>> DvCq::create(ibv_context*, int) {
  return absl::UnimplementedError("rdma: built without mlx5dv.h");
}
DvCq::~DvCq() = default;
std::uint32_t DvCq::poll(DvCompletion*, std::uint32_t) noexcept { return 0; }
DvQpResources::~DvQpResources() = default;
absl::StatusOr<ibv_qp*> create_qp(ibv_context*, ibv_pd*, ibv_qp_init_attr*, DvQpResources*) {
  return absl::UnimplementedError("rdma: built without mlx5dv.h");
}

#endif

}  // namespace pollux::transport::rdma::mlx5
