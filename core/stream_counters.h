// The counters of one publication or subscription handle (scope "pub stream N topic" / "sub
// stream N topic", kind kPublisher / kSubscriber, one owner id per handle): declared once here,
// allocated by the API's handles and read by name by pollux-stat.
#pragma once

#include <cstdint>
#include <string_view>

#include "core/counter_set.h"
#include "core/counters.h"

namespace pollux::core {

// Both directions.
#define POLLUX_STREAM_COUNTERS(X)                                        \
  X(messages, "messages", "messages offered (publication) or delivered") \
  X(bytes, "bytes", "payload bytes of those messages")
// A publication. Back-pressure by cause (an offer returns kBackPressured once, counted once).
#define POLLUX_PUBLICATION_COUNTERS(X)                                                                              \
  X(bp_log_full, "back_pressure_log_full", "shm direct: the log has no room before the slowest subscriber")         \
  X(bp_ring_full, "back_pressure_ring_full", "queued: the ring to the poller is full (poller or transport behind)") \
  X(bp_no_slot, "back_pressure_no_slot", "every pool slot of this publisher is still in flight")                    \
  X(bp_transport, "back_pressure_transport", "inline post: the transport refused the frame (window, socket)")       \
  X(not_connected, "not_connected", "offers refused: no subscriber connected")                                      \
  X(too_large, "too_large", "offers refused: larger than the stream's largest message")
// A subscription.
#define POLLUX_SUBSCRIPTION_COUNTERS(X)                                             \
  X(gaps, "gaps", "gaps in the stream reported to the handler")                     \
  X(lost, "messages_lost", "messages of those gaps")                                \
  X(overruns, "overruns", "times the subscriber was lapped by the publisher (shm)") \
  X(events, "stream_events", "stream events delivered (joins, ends, losses)")       \
  X(malformed, "malformed", "frames that failed validation (skipped)")
// A subscription on a transport without a shm log: the sequence of the next message expected
// (last delivered or skipped + 1), set once per poll chunk. A shm subscriber's position is its
// slot in the segment, which pollux-stat reads there.
#define POLLUX_SUBSCRIPTION_POSITION_COUNTERS(X) \
  X(position, "position", "the sequence of the next message expected (udp, rdma)")
#define POLLUX_STREAM_ALL_COUNTERS(X) \
  POLLUX_STREAM_COUNTERS(X)           \
  POLLUX_PUBLICATION_COUNTERS(X) POLLUX_SUBSCRIPTION_COUNTERS(X) POLLUX_SUBSCRIPTION_POSITION_COUNTERS(X)

// One handle's counters: the fields of the other direction stay unallocated (invalid).
struct StreamCounters {
  POLLUX_COUNTER_FIELDS(POLLUX_STREAM_ALL_COUNTERS)
  POLLUX_COUNTER_TABLE(POLLUX_STREAM_ALL_COUNTERS)
  POLLUX_COUNTER_NAMES(POLLUX_STREAM_ALL_COUNTERS)

  // Control path: a publication's counters, or a subscription's (`position`: the transport has
  // no shm log). Each handle gets an owner id of its own.
  static StreamCounters publication(CountersFile& f, std::string_view scope, std::uint32_t stream_id) {
    StreamCounters c;
    const std::uint16_t owner = f.new_owner();
    auto alloc = [&](std::string_view n) { return f.allocate(scope, n, stream_id, CounterKind::kPublisher, owner); };
    POLLUX_COUNTER_ALLOCATE(POLLUX_STREAM_COUNTERS, c, alloc);
    POLLUX_COUNTER_ALLOCATE(POLLUX_PUBLICATION_COUNTERS, c, alloc);
    return c;
  }
  static StreamCounters subscription(CountersFile& f, std::string_view scope, std::uint32_t stream_id, bool position) {
    StreamCounters c;
    const std::uint16_t owner = f.new_owner();
    auto alloc = [&](std::string_view n) { return f.allocate(scope, n, stream_id, CounterKind::kSubscriber, owner); };
    POLLUX_COUNTER_ALLOCATE(POLLUX_STREAM_COUNTERS, c, alloc);
    POLLUX_COUNTER_ALLOCATE(POLLUX_SUBSCRIPTION_COUNTERS, c, alloc);
    if (position) POLLUX_COUNTER_ALLOCATE(POLLUX_SUBSCRIPTION_POSITION_COUNTERS, c, alloc);
    return c;
  }
};
POLLUX_COUNTER_SET_CHECK(StreamCounters, POLLUX_STREAM_ALL_COUNTERS);

}  // namespace pollux::core
