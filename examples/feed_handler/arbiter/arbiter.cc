#include "feed_handler/arbiter/arbiter.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "itch/endian.h"
#include "itch/reader.h"

namespace pollux::feed {

namespace mold = itch::mold;

constexpr std::array<LiveCounterInfo, kLiveCounterCount> kLiveCounters = {{
    {"packets_a", "datagrams read on line A (from feed.source_a when set)"},
    {"packets_b", "datagrams read on line B (from feed.source_b when set)"},
    {"replay_packets", "datagrams read on the re-request socket (replies)"},
    {"messages", "ITCH messages delivered in sequence order"},
    {"heartbeats", "heartbeat packets of the current session (both lines)"},
    {"end_of_session", "end-of-session packets of the current session (both lines)"},
    {"duplicate_packets", "packets that carried nothing new"},
    {"duplicate_messages", "messages dropped because an earlier copy won"},
    {"out_of_order_packets", "packets (partly) buffered behind a gap"},
    {"out_of_order_messages", "messages buffered behind a gap"},
    {"gaps_detected", "missing ranges found"},
    {"rerequests_sent", "re-request packets sent for missing ranges (follow-ups and retries included)"},
    {"rerequest_retries", "re-requests sent again after one that brought nothing"},
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
    {"rerequest_followups", "re-requests sent at once for the rest of a range a reply filled in part"},
    {"confirm_requests", "requests sent to the server to confirm a sequence only one line showed"},
    {"unconfirmed", "packets held because they skipped ahead of what the other line or the server confirmed"},
    {"unconfirmed_dropped", "held packets dropped unconfirmed (contradicted, expired, or no room)"},
    {"ends_refused", "end-of-session packets not acted on (below data received, contradicted, or disagreeing)"},
    {"conflicting_copies", "messages whose later copy differs from the one delivered or buffered"},
    {"next_session_held", "datagrams of another session held until the current one is over"},
    {"next_session_dropped", "held datagrams of another session dropped (hold full, or their line stayed)"},
    {"wrong_source", "line datagrams from another sender than feed.source_a/source_b, dropped before arbitration"},
}};
static_assert(kLiveCounters.back().name != nullptr, "a LiveCounter without a name");

namespace {
constexpr std::uint64_t kMaxRequest = 0xFFFF;
constexpr std::uint64_t kMaxSequence = std::uint64_t{1} << 62;
constexpr std::size_t kHeldEntries = 4096;
constexpr std::size_t kReservedNotices = 16;

// Bytes of the BinaryFILE record (length prefix included) at `p`; the caller knows it is whole.
inline std::size_t record_size(const std::uint8_t* p) noexcept { return 2u + itch::load_be16(p); }
}  // namespace

// ---- delivered log -------------------------------------------------------------------------

namespace detail {

DeliveredLog::DeliveredLog(std::size_t bytes, std::size_t runs)
    : bytes_(std::bit_ceil(std::max<std::size_t>(bytes, 4096)), 0),
      bmask_(bytes_.size() - 1),
      runs_(std::bit_ceil(std::max<std::size_t>(runs, 64)), Run{0, 0, 0, 0, false}),
      rmask_(runs_.size() - 1) {}

void DeliveredLog::clear() noexcept { rtail_ = rhead_; }

void DeliveredLog::append(std::uint64_t seq, std::uint32_t count, const std::uint8_t* recs, std::size_t n,
                          bool packet) noexcept {
  if (count == 0 || n == 0 || n > bytes_.size()) return;
  const std::size_t at = wpos_ & bmask_;
  const std::size_t first = std::min(n, bytes_.size() - at);
  std::memcpy(&bytes_[at], recs, first);
  std::memcpy(&bytes_[0], recs + first, n - first);
  bool merged = false;
  if (!packet && rhead_ != rtail_) {
    Run& last = runs_[(rhead_ - 1) & rmask_];
    if (!last.packet && last.seq + last.count == seq && last.pos + last.len == wpos_ &&
        last.count + count <= kRunMessages) {
      last.count += count;
      last.len += static_cast<std::uint32_t>(n);
      merged = true;
    }
  }
  if (!merged) {
    if (rhead_ - rtail_ == runs_.size()) ++rtail_;
    runs_[rhead_++ & rmask_] = Run{seq, wpos_, count, static_cast<std::uint32_t>(n), packet};
  }
  wpos_ += n;
  while (rtail_ != rhead_ && !held(runs_[rtail_ & rmask_])) ++rtail_;
}

std::int64_t DeliveredLog::find(std::uint64_t seq) const noexcept {
  // Runs are in sequence order: the last one starting at or before `seq`.
  std::uint64_t lo = rtail_, hi = rhead_;
  while (lo < hi) {
    const std::uint64_t mid = lo + (hi - lo) / 2;
    if (runs_[mid & rmask_].seq <= seq) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  if (lo == rtail_) return -1;
  const Run& r = runs_[(lo - 1) & rmask_];
  if (seq >= r.seq + r.count || !held(r)) return -1;
  return static_cast<std::int64_t>(lo - 1);
}

bool DeliveredLog::same(std::uint64_t seq, std::uint32_t count, const std::uint8_t* recs,
                        std::size_t n) const noexcept {
  const std::int64_t ri = find(seq);
  if (ri < 0) return false;
  const Run& r = runs_[static_cast<std::uint64_t>(ri) & rmask_];
  if (r.seq != seq || r.count != count || r.len != n) return false;
  const std::size_t at = r.pos & bmask_;
  const std::size_t a = std::min(n, bytes_.size() - at);
  return std::memcmp(&bytes_[at], recs, a) == 0 && std::memcmp(&bytes_[0], recs + a, n - a) == 0;
}

std::uint32_t DeliveredLog::compare(std::uint64_t seq, const std::uint8_t* recs, std::size_t n,
                                    std::uint64_t* first) const noexcept {
  std::uint32_t differ = 0;
  std::size_t off = 0;
  std::uint64_t cur = seq;
  auto equal = [this](std::uint64_t pos, const std::uint8_t* p, std::size_t len) {
    const std::size_t at = pos & bmask_;
    const std::size_t a = std::min(len, bytes_.size() - at);
    return std::memcmp(&bytes_[at], p, a) == 0 && std::memcmp(&bytes_[0], p + a, len - a) == 0;
  };
  while (off < n) {
    const std::int64_t ri = find(cur);
    if (ri < 0) {  // not held (older than the log, or never delivered): not compared
      off += record_size(recs + off);
      ++cur;
      continue;
    }
    const Run& r = runs_[static_cast<std::uint64_t>(ri) & rmask_];
    std::uint64_t pos = r.pos;
    for (std::uint64_t s = r.seq; s < cur; ++s) pos += 2u + ((std::size_t{byte_at(pos)} << 8) | byte_at(pos + 1));
    // The incoming records of the messages this run holds, compared in one go.
    std::size_t o2 = off;
    std::uint64_t c2 = cur;
    while (o2 < n && c2 < r.seq + r.count) {
      o2 += record_size(recs + o2);
      ++c2;
    }
    if (pos + (o2 - off) <= r.pos + r.len && equal(pos, recs + off, o2 - off)) {
      off = o2;
      cur = c2;
      continue;
    }
    // Something differs: message by message.
    for (; cur < c2; ++cur) {
      const std::size_t ml = record_size(recs + off);
      const std::size_t dl = 2u + ((std::size_t{byte_at(pos)} << 8) | byte_at(pos + 1));
      if (ml != dl || !equal(pos, recs + off, ml)) {
        if (differ++ == 0) *first = cur;
      }
      off += ml;
      pos += dl;
    }
  }
  return differ;
}

}  // namespace detail

// ---- construction and output ---------------------------------------------------------------

// One run per 64 bytes of delivered records: a run per packet of two or more messages.
Arbiter::Arbiter(const ArbiterOptions& o) : o_(o), delivered_(o.delivered_bytes, o.delivered_bytes / 64) {
  const std::uint32_t w = std::bit_ceil(std::max<std::uint32_t>(o_.window, 64));
  o_.window = w;
  mask_ = w - 1;
  // Touched now (assign writes every slot), not on the first gap.
  window_.assign(w, Slot{0, 0, {}});
  o_.max_gaps = std::max<std::uint32_t>(o_.max_gaps, 1);
  o_.max_outstanding = std::max<std::uint32_t>(o_.max_outstanding, 1);
  // Splits (a fill inside a range, a request cut at 65535) may go past max_gaps by a little.
  gaps_.reserve(o_.max_gaps + 2 * o_.max_outstanding + 16);
  reqs_.assign(o_.max_outstanding, Request{false, false, 0, 0, 0});
  requests_.resize(o_.max_outstanding + 1);  // + the confirmation request
  out_.assign(std::max<std::size_t>(o_.output_bytes, 4096), 0);
  notices_.resize(256);
  claim_bytes_.assign(2 * kClaimsPerLine * kMaxDatagram, 0);
  hold_.assign(std::max<std::size_t>(o_.hold_bytes, kMaxDatagram), 0);
  held_.resize(kHeldEntries);
  if (!o_.session.empty()) {
    wanted_ = mold::Session::from(o_.session);
    have_wanted_ = true;
  }
}

bool Arbiter::emit(const std::uint8_t* rec, std::size_t n, std::int64_t rx_ns) noexcept {
  if (out_.size() - out_len_ < n) return false;
  std::memcpy(out_.data() + out_len_, rec, n);
  out_len_ += n;
  if (out_rx_ns_ == 0 || rx_ns < out_rx_ns_) out_rx_ns_ = rx_ns;
  return true;
}

bool Arbiter::push_notice(const Notice& n) noexcept {
  if (nnotices_ == notices_.size()) return false;
  notices_[nnotices_++] = {n, out_len_};
  return true;
}

bool Arbiter::next(Piece* p) noexcept {
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

void Arbiter::reset_output() noexcept {
  out_len_ = out_taken_ = 0;
  nnotices_ = notice_taken_ = 0;
  out_rx_ns_ = 0;
}

// ---- sessions ------------------------------------------------------------------------------

void Arbiter::start_session(const mold::Session& s) noexcept {
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
  line_eos_ = {0, 0};
  first_rx_ns_ = 0;
  have_rx_ = false;
  stale_ = false;
  finished_ns_ = 0;
  gaps_.clear();
  for (Request& r : reqs_) r = Request{false, false, 0, 0, 0};
  outstanding_ = 0;
  nrequests_ = 0;  // queued for the session just left, not to be sent
  probe_ = Probe{};
  probe_limit_ = 0;
  probe_misses_ = 0;
  for (int l = 0; l < 2; ++l) {
    for (std::size_t i = 0; i < kClaimsPerLine; ++i) {
      if (claims_[l][i].active) drop_claim(l, i);
    }
  }
  moved_ = {};
  have_next_session_ = false;
  delivered_.clear();
  Notice n;
  n.kind = Notice::kSession;
  n.session = s;
  (void)push_notice(n);
}

Arbiter::Verdict Arbiter::hold_next_session(Line line, const mold::Session& s, std::span<const std::uint8_t> datagram,
                                            std::int64_t now_ns) noexcept {
  const int li = static_cast<int>(line);
  moved_[li] = true;
  moved_to_[li] = s;
  // While the hold is being taken after a switch, a third session's datagram is not held
  // again (it would come round forever).
  if (replaying_ || nheld_ == held_.size() || hold_.size() - hold_used_ < datagram.size()) {
    add_count(LiveCounter::kNextSessionDropped);
    return Verdict::kRejected;
  }
  std::memcpy(hold_.data() + hold_used_, datagram.data(), datagram.size());
  held_[nheld_++] =
      Held{now_ns, static_cast<std::uint32_t>(hold_used_), static_cast<std::uint32_t>(datagram.size()), line, false};
  hold_used_ += datagram.size();
  add_count(LiveCounter::kNextSessionHeld);
  return Verdict::kHeld;
}

void Arbiter::drop_held_of(int l) noexcept {
  bool live = false;
  for (std::size_t i = held_pos_; i < nheld_; ++i) {
    Held& h = held_[i];
    if (!h.dead && static_cast<int>(h.line) == l) {
      h.dead = true;
      add_count(LiveCounter::kNextSessionDropped);
    }
    live = live || !h.dead;
  }
  if (!live && !replaying_) nheld_ = hold_used_ = held_pos_ = 0;
}

void Arbiter::replay_held(std::int64_t now_ns) noexcept {
  (void)now_ns;
  replaying_ = true;
  for (; held_pos_ < nheld_; ++held_pos_) {
    const Held h = held_[held_pos_];
    if (h.dead) continue;
    (void)process(h.line, {hold_.data() + h.off, h.len}, h.rx_ns);
  }
  nheld_ = hold_used_ = held_pos_ = 0;
  replaying_ = false;
}

void Arbiter::switch_session(std::int64_t now_ns) noexcept {
  if (nretired_ < retired_.size()) {
    retired_[nretired_++] = session_;
  } else {
    std::rotate(retired_.begin(), retired_.begin() + 1, retired_.end());
    retired_.back() = session_;
  }
  const mold::Session next = next_session_;
  add_count(LiveCounter::kSessionChanges);
  start_session(next);
  replay_held(now_ns);
}

// ---- packets -------------------------------------------------------------------------------

Arbiter::Verdict Arbiter::on_packet(Line line, std::span<const std::uint8_t> datagram, std::int64_t now_ns,
                                    bool truncated) noexcept {
  if (line == Line::kReplay) {
    add_count(LiveCounter::kReplayPackets);
  } else {
    add_count(line == Line::kA ? LiveCounter::kPacketsA : LiveCounter::kPacketsB);
  }
  if (truncated || datagram.size() > kMaxDatagram) {
    add_count(LiveCounter::kMalformed);
    return Verdict::kRejected;
  }
  return process(line, datagram, now_ns);
}

Arbiter::Verdict Arbiter::process(Line line, std::span<const std::uint8_t> datagram, std::int64_t now_ns) noexcept {
  const int li = static_cast<int>(line);
  const mold::Packet p = mold::parse_packet(datagram);
  // Beyond 2^62 a sequence is not a feed's (decades at 10^9 messages/s) but a hostile or
  // corrupt one, and the window arithmetic (next + window) must not wrap.
  if (!p.ok() || p.sequence > kMaxSequence) {
    add_count(LiveCounter::kMalformed);
    return Verdict::kRejected;
  }
  // The other line's copy of a packet already delivered, byte for byte (most of what a second
  // line brings): equal to bytes that were validated, so nothing to check or take.
  const bool copy = p.kind == mold::Kind::kData && have_session_ && p.session == session_ &&
                    p.next_sequence() <= next_ &&
                    delivered_.same(p.sequence, p.count, datagram.data() + mold::kPacketHeaderSize,
                                    datagram.size() - mold::kPacketHeaderSize);
  if (p.kind == mold::Kind::kData && !copy) {
    // Every block must be one valid ITCH message: the blocks are BinaryFILE records.
    const itch::ParseResult r =
        itch::for_each_message(datagram.subspan(mold::kPacketHeaderSize), [](itch::MessageView) {});
    if (!r.ok() || r.messages != p.count) {
      add_count(LiveCounter::kMalformed);
      return Verdict::kRejected;
    }
  }
  if (!have_session_ || p.session != session_) {
    for (std::uint32_t i = 0; i < nretired_ && i < retired_.size(); ++i) {
      if (retired_[i] == p.session) {
        add_count(LiveCounter::kOldSession);
        return Verdict::kRejected;
      }
    }
    if (line == Line::kReplay || (have_wanted_ && p.session != wanted_)) {
      add_count(LiveCounter::kWrongSession);
      return Verdict::kRejected;
    }
    if (have_session_) return hold_next_session(line, p.session, datagram, now_ns);
    start_session(p.session);
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
      (void)push_notice(n);
    }
    // Data or a heartbeat of this session: the line did not move to another one after all.
    // (An end of session is what a line sends before it moves.)
    if (moved_[li] && p.kind != mold::Kind::kEndOfSession) {
      moved_[li] = false;
      drop_held_of(li);
    }
  }
  return dispatch(line, p, datagram, now_ns, copy);
}

Arbiter::Verdict Arbiter::dispatch(Line line, const mold::Packet& p, std::span<const std::uint8_t> datagram,
                                   std::int64_t now_ns, bool copy) noexcept {
  const int li = static_cast<int>(line);
  switch (p.kind) {
    case mold::Kind::kHeartbeat:
      if (line == Line::kReplay) return Verdict::kDuplicate;
      add_count(LiveCounter::kHeartbeats);
      if (note_line_packet(li, mold::Kind::kHeartbeat, p.sequence, p.sequence)) resolve_claims(now_ns);
      if (p.sequence > hi_) return hold_claim(line, p, datagram, now_ns);
      line_end_[li] = std::max(line_end_[li], p.sequence);
      if (nclaims_ != 0) resolve_claims(now_ns);
      return Verdict::kAccepted;
    case mold::Kind::kEndOfSession:
      return on_end(line, p, now_ns);
    case mold::Kind::kData:
      break;
  }
  if (line != Line::kReplay) {
    if (note_line_packet(li, mold::Kind::kData, p.sequence, p.next_sequence())) resolve_claims(now_ns);
    if (p.sequence > hi_) return hold_claim(line, p, datagram, now_ns);
  }
  if (copy) {
    if (line != Line::kReplay) line_end_[li] = std::max(line_end_[li], p.next_sequence());
    add_count(LiveCounter::kDuplicatePackets);
    add_count(LiveCounter::kDuplicateMessages, p.count);
    return Verdict::kDuplicate;
  }
  const std::uint64_t hi_before = hi_;
  const bool took = take_packet(line, p, now_ns);
  pump();
  // More known to exist, or this line's position grew: what the lines hold may now be confirmed.
  if (nclaims_ != 0 && (hi_ != hi_before || line != Line::kReplay)) resolve_claims(now_ns);
  return took ? Verdict::kAccepted : Verdict::kDuplicate;
}

Arbiter::Verdict Arbiter::on_end(Line line, const mold::Packet& p, std::int64_t now_ns) noexcept {
  if (line == Line::kReplay) return Verdict::kDuplicate;
  const int li = static_cast<int>(line);
  add_count(LiveCounter::kEndOfSession);
  (void)note_line_packet(li, mold::Kind::kEndOfSession, p.sequence, p.sequence);
  if (end_seq_ != 0) {  // established: repeats agree, anything else is refused
    if (p.sequence != end_seq_) {
      add_count(LiveCounter::kEndsRefused);
      return Verdict::kRejected;
    }
    line_end_[li] = std::max(line_end_[li], p.sequence);
    return Verdict::kDuplicate;
  }
  // Messages at or beyond it exist already: not this session's end.
  if (p.sequence < hi_) {
    add_count(LiveCounter::kEndsRefused);
    return Verdict::kRejected;
  }
  line_eos_[li] = p.sequence;
  evaluate_end();
  if (end_seq_ == 0) return Verdict::kHeld;
  resolve_claims(now_ns);
  pump();
  return Verdict::kAccepted;
}

void Arbiter::evaluate_end() noexcept {
  if (end_seq_ != 0) return;
  for (int l = 0; l < 2; ++l) {
    const std::uint64_t e = line_eos_[l];
    if (e == 0) continue;
    if (e < hi_) {  // data was taken beyond it
      line_eos_[l] = 0;
      add_count(LiveCounter::kEndsRefused);
      continue;
    }
    // Both lines end at the same sequence, or the other line is dead (quiet for the stale
    // interval) without having ended elsewhere.
    if (line_eos_[l ^ 1] == e || (line_eos_[l ^ 1] == 0 && line_stale_[l ^ 1])) {
      establish_end(e, line_rx_ns_[l]);
      return;
    }
  }
}

void Arbiter::establish_end(std::uint64_t end, std::int64_t now_ns) noexcept {
  end_seq_ = end;
  for (int l = 0; l < 2; ++l) {
    if (line_eos_[l] == end) line_end_[l] = std::max(line_end_[l], end);
  }
  // Held packets beyond the end are contradicted by it.
  for (int l = 0; l < 2; ++l) {
    for (std::size_t i = 0; i < kClaimsPerLine; ++i) {
      const Claim& c = claims_[l][i];
      if (c.active && (c.data ? c.end : c.seq) > end) drop_claim(l, i);
    }
  }
  // A loss at the tail: the range before the end is missing (and confirmed by the end).
  if (end > hi_) advance(Line::kReplay, end, now_ns);
}

bool Arbiter::note_line_packet(int l, mold::Kind kind, std::uint64_t seq, std::uint64_t end) noexcept {
  bool continued = false;
  // The line's very next packet is data going on exactly where a packet it held left off:
  // its own sender vouches for it (a forger would have to send that data too; a heartbeat or
  // an end at the same place costs nothing to forge). Any other next packet ends the chance:
  // a later one that merely lies beyond proves nothing.
  if (line_claims_[l] != 0) {
    for (Claim& c : claims_[l]) {
      if (!c.active || c.sealed) continue;
      if (kind == mold::Kind::kData && seq == (c.data ? c.end : c.seq)) c.continued = continued = true;
      c.sealed = true;
    }
  }
  if (kind == mold::Kind::kEndOfSession) return continued;
  // After an established end nothing of the session is news: packets beyond it are refused
  // (hold_claim), whatever one datagram says.
  if (end_seq_ != 0) return continued;
  // An end of session is contradicted by more from its own line (a line sends nothing of a
  // session after its end), or by data taken beyond it (evaluate_end()); a held packet of the
  // other line is no evidence against it.
  (void)end;
  if (line_eos_[l] != 0) {
    line_eos_[l] = 0;
    add_count(LiveCounter::kEndsRefused);
  }
  return continued;
}

// ---- claims: packets that skip ahead -------------------------------------------------------

std::uint64_t Arbiter::claimed(int l) const noexcept {
  std::uint64_t e = 0;
  if (line_claims_[l] != 0) {
    for (const Claim& c : claims_[l]) {
      if (c.active) e = std::max(e, c.data ? c.end : c.seq);
    }
  }
  return e;
}

Arbiter::Verdict Arbiter::hold_claim(Line line, const mold::Packet& p, std::span<const std::uint8_t> datagram,
                                     std::int64_t now_ns) noexcept {
  const int li = static_cast<int>(line);
  const bool data = p.kind == mold::Kind::kData;
  if (end_seq_ != 0 && (data ? p.next_sequence() : p.sequence) > end_seq_) {  // beyond the established end
    add_count(LiveCounter::kUnconfirmedDropped);
    return Verdict::kRejected;
  }
  // The other line already delivered this far: confirmed at once.
  if (line_end_[li ^ 1] >= p.sequence) {
    const std::uint64_t hi_before = hi_;
    advance(line, p.sequence, now_ns);
    bool took = true;
    if (data) {
      took = take_packet(line, p, now_ns);
      pump();
    }
    if (nclaims_ != 0 && hi_ != hi_before) resolve_claims(now_ns);
    return took ? Verdict::kAccepted : Verdict::kDuplicate;
  }
  add_count(LiveCounter::kUnconfirmed);
  // A free slot, else the one furthest ahead gives way (this one, if it is): the nearest are
  // the first needed, and what a dropped one held is recovered as part of a range later.
  std::size_t slot = kClaimsPerLine;
  for (std::size_t i = 0; i < kClaimsPerLine; ++i) {
    const Claim& c = claims_[li][i];
    if (!c.active) {
      slot = i;
      break;
    }
    if (slot == kClaimsPerLine || c.seq > claims_[li][slot].seq) slot = i;
  }
  if (claims_[li][slot].active) {
    if (claims_[li][slot].seq < p.sequence) {
      add_count(LiveCounter::kUnconfirmedDropped);
      return Verdict::kRejected;
    }
    drop_claim(li, slot);
  }
  Claim& c = claims_[li][slot];
  c = Claim{true, data, false, false, 0, 0, p.sequence, data ? p.next_sequence() : p.sequence, now_ns};
  if (data) {
    c.len = static_cast<std::uint32_t>(datagram.size());
    std::memcpy(claim_bytes(li, slot), datagram.data(), datagram.size());
  }
  ++nclaims_;
  ++line_claims_[li];
  probe_misses_ = 0;  // a new packet to confirm: the server may be asked again
  return Verdict::kHeld;
}

void Arbiter::drop_claim(int l, std::size_t i) noexcept {
  claims_[l][i].active = false;
  --nclaims_;
  --line_claims_[l];
  add_count(LiveCounter::kUnconfirmedDropped);
}

void Arbiter::resolve_claims(std::int64_t now_ns) noexcept {
  (void)now_ns;
  // Each pass takes at least one claim or stops; at most 2 x kClaimsPerLine are held.
  for (bool progress = true; progress && nclaims_ != 0;) {
    progress = false;
    for (int l = 0; l < 2; ++l) {
      for (std::size_t i = 0; i < kClaimsPerLine; ++i) {
        Claim& c = claims_[l][i];
        if (!c.active) continue;
        // Confirmed by its own line going on from it, or by the other line having delivered
        // that far. (The other line's held packets are no evidence: a forger can reach both
        // groups; two lines skipping to the same place ask the server instead.)
        const bool confirmed = c.continued || line_end_[l ^ 1] >= c.seq;
        if (c.seq > hi_) {
          if (!confirmed) continue;
          // Confirmed: the range up to it is missing (a gap), then it is an ordinary packet.
          advance(static_cast<Line>(l), c.seq, c.rx_ns);
          if (c.seq > hi_) continue;  // no room to record the range yet (Tick retries)
        }
        // It no longer skips anything. Right at the frontier (the other line brought what it
        // skipped) or confirmed, it is taken like any packet of its line; overtaken by data
        // from elsewhere without ever being confirmed, only its copies are compared.
        c.active = false;
        --nclaims_;
        --line_claims_[l];
        progress = true;
        if (!c.data) {
          line_end_[l] = std::max(line_end_[l], c.seq);
          continue;
        }
        const bool take = confirmed || c.seq == hi_;
        if (!take && c.end > hi_) add_count(LiveCounter::kUnconfirmedDropped);
        const mold::Packet p = mold::parse_packet({claim_bytes(l, i), c.len});
        (void)take_packet(static_cast<Line>(l), p, c.rx_ns, take);
        pump();
      }
    }
  }
}

void Arbiter::probe_answered(std::int64_t now_ns) noexcept {
  if (probe_.active && !probe_.answered) add_count(LiveCounter::kRerequestsAnswered);
  probe_.answered = true;
  probe_.last_reply_ns = now_ns;
  probe_misses_ = 0;
}

void Arbiter::probe_claims(std::int64_t now_ns) noexcept {
  if (!o_.rerequest) return;
  const std::int64_t quiet = o_.rerequest_wait_ns / 4;
  if (probe_.active) {
    if (now_ns >= probe_.timeout_at) {
      probe_.active = false;
      if (!probe_.answered) {
        ++probe_misses_;
        add_count(LiveCounter::kRerequestsTimedOut);
        // Ranges established inside it meanwhile were asked for once, in vain.
        for (Gap& g : gaps_) {
          if (g.from >= probe_.from && g.to <= probe_.to && g.req < 0) {
            g.requested = true;
            if (g.attempts++ >= o_.rerequest_retries) g.lost = true;
          }
        }
      }
    } else if (probe_.answered && now_ns - probe_.last_reply_ns >= quiet &&
               line_drained_ns_[2] >= probe_.last_reply_ns + quiet) {
      probe_.active = false;  // the reply is over; what it did not reach is asked for next
      for (Gap& g : gaps_) {  // ranges established meanwhile inside it: a follow-up, no wait
        if (g.from >= probe_.from && g.to <= probe_.to) g.requested = true;
      }
    } else {
      return;
    }
  }
  if (nclaims_ == 0 || probe_misses_ > o_.rerequest_retries) return;  // nothing to confirm, or the server does not
  // The lowest held sequence that the other line also skipped past (both lost what lies
  // before it: ask at once), or whose other line stayed quiet past the wait.
  const Claim* best = nullptr;
  for (int l = 0; l < 2; ++l) {
    const std::uint64_t other = claimed(l ^ 1);
    for (const Claim& c : claims_[l]) {
      if (!c.active || c.seq <= hi_) continue;
      const std::int64_t due = c.rx_ns + o_.rerequest_wait_ns;
      if (other < c.seq && (now_ns < due || line_drained_ns_[l ^ 1] < due)) continue;
      if (best == nullptr || c.seq < best->seq) best = &c;
    }
  }
  if (best == nullptr || nrequests_ >= requests_.size()) return;
  const std::uint64_t to = std::min({best->seq, hi_ + kMaxRequest, next_ + o_.window});
  if (to <= hi_) return;
  const int shift = static_cast<int>(std::min<std::uint32_t>(probe_misses_, 20));
  probe_ =
      Probe{true, false, hi_, to, now_ns + std::min(o_.rerequest_timeout_ns << shift, o_.rerequest_timeout_max_ns), 0};
  probe_limit_ = std::max(probe_limit_, to);
  requests_[nrequests_++] = RerequestOut{session_, hi_, static_cast<std::uint16_t>(to - hi_)};
  add_count(LiveCounter::kConfirmRequests);
}

// ---- confirmed data ------------------------------------------------------------------------

void Arbiter::advance(Line line, std::uint64_t end, std::int64_t now_ns) noexcept {
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
  gaps_.push_back(Gap{hi_, end, now_ns, 0, -1, end - hi_ > o_.window, false});
  add_count(LiveCounter::kGapsDetected);
  hi_ = end;
}

void Arbiter::conflict(std::uint64_t first, std::uint32_t n) noexcept {
  add_count(LiveCounter::kConflictingCopies, n);
  Notice note;
  note.kind = Notice::kConflict;
  note.session = session_;
  note.from = first;
  note.count = n;
  // Best effort: the count is kept, and the last slots of the notice queue stay free for the
  // notices that must not be lost (gaps, sessions, staleness).
  if (nnotices_ + kReservedNotices < notices_.size()) (void)push_notice(note);
}

void Arbiter::compare_delivered(const mold::Packet& p) noexcept {
  if (p.begin() == p.end()) return;
  const std::uint8_t* blocks = (*p.begin()).data() - mold::kBlockLengthSize;
  std::uint64_t first = 0;
  const std::uint32_t n = delivered_.compare(p.sequence, blocks, p.size - mold::kPacketHeaderSize, &first);
  if (n != 0) conflict(first, n);
}

bool Arbiter::take_packet(Line line, const mold::Packet& p, std::int64_t now_ns, bool extend) noexcept {
  const std::uint64_t seq = p.sequence;
  const std::uint64_t end = p.next_sequence();
  // The line's confirmed position (what a held packet never confirmed claims is not).
  if (line != Line::kReplay && extend) {
    std::uint64_t& le = line_end_[static_cast<int>(line)];
    le = std::max(le, end);
  }
  if (end <= next_) {
    compare_delivered(p);
    add_count(LiveCounter::kDuplicatePackets);
    add_count(LiveCounter::kDuplicateMessages, p.count);
    return false;
  }
  // Fast path: the next packet in order with nothing waiting - its blocks are the output. (A
  // reply extends what is known only as far as a confirmation request asked.)
  if (seq == next_ && hi_ == next_ && extend && (line != Line::kReplay || end <= probe_limit_)) {
    const std::uint8_t* blocks = p.begin() == p.end() ? nullptr : (*p.begin()).data() - mold::kBlockLengthSize;
    const std::size_t n = p.size - mold::kPacketHeaderSize;
    if (blocks != nullptr && emit(blocks, n, now_ns)) {
      delivered_.append(seq, p.count, blocks, n, true);
      next_ = hi_ = end;
      add_count(LiveCounter::kMessages, p.count);
      if (line == Line::kReplay) {
        add_count(LiveCounter::kMessagesRecovered, p.count);
        probe_answered(now_ns);
      }
      return true;
    }
  }
  if (seq > hi_) {
    if (line == Line::kReplay) {
      // Replies answer requests, which start at or below hi_: this one is not ours.
      add_count(LiveCounter::kDuplicatePackets);
      add_count(LiveCounter::kDuplicateMessages, p.count);
      return false;
    }
    const std::uint64_t before = gaps_.size();
    advance(line, seq, now_ns);
    if (gaps_.size() == before && hi_ < seq) {
      add_count(LiveCounter::kWindowOverflow, p.count);  // no room to record the range
      return false;
    }
  }
  // Live data that does not fit the window is kept; the oldest ranges in front of it are
  // given up instead (a reply beyond the window could not be kept anyway).
  if (line != Line::kReplay && end > next_ + o_.window) make_room(seq, end);
  const std::uint64_t old_hi = hi_;
  const std::uint64_t limit = next_ + o_.window;  // first sequence beyond the window
  // A reply extends what is known only as far as a confirmation request asked.
  const std::uint64_t extend_to = line == Line::kReplay ? std::min(limit, probe_limit_) : limit;
  // First range that may hold `seq` or later.
  auto gi = std::lower_bound(gaps_.begin(), gaps_.end(), std::max(seq, next_),
                             [](const Gap& g, std::uint64_t s) { return g.to <= s; });
  std::uint64_t stored = 0, dups = 0, overflow = 0, conflicts = 0, first_conflict = 0;
  std::uint64_t fill_from = 0, fill_to = 0;  // the run of stored messages inside ranges
  std::size_t delivered_bytes = 0;           // records of the leading messages already delivered
  std::uint64_t s = seq;
  for (const std::span<const std::uint8_t> m : p) {
    const std::uint64_t cur = s++;
    if (cur < next_) {
      ++dups;
      delivered_bytes += mold::kBlockLengthSize + m.size();
      continue;
    }
    bool take = false;
    if (cur >= old_hi) {
      if (!extend) break;
      if (cur >= extend_to) {
        if (line == Line::kReplay) {
          dups += end - cur;  // beyond what was asked: not ours
        } else {
          overflow = end - cur;
        }
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
      } else if (!(gi != gaps_.end() && gi->from <= cur)) {
        // Buffered already: the later copy must say the same.
        const Slot& sl = window_[cur & mask_];
        if (sl.seq == cur && (sl.len != m.size() || std::memcmp(sl.data, m.data(), m.size()) != 0)) {
          if (conflicts++ == 0) first_conflict = cur;
        }
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
  if (delivered_bytes != 0) {
    std::uint64_t first = 0;
    const std::uint8_t* blocks = (*p.begin()).data() - mold::kBlockLengthSize;
    const std::uint32_t n = delivered_.compare(seq, blocks, delivered_bytes, &first);
    if (n != 0) conflict(first, n);
  }
  if (conflicts != 0) conflict(first_conflict, static_cast<std::uint32_t>(conflicts));
  // The stored messages inside ranges form one run: packets carry consecutive messages and a
  // run only breaks at a range's end, where the next message is present already.
  if (fill_to > fill_from) fill(fill_from, fill_to, line == Line::kReplay, now_ns);
  if (overflow != 0) add_count(LiveCounter::kWindowOverflow, overflow);
  if (dups != 0) add_count(LiveCounter::kDuplicateMessages, dups);
  if (stored == 0) {
    if (overflow == 0) add_count(LiveCounter::kDuplicatePackets);
    return false;
  }
  if (line == Line::kReplay) {
    add_count(LiveCounter::kMessagesRecovered, stored);
    if (hi_ > old_hi) probe_answered(now_ns);  // a confirmation request was answered
  }
  // Buffered unless it is about to be delivered: the first message at the cursor with no
  // range in front of it.
  if (!(seq <= next_ && (gaps_.empty() || gaps_.front().from > next_))) {
    add_count(LiveCounter::kOutOfOrderPackets);
    add_count(LiveCounter::kOutOfOrderMessages, stored);
  }
  return true;
}

void Arbiter::make_room(std::uint64_t seq, std::uint64_t end) noexcept {
  while (end > next_ + o_.window && !gaps_.empty() && gaps_.front().to <= seq) {
    Gap& g = gaps_.front();
    if (!g.lost) {
      g.lost = true;  // pump() reports it and delivers what waited behind it
      add_count(LiveCounter::kGapsGivenUp);
    }
    const std::uint64_t before = next_;
    pump();
    if (next_ == before) return;  // the output is full: the caller takes it first
  }
}

void Arbiter::drop_request_ref(std::int32_t req) noexcept {
  if (req < 0) return;
  Request& r = reqs_[static_cast<std::size_t>(req)];
  if (r.refs > 0 && --r.refs == 0 && r.active) {
    r.active = false;
    --outstanding_;
  }
}

void Arbiter::fill(std::uint64_t a, std::uint64_t b, bool from_replay, std::int64_t now_ns) noexcept {
  auto it = std::lower_bound(gaps_.begin(), gaps_.end(), a, [](const Gap& g, std::uint64_t s) { return g.to <= s; });
  std::size_t i = static_cast<std::size_t>(it - gaps_.begin());
  while (i < gaps_.size() && gaps_[i].from < b) {
    Gap& g = gaps_[i];
    if (g.lost) {
      ++i;
      continue;
    }
    if (from_replay) {
      // Progress: a request that brings something is not a retry, whenever it comes back.
      g.attempts = 0;
      // A range established after the confirmation request asked for it.
      if (probe_.active && g.from < probe_.to && g.to > probe_.from) probe_answered(now_ns);
      if (g.req >= 0) {
        Request& r = reqs_[static_cast<std::size_t>(g.req)];
        if (r.active && !r.answered) {
          r.answered = true;
          add_count(LiveCounter::kRerequestsAnswered);
        }
        r.last_reply_ns = now_ns;
      }
    }
    if (a <= g.from && b >= g.to) {
      drop_request_ref(g.req);
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

void Arbiter::pump() noexcept {
  for (;;) {
    if (!gaps_.empty() && gaps_.front().from <= next_) {
      Gap& g = gaps_.front();
      if (!g.lost) return;  // waiting for it
      Notice n;
      n.kind = Notice::kGap;
      n.session = session_;
      n.from = g.from;
      n.count = g.to - g.from;
      if (!push_notice(n)) return;  // the caller takes the output first
      add_count(LiveCounter::kGapsUnrecoverable);
      add_count(LiveCounter::kMessagesUnrecoverable, n.count);
      // Anything stored inside it (a range that could not be split) goes with it.
      const std::uint64_t stop = std::min(g.to, g.from + o_.window);
      for (std::uint64_t s = g.from; s < stop && buffered_ != 0; ++s) {
        Slot& sl = window_[s & mask_];
        if (sl.seq == s) {
          sl.seq = 0;
          --buffered_;
        }
      }
      drop_request_ref(g.req);
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
      if (out_.size() - out_len_ < 2u + sl.len) break;
      // An invariant: every sequence in [next_, hi_) outside a range is in the window. Were
      // it ever broken, the message is reported lost rather than the stream stalled.
      if (sl.seq != next_) [[unlikely]] {
        Notice n;
        n.kind = Notice::kGap;
        n.session = session_;
        n.from = next_;
        n.count = 1;
        if (!push_notice(n)) break;
        add_count(LiveCounter::kGapsUnrecoverable);
        add_count(LiveCounter::kMessagesUnrecoverable);
        ++next_;
        continue;
      }
      std::uint8_t rec[2 + sizeof sl.data];
      rec[0] = 0;
      rec[1] = sl.len;
      std::memcpy(rec + 2, sl.data, sl.len);
      (void)emit(rec, 2u + sl.len, buffered_rx_ns_);
      delivered_.append(next_, 1, rec, 2u + sl.len, false);
      sl.seq = 0;
      --buffered_;
      ++next_;
      ++delivered;
    }
    add_count(LiveCounter::kMessages, delivered);
    if (next_ < limit) return;  // output full
  }
}

// ---- timers --------------------------------------------------------------------------------

void Arbiter::line_drained(Line line, std::int64_t now_ns) noexcept {
  line_drained_ns_[static_cast<int>(line)] = now_ns;
}

bool Arbiter::confirmed(const Gap& g, std::int64_t now_ns) const noexcept {
  if (g.requested) return true;  // asked for before: missing on both lines
  for (int l = 0; l < 2; ++l) {
    if (line_end_[l] >= g.to) continue;  // this line went past it: missing there too
    // A line that has not got there yet: wait, and then for its socket to be read empty.
    const std::int64_t due = g.detected_ns + o_.rerequest_wait_ns;
    if (now_ns < due || line_drained_ns_[l] < due) return false;
  }
  return true;
}

bool Arbiter::finished() const noexcept {
  return have_session_ && end_seq_ != 0 && gaps_.empty() && next_ == hi_ && next_ >= end_seq_;
}

void Arbiter::check_stale(std::int64_t now_ns) noexcept {
  if (!have_rx_ || end_seq_ != 0) return;  // no feed yet, or the session is over
  const std::int64_t quiet = o_.heartbeat_ns * static_cast<std::int64_t>(o_.stale_heartbeats);
  for (int l = 0; l < 2; ++l) {
    if (!line_stale_[l] && now_ns - std::max(line_rx_ns_[l], first_rx_ns_) > quiet) {
      line_stale_[l] = true;
      add_count(l == 0 ? LiveCounter::kStaleA : LiveCounter::kStaleB);
    }
  }
  if (line_stale_[0] && line_stale_[1] && !stale_) {
    Notice n;
    n.kind = Notice::kStale;
    n.session = session_;
    if (push_notice(n)) {
      stale_ = true;
      add_count(LiveCounter::kStale);
    }
  }
}

void Arbiter::tick(std::int64_t now_ns) noexcept {
  if (!have_session_) return;
  check_stale(now_ns);
  evaluate_end();
  // Held packets not confirmed within the stale interval are dropped: a line that skipped
  // ahead for real goes on from there, and the other line or the server shows it long before.
  if (nclaims_ != 0) {
    const std::int64_t life = o_.heartbeat_ns * static_cast<std::int64_t>(o_.stale_heartbeats);
    for (int l = 0; l < 2; ++l) {
      for (std::size_t i = 0; i < kClaimsPerLine; ++i) {
        if (claims_[l][i].active && now_ns - claims_[l][i].rx_ns > life) drop_claim(l, i);
      }
    }
    resolve_claims(now_ns);
  }
  // Messages a line delivered but the window could not take (or a range the gap list had no
  // room for): missing, like a loss, once there is room to record them.
  if (const std::uint64_t seen = std::max(line_end_[0], line_end_[1]); seen > hi_) {
    advance(Line::kReplay, seen, now_ns);
    if (nclaims_ != 0) resolve_claims(now_ns);
  }
  // Requests: an expired one makes its ranges eligible again (unrecoverable once the
  // consecutive requests that brought nothing exceed the retries); one the server answered
  // in part is done once its reply is over, and the rest is asked for at once.
  const std::int64_t quiet = o_.rerequest_wait_ns / 4;
  for (std::size_t k = 0; k < reqs_.size(); ++k) {
    Request& r = reqs_[k];
    if (!r.active) continue;
    const bool expired = now_ns >= r.timeout_at;
    const bool reply_over =
        r.answered && now_ns - r.last_reply_ns >= quiet && line_drained_ns_[2] >= r.last_reply_ns + quiet;
    if (!expired && !reply_over) continue;
    if (!r.answered) add_count(LiveCounter::kRerequestsTimedOut);
    r.active = false;
    r.refs = 0;
    --outstanding_;
    for (Gap& g : gaps_) {
      if (g.req != static_cast<std::int32_t>(k)) continue;
      g.req = -1;
      if (r.answered) {
        g.attempts = 0;
      } else if (g.attempts > o_.rerequest_retries) {
        g.lost = true;
      }
    }
  }
  // New requests, oldest range first; only for ranges inside the window (a reply beyond it
  // could not be kept).
  const std::uint64_t limit = next_ + o_.window;
  for (std::size_t i = 0; i < gaps_.size(); ++i) {
    Gap& g = gaps_[i];
    if (g.lost || g.req >= 0) continue;
    if (g.from >= limit) break;
    if (probe_.active && g.from >= probe_.from && g.to <= probe_.to) continue;  // asked for already
    if (!confirmed(g, now_ns)) continue;
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
    reqs_[k] = Request{true, false, 1, now_ns + timeout, 0};
    ++outstanding_;
    h.req = static_cast<std::int32_t>(k);
    if (h.attempts++ > 0) {
      add_count(LiveCounter::kRerequestRetries);
    } else if (h.requested) {
      add_count(LiveCounter::kRerequestFollowups);
    }
    h.requested = true;
    requests_[nrequests_++] = RerequestOut{session_, h.from, static_cast<std::uint16_t>(n)};
    add_count(LiveCounter::kRerequestsSent);
  }
  probe_claims(now_ns);
  pump();

  // The next session: one both lines moved to, or one line with the other dead (quiet for
  // the stale interval while the session ran, without ending it: lines go quiet after an end
  // of session, which does not make them dead). After an established end, at once; before it, once neither
  // line has shown the current session for a heartbeat interval (a live session vetoes,
  // however many forged datagrams of another one arrive): the current session then ends
  // where it is.
  if (!have_next_session_ && (moved_[0] || moved_[1])) {
    const bool both = moved_[0] && moved_[1] && moved_to_[0] == moved_to_[1];
    const std::int64_t hb = end_seq_ != 0 ? 0 : o_.heartbeat_ns;
    int from = -1;
    if (both && now_ns - std::max(line_rx_ns_[0], line_rx_ns_[1]) >= hb) {
      from = 0;
    } else {
      for (int l = 0; l < 2 && from < 0; ++l) {
        // (A line that ended the session itself is not dead but done.)
        if (moved_[l] && line_stale_[l ^ 1] && line_eos_[l ^ 1] == 0 && now_ns - line_rx_ns_[l] >= hb) from = l;
      }
    }
    if (from >= 0) {
      next_session_ = moved_to_[from];
      have_next_session_ = true;
      if (end_seq_ == 0) {
        for (int l = 0; l < 2; ++l) {
          for (std::size_t i = 0; i < kClaimsPerLine; ++i) {
            if (claims_[l][i].active) drop_claim(l, i);
          }
        }
        end_seq_ = std::max<std::uint64_t>(hi_, 1);
      }
    }
  }
  if (!finished()) return;
  if (have_next_session_) {
    switch_session(now_ns);
    return;
  }
  if (finished_ns_ == 0) finished_ns_ = now_ns;
  if (now_ns - finished_ns_ >= o_.end_linger_ns) done_ = true;
}

}  // namespace pollux::feed
