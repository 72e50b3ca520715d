// Order books for every symbol of a feed, driven by decoded ITCH messages.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "itch/messages.h"
#include "itch/order_book.h"
#include "itch/order_map.h"
#include "itch/reader.h"

namespace pollux::itch {

// Messages seen, by type byte.
class MessageCounts {
 public:
  void add(uint8_t type) noexcept { ++n_[type]; }
  [[nodiscard]] uint64_t operator[](char type) const noexcept { return n_[static_cast<uint8_t>(type)]; }
  [[nodiscard]] uint64_t total() const noexcept;
  void clear() noexcept { n_.fill(0); }
  void add(const MessageCounts& o) noexcept {
    for (size_t i = 0; i < n_.size(); ++i) n_[i] += o.n_[i];
  }

 private:
  std::array<uint64_t, 256> n_{};
};

// What BookSet did with the order messages it was given. Anomalies are counted, never
// fatal: a feed joined late, or a capture cut from the middle of a day (like NASDAQ's
// samples), legitimately names orders this process never saw added.
struct BookStats {
  uint64_t adds = 0;             // A and F applied
  uint64_t executions = 0;       // E and C applied
  uint64_t cancels = 0;          // X applied
  uint64_t deletes = 0;          // D applied
  uint64_t replaces = 0;         // U applied
  uint64_t trades = 0;           // P seen (non-displayed: the book does not change)
  uint64_t unknown_execute = 0;  // E/C for a reference that is not live
  uint64_t unknown_cancel = 0;   // X ...
  uint64_t unknown_delete = 0;   // D ...
  uint64_t unknown_replace = 0;  // U whose original reference is not live (new order dropped)
  uint64_t duplicate_add = 0;    // A/F/U whose new reference is already live (ignored)
  uint64_t overfill = 0;         // E/C/X for more shares than left (clamped, order removed)
  uint64_t bad_side = 0;         // A/F with a side other than 'B'/'S' (ignored)
  uint64_t level_mismatch = 0;   // order map and level book disagreed (a bug if non-zero)
  // absorb(): a book both partitions held (the other's was dropped), or a live order reference
  // both held (the other's was dropped). Zero when the input was partitioned by stock locate.
  uint64_t partition_conflicts = 0;

  BookStats& operator+=(const BookStats& o) noexcept;
  friend bool operator==(const BookStats&, const BookStats&) = default;
};

struct BookSetOptions {
  // Live orders the order map holds before it first grows (and allocates).
  size_t expected_orders = 1 << 16;
  // Books created up front for stock locates 1..expected_symbols.
  uint32_t expected_symbols = 0;
  size_t levels_per_side = OrderBook::kDefaultLevelsPerSide;
  // If non-zero, each new book (a Stock Directory, or a first add) makes sure the order map
  // has room for 1.5 x orders_per_book x books live orders (at most kMaxDirectoryReserve),
  // so a market announced by the start-of-day directory sizes the map before its order flow
  // and the map never rehashes a full market mid-stream. A subscriber that does not know
  // the universe in advance (a file replay) sets this to its estimate of live orders per symbol.
  size_t orders_per_book = 0;
  static constexpr size_t kMaxDirectoryReserve = size_t{1} << 22;
};

// Owns one OrderBook per stock locate and the day-wide order map, and applies any
// decoded message:
//   R        names the book of its locate (creating it);
//   A, F     add an order (F's attribution is ignored);
//   E, C     execute shares (C at its own price: the book still loses the resting shares);
//   X        cancels shares; D deletes the order;
//   U        deletes the original and adds the new reference, same side, new price/shares;
//   P        is counted (non-displayed liquidity never was in the book);
//   others   are counted only.
// Cost per order message: one OrderMap probe sequence plus the level update described in
// order_book.h, both O(1) expected; no allocation once the map and the books have seen
// their peak size (see BookSetOptions). Not thread-safe: one applier thread.
class BookSet {
 public:
  explicit BookSet(const BookSetOptions& options = {});

  // Applies one validated message (from the reader or decode_message).
  void apply(MessageView m) noexcept;

  // Frames and applies a whole BinaryFILE buffer. Stops at the first malformed record
  // (every message before it is applied) and returns the reader's result.
  ParseResult apply_all(std::span<const uint8_t> binary_file) noexcept;

  // The book of `stock_locate`, or nullptr if no R or add has named it. The pointer stays
  // valid for the BookSet's lifetime.
  [[nodiscard]] const OrderBook* book(uint16_t stock_locate) const noexcept {
    return stock_locate < books_.size() && present_[stock_locate] ? &books_[stock_locate] : nullptr;
  }
  // Calls f(const OrderBook&) for every book, in stock locate order.
  template <class F>
  void for_each_book(F&& f) const {
    for (size_t i = 0; i < books_.size(); ++i) {
      if (present_[i]) f(books_[i]);
    }
  }

  // The live order with reference `ref`, or nullptr.
  [[nodiscard]] const Order* order(uint64_t ref) const noexcept { return orders_.find(ref); }
  [[nodiscard]] size_t live_orders() const noexcept { return orders_.size(); }
  // Capacity of the order map (slots) and bytes mapped for level arrays: both only grow, and
  // only while the market is bigger or deeper than it has been (tests check steady state).
  [[nodiscard]] size_t order_capacity() const noexcept { return orders_.capacity(); }
  [[nodiscard]] size_t level_bytes_mapped() const noexcept { return arena_->mapped_bytes(); }

  [[nodiscard]] const MessageCounts& counts() const noexcept { return counts_; }
  [[nodiscard]] const BookStats& stats() const noexcept { return stats_; }

  // Takes over the books, live orders, counts and stats of `other`, which was fed a disjoint
  // set of stock locates (a partition of the feed by locate, applied on another thread); the
  // result is what one BookSet fed the whole feed would hold. Control path (allocates; walks
  // `other`'s order map). `other` is kept alive inside this set: the moved books' level arrays
  // stay in its arena. A locate or an order reference present on both sides (the partitions
  // were not disjoint) keeps this set's and is counted in stats().partition_conflicts.
  void absorb(std::unique_ptr<BookSet> other);

  // Forgets every order, level, count and stat, keeping books, names and capacity, so a
  // benchmark or a replay can start over without allocating.
  void clear() noexcept;

 private:
  // The book of `stock_locate`, created on first sight.
  OrderBook& book_for(uint16_t stock_locate) noexcept {
    if (stock_locate < books_.size() && present_[stock_locate]) [[likely]] {
      return books_[stock_locate];
    }
    return new_book(stock_locate);
  }
  OrderBook& new_book(uint16_t stock_locate) noexcept;
  // Apply's body, inlined into Apply and into ApplyAll's loop.
  [[gnu::always_inline]] inline void apply_one(MessageView m) noexcept;
  // The per-message handlers are forced inline so Apply is one function with one
  // prologue: that cut ~15% of the instructions per message (callgrind).
  [[gnu::always_inline]] inline void add_to_book(uint16_t locate, uint64_t ref, char side, uint32_t shares,
                                                 uint32_t price, std::string_view stock) noexcept;
  [[gnu::always_inline]] inline void execute(uint64_t ref, uint32_t shares) noexcept;
  [[gnu::always_inline]] inline void cancel(uint64_t ref, uint32_t shares) noexcept;
  [[gnu::always_inline]] inline void delete_order(uint64_t ref) noexcept;
  [[gnu::always_inline]] inline void replace(const OrderReplace& m) noexcept;
  // Takes `shares` (every share left when `whole`) off order `ref` and counts the message in
  // stats_.*applied; an order that is not live is counted in stats_.*unknown instead.
  [[gnu::always_inline]] inline void reduce(uint64_t ref, uint32_t shares, bool whole, uint64_t BookStats::*unknown,
                                            uint64_t BookStats::*applied) noexcept;
  // Takes `shares` off live order `o` (removing it when none are left).
  [[gnu::always_inline]] inline void take_shares(Order* o, uint32_t shares) noexcept;

  // Declared before books_, which return their level arrays to it when destroyed; behind a
  // pointer so the books' pointers to it survive a move of the BookSet.
  std::unique_ptr<LevelArena> arena_;
  // Sets taken over by absorb(), declared before books_ so they outlive the books that use
  // their arenas.
  std::vector<std::unique_ptr<BookSet>> absorbed_;
  OrderMap orders_;
  // Indexed by stock locate and contiguous (64 bytes a book), so the book objects of a
  // whole market stay cache-resident; capacity for every u16 locate is reserved up front
  // (address space only) so growing never moves a book.
  std::vector<OrderBook> books_;
  std::vector<uint8_t> present_;
  MessageCounts counts_;
  BookStats stats_;
  size_t levels_per_side_;
  size_t orders_per_book_;
  size_t books_present_ = 0;
};

}  // namespace pollux::itch
