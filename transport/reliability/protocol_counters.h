// The reliability protocol's counters in the counters file (pollux-stat), named once for every
// transport that runs the protocol (UDP, RDMA UD multicast): the same statistic has the same
// name whichever transport carries it. A transport allocates them under its own scope, adds its
// own counters beside them, and publishes from its timers (never per message). Each set is one
// table (core/counter_set.h): field, name, help and the statistic publish() copies.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/counter_set.h"
#include "core/counters.h"
#include "transport/reliability/fault_injector.h"
#include "transport/reliability/receiver.h"
#include "transport/reliability/sender.h"

namespace pollux::transport::reliability {

// publish() names: `sender` (the ReliableSender), `s` (its SenderStats).
#define POLLUX_SENDER_COUNTERS(X)                                                                                     \
  X(position, "position", "the sequence the next frame gets (pollux-stat: the publisher's position)",                 \
    sender.log().next())                                                                                              \
  X(datagrams, "datagrams_sent", "datagrams sent: data, repairs and heartbeats", s.datagrams)                         \
  X(bytes, "bytes_sent", "bytes of those datagrams", s.bytes)                                                         \
  X(heartbeats, "heartbeats_sent", "heartbeats sent (session announcements, tails, end of stream)", s.heartbeats)     \
  X(naks, "naks_received", "NAKs received from subscribers", s.naks)                                                  \
  X(nak_ranges, "nak_ranges_received", "sequence ranges those NAKs asked for", s.nak_ranges)                          \
  X(naks_suppressed, "naks_suppressed", "NAKed ranges (or parts) already being repaired", s.naks_suppressed)          \
  X(naks_unavailable, "naks_unavailable", "NAKed ranges (or parts) older than the retransmit buffer holds",           \
    s.naks_unavailable)                                                                                               \
  X(retransmit_frames, "retransmitted_frames", "frames sent again as repairs", s.retransmit_frames)                   \
  X(retransmit_datagrams, "retransmitted_datagrams", "repair datagrams sent", s.retransmit_datagrams)                 \
  X(retransmit_bytes, "retransmitted_bytes", "bytes of repair datagrams sent", s.retransmit_bytes)                    \
  X(receivers, "receivers", "subscribers known to the publisher now", sender.receivers())                             \
  X(control_malformed, "control_malformed", "control datagrams not of this stream and session (dropped)",             \
    s.control_malformed)                                                                                              \
  X(control_bytes, "control_bytes_received", "bytes of every control datagram received", s.control_bytes)             \
  X(naks_unannounced, "naks_unannounced", "NAKs from a subscriber not heard before (not served)", s.naks_unannounced) \
  X(nak_ranges_capped, "nak_ranges_capped", "NAKed ranges cut to udp.nak_max_range", s.nak_ranges_capped)             \
  X(repairs_rate_limited, "repairs_rate_limited", "NAKed ranges (or parts) refused for want of repair tokens",        \
    s.repairs_rate_limited)                                                                                           \
  X(repair_bytes_refused, "repair_bytes_refused", "bytes of those refused repairs", s.repair_bytes_refused)

struct SenderCounters {
  POLLUX_COUNTER_MEMBERS(POLLUX_SENDER_COUNTERS)

  void allocate(core::CountersFile& f, const std::string& scope, std::uint32_t stream) {
    // The position is the publisher's (pollux-stat shows it as the publication's position).
    allocate([&](std::string_view n) {
      return f.allocate(scope, n, stream,
                        n == names::position ? core::CounterKind::kPublisher : core::CounterKind::kOther);
    });
  }

  // No-op when allocate() was never called (a transport opened without a counters file).
  void publish(const ReliableSender& sender) noexcept {
    if (!datagrams.valid()) return;
    const SenderStats& s = sender.stats();
    POLLUX_COUNTER_PUBLISH(POLLUX_SENDER_COUNTERS, *this);
  }
};
POLLUX_COUNTER_SET_CHECK(SenderCounters, POLLUX_SENDER_COUNTERS);

// publish() names: `s` (ReceiverStats), `w` (WindowStats), `f` (the fault injector's FaultStats),
// `malformed_extra` and `evicted` (its arguments).
#define POLLUX_RECEIVER_COUNTERS(X)                                                                                   \
  X(datagrams, "datagrams_received", "datagrams received", s.datagrams)                                               \
  X(frames, "frames_received", "frames stored for delivery", w.frames)                                                \
  X(heartbeats, "heartbeats_received", "heartbeats received", s.heartbeats)                                           \
  X(duplicates, "duplicates_dropped", "frames already delivered or held (dropped)", w.duplicates)                     \
  X(beyond_window, "beyond_window_dropped", "frames too far ahead of delivery, the window full (dropped)", w.beyond)  \
  X(fills, "gap_fills", "frames that filled a gap: repairs and late reordered frames", w.fills)                       \
  X(gaps, "gaps_detected", "gaps detected in a session's sequences", w.gaps_opened)                                   \
  X(nak_ranges, "nak_ranges_sent", "sequence ranges NAKed (first requests and retries)", w.nak_ranges)                \
  X(naks, "naks_sent", "NAK messages sent", s.naks_sent)                                                              \
  X(lost, "messages_unrecoverable", "sequences reported unrecoverable", w.lost)                                       \
  X(loss_reports, "loss_reports", "gaps reported to the application", w.loss_reports)                                 \
  X(sessions, "sessions_started", "publisher sessions joined", s.sessions_started)                                    \
  X(sessions_ended, "sessions_ended", "sessions that ended cleanly", s.sessions_ended)                                \
  X(status_sent, "status_sent", "status messages sent to publishers", s.status_sent)                                  \
  X(malformed, "malformed", "datagrams (or their tails) that are not valid frames", s.malformed + malformed_extra)    \
  X(other_stream, "other_stream", "datagrams of another stream on the same address", s.other_stream)                  \
  X(wrong_source, "wrong_source", "datagrams of a session from another address than its heartbeats'", s.wrong_source) \
  X(claims_refuted, "heartbeat_claims_refuted", "heartbeats whose next or oldest went back (claim dropped)",          \
    w.claims_refuted)                                                                                                 \
  X(ends_refuted, "ends_refuted", "end-of-stream claims contradicted by later datagrams", s.ends_refuted)             \
  X(sessions_refused, "sessions_refused", "new sessions refused while udp.max_sessions were active",                  \
    s.sessions_refused)                                                                                               \
  X(sessions_timed_out, "sessions_timed_out", "sessions silent past the session timeout", s.sessions_timed_out)       \
  X(sessions_resumed, "sessions_resumed", "sessions reported dead that were heard again", s.sessions_resumed)         \
  X(dead_forgotten, "dead_sessions_forgotten", "dead sessions forgotten before they were heard again",                \
    s.dead_forgotten)                                                                                                 \
  X(stale_session, "stale_sessions", "datagrams of a session that already ended cleanly", s.stale_session)            \
  X(evictions, "buffer_evictions", "receive buffers given back under pressure (their frames NAKed again)", evicted)   \
  X(fault_dropped, "fault_dropped", "datagrams the fault injector dropped", f.dropped)                                \
  X(fault_duplicated, "fault_duplicated", "datagrams the fault injector duplicated", f.duplicated)                    \
  X(fault_reordered, "fault_reordered", "datagrams the fault injector delayed behind later ones", f.delayed)

struct ReceiverCounters {
  POLLUX_COUNTER_MEMBERS(POLLUX_RECEIVER_COUNTERS)

  void allocate(core::CountersFile& f, const std::string& scope, std::uint32_t stream) {
    allocate([&](std::string_view n) { return f.allocate(scope, n, stream); });
  }

  // `malformed_extra`: datagrams the transport refused before the protocol saw them (truncated,
  // no valid network header); `evicted`: buffers it gave back under pressure. No-op when
  // allocate() was never called.
  void publish(const ReliableReceiver& r, const FaultInjector& faults, std::uint64_t malformed_extra,
               std::uint64_t evicted) noexcept {
    if (!datagrams.valid()) return;
    const ReceiverStats& s = r.stats();
    const WindowStats w = r.window_stats();
    const FaultStats& f = faults.stats();
    POLLUX_COUNTER_PUBLISH(POLLUX_RECEIVER_COUNTERS, *this);
  }
};
POLLUX_COUNTER_SET_CHECK(ReceiverCounters, POLLUX_RECEIVER_COUNTERS);

// One endpoint's counters under one scope, in a transport that runs the protocol: the protocol's
// (`Proto`: SenderCounters or ReceiverCounters), the transport's own (`Own`) and, only on a
// socket that stamps, its kernel timestamp counters (`Stamps`), allocated in that order. The
// transport adds publish().
template <class Proto, class Own, class Stamps>
struct EndpointCounters {
  Proto proto;
  Own own;
  Stamps stamped;

  void allocate(core::CountersFile& f, const std::string& scope, std::uint32_t stream, bool stamps) {
    proto.allocate(f, scope, stream);
    auto alloc = [&](std::string_view n) { return f.allocate(scope, n, stream); };
    own.allocate(alloc);
    if (stamps) stamped.allocate(alloc);
  }
};

}  // namespace pollux::transport::reliability
