// Publisher: one application thread's handle on one stream (topic).
//
// A Publisher is used by one thread at a time (like Aeron's ExclusivePublication): its post path
// takes no lock. In dedicated/shared mode it owns an SPSC ring to its poller and a slice of the
// buffer pool; in inline mode offer() writes to the transport itself.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

#include "pollux/export.h"
#include "pollux/types.h"

namespace pollux {

namespace detail {
class PublisherImpl;
}

// A zero-copy reservation: fill buffer(), then Publisher::commit() (or abort()).
class Claim {
 public:
  std::span<std::byte> buffer() const noexcept { return {data_, size_}; }

 private:
  friend class detail::PublisherImpl;
  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
  std::byte* frame_ = nullptr;
  std::uint64_t position_ = 0;
  std::uint32_t frame_length_ = 0;
  std::uint32_t aligned_ = 0;
  std::uint32_t slot_ = 0;
  std::uint16_t flags_ = 0;
  bool active_ = false;
};

class POLLUX_API Publisher {
 public:
  Publisher() = default;
  Publisher(Publisher&&) noexcept;
  Publisher& operator=(Publisher&&) noexcept;
  ~Publisher();

  // Copies `payload` into a frame and publishes it. Returns the new position (>= 0) or
  // kBackPressured, kNotConnected, kClosed, kMessageTooLarge.
  [[nodiscard]] std::int64_t offer(std::span<const std::byte> payload) noexcept;
  [[nodiscard]] std::int64_t offer(const void* data, std::size_t len) noexcept {
    return offer(std::span<const std::byte>(static_cast<const std::byte*>(data), len));
  }

  // Offers several messages with one clock read (they share a timestamp) and, on shm, one
  // publication of the log tail: subscribers see the batch's messages together, once the call
  // returns, never a part of it. Returns how many were offered (fewer than msgs.size() when
  // back-pressured part-way), or an error code when none was.
  [[nodiscard]] std::int64_t offer_batch(std::span<const std::span<const std::byte>> msgs) noexcept;

  // Reserves `len` payload bytes in place (the shm log itself in inline mode, a pool slot
  // otherwise). Returns >= 0 with `claim` filled, or an error code. At most one claim may be
  // open at a time; it must be committed or aborted before the next offer/claim.
  [[nodiscard]] std::int64_t claim(std::size_t len, Claim& claim) noexcept;
  [[nodiscard]] std::int64_t commit(Claim& claim) noexcept;
  void abort(Claim& claim) noexcept;

  // Inline mode: runs this publisher's transport duties that do not come with a message -
  // reclaiming sent buffers, answering NAKs with repairs, heartbeats (UDP: subscribers declare a
  // publisher dead after udp.session_timeout_ms of silence), status from subscribers (which is
  // what makes is_connected() true), reaping subscribers whose process died (shm) - and, at
  // most every millisecond, the context's duty call for its subscribers no thread has polled
  // yet (see is_connected()). offer()/claim() do the transport's duties too, rate-limited, and
  // an offer refused with kNotConnected runs them at once (so a loop retrying offer()
  // reconnects); call service() whenever the thread has nothing to offer (like Aeron's agent
  // duty cycle). Cheap when there is nothing to do (a clock read; one recvmmsg per 250 us at
  // most). Same thread as offer().
  // Dedicated/shared modes: the poller does all of this; returns 0. Returns work done.
  int service() noexcept;

  // Traced streams (`trace = true`): when the transport learned that the traced message with
  // this sequence (Message::sequence at the subscriber) left this host, on pollux::now_ns() (the clock of
  // StageTimes): RDMA the send completion (its CQE polled; a traced send is always signalled),
  // UDP with udp.kernel_timestamps = true the kernel's software TX timestamp (SO_TIMESTAMPING,
  // taken by the driver as the packet goes out). 0 when not known (yet), not traced, older than
  // the latest 64 traced messages, UDP without the key, or on shm (the log write is the send). Any thread. Inline mode:
  // the timestamps are collected by this publisher's duties (offer(), service()).
  std::int64_t send_completion_ns(std::uint64_t sequence) const noexcept;

  // True when at least one subscriber can receive. A subscriber becomes known to its
  // publisher only when its own side runs: a dedicated/shared poller, or in inline mode the
  // thread that polls it - and, until that thread's first call (poll, wait, arm), the
  // service() of any publisher of its context, which runs the duties of such subscribers
  // (Aeron's agent invoker). So a thread that waits for is_connected() calling only service()
  // (or retrying offer()) connects, even when the other side's subscriber waits for it too.
  bool is_connected() const noexcept;
  bool is_closed() const noexcept;
  std::size_t max_payload() const noexcept;
  std::uint32_t stream_id() const noexcept;
  std::string_view topic() const noexcept;

  // Flushes what is queued for the poller (bounded wait) and releases the stream.
  void close() noexcept;

 private:
  friend class Context;
  explicit Publisher(std::shared_ptr<detail::PublisherImpl> impl);
  std::shared_ptr<detail::PublisherImpl> impl_;
  detail::PublisherImpl* p_ = nullptr;  // impl_.get(), cached for the hot path
};

}  // namespace pollux
