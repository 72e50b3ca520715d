// Subscriber side of the reliability protocol for one stream: the publisher sessions heard on
// it (each with its ReceiveWindow), session start (at the next sequence of the first heartbeat
// heard: late joiners start at the live position, never at a repair of old data),
// end of stream (clean, or the publisher went silent), NAKs and status messages back to each
// publisher.
//
// Silence and death (docs/PROTOCOL.md, section 2): a session times out only on silence in the
// traffic the transport actually read - nothing of it between its last datagram and a moment
// the transport found its queue empty (drained()) session_timeout_ns later - so a subscriber
// that is behind never calls a live publisher dead. A session reported dead is remembered
// (where delivery stood, its source): anything of it that arrives later resumes it there, so
// what it sent meanwhile is repaired or reported lost with its exact count, never dropped
// silently.
//
// Transport-agnostic: datagrams come in through on_datagram() with an opaque token the
// transport uses to keep the buffer alive while frames of it are held or delivered; control
// messages go out through a ControlSink. The clock is the caller's. Single-threaded.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "core/random_id.h"

#include "transport/reliability/receive_window.h"
#include "transport/reliability/wire.h"
#include "transport/transport.h"

namespace pollux::transport::reliability {

class ControlSink {
 public:
  virtual ~ControlSink() = default;
  // Sends one control message to a publisher (best effort: a lost NAK is retried by timer).
  virtual void send_control(const PeerAddress& to, const std::byte* msg, std::uint32_t len) noexcept = 0;
};

struct ReceiverOptions {
  WindowOptions window;
  std::uint32_t stream_id = 0;
  std::uint32_t max_sessions = 4;
  std::int64_t session_timeout_ns = 2'000'000'000;  // silent publisher session = reported dead (resumable)
  std::int64_t status_interval_ns = 100'000'000;    // status messages to each publisher
  std::uint64_t receiver_id = 0;                    // must be unique per subscriber endpoint
  std::uint64_t seed = 1;                           // NAK jitter
};

// A subscriber's options from its transport's config, which names the protocol's keys alike
// under [udp] and [rdma] (reorder_window, nak_*, max_sessions, status_interval_ms). The two
// named differently come in ns: `heartbeat_ns` (publishers heartbeat at least this often) and
// `session_timeout_ns`. Each subscriber gets a random receiver id, which also seeds its NAK jitter.
template <class TransportConfig>
ReceiverOptions receiver_options(const TransportConfig& cfg, std::uint32_t stream_id, std::int64_t heartbeat_ns,
                                 std::int64_t session_timeout_ns) {
  constexpr std::int64_t kUs = 1'000, kMs = 1'000'000;
  ReceiverOptions ro;
  ro.window.window = cfg.reorder_window;
  ro.window.nak_delay_ns = cfg.nak_delay_us * kUs;
  ro.window.nak_retry_ns = cfg.nak_retry_us * kUs;
  ro.window.nak_retry_max_ns = cfg.nak_retry_max_us * kUs;
  ro.window.give_up_ns = cfg.nak_give_up_ms * kMs;
  // Same key on both sides: a forged claim is refuted by a real heartbeat before it can be confirmed.
  ro.window.confirm_ns = 2 * heartbeat_ns;
  ro.stream_id = stream_id;
  ro.max_sessions = cfg.max_sessions;
  ro.session_timeout_ns = session_timeout_ns;
  ro.status_interval_ns = cfg.status_interval_ms * kMs;
  ro.receiver_id = core::random_id64();
  ro.seed = ro.receiver_id;
  return ro;
}

struct ReceiverStats {
  std::uint64_t datagrams = 0;
  std::uint64_t heartbeats = 0;
  std::uint64_t malformed = 0;         // datagrams (or their tails) that are not valid frames
  std::uint64_t other_stream = 0;      // datagrams of another stream on the same address
  std::uint64_t stale_session = 0;     // datagrams of a session that already ended cleanly
  std::uint64_t sessions_refused = 0;  // new sessions while max_sessions were active
  std::uint64_t before_join = 0;       // data of a session not joined yet (joining waits for a heartbeat)
  std::uint64_t wrong_source = 0;      // datagrams of a session from another address than its heartbeats'
  std::uint64_t ends_refuted = 0;      // end-of-stream claims contradicted by later datagrams (ignored)
  std::uint64_t sessions_started = 0, sessions_ended = 0, sessions_timed_out = 0;
  std::uint64_t sessions_resumed = 0;  // sessions reported dead (or timing out) that were heard again
  // Dead sessions forgotten before they were heard again (kTombs newer ends displaced them): if
  // one comes back after all, it joins at the live position like a new session.
  std::uint64_t dead_forgotten = 0;
  std::uint64_t naks_sent = 0, status_sent = 0;
};

class ReliableReceiver {
 public:
  static constexpr std::uint32_t kMaxSessions = 64;
  // Sequences start at 1 and grow by one per frame: 2^62 is over a century at 10^9 frames/s.
  // Anything larger is malformed (and no sum of sequences below it can overflow).
  static constexpr std::uint64_t kMaxSequence = 1ull << 62;

  // ResourceExhausted when the windows cannot be allocated.
  absl::Status init(const ReceiverOptions& o);

  // A datagram from `from`. Frames stay in place; the returned count is how many of them are
  // now held in windows (the caller keeps the buffer `token` alive until each is delivered and
  // released, or forgotten).
  std::uint32_t on_datagram(const std::byte* data, std::uint32_t len, const PeerAddress& from, std::uint32_t token,
                            std::int64_t now_ns) noexcept;

  // Inline direct delivery (UDP): a datagram of plain data frames (no flags) of an active,
  // announced session, from its peer, that continue delivery exactly where it stands (see
  // ReceiveWindow::take_in_order), no more than `max` of them, is taken as on_datagram() then
  // poll() would take it; returns how many frames, which the caller delivers from its buffer at
  // once. 0, nothing changed: anything else (pass the datagram to on_datagram()).
  std::uint32_t take_in_order(const std::byte* data, std::uint32_t len, const PeerAddress& from, std::uint32_t max,
                              std::int64_t now_ns) noexcept;
  // poll() certainly returns nothing now (nothing came or became due since it drained all).
  bool quiet() const noexcept { return !maybe_ready_; }

  // Messages, gaps and session events in order (per session), up to out.size().
  std::uint32_t poll(RxDesc* out, std::uint32_t max) noexcept;

  // The transport found nothing more to read at `now_ns` (its socket or queue was empty): every
  // datagram sent before then was seen. An end of stream is reported only once nothing
  // contradicted it for confirm_ns of *seen* traffic, and a session times out only once it was
  // silent for session_timeout_ns of it, so a subscriber that was itself stalled reads what is
  // queued before it believes an end or a death.
  void drained(std::int64_t now_ns) noexcept {
    drained_ns_ = now_ns;
    if (__builtin_expect(end_pending_, 0)) maybe_ready_ = true;  // an end may be due now
    // A time-out that waited for this (see next_deadline()): service() is due now.
    if (__builtin_expect(now_ns >= timeout_due_ns_, 0)) new_deadline_ns_ = std::min(new_deadline_ns_, now_ns);
  }

  // NAKs due, status messages, session time-outs. Returns work done.
  int service(std::int64_t now_ns, ControlSink& sink) noexcept;
  // When service() next has something to do. A session time-out that is due by the clock but
  // not by the traffic read (the transport has not drained its queue since) is left out: the
  // drained() that makes it due says so through take_new_deadline().
  std::int64_t next_deadline() const noexcept;
  // The earliest deadline that datagrams (on_datagram), forget() or poll() made due since the
  // last call (INT64_MAX: none), and resets it: what may have moved next_deadline() earlier,
  // without its walk over every session per datagram. A transport that recomputes
  // next_deadline() after each service() and takes the minimum with this after each read
  // knows when service() is due.
  std::int64_t take_new_deadline() noexcept {
    const std::int64_t t = new_deadline_ns_;
    new_deadline_ns_ = INT64_MAX;
    return t;
  }

  // Gives a held frame back (buffer pressure); it is NAKed again. See ReceiveWindow::forget.
  bool forget(std::uint32_t session_id, std::uint64_t seq, const void* frame, std::int64_t now_ns) noexcept;

  // Tells every publisher this subscriber is leaving.
  void close(ControlSink& sink) noexcept;

  // poll() would return something now.
  bool ready() const noexcept;

  bool connected() const noexcept { return active_ > 0; }
  std::uint32_t sessions() const noexcept { return active_; }
  // Frames held in all windows (delivered ones excluded).
  std::uint32_t held() const noexcept;
  std::uint32_t window() const noexcept { return opt_.window.window; }
  const ReceiverStats& stats() const noexcept { return stats_; }
  // Sum of the windows' statistics (sessions past and present).
  WindowStats window_stats() const noexcept;
  // Session details for describe()/tests: expected, hwm of session `i` (0 <= i < sessions()).
  struct SessionInfo {
    std::uint32_t session_id;
    std::uint64_t expected, hwm;
    std::uint32_t gaps, held;
  };
  SessionInfo session_info(std::uint32_t i) const noexcept;

 private:
  enum class State : std::uint8_t { kFree, kActive, kEnding };
  struct Session {
    State state = State::kFree;
    std::uint32_t session_id = 0;
    PeerAddress peer{};
    ReceiveWindow win;
    std::int64_t last_heard_ns = 0;
    std::int64_t next_status_ns = 0;
    std::uint64_t end_seq = UINT64_MAX;  // end-of-stream sequence, once seen (and not refuted)
    std::int64_t end_since_ns = 0;       // when it was seen: reported confirm_ns later
    bool announce = false;               // kNewSession not yet delivered
    bool timed_out = false;              // silent: everything missing was declared lost
    bool status_now = false;
    std::uint16_t end_reason = 0;
  };

  Session* find(std::uint32_t session_id) noexcept;
  Session* start(std::uint32_t session_id, std::uint64_t first_seq, const PeerAddress& from,
                 std::int64_t now_ns) noexcept;
  // The publisher of a session that timed out (or was reported dead) spoke again: it goes on
  // where delivery stood.
  void resume(Session& s, std::int64_t now_ns) noexcept;
  void bury(const Session& s, std::int64_t now_ns) noexcept;
  // A status or NAK message about session `s` (`length`: the whole message), flags and ranges 0.
  ControlHeader control_header(const Session& s, std::uint16_t type, std::uint32_t length) const noexcept;
  void send_status(Session& s, std::int64_t now_ns, ControlSink& sink, std::uint16_t flags) noexcept;
  // A session that ended. A clean end is remembered for session_timeout_ns (its lingering
  // end-of-stream heartbeats and repairs for others are ignored: they start nothing); a death
  // until the session is heard again (it resumes at `expected`) or kTombs newer ends displace it.
  struct Tomb {
    std::uint32_t session_id = 0;
    bool used = false;
    bool died = false;
    std::int64_t until_ns = 0;   // clean ends: forgotten then
    std::uint64_t expected = 0;  // deaths: where delivery stood
    std::int64_t buried_ns = 0;  // the oldest is replaced when every entry is taken
    PeerAddress peer{};          // deaths: the session's source (its datagrams must come from it)
  };
  // The remembered end of `session_id` (null: none, or a clean end that expired).
  Tomb* tomb(std::uint32_t session_id, std::int64_t now_ns) noexcept;
  void refute_end(Session& s) noexcept;
  bool end_due(const Session& s) const noexcept {
    return s.end_seq != UINT64_MAX && s.win.expected() >= s.end_seq &&
           drained_ns_ - s.end_since_ns >= opt_.window.confirm_ns;
  }

  ReceiverOptions opt_;
  std::unique_ptr<Session[]> sessions_;
  std::uint32_t nslots_ = 0;
  std::uint32_t active_ = 0;
  std::uint32_t rr_ = 0;  // round-robin start for poll()
  std::int64_t now_ns_ = 0;
  std::int64_t drained_ns_ = 0;               // the transport last found nothing more to read (drained())
  std::int64_t new_deadline_ns_ = INT64_MAX;  // see take_new_deadline()
  // poll() may have something: false only after a poll() that returned fewer than asked (it
  // drained everything deliverable); set by whatever can make something deliverable -
  // on_datagram(), service() (time-outs, give-ups), forget(), and drained() while an end of
  // stream waits for its confirmation (end_pending_). Lets an empty poll() return at once.
  bool maybe_ready_ = true;
  bool end_pending_ = false;  // some session saw an end of stream (recomputed by service())
  // Earliest moment a session may time out (a hint: early only costs a service() call);
  // recomputed by service(), lowered by start()/resume().
  std::int64_t timeout_due_ns_ = INT64_MAX;
  static constexpr std::uint32_t kTombs = 16;
  Tomb tombs_[kTombs] = {};
  ReceiverStats stats_;
  SplitMix64 rng_{1};
};

}  // namespace pollux::transport::reliability
