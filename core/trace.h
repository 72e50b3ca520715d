// Stage timestamps: a traced message carries the time at which it passed each stage of the
// publish and receive paths, so end-to-end latency can be reported as a sum of stages.
//
// The publisher-side stages travel in the frame (a StageTrace block right after the header,
// flagged kFlagTraced); receive-side stages are stamped into the subscriber's own copy of the
// block. When tracing is disabled for a stream the only cost is one predictable branch on a
// per-publisher boolean/counter.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace pollux::core {

enum class Stage : std::uint8_t {
  kOffer = 0,          // Publisher::offer()/commit() entered
  kRingEnqueue = 1,    // descriptor pushed to the application->poller ring
  kPollerDequeue = 2,  // poller popped it
  kPost = 3,           // handed to the transport (log write, sendmmsg, ibv_post_send)
  kReceive = 4,        // receiving side saw the frame (log read, recvmmsg, CQE)
  kRingToSubscriber = 5,  // poller pushed it to the subscriber ring (dedicated/shared modes)
  kDelivery = 6,       // handler invoked
  kCount = 7
};

inline constexpr std::array<std::string_view, 7> kStageNames = {
    "offer", "ring_enqueue", "poller_dequeue", "post", "receive", "ring_to_subscriber", "delivery"};

// 64 bytes on the wire (7 stamps + a count of stamps set). A zero stamp means "stage not
// passed" (e.g. inline mode has no ring stages).
struct StageTrace {
  std::int64_t stamp_ns[7];
  std::int64_t reserved;
};
static_assert(sizeof(StageTrace) == 64);

inline void stamp(StageTrace* t, Stage s, std::int64_t now_ns) {
  t->stamp_ns[static_cast<int>(s)] = now_ns;
}

}  // namespace pollux::core
