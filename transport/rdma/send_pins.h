// Which bytes of a UD publisher's send log the NIC may still read. A send work request that is
// not inline reads its datagram from the log when the NIC processes it, after the post, until
// it completes; the log must not overwrite those bytes meanwhile (SenderLog::set_pinned). First
// transmissions read the newest bytes, but a repair reads old ones, so the lowest position
// still being read is not the oldest request's: this keeps the minimum over the requests in
// flight as a monotonic queue (the sliding-window minimum), O(1) amortised per request, with
// no allocation after init(). Completions are in order per QP, so "every request below k
// completed" is all a completion needs to say. Verbs-free (host unit tests); owner thread only.
#pragma once

#include <cstdint>
#include <memory>

namespace pollux::transport::rdma {

class SendPins {
 public:
  static constexpr std::uint64_t kNone = UINT64_MAX;

  // `in_flight`: the most requests posted and not completed at once (the send queue depth).
  void init(std::uint32_t in_flight) {
    std::uint32_t cap = 1;
    while (cap < in_flight + 1) cap <<= 1;
    ring_.reset(new Entry[cap]);
    mask_ = cap - 1;
    head_ = tail_ = 0;
  }

  // Request `k` (numbered in post order, strictly increasing) reads from history position `pos`.
  void post(std::uint64_t k, std::uint64_t pos) noexcept {
    // Requests posted before k that read at or above pos can never be the minimum again while k
    // is in flight (they complete first).
    while (tail_ != head_ && ring_[(tail_ - 1) & mask_].pos >= pos) --tail_;
    ring_[tail_++ & mask_] = Entry{k, pos};
  }

  // Every request below `k` completed.
  void complete(std::uint64_t k) noexcept {
    while (head_ != tail_ && ring_[head_ & mask_].k < k) ++head_;
  }

  // The lowest position a request in flight reads, kNone when none reads the log.
  std::uint64_t floor() const noexcept { return head_ == tail_ ? kNone : ring_[head_ & mask_].pos; }
  std::uint32_t size() const noexcept { return static_cast<std::uint32_t>(tail_ - head_); }

 private:
  struct Entry {
    std::uint64_t k, pos;
  };
  std::unique_ptr<Entry[]> ring_;
  std::uint64_t mask_ = 0, head_ = 0, tail_ = 0;
};

}  // namespace pollux::transport::rdma
