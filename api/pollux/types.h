// Result codes and the views handed to subscribers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "pollux/export.h"

namespace pollux {

// offer()/claim()/commit() return a position (>= 0) or one of these. Back-pressure is not an
// error: retry later (or drop, by your own policy).
inline constexpr std::int64_t kBackPressured = -1;    // transport or ring full
inline constexpr std::int64_t kNotConnected = -2;     // no subscriber can receive yet
inline constexpr std::int64_t kClosed = -3;           // publisher or context closed
inline constexpr std::int64_t kMessageTooLarge = -4;  // payload exceeds max_payload()

// Name of a result code, for logs ("back-pressured", ...). Positions map to "ok".
POLLUX_API std::string_view result_name(std::int64_t r);

// Stage timestamps of a traced message (nanoseconds on the publisher host's pollux::now_ns()
// clock, pollux/clock.h); 0 = the
// message did not pass that stage (e.g. inline mode has no ring hops). The indices are in the
// order they were added, not path order: kKernelRx (the kernel's software receive timestamp,
// UDP with udp.kernel_timestamps = true; 0 otherwise) lies between kPost and kReceive on the
// path. The local send completion is not here: the publisher learns it after the frame left
// (Publisher::send_completion_ns).
struct StageTimes {
  enum Stage { kOffer, kRingEnqueue, kPollerDequeue, kPost, kReceive, kRingToSubscriber, kDelivery, kKernelRx, kCount };
  std::int64_t ns[kCount];
  POLLUX_API static std::string_view name(int stage);
};

// A received message: a zero-copy view valid only during the handler call.
struct Message {
  std::span<const std::byte> payload;
  std::uint32_t stream_id;
  std::uint32_t session_id;  // publisher incarnation
  std::uint64_t sequence;    // per (stream, session), +1 per message, from 1
  // pollux::now_ns() of the publisher's host when the message was offered (pollux/clock.h:
  // CLOCK_MONOTONIC's time line, shared by every process of the host), so on the same host
  // `pollux::now_ns() - publisher_ns` is the latency; not comparable across hosts. 0 on a stream
  // with publisher_timestamp = false (traced messages still carry their offer stamp).
  std::int64_t publisher_ns;
  const StageTimes* trace;  // non-null for traced messages
};

enum class GapReason : std::uint16_t {
  kLapped = 0,     // the publisher overwrote messages before this subscriber read them
  kOverrun = 1,    // messages were overwritten while being delivered: the views just handed out may have been torn
  kLost = 2,       // lost on the network and not repairable
  kMalformed = 3,  // a corrupt frame was counted and dropped
};

// `count` messages starting at sequence `from` will never be delivered - except for kOverrun,
// where they WERE delivered but the publisher overwrote them while the handler ran, so those
// views may have been torn (lossy shm only; they are not counted in messages_lost()).
struct Gap {
  std::uint32_t stream_id;
  std::uint32_t session_id;
  std::uint64_t from;
  std::uint64_t count;
  GapReason reason;
};

enum class StreamEventKind : std::uint16_t {
  kEndOfStream = 0,       // publisher closed the stream
  kPublisherDied = 1,     // publisher vanished without closing
  kNewSession = 2,        // a (new) publisher started; sequences restart at its first message
  kSegmentTruncated = 3,  // shm: another process truncated the stream's segment; the stream ended
                          // (its unread messages are lost) and the publisher's next segment comes
                          // as kNewSession
};

struct StreamEvent {
  StreamEventKind kind;
  std::uint32_t stream_id;
  std::uint32_t session_id;
};

}  // namespace pollux
