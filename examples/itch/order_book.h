// Price-level (L2) book of one symbol.
//
// Design: each side is an array of levels sorted so that the best price is at the back
// (bids ascending, asks descending; internally asks use the key ~price so both sides share
// one ascending code path). The level an order message touches is found by a branch-free
// binary search; inserting or erasing a level moves only the levels better than it, which
// are few because market data concentrates near the inside.
//
// Cost per update: O(log n) to find the level plus O(d) to insert/erase one, where n is
// the number of levels on that side and d the touched level's distance from the inside.
// For ITCH flow both are small and bounded in practice (n ~ 10-30, d mostly < 5), which
// makes the expected cost O(1); top of book is O(1) and depth(k) is O(k). A dense price ladder would make
// the find O(1) too but needs a tick size and a price window per symbol, and re-centring
// when the price walks away; the sorted array needs neither and keeps the levels
// contiguous in cache. Arrays keep their capacity when levels go away, so a book that
// has seen its peak depth never allocates again.
//
// Storage: each side is a (pointer, size, capacity) array. The books of a BookSet take their
// arrays from the BookSet's LevelArena (blocks carved from 2 MiB-page chunks, recycled by
// size), so the levels of thousands of books sit in a few huge pages, side by side in locate
// order, instead of scattered over the heap on 4 KiB pages (one TLB miss per update at
// 8,000 symbols). A book made on its own (no arena) uses operator new.
//
// The book only aggregates levels; order identity (reference -> side/price/shares) lives
// in BookSet's OrderMap, because ITCH references are unique across all symbols.
// Crossed or locked books are kept exactly as the feed reports them: nothing is matched.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "itch/huge_buffer.h"

namespace pollux::itch {

// Blocks of power-of-two sizes (64 bytes and up) for level arrays, carved from HugeBuffer
// chunks and recycled through a free list per size; freed blocks are kept for reuse, never
// unmapped before the arena itself. Not thread-safe (one applier thread, like BookSet).
class LevelArena {
 public:
  LevelArena() = default;
  LevelArena(const LevelArena&) = delete;
  LevelArena& operator=(const LevelArena&) = delete;

  // A 64-byte aligned block of `bytes`, which must be a power of two >= 64. Maps a new chunk
  // (std::bad_alloc if that fails) only when no freed block of that size is left and the
  // current chunk is used up.
  void* allocate(size_t bytes);
  // Returns a block from allocate(bytes) for reuse.
  void deallocate(void* p, size_t bytes) noexcept;

  // Bytes mapped for chunks so far (a growth check for tests and reports).
  [[nodiscard]] size_t mapped_bytes() const noexcept { return mapped_; }

 private:
  static constexpr size_t kChunkBytes = size_t{4} << 20;
  static constexpr size_t kColorBytes = 64;
  static size_t size_class(size_t bytes) noexcept { return static_cast<size_t>(__builtin_ctzll(bytes)); }

  std::array<void*, 64> free_{};  // by log2(bytes): singly linked through the blocks' first word
  std::vector<HugeBuffer> chunks_;
  char* next_ = nullptr;
  char* end_ = nullptr;
  size_t mapped_ = 0;
};

enum class Side : uint8_t { kBuy = 0, kSell = 1 };

struct PriceLevel {
  uint32_t price = 0;   // raw ITCH price, 4 implied decimals
  uint32_t orders = 0;  // resting orders at this price
  uint64_t shares = 0;  // their total shares

  friend bool operator==(const PriceLevel&, const PriceLevel&) = default;
};

class alignas(64) OrderBook {
 public:
  // Levels reserved per side up front (256 bytes), so typical books never grow: the
  // generator's books hold 6 levels a side on average, 12 at most (8,000 symbols); a deeper
  // side doubles its array once per doubling of its depth. 64 (1 KB a side) measured 5% slower
  // at 8,000 symbols: 3.4x the memory for the same few hot lines.
  static constexpr size_t kDefaultLevelsPerSide = 16;

  // Level arrays for `levels_per_side` levels a side (rounded up to a power of two, at least
  // 4; 0 reserves nothing), from `arena` or, if null, from operator new. The arena must
  // outlive the book.
  explicit OrderBook(uint16_t stock_locate = 0, size_t levels_per_side = kDefaultLevelsPerSide,
                     LevelArena* arena = nullptr);
  ~OrderBook();
  OrderBook(const OrderBook& o);  // same arena, a copy of the levels
  OrderBook& operator=(const OrderBook& o);
  OrderBook(OrderBook&& o) noexcept;
  OrderBook& operator=(OrderBook&& o) noexcept;

  // A new order of `shares` at `price` joins its level (created if needed).
  void add(Side side, uint32_t price, uint32_t shares) noexcept;

  // `shares` leave the level at `price`; `order_gone` says the order left the book, which
  // drops the level's order count. A level with no orders left is removed. Returns false
  // (and changes nothing) if there is no level at `price`: the caller's order map and the
  // book disagree, which BookSet counts.
  bool reduce(Side side, uint32_t price, uint32_t shares, bool order_gone) noexcept;

  // Best level of a side, or nullopt if the side is empty.
  [[nodiscard]] std::optional<PriceLevel> best_bid() const noexcept;
  [[nodiscard]] std::optional<PriceLevel> best_ask() const noexcept;

  // Copies up to out.size() levels of `side`, best first; returns how many were copied.
  size_t depth(Side side, std::span<PriceLevel> out) const noexcept;
  // The best `n` levels of `side` (all of them by default), best first.
  [[nodiscard]] std::vector<PriceLevel> depth(Side side, size_t n = SIZE_MAX) const;

  [[nodiscard]] size_t levels(Side side) const noexcept { return side_levels(side).size; }
  [[nodiscard]] bool empty() const noexcept { return bids_.size == 0 && asks_.size == 0; }
  // Best bid >= best ask (locked or crossed), as the feed can report.
  [[nodiscard]] bool crossed() const noexcept;

  [[nodiscard]] uint16_t stock_locate() const noexcept { return stock_locate_; }
  // Trimmed symbol from the Stock Directory (or the first add), "" if not yet known.
  [[nodiscard]] std::string_view symbol() const noexcept { return {symbol_.data(), symbol_size_}; }
  // Stores the first 8 characters of `padded`, trimmed.
  void set_symbol(std::string_view padded) noexcept;

  // Removes every level, keeping capacity and the symbol.
  void clear() noexcept;

  // Starts loading the best levels of both sides (where most updates land) into the cache.
  void prefetch_top() const noexcept {
    if (bids_.size != 0) __builtin_prefetch(bids_.data + bids_.size - 1, 1, 3);
    if (asks_.size != 0) __builtin_prefetch(asks_.data + asks_.size - 1, 1, 3);
  }

 private:
  // key = price for bids, ~price for asks: ascending keys, best at the back, on both sides.
  struct Level {
    uint32_t key;
    uint32_t orders;
    uint64_t shares;
  };
  static_assert(sizeof(Level) == 16);
  // One side: levels [0, size) in ascending key order, best at size - 1.
  struct Levels {
    Level* data = nullptr;
    uint32_t size = 0;
    uint32_t capacity = 0;
  };

  static uint32_t key_of(Side side, uint32_t price) noexcept { return side == Side::kBuy ? price : ~price; }
  static uint32_t price_of(Side side, uint32_t key) noexcept { return side == Side::kBuy ? key : ~key; }
  [[nodiscard]] Levels& side_levels(Side side) noexcept { return side == Side::kBuy ? bids_ : asks_; }
  [[nodiscard]] const Levels& side_levels(Side side) const noexcept { return side == Side::kBuy ? bids_ : asks_; }
  // Index one past the last level whose key is <= key (where `key` is, or would go).
  static size_t upper_bound(const Levels& levels, uint32_t key) noexcept;
  // Inserts at `at`, growing the array (allocates) only past the deepest the side has been.
  void insert_level(Levels& levels, size_t at, Level level) noexcept;
  static void erase_level(Levels& levels, size_t at) noexcept;
  void reserve(Levels& levels, size_t capacity);
  void release(Levels& levels) noexcept;
  void copy_from(const OrderBook& o);

  // One cache line (alignas), so BookSet keeps every book in one contiguous array indexed
  // by locate and a book's hot fields never straddle two lines.
  Levels bids_;
  Levels asks_;
  LevelArena* arena_ = nullptr;
  std::array<char, 8> symbol_{};
  uint8_t symbol_size_ = 0;
  uint16_t stock_locate_;
};

// The update path is inline so BookSet's per-message code compiles into one function.

inline size_t OrderBook::upper_bound(const Levels& levels, uint32_t key) noexcept {
  // Branch-free binary search: how deep an update lands is random, so a scan that exits
  // early (or a search that branches on the comparison) mispredicts on most messages.
  // The loop count depends only on the side's size, which the predictor learns.
  const Level* base = levels.data;
  size_t len = levels.size;
  if (len == 0) return 0;
  while (len > 1) {
    const size_t half = len / 2;
    base = base[half].key <= key ? base + half : base;
    len -= half;
  }
  return static_cast<size_t>(base - levels.data) + (base->key <= key);
}

inline void OrderBook::erase_level(Levels& levels, size_t at) noexcept {
  Level* d = levels.data;
  for (size_t i = at + 1; i < levels.size; ++i) d[i - 1] = d[i];  // the few better levels
  --levels.size;
}

inline void OrderBook::add(Side side, uint32_t price, uint32_t shares) noexcept {
  Levels& levels = side_levels(side);
  const uint32_t key = key_of(side, price);
  const size_t i = upper_bound(levels, key);
  if (i > 0 && levels.data[i - 1].key == key) {
    Level& l = levels.data[i - 1];
    ++l.orders;
    l.shares += shares;
    return;
  }
  insert_level(levels, i, Level{key, 1, shares});
}

inline bool OrderBook::reduce(Side side, uint32_t price, uint32_t shares, bool order_gone) noexcept {
  Levels& levels = side_levels(side);
  const uint32_t key = key_of(side, price);
  const size_t i = upper_bound(levels, key);
  if (i == 0 || levels.data[i - 1].key != key) [[unlikely]]
    return false;
  Level& l = levels.data[i - 1];
  l.shares -= shares < l.shares ? shares : l.shares;
  l.orders -= order_gone;
  if (l.orders == 0) erase_level(levels, i - 1);
  return true;
}

}  // namespace pollux::itch
