#include "transport/rdma/completion_group.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_format.h"
#include "transport/rdma/device.h"
#include "transport/rdma/endpoint_base.h"
#include "transport/rdma/mlx5_dv.h"
#include "transport/rdma/rdma_endpoints.h"
#include "transport/rdma/ud_endpoints.h"

namespace pollux::transport::rdma {
namespace {

// Calls f with the owner of `c` as its concrete endpoint class (the four kinds: RC or UD,
// publisher or subscriber): a branch on two constant fields, no virtual call.
template <class F>
void with_owner(Conn* c, F&& f) {
  if (c->kind == Conn::Kind::kTx) {
    if (c->ud) {
      f(static_cast<UdTxEndpoint*>(c->owner));
    } else {
      f(static_cast<RdmaTxEndpoint*>(c->owner));
    }
  } else if (c->ud) {
    f(static_cast<UdRxEndpoint*>(c->owner));
  } else {
    f(static_cast<RdmaRxEndpoint*>(c->owner));
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<CompletionGroup>> CompletionGroup::create(Device& dev, core::BufferPool& pool,
                                                                         const GroupOptions& opt, ConnRetirer* retirer,
                                                                         core::CountersFile* counters) {
  std::unique_ptr<CompletionGroup> g(new CompletionGroup(dev, pool, opt, retirer));
  g->channel_ = ibv_create_comp_channel(dev.context());
  if (g->channel_ == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("rdma: ibv_create_comp_channel on %s: %s", dev.name(), std::strerror(errno)));
  }
  // Non-blocking, so disarm() can drain events without ever sleeping on the data path.
  const int fl = fcntl(g->channel_->fd, F_GETFL);
  (void)fcntl(g->channel_->fd, F_SETFL, fl | O_NONBLOCK);
  const int depth =
      static_cast<int>(std::min<std::uint32_t>(opt.cq_depth, static_cast<std::uint32_t>(dev.attr().max_cqe)));
  g->cq_ = ibv_create_cq(dev.context(), depth, g.get(), g->channel_, 0);
  if (g->cq_ == nullptr) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "rdma: ibv_create_cq(%d entries) on %s: %s; lower rdma.cq_depth (device max %d) or raise `ulimit -l`", depth,
        dev.name(), std::strerror(errno), dev.attr().max_cqe));
  }
  g->pending_.reserve(std::max<std::uint32_t>(opt.recv_batch, 1) * 2 + 64);
  g->free_.reserve(opt.recv_depth);
  static std::atomic<int> inline_groups{0};
  const std::string scope =
      opt.poller >= 0 ? absl::StrFormat("rdma poller %d", opt.poller)
                      : absl::StrFormat("rdma inline %d", inline_groups.fetch_add(1, std::memory_order_relaxed));
  g->errors_ = &counters->error_log();
  POLLUX_COUNTER_ALLOCATE(POLLUX_RDMA_GROUP_COUNTERS, *g,
                          [&](std::string_view n) { return counters->allocate(scope, n); });
  // The owner's wake-up fd: completion events and control-plane announcements, as one fd.
  auto bell = core::EventFd::create();
  if (!bell.ok()) return bell.status();
  g->bell_ = std::move(*bell);
  g->epfd_ = epoll_create1(EPOLL_CLOEXEC);
  if (g->epfd_ < 0) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("rdma: epoll_create1 for the completion group of %s: %s", dev.name(), std::strerror(errno)));
  }
  if (opt.timer_ns > 0) {
    g->timer_fd_ = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (g->timer_fd_ < 0) {
      return absl::ResourceExhaustedError(
          absl::StrFormat("rdma: timerfd_create for the completion group of %s: %s", dev.name(), std::strerror(errno)));
    }
  }
  for (const int fd : {g->channel_->fd, g->bell_.fd(), g->timer_fd_}) {
    if (fd < 0) continue;
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    if (epoll_ctl(g->epfd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
      return absl::ResourceExhaustedError(
          absl::StrFormat("rdma: epoll_ctl(ADD) for the completion group of %s: %s", dev.name(), std::strerror(errno)));
    }
  }
  if (opt.moderation_count != 0 || opt.moderation_usec != 0) {
    const auto count = static_cast<std::uint16_t>(std::min<std::uint32_t>(opt.moderation_count, 0xffff));
    const auto usec = static_cast<std::uint16_t>(std::min<std::uint32_t>(opt.moderation_usec, 0xffff));
    if (!g->set_moderation(count, usec)) {
      // Not fatal: moderation only shapes interrupt mode. Say so once (control path, at open).
      g->moderation_note_ = absl::StrFormat(
          "CQ moderation (%u completions / %u us) refused by %s; interrupt mode raises one event per armed "
          "completion",
          opt.moderation_count, opt.moderation_usec, dev.name());
      counters->error_log().recordf(absl::StatusCode::kUnimplemented, "rdma: %s (rdma.cq_moderation_count/usec)",
                                    g->moderation_note_);
    } else {
      g->moderation_note_ =
          absl::StrFormat("CQ moderation %u completions / %u us", opt.moderation_count, opt.moderation_usec);
    }
  }
  g->routes_.reserve(256);
  g->rq_conns_.reserve(64);
  g->draining_.reserve(64);
  return g;
}

CompletionGroup::~CompletionGroup() {
  if (unacked_events_ != 0 && cq_ != nullptr) ibv_ack_cq_events(cq_, unacked_events_);
  dv_cq_.reset();
  if (srq_ != nullptr) ibv_destroy_srq(srq_);
  if (cq_ != nullptr) ibv_destroy_cq(cq_);
  if (channel_ != nullptr) ibv_destroy_comp_channel(channel_);
  if (epfd_ >= 0) close(epfd_);
  if (timer_fd_ >= 0) close(timer_fd_);
}

bool CompletionGroup::set_moderation(std::uint16_t count, std::uint16_t period_us) noexcept {
  if (moderation_unsupported_) return false;
  ibv_modify_cq_attr ma{};
  ma.attr_mask = IBV_CQ_ATTR_MODERATE;
  ma.moderate.cq_count = count;
  ma.moderate.cq_period = period_us;
  if (ibv_modify_cq(cq_, &ma) != 0) {
    // rxe (and some other providers) do not implement it: record it once, never ask again.
    moderation_unsupported_ = true;
    c_mod_unsupported_.set(1);
    return false;
  }
  c_mod_changes_.add();
  return true;
}

absl::Status CompletionGroup::reserve_cqes(std::uint32_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::uint32_t cap = static_cast<std::uint32_t>(cq_->cqe);
  if (reserved_cqes_ + n > cap) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "rdma: %s's completion queue (%u entries) cannot take another QP needing %u (already %u reserved); raise "
        "rdma.cq_depth or lower rdma.send_queue_depth",
        opt_.poller >= 0 ? absl::StrFormat("poller %d", opt_.poller) : std::string("the inline endpoint"), cap, n,
        reserved_cqes_));
  }
  reserved_cqes_ += n;
  return absl::OkStatus();
}

void CompletionGroup::unreserve_cqes(std::uint32_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  reserved_cqes_ -= std::min(n, reserved_cqes_);
}

void CompletionGroup::announce(Conn* c, bool gone) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    announced_.emplace_back(c, gone);
  }
  // Release pairs with sync()'s acquire load.
  gen_.fetch_add(1, std::memory_order_release);
  // Then the bell, always (a control event: one write). An owner asleep in interrupt mode wakes
  // (notify_fd() covers the bell); one that is polling finds the eventfd readable at its next
  // sleep, wakes at once and syncs - the write comes after the increment, so the wakeup can
  // never precede the announcement it is for.
  bell_.signal();
}

absl::Status CompletionGroup::enable_receives() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (receives_enabled_) return absl::OkStatus();
    if (opt_.srq) {
      if (reserved_cqes_ + opt_.recv_depth > static_cast<std::uint32_t>(cq_->cqe)) {
        return absl::ResourceExhaustedError(absl::StrFormat(
            "rdma: rdma.cq_depth (%d) is smaller than rdma.recv_queue_depth (%u) plus the send queues already on this "
            "poller; raise rdma.cq_depth",
            cq_->cqe, opt_.recv_depth));
      }
      ibv_srq_init_attr sa{};
      sa.attr.max_wr = opt_.recv_depth;
      sa.attr.max_sge = 1;
      ibv_srq* srq = ibv_create_srq(dev_.pd(), &sa);
      if (srq == nullptr) {
        return absl::ResourceExhaustedError(absl::StrFormat(
            "rdma: ibv_create_srq(%u buffers) on %s: %s; lower rdma.recv_queue_depth or set rdma.srq = \"off\"",
            opt_.recv_depth, dev_.name(), std::strerror(errno)));
      }
      // Receive buffers: carved once from the pool, so its one registration covers them.
      auto range = pool_->carve(opt_.recv_depth);
      if (!range.ok()) {
        ibv_destroy_srq(srq);
        return absl::ResourceExhaustedError(absl::StrFormat(
            "rdma: the shared receive queue of %s needs rdma.recv_queue_depth = %u pool slots, but only %u of %u are "
            "left; raise pool.slots or lower rdma.recv_queue_depth (in inline mode every subscriber has its own "
            "receive queue, in dedicated/shared mode every poller)",
            opt_.poller >= 0 ? absl::StrFormat("poller %d", opt_.poller) : std::string("an inline subscriber"),
            opt_.recv_depth, pool_->slots_free(), pool_->slots()));
      }
      srq_ = srq;
      reserved_cqes_ += opt_.recv_depth;
      for (std::uint32_t i = 0; i < range->count; ++i) incoming_.push_back(range->first + i);
    }
    receives_enabled_ = true;
  }
  gen_.fetch_add(1, std::memory_order_release);  // pairs with sync()'s acquire
  bell_.signal();                                // as in announce(): the owner posts the new buffers on its next sync()
  return absl::OkStatus();
}

void CompletionGroup::forget(Conn* c) {
  std::lock_guard<std::mutex> lock(mu_);
  announced_.erase(std::remove_if(announced_.begin(), announced_.end(), [c](const auto& e) { return e.first == c; }),
                   announced_.end());
}

absl::StatusOr<ibv_cq*> CompletionGroup::dv_send_cq(Device& dev) {
  std::lock_guard<std::mutex> lock(mu_);
  if (dv_cq_ != nullptr) return dv_cq_->cq();
  auto cq = mlx5::DvCq::create(dev.context(), static_cast<int>(opt_.cq_depth));
  if (!cq.ok()) return cq.status();
  dv_cq_ = std::move(*cq);
  // Release pairs with progress_dv()'s acquire: the DvCq is fully built before it is polled.
  dv_cq_raw_.store(dv_cq_->cq(), std::memory_order_release);
  return dv_cq_->cq();
}

void CompletionGroup::sync_slow() noexcept {
  std::vector<std::pair<Conn*, bool>> batch;  // control event: allocation is fine here
  std::vector<std::uint32_t> buffers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    batch.swap(announced_);
    buffers.swap(incoming_);
    osrq_ = srq_;
    seen_gen_ = gen_.load(std::memory_order_relaxed);
  }
  if (!buffers.empty()) {
    recv_total_.fetch_add(static_cast<std::uint32_t>(buffers.size()), std::memory_order_relaxed);
    for (std::size_t i = 0; i < buffers.size(); i += 64) {
      post_srq(buffers.data() + i, static_cast<std::uint32_t>(std::min<std::size_t>(64, buffers.size() - i)));
    }
  }
  for (auto& [c, gone] : batch) {
    if (!gone) {
      adopt(c);
    } else if (c->state == Conn::State::kLive) {
      with_owner(c, [c](auto* ep) { ep->on_gone(c); });
    }
    // gone for a pending or already retired conn: its owner retires (or retired) it anyway.
  }
}

void CompletionGroup::adopt(Conn* c) noexcept {
  c->state = Conn::State::kLive;
  routes_.push_back({c->qp_num, c});
  if (c->has_rq) {
    // Control event: growing the receive buffer set may carve the pool (takes its mutex).
    if (free_.size() < opt_.recv_depth) {
      auto range = pool_->carve(opt_.recv_depth - static_cast<std::uint32_t>(free_.size()));
      if (range.ok()) {
        for (std::uint32_t i = 0; i < range->count; ++i) free_.push_back(range->first + i);
        recv_total_.fetch_add(range->count, std::memory_order_relaxed);
      } else {
        errors_->recordf(absl::StatusCode::kResourceExhausted, "rdma: receive buffers for %s: %s", c->peer,
                         range.status().message());
      }
    }
    rq_conns_.push_back(c);
    std::uint32_t want = opt_.recv_depth;
    while (want > 0 && !free_.empty()) {
      const std::uint32_t n = std::min<std::uint32_t>({want, 64, static_cast<std::uint32_t>(free_.size())});
      if (!post_rq(c, n)) break;
      want -= n;
    }
  }
  with_owner(c, [c](auto* ep) { ep->adopt(c); });
}

Conn* CompletionGroup::route(std::uint32_t qp_num) noexcept {
  if (last_.qp_num == qp_num && last_.conn != nullptr) return last_.conn;
  for (const Route& r : routes_) {
    if (r.qp_num == qp_num) {
      last_ = r;
      return r.conn;
    }
  }
  return nullptr;
}

void CompletionGroup::remove_route(Conn* c) noexcept {
  for (std::size_t i = 0; i < routes_.size(); ++i) {
    if (routes_[i].conn == c) {
      routes_[i] = routes_.back();
      routes_.pop_back();
      break;
    }
  }
  if (last_.conn == c) last_ = {0, nullptr};
  rq_conns_.erase(std::remove(rq_conns_.begin(), rq_conns_.end(), c), rq_conns_.end());
}

int CompletionGroup::progress() noexcept {
  sync();
  ibv_wc wc[kPollBurst];
  batch_ns_ = 0;  // a new batch: batch_now() reads the clock again
  c_cq_polls_.add();
  const int n = ibv_poll_cq(cq_, kPollBurst, wc);
  int done = 0;
  drained_ = n < kPollBurst;
  if (__builtin_expect(n < 0, 0)) {
    c_cq_errors_.add();
  } else if (n > 0) {
    c_polls_.add();
    c_cqes_.add(static_cast<std::uint64_t>(n));
    completions_ += static_cast<std::uint64_t>(n);
    for (int i = 0; i < n; ++i) dispatch(wc[i]);
    done = n;
  }
  if (__builtin_expect(dv_cq_raw_.load(std::memory_order_relaxed) != nullptr, 0)) done += progress_dv();
  // Lazy re-post, unless the SRQ is running low: then whatever is batched goes now.
  if (osrq_ != nullptr && !pending_.empty() && srq_posted_ < opt_.recv_depth / 4) flush_recycled();
  return done;
}

void CompletionGroup::dispatch(const ibv_wc& wc) noexcept {
  Conn* c = route(wc.qp_num);
  if (__builtin_expect(c == nullptr, 0)) {
    // A QP adopted after this completion was generated (announced but not yet synced: the
    // mutex in sync_slow makes the announcement visible), or one already retired.
    sync_slow();
    c = route(wc.qp_num);
  }
  if (wc.wr_id & kWrRecv) {
    const auto slot = static_cast<std::uint32_t>(wc.wr_id & kWrValueMask);
    if (__builtin_expect((wc.wr_id & kWrControl) != 0, 0)) {
      // A UD publisher's own receive buffer (NAKs and status messages): never the group's, so
      // never recycled here. A retired publisher's flushed buffers are simply dropped.
      if (c != nullptr && c->ud && c->kind == Conn::Kind::kTx && c->state == Conn::State::kLive) {
        static_cast<UdTxEndpoint*>(c->owner)->on_control(c, slot, wc.byte_len, wc.status);
      }
      return;
    }
    if (opt_.srq) --srq_posted_;
    if (c == nullptr) {
      ++stale_;
      c_stale_.add();
      recycle(slot);
      return;
    }
    if (c->has_rq) --c->rq_posted;
    if (__builtin_expect(wc.status != IBV_WC_SUCCESS || c->state != Conn::State::kLive, 0)) {
      recycle(slot);
      if (c->state == Conn::State::kDraining) {
        if (c->rq_posted == 0) finish_retire(c);
      } else if (c->state == Conn::State::kLive && c->kind == Conn::Kind::kRx) {
        if (c->ud) {
          // UD: one bad datagram (larger than the buffer) fails only its own receive; a flush
          // means the QP itself failed.
          if (wc.status == IBV_WC_WR_FLUSH_ERR) static_cast<UdRxEndpoint*>(c->owner)->on_gone(c);
        } else {
          c->error = wc.status;  // the QP went to the error state: the publisher is gone
          static_cast<RdmaRxEndpoint*>(c->owner)->on_gone(c);
        }
      }
      return;
    }
    if (c->ud) {
      static_cast<UdRxEndpoint*>(c->owner)->on_recv(c, slot, wc.byte_len, wc.src_qp);
    } else {
      static_cast<RdmaRxEndpoint*>(c->owner)->on_recv(c, slot, wc.byte_len);
    }
    return;
  }
  if (c == nullptr) {
    ++stale_;
    c_stale_.add();
    return;
  }
  if (c->state != Conn::State::kLive) return;
  if (c->kind == Conn::Kind::kTx) {
    if (c->ud) {
      static_cast<UdTxEndpoint*>(c->owner)->on_send(c, wc.wr_id, wc.status);
    } else {
      static_cast<RdmaTxEndpoint*>(c->owner)->on_send(c, wc.wr_id, wc.status);
    }
  } else if (c->ud) {
    static_cast<UdRxEndpoint*>(c->owner)->on_send(c, wc.wr_id, wc.status);  // a NAK or status message went out
  }
}

int CompletionGroup::progress_dv() noexcept {
#if POLLUX_HAVE_MLX5DV
  mlx5::DvCompletion done[kPollBurst];
  const std::uint32_t n = dv_cq_->poll(done, kPollBurst);
  for (std::uint32_t i = 0; i < n; ++i) {
    Conn* c = route(done[i].qp_num);
    if (c == nullptr) {
      sync_slow();
      c = route(done[i].qp_num);
    }
    if (c == nullptr || c->dv == nullptr || c->state != Conn::State::kLive) continue;
    const std::uint64_t wr_id = c->dv->wr_id_of(done[i].wqe_counter);
    const ibv_wc_status st = done[i].ok ? IBV_WC_SUCCESS : IBV_WC_GENERAL_ERR;
    if (c->ud) {
      static_cast<UdTxEndpoint*>(c->owner)->on_send(c, wr_id, st);
    } else {
      static_cast<RdmaTxEndpoint*>(c->owner)->on_send(c, wr_id, st);
    }
  }
  return static_cast<int>(n);
#else
  return 0;
#endif
}

bool CompletionGroup::try_arm() noexcept {
  // The bell first, then the generation: a signal this drain consumed was written after its
  // announcement's increment (eventfd read/write serialise in the kernel), so the load below
  // sees that increment and refuses; a signal it did not consume leaves the fd readable for the
  // sleep. Either way no announcement is slept through. Announcements not yet synced: let the
  // next progress() adopt them. Acquire pairs with announce()'s release increment.
  (void)bell_.drain();
  if (gen_.load(std::memory_order_acquire) != seen_gen_) {
    c_arm_refused_.add();
    return false;
  }
  // The mlx5dv send CQ has no completion channel: its completions (which free publishers'
  // slots) could never wake us. A group using it keeps its poller polling.
  if (__builtin_expect(dv_cq_raw_.load(std::memory_order_relaxed) != nullptr, 0)) {
    c_arm_refused_.add();
    return false;
  }
  // ud_mcast: the reliability protocol's own deadlines (a NAK, a status message, a tail
  // heartbeat, a repair), the earliest of the group's UD endpoints. One due now means work.
  std::int64_t ud_deadline = INT64_MAX;
  if (opt_.ud) {
    for (const Route& r : routes_) {
      const Conn* c = r.conn;
      if (!c->ud || c->state != Conn::State::kLive) continue;
      ud_deadline = std::min(ud_deadline, c->kind == Conn::Kind::kTx
                                              ? static_cast<const UdTxEndpoint*>(c->owner)->next_deadline()
                                              : static_cast<const UdRxEndpoint*>(c->owner)->next_deadline());
    }
    if (ud_deadline != INT64_MAX && ud_deadline <= core::Clock::now_ns()) {
      c_arm_refused_.add();
      return false;
    }
  }
  // Receive buffers batched for re-posting go to the SRQ now, not after the sleep.
  if (!pending_.empty()) flush_recycled();
  c_arms_.add();
  if (ibv_req_notify_cq(cq_, 0) != 0) {  // cannot arm: keep polling
    c_arm_refused_.add();
    return false;
  }
  // The race re-check: a completion that landed after our last poll but before the arm raises
  // no event, so poll once more. Whatever it finds is dispatched to its endpoint as in any
  // cycle (nothing is lost) and means work: stay awake. (The CQ stays armed: at worst its next
  // event makes one later sleep return at once, which disarm() consumes.)
  if (progress() > 0) {
    c_arm_races_.add();
    return false;
  }
  if (timer_fd_ >= 0 && (!routes_.empty() || timer_set_)) {
    // ud_mcast timers (heartbeats out, liveness in) while asleep: one shot, re-armed per sleep
    // (which also clears an expiration left from an earlier one); stopped once no QP is left.
    // The period, or sooner when an endpoint's protocol deadline comes first.
    std::int64_t rel = 0;  // no QP left: stop it
    if (!routes_.empty()) {
      rel = opt_.timer_ns;
      if (ud_deadline != INT64_MAX) rel = std::clamp<std::int64_t>(ud_deadline - core::Clock::now_ns(), 1'000, rel);
    }
    if (!core::set_timer(timer_fd_, rel)) {
      c_arm_refused_.add();
      return false;  // no timer: sleeping would stop the heartbeats
    }
    timer_set_ = !routes_.empty();
  }
  return true;
}

void CompletionGroup::disarm() noexcept {
  ibv_cq* cq;
  void* ctx;
  std::uint32_t got = 0;
  while (ibv_get_cq_event(channel_, &cq, &ctx) == 0) ++got;  // the channel fd is non-blocking
  if (got != 0) {
    unacked_events_ += got;
    ++event_wakeups_;
    c_cq_events_.add(got);
    // Acknowledging takes a mutex inside libibverbs: batch it (only interrupt mode gets here).
    if (unacked_events_ >= 16) {
      ibv_ack_cq_events(cq_, unacked_events_);
      unacked_events_ = 0;
    }
  }
  // The bell is drained by the next try_arm() (before it checks the generation), and the ud
  // timer is reset by it (timerfd_settime clears expirations): nothing else to undo here.
}

void CompletionGroup::post_srq(const std::uint32_t* slots, std::uint32_t n) noexcept {
  ibv_recv_wr wr[64];
  ibv_sge sge[64];
  const std::uint32_t lkey = dev_.lkey();
  const std::uint32_t len = pool_->slot_size();
  for (std::uint32_t i = 0; i < n; ++i) {
    sge[i] = {reinterpret_cast<std::uintptr_t>(pool_->slot(slots[i])), len, lkey};
    wr[i].wr_id = kWrRecv | slots[i];
    wr[i].sg_list = &sge[i];
    wr[i].num_sge = 1;
    wr[i].next = i + 1 < n ? &wr[i + 1] : nullptr;
  }
  ibv_recv_wr* bad = nullptr;
  if (ibv_post_srq_recv(osrq_, wr, &bad) != 0) {
    // Keep the buffers we could not post (never lose a slot).
    for (ibv_recv_wr* w = bad; w != nullptr; w = w->next) {
      free_.push_back(static_cast<std::uint32_t>(w->wr_id & kWrValueMask));
      --n;
    }
  }
  srq_posted_ += n;
  c_recv_posts_.add();
  c_recv_buffers_.add(n);
}

bool CompletionGroup::post_rq(Conn* c, std::uint32_t n) noexcept {
  ibv_recv_wr wr[64];
  ibv_sge sge[64];
  const std::uint32_t lkey = dev_.lkey();
  const std::uint32_t len = pool_->slot_size();
  n = std::min<std::uint32_t>({n, 64, static_cast<std::uint32_t>(free_.size())});
  if (n == 0) return false;
  for (std::uint32_t i = 0; i < n; ++i) {
    const std::uint32_t slot = free_[free_.size() - 1 - i];
    sge[i] = {reinterpret_cast<std::uintptr_t>(pool_->slot(slot)), len, lkey};
    wr[i].wr_id = kWrRecv | slot;
    wr[i].sg_list = &sge[i];
    wr[i].num_sge = 1;
    wr[i].next = i + 1 < n ? &wr[i + 1] : nullptr;
  }
  ibv_recv_wr* bad = nullptr;
  std::uint32_t posted = n;
  if (ibv_post_recv(c->qp, wr, &bad) != 0) {
    posted = 0;
    for (ibv_recv_wr* w = wr; w != nullptr && w != bad; w = w->next) ++posted;
  }
  free_.resize(free_.size() - posted);
  c->rq_posted += posted;
  c_recv_posts_.add();
  c_recv_buffers_.add(posted);
  return posted == n;
}

void CompletionGroup::recycle(std::uint32_t slot) noexcept {
  if (!opt_.srq) {
    free_.push_back(slot);
    if (free_.size() >= opt_.recv_batch) refill_rqs();
    return;
  }
  pending_.push_back(slot);
  if (pending_.size() >= opt_.recv_batch) flush_recycled();
}

void CompletionGroup::flush_recycled() noexcept {
  if (!opt_.srq) {
    refill_rqs();
    return;
  }
  if (osrq_ == nullptr) return;
  while (!pending_.empty()) {
    const std::uint32_t n = std::min<std::uint32_t>(static_cast<std::uint32_t>(pending_.size()), 64);
    post_srq(pending_.data() + pending_.size() - n, n);
    pending_.resize(pending_.size() - n);
  }
  // Buffers post_srq() could not post wait in free_: retry them with the next batch.
  if (!free_.empty()) {
    pending_.insert(pending_.end(), free_.begin(), free_.end());
    free_.clear();
  }
}

void CompletionGroup::refill_rqs() noexcept {
  // Round-robin over QPs with their own receive queue, one batch each, those furthest below depth.
  const std::size_t n = rq_conns_.size();
  for (std::size_t k = 0; k < n && free_.size() >= std::min<std::size_t>(opt_.recv_batch, 1); ++k) {
    Conn* c = rq_conns_[rq_next_++ % n];
    if (c->rq_posted + opt_.recv_batch <= opt_.recv_depth || c->rq_posted < opt_.recv_depth / 2) {
      (void)post_rq(c, std::min<std::uint32_t>(opt_.recv_depth - c->rq_posted, opt_.recv_batch));
    }
  }
}

void CompletionGroup::retire(Conn* c) noexcept {
  if (c->state == Conn::State::kRetired || c->state == Conn::State::kDraining) return;
  // Error state: the QP stops, and its own receive buffers (no SRQ) come back as flushed
  // completions that must reach recycle() before the QP may be destroyed.
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_ERR;
  (void)ibv_modify_qp(c->qp, &a, IBV_QP_STATE);
  rq_conns_.erase(std::remove(rq_conns_.begin(), rq_conns_.end(), c), rq_conns_.end());
  if (c->has_rq && c->rq_posted > 0) {
    c->state = Conn::State::kDraining;
    draining_.push_back(c);
    return;
  }
  finish_retire(c);
}

void CompletionGroup::add_closing(RdmaEndpointBase* ep) {
  closing_.push_back(ep);
  c_lingering_closes_.add();
  c_closing_.set(closing_.size());
}

void CompletionGroup::remove_closing(RdmaEndpointBase* ep) noexcept {
  closing_.erase(std::remove(closing_.begin(), closing_.end(), ep), closing_.end());
  c_closing_.set(closing_.size());
}

int CompletionGroup::advance_closing(std::int64_t now_ns) noexcept {
  if (now_ns < next_close_step_ns_) return 0;
  next_close_step_ns_ = now_ns + kCloseStepNs;
  int finished = 0;
  for (std::size_t i = 0; i < closing_.size();) {
    if (closing_[i]->advance_close(now_ns, false)) {
      closing_[i] = closing_.back();
      closing_.pop_back();
      ++finished;
    } else {
      ++i;
    }
  }
  if (finished != 0) c_closing_.set(closing_.size());
  return finished;
}

void CompletionGroup::finish_closing() noexcept {
  while (!closing_.empty()) {
    (void)progress();
    next_close_step_ns_ = 0;
    (void)advance_closing(core::Clock::now_ns());
    if (!closing_.empty()) wait_for_work(1);
  }
}

void CompletionGroup::wait_for_work(int max_ms) noexcept {
  if (try_arm()) {
    pollfd p{epfd_, POLLIN, 0};
    (void)::poll(&p, 1, max_ms);
  }
  disarm();
}

void CompletionGroup::finish_retire(Conn* c) noexcept {
  c->state = Conn::State::kRetired;
  remove_route(c);
  draining_.erase(std::remove(draining_.begin(), draining_.end(), c), draining_.end());
  retirer_->retire(c);
}

std::string CompletionGroup::describe() const {
  return absl::StrFormat("cq %d entries%s, %s, %u receive buffers%s", cq_->cqe,
                         dv_cq_raw_.load(std::memory_order_relaxed) != nullptr ? " (+ mlx5dv send cq)" : "",
                         opt_.srq ? "srq" : "receive queue per QP", recv_total_.load(std::memory_order_relaxed),
                         moderation_note_.empty() ? "" : absl::StrCat(", ", moderation_note_));
}

}  // namespace pollux::transport::rdma
