#include "transport/rdma/ud_endpoints.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/clock.h"
#include "core/frame.h"
#include "core/random_id.h"
#include "transport/rdma/device.h"
#include "transport/rdma/mlx5_dv.h"
#include "transport/rdma/rdma_config.h"
#include "transport/rdma/rdma_transport.h"
#include "transport/rdma/ud_address.h"
#include "transport/rdma/verbs_errors.h"
#include "transport/rdma/wire.h"

namespace pollux::transport::rdma {
namespace {

using reliability::FaultInjector;
using reliability::PeerAddress;

std::int64_t ms(std::uint32_t v) { return static_cast<std::int64_t>(v) * 1'000'000; }

// A service that stays due (a repair waiting for rate tokens or send-queue room) runs at most
// this often from post_st/poll_st.
constexpr std::int64_t kMinServiceNs = 50'000;
using reliability::kEndResendNs;
// A closing publisher's last sends get this long to complete before its QP goes, a closing
// subscriber's "leaving" messages kLeaveFlushNs.
constexpr std::int64_t kCloseFlushNs = 300'000'000;
constexpr std::int64_t kLeaveFlushNs = 100'000'000;

}  // namespace

// ================================ publisher ======================================================

UdTxEndpoint::UdTxEndpoint(RdmaTransport& t, CompletionGroup* group, const EndpointSpec& spec, std::uint32_t session_id)
    : RdmaEndpointBase(t, group),
      lkey_(t.device().lkey()),
      signal_every_(t.cfg().signal_every),
      post_batch_(std::clamp<std::uint32_t>(t.cfg().post_batch, 1, kMaxPost)),
      inline_threshold_(t.cfg().inline_threshold),
      linger_ns_(ms(t.cfg().linger_ms)),
      traced_(spec.send_log) {
  stream_id_ = spec.stream_id;
  session_id_ = session_id;
}

UdTxEndpoint::~UdTxEndpoint() {
  if (!closed_) close_st();
  await_close();
}

absl::Status UdTxEndpoint::init(core::SlotRange slots, std::uint32_t path_mtu, Conn* qp) {
  const rdma::RdmaConfig& cfg = t_.cfg();
  const std::uint32_t slot_size = pool_->slot_size();
  const std::uint32_t log_slots = static_cast<std::uint32_t>((cfg.retransmit_buffer + slot_size - 1) / slot_size);
  if (slot_size < kGrhBytes + reliability::kMaxControlLength) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: pool.slot_size = %u: a UD multicast publisher receives its subscribers' NAKs (up to %u bytes behind a "
        "%u-byte GRH) in pool slots; raise pool.slot_size to at least %u",
        t_.config().source, slot_size, reliability::kMaxControlLength, kGrhBytes,
        kGrhBytes + reliability::kMaxControlLength));
  }
  // A datagram is a run of frames up to the path MTU; the subscriber's receive buffer (a pool
  // slot of the same size on both sides, as for RC) must also hold the GRH.
  const std::uint32_t datagram = std::min(path_mtu, slot_size - kGrhBytes) & ~(reliability::kWireAlignment - 1);
  reliability::SenderOptions so;
  so.log.capacity = cfg.retransmit_buffer;
  so.log.max_datagram = datagram;
  so.log.stream_id = stream_id_;
  so.log.session_id = session_id_;
  so.log.memory = pool_->slot(slots.first);  // registered: sends read straight from the log
  so.heartbeat_interval_ns = ms(cfg.heartbeat_ms);
  so.tail_heartbeat_ns = std::min<std::int64_t>(1'000'000, so.heartbeat_interval_ns);
  so.receiver_timeout_ns = ms(cfg.liveness_timeout_ms);
  so.retransmit_linger_ns = 1'000'000;
  so.max_datagrams_per_call = kMaxPost;
  so.nak_max_range = cfg.nak_max_range;
  so.repair_rate = cfg.repair_rate;
  so.repair_burst = cfg.repair_burst;
  so.repair_rate_total = cfg.repair_rate_total;
  so.repair_burst_total = 4 * cfg.repair_burst;
  if (absl::Status s = sender_.init(so); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(t_.config().source, ": rdma.retransmit_buffer: ", s.message()));
  }
  max_frame_ = sender_.log().max_frame();
  ctl_first_ = slots.first + log_slots;
  hb_slot_ = pool_->slot(ctl_first_ + kControlRecvBuffers);
  done_cap_ = pool_->slots();
  done_.reset(new std::uint32_t[done_cap_]);
  // The QP's send queue, and the control receive buffers (posted here, before the owner thread
  // knows the QP: the announcement orders these posts before its first use).
  sq_depth_ = qp->sq_depth;
  max_inline_ = std::min(qp->max_inline, inline_threshold_);
  pins_.init(sq_depth_);
  for (std::uint32_t i = 0; i < kControlRecvBuffers; ++i) {
    ibv_sge sge{reinterpret_cast<std::uintptr_t>(pool_->slot(ctl_first_ + i)), slot_size, lkey_};
    ibv_recv_wr wr{};
    wr.wr_id = kWrRecv | kWrControl | (ctl_first_ + i);
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    if (ibv_post_recv(qp->qp, &wr, &bad) != 0) {
      return absl::InternalError(absl::StrFormat("rdma: posting the NAK receive buffers of a UD publisher on %s: %s",
                                                 t_.device().name(), std::strerror(errno)));
    }
    ++ctl_posted_;
  }
  core::CountersFile& f = t_.counters();
  const std::string scope = absl::StrFormat("rdma tx stream %u %08x", stream_id_, session_id_);
  POLLUX_COUNTER_ALLOCATE(POLLUX_UD_TX_COUNTERS, c_,
                          [&](std::string_view n) { return f.allocate(scope, n, stream_id_); });
  c_.proto.allocate(f, scope, stream_id_);
  return absl::OkStatus();
}

void UdTxEndpoint::adopt(Conn* c) noexcept {
  if (closed_ || qp_ != nullptr) {
    group_->retire(c);
    return;
  }
  qp_ = c;
  // Announce the session at once: subscribers join on this heartbeat and report back, which
  // connects the publisher.
  next_service_ns_ = 0;
  (void)service(core::Clock::now_ns());
}

void UdTxEndpoint::on_gone(Conn* c) noexcept {
  if (c != qp_ || c->state != Conn::State::kLive) return;
  broken_ = true;
  connected_.store(false, std::memory_order_relaxed);
}

std::uint32_t UdTxEndpoint::send_datagrams(std::span<const Datagram> d) noexcept {
  if (__builtin_expect(qp_ == nullptr || broken_, 0)) {
    // Nothing can go out (the QP failed): consume, so the sender does not spin on it.
    return static_cast<std::uint32_t>(d.size());
  }
  const std::uint32_t k = std::min({static_cast<std::uint32_t>(d.size()), sq_room(), kMaxPost});
  if (k == 0) {
    ++sq_full_;
    return 0;
  }
  const reliability::SenderLog& log = sender_.log();
  const std::uint64_t first_unsent = log.sent();  // first transmissions start here; repairs below
  ibv_send_wr wr[kMaxPost];
  ibv_sge sge[kMaxPost];
  std::uint32_t n = 0, inlined = 0, signalled = 0;
  bool repair = false;
  for (; n < k; ++n) {
    const std::byte* p = d[n].data;
    const std::uint32_t len = d[n].bytes;
    const bool in_log = log.contains(p);
    const bool inl = len <= max_inline_;
    bool signal = ++unsignalled_ >= signal_every_;
    if (!in_log) {
      // A heartbeat (the sender's own buffer, not registered): inline, or a copy in the
      // registered heartbeat slot, which one heartbeat uses at a time. Always signalled: it
      // completes the unsignalled sends before it, so an idle publisher's pins are released.
      signal = true;
      if (!inl) {
        if (hb_busy_) break;
        std::memcpy(hb_slot_, p, len);
        p = hb_slot_;
        hb_busy_ = true;
        hb_wr_ = wr_posted_ + n;
      }
    } else {
      const auto* h = reinterpret_cast<const core::FrameHeader*>(p);
      repair |= h->sequence < first_unsent;
      if (__builtin_expect(traced_.enabled(), 0) && h->sequence >= first_unsent) {
        // Traced stream: a traced frame's first transmission is always signalled, and its send
        // completion recorded (Publisher::send_completion_ns).
        reliability::FrameCursor cur(p, len);
        for (const core::FrameHeader* f = cur.next(); f != nullptr; f = cur.next()) {
          if ((f->flags & core::kFlagTraced) == 0) continue;
          signal = true;
          traced_.add(wr_posted_ + n, f->sequence);
        }
      }
      // A send that is not inline reads the log until it completes: pin those bytes.
      if (!inl) pins_.post(wr_posted_ + n, log.position_of(p));
    }
    if (signal) unsignalled_ = 0;
    sge[n] = {reinterpret_cast<std::uintptr_t>(p), len, lkey_};
    wr[n].wr_id = wr_posted_ + n;
    wr[n].sg_list = &sge[n];
    wr[n].num_sge = 1;
    wr[n].opcode = IBV_WR_SEND;
    wr[n].send_flags = (inl ? unsigned{IBV_SEND_INLINE} : 0u) | (signal ? unsigned{IBV_SEND_SIGNALED} : 0u);
    wr[n].wr.ud.ah = qp_->ah;
    wr[n].wr.ud.remote_qpn = kMulticastQpn;
    wr[n].wr.ud.remote_qkey = kUdQkey;
    wr[n].next = (n + 1) % post_batch_ == 0 ? nullptr : &wr[n + 1];
    inlined += inl;
  }
  if (n == 0) return 0;
  // A repair completes promptly (its pin holds back the log's oldest bytes): signal its end.
  if (repair && (wr[n - 1].send_flags & IBV_SEND_SIGNALED) == 0) {
    wr[n - 1].send_flags |= IBV_SEND_SIGNALED;
    unsignalled_ = 0;
  }
  wr[n - 1].next = nullptr;
  for (std::uint32_t i = 0; i < n; ++i) signalled += (wr[i].send_flags & IBV_SEND_SIGNALED) != 0;
  std::uint32_t posted = n;
  if (qp_->dv != nullptr) {
    mlx5::WqeWriter& w = qp_->dv->writer();
    for (std::uint32_t i = 0; i < n; ++i) {
      if (!w.send(reinterpret_cast<const void*>(sge[i].addr), sge[i].length, (wr[i].send_flags & IBV_SEND_INLINE) != 0,
                  (wr[i].send_flags & IBV_SEND_SIGNALED) != 0, wr[i].wr_id)) {
        posted = i;
        break;
      }
      if (wr[i].next == nullptr) {
        w.ring();
        c_.post_calls.add();
      }
    }
    if (posted < n && posted > 0) {
      w.ring();
      c_.post_calls.add();
    }
  } else {
    for (std::uint32_t i = 0; i < n; i += post_batch_) {
      ibv_send_wr* bad = nullptr;
      c_.post_calls.add();
      if (ibv_post_send(qp_->qp, &wr[i], &bad) != 0) {
        posted = i;
        for (ibv_send_wr* w = &wr[i]; w != nullptr && w != bad; w = w->next) ++posted;
        break;
      }
    }
  }
  if (__builtin_expect(posted < n, 0)) {
    // The QP refused (it failed): nothing more will go out. Subscribers see the publisher die.
    ++qp_errors_;
    t_.counters().error_log().recordf(
        absl::StatusCode::kUnavailable,
        "rdma: stream %u: posting to multicast group %s failed; the publisher stops sending", stream_id_, qp_->peer);
    broken_ = true;
    connected_.store(false, std::memory_order_relaxed);
    return static_cast<std::uint32_t>(d.size());
  }
  wr_posted_ += n;
  c_.inline_sends.add(inlined);
  c_.signalled.add(signalled);
  sender_.set_pinned(pins_.floor());
  return n;
}

void UdTxEndpoint::on_send(Conn* c, std::uint64_t wr_id, ibv_wc_status status) noexcept {
  if (c != qp_) return;
  if (__builtin_expect(status != IBV_WC_SUCCESS, 0)) {
    if (status != IBV_WC_WR_FLUSH_ERR && !broken_) {
      ++qp_errors_;
      t_.counters().error_log().recordf(
          absl::StatusCode::kUnavailable,
          "rdma: stream %u: send to multicast group %s failed: %s (%s); the publisher stops "
          "sending",
          stream_id_, c->peer, ibv_wc_status_str(status), wc_status_hint(status));
    }
    broken_ = true;
    connected_.store(false, std::memory_order_relaxed);
  }
  // In-order completion: a signalled send completes every send posted before it.
  const std::uint64_t done = (wr_id & kWrValueMask) + 1;
  if (done <= wr_done_) return;
  wr_done_ = done;
  pins_.complete(done);
  sender_.set_pinned(pins_.floor());
  if (hb_busy_ && hb_wr_ < done) hb_busy_ = false;
  traced_.complete(done, [this] { return group_->batch_now(); });
}

void UdTxEndpoint::on_control(Conn* c, std::uint32_t slot, std::uint32_t byte_len, ibv_wc_status status) noexcept {
  if (c != qp_) return;
  --ctl_posted_;
  if (__builtin_expect(status != IBV_WC_SUCCESS, 0)) {
    // Flushed: the QP is going away. Anything else (a datagram larger than the buffer): drop it.
    if (status != IBV_WC_WR_FLUSH_ERR && !broken_) repost(slot);
    return;
  }
  ++control_;
  // The message follows the GRH (8-aligned: slots are 64-aligned). Its source is not checked:
  // a status/NAK names its subscriber by receiver_id, as over UDP (docs/PROTOCOL.md section 9).
  if (byte_len >= kGrhBytes) {
    sender_.on_control(pool_->slot(slot) + kGrhBytes, byte_len - kGrhBytes, group_->batch_now());
  } else {
    sender_.on_control(pool_->slot(slot), 0, group_->batch_now());  // counted as malformed
  }
  next_service_ns_ = 0;  // repairs, a new subscriber: served at the next post or housekeeping
  repost(slot);
}

void UdTxEndpoint::repost(std::uint32_t slot) noexcept {
  ibv_sge sge{reinterpret_cast<std::uintptr_t>(pool_->slot(slot)), pool_->slot_size(), lkey_};
  ibv_recv_wr wr{};
  wr.wr_id = kWrRecv | kWrControl | slot;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  if (ibv_post_recv(qp_->qp, &wr, &bad) == 0) ++ctl_posted_;
}

std::uint32_t UdTxEndpoint::post_st(std::span<const TxDesc> frames) noexcept {
  group_->sync();
  if (__builtin_expect(closed_, 0)) return 0;
  // Inline mode: this thread polls the group. Completions free send-queue room (and pins).
  if (self_progress_ && wr_posted_ - wr_done_ >= sq_depth_ / 2) (void)group_->progress();
  std::uint32_t n = 0;
  for (const TxDesc& d : frames) {
    if (__builtin_expect(done_n_ == done_cap_, 0)) break;
    if (__builtin_expect(d.length > max_frame_ || d.length < core::kFrameHeaderSize, 0)) {
      ++oversized_;  // cannot be one datagram (Publisher::max_payload() prevents it): dropped
      done_[done_n_++] = d.slot;
      ++n;
      continue;
    }
    // Copied into the retransmit buffer: the slot is free again at once.
    if (!sender_.append(pool_->slot(d.slot), d.length)) {
      ++log_full_;  // full of frames never sent (or pinned): back-pressure
      break;
    }
    done_[done_n_++] = d.slot;
    ++n;
  }
  frames_ += n;
  c_.frames.set(frames_);
  const std::int64_t now = core::Clock::now_ns();
  (void)sender_.flush(*this, now);
  if (__builtin_expect(now >= next_service_ns_, 0)) (void)service(now);
  return n;
}

std::uint32_t UdTxEndpoint::reap_st(std::span<std::uint32_t> freed) noexcept {
  if (self_progress_) (void)group_->progress();
  const std::uint32_t n = std::min<std::uint32_t>(done_n_, static_cast<std::uint32_t>(freed.size()));
  done_n_ -= n;
  std::memcpy(freed.data(), done_.get() + done_n_, n * sizeof(std::uint32_t));
  return n;
}

int UdTxEndpoint::service(std::int64_t now_ns) noexcept {
  const int work = sender_.service(*this, now_ns);
  next_service_ns_ = std::max(sender_.next_deadline(now_ns), now_ns + kMinServiceNs);
  connected_.store(!broken_ && sender_.connected(), std::memory_order_relaxed);
  publish_counters();
  return work;
}

int UdTxEndpoint::housekeeping_st(std::int64_t now_ns) noexcept {
  group_->sync();
  if (closed_ || qp_ == nullptr) return 0;
  if (self_progress_) (void)group_->progress();  // inline: NAKs arrive through the CQ
  if (now_ns < next_service_ns_) return 0;
  return service(now_ns);
}

bool UdTxEndpoint::try_arm_st() noexcept {
  if (qp_ != nullptr && (sender_.log().has_unsent() || sender_.repairs_pending())) return false;
  return group_->try_arm();  // arms its timer for the earliest UD deadline (ours included)
}

void UdTxEndpoint::close_st() noexcept {
  if (closed_) return;
  closed_ = true;
  group_->sync();
  connected_.store(false, std::memory_order_relaxed);
  traced_.drop();  // the publisher (and its send log) may go while the close lingers
  const std::int64_t now = core::Clock::now_ns();
  if (qp_ != nullptr) {
    (void)sender_.service(*this, now);
    sender_.send_end_of_stream(*this, now);
    // Linger: serve NAKs until every subscriber we know of confirmed the end (or the time is
    // up), so a publisher that closes right after its last offer() does not strand its tail.
    // The CQ poll dispatches the NAKs (on_control) and frees send-queue room.
    lingering_ = !broken_ && linger_ns_ > 0 && sender_.receivers() > 0 && !sender_.all_caught_up();
    linger_until_ns_ = now + linger_ns_;
    last_end_ns_ = now;
    flush_until_ns_ = now + kCloseFlushNs;
  }
  begin_close(now);
}

bool UdTxEndpoint::close_step_st(std::int64_t now_ns, bool give_up) noexcept {
  if (qp_ == nullptr) return true;
  if (self_progress_) (void)group_->progress();  // inline: nobody else polls the private group
  if (lingering_) {
    if (!give_up && now_ns < linger_until_ns_ && !sender_.all_caught_up() && !broken_) {
      (void)sender_.service(*this, now_ns);
      if (now_ns - last_end_ns_ >= kEndResendNs) {
        sender_.send_end_of_stream(*this, now_ns);
        last_end_ns_ = now_ns;
      }
      return false;
    }
    sender_.send_end_of_stream(*this, now_ns);
    lingering_ = false;
    flush_until_ns_ = now_ns + kCloseFlushNs;
  }
  // Every send completed before the QP goes (the last heartbeat is signalled), bounded.
  if (!give_up && wr_done_ < wr_posted_ && !broken_ && now_ns < flush_until_ns_) return false;
  publish_counters();
  Conn* c = qp_;
  qp_ = nullptr;
  group_->retire(c);
  return true;
}

void UdTxEndpoint::publish_counters() noexcept {
  c_.proto.publish(sender_);
  POLLUX_COUNTER_PUBLISH(POLLUX_UD_TX_COUNTERS, c_);
}

std::string UdTxEndpoint::describe() const {
  // Any thread: counters and atomics only, never the owner's fields.
  return absl::StrFormat(
      "rdma ud_mcast publisher stream %u session %08x: %s, max frame %u, retransmit buffer %u KiB; %u frames, %u "
      "datagrams (%u heartbeats), %u subscriber(s), %u NAKs (%u suppressed, %u unavailable), %u frames repaired",
      stream_id_, session_id_, connected() ? "connected" : "no subscriber heard", max_frame_,
      t_.cfg().retransmit_buffer >> 10, c_.frames.get(), c_.proto.datagrams.get(), c_.proto.heartbeats.get(),
      c_.proto.receivers.get(), c_.proto.naks.get(), c_.proto.naks_suppressed.get(), c_.proto.naks_unavailable.get(),
      c_.proto.retransmit_frames.get());
}

// ================================ subscriber =====================================================

UdRxEndpoint::UdRxEndpoint(RdmaTransport& t, CompletionGroup* group, const EndpointSpec& spec)
    : RdmaEndpointBase(t, group), traced_stream_(spec.stream != nullptr && spec.stream->trace) {
  stream_id_ = spec.stream_id;
}

UdRxEndpoint::~UdRxEndpoint() {
  if (!closed_) close_st();
  await_close();
}

absl::Status UdRxEndpoint::init(core::SlotRange ctl) {
  const rdma::RdmaConfig& cfg = t_.cfg();
  const reliability::ReceiverOptions ro =
      reliability::receiver_options(cfg, stream_id_, ms(cfg.heartbeat_ms), ms(cfg.liveness_timeout_ms));
  if (absl::Status s = receiver_.init(ro); !s.ok()) {
    return absl::ResourceExhaustedError(
        absl::StrCat(t_.config().source, ": rdma.reorder_window / rdma.max_sessions: ", s.message()));
  }
  faults_ = FaultInjector(
      reliability::FaultOptions{cfg.fault_loss, cfg.fault_duplicate, cfg.fault_reorder, 8, cfg.fault_seed});
  ctl_first_ = ctl.first;
  const std::uint32_t slots = pool_->slots();
  refs_.assign(slots, 0);
  len_.assign(slots, 0);
  src_qp_.assign(slots, 0);
  if (traced_stream_) rx_ns_.assign(slots, 0);
  ready_.resize(256);
  ready_mask_ = ready_.size() - 1;
  core::CountersFile& f = t_.counters();
  const std::string scope = absl::StrFormat("rdma rx stream %u", stream_id_);
  POLLUX_COUNTER_ALLOCATE(POLLUX_UD_RX_COUNTERS, c_,
                          [&](std::string_view n) { return f.allocate(scope, n, stream_id_); });
  c_.proto.allocate(f, scope, stream_id_);
  return absl::OkStatus();
}

void UdRxEndpoint::set_multicast(Conn* qp, const ibv_gid& mgid, int igmp_socket) noexcept {
  (void)qp;
  mgid_ = mgid;
  igmp_fd_ = igmp_socket;
}

void UdRxEndpoint::adopt(Conn* c) noexcept {
  if (closed_ || qp_ != nullptr) {
    group_->retire(c);
    return;
  }
  qp_ = c;
  // Control event: a ring that holds every receive buffer the group owns (any may land here).
  const std::uint64_t need = group_->recv_buffers() + 64;
  if (need > ready_.size()) {
    std::uint64_t cap = ready_.size();
    while (cap < need) cap <<= 1;
    std::vector<Ready> r(cap);
    std::uint64_t i = 0;
    for (std::uint64_t k = ready_head_; k != ready_tail_; ++k) r[i++] = ready_[k & ready_mask_];
    ready_.swap(r);
    ready_head_ = 0;
    ready_tail_ = i;
    ready_mask_ = cap - 1;
  }
}

void UdRxEndpoint::on_gone(Conn* c) noexcept {
  // The QP failed (device error): nothing more arrives. Sessions end by their liveness timeout.
  if (c != qp_) return;
  ++control_errors_;
}

void UdRxEndpoint::on_recv(Conn* c, std::uint32_t slot, std::uint32_t byte_len, std::uint32_t src_qp) noexcept {
  (void)c;
  if (__builtin_expect(ready_tail_ - ready_head_ > ready_mask_, 0)) {
    ++overflow_;  // cannot happen: the ring holds every buffer of the group
    group_->recycle(slot);
    return;
  }
  // Traced streams: the receive CQE's poll time (one clock read per poll batch).
  ready_[ready_tail_++ & ready_mask_] = Ready{slot, byte_len, src_qp, 0, traced_stream_ ? group_->batch_now() : 0};
}

void UdRxEndpoint::on_send(Conn* c, std::uint64_t wr_id, ibv_wc_status status) noexcept {
  if (c != qp_) return;
  if (status != IBV_WC_SUCCESS && status != IBV_WC_WR_FLUSH_ERR) ++control_errors_;
  const std::uint64_t done = (wr_id & kWrValueMask) + 1;  // every control send is signalled
  if (done > ctl_done_) ctl_done_ = done;
}

void UdRxEndpoint::process(std::uint32_t slot, int times, std::int64_t now_ns) noexcept {
  const std::byte* p = pool_->slot(slot);
  PeerAddress from;
  std::uint32_t stored = 0;
  if (__builtin_expect(len_[slot] < kGrhBytes || !ud_source(p, src_qp_[slot], &from), 0)) {
    ++malformed_;  // no room for the GRH, or a network header no device writes
  } else {
    for (int i = 0; i < times; ++i) {
      stored += receiver_.on_datagram(p + kGrhBytes, len_[slot] - kGrhBytes, from, slot, now_ns);
    }
  }
  refs_[slot] += stored;
  if (refs_[slot] == 0) group_->recycle(slot);  // heartbeats, duplicates, other streams: nothing kept
}

void UdRxEndpoint::admit(std::uint32_t slot, std::int64_t now_ns) noexcept {
  if (__builtin_expect(!faults_.enabled(), 1)) {
    process(slot, 1, now_ns);
    return;
  }
  faults_.admit(
      slot, [&](std::uint32_t t, int times) { process(t, times, now_ns); },
      [&](std::uint32_t t) { group_->recycle(t); });
}

void UdRxEndpoint::ingest(std::int64_t now_ns) noexcept {
  // Deliverable frames are waiting for the application: take no more until it drained some
  // (frames beyond the window would be dropped, and NAKed again). Frames held behind a gap do
  // not count: the repair must still get in.
  if (receiver_.held() > receiver_.window() / 2 && receiver_.ready()) return;
  std::uint32_t budget = 256;  // bounded work per call
  while (ready_head_ != ready_tail_ && budget-- > 0) {
    const Ready r = ready_[ready_head_++ & ready_mask_];
    len_[r.slot] = r.len;
    src_qp_[r.slot] = r.src_qp;
    if (traced_stream_) rx_ns_[r.slot] = r.ns;
    last_rx_ns_ = now_ns;
    admit(r.slot, now_ns);
  }
  // Everything the CQ held when it was last polled has been read: an end of stream may be
  // believed once nothing contradicted it for long enough (ReliableReceiver::drained).
  if (ready_head_ == ready_tail_ && group_->drained()) receiver_.drained(now_ns);
}

void UdRxEndpoint::stamp_traced(RxDesc* out, std::uint32_t n) const noexcept {
  for (std::uint32_t i = 0; i < n; ++i) {
    RxDesc& d = out[i];
    if (d.kind == RxKind::kMessage && (d.frame->flags & core::kFlagTraced)) d.receive_ns = rx_ns_[d.token];
  }
}

std::uint32_t UdRxEndpoint::poll_st(std::span<RxDesc> out) noexcept {
  if (__builtin_expect(closed_, 0)) return 0;
  // Inline: this endpoint's private group is polled here. A poller's endpoint is passive: the
  // poller's source polled the shared CQ once this cycle and dispatched into ready_.
  if (self_progress_) (void)group_->progress();
  const std::uint32_t max = static_cast<std::uint32_t>(out.size());
  const std::int64_t now = core::Clock::now_ns();  // once per call
  std::uint32_t n = receiver_.poll(out.data(), max);
  if (n < max && ready_head_ != ready_tail_) {
    ingest(now);
    n += receiver_.poll(out.data() + n, max - n);
  } else if (ready_head_ == ready_tail_ && group_->drained()) {
    receiver_.drained(now);
  }
  std::uint32_t msgs = 0;
  for (std::uint32_t i = 0; i < n; ++i) msgs += out[i].kind == RxKind::kMessage;
  if (msgs != 0) {
    messages_ += msgs;
    c_.messages.set(messages_);
    if (traced_stream_) stamp_traced(out.data(), n);
  }
  // What the datagrams just read (a gap to NAK, a new session or an end to confirm) or the poll
  // made due: service() recomputes the rest.
  next_service_ns_ = std::min(next_service_ns_, receiver_.take_new_deadline());
  if (__builtin_expect(now >= next_service_ns_, 0)) (void)service(now);
  return n;
}

void UdRxEndpoint::release_st(std::span<const RxDesc> done, bool /*validate*/) noexcept {
  // Receive buffers are ours until released: views cannot be overwritten, nothing to validate.
  for (const RxDesc& d : done) {
    if (d.kind != RxKind::kMessage) continue;
    const auto slot = static_cast<std::uint32_t>(d.token);
    if (--refs_[slot] == 0) group_->recycle(slot);
  }
}

void UdRxEndpoint::evict(std::int64_t now_ns) noexcept {
  // Receive buffers are running out and nothing is deliverable: frames are held behind a gap
  // whose repair now has nowhere to land. Give back the datagrams with the highest sequences
  // (they are NAKed again later) until a batch of buffers is free. A scan of the pool's slots:
  // this happens only under that pressure, never per message.
  const std::uint32_t target = std::max<std::uint32_t>(t_.cfg().recv_batch, group_->recv_buffers() / 8);
  std::uint32_t freed = 0;
  for (int round = 0; round < 256 && freed < target; ++round) {
    std::uint32_t best = UINT32_MAX;
    std::uint64_t best_seq = 0;
    for (std::uint32_t s = 0; s < refs_.size(); ++s) {
      if (refs_[s] == 0) continue;
      const auto* f = reinterpret_cast<const core::FrameHeader*>(pool_->slot(s) + kGrhBytes);
      if (f->sequence >= best_seq) {
        best_seq = f->sequence;
        best = s;
      }
    }
    if (best == UINT32_MAX) return;
    reliability::FrameCursor cur(pool_->slot(best) + kGrhBytes, len_[best] - kGrhBytes);
    for (const core::FrameHeader* f = cur.next(); f != nullptr; f = cur.next()) {
      if (f->flags & core::kFlagHeartbeat) continue;
      if (receiver_.forget(f->session_id, f->sequence, f, now_ns)) --refs_[best];
    }
    if (refs_[best] != 0) return;  // frames of it are with the application: wait for releases
    group_->recycle(best);
    ++evictions_;
    ++freed;
  }
}

int UdRxEndpoint::service(std::int64_t now_ns) noexcept {
  int work = receiver_.service(now_ns, *this);
  work += static_cast<int>(
      faults_.flush_if_idle(now_ns - last_rx_ns_, [&](std::uint32_t t, int times) { process(t, times, now_ns); }));
  // Receive buffers nearly gone while frames wait behind a gap: make room for the repair.
  const std::uint32_t posted = group_->uses_srq() ? group_->srq_posted() : (qp_ != nullptr ? qp_->rq_posted : 0);
  if (posted < std::max<std::uint32_t>(t_.cfg().recv_batch, group_->recv_buffers() / 16) && receiver_.held() > 0 &&
      !receiver_.ready() && ready_head_ == ready_tail_) {
    evict(now_ns);
    group_->flush_recycled();
  }
  next_service_ns_ = std::min(receiver_.next_deadline(), now_ns + 1'000'000);
  if (faults_.delayed() > 0) next_service_ns_ = std::min(next_service_ns_, now_ns + 1'000'000);
  next_service_ns_ = std::max(next_service_ns_, now_ns + kMinServiceNs);
  connected_.store(receiver_.connected(), std::memory_order_relaxed);
  publish_counters();
  return work;
}

int UdRxEndpoint::housekeeping_st(std::int64_t now_ns) noexcept {
  group_->sync();
  if (closed_) return 0;
  group_->flush_recycled();
  if (now_ns < next_service_ns_) return 0;
  return service(now_ns);
}

int UdRxEndpoint::duty_st(std::int64_t now_ns) noexcept {
  if (closed_ || !self_progress_) return housekeeping_st(now_ns);
  int work = group_->progress();
  if (ready_head_ != ready_tail_) {
    ingest(now_ns);
    ++work;
  }
  next_service_ns_ = std::min(next_service_ns_, receiver_.take_new_deadline());
  return work + housekeeping_st(now_ns);
}

bool UdRxEndpoint::try_arm_st() noexcept {
  if (has_queued()) return false;
  return group_->try_arm() && ready_head_ == ready_tail_;
}

ibv_ah* UdRxEndpoint::address_handle(const PeerAddress& to) noexcept {
  const std::uint8_t* gid = ud_peer_gid(to);
  for (std::uint32_t i = 0; i < nahs_; ++i) {
    if (std::memcmp(ahs_[i].gid, gid, 16) == 0) return ahs_[i].ah;
  }
  // A publisher host not talked to before: a control event (ibv_create_ah resolves the
  // address, which may take the kernel a neighbour lookup), once per host.
  std::uint32_t i = nahs_;
  if (i == kMaxAddressHandles) {
    // Full: replace one no send in flight uses.
    for (i = 0; i < kMaxAddressHandles && ahs_[i].last_wr >= ctl_done_; ++i) {
    }
    if (i == kMaxAddressHandles) return nullptr;
    (void)ibv_destroy_ah(ahs_[i].ah);
  } else {
    ++nahs_;
  }
  ibv_ah_attr a{};
  a.is_global = 1;
  a.port_num = t_.device().port();
  std::memcpy(a.grh.dgid.raw, gid, 16);
  a.grh.sgid_index = static_cast<std::uint8_t>(t_.device().gid_index());
  a.grh.hop_limit = 64;
  ibv_ah* ah = ibv_create_ah(t_.device().pd(), &a);
  if (ah == nullptr) {
    if (i == nahs_ - 1)
      --nahs_;
    else
      ahs_[i] = ahs_[--nahs_];
    return nullptr;
  }
  std::memcpy(ahs_[i].gid, gid, 16);
  ahs_[i].ah = ah;
  ahs_[i].last_wr = 0;
  return ah;
}

void UdRxEndpoint::send_control(const PeerAddress& to, const std::byte* msg, std::uint32_t len) noexcept {
  // Best effort, as over UDP: a lost NAK is retried by its timer, status messages are periodic.
  if (qp_ == nullptr || to.length != kUdPeerLength || len > pool_->slot_size()) {
    ++control_errors_;
    return;
  }
  if (ctl_posted_ - ctl_done_ >= kControlSendSlots || ctl_posted_ - ctl_done_ >= qp_->sq_depth) {
    ++control_dropped_;  // every buffer still in flight
    return;
  }
  ibv_ah* ah = address_handle(to);
  if (ah == nullptr) {
    ++control_errors_;
    return;
  }
  for (std::uint32_t i = 0; i < nahs_; ++i) {
    if (ahs_[i].ah == ah) ahs_[i].last_wr = ctl_posted_;
  }
  std::byte* buf = pool_->slot(ctl_first_ + static_cast<std::uint32_t>(ctl_posted_ % kControlSendSlots));
  std::memcpy(buf, msg, len);
  ibv_sge sge{reinterpret_cast<std::uintptr_t>(buf), len, t_.device().lkey()};
  ibv_send_wr wr{};
  wr.wr_id = kWrControl | ctl_posted_;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = unsigned{IBV_SEND_SIGNALED} | (len <= qp_->max_inline ? unsigned{IBV_SEND_INLINE} : 0u);
  wr.wr.ud.ah = ah;
  wr.wr.ud.remote_qpn = ud_peer_qpn(to);
  wr.wr.ud.remote_qkey = kUdQkey;
  ibv_send_wr* bad = nullptr;
  if (ibv_post_send(qp_->qp, &wr, &bad) != 0) {
    ++control_errors_;
    return;
  }
  ++ctl_posted_;
}

void UdRxEndpoint::close_st() noexcept {
  if (closed_) return;
  closed_ = true;
  group_->sync();
  connected_.store(false, std::memory_order_relaxed);
  const std::int64_t now = core::Clock::now_ns();
  if (qp_ != nullptr) {
    receiver_.close(*this);  // publishers stop waiting for us
    (void)ibv_detach_mcast(qp_->qp, &mgid_, 0);
  }
  if (igmp_fd_ >= 0) {
    ::close(igmp_fd_);  // leaves the kernel multicast group
    igmp_fd_ = -1;
  }
  recycle_all();
  flush_until_ns_ = now + kLeaveFlushNs;
  begin_close(now);
}

void UdRxEndpoint::recycle_all() noexcept {
  // Buffers queued, held in windows, delayed or still with the application go back to the group.
  for (; ready_head_ != ready_tail_; ++ready_head_) group_->recycle(ready_[ready_head_ & ready_mask_].slot);
  std::uint32_t delayed[FaultInjector::kMaxDelayed];
  const std::uint32_t nd = faults_.flush(delayed);
  for (std::uint32_t i = 0; i < nd; ++i) group_->recycle(delayed[i]);
  for (std::uint32_t s = 0; s < refs_.size(); ++s) {
    if (refs_[s] != 0) {
      refs_[s] = 0;
      group_->recycle(s);
    }
  }
  group_->flush_recycled();
}

bool UdRxEndpoint::close_step_st(std::int64_t now_ns, bool give_up) noexcept {
  if (self_progress_) (void)group_->progress();  // inline: nobody else polls the private group
  // Datagrams that were already on their way when the QP left the group: straight back.
  for (; ready_head_ != ready_tail_; ++ready_head_) group_->recycle(ready_[ready_head_ & ready_mask_].slot);
  // The "leaving" messages go out before the QP does (bounded).
  if (qp_ != nullptr && !give_up && ctl_done_ < ctl_posted_ && now_ns < flush_until_ns_) return false;
  publish_counters();
  if (qp_ != nullptr) {
    Conn* c = qp_;
    qp_ = nullptr;
    group_->retire(c);
  }
  for (std::uint32_t i = 0; i < nahs_; ++i) (void)ibv_destroy_ah(ahs_[i].ah);
  nahs_ = 0;
  group_->flush_recycled();
  return true;
}

void UdRxEndpoint::publish_counters() noexcept {
  c_.proto.publish(receiver_, faults_, malformed_, evictions_);
  POLLUX_COUNTER_PUBLISH(POLLUX_UD_RX_COUNTERS, c_);
}

std::string UdRxEndpoint::describe() const {
  // Any thread: counters and atomics only.
  return absl::StrFormat(
      "rdma ud_mcast subscriber stream %u: %s, %u messages, %u datagrams, %u gaps detected, %u NAKs, %u filled, %u "
      "unrecoverable; %s",
      stream_id_, connected() ? "following a publisher" : "no publisher heard", c_.messages.get(),
      c_.proto.datagrams.get(), c_.proto.gaps.get(), c_.proto.naks.get(), c_.proto.fills.get(), c_.proto.lost.get(),
      group_->describe());
}

}  // namespace pollux::transport::rdma
