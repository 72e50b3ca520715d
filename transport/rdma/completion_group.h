// The per-poller verbs resources: one completion queue (with its completion channel, for the
// interrupt-mode hooks) shared by every QP whose endpoint that poller owns, and one shared
// receive queue (SRQ) whose buffers any of those QPs may consume. An endpoint driven inline by
// an application thread gets a group of its own, since a CQ is polled by one thread only.
//
// A poller's group is driven by the poller's RDMA progress source (RdmaPollerSource,
// rdma_transport.h): once per duty cycle it polls the CQ (a burst of up to kPollBurst
// completions) and dispatches each completion to the endpoint that owns its QP, by qp_num:
// sends free pool slots of the publishing endpoint, receives queue frames on the subscribing
// endpoint. Those endpoints are passive (they post, and hand out what was dispatched to them);
// only an inline endpoint's private group is polled by the endpoint itself. All of that happens
// on the owning thread, without locks.
//
// The control plane (the connection manager thread, open/close on the application thread)
// hands new and dead QPs to the owning thread through announce(): a mutex-protected list plus
// a generation counter the owner checks with one acquire load per call (sync()), plus an
// eventfd (the "bell") that wakes an owner asleep in interrupt mode.
//
// Interrupt mode: notify_fd() is an epoll fd over the CQ's completion channel and the bell, so
// one fd wakes the owner for a completion and for a connection-manager event alike (ud_mcast:
// and a timerfd, for heartbeats and liveness while the owner sleeps).
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/buffer_pool.h"
#include "core/clock.h"
#include "core/counter_set.h"
#include "core/counters.h"
#include "core/wakeup.h"
#include "transport/rdma/conn.h"
#include "transport/rdma/mlx5_dv.h"

namespace pollux::transport::rdma {

class Device;
class RdmaEndpointBase;

// Where the owning thread hands a dead or closed QP for destruction (the transport: the
// connection manager thread disconnects and destroys RC QPs; UD QPs are destroyed at once).
class ConnRetirer {
 public:
  virtual ~ConnRetirer() = default;
  virtual void retire(Conn* c) = 0;
};

struct GroupOptions {
  int poller = -1;  // -1: a private group of one inline endpoint
  bool ud = false;  // receive buffers start with a 40-byte GRH
  bool srq = true;  // use a shared receive queue (else a receive queue per QP)
  std::uint32_t recv_depth = 1024;
  std::uint32_t recv_batch = 16;
  std::uint32_t cq_depth = 4096;
  std::uint32_t moderation_count = 0;
  std::uint32_t moderation_usec = 0;
  // ud_mcast: while armed, a timer wakes the owner this often so heartbeats go out and
  // liveness is checked even with runtime.sleep_timer_ms = 0 (RC needs no timer). 0 = none.
  std::int64_t timer_ns = 0;
};

// A completion group's counters (scope "rdma poller N" or "rdma inline N").
#define POLLUX_RDMA_GROUP_COUNTERS(X)                                                                      \
  X(c_cqes_, "completions", "completions polled")                                                          \
  X(c_polls_, "cq_polls_nonempty", "CQ polls that found completions")                                      \
  X(c_recv_posts_, "recv_post_calls", "receive post calls")                                                \
  X(c_recv_buffers_, "recv_buffers_posted", "receive buffers posted")                                      \
  X(c_stale_, "stale_completions", "completions of queue pairs already gone (ignored)")                    \
  X(c_cq_errors_, "cq_poll_errors", "CQ polls that failed")                                                \
  X(c_arms_, "cq_arms", "CQ notification requests (arms)")                                                 \
  X(c_arm_races_, "cq_arm_races", "arms after which the last poll still found completions (stayed awake)") \
  X(c_cq_polls_, "cq_polls", "CQ polls")                                                                   \
  X(c_cq_events_, "cq_events", "completion channel events")                                                \
  X(c_arm_refused_, "cq_arm_refused", "sleeps refused: completions or work pending")                       \
  X(c_mod_unsupported_, "cq_moderation_unsupported", "CQ moderation changes the device refused")           \
  X(c_mod_changes_, "cq_moderation_changes", "CQ moderation changes applied")                              \
  X(c_lingering_closes_, "lingering_closes", "closes that outlived close_st() (a lingering publisher)")    \
  X(c_closing_, "closing_endpoints", "endpoints whose close is running now")

class CompletionGroup {
 public:
  static constexpr int kPollBurst = 32;
  // A closing endpoint is stepped this often at most (a lingering close waits for
  // acknowledgements or NAKs: finer steps would only cost the poller's other endpoints).
  static constexpr std::int64_t kCloseStepNs = 50'000;

  static absl::StatusOr<std::unique_ptr<CompletionGroup>> create(Device& dev, core::BufferPool& pool,
                                                                 const GroupOptions& opt, ConnRetirer* retirer,
                                                                 core::CountersFile* counters);
  ~CompletionGroup();
  CompletionGroup(const CompletionGroup&) = delete;
  CompletionGroup& operator=(const CompletionGroup&) = delete;

  // ---- control plane (any thread) ----------------------------------------------------------
  ibv_cq* cq() const noexcept { return cq_; }
  // Null until enable_receives() (publish-only groups never post a receive buffer).
  ibv_srq* srq() const noexcept {
    std::lock_guard<std::mutex> lock(mu_);
    return srq_;
  }
  // First subscriber on this group: creates the SRQ and carves its buffers from the pool; the
  // owning thread posts them on its next sync().
  absl::Status enable_receives();
  int poller() const noexcept { return opt_.poller; }
  // Reserves CQ room for a QP's worst case (every posted request flushed on error). Fails with
  // the config key to raise when the CQ is too small.
  absl::Status reserve_cqes(std::uint32_t n);
  void unreserve_cqes(std::uint32_t n);
  // Hands a QP to the owning thread: gone = false adopts it (it starts receiving/sending),
  // gone = true tells its owner the peer is gone.
  void announce(Conn* c, bool gone);
  // Drops announcements of a conn about to be destroyed (connection manager, under its lock).
  void forget(Conn* c);
  // The mlx5dv send CQ for QPs on the fast path (created on first use; null off mlx5).
  absl::StatusOr<ibv_cq*> dv_send_cq(Device& dev);
  // Moderation outcome, for describe() and tests ("" when none was asked for).
  const std::string& moderation_note() const noexcept { return moderation_note_; }
  std::string describe() const;

  // ---- owning thread ----------------------------------------------------------------------
  // Adopts announced QPs; one acquire load when nothing changed.
  void sync() noexcept {
    // Acquire pairs with announce()'s release increment: the announced list is complete.
    if (gen_.load(std::memory_order_acquire) != seen_gen_) sync_slow();
  }
  // Polls one burst of completions and dispatches them; returns how many. The one place the
  // CQ is polled (counted in "cq_polls").
  int progress() noexcept;
  // Traced frames' completion time: the first call in a progress() batch reads Clock, later
  // calls of the same batch return that read (one clock read per poll batch that dispatched a
  // traced frame; untraced batches read none). Called from the endpoints' callbacks only.
  std::int64_t batch_now() noexcept {
    if (batch_ns_ == 0) batch_ns_ = core::Clock::now_ns();
    return batch_ns_;
  }
  // True when the last poll returned less than a full burst (the CQ was drained then): a
  // subscriber ends a vanished peer only after everything it delivered was dispatched.
  bool drained() const noexcept { return drained_; }
  // Interrupt hooks: refuse when a control-plane announcement is pending or the group has a CQ
  // that cannot raise events (the mlx5dv send CQ); otherwise arm the CQ's completion event, then
  // poll once more (a completion that arrived between the last poll and the arm raises no
  // event). Completions found by that poll are dispatched (never lost) and make it refuse.
  bool try_arm() noexcept;
  // Consumes the completion events (acknowledged in batches); never blocks. (The bell is
  // drained by try_arm, before it checks for announcements.)
  void disarm() noexcept;
  // Stable for the group's lifetime: an epoll fd over the completion channel and the bell.
  int notify_fd() const noexcept { return epfd_; }
  // Totals for the moderation tuner: completions polled, and wakeups (disarms that consumed at
  // least one completion event).
  std::uint64_t completions_total() const noexcept { return completions_; }
  std::uint64_t event_wakeups_total() const noexcept { return event_wakeups_; }
  // Applies CQ moderation (owning thread, or the control plane before the group is used).
  // False when the device refuses: then "cq_moderation_unsupported" is set to 1, once, and
  // every later call returns false without asking the device again.
  bool set_moderation(std::uint16_t count, std::uint16_t period_us) noexcept;
  bool moderation_unsupported() const noexcept { return moderation_unsupported_; }

  // A receive buffer is free again: re-posted lazily, recv_batch at a time with one post call.
  void recycle(std::uint32_t slot) noexcept;
  // Posts whatever is batched (when the queue runs low, and from housekeeping).
  void flush_recycled() noexcept;
  // Owner: stop using a QP. Moves it to the error state, waits (asynchronously) for its own
  // receive buffers to flush back when it has its own receive queue, then hands it to the
  // retirer. The Conn must not be touched by the caller afterwards.
  void retire(Conn* c) noexcept;
  // True when every retired QP's receive buffers have flushed back (an inline endpoint's
  // close waits for it before its private group is handed on).
  bool retired_drained() const noexcept { return draining_.empty(); }
  // Closing endpoints (endpoint_base.h): a poller-driven endpoint whose close did not finish in
  // close_st() joins the group, and the poller's source advances it until it is done.
  void add_closing(RdmaEndpointBase* ep);
  void remove_closing(RdmaEndpointBase* ep) noexcept;
  bool has_closing() const noexcept { return !closing_.empty(); }
  // One step of every closing endpoint, at most every kCloseStepNs; returns how many finished.
  int advance_closing(std::int64_t now_ns) noexcept;
  // Control path, once no poller drives the group (RdmaTransport::close()): finishes every
  // close still running, polling the CQ and waiting for its completions between steps.
  void finish_closing() noexcept;
  // Waits on the calling thread - never a poller's (an inline endpoint's application thread
  // closing, or the transport's close) - up to `max_ms` for a completion or a control-plane
  // announcement: arms, waits on notify_fd(), disarms. Returns at once when work is pending.
  void wait_for_work(int max_ms) noexcept;
  // Receive buffer geometry: frames start this far into a slot (UD: after the GRH).
  std::uint32_t frame_offset() const noexcept { return opt_.ud ? 40u : 0u; }
  std::byte* slot_ptr(std::uint32_t slot) const noexcept { return pool_->slot(slot); }
  std::uint32_t recv_buffers() const noexcept { return recv_total_.load(std::memory_order_relaxed); }
  std::uint32_t srq_posted() const noexcept { return srq_posted_; }
  bool uses_srq() const noexcept { return opt_.srq; }
  std::uint64_t stale_completions() const noexcept { return stale_; }
  // Every ibv_poll_cq on the CQ so far (any thread may read: a relaxed counter load).
  std::uint64_t cq_polls() const noexcept { return c_cq_polls_.get(); }

 private:
  struct Route {
    std::uint32_t qp_num;
    Conn* conn;
  };

  CompletionGroup(Device& dev, core::BufferPool& pool, const GroupOptions& opt, ConnRetirer* retirer)
      : dev_(dev), pool_(&pool), opt_(opt), retirer_(retirer) {}
  void sync_slow() noexcept;
  void adopt(Conn* c) noexcept;
  Conn* route(std::uint32_t qp_num) noexcept;
  void remove_route(Conn* c) noexcept;
  void dispatch(const ibv_wc& wc) noexcept;
  void post_srq(const std::uint32_t* slots, std::uint32_t n) noexcept;
  bool post_rq(Conn* c, std::uint32_t n) noexcept;
  void refill_rqs() noexcept;
  void finish_retire(Conn* c) noexcept;
  int progress_dv() noexcept;

  Device& dev_;
  core::BufferPool* pool_;
  const GroupOptions opt_;
  ConnRetirer* retirer_;
  ibv_comp_channel* channel_ = nullptr;
  ibv_cq* cq_ = nullptr;
  core::EventFd bell_;  // announce()/enable_receives() -> a sleeping owner
  int epfd_ = -1;       // notify_fd(): channel_->fd + bell_ (+ timer_fd_)
  int timer_fd_ = -1;   // ud_mcast timers while armed (GroupOptions::timer_ns)
  ibv_srq* srq_ = nullptr;
  std::string moderation_note_;

  // Control plane.
  mutable std::mutex mu_;
  std::vector<std::pair<Conn*, bool>> announced_;  // (conn, gone)
  std::vector<std::uint32_t> incoming_;            // new SRQ buffers for the owner to post
  bool receives_enabled_ = false;
  std::uint32_t reserved_cqes_ = 0;
  std::unique_ptr<mlx5::DvCq> dv_cq_;
  std::atomic<std::uint32_t> gen_{0};
  std::atomic<ibv_cq*> dv_cq_raw_{nullptr};

  // Owning thread.
  std::uint32_t seen_gen_ = 0;
  ibv_srq* osrq_ = nullptr;                 // the owner's copy of srq_ (set in sync_slow)
  std::vector<Route> routes_;               // live QPs of this group (a few per poller: linear scan)
  Route last_{0, nullptr};                  // one-entry cache: bursts come from one QP
  std::vector<std::uint32_t> free_;         // receive buffers not posted anywhere
  std::vector<std::uint32_t> pending_;      // recycled, waiting for a batch
  std::vector<Conn*> rq_conns_;             // QPs with their own receive queue (no SRQ)
  std::vector<Conn*> draining_;             // retired, waiting for their receive buffers to flush
  std::vector<RdmaEndpointBase*> closing_;  // endpoints whose close is still running
  std::int64_t next_close_step_ns_ = 0;     // advance_closing(): not before this
  std::size_t rq_next_ = 0;
  std::atomic<std::uint32_t> recv_total_{0};  // written by the owner, read by describe()
  std::uint32_t srq_posted_ = 0;
  std::uint32_t unacked_events_ = 0;
  std::uint64_t stale_ = 0;
  std::uint64_t completions_ = 0;
  std::uint64_t event_wakeups_ = 0;
  bool drained_ = true;
  std::int64_t batch_ns_ = 0;  // batch_now(): 0 until a traced completion of this batch asked
  bool timer_set_ = false;
  bool moderation_unsupported_ = false;
  core::ErrorLog* errors_ = nullptr;  // control events (receive buffer carving)
  POLLUX_COUNTER_FIELDS(POLLUX_RDMA_GROUP_COUNTERS)
};

}  // namespace pollux::transport::rdma
