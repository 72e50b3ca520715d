// The descriptor ring the hot path uses between application threads and pollers.
// Two implementations, chosen by rings.kind: "spsc" (core/spsc_ring.h: ours, the default)
// and "boost" (boost::lockfree::spsc_queue behind the same interface). bench/ring_bench.cc
// measures both; docs/BENCHMARKS.md has the figures behind the default. The choice is one
// predictable branch per burst call (the kind never changes after construction); both
// rings live in place, so there is no extra pointer hop.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "core/spsc_ring.h"

namespace pollux::core {

enum class RingKind : std::uint8_t { kSpsc, kBoost };
inline std::string_view ring_kind_name(RingKind k) { return k == RingKind::kSpsc ? "spsc" : "boost"; }

template <typename T>
class DescRing {
 public:
  explicit DescRing(std::uint32_t capacity, RingKind kind = RingKind::kSpsc) : kind_(kind) {
    if (kind == RingKind::kSpsc) {
      spsc_.emplace(capacity);
    } else {
      boost_.emplace(capacity);
    }
  }
  RingKind kind() const noexcept { return kind_; }
  std::uint32_t capacity() const noexcept { return spsc() ? spsc_->capacity() : boost_->capacity(); }
  [[nodiscard]] bool try_push(const T& v) noexcept { return spsc() ? spsc_->try_push(v) : boost_->try_push(v); }
  [[nodiscard]] std::uint32_t push_burst(const T* items, std::uint32_t n) noexcept {
    return spsc() ? spsc_->push_burst(items, n) : boost_->push_burst(items, n);
  }
  [[nodiscard]] bool try_pop(T& out) noexcept { return spsc() ? spsc_->try_pop(out) : boost_->try_pop(out); }
  [[nodiscard]] std::uint32_t pop_burst(T* out, std::uint32_t n) noexcept {
    return spsc() ? spsc_->pop_burst(out, n) : boost_->pop_burst(out, n);
  }
  // Producer side.
  std::uint32_t free_approx() noexcept { return spsc() ? spsc_->free_approx() : boost_->free_approx(); }
  // Consumer side.
  bool empty_approx() const noexcept { return spsc() ? spsc_->empty_approx() : boost_->empty_approx(); }

 private:
  bool spsc() const noexcept { return __builtin_expect(kind_ == RingKind::kSpsc, 1); }
  RingKind kind_;
  std::optional<SpscRing<T>> spsc_;
  std::optional<LockfreeRing<T>> boost_;
};

}  // namespace pollux::core
