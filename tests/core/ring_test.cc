#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "core/spsc_ring.h"

namespace pollux::core {
namespace {

template <typename R>
class RingTest : public ::testing::Test {};
using RingTypes = ::testing::Types<SpscRing<std::uint64_t>, LockfreeRing<std::uint64_t>>;
TYPED_TEST_SUITE(RingTest, RingTypes);

TYPED_TEST(RingTest, FifoAndCapacity) {
  TypeParam r(8);
  EXPECT_EQ(r.capacity(), 8u);
  for (std::uint64_t i = 0; i < 8; ++i) ASSERT_TRUE(r.try_push(i)) << i;
  EXPECT_FALSE(r.try_push(99));  // full
  std::uint64_t v;
  for (std::uint64_t i = 0; i < 8; ++i) {
    ASSERT_TRUE(r.try_pop(v));
    EXPECT_EQ(v, i);
  }
  EXPECT_FALSE(r.try_pop(v));  // empty
}

TYPED_TEST(RingTest, BurstIsPartialBulkIsAllOrNothing) {
  TypeParam r(8);
  std::uint64_t in[6] = {1, 2, 3, 4, 5, 6};
  EXPECT_EQ(r.push_burst(in, 6), 6u);
  EXPECT_EQ(r.push_burst(in, 6), 2u);  // only 2 free
  std::uint64_t out[16];
  EXPECT_EQ(r.pop_burst(out, 3), 3u);
  EXPECT_FALSE(r.push_bulk(in, 4));  // 3 free: all-or-nothing refuses
  EXPECT_TRUE(r.push_bulk(in, 3));
  // A consumer burst may come back short (SpscRing re-reads the producer's index only when
  // its cached view is empty): drain until empty.
  std::uint32_t got = 0, n;
  while ((n = r.pop_burst(out + got, 16 - got)) > 0) got += n;
  EXPECT_EQ(got, 8u);
  const std::uint64_t want[8] = {4, 5, 6, 1, 2, 1, 2, 3};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(out[i], want[i]) << i;
}

TYPED_TEST(RingTest, WrapsManyTimes) {
  TypeParam r(4);
  std::uint64_t v;
  for (std::uint64_t i = 0; i < 1000; ++i) {
    ASSERT_TRUE(r.try_push(i));
    ASSERT_TRUE(r.try_pop(v));
    ASSERT_EQ(v, i);
  }
}

// Two threads: every value arrives exactly once and in order, through bursts of varying size.
TYPED_TEST(RingTest, TwoThreadStressExactlyOnceInOrder) {
  constexpr std::uint64_t kCount = 2'000'000;
  TypeParam r(256);
  std::thread producer([&] {
    std::uint64_t next = 0;
    std::uint64_t batch[17];
    std::uint32_t size = 1;
    while (next < kCount) {
      const std::uint32_t n = static_cast<std::uint32_t>(std::min<std::uint64_t>(size, kCount - next));
      for (std::uint32_t i = 0; i < n; ++i) batch[i] = next + i;
      const std::uint32_t pushed = r.push_burst(batch, n);
      next += pushed;
      if (pushed == 0) std::this_thread::yield();  // 2 cores: let the consumer run
      size = size % 17 + 1;
    }
  });
  std::uint64_t expect = 0;
  std::uint64_t out[13];
  std::uint64_t spins = 0;
  while (expect < kCount) {
    const std::uint32_t n = r.pop_burst(out, 13);
    if (n == 0) {
      if (++spins % 64 == 0) std::this_thread::yield();
      continue;
    }
    for (std::uint32_t i = 0; i < n; ++i) {
      ASSERT_EQ(out[i], expect) << "value out of order or duplicated";
      ++expect;
    }
  }
  producer.join();
  std::uint64_t v;
  EXPECT_FALSE(r.try_pop(v)) << "extra values after the last one";
  EXPECT_EQ(expect, kCount);
}

TEST(SpscRingTest, RoundsCapacityUpToPowerOfTwo) {
  SpscRing<int> r(1000);
  EXPECT_EQ(r.capacity(), 1024u);
  EXPECT_EQ(r.free_approx(), 1024u);
}

}  // namespace
}  // namespace pollux::core
