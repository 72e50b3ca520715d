// Subscriber: one application thread's handle on one stream (topic).
//
// poll() hands out zero-copy views (Message) valid only during the handler call, plus gap
// notifications (Gap) and stream events (StreamEvent). Used by one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string_view>
#include <type_traits>
#include <utility>

#include "pollux/export.h"
#include "pollux/types.h"

namespace pollux {

class LateJoinSubscriber;

namespace detail {
class SubscriberImpl;

// Type-erased handler set: one indirect call per delivered message, always to the same
// target (perfectly predicted); no allocation, no std::function.
struct Handlers {
  void* ctx;
  void (*on_message)(void*, const Message&);
  void (*on_gap)(void*, const Gap&);
  void (*on_event)(void*, const StreamEvent&);
  // on_message for a plain frame a transport hands over in place (inline threading's direct
  // path): the Message is made here, in the caller's code, so the frame goes from the
  // transport's buffer to the handler through this one call.
  void (*on_frame)(void*, const void* frame, std::uint32_t length);
};

// A plain frame's Message. Frames start with Pollux's 32-byte wire header (docs/PROTOCOL.md):
// stream id, session id, sequence and publish time at bytes 8..31 - the Message's fields in the
// same order and widths, so one 24-byte copy - and the payload after it. The library checks
// the header's layout against its own definition at compile time.
inline constexpr std::uint32_t kWireHeaderBytes = 32;
static_assert(offsetof(Message, session_id) == offsetof(Message, stream_id) + 4 &&
              offsetof(Message, sequence) == offsetof(Message, stream_id) + 8 &&
              offsetof(Message, publisher_ns) == offsetof(Message, stream_id) + 16 &&
              std::is_trivially_copyable_v<Message>);
inline Message message_of_frame(const void* frame, std::uint32_t length) noexcept {
  const auto* p = static_cast<const std::byte*>(frame);
  Message m;
  m.payload = {p + kWireHeaderBytes, length - kWireHeaderBytes};
  std::memcpy(reinterpret_cast<std::byte*>(&m) + offsetof(Message, stream_id), p + 8, 24);
  m.trace = nullptr;
  return m;
}
}  // namespace detail

class POLLUX_API Subscriber {
 public:
  Subscriber() = default;
  Subscriber(Subscriber&&) noexcept;
  Subscriber& operator=(Subscriber&&) noexcept;
  ~Subscriber();

  // Delivers up to `limit` messages to on_message(const Message&). Gaps and stream events are
  // counted (and visible through gaps_reported()/events) but not delivered. Returns the number
  // of messages, gaps and events handled (0 = nothing to do).
  template <typename OnMessage>
  int poll(OnMessage&& on_message, int limit) {
    return poll(
        std::forward<OnMessage>(on_message), [](const Gap&) {}, [](const StreamEvent&) {}, limit);
  }
  template <typename OnMessage, typename OnGap>
  int poll(OnMessage&& on_message, OnGap&& on_gap, int limit) {
    return poll(
        std::forward<OnMessage>(on_message), std::forward<OnGap>(on_gap), [](const StreamEvent&) {}, limit);
  }
  template <typename OnMessage, typename OnGap, typename OnEvent>
  int poll(OnMessage&& on_message, OnGap&& on_gap, OnEvent&& on_event, int limit) {
    struct Ctx {
      std::remove_reference_t<OnMessage>* m;
      std::remove_reference_t<OnGap>* g;
      std::remove_reference_t<OnEvent>* e;
    } ctx{&on_message, &on_gap, &on_event};
    detail::Handlers h{&ctx, [](void* c, const Message& msg) { (*static_cast<Ctx*>(c)->m)(msg); },
                       [](void* c, const Gap& gap) { (*static_cast<Ctx*>(c)->g)(gap); },
                       [](void* c, const StreamEvent& ev) { (*static_cast<Ctx*>(c)->e)(ev); },
                       [](void* c, const void* f, std::uint32_t len) {
                         (*static_cast<Ctx*>(c)->m)(detail::message_of_frame(f, len));
                       }};
    return poll_impl(h, limit);
  }

  // Waiting instead of spinning (every threading mode). wait() blocks until poll() would
  // find something, or `timeout_us` passes (< 0: no limit); returns true when woken by
  // data (poll now), false on timeout. Spurious true returns are possible: poll, then wait
  // again. Dedicated/shared modes: sleeps on an eventfd the poller signals only while
  // someone waits. Inline mode: the calling thread arms the transport itself (UDP socket,
  // RDMA completion channel, shm futex) and sleeps on it.
  bool wait(std::int64_t timeout_us) noexcept;
  // For your own epoll/poll loop: arm(), then wait for notify_fd() to become readable, then
  // disarm() and poll(). arm() returns false when messages are already waiting (poll first,
  // nothing was armed). notify_fd() is -1 when this subscriber cannot be woken through a
  // file descriptor (inline mode on shm: use wait()).
  [[nodiscard]] bool arm() noexcept;
  void disarm() noexcept;
  int notify_fd() const noexcept;

  // True while a publisher is attached and the stream has not ended.
  bool is_connected() const noexcept;
  std::uint32_t stream_id() const noexcept;
  std::string_view topic() const noexcept;
  // Totals since creation.
  std::uint64_t messages_received() const noexcept;
  std::uint64_t messages_lost() const noexcept;  // sum of Gap::count, kOverrun excluded
  std::uint64_t gaps_reported() const noexcept;  // number of Gap notifications

  void close() noexcept;

  // A late joiner's (a [[streams]] `start` other than "live"): its state and counts; nullptr for
  // a subscriber of the live stream only. While it replays the recording there is no file
  // descriptor to wait on: wait() then sleeps at most 1 ms, arm() returns false, notify_fd() -1.
  const LateJoinSubscriber* late_join() const noexcept { return late_.get(); }

 private:
  friend class Context;
  explicit Subscriber(std::shared_ptr<detail::SubscriberImpl> impl);
  explicit Subscriber(std::unique_ptr<LateJoinSubscriber> late);
  int poll_impl(const detail::Handlers& h, int limit) noexcept;
  std::shared_ptr<detail::SubscriberImpl> impl_;
  std::unique_ptr<LateJoinSubscriber> late_;  // set instead of impl_ for a late joiner
};

}  // namespace pollux
