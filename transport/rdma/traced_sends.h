// The traced frames a publishing endpoint (RC or UD) has posted and not yet seen complete,
// oldest first (EndpointSpec::send_log non-null). Each traced frame's send is signalled, and
// the first send completion that covers it records (sequence, the completion's poll time) into
// the publisher's core::SendCompletionLog (Publisher::send_completion_ns). A traced frame posted
// while kMax are pending is signalled but not recorded: its send_completion_ns stays 0, "not
// known". Owner thread only; no allocation.
#pragma once

#include <array>
#include <cstdint>

#include "core/trace.h"

namespace pollux::transport::rdma {

class TracedSends {
 public:
  static constexpr std::uint32_t kMax = 16;

  explicit TracedSends(core::SendCompletionLog* log) noexcept : log_(log) {}

  // False when the publisher records nothing (no send log): traced frames are sent as any other.
  bool enabled() const noexcept { return log_ != nullptr; }
  // A traced frame of `sequence` went out in send number `index` (the endpoint's count of frames
  // or work requests: what its completions report as done).
  void add(std::uint64_t index, std::uint64_t sequence) noexcept {
    if (tail_ - head_ < kMax) ring_[tail_++ % kMax] = {index, sequence};
  }
  // Every send below `done` completed: records the traced ones among them at now() (called once
  // per frame recorded; CompletionGroup::batch_now reads the clock once per poll batch).
  template <class Now>
  void complete(std::uint64_t done, Now&& now) noexcept {
    while (head_ != tail_ && ring_[head_ % kMax].index < done) {
      log_->record(ring_[head_ % kMax].sequence, now());
      ++head_;
    }
  }
  // Close: the publisher (and its log) may go before the last completions come; what is pending
  // is not recorded.
  void drop() noexcept { head_ = tail_; }

 private:
  struct Entry {
    std::uint64_t index;
    std::uint64_t sequence;  // the frame's sequence (Message::sequence at the subscriber)
  };
  core::SendCompletionLog* const log_;
  std::array<Entry, kMax> ring_{};
  std::uint32_t head_ = 0, tail_ = 0;
};

}  // namespace pollux::transport::rdma
