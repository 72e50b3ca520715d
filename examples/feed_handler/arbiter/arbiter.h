// A/B line arbitration and gap recovery for MoldUDP64 (pollux-feed live mode): no sockets,
// no clock of its own, so every rule can be tested by handing it packets in any order.
//
// The caller (live_source.cc, or a test) hands it every datagram it reads - from line A,
// line B or the re-request socket - with the time, calls tick() once per polling round, and
// sends the re-requests it queues. The arbiter hands back, in sequence order, the ITCH
// messages of the session as BinaryFILE records (2-byte big-endian length + message: a
// MoldUDP64 block is exactly that) and notices (a gap that cannot be recovered, a stale or
// fresh feed, a new session, a conflicting copy) at the position in the stream where they
// happen.
//
// MoldUDP64 has no authentication: anyone on the segment can send to a line's group. So
// nothing one datagram says on its own moves the delivery cursor, ends the session or
// switches it; only in-order data is taken at once (docs/FEED.md, "What the handler
// corroborates"):
//   - the first copy of each sequence number wins, from whichever line or the re-request
//     reply; later copies are duplicates (dropped and counted), and a later copy whose bytes
//     differ from the one delivered or buffered is a conflicting copy (counted, and a
//     kConflict notice tells the subscribers which sequence was contradicted);
//   - a packet that would skip ahead (data, or a heartbeat announcing a sequence, beyond the
//     highest one known to exist) is held, unconfirmed, until the other line delivers that
//     far, the same line's very next packet is data starting exactly where it ended, or the
//     re-request server delivers up to it (a confirmation request is sent at once when both
//     lines skipped, after the wait when the other line is quiet); a held packet is dropped
//     when it is not confirmed within the stale interval (at most kClaimsPerLine per line);
//   - messages after a confirmed gap wait in a window of `window` messages (one 64-byte slot
//     each, allocated once); a packet of line A or B that would not fit gives up the oldest
//     missing ranges before it (reported as lost, `gaps_given_up`) until it fits. Only what
//     still does not fit (the output or the gap list full) is dropped, counted, and
//     recovered like a loss once the window has moved;
//   - a gap is re-requested once both lines have moved past it (each line delivers in order,
//     so it is then missing on both), or after `rerequest_wait_ns` if a line lags and its
//     socket has since been read empty (a silent or dead line does not hold recovery up);
//   - a request covers one missing range (at most 65535 messages). A reply that fills part
//     of it is followed, once the server's burst is over, by a request for the rest; only a
//     request that brought nothing counts as a retry: it times out after
//     `rerequest_timeout_ns`, doubled for each consecutive retry up to
//     `rerequest_timeout_max_ns`, and after `rerequest_retries` of them the range is
//     unrecoverable. At most `max_outstanding` requests are in flight; no server configured:
//     a confirmed gap is unrecoverable at once;
//   - an unrecoverable range is delivered as a kGap notice where it was, and the stream goes
//     on after it: never silently;
//   - heartbeats (count 0) and end of session (count 0xFFFF) carry the next sequence number,
//     so a loss just before a quiet period or the end is seen (once confirmed);
//   - an end of session ends the session only when both lines end it at the same sequence,
//     or one does and the other line has been quiet for the stale interval without ending
//     elsewhere; one below what was received, or followed on its line by data or a
//     heartbeat, is refused (`ends_refused`);
//   - a packet of another session is held (copied, bounded) and its line is still read: the
//     session changes, once everything in the current one was delivered or reported, to a
//     session both lines moved to (or one did and the other is dead: stale while the session
//     ran, without having ended it) - at once after an established end, else once neither
//     line has shown the current session for a heartbeat interval (the current session then
//     ends where it is); then the held datagrams are taken. A line that goes on in the
//     current session drops what it held of another. Packets of a session that was left are
//     dropped and counted;
//   - the feed is stale after `stale_heartbeats` heartbeat intervals without a packet on
//     either line (a kStale notice; kFresh when a packet comes again);
//   - a sequence number beyond 2^62 is malformed (no feed gets there; the window arithmetic
//     must not wrap);
//   - done() once the session ended, everything is delivered or reported, and
//     `end_linger_ns` passed without a new session.
//
// Steady state allocates nothing: the window, the held packets, the delivered copies kept for
// comparison, the gap list, the request table, the output buffer and the notice queue are
// sized at construction.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "feed_handler/publish/notice.h"
#include "itch/moldudp64.h"

namespace pollux::feed {

// Where a datagram came from.
enum class Line : std::uint8_t { kA = 0, kB = 1, kReplay = 2 };

// The live counters: one table (name, help) indexed by this enum. Exported to the Pollux
// counters file (scope "feed live") and to --summary-json under the same names.
enum class LiveCounter : std::uint8_t {
  kPacketsA,  // datagrams read on line A (valid or not; from its expected sender when one is set)
  kPacketsB,
  kReplayPackets,          // datagrams read on the re-request socket
  kMessages,               // ITCH messages delivered in order
  kHeartbeats,             // heartbeat packets of the current session
  kEndOfSession,           // end-of-session packets of the current session
  kDuplicatePackets,       // packets carrying nothing new (every message already had)
  kDuplicateMessages,      // messages dropped because an earlier copy won
  kOutOfOrderPackets,      // packets (partly) buffered behind a gap
  kOutOfOrderMessages,     // messages buffered behind a gap
  kGapsDetected,           // missing ranges found (each confirmed jump of the highest sequence)
  kRerequestsSent,         // request packets sent for missing ranges (first, follow-ups, retries)
  kRerequestRetries,       // of those, retries after a request that brought nothing
  kRerequestsAnswered,     // requests for which at least one message came back
  kRerequestsTimedOut,     // requests for which nothing came back before the timeout
  kRerequestSendErrors,    // requests the socket refused (they time out and go again)
  kMessagesRecovered,      // messages delivered from re-request replies
  kGapsUnrecoverable,      // kGap notices delivered
  kMessagesUnrecoverable,  // messages those notices cover
  kWindowOverflow,         // messages dropped beyond a window that could not be emptied (recovered later or reported)
  kMalformed,              // datagrams the MoldUDP64 or ITCH decoder refused, or truncated
  kWrongSession,           // datagrams of a session this handler does not follow
  kOldSession,             // datagrams of a session already left
  kStale,                  // times the feed went stale (no packet on either line)
  kStaleA,                 // times line A went quiet for the stale interval
  kStaleB,
  kSessionChanges,      // sessions started after the first
  kGapsGivenUp,         // ranges reported lost early to make room in a full window
  kRerequestFollowups,  // of the requests, those for the rest of a range a reply filled in part
  kConfirmRequests,     // requests sent to confirm a sequence only one line showed
  kUnconfirmed,         // packets held because they skipped ahead of what was confirmed
  kUnconfirmedDropped,  // held packets never confirmed (contradicted, expired, or no room)
  kEndsRefused,         // end-of-session packets not acted on
  kConflictingCopies,   // messages whose copy differs from the one delivered or buffered
  kNextSessionHeld,     // datagrams of another session held until the current one is over
  kNextSessionDropped,  // of those, dropped (the hold full, or their line stayed in the session)
  kWrongSource,         // line datagrams from another sender than feed.source_a/b (dropped before the arbiter)
  kCount
};
inline constexpr std::size_t kLiveCounterCount = static_cast<std::size_t>(LiveCounter::kCount);

struct LiveCounterInfo {
  const char* name;
  const char* help;
};
// Indexed by LiveCounter.
extern const std::array<LiveCounterInfo, kLiveCounterCount> kLiveCounters;

// A re-request to send: RequestedMessageCount messages from `sequence` of `session`.
struct RerequestOut {
  itch::mold::Session session;
  std::uint64_t sequence = 0;
  std::uint16_t count = 0;
};

struct ArbiterOptions {
  std::string_view session;         // empty: follow the first session seen
  std::uint32_t window = 1u << 17;  // messages; a power of two
  bool rerequest = true;            // a re-request server is configured
  std::int64_t rerequest_wait_ns = 1'000'000;
  std::int64_t rerequest_timeout_ns = 20'000'000;
  std::int64_t rerequest_timeout_max_ns = 500'000'000;
  std::uint32_t rerequest_retries = 3;
  std::uint32_t max_outstanding = 8;
  std::int64_t heartbeat_ns = 1'000'000'000;
  std::uint32_t stale_heartbeats = 3;
  std::int64_t end_linger_ns = 100'000'000;
  std::uint32_t max_gaps = 4096;           // missing ranges tracked at once
  std::size_t output_bytes = 1u << 20;     // delivered bytes held until the caller takes them
  std::size_t hold_bytes = 4u << 20;       // datagrams of a next session held until the switch
  std::size_t delivered_bytes = 4u << 20;  // delivered records kept to compare later copies with
};

namespace detail {

// The last `bytes` of delivered BinaryFILE records, indexed by sequence in runs of up to
// kRunMessages, so a later copy of a delivered message can be compared with what went out.
class DeliveredLog {
 public:
  DeliveredLog(std::size_t bytes, std::size_t runs);
  void clear() noexcept;
  // Records of [seq, seq + count) (consecutive, in delivery order), `n` bytes: a packet's
  // blocks (`packet`: kept as one run, so the other line's copy is compared in one go), or
  // messages delivered one by one (runs of up to kRunMessages).
  void append(std::uint64_t seq, std::uint32_t count, const std::uint8_t* recs, std::size_t n, bool packet) noexcept;
  // True when `recs` (`n` bytes, `count` messages from `seq`) are exactly a packet delivered
  // and still held.
  bool same(std::uint64_t seq, std::uint32_t count, const std::uint8_t* recs, std::size_t n) const noexcept;
  // Compares `n` bytes of records of consecutive messages from `seq` (a MoldUDP64 packet's
  // blocks) with the delivered copies still held; messages no longer held (or never
  // delivered) are not compared. Returns how many differ, the first in *first.
  std::uint32_t compare(std::uint64_t seq, const std::uint8_t* recs, std::size_t n,
                        std::uint64_t* first) const noexcept;

 private:
  static constexpr std::uint32_t kRunMessages = 64;
  struct Run {
    std::uint64_t seq;    // first message
    std::uint64_t pos;    // absolute byte position of its first record
    std::uint32_t count;  // messages
    std::uint32_t len;    // bytes
    bool packet;          // one packet's blocks as delivered
  };
  // Index of the run holding `seq`, or -1.
  std::int64_t find(std::uint64_t seq) const noexcept;
  bool held(const Run& r) const noexcept { return wpos_ - r.pos <= bytes_.size(); }
  std::uint8_t byte_at(std::uint64_t pos) const noexcept { return bytes_[pos & bmask_]; }

  std::vector<std::uint8_t> bytes_;
  std::uint64_t bmask_;
  std::uint64_t wpos_ = 0;  // bytes appended so far
  std::vector<Run> runs_;
  std::uint64_t rmask_;
  std::uint64_t rhead_ = 0, rtail_ = 0;  // runs [rtail_, rhead_)
};

}  // namespace detail

class Arbiter {
 public:
  // What on_packet() did with a datagram.
  enum class Verdict : std::uint8_t {
    kAccepted,   // something new was taken (delivered or buffered), or a heartbeat / end agreed
    kDuplicate,  // nothing new
    kRejected,   // malformed, wrong or old session, refused end (counted)
    kHeld,       // copied and held: unconfirmed (skips ahead, or ends alone) or a next session
  };

  // Held packets per line awaiting confirmation.
  static constexpr std::size_t kClaimsPerLine = 8;
  // The largest datagram a line can hand over.
  static constexpr std::size_t kMaxDatagram = 65536;

  explicit Arbiter(const ArbiterOptions& o);

  // One datagram. `truncated`: the socket cut it (counted malformed).
  Verdict on_packet(Line line, std::span<const std::uint8_t> datagram, std::int64_t now_ns,
                    bool truncated = false) noexcept;
  // The caller read `line`'s socket until it was empty at `now_ns`.
  void line_drained(Line line, std::int64_t now_ns) noexcept;
  // Timers: re-requests and their timeouts, confirmations, stale detection, session switch
  // and the end.
  void tick(std::int64_t now_ns) noexcept;

  // Re-requests queued by tick(); the caller sends them and calls clear_requests().
  std::span<const RerequestOut> requests() const noexcept { return {requests_.data(), nrequests_}; }
  // The caller could not send one of them.
  void count_send_error() noexcept { add_count(LiveCounter::kRerequestSendErrors); }
  // The caller dropped a line datagram from an unexpected sender without handing it over.
  void count_wrong_source() noexcept { add_count(LiveCounter::kWrongSource); }
  void clear_requests() noexcept { nrequests_ = 0; }

  // Delivered output: BinaryFILE bytes, split by notices. next() gives the next piece: a
  // notice (bytes empty) or bytes up to the next notice; false when nothing is pending.
  // Pieces stay valid until reset_output().
  struct Piece {
    std::span<const std::uint8_t> bytes;
    const Notice* notice = nullptr;
    // Receive time of the oldest packet behind these bytes (for messages that waited behind
    // a gap: the time the gap was seen, earlier still), for packet-in-to-book latency.
    std::int64_t rx_ns = 0;
  };
  bool next(Piece* p) noexcept;
  // Everything handed out by next() is done with: the output buffer starts over.
  void reset_output() noexcept;
  bool output_pending() const noexcept { return out_taken_ < out_len_ || notice_taken_ < nnotices_; }
  // Delivered bytes not taken yet.
  std::size_t output_bytes_pending() const noexcept { return out_len_ - out_taken_; }

  bool done() const noexcept { return done_; }
  // The line showed another session and has not come back to the current one.
  bool moved(Line l) const noexcept { return l != Line::kReplay && moved_[static_cast<int>(l)]; }
  bool stale() const noexcept { return stale_; }
  const itch::mold::Session& session() const noexcept { return session_; }
  bool has_session() const noexcept { return have_session_; }
  std::uint64_t next_sequence() const noexcept { return next_; }
  // One past the highest sequence known to exist (confirmed).
  std::uint64_t frontier() const noexcept { return hi_; }
  // The session's end once established (0: not yet).
  std::uint64_t end_sequence() const noexcept { return end_seq_; }
  std::size_t open_gaps() const noexcept { return gaps_.size(); }
  std::uint32_t outstanding() const noexcept { return outstanding_; }
  std::size_t unconfirmed() const noexcept { return nclaims_; }

  std::uint64_t counter(LiveCounter c) const noexcept { return c_[static_cast<std::size_t>(c)]; }
  const std::array<std::uint64_t, kLiveCounterCount>& counters() const noexcept { return c_; }

 private:
  struct Slot {         // one buffered message (BinaryFILE record)
    std::uint64_t seq;  // present when == the sequence that maps here
    std::uint8_t len;   // message bytes (<= itch::kMaxMessageSize)
    std::uint8_t data[55];
  };
  static_assert(sizeof(Slot) == 64);
  struct Gap {  // a missing range [from, to)
    std::uint64_t from, to;
    std::int64_t detected_ns;
    std::uint32_t attempts;  // consecutive requests for it that brought nothing
    std::int32_t req;        // index into reqs_, -1 when none is in flight
    bool lost;               // unrecoverable: reported when the cursor reaches it
    bool requested;          // asked for before: missing on both lines, no wait needed
  };
  struct Request {
    bool active;
    bool answered;       // some of it came back
    std::uint32_t refs;  // gaps pointing at it
    std::int64_t timeout_at;
    std::int64_t last_reply_ns;
  };
  // A packet that skipped ahead on one line, held until confirmed.
  struct Claim {
    bool active;
    bool data;       // data packet (its datagram is held); else a heartbeat
    bool continued;  // its line's next packet went on from it
    bool sealed;     // its line's next packet came (continued or not)
    std::uint32_t len;
    std::uint32_t probes;  // confirmation requests sent for it
    std::uint64_t seq;     // first message (data) or the announced next sequence
    std::uint64_t end;     // one past its last message (a heartbeat: seq)
    std::int64_t rx_ns;
  };
  // The one confirmation request in flight: [from, to) asked from the server.
  struct Probe {
    bool active;
    bool answered;
    std::uint64_t from, to;
    std::int64_t timeout_at;
    std::int64_t last_reply_ns;
  };
  struct Held {  // a datagram of another session
    std::int64_t rx_ns;
    std::uint32_t off, len;
    Line line;
    bool dead;
  };

  void add_count(LiveCounter c, std::uint64_t n = 1) noexcept { c_[static_cast<std::size_t>(c)] += n; }
  void start_session(const itch::mold::Session& s) noexcept;
  // A datagram already counted: validation, session, then dispatch().
  Verdict process(Line line, std::span<const std::uint8_t> datagram, std::int64_t now_ns) noexcept;
  // A validated packet of the current session (from a socket, a held claim or the hold).
  // `copy`: a data packet identical to one delivered (a duplicate, not validated again).
  Verdict dispatch(Line line, const itch::mold::Packet& p, std::span<const std::uint8_t> datagram, std::int64_t now_ns,
                   bool copy = false) noexcept;
  Verdict on_end(Line line, const itch::mold::Packet& p, std::int64_t now_ns) noexcept;
  void advance(Line line, std::uint64_t end, std::int64_t now_ns) noexcept;  // a confirmed position
  // Takes the messages [seq, seq + n) of a validated packet. With `extend` false, messages
  // beyond the highest one known to exist are left out (a held packet never confirmed).
  bool take_packet(Line line, const itch::mold::Packet& p, std::int64_t now_ns, bool extend = true) noexcept;
  void fill(std::uint64_t from, std::uint64_t to, bool from_replay, std::int64_t now_ns) noexcept;
  void compare_delivered(const itch::mold::Packet& p) noexcept;
  void conflict(std::uint64_t first, std::uint32_t n) noexcept;
  // A packet ending at `end` does not fit the window: gives up the oldest ranges wholly
  // before `seq` until it does (or none is left, or the output is full).
  void make_room(std::uint64_t seq, std::uint64_t end) noexcept;
  void drop_request_ref(std::int32_t req) noexcept;
  void pump() noexcept;  // delivers from the window while possible
  bool emit(const std::uint8_t* rec, std::size_t n, std::int64_t rx_ns) noexcept;
  bool push_notice(const Notice& n) noexcept;
  bool confirmed(const Gap& g, std::int64_t now_ns) const noexcept;
  bool finished() const noexcept;
  void check_stale(std::int64_t now_ns) noexcept;

  // Claims: packets that skip ahead.
  Verdict hold_claim(Line line, const itch::mold::Packet& p, std::span<const std::uint8_t> datagram,
                     std::int64_t now_ns) noexcept;
  // One past the highest sequence line `l`'s held packets claim (0: none held).
  std::uint64_t claimed(int l) const noexcept;
  // Continuation of held packets (true: one was) and contradiction of an end of session.
  // A packet of the current session on line `l`: continues (true) or seals the line's held
  // packets, and contradicts its end of session (not an end itself).
  bool note_line_packet(int l, itch::mold::Kind kind, std::uint64_t seq, std::uint64_t end) noexcept;
  void resolve_claims(std::int64_t now_ns) noexcept;
  void drop_claim(int l, std::size_t i) noexcept;
  std::uint8_t* claim_bytes(int l, std::size_t i) noexcept {
    return claim_bytes_.data() + (static_cast<std::size_t>(l) * kClaimsPerLine + i) * kMaxDatagram;
  }
  void probe_claims(std::int64_t now_ns) noexcept;
  void probe_answered(std::int64_t now_ns) noexcept;  // a reply reached the confirmation request's range
  void evaluate_end() noexcept;
  void establish_end(std::uint64_t end, std::int64_t now_ns) noexcept;

  // Next-session hold.
  Verdict hold_next_session(Line line, const itch::mold::Session& s, std::span<const std::uint8_t> datagram,
                            std::int64_t now_ns) noexcept;
  void drop_held_of(int l) noexcept;
  void replay_held(std::int64_t now_ns) noexcept;
  void switch_session(std::int64_t now_ns) noexcept;

  ArbiterOptions o_;
  itch::mold::Session wanted_;
  bool have_wanted_ = false;
  itch::mold::Session session_;
  bool have_session_ = false;
  std::array<itch::mold::Session, 4> retired_{};
  std::uint32_t nretired_ = 0;

  std::uint64_t next_ = 1;                                // next sequence to deliver
  std::uint64_t hi_ = 1;                                  // one past the highest sequence known to exist
  std::uint64_t end_seq_ = 0;                             // the established end of session (0: not yet)
  std::array<std::uint64_t, 2> line_end_{1, 1};           // each line's confirmed position
  std::array<std::int64_t, 3> line_drained_ns_{0, 0, 0};  // last time its socket was read empty
  std::array<std::int64_t, 2> line_rx_ns_{0, 0};          // last packet of the session on it
  std::array<bool, 2> line_stale_{};
  std::array<std::uint64_t, 2> line_eos_{0, 0};  // the end of session it announced (0: none)
  std::int64_t first_rx_ns_ = 0;                 // first packet of the session (stale checks start then)
  bool have_rx_ = false;
  bool stale_ = false;
  std::int64_t finished_ns_ = 0;  // when finished() first held (linger)
  bool done_ = false;

  std::vector<Slot> window_;
  std::uint64_t mask_;
  std::uint64_t buffered_ = 0;  // messages in the window
  std::vector<Gap> gaps_;       // sorted, disjoint, within [next_, hi_)
  std::vector<Request> reqs_;
  std::uint32_t outstanding_ = 0;
  std::vector<RerequestOut> requests_;
  std::size_t nrequests_ = 0;
  Probe probe_{};
  std::uint64_t probe_limit_ = 0;   // replies may extend what is known up to here
  std::uint32_t probe_misses_ = 0;  // consecutive confirmation requests that brought nothing

  std::array<std::array<Claim, kClaimsPerLine>, 2> claims_{};
  std::vector<std::uint8_t> claim_bytes_;
  std::uint32_t nclaims_ = 0;
  std::array<std::uint32_t, 2> line_claims_{0, 0};

  // Another session's datagrams, in arrival order: bytes in hold_, entries in held_.
  std::array<bool, 2> moved_{};
  std::array<itch::mold::Session, 2> moved_to_{};
  std::vector<std::uint8_t> hold_;
  std::size_t hold_used_ = 0;
  std::vector<Held> held_;
  std::size_t nheld_ = 0, held_pos_ = 0;  // entries, and the next to replay after a switch
  bool replaying_ = false;
  itch::mold::Session next_session_;
  bool have_next_session_ = false;  // once the current session is finished, this one

  detail::DeliveredLog delivered_;

  std::vector<std::uint8_t> out_;
  std::size_t out_len_ = 0, out_taken_ = 0;
  std::int64_t out_rx_ns_ = 0;  // earliest receive time behind out_[out_taken_..)
  struct PendingNotice {
    Notice n;
    std::size_t at;  // output offset it precedes
  };
  std::vector<PendingNotice> notices_;
  std::size_t nnotices_ = 0, notice_taken_ = 0;
  std::int64_t buffered_rx_ns_ = 0;  // when the window last went from empty to not empty

  std::array<std::uint64_t, kLiveCounterCount> c_{};
};

}  // namespace pollux::feed
