#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <time.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <type_traits>

#include "api/internal.h"
#include "pollux/late_join.h"

namespace pollux {
namespace detail {

using transport::RxDesc;
using transport::RxKind;

namespace {
constexpr int kChunk = 64;

// detail::message_of_frame (pollux/subscriber.h) reads the wire header at these offsets.
static_assert(kWireHeaderBytes == core::kFrameHeaderSize && offsetof(core::FrameHeader, stream_id) == 8 &&
              offsetof(core::FrameHeader, session_id) == 12 && offsetof(core::FrameHeader, sequence) == 16 &&
              offsetof(core::FrameHeader, timestamp_ns) == 24);

GapReason gap_reason(std::uint16_t r) {
  switch (r) {
    case transport::kGapOverrun:
      return GapReason::kOverrun;
    case transport::kGapLost:
      return GapReason::kLost;
    case transport::kGapMalformed:
      return GapReason::kMalformed;
    default:
      return GapReason::kLapped;
  }
}
}  // namespace

int InlineDuties::run(std::int64_t now_ns) noexcept {
  std::lock_guard<std::mutex> lock(mu);
  int work = 0;
  for (std::size_t i = 0; i < subs.size();) {
    const std::shared_ptr<SubscriberImpl> s = subs[i].lock();
    std::uint8_t d = s != nullptr ? s->drive.load(std::memory_order_relaxed) : SubscriberImpl::kDriveOwner;
    if (d == SubscriberImpl::kDriveOwner) {  // gone, or its owner drives it now: off the list
      subs[i] = std::move(subs.back());
      subs.pop_back();
      continue;
    }
    // Acquire pairs with the release below of an earlier duty (the owner has not touched the
    // endpoint yet).
    if (d == SubscriberImpl::kDriveFree &&
        s->drive.compare_exchange_strong(d, SubscriberImpl::kDriveDuties, std::memory_order_acquire)) {
      if (!s->closed.load(std::memory_order_relaxed)) {
        work += s->ep->duty_st(now_ns);
      }
      // Release pairs with take_drive()'s acquire: the owner sees what the duty did.
      s->drive.store(SubscriberImpl::kDriveFree, std::memory_order_release);
    }
    ++i;
  }
  return work;
}

void SubscriberImpl::take_drive() noexcept {
  std::uint8_t d = drive.load(std::memory_order_acquire);
  while (d != kDriveOwner) {
    if (d == kDriveFree) {
      // Acquire pairs with InlineDuties::run()'s release: the endpoint as the last duty left it.
      if (drive.compare_exchange_weak(d, kDriveOwner, std::memory_order_acquire)) {
        if (duties != nullptr) duties->unowned.fetch_sub(1, std::memory_order_relaxed);
        if (direct.poll != nullptr && !closed.load(std::memory_order_relaxed))
          direct_on.store(true, std::memory_order_relaxed);
        return;
      }
    } else {  // a duty in progress: it is short (one housekeeping pass)
      sched_yield();
      d = drive.load(std::memory_order_acquire);
    }
  }
}

bool SubscriberImpl::connected() const noexcept {
  if (closed.load(std::memory_order_relaxed)) return false;
  if (mode == Mode::kInline) return ep->connected();
  return channel->ep->connected();
}

void SubscriberImpl::flush_dropped_gap(const Handlers& h) noexcept {
  if (pending_gap.count == 0) return;
  report_gap(h, pending_gap);
  pending_gap.count = 0;
}

void SubscriberImpl::report_gap(const Handlers& h, const Gap& g) noexcept {
  ++gaps;
  counters.gaps.add();
  if (g.reason == GapReason::kOverrun) {
    counters.overruns.add(g.count);  // delivered, but possibly torn: not lost
  } else {
    lost += g.count;
    counters.lost.add(g.count);
  }
  h.on_gap(h.ctx, g);
}

int SubscriberImpl::poll(const Handlers& h, int limit) noexcept {
  // Inline, on an endpoint with a direct path (shm's log, UDP's receive buffers): one call into
  // the endpoint's own code (RxDirect, taken at open), which hands plain frames from its buffer
  // straight to the handler's on_frame, in place - no RxDesc filled, copied or walked - counts
  // them, and hands over to poll_general() (bound at open) for whatever it stops at: gaps,
  // stream events, traced or padding frames, resyncs, due timers.
  if (__builtin_expect(direct_on.load(std::memory_order_relaxed), 1)) {
    return direct.poll(rx, h.on_frame, h.ctx, &h, limit);
  }
  if (__builtin_expect(closed.load(std::memory_order_relaxed), 0)) return 0;
  if (__builtin_expect(drive.load(std::memory_order_relaxed) != kDriveOwner, 0)) {
    take_drive();  // the first poll: from now on this thread drives the endpoint
    if (direct_on.load(std::memory_order_relaxed)) return direct.poll(rx, h.on_frame, h.ctx, &h, limit);
  }
  return poll_general(h, limit, 0);
}

int SubscriberImpl::general_poll(void* self, const void* handlers, int limit, int handled) noexcept {
  return static_cast<SubscriberImpl*>(self)->poll_general(*static_cast<const Handlers*>(handlers), limit, handled);
}

int SubscriberImpl::poll_general(const Handlers& h, int limit, int handled) noexcept {
  RxDesc buf[kChunk];
  RxDesc rel[kChunk];
  while (handled < limit) {
    const std::uint32_t want = static_cast<std::uint32_t>(std::min(kChunk, limit - handled));
    std::uint32_t n;
    if (mode == Mode::kInline) {
      n = ep->poll_st({buf, want});
    } else {
      n = channel->deliver.pop_burst(buf, want);
    }
    if (n == 0) break;
    std::uint32_t nrel = 0, delivered = 0;
    std::uint64_t bytes = 0;
    // Dedicated/shared modes: the poller read these frames a while ago. Views into a lossy
    // shm log may have been overwritten since: check before and after delivery (one load of
    // the writer's tail each time) and report, never deliver, what was lost.
    // Consecutive losses (dropped views, then the reader's own lapped gap) are merged into one
    // report, held until a message or event follows or a poll finds nothing more waiting.
    const bool check = mode == Mode::kQueued;
    const std::uint64_t floor = check ? channel->ep->safe_floor() : 0;
    Gap& dropped = pending_gap;
    auto flush_dropped = [&] {
      if (dropped.count == 0) return;
      report_gap(h, dropped);
      dropped.count = 0;
    };
    std::uint64_t next_seq = 0;  // for the position counter: after the last message or gap seen
    for (std::uint32_t i = 0; i < n; ++i) {
      const RxDesc& d = buf[i];
      if (__builtin_expect(d.kind == RxKind::kMessage, 1)) {
        next_seq = d.sequence + 1;
        if (__builtin_expect(check && transport::view_start(d) < floor, 0)) {
          if (dropped.count != 0 && d.sequence != dropped.from + dropped.count) flush_dropped();
          if (dropped.count++ == 0) {
            dropped = Gap{stream_id, d.session_id, d.sequence, 1, GapReason::kLapped};
          }
          rel[nrel++] = d;  // still handed back: the poller counts outstanding descriptors
          continue;
        }
        flush_dropped();
        const core::FrameHeader* f = d.frame;
        const bool traced = f->flags & core::kFlagTraced;
        const std::uint32_t off =
            core::kFrameHeaderSize + (traced ? static_cast<std::uint32_t>(sizeof(core::StageTrace)) : 0u);
        if (__builtin_expect(d.length < off, 0)) {
          // Too short for its header (+ trace block): the payload length would wrap around to a
          // 4 GiB view. Whatever transport let it through (each validates too), it is counted,
          // dropped and reported as a one-message malformed gap, never delivered.
          counters.malformed.add();
          report_gap(h, Gap{stream_id, d.session_id, d.sequence, 1, GapReason::kMalformed});
          rel[nrel++] = d;
          continue;
        }
        const StageTimes* trace = nullptr;
        StageTimes st;
        if (__builtin_expect(traced, 0)) {
          const auto* t =
              reinterpret_cast<const core::StageTrace*>(reinterpret_cast<const std::byte*>(f) + core::kFrameHeaderSize);
          static_assert(sizeof t->stamp_ns == StageTimes::kKernelRx * sizeof(std::int64_t));
          std::memcpy(st.ns, t->stamp_ns, sizeof t->stamp_ns);
          const std::int64_t now = core::Clock::now_ns();
          st.ns[StageTimes::kReceive] = d.receive_ns != 0 ? d.receive_ns : now;
          st.ns[StageTimes::kRingToSubscriber] = d.ring_ns;
          st.ns[StageTimes::kDelivery] = now;
          // The kernel's receive stamp only when this process's transport wrote it into its own
          // copy of the frame (the wire value, or a shm segment's, is never read).
          st.ns[StageTimes::kKernelRx] = (d.reserved & transport::kRxFlagKernelRx) ? t->kernel_rx_ns : 0;
          trace = &st;
        }
        const Message m{{reinterpret_cast<const std::byte*>(f) + off, d.length - off},
                        f->stream_id,
                        f->session_id,
                        f->sequence,
                        f->timestamp_ns,
                        trace};
        h.on_message(h.ctx, m);
        bytes += d.length - off;
        rel[nrel++] = d;
        ++delivered;
      } else if (d.kind == RxKind::kGap) {
        const Gap g{stream_id, d.session_id, d.sequence, d.gap_count, gap_reason(d.reason)};
        if (g.count != 0) next_seq = g.from + g.count;
        if (dropped.count != 0 && g.reason == GapReason::kLapped && g.from == dropped.from + dropped.count) {
          dropped.count += g.count;  // the same hole, seen by the poller after our drops
          continue;
        }
        flush_dropped();
        report_gap(h, g);
      } else {
        flush_dropped();
        StreamEvent ev{StreamEventKind::kNewSession, stream_id, d.session_id};
        if (d.kind == RxKind::kEndOfStream) {
          ev.kind = d.reason == transport::kEndClosed      ? StreamEventKind::kEndOfStream
                    : d.reason == transport::kEndTruncated ? StreamEventKind::kSegmentTruncated
                                                           : StreamEventKind::kPublisherDied;
        }
        counters.events.add();
        h.on_event(h.ctx, ev);
      }
    }
    if (check && delivered != 0) {
      // Views torn during delivery (overwritten while the handler ran) are reported at once.
      const std::uint64_t after = channel->ep->safe_floor();
      Gap torn{stream_id, 0, 0, 0, GapReason::kOverrun};
      for (std::uint32_t i = 0; i < nrel; ++i) {
        if (transport::view_start(rel[i]) < floor) continue;  // dropped, not delivered
        if (transport::view_start(rel[i]) >= after) break;
        if (torn.count++ == 0) {
          torn.from = rel[i].sequence;
          torn.session_id = rel[i].session_id;
        }
      }
      if (torn.count != 0) report_gap(h, torn);
    }
    received += delivered;
    counters.messages.add(delivered);
    counters.bytes.add(bytes);
    if (next_seq != 0 && counters.position.valid()) counters.position.set(next_seq);
    if (mode == Mode::kInline) {
      ep->release_st({rel, nrel}, true);
    } else if (nrel > 0) {
      // Cannot fail: the poller never has more messages outstanding than this ring holds.
      (void)channel->release.push_burst(rel, nrel);
      poller->wake();  // the poller may sleep with messages outstanding: they are its work now
    }
    handled += static_cast<int>(n);
    if (n < want) break;
  }
  if (handled == 0) flush_dropped_gap(h);
  return handled;
}

bool SubscriberImpl::arm() noexcept {
  if (closed.load(std::memory_order_relaxed)) return false;
  take_drive();
  if (mode == Mode::kQueued) {
    if (pending_gap.count != 0) return false;
    // announce() -> load the ring's tail; the poller stores the tail -> ring_if_asleep().
    channel->app_bell.announce(core::Doorbell::kFd);
    if (!channel->deliver.empty_approx()) {
      disarm();
      return false;
    }
    return true;
  }
  return ep->try_arm_st();
}

void SubscriberImpl::disarm() noexcept {
  take_drive();
  if (mode == Mode::kQueued) {
    // After arm(): the eventfd may have been rung (a wait() leaves nothing behind to drain).
    channel->app_bell.withdraw();
    (void)channel->app_bell.drain_fd();
    return;
  }
  ep->disarm_st();
}

int SubscriberImpl::notify_fd() const noexcept {
  if (mode == Mode::kQueued) return channel->app_bell.fd();
  return ep->notify_fd();
}

bool SubscriberImpl::wait(std::int64_t timeout_ns) noexcept {
  if (closed.load(std::memory_order_relaxed)) return false;
  take_drive();
  if (mode == Mode::kQueued) {
    if (pending_gap.count != 0) return true;
    // Snapshot before announcing: a delivery after the re-check below changes the word, and
    // futex_wait then returns at once instead of sleeping.
    core::Doorbell& bell = channel->app_bell;
    const std::uint32_t seen = bell.snapshot();
    bell.announce(core::Doorbell::kFutex);
    bool woken = true;
    if (channel->deliver.empty_approx() && !closed.load(std::memory_order_relaxed)) {
      woken = core::futex_wait(bell.word(), seen, /*shared=*/false, timeout_ns) != ETIMEDOUT;
    }
    bell.withdraw();
    return woken;
  }
  // Inline from here on (queued mode returned above).
  if (!arm()) {
    if (closed.load(std::memory_order_relaxed)) return true;
    // Inline: the endpoint has data, or cannot wake us (it says so by refusing): poll again
    // soon, without burning the core.
    timespec ts{0, 20'000};
    nanosleep(&ts, nullptr);
    return true;
  }
  int fd = notify_fd();
  int r = 0;
  if (fd >= 0) {
    pollfd p{fd, POLLIN, 0};
    const int ms = timeout_ns < 0 ? -1 : static_cast<int>((timeout_ns + 999'999) / 1'000'000);
    r = ::poll(&p, 1, ms);
  } else {
    core::FutexWait waits[16];
    const std::uint32_t n = ep->futex_waits_st({waits, 16});
    if (n > 0) {
      r = core::futex_wait_any({waits, n}, timeout_ns) == ETIMEDOUT ? 0 : 1;
    } else {
      timespec ts{0, 20'000};  // armed, but nothing to sleep on: a short nap, then poll
      nanosleep(&ts, nullptr);
      r = 1;
    }
  }
  disarm();
  return r > 0;
}

void SubscriberImpl::close() noexcept {
  take_drive();  // no duty may run on the endpoint while it closes
  std::lock_guard<std::mutex> lock(control_mu);
  direct_on.store(false, std::memory_order_relaxed);  // as `closed`: poll() then returns 0
  if (closed.exchange(true)) return;
  if (ctx != nullptr) ctx->release_subscriber(this);
  ctx = nullptr;
}

}  // namespace detail

Subscriber::Subscriber(std::shared_ptr<detail::SubscriberImpl> impl) : impl_(std::move(impl)) {}
Subscriber::Subscriber(std::unique_ptr<LateJoinSubscriber> late) : late_(std::move(late)) {}
Subscriber::Subscriber(Subscriber&& o) noexcept = default;
Subscriber& Subscriber::operator=(Subscriber&& o) noexcept {
  if (this != &o) {
    close();
    impl_ = std::move(o.impl_);
    late_ = std::move(o.late_);
  }
  return *this;
}
Subscriber::~Subscriber() { close(); }

// A subscriber is either a live one (impl_) or a late joiner (late_), never both; the live one is
// tested first so its poll pays nothing for the other.
int Subscriber::poll_impl(const detail::Handlers& h, int limit) noexcept {
  if (impl_ != nullptr) [[likely]]
    return impl_->poll(h, limit);
  return late_ != nullptr ? late_->poll_impl(h.on_message, h.ctx, limit) : 0;
}
bool Subscriber::wait(std::int64_t timeout_us) noexcept {
  if (late_ != nullptr) return late_->wait(timeout_us);
  return impl_ != nullptr && impl_->wait(timeout_us < 0 ? -1 : timeout_us * 1000);
}
bool Subscriber::arm() noexcept {
  if (late_ != nullptr) return late_->arm();
  return impl_ != nullptr && impl_->arm();
}
void Subscriber::disarm() noexcept {
  if (impl_ != nullptr) impl_->disarm();
  if (late_ != nullptr) late_->disarm();
}
int Subscriber::notify_fd() const noexcept {
  if (late_ != nullptr) return late_->notify_fd();
  return impl_ != nullptr ? impl_->notify_fd() : -1;
}
bool Subscriber::is_connected() const noexcept {
  if (late_ != nullptr) return late_->is_connected();
  return impl_ != nullptr && impl_->connected();
}
std::uint32_t Subscriber::stream_id() const noexcept {
  if (late_ != nullptr) return late_->stream_id();
  return impl_ != nullptr ? impl_->stream_id : 0;
}
std::string_view Subscriber::topic() const noexcept {
  if (late_ != nullptr) return late_->topic();
  return impl_ != nullptr ? std::string_view(impl_->topic) : "";
}
std::uint64_t Subscriber::messages_received() const noexcept {
  if (late_ != nullptr) {
    const LateJoinStatus s = late_->status();
    return s.replayed + s.live;
  }
  return impl_ != nullptr ? impl_->received : 0;
}
std::uint64_t Subscriber::messages_lost() const noexcept {
  if (late_ != nullptr) return late_->status().missing;
  return impl_ != nullptr ? impl_->lost : 0;
}
std::uint64_t Subscriber::gaps_reported() const noexcept {
  if (late_ != nullptr) return late_->status().gaps;
  return impl_ != nullptr ? impl_->gaps : 0;
}
void Subscriber::close() noexcept {
  if (impl_ != nullptr) impl_->close();
  if (late_ != nullptr) late_->close();
}

}  // namespace pollux
