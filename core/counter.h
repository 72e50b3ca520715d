// One counter value in shared memory (core/counters.h places them): a 64-bit word with a
// single writing thread, which updates it with a relaxed load + store (no locked instruction);
// readers load relaxed and may see a value a few updates old, never a torn one.
#pragma once

#include <atomic>
#include <cstdint>

namespace pollux::core {

class Counter {
 public:
  Counter() = default;
  explicit Counter(std::atomic<std::uint64_t>* v) : v_(v) {}
  // Single-writer increment: only the owning thread calls add()/set().
  void add(std::uint64_t n = 1) noexcept {
    v_->store(v_->load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
  void set(std::uint64_t n) noexcept { v_->store(n, std::memory_order_relaxed); }
  // For the rare counter written by several threads.
  void add_shared(std::uint64_t n = 1) noexcept { v_->fetch_add(n, std::memory_order_relaxed); }
  std::uint64_t get() const noexcept { return v_->load(std::memory_order_relaxed); }
  bool valid() const noexcept { return v_ != nullptr; }
  // The value's cell (for handing to code outside core, e.g. pollux::AppCounter).
  std::atomic<std::uint64_t>* cell() const noexcept { return v_; }

 private:
  std::atomic<std::uint64_t>* v_ = nullptr;
};

}  // namespace pollux::core
