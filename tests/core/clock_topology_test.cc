#include <algorithm>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "core/clock.h"
#include "core/counters.h"
#include "core/topology.h"

namespace pollux::core {
namespace {

TEST(ClockTest, MonotonicAndCloseToClockGettime) {
  Clock::init();
  std::int64_t prev = Clock::now_ns();
  for (int i = 0; i < 100000; ++i) {
    const std::int64_t t = Clock::now_ns();
    ASSERT_GE(t, prev);
    prev = t;
  }
  // On CLOCK_MONOTONIC: within a millisecond, however old the host's shared page (a page that
  // drifted further is stepped back at init(); see shm_files_test for the rules).
  EXPECT_LT(std::llabs(Clock::now_ns() - Clock::monotonic_ns()), 1'000'000) << Clock::describe();
  const std::int64_t a = Clock::now_ns();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const std::int64_t b = Clock::now_ns();
  EXPECT_GE(b - a, 19'000'000);
  EXPECT_LT(b - a, 2'000'000'000);
}

TEST(TopologyTest, FindsCoresAndNodes) {
  const Topology& t = topology();
  EXPECT_GE(t.numa_nodes(), 1);
  ASSERT_FALSE(t.cores().empty());
  EXPECT_FALSE(t.cpus_on_node(0).empty());
  EXPECT_NE(t.describe().find("core"), std::string::npos);
}

TEST(TopologyTest, EachCoreListsItsHardwareThreadsFirstOneFirst) {
  const Topology& t = topology();
  std::vector<int> all;
  for (const CoreInfo& c : t.cores()) {
    ASSERT_FALSE(c.pu_os_indexes.empty());
    EXPECT_EQ(c.pu_os_indexes.front(), c.first_pu_os_index);
    all.insert(all.end(), c.pu_os_indexes.begin(), c.pu_os_indexes.end());
  }
  std::sort(all.begin(), all.end());
  EXPECT_EQ(std::adjacent_find(all.begin(), all.end()), all.end()) << "a hardware thread in two cores";
}

// Where Context::start() pins pollers (and pollux-doctor says it would).
TEST(TopologyTest, PollerCpusFollowTheThreadingModeAndTheConfiguredCores) {
  RuntimeConfig rt;
  rt.threading = ThreadingMode::kDedicated;
  rt.pollers = 3;
  // Automatic: the highest-numbered CPUs of the node first, wrapping when there are fewer cores.
  EXPECT_EQ(poller_cpus(rt, {0, 2, 4, 6}), (std::vector<int>{6, 4, 2}));
  EXPECT_EQ(poller_cpus(rt, {0, 2}), (std::vector<int>{2, 0, 2}));
  EXPECT_EQ(poller_cpus(rt, {}), (std::vector<int>{-1, -1, -1}));
  rt.poller_cores = {5, 1, 3};
  EXPECT_EQ(poller_cpus(rt, {0, 2, 4, 6}), (std::vector<int>{5, 1, 3}));
  rt.threading = ThreadingMode::kShared;
  EXPECT_EQ(poller_cpus(rt, {0, 2}), std::vector<int>{-1});
  rt.threading = ThreadingMode::kInline;
  EXPECT_TRUE(poller_cpus(rt, {0, 2}).empty());
}

TEST(TopologyTest, PinsTheCallingThread) {
  const Topology& t = topology();
  const int cpu = t.cores().back().first_pu_os_index;
  std::thread th([&] {
    ASSERT_TRUE(t.pin_current_thread(cpu).ok());
    EXPECT_EQ(sched_getcpu(), cpu);
  });
  th.join();
  EXPECT_FALSE(t.pin_current_thread(100000).ok());
}

TEST(TopologyTest, LocatesLoopbackAndReportsAbsentDevicesClearly) {
  auto lo = topology().locate_device("lo");
  ASSERT_TRUE(lo.ok()) << lo.status();
  EXPECT_EQ(lo->kind, "net");
  auto missing = topology().locate_device("mlx5_42");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("device 'mlx5_42' not found"), absl::string_view::npos) << missing.status();
  EXPECT_NE(missing.status().message().find("lo"), absl::string_view::npos) << "should list the devices present";
}

TEST(CountersTest, AnotherReaderSeesLiveValues) {
  auto f = CountersFile::create(::testing::TempDir(), "ctest");
  ASSERT_TRUE(f.ok()) << f.status();
  Counter a = (*f)->allocate("pub stream 1 x", "messages", 1);
  Counter b = (*f)->allocate("poller 0", "duty_cycles");
  a.add(5);
  b.add();
  auto snap = read_counters_file((*f)->path());
  ASSERT_TRUE(snap.ok()) << snap.status();
  EXPECT_TRUE(snap->alive);
  // Slot 0 is the process's errors counter (version 2), then ours in allocation order.
  ASSERT_EQ(snap->counters.size(), 3u);
  EXPECT_EQ(snap->counters[0].name, "errors");
  EXPECT_EQ(snap->counters[1].scope, "pub stream 1 x");
  EXPECT_EQ(snap->counters[1].name, "messages");
  EXPECT_EQ(snap->counters[1].stream_id, 1u);
  EXPECT_EQ(snap->counters[1].value, 5u);
  EXPECT_EQ(snap->counters[2].value, 1u);
  a.add(10);
  EXPECT_EQ(read_counters_file((*f)->path())->counters[1].value, 15u);
  const std::string path = (*f)->path();
  f->reset();
  EXPECT_FALSE(read_counters_file(path).ok()) << "file removed on close";
}

TEST(CountersTest, RejectsForeignFiles) {
  const std::string path = ::testing::TempDir() + "/pollux-bogus-1.counters";
  FILE* fp = std::fopen(path.c_str(), "w");
  std::string junk(8192, 'x');
  std::fwrite(junk.data(), 1, junk.size(), fp);
  std::fclose(fp);
  auto s = read_counters_file(path);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("bad magic"), absl::string_view::npos);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace pollux::core
