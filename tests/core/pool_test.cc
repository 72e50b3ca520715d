#include <set>

#include <gtest/gtest.h>

#include "core/buffer_pool.h"

namespace pollux::core {
namespace {

TEST(BufferPoolTest, SlotsAreContiguousAlignedAndDistinct) {
  PoolOptions o;
  o.slot_size = 1000;  // rounded up to 1024
  o.slots = 256;
  o.hugepages = HugePages::kAuto;
  auto pool = BufferPool::create(o);
  ASSERT_TRUE(pool.ok()) << pool.status();
  BufferPool& p = **pool;
  EXPECT_EQ(p.slot_size(), 1024u);
  EXPECT_GE(p.bytes(), 256u * 1024u);
  for (std::uint32_t i = 0; i < p.slots(); ++i) {
    std::byte* s = p.slot(i);
    ASSERT_EQ(reinterpret_cast<std::uintptr_t>(s) % 64, 0u);
    ASSERT_EQ(p.index_of(s), i);
    ASSERT_EQ(p.index_of(s + 1023), i);
    s[0] = std::byte{static_cast<unsigned char>(i)};  // writable (pre-touched memory)
  }
  EXPECT_EQ(p.slot(255) + 1024, p.base() + 256 * 1024);
}

TEST(BufferPoolTest, CarveHandsOutDisjointRangesAndReportsExhaustion) {
  PoolOptions o;
  o.slot_size = 128;
  o.slots = 100;
  o.hugepages = HugePages::kOff;
  auto pool = BufferPool::create(o);
  ASSERT_TRUE(pool.ok());
  auto a = (*pool)->carve(60);
  auto b = (*pool)->carve(40);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->first + a->count, b->first);
  EXPECT_EQ((*pool)->slots_free(), 0u);
  auto c = (*pool)->carve(1);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(c.status().message().find("pool.slots"), absl::string_view::npos) << c.status();
}

TEST(BufferPoolTest, HugepagesOnFailsClearlyWithoutReservedPages) {
  PoolOptions o;
  o.slot_size = 2048;
  o.slots = 16;
  o.hugepages = HugePages::kOn;
  auto pool = BufferPool::create(o);
  if (pool.ok()) {
    EXPECT_TRUE((*pool)->hugepages());  // this host has reserved hugepages
  } else {
    EXPECT_NE(pool.status().message().find("nr_hugepages"), absl::string_view::npos) << pool.status();
  }
}

TEST(BufferPoolTest, RegistrationHookIsRecordedPerOwner) {
  PoolOptions o;
  o.slots = 64;
  auto pool = BufferPool::create(o);
  ASSERT_TRUE(pool.ok());
  int owner_a = 0, owner_b = 0;
  (*pool)->add_registration({&owner_a, nullptr, 11});
  (*pool)->add_registration({&owner_b, nullptr, 22});
  ASSERT_TRUE((*pool)->registration(&owner_a).has_value());
  EXPECT_EQ((*pool)->registration(&owner_a)->lkey, 11u);
  EXPECT_EQ((*pool)->registration(&owner_b)->lkey, 22u);
  EXPECT_FALSE((*pool)->registration(pool->get()).has_value());
}

TEST(SlotStackTest, LifoWithinRange) {
  SlotStack s(SlotRange{10, 3});
  std::uint32_t a, b, c, d;
  ASSERT_TRUE(s.pop(&a) && s.pop(&b) && s.pop(&c));
  EXPECT_EQ(std::set<std::uint32_t>({a, b, c}), std::set<std::uint32_t>({10, 11, 12}));
  EXPECT_FALSE(s.pop(&d));
  s.push(b);
  ASSERT_TRUE(s.pop(&d));
  EXPECT_EQ(d, b);
}

TEST(SlotStackTest, NeverHoldsMoreThanItsRange) {
  SlotStack s(SlotRange{0, 2});
  EXPECT_EQ(s.size(), 2u);
  s.push(7);  // a double release: ignored, not written past the array
  EXPECT_EQ(s.size(), 2u);
  std::uint32_t a, b, c;
  ASSERT_TRUE(s.pop(&a) && s.pop(&b));
  EXPECT_FALSE(s.pop(&c));
  EXPECT_EQ(std::set<std::uint32_t>({a, b}), std::set<std::uint32_t>({0, 1}));
}

}  // namespace
}  // namespace pollux::core
