// The hot path takes no heap allocation and no mutex, checked by counting: after a warm-up,
// offer() and poll() on the application thread run with malloc & co. and pthread_mutex_lock
// interposed (tests/support/data_path_probe.h). Shared memory in inline and dedicated threading, UDP
// (loopback unicast) in inline threading; the RDMA transport has the same test in the
// Soft-RoCE VM (tests/rdma/rdma_transport_test.cc, RdmaDataPath).
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "absl/strings/str_format.h"
#include "core/counters.h"
#include "pollux/pollux.h"
#include "tests/shm/test_util.h"
#include "tests/support/data_path_probe.h"
#include "tests/support/udp_ports.h"

namespace pollux {
namespace {

std::unique_ptr<Context> make(const std::string& toml) {
  auto ctx = Context::from_string(toml, "data_path_test");
  EXPECT_TRUE(ctx.ok()) << ctx.status();
  return ctx.ok() ? std::move(*ctx) : nullptr;
}

struct Probe {
  long allocs = 0, mutex_locks = 0;
  std::uint64_t received = 0, out_of_order = 0;
};

// One application thread publishes and subscribes on one stream: warm-up, then `measured`
// messages with the probes on around every offer() and poll().
Probe run(Context& ctx, bool queued) {
  constexpr std::uint64_t kWarm = 2000, kMeasured = 20000;
  auto sub = ctx.subscriber("md");
  auto pub = ctx.publisher("md");
  EXPECT_TRUE(sub.ok()) << sub.status();
  EXPECT_TRUE(pub.ok()) << pub.status();
  Probe p;
  if (!sub.ok() || !pub.ok()) return p;
  for (int i = 0; i < 20000 && !(pub->is_connected() && sub->is_connected()); ++i) {
    (void)sub->poll([](const Message&) {}, 16);
    (void)pub->service();
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  EXPECT_TRUE(pub->is_connected() && sub->is_connected());
  std::byte buf[200];
  const long allocs0 = g_allocs, locks0 = g_mutex_locks;
  for (std::uint64_t i = 1; i <= kWarm + kMeasured; ++i) {
    const std::uint32_t len = testing::payload_len(i, sizeof buf);
    testing::fill_payload(buf, len, i);
    const bool count = i > kWarm;
    std::int64_t r;
    for (;;) {
      g_counting = count;
      r = pub->offer(buf, len);
      g_counting = false;
      if (r >= 0) break;
      if (queued) std::this_thread::yield();  // the poller shares the CPU
    }
    const std::uint64_t want = p.received + 1;
    while (p.received < want) {
      g_counting = count;
      const int n = sub->poll(
          [&](const Message& m) {
            if (m.sequence != p.received + 1 ||
                !testing::check_payload(m.payload.data(), m.payload.size(), m.sequence)) {
              ++p.out_of_order;
            }
            ++p.received;
          },
          16);
      g_counting = false;
      if (n == 0 && queued) std::this_thread::yield();
    }
  }
  p.allocs = g_allocs - allocs0;
  p.mutex_locks = g_mutex_locks - locks0;
  return p;
}

void expect_clean(const Probe& p, const char* what) {
  std::printf("%s: %llu messages, %ld allocations, %ld mutex locks on the application thread\n", what,
              static_cast<unsigned long long>(p.received), p.allocs, p.mutex_locks);
  EXPECT_EQ(p.received, 22000u);
  EXPECT_EQ(p.out_of_order, 0u);
  EXPECT_EQ(p.allocs, 0);
  EXPECT_EQ(p.mutex_locks, 0);
}

// The [runtime] table of this file's contexts: `threading`, idle "yield", counters on, and
// `name` when one is given.
std::string runtime_toml(const char* threading, const std::string& name = "") {
  std::string t = "[runtime]\n";
  if (!name.empty()) t += "name = \"" + name + "\"\n";
  return t + absl::StrFormat(R"(threading = "%s"
idle = "yield"
counters = true
)",
                             threading);
}

std::string shm_toml(const char* threading) {
  return runtime_toml(threading, testing::unique_name("dp")) + R"([shm]
log_size = "1MiB"
flow_control = "backpressure"
)";
}

// The probes see what they must (otherwise the zeros below would prove nothing).
TEST(DataPath, ProbesCountAllocationsAndLocks) {
  const long a0 = g_allocs, m0 = g_mutex_locks;
  std::mutex mu;
  g_counting = true;
  auto* v = new std::string(100, 'x');  // past the small-string buffer: a heap allocation
  mu.lock();
  g_counting = false;
  mu.unlock();
  EXPECT_GE(g_allocs - a0, 1);
  EXPECT_EQ(g_mutex_locks - m0, 1);
  delete v;
}

// The error log records from poller threads - never an allocation; a known error
// (the common case: a failure that repeats) takes no lock either, a first occurrence one mutex.
TEST(DataPath, ErrorLogRecordsWithoutAllocating) {
  auto f = pollux::core::CountersFile::create("", "probe");
  ASSERT_TRUE(f.ok()) << f.status();
  pollux::core::ErrorLog& log = (*f)->error_log();
  const std::string peer = "10.0.0.2:7001";
  const long a0 = g_allocs, m0 = g_mutex_locks;
  g_counting = true;
  log.recordf(absl::StatusCode::kUnavailable, "rdma: stream %u: subscriber %s disconnected", 7u, peer);
  const long first_locks = g_mutex_locks - m0;
  for (int i = 0; i < 100; ++i) {
    log.recordf(absl::StatusCode::kUnavailable, "rdma: stream %u: subscriber %s disconnected", 7u, peer);
  }
  g_counting = false;
  EXPECT_EQ(g_allocs - a0, 0);
  EXPECT_EQ(first_locks, 1) << "the append of a new error";
  EXPECT_EQ(g_mutex_locks - m0, 1) << "a known error takes no lock";
  ASSERT_EQ(log.entries().size(), 1u);
  EXPECT_EQ(log.entries()[0].count, 101u);
}

TEST(DataPath, ShmInlineNoAllocationNoLock) {
  auto ctx = make(shm_toml("inline"));
  ASSERT_NE(ctx, nullptr);
  expect_clean(run(*ctx, false), "shm inline");
}

TEST(DataPath, ShmDedicatedNoAllocationNoLockOnTheApplicationThread) {
  auto ctx = make(shm_toml("dedicated"));
  ASSERT_NE(ctx, nullptr);
  expect_clean(run(*ctx, true), "shm dedicated");
}

TEST(DataPath, UdpInlineNoAllocationNoLock) {
  const int port = static_cast<int>(testing::UdpPortBlock::Base());  // free, below the ephemeral range
  auto ctx = make(runtime_toml("inline") + absl::StrFormat(R"([transport]
kind = "udp"
[udp]
address = "127.0.0.1"
port = %d
interface = "lo"
)",
                                                           port));
  ASSERT_NE(ctx, nullptr);
  expect_clean(run(*ctx, false), "udp inline");
}

}  // namespace
}  // namespace pollux
