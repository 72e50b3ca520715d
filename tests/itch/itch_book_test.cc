// Order book: every message kind, anomalies, level ordering, depth, crossed books, the JSON
// reports, the order map, and a differential test against a std::map reference model.
#include <gtest/gtest.h>

#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "itch/book_set.h"
#include "itch/encoder.h"
#include "itch/generator.h"
#include "itch/order_book.h"
#include "itch/order_map.h"
#include "itch/random.h"
#include "itch/reader.h"
#include "itch/report.h"
#include "tests/itch/test_util.h"

namespace pollux::itch {
namespace {

using L = PriceLevel;

// Feeds single encoded messages (no prefix, as a subscriber receives them) to a BookSet.
class BookTest : public ::testing::Test {
 protected:
  void Apply() {
    absl::StatusOr<MessageView> m = decode_message(buf_);
    ASSERT_TRUE(m.ok()) << m.status();
    books_.apply(*m);
    buf_.clear();
  }
  Header H(uint16_t locate = 1) { return Header{locate, 0, ++ts_}; }

  void Directory(uint16_t locate, std::string_view stock) {
    enc_.append_stock_directory(H(locate), stock);
    Apply();
  }
  void Add(uint64_t ref, char side, uint32_t shares, uint32_t price, uint16_t locate = 1) {
    enc_.append_add_order(H(locate), ref, side, shares, "ALC", price);
    Apply();
  }
  void AddF(uint64_t ref, char side, uint32_t shares, uint32_t price, uint16_t locate = 1) {
    enc_.append_add_order_mpid(H(locate), ref, side, shares, "ALC", price, "GSCO");
    Apply();
  }
  void Exec(uint64_t ref, uint32_t shares) {
    enc_.append_order_executed(H(), ref, shares, ++match_);
    Apply();
  }
  void ExecAt(uint64_t ref, uint32_t shares, uint32_t price) {
    enc_.append_order_executed_with_price(H(), ref, shares, ++match_, 'Y', price);
    Apply();
  }
  void Cancel(uint64_t ref, uint32_t shares) {
    enc_.append_order_cancel(H(), ref, shares);
    Apply();
  }
  void Delete(uint64_t ref) {
    enc_.append_order_delete(H(), ref);
    Apply();
  }
  void Replace(uint64_t ref, uint64_t new_ref, uint32_t shares, uint32_t price) {
    enc_.append_order_replace(H(), ref, new_ref, shares, price);
    Apply();
  }
  void TradeP(uint32_t shares, uint32_t price) {
    enc_.append_trade(H(), 0, 'B', shares, "ALC", price, ++match_);
    Apply();
  }

  const OrderBook& Book(uint16_t locate = 1) {
    const OrderBook* b = books_.book(locate);
    EXPECT_NE(b, nullptr);
    return *b;
  }
  std::vector<L> Bids(uint16_t locate = 1) { return Book(locate).depth(Side::kBuy); }
  std::vector<L> Asks(uint16_t locate = 1) { return Book(locate).depth(Side::kSell); }

  BookSet books_;
  std::vector<uint8_t> buf_;
  Encoder enc_{&buf_, Framing::kNone};
  uint64_t ts_ = 1000;
  uint64_t match_ = 0;
};

TEST_F(BookTest, AddsAggregateIntoSortedLevels) {
  Add(1, 'B', 100, 10'0000);
  Add(2, 'B', 200, 10'0100);
  Add(3, 'B', 300, 9'9900);
  Add(4, 'B', 50, 10'0100);
  Add(5, 'S', 100, 10'0300);
  Add(6, 'S', 100, 10'0200);
  AddF(7, 'S', 400, 10'0500);
  EXPECT_EQ(Bids(), (std::vector<L>{{10'0100, 2, 250}, {10'0000, 1, 100}, {9'9900, 1, 300}}));
  EXPECT_EQ(Asks(), (std::vector<L>{{10'0200, 1, 100}, {10'0300, 1, 100}, {10'0500, 1, 400}}));
  EXPECT_EQ(Book().best_bid(), (L{10'0100, 2, 250}));
  EXPECT_EQ(Book().best_ask(), (L{10'0200, 1, 100}));
  EXPECT_EQ(Book().depth(Side::kBuy, 2), (std::vector<L>{{10'0100, 2, 250}, {10'0000, 1, 100}}));
  L out[2];
  EXPECT_EQ(Book().depth(Side::kSell, out), 2u);
  EXPECT_EQ(out[1], (L{10'0300, 1, 100}));
  EXPECT_EQ(Book().levels(Side::kBuy), 3u);
  EXPECT_FALSE(Book().crossed());
  EXPECT_EQ(books_.live_orders(), 7u);
  EXPECT_EQ(books_.stats().adds, 7u);
  const Order* o = books_.order(7);
  ASSERT_NE(o, nullptr);
  EXPECT_EQ(o->shares, 400u);
  EXPECT_EQ(o->price, 10'0500u);
  EXPECT_EQ(o->side, 1);
}

TEST_F(BookTest, EmptyBookHasNoTop) {
  Directory(1, "ALC");
  EXPECT_EQ(Book().best_bid(), std::nullopt);
  EXPECT_EQ(Book().best_ask(), std::nullopt);
  EXPECT_TRUE(Book().depth(Side::kBuy).empty());
  EXPECT_TRUE(Book().empty());
  EXPECT_EQ(books_.book(2), nullptr);
}

TEST_F(BookTest, PartialThenCompleteExecution) {
  Add(1, 'B', 300, 5000);
  Add(2, 'B', 100, 5000);
  Exec(1, 100);
  EXPECT_EQ(Bids(), (std::vector<L>{{5000, 2, 300}}));
  EXPECT_EQ(books_.order(1)->shares, 200u);
  Exec(1, 200);  // complete: the order leaves, the level keeps order 2
  EXPECT_EQ(Bids(), (std::vector<L>{{5000, 1, 100}}));
  EXPECT_EQ(books_.order(1), nullptr);
  Exec(2, 100);  // last order at the level: the level goes
  EXPECT_TRUE(Bids().empty());
  EXPECT_EQ(books_.stats().executions, 3u);
  EXPECT_EQ(books_.live_orders(), 0u);
}

TEST_F(BookTest, ExecutionWithPriceTakesSharesFromTheRestingPrice) {
  Add(1, 'S', 500, 20'0000);
  ExecAt(1, 200, 19'9900);  // printed at another price; the resting order is still at 20.00
  EXPECT_EQ(Asks(), (std::vector<L>{{20'0000, 1, 300}}));
  ExecAt(1, 300, 20'0100);
  EXPECT_TRUE(Asks().empty());
  EXPECT_EQ(books_.stats().executions, 2u);
  EXPECT_EQ(books_.counts()['C'], 2u);
}

TEST_F(BookTest, CancelIsPartialAndACancelOfEverythingRemovesTheOrder) {
  Add(1, 'B', 300, 5000);
  Cancel(1, 100);
  EXPECT_EQ(Bids(), (std::vector<L>{{5000, 1, 200}}));
  Cancel(1, 200);
  EXPECT_TRUE(Bids().empty());
  EXPECT_EQ(books_.order(1), nullptr);
  EXPECT_EQ(books_.stats().cancels, 2u);
}

TEST_F(BookTest, DeleteRemovesOnlyThatOrder) {
  Add(1, 'S', 300, 5100);
  Add(2, 'S', 100, 5100);
  Add(3, 'S', 100, 5200);
  Delete(1);
  EXPECT_EQ(Asks(), (std::vector<L>{{5100, 1, 100}, {5200, 1, 100}}));
  Delete(3);
  EXPECT_EQ(Asks(), (std::vector<L>{{5100, 1, 100}}));
  EXPECT_EQ(books_.stats().deletes, 2u);
}

TEST_F(BookTest, ReplaceMovesTheOrderUnderANewReferenceOnTheSameSide) {
  Add(1, 'B', 300, 5000);
  Add(2, 'B', 100, 5000);
  Replace(1, 10, 500, 5100);
  EXPECT_EQ(Bids(), (std::vector<L>{{5100, 1, 500}, {5000, 1, 100}}));
  EXPECT_EQ(books_.order(1), nullptr);
  const Order* o = books_.order(10);
  ASSERT_NE(o, nullptr);
  EXPECT_EQ(o->side, 0);
  EXPECT_EQ(o->price, 5100u);
  EXPECT_EQ(o->shares, 500u);
  EXPECT_EQ(o->stock_locate, 1);
  // The new reference then behaves like any order.
  Exec(10, 500);
  EXPECT_EQ(Bids(), (std::vector<L>{{5000, 1, 100}}));
  // A sell replaced stays a sell even when its new price is below the bids.
  Add(3, 'S', 100, 6000);
  Replace(3, 11, 100, 4000);
  EXPECT_EQ(Asks(), (std::vector<L>{{4000, 1, 100}}));
  EXPECT_EQ(books_.stats().replaces, 2u);
}

TEST_F(BookTest, UnknownReferencesAreCountedPerKindAndChangeNothing) {
  Add(1, 'B', 100, 5000);
  Exec(99, 10);
  ExecAt(98, 10, 5000);
  Cancel(97, 10);
  Delete(96);
  Delete(96);
  Replace(95, 94, 100, 5000);
  const BookStats& s = books_.stats();
  EXPECT_EQ(s.unknown_execute, 2u);
  EXPECT_EQ(s.unknown_cancel, 1u);
  EXPECT_EQ(s.unknown_delete, 2u);
  EXPECT_EQ(s.unknown_replace, 1u);
  EXPECT_EQ(s.executions + s.cancels + s.deletes + s.replaces, 0u);
  EXPECT_EQ(books_.order(94), nullptr);  // the replacement of an unknown order is dropped
  EXPECT_EQ(Bids(), (std::vector<L>{{5000, 1, 100}}));
  EXPECT_EQ(books_.counts().total(), 7u);
}

TEST_F(BookTest, OverfillIsClampedAndCounted) {
  Add(1, 'B', 100, 5000);
  Add(2, 'B', 100, 5000);
  Exec(1, 150);
  EXPECT_EQ(books_.stats().overfill, 1u);
  EXPECT_EQ(Bids(), (std::vector<L>{{5000, 1, 100}}));  // shares never go negative
  Cancel(2, 1000);
  EXPECT_EQ(books_.stats().overfill, 2u);
  EXPECT_TRUE(Bids().empty());
}

TEST_F(BookTest, DuplicateReferencesAreCountedAndIgnored) {
  Add(1, 'B', 100, 5000);
  Add(1, 'S', 200, 6000);
  Add(2, 'S', 200, 6000);
  Replace(1, 2, 300, 5100);  // new reference already live
  EXPECT_EQ(books_.stats().duplicate_add, 2u);
  EXPECT_EQ(Bids(), (std::vector<L>{{5000, 1, 100}}));
  EXPECT_EQ(Asks(), (std::vector<L>{{6000, 1, 200}}));
}

TEST_F(BookTest, BadSideIsCountedAndIgnored) {
  Add(1, 'X', 100, 5000);
  EXPECT_EQ(books_.stats().bad_side, 1u);
  EXPECT_EQ(books_.live_orders(), 0u);
}

TEST_F(BookTest, CrossedBookIsKeptAsReported) {
  Add(1, 'B', 100, 10'1000);
  Add(2, 'S', 200, 10'0000);
  EXPECT_TRUE(Book().crossed());
  EXPECT_EQ(Bids(), (std::vector<L>{{10'1000, 1, 100}}));
  EXPECT_EQ(Asks(), (std::vector<L>{{10'0000, 1, 200}}));
  Delete(1);
  EXPECT_FALSE(Book().crossed());
}

TEST_F(BookTest, NonDisplayedTradeIsCountedOnly) {
  Add(1, 'B', 100, 5000);
  TradeP(100, 5000);
  EXPECT_EQ(books_.stats().trades, 1u);
  EXPECT_EQ(books_.counts()['P'], 1u);
  EXPECT_EQ(Bids(), (std::vector<L>{{5000, 1, 100}}));
}

TEST_F(BookTest, SymbolsComeFromDirectoryOrFirstAddAndBooksAreSeparate) {
  Directory(2, "BOB");
  Add(1, 'B', 100, 5000, 1);  // no R for locate 1: named "ALC" by the add
  Add(2, 'S', 100, 7000, 2);
  EXPECT_EQ(Book(1).symbol(), "ALC");
  EXPECT_EQ(Book(2).symbol(), "BOB");
  EXPECT_EQ(Bids(2), std::vector<L>{});
  EXPECT_EQ(Asks(2), (std::vector<L>{{7000, 1, 100}}));
  EXPECT_EQ(Book(2).stock_locate(), 2);
  Delete(2);  // by reference: finds locate 2's book
  EXPECT_TRUE(Book(2).empty());
  EXPECT_FALSE(Book(1).empty());
}

TEST_F(BookTest, DeepLevelsUseTheBinarySearchPath) {
  // 40 bid levels added worst-first and best-first in turn, then removed from the middle.
  for (uint32_t i = 0; i < 40; ++i) {
    const uint32_t price = i % 2 == 0 ? 1000 + i : 2000 - i;
    Add(100 + i, 'B', 10 + i, price);
  }
  std::vector<L> bids = Bids();
  ASSERT_EQ(bids.size(), 40u);
  for (size_t i = 1; i < bids.size(); ++i) EXPECT_GT(bids[i - 1].price, bids[i].price);
  for (uint32_t i = 0; i < 40; i += 3) Delete(100 + i);
  bids = Bids();
  EXPECT_EQ(bids.size(), 40u - 14u);
  for (size_t i = 1; i < bids.size(); ++i) EXPECT_GT(bids[i - 1].price, bids[i].price);
  EXPECT_EQ(books_.stats().level_mismatch, 0u);
}

TEST_F(BookTest, ClearForgetsOrdersButKeepsNames) {
  Directory(1, "ALC");
  Add(1, 'B', 100, 5000);
  books_.clear();
  EXPECT_EQ(books_.live_orders(), 0u);
  EXPECT_TRUE(Book().empty());
  EXPECT_EQ(Book().symbol(), "ALC");
  EXPECT_EQ(books_.counts().total(), 0u);
  EXPECT_EQ(books_.stats(), BookStats{});
}

TEST_F(BookTest, JsonReports) {
  Directory(1, "ALC");
  Directory(2, "BOB");
  Directory(3, "CHAR");
  Add(1, 'B', 100, 10'0000, 1);
  Add(2, 'B', 200, 10'0100, 1);
  Add(3, 'S', 300, 10'0200, 1);
  Add(4, 'S', 50, 10'0200, 1);
  Add(5, 'S', 10, 3'0000, 3);
  std::ostringstream books;
  write_books_jsonl(books_, books);
  EXPECT_EQ(books.str(),
            "{\"symbol\": \"ALC\", \"bids\": [[100100, 200], [100000, 100]], \"asks\": [[100200, 350]]}\n"
            "{\"symbol\": \"BOB\", \"bids\": [], \"asks\": []}\n"
            "{\"symbol\": \"CHAR\", \"bids\": [], \"asks\": [[30000, 10]]}\n");
  std::ostringstream counts;
  write_counts_json(books_.counts(), counts);
  EXPECT_EQ(counts.str(), "{\"A\": 5, \"R\": 3}\n");

  const std::string path = ::testing::TempDir() + "/books.jsonl";
  ASSERT_TRUE(write_books_jsonl(books_, path).ok());
  EXPECT_FALSE(write_counts_json(books_.counts(), "/nonexistent-dir/x.json").ok());
}

TEST(OrderMapTest, MatchesAHashMapThroughGrowthAndChurn) {
  OrderMap map(4);  // tiny, so it grows and wraps around
  absl::flat_hash_map<uint64_t, uint32_t> ref;
  Xoshiro256 rng(3);
  std::vector<uint64_t> keys;
  for (int i = 0; i < 200'000; ++i) {
    const uint64_t r = rng.below(100);
    if (r < 55 || keys.empty()) {
      // Sequential-ish keys like ITCH, some random ones, and 0.
      const uint64_t k = i % 7 == 0 ? rng.next() : (i % 1000 == 0 ? 0 : 1000 + i);
      auto [o, inserted] = map.insert(k);
      EXPECT_EQ(inserted, !ref.contains(k));
      if (inserted) {
        o->shares = static_cast<uint32_t>(i);
        ref[k] = static_cast<uint32_t>(i);
        keys.push_back(k);
      }
    } else {
      const size_t at = rng.below(keys.size());
      const uint64_t k = keys[at];
      Order* o = map.find(k);
      ASSERT_NE(o, nullptr);
      EXPECT_EQ(o->shares, ref[k]);
      map.erase(o);
      ref.erase(k);
      keys[at] = keys.back();
      keys.pop_back();
      EXPECT_EQ(map.find(k), nullptr);
    }
  }
  EXPECT_EQ(map.size(), ref.size());
  for (const auto& [k, v] : ref) {
    const Order* o = map.find(k);
    ASSERT_NE(o, nullptr);
    EXPECT_EQ(o->shares, v);
  }
  const size_t cap = map.capacity();
  map.clear();
  EXPECT_EQ(map.size(), 0u);
  EXPECT_EQ(map.capacity(), cap);
  EXPECT_EQ(map.find(keys.empty() ? 1 : keys[0]), nullptr);
}

// Random book operations checked against a std::map model after every step.
TEST(OrderBookTest, DifferentialAgainstStdMap) {
  OrderBook book(1, 4);
  std::map<uint32_t, std::pair<uint32_t, uint64_t>> model[2];  // price -> (orders, shares)
  struct Live {
    Side side;
    uint32_t price;
    uint32_t shares;
  };
  std::vector<Live> live;
  Xoshiro256 rng(11);
  for (int i = 0; i < 50'000; ++i) {
    if (live.empty() || rng.below(100) < 50) {
      const Side side = rng.below(2) ? Side::kBuy : Side::kSell;
      const uint32_t price = 9000 + static_cast<uint32_t>(rng.below(60)) * 50;
      const uint32_t shares = 1 + static_cast<uint32_t>(rng.below(500));
      book.add(side, price, shares);
      auto& l = model[static_cast<int>(side)][price];
      ++l.first;
      l.second += shares;
      live.push_back({side, price, shares});
    } else {
      const size_t at = rng.below(live.size());
      Live& o = live[at];
      const uint32_t n = 1 + static_cast<uint32_t>(rng.below(o.shares));
      const bool gone = n == o.shares;
      ASSERT_TRUE(book.reduce(o.side, o.price, n, gone));
      auto& side_model = model[static_cast<int>(o.side)];
      auto& l = side_model[o.price];
      l.second -= n;
      if (gone) --l.first;
      if (l.first == 0) side_model.erase(o.price);
      o.shares -= n;
      if (gone) {
        live[at] = live.back();
        live.pop_back();
      }
    }
    if (i % 97 == 0) {
      std::vector<L> want_bids, want_asks;
      for (auto it = model[0].rbegin(); it != model[0].rend(); ++it) {
        want_bids.push_back({it->first, it->second.first, it->second.second});
      }
      for (const auto& [p, l] : model[1]) want_asks.push_back({p, l.first, l.second});
      ASSERT_EQ(book.depth(Side::kBuy), want_bids) << "step " << i;
      ASSERT_EQ(book.depth(Side::kSell), want_asks) << "step " << i;
    }
  }
  EXPECT_FALSE(book.reduce(Side::kBuy, 1, 1, true));  // no such level
}

// The generator only refers to live orders, so a replay has no anomalies, and the book
// rebuilt from the stream matches the generator's own notion of live orders.
TEST(BookSetTest, GeneratedStreamReplaysCleanly) {
  GeneratorOptions o = testing::GenOptions(20, 200'000, 99);
  const std::vector<uint8_t> bytes = *generate_itch(o);
  BookSet books;
  ASSERT_TRUE(for_each_message(bytes, [&books](MessageView m) { books.apply(m); }).ok());
  const BookStats& s = books.stats();
  EXPECT_EQ(s.unknown_execute + s.unknown_cancel + s.unknown_delete + s.unknown_replace, 0u);
  EXPECT_EQ(s.duplicate_add + s.overfill + s.bad_side + s.level_mismatch, 0u);
  EXPECT_EQ(books.counts().total(), o.messages);
  EXPECT_GT(s.executions, 0u);
  EXPECT_GT(s.cancels, 0u);
  EXPECT_GT(s.replaces, 0u);
  EXPECT_GT(s.trades, 0u);
  EXPECT_GT(books.counts()['F'], 0u);
  EXPECT_GT(books.counts()['C'], 0u);
  uint64_t levels = 0;
  books.for_each_book([&](const OrderBook& b) {
    EXPECT_FALSE(b.symbol().empty());
    levels += b.levels(Side::kBuy) + b.levels(Side::kSell);
  });
  EXPECT_GT(levels, 0u);
  // Live orders hover near symbols * orders_per_symbol.
  EXPECT_GT(books.live_orders(), o.symbols * o.orders_per_symbol / 2);
  EXPECT_LT(books.live_orders(), o.symbols * o.orders_per_symbol * 2);
}

// apply_all prefetches a few messages ahead and applies them later: the books, counts and
// stats must be those of applying every message as it is framed, also when the buffer ends
// in the middle of a record (everything before it applied, the same error) and for buffers
// shorter than the pipeline.
TEST(BookSetTest, ApplyAllEqualsApplyingEachMessageInOrder) {
  GeneratorOptions o = testing::GenOptions(300, 100'000, 7);
  const std::vector<uint8_t> bytes = *generate_itch(o);
  const auto same = [](const BookSet& a, const BookSet& b) {
    EXPECT_EQ(a.stats(), b.stats());
    EXPECT_EQ(a.counts().total(), b.counts().total());
    EXPECT_EQ(a.live_orders(), b.live_orders());
    std::vector<std::vector<PriceLevel>> la, lb;
    a.for_each_book([&](const OrderBook& k) {
      la.push_back(k.depth(Side::kBuy));
      la.push_back(k.depth(Side::kSell));
    });
    b.for_each_book([&](const OrderBook& k) {
      lb.push_back(k.depth(Side::kBuy));
      lb.push_back(k.depth(Side::kSell));
    });
    EXPECT_EQ(la, lb);
  };
  for (const size_t cut : {bytes.size(), bytes.size() / 2 + 1, size_t{40}, size_t{3}, size_t{0}}) {
    SCOPED_TRACE(cut);
    const std::span<const uint8_t> part(bytes.data(), cut);
    BookSet one, all;
    const ParseResult r1 = for_each_message(part, [&one](MessageView m) { one.apply(m); });
    const ParseResult r2 = all.apply_all(part);
    EXPECT_EQ(r1.ok(), r2.ok());
    EXPECT_EQ(r1.messages, r2.messages);
    EXPECT_EQ(r1.to_status().ToString(), r2.to_status().ToString());
    same(one, all);
    if (cut == bytes.size()) {
      EXPECT_EQ(all.counts().total(), o.messages);
      // Past apply_all's threshold (16k live orders): the plain loop and the pipeline both ran.
      EXPECT_GT(all.live_orders(), 16384u);
    }
  }
}

// Books built in partitions by stock locate (feed.book_threads) and merged with absorb are the
// books of one BookSet fed everything: levels, symbols, live orders, counts and stats.
TEST(BookSetTest, AbsorbedPartitionsEqualOneSetFedEverything) {
  GeneratorOptions o = testing::GenOptions(200, 120'000, 5);
  const std::vector<uint8_t> bytes = *generate_itch(o);
  for (const uint16_t parts : {uint16_t{2}, uint16_t{3}}) {
    SCOPED_TRACE(parts);
    BookSet whole;
    std::vector<std::unique_ptr<BookSet>> part;
    for (uint16_t p = 0; p < parts; ++p) part.push_back(std::make_unique<BookSet>());
    ASSERT_TRUE(for_each_message(bytes, [&](MessageView m) {
                  whole.apply(m);
                  part[m.stock_locate() % parts]->apply(m);
                }).ok());
    for (uint16_t p = 1; p < parts; ++p) {
      EXPECT_GT(part[p]->counts().total(), 0u);
      part[0]->absorb(std::move(part[p]));
    }
    const BookSet& merged = *part[0];
    EXPECT_EQ(merged.stats(), whole.stats());
    EXPECT_EQ(merged.stats().partition_conflicts, 0u);
    EXPECT_EQ(merged.live_orders(), whole.live_orders());
    std::ostringstream a, b, ca, cb;
    write_books_jsonl(merged, a);
    write_books_jsonl(whole, b);
    write_counts_json(merged.counts(), ca);
    write_counts_json(whole.counts(), cb);
    EXPECT_EQ(a.str(), b.str());
    EXPECT_EQ(ca.str(), cb.str());
    // The merged set keeps working: every live order of the whole set is found with its
    // book, and deleting one updates the book it came from (a level in an absorbed arena).
    uint64_t checked = 0, ref = 0;
    for (uint64_t r = 1; r < 2'000'000 && checked < 200; ++r) {
      const Order* w = whole.order(r);
      if (w == nullptr) continue;
      const Order* m = merged.order(r);
      ASSERT_NE(m, nullptr) << r;
      EXPECT_EQ(m->stock_locate, w->stock_locate);
      EXPECT_EQ(m->shares, w->shares);
      if (w->stock_locate % parts != 0) ref = r;  // a book moved in from another partition
      ++checked;
    }
    ASSERT_GT(checked, 0u);
    ASSERT_NE(ref, 0u);
    std::vector<uint8_t> del;
    Encoder enc(&del, Framing::kNone);
    enc.append_order_delete(Header{whole.order(ref)->stock_locate, 0, 1}, ref);
    whole.apply(*decode_message(del));
    part[0]->apply(*decode_message(del));
    std::ostringstream a2, b2;
    write_books_jsonl(*part[0], a2);
    write_books_jsonl(whole, b2);
    EXPECT_EQ(a2.str(), b2.str());
  }
}

// Partitions that were not disjoint (a book, an order reference on both sides): this set's are
// kept, the other's counted as conflicts, never silently mixed.
TEST_F(BookTest, AbsorbCountsBooksAndOrdersBothSidesHeld) {
  Directory(1, "AAA");
  Add(10, 'B', 100, 5000, 1);
  auto other = std::make_unique<BookSet>();
  {
    std::vector<uint8_t> buf;
    Encoder enc(&buf, Framing::kNone);
    enc.append_stock_directory(Header{1, 0, 1}, "AAA");
    other->apply(*decode_message(buf));
    buf.clear();
    enc.append_add_order(Header{1, 0, 2}, 10, 'S', 7, "AAA", 6000);  // same reference
    other->apply(*decode_message(buf));
    buf.clear();
    enc.append_stock_directory(Header{2, 0, 3}, "BBB");
    other->apply(*decode_message(buf));
    buf.clear();
    enc.append_add_order(Header{2, 0, 4}, 11, 'S', 9, "BBB", 7000);
    other->apply(*decode_message(buf));
  }
  books_.absorb(std::move(other));
  EXPECT_EQ(books_.stats().partition_conflicts, 2u);  // book 1 and order 10
  EXPECT_EQ(books_.stats().adds, 3u);
  EXPECT_EQ(Bids(1), (std::vector<L>{{5000, 1, 100}}));
  EXPECT_TRUE(Asks(1).empty());
  EXPECT_EQ(books_.order(10)->side, 0);
  EXPECT_EQ(Asks(2), (std::vector<L>{{7000, 1, 9}}));
  EXPECT_EQ(Book(2).symbol(), "BBB");
  EXPECT_EQ(books_.live_orders(), 2u);
}

}  // namespace
}  // namespace pollux::itch
