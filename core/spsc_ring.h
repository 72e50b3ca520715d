// Single-producer single-consumer rings that carry small descriptors (never payload copies)
// between an application thread and a poller.
//
// Two implementations with one interface:
//  - SpscRing: hand-written, power-of-two capacity, free-running indices masked on access,
//    producer and consumer state on separate 128-byte regions, and each side caches the other
//    side's index so it touches the shared line only when the ring looks full (producer) or
//    empty (consumer) - the DPDK/folly/rigtorp design.
//  - LockfreeRing: boost::lockfree::spsc_queue behind the same interface.
// bench/ring_bench.cc compares them; docs/BENCHMARKS.md records which one the hot path uses
// and why (core/ring.h names the choice).
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <type_traits>

#include <boost/lockfree/spsc_queue.hpp>

#include "core/cache.h"

namespace pollux::core {

template <typename T>
class SpscRing {
  static_assert(std::is_trivially_copyable_v<T>, "rings carry descriptors, not objects");

 public:
  // capacity is rounded up to a power of two.
  explicit SpscRing(std::uint32_t capacity) : mask_(round_up_pow2(capacity) - 1), slots_(new T[mask_ + 1]) {}
  SpscRing(const SpscRing&) = delete;
  SpscRing& operator=(const SpscRing&) = delete;

  std::uint32_t capacity() const noexcept { return mask_ + 1; }

  // Producer side ------------------------------------------------------------------------------
  [[nodiscard]] bool try_push(const T& v) noexcept { return push_burst(&v, 1) == 1; }

  // Pushes up to n items; returns how many were pushed (burst form).
  [[nodiscard]] std::uint32_t push_burst(const T* items, std::uint32_t n) noexcept {
    const std::uint64_t tail = prod_.tail.load(std::memory_order_relaxed);  // own index
    std::uint64_t free = capacity() - (tail - prod_.cached_head);
    if (free < n) {
      // Looks too full: refresh the consumer's index, so a burst that fits is never cut
      // short by a stale view (callers rely on it). Acquire pairs with the consumer's
      // release store of head in pop_burst(): slots it has released may be overwritten.
      prod_.cached_head = cons_.head.load(std::memory_order_acquire);
      free = capacity() - (tail - prod_.cached_head);
      if (free == 0) return 0;
      if (free < n) n = static_cast<std::uint32_t>(free);
    }
    for (std::uint32_t i = 0; i < n; ++i) slots_[(tail + i) & mask_] = items[i];
    // Release pairs with the consumer's acquire load of tail: the slots written above are
    // visible before the new tail is.
    prod_.tail.store(tail + n, std::memory_order_release);
    return n;
  }

  // Pushes all n items or none (bulk form).
  [[nodiscard]] bool push_bulk(const T* items, std::uint32_t n) noexcept {
    const std::uint64_t tail = prod_.tail.load(std::memory_order_relaxed);
    if (capacity() - (tail - prod_.cached_head) < n) {
      prod_.cached_head = cons_.head.load(std::memory_order_acquire);  // pairs as above
      if (capacity() - (tail - prod_.cached_head) < n) return false;
    }
    return push_burst(items, n) == n;
  }

  // Free slots as the producer sees them (exact or an underestimate). Producer only.
  std::uint32_t free_approx() noexcept {
    const std::uint64_t tail = prod_.tail.load(std::memory_order_relaxed);
    prod_.cached_head = cons_.head.load(std::memory_order_acquire);  // pairs with pop_burst's release
    return static_cast<std::uint32_t>(capacity() - (tail - prod_.cached_head));
  }

  // Consumer side ------------------------------------------------------------------------------
  [[nodiscard]] bool try_pop(T& out) noexcept { return pop_burst(&out, 1) == 1; }

  [[nodiscard]] std::uint32_t pop_burst(T* out, std::uint32_t n) noexcept {
    const std::uint64_t head = cons_.head.load(std::memory_order_relaxed);  // own index
    std::uint64_t avail = cons_.cached_tail - head;
    if (avail == 0) {
      // Looks empty: only now touch the producer's line (a burst may come back short: the
      // caller polls again). Acquire pairs with the producer's release store of tail in
      // push_burst().
      cons_.cached_tail = prod_.tail.load(std::memory_order_acquire);
      avail = cons_.cached_tail - head;
      if (avail == 0) return 0;
    }
    if (avail < n) n = static_cast<std::uint32_t>(avail);
    for (std::uint32_t i = 0; i < n; ++i) out[i] = slots_[(head + i) & mask_];
    // Release pairs with the producer's acquire load of head: we have finished reading these
    // slots before the producer may reuse them.
    cons_.head.store(head + n, std::memory_order_release);
    return n;
  }

  // Approximate, for either side (monitoring and idle decisions only).
  std::uint32_t size_approx() const noexcept {
    const std::uint64_t t = prod_.tail.load(std::memory_order_acquire);
    const std::uint64_t h = cons_.head.load(std::memory_order_acquire);
    return static_cast<std::uint32_t>(t - h);
  }
  bool empty_approx() const noexcept { return size_approx() == 0; }

 private:
  static std::uint32_t round_up_pow2(std::uint32_t v) {
    std::uint32_t c = 1;
    while (c < v) c <<= 1;
    return c < 2 ? 2 : c;
  }

  struct alignas(kFalseSharingRange) Producer {
    std::atomic<std::uint64_t> tail{0};
    std::uint64_t cached_head = 0;  // producer's private copy of cons_.head
  };
  struct alignas(kFalseSharingRange) Consumer {
    std::atomic<std::uint64_t> head{0};
    std::uint64_t cached_tail = 0;  // consumer's private copy of prod_.tail
  };

  alignas(kFalseSharingRange) const std::uint32_t mask_;
  std::unique_ptr<T[]> slots_;
  Producer prod_;
  Consumer cons_;
};

template <typename T>
class LockfreeRing {
  static_assert(std::is_trivially_copyable_v<T>);

 public:
  explicit LockfreeRing(std::uint32_t capacity) : cap_(capacity), q_(capacity) {}
  std::uint32_t capacity() const noexcept { return cap_; }
  [[nodiscard]] bool try_push(const T& v) noexcept { return q_.push(v); }
  [[nodiscard]] std::uint32_t push_burst(const T* items, std::uint32_t n) noexcept {
    return static_cast<std::uint32_t>(q_.push(items, n));
  }
  [[nodiscard]] bool push_bulk(const T* items, std::uint32_t n) noexcept {
    if (q_.write_available() < n) return false;
    return q_.push(items, n) == n;
  }
  [[nodiscard]] bool try_pop(T& out) noexcept { return q_.pop(out); }
  [[nodiscard]] std::uint32_t pop_burst(T* out, std::uint32_t n) noexcept {
    return static_cast<std::uint32_t>(q_.pop(out, n));
  }
  std::uint32_t free_approx() noexcept { return static_cast<std::uint32_t>(q_.write_available()); }
  // Consumer side only (boost's read_available() is a consumer operation).
  std::uint32_t size_approx() const noexcept { return static_cast<std::uint32_t>(q_.read_available()); }
  bool empty_approx() const noexcept { return size_approx() == 0; }

 private:
  std::uint32_t cap_;
  boost::lockfree::spsc_queue<T> q_;
};

}  // namespace pollux::core
