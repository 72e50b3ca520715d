#include "transport/reliability/receive_window.h"

#include <algorithm>
#include <climits>

namespace pollux::transport::reliability {

bool ReceiveWindow::init(const WindowOptions& o, std::uint64_t seed) {
  opt_ = o;
  std::uint32_t w = 64;
  while (w < o.window) w <<= 1;
  slots_ = Region<Slot>(w);  // zeroed and pre-touched: every slot empty
  if (!slots_.ok()) return false;
  mask_ = w - 1;
  rng_.state = seed;
  expected_ = hwm_ = 1;
  reset(1);
  return true;
}

void ReceiveWindow::reset(std::uint64_t start) noexcept {
  for (std::uint64_t s = expected_; s < hwm_ && s - expected_ <= mask_; ++s) slots_[s & mask_] = Slot{};
  expected_ = hwm_ = confirmed_next_ = start;
  pending_ = Claim{};
  lost_through_ = 0;
  held_ = 0;
  ngaps_ = 0;
  next_nak_ns_ = INT64_MAX;
}

ReceiveWindow::Accept ReceiveWindow::accept(std::uint64_t seq, const core::FrameHeader* frame, std::uint32_t token,
                                            std::int64_t now_ns) noexcept {
  if (seq < expected_) {
    ++stats_.duplicates;  // delivered (or reported lost) already
    return Accept::kDuplicate;
  }
  if (seq - expected_ > mask_) {
    ++stats_.beyond;
    return Accept::kBeyond;
  }
  Slot& s = slots_[seq & mask_];
  if (s.frame != nullptr) {
    ++stats_.duplicates;
    return Accept::kDuplicate;
  }
  s = Slot{frame, token, frame->frame_length};
  ++held_;
  ++stats_.frames;
  if (__builtin_expect(seq == hwm_, 1)) {
    hwm_ = seq + 1;
  } else if (seq > hwm_) {
    open_gap(hwm_, seq, now_ns, now_ns + first_delay());
    hwm_ = seq + 1;
  } else {
    ++stats_.fills;
    fill(seq);
  }
  return Accept::kStored;
}

void ReceiveWindow::on_heartbeat(std::uint64_t next, std::uint64_t oldest, std::int64_t now_ns) noexcept {
  // A lost tail is NAKed at once: the gap is bounded by the window, and NAKs for what was never
  // sent cost the publisher nothing (it clips them). It is not given up on before a confirmed
  // heartbeat says it was sent (collect_naks), so a forged `next` cannot make it a loss.
  if (next > hwm_) {
    const std::uint64_t to = std::min<std::uint64_t>(next, expected_ + mask_ + 1);
    if (to > hwm_) {
      open_gap(hwm_, to, now_ns, now_ns + first_delay());
      hwm_ = to;
    }
  }
  // Claims: confirmed by a later consistent heartbeat at least confirm_ns on, refuted by one
  // that claims less (forged, or an older heartbeat reordered behind a newer one: then the
  // confirmation only starts again).
  if (!pending_.valid) {
    pending_ = Claim{next, oldest, now_ns, true};
    return;
  }
  if (next < pending_.next || oldest < pending_.oldest) {
    ++stats_.claims_refuted;
    pending_ = Claim{next, oldest, now_ns, true};
    return;
  }
  if (now_ns - pending_.since_ns >= opt_.confirm_ns) {
    adopt(pending_);
    pending_ = Claim{next, oldest, now_ns, true};
  }
}

void ReceiveWindow::adopt(const Claim& c) noexcept {
  confirmed_next_ = std::max(confirmed_next_, c.next);
  // However far: the publisher's log no longer has anything below c.oldest, and a confirmed
  // claim is the publisher's word (delivery reports the exact count and resumes there).
  if (c.oldest > expected_) declare_lost(c.oldest);
}

void ReceiveWindow::declare_lost(std::uint64_t seq) noexcept {
  if (seq <= lost_through_) return;
  lost_through_ = seq;
  trim_gaps(seq);
  if (hwm_ < seq) hwm_ = seq;
}

// Drops the gaps' parts below `seq`. A gap cut there starts at the first frame from `seq` on
// that is missing: one held at `seq` would otherwise be delivered by drain() and still be NAKed
// (fuzz_receive_window).
void ReceiveWindow::trim_gaps(std::uint64_t seq) noexcept {
  std::uint32_t keep = 0;
  for (std::uint32_t i = 0; i < ngaps_; ++i) {
    Gap g = gaps_[i];
    if (g.from < seq) {
      g.from = seq;
      while (g.from < g.to && present(g.from)) ++g.from;
    }
    if (g.from >= g.to) continue;
    gaps_[keep++] = g;
  }
  ngaps_ = keep;
}

void ReceiveWindow::open_gap(std::uint64_t from, std::uint64_t to, std::int64_t now_ns,
                             std::int64_t first_nak_ns) noexcept {
  from = std::max(from, lost_through_);
  if (from >= to) return;
  ++stats_.gaps_opened;
  next_nak_ns_ = std::min(next_nak_ns_, first_nak_ns);
  // Sorted insert position: first gap starting after `from`.
  std::uint32_t i = ngaps_;
  while (i > 0 && gaps_[i - 1].from > from) --i;
  // Adjacent to (or overlapping) the previous gap: extend it.
  if (i > 0 && gaps_[i - 1].to >= from) {
    Gap& p = gaps_[i - 1];
    p.to = std::max(p.to, to);
    p.next_nak_ns = std::min(p.next_nak_ns, first_nak_ns);
    while (i < ngaps_ && gaps_[i].from <= p.to) {  // swallowed the next one(s)
      p.to = std::max(p.to, gaps_[i].to);
      std::copy(gaps_ + i + 1, gaps_ + ngaps_, gaps_ + i);
      --ngaps_;
    }
    return;
  }
  if (i < ngaps_ && gaps_[i].from <= to) {
    Gap& n = gaps_[i];
    n.from = from;
    n.to = std::max(n.to, to);
    n.next_nak_ns = std::min(n.next_nak_ns, first_nak_ns);
    return;
  }
  if (ngaps_ == kMaxGaps) {
    // Too many holes at once: widen a neighbour over this one. NAKs for the merged range ask
    // for some frames we hold; their repairs are dropped as duplicates. Rare by construction
    // (kMaxGaps distinct holes inside one window).
    if (i > 0) {
      gaps_[i - 1].to = to;
      gaps_[i - 1].next_nak_ns = std::min(gaps_[i - 1].next_nak_ns, first_nak_ns);
    } else {
      gaps_[0].from = from;
      gaps_[0].next_nak_ns = std::min(gaps_[0].next_nak_ns, first_nak_ns);
    }
    return;
  }
  std::copy_backward(gaps_ + i, gaps_ + ngaps_, gaps_ + ngaps_ + 1);
  gaps_[i] = Gap{from, to, now_ns, first_nak_ns, 0, 0};
  ++ngaps_;
}

void ReceiveWindow::fill(std::uint64_t seq) noexcept {
  // Last gap starting at or before seq.
  std::uint32_t lo = 0, hi = ngaps_;
  while (lo < hi) {
    const std::uint32_t mid = (lo + hi) / 2;
    if (gaps_[mid].from <= seq) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  if (lo == 0) return;
  const std::uint32_t i = lo - 1;
  Gap& g = gaps_[i];
  if (seq >= g.to) return;
  if (seq == g.from) {
    ++g.from;
    while (g.from < g.to && present(g.from)) ++g.from;
  } else if (seq == g.to - 1) {
    --g.to;
    while (g.to > g.from && present(g.to - 1)) --g.to;
  } else {
    // Inside: split around seq. A gap may cover frames already held (widened over them when
    // kMaxGaps holes were open, or a fill that could not split), so each part ends at its
    // missing frames: the part before at the last missing one before seq, the part after starts
    // at the first missing one after it (fuzz_receive_window: a part starting at a held frame
    // was NAKed after drain() had delivered past it).
    std::uint64_t lo = seq, hi = seq + 1;
    while (lo > g.from && present(lo - 1)) --lo;
    while (hi < g.to && present(hi)) ++hi;
    if (hi == g.to) {
      g.to = lo;  // nothing missing after seq
    } else if (lo == g.from) {
      g.from = hi;  // nothing missing before seq
    } else if (ngaps_ < kMaxGaps) {
      std::copy_backward(gaps_ + i + 1, gaps_ + ngaps_, gaps_ + ngaps_ + 1);
      gaps_[i + 1] = g;
      gaps_[i + 1].from = hi;
      g.to = lo;
      ++ngaps_;
      return;
    }  // else: no room to split; the gap keeps covering seq (NAKs may ask for a held frame)
  }
  if (g.from >= g.to) {
    std::copy(gaps_ + i + 1, gaps_ + ngaps_, gaps_ + i);
    --ngaps_;
  }
}

std::uint32_t ReceiveWindow::drain(RxDesc* out, std::uint32_t max, std::uint32_t session_id,
                                   std::uint64_t limit) noexcept {
  std::uint32_t n = 0;
  while (n < max && expected_ < limit) {
    Slot& sl = slots_[expected_ & mask_];
    if (sl.frame != nullptr) {
      RxDesc& d = out[n++];
      d.frame = sl.frame;
      d.token = sl.token;
      d.sequence = expected_;
      d.gap_count = 0;
      d.receive_ns = 0;
      d.ring_ns = 0;
      d.length = sl.length;
      d.kind = RxKind::kMessage;
      d.reason = 0;
      d.session_id = session_id;
      d.reserved = 0;
      sl.frame = nullptr;
      --held_;
      ++expected_;
      continue;
    }
    if (expected_ >= lost_through_) break;  // missing, still repairable: wait
    const std::uint64_t end = std::min(lost_through_, limit);
    const std::uint64_t scan_end = std::min({end, hwm_, expected_ + mask_ + 1});
    std::uint64_t e = expected_ + 1;
    while (e < scan_end && !present(e)) ++e;
    if (e >= scan_end) e = end;  // nothing held before `end`
    RxDesc& d = out[n++];
    d = RxDesc{};
    d.kind = RxKind::kGap;
    d.reason = kGapLost;
    d.sequence = expected_;
    d.gap_count = e - expected_;
    d.session_id = session_id;
    stats_.lost += e - expected_;
    ++stats_.loss_reports;
    expected_ = e;
  }
  if (hwm_ < expected_) hwm_ = expected_;
  return n;
}

std::uint32_t ReceiveWindow::collect_naks(std::int64_t now_ns, NakRange* out, std::uint32_t max,
                                          std::int64_t read_ns) noexcept {
  read_ns = std::min(read_ns, now_ns);
  // Gaps past the give-up age are reported rather than left to stall delivery (publisher
  // unreachable, or every repair lost): everything up to the newest such gap is declared lost.
  // Only what a confirmed heartbeat says was sent can be given up: a gap reaching beyond it
  // (a lost tail not yet confirmed, or one a forged frame or heartbeat opened) has not started
  // its give-up clock, so it never makes unsent - or forged - sequences "lost".
  std::uint64_t give_up_to = 0;
  for (std::uint32_t i = 0; i < ngaps_; ++i) {
    Gap& g = gaps_[i];
    if (g.to > confirmed_next_) {
      g.first_ns = now_ns;
    } else if (g.next_nak_ns <= now_ns && read_ns - g.first_ns > opt_.give_up_ns) {
      give_up_to = g.to;
    }
  }
  if (give_up_to != 0) {
    ++stats_.gaps_given_up;
    declare_lost(give_up_to);
  }
  std::uint32_t n = 0;
  std::int64_t next = INT64_MAX;
  for (std::uint32_t i = 0; i < ngaps_; ++i) {
    Gap& g = gaps_[i];
    if (g.next_nak_ns <= now_ns && n < max && g.attempts > 0 && read_ns < g.last_nak_ns) {
      // NAKed, and not read past that since: the repair may be queued unread. Look again later.
      g.next_nak_ns = now_ns + opt_.nak_retry_ns;
    } else if (g.next_nak_ns <= now_ns && n < max) {
      g.last_nak_ns = now_ns;
      out[n++] = NakRange{g.from, g.to - g.from};
      ++stats_.nak_ranges;
      ++g.attempts;
      const std::uint32_t shift = std::min<std::uint32_t>(g.attempts - 1, 20);
      g.next_nak_ns = now_ns + std::min(opt_.nak_retry_ns << shift, opt_.nak_retry_max_ns);
    }
    next = std::min(next, g.next_nak_ns);
  }
  next_nak_ns_ = next;
  return n;
}

bool ReceiveWindow::forget(std::uint64_t seq, const void* frame, std::int64_t now_ns) noexcept {
  if (seq < expected_ || seq >= hwm_ || seq - expected_ > mask_) return false;
  Slot& s = slots_[seq & mask_];
  if (s.frame != frame) return false;
  s = Slot{};
  --held_;
  open_gap(seq, seq + 1, now_ns, now_ns);
  return true;
}

}  // namespace pollux::transport::reliability
