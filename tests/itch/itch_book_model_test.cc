// The book's storage (HugeBuffer, LevelArena, OrderBook's arena-backed level arrays) and a
// differential test of BookSet against a simple reference model over a hostile random
// stream: unknown references, deletes of absent orders, duplicate adds, bad sides, price
// extremes, executions and cancels beyond the shares, replaces onto live references, locates
// from 0 to 65535; applied per message and through apply_all (whose prefetch pipeline only
// runs past 16k live orders, which the stream reaches).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "itch/book_set.h"
#include "itch/encoder.h"
#include "itch/huge_buffer.h"
#include "itch/order_book.h"
#include "itch/random.h"
#include "itch/reader.h"

namespace pollux::itch {
namespace {

using L = PriceLevel;

TEST(HugeBufferTest, ZeroedPageRoundedAndHugeAligned) {
  const HugeBuffer small(100);
  ASSERT_NE(small.data(), nullptr);
  EXPECT_EQ(small.size(), 4096u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(small.data()) % 4096, 0u);
  const HugeBuffer big((size_t{3} << 20) + 1);  // 3 MiB + 1: two huge pages
  EXPECT_EQ(big.size(), size_t{4} << 20);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(big.data()) % (size_t{2} << 20), 0u);
  const auto* p = static_cast<const unsigned char*>(big.data());
  for (size_t i = 0; i < big.size(); i += 4093) ASSERT_EQ(p[i], 0) << i;
  EXPECT_EQ(p[big.size() - 1], 0);

  HugeBuffer a(5000);
  static_cast<char*>(a.data())[4999] = 7;
  HugeBuffer b(std::move(a));
  EXPECT_EQ(a.data(), nullptr);  // NOLINT(bugprone-use-after-move): moved-from is empty
  EXPECT_EQ(a.size(), 0u);
  EXPECT_EQ(static_cast<char*>(b.data())[4999], 7);
  b = HugeBuffer();
  EXPECT_EQ(b.data(), nullptr);
  EXPECT_EQ(HugeBuffer(0).data(), nullptr);
}

TEST(LevelArenaTest, AlignedDisjointBlocksReusedBySize) {
  LevelArena arena;
  EXPECT_EQ(arena.mapped_bytes(), 0u);
  std::vector<std::pair<char*, size_t>> blocks;
  for (size_t bytes : {64, 128, 1024, 64, 4096, 256, 1024}) {
    auto* p = static_cast<char*>(arena.allocate(bytes));
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
    std::memset(p, static_cast<int>(blocks.size() + 1), bytes);
    blocks.emplace_back(p, bytes);
  }
  // Every block still holds what was written to it: none overlaps another.
  for (size_t i = 0; i < blocks.size(); ++i) {
    for (size_t k = 0; k < blocks[i].second; ++k) ASSERT_EQ(blocks[i].first[k], static_cast<char>(i + 1));
  }
  const size_t mapped = arena.mapped_bytes();
  EXPECT_GT(mapped, 0u);
  // A freed block comes back for the same size (last freed first), not for another size.
  arena.deallocate(blocks[2].first, 1024);
  arena.deallocate(blocks[6].first, 1024);
  EXPECT_EQ(arena.allocate(1024), blocks[6].first);
  EXPECT_EQ(arena.allocate(1024), blocks[2].first);
  arena.deallocate(blocks[0].first, 64);
  EXPECT_NE(arena.allocate(128), blocks[0].first);
  EXPECT_EQ(arena.mapped_bytes(), mapped);
  // A block larger than a chunk gets a chunk of its own.
  void* huge = arena.allocate(size_t{8} << 20);
  ASSERT_NE(huge, nullptr);
  static_cast<char*>(huge)[(size_t{8} << 20) - 1] = 1;
  EXPECT_GE(arena.mapped_bytes(), mapped + (size_t{8} << 20));
}

// The same sequence of level operations on books with and without an arena, starting from a
// tiny capacity so the arrays grow many times; copies and moves keep independent levels.
TEST(OrderBookStorageTest, ArenaAndHeapBooksAgreeThroughGrowthCopyAndMove) {
  LevelArena arena;
  OrderBook heap(7, 0), pooled(7, 0, &arena);
  std::map<uint32_t, std::pair<uint32_t, uint64_t>> model;  // bids only: price -> (orders, shares)
  Xoshiro256 rng(21);
  for (int i = 0; i < 20'000; ++i) {
    const uint32_t price = 1000 + static_cast<uint32_t>(rng.below(300));
    if (rng.below(100) < 60 || !model.contains(price)) {
      heap.add(Side::kBuy, price, 10);
      pooled.add(Side::kBuy, price, 10);
      auto& l = model[price];
      ++l.first;
      l.second += 10;
    } else {
      ASSERT_TRUE(heap.reduce(Side::kBuy, price, 10, true));
      ASSERT_TRUE(pooled.reduce(Side::kBuy, price, 10, true));
      auto& l = model[price];
      l.second -= 10;
      if (--l.first == 0) model.erase(price);
    }
  }
  std::vector<L> want;
  for (auto it = model.rbegin(); it != model.rend(); ++it)
    want.push_back({it->first, it->second.first, it->second.second});
  ASSERT_GT(want.size(), 200u);  // grew far past the first array
  EXPECT_EQ(heap.depth(Side::kBuy), want);
  EXPECT_EQ(pooled.depth(Side::kBuy), want);

  OrderBook copy = pooled;  // deep copy from the same arena
  pooled.add(Side::kBuy, 5, 1);
  EXPECT_EQ(copy.depth(Side::kBuy), want);
  EXPECT_EQ(pooled.levels(Side::kBuy), want.size() + 1);
  OrderBook moved = std::move(copy);
  EXPECT_EQ(moved.depth(Side::kBuy), want);
  EXPECT_TRUE(copy.empty());  // NOLINT(bugprone-use-after-move): moved-from is empty
  copy = heap;                // heap -> copy assignment takes the source's storage kind
  EXPECT_EQ(copy.depth(Side::kBuy), want);
  moved = std::move(copy);
  EXPECT_EQ(moved.depth(Side::kBuy), want);
  EXPECT_EQ(moved.stock_locate(), 7);
  moved.clear();
  EXPECT_TRUE(moved.empty());
  moved.add(Side::kSell, 99, 3);
  EXPECT_EQ(moved.depth(Side::kSell), (std::vector<L>{{99, 1, 3}}));
}

// ---- BookSet against a reference model ----

struct RefOrder {
  uint16_t locate;
  char side;
  uint32_t price;
  uint32_t shares;
};

// The documented semantics of BookSet (book_set.h), written the obvious way.
class Model {
 public:
  void Add(uint16_t locate, uint64_t ref, char side, uint32_t shares, uint32_t price) {
    if (side != 'B' && side != 'S') {
      ++stats.bad_side;
      return;
    }
    if (orders.contains(ref)) {
      ++stats.duplicate_add;
      return;
    }
    orders[ref] = {locate, side, price, shares};
    books.insert(locate);
    ++stats.adds;
  }
  // E, C, X: `unknown` is the counter for a reference that is not live.
  bool Take(uint64_t ref, uint32_t shares, uint64_t* unknown) {
    auto it = orders.find(ref);
    if (it == orders.end()) {
      ++*unknown;
      return false;
    }
    if (shares > it->second.shares) ++stats.overfill;
    if (shares >= it->second.shares) {
      orders.erase(it);
    } else {
      it->second.shares -= shares;
    }
    return true;
  }
  void Delete(uint64_t ref) {
    if (orders.erase(ref) == 0) {
      ++stats.unknown_delete;
    } else {
      ++stats.deletes;
    }
  }
  void Replace(uint64_t ref, uint64_t new_ref, uint32_t shares, uint32_t price) {
    auto it = orders.find(ref);
    if (it == orders.end()) {
      ++stats.unknown_replace;
      return;
    }
    if (new_ref != ref && orders.contains(new_ref)) {
      ++stats.duplicate_add;
      return;
    }
    RefOrder o = it->second;
    orders.erase(it);
    o.price = price;
    o.shares = shares;
    orders[new_ref] = o;
    ++stats.replaces;
  }
  // (locate, side) -> levels best first.
  std::map<std::pair<uint16_t, int>, std::vector<L>> Levels() const {
    std::map<std::tuple<uint16_t, int, uint32_t>, std::pair<uint32_t, uint64_t>> agg;
    for (const auto& [ref, o] : orders) {
      auto& l = agg[{o.locate, o.side == 'B' ? 0 : 1, o.price}];
      ++l.first;
      l.second += o.shares;
    }
    std::map<std::pair<uint16_t, int>, std::vector<L>> out;
    for (const auto& [k, l] : agg) out[{std::get<0>(k), std::get<1>(k)}].push_back({std::get<2>(k), l.first, l.second});
    for (auto& [k, v] : out) {
      if (k.second == 0) std::reverse(v.begin(), v.end());  // bids: highest first
    }
    return out;
  }

  std::map<uint64_t, RefOrder> orders;
  std::set<uint16_t> books;
  BookStats stats;
};

// A hostile stream: mostly plausible flow over a few hundred locates, with every anomaly the
// book must count and survive mixed in.
std::vector<uint8_t> HostileStream(uint64_t seed, int messages, Model* model) {
  std::vector<uint8_t> out;
  Encoder enc(&out, Framing::kLengthPrefix);
  Xoshiro256 rng(seed);
  std::vector<uint64_t> live;  // references the model has live (lazily pruned)
  uint64_t next_ref = 1;
  uint64_t ts = 1;
  const auto locate = [&]() -> uint16_t {
    const uint64_t r = rng.below(100);
    if (r == 0) return 0;
    if (r == 1) return 65535;
    if (r == 2) return static_cast<uint16_t>(rng.below(65536));
    return static_cast<uint16_t>(1 + rng.below(300));
  };
  const auto price = [&]() -> uint32_t {
    switch (rng.below(50)) {
      case 0:
        return 0;
      case 1:
        return 1;
      case 2:
        return 0xFFFFFFFFu;
      case 3:
        return 0x80000000u;
      case 4:
        return 0x7FFFFFFFu;
      default:
        return 100'0000 + static_cast<uint32_t>(rng.below(40)) * 100;
    }
  };
  const auto shares = [&]() -> uint32_t {
    switch (rng.below(40)) {
      case 0:
        return 0;
      case 1:
        return 0xFFFFFFFFu;
      default:
        return 1 + static_cast<uint32_t>(rng.below(1000));
    }
  };
  // A live reference (pruning dead ones), an unknown one, or an extreme one.
  const auto ref = [&]() -> uint64_t {
    const uint64_t r = rng.below(100);
    if (r < 3) return rng.next();
    if (r < 4) return 0;
    if (r < 5) return UINT64_MAX;
    if (r < 6) return uint64_t{1} << (rng.below(64));  // powers of two: a weak hash's worst case
    while (!live.empty()) {
      const size_t at = rng.below(live.size());
      if (model->orders.contains(live[at])) return live[at];
      live[at] = live.back();
      live.pop_back();
    }
    return next_ref + 1000;  // not yet used: unknown
  };
  for (int i = 0; i < messages; ++i) {
    const Header h{locate(), 0, ++ts};
    const uint64_t kind = rng.below(100);
    if (kind < 45) {  // add: a new reference, now and then a live one or a bad side
      const uint64_t r = rng.below(100) < 97 ? (next_ref += 1 + rng.below(3)) : ref();
      const char side = rng.below(200) == 0 ? 'X' : (rng.below(2) ? 'B' : 'S');
      const uint32_t px = price(), n = shares();
      if (kind < 42) {
        enc.append_add_order(h, r, side, n, "HOST", px);
      } else {
        enc.append_add_order_mpid(h, r, side, n, "HOST", px, "GSCO");
      }
      model->Add(h.stock_locate, r, side, n, px);
      live.push_back(r);
    } else if (kind < 55) {
      const uint64_t r = ref();
      const uint32_t n = rng.below(4) == 0 ? shares() : 1 + static_cast<uint32_t>(rng.below(200));
      if (kind < 52) {
        enc.append_order_executed(h, r, n, i);
      } else {
        enc.append_order_executed_with_price(h, r, n, i, 'Y', price());
      }
      if (model->Take(r, n, &model->stats.unknown_execute)) ++model->stats.executions;
    } else if (kind < 65) {
      const uint64_t r = ref();
      const uint32_t n = rng.below(4) == 0 ? shares() : 1 + static_cast<uint32_t>(rng.below(200));
      enc.append_order_cancel(h, r, n);
      if (model->Take(r, n, &model->stats.unknown_cancel)) ++model->stats.cancels;
    } else if (kind < 85) {
      const uint64_t r = ref();
      enc.append_order_delete(h, r);
      model->Delete(r);
    } else if (kind < 95) {
      const uint64_t r = ref();
      const uint64_t nr = rng.below(20) == 0 ? ref() : (rng.below(50) == 0 ? r : (next_ref += 1 + rng.below(3)));
      const uint32_t px = price(), n = shares();
      enc.append_order_replace(h, r, nr, n, px);
      model->Replace(r, nr, n, px);
      live.push_back(nr);
    } else if (kind < 98) {
      enc.append_trade(h, 0, 'B', shares(), "HOST", price(), i);
      ++model->stats.trades;
    } else {
      enc.append_stock_directory(h, "HOST");
      model->books.insert(h.stock_locate);
    }
  }
  return out;
}

void ExpectSameAsModel(const BookSet& books, const Model& model) {
  EXPECT_EQ(books.stats(), model.stats);
  EXPECT_EQ(books.live_orders(), model.orders.size());
  for (const auto& [ref, o] : model.orders) {
    const Order* got = books.order(ref);
    ASSERT_NE(got, nullptr) << ref;
    EXPECT_EQ(got->price, o.price);
    EXPECT_EQ(got->shares, o.shares);
    EXPECT_EQ(got->stock_locate, o.locate);
    EXPECT_EQ(got->side, o.side == 'B' ? 0 : 1);
  }
  const auto want = model.Levels();
  size_t books_seen = 0;
  books.for_each_book([&](const OrderBook& b) {
    ++books_seen;
    for (int side = 0; side < 2; ++side) {
      const auto it = want.find({b.stock_locate(), side});
      const std::vector<L> expect = it == want.end() ? std::vector<L>{} : it->second;
      ASSERT_EQ(b.depth(side == 0 ? Side::kBuy : Side::kSell), expect)
          << "locate " << b.stock_locate() << " side " << side;
    }
  });
  // Every locate named by R or by an accepted add has a book (an add refused for its side
  // names none; the model's set over-approximates only by such locates).
  EXPECT_LE(books_seen, model.books.size());
  for (const auto& [k, v] : want) EXPECT_NE(books.book(k.first), nullptr) << k.first;
}

TEST(BookSetModelTest, HostileStreamMatchesTheReferenceModel) {
  Model model;
  const std::vector<uint8_t> bytes = HostileStream(77, 120'000, &model);
  // Every anomaly the stream is meant to carry did occur.
  const BookStats& s = model.stats;
  const std::pair<const char*, uint64_t> anomalies[] = {{"unknown_execute", s.unknown_execute},
                                                        {"unknown_cancel", s.unknown_cancel},
                                                        {"unknown_delete", s.unknown_delete},
                                                        {"unknown_replace", s.unknown_replace},
                                                        {"duplicate_add", s.duplicate_add},
                                                        {"overfill", s.overfill},
                                                        {"bad_side", s.bad_side}};
  for (const auto& [name, count] : anomalies) EXPECT_GT(count, 0u) << name;
  EXPECT_GT(model.orders.size(), 16384u);  // apply_all's pipeline ran for the later part
  {
    SCOPED_TRACE("Apply per message");
    BookSet one;
    ASSERT_TRUE(for_each_message(bytes, [&one](MessageView m) { one.apply(m); }).ok());
    ExpectSameAsModel(one, model);
    EXPECT_EQ(one.stats().level_mismatch, 0u);
  }
  {
    SCOPED_TRACE("ApplyAll, small map, directory reserve");
    BookSetOptions o;
    o.expected_orders = 16;  // grows many times on the way
    o.orders_per_book = 8;
    o.levels_per_side = 1;  // level arrays grow from 4
    BookSet all(o);
    ASSERT_TRUE(all.apply_all(bytes).ok());
    ExpectSameAsModel(all, model);
  }
  {
    SCOPED_TRACE("ApplyAll in uneven pieces");
    BookSet pieces;
    size_t off = 0;
    Xoshiro256 rng(5);
    while (off < bytes.size()) {
      // Whole records only: walk records up to a random byte budget.
      size_t end = off;
      const size_t budget = 1 + rng.below(3000);
      while (end < bytes.size() && end - off < budget) end += 2 + ((size_t{bytes[end]} << 8) | bytes[end + 1]);
      ASSERT_TRUE(pieces.apply_all({bytes.data() + off, end - off}).ok());
      off = end;
    }
    ExpectSameAsModel(pieces, model);
  }
}

// The directory sizes the map before the order flow: no rehash once the adds come.
TEST(BookSetModelTest, DirectoryReservesTheOrderMap) {
  std::vector<uint8_t> bytes;
  Encoder enc(&bytes, Framing::kLengthPrefix);
  for (uint16_t i = 1; i <= 1000; ++i) enc.append_stock_directory(Header{i, 0, i}, "DIR");
  BookSetOptions o;
  o.expected_orders = 16;
  o.orders_per_book = 64;
  BookSet books(o);
  ASSERT_TRUE(books.apply_all(bytes).ok());
  const size_t cap = books.order_capacity();
  EXPECT_GE(cap, 2u * 1000 * 64 * 3 / 2);  // load <= 1/2 at 1.5 x 64 orders a book
  bytes.clear();
  for (uint64_t r = 1; r <= 1000 * 64 * 3 / 2; ++r) {
    enc.append_add_order(Header{static_cast<uint16_t>(1 + r % 1000), 0, 2000 + r}, r, 'B', 100, "DIR", 10'0000);
  }
  ASSERT_TRUE(books.apply_all(bytes).ok());
  EXPECT_EQ(books.live_orders(), 96'000u);
  EXPECT_EQ(books.order_capacity(), cap);
  // Without the option the same market grows the map as the orders come.
  BookSetOptions plain;
  plain.expected_orders = 16;
  EXPECT_LT(BookSet(plain).order_capacity(), cap);
}

}  // namespace
}  // namespace pollux::itch
