#include "itch/order_book.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <new>

#include "itch/messages.h"

namespace pollux::itch {

static_assert(sizeof(OrderBook) == 64, "BookSet packs books by locate; keep them one line");

void* LevelArena::allocate(size_t bytes) {
  const size_t c = size_class(bytes);
  if (void* p = free_[c]) {
    free_[c] = *static_cast<void**>(p);
    return p;
  }
  if (static_cast<size_t>(end_ - next_) < bytes + kColorBytes) {
    // The rest of the current chunk is left unused (less than one block of this size).
    chunks_.emplace_back(std::max(kChunkBytes, bytes));
    next_ = static_cast<char*>(chunks_.back().data());
    end_ = next_ + chunks_.back().size();
    mapped_ += chunks_.back().size();
  }
  void* p = next_;
  // One line between blocks: a run of equal power-of-two blocks would otherwise put the same
  // offset of every block (where the best levels are) in the same few cache sets.
  next_ += bytes + kColorBytes;
  return p;
}

void LevelArena::deallocate(void* p, size_t bytes) noexcept {
  const size_t c = size_class(bytes);
  *static_cast<void**>(p) = free_[c];
  free_[c] = p;
}

OrderBook::OrderBook(uint16_t stock_locate, size_t levels_per_side, LevelArena* arena)
    : arena_(arena), stock_locate_(stock_locate) {
  if (levels_per_side != 0) {
    reserve(bids_, levels_per_side);
    reserve(asks_, levels_per_side);
  }
}

OrderBook::~OrderBook() {
  release(bids_);
  release(asks_);
}

OrderBook::OrderBook(const OrderBook& o)
    : arena_(o.arena_), symbol_(o.symbol_), symbol_size_(o.symbol_size_), stock_locate_(o.stock_locate_) {
  copy_from(o);
}

OrderBook& OrderBook::operator=(const OrderBook& o) {
  if (this != &o) {
    release(bids_);
    release(asks_);
    arena_ = o.arena_;
    symbol_ = o.symbol_;
    symbol_size_ = o.symbol_size_;
    stock_locate_ = o.stock_locate_;
    copy_from(o);
  }
  return *this;
}

OrderBook::OrderBook(OrderBook&& o) noexcept
    : bids_(std::exchange(o.bids_, {})),
      asks_(std::exchange(o.asks_, {})),
      arena_(o.arena_),
      symbol_(o.symbol_),
      symbol_size_(o.symbol_size_),
      stock_locate_(o.stock_locate_) {}

OrderBook& OrderBook::operator=(OrderBook&& o) noexcept {
  if (this != &o) {
    release(bids_);
    release(asks_);
    bids_ = std::exchange(o.bids_, {});
    asks_ = std::exchange(o.asks_, {});
    arena_ = o.arena_;
    symbol_ = o.symbol_;
    symbol_size_ = o.symbol_size_;
    stock_locate_ = o.stock_locate_;
  }
  return *this;
}

void OrderBook::copy_from(const OrderBook& o) {
  for (Side side : {Side::kBuy, Side::kSell}) {
    const Levels& from = o.side_levels(side);
    Levels& to = side_levels(side);
    if (from.capacity != 0) reserve(to, from.capacity);
    if (from.size != 0) std::memcpy(to.data, from.data, from.size * sizeof(Level));
    to.size = from.size;
  }
}

void OrderBook::reserve(Levels& levels, size_t capacity) {
  // Power-of-two capacities (the arena's block sizes), at least 4 levels (one cache line).
  const size_t cap = std::bit_ceil(std::max<size_t>(capacity, 4));
  if (cap <= levels.capacity) return;
  const size_t bytes = cap * sizeof(Level);
  auto* data = static_cast<Level*>(arena_ != nullptr ? arena_->allocate(bytes) : ::operator new(bytes));
  if (levels.size != 0) std::memcpy(data, levels.data, levels.size * sizeof(Level));
  const uint32_t size = levels.size;
  release(levels);
  levels.data = data;
  levels.size = size;
  levels.capacity = static_cast<uint32_t>(cap);
}

void OrderBook::release(Levels& levels) noexcept {
  if (levels.data != nullptr) {
    if (arena_ != nullptr) {
      arena_->deallocate(levels.data, levels.capacity * sizeof(Level));
    } else {
      ::operator delete(levels.data);
    }
  }
  levels = {};
}

void OrderBook::insert_level(Levels& levels, size_t at, Level level) noexcept {
  // Allocates only when the side is deeper than it has ever been. Like std::vector's growth
  // (and the vectors this replaced), an allocation failure here ends the process.
  if (levels.size == levels.capacity) [[unlikely]]
    reserve(levels, size_t{levels.capacity} * 2);
  Level* d = levels.data;
  for (size_t i = levels.size; i > at; --i) d[i] = d[i - 1];  // the few better levels
  d[at] = level;
  ++levels.size;
}

void OrderBook::set_symbol(std::string_view padded) noexcept {
  const std::string_view s = trim_padding(padded.substr(0, symbol_.size()));
  std::copy(s.begin(), s.end(), symbol_.begin());
  symbol_size_ = static_cast<uint8_t>(s.size());
}

std::optional<PriceLevel> OrderBook::best_bid() const noexcept {
  if (bids_.size == 0) return std::nullopt;
  const Level& l = bids_.data[bids_.size - 1];
  return PriceLevel{price_of(Side::kBuy, l.key), l.orders, l.shares};
}

std::optional<PriceLevel> OrderBook::best_ask() const noexcept {
  if (asks_.size == 0) return std::nullopt;
  const Level& l = asks_.data[asks_.size - 1];
  return PriceLevel{price_of(Side::kSell, l.key), l.orders, l.shares};
}

size_t OrderBook::depth(Side side, std::span<PriceLevel> out) const noexcept {
  const Levels& levels = side_levels(side);
  const size_t n = std::min<size_t>(out.size(), levels.size);
  for (size_t k = 0; k < n; ++k) {
    const Level& l = levels.data[levels.size - 1 - k];
    out[k] = PriceLevel{price_of(side, l.key), l.orders, l.shares};
  }
  return n;
}

std::vector<PriceLevel> OrderBook::depth(Side side, size_t n) const {
  std::vector<PriceLevel> out(std::min<size_t>(n, side_levels(side).size));
  depth(side, std::span<PriceLevel>(out));
  return out;
}

bool OrderBook::crossed() const noexcept {
  if (bids_.size == 0 || asks_.size == 0) return false;
  return price_of(Side::kBuy, bids_.data[bids_.size - 1].key) >= price_of(Side::kSell, asks_.data[asks_.size - 1].key);
}

void OrderBook::clear() noexcept {
  bids_.size = 0;
  asks_.size = 0;
}

}  // namespace pollux::itch
