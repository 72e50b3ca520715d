#include "itch/order_book.h"

#include <algorithm>

#include "itch/messages.h"

namespace pollux::itch {

static_assert(sizeof(OrderBook) == 64, "BookSet packs books by locate; keep them one line");

OrderBook::OrderBook(uint16_t stock_locate, size_t levels_per_side)
    : stock_locate_(stock_locate) {
  bids_.reserve(levels_per_side);
  asks_.reserve(levels_per_side);
}

void OrderBook::set_symbol(std::string_view padded) noexcept {
  const std::string_view s = TrimPadding(padded.substr(0, symbol_.size()));
  std::copy(s.begin(), s.end(), symbol_.begin());
  symbol_size_ = static_cast<uint8_t>(s.size());
}

void OrderBook::InsertLevel(std::vector<Level>& levels, size_t at, Level level) noexcept {
  // Allocates only when the side is deeper than it has ever been.
  levels.insert(levels.begin() + static_cast<ptrdiff_t>(at), level);
}

std::optional<PriceLevel> OrderBook::best_bid() const noexcept {
  if (bids_.empty()) return std::nullopt;
  const Level& l = bids_.back();
  return PriceLevel{Price(Side::kBuy, l.key), l.orders, l.shares};
}

std::optional<PriceLevel> OrderBook::best_ask() const noexcept {
  if (asks_.empty()) return std::nullopt;
  const Level& l = asks_.back();
  return PriceLevel{Price(Side::kSell, l.key), l.orders, l.shares};
}

size_t OrderBook::Depth(Side side, std::span<PriceLevel> out) const noexcept {
  const std::vector<Level>& levels = Levels(side);
  const size_t n = std::min(out.size(), levels.size());
  for (size_t k = 0; k < n; ++k) {
    const Level& l = levels[levels.size() - 1 - k];
    out[k] = PriceLevel{Price(side, l.key), l.orders, l.shares};
  }
  return n;
}

std::vector<PriceLevel> OrderBook::Depth(Side side, size_t n) const {
  std::vector<PriceLevel> out(std::min(n, Levels(side).size()));
  Depth(side, std::span<PriceLevel>(out));
  return out;
}

bool OrderBook::crossed() const noexcept {
  if (bids_.empty() || asks_.empty()) return false;
  return Price(Side::kBuy, bids_.back().key) >= Price(Side::kSell, asks_.back().key);
}

void OrderBook::Clear() noexcept {
  bids_.clear();
  asks_.clear();
}

}  // namespace pollux::itch
