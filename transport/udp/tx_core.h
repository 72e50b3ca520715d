// The state a UDP publisher keeps for as long as its socket lives (past the endpoint when it lingers).
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "core/counter_set.h"
#include "core/counters.h"
#include "core/trace.h"
#include "transport/reliability/fault_injector.h"
#include "transport/reliability/protocol_counters.h"
#include "transport/reliability/sender.h"
#include "transport/udp/kernel_timestamps.h"
#include "transport/udp/udp_socket.h"
#include "transport/udp/xdp_port.h"

struct mmsghdr;

namespace pollux::transport::udp {

// The UDP publisher's own counters, beside the protocol's (reliability::SenderCounters).
// Counters::publish() names: `t` (the TxCore), `ts` (its TX timestamp statistics).
#define POLLUX_UDP_TX_COUNTERS(X)                                                                           \
  X(send_blocked, "send_blocked", "flushes the socket took only part of (the rest retried)",                \
    t.sender.stats().send_blocked)                                                                          \
  X(send_errors, "send_errors", "sends that failed other than on a full socket (skipped; subscribers NAK)", \
    t.send_errors)                                                                                          \
  X(fault_dropped, "fault_tx_dropped", "datagrams the TX fault injector dropped (udp.fault_tx_loss)",       \
    t.tx_faults.stats().dropped)                                                                            \
  X(xdp_socket_sends, "xdp_socket_sends",                                                                   \
    "udp.datapath = xdp: datagrams sent through the kernel socket while the destination's MAC was unknown", \
    t.xdp_socket_sends)
#define POLLUX_UDP_TX_STAMP_COUNTERS(X)                                                                          \
  X(tx_stamps, "tx_timestamps", "timestamp requests whose kernel TX stamp came back", ts.stamped)                \
  X(tx_stamps_expired, "tx_timestamps_expired", "timestamp requests whose stamp never came", ts.expired)         \
  X(tx_stamps_skipped, "tx_timestamps_skipped", "traced first transmissions sent without a request", ts.skipped) \
  X(tx_stamp_errors, "tx_timestamp_errors", "error-queue entries not matching a request, stale or not stamps",   \
    ts.unknown + ts.stale + ts.not_stamps)                                                                       \
  X(tx_stamp_resyncs, "tx_timestamp_resyncs", "restarts of the kernel's timestamp numbering", ts.resyncs)
POLLUX_COUNTER_SET(TxOwnCounters, POLLUX_UDP_TX_COUNTERS);
POLLUX_COUNTER_SET(TxStampCounters, POLLUX_UDP_TX_STAMP_COUNTERS);

// A publisher's socket, protocol state and send path: what must outlive the endpoint when its
// close lingers (UdpPollerSource keeps it until the subscribers confirmed the end).
struct TxCore final : reliability::DatagramSink {
  ~TxCore() override;
  std::uint32_t send_datagrams(std::span<const reliability::DatagramSink::Datagram> d) noexcept override;
  // udp.datapath = "xdp": looks the destination's MAC up again (every second once known, every
  // 20 ms until then; the sends meanwhile go through the socket, which makes the kernel resolve
  // it). Cheap when not due; a netlink dump when it is.
  void service_xdp(std::int64_t now_ns) noexcept;
  // Reads NAKs / status messages (a few recvmmsg of kControlBatch), and the error queue when TX
  // timestamps are on; returns how many control messages.
  int receive_control(std::int64_t now_ns) noexcept;
  // Traced streams: reads the kernel's TX timestamps from the error queue (a bounded batch,
  // non-blocking) and records them in send_log. Returns the number read.
  int collect_tx_stamps() noexcept;
  // A send that failed (errno): true when the socket is full - nothing went out, retry later;
  // otherwise (unreachable network, filtered, ...) counted in send_errors and false: the
  // caller moves on rather than spin on the same datagrams (subscribers NAK what they missed).
  bool send_failure_is_transient() noexcept;
  // The two datapaths of send_datagrams().
  std::uint32_t send_socket(std::span<const reliability::DatagramSink::Datagram> d) noexcept;
  std::uint32_t send_xdp(std::span<const reliability::DatagramSink::Datagram> d) noexcept;
  // Timers of the TX timestamps: expiry, restarting the numbering. Cheap when off.
  void service_tx_stamps(std::int64_t now_ns) noexcept;
  bool tx_stamps_outstanding() const noexcept { return tx_stamps && stamps.outstanding() != 0; }
  void publish_counters() noexcept;

  Channel ch;
  SocketInfo sock;
  // udp.datapath = "xdp": the port data goes out through, the destination's MAC (once resolved),
  // the socket's port (the frames' source: NAKs and status messages come back to the socket) and
  // the TTL.
  std::shared_ptr<XdpPort> xdp;
  std::uint8_t xdp_mac[6] = {};
  bool xdp_resolved = false;
  std::uint16_t xdp_src_port = 0;
  std::uint8_t xdp_ttl = 64;
  std::int64_t xdp_next_resolve_ns = 0;
  std::uint64_t xdp_socket_sends = 0;
  // A traced stream with udp.kernel_timestamps on the XDP datapath: no kernel TX timestamp
  // exists there, so the send log gets the clock read just before the datagrams were handed to
  // the AF_XDP port (frame build, TX ring and kick follow) for the traced first transmissions
  // (sequence above xdp_stamp_hwm) of what it sent.
  bool xdp_tx_stamps = false;
  std::uint64_t xdp_stamp_hwm = 0;
  void stamp_xdp_sends(std::span<const reliability::DatagramSink::Datagram> d, std::int64_t at_ns) noexcept;
  reliability::ReliableSender sender;
  reliability::FaultInjector tx_faults;
  double tx_loss = 0;
  std::uint32_t tx_batch = 32;
  std::unique_ptr<::mmsghdr[]> msgs;
  std::unique_ptr<iovec[]> iov;
  std::uint64_t send_errors = 0;
  int last_errno = 0;
  // TX software timestamps (traced streams whose socket accepted SO_TIMESTAMPING): see
  // kernel_timestamps.h. send_log is the publisher's; null once the endpoint closed.
  bool tx_stamps = false;
  core::SendCompletionLog* send_log = nullptr;
  TxStampTracker stamps;
  RealtimeToClock stamp_clock;
  // The protocol's counters are shared with RDMA UD multicast. allocate(): the TX timestamp
  // counters only with `stamps` (a traced stream whose socket stamps).
  struct Counters : reliability::EndpointCounters<reliability::SenderCounters, TxOwnCounters, TxStampCounters> {
    // No-op when allocate() was never called.
    void publish(const TxCore& t) noexcept;
  } c;
};

}  // namespace pollux::transport::udp
