// The reliability protocol's counters in the counters file (pollux-stat), named once for every
// transport that runs the protocol (UDP, RDMA UD multicast): the same statistic has the same
// name whichever transport carries it. A transport allocates them under its own scope, adds its
// own counters beside them, and publishes from its timers (never per message).
#pragma once

#include <cstdint>
#include <string>

#include "core/counters.h"
#include "transport/reliability/fault_injector.h"
#include "transport/reliability/receiver.h"
#include "transport/reliability/sender.h"

namespace pollux::transport::reliability {

struct SenderCounters {
  core::Counter datagrams, bytes, heartbeats, naks, nak_ranges, naks_suppressed, naks_unavailable, retransmit_frames,
      retransmit_datagrams, retransmit_bytes, receivers, control_malformed, control_bytes, naks_unannounced,
      nak_ranges_capped, repairs_rate_limited, repair_bytes_refused;
  // The sequence the next frame gets: the publisher's position for pollux-stat (kind publisher).
  core::Counter position;

  void allocate(core::CountersFile& f, const std::string& scope, std::uint32_t stream) {
    position = f.allocate(scope, "position", stream, core::CounterKind::kPublisher);
    datagrams = f.allocate(scope, "datagrams_sent", stream);
    bytes = f.allocate(scope, "bytes_sent", stream);
    heartbeats = f.allocate(scope, "heartbeats_sent", stream);
    naks = f.allocate(scope, "naks_received", stream);
    nak_ranges = f.allocate(scope, "nak_ranges_received", stream);
    naks_suppressed = f.allocate(scope, "naks_suppressed", stream);
    naks_unavailable = f.allocate(scope, "naks_unavailable", stream);
    retransmit_frames = f.allocate(scope, "retransmitted_frames", stream);
    retransmit_datagrams = f.allocate(scope, "retransmitted_datagrams", stream);
    retransmit_bytes = f.allocate(scope, "retransmitted_bytes", stream);
    receivers = f.allocate(scope, "receivers", stream);
    control_malformed = f.allocate(scope, "control_malformed", stream);
    control_bytes = f.allocate(scope, "control_bytes_received", stream);
    naks_unannounced = f.allocate(scope, "naks_unannounced", stream);
    nak_ranges_capped = f.allocate(scope, "nak_ranges_capped", stream);
    repairs_rate_limited = f.allocate(scope, "repairs_rate_limited", stream);
    repair_bytes_refused = f.allocate(scope, "repair_bytes_refused", stream);
  }

  // No-op when allocate() was never called (a transport opened without a counters file).
  void publish(const ReliableSender& sender) noexcept {
    if (!datagrams.valid()) return;
    const SenderStats& s = sender.stats();
    datagrams.set(s.datagrams);
    bytes.set(s.bytes);
    heartbeats.set(s.heartbeats);
    naks.set(s.naks);
    nak_ranges.set(s.nak_ranges);
    naks_suppressed.set(s.naks_suppressed);
    naks_unavailable.set(s.naks_unavailable);
    retransmit_frames.set(s.retransmit_frames);
    retransmit_datagrams.set(s.retransmit_datagrams);
    retransmit_bytes.set(s.retransmit_bytes);
    receivers.set(sender.receivers());
    control_malformed.set(s.control_malformed);
    control_bytes.set(s.control_bytes);
    naks_unannounced.set(s.naks_unannounced);
    nak_ranges_capped.set(s.nak_ranges_capped);
    repairs_rate_limited.set(s.repairs_rate_limited);
    repair_bytes_refused.set(s.repair_bytes_refused);
    position.set(sender.log().next());
  }
};

struct ReceiverCounters {
  core::Counter datagrams, frames, heartbeats, duplicates, beyond_window, fills, gaps, nak_ranges, naks, lost,
      loss_reports, sessions, sessions_ended, status_sent, malformed, other_stream, wrong_source, claims_refuted,
      ends_refuted, sessions_refused, sessions_timed_out, sessions_resumed, dead_forgotten, stale_session, evictions,
      fault_dropped, fault_duplicated, fault_reordered;

  void allocate(core::CountersFile& f, const std::string& scope, std::uint32_t stream) {
    datagrams = f.allocate(scope, "datagrams_received", stream);
    frames = f.allocate(scope, "frames_received", stream);
    heartbeats = f.allocate(scope, "heartbeats_received", stream);
    duplicates = f.allocate(scope, "duplicates_dropped", stream);
    beyond_window = f.allocate(scope, "beyond_window_dropped", stream);
    fills = f.allocate(scope, "gap_fills", stream);
    gaps = f.allocate(scope, "gaps_detected", stream);
    nak_ranges = f.allocate(scope, "nak_ranges_sent", stream);
    naks = f.allocate(scope, "naks_sent", stream);
    lost = f.allocate(scope, "messages_unrecoverable", stream);
    loss_reports = f.allocate(scope, "loss_reports", stream);
    sessions = f.allocate(scope, "sessions_started", stream);
    sessions_ended = f.allocate(scope, "sessions_ended", stream);
    status_sent = f.allocate(scope, "status_sent", stream);
    malformed = f.allocate(scope, "malformed", stream);
    other_stream = f.allocate(scope, "other_stream", stream);
    wrong_source = f.allocate(scope, "wrong_source", stream);
    claims_refuted = f.allocate(scope, "heartbeat_claims_refuted", stream);
    ends_refuted = f.allocate(scope, "ends_refuted", stream);
    sessions_refused = f.allocate(scope, "sessions_refused", stream);
    sessions_timed_out = f.allocate(scope, "sessions_timed_out", stream);
    sessions_resumed = f.allocate(scope, "sessions_resumed", stream);
    dead_forgotten = f.allocate(scope, "dead_sessions_forgotten", stream);
    stale_session = f.allocate(scope, "stale_sessions", stream);
    evictions = f.allocate(scope, "buffer_evictions", stream);
    fault_dropped = f.allocate(scope, "fault_dropped", stream);
    fault_duplicated = f.allocate(scope, "fault_duplicated", stream);
    fault_reordered = f.allocate(scope, "fault_reordered", stream);
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
    datagrams.set(s.datagrams);
    frames.set(w.frames);
    heartbeats.set(s.heartbeats);
    duplicates.set(w.duplicates);
    beyond_window.set(w.beyond);
    fills.set(w.fills);
    gaps.set(w.gaps_opened);
    nak_ranges.set(w.nak_ranges);
    naks.set(s.naks_sent);
    lost.set(w.lost);
    loss_reports.set(w.loss_reports);
    sessions.set(s.sessions_started);
    sessions_ended.set(s.sessions_ended);
    status_sent.set(s.status_sent);
    malformed.set(s.malformed + malformed_extra);
    other_stream.set(s.other_stream);
    wrong_source.set(s.wrong_source);
    claims_refuted.set(w.claims_refuted);
    ends_refuted.set(s.ends_refuted);
    sessions_refused.set(s.sessions_refused);
    sessions_timed_out.set(s.sessions_timed_out);
    sessions_resumed.set(s.sessions_resumed);
    dead_forgotten.set(s.dead_forgotten);
    stale_session.set(s.stale_session);
    evictions.set(evicted);
    fault_dropped.set(f.dropped);
    fault_duplicated.set(f.duplicated);
    fault_reordered.set(f.delayed);
  }
};

}  // namespace pollux::transport::reliability
