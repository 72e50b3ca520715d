// Single-writer broadcast log over a shm Segment: the writer never waits for a lossy reader;
// every reader keeps its own position; a lapped reader learns exactly how many messages it lost.
//
// Frame publication (writer, per frame):
//   1. claim: [pad frame to the ring's end if the frame does not fit] + reserve the frame;
//      zero the sequence word of the header slot that follows the frame ("zero-ahead"), so a
//      reader at the live edge always sees 0 there, never a stale header from an older lap.
//   2. write payload and header fields, then store the header's `sequence` with release: a
//      reader that acquire-loads a sequence equal to the one it expects sees the whole frame.
//   3. store `tail` (position after the frame) and issue a release fence, so every store of
//      the NEXT frame is ordered after this tail value (the seqlock pattern).
//   A batch (commit_deferred ... flush_tail) publishes the tail once, and its first frame's
//   sequence only then, just before that tail: readers see the batch whole or not at all.
// Reader: at position p it expects sequence s. It acquire-loads the sequence word at p:
//   == s -> frame complete; 0 -> nothing yet (live edge); anything else -> possibly lapped.
// Lapping is decided against `tail`: bytes the writer may be overwriting right now belong to
// old positions within `margin` (= 2 * max_frame + 64) after tail - log_size, so data at
// q >= tail - log_size + margin is intact. Readers check this (acquire fence, then load tail)
// after delivering each batch (a failed check is reported as an overrun gap: the zero-copy
// views handed out may have been torn), when a header looks wrong, and every 256 empty polls.
// Data stores are plain memcpy/field stores ordered by the fences above, as in every seqlock;
// the sequence and tail words are atomics.
//
// Interrupt mode (docs/ARCHITECTURE.md, "Wakeup protocol: shm"): a reader that wants to sleep
// sets its bit in WakeState::sleepers, runs the store->load barrier, re-checks the tail and the
// header slot at its position (LogReader::idle_at_edge) and then waits on WakeState::word. The
// writer, after every tail store, runs its half of the barrier and loads `sleepers`; only when
// a bit is set does it clear them, bump `word` and FUTEX_WAKE (LogWriter::wake_sleepers).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>

#include "core/clock.h"
#include "core/config.h"
#include "core/frame.h"
#include "core/trace.h"
#include "core/wakeup.h"
#include "transport/shm/shm_config.h"
#include "transport/shm/shm_segment.h"
#include "transport/transport.h"

namespace pollux::transport::shm {

inline std::atomic_ref<std::uint64_t> seq_word(std::byte* frame) noexcept {
  return std::atomic_ref<std::uint64_t>(reinterpret_cast<core::FrameHeader*>(frame)->sequence);
}

inline std::uint64_t margin_for(std::uint64_t log_size) noexcept { return 2 * (log_size / 32) + 64; }

// Smallest frame_length a frame with these flags can have: a traced frame carries its trace
// block (a shorter one would make `length - header - trace` wrap to a 4 GiB payload).
inline constexpr std::uint32_t kMinTracedFrame = core::min_frame_length(core::kFlagTraced);
// Sequences at or above this are corrupt (as the UDP protocol's kMaxSequence): a publisher at 1e9
// messages/s needs 146 years to reach it, and resynchronising on such a value would let
// `expected_` wrap past 2^64 and delivery go backwards.
inline constexpr std::uint64_t kMaxShmSequence = std::uint64_t{1} << 62;

// A log position a frame can start at: 32-byte aligned (so the 32-byte header lies inside the
// log) and far from overflow. Tails and checkpoints read from the segment are checked with it.
inline bool valid_position(std::uint64_t p) noexcept {
  return (p & (core::kFrameAlignment - 1)) == 0 && p <= kMaxLogPosition;
}

// The log of a segment as its writer and its readers address it: the first members of both,
// in this order (the fields every access uses, at the start of the object).
struct LogMapping {
  Segment* seg_ = nullptr;
  std::byte* log_ = nullptr;
  std::uint64_t size_ = 0, mask_ = 0, margin_ = 0;
  std::uint32_t block_shift_ = 0;  // log_size / kCheckpoints = 1 << block_shift_

  void map(Segment* seg) noexcept {
    seg_ = seg;
    log_ = seg->log();
    size_ = seg->log_size();
    mask_ = size_ - 1;
    margin_ = margin_for(size_);
    block_shift_ = static_cast<std::uint32_t>(__builtin_ctzll(size_ / kCheckpoints));
  }
};

class LogWriter : private LogMapping {
 public:
  struct Claim {
    std::byte* frame = nullptr;  // FrameHeader at frame, payload after it
    std::uint64_t position = 0;
    std::uint32_t length = 0;  // frame_length
    std::uint32_t aligned = 0;
  };

  void init(Segment* seg, shm::FlowControl fc) noexcept {
    map(seg);
    ws_ = &seg->header()->writer;
    cps_ = &seg->header()->checkpoints;
    wake_ = &seg->header()->wake;
    stream_id_ = seg->layout().stream_id;
    session_id_ = seg->layout().session_id;
    max_frame_ = seg->layout().max_frame;
    slots_ = seg->layout().subscriber_slots;
    // Written by this process at create (Segment::create): registered for the global expedited
    // membarrier, or not - then every tail store is followed by a full fence.
    full_fence_ = (seg->layout().wake_flags & kWakeWriterMembarrier) == 0;
    backpressure_ = fc == shm::FlowControl::kBackpressure;
    pos_ = 0;
    seq_ = 1;
    next_checkpoint_ = 0;
    limit_ = backpressure_ ? 0 : ~std::uint64_t{0};
  }

  std::uint32_t max_frame() const noexcept { return max_frame_; }
  std::uint64_t position() const noexcept { return pos_; }
  std::uint64_t next_sequence() const noexcept { return seq_; }
  std::uint32_t stream_id() const noexcept { return stream_id_; }
  std::uint32_t session_id() const noexcept { return session_id_; }
  std::uint64_t back_pressure_events() const noexcept { return bp_events_; }
  // Times this writer woke sleeping readers (a FUTEX_WAKE each), and whether it fences fully.
  std::uint64_t wakes() const noexcept { return wakes_; }
  bool full_fence() const noexcept { return full_fence_; }

  // Subscribers currently attached (they register themselves in the segment).
  std::uint32_t subscribers() const noexcept { return ws_->subscribers.load(std::memory_order_relaxed); }

  // Reserves a frame of `frame_length` bytes (header included). False: back-pressured (only
  // with flow_control = backpressure). The caller checked frame_length <= max_frame().
  [[nodiscard]] bool try_claim(std::uint32_t frame_length, Claim* c) noexcept {
    // Members in locals first: the stores into the log below are through pointers the compiler
    // must assume may alias this object, and would otherwise make it reload each one.
    std::byte* const log = log_;
    const std::uint64_t mask = mask_, size = size_;
    std::uint64_t pos = pos_;
    const std::uint32_t aligned = static_cast<std::uint32_t>(core::align_up(frame_length, core::kFrameAlignment));
    std::uint64_t idx = pos & mask;
    const std::uint64_t pad = idx + aligned > size ? size - idx : 0;
    const std::uint64_t end = pos + pad + aligned;
    if (__builtin_expect(end > limit_, 0)) {
      refresh_limit();
      if (end > limit_) {
        ++bp_events_;
        return false;
      }
    }
    if (__builtin_expect(pad != 0, 0)) {
      // Zero-ahead for the frame we are about to claim at the start of the ring, then publish
      // the padding frame (it carries the sequence the next message will have).
      seq_word(log).store(0, std::memory_order_relaxed);
      publish_padding(log + idx, pos, static_cast<std::uint32_t>(pad));
      pos += pad;  // == pos_ now, at the start of the ring
      idx = 0;
    }
    claimed(log, mask, pos, idx, frame_length, aligned, c);
    return true;
  }

  // Publishes a claimed frame. Header fields other than the sequence are written here.
  // commit_deferred() + publish_tail(), without the deferred-tail bookkeeping (the tail is
  // published here; publish_tail() clears what earlier deferred commits left).
  void commit(const Claim& c, std::uint16_t flags, std::int64_t timestamp_ns) noexcept {
    release_batch_head();
    unpublished_ = 0;  // as publish_tail(): this tail covers every deferred commit before it
    if (__builtin_expect(commit_no_wake(c, flags, timestamp_ns), 0)) wake_sleepers();
  }

  // offer()'s fast path (PublisherImpl::offer): try_claim() for a frame that fits before the
  // ring's end and below the limit - no padding frame, no refresh of the limit, no call. False:
  // nothing was done; try_claim() decides.
  [[nodiscard]] bool try_claim_fast(std::uint32_t frame_length, Claim* c) noexcept {
    std::byte* const log = log_;
    const std::uint64_t mask = mask_, pos = pos_;
    const std::uint32_t aligned = static_cast<std::uint32_t>(core::align_up(frame_length, core::kFrameAlignment));
    const std::uint64_t idx = pos & mask;
    if (__builtin_expect(idx + aligned > size_ || pos + aligned > limit_, 0)) return false;
    claimed(log, mask, pos, idx, frame_length, aligned, c);
    return true;
  }

  // commit() without the wake-up: true when a reader sleeps and wake() must be called now (a
  // hot caller then leaves through a cold call instead of keeping its state across one). Only
  // outside a batch: nothing deferred is pending (offer_batch() ends with flush_tail()).
  [[nodiscard]] bool commit_no_wake(const Claim& c, std::uint16_t flags, std::int64_t timestamp_ns) noexcept {
    const std::uint64_t seq = seq_;
    const std::uint64_t next = c.position + c.aligned;
    write_header(c.frame, c.length, flags, timestamp_ns);
    seq_word(c.frame).store(seq, std::memory_order_release);  // pairs with LogReader's acquire
    checkpoint(c.position);
    seq_ = seq + 1;
    pos_ = next;
    return publish_tail_no_wake(next);
  }
  // After commit_no_wake() returned true.
  void wake() noexcept { wake_sleepers(); }

  // As commit(), but the tail is published later (flush_tail(), or automatically once the
  // unpublished frames reach max_frame bytes, which keeps every in-progress write inside the
  // readers' safety margin). For batches.
  //
  // The first frame of a batch holds its sequence back until the tail is published: readers
  // walk in order, so none sees any frame of the batch before it sees them all. A reader at the
  // live edge spins on the header line of the next frame; published one by one, every frame's
  // line would be pulled to the reader's core between the writer's two stores into it (the
  // zero-ahead and the commit), and the writer would wait for it back each time. Held back, only
  // the batch's first line goes back and forth; the others are written while the reader still
  // spins on it. Measured: docs/BENCHMARKS.md, "Replay into a subscriber on another core".
  void commit_deferred(const Claim& c, std::uint16_t flags, std::int64_t timestamp_ns) noexcept {
    write_header(c.frame, c.length, flags, timestamp_ns);
    if (batch_head_ == nullptr) {
      batch_head_ = c.frame;
      batch_head_seq_ = seq_;
    } else {
      seq_word(c.frame).store(seq_, std::memory_order_release);  // pairs with LogReader's acquire
    }
    checkpoint(c.position);
    ++seq_;
    pos_ = c.position + c.aligned;
    unpublished_ += c.aligned;
    if (unpublished_ >= max_frame_) publish_tail();
  }

  void flush_tail() noexcept {
    if (unpublished_ != 0) publish_tail();
  }

  // Gives a claim back: it becomes a padding frame (readers skip it).
  void abort(const Claim& c) noexcept { publish_padding(c.frame, c.position, c.aligned); }

  void heartbeat(std::int64_t now_ns) noexcept {
    ws_->heartbeat_ns.store(now_ns, std::memory_order_relaxed);
    ws_->next_sequence.store(seq_, std::memory_order_relaxed);
  }

  void close() noexcept {
    // Release: a reader that sees closed == 1 and then reads tail sees the final tail.
    ws_->closed.store(1, std::memory_order_release);
    // Sleeping readers must learn of the end: store closed -> load sleepers, as in publish_tail
    // (a full fence here: control path).
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (wake_->sleepers.load(std::memory_order_relaxed) != 0) wake_sleepers();
  }

  // Control path (housekeeping): frees slots of dead subscribers and, in backpressure mode,
  // evicts a live subscriber that has made no progress for `stall_ns` while it blocks the
  // writer (it will be lapped and told how much it lost). Returns slots changed.
  int reap_subscribers(std::int64_t now_ns, std::int64_t stall_ns) noexcept;

  std::uint64_t evictions() const noexcept { return evictions_; }

 private:
  // Each claim asks for the line kPrefetchAhead bytes ahead of it in writable (exclusive) state.
  // The log is 4 KiB pages (tmpfs): the claim that first enters a page would otherwise take the
  // TLB miss and page walk - slow in a VM - and the line's ownership request between its
  // zero-ahead store and the commit store, whose visibility waits for both. Measured (same-run
  // A/B, docs/BENCHMARKS.md): p99 of the 32-byte round trip 595 -> 527 ns (separate cores) and
  // 293 -> 188 ns (SMT siblings), p50 unchanged. One instruction; no fault: a prefetch of an
  // address in the mapped log never faults (the log is a power of two, masked).
  static constexpr std::uint64_t kPrefetchAhead = 512;
  // The end of both claims, over the caller's locals (`idx`: pos & mask, or 0 after padding):
  // zero-ahead - the header slot after this frame must read 0 until its frame is published -
  // and the claim.
  [[gnu::always_inline]] static void claimed(std::byte* log, std::uint64_t mask, std::uint64_t pos, std::uint64_t idx,
                                             std::uint32_t frame_length, std::uint32_t aligned, Claim* c) noexcept {
    prefetch_ahead(log + ((pos + kPrefetchAhead) & mask));
    seq_word(log + ((pos + aligned) & mask)).store(0, std::memory_order_relaxed);
    c->frame = log + idx;
    c->position = pos;
    c->length = frame_length;
    c->aligned = aligned;
  }

  static void prefetch_ahead(const std::byte* p) noexcept {
#if defined(__x86_64__)
    asm volatile("prefetchw %0" ::"m"(*p));  // a NOP on CPUs without PREFETCHW
#else
    __builtin_prefetch(p, 1);
#endif
  }

  // Every header field but the sequence, which the caller stores last (release).
  void write_header(std::byte* frame, std::uint32_t length, std::uint16_t flags, std::int64_t ts) noexcept {
    core::write_frame_header(reinterpret_cast<core::FrameHeader*>(frame), length, flags, stream_id_, session_id_, ts);
  }

  // A padding frame carries the sequence the next message will have; readers skip it.
  void publish_padding(std::byte* frame, std::uint64_t position, std::uint32_t length) noexcept {
    write_header(frame, length, core::kFlagPadding, 0);
    seq_word(frame).store(seq_, std::memory_order_release);  // pairs with LogReader's acquire
    checkpoint(position);
    pos_ = position + length;
    publish_tail();
  }

  void publish_tail() noexcept { publish_tail(pos_); }
  // `pos` == pos_ (passed by callers that hold it in a register).
  void publish_tail(std::uint64_t pos) noexcept {
    release_batch_head();
    unpublished_ = 0;
    if (__builtin_expect(publish_tail_no_wake(pos), 0)) wake_sleepers();
  }
  // Stores the sequence commit_deferred() held back, before any tail that covers its frame (a
  // reader at or past a tail finds every frame before it committed). Release: the frames after
  // it in the batch were written before, so a reader that acquires it sees them all.
  void release_batch_head() noexcept {
    if (batch_head_ != nullptr) {
      seq_word(batch_head_).store(batch_head_seq_, std::memory_order_release);  // pairs with LogReader's acquire
      batch_head_ = nullptr;
    }
  }
  // publish_tail() but the wake-up, which the caller makes when this returns true; leaves
  // unpublished_ and a held-back batch head alone (callers outside a batch: neither is set).
  bool publish_tail_no_wake(std::uint64_t pos) noexcept {
    // Release store pairs with readers' acquire loads of tail (joiners, lap checks); the
    // release fence then orders this tail before every store of the next frame, which is what
    // the readers' post-delivery validation relies on.
    ws_->tail.store(pos, std::memory_order_release);
    std::atomic_thread_fence(std::memory_order_release);
    // The waker's half of the Dekker pair with LogReader::arm(): the stores above (this tail and
    // the frames' sequence words) must be ordered before the load of `sleepers` below - the
    // store->load order x86 does not give for free. Registered for the global expedited
    // membarrier (kWakeWriterMembarrier), a compiler barrier suffices: the sleeper's
    // membarrier(GLOBAL_EXPEDITED) runs a full barrier on this CPU between its bit store and
    // its re-check. Otherwise a full fence, paired with the sleeper's seq_cst fence.
    core::cross_process_waker_barrier(full_fence_);
    // Relaxed: ordered by the barrier above. Nobody sleeps: one load of a line this core holds.
    return wake_->sleepers.load(std::memory_order_relaxed) != 0;
  }

  // Someone advertised a sleep (or a hostile/dead reader left a bit set: that costs this call,
  // never correctness). Clears every bit - each sleeper is woken below, and one that sets its
  // bit after the exchange re-checks the tail we already stored - then bumps the word and wakes.
  [[gnu::noinline, gnu::cold]] void wake_sleepers() noexcept {
    // acq_rel: pairs with the sleepers' fetch_or in LogReader::arm(); a bit set after this
    // exchange reads-from it and so sees our tail store.
    if (wake_->sleepers.exchange(0, std::memory_order_acq_rel) == 0) return;
    // Release pairs with the sleeper's acquire snapshot of the word (taken before it set its
    // bit): a sleeper not yet blocked sees a new value and futex_wait returns at once.
    wake_->word.fetch_add(1, std::memory_order_release);
    (void)core::futex_wake(&wake_->word, 0x7fffffff, /*shared=*/true);
    ++wakes_;
  }

  void checkpoint(std::uint64_t frame_pos) noexcept {
    if (frame_pos >= next_checkpoint_) {
      cps_->pos[(frame_pos >> block_shift_) & (kCheckpoints - 1)].store(frame_pos, std::memory_order_release);
      // Orders this checkpoint before every store of the frames that follow: a reader that still
      // sees the old value knows they had not begun (LogReader::surely_intact). Once per block.
      std::atomic_thread_fence(std::memory_order_release);
      next_checkpoint_ = ((frame_pos >> block_shift_) + 1) << block_shift_;
    }
  }

  void refresh_limit() noexcept {
    if (!backpressure_) return;
    std::uint64_t min_pos = ~std::uint64_t{0};
    for (std::uint32_t i = 0; i < slots_; ++i) {
      SubscriberSlot* s = seg_->slot(i);
      // Acquire pairs with the subscriber's release of state/position: data it has consumed
      // (positions below its position) may be overwritten.
      if (s->state.load(std::memory_order_acquire) != kSlotActive) continue;
      min_pos = std::min(min_pos, s->position.load(std::memory_order_acquire));
    }
    // No subscriber: nothing to protect (offer() reports kNotConnected before we get here).
    limit_ = min_pos == ~std::uint64_t{0} ? pos_ + size_ - margin_ : min_pos + size_ - margin_;
  }

  WriterState* ws_ = nullptr;
  Checkpoints* cps_ = nullptr;
  WakeState* wake_ = nullptr;
  std::uint32_t stream_id_ = 0, session_id_ = 0, max_frame_ = 0, slots_ = 0;
  bool backpressure_ = false;
  bool full_fence_ = true;
  std::uint64_t pos_ = 0, seq_ = 1, next_checkpoint_ = 0, limit_ = 0, unpublished_ = 0;
  std::byte* batch_head_ = nullptr;  // a deferred batch's first frame, its sequence not stored yet
  std::uint64_t batch_head_seq_ = 0;
  std::uint64_t bp_events_ = 0, evictions_ = 0, seen_bp_events_ = 0, wakes_ = 0;
  // Publisher-private progress tracking for eviction.
  std::uint64_t seen_pos_[kMaxSubscriberSlots] = {};
  std::int64_t seen_ns_[kMaxSubscriberSlots] = {};
};

class LogReader : private LogMapping {
 public:
  // join_at_start: read from the log's oldest intact frame (a new session after a publisher
  // restart); otherwise join at the live position. False (nothing set up) when the writer's
  // tail is not a valid frame position: the segment is corrupt.
  [[nodiscard]] bool init(Segment* seg, SubscriberSlot* slot, bool join_at_start) noexcept {
    const std::uint64_t tail = seg->header()->writer.tail.load(std::memory_order_acquire);
    if (!valid_position(tail)) return false;
    map(seg);
    ws_ = &seg->header()->writer;
    cps_ = &seg->header()->checkpoints;
    slot_ = slot;
    position_out_ = slot != nullptr ? &slot->position : &no_slot_position_;
    stream_id_ = seg->layout().stream_id;
    session_id_ = seg->layout().session_id;
    max_frame_ = seg->layout().max_frame;
    read_ahead_ = std::min<std::uint64_t>(kReadAhead, size_ / 4);
    written_ = 0;
    intact_off_ = size_ - margin_ - max_frame_;       // > 0: size > margin + max_frame (layout check)
    max_body_ = max_frame_ - core::kFrameHeaderSize;  // max_frame >= header size (layout check)
    block_base_mask_ = ~((std::uint64_t{1} << block_shift_) - 1);
    want_word_ = std::uint64_t{core::kFrameMagic} | std::uint64_t{core::kFrameVersion} << 8 |
                 std::uint64_t{stream_id_} << 32;  // flags (bits 16..31) 0
    backpressure_ = seg->layout().flow_control == static_cast<std::uint32_t>(shm::FlowControl::kBackpressure);
    pending_n_ = 0;
    pending_seq0_ = 0;
    expected_ = 0;
    announce_gap_ = false;  // nothing was expected yet
    resync_ = true;
    if (join_at_start && tail + margin_ <= size_) {
      pos_ = 0;  // first lap: everything the session wrote is still there
      expected_ = 1;
      announce_gap_ = true;
    } else if (join_at_start) {
      jump_oldest(tail);
    } else {
      pos_ = tail;  // the header slot at tail was zeroed before tail was published
      // Learn which sequence the next frame will carry, so that being lapped before reading
      // anything is still reported with the exact count.
      expected_ = sequence_at(tail);
      announce_gap_ = expected_ != 0;
    }
    if (slot_ != nullptr) slot_->position.store(pos_, std::memory_order_release);
    return true;
  }

  std::uint64_t position() const noexcept { return pos_; }
  std::uint64_t expected_sequence() const noexcept { return expected_; }
  std::uint32_t session_id() const noexcept { return session_id_; }
  std::uint64_t malformed() const noexcept { return malformed_; }
  std::uint64_t lapped_events() const noexcept { return lapped_; }

  // Padding frames one poll() skips at most (a hostile writer's ring of them is still a bounded
  // call; a real log has one per lap plus one per aborted claim).
  static constexpr std::uint32_t kMaxPaddingsPerPoll = 64;

  // Fills up to `max` events (messages and gaps).
  std::uint32_t poll(RxDesc* out, std::uint32_t max) noexcept {
    std::uint32_t n = 0;
    if (pending_n_ != 0) check_pending();
    if (pending_overrun_ && max > 0) {
      out[n++] = gap_event(overrun_from_, overrun_count_, kGapOverrun);
      pending_overrun_ = false;
    }
    int recoveries = 0;  // bounds the work of one call even against a hostile writer
    std::uint32_t paddings = 0;
    while (n < max) {
      std::byte* p = log_ + (pos_ & mask_);
      const std::uint64_t seq = seq_word(p).load(std::memory_order_acquire);  // pairs with LogWriter's release
      if (seq == 0) {
        // Live edge - or lapped onto bytes that happen to be zero: check now and then.
        if (++empty_polls_ >= 256) {
          empty_polls_ = 0;
          if (lapped(pos_) && recoveries++ < 4) {
            recover();
            continue;
          }
        }
        break;
      }
      const auto* h = reinterpret_cast<const core::FrameHeader*>(p);
      if (__builtin_expect(resync_ || seq != expected_ || !plausible(h, pos_), 0)) {
        const bool ok_here =
            resync_ && plausible(h, pos_) && seq >= expected_ && seq < kMaxShmSequence && !lapped(pos_);
        if (!ok_here) {
          if (recoveries++ >= 4) break;
          if (!lapped(pos_)) {
            // Not overwritten, yet wrong: foreign or corrupted bytes. Drop this one frame.
            ++malformed_;
            skip_malformed();
          } else {
            recover();
          }
          continue;
        }
        // Resynchronised on an intact frame after a jump (or on joining).
        if (announce_gap_ && seq > expected_) {
          out[n++] = gap_event(expected_, seq - expected_, resync_reason_);
        }
        expected_ = seq;
        resync_ = false;
        announce_gap_ = true;
        if (n >= max) break;
      }
      empty_polls_ = 0;
      const std::uint32_t len = h->frame_length;
      if (h->flags & core::kFlagPadding) {
        // A writer pads at most once per lap plus once per aborted claim; a hostile one can
        // lay a ring of paddings that all carry the expected sequence. Bounded per call: the
        // next poll goes on from here (arm() sees the padding and does not sleep).
        if (++paddings > kMaxPaddingsPerPoll) break;
        pos_ += len;
        continue;
      }
      const std::uint64_t aligned = core::align_up(len, core::kFrameAlignment);
      if (n != 0) read_ahead(pos_, n);
      RxDesc& d = out[n++];
      d.frame = h;
      d.token = pos_ + aligned;
      d.length = len;
      d.kind = RxKind::kMessage;
      d.session_id = session_id_;
      d.sequence = seq;
      // Traced frames: when the reader saw the frame (the flags word was just read by
      // plausible(): same line). The stamp is ours, not from the shared log.
      d.receive_ns = __builtin_expect(h->flags & core::kFlagTraced, 0) ? core::Clock::now_ns() : 0;
      d.ring_ns = 0;
      d.reserved = 0;  // no RxFlag: nothing in a shared segment is a stamp to trust
      pos_ += aligned;
      ++expected_;
    }
    return n;
  }

  // Direct delivery for an inline subscriber (SubscriberImpl::poll on shm): hands each in-order,
  // plain message frame (flags 0: not traced, not padding) at the reader's position straight to
  // on_frame(header, frame_length), up to `max` (<= kMaxDirect), then releases them as
  // release() does (same validation, same position store) - no RxDesc is written or copied.
  // It stops at the first thing that needs poll()'s general handling - a resync after a jump
  // or a join, a pending overrun report, a sequence or header that is not the expected plain
  // frame (padding, traced, lapped or hostile bytes), the periodic lap check of an idle
  // reader - and sets *slow: the caller then calls poll(), which starts from the same state.
  // The header checks are poll()'s (plausible()) for a flags-0 frame, folded: one 64-bit
  // compare covers magic, version, flags and stream; then the session and the length.
  static constexpr std::uint32_t kMaxDirect = 64;
  template <class F>
  std::uint32_t poll_direct(std::uint32_t max, F&& on_frame, bool* slow) noexcept {
    if (pending_n_ != 0) check_pending();
    if (__builtin_expect(resync_ | pending_overrun_, 0)) {  // one branch for both
      *slow = true;
      return 0;
    }
    const std::uint64_t want_word = want_word_;
    static_assert(kMaxDirect < kMaxPending);
    // max_frame_ >= header size: the segment's layout check (max_frame == log_size / 32).
    // Where each delivered frame starts, recorded straight into the lossy mode's deferred
    // check list (pending_n_ is 0 here: checked above). Backpressure mode never has a deferred
    // check, and uses the same array as scratch: it needs the starts only after an eviction.
    std::uint64_t* const starts = pending_start_;
    std::uint32_t n = 0;
    max = std::min(max, kMaxDirect);
    while (n < max) {
      // In locals before the acquire load (after which every member would be loaded again).
      const std::uint64_t pos = pos_, idx = pos & mask_, room = size_ - idx, expected = expected_;
      std::byte* p = log_ + idx;
      const std::uint64_t seq = seq_word(p).load(std::memory_order_acquire);  // pairs with LogWriter's release
      if (seq == 0) {
        // Live edge. poll() checks for a lap every 256 empty polls: leave that one to it.
        if (__builtin_expect(++empty_polls_ >= 256, 0)) {
          --empty_polls_;
          *slow = true;
        }
        break;
      }
      const auto* h = reinterpret_cast<const core::FrameHeader*>(p);
      std::uint64_t word;
      std::memcpy(&word, reinterpret_cast<const std::byte*>(h) + 4, sizeof word);  // magic..stream_id
      const std::uint32_t len = h->frame_length;
      const std::uint64_t aligned = core::align_up(len, core::kFrameAlignment);
      if (__builtin_expect(seq != expected || word != want_word || h->session_id != session_id_ ||
                               len - core::kFrameHeaderSize > max_body_ || aligned > room,
                           0)) {
        *slow = true;
        break;
      }
      empty_polls_ = 0;
      starts[n++] = pos;
      pos_ = pos + aligned;
      expected_ = expected + 1;
      on_frame(h, len);
    }
    if (n == 0) return 0;
    if (n > 1) read_ahead(starts, n);  // behind the writer: not the latency path's one frame
    if (backpressure_) {
      // As release(): validate before handing the space back.
      if (!slot_active()) {
        const std::uint64_t floor = safe_floor();
        std::uint64_t torn = 0;
        while (torn < n && starts[torn] < floor) ++torn;  // starts increase
        note_overrun(expected_ - n, torn);
      }
    } else {
      // Lossy: checked at the start of the next poll (check_pending()); the
      // starts are in pending_start_ already, n <= kMaxDirect < kMaxPending.
      // Their sequences are consecutive: only the first is kept (check_pending()).
      pending_seq0_ = expected_ - n;  // >= 1: a delivered frame's sequence is never 0
      pending_n_ = n;
    }
    // Release pairs with the writer's acquire in refresh_limit(), as in release(). Without a
    // slot (tests) position_out_ is a word of our own: no test here.
    position_out_->store(pos_, std::memory_order_release);
    return n;
  }

  // After delivery: publish the consumed position and (validate) check that the views were
  // not overwritten while the application used them.
  //
  // How the check is made depends on the flow control, to keep a cross-core cache miss off
  // the application's critical path:
  //  - backpressure: the writer never overwrites what an active subscriber has not released,
  //    so it is enough that our slot is still active (our own cache line; the writer writes
  //    it only to evict a stalled subscriber). Only after an eviction is `tail` consulted.
  //  - lossy: the views are checked at the start of the next poll(), against the writer's
  //    checkpoint of one block (a line it writes once per block) and, only when that cannot
  //    rule a lap out, against `tail` (check_pending). A failure is reported as an overrun
  //    gap for those messages.
  void release(const RxDesc* done, std::uint32_t n, bool validate = true) noexcept {
    std::uint64_t last = 0;
    for (std::uint32_t i = 0; i < n; ++i) {
      if (done[i].kind == RxKind::kMessage) last = std::max(last, done[i].token);
    }
    if (last == 0) return;
    if (validate && backpressure_) {
      // Validate before handing the space back: once the position is published the writer
      // may legitimately overwrite these frames at once.
      if (!slot_active()) check_now(done, n);
    } else if (validate) {
      if (pending_seq0_ != 0) {  // poll_direct()'s consecutive run: spell it out before appending
        for (std::uint32_t i = 0; i < pending_n_; ++i) pending_seq_[i] = pending_seq0_ + i;
        pending_seq0_ = 0;
      }
      for (std::uint32_t i = 0; i < n && pending_n_ < kMaxPending; ++i) {
        if (done[i].kind != RxKind::kMessage) continue;
        pending_start_[pending_n_] = start_of(done[i]);
        pending_seq_[pending_n_++] = done[i].sequence;
      }
    }
    // Release pairs with the writer's acquire in refresh_limit(): our reads of the frames
    // happen before it may overwrite them (backpressure mode).
    if (slot_ != nullptr) slot_->position.store(last, std::memory_order_release);
  }

  // Checks delivered views against the writer's tail now.
  void check_now(const RxDesc* done, std::uint32_t n) noexcept {
    const std::uint64_t floor = safe_floor();
    std::uint64_t torn = 0, from = 0;
    for (std::uint32_t i = 0; i < n; ++i) {
      if (done[i].kind != RxKind::kMessage || start_of(done[i]) >= floor) continue;
      if (torn++ == 0) from = done[i].sequence;
    }
    note_overrun(from, torn);
  }

  // The lossy-mode check deferred from release(). The frames are checked against the writer's
  // checkpoints first (surely_intact): the tail is written with every frame, so reading it
  // here is a cross-core miss on the writer's hottest line per poll - in an inline ping-pong
  // it cost ~130 ns a round trip (docs/BENCHMARKS.md, measured on the second host). The tail is
  // read only when the checkpoints cannot rule a lap out, and then decides as before.
  void check_pending() noexcept {
    if (surely_intact(pending_start_[0])) {  // starts increase: [0] is the oldest
      pending_n_ = 0;                        // pending_seq0_ may stay: whoever fills the list next sets it
      return;
    }
    const std::uint64_t floor = safe_floor();
    std::uint64_t torn = 0, from = 0;
    for (std::uint32_t i = 0; i < pending_n_; ++i) {
      if (pending_start_[i] >= floor) break;  // positions increase: the rest are intact
      if (torn++ == 0) from = pending_seq0_ != 0 ? pending_seq0_ + i : pending_seq_[i];
    }
    pending_n_ = 0;
    pending_seq0_ = 0;
    note_overrun(from, torn);
  }

  void note_overrun(std::uint64_t from, std::uint64_t torn) noexcept {
    if (torn == 0) return;
    ++overruns_;
    if (!pending_overrun_) {
      overrun_from_ = from;
      overrun_count_ = 0;
    }
    pending_overrun_ = true;
    overrun_count_ += torn;
    if (lapped(pos_)) recover();
  }

  // Our subscriber slot is still under the writer's flow control (not evicted).
  bool slot_active() const noexcept {
    // Acquire fence: our reads of the frames are ordered before this load; pairs with the
    // writer's release fence (publish_tail) between an eviction and any later overwrite.
    std::atomic_thread_fence(std::memory_order_acquire);
    return slot_ != nullptr && slot_->state.load(std::memory_order_relaxed) == kSlotActive;
  }

  static std::uint64_t start_of(const RxDesc& d) noexcept {
    return d.token - core::align_up(d.length, core::kFrameAlignment);
  }

  // Any thread: frames of segment `s` starting below this position may have been overwritten.
  static std::uint64_t floor_of(const Segment& s) noexcept {
    // Acquire fence: as in safe_floor().
    std::atomic_thread_fence(std::memory_order_acquire);
    const std::uint64_t tail = s.header()->writer.tail.load(std::memory_order_relaxed);
    const std::uint64_t size = s.log_size(), margin = margin_for(size);
    return tail + margin > size ? tail + margin - size : 0;
  }

  // True only when safe_floor() would be <= `start` too, decided from the writer's checkpoint of
  // one block - a line the writer stores once per block (log_size / kCheckpoints), not once
  // per frame. The writer stores a block's checkpoint when it commits the first frame starting
  // in it (every block has one: frames are at most max_frame = block / 2 long), so a writer
  // whose checkpoint for block b is still below b's start has committed no frame starting at
  // or beyond b << block_shift_: its tail < (b << block_shift_) + max_frame. With
  // (b << block_shift_) + max_frame <= start + size - margin, safe_floor() = tail + margin -
  // size < start: the answer the tail would give, without reading it. A slot holding a later
  // lap's checkpoint (or anything a hostile writer put there that is >= b's start) only sends
  // the caller to the tail. Ordering as in safe_floor(): the acquire fence orders the frame
  // loads before this load, which pairs with the writer's release fence after its checkpoint.
  bool surely_intact(std::uint64_t start) const noexcept {
    const std::uint64_t x = start + intact_off_;  // intact_off_ = size - margin - max_frame
    const std::uint64_t b = x >> block_shift_;
    std::atomic_thread_fence(std::memory_order_acquire);
    return cps_->pos[b & (kCheckpoints - 1)].load(std::memory_order_relaxed) < (x & block_base_mask_);  // b << shift
  }

  // Any thread: frames starting below this position may have been overwritten.
  std::uint64_t safe_floor() const noexcept {
    // Acquire fence: loads of frame data before this call are ordered before the tail load
    // (pairs with the writer's release fence after each tail store).
    std::atomic_thread_fence(std::memory_order_acquire);
    const std::uint64_t tail = ws_->tail.load(std::memory_order_relaxed);
    return tail + margin_ > size_ ? tail + margin_ - size_ : 0;
  }

  std::uint64_t overruns() const noexcept { return overruns_; }

  // Interrupt mode, the sleeper's half (docs/ARCHITECTURE.md, "Wakeup protocol: shm"):
  // announces that the reader in subscriber slot `slot_index` sleeps, runs the barrier and
  // re-checks. True: armed - wait on `*word` while it equals `*expected` (a shared futex), then
  // disarm(slot_index). False (nothing left set): something is readable or pending, or this
  // process cannot pair with the writer's barrier (the writer relies on membarrier and
  // `global_barrier` failed) - the caller must keep polling.
  bool arm(std::uint32_t slot_index, bool (*global_barrier)() noexcept, std::atomic<std::uint32_t>** word,
           std::uint32_t* expected) noexcept {
    if (pending_overrun_) return false;  // an overrun gap to report on the next poll
    WakeState* w = &seg_->header()->wake;
    const std::uint64_t bit = std::uint64_t{1} << (slot_index & 63);
    // Acquire pairs with the writer's release increment in wake_sleepers(). Snapshot first:
    // a wake-up issued after this load changes the word, so the futex wait cannot miss it.
    const std::uint32_t snap = w->word.load(std::memory_order_acquire);
    // acq_rel: pairs with the writer's exchange in wake_sleepers() (a bit set after it reads
    // from it and sees the tail stored before it).
    w->sleepers.fetch_or(bit, std::memory_order_acq_rel);
    // The sleeper's half of the Dekker pair with LogWriter::publish_tail(): our bit store must
    // be ordered before the loads of the tail and the header slot below.
    // With kWakeWriterMembarrier the writer issues only a compiler barrier and we issue
    // membarrier(GLOBAL_EXPEDITED), a full barrier on every CPU running its (registered)
    // process; unavailable here: cannot sleep. Otherwise seq_cst fences on both sides.
    if (!core::cross_process_sleeper_barrier((seg_->layout().wake_flags & kWakeWriterMembarrier) != 0,
                                             global_barrier)) {
      disarm(slot_index);
      return false;
    }
    if (!idle_at_edge()) {
      disarm(slot_index);
      return false;
    }
    *word = &w->word;
    *expected = snap;
    return true;
  }

  // Clears our advertisement. Relaxed: a bit seen late only costs the writer one more wake-up.
  void disarm(std::uint32_t slot_index) noexcept {
    seg_->header()->wake.sleepers.fetch_and(~(std::uint64_t{1} << (slot_index & 63)), std::memory_order_relaxed);
  }

  // Nothing readable at our position: the tail is ours and the header slot there reads 0 (the
  // writer zeroes it before publishing the tail before it). Anything else - data, a deferred
  // tail, a poisoned (truncated) tail, lapped or hostile bytes - is for poll() to sort out.
  bool idle_at_edge() const noexcept {
    // Acquire pairs with the writer's release stores of tail and of the sequence word.
    if (ws_->tail.load(std::memory_order_acquire) != pos_) return false;
    if (seq_word(log_ + (pos_ & mask_)).load(std::memory_order_acquire) != 0) return false;
    // Acquire pairs with LogWriter::close(): the end of the stream is an event to deliver.
    return ws_->closed.load(std::memory_order_acquire) == 0;
  }

  // Live-edge state for end-of-stream detection.
  // Nothing left to read. Not tied to resync_: a reader that joined at the live edge and
  // never received a frame is caught up too (it must still see the end of the stream).
  bool caught_up() const noexcept { return ws_->tail.load(std::memory_order_acquire) == pos_; }
  // Nothing to read at this reader's position now (the frame there is not committed), whatever
  // the tail says. The tail is published after the frames it covers (at once, or for a batch
  // later): a writer killed in between leaves a reader past a tail that never moves again, so
  // for a dead writer this - not caught_up() - says everything it published was read.
  bool nothing_readable() const noexcept {
    if (lapped(pos_)) return false;
    return seq_word(log_ + (pos_ & mask_)).load(std::memory_order_acquire) == 0;  // pairs with the commit's release
  }

 private:
  // A frame header a writer of this session could have produced at `pos`. A padding frame ends
  // at or before the end of the log and is at most max_frame long: the writer pads the room
  // left before a frame that does not fit (less than that frame) or an aborted claim (a frame
  // that fitted). A padding of the whole log at offset 0 once made poll() skip the same frame
  // forever (fuzz_shm_reader timeout).
  bool plausible(const core::FrameHeader* h, std::uint64_t pos) const noexcept {
    const std::uint64_t len = h->frame_length;
    // The room left before the end of the log, in whole frame slots: a frame fits when its
    // aligned length does, i.e. when its length does not exceed that.
    const std::uint64_t room = (size_ - (pos & mask_)) & ~std::uint64_t{core::kFrameAlignment - 1};
    const bool padding = (h->flags & core::kFlagPadding) != 0;
    return core::check_frame(h, room) == core::FrameCheck::kOk && h->stream_id == stream_id_ &&
           h->session_id == session_id_ && len <= max_frame_ && (!padding || len % core::kFrameAlignment == 0);
  }

  // Read-ahead for a reader that is behind the writer (more than one frame in a poll; a reader
  // at the live edge delivers one frame per poll and pays one compare). Far behind - a full log
  // in backpressure mode, a burst in a big log - it reads lines the writer wrote long ago, out
  // of every cache near it, and the hardware prefetcher stops at each 4 KiB page. So the line
  // `read_ahead_` bytes on is prefetched, but only below a tail already seen: a line the writer
  // has still to write is never pulled away from it. The tail is loaded only by a poll that
  // delivered kReadAheadProbe frames (a real backlog) and found the last tail too close.
  // poll() does it per frame; poll_direct() after its batch, for the frames it delivered.
  // Measured (docs/BENCHMARKS.md, same-run A/B): one-way 32 B, backpressure, 16 MiB
  // log: offer_batch 33-38 -> 93-111M msgs/s, unstamped offer() 30-38 -> 91-101M.
  static constexpr std::uint64_t kReadAhead = 32 << 10;
  static constexpr std::uint32_t kReadAheadProbe = 32;  // frames a poll delivers before it loads the tail
  void read_ahead(std::uint64_t pos, std::uint32_t n) noexcept {
    const std::uint64_t ahead = pos + read_ahead_;
    if (ahead < written_) {
      __builtin_prefetch(log_ + (ahead & mask_));  // in the mapping: masked; a hint, never a fault
    } else if (n == kReadAheadProbe) {
      written_ = ws_->tail.load(std::memory_order_relaxed);  // a hint: no ordering needed
    }
  }
  // starts[0..n) increase; n >= 2. Out of line: poll_direct() stays small enough to be inlined
  // into the subscriber's poll (callgrind, offer + poll of one message: 314 instructions, 312
  // before the read-ahead; with this function inline, poll_direct() was not inlined: 341).
  [[gnu::noinline]] void read_ahead(const std::uint64_t* starts, std::uint32_t n) noexcept {
    if (starts[n - 1] + read_ahead_ >= written_ && n >= kReadAheadProbe) {
      written_ = ws_->tail.load(std::memory_order_relaxed);  // a hint: no ordering needed
    }
    for (std::uint32_t i = 1; i < n; ++i) {
      const std::uint64_t ahead = starts[i] + read_ahead_;
      if (ahead >= written_) break;
      __builtin_prefetch(log_ + (ahead & mask_));
    }
  }

  // True when data at log position q may already have been overwritten.
  bool lapped(std::uint64_t q) const noexcept { return q < safe_floor(); }

  // Sequence of the frame that will start at `tail` (the live edge), found by walking the
  // frames from the last checkpoint before it; 0 if it cannot be determined safely. Join-time
  // only (up to one checkpoint block of headers).
  std::uint64_t sequence_at(std::uint64_t tail) const noexcept {
    if (tail == 0) return 1;
    const std::uint64_t lo = tail + margin_ > size_ ? tail + margin_ - size_ : 0;
    std::uint64_t c = ~std::uint64_t{0};
    for (std::uint32_t k = 0; k < kCheckpoints; ++k) {
      const std::uint64_t p = cps_->pos[k].load(std::memory_order_acquire);
      if (valid_position(p) && p >= lo && p < tail && (c == ~std::uint64_t{0} || p > c)) c = p;
    }
    if (c == ~std::uint64_t{0}) return 0;
    // The newest checkpoint is at most one block plus one frame before the tail; a farther one
    // is stale or forged, and walking from it would cost up to a whole log of headers.
    if (tail - c > size_ / kCheckpoints + 2 * static_cast<std::uint64_t>(max_frame_)) return 0;
    const std::uint64_t start = c;
    std::uint64_t next = 0;
    while (c < tail) {
      std::byte* p = log_ + (c & mask_);
      const std::uint64_t seq = seq_word(p).load(std::memory_order_acquire);
      const auto* h = reinterpret_cast<const core::FrameHeader*>(p);
      if (seq == 0 || seq >= kMaxShmSequence || !plausible(h, c)) return 0;
      const bool padding = (h->flags & core::kFlagPadding) != 0;
      next = padding ? seq : seq + 1;
      c += padding ? h->frame_length : core::align_up(h->frame_length, core::kFrameAlignment);
    }
    if (c != tail || lapped(start)) return 0;
    return next;
  }

  // Moves to the oldest frame that is still intact and not behind `floor` (checkpoints mark
  // frame starts), or to the live edge when there is none.
  // `tail` and the checkpoints come from shared memory: only an aligned position in range may
  // become pos_ (a misaligned one would read a header across the end of the log).
  void jump_oldest(std::uint64_t tail, std::uint64_t floor = 0) noexcept {
    tail = std::min(tail, kMaxLogPosition) & ~std::uint64_t{core::kFrameAlignment - 1};
    std::uint64_t lo = tail + margin_ > size_ ? tail + margin_ - size_ : 0;
    lo = std::max(lo, floor);
    std::uint64_t best = tail;
    for (std::uint32_t k = 0; k < kCheckpoints; ++k) {
      const std::uint64_t c = cps_->pos[k].load(std::memory_order_acquire);
      if (valid_position(c) && c >= lo && c < best) best = c;
    }
    pos_ = best;
  }

  // A corrupt header at pos_ (not lapped): find the next plausible frame header - one of this
  // session carrying the expected sequence (after a corrupt padding frame) or the next one -
  // at most one frame further on, so only the corrupt frame is lost.
  void skip_malformed() noexcept {
    const std::uint64_t tail = ws_->tail.load(std::memory_order_acquire);
    const std::uint64_t limit = std::min(tail, pos_ + max_frame_ + core::kFrameAlignment);
    for (std::uint64_t q = pos_ + core::kFrameAlignment; q < limit; q += core::kFrameAlignment) {
      std::byte* p = log_ + (q & mask_);
      const std::uint64_t seq = seq_word(p).load(std::memory_order_acquire);
      if ((seq == expected_ || seq == expected_ + 1) && plausible(reinterpret_cast<const core::FrameHeader*>(p), q)) {
        pos_ = q;
        resync_ = true;
        resync_reason_ = kGapMalformed;
        return;
      }
    }
    recover();
    resync_reason_ = kGapMalformed;
  }

  // Forward only: never re-delivers what was already delivered.
  void recover() noexcept {
    ++lapped_;
    resync_reason_ = kGapLapped;
    jump_oldest(ws_->tail.load(std::memory_order_acquire), pos_ + 1);
    resync_ = true;
    empty_polls_ = 0;
    if (slot_ != nullptr) {
      slot_->position.store(pos_, std::memory_order_relaxed);
      // An evicted subscriber (backpressure mode) rejoins flow control from its new position;
      // release pairs with the writer's acquire of state in refresh_limit().
      if (slot_->state.load(std::memory_order_relaxed) == kSlotEvicted) {
        slot_->state.store(kSlotActive, std::memory_order_release);
      }
    }
  }

  RxDesc gap_event(std::uint64_t from, std::uint64_t count, std::uint16_t reason) const noexcept {
    RxDesc d{};
    d.kind = RxKind::kGap;
    d.sequence = from;
    d.gap_count = count;
    d.reason = reason;
    d.session_id = session_id_;
    return d;
  }

  std::uint64_t intact_off_ = 0;       // size_ - margin_ - max_frame_ (surely_intact)
  std::uint64_t block_base_mask_ = 0;  // ~(block - 1): x & mask == (x >> block_shift_) << block_shift_
  std::uint64_t want_word_ = 0;        // poll_direct(): magic, version, flags 0, stream_id of a plain frame
  std::uint32_t max_body_ = 0;         // max_frame_ - kFrameHeaderSize (poll_direct's length check)
  WriterState* ws_ = nullptr;
  Checkpoints* cps_ = nullptr;
  SubscriberSlot* slot_ = nullptr;
  std::atomic<std::uint64_t>* position_out_ = &no_slot_position_;  // &slot_->position, or ours
  std::atomic<std::uint64_t> no_slot_position_{0};
  std::uint32_t stream_id_ = 0, session_id_ = 0, max_frame_ = 0;
  std::uint64_t pos_ = 0, expected_ = 0;
  bool resync_ = true, announce_gap_ = false, pending_overrun_ = false;
  std::uint16_t resync_reason_ = kGapLapped;
  std::uint64_t overrun_from_ = 0, overrun_count_ = 0;
  bool backpressure_ = false;
  // Lossy mode: delivered views still to be checked (release() -> next poll()).
  static constexpr std::uint32_t kMaxPending = 256;
  std::uint32_t pending_n_ = 0;
  std::uint64_t pending_start_[kMaxPending];
  std::uint64_t pending_seq_[kMaxPending];
  std::uint64_t pending_seq0_ = 0;  // != 0: pending_seq_[i] is pending_seq0_ + i (not stored)
  std::uint32_t empty_polls_ = 0;
  std::uint64_t read_ahead_ = 0;  // distance of read_ahead()
  std::uint64_t written_ = 0;     // a tail seen: what read_ahead() may prefetch (a hint)
  std::uint64_t malformed_ = 0, lapped_ = 0, overruns_ = 0;
};

}  // namespace pollux::transport::shm
