// The data plane resolved once per endpoint. Publishers and subscribers remember which
// concrete endpoint class they hold (found once, at open, by dynamic_cast) and call it through
// a pointer of that `final` type, so every data-path call (post, poll, release, reap,
// connected) is a direct call chosen by comparing a per-endpoint constant - branches that
// always go the same way - instead of a virtual call per message. Endpoint classes this
// does not know (none today) fall back to the virtual interface.
#pragma once

#include <cstdint>

#include "transport/shm/shm_transport.h"
#include "transport/transport.h"
#include "transport/udp/udp_transport.h"
#if POLLUX_HAVE_RDMA
#include "transport/rdma/rdma_endpoints.h"
#include "transport/rdma/ud_endpoints.h"
#endif

namespace pollux::detail {

enum class EndpointKind : std::uint8_t { kVirtual, kShm, kUdp, kRdma, kRdmaUd };

inline EndpointKind kind_of(transport::TxEndpoint* ep) {
  if (dynamic_cast<transport::shm::ShmTxEndpoint*>(ep) != nullptr) return EndpointKind::kShm;
  if (dynamic_cast<transport::udp::UdpTxEndpoint*>(ep) != nullptr) return EndpointKind::kUdp;
#if POLLUX_HAVE_RDMA
  if (dynamic_cast<transport::rdma::RdmaTxEndpoint*>(ep) != nullptr) return EndpointKind::kRdma;
  if (dynamic_cast<transport::rdma::UdTxEndpoint*>(ep) != nullptr) return EndpointKind::kRdmaUd;
#endif
  return EndpointKind::kVirtual;
}

inline EndpointKind kind_of(transport::RxEndpoint* ep) {
  if (dynamic_cast<transport::shm::ShmRxEndpoint*>(ep) != nullptr) return EndpointKind::kShm;
  if (dynamic_cast<transport::udp::UdpRxEndpoint*>(ep) != nullptr) return EndpointKind::kUdp;
#if POLLUX_HAVE_RDMA
  if (dynamic_cast<transport::rdma::RdmaRxEndpoint*>(ep) != nullptr) return EndpointKind::kRdma;
  if (dynamic_cast<transport::rdma::UdRxEndpoint*>(ep) != nullptr) return EndpointKind::kRdmaUd;
#endif
  return EndpointKind::kVirtual;
}

// f(concrete endpoint pointer); `k` must be kind_of(ep).
// An if-chain, not a switch: a switch over these few values may become a jump table, i.e. an
// indirect jump again (measured: ~20 ns more per shm round trip than the chain).
template <class F>
inline decltype(auto) with_tx(EndpointKind k, transport::TxEndpoint* ep, F&& f) noexcept {
  if (k == EndpointKind::kShm) return f(static_cast<transport::shm::ShmTxEndpoint*>(ep));
  if (k == EndpointKind::kUdp) return f(static_cast<transport::udp::UdpTxEndpoint*>(ep));
#if POLLUX_HAVE_RDMA
  if (k == EndpointKind::kRdma) return f(static_cast<transport::rdma::RdmaTxEndpoint*>(ep));
  if (k == EndpointKind::kRdmaUd) return f(static_cast<transport::rdma::UdTxEndpoint*>(ep));
#endif
  return f(ep);
}

template <class F>
inline decltype(auto) with_rx(EndpointKind k, transport::RxEndpoint* ep, F&& f) noexcept {
  if (k == EndpointKind::kShm) return f(static_cast<transport::shm::ShmRxEndpoint*>(ep));
  if (k == EndpointKind::kUdp) return f(static_cast<transport::udp::UdpRxEndpoint*>(ep));
#if POLLUX_HAVE_RDMA
  if (k == EndpointKind::kRdma) return f(static_cast<transport::rdma::RdmaRxEndpoint*>(ep));
  if (k == EndpointKind::kRdmaUd) return f(static_cast<transport::rdma::UdRxEndpoint*>(ep));
#endif
  return f(ep);
}

}  // namespace pollux::detail
