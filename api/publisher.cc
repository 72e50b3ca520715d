#include <cstring>

#include "api/internal.h"
#include "core/copy.h"
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

void start_trace(std::byte* block, std::int64_t now, bool queued) noexcept {
  auto* t = reinterpret_cast<StageTrace*>(block);
  std::memset(t, 0, sizeof *t);
  core::stamp(t, core::Stage::kOffer, now);
  if (!queued) core::stamp(t, core::Stage::kPost, now);  // inline: offer is the post
}
}  // namespace

bool PublisherImpl::connected() const noexcept {
  if (closed.load(std::memory_order_relaxed)) return false;
  return tx->connected();
}

// A direct claim the endpoint refused, counted by cause; always kBackPressured.
std::int64_t PublisherImpl::claim_refused(transport::ClaimResult r) noexcept {
  (r == transport::ClaimResult::kLogFull ? counters.bp_log_full : counters.bp_transport).add();
  return kBackPressured;
}

// Common admission checks; returns 0 when the message may proceed.
std::int64_t PublisherImpl::check_state(std::size_t len, bool traced) noexcept {
  if (__builtin_expect(closed.load(std::memory_order_relaxed), 0)) return kClosed;
  (void)traced;  // max_payload already reserves the trace block on traced streams
  if (__builtin_expect(len > max_payload, 0)) {
    counters.too_large.add();
    return kMessageTooLarge;
  }
  if (__builtin_expect(!tx->connected(), 0)) {
    counters.not_connected.add();
    // Inline modes: the application thread runs the transport, and what would connect it
    // runs in the transport's timers, which offers that fail here never reach otherwise: shm's
    // segment checks (a truncated segment is replaced) ride on the heartbeat; UDP and RDMA
    // hear their subscribers' status and joins in housekeeping. An application that spins on
    // offer() without calling service() then still reconnects (cold path: a failed offer).
    if (mode != Mode::kQueued) {
      const std::int64_t now = core::Clock::now_ns();
      (void)run_duties(now);  // as service(): the context's subscribers not yet polled
      (void)tx->refused_st(now);
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
    n = tx->reap_st({back, core::kMaxBurst});
    (void)tx->housekeeping_st(core::Clock::now_ns());
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
  } else if (tx->post_st({&d, 1}) != 1) {
    free_slots.push(slot);
    counters.bp_transport.add();
    return kBackPressured;
  }
  offered += core::align_up(frame_len, core::kFrameAlignment);
  return static_cast<std::int64_t>(offered);
}

std::int64_t PublisherImpl::offer(std::span<const std::byte> payload) noexcept {
  // The common case - inline on an endpoint with a direct offer, untraced, open - decided by
  // one relaxed load (fast_path: set at open, cleared by close()), then one jump into the
  // endpoint's own code (TxDirect::offer, taken at open), which counts the message. Everything
  // else takes offer_general(), which sorts out and counts the reason - also every offer the
  // endpoint does not take (not connected, a claim that needs padding, ...): it hands those to
  // offer_general() itself (bound at open).
  if (__builtin_expect(fast_path.load(std::memory_order_relaxed), 1)) {
    return direct.offer(tx, payload.data(), payload.size());
  }
  return offer_general(payload);
}

std::int64_t PublisherImpl::general_offer(void* self, const std::byte* payload, std::size_t len) noexcept {
  return static_cast<PublisherImpl*>(self)->offer_general({payload, len});
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
  const bool in_place = mode == Mode::kDirect || (mode == Mode::kInlinePost && !traced && direct.claim != nullptr);
  if (in_place) {
    // The frame is built in the endpoint's own buffer (the shm log; UDP's send log for
    // untraced frames): no pool slot to take and reap, no second copy.
    transport::TxClaim c;
    if (const transport::ClaimResult cr = direct.claim(tx, frame_len, now, &c);
        __builtin_expect(cr != transport::ClaimResult::kClaimed, 0)) {
      return claim_refused(cr);
    }
    std::byte* p = c.frame + kFrameHeaderSize;
    if (traced) {
      start_trace(p, now, false);
      p += kTraceBytes;
    }
    core::copy_payload(p, payload.data(), payload.size());
    std::int64_t r = direct.commit(tx, c, flags, now, false);
    if (mode == Mode::kInlinePost) {
      offered += core::align_up(frame_len, core::kFrameAlignment);
      r = static_cast<std::int64_t>(offered);
    }
    counters.messages.add();
    counters.bytes.add(payload.size());
    return r;
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
  core::copy_payload(p, payload.data(), payload.size());  // an empty payload may have no data()
  const std::int64_t r = submit(slot, frame_len, flags);
  if (r >= 0) {
    counters.messages.add();
    counters.bytes.add(payload.size());
  }
  return r;
}

std::int64_t PublisherImpl::offer_batch(std::span<const std::span<const std::byte>> msgs) noexcept {
  if (mode != Mode::kDirect) {
    std::int64_t n = 0;
    for (const auto& m : msgs) {
      const std::int64_t r = offer(m);
      if (r < 0) return n > 0 ? n : r;
      ++n;
    }
    return n;
  }
  if (msgs.empty()) return 0;
  // Open and connected: asked once for the batch (a direct endpoint is this thread's, so neither
  // changes while the batch is written); only the lengths are per message.
  if (__builtin_expect(closed.load(std::memory_order_relaxed) || !tx->connected(), 0)) {
    return check_state(msgs.front().size(), false);
  }
  const std::int64_t now = offer_clock(trace);  // one read for the batch (traced streams: the traces' stamp)
  std::int64_t n = 0;
  std::uint64_t bytes = 0;
  for (const auto& m : msgs) {
    const bool traced = take_trace();
    if (__builtin_expect(m.size() > max_payload, 0)) {
      const std::int64_t r = check_state(m.size(), traced);
      if (n == 0) return r;
      break;
    }
    const std::uint32_t frame_len =
        static_cast<std::uint32_t>(kFrameHeaderSize + (traced ? kTraceBytes : 0) + m.size());
    transport::TxClaim c;
    if (const transport::ClaimResult cr = direct.claim(tx, frame_len, now, &c);
        cr != transport::ClaimResult::kClaimed) {
      const std::int64_t r = claim_refused(cr);
      if (n == 0) return r;
      break;
    }
    std::byte* p = c.frame + kFrameHeaderSize;
    if (traced) {
      start_trace(p, now, false);
      p += kTraceBytes;
    }
    core::copy_payload(p, m.data(), m.size());
    (void)direct.commit(tx, c, traced ? core::kFlagTraced : core::kFlagNone, now, /*deferred=*/true);
    bytes += m.size();
    ++n;
  }
  direct.flush(tx, now);
  counters.messages.add(static_cast<std::uint64_t>(n));
  counters.bytes.add(bytes);
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
  if (mode == Mode::kDirect) {
    transport::TxClaim tc;
    if (const transport::ClaimResult cr = direct.claim(tx, frame_len, now, &tc);
        cr != transport::ClaimResult::kClaimed) {
      return claim_refused(cr);
    }
    c.frame_ = tc.frame;
    c.position_ = tc.position;
    c.aligned_ = tc.aligned;
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
  if (mode == Mode::kDirect) {
    const std::int64_t r =
        direct.commit(tx, transport::TxClaim{c.frame_, c.position_, c.frame_length_, c.aligned_}, c.flags_, now, false);
    counters.messages.add();
    counters.bytes.add(c.size_);
    return r;
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
  if (mode == Mode::kDirect) {
    direct.abort(tx, transport::TxClaim{c.frame_, c.position_, c.frame_length_, c.aligned_});
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
  if (mode == Mode::kDirect) return duties_work + tx->housekeeping_st(now);
  std::uint32_t back[core::kMaxBurst];
  const std::uint32_t n = tx->reap_st({back, core::kMaxBurst});
  for (std::uint32_t i = 0; i < n; ++i) free_slots.push(back[i]);
  return duties_work + static_cast<int>(n) + tx->housekeeping_st(now);
}

void PublisherImpl::close() noexcept {
  std::lock_guard<std::mutex> lock(control_mu);
  fast_path.store(false, std::memory_order_relaxed);  // as `closed`: offer() then sees kClosed
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
