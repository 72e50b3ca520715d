#include <dirent.h>
#include <linux/capability.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "core/buffer_pool.h"
#include "pollux/pollux.h"
#include "tests/support/process.h"

namespace pollux::core {
namespace {

// The options these tests vary (the rest at their defaults).
PoolOptions pool_options(std::uint32_t slot_size, std::uint32_t slots, HugePages hugepages) {
  PoolOptions o;
  o.slot_size = slot_size;
  o.slots = slots;
  o.hugepages = hugepages;
  return o;
}

TEST(BufferPoolTest, SlotsAreContiguousAlignedAndDistinct) {
  PoolOptions o = pool_options(1000, 256, HugePages::kAuto);  // slot size rounded up to 1024
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
  // What it maps is what mapping_bytes() predicts (pollux-doctor sizes hugepages and memlock by it).
  EXPECT_EQ(p.bytes(), BufferPool::mapping_bytes(o, p.hugepages()));
  EXPECT_EQ(BufferPool::mapping_bytes(o, false), 256u * 1024u);
  EXPECT_EQ(BufferPool::mapping_bytes(o, true), 2u << 20);
  o.slots = 2049;  // 2 MiB + 1 KiB
  EXPECT_EQ(BufferPool::mapping_bytes(o, true), 4u << 20);
  EXPECT_EQ(BufferPool::mapping_bytes(o, false), (2u << 20) + 4096);
}

TEST(BufferPoolTest, CarveHandsOutDisjointRangesAndReportsExhaustion) {
  auto pool = BufferPool::create(pool_options(128, 100, HugePages::kOff));
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

std::shared_ptr<BufferPool> SmallPool(std::uint32_t slots) {
  auto pool = BufferPool::create(pool_options(64, slots, HugePages::kOff));
  EXPECT_TRUE(pool.ok()) << pool.status();
  return pool.ok() ? std::shared_ptr<BufferPool>(std::move(*pool)) : nullptr;
}

// A SmallPool and the ranges carved from it, in the order asked for.
struct CarvedPool {
  std::shared_ptr<BufferPool> pool;
  std::vector<SlotRange> ranges;  // empty when the pool or a carve failed (reported)
};

CarvedPool small_pool_carved(std::uint32_t slots, std::initializer_list<std::uint32_t> counts) {
  CarvedPool c{SmallPool(slots), {}};
  if (c.pool == nullptr) return c;
  for (const std::uint32_t count : counts) {
    auto r = c.pool->carve(count);
    EXPECT_TRUE(r.ok()) << "carve(" << count << "): " << r.status();
    if (!r.ok()) return {c.pool, {}};
    c.ranges.push_back(*r);
  }
  return c;
}

TEST(BufferPoolTest, GivenBackRangesCoalesceAndAreCarvedAgain) {
  auto [p, r] = small_pool_carved(100, {30, 30, 40});
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(p->slots_free(), 0u);
  p->give_back(r[0]);
  p->give_back(r[2]);
  EXPECT_EQ(p->slots_free(), 70u);
  EXPECT_EQ(p->largest_free_run(), 40u);
  // 50 slots are free but not in one piece: refused, and the message says so.
  auto big = p->carve(50);
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(big.status().message().find("longest free run is 40"), absl::string_view::npos) << big.status();
  // Giving back the middle joins all three runs into one.
  p->give_back(r[1]);
  EXPECT_EQ(p->largest_free_run(), 100u);
  auto all = p->carve(100);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->first, 0u);
  EXPECT_EQ(p->bad_give_backs(), 0u);
}

TEST(BufferPoolTest, FirstFitTakesTheLowestRunThatFits) {
  auto [p, r] = small_pool_carved(100, {10, 10, 10, 70});
  ASSERT_EQ(r.size(), 4u);
  p->give_back(r[0]);  // [0,10)
  p->give_back(r[2]);  // [20,30)
  auto e = p->carve(10);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->first, 0u);
  auto f = p->carve(5);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->first, 20u);
  EXPECT_EQ(p->slots_free(), 5u);
}

TEST(BufferPoolTest, GivingBackTwiceOrOutsideThePoolIsRefusedAndCounted) {
  auto [p, r] = small_pool_carved(100, {20});
  ASSERT_EQ(r.size(), 1u);
  p->give_back(r[0]);
  p->give_back(r[0]);               // twice
  p->give_back(SlotRange{95, 10});  // past the end
  p->give_back(SlotRange{10, 5});   // never carved (free already)
  EXPECT_EQ(p->bad_give_backs(), 3u);
  EXPECT_EQ(p->slots_free(), 100u);
  EXPECT_EQ(p->largest_free_run(), 100u);
}

TEST(BufferPoolTest, AnEndpointOpenedAndClosedForeverNeverUsesThePoolUp) {
  auto p = SmallPool(64);
  ASSERT_NE(p, nullptr);
  for (int round = 0; round < 1000; ++round) {
    auto r = p->carve(48);
    ASSERT_TRUE(r.ok()) << "round " << round << ": " << r.status();
    auto lease = std::make_shared<SlotLease>(p.get(), *r);
    auto other_owner = lease;  // e.g. the poller's channel
    lease.reset();
    ASSERT_EQ(p->slots_free(), 16u) << "given back before its last owner let go";
  }
  EXPECT_EQ(p->slots_free(), 64u);
  EXPECT_EQ(p->bad_give_backs(), 0u);
}

TEST(BufferPoolTest, ALeaseOutlivingItsPoolGivesBackNothing) {
  auto [p, r] = small_pool_carved(16, {8});
  ASSERT_EQ(r.size(), 1u);
  SlotLease lease(p.get(), r[0]);
  SlotLease moved(std::move(lease));
  EXPECT_EQ(lease.range().count, 0u);
  EXPECT_EQ(moved.range().count, 8u);
  p.reset();      // the pool goes first (a context destroyed before a publisher handle)
  moved.reset();  // reaches no freed memory (weak reference)
  EXPECT_EQ(moved.range().count, 0u);
}

TEST(BufferPoolTest, HugepagesOnFailsClearlyWithoutReservedPages) {
  auto pool = BufferPool::create(pool_options(2048, 16, HugePages::kOn));
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

// "memlock too low": what RLIMIT_MEMLOCK affects without RDMA. The pool never
// locks its memory (no mlock, no MAP_LOCKED; it is pre-touched instead), and MAP_HUGETLB
// mappings are not charged to the limit (only SHM_HUGETLB segments are), so a pool, and a
// whole shm context, work under a 64 KiB limit. Only RDMA registration (ibv_reg_mr) pins
// memory against it; transport/rdma checks the limit first and names it (tests/rdma).
// The child drops CAP_IPC_LOCK (root ignores the limit otherwise) and proves the limit is in
// force: an mlock of the pool fails.
std::string VmLckLine() {
  std::ifstream f("/proc/self/status");
  for (std::string line; std::getline(f, line);) {
    if (line.rfind("VmLck:", 0) == 0) return line;
  }
  return "VmLck: ?";
}

std::string RunWithLowMemlock() {
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2]{};
  if (syscall(SYS_capget, &hdr, data) != 0) return "capget failed";
  data[CAP_IPC_LOCK / 32].effective &= ~(1u << (CAP_IPC_LOCK % 32));
  if (syscall(SYS_capset, &hdr, data) != 0) return absl::StrCat("capset: ", std::strerror(errno));
  rlimit rl{64 << 10, 64 << 10};
  if (setrlimit(RLIMIT_MEMLOCK, &rl) != 0) return absl::StrCat("setrlimit: ", std::strerror(errno));
  std::string out;
  for (const HugePages h : {HugePages::kOff, HugePages::kAuto}) {
    auto pool = BufferPool::create(pool_options(2048, 8192, h));  // 16 MiB, 256 times the limit
    if (!pool.ok()) return absl::StrCat("pool: ", pool.status().message());
    if ((*pool)->bytes() < (16u << 20)) return "pool smaller than asked";
    absl::StrAppend(&out, "pool ok ", (*pool)->describe(), "; ", VmLckLine(), "; ");
    // The system call itself: AddressSanitizer's mlock() interceptor does nothing.
    if (syscall(SYS_mlock, (*pool)->base(), (*pool)->bytes()) == 0) {
      return "mlock of the pool succeeded: the limit is not in force";
    }
    absl::StrAppend(&out, "mlock refused (", std::strerror(errno), "); ");
  }
  {
    const std::string name = absl::StrCat("memlock-", getpid());
    auto ctx = Context::from_string(
        "[runtime]\nname = \"" + name + "\"\nthreading = \"inline\"\ncounters = true\n[shm]\nlog_size = \"1MiB\"\n",
        "low-memlock.toml");
    if (!ctx.ok()) return absl::StrCat("context: ", ctx.status().message());
    auto pub = (*ctx)->publisher("m");
    auto sub = (*ctx)->subscriber("m");
    if (!pub.ok() || !sub.ok()) return "publisher/subscriber failed";
    int got = 0;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    for (bool sent = false; got == 0 && std::chrono::steady_clock::now() < deadline;) {
      if (!sent) sent = pub->offer("hello", 5) >= 0;
      if (sub->poll([&](const Message& m) { got += m.payload.size() == 5; }, 16) == 0) std::this_thread::yield();
    }
    if (got != 1) return "no message through the shm context";
    absl::StrAppend(&out, "shm context ok; ", VmLckLine(), "; ");
  }
  int left = 0;
  if (DIR* d = opendir("/dev/shm")) {
    while (dirent* e = readdir(d))
      left += std::string(e->d_name).find(absl::StrCat("memlock-", getpid())) != std::string::npos;
    closedir(d);
  }
  absl::StrAppend(&out, "files left ", left);
  return out;
}

TEST(BufferPoolTest, LowMemlockLimitAffectsNothingWithoutRdma) {
  const testing::ForkResult child = testing::run_forked(RunWithLowMemlock);
  const std::string& msg = child.out;
  ASSERT_TRUE(WIFEXITED(child.status)) << msg;
  std::printf("%s\n", msg.c_str());
  EXPECT_EQ(msg.find("pool ok"), 0u) << msg;
  EXPECT_NE(msg.find("mlock refused"), std::string::npos) << msg;
  EXPECT_NE(msg.find("shm context ok"), std::string::npos) << msg;
  int vmlck = 0;
  for (std::size_t at = msg.find("VmLck:"); at != std::string::npos; at = msg.find("VmLck:", at + 1)) {
    ++vmlck;
    EXPECT_EQ(msg.substr(at, msg.find(';', at) - at).find_first_of("123456789"), std::string::npos)
        << "memory was locked: " << msg;
  }
  EXPECT_EQ(vmlck, 3) << msg;
  EXPECT_NE(msg.find("files left 0"), std::string::npos) << msg;
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
