#include "itch/generator.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string_view>

#include "absl/container/btree_set.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "itch/random.h"

namespace pollux::itch {
namespace {

constexpr uint64_t kSecond = 1'000'000'000ULL;
constexpr uint64_t kHour = 3600 * kSecond;
constexpr uint64_t kStartOfMessages = 3 * kHour;
constexpr uint64_t kStartOfSystem = 4 * kHour;
constexpr uint64_t kMarketOpen = 9 * kHour + 30 * 60 * kSecond;
constexpr uint64_t kMarketClose = 16 * kHour;
constexpr uint64_t kEndOfSystem = 20 * kHour;
constexpr uint32_t kCent = 100;  // prices have 4 implied decimals

// Action weights per 1024 for the non-add share of the flow; adds get their own
// probability, steered by how many orders are live (see Flow::step).
constexpr uint32_t kDelete = 560;
constexpr uint32_t kCancel = 130;
constexpr uint32_t kExecute = 140;
constexpr uint32_t kExecuteWithPrice = 20;
constexpr uint32_t kReplace = 120;
// The remainder (54/1024) are non-displayed trades (P).

struct LiveOrder {
  uint32_t price;
  uint32_t shares;
  uint32_t index;  // position in Flow::refs_
  uint16_t symbol;
  char side;
};

// Resting orders of one side of one symbol, best first, then by time (reference): the
// key is ~price for bids so that begin() is the best level on both sides.
using SideOrders = absl::btree_set<std::pair<uint32_t, uint64_t>>;

struct SymbolState {
  std::string name;
  uint32_t last;  // last reference price: where quoting restarts when a side is empty
  SideOrders bids;
  SideOrders asks;
};

// Separate stream for names so they depend only on (symbols, seed).
std::vector<std::string> make_names(uint32_t symbols, uint64_t seed) {
  Xoshiro256 rng(seed ^ 0x5eed5eed5eed5eedULL);
  absl::flat_hash_set<std::string> used;
  std::vector<std::string> names;
  names.reserve(symbols);
  while (names.size() < symbols) {
    std::string s(3 + rng.below(2), 'A');
    for (char& c : s) c = static_cast<char>('A' + rng.below(26));
    if (used.insert(s).second) names.push_back(std::move(s));
  }
  return names;
}

// A zero-intelligence order flow (in the spirit of Smith & Farmer's model): limit orders
// arrive a few ticks behind the opposite best price, so they never cross it; executions
// take the oldest order at the best price, so prices move when a best level is used up;
// cancels, deletes and replaces hit random live orders. Books stay uncrossed and the
// price random-walks through executions, like a real book's.
class Flow {
 public:
  Flow(const GeneratorOptions& o, std::vector<uint8_t>* out) : o_(o), rng_(o.seed), enc_(out, o.framing) {
    const std::vector<std::string> names = make_names(o.symbols, o.seed);
    symbols_.resize(o.symbols);
    for (size_t i = 0; i < names.size(); ++i) {
      symbols_[i].name = names[i];
      // $5 .. $300 in whole cents.
      symbols_[i].last = static_cast<uint32_t>(500 + rng_.below(29'500)) * kCent;
    }
    target_live_ = static_cast<uint64_t>(o.symbols) * o.orders_per_symbol;
    refs_.reserve(target_live_ * 2);
    orders_.reserve(target_live_ * 2);
  }

  void run() {
    const uint32_t n = o_.symbols;
    enc_.append_system_event(header(0, kStartOfMessages), 'O');
    for (uint32_t i = 0; i < n; ++i) {
      enc_.append_stock_directory(header(i + 1, kStartOfMessages + 1000 * (i + 1)), symbols_[i].name);
    }
    for (uint32_t i = 0; i < n; ++i) {
      enc_.append_stock_trading_action(header(i + 1, kStartOfMessages + kHour / 2 + 1000 * i), symbols_[i].name, 'T');
    }
    enc_.append_system_event(header(0, kStartOfSystem), 'S');
    enc_.append_system_event(header(0, kMarketOpen), 'Q');
    const uint64_t flow = o_.messages - min_messages(n);
    const uint64_t gap = std::max<uint64_t>(1, (kMarketClose - kMarketOpen) / std::max<uint64_t>(flow, 1));
    ts_ = kMarketOpen;
    for (uint64_t i = 0; i < flow; ++i) {
      ts_ += 1 + rng_.below(2 * gap - 1);
      step();
    }
    const uint64_t close = std::max(ts_ + 1, kMarketClose);
    enc_.append_system_event(header(0, close), 'M');
    enc_.append_system_event(header(0, std::max(close + 1, kEndOfSystem)), 'E');
    enc_.append_system_event(header(0, std::max(close + 2, kEndOfSystem + 5 * 60 * kSecond)), 'C');
  }

 private:
  static Header header(uint32_t locate, uint64_t ts) { return Header{static_cast<uint16_t>(locate), 0, ts}; }
  Header header(uint16_t symbol) const { return header(symbol + 1u, ts_); }

  static uint32_t key_of(char side, uint32_t price) { return side == 'B' ? ~price : price; }
  SideOrders& orders_of(uint16_t sym, char side) { return side == 'B' ? symbols_[sym].bids : symbols_[sym].asks; }
  static uint32_t best_price(const SideOrders& s, char side) {
    return side == 'B' ? ~s.begin()->first : s.begin()->first;
  }
  // Mid of the book, or the last reference price when a side is empty.
  uint32_t mid(uint16_t sym) {
    SymbolState& s = symbols_[sym];
    if (!s.bids.empty() && !s.asks.empty()) {
      s.last = (best_price(s.bids, 'B') + best_price(s.asks, 'S')) / 2;
    }
    return s.last;
  }

  // Busy symbols trade more: min of two uniform draws gives a linearly falling weight.
  uint16_t pick_symbol() { return static_cast<uint16_t>(std::min(rng_.below(o_.symbols), rng_.below(o_.symbols))); }

  // Geometric(1/2) number of extra ticks, capped, so most orders rest near the inside.
  uint32_t ticks() { return static_cast<uint32_t>(std::min(std::countr_zero(rng_.next()), 12)); }

  uint32_t lot() {
    if (rng_.chance(100)) return 1 + static_cast<uint32_t>(rng_.below(99));  // odd lot
    return 100 * (1 + ticks() + static_cast<uint32_t>(rng_.below(5)));
  }

  // A price for a new `side` order: 1..~15 ticks behind the opposite best (or the last
  // price), so it never crosses the book. Bids stop at one cent.
  uint32_t quote_price(uint16_t sym, char side) {
    SymbolState& s = symbols_[sym];
    const SideOrders& opposite = side == 'B' ? s.asks : s.bids;
    const uint32_t away = kCent * (1 + ticks() + static_cast<uint32_t>(rng_.below(3)));
    if (side == 'S') return (opposite.empty() ? s.last : best_price(opposite, 'B')) + away;
    const uint32_t ref = opposite.empty() ? s.last : best_price(opposite, 'S');
    return ref > away + kCent ? ref - away : kCent;
  }

  void step() {
    const uint64_t live = refs_.size();
    // ~395/1024 adds balance the deletes and full executions below; steer towards the
    // target so book depth neither drains nor piles up over a long stream.
    uint32_t add_chance = 395;
    if (live < target_live_) add_chance = 600;
    if (live > target_live_ + target_live_ / 2) add_chance = 250;
    if (live == 0 || rng_.chance(add_chance)) return add_order();
    const uint32_t r = static_cast<uint32_t>(rng_.below(1024));
    const uint64_t ref = refs_[rng_.below(live)];
    if (r < kDelete) return delete_order(ref);
    if (r < kDelete + kCancel) return cancel(ref);
    if (r < kDelete + kCancel + kExecute) return execute_best(ref, false);
    if (r < kDelete + kCancel + kExecute + kExecuteWithPrice) return execute_best(ref, true);
    if (r < kDelete + kCancel + kExecute + kExecuteWithPrice + kReplace) return replace(ref);
    return non_displayed_trade();
  }

  void add_order() {
    const uint16_t sym = pick_symbol();
    char side = rng_.chance(512) ? 'B' : 'S';
    // Near one cent there is no room below the asks: quote the other side.
    if (side == 'B' && quote_price(sym, 'B') <= kCent) side = 'S';
    const uint32_t price = quote_price(sym, side);
    const uint32_t shares = lot();
    const uint64_t ref = next_ref();
    const std::string& name = symbols_[sym].name;
    if (rng_.chance(31)) {
      enc_.append_add_order_mpid(header(sym), ref, side, shares, name, price, kMpids[rng_.below(std::size(kMpids))]);
    } else {
      enc_.append_add_order(header(sym), ref, side, shares, name, price);
    }
    insert(ref, LiveOrder{price, shares, 0, sym, side});
  }

  void delete_order(uint64_t ref) {
    enc_.append_order_delete(header(orders_[ref].symbol), ref);
    remove(ref);
  }

  // Partial only: a cancel of everything is sent as a delete, as NASDAQ does.
  void cancel(uint64_t ref) {
    LiveOrder& o = orders_[ref];
    if (o.shares < 2) return delete_order(ref);
    const uint32_t n = 1 + static_cast<uint32_t>(rng_.below(o.shares - 1));
    enc_.append_order_cancel(header(o.symbol), ref, n);
    o.shares -= n;
  }

  // An aggressor takes the oldest order at the best price of the side `any` rests on.
  void execute_best(uint64_t any, bool with_price) {
    const LiveOrder& a = orders_[any];
    const uint64_t ref = orders_of(a.symbol, a.side).begin()->second;
    LiveOrder& o = orders_[ref];
    const uint32_t n = rng_.chance(512) ? o.shares : 1 + static_cast<uint32_t>(rng_.below(o.shares));
    if (with_price) {
      // Printed away from the displayed price (as in a cross): up to two ticks through.
      const uint32_t through = kCent * static_cast<uint32_t>(rng_.below(3));
      const uint32_t px = o.side == 'B' ? o.price - std::min(through, o.price - kCent) : o.price + through;
      enc_.append_order_executed_with_price(header(o.symbol), ref, n, ++match_, rng_.chance(900) ? 'Y' : 'N', px);
    } else {
      enc_.append_order_executed(header(o.symbol), ref, n, ++match_);
    }
    symbols_[o.symbol].last = o.price;
    o.shares -= n;
    if (o.shares == 0) remove(ref);
  }

  // New reference, new size, and a price up to two ticks away that still does not cross.
  void replace(uint64_t ref) {
    const LiveOrder o = orders_[ref];
    const uint64_t new_ref = next_ref();
    const uint32_t step = kCent * static_cast<uint32_t>(rng_.below(3));
    uint32_t px = rng_.chance(512) ? o.price + step : o.price - std::min(step, o.price - kCent);
    const SymbolState& s = symbols_[o.symbol];
    if (o.side == 'B' && !s.asks.empty()) px = std::min(px, best_price(s.asks, 'S') - kCent);
    if (o.side == 'S' && !s.bids.empty()) px = std::max(px, best_price(s.bids, 'B') + kCent);
    if (px < kCent) px = kCent;  // only reachable with asks at one cent: a lock, not a cross
    const uint32_t shares = lot();
    enc_.append_order_replace(header(o.symbol), ref, new_ref, shares, px);
    remove(ref);
    insert(new_ref, LiveOrder{px, shares, 0, o.symbol, o.side});
  }

  void non_displayed_trade() {
    const uint16_t sym = pick_symbol();
    const char side = rng_.chance(512) ? 'B' : 'S';
    enc_.append_trade(header(sym), 0, side, lot(), symbols_[sym].name, mid(sym), ++match_);
  }

  void insert(uint64_t ref, LiveOrder o) {
    o.index = static_cast<uint32_t>(refs_.size());
    refs_.push_back(ref);
    orders_of(o.symbol, o.side).insert({key_of(o.side, o.price), ref});
    orders_.emplace(ref, o);
  }

  void remove(uint64_t ref) {
    const auto it = orders_.find(ref);
    const LiveOrder o = it->second;
    orders_.erase(it);
    orders_of(o.symbol, o.side).erase({key_of(o.side, o.price), ref});
    const uint64_t moved = refs_.back();
    refs_[o.index] = moved;
    refs_.pop_back();
    if (moved != ref) orders_[moved].index = o.index;
  }

  uint64_t next_ref() {
    next_ref_ += 1 + rng_.below(4);
    return next_ref_;
  }

  static constexpr std::string_view kMpids[] = {"GSCO", "MSCO", "UBSS", "NITE", "VIRT"};

  const GeneratorOptions& o_;
  Xoshiro256 rng_;
  Encoder enc_;
  std::vector<SymbolState> symbols_;
  std::vector<uint64_t> refs_;  // live references, for uniform random picks
  absl::flat_hash_map<uint64_t, LiveOrder> orders_;
  uint64_t target_live_ = 0;
  uint64_t ts_ = 0;
  uint64_t next_ref_ = 1000;
  uint64_t match_ = 0;
};

}  // namespace

absl::Status validate_options(const GeneratorOptions& o) {
  if (o.symbols < 1 || o.symbols > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("itch generator: symbols must be 1..65535, got ", o.symbols));
  }
  if (o.messages < min_messages(o.symbols)) {
    return absl::InvalidArgumentError(absl::StrCat("itch generator: messages must be at least ",
                                                   min_messages(o.symbols), " for ", o.symbols,
                                                   " symbols (S x 6 + R and H per symbol), got ", o.messages));
  }
  if (o.orders_per_symbol < 1) {
    return absl::InvalidArgumentError("itch generator: orders_per_symbol must be >= 1");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<uint8_t>> generate_itch(const GeneratorOptions& options) {
  if (absl::Status s = validate_options(options); !s.ok()) return s;
  std::vector<uint8_t> out;
  out.reserve(options.messages * 34);
  Flow(options, &out).run();
  return out;
}

std::vector<std::string> generated_symbols(uint32_t symbols, uint64_t seed) { return make_names(symbols, seed); }

absl::Status write_binary_file(const std::string& path, std::span<const uint8_t> bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) {
    return absl::UnavailableError(absl::StrCat("itch: cannot create '", path, "': ", std::strerror(errno)));
  }
  // fwrite's buffer is declared non-null even for 0 bytes.
  const size_t written = bytes.empty() ? 0 : std::fwrite(bytes.data(), 1, bytes.size(), f);
  const int write_err = errno;
  if (std::fclose(f) != 0 || written != bytes.size()) {
    return absl::UnavailableError(
        absl::StrCat("itch: cannot write '", path, "': ", std::strerror(written != bytes.size() ? write_err : errno)));
  }
  return absl::OkStatus();
}

}  // namespace pollux::itch
