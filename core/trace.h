// Stage timestamps: a traced message carries the time at which it passed each stage of the
// publish and receive paths, so end-to-end latency can be reported as a sum of stages.
//
// The publisher-side stages travel in the frame (a StageTrace block right after the header,
// flagged kFlagTraced); receive-side stages are stamped into the subscriber's own copy of the
// block. When tracing is disabled for a stream the only cost is one predictable branch on a
// per-publisher boolean/counter.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string_view>

#include "core/frame.h"

namespace pollux::core {

enum class Stage : std::uint8_t {
  kOffer = 0,             // Publisher::offer()/commit() entered
  kRingEnqueue = 1,       // descriptor pushed to the application->poller ring
  kPollerDequeue = 2,     // poller popped it
  kPost = 3,              // handed to the transport (log write, sendmmsg, ibv_post_send)
  kReceive = 4,           // receiving side saw the frame (log read, recvmmsg, CQE)
  kRingToSubscriber = 5,  // poller pushed it to the subscriber ring (dedicated/shared modes)
  kDelivery = 6,          // handler invoked
  kCount = 7
};

inline constexpr std::array<std::string_view, 7> kStageNames = {
    "offer", "ring_enqueue", "poller_dequeue", "post", "receive", "ring_to_subscriber", "delivery"};

// 64 bytes on the wire: 7 stamps and one receiver-private word. A zero stamp means "stage not
// passed" (e.g. inline mode has no ring stages).
struct StageTrace {
  std::int64_t stamp_ns[7];
  // Receiver-private: the kernel's receive timestamp (UDP with udp.kernel_timestamps, converted
  // to Clock), written by the receiving transport into ITS OWN copy of the frame. Publishers
  // always send 0 and receivers ignore the wire value: a subscriber reads it only when the
  // transport marked the descriptor (transport::kRxFlagKernelRx in RxDesc::reserved), never
  // from a frame in shared memory another process wrote.
  std::int64_t kernel_rx_ns;
};
static_assert(sizeof(StageTrace) == 64 && sizeof(StageTrace) == kFrameTraceSize);

inline void stamp(StageTrace* t, Stage s, std::int64_t now_ns) { t->stamp_ns[static_cast<int>(s)] = now_ns; }

// Local send completions of a publisher's traced frames: when its transport learned the frame
// left (RDMA: the send CQE; UDP: the kernel's software TX timestamp, SO_TIMESTAMPING). They come
// after the frame was sent, so they cannot travel in it: the thread that drives the publisher's
// tx endpoint records them here (one writer) and the publisher's thread reads them
// (Publisher::send_completion_ns). The latest kEntries traced frames are kept, indexed by
// sequence; each entry is a seqlock (a reader racing the writer sees "unknown", never a torn
// pair). Lives in the publisher, fixed size, no allocation after construction.
class SendCompletionLog {
 public:
  static constexpr std::uint32_t kEntries = 64;

  // Writer (the endpoint's driving thread) only.
  void record(std::uint64_t sequence, std::int64_t ns) noexcept {
    Entry& e = e_[sequence % kEntries];
    const std::uint64_t v = e.version.load(std::memory_order_relaxed);
    e.version.store(v + 1, std::memory_order_relaxed);  // odd: being written
    // Orders the odd version before the payload stores; pairs with the reader's acquire
    // fence (a reader that saw a new payload sees the odd or a newer version on its re-check).
    std::atomic_thread_fence(std::memory_order_release);
    e.sequence.store(sequence, std::memory_order_relaxed);
    e.ns.store(ns, std::memory_order_relaxed);
    // Publishes the payload; pairs with the reader's first acquire load.
    e.version.store(v + 2, std::memory_order_release);
  }

  // Any thread: the completion time of `sequence`, or 0 if not (yet) known or already evicted.
  std::int64_t find(std::uint64_t sequence) const noexcept {
    const Entry& e = e_[sequence % kEntries];
    const std::uint64_t v1 = e.version.load(std::memory_order_acquire);  // pairs with the final store
    if (v1 & 1) return 0;
    const std::uint64_t s = e.sequence.load(std::memory_order_relaxed);
    const std::int64_t ns = e.ns.load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);  // pairs with the writer's release fence
    if (e.version.load(std::memory_order_relaxed) != v1 || s != sequence || v1 == 0) return 0;
    return ns;
  }

 private:
  struct Entry {
    std::atomic<std::uint64_t> version{0};
    std::atomic<std::uint64_t> sequence{0};
    std::atomic<std::int64_t> ns{0};
  };
  Entry e_[kEntries];
};

}  // namespace pollux::core
