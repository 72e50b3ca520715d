// Subscriber: one application thread's handle on one stream (topic).
//
// poll() hands out zero-copy views (Message) valid only during the handler call, plus gap
// notifications (Gap) and stream events (StreamEvent). Used by one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <type_traits>
#include <utility>

#include "pollux/export.h"
#include "pollux/types.h"

namespace pollux {

namespace detail {
class SubscriberImpl;

// Type-erased handler set: one indirect call per delivered message, always to the same
// target (perfectly predicted); no allocation, no std::function.
struct Handlers {
  void* ctx;
  void (*on_message)(void*, const Message&);
  void (*on_gap)(void*, const Gap&);
  void (*on_event)(void*, const StreamEvent&);
};
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
                       [](void* c, const StreamEvent& ev) { (*static_cast<Ctx*>(c)->e)(ev); }};
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

 private:
  friend class Context;
  explicit Subscriber(std::shared_ptr<detail::SubscriberImpl> impl);
  int poll_impl(const detail::Handlers& h, int limit) noexcept;
  std::shared_ptr<detail::SubscriberImpl> impl_;
};

}  // namespace pollux
