#include "transport/rdma/rdma_endpoints.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_format.h"
#include "core/clock.h"
#include "core/frame.h"
#include "transport/rdma/device.h"
#include "transport/rdma/mlx5_dv.h"
#include "transport/rdma/rdma_transport.h"
#include "transport/rdma/verbs_errors.h"
#include "transport/rdma/wire.h"

namespace pollux::transport::rdma {
namespace {

std::uint64_t pow2_at_least(std::uint64_t v) {
  std::uint64_t c = 1;
  while (c < v) c <<= 1;
  return c;
}

// Send-queue entries kept free for control frames (heartbeat, end of stream).
constexpr std::uint32_t kControlReserve = 2;

}  // namespace

// ================================ publisher ======================================================

RdmaTxEndpoint::RdmaTxEndpoint(RdmaTransport& t, CompletionGroup* group, const EndpointSpec& spec,
                               std::uint32_t session_id, std::uint32_t ring_slots, std::uint32_t control_slot)
    : RdmaEndpointBase(t, group),
      lkey_(t.device().lkey()),
      signal_every_(t.cfg().signal_every),
      post_batch_(std::clamp<std::uint32_t>(t.cfg().post_batch, 1, kMaxPost)),
      inline_threshold_(t.cfg().inline_threshold),
      control_slot_(control_slot),
      traced_(spec.send_log) {
  stream_id_ = spec.stream_id;
  session_id_ = session_id;
  max_frame_ = pool_->slot_size();
  inflight_.assign(pow2_at_least(ring_slots + kMaxPost), 0);
  mask_ = inflight_.size() - 1;
  core::CountersFile& f = t.counters();
  const std::string scope = absl::StrFormat("rdma tx stream %u %08x", spec.stream_id, session_id);
  POLLUX_COUNTER_ALLOCATE(POLLUX_RDMA_TX_COUNTERS, *this,
                          [&](std::string_view n) { return f.allocate(scope, n, spec.stream_id); });
  // The sequence the next frame gets (pollux-stat: the publisher's position), set by the timers.
  c_position_ = f.allocate(scope, "position", spec.stream_id, core::CounterKind::kPublisher);
}

RdmaTxEndpoint::~RdmaTxEndpoint() {
  if (!closed_) close_st();
  await_close();
}

void RdmaTxEndpoint::set_status(const std::string& s) {
  std::lock_guard<std::mutex> lock(status_mu_);
  status_ = s;
}

std::string RdmaTxEndpoint::status() const {
  std::lock_guard<std::mutex> lock(status_mu_);
  return status_;
}

void RdmaTxEndpoint::adopt(Conn* c) noexcept {
  if (!can_adopt(*c, closed_, nconns_, kMaxConns, stream_id_, "subscribers")) {
    add_ready(-1);
    group_->retire(c);
    return;
  }
  // A subscriber that joins now gets frames from the next one on.
  c->posted = c->completed = posted_;
  c->unsignalled = 0;
  c->index = nconns_;
  conns_[nconns_++] = c;
}

void RdmaTxEndpoint::kill(Conn* c) noexcept {
  if (!closed_) {
    // Error path (rare): the status string may allocate.
    set_status(absl::StrFormat("lost the connection to %s (%s); reconnecting every %u ms", c->peer,
                               c->error != IBV_WC_SUCCESS ? ibv_wc_status_str(c->error) : "disconnected",
                               t_.cfg().reconnect_ms));
  }
  const std::uint32_t i = c->index;
  conns_[i] = conns_[--nconns_];
  conns_[i]->index = i;
  conns_[nconns_] = nullptr;
  add_ready(-1);
  group_->retire(c);
}

void RdmaTxEndpoint::on_gone(Conn* c) noexcept {
  if (c->state != Conn::State::kLive || c->owner != this) return;
  kill(c);
}

void RdmaTxEndpoint::on_send(Conn* c, std::uint64_t wr_id, ibv_wc_status status) noexcept {
  if (__builtin_expect(status != IBV_WC_SUCCESS, 0)) {
    if (status != IBV_WC_WR_FLUSH_ERR) {
      c_qp_errors_.add();
      t_.counters().error_log().recordf(
          absl::StatusCode::kUnavailable,
          "rdma: stream %u: send to subscriber %s failed: %s (%s); dropping the connection", stream_id_, c->peer,
          ibv_wc_status_str(status), wc_status_hint(status));
    }
    c->error = status;
    kill(c);
    return;
  }
  // In-order completion: a signalled send completes every send posted before it on this QP. The
  // end of stream is posted last, after every frame (posted_ no longer moves once closed).
  std::uint64_t v = wr_id & kWrValueMask;
  if (__builtin_expect(wr_id == kWrEnd, 0)) {
    c->end_acked = true;
    v = posted_;
  }
  const std::uint64_t done = (wr_id & kWrControl) != 0 ? v : v + 1;
  if (done > c->completed) c->completed = done;
  // Traced frames this completion covers (each was signalled, so its own CQE comes at the
  // latest): their local send completion is now, the poll batch's clock read.
  traced_.complete(done, [this] { return group_->batch_now(); });
}

std::uint32_t RdmaTxEndpoint::sq_room(const Conn& c) const noexcept {
  const std::uint64_t used = c.posted - c.completed + kControlReserve;
  return used >= c.sq_depth ? 0 : static_cast<std::uint32_t>(c.sq_depth - used);
}

std::uint32_t RdmaTxEndpoint::post_st(std::span<const TxDesc> frames) noexcept {
  group_->sync();
  if (__builtin_expect(closed_, 0)) return 0;
  std::uint32_t n = static_cast<std::uint32_t>(std::min<std::size_t>(frames.size(), kMaxPost));
  n = std::min<std::uint32_t>(n, static_cast<std::uint32_t>(inflight_.size() - (posted_ - freed_)));
  // Inline mode reaps only when the publisher runs out of slots: poll completions here as well
  // once a send queue is half full, so its room never depends on that. (A poller's endpoint is
  // passive: its poller's source polls the CQ once per cycle, right after this post.)
  if (self_progress_) {
    for (std::uint32_t k = 0; k < nconns_; ++k) {
      if (conns_[k]->posted - conns_[k]->completed >= conns_[k]->sq_depth / 2) {
        (void)group_->progress();
        break;
      }
    }
  }
  for (std::uint32_t k = 0; k < nconns_; ++k) n = std::min(n, sq_room(*conns_[k]));
  if (n == 0) {
    c_back_pressure_.add();
    if (self_progress_) (void)group_->progress();  // completions may free room for the next call
    return 0;
  }
  ibv_send_wr wr[kMaxPost];
  ibv_sge sge[kMaxPost];
  std::uint64_t traced = 0;  // bit i: frame i is traced (always signalled)
  for (std::uint32_t i = 0; i < n; ++i) {
    const TxDesc& d = frames[i];
    std::byte* p = pool_->slot(d.slot);
    auto* h = reinterpret_cast<core::FrameHeader*>(p);
    // The transport owns sessions and sequences (the publisher left them 0).
    h->session_id = session_id_;
    h->sequence = next_seq_++;
    if (__builtin_expect((d.flags & core::kFlagTraced) != 0 && traced_.enabled(), 0)) {
      traced |= std::uint64_t{1} << i;
      // (Nobody connected: the frame is dropped below, no completion will cover it.)
      if (nconns_ > 0) traced_.add(posted_ + i, h->sequence);
    }
    inflight_[(posted_ + i) & mask_] = d.slot;
    sge[i].addr = reinterpret_cast<std::uintptr_t>(p);
    sge[i].length = d.length;
    sge[i].lkey = lkey_;
    wr[i].wr_id = posted_ + i;
    wr[i].sg_list = &sge[i];
    wr[i].num_sge = 1;
    wr[i].opcode = IBV_WR_SEND;
    wr[i].send_flags = 0;
    // Chains of at most post_batch WRs: one ibv_post_send (one doorbell) per chain.
    wr[i].next = (i + 1) % post_batch_ == 0 ? nullptr : &wr[i + 1];
  }
  wr[n - 1].next = nullptr;
  if (__builtin_expect(nconns_ == 0, 0)) {
    // Nobody to send to (RC: every subscriber left since offer() checked): the frames are
    // consumed - their sequence numbers too - and their slots come back on the next reap.
    c_dropped_.add(n);
  }
  const std::uint64_t end = posted_ + n;
  std::uint32_t inlined = 0, signalled = 0;
  for (std::uint32_t k = 0; k < nconns_;) {
    Conn* c = conns_[k];
    const std::uint32_t inl = std::min(c->max_inline, inline_threshold_);
    // One signalled send in signal_every (<= half the queue, checked by the config): a
    // completion is always owed before the queue can fill. The unsignalled tail of a burst
    // completes with the next signalled send (or the end-of-stream frame at close).
    for (std::uint32_t i = 0; i < n; ++i) {
      unsigned flags = sge[i].length <= inl ? IBV_SEND_INLINE : 0;
      if (++c->unsignalled >= signal_every_ || ((traced >> i) & 1) != 0) {
        flags |= IBV_SEND_SIGNALED;
        c->unsignalled = 0;
        ++signalled;
      }
      inlined += (flags & IBV_SEND_INLINE) != 0;
      wr[i].send_flags = flags;
    }
    bool ok;
    if (c->dv != nullptr) {
      mlx5::WqeWriter& w = c->dv->writer();
      ok = true;
      for (std::uint32_t i = 0; i < n && ok; ++i) {
        ok =
            w.send(reinterpret_cast<const void*>(sge[i].addr), sge[i].length, (wr[i].send_flags & IBV_SEND_INLINE) != 0,
                   (wr[i].send_flags & IBV_SEND_SIGNALED) != 0, wr[i].wr_id);
        if (wr[i].next == nullptr) {  // end of a post_batch chain: its doorbell
          w.ring();
          c_doorbells_.add();
        }
      }
    } else {
      ok = true;
      for (std::uint32_t i = 0; i < n && ok; i += post_batch_) {
        ibv_send_wr* bad = nullptr;
        ok = ibv_post_send(c->qp, &wr[i], &bad) == 0;  // one chain, one doorbell
        c_doorbells_.add();
      }
    }
    if (__builtin_expect(!ok, 0)) {
      c_qp_errors_.add();
      t_.counters().error_log().recordf(absl::StatusCode::kUnavailable,
                                        "rdma: stream %u: posting to subscriber %s failed; dropping the connection",
                                        stream_id_, c->peer);
      kill(c);  // swaps another conn into slot k
      continue;
    }
    c->posted = end;
    ++k;
  }
  posted_ = end;
  c_frames_.add(n);
  c_inline_.add(inlined);
  c_signalled_.add(signalled);
  return n;
}

std::uint32_t RdmaTxEndpoint::reap_st(std::span<std::uint32_t> freed) noexcept {
  if (self_progress_) (void)group_->progress();  // a poller's source already polled this cycle
  std::uint64_t floor = posted_;
  for (std::uint32_t k = 0; k < nconns_; ++k) floor = std::min(floor, conns_[k]->completed);
  const std::uint32_t n = static_cast<std::uint32_t>(std::min<std::uint64_t>(floor - freed_, freed.size()));
  for (std::uint32_t i = 0; i < n; ++i) freed[i] = inflight_[(freed_ + i) & mask_];
  freed_ += n;
  return n;
}

void RdmaTxEndpoint::fail_connections_for_test() noexcept {
  for (std::uint32_t k = 0; k < nconns_; ++k) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_ERR;
    (void)ibv_modify_qp(conns_[k]->qp, &a, IBV_QP_STATE);
  }
}

bool RdmaTxEndpoint::post_control(Conn* c, std::uint16_t flags, std::int64_t now_ns) noexcept {
  if (sq_room(*c) + kControlReserve == 0) return false;
  core::FrameHeader h{};
  core::write_frame_header(&h, core::kFrameHeaderSize, flags, stream_id_, session_id_, now_ns);
  h.sequence = next_seq_;  // the next data sequence: anything below it not seen is lost
  const bool inl = c->max_inline >= sizeof h;
  const void* src = &h;
  if (!inl) {
    // Without inline support the bytes must come from registered memory.
    std::memcpy(pool_->slot(control_slot_), &h, sizeof h);
    src = pool_->slot(control_slot_);
  }
  ibv_sge sge{reinterpret_cast<std::uintptr_t>(src), static_cast<std::uint32_t>(sizeof h), lkey_};
  ibv_send_wr wr{};
  wr.wr_id = (flags & core::kFlagEndOfStream) != 0 ? kWrEnd : kWrControl | posted_;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED | (inl ? IBV_SEND_INLINE : 0);
  c->unsignalled = 0;
  bool ok;
  if (c->dv != nullptr) {
    ok = c->dv->writer().send(src, sizeof h, inl, true, wr.wr_id);
    c->dv->writer().ring();
  } else {
    ibv_send_wr* bad = nullptr;
    ok = ibv_post_send(c->qp, &wr, &bad) == 0;
  }
  if (ok) c_heartbeats_.add();
  return ok;
}

int RdmaTxEndpoint::housekeeping_st(std::int64_t now_ns) noexcept {
  group_->sync();
  c_position_.set(next_seq_);
  if (closed_ || nconns_ == 0) return 0;
  // Frames after the last signalled send complete silently, so their slots would wait for
  // the next burst. A publisher that has posted nothing for kIdleTailNs (measured from the
  // housekeeping call that last saw posted_ change) sends one signalled heartbeat per
  // connection with such a tail; its completion frees them.
  if (posted_ != idle_check_posted_) {
    idle_check_posted_ = posted_;
    idle_since_ns_ = now_ns;
    return 0;
  }
  if (now_ns - idle_since_ns_ < kIdleTailNs) return 0;
  int work = 0;
  for (std::uint32_t k = 0; k < nconns_; ++k) {
    Conn* c = conns_[k];
    if (c->unsignalled != 0 && c->completed < c->posted) work += post_control(c, core::kFlagHeartbeat, now_ns) ? 1 : 0;
  }
  idle_check_posted_ = posted_;  // the heartbeats count as posts: the next check starts now
  idle_since_ns_ = now_ns;
  return work;
}

bool RdmaTxEndpoint::try_arm_st() noexcept {
  // Only completions (which free slots) can wake a publisher; nothing to do if none are owed.
  if (posted_ == freed_) return true;
  return group_->try_arm();
}

void RdmaTxEndpoint::disarm_st() noexcept { group_->disarm(); }

void RdmaTxEndpoint::close_st() noexcept {
  if (closed_) return;
  closed_ = true;
  closed_flag_.store(true, std::memory_order_relaxed);
  if (t_.cm() != nullptr) t_.cm()->remove_publisher(this);
  group_->sync();
  traced_.drop();  // the publisher (and its send log) may go while the close lingers
  const std::int64_t now = core::Clock::now_ns();
  linger_deadline_ns_ = now + static_cast<std::int64_t>(t_.cfg().linger_ms) * 1'000'000;
  begin_close(now);
}

bool RdmaTxEndpoint::close_step_st(std::int64_t now_ns, bool give_up) noexcept {
  if (self_progress_) (void)group_->progress();  // inline: nobody else polls the private group
  // End of stream to everyone, then linger (rdma.linger_ms at most) until every connection
  // acknowledged every frame and the end: the subscriber has them all before the disconnect
  // reaches it. A subscriber may be slow to take them (not polling yet, every receive buffer
  // held: the NIC retries on RNR), and an end that did not fit the send queue is posted again.
  bool pending = false;
  for (std::uint32_t k = 0; k < nconns_; ++k) {
    Conn* c = conns_[k];
    if (!c->end_posted) c->end_posted = post_control(c, core::kFlagEndOfStream, now_ns);
    pending |= !c->end_acked;
  }
  if (pending && !give_up && now_ns <= linger_deadline_ns_) return false;
  for (std::uint32_t k = 0; k < nconns_; ++k) {
    const Conn* c = conns_[k];
    if (c->end_acked) continue;
    // Lost: the subscriber sees the publisher die (no end of stream) after the frames it got.
    const std::uint64_t missing = posted_ - c->completed;  // completed <= posted_: frame indices
    c_unacked_at_close_.add(missing);
    t_.counters().error_log().recordf(
        absl::StatusCode::kDeadlineExceeded,
        "rdma: stream %u: closed with %llu frame(s) and the end of stream to subscriber %s not acknowledged after "
        "rdma.linger_ms = %u ms (it was not taking them: not polling, or holding every receive buffer); they are lost",
        stream_id_, static_cast<unsigned long long>(missing), c->peer, t_.cfg().linger_ms);
  }
  while (nconns_ > 0) {
    Conn* c = conns_[--nconns_];
    conns_[nconns_] = nullptr;
    add_ready(-1);
    group_->retire(c);
  }
  return true;
}

std::string RdmaTxEndpoint::describe() const {
  // Any thread: counters and atomics only, never the owner's fields.
  return absl::StrFormat(
      "rdma rc publisher stream %u session %08x: %d connection(s), %u frames posted, max frame %u%s%s", stream_id_,
      session_id_, ready_.load(std::memory_order_relaxed), c_frames_.get(), max_frame_, status().empty() ? "" : "; ",
      status());
}

// ================================ subscriber =====================================================

RdmaRxEndpoint::RdmaRxEndpoint(RdmaTransport& t, CompletionGroup* group, const EndpointSpec& spec)
    : RdmaEndpointBase(t, group) {
  stream_id_ = spec.stream_id;
  max_frame_ = t.pool().slot_size();
  held_.assign(t.pool().slots(), 0);
  closing_.reserve(kMaxConns);
  grow_ready(256);
  core::CountersFile& f = t.counters();
  const std::string scope = absl::StrFormat("rdma rx stream %u", spec.stream_id);
  POLLUX_COUNTER_ALLOCATE(POLLUX_RDMA_RX_COUNTERS, *this,
                          [&](std::string_view n) { return f.allocate(scope, n, spec.stream_id); });
}

RdmaRxEndpoint::~RdmaRxEndpoint() {
  if (!closed_) close_st();
  await_close();
}

void RdmaRxEndpoint::grow_ready(std::uint32_t need) noexcept {
  if (need <= ready_.size()) return;
  // Control event (adoption): re-linearise into a larger ring.
  std::vector<Ready> r(pow2_at_least(need));
  std::uint64_t i = 0;
  for (std::uint64_t k = ready_head_; k != ready_tail_; ++k) r[i++] = ready_[k & ready_mask_];
  ready_.swap(r);
  ready_head_ = 0;
  ready_tail_ = i;
  ready_mask_ = ready_.size() - 1;
}

void RdmaRxEndpoint::adopt(Conn* c) noexcept {
  if (!can_adopt(*c, closed_, nconns_, kMaxConns, stream_id_, "publishers")) {
    group_->retire(c);
    return;
  }
  c->index = nconns_;
  conns_[nconns_++] = c;
  // Every buffer the group owns could land here, plus one end marker per connection.
  grow_ready(group_->recv_buffers() + 2 * kMaxConns + 64);
  live_.fetch_add(1, std::memory_order_relaxed);
}

void RdmaRxEndpoint::on_gone(Conn* c) noexcept {
  // Once per connection: the disconnect event and the QP's error completions may both report it,
  // and a second end marker would outlive the retired Conn.
  if (c->owner != this || c->state != Conn::State::kLive || c->end_queued) return;
  c->end_queued = true;
  closing_.push_back(c);
}

void RdmaRxEndpoint::on_recv(Conn* c, std::uint32_t slot, std::uint32_t byte_len) noexcept {
  // Cannot overflow: the ring holds every receive buffer of the group plus the end markers.
  // Traced frames get the poll batch's clock read (the header's flags are read before the
  // frame is validated in poll_st: a corrupt frame costs at most that clock read).
  std::int64_t ns = 0;
  if (byte_len >= core::kFrameHeaderSize) {
    const auto* h = reinterpret_cast<const core::FrameHeader*>(group_->slot_ptr(slot));
    if (__builtin_expect((h->flags & core::kFlagTraced) != 0, 0)) ns = group_->batch_now();
  }
  ready_[ready_tail_++ & ready_mask_] = Ready{c, slot, byte_len, ns};
}

void RdmaRxEndpoint::push_event(const RxDesc& d) noexcept {
  if (ev_tail_ - ev_head_ == events_.size()) return;  // cannot happen: at most one per session
  events_[ev_tail_++ % events_.size()] = d;
}

int RdmaRxEndpoint::min_rnr_timer_for_test() const noexcept {
  if (nconns_ == 0) return -1;
  ibv_qp_attr a{};
  ibv_qp_init_attr init{};
  if (ibv_query_qp(conns_[0]->qp, &a, IBV_QP_MIN_RNR_TIMER, &init) != 0) return -1;
  return a.min_rnr_timer;
}

void RdmaRxEndpoint::retire_conn(Conn* c) noexcept {
  const std::uint32_t i = c->index;
  if (i < nconns_ && conns_[i] == c) {
    conns_[i] = conns_[--nconns_];
    conns_[i]->index = i;
    conns_[nconns_] = nullptr;
  }
  if (!c->ended) live_.fetch_sub(1, std::memory_order_relaxed);
  c->ended = true;
  group_->retire(c);
}

std::uint32_t RdmaRxEndpoint::poll_st(std::span<RxDesc> out) noexcept {
  if (__builtin_expect(closed_, 0)) return 0;
  // Inline: this endpoint's private group is polled here. A poller's endpoint is passive: the
  // poller's source polled the shared CQ once this cycle and dispatched into ready_.
  if (self_progress_) (void)group_->progress();
  std::uint32_t n = 0;
  // Peers that went away end after everything they delivered: once a poll drained the CQ.
  if (__builtin_expect(!closing_.empty(), 0) && group_->drained()) {
    for (Conn* c : closing_) ready_[ready_tail_++ & ready_mask_] = Ready{c, kEndMarker, 0, 0};
    closing_.clear();
  }
  while (ev_head_ != ev_tail_ && n < out.size()) out[n++] = events_[ev_head_++ % events_.size()];
  // One frame may yield up to three descriptors (new session, gap, message); what does not fit
  // the caller's span waits in events_ and goes out first on the next call, in order.
  auto emit = [&](const RxDesc& d) {
    if (n < out.size()) {
      out[n++] = d;
    } else {
      push_event(d);
    }
  };
  while (ready_head_ != ready_tail_ && n < out.size()) {
    const Ready r = ready_[ready_head_++ & ready_mask_];
    Conn* c = r.conn;
    if (__builtin_expect(r.slot == kEndMarker, 0)) {
      // The publisher may already be back on a new connection of the same session (its old
      // QP failed and it reconnected before we heard of the failure): then the session goes on.
      bool successor = false;
      for (std::uint32_t k = 0; k < nconns_; ++k) {
        successor |= conns_[k] != c && !conns_[k]->ended && conns_[k]->remote_session == c->remote_session;
      }
      if (!c->ended && !successor) {
        RxDesc d{};
        d.kind = RxKind::kEndOfStream;
        d.reason = c->eos_seen ? 0 : 1;  // no end-of-stream frame: the publisher died
        d.session_id = c->remote_session;
        c_ends_.add();
        emit(d);
      }
      retire_conn(c);
      continue;
    }
    const std::byte* p = group_->slot_ptr(r.slot);
    const auto* h = reinterpret_cast<const core::FrameHeader*>(p);
    if (__builtin_expect(core::check_frame(p, r.len) != core::FrameCheck::kOk, 0)) {
      c_malformed_.add();
      group_->recycle(r.slot);
      RxDesc d{};
      d.kind = RxKind::kGap;
      d.gap_count = 1;
      d.reason = kGapMalformed;
      emit(d);
      continue;
    }
    if (__builtin_expect(h->stream_id != stream_id_, 0)) {
      c_foreign_.add();  // a publisher of another stream connected here (cannot happen: checked at connect)
      group_->recycle(r.slot);
      continue;
    }
    // Sequences are tracked per session, not per connection, so when a publisher endpoint
    // reconnects (its QP failed) the frames that died with the old QP show as a gap.
    auto* s = rc_session_;
    if (__builtin_expect(s == nullptr || s->session_id != h->session_id, 0)) {
      bool created;
      s = sessions_.find_or_add(h->session_id, static_cast<std::int64_t>(messages_), &created);
      rc_session_ = s;
    }
    s->last_heard_ns = static_cast<std::int64_t>(messages_);  // LRU order, no clock needed
    if (!s->announced) {
      s->announced = true;
      RxDesc d{};
      d.kind = RxKind::kNewSession;
      d.session_id = h->session_id;
      d.sequence = h->sequence;
      emit(d);
    }
    SequenceTracker* seq = &s->seq;
    SequenceStep step;
    const bool control = (h->flags & (core::kFlagHeartbeat | core::kFlagEndOfStream)) != 0;
    step = control ? seq->on_next(h->sequence) : seq->on_frame(h->sequence);
    if (step.gap_count != 0) {
      c_gaps_.add();
      c_lost_.add(step.gap_count);
      RxDesc d{};
      d.kind = RxKind::kGap;
      d.sequence = step.gap_from;
      d.gap_count = step.gap_count;
      d.reason = kGapLost;
      d.session_id = h->session_id;
      emit(d);
    }
    if (control) {
      const bool eos = (h->flags & core::kFlagEndOfStream) != 0;
      const std::uint32_t session = h->session_id;
      c_heartbeats_.add();
      group_->recycle(r.slot);
      if (eos) {
        c_ends_.add();
        RxDesc d{};
        d.kind = RxKind::kEndOfStream;
        d.reason = 0;
        d.session_id = session;
        emit(d);
        c->eos_seen = true;
        if (!c->ended) live_.fetch_sub(1, std::memory_order_relaxed);
        c->ended = true;
      }
      continue;
    }
    if (step.stale) {
      c_stale_.add();
      group_->recycle(r.slot);
      continue;
    }
    RxDesc d;
    d.frame = h;
    d.token = r.slot;
    d.sequence = h->sequence;
    d.gap_count = 0;
    d.receive_ns = r.ns;  // traced: the receive CQE's poll time; 0 otherwise
    d.ring_ns = 0;
    d.length = h->frame_length;
    d.kind = RxKind::kMessage;
    d.reason = 0;
    d.session_id = h->session_id;
    d.reserved = 0;
    emit(d);
    held_[r.slot] = 1;
    ++messages_;
  }
  if (n == 0) {
    // Inline mode has no timer duty: check liveness now and then from the poll loop.
    if ((++empty_polls_ & 1023) == 0) (void)housekeeping_st(core::Clock::now_ns());
  } else {
    c_messages_.set(messages_);
  }
  return n;
}

void RdmaRxEndpoint::release_st(std::span<const RxDesc> done, bool /*validate*/) noexcept {
  // Receive buffers belong to the subscriber until released: nothing can tear a view.
  for (const RxDesc& d : done) {
    if (d.kind != RxKind::kMessage) continue;
    const auto slot = static_cast<std::uint32_t>(d.token);
    held_[slot] = 0;
    group_->recycle(slot);
  }
}

int RdmaRxEndpoint::housekeeping_st(std::int64_t now_ns) noexcept {
  group_->sync();
  if (closed_) return 0;
  group_->flush_recycled();
  (void)now_ns;
  return 0;
}

bool RdmaRxEndpoint::try_arm_st() noexcept {
  if (ready_head_ != ready_tail_ || ev_head_ != ev_tail_ || !closing_.empty()) return false;
  return group_->try_arm() && ready_head_ == ready_tail_;
}

void RdmaRxEndpoint::disarm_st() noexcept { group_->disarm(); }

void RdmaRxEndpoint::close_st() noexcept {
  if (closed_) return;
  closed_ = true;
  if (t_.cm() != nullptr) t_.cm()->remove_subscriber(this);
  group_->sync();
  // Buffers queued for delivery or still held by the application go back to the group.
  for (; ready_head_ != ready_tail_; ++ready_head_) {
    const Ready& r = ready_[ready_head_ & ready_mask_];
    if (r.slot != kEndMarker) group_->recycle(r.slot);
  }
  for (std::uint32_t s = 0; s < held_.size(); ++s) {
    if (held_[s] != 0) {
      held_[s] = 0;
      group_->recycle(s);
    }
  }
  while (nconns_ > 0) retire_conn(conns_[nconns_ - 1]);
  closing_.clear();
  live_.store(0, std::memory_order_relaxed);
  group_->flush_recycled();
  begin_close(core::Clock::now_ns());
}

std::string RdmaRxEndpoint::describe() const {
  return absl::StrFormat("rdma rc subscriber stream %u: %d live publisher(s), %u messages, %s", stream_id_,
                         live_.load(std::memory_order_relaxed), c_messages_.get(), group_->describe());
}

}  // namespace pollux::transport::rdma
