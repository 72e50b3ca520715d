// "No allocation per message in steady state": replaces the global operator new of this
// test binary with a counting one and replays a stream a second time after Clear(), when
// the order map and every level array have already reached their peak size.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <vector>

#include "itch/book_set.h"
#include "itch/generator.h"
#include "itch/reader.h"
#include "tests/itch/test_util.h"

namespace {
std::atomic<uint64_t> g_allocations{0};
}  // namespace

// GCC pairs the inlined malloc/free below with new/delete expressions elsewhere and warns;
// the pairing is correct by construction (this operator new is malloc).
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

void* operator new(std::size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace pollux::itch {
namespace {

TEST(BookAllocationTest, SteadyStateReplayDoesNotAllocate) {
  GeneratorOptions o = testing::GenOptions(50, 300'000, 5);
  const std::vector<uint8_t> bytes = *generate_itch(o);
  BookSetOptions bo;
  bo.expected_orders = 1024;  // deliberately small: the first pass grows the map
  BookSet books(bo);
  ASSERT_TRUE(for_each_message(bytes, [&books](MessageView m) { books.apply(m); }).ok());
  const uint64_t first_pass = g_allocations.load();
  // The order map and the level arrays are mapped memory (huge_buffer.h), which operator new
  // does not see: their footprints must not grow either.
  const size_t map_capacity = books.order_capacity();
  const size_t level_bytes = books.level_bytes_mapped();
  EXPECT_GT(level_bytes, 0u);
  books.clear();
  ASSERT_TRUE(for_each_message(bytes, [&books](MessageView m) { books.apply(m); }).ok());
  EXPECT_EQ(g_allocations.load() - first_pass, 0u);
  EXPECT_EQ(books.order_capacity(), map_capacity);
  EXPECT_EQ(books.level_bytes_mapped(), level_bytes);
  books.clear();
  ASSERT_TRUE(books.apply_all(bytes).ok());  // the prefetching path too
  EXPECT_EQ(g_allocations.load() - first_pass, 0u);
  EXPECT_EQ(books.order_capacity(), map_capacity);
  EXPECT_EQ(books.level_bytes_mapped(), level_bytes);
  EXPECT_EQ(books.counts().total(), o.messages);
}

TEST(BookAllocationTest, PresizedBookSetDoesNotAllocateOnFirstPass) {
  GeneratorOptions o = testing::GenOptions(10, 100'000, 6);
  const std::vector<uint8_t> bytes = *generate_itch(o);
  BookSetOptions bo;
  bo.expected_orders = 4 * o.symbols * o.orders_per_symbol;
  bo.expected_symbols = o.symbols;
  bo.levels_per_side = 256;
  BookSet books(bo);
  const uint64_t before = g_allocations.load();
  const size_t map_capacity = books.order_capacity();
  const size_t level_bytes = books.level_bytes_mapped();
  ASSERT_TRUE(for_each_message(bytes, [&books](MessageView m) { books.apply(m); }).ok());
  EXPECT_EQ(g_allocations.load() - before, 0u);
  EXPECT_EQ(books.order_capacity(), map_capacity);
  EXPECT_EQ(books.level_bytes_mapped(), level_bytes);
}

}  // namespace
}  // namespace pollux::itch
