#include "itch/book_set.h"

#include <algorithm>
#include <numeric>

namespace pollux::itch {

uint64_t MessageCounts::total() const noexcept { return std::accumulate(n_.begin(), n_.end(), uint64_t{0}); }

BookSet::BookSet(const BookSetOptions& options)
    : arena_(std::make_unique<LevelArena>()),
      orders_(options.expected_orders),
      levels_per_side_(options.levels_per_side),
      orders_per_book_(options.orders_per_book) {
  books_.reserve(size_t{1} << 16);
  present_.reserve(size_t{1} << 16);
  for (uint32_t i = 1; i <= options.expected_symbols && i <= 65535; ++i) {
    book_for(static_cast<uint16_t>(i));
  }
}

OrderBook& BookSet::new_book(uint16_t stock_locate) noexcept {
  if (stock_locate >= books_.size()) {
    // Placeholders for skipped locates reserve no levels. No reallocation: see books_.
    books_.resize(stock_locate + 1u, OrderBook(0, 0));
    present_.resize(stock_locate + 1u, 0);
  }
  if (!present_[stock_locate]) {
    // First sight of a symbol: the only allocation outside growth of the map or a level.
    books_[stock_locate] = OrderBook(stock_locate, levels_per_side_, arena_.get());
    present_[stock_locate] = 1;
    ++books_present_;
    if (orders_per_book_ != 0) {
      // Grows (rehashes) at most once per doubling of the market; with the directory at the
      // start of the day, while the map is still nearly empty.
      orders_.reserve(std::min(BookSetOptions::kMaxDirectoryReserve, books_present_ * orders_per_book_ * 3 / 2));
    }
  }
  return books_[stock_locate];
}

void BookSet::add_to_book(uint16_t locate, uint64_t ref, char side, uint32_t shares, uint32_t price,
                          std::string_view stock) noexcept {
  if (side != 'B' && side != 'S') [[unlikely]] {
    ++stats_.bad_side;
    return;
  }
  auto [o, inserted] = orders_.insert(ref);
  if (!inserted) [[unlikely]] {
    ++stats_.duplicate_add;
    return;
  }
  const Side s = side == 'B' ? Side::kBuy : Side::kSell;
  o->price = price;
  o->shares = shares;
  o->stock_locate = locate;
  o->side = static_cast<uint8_t>(s);
  // `o` is not used past this point: a new book may grow (rehash) the order map.
  OrderBook& b = book_for(locate);
  // A symbol without a Stock Directory (a capture joined late) is named by its first add.
  if (b.symbol().empty()) [[unlikely]]
    b.set_symbol(stock);
  b.add(s, price, shares);
  ++stats_.adds;
}

void BookSet::take_shares(Order* o, uint32_t shares) noexcept {
  bool gone = shares >= o->shares;
  if (shares > o->shares) [[unlikely]] {
    ++stats_.overfill;
    shares = o->shares;
  }
  if (!books_[o->stock_locate].reduce(static_cast<Side>(o->side), o->price, shares, gone)) [[unlikely]] {
    ++stats_.level_mismatch;
  }
  if (gone) {
    orders_.erase(o);
  } else {
    o->shares -= shares;
  }
}

void BookSet::reduce(uint64_t ref, uint32_t shares, bool whole, uint64_t BookStats::*unknown,
                     uint64_t BookStats::*applied) noexcept {
  Order* o = orders_.find(ref);
  if (o == nullptr) [[unlikely]] {
    ++(stats_.*unknown);
    return;
  }
  take_shares(o, whole ? o->shares : shares);
  ++(stats_.*applied);
}

void BookSet::execute(uint64_t ref, uint32_t shares) noexcept {
  reduce(ref, shares, false, &BookStats::unknown_execute, &BookStats::executions);
}

void BookSet::cancel(uint64_t ref, uint32_t shares) noexcept {
  reduce(ref, shares, false, &BookStats::unknown_cancel, &BookStats::cancels);
}

void BookSet::delete_order(uint64_t ref) noexcept {
  reduce(ref, 0, true, &BookStats::unknown_delete, &BookStats::deletes);
}

void BookSet::replace(const OrderReplace& m) noexcept {
  Order* o = orders_.find(m.original_order_reference());
  if (o == nullptr) [[unlikely]] {
    ++stats_.unknown_replace;
    return;
  }
  const Order old = *o;
  const uint64_t new_ref = m.new_order_reference();
  if (new_ref != old.ref && orders_.find(new_ref) != nullptr) [[unlikely]] {
    // The new reference is taken: keep the book as it is rather than lose either order.
    ++stats_.duplicate_add;
    return;
  }
  take_shares(o, old.shares);  // invalidates o
  auto [n, inserted] = orders_.insert(new_ref);
  (void)inserted;  // checked above
  n->price = m.price();
  n->shares = m.shares();
  n->stock_locate = old.stock_locate;
  n->side = old.side;
  books_[old.stock_locate].add(static_cast<Side>(old.side), n->price, n->shares);
  ++stats_.replaces;
}

void BookSet::apply(MessageView m) noexcept { apply_one(m); }

void BookSet::apply_one(MessageView m) noexcept {
  counts_.add(m.type_byte());
  switch (m.type()) {
    case 'A': {
      const auto a = m.as<AddOrder>();
      add_to_book(a.stock_locate(), a.order_reference(), a.side(), a.shares(), a.price(), a.stock());
      break;
    }
    case 'F': {
      const auto a = m.as<AddOrderMpid>();
      add_to_book(a.stock_locate(), a.order_reference(), a.side(), a.shares(), a.price(), a.stock());
      break;
    }
    case 'E': {
      const auto e = m.as<OrderExecuted>();
      execute(e.order_reference(), e.executed_shares());
      break;
    }
    case 'C': {
      const auto e = m.as<OrderExecutedWithPrice>();
      execute(e.order_reference(), e.executed_shares());
      break;
    }
    case 'X': {
      const auto x = m.as<OrderCancel>();
      cancel(x.order_reference(), x.cancelled_shares());
      break;
    }
    case 'D':
      delete_order(m.as<OrderDelete>().order_reference());
      break;
    case 'U':
      replace(m.as<OrderReplace>());
      break;
    case 'P':
      ++stats_.trades;
      break;
    case 'R': {
      const auto r = m.as<StockDirectory>();
      book_for(r.stock_locate()).set_symbol(r.stock());
      break;
    }
    default:
      break;
  }
}

ParseResult BookSet::apply_all(std::span<const uint8_t> binary_file) noexcept {
  // A short software pipeline, so the cache misses of a large market (tens of MB of order
  // map and levels at thousands of symbols) overlap the work on the messages in between:
  // framed -> the order slot and the book object prefetched; kAhead / 2 messages later -> the
  // book's best levels (their address is in the book object, cached by then); kAhead
  // messages later -> applied, in order.
  // In a small market everything is cached and the pipeline only costs: 11% fewer messages/s
  // at 100 symbols (~7k live orders), 2.3x more at 1,000 and 8,000 (64k, 512k), medians of 5
  // same-run pairs of pollux-bench-itch (BENCHMARKS.md). Below ~16k live orders (~400 KB of slots) the plain
  // loop, re-checked every 4096 messages (a market fills up from empty in one buffer).
  constexpr size_t kPipelineMinOrders = 16384;
  bool pipelined = orders_.size() >= kPipelineMinOrders;
  uint32_t plain = 0;
  constexpr uint32_t kAhead = 8;
  constexpr size_t kInputAhead = 512;  // ~16 messages
  MessageView ring[kAhead];
  uint32_t head = 0, held = 0;
  // One inlined copy of the handlers below (apply_one), shared by both loops: no call, no
  // prologue per message.
  const ParseResult r = for_each_message(binary_file, [&](MessageView m) {
    if (!pipelined) {  // the ring is empty: switching is seamless
      if ((++plain & 4095) == 0) pipelined = orders_.size() >= kPipelineMinOrders;
      apply_one(m);
      return;
    }
    // The input a few hundred bytes ahead: a subscriber's chunk was just written by the
    // publisher's core, and lines that come from another core's cache are slow to stream.
    __builtin_prefetch(m.data() + kInputAhead, 0, 3);
    switch (m.type()) {
      case 'A':
      case 'F':
      case 'E':
      case 'C':
      case 'X':
      case 'D':
      case 'U':
        orders_.prefetch(load_be64(m.data() + 11));                  // every one of these holds a reference there
        __builtin_prefetch(books_.data() + m.stock_locate(), 0, 3);  // reserved: a valid address
        break;
      default:
        break;
    }
    if (held >= kAhead / 2) {
      // A placeholder book (a locate never named) has empty sides: no present_ check needed.
      const uint16_t locate = ring[(head + kAhead - kAhead / 2) % kAhead].stock_locate();
      if (locate < books_.size()) books_[locate].prefetch_top();
    }
    const MessageView due = ring[head];
    ring[head] = m;
    head = (head + 1) % kAhead;
    if (held < kAhead) {
      ++held;
      return;
    }
    apply_one(due);
  });
  for (uint32_t i = 0; i < held; ++i) apply(ring[(head + kAhead - held + i) % kAhead]);
  return r;
}

BookStats& BookStats::operator+=(const BookStats& o) noexcept {
  adds += o.adds;
  executions += o.executions;
  cancels += o.cancels;
  deletes += o.deletes;
  replaces += o.replaces;
  trades += o.trades;
  unknown_execute += o.unknown_execute;
  unknown_cancel += o.unknown_cancel;
  unknown_delete += o.unknown_delete;
  unknown_replace += o.unknown_replace;
  duplicate_add += o.duplicate_add;
  overfill += o.overfill;
  bad_side += o.bad_side;
  level_mismatch += o.level_mismatch;
  partition_conflicts += o.partition_conflicts;
  return *this;
}
static_assert(sizeof(BookStats) == 15 * sizeof(uint64_t), "BookStats::operator+= adds every field");

void BookSet::absorb(std::unique_ptr<BookSet> other) {
  if (other == nullptr || other.get() == this) return;
  BookSet& o = *other;
  for (size_t l = 0; l < o.books_.size(); ++l) {
    if (!o.present_[l]) continue;
    const auto locate = static_cast<uint16_t>(l);
    if (l < books_.size() && present_[l]) {
      ++stats_.partition_conflicts;
      continue;
    }
    if (l >= books_.size()) {
      books_.resize(l + 1, OrderBook(0, 0));  // no reallocation: see books_
      present_.resize(l + 1, 0);
    }
    books_[locate] = std::move(o.books_[locate]);  // its levels stay in o's arena, kept below
    present_[locate] = 1;
    o.present_[locate] = 0;
    ++books_present_;
  }
  orders_.reserve(orders_.size() + o.orders_.size());
  o.orders_.for_each([&](const Order& order) {
    auto [slot, inserted] = orders_.insert(order.ref);
    if (!inserted) {
      ++stats_.partition_conflicts;
      return;
    }
    *slot = order;
  });
  o.orders_ = OrderMap(1);  // its memory back now
  counts_.add(o.counts_);
  stats_ += o.stats_;
  absorbed_.push_back(std::move(other));
}

void BookSet::clear() noexcept {
  orders_.clear();
  for (OrderBook& b : books_) b.clear();
  counts_.clear();
  stats_ = BookStats{};
}

}  // namespace pollux::itch
