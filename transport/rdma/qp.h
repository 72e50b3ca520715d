// Creating and destroying the QPs of both modes (plain verbs, or mlx5dv when the device is an
// mlx5), shared by the connection manager (RC) and the transport (UD).
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>

#include "absl/status/status.h"
#include "core/config.h"
#include "transport/rdma/completion_group.h"
#include "transport/rdma/conn.h"

namespace pollux::transport::rdma {

class Device;

struct QpSpec {
  ibv_qp_type type = IBV_QPT_RC;
  CompletionGroup* group = nullptr;
  bool publisher = false;  // sends frames (fast path candidate); else receives
  std::uint32_t sq_depth = 1;
  std::uint32_t inline_bytes = 0;  // asked for; c->max_inline gets what the device granted
  std::uint32_t rq_depth = 0;      // receiver without SRQ: its own receive queue (group buffers);
                                   // UD publisher: the receive queue its endpoint fills itself (NAKs)
  ibv_ah* ah = nullptr;            // UD publisher: for the mlx5 template
};

// Creates c->qp on spec.group's CQ (and SRQ for receivers when the group has one), reserving
// CQ room; fills qp_num, max_inline, has_rq, sq_depth and, on mlx5, the fast-path state.
absl::Status create_qp(Device& dev, const QpSpec& spec, Conn* c);
// UD QPs have no rdma_cm: INIT (port, Q_Key) -> RTR -> RTS by hand.
absl::Status ud_to_rts(ibv_qp* qp, std::uint8_t port);
// The InfiniBand encoding of an RNR NAK timer (IBA table 45: code 1 = 10 us ... 31 = 491.52 ms,
// 0 = 655.36 ms): the smallest code whose delay is at least `us`.
std::uint8_t rnr_timer_code(std::uint32_t us);
// The delay, in microseconds, of an RNR timer code (0..31).
std::uint32_t rnr_timer_us(std::uint8_t code);
// Destroys what create_qp made (and the UD address handle), returns the CQ reservation.
void destroy_qp(Conn* c);

}  // namespace pollux::transport::rdma
