#include "feed_handler/arbiter.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "itch/reader.h"

namespace pollux::feed {

namespace mold = itch::mold;

constexpr std::array<LiveCounterInfo, kLiveCounterCount> kLiveCounters = {{
    {"packets_a", "datagrams read on line A"},
    {"packets_b", "datagrams read on line B"},
    {"replay_packets", "datagrams read on the re-request socket (replies)"},
    {"messages", "ITCH messages delivered in sequence order"},
    {"heartbeats", "heartbeat packets of the current session (both lines)"},
    {"end_of_session", "end-of-session packets of the current session (both lines)"},
    {"duplicate_packets", "packets that carried nothing new"},
    {"duplicate_messages", "messages dropped because an earlier copy won"},
    {"out_of_order_packets", "packets (partly) buffered behind a gap"},
    {"out_of_order_messages", "messages buffered behind a gap"},
    {"gaps_detected", "missing ranges found"},
    {"rerequests_sent", "re-request packets sent, retries included"},
    {"rerequest_retries", "re-requests sent again after a timeout"},
    {"rerequests_answered", "re-requests at least one message of which came back"},
    {"rerequests_timed_out", "re-requests nothing of which came back in time"},
    {"rerequest_send_errors", "re-requests the socket refused (they time out and are sent again)"},
    {"messages_recovered", "messages delivered from re-request replies"},
    {"gaps_unrecoverable", "ranges reported to the subscribers as lost"},
    {"messages_unrecoverable", "messages in those ranges"},
    {"window_overflow", "messages dropped beyond a window that could not be emptied (then recovered or reported)"},
    {"malformed", "datagrams refused by the MoldUDP64 or ITCH decoder, or truncated"},
    {"wrong_session", "datagrams of a session not followed"},
    {"old_session", "datagrams of a session already left"},
    {"stale", "times the feed went stale (no packet on either line)"},
    {"stale_a", "times line A went quiet for the stale interval"},
    {"stale_b", "times line B went quiet for the stale interval"},
    {"session_changes", "sessions started after the first"},
    {"gaps_given_up", "ranges reported lost before their retries ran out, to make room in a full window"},
    {"wrong_source", "line datagrams from another sender than feed.source_a/source_b, dropped before arbitration"},
}};
static_assert(kLiveCounters.back().name != nullptr, "a LiveCounter without a name");

namespace {
constexpr std::uint64_t kMaxRequest = 0xFFFF;
constexpr std::uint64_t kMaxSequence = std::uint64_t{1} << 62;
}

Arbiter::Arbiter(const ArbiterOptions& o) : o_(o) {
  const std::uint32_t w = std::bit_ceil(std::max<std::uint32_t>(o_.window, 64));
  o_.window = w;
  mask_ = w - 1;
  // Touched now (assign writes every slot), not on the first gap.
  window_.assign(w, Slot{0, 0, {}});
  o_.max_gaps = std::max<std::uint32_t>(o_.max_gaps, 1);
  o_.max_outstanding = std::max<std::uint32_t>(o_.max_outstanding, 1);
  // Splits (a fill inside a range, a request cut at 65535) may go past max_gaps by a little.
  gaps_.reserve(o_.max_gaps + 2 * o_.max_outstanding + 16);
  reqs_.assign(o_.max_outstanding, Request{false, false, 0, 0});
  requests_.resize(o_.max_outstanding);
  out_.assign(std::max<std::size_t>(o_.output_bytes, 4096), 0);
  notices_.resize(256);
  if (!o_.session.empty()) {
    wanted_ = mold::Session::From(o_.session);
    have_wanted_ = true;
  }
}

// ---- output ------------------------------------------------------------------------------

bool Arbiter::Emit(const std::uint8_t* rec, std::size_t n, std::int64_t rx_ns) noexcept {
  if (out_.size() - out_len_ < n) return false;
  std::memcpy(out_.data() + out_len_, rec, n);
  out_len_ += n;
  if (out_rx_ns_ == 0 || rx_ns < out_rx_ns_) out_rx_ns_ = rx_ns;
  return true;
}

bool Arbiter::PushNotice(const Notice& n) noexcept {
  if (nnotices_ == notices_.size()) return false;
  notices_[nnotices_++] = {n, out_len_};
  return true;
}

bool Arbiter::Next(Piece* p) noexcept {
  if (notice_taken_ < nnotices_ && notices_[notice_taken_].at == out_taken_) {
    p->bytes = {};
    p->notice = &notices_[notice_taken_++].n;
    p->rx_ns = out_rx_ns_;
    return true;
  }
  const std::size_t limit = notice_taken_ < nnotices_ ? notices_[notice_taken_].at : out_len_;
  if (out_taken_ < limit) {
    p->bytes = {out_.data() + out_taken_, limit - out_taken_};
    p->notice = nullptr;
    p->rx_ns = out_rx_ns_;
    out_taken_ = limit;
    return true;
  }
  return false;
}

void Arbiter::ResetOutput() noexcept {
  out_len_ = out_taken_ = 0;
  nnotices_ = notice_taken_ = 0;
  out_rx_ns_ = 0;
}

// ---- sessions ------------------------------------------------------------------------------

void Arbiter::StartSession(const mold::Session& s) noexcept {
  if (buffered_ != 0) {  // never with a finished session; kept safe all the same
    for (Slot& sl : window_) sl.seq = 0;
    buffered_ = 0;
  }
  session_ = s;
  have_session_ = true;
  next_ = hi_ = 1;
  end_seq_ = 0;
  line_end_ = {1, 1};
  line_rx_ns_ = {0, 0};
  line_stale_ = {};
  first_rx_ns_ = 0;
  have_rx_ = false;
  stale_ = false;
  finished_ns_ = 0;
  gaps_.clear();
  for (Request& r : reqs_) r = Request{false, false, 0, 0};
  outstanding_ = 0;
  Notice n;
  n.kind = Notice::kSession;
  n.session = s;
  (void)PushNotice(n);
}

// ---- packets -------------------------------------------------------------------------------

Arbiter::Verdict Arbiter::OnPacket(Line line, std::span<const std::uint8_t> datagram, std::int64_t now_ns,
                                   bool truncated) noexcept {
  const int li = static_cast<int>(line);
  if (line == Line::kReplay) {
    Count(LiveCounter::kReplayPackets);
  } else if (reoffer_[li]) {
    reoffer_[li] = false;  // the parked datagram again: already counted
  } else {
    Count(line == Line::kA ? LiveCounter::kPacketsA : LiveCounter::kPacketsB);
  }
  if (truncated) {
    Count(LiveCounter::kMalformed);
    return Verdict::kRejected;
  }
  const mold::Packet p = mold::Parse(datagram);
  // Beyond 2^62 a sequence is not a feed's (decades at 10^9 messages/s) but a hostile or
  // corrupt one, and the window arithmetic (next + window) must not wrap.
  if (!p.ok() || p.sequence > kMaxSequence) {
    Count(LiveCounter::kMalformed);
    return Verdict::kRejected;
  }
  if (p.kind == mold::Kind::kData) {
    // Every block must be one valid ITCH message: the blocks are BinaryFILE records.
    const itch::ParseResult r =
        itch::ForEachMessage(datagram.subspan(mold::kPacketHeaderSize), [](itch::MessageView) {});
    if (!r.ok() || r.messages != p.count) {
      Count(LiveCounter::kMalformed);
      return Verdict::kRejected;
    }
  }
  if (!have_session_ || p.session != session_) {
    for (std::uint32_t i = 0; i < nretired_ && i < retired_.size(); ++i) {
      if (retired_[i] == p.session) {
        Count(LiveCounter::kOldSession);
        return Verdict::kRejected;
      }
    }
    if (line == Line::kReplay || (have_wanted_ && p.session != wanted_)) {
      Count(LiveCounter::kWrongSession);
      return Verdict::kRejected;
    }
    if (!have_session_) {
      StartSession(p.session);
    } else {
      if (!have_pending_) {
        pending_ = p.session;
        have_pending_ = true;
      } else if (pending_ != p.session) {
        Count(LiveCounter::kWrongSession);  // a third session while one is waiting
        return Verdict::kRejected;
      }
      parked_[li] = true;
      reoffer_[li] = true;
      return Verdict::kPark;
    }
  }

  // The current session.
  if (line != Line::kReplay) {
    line_rx_ns_[li] = now_ns;
    line_stale_[li] = false;
    if (!have_rx_) {
      have_rx_ = true;
      first_rx_ns_ = now_ns;
    }
    if (stale_) {
      stale_ = false;
      Notice n;
      n.kind = Notice::kFresh;
      n.session = session_;
      (void)PushNotice(n);
    }
  }
  switch (p.kind) {
    case mold::Kind::kHeartbeat:
      if (line == Line::kReplay) return Verdict::kDuplicate;
      Count(LiveCounter::kHeartbeats);
      Advance(line, p.sequence, now_ns);
      return Verdict::kAccepted;
    case mold::Kind::kEndOfSession:
      if (line == Line::kReplay) return Verdict::kDuplicate;
      Count(LiveCounter::kEndOfSession);
      end_seq_ = std::max(end_seq_, p.sequence);
      Advance(line, p.sequence, now_ns);
      return Verdict::kAccepted;
    case mold::Kind::kData: break;
  }
  const bool took = Take(line, p, now_ns);
  Pump();
  return took ? Verdict::kAccepted : Verdict::kDuplicate;
}

void Arbiter::Advance(Line line, std::uint64_t end, std::int64_t now_ns) noexcept {
  if (line != Line::kReplay) {
    std::uint64_t& le = line_end_[static_cast<int>(line)];
    le = std::max(le, end);
  }
  if (end <= hi_) return;
  if (gaps_.size() >= o_.max_gaps) {
    // Too many ranges open at once: this jump is not recorded. hi_ stays, so a later packet
    // or heartbeat past it opens the range again once there is room.
    return;
  }
  // A range longer than the window cannot be recovered: what arrives behind it would have to
  // be dropped meanwhile. It is reported when the cursor reaches it.
  gaps_.push_back(Gap{hi_, end, now_ns, 0, -1, end - hi_ > o_.window});
  Count(LiveCounter::kGapsDetected);
  hi_ = end;
}

bool Arbiter::Take(Line line, const mold::Packet& p, std::int64_t now_ns) noexcept {
  const std::uint64_t seq = p.sequence;
  const std::uint64_t end = p.next_sequence();
  if (line != Line::kReplay) {
    std::uint64_t& le = line_end_[static_cast<int>(line)];
    le = std::max(le, end);
  }
  if (end <= next_) {
    Count(LiveCounter::kDuplicatePackets);
    Count(LiveCounter::kDuplicateMessages, p.count);
    return false;
  }
  // Fast path: the next packet in order with nothing waiting - its blocks are the output.
  if (seq == next_ && hi_ == next_) {
    const std::uint8_t* blocks = p.begin() == p.end() ? nullptr : (*p.begin()).data() - mold::kBlockLengthSize;
    const std::size_t n = p.size - mold::kPacketHeaderSize;
    if (blocks != nullptr && Emit(blocks, n, now_ns)) {
      next_ = hi_ = end;
      Count(LiveCounter::kMessages, p.count);
      if (line == Line::kReplay) Count(LiveCounter::kMessagesRecovered, p.count);
      return true;
    }
  }
  if (seq > hi_) {
    if (line == Line::kReplay) {
      // Replies answer requests, which lie below hi_: this one is not ours.
      Count(LiveCounter::kDuplicatePackets);
      Count(LiveCounter::kDuplicateMessages, p.count);
      return false;
    }
    const std::uint64_t before = gaps_.size();
    Advance(line, seq, now_ns);
    if (gaps_.size() == before && hi_ < seq) {
      Count(LiveCounter::kWindowOverflow, p.count);  // no room to record the range
      return false;
    }
  }
  // Live data that does not fit the window is kept; the oldest ranges in front of it are
  // given up instead (a reply beyond the window could not be kept anyway).
  if (line != Line::kReplay && end > next_ + o_.window) MakeRoom(seq, end);
  const std::uint64_t old_hi = hi_;
  const std::uint64_t limit = next_ + o_.window;  // first sequence beyond the window
  // First range that may hold `seq` or later.
  auto gi = std::lower_bound(gaps_.begin(), gaps_.end(), std::max(seq, next_),
                             [](const Gap& g, std::uint64_t s) { return g.to <= s; });
  std::uint64_t stored = 0, dups = 0, overflow = 0;
  std::uint64_t fill_from = 0, fill_to = 0;  // the run of stored messages inside ranges
  std::uint64_t s = seq;
  for (const std::span<const std::uint8_t> m : p) {
    const std::uint64_t cur = s++;
    if (cur < next_) {
      ++dups;
      continue;
    }
    bool take = false;
    if (cur >= old_hi) {
      if (cur >= limit) {
        overflow = end - cur;
        break;
      }
      take = true;
      hi_ = cur + 1;
    } else {
      while (gi != gaps_.end() && gi->to <= cur) ++gi;
      take = gi != gaps_.end() && gi->from <= cur && !gi->lost && cur < limit;
      if (take) {
        if (fill_to != cur) fill_from = cur;
        fill_to = cur + 1;
      } else if (gi != gaps_.end() && gi->from <= cur && cur >= limit) {
        ++overflow;
        continue;
      }
    }
    if (!take) {
      ++dups;
      continue;
    }
    Slot& sl = window_[cur & mask_];
    sl.seq = cur;
    sl.len = static_cast<std::uint8_t>(m.size());
    std::memcpy(sl.data, m.data(), m.size());
    if (buffered_++ == 0) buffered_rx_ns_ = now_ns;
    ++stored;
  }
  // The stored messages inside ranges form one run: packets carry consecutive messages and a
  // run only breaks at a range's end, where the next message is present already.
  if (fill_to > fill_from) Fill(fill_from, fill_to, line == Line::kReplay);
  if (overflow != 0) Count(LiveCounter::kWindowOverflow, overflow);
  if (dups != 0) Count(LiveCounter::kDuplicateMessages, dups);
  if (stored == 0) {
    if (overflow == 0) Count(LiveCounter::kDuplicatePackets);
    return false;
  }
  if (line == Line::kReplay) Count(LiveCounter::kMessagesRecovered, stored);
  // Buffered unless it is about to be delivered: the first message at the cursor with no
  // range in front of it.
  if (!(seq <= next_ && (gaps_.empty() || gaps_.front().from > next_))) {
    Count(LiveCounter::kOutOfOrderPackets);
    Count(LiveCounter::kOutOfOrderMessages, stored);
  }
  return true;
}

void Arbiter::MakeRoom(std::uint64_t seq, std::uint64_t end) noexcept {
  while (end > next_ + o_.window && !gaps_.empty() && gaps_.front().to <= seq) {
    Gap& g = gaps_.front();
    if (!g.lost) {
      g.lost = true;  // Pump() reports it and delivers what waited behind it
      Count(LiveCounter::kGapsGivenUp);
    }
    const std::uint64_t before = next_;
    Pump();
    if (next_ == before) return;  // the output is full: the caller takes it first
  }
}

void Arbiter::DropRequestRef(std::int32_t req) noexcept {
  if (req < 0) return;
  Request& r = reqs_[static_cast<std::size_t>(req)];
  if (r.refs > 0 && --r.refs == 0 && r.active) {
    r.active = false;
    --outstanding_;
  }
}

void Arbiter::Fill(std::uint64_t a, std::uint64_t b, bool from_replay) noexcept {
  auto it = std::lower_bound(gaps_.begin(), gaps_.end(), a, [](const Gap& g, std::uint64_t s) { return g.to <= s; });
  std::size_t i = static_cast<std::size_t>(it - gaps_.begin());
  while (i < gaps_.size() && gaps_[i].from < b) {
    Gap& g = gaps_[i];
    if (g.lost) {
      ++i;
      continue;
    }
    if (from_replay && g.req >= 0) {
      Request& r = reqs_[static_cast<std::size_t>(g.req)];
      if (r.active && !r.answered) {
        r.answered = true;
        Count(LiveCounter::kRerequestsAnswered);
      }
    }
    if (a <= g.from && b >= g.to) {
      DropRequestRef(g.req);
      gaps_.erase(gaps_.begin() + static_cast<std::ptrdiff_t>(i));
      continue;
    }
    if (a <= g.from) {
      g.from = b;
    } else if (b >= g.to) {
      g.to = a;
    } else if (gaps_.size() < gaps_.capacity()) {
      Gap tail = g;
      tail.from = b;
      g.to = a;
      if (tail.req >= 0) ++reqs_[static_cast<std::size_t>(tail.req)].refs;
      gaps_.insert(gaps_.begin() + static_cast<std::ptrdiff_t>(i) + 1, tail);
      ++i;
    }
    // (No room to split: the range stays whole and the messages stored inside it are
    // delivered or cleared with it - a loss reported a little too wide, never a silent one.)
    ++i;
  }
}

void Arbiter::Pump() noexcept {
  for (;;) {
    if (!gaps_.empty() && gaps_.front().from <= next_) {
      Gap& g = gaps_.front();
      if (!g.lost) return;  // waiting for it
      Notice n;
      n.kind = Notice::kGap;
      n.session = session_;
      n.from = g.from;
      n.count = g.to - g.from;
      if (!PushNotice(n)) return;  // the caller takes the output first
      Count(LiveCounter::kGapsUnrecoverable);
      Count(LiveCounter::kMessagesUnrecoverable, n.count);
      // Anything stored inside it (a range that could not be split) goes with it.
      const std::uint64_t stop = std::min(g.to, g.from + o_.window);
      for (std::uint64_t s = g.from; s < stop && buffered_ != 0; ++s) {
        Slot& sl = window_[s & mask_];
        if (sl.seq == s) {
          sl.seq = 0;
          --buffered_;
        }
      }
      DropRequestRef(g.req);
      next_ = g.to;
      gaps_.erase(gaps_.begin());
      continue;
    }
    const std::uint64_t limit = gaps_.empty() ? hi_ : gaps_.front().from;
    if (next_ >= limit) return;
    // Messages present from the cursor to the next range (or the frontier).
    std::uint64_t delivered = 0;
    while (next_ < limit) {
      Slot& sl = window_[next_ & mask_];
      const std::uint8_t rec[2] = {0, sl.len};
      if (out_.size() - out_len_ < 2u + sl.len) break;
      // An invariant: every sequence in [next_, hi_) outside a range is in the window. Were
      // it ever broken, the message is reported lost rather than the stream stalled.
      if (sl.seq != next_) [[unlikely]] {
        Notice n;
        n.kind = Notice::kGap;
        n.session = session_;
        n.from = next_;
        n.count = 1;
        if (!PushNotice(n)) break;
        Count(LiveCounter::kGapsUnrecoverable);
        Count(LiveCounter::kMessagesUnrecoverable);
        ++next_;
        continue;
      }
      (void)Emit(rec, 2, buffered_rx_ns_);
      (void)Emit(sl.data, sl.len, buffered_rx_ns_);
      sl.seq = 0;
      --buffered_;
      ++next_;
      ++delivered;
    }
    Count(LiveCounter::kMessages, delivered);
    if (next_ < limit) return;  // output full
  }
}

// ---- timers --------------------------------------------------------------------------------

void Arbiter::LineDrained(Line line, std::int64_t now_ns) noexcept {
  if (line != Line::kReplay) line_drained_ns_[static_cast<int>(line)] = now_ns;
}

bool Arbiter::Confirmed(const Gap& g, std::int64_t now_ns) const noexcept {
  if (g.attempts > 0) return true;  // a retry
  for (int l = 0; l < 2; ++l) {
    if (line_end_[l] >= g.to) continue;  // this line went past it: missing there too
    // A line that has not got there yet: wait, and then for its socket to be read empty.
    const std::int64_t due = g.detected_ns + o_.rerequest_wait_ns;
    if (now_ns < due || line_drained_ns_[l] < due) return false;
  }
  return true;
}

bool Arbiter::Finished() const noexcept {
  return have_session_ && end_seq_ != 0 && gaps_.empty() && next_ == hi_ && next_ >= end_seq_;
}

void Arbiter::CheckStale(std::int64_t now_ns) noexcept {
  if (!have_rx_ || end_seq_ != 0) return;  // no feed yet, or the session is over
  const std::int64_t quiet = o_.heartbeat_ns * static_cast<std::int64_t>(o_.stale_heartbeats);
  for (int l = 0; l < 2; ++l) {
    if (!line_stale_[l] && now_ns - std::max(line_rx_ns_[l], first_rx_ns_) > quiet) {
      line_stale_[l] = true;
      Count(l == 0 ? LiveCounter::kStaleA : LiveCounter::kStaleB);
    }
  }
  if (line_stale_[0] && line_stale_[1] && !stale_) {
    Notice n;
    n.kind = Notice::kStale;
    n.session = session_;
    if (PushNotice(n)) {
      stale_ = true;
      Count(LiveCounter::kStale);
    }
  }
}

void Arbiter::Tick(std::int64_t now_ns) noexcept {
  if (!have_session_) return;
  CheckStale(now_ns);
  // Messages a line delivered but the window could not take (or a range the gap list had no
  // room for): missing, like a loss, once there is room to record them.
  if (const std::uint64_t seen = std::max(line_end_[0], line_end_[1]); seen > hi_) Advance(Line::kReplay, seen, now_ns);
  // Timeouts: the ranges of an expired request become eligible again, or unrecoverable once
  // their retries are spent.
  for (std::size_t k = 0; k < reqs_.size(); ++k) {
    Request& r = reqs_[k];
    if (!r.active || now_ns < r.timeout_at) continue;
    if (!r.answered) Count(LiveCounter::kRerequestsTimedOut);
    r.active = false;
    r.refs = 0;
    --outstanding_;
    for (Gap& g : gaps_) {
      if (g.req != static_cast<std::int32_t>(k)) continue;
      g.req = -1;
      if (g.attempts > o_.rerequest_retries) g.lost = true;
    }
  }
  // New requests, oldest range first; only for ranges inside the window (a reply beyond it
  // could not be kept).
  const std::uint64_t limit = next_ + o_.window;
  for (std::size_t i = 0; i < gaps_.size(); ++i) {
    Gap& g = gaps_[i];
    if (g.lost || g.req >= 0) continue;
    if (g.from >= limit) break;
    if (!Confirmed(g, now_ns)) continue;
    if (!o_.rerequest) {
      g.lost = true;
      continue;
    }
    if (outstanding_ >= o_.max_outstanding || nrequests_ >= requests_.size()) break;
    const std::uint64_t n = std::min({g.to, limit, g.from + kMaxRequest}) - g.from;
    if (g.from + n < g.to && gaps_.size() < gaps_.capacity()) {
      Gap tail = g;
      tail.from = g.from + n;
      g.to = g.from + n;
      gaps_.insert(gaps_.begin() + static_cast<std::ptrdiff_t>(i) + 1, tail);
    }
    Gap& h = gaps_[i];  // insert() may have moved it
    std::size_t k = 0;
    while (reqs_[k].active) ++k;  // outstanding_ < max_outstanding: one is free
    const int shift = static_cast<int>(std::min<std::uint32_t>(h.attempts, 20));
    const std::int64_t timeout = std::min(o_.rerequest_timeout_ns << shift, o_.rerequest_timeout_max_ns);
    reqs_[k] = Request{true, false, 1, now_ns + timeout};
    ++outstanding_;
    h.req = static_cast<std::int32_t>(k);
    if (h.attempts++ > 0) Count(LiveCounter::kRerequestRetries);
    requests_[nrequests_++] = RerequestOut{session_, h.from, static_cast<std::uint16_t>(n)};
    Count(LiveCounter::kRerequestsSent);
  }
  Pump();

  if (have_pending_ && end_seq_ == 0) {
    // A new session without an end of this one: it ended where both lines left it - once
    // each has moved to the new session or gone quiet for the wait.
    bool both = true;
    for (int l = 0; l < 2; ++l) {
      both = both && (parked_[l] || now_ns - line_rx_ns_[l] > o_.rerequest_wait_ns);
    }
    if (both) end_seq_ = std::max<std::uint64_t>(hi_, 1);
  }
  if (!Finished()) return;
  if (have_pending_) {
    if (nretired_ < retired_.size()) {
      retired_[nretired_++] = session_;
    } else {
      std::rotate(retired_.begin(), retired_.begin() + 1, retired_.end());
      retired_.back() = session_;
    }
    have_pending_ = false;
    parked_ = {};
    Count(LiveCounter::kSessionChanges);
    StartSession(pending_);
    return;
  }
  if (finished_ns_ == 0) finished_ns_ = now_ns;
  if (now_ns - finished_ns_ >= o_.end_linger_ns) done_ = true;
}

}  // namespace pollux::feed
