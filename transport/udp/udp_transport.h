// UDP transport: unicast or multicast datagrams carrying runs of frames, made reliable by the
// NAK protocol of transport/reliability/ (docs/PROTOCOL.md).
//
// Data plane per burst: post_st() copies frames into the publisher's send log (its retransmit
// buffer) and sends them as datagrams packed up to the MTU with one sendmmsg; received
// datagrams land in buffers the frames are then delivered from without a copy. Inline
// endpoints also have direct paths for the API's single messages: claim_direct() /
// commit_direct() build a frame in place in the send log, poll_direct() hands a datagram that
// simply continues its session from the receive buffer to the handler.
//
// Who reads the sockets depends on who drives the endpoint:
//   - poller mode (spec.poller >= 0): the poller's UdpPollerSource owns one epoll set over the
//     sockets of every endpoint opened on that poller (plus one timerfd for the earliest
//     protocol deadline). Its progress() reads the ready sockets in bursts (one epoll_wait
//     round per cycle, recvmmsg per ready socket) and hands datagrams to their endpoints;
//     endpoints are passive: poll_st() returns what the source queued, post_st() sends, and
//     the source's housekeeping() runs the protocol timers. close_st() never blocks: a
//     publisher that must linger (serve NAKs until its subscribers confirmed the end) hands its
//     socket and sender state to the source, which finishes the linger in housekeeping.
//   - inline mode (spec.poller == -1): the endpoint progresses itself inside poll_st() /
//     post_st() / housekeeping_st(), and owns a Waiter (its socket + a timerfd) exposed as
//     notify_fd() for Subscriber::wait().
#pragma once

#include <memory>
#include <string_view>
#include <vector>

#include "transport/transport.h"
#include "transport/udp/poller_source.h"
#include "transport/udp/rx_endpoint.h"
#include "transport/udp/tx_core.h"
#include "transport/udp/tx_endpoint.h"
#include "transport/udp/waiter.h"

namespace pollux::transport::udp {

class UdpTransport final : public Transport {
 public:
  explicit UdpTransport(const TransportEnv& env) : env_(env) {}
  ~UdpTransport() override { close(); }
  std::string_view name() const override { return "udp"; }
  // Frames are copied into the send log, so the pool needs no registration.
  absl::Status register_memory(core::BufferPool&) override { return absl::OkStatus(); }
  absl::StatusOr<std::unique_ptr<TxEndpoint>> open_tx(const EndpointSpec& spec) override;
  absl::StatusOr<std::unique_ptr<RxEndpoint>> open_rx(const EndpointSpec& spec) override;
  // Finishes lingering closes (the pollers have stopped), then drops the sources.
  void close() override;
  // A socket (and session) per publisher: publishers on different threads never share one.
  bool shared_tx_endpoint() const noexcept override { return false; }
  absl::StatusOr<core::ProgressSource*> poller_source(int poller) override;
  std::string describe() const override;
  std::string stream_route(std::uint32_t stream_id) const override;

 private:
  absl::StatusOr<UdpPollerSource*> source_for(const EndpointSpec& spec);
  std::vector<std::unique_ptr<UdpPollerSource>> sources_;
  TransportEnv env_;
};

}  // namespace pollux::transport::udp
