#include "transport/rdma/qp.h"

#include <cerrno>
#include <cstring>

#include "absl/strings/str_format.h"
#include "transport/rdma/device.h"
#include "transport/rdma/mlx5_dv.h"
#include "transport/rdma/wire.h"

namespace pollux::transport::rdma {

Conn::Conn() = default;
Conn::~Conn() = default;

absl::Status create_qp(Device& dev, const QpSpec& spec, Conn* c) {
  CompletionGroup* g = spec.group;
  const bool srq = !spec.publisher && g->uses_srq();
  if (srq && g->srq() == nullptr) return absl::InternalError("rdma: receiving QP on a group without receives enabled");
  const bool fast = spec.publisher && dev.mlx5dv_supported();
  // A UD publisher receives its subscribers' NAKs into buffers of its own (never the SRQ's).
  const std::uint32_t rq = spec.publisher ? (spec.type == IBV_QPT_UD ? spec.rq_depth : 0) : (srq ? 0 : spec.rq_depth);
  // Worst case on the group CQ: every request flushed on error. Fast-path sends complete on the
  // separate mlx5 send CQ.
  const std::uint32_t reserve = (fast ? 1 : spec.sq_depth) + rq;
  if (absl::Status s = g->reserve_cqes(reserve); !s.ok()) return s;
  c->cqes_reserved = reserve;

  ibv_qp_init_attr a{};
  a.qp_type = spec.type;
  a.recv_cq = g->cq();
  a.send_cq = g->cq();
  a.srq = srq ? g->srq() : nullptr;
  a.cap.max_send_wr = spec.sq_depth;
  a.cap.max_recv_wr = rq;
  a.cap.max_send_sge = 1;
  a.cap.max_recv_sge = 1;
  a.sq_sig_all = 0;
  if (fast) {
    auto cq = g->dv_send_cq(dev);
    if (!cq.ok()) return cq.status();
    a.send_cq = *cq;
  }
  // Ask for the inline size wanted; a device that grants less says EINVAL: halve and retry.
  std::uint32_t inl = spec.inline_bytes;
  for (;;) {
    a.cap.max_inline_data = inl;
    errno = 0;
    if (fast) {
      c->dv_res = std::make_unique<mlx5::DvQpResources>();
      auto qp = mlx5::create_qp(dev.context(), dev.pd(), &a, c->dv_res.get());
      c->qp = qp.ok() ? *qp : nullptr;
      if (!qp.ok() && inl == 0) return qp.status();
    } else {
      c->qp = ibv_create_qp(dev.pd(), &a);
    }
    if (c->qp != nullptr) break;
    const int err = errno;
    if (inl > 0 && (err == EINVAL || err == ENOMEM || err == 0)) {
      inl /= 2;
      continue;
    }
    g->unreserve_cqes(c->cqes_reserved);
    c->cqes_reserved = 0;
    return absl::ResourceExhaustedError(absl::StrFormat(
        "rdma: ibv_create_qp(%s, %u send / %u receive requests) on %s: %s; lower rdma.send_queue_depth / "
        "rdma.recv_queue_depth or raise `ulimit -l`",
        spec.type == IBV_QPT_RC ? "RC" : "UD", a.cap.max_send_wr, rq, dev.name(), std::strerror(err)));
  }
  c->qp_num = c->qp->qp_num;
  c->max_inline = a.cap.max_inline_data;
  c->sq_depth = spec.sq_depth;
  c->has_rq = !spec.publisher && rq > 0;  // the group posts (and drains) its buffers
  c->group = g;
  c->ud = spec.type == IBV_QPT_UD;
  if (fast) {
    auto q = mlx5::DvSendQueue::attach(c->qp, spec.ah, dev.lkey(), c->max_inline);
    if (!q.ok()) {
      destroy_qp(c);
      return q.status();
    }
    c->dv = std::move(*q);
  }
  return absl::OkStatus();
}

absl::Status ud_to_rts(ibv_qp* qp, std::uint8_t port) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.port_num = port;
  a.qkey = kUdQkey;
  if (int rc = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY); rc != 0) {
    return absl::InternalError(absl::StrFormat("rdma: UD QP %u to INIT: %s", qp->qp_num, std::strerror(rc)));
  }
  a.qp_state = IBV_QPS_RTR;
  if (int rc = ibv_modify_qp(qp, &a, IBV_QP_STATE); rc != 0) {
    return absl::InternalError(absl::StrFormat("rdma: UD QP %u to RTR: %s", qp->qp_num, std::strerror(rc)));
  }
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = 0;
  if (int rc = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN); rc != 0) {
    return absl::InternalError(absl::StrFormat("rdma: UD QP %u to RTS: %s", qp->qp_num, std::strerror(rc)));
  }
  return absl::OkStatus();
}

namespace {
// IBA table 45, in units of 10 us: index = code (0 is the longest, 655.36 ms).
constexpr std::uint32_t kRnrTimer10us[32] = {65536, 1,    2,    3,    4,    6,     8,     12,    16,    24,   32,
                                             48,    64,   96,   128,  192,  256,   384,   512,   768,   1024, 1536,
                                             2048,  3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768, 49152};
}  // namespace

std::uint8_t rnr_timer_code(std::uint32_t us) {
  for (std::uint8_t code = 1; code < 32; ++code) {
    if (kRnrTimer10us[code] * 10 >= us) return code;
  }
  return 0;
}

std::uint32_t rnr_timer_us(std::uint8_t code) { return kRnrTimer10us[code & 31] * 10; }

void destroy_qp(Conn* c) {
  c->dv.reset();
  if (c->qp != nullptr) {
    (void)ibv_destroy_qp(c->qp);
    c->qp = nullptr;
  }
  c->dv_res.reset();
  if (c->ah != nullptr) {
    (void)ibv_destroy_ah(c->ah);
    c->ah = nullptr;
  }
  if (c->group != nullptr && c->cqes_reserved != 0) c->group->unreserve_cqes(c->cqes_reserved);
  c->cqes_reserved = 0;
}

}  // namespace pollux::transport::rdma
