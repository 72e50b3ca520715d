// Open-addressing map from ITCH order reference to the resting order.
//
// Why not absl::flat_hash_map: this is the book's one lookup per order message, and a
// purpose-built table is simpler to reason about for the "no allocation, O(1) expected"
// contract: one flat array of 24-byte slots that hold the order itself (no second
// indirection), linear probing at load <= 1/2, and backward-shift deletion, so there are
// no tombstones and probe lengths do not degrade over a trading day of adds and deletes.
// Fibonacci hashing (multiply, keep the high bits) spreads NASDAQ's nearly sequential
// references evenly. The table only allocates when it grows past half full; reserve the
// expected peak of live orders up front and the steady state never allocates.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>

#include "itch/huge_buffer.h"

namespace pollux::itch {

// A resting order, stored in the map slot. `side` is 0 buy, 1 sell (see Side).
struct Order {
  uint64_t ref = 0;
  uint32_t price = 0;
  uint32_t shares = 0;
  uint16_t stock_locate = 0;
  uint8_t side = 0;
  uint8_t used = 0;  // slot occupied; a flag rather than a sentinel key, as 0 is a valid ref
};
static_assert(sizeof(Order) == 24);

class OrderMap {
 public:
  // Room for `expected` live orders before the first growth.
  explicit OrderMap(size_t expected = 1 << 16) { rehash(capacity_for(expected)); }

  OrderMap(OrderMap&&) noexcept = default;
  OrderMap& operator=(OrderMap&&) noexcept = default;

  // The live order with reference `ref`, or nullptr. Pointers stay valid until the next
  // Insert or Erase.
  [[nodiscard]] Order* find(uint64_t ref) noexcept {
    for (size_t i = home_slot(ref);; i = (i + 1) & mask_) {
      Order& s = slots()[i];
      if (!s.used) return nullptr;
      if (s.ref == ref) return &s;
    }
  }
  [[nodiscard]] const Order* find(uint64_t ref) const noexcept { return const_cast<OrderMap*>(this)->find(ref); }

  // The slot for `ref`: {slot, true} if it was inserted (fields other than ref and used are
  // zero), {existing, false} if `ref` is already live. Grows (allocates) only when the
  // table would pass half full.
  std::pair<Order*, bool> insert(uint64_t ref) {
    if ((size_ + 1) * 2 > capacity_) [[unlikely]]
      rehash(capacity_ * 2);
    for (size_t i = home_slot(ref);; i = (i + 1) & mask_) {
      Order& s = slots()[i];
      if (!s.used) {
        s = Order{};
        s.ref = ref;
        s.used = 1;
        ++size_;
        return {&s, true};
      }
      if (s.ref == ref) return {&s, false};
    }
  }

  // Removes the order `o` points at (from Find/Insert). Shifts later members of the probe
  // run back so lookups never need tombstones; other pointers into the map are invalidated.
  void erase(Order* o) noexcept {
    size_t hole = static_cast<size_t>(o - slots());
    for (size_t j = (hole + 1) & mask_;; j = (j + 1) & mask_) {
      Order& s = slots()[j];
      if (!s.used) break;
      const size_t home = home_slot(s.ref);
      // s may move into the hole only if its home is not inside (hole, j], cyclically.
      const bool stays = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
      if (!stays) {
        slots()[hole] = s;
        hole = j;
      }
    }
    slots()[hole].used = 0;
    --size_;
  }

  // Empties the map, keeping its capacity.
  void clear() noexcept {
    for (size_t i = 0; i < capacity_; ++i) slots()[i].used = 0;
    size_ = 0;
  }

  // Grows now so that `n` live orders fit without a later rehash.
  void reserve(size_t n) {
    if (capacity_for(n) > capacity_) rehash(capacity_for(n));
  }

  [[nodiscard]] size_t size() const noexcept { return size_; }
  [[nodiscard]] size_t capacity() const noexcept { return capacity_; }

  // Calls f(const Order&) for every live order, in slot order (not a hot path).
  template <class F>
  void for_each(F&& f) const {
    for (size_t i = 0; i < capacity_; ++i) {
      if (slots()[i].used) f(slots()[i]);
    }
  }

  // Starts loading the home slot of `ref` into the cache (no effect on the contents).
  void prefetch(uint64_t ref) const noexcept { __builtin_prefetch(&slots()[home_slot(ref)], 1, 3); }

 private:
  static size_t capacity_for(size_t n) {
    size_t c = 16;
    while (c < 2 * n) c *= 2;
    return c;
  }

  [[nodiscard]] Order* slots() const noexcept { return static_cast<Order*>(mem_.data()); }

  [[nodiscard]] size_t home_slot(uint64_t ref) const noexcept {
    return static_cast<size_t>((ref * 0x9e3779b97f4a7c15ULL) >> shift_);
  }

  // Out of line and cold, so Insert stays small enough to inline into the per-message code.
  [[gnu::noinline, gnu::cold]] void rehash(size_t capacity) {
    const HugeBuffer old_mem = std::move(mem_);
    const Order* old = static_cast<const Order*>(old_mem.data());
    const size_t old_capacity = capacity_;
    mem_ = HugeBuffer(capacity * sizeof(Order));  // zeros: every slot unused
    capacity_ = capacity;
    mask_ = capacity - 1;
    shift_ = 64 - static_cast<unsigned>(__builtin_ctzll(capacity));
    size_ = 0;
    for (size_t i = 0; i < old_capacity; ++i) {
      if (old[i].used) *insert(old[i].ref).first = old[i];
    }
  }

  HugeBuffer mem_;  // the slots; 2 MiB pages where the kernel allows (see huge_buffer.h)
  size_t capacity_ = 0;
  size_t mask_ = 0;
  unsigned shift_ = 64;
  size_t size_ = 0;
};

}  // namespace pollux::itch
