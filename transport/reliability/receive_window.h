// Subscriber side of one publisher session: puts frames back in sequence order, drops
// duplicates, tracks the gaps, decides when to NAK them (random first delay, exponential
// back-off after) and when they are unrecoverable, and hands out messages and gap reports in
// order.
//
// Frames are not copied: a slot keeps the pointer to the frame inside the datagram buffer
// that carried it, plus the transport's token for that buffer, until the frame is delivered.
// The window spans `window` sequences from the next one to deliver; frames further ahead are
// dropped (and NAKed again later).
//
// Invariants: expected_ <= hwm_; every gap lies in [max(expected_, lost_through_), hwm_);
// a sequence in [expected_, hwm_) is either in a slot or missing; missing sequences below
// lost_through_ are unrecoverable and reported as such when delivery reaches them.
//
// Hostile input (docs/PROTOCOL.md, "Trust model"): any datagram may be forged, so no single one
// may move the window arbitrarily far. A data frame is stored only within the window, and the
// gap it or a heartbeat's `next` opens is bounded by the window too. Declaring sequences
// unrecoverable is what a forgery could abuse (a heartbeat with oldest = 2^63 used to report a
// gap of 9.2e18 and stall delivery for good), so a heartbeat's claims - `oldest` (what can no
// longer be repaired) and `next` (what was sent, which bounds the give-up timeout) - take
// effect only once confirmed: a later heartbeat, at least confirm_ns after it, claims as much
// or more, and no heartbeat in between claimed less (a publisher's next and oldest never go
// back). A live publisher heartbeats more often than confirm_ns, so its next heartbeat refutes
// a forged claim before it can be confirmed; a genuine jump (the publisher far ahead after a
// stall) is believed confirm_ns later, with the exact count of what was lost.
#pragma once

#include <cstdint>
#include <memory>

#include "core/frame.h"
#include "transport/reliability/region.h"
#include "transport/reliability/wire.h"
#include "transport/transport.h"

namespace pollux::transport::reliability {

struct WindowOptions {
  std::uint32_t window = 65536;                // sequences, power of two
  std::int64_t nak_delay_ns = 100'000;         // first NAK after a random delay in [0, this]
  std::int64_t nak_retry_ns = 2'000'000;       // then after this, doubling per attempt
  std::int64_t nak_retry_max_ns = 50'000'000;  // up to this
  std::int64_t give_up_ns = 5'000'000'000;     // a gap older than this is reported lost
  // A heartbeat's claims are believed once a later one, this much later, confirms them (see
  // above); longer than the publishers' heartbeat interval (UDP: twice udp.heartbeat_interval_us).
  std::int64_t confirm_ns = 20'000'000;
};

struct WindowStats {
  std::uint64_t frames = 0;          // stored
  std::uint64_t duplicates = 0;      // already delivered or already held
  std::uint64_t beyond = 0;          // too far ahead of delivery (window full), dropped
  std::uint64_t fills = 0;           // frames that filled a gap (repairs and late reordered frames)
  std::uint64_t gaps_opened = 0;     // gaps detected
  std::uint64_t nak_ranges = 0;      // ranges NAKed (first requests and retries)
  std::uint64_t lost = 0;            // sequences reported unrecoverable
  std::uint64_t loss_reports = 0;    // gap events
  std::uint64_t gaps_given_up = 0;   // declared lost by the give-up timeout
  std::uint64_t claims_refuted = 0;  // heartbeats whose next/oldest went back: a pending claim was dropped
};

class ReceiveWindow {
 public:
  static constexpr std::uint32_t kMaxGaps = 128;

  // False when the slots cannot be allocated (out of memory).
  [[nodiscard]] bool init(const WindowOptions& o, std::uint64_t seed);
  // Starts a session at `start` (late joiners: the first sequence seen).
  void reset(std::uint64_t start) noexcept;

  enum class Accept : std::uint8_t { kStored, kDuplicate, kBeyond };
  Accept accept(std::uint64_t seq, const core::FrameHeader* frame, std::uint32_t token, std::int64_t now_ns) noexcept;

  // A heartbeat: `next` is the next sequence the publisher will send (a lost tail becomes a
  // gap at once, bounded by the window), `oldest` the oldest it can still retransmit (older
  // gaps become losses once the claim is confirmed, see above). The caller checked
  // oldest <= next.
  void on_heartbeat(std::uint64_t next, std::uint64_t oldest, std::int64_t now_ns) noexcept;

  // Everything missing below `seq` is unrecoverable.
  void declare_lost(std::uint64_t seq) noexcept;

  // Messages and gap reports in sequence order, up to `max`, stopping at the first gap that may
  // still be repaired or at `limit` (exclusive; end of stream). Gap events have kGapLost.
  std::uint32_t drain(RxDesc* out, std::uint32_t max, std::uint32_t session_id, std::uint64_t limit) noexcept;

  // Ranges to NAK now; each is rescheduled with back-off. Gaps past give_up are declared lost,
  // the age counted up to `read_ns`: the last moment the transport had read everything that
  // arrived (ReliableReceiver::drained; default: now). A subscriber behind its socket may have
  // the repair queued there: its gap does not age until it has read that far, and it is not
  // NAKed again before it has read past the previous NAK (re-asking for a repair that waits
  // unread in the socket multiplies the traffic that put it behind).
  std::uint32_t collect_naks(std::int64_t now_ns, NakRange* out, std::uint32_t max,
                             std::int64_t read_ns = INT64_MAX) noexcept;
  // Earliest time collect_naks() may have something (INT64_MAX when nothing is missing).
  std::int64_t next_nak_ns() const noexcept { return ngaps_ == 0 ? INT64_MAX : next_nak_ns_; }

  // Drops a held frame again (its buffer is needed back): the sequence becomes a gap to NAK
  // immediately. False if `seq` does not hold exactly `frame`.
  bool forget(std::uint64_t seq, const void* frame, std::int64_t now_ns) noexcept;

  // Inline direct delivery: `n` frames from `first` that continue delivery exactly (first is the
  // next expected, nothing held, missing or declared lost) are taken as accept() then drain()
  // would take them - counted as stored, delivery moves past them - without a slot or an RxDesc.
  // False, nothing changed, otherwise (then accept()).
  bool take_in_order(std::uint64_t first, std::uint32_t n) noexcept {
    if (first != expected_ || hwm_ != expected_ || held_ != 0 || ngaps_ != 0 || lost_through_ > expected_ ||
        n > mask_) {
      return false;
    }
    expected_ = hwm_ = first + n;
    stats_.frames += n;
    return true;
  }

  // drain() would produce something now.
  bool deliverable() const noexcept { return present(expected_) || expected_ < lost_through_; }

  std::uint64_t expected() const noexcept { return expected_; }
  std::uint64_t hwm() const noexcept { return hwm_; }
  std::uint64_t lost_through() const noexcept { return lost_through_; }
  // `next` of the newest confirmed heartbeat: what the publisher has certainly sent.
  std::uint64_t confirmed_next() const noexcept { return confirmed_next_; }
  std::uint32_t held() const noexcept { return held_; }
  std::uint32_t gaps() const noexcept { return ngaps_; }
  std::uint32_t window() const noexcept { return mask_ + 1; }
  const WindowStats& stats() const noexcept { return stats_; }

 private:
  struct Slot {
    const core::FrameHeader* frame;
    std::uint32_t token;
    std::uint32_t length;
  };
  static_assert(sizeof(Slot) == 16);
  struct Gap {
    std::uint64_t from, to;  // [from, to)
    std::int64_t first_ns;   // detected
    std::int64_t next_nak_ns;
    std::int64_t last_nak_ns;  // when it was last NAKed (a retry waits until read past it)
    std::uint32_t attempts;
  };

  struct Claim {  // a heartbeat's (next, oldest), not yet confirmed
    std::uint64_t next, oldest;
    std::int64_t since_ns;
    bool valid;
  };

  bool present(std::uint64_t s) const noexcept { return slots_[s & mask_].frame != nullptr; }
  void adopt(const Claim& c) noexcept;
  void open_gap(std::uint64_t from, std::uint64_t to, std::int64_t now_ns, std::int64_t first_nak_ns) noexcept;
  void fill(std::uint64_t seq) noexcept;
  // Drops the gaps' parts below `seq`.
  void trim_gaps(std::uint64_t seq) noexcept;
  std::int64_t first_delay() noexcept {
    return opt_.nak_delay_ns > 0
               ? static_cast<std::int64_t>(rng_.below(static_cast<std::uint64_t>(opt_.nak_delay_ns) + 1))
               : 0;
  }

  WindowOptions opt_;
  Region<Slot> slots_;
  std::uint32_t mask_ = 0;
  std::uint64_t expected_ = 1, hwm_ = 1, lost_through_ = 0;
  std::uint64_t confirmed_next_ = 1;
  Claim pending_{};
  std::uint32_t held_ = 0;
  Gap gaps_[kMaxGaps];
  std::uint32_t ngaps_ = 0;
  std::int64_t next_nak_ns_ = INT64_MAX;
  SplitMix64 rng_{1};
  WindowStats stats_;
};

}  // namespace pollux::transport::reliability
