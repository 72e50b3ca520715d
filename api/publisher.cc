#include <cstring>

#include "api/internal.h"
#include "core/frame.h"

namespace pollux {
namespace detail {

using core::FrameHeader;
using core::kFrameHeaderSize;
using core::StageTrace;

namespace {
constexpr std::uint32_t kTraceBytes = sizeof(StageTrace);

void format_header(std::byte* frame, std::uint32_t frame_len, std::uint16_t flags, std::uint32_t stream_id,
                   std::int64_t now) noexcept {
  auto* h = reinterpret_cast<FrameHeader*>(frame);
  // Session 0 and sequence 0: the transport's writer owns sessions and sequences.
  core::write_frame_header(h, frame_len, flags, stream_id, 0, now);
  h->sequence = 0;
}

// The payload copy of every offer path (a 0-byte payload copies nothing: its data() may be
// null). Up to 64 bytes (market data's typical message) it is two to four overlapping
// fixed-size moves, inlined: a call into libc's memcpy - the call, its size dispatch and the
// register spills around it in offer() - costs more instructions than the copy itself there.
// Larger payloads go to memcpy.
inline void copy_payload(std::byte* dst, const std::byte* src, std::size_t n) noexcept {
  if (__builtin_expect(n > 64, 0)) {
    std::memcpy(dst, src, n);
  } else if (n > 32) {
    std::memcpy(dst, src, 32);
    std::memcpy(dst + n - 32, src + n - 32, 32);
  } else if (n > 16) {
    std::memcpy(dst, src, 16);
    std::memcpy(dst + n - 16, src + n - 16, 16);
  } else if (n >= 8) {
    std::memcpy(dst, src, 8);
    std::memcpy(dst + n - 8, src + n - 8, 8);
  } else if (n >= 4) {
    std::memcpy(dst, src, 4);
    std::memcpy(dst + n - 4, src + n - 4, 4);
  } else if (n >= 2) {
    std::memcpy(dst, src, 2);
    std::memcpy(dst + n - 2, src + n - 2, 2);
  } else if (n == 1) {
    *dst = *src;
  }
}

void start_trace(std::byte* block, std::int64_t now, bool queued) noexcept {
  auto* t = reinterpret_cast<StageTrace*>(block);
  std::memset(t, 0, sizeof *t);
  core::stamp(t, core::Stage::kOffer, now);
  if (!queued) core::stamp(t, core::Stage::kPost, now);  // inline: offer is the post
}
}  // namespace

// Every mode (kShmDirect included: its endpoint's kind is kShm) asks the endpoint directly.
bool PublisherImpl::transport_connected() const noexcept {
  return with_tx(kind, ep.get(), [](auto* e) { return e->connected(); });
}

bool PublisherImpl::connected() const noexcept {
  if (closed.load(std::memory_order_relaxed)) return false;
  return transport_connected();
}

// Common admission checks; returns 0 when the message may proceed.
std::int64_t PublisherImpl::check_state(std::size_t len, bool traced) noexcept {
  if (__builtin_expect(closed.load(std::memory_order_relaxed), 0)) return kClosed;
  (void)traced;  // max_payload already reserves the trace block on traced streams
  if (__builtin_expect(len > max_payload, 0)) {
    counters.too_large.add();
    return kMessageTooLarge;
  }
  if (__builtin_expect(!transport_connected(), 0)) {
    counters.not_connected.add();
    // Inline modes: the application thread runs the transport, and what would connect it
    // runs in the transport's timers, which offers that fail here never reach otherwise: shm's
    // segment checks (a truncated segment is replaced) ride on the heartbeat; UDP and RDMA
    // hear their subscribers' status and joins in housekeeping. An application that spins on
    // offer() without calling service() then still reconnects (cold path: a failed offer).
    if (mode != Mode::kQueued) {
      const std::int64_t now = core::Clock::now_ns();
      (void)run_duties(now);  // as service(): the context's subscribers not yet polled
      if (mode == Mode::kShmDirect) {
        shm->maybe_heartbeat(now);
      } else {
        (void)with_tx(kind, ep.get(), [now](auto* e) { return e->housekeeping_st(now); });
      }
    }
    return kNotConnected;
  }
  return 0;
}

bool PublisherImpl::pop_slot(std::uint32_t* slot) noexcept {
  if (free_slots.pop(slot)) return true;
  std::uint32_t back[core::kMaxBurst];
  std::uint32_t n;
  if (mode == Mode::kQueued) {
    n = channel->returns.pop_burst(back, core::kMaxBurst);
  } else {
    // Inline: this thread reaps the transport's completions itself.
    n = with_tx(kind, ep.get(), [&](auto* e) {
      const std::uint32_t k = e->reap_st({back, core::kMaxBurst});
      (void)e->housekeeping_st(core::Clock::now_ns());
      return k;
    });
  }
  for (std::uint32_t i = 0; i < n; ++i) free_slots.push(back[i]);
  return free_slots.pop(slot);
}

std::int64_t PublisherImpl::submit(std::uint32_t slot, std::uint32_t frame_len, std::uint16_t flags) noexcept {
  const transport::TxDesc d{slot, frame_len, flags, 0, 0};
  if (mode == Mode::kQueued) {
    if (flags & core::kFlagTraced) {
      core::stamp(reinterpret_cast<StageTrace*>(pool->slot(slot) + kFrameHeaderSize), core::Stage::kRingEnqueue,
                  core::Clock::now_ns());
    }
    if (!channel->submit.try_push(d)) {
      free_slots.push(slot);
      counters.bp_ring_full.add();
      return kBackPressured;
    }
    poller->wake();  // after the push (release): pairs with the poller's sleep announcement
  } else if (with_tx(kind, ep.get(), [&](auto* e) { return e->post_st({&d, 1}); }) != 1) {
    free_slots.push(slot);
    counters.bp_transport.add();
    return kBackPressured;
  }
  offered += core::align_up(frame_len, core::kFrameAlignment);
  return static_cast<std::int64_t>(offered);
}

std::int64_t PublisherImpl::offer(std::span<const std::byte> payload) noexcept {
  // The common case - inline shm, untraced, open - decided by one relaxed load (fast_path: set
  // at open, cleared by close(); it also says whether the stream stamps, so that the fast path
  // is compiled once for each and tests neither); everything else, and every failure to admit
  // or claim, takes offer_general(), which sorts out and counts the reason. Each path is a
  // function of its own reached by a tail call: inlined here, the fast path's register saves
  // would be made before the test, by every other mode too.
  const std::uint8_t f = fast_path.load(std::memory_order_relaxed);
  if (__builtin_expect(f == kFastShmStamped, 1)) return offer_shm<true>(payload);
  if (f == kFastShmUnstamped) return offer_shm<false>(payload);
  return offer_general(payload);
}

// The fast path calls nothing on its way: whatever is rare (a clock update in progress, a
// claim that needs padding or a limit refresh) leaves through a tail call to offer_general()
// before anything is written; a sleeping reader or a due heartbeat through offer_finish()
// after the commit.
template <bool kStamp>
std::int64_t PublisherImpl::offer_shm(std::span<const std::byte> payload) noexcept {
  const std::size_t len = payload.size();
  if (__builtin_expect(len > max_payload || !shm->connected(), 0)) return offer_general(payload);
  std::int64_t now = 0;
  if (kStamp && __builtin_expect(!core::Clock::try_now_ns(&now), 0)) return offer_general(payload);
  transport::shm::LogWriter& w = shm->writer();
  transport::shm::LogWriter::Claim c;
  if (__builtin_expect(!w.try_claim_fast(static_cast<std::uint32_t>(kFrameHeaderSize + len), &c), 0)) {
    return offer_general(payload);
  }
  copy_payload(c.frame + kFrameHeaderSize, payload.data(), len);
  const bool wake = w.commit_no_wake(c, core::kFlagNone, now);
  // After the commit: the counters' stores need not precede the frame's (their readers poll).
  counters.messages.add();
  counters.bytes.add(len);
  const auto r = static_cast<std::int64_t>(c.position + c.aligned);  // == w.position()
  // offer_heartbeat()'s test, the call left to offer_finish().
  const bool beat = kStamp ? shm->heartbeat_due(now) : (++unstamped & 1023) == 0;
  if (__builtin_expect(wake, 0)) return offer_finish(r, now, true, beat);
  if (__builtin_expect(beat, 0)) return offer_finish(r, now, false, true);
  return r;
}

// After a fast-path commit: wake the sleeping readers (before a heartbeat's segment check may
// replace the segment they sleep on), then the heartbeat. Returns `r`.
std::int64_t PublisherImpl::offer_finish(std::int64_t r, std::int64_t now, bool wake, bool beat) noexcept {
  if (wake) shm->writer().wake();
  if (beat) shm->maybe_heartbeat(stamp ? now : core::Clock::now_ns());
  return r;
}

std::int64_t PublisherImpl::offer_general(std::span<const std::byte> payload) noexcept {
  const bool traced = take_trace();
  if (__builtin_expect(!admit(payload.size()), 0)) {
    if (std::int64_t r = check_state(payload.size(), traced); r != 0) return r;
  }
  const std::uint32_t frame_len =
      static_cast<std::uint32_t>(kFrameHeaderSize + (traced ? kTraceBytes : 0) + payload.size());
  const std::int64_t now = offer_clock(traced);
  const std::uint16_t flags = traced ? core::kFlagTraced : core::kFlagNone;
  if (mode == Mode::kShmDirect) {
    transport::shm::LogWriter& w = shm->writer();
    transport::shm::LogWriter::Claim c;
    if (!w.try_claim(frame_len, &c)) {
      counters.bp_log_full.add();
      // The slowest subscriber holds the log: if its process died, only this thread's duties
      // free its slot (there is no poller), so a publisher retrying offer() recovers by itself.
      shm->maybe_heartbeat(now != 0 ? now : core::Clock::now_ns());
      return kBackPressured;
    }
    std::byte* p = c.frame + kFrameHeaderSize;
    if (traced) {
      start_trace(p, now, false);
      p += kTraceBytes;
    }
    copy_payload(p, payload.data(), payload.size());
    w.commit(c, flags, now);
    counters.messages.add();
    counters.bytes.add(payload.size());
    offer_heartbeat(now);
    return static_cast<std::int64_t>(w.position());
  }
  if (mode == Mode::kInlinePost && kind == EndpointKind::kUdp && !traced) {
    // Inline UDP: the frame is built in place in the send log (UdpTxEndpoint::claim_direct):
    // no pool slot to take and reap, no second copy. Traced frames take the general path.
    auto* e = static_cast<transport::udp::UdpTxEndpoint*>(ep.get());
    std::byte* frame = e->claim_direct(frame_len);
    if (__builtin_expect(frame == nullptr, 0)) {
      counters.bp_transport.add();
      return kBackPressured;
    }
    format_header(frame, frame_len, flags, stream_id, now);
    copy_payload(frame + kFrameHeaderSize, payload.data(), payload.size());
    e->commit_direct(frame_len, now);
    offered += core::align_up(frame_len, core::kFrameAlignment);
    counters.messages.add();
    counters.bytes.add(payload.size());
    return static_cast<std::int64_t>(offered);
  }
  std::uint32_t slot;
  if (!pop_slot(&slot)) {
    counters.bp_no_slot.add();
    return kBackPressured;
  }
  std::byte* frame = pool->slot(slot);
  format_header(frame, frame_len, flags, stream_id, now);
  std::byte* p = frame + kFrameHeaderSize;
  if (traced) {
    start_trace(p, now, mode == Mode::kQueued);
    p += kTraceBytes;
  }
  copy_payload(p, payload.data(), payload.size());  // an empty payload may have no data()
  const std::int64_t r = submit(slot, frame_len, flags);
  if (r >= 0) {
    counters.messages.add();
    counters.bytes.add(payload.size());
  }
  return r;
}

std::int64_t PublisherImpl::offer_batch(std::span<const std::span<const std::byte>> msgs) noexcept {
  if (mode != Mode::kShmDirect) {
    std::int64_t n = 0;
    for (const auto& m : msgs) {
      const std::int64_t r = offer(m);
      if (r < 0) return n > 0 ? n : r;
      ++n;
    }
    return n;
  }
  if (msgs.empty()) return 0;
  transport::shm::LogWriter& w = shm->writer();
  const std::int64_t now = offer_clock(trace);  // one read for the batch (traced streams: the traces' stamp)
  std::int64_t n = 0;
  std::uint64_t bytes = 0;
  for (const auto& m : msgs) {
    const bool traced = take_trace();
    if (std::int64_t r = check_state(m.size(), traced); r != 0) {
      if (n == 0) return r;
      break;
    }
    const std::uint32_t frame_len =
        static_cast<std::uint32_t>(kFrameHeaderSize + (traced ? kTraceBytes : 0) + m.size());
    transport::shm::LogWriter::Claim c;
    if (!w.try_claim(frame_len, &c)) {
      counters.bp_log_full.add();
      if (n == 0) {
        shm->maybe_heartbeat(core::Clock::now_ns());  // as offer(): a dead subscriber is reaped
        return kBackPressured;
      }
      break;
    }
    std::byte* p = c.frame + kFrameHeaderSize;
    if (traced) {
      start_trace(p, now, false);
      p += kTraceBytes;
    }
    copy_payload(p, m.data(), m.size());
    w.commit_deferred(c, traced ? core::kFlagTraced : core::kFlagNone, now);
    bytes += m.size();
    ++n;
  }
  w.flush_tail();
  counters.messages.add(static_cast<std::uint64_t>(n));
  counters.bytes.add(bytes);
  offer_heartbeat(now);
  return n;
}

std::int64_t PublisherImpl::claim(std::size_t len, Claim& c) noexcept {
  if (c.active_) return kClosed;  // misuse: a claim is already open on this Claim object
  const bool traced = take_trace();
  if (__builtin_expect(!admit(len), 0)) {
    if (std::int64_t r = check_state(len, traced); r != 0) return r;
  }
  const std::uint32_t frame_len = static_cast<std::uint32_t>(kFrameHeaderSize + (traced ? kTraceBytes : 0) + len);
  const std::int64_t now = offer_clock(traced);
  c.flags_ = traced ? core::kFlagTraced : core::kFlagNone;
  c.frame_length_ = frame_len;
  c.size_ = len;
  if (mode == Mode::kShmDirect) {
    transport::shm::LogWriter::Claim lc;
    if (!shm->writer().try_claim(frame_len, &lc)) {
      counters.bp_log_full.add();
      shm->maybe_heartbeat(now != 0 ? now : core::Clock::now_ns());  // as offer(): a dead subscriber is reaped
      return kBackPressured;
    }
    c.frame_ = lc.frame;
    c.position_ = lc.position;
    c.aligned_ = lc.aligned;
  } else {
    std::uint32_t slot;
    if (!pop_slot(&slot)) {
      counters.bp_no_slot.add();
      return kBackPressured;
    }
    c.slot_ = slot;
    c.frame_ = pool->slot(slot);
    c.position_ = offered;
    c.aligned_ = static_cast<std::uint32_t>(core::align_up(frame_len, core::kFrameAlignment));
  }
  c.data_ = c.frame_ + kFrameHeaderSize;
  if (traced) {
    start_trace(c.data_, now, mode == Mode::kQueued);
    c.data_ += kTraceBytes;
  }
  c.active_ = true;
  return static_cast<std::int64_t>(c.position_ + c.aligned_);
}

std::int64_t PublisherImpl::commit(Claim& c) noexcept {
  if (!c.active_) return kClosed;
  c.active_ = false;
  const std::int64_t now = offer_clock((c.flags_ & core::kFlagTraced) != 0);
  if (mode == Mode::kShmDirect) {
    transport::shm::LogWriter& w = shm->writer();
    const transport::shm::LogWriter::Claim lc{c.frame_, c.position_, c.frame_length_, c.aligned_};
    w.commit(lc, c.flags_, now);
    counters.messages.add();
    counters.bytes.add(c.size_);
    offer_heartbeat(now);
    return static_cast<std::int64_t>(w.position());
  }
  format_header(c.frame_, c.frame_length_, c.flags_, stream_id, now);
  const std::int64_t r = submit(c.slot_, c.frame_length_, c.flags_);
  if (r >= 0) {
    counters.messages.add();
    counters.bytes.add(c.size_);
  }
  return r;
}

void PublisherImpl::abort(Claim& c) noexcept {
  if (!c.active_) return;
  c.active_ = false;
  if (mode == Mode::kShmDirect) {
    shm->writer().abort({c.frame_, c.position_, c.frame_length_, c.aligned_});
  } else {
    free_slots.push(c.slot_);
  }
}

int PublisherImpl::service() noexcept {
  if (closed.load(std::memory_order_relaxed) || mode == Mode::kQueued) return 0;
  const std::int64_t now = core::Clock::now_ns();
  core::Clock::maintain(now);  // inline publishers have no poller to do it
  // The context's duty call first: its subscribers not yet polled attach and answer their
  // publishers (see InlineDuties), so a thread that waits for is_connected() calling only
  // service() connects.
  const int duties_work = run_duties(now);
  if (mode == Mode::kShmDirect) return duties_work + shm->housekeeping_st(now);
  std::uint32_t back[core::kMaxBurst];
  return duties_work + with_tx(kind, ep.get(), [&](auto* e) {
           const std::uint32_t n = e->reap_st({back, core::kMaxBurst});
           for (std::uint32_t i = 0; i < n; ++i) free_slots.push(back[i]);
           return static_cast<int>(n) + e->housekeeping_st(now);
         });
}

void PublisherImpl::close() noexcept {
  std::lock_guard<std::mutex> lock(control_mu);
  fast_path.store(kFastNone, std::memory_order_relaxed);  // as `closed`: offer() then sees kClosed
  if (closed.exchange(true)) return;
  if (ctx != nullptr) ctx->release_publisher(this);
  ctx = nullptr;
}

}  // namespace detail

// ---- handle -------------------------------------------------------------------------------------

Publisher::Publisher(std::shared_ptr<detail::PublisherImpl> impl) : impl_(std::move(impl)), p_(impl_.get()) {}
Publisher::Publisher(Publisher&& o) noexcept : impl_(std::move(o.impl_)), p_(o.p_) { o.p_ = nullptr; }
Publisher& Publisher::operator=(Publisher&& o) noexcept {
  if (this != &o) {
    close();
    impl_ = std::move(o.impl_);
    p_ = o.p_;
    o.p_ = nullptr;
  }
  return *this;
}
Publisher::~Publisher() { close(); }

std::int64_t Publisher::offer(std::span<const std::byte> payload) noexcept {
  return p_ != nullptr ? p_->offer(payload) : kClosed;
}
std::int64_t Publisher::offer_batch(std::span<const std::span<const std::byte>> msgs) noexcept {
  return p_ != nullptr ? p_->offer_batch(msgs) : kClosed;
}
std::int64_t Publisher::claim(std::size_t len, Claim& claim) noexcept {
  return p_ != nullptr ? p_->claim(len, claim) : kClosed;
}
std::int64_t Publisher::commit(Claim& claim) noexcept { return p_ != nullptr ? p_->commit(claim) : kClosed; }
void Publisher::abort(Claim& claim) noexcept {
  if (p_ != nullptr) p_->abort(claim);
}
int Publisher::service() noexcept { return p_ != nullptr ? p_->service() : 0; }
std::int64_t Publisher::send_completion_ns(std::uint64_t sequence) const noexcept {
  return p_ != nullptr && p_->send_log != nullptr ? p_->send_log->find(sequence) : 0;
}
bool Publisher::is_connected() const noexcept { return p_ != nullptr && p_->connected(); }
bool Publisher::is_closed() const noexcept { return p_ == nullptr || p_->closed.load(std::memory_order_relaxed); }
std::size_t Publisher::max_payload() const noexcept { return p_ != nullptr ? p_->max_payload : 0; }
std::uint32_t Publisher::stream_id() const noexcept { return p_ != nullptr ? p_->stream_id : 0; }
std::string_view Publisher::topic() const noexcept { return p_ != nullptr ? std::string_view(p_->topic) : ""; }
void Publisher::close() noexcept {
  if (p_ != nullptr) p_->close();
}

std::string_view result_name(std::int64_t r) {
  if (r >= 0) return "ok";
  switch (r) {
    case kBackPressured:
      return "back-pressured";
    case kNotConnected:
      return "not connected";
    case kClosed:
      return "closed";
    case kMessageTooLarge:
      return "message too large";
  }
  return "unknown";
}

std::string_view StageTimes::name(int stage) {
  if (stage == kKernelRx) return "kernel_rx";  // receiver-side only: not a core::Stage of the wire block
  return stage >= 0 && stage < static_cast<int>(core::kStageNames.size())
             ? core::kStageNames[static_cast<std::size_t>(stage)]
             : "?";
}

}  // namespace pollux
