// The RDMA transport's UD multicast data plane (rdma.mode = "ud_mcast"), made reliable by the
// NAK protocol of transport/reliability/ (docs/PROTOCOL.md; docs/RDMA.md section 4) - the same
// sessions, sequences, heartbeats, NAK timing, repair suppression and rate limits as the UDP
// transport, over verbs.
//
// Publisher (UdTxEndpoint, one per publishing thread and stream: its own UD QP and session):
// post_st copies each frame into the ReliableSender's send log - the bounded retransmit buffer,
// carved once from the registered buffer pool, so no ibv_reg_mr and no allocation per message -
// and posts the datagrams (runs of frames up to the path MTU) to the group straight from the
// log: one UD send work request each, chained with one doorbell per post_batch, selectively
// signalled. A repair re-sends the very bytes of the log, to the group (one repair fixes every
// subscriber that missed it). The log never overwrites bytes a posted send may still read
// (SendPins). Subscribers' NAKs and status messages arrive unicast on the publisher's own QP
// (a small receive queue of its own) and are dispatched by the CQ poll like any completion.
//
// Subscriber (UdRxEndpoint, one UD QP attached to the group): datagrams land in the group's
// receive buffers; each passes the loss interceptor (rdma.fault_*) and goes into a
// ReliableReceiver, which keeps frames in place (zero copy: a buffer stays the subscriber's
// until every frame of it was delivered and released), reorders, drops duplicates, NAKs gaps
// and reports what cannot be repaired as exact gaps. NAKs and status messages go unicast to the
// publisher's QP: a UD send with an address handle for the datagram's source GID (created once
// per publisher host, a control event) and the source QPN of its work completion.
//
// Both are driven by exactly one thread (their poller, or the application thread inline).
#pragma once

#include <infiniband/verbs.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/buffer_pool.h"
#include "core/counter_set.h"
#include "core/counters.h"
#include "transport/rdma/completion_group.h"
#include "transport/rdma/conn.h"
#include "transport/rdma/endpoint_base.h"
#include "transport/rdma/rdma_config.h"
#include "transport/rdma/send_pins.h"
#include "transport/rdma/traced_sends.h"
#include "transport/reliability/fault_injector.h"
#include "transport/reliability/protocol_counters.h"
#include "transport/reliability/receiver.h"
#include "transport/reliability/sender.h"
#include "transport/transport.h"

namespace pollux::transport::rdma {

class RdmaTransport;

// The UD multicast endpoints' own counters, beside the protocol's (transport/reliability).
// Entries with a value are copied from the endpoint's fields by its publish_counters().
#define POLLUX_UD_TX_COUNTERS(X)                                                                     \
  X(frames, "frames_posted", "frames posted")                                                        \
  X(post_calls, "post_calls", "post calls (doorbells)")                                              \
  X(inline_sends, "inline_sends", "sends posted inline")                                             \
  X(signalled, "signalled_sends", "sends that asked for a completion")                               \
  X(control_received, "control_received", "control messages received (NAKs, status)", control_)      \
  X(log_full, "retransmit_buffer_full", "frames refused: the retransmit buffer was full", log_full_) \
  X(send_queue_full, "send_queue_full", "posts refused: the send queue was full", sq_full_)          \
  X(oversized, "frames_too_large", "frames larger than a datagram (dropped)", oversized_)            \
  X(qp_errors, "qp_errors", "queue pair errors", qp_errors_)
#define POLLUX_UD_RX_COUNTERS(X)                                                                                      \
  X(messages, "messages", "messages delivered")                                                                       \
  X(control_dropped, "control_send_dropped", "NAKs and status messages dropped: no send slot free", control_dropped_) \
  X(control_errors, "control_send_errors", "NAKs and status messages that could not be posted", control_errors_)

class UdTxEndpoint final : public TxEndpoint, public RdmaEndpointBase, private reliability::DatagramSink {
 public:
  static constexpr std::uint32_t kMaxPost = 64;             // send WRs per post call (one doorbell per chain)
  static constexpr std::uint32_t kControlRecvBuffers = 32;  // NAK/status receive buffers of the QP

  // Pool slots the endpoint needs besides the publisher's ring: the retransmit buffer, the
  // control receive buffers and one slot for a heartbeat on a QP without inline sends.
  static std::uint32_t slots_needed(const rdma::RdmaConfig& cfg, std::uint32_t slot_size) noexcept {
    return static_cast<std::uint32_t>((cfg.retransmit_buffer + slot_size - 1) / slot_size) + kControlRecvBuffers + 1;
  }

  UdTxEndpoint(RdmaTransport& t, CompletionGroup* group, const EndpointSpec& spec, std::uint32_t session_id);
  ~UdTxEndpoint() override;

  // Control plane, before the QP is announced: the reliability state over `slots` (a range of
  // slots_needed() pool slots) and the QP's receive buffers. Errors name the key to change.
  absl::Status init(core::SlotRange slots, std::uint32_t path_mtu, Conn* qp);

  std::uint32_t post_st(std::span<const TxDesc> frames) noexcept override;
  std::uint32_t reap_st(std::span<std::uint32_t> freed) noexcept override;
  int housekeeping_st(std::int64_t now_ns) noexcept override;
  bool try_arm_st() noexcept override;
  void disarm_st() noexcept override { group_->disarm(); }
  int notify_fd() const noexcept override { return group_->notify_fd(); }
  // Any thread: the owner refreshes it (a subscriber heard within rdma.liveness_timeout_ms).
  bool connected() const noexcept override { return connected_.load(std::memory_order_relaxed); }
  std::uint32_t max_frame() const noexcept override { return max_frame_; }
  // Sends the end of stream; the rest of the close is a state machine (endpoint_base.h) that
  // never blocks a poller: it lingers (repairing) up to rdma.linger_ms until every known
  // subscriber confirmed the end, then lets the last sends complete (bounded) before the QP goes.
  void close_st() noexcept override;
  std::string describe() const override;

  // --- CompletionGroup callbacks (owning thread) ---
  void adopt(Conn* c) noexcept;
  void on_gone(Conn* c) noexcept;
  void on_send(Conn* c, std::uint64_t wr_id, ibv_wc_status status) noexcept;
  // A NAK or status message landed in control receive buffer `slot` (or it was flushed).
  void on_control(Conn* c, std::uint32_t slot, std::uint32_t byte_len, ibv_wc_status status) noexcept;
  // When housekeeping_st() next has something to do (heartbeat, repair): the group arms its
  // timer for it before the owner sleeps.
  std::int64_t next_deadline() const noexcept { return next_service_ns_; }

  const reliability::ReliableSender& sender() const noexcept { return sender_; }
  std::uint32_t pinned_requests() const noexcept { return pins_.size(); }

 private:
  std::uint32_t send_datagrams(std::span<const Datagram> d) noexcept override;
  bool close_step_st(std::int64_t now_ns, bool give_up) noexcept override;
  int service(std::int64_t now_ns) noexcept;
  void repost(std::uint32_t slot) noexcept;
  void publish_counters() noexcept;
  std::uint32_t sq_room() const noexcept {
    const std::uint64_t used = wr_posted_ - wr_done_;
    return used >= sq_depth_ ? 0 : static_cast<std::uint32_t>(sq_depth_ - used);
  }

  const std::uint32_t lkey_;
  const std::uint32_t signal_every_;
  const std::uint32_t post_batch_;
  const std::uint32_t inline_threshold_;
  const std::int64_t linger_ns_;
  std::uint32_t max_frame_ = 0;

  Conn* qp_ = nullptr;  // owner thread, once adopted
  std::uint32_t sq_depth_ = 0;
  std::uint32_t max_inline_ = 0;
  reliability::ReliableSender sender_;
  SendPins pins_;
  std::uint64_t wr_posted_ = 0, wr_done_ = 0;  // send WRs posted / completed (in order)
  std::uint32_t unsignalled_ = 0;
  std::byte* hb_slot_ = nullptr;  // registered copy of a heartbeat when it cannot go inline
  std::uint64_t hb_wr_ = 0;       // ... busy until this WR completed
  bool hb_busy_ = false;
  std::uint32_t ctl_first_ = 0;   // first control receive slot
  std::uint32_t ctl_posted_ = 0;  // control receive buffers posted to the QP
  std::int64_t next_service_ns_ = 0;
  // Close: lingering for end confirmations until linger_until_ns_ (and resending the end every
  // kEndResendNs), then letting posted sends complete until flush_until_ns_.
  bool lingering_ = false;
  std::int64_t linger_until_ns_ = 0, last_end_ns_ = 0, flush_until_ns_ = 0;
  bool closed_ = false;
  bool broken_ = false;  // the QP failed: nothing more goes out
  std::atomic<bool> connected_{false};

  TracedSends traced_;  // first transmissions, by send work request

  // Pool slots of frames already copied into the log, handed back by reap_st().
  std::unique_ptr<std::uint32_t[]> done_;
  std::uint32_t done_n_ = 0, done_cap_ = 0;

  std::uint64_t frames_ = 0, oversized_ = 0, log_full_ = 0, sq_full_ = 0, control_ = 0, qp_errors_ = 0;
  struct Counters {
    reliability::SenderCounters proto;  // the protocol's, named as the UDP transport's
    POLLUX_COUNTER_FIELDS(POLLUX_UD_TX_COUNTERS)
  } c_;
};

class UdRxEndpoint final : public RxEndpoint, public RdmaEndpointBase, private reliability::ControlSink {
 public:
  static constexpr std::uint32_t kControlSendSlots = 8;    // NAK/status messages in flight at once
  static constexpr std::uint32_t kMaxAddressHandles = 16;  // publisher hosts a subscriber talks back to

  UdRxEndpoint(RdmaTransport& t, CompletionGroup* group, const EndpointSpec& spec);
  ~UdRxEndpoint() override;

  // Control plane, before the QP is announced. `ctl` = kControlSendSlots pool slots.
  absl::Status init(core::SlotRange ctl);

  std::uint32_t poll_st(std::span<RxDesc> out) noexcept override;
  void release_st(std::span<const RxDesc> done, bool validate) noexcept override;
  int housekeeping_st(std::int64_t now_ns) noexcept override;
  // Inline, before the first poll: reads the private group's completions into the receiver
  // (heartbeats start following the session and answer with status: the publisher connects);
  // the data stays for the first poll.
  int duty_st(std::int64_t now_ns) noexcept override;
  bool try_arm_st() noexcept override;
  void disarm_st() noexcept override { group_->disarm(); }
  int notify_fd() const noexcept override { return group_->notify_fd(); }
  // Any thread: a publisher session is being followed.
  bool connected() const noexcept override { return connected_.load(std::memory_order_relaxed); }
  // Leaves the group and tells the publishers; the QP goes once those messages went out
  // (bounded), a step of the close state machine (endpoint_base.h).
  void close_st() noexcept override;
  std::string describe() const override;

  // --- CompletionGroup callbacks (owning thread) ---
  void adopt(Conn* c) noexcept;
  void on_gone(Conn* c) noexcept;
  void on_recv(Conn* c, std::uint32_t slot, std::uint32_t byte_len, std::uint32_t src_qp) noexcept;
  void on_send(Conn* c, std::uint64_t wr_id, ibv_wc_status status) noexcept;
  std::int64_t next_deadline() const noexcept { return next_service_ns_; }
  // Frames queued in user space (dispatched but not yet read, deliverable, delayed by the loss
  // interceptor): the owner must not sleep on them.
  bool has_queued() const noexcept { return ready_head_ != ready_tail_ || receiver_.ready() || faults_.delayed() > 0; }

  // --- control plane ---
  // The multicast membership (ibv_attach_mcast + kernel IGMP join) made at open.
  void set_multicast(Conn* qp, const ibv_gid& mgid, int igmp_socket) noexcept;
  const reliability::ReliableReceiver& receiver() const noexcept { return receiver_; }
  const reliability::FaultInjector& faults() const noexcept { return faults_; }

 private:
  struct Ready {
    std::uint32_t slot;
    std::uint32_t len;  // byte_len of the completion: GRH + datagram
    std::uint32_t src_qp;
    std::uint32_t reserved;
    std::int64_t ns;  // traced streams: when the receive CQE was polled
  };

  void send_control(const reliability::PeerAddress& to, const std::byte* msg, std::uint32_t len) noexcept override;
  bool close_step_st(std::int64_t now_ns, bool give_up) noexcept override;
  // Gives every receive buffer this endpoint holds back to the group (close).
  void recycle_all() noexcept;
  ibv_ah* address_handle(const reliability::PeerAddress& to) noexcept;
  // Moves dispatched datagrams into the receiver (through the loss interceptor).
  void ingest(std::int64_t now_ns) noexcept;
  void admit(std::uint32_t slot, std::int64_t now_ns) noexcept;
  void process(std::uint32_t slot, int times, std::int64_t now_ns) noexcept;
  void evict(std::int64_t now_ns) noexcept;
  int service(std::int64_t now_ns) noexcept;
  void stamp_traced(RxDesc* out, std::uint32_t n) const noexcept;
  void publish_counters() noexcept;

  const bool traced_stream_;

  Conn* qp_ = nullptr;
  ibv_gid mgid_{};
  int igmp_fd_ = -1;
  reliability::ReliableReceiver receiver_;
  reliability::FaultInjector faults_;
  std::vector<Ready> ready_;  // datagrams the group dispatched to us, in arrival order
  std::uint64_t ready_head_ = 0, ready_tail_ = 0, ready_mask_ = 0;
  // By pool slot: frames of the datagram in it held by the receiver or by the application; its
  // length and source QPN (the loss interceptor may hold it back); traced: its receive time.
  std::vector<std::uint32_t> refs_, len_, src_qp_;
  std::vector<std::int64_t> rx_ns_;
  std::int64_t next_service_ns_ = 0;
  std::int64_t last_rx_ns_ = 0;
  std::int64_t flush_until_ns_ = 0;  // close: the "leaving" messages get until then to go out
  bool closed_ = false;
  std::atomic<bool> connected_{false};

  // NAK/status sends: kControlSendSlots registered buffers used in turn, one signalled send each.
  std::uint32_t ctl_first_ = 0;
  std::uint64_t ctl_posted_ = 0, ctl_done_ = 0;
  struct Ah {
    std::uint8_t gid[16];
    ibv_ah* ah;
    std::uint64_t last_wr;  // the last control send that used it (destroyable once completed)
  };
  std::array<Ah, kMaxAddressHandles> ahs_{};
  std::uint32_t nahs_ = 0;

  std::uint64_t malformed_ = 0, overflow_ = 0, evictions_ = 0, control_dropped_ = 0, control_errors_ = 0;
  struct Counters {
    reliability::ReceiverCounters proto;  // the protocol's, named as the UDP transport's
    POLLUX_COUNTER_FIELDS(POLLUX_UD_RX_COUNTERS)
  } c_;
  std::uint64_t messages_ = 0;
};

}  // namespace pollux::transport::rdma
