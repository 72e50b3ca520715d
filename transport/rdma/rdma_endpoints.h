// The RDMA transport's RC data plane (rdma.mode = "rc"; UD multicast: ud_endpoints.h): a
// publishing endpoint (one per publishing application thread, owning one QP per connected
// subscriber) and a subscribing endpoint (one QP per connected publisher). Both
// are driven by exactly one thread - their poller, or the application thread in inline mode -
// and take no lock, allocate nothing and never register memory on the data path. A poller's
// endpoints are passive: post_st posts, poll_st/reap_st hand out what the poller's source
// (RdmaPollerSource: one CQ poll per duty cycle) dispatched to them. An inline endpoint polls
// its private completion group itself, inside poll_st/reap_st/post_st.
#pragma once

#include <infiniband/verbs.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "core/buffer_pool.h"
#include "core/counter_set.h"
#include "core/counters.h"
#include "transport/rdma/completion_group.h"
#include "transport/rdma/conn.h"
#include "transport/rdma/endpoint_base.h"
#include "transport/rdma/sequence.h"
#include "transport/rdma/traced_sends.h"
#include "transport/transport.h"

namespace pollux::transport::rdma {

class RdmaTransport;

// The RC endpoints' counters (scopes "rdma tx stream N SESSION", "rdma rx stream N").
#define POLLUX_RDMA_TX_COUNTERS(X)                                                                    \
  X(c_frames_, "frames_posted", "frames posted to subscribers' queue pairs")                          \
  X(c_inline_, "inline_sends", "sends posted inline (payload in the work request)")                   \
  X(c_doorbells_, "post_calls", "post calls (doorbells)")                                             \
  X(c_signalled_, "signalled_sends", "sends that asked for a completion")                             \
  X(c_dropped_, "dropped_no_subscriber", "frames posted while no subscriber was connected (dropped)") \
  X(c_heartbeats_, "control_frames", "control frames sent (heartbeats, end of stream)")               \
  X(c_qp_errors_, "qp_errors", "queue pairs that went to the error state")                            \
  X(c_back_pressure_, "send_queue_full", "posts refused because a send queue was full")               \
  X(c_unacked_at_close_, "unacknowledged_at_close", "frames not yet acknowledged when the stream closed")
#define POLLUX_RDMA_RX_COUNTERS(X)                                                          \
  X(c_messages_, "messages", "messages received")                                           \
  X(c_gaps_, "gaps", "gaps in a publisher's sequences")                                     \
  X(c_lost_, "messages_lost", "messages of those gaps")                                     \
  X(c_stale_, "stale_or_duplicate", "frames of an older session or already delivered")      \
  X(c_malformed_, "malformed", "frames that failed validation")                             \
  X(c_foreign_, "other_stream", "frames of another stream")                                 \
  X(c_heartbeats_, "control_frames", "control frames received (heartbeats, end of stream)") \
  X(c_ends_, "ends_of_stream", "publisher sessions that ended")

class RdmaTxEndpoint final : public TxEndpoint, public RdmaEndpointBase {
 public:
  static constexpr std::uint32_t kMaxConns = 64;  // subscribers per publishing endpoint
  static constexpr std::uint32_t kMaxPost = 64;   // frames per post call (one doorbell per QP)

  RdmaTxEndpoint(RdmaTransport& t, CompletionGroup* group, const EndpointSpec& spec, std::uint32_t session_id,
                 std::uint32_t ring_slots, std::uint32_t control_slot);
  ~RdmaTxEndpoint() override;

  std::uint32_t post_st(std::span<const TxDesc> frames) noexcept override;
  std::uint32_t reap_st(std::span<std::uint32_t> freed) noexcept override;
  int housekeeping_st(std::int64_t now_ns) noexcept override;
  bool try_arm_st() noexcept override;
  void disarm_st() noexcept override;
  // Acquire pairs with add_ready(+1)'s release: the announcement of the connection that made
  // this true is visible to the owner's next sync() (through whatever hands it the frames).
  bool connected() const noexcept override {
    return ready_.load(std::memory_order_acquire) > 0 && !closed_flag_.load(std::memory_order_relaxed);
  }
  std::uint32_t max_frame() const noexcept override { return max_frame_; }
  // Posts the end of stream on every connection; the rest of the close (the linger) is a state
  // machine (endpoint_base.h) that never blocks a poller.
  void close_st() noexcept override;
  std::string describe() const override;

  // --- CompletionGroup callbacks (owning thread) ---
  void adopt(Conn* c) noexcept;
  void on_gone(Conn* c) noexcept;
  void on_send(Conn* c, std::uint64_t wr_id, ibv_wc_status status) noexcept;

  // --- control plane ---
  // The connection manager announced (+1) a connection; the owner retired (-1) one.
  // Release: everything the caller did before (announcing the connection) happens before a
  // thread that sees the new count in connected().
  void add_ready(int d) noexcept { ready_.fetch_add(d, std::memory_order_release); }
  // Last connection problem per peer, for describe() and tests (control path, locked).
  void set_status(const std::string& s);
  std::string status() const;
  CompletionGroup* group() const noexcept { return group_; }
  int notify_fd() const noexcept override { return group_->notify_fd(); }
  // Frames handed to post_st and frames whose slots went back (for tests).
  std::uint64_t frames_posted() const noexcept { return posted_; }
  std::uint32_t live_connections() const noexcept { return nconns_; }
  // Tests: moves every connection's QP to the error state, as a NIC or path failure would
  // (owner thread). The next post or completion poll notices, drops the connection, and the
  // connection manager reconnects.
  void fail_connections_for_test() noexcept;

 private:
  void kill(Conn* c) noexcept;
  bool post_control(Conn* c, std::uint16_t flags, std::int64_t now_ns) noexcept;
  std::uint32_t sq_room(const Conn& c) const noexcept;
  // Lingers (rdma.linger_ms at most) until every connection acknowledged every frame and the
  // end of stream, then hands the connections back.
  bool close_step_st(std::int64_t now_ns, bool give_up) noexcept override;

  const std::uint32_t lkey_;
  std::uint32_t max_frame_ = 0;
  const std::uint32_t signal_every_;
  const std::uint32_t post_batch_;  // most WRs per ibv_post_send (rdma.post_batch)
  const std::uint32_t inline_threshold_;
  const std::uint32_t control_slot_;  // a pool slot for heartbeat / end-of-stream frames

  TracedSends traced_;  // by endpoint frame index

  std::array<Conn*, kMaxConns> conns_{};
  std::uint32_t nconns_ = 0;
  // Slots in flight, by endpoint frame index (free-running, masked).
  std::vector<std::uint32_t> inflight_;
  std::uint64_t mask_ = 0;
  std::uint64_t posted_ = 0;  // frames posted (next frame index)
  std::uint64_t freed_ = 0;   // frames whose slots went back to the publisher
  std::uint64_t next_seq_ = 1;
  std::uint64_t idle_check_posted_ = 0;  // posted_ when housekeeping last saw it change
  std::int64_t idle_since_ns_ = 0;       // that housekeeping call's clock
  // RC: how long a publisher must have posted nothing before housekeeping flushes an
  // unsignalled tail with a signalled heartbeat. By time, not by calls: an inline application
  // may call service() every few polls, and a heartbeat per call-pair would put an extra send
  // (and, on the receiver, an extra receive) into its round trips.
  static constexpr std::int64_t kIdleTailNs = 1'000'000;
  std::int64_t linger_deadline_ns_ = 0;  // close: unacknowledged frames are lost after this
  bool closed_ = false;
  std::atomic<bool> closed_flag_{false};  // closed_ for other threads (connected()); a plain flag, relaxed
  std::atomic<int> ready_{0};

  mutable std::mutex status_mu_;  // control path only
  std::string status_;

  POLLUX_COUNTER_FIELDS(POLLUX_RDMA_TX_COUNTERS)
  // The sequence the next frame gets (pollux-stat: the publisher's position, kind kPublisher).
  core::Counter c_position_;
};

class RdmaRxEndpoint final : public RxEndpoint, public RdmaEndpointBase {
 public:
  static constexpr std::uint32_t kMaxConns = 64;  // publishers (QPs) per subscribing endpoint

  RdmaRxEndpoint(RdmaTransport& t, CompletionGroup* group, const EndpointSpec& spec);
  ~RdmaRxEndpoint() override;

  std::uint32_t poll_st(std::span<RxDesc> out) noexcept override;
  void release_st(std::span<const RxDesc> done, bool validate) noexcept override;
  int housekeeping_st(std::int64_t now_ns) noexcept override;
  bool try_arm_st() noexcept override;
  void disarm_st() noexcept override;
  bool connected() const noexcept override { return live_.load(std::memory_order_relaxed) > 0; }
  void close_st() noexcept override;
  std::string describe() const override;

  // --- CompletionGroup callbacks (owning thread) ---
  void adopt(Conn* c) noexcept;
  void on_gone(Conn* c) noexcept;
  void on_recv(Conn* c, std::uint32_t slot, std::uint32_t byte_len) noexcept;

  // --- control plane ---
  std::uint32_t max_frame() const noexcept { return max_frame_; }  // what a receive buffer holds
  CompletionGroup* group() const noexcept { return group_; }
  int notify_fd() const noexcept override { return group_->notify_fd(); }
  std::uint64_t messages() const noexcept { return messages_; }
  // Tests (owning thread): the RNR timer code of the first publisher's QP (ibv_query_qp), -1 if none.
  int min_rnr_timer_for_test() const noexcept;

 private:
  struct Ready {
    Conn* conn;
    std::uint32_t slot;  // kEndMarker: the connection ended (after everything it delivered)
    std::uint32_t len;
    std::int64_t ns;  // traced frames: when their receive CQE was polled (0: untraced)
  };
  static constexpr std::uint32_t kEndMarker = 0xffffffffu;
  struct Session {
    std::uint32_t id;
    SequenceTracker* seq;
    bool* announced;
  };

  void grow_ready(std::uint32_t need) noexcept;
  void push_event(const RxDesc& d) noexcept;
  void end_conn(Conn* c) noexcept;
  void retire_conn(Conn* c) noexcept;
  // Nothing lingers: close_st() hands everything back at once.
  bool close_step_st(std::int64_t /*now_ns*/, bool /*give_up*/) noexcept override { return true; }

  std::uint32_t max_frame_ = 0;

  std::array<Conn*, kMaxConns> conns_{};
  std::uint32_t nconns_ = 0;
  std::vector<Conn*> closing_;  // peer gone: end once the CQ has been drained
  std::vector<Ready> ready_;    // frames the group dispatched to us, in arrival order
  std::uint64_t ready_head_ = 0, ready_tail_ = 0, ready_mask_ = 0;
  std::array<RxDesc, 64> events_{};  // stream events raised outside poll_st, and overflow of it
  std::uint32_t ev_head_ = 0, ev_tail_ = 0;
  SessionTable<16> sessions_;                      // publisher sessions heard on this stream
  SessionTable<16>::Entry* rc_session_ = nullptr;  // RC: the last one looked up (checked by id)
  std::vector<std::uint8_t> held_;                 // by pool slot: handed to the application, not yet released
  std::atomic<int> live_{0};  // live publishers, written by the owner, read by connected(): relaxed (no data guarded)
  std::uint32_t empty_polls_ = 0;
  std::uint64_t messages_ = 0;
  bool closed_ = false;

  POLLUX_COUNTER_FIELDS(POLLUX_RDMA_RX_COUNTERS)
};

}  // namespace pollux::transport::rdma
