// Kernel software timestamps of the UDP transport (SO_TIMESTAMPING), for stage tracing
// (docs/ARCHITECTURE.md, "Stage tracing"), both only with udp.kernel_timestamps = true:
//   - TX: a traced stream's publisher asks for the kernel's software transmit timestamp
//     (SOF_TIMESTAMPING_TX_SOFTWARE, taken by the driver as the packet goes out) on exactly the
//     datagrams that carry a first transmission of a traced frame, by a per-datagram cmsg; the
//     socket has SOF_TIMESTAMPING_OPT_ID | OPT_TSONLY | SOFTWARE, so the kernel numbers only
//     the timestamped sends (0, 1, 2, ... per socket, verified on 6.1 and 6.18) and queues each
//     stamp, payload-less, on the socket's error queue. TxStampTracker maps those numbers back
//     to the frames' sequences and records them in the publisher's core::SendCompletionLog.
//   - RX: with udp.kernel_timestamps = true the subscriber socket has
//     SOF_TIMESTAMPING_RX_SOFTWARE | SOFTWARE and every datagram comes with its receive stamp
//     (netif_rx time) in a cmsg of recvmmsg.
// Kernel stamps are CLOCK_REALTIME; stages are core::Clock (RealtimeToClock converts).
#pragma once

#include <time.h>

#include <cstdint>
#include <memory>

#include "core/clock.h"
#include "core/frame.h"
#include "core/trace.h"
#include "transport/reliability/wire.h"

namespace pollux::transport::udp {

// CLOCK_REALTIME -> core::Clock. The offset is sampled as Clock, CLOCK_REALTIME, Clock and taken
// at the midpoint of the two Clock reads, so it is off by at most half that window (two TSC reads
// around a vDSO clock_gettime: some tens of ns here) plus the drift of the TSC calibration
// against CLOCK_REALTIME between the sample and the stamp (ppm of the microseconds between them:
// negligible). Callers sample when they read stamps, so NTP slewing does not accumulate; an NTP
// *step* of CLOCK_REALTIME between a stamp and its conversion shifts that stamp by the step: it
// then shows as a sample whose stamps go backwards, which the decomposition (pollux-latency)
// rejects and counts, and TxStampTracker rejects a TX stamp earlier than its send (stale).
class RealtimeToClock {
 public:
  static constexpr int kTries = 3;
  static constexpr std::int64_t kNarrowNs = 1'000;
  // Samples the offset; returns the first sample's second Clock read (a fresh "now" for the
  // caller). A sample whose window is wide (the thread was preempted between the reads) is
  // taken again, up to kTries times, keeping the narrowest.
  std::int64_t sample() noexcept {
    std::int64_t now = 0, best_window = INT64_MAX;
    for (int i = 0; i < kTries; ++i) {
      const std::int64_t c0 = core::Clock::now_ns();
      timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      const std::int64_t c1 = core::Clock::now_ns();
      if (i == 0) now = c1;
      if (c1 - c0 < best_window) {
        best_window = c1 - c0;
        offset_ns_ = ns(ts) - (c0 + (c1 - c0) / 2);
      }
      if (best_window <= kNarrowNs) break;
    }
    return now;
  }
  std::int64_t to_clock(const timespec& ts) const noexcept { return ns(ts) - offset_ns_; }
  static std::int64_t ns(const timespec& ts) noexcept {
    return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + static_cast<std::int64_t>(ts.tv_nsec);
  }

 private:
  std::int64_t offset_ns_ = 0;
};

// True when the datagram holds a traced frame the receiver would take (the same cursor and
// validation as reliability::ReliableReceiver::on_datagram, so it finds every traced frame that
// can be delivered from the datagram).
inline bool has_traced_frame(const std::byte* data, std::uint32_t len) noexcept {
  reliability::FrameCursor cur(data, len);
  for (const core::FrameHeader* f = cur.next(); f != nullptr; f = cur.next()) {
    if (f->flags & core::kFlagTraced) return true;
  }
  return false;
}

struct TxStampStats {
  std::uint64_t requested = 0;   // datagrams sent with a timestamp request
  std::uint64_t stamped = 0;     // of them, whose stamp came back and was recorded
  std::uint64_t frames = 0;      // traced frames recorded in the send log
  std::uint64_t expired = 0;     // requests whose stamp never came (kExpireNs)
  std::uint64_t skipped = 0;     // traced first transmissions sent without a request (tracker full, resync)
  std::uint64_t unknown = 0;     // stamps whose number matches no outstanding request
  std::uint64_t stale = 0;       // stamps earlier than the send they would belong to
  std::uint64_t not_stamps = 0;  // error-queue entries that are not TX software timestamps
  std::uint64_t resyncs = 0;     // numbering restarts (after a failed send or a mismatch)
};

// Which traced frames went out in which timestamped datagram, until the kernel's stamp for it
// comes back. Single-threaded (the thread that drives the publisher's endpoint), fixed size, no
// allocation after init().
//
// Numbering: the kernel gives the n-th timestamped send of the socket the number n (32-bit,
// from 0); requests are committed in send order, so the outstanding ones hold consecutive
// numbers and a stamp finds its request by subtraction. A send that fails after the kernel
// numbered it (kernels before the tskey rollback fix) would shift every later number by one:
// any failed timestamped send, any stamp numbered beyond what was sent, and any stamp earlier
// than the send it maps to (a shifted number found an older stamp a newer request) stops new
// requests until the outstanding ones are resolved, then the caller restarts the kernel's
// numbering (needs_reset(), OPT_ID off and on) and reset() restarts ours.
//
// Only first transmissions are stamped: a datagram whose traced frames are all at or below the
// highest traced sequence already sent is a repair (or a heartbeat: never traced).
class TxStampTracker {
 public:
  static constexpr std::uint32_t kMaxDatagrams = 256;  // outstanding requests (power of two)
  static constexpr std::uint32_t kMaxFrames = 1024;    // traced frames in them (power of two)
  static constexpr std::int64_t kExpireNs = 1'000'000'000;
  // A stamp may precede the Clock read taken just before its send by this much (conversion
  // error) before it is called stale.
  static constexpr std::int64_t kSlackNs = 1'000;

  // `max_batch`: most datagrams per send call (prepare()'s index bound).
  void init(std::uint32_t max_batch) {
    max_batch_ = max_batch;
    batch_last_.reset(new std::uint64_t[max_batch]());
  }

  // Send path. Per send call: begin_batch(); prepare() for each datagram in the call, in order
  // (true: attach the timestamp request to it); sent_at(Clock before the syscall) if any
  // prepare() said true; end_batch(number of datagrams the call sent, from the first).
  void begin_batch() noexcept {
    ttail_ = tail_;
    fttail_ = ftail_;
    batch_n_ = 0;
  }
  bool prepare(std::uint32_t idx, const std::byte* data, std::uint32_t bytes) noexcept {
    if (idx >= max_batch_) return false;
    batch_n_ = idx + 1;
    batch_last_[idx] = 0;
    reliability::FrameCursor cur(data, bytes);
    const std::uint32_t first = fttail_;
    std::uint64_t last = 0;
    bool full = false;
    for (const core::FrameHeader* f = cur.next(); f != nullptr; f = cur.next()) {
      if (!(f->flags & core::kFlagTraced) || (f->flags & (core::kFlagHeartbeat | core::kFlagPadding))) continue;
      if (f->sequence <= hwm_) continue;  // a repair: its first transmission was stamped (or skipped)
      last = f->sequence;
      if (fttail_ - fhead_ == kMaxFrames) {
        full = true;
        continue;
      }
      seqs_[fttail_++ & (kMaxFrames - 1)] = f->sequence;
    }
    if (last == 0) return false;  // no traced first transmission
    batch_last_[idx] = last;
    if (resync_ || full || ttail_ - head_ == kMaxDatagrams) {
      fttail_ = first;
      ++stats_.skipped;
      return false;
    }
    Entry& e = entries_[ttail_++ & (kMaxDatagrams - 1)];
    e.first = first;
    e.nframes = fttail_ - first;
    e.idx = idx;
    e.sent_ns = 0;
    e.done = false;
    return true;
  }
  void sent_at(std::int64_t clock_ns) noexcept {
    for (std::uint32_t p = tail_; p != ttail_; ++p) entries_[p & (kMaxDatagrams - 1)].sent_ns = clock_ns;
  }
  void end_batch(std::uint32_t sent) noexcept {
    for (std::uint32_t i = 0; i < batch_n_ && i < sent; ++i) hwm_ = std::max(hwm_, batch_last_[i]);
    std::uint32_t p = tail_;
    while (p != ttail_ && entries_[p & (kMaxDatagrams - 1)].idx < sent) {
      const Entry& e = entries_[p & (kMaxDatagrams - 1)];
      ftail_ = e.first + e.nframes;
      ++p;
      ++stats_.requested;
    }
    // A timestamped datagram that did not go out: the kernel may have numbered it anyway.
    if (p != ttail_) resync_ = true;
    tail_ = p;
  }

  // A TX software stamp the error queue returned: the kernel's number and the time on Clock.
  void on_stamp(std::uint32_t key, std::int64_t clock_ns, core::SendCompletionLog* log) noexcept {
    const std::uint32_t off = key - key_head_;
    if (off >= tail_ - head_) {
      ++stats_.unknown;
      // Numbered beyond what we sent: the kernel's count is ahead of ours (a leaked number).
      // Behind (a stamp after its request expired, or after a restart): just unknown.
      if (off < (1u << 31)) resync_ = true;
      return;
    }
    Entry& e = entries_[(head_ + off) & (kMaxDatagrams - 1)];
    if (e.done) {
      ++stats_.unknown;
      return;
    }
    if (clock_ns < e.sent_ns - kSlackNs) {
      ++stats_.stale;  // cannot be this datagram's: the numbers have shifted
      resync_ = true;
      return;
    }
    for (std::uint32_t i = 0; i < e.nframes; ++i) {
      if (log != nullptr) log->record(seqs_[(e.first + i) & (kMaxFrames - 1)], clock_ns);
    }
    stats_.frames += e.nframes;
    ++stats_.stamped;
    e.done = true;
    pop_done();
  }
  void on_not_a_stamp() noexcept { ++stats_.not_stamps; }

  // Gives up on requests older than kExpireNs (their stamp never came: a device without
  // software TX timestamps, a dropped packet).
  void expire(std::int64_t now_ns) noexcept {
    while (head_ != tail_) {
      const Entry& e = entries_[head_ & (kMaxDatagrams - 1)];
      if (!e.done && now_ns - e.sent_ns < kExpireNs) break;
      if (!e.done) ++stats_.expired;
      pop();
    }
  }

  std::uint32_t outstanding() const noexcept { return tail_ - head_; }
  // The numbering must restart (nothing outstanding any more): the caller turns OPT_ID off and
  // on (the kernel's count restarts at 0), then calls reset().
  bool needs_reset() const noexcept { return resync_ && head_ == tail_; }
  void reset() noexcept {
    resync_ = false;
    key_head_ = 0;
    ++stats_.resyncs;
  }
  // Failed to restart the numbering: keep asking for nothing.
  void disable() noexcept { resync_ = true; }
  const TxStampStats& stats() const noexcept { return stats_; }

 private:
  struct Entry {
    std::int64_t sent_ns;
    std::uint32_t first;  // index of its first sequence in seqs_ (free-running)
    std::uint32_t nframes;
    std::uint32_t idx;  // while tentative: its index in the send call
    bool done;
  };
  void pop() noexcept {
    const Entry& e = entries_[head_ & (kMaxDatagrams - 1)];
    fhead_ = e.first + e.nframes;
    ++head_;
    ++key_head_;
  }
  void pop_done() noexcept {
    while (head_ != tail_ && entries_[head_ & (kMaxDatagrams - 1)].done) pop();
  }

  Entry entries_[kMaxDatagrams] = {};
  std::uint64_t seqs_[kMaxFrames] = {};
  // Free-running indices: [head_, tail_) committed requests, [tail_, ttail_) this send call's.
  std::uint32_t head_ = 0, tail_ = 0, ttail_ = 0;
  std::uint32_t fhead_ = 0, ftail_ = 0, fttail_ = 0;
  std::uint32_t key_head_ = 0;  // the kernel's number of entries_[head_]
  std::uint64_t hwm_ = 0;       // highest traced sequence sent
  bool resync_ = false;
  std::unique_ptr<std::uint64_t[]> batch_last_;  // per datagram of the send call: its highest traced first transmission
  std::uint32_t max_batch_ = 0, batch_n_ = 0;
  TxStampStats stats_;
};

}  // namespace pollux::transport::udp
