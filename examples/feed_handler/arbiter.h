// A/B line arbitration and gap recovery for MoldUDP64 (pollux-feed live mode): no sockets,
// no clock of its own, so every rule can be tested by handing it packets in any order.
//
// The caller (live_source.cc, or a test) hands it every datagram it reads - from line A,
// line B or the re-request socket - with the time, calls Tick() once per polling round, and
// sends the re-requests it queues. The arbiter hands back, in sequence order, the ITCH
// messages of the session as BinaryFILE records (2-byte big-endian length + message: a
// MoldUDP64 block is exactly that) and notices (a gap that cannot be recovered, a stale or
// fresh feed, a new session) at the position in the stream where they happen.
//
// Rules (docs/FEED.md, "Arbitration and recovery"):
//   - the first copy of each sequence number wins, from whichever line or the re-request
//     reply; later copies are duplicates (dropped and counted);
//   - messages after a gap wait in a window of `window` messages (one 64-byte slot each,
//     allocated once); a packet of line A or B that would not fit gives up the oldest
//     missing ranges before it (reported as lost, `gaps_given_up`) until it fits: the live
//     data is kept and nothing waits behind a gap for longer than a window of traffic. Only
//     what still does not fit (the output or the gap list full) is dropped, counted, and
//     recovered like a loss once the window has moved;
//   - a gap is re-requested once both lines have moved past it (each line delivers in order,
//     so it is then missing on both), or after `rerequest_wait_ns` if a line lags and its
//     socket has since been read empty (a silent or dead line does not hold recovery up);
//   - a request covers one missing range (at most 65535 messages); it times out after
//     `rerequest_timeout_ns`, doubled for each retry up to `rerequest_timeout_max_ns`;
//     after `rerequest_retries` retries the range is unrecoverable; at most
//     `max_outstanding` requests are in flight; no server configured: a confirmed gap is
//     unrecoverable at once;
//   - an unrecoverable range is delivered as a kGap notice where it was, and the stream goes
//     on after it: never silently;
//   - heartbeats (count 0) and end of session (count 0xFFFF) carry the next sequence number,
//     so a loss just before a quiet period or the end is seen at once;
//   - a packet of another session parks its line (the caller holds it and offers it again)
//     until the current session is over - its end of session seen and every gap filled or
//     reported, or, without an end of session, both lines moved on; then the new session
//     starts. Packets of a session that was left are dropped and counted;
//   - the feed is stale after `stale_heartbeats` heartbeat intervals without a packet on
//     either line (a kStale notice; kFresh when a packet comes again);
//   - a sequence number beyond 2^62 is malformed (no feed gets there; the window arithmetic
//     must not wrap);
//   - done() once the session ended, everything is delivered or reported, and
//     `end_linger_ns` passed without a new session.
//
// Steady state allocates nothing: the window, the gap list, the request table, the output
// buffer and the notice queue are sized at construction.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "feed_handler/notice.h"
#include "itch/moldudp64.h"

namespace pollux::feed {

// Where a datagram came from.
enum class Line : std::uint8_t { kA = 0, kB = 1, kReplay = 2 };

// The live counters: one table (name, help) indexed by this enum. Exported to the Pollux
// counters file (scope "feed live") and to --summary-json under the same names.
enum class LiveCounter : std::uint8_t {
  kPacketsA,            // datagrams read on line A (every one, valid or not)
  kPacketsB,
  kReplayPackets,       // datagrams read on the re-request socket
  kMessages,            // ITCH messages delivered in order
  kHeartbeats,          // heartbeat packets of the current session
  kEndOfSession,        // end-of-session packets of the current session
  kDuplicatePackets,    // packets carrying nothing new (every message already had)
  kDuplicateMessages,   // messages dropped because an earlier copy won
  kOutOfOrderPackets,   // packets (partly) buffered behind a gap
  kOutOfOrderMessages,  // messages buffered behind a gap
  kGapsDetected,        // missing ranges found (each jump of the highest sequence seen)
  kRerequestsSent,      // request packets sent (first attempts and retries)
  kRerequestRetries,    // of those, retries after a timeout
  kRerequestsAnswered,  // requests for which at least one message came back
  kRerequestsTimedOut,  // requests for which nothing came back before the timeout
  kRerequestSendErrors, // requests the socket refused (they time out and go again)
  kMessagesRecovered,   // messages delivered from re-request replies
  kGapsUnrecoverable,   // kGap notices delivered
  kMessagesUnrecoverable,  // messages those notices cover
  kWindowOverflow,      // messages dropped beyond a window that could not be emptied (recovered later or reported)
  kMalformed,           // datagrams the MoldUDP64 or ITCH decoder refused, or truncated
  kWrongSession,        // datagrams of a session this handler does not follow
  kOldSession,          // datagrams of a session already left
  kStale,               // times the feed went stale (no packet on either line)
  kStaleA,              // times line A went quiet for the stale interval
  kStaleB,
  kSessionChanges,      // sessions started after the first
  kGapsGivenUp,         // ranges reported lost early to make room in a full window
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
  std::string_view session;              // empty: follow the first session seen
  std::uint32_t window = 1u << 17;       // messages; a power of two
  bool rerequest = true;                 // a re-request server is configured
  std::int64_t rerequest_wait_ns = 1'000'000;
  std::int64_t rerequest_timeout_ns = 20'000'000;
  std::int64_t rerequest_timeout_max_ns = 500'000'000;
  std::uint32_t rerequest_retries = 3;
  std::uint32_t max_outstanding = 8;
  std::int64_t heartbeat_ns = 1'000'000'000;
  std::uint32_t stale_heartbeats = 3;
  std::int64_t end_linger_ns = 100'000'000;
  std::uint32_t max_gaps = 4096;         // missing ranges tracked at once
  std::size_t output_bytes = 1u << 20;   // delivered bytes held until the caller takes them
};

class Arbiter {
 public:
  // What OnPacket() did with a datagram.
  enum class Verdict : std::uint8_t {
    kAccepted,   // something new was taken (delivered or buffered)
    kDuplicate,  // nothing new
    kRejected,   // malformed, wrong or old session (counted)
    kPark,       // a new session: keep the datagram and offer it again after Tick()
  };

  explicit Arbiter(const ArbiterOptions& o);

  // One datagram. `truncated`: the socket cut it (counted malformed).
  Verdict OnPacket(Line line, std::span<const std::uint8_t> datagram, std::int64_t now_ns,
                   bool truncated = false) noexcept;
  // The caller read `line`'s socket until it was empty at `now_ns`.
  void LineDrained(Line line, std::int64_t now_ns) noexcept;
  // Timers: re-requests and their timeouts, stale detection, session switch and the end.
  void Tick(std::int64_t now_ns) noexcept;

  // Re-requests queued by Tick(); the caller sends them and calls ClearRequests().
  std::span<const RerequestOut> requests() const noexcept { return {requests_.data(), nrequests_}; }
  // The caller could not send one of them.
  void CountSendError() noexcept { Count(LiveCounter::kRerequestSendErrors); }
  // The caller dropped a line datagram from an unexpected sender without handing it over.
  void CountWrongSource() noexcept { Count(LiveCounter::kWrongSource); }
  void ClearRequests() noexcept { nrequests_ = 0; }

  // Delivered output: BinaryFILE bytes, split by notices. Next() gives the next piece: a
  // notice (bytes empty) or bytes up to the next notice; false when nothing is pending.
  // Pieces stay valid until ResetOutput().
  struct Piece {
    std::span<const std::uint8_t> bytes;
    const Notice* notice = nullptr;
    // Receive time of the oldest packet behind these bytes (for messages that waited behind
    // a gap: the time the gap was seen, earlier still), for packet-in-to-book latency.
    std::int64_t rx_ns = 0;
  };
  bool Next(Piece* p) noexcept;
  // Everything handed out by Next() is done with: the output buffer starts over.
  void ResetOutput() noexcept;
  bool output_pending() const noexcept { return out_taken_ < out_len_ || notice_taken_ < nnotices_; }

  bool done() const noexcept { return done_; }
  bool parked(Line l) const noexcept { return parked_[static_cast<int>(l)]; }
  bool stale() const noexcept { return stale_; }
  const itch::mold::Session& session() const noexcept { return session_; }
  bool has_session() const noexcept { return have_session_; }
  std::uint64_t next_sequence() const noexcept { return next_; }
  std::size_t open_gaps() const noexcept { return gaps_.size(); }
  std::uint32_t outstanding() const noexcept { return outstanding_; }

  std::uint64_t counter(LiveCounter c) const noexcept { return c_[static_cast<std::size_t>(c)]; }
  const std::array<std::uint64_t, kLiveCounterCount>& counters() const noexcept { return c_; }

 private:
  struct Slot {  // one buffered message (BinaryFILE record)
    std::uint64_t seq;  // present when == the sequence that maps here
    std::uint8_t len;   // message bytes (<= itch::kMaxMessageSize)
    std::uint8_t data[55];
  };
  static_assert(sizeof(Slot) == 64);
  struct Gap {  // a missing range [from, to)
    std::uint64_t from, to;
    std::int64_t detected_ns;
    std::uint32_t attempts;  // requests sent for (a range containing) it
    std::int32_t req;        // index into reqs_, -1 when none is in flight
    bool lost;               // unrecoverable: reported when the cursor reaches it
  };
  struct Request {
    bool active;
    bool answered;
    std::uint32_t refs;       // gaps pointing at it
    std::int64_t timeout_at;
  };

  void Count(LiveCounter c, std::uint64_t n = 1) noexcept { c_[static_cast<std::size_t>(c)] += n; }
  void StartSession(const itch::mold::Session& s) noexcept;
  void Advance(Line line, std::uint64_t end, std::int64_t now_ns) noexcept;  // a line's position
  // Takes the messages [seq, seq + n) of a validated packet.
  bool Take(Line line, const itch::mold::Packet& p, std::int64_t now_ns) noexcept;
  void Fill(std::uint64_t from, std::uint64_t to, bool from_replay) noexcept;
  // A packet ending at `end` does not fit the window: gives up the oldest ranges wholly
  // before `seq` until it does (or none is left, or the output is full).
  void MakeRoom(std::uint64_t seq, std::uint64_t end) noexcept;
  void DropRequestRef(std::int32_t req) noexcept;
  void Pump() noexcept;  // delivers from the window while possible
  bool Emit(const std::uint8_t* rec, std::size_t n, std::int64_t rx_ns) noexcept;
  bool PushNotice(const Notice& n) noexcept;
  bool Confirmed(const Gap& g, std::int64_t now_ns) const noexcept;
  bool Finished() const noexcept;
  void CheckStale(std::int64_t now_ns) noexcept;

  ArbiterOptions o_;
  itch::mold::Session wanted_;
  bool have_wanted_ = false;
  itch::mold::Session session_;
  bool have_session_ = false;
  std::array<itch::mold::Session, 4> retired_{};
  std::uint32_t nretired_ = 0;
  itch::mold::Session pending_;
  bool have_pending_ = false;
  std::array<bool, 2> parked_{};
  std::array<bool, 2> reoffer_{};  // the next datagram of the line is the parked one again

  std::uint64_t next_ = 1;     // next sequence to deliver
  std::uint64_t hi_ = 1;       // one past the highest sequence known to exist
  std::uint64_t end_seq_ = 0;  // end of session's sequence (0: not seen)
  std::array<std::uint64_t, 2> line_end_{1, 1};       // each line's position
  std::array<std::int64_t, 2> line_drained_ns_{0, 0};  // last time its socket was read empty
  std::array<std::int64_t, 2> line_rx_ns_{0, 0};       // last packet of the session on it
  std::array<bool, 2> line_stale_{};
  std::int64_t first_rx_ns_ = 0;  // first packet of the session (stale checks start then)
  bool have_rx_ = false;
  bool stale_ = false;
  std::int64_t finished_ns_ = 0;  // when Finished() first held (linger)
  bool done_ = false;

  std::vector<Slot> window_;
  std::uint64_t mask_;
  std::uint64_t buffered_ = 0;  // messages in the window
  std::vector<Gap> gaps_;       // sorted, disjoint, within [next_, hi_)
  std::vector<Request> reqs_;
  std::uint32_t outstanding_ = 0;
  std::vector<RerequestOut> requests_;
  std::size_t nrequests_ = 0;

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
