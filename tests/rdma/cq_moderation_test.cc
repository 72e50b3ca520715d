// CqModerationTuner (transport/rdma/cq_moderation.h): decisions from per-interval event and wakeup rates, on a stub
// clock.
#include <cstdint>
#include <optional>

#include <gtest/gtest.h>

#include "transport/rdma/cq_moderation.h"

namespace pollux::transport::rdma {
namespace {

constexpr std::int64_t kMs = 1'000'000;
constexpr CqModeration kOff{1, 0};

// Feeds `intervals` intervals of 100 ms at the given rates (per second) and returns the last
// change update() reported, if any.
struct Feed {
  explicit Feed(const ModerationOptions& o) : tuner(o, 0) {}
  CqModerationTuner tuner;
  std::int64_t now = 0;
  std::uint64_t events = 0, wakeups = 0;
  int changes_seen = 0;

  std::optional<CqModeration> run(double events_per_s, double wakeups_per_s, int intervals = 1) {
    std::optional<CqModeration> last;
    for (int i = 0; i < intervals; ++i) {
      now += 100 * kMs;
      events += static_cast<std::uint64_t>(events_per_s / 10);
      wakeups += static_cast<std::uint64_t>(wakeups_per_s / 10);
      if (auto m = tuner.update(now, events, wakeups)) {
        last = m;
        ++changes_seen;
      }
    }
    return last;
  }
};

TEST(CqModerationTest, LowRateMeansNoModeration) {
  Feed f(ModerationOptions{});
  EXPECT_FALSE(f.run(1'000, 1'000, 10).has_value());
  EXPECT_EQ(f.tuner.current(), kOff);
  EXPECT_FALSE(f.tuner.current().moderated());
  EXPECT_NEAR(f.tuner.last_event_rate(), 1'000, 1);
  // Up to the enter threshold (target * 1.25) still none.
  EXPECT_FALSE(f.run(12'000, 12'000, 5).has_value());
  EXPECT_FALSE(f.run(0, 0, 5).has_value());
  EXPECT_EQ(f.tuner.changes(), 0u);
}

TEST(CqModerationTest, HighRateIsModeratedWithinBounds) {
  const ModerationOptions o;  // 10k interrupts/s, max 64 completions, max 50 us
  Feed f(o);
  auto m = f.run(1'000'000, 400'000);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(*m, (CqModeration{64, 50})) << "count 100 and period 99 us, both capped";
  EXPECT_EQ(f.tuner.current(), *m);
  EXPECT_FALSE(f.run(1'000'000, 1'000'000 / 64, 10).has_value()) << "steady rate: no further change";

  // Uncapped, the formula is libvma's: count = rate / target, period = 1/target - 1/rate.
  ModerationOptions wide = o;
  wide.max_count = 1000;
  wide.max_period_us = 1000;
  EXPECT_EQ(CqModerationTuner::compute(wide, 100'000, 100'000, kOff), (CqModeration{10, 90}));
  EXPECT_EQ(CqModerationTuner::compute(wide, 1'000'000, 100'000, kOff), (CqModeration{100, 99}));
  // Just above the threshold: at least 2 completions per event (1 would merge nothing).
  EXPECT_EQ(CqModerationTuner::compute(wide, 13'000, 13'000, kOff), (CqModeration{2, 23}));
  // max_count 1: moderation by period only.
  ModerationOptions period_only = o;
  period_only.max_count = 1;
  EXPECT_EQ(CqModerationTuner::compute(period_only, 1'000'000, 1'000'000, kOff), (CqModeration{1, 50}));
}

TEST(CqModerationTest, StepUpAndDown) {
  Feed f(ModerationOptions{});
  EXPECT_FALSE(f.run(2'000, 2'000, 3).has_value());
  auto up = f.run(200'000, 150'000);
  ASSERT_TRUE(up.has_value());
  EXPECT_EQ(*up, (CqModeration{20, 50}));
  // While moderated, wakeups fall to ~events/count; that must not read as "low load".
  EXPECT_FALSE(f.run(200'000, 200'000 / 20, 5).has_value());
  EXPECT_EQ(f.tuner.current(), (CqModeration{20, 50}));
  // Step to a higher rate: a larger count.
  auto higher = f.run(500'000, 500'000 / 20);
  ASSERT_TRUE(higher.has_value());
  EXPECT_EQ(*higher, (CqModeration{50, 50}));
  // Step down to a low rate: back to no moderation in one interval.
  auto down = f.run(3'000, 3'000 / 50);
  ASSERT_TRUE(down.has_value());
  EXPECT_EQ(*down, kOff);
  EXPECT_EQ(f.tuner.changes(), 3u);
  EXPECT_EQ(f.changes_seen, 3);
}

TEST(CqModerationTest, HysteresisAroundTheThresholdAndTheCount) {
  ModerationOptions o;
  o.max_period_us = 200;
  Feed f(o);
  ASSERT_TRUE(f.run(100'000, 100'000).has_value());
  EXPECT_EQ(f.tuner.current().count, 10);
  // +-20% around 100k: count would be 8..12, within 25% of 10: left alone.
  EXPECT_FALSE(f.run(120'000, 120'000 / 10).has_value());
  EXPECT_FALSE(f.run(80'000, 80'000 / 10).has_value());
  EXPECT_EQ(f.tuner.current().count, 10);
  // Rate falling to 9k: moderation stays on (the band is [7.5k, 12.5k]) ...
  auto near = f.run(9'000, 9'000 / 10);
  ASSERT_TRUE(near.has_value());
  EXPECT_TRUE(near->moderated());
  EXPECT_EQ(near->count, 2);
  // ... and goes off below 7.5k.
  auto off = f.run(7'000, 7'000 / 2);
  ASSERT_TRUE(off.has_value());
  EXPECT_EQ(*off, kOff);
  // Off, 11k does not turn it on again (needs > 12.5k).
  EXPECT_FALSE(f.run(11'000, 11'000).has_value());
}

TEST(CqModerationTest, NoModerationWhenThePollerAlreadyDrainsManyPerWakeup) {
  // 1M completions/s but only 5k wakeups/s: the interrupt rate is already below target, so
  // moderation would add latency and save nothing.
  Feed f(ModerationOptions{});
  EXPECT_FALSE(f.run(1'000'000, 5'000, 5).has_value());
  EXPECT_EQ(f.tuner.current(), kOff);
  EXPECT_EQ(CqModerationTuner::compute(ModerationOptions{}, 1'000'000, 5'000, kOff), kOff);
}

TEST(CqModerationTest, IntervalsCounterResetsAndUnsupportedDevices) {
  ModerationOptions o;
  CqModerationTuner t(o, 0);
  // Before an interval has passed: nothing, whatever the counts.
  EXPECT_FALSE(t.update(50 * kMs, 1'000'000, 1'000'000).has_value());
  // A full interval at 10M/s: moderated.
  EXPECT_TRUE(t.update(100 * kMs, 1'000'000, 1'000'000).has_value());
  // Counters that go backwards restart the interval instead of producing a huge rate.
  EXPECT_FALSE(t.update(150 * kMs, 10, 10).has_value());
  EXPECT_FALSE(t.update(200 * kMs, 20, 20).has_value()) << "the new interval started at 150 ms";
  auto off = t.update(250 * kMs, 30, 30);
  ASSERT_TRUE(off.has_value());
  EXPECT_EQ(*off, kOff);
  // restart() discards what moved while polling.
  t.restart(300 * kMs, 50'000'000, 50'000'000);
  EXPECT_FALSE(t.update(400 * kMs, 50'000'100, 50'000'100).has_value());
  // An interval longer than nominal uses its real length (100 events over 1 s: 100/s).
  EXPECT_FALSE(t.update(1'400 * kMs, 50'000'200, 50'000'200).has_value());
  EXPECT_NEAR(t.last_event_rate(), 100, 1e-6);
  // A device that refuses ibv_modify_cq: {1, 0} from then on, no more changes.
  ASSERT_TRUE(t.update(1'500 * kMs, 60'000'200, 60'000'200).has_value());
  t.set_unsupported();
  EXPECT_TRUE(t.unsupported());
  EXPECT_EQ(t.current(), kOff);
  EXPECT_FALSE(t.update(1'600 * kMs, 70'000'200, 70'000'200).has_value());
}

TEST(CqModerationTest, ValidateNamesTheKey) {
  EXPECT_TRUE(ModerationOptions{}.validate().ok());
  ModerationOptions o;
  o.target_interrupts_per_s = 0;
  EXPECT_NE(o.validate().message().find("rdma.moderation.target_interrupts_per_s"), std::string::npos);
  o = {};
  o.max_count = 0;
  EXPECT_NE(o.validate().message().find("rdma.moderation.max_count"), std::string::npos);
  o = {};
  o.hysteresis = 1.0;
  EXPECT_NE(o.validate().message().find("rdma.moderation.hysteresis"), std::string::npos);
  o = {};
  o.interval_ns = 0;
  EXPECT_NE(o.validate().message().find("rdma.moderation.interval_ns"), std::string::npos);
}

}  // namespace
}  // namespace pollux::transport::rdma
